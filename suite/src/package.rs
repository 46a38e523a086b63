//! An ONNX Runtime GenAI package directory, read from its `genai_config.json`.

use std::path::Path;

use serde_json::Value;

use crate::error::{At, Error, Result};

/// The parts of `genai_config.json` the suite uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenaiConfig {
    pub decoder_file: Option<String>,
    pub eos_token_ids: Vec<i64>,
    pub vocab_size: Option<i64>,
}

impl GenaiConfig {
    pub fn load(package: &Path) -> Result<GenaiConfig> {
        let path = package.join("genai_config.json");
        let text = std::fs::read_to_string(&path).at(path.display())?;
        let v: Value = serde_json::from_str(&text).map_err(|e| Error::new(format!("{}: {e}", path.display())))?;
        let model = &v["model"];
        let eos_token_ids = match &model["eos_token_id"] {
            Value::Number(n) => n.as_i64().into_iter().collect(),
            Value::Array(a) => a.iter().filter_map(Value::as_i64).collect(),
            _ => Vec::new(),
        };
        Ok(GenaiConfig {
            decoder_file: model["decoder"]["filename"].as_str().map(str::to_string),
            eos_token_ids,
            vocab_size: model["vocab_size"].as_i64(),
        })
    }
}
