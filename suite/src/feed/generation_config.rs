//! A Hugging Face `generation_config.json`: the ids greedy decoding never chooses (`suppress_tokens` at every
//! step, `begin_suppress_tokens` at the first generated one), as `generate()` applies them. Whisper's lists are
//! what make its greedy stream the one the reference's `generate()` produces.

use std::path::Path;

use serde_json::Value;

use crate::error::{At, Error, Result, bail};
use crate::feed::package::kind;

/// The parts of `generation_config.json` the suite uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerationConfig {
    pub suppress_tokens: Vec<i64>,
    pub begin_suppress_tokens: Vec<i64>,
}

impl GenerationConfig {
    /// `dir/generation_config.json`, which must be there (`what` says who needs it, for the error).
    pub fn load(dir: &Path, what: &str) -> Result<GenerationConfig> {
        let path = dir.join("generation_config.json");
        if !path.is_file() {
            bail!("{what}: {} is missing; it holds the suppress_tokens and begin_suppress_tokens generate() applies", path.display());
        }
        crate::paths::regular_file(&path, "generation_config.json")?;
        let text = std::fs::read_to_string(&path).at(path.display())?;
        GenerationConfig::parse(&path.display().to_string(), &text)
    }

    /// Parses the lists strictly: absent or null is empty; anything but a list of token ids is an error naming the
    /// field. Fields the suite does not read are left alone.
    pub fn parse(file: &str, text: &str) -> Result<GenerationConfig> {
        let v: Value = serde_json::from_str(text).map_err(|e| Error::new(format!("{file}: {e}")))?;
        if !v.is_object() {
            bail!("{file}: expected a JSON object, found {}", kind(&v));
        }
        let ids = |field: &str| -> Result<Vec<i64>> {
            match &v[field] {
                Value::Null => Ok(Vec::new()),
                Value::Array(a) => a
                    .iter()
                    .map(|x| {
                        x.as_i64()
                            .filter(|&i| i >= 0)
                            .ok_or_else(|| Error::new(format!("{file}: field `{field}` holds {}, expected token ids", kind(x))))
                    })
                    .collect(),
                other => bail!("{file}: field `{field}` is {}, expected a list of token ids", kind(other)),
            }
        };
        Ok(GenerationConfig { suppress_tokens: ids("suppress_tokens")?, begin_suppress_tokens: ids("begin_suppress_tokens")? })
    }
}

/// The decoder prefix Whisper's `generate()` forces, from `dir/generation_config.json`: the start token, then for a
/// multilingual model the language and task tokens (which the caller must state: `generate()` would detect the
/// language otherwise, and the stream would be another one), then `<|notimestamps|>`.
pub fn whisper_prefix(dir: &Path, language: Option<&str>, task: Option<&str>) -> Result<Vec<i64>> {
    let path = dir.join("generation_config.json");
    let file = path.display().to_string();
    let text = std::fs::read_to_string(&path).at(&file)?;
    let v: Value = serde_json::from_str(&text).map_err(|e| Error::new(format!("{file}: {e}")))?;
    let id = |field: &str, x: &Value| {
        x.as_i64().ok_or_else(|| Error::new(format!("{file}: field `{field}` is {}, expected a token id", kind(x))))
    };
    let mut prefix = vec![id("decoder_start_token_id", &v["decoder_start_token_id"])?];
    if v["is_multilingual"].as_bool().unwrap_or(false) {
        let (Some(lang), Some(task)) = (language, task) else {
            bail!("{file}: a multilingual Whisper needs the case's language and task (else generate() detects them)");
        };
        let token = format!("<|{lang}|>");
        let l = v["lang_to_id"].get(&token).ok_or_else(|| Error::new(format!("{file}: field `lang_to_id` has no `{token}`")))?;
        prefix.push(id("lang_to_id", l)?);
        let t = v["task_to_id"].get(task).ok_or_else(|| Error::new(format!("{file}: field `task_to_id` has no `{task}`")))?;
        prefix.push(id("task_to_id", t)?);
    }
    if !v["no_timestamps_token_id"].is_null() {
        prefix.push(id("no_timestamps_token_id", &v["no_timestamps_token_id"])?);
    }
    Ok(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lists_parse_and_a_wrong_shape_names_its_field() {
        let c =
            GenerationConfig::parse("g.json", r#"{"suppress_tokens": [1, 2], "begin_suppress_tokens": null, "max_length": 448}"#).unwrap();
        assert_eq!(c, GenerationConfig { suppress_tokens: vec![1, 2], begin_suppress_tokens: vec![] });
        assert_eq!(GenerationConfig::parse("g.json", "{}").unwrap(), GenerationConfig::default());
        for (text, needle) in [
            (r#"{"suppress_tokens": 5}"#, "g.json: field `suppress_tokens` is a number, expected a list"),
            (r#"{"begin_suppress_tokens": [-1]}"#, "g.json: field `begin_suppress_tokens` holds a number, expected token ids"),
            (r#"{"suppress_tokens": ["a"]}"#, "field `suppress_tokens` holds a string"),
            ("[1]", "g.json: expected a JSON object"),
            ("{", "g.json: "),
        ] {
            let e = GenerationConfig::parse("g.json", text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn a_missing_file_says_who_needs_it() {
        let e = GenerationConfig::load(Path::new("/nonexistent-dir"), "L5 of cases/x.yaml").unwrap_err().to_string();
        assert!(e.contains("L5 of cases/x.yaml: /nonexistent-dir/generation_config.json is missing"), "{e}");
    }

    /// The prefixes `generate()` forces for tiny.en ([50257, 50362]) and for a multilingual base stating English
    /// transcription ([50258, 50259, 50359, 50363]), as the real tier's goldens hold them.
    #[test]
    fn whisper_prefixes_are_generates_and_a_multilingual_model_must_be_told_its_language() {
        let dir = std::env::temp_dir().join(format!("mobius-whisper-prefix-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |text: &str| std::fs::write(dir.join("generation_config.json"), text).unwrap();
        write(r#"{"decoder_start_token_id": 50257, "no_timestamps_token_id": 50362, "is_multilingual": false}"#);
        assert_eq!(whisper_prefix(&dir, None, None).unwrap(), vec![50257, 50362]);
        write(
            r#"{"decoder_start_token_id": 50258, "no_timestamps_token_id": 50363, "is_multilingual": true,
                "lang_to_id": {"<|en|>": 50259, "<|de|>": 50261}, "task_to_id": {"transcribe": 50359, "translate": 50358}}"#,
        );
        assert_eq!(whisper_prefix(&dir, Some("en"), Some("transcribe")).unwrap(), vec![50258, 50259, 50359, 50363]);
        assert_eq!(whisper_prefix(&dir, Some("de"), Some("translate")).unwrap(), vec![50258, 50261, 50358, 50363]);
        let e = whisper_prefix(&dir, None, None).unwrap_err().to_string();
        assert!(e.contains("a multilingual Whisper needs the case's language and task"), "{e}");
        let e = whisper_prefix(&dir, Some("xx"), Some("transcribe")).unwrap_err().to_string();
        assert!(e.contains("field `lang_to_id` has no `<|xx|>`"), "{e}");
        write(r#"{"decoder_start_token_id": "start"}"#);
        let e = whisper_prefix(&dir, None, None).unwrap_err().to_string();
        assert!(e.contains("field `decoder_start_token_id` is a string, expected a token id"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
