//! An ONNX Runtime GenAI package directory, read from its `genai_config.json`: which sessions exist (decoder,
//! embedding, vision, speech), their files and their I/O names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{At, Error, Result, bail};

/// One session of a multi-model package, with the names genai_config maps its roles to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Component {
    pub file: String,
    pub inputs: BTreeMap<String, String>,
    pub outputs: BTreeMap<String, String>,
    /// `session_options.custom_ops_library`: a library of custom operators its sessions register, a path inside the
    /// package (onnxruntime-genai resolves it against the package and refuses one outside).
    pub custom_ops_library: Option<String>,
}

impl Component {
    /// `model.<key>` of a genai_config.json: absent, or a session with a `filename` inside the package.
    fn parse(model: &Value, key: &str, file: &str) -> Result<Option<Component>> {
        let v = &model[key];
        if v.is_null() {
            return Ok(None);
        }
        let Some(obj) = v.as_object() else { bail!("{file}: field `model.{key}` is {}, expected an object", kind(v)) };
        let names = |k: &str| -> Result<BTreeMap<String, String>> {
            match obj.get(k) {
                None | Some(Value::Null) => Ok(BTreeMap::new()),
                Some(Value::Object(m)) => m
                    .iter()
                    .map(|(r, n)| match n.as_str() {
                        Some(n) => Ok((r.clone(), n.to_string())),
                        None => bail!("{file}: field `model.{key}.{k}.{r}` is {}, expected a tensor name", kind(n)),
                    })
                    .collect(),
                Some(other) => bail!("{file}: field `model.{key}.{k}` is {}, expected an object", kind(other)),
            }
        };
        let filename = match obj.get("filename") {
            Some(Value::String(f)) => f.clone(),
            None => bail!("{file}: field `model.{key}.filename` is missing"),
            Some(other) => bail!("{file}: field `model.{key}.filename` is {}, expected a file name", kind(other)),
        };
        // ONNX Runtime GenAI opens these relative to the package: a name that leaves it would run another package's
        // model (or any file on the machine) under this one's name.
        if filename.trim().is_empty() || !crate::paths::stays_inside(&filename) {
            bail!("{file}: field `model.{key}.filename` is {filename:?}; expected a path inside the package folder");
        }
        let custom_ops_library = match obj.get("session_options").and_then(|o| o.get("custom_ops_library")) {
            None | Some(Value::Null) => None,
            Some(Value::String(l)) if !l.trim().is_empty() && crate::paths::stays_inside(l) => Some(l.clone()),
            Some(Value::String(l)) => {
                bail!("{file}: field `model.{key}.session_options.custom_ops_library` is {l:?}; expected a path inside the package folder")
            }
            Some(other) => {
                bail!("{file}: field `model.{key}.session_options.custom_ops_library` is {}, expected a file name", kind(other))
            }
        };
        Ok(Some(Component { file: filename, inputs: names("inputs")?, outputs: names("outputs")?, custom_ops_library }))
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
    /// `model.decoder`: its file and the names it maps its roles to (`input_ids` -> `decoder_input_ids`, ...).
    pub decoder: Option<Component>,
    /// `model.encoder`: an encoder-decoder's encoder (Whisper's, from log-mel `input_features`).
    pub encoder: Option<Component>,
    /// `model.type`, as genai reads it (`whisper`, `gemma3_text`, ...; mobius writes `unknown` for some).
    pub model_type: Option<String>,
    pub eos_token_ids: Vec<i64>,
    pub embedding: Option<Component>,
    pub vision: Option<Component>,
    pub speech: Option<Component>,
    /// `search.past_present_share_buffer`: the decoder's KV cache may be one preallocated buffer per layer, read
    /// as `past_*` and written in place as `present_*` (GroupQueryAttention builds).
    pub share_buffer: bool,
    /// `model.vocab_size`: the entries the decoder's logits must have per position.
    pub vocab_size: Option<usize>,
}

impl GenaiConfig {
    pub fn load(package: &Path) -> Result<GenaiConfig> {
        let path = package.join("genai_config.json");
        crate::paths::regular_file(&path, "genai_config.json")?;
        let text = std::fs::read_to_string(&path).at(path.display())?;
        GenaiConfig::parse(&path.display().to_string(), &text)
    }

    /// The package's config when it has one (a bare `model.onnx` folder has none); one that is there must parse.
    pub fn load_if_present(package: &Path) -> Result<Option<GenaiConfig>> {
        let path = package.join("genai_config.json");
        if !path.exists() {
            return Ok(None);
        }
        GenaiConfig::load(package).map(Some)
    }

    /// Parses a config's text strictly where the suite reads it: a field that is there with the wrong shape is an
    /// error naming it (fields the suite does not read are left to ONNX Runtime GenAI).
    pub fn parse(file: &str, text: &str) -> Result<GenaiConfig> {
        let v: Value = serde_json::from_str(text).map_err(|e| Error::new(format!("{file}: {e}")))?;
        if !v.is_object() {
            bail!("{file}: expected a JSON object, found {}", kind(&v));
        }
        let model = &v["model"];
        if !model.is_object() {
            bail!("{file}: field `model` is {}, expected an object", kind(model));
        }
        let eos_token_ids = match &model["eos_token_id"] {
            Value::Null => Vec::new(),
            Value::Number(n) => vec![n.as_i64().filter(|&i| i >= 0).ok_or_else(|| bad_id(file, &model["eos_token_id"]))?],
            Value::Array(a) => a.iter().map(|x| x.as_i64().filter(|&i| i >= 0).ok_or_else(|| bad_id(file, x))).collect::<Result<_>>()?,
            other => return Err(bad_id(file, other)),
        };
        let share_buffer = match &v["search"]["past_present_share_buffer"] {
            Value::Null => false,
            Value::Bool(b) => *b,
            other => bail!("{file}: field `search.past_present_share_buffer` is {}, expected true or false", kind(other)),
        };
        let vocab_size =
            match &model["vocab_size"] {
                Value::Null => None,
                v => Some(v.as_u64().filter(|&n| n > 0).and_then(|n| usize::try_from(n).ok()).ok_or_else(|| {
                    Error::new(format!("{file}: field `model.vocab_size` is {}, expected a positive whole number", kind(v)))
                })?),
            };
        let decoder = Component::parse(model, "decoder", file)?;
        let model_type = match &model["type"] {
            Value::Null => None,
            Value::String(t) => Some(t.clone()),
            other => bail!("{file}: field `model.type` is {}, expected a string", kind(other)),
        };
        Ok(GenaiConfig {
            vocab_size,
            decoder_file: decoder.as_ref().map(|d| d.file.clone()),
            decoder,
            encoder: Component::parse(model, "encoder", file)?,
            model_type,
            eos_token_ids,
            embedding: Component::parse(model, "embedding", file)?,
            vision: Component::parse(model, "vision", file)?,
            speech: Component::parse(model, "speech", file)?,
            share_buffer,
        })
    }

    /// The session component whose model file is `file` (relative to the package).
    pub fn component_of(&self, file: &str) -> Option<&Component> {
        [&self.decoder, &self.encoder, &self.embedding, &self.vision, &self.speech].into_iter().flatten().find(|c| c.file == file)
    }

    /// Every model file the config names (decoder first), relative to the package.
    pub fn files(&self) -> Vec<&str> {
        let parts = [&self.encoder, &self.embedding, &self.vision, &self.speech];
        self.decoder_file.iter().map(String::as_str).chain(parts.into_iter().flatten().map(|c| c.file.as_str())).collect()
    }
}

fn bad_id(file: &str, v: &Value) -> Error {
    Error::new(format!("{file}: field `model.eos_token_id` holds {}, expected a token id or a list of them", kind(v)))
}

/// What a JSON value is, for messages (never its content: the file may not be ours to echo).
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The decoder model file of a package directory (via genai_config.json), or the file itself.
pub fn package_model(package: &Path) -> Result<PathBuf> {
    if package.is_file() {
        return Ok(package.to_path_buf());
    }
    if !package.is_dir() {
        return Err(Error::new(format!("{} does not exist", package.display())));
    }
    let file =
        crate::feed::package::GenaiConfig::load_if_present(package)?.and_then(|c| c.decoder_file).unwrap_or_else(|| "model.onnx".into());
    let model = package.join(&file);
    if !model.is_file() {
        return Err(Error::new(format!("{}: decoder model `{file}` not found", package.display())));
    }
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(session_options: &str) -> Result<GenaiConfig> {
        let text = format!(r#"{{"model": {{"decoder": {{"filename": "model.onnx", "session_options": {session_options}}}}}}}"#);
        GenaiConfig::parse("pkg/genai_config.json", &text)
    }

    #[test]
    fn a_custom_op_library_is_a_path_inside_the_package() {
        let c = config(r#"{"custom_ops_library": "lib/libops.so"}"#).unwrap();
        assert_eq!(c.component_of("model.onnx").and_then(|d| d.custom_ops_library.as_deref()), Some("lib/libops.so"));
        assert_eq!(config("{}").unwrap().component_of("model.onnx").unwrap().custom_ops_library, None);
        for (value, says) in [
            (r#""../other/libops.so""#, "expected a path inside the package folder"),
            (r#""/usr/lib/libops.so""#, "expected a path inside the package folder"),
            ("3", "is a number, expected a file name"),
        ] {
            let e = config(&format!(r#"{{"custom_ops_library": {value}}}"#)).unwrap_err().to_string();
            assert!(
                e.contains("pkg/genai_config.json: field `model.decoder.session_options.custom_ops_library`") && e.contains(says),
                "{e}"
            );
        }
    }
}
