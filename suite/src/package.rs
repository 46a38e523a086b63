//! An ONNX Runtime GenAI package directory, read from its `genai_config.json`: which sessions exist (decoder,
//! embedding, vision, speech), their files and their I/O names.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::error::{At, Error, Result};

/// One session of a multi-model package, with the names genai_config maps its roles to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Component {
    pub file: String,
    pub inputs: BTreeMap<String, String>,
    pub outputs: BTreeMap<String, String>,
}

impl Component {
    fn parse(v: &Value) -> Option<Component> {
        let names = |k: &str| -> BTreeMap<String, String> {
            v[k].as_object().map(|m| m.iter().filter_map(|(r, n)| Some((r.clone(), n.as_str()?.to_string()))).collect()).unwrap_or_default()
        };
        Some(Component { file: v["filename"].as_str()?.to_string(), inputs: names("inputs"), outputs: names("outputs") })
    }

    /// The tensor name for a role (`pixel_values`, `audio_embeds`, ...); the role itself when the config maps none.
    pub fn input<'a>(&'a self, role: &'a str) -> &'a str {
        self.inputs.get(role).map_or(role, String::as_str)
    }

    pub fn output<'a>(&'a self, role: &'a str) -> &'a str {
        self.outputs.get(role).map_or(role, String::as_str)
    }
}

/// The parts of `genai_config.json` the suite uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenaiConfig {
    pub decoder_file: Option<String>,
    pub eos_token_ids: Vec<i64>,
    pub embedding: Option<Component>,
    pub vision: Option<Component>,
    pub speech: Option<Component>,
    /// `search.past_present_share_buffer`: the decoder's KV cache may be one preallocated buffer per layer, read
    /// as `past_*` and written in place as `present_*` (GroupQueryAttention builds).
    pub share_buffer: bool,
}

impl GenaiConfig {
    pub fn load(package: &Path) -> Result<GenaiConfig> {
        let path = package.join("genai_config.json");
        let text = std::fs::read_to_string(&path).at(path.display())?;
        GenaiConfig::parse(&path.display().to_string(), &text)
    }

    pub fn parse(file: &str, text: &str) -> Result<GenaiConfig> {
        let v: Value = serde_json::from_str(text).map_err(|e| Error::new(format!("{file}: {e}")))?;
        let model = &v["model"];
        let eos_token_ids = match &model["eos_token_id"] {
            Value::Number(n) => n.as_i64().into_iter().collect(),
            Value::Array(a) => a.iter().filter_map(Value::as_i64).collect(),
            _ => Vec::new(),
        };
        Ok(GenaiConfig {
            decoder_file: model["decoder"]["filename"].as_str().map(str::to_string),
            eos_token_ids,
            embedding: Component::parse(&model["embedding"]),
            vision: Component::parse(&model["vision"]),
            speech: Component::parse(&model["speech"]),
            share_buffer: v["search"]["past_present_share_buffer"].as_bool().unwrap_or(false),
        })
    }
}
