//! The localize level's golden (`<case>[.<dtype>].modules.safetensors`, written by `xtask/reference/modules.py`):
//! the reference's output of each module along the model's path at the last prompt position, in the order the
//! modules run, each with its own float32-vs-float64 noise. Read and checked here, tensor by tensor.
//!
//! Layout: `values.<k>` float32 `[n_k]` (k zero-padded to three digits), `noise` float64 `[M]`, `input_ids` int64
//! `[S]`; metadata `format` ([`FORMAT`]), `prompt`, and `entries`: a JSON list of `[module, role]`, one per k
//! (`[module, role, "encoder"]` for an encoder-decoder's encoder module, kept at the encoder `frames` the metadata
//! lists, their rows one after another).

use std::path::Path;

use crate::error::{At, Error, Result, bail};

/// The golden's format, as `modules.py` writes it (`MODULES_FORMAT`).
pub const FORMAT: &str = "modules-raw-v1";

/// Which side of a module a recorded tensor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// What the module returns (an attention block: before its residual add).
    Output,
    /// What a norm reads: the residual stream where it is not the output recorded just before.
    Input,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Output => "output",
            Role::Input => "input",
        }
    }
}

/// Which model of the package a module is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The decoder: at the last prompt position.
    Decoder,
    /// An encoder-decoder's encoder (Whisper's): at the golden's `frames`, their rows one after another.
    Encoder,
}

/// One module's recorded tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The module's Hugging Face path (`model.layers.5.self_attn`).
    pub module: String,
    pub role: Role,
    pub part: Part,
    /// The float32 reference's values at the last prompt position (an encoder's: at the golden's frames).
    pub values: Vec<f32>,
    /// max |float32 - float64| over them: the reference's own noise there.
    pub noise: f64,
}

/// The reference's module outputs for a case's first prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct ModuleGolden {
    pub entries: Vec<Entry>,
    /// The encoder frames its modules are kept at (none without an encoder).
    pub frames: Vec<usize>,
    pub input_ids: Vec<i64>,
    pub prompt: String,
}

impl ModuleGolden {
    pub fn load(path: &Path) -> Result<ModuleGolden> {
        let file = path.display().to_string();
        ModuleGolden::parse(&file, &std::fs::read(path).at(&file)?)
    }

    /// `bytes` as a golden; `file` names it in errors.
    pub fn parse(file: &str, bytes: &[u8]) -> Result<ModuleGolden> {
        let meta = crate::judge::golden::safetensors_metadata(file, bytes, FORMAT)?;
        let field = |name: &str| meta.get(name).ok_or_else(|| Error::new(format!("{file}: metadata field `{name}` is missing")));
        let listed: Vec<Vec<String>> =
            serde_json::from_str(field("entries")?).map_err(|e| Error::new(format!("{file}: metadata field `entries`: {e}")))?;
        let frames: Vec<usize> = match meta.get("frames") {
            Some(f) => serde_json::from_str(f).map_err(|e| Error::new(format!("{file}: metadata field `frames`: {e}")))?,
            None => Vec::new(),
        };
        let st = safetensors::SafeTensors::deserialize(bytes).at(file)?;
        let tensor = |name: &str, dtype: safetensors::Dtype| -> Result<(Vec<usize>, &[u8])> {
            let t = st.tensor(name).at(format!("{file}: tensor `{name}`"))?;
            if t.dtype() != dtype {
                bail!("{file}: tensor `{name}` is {:?}, expected {dtype:?}", t.dtype());
            }
            if t.shape().len() != 1 {
                bail!("{file}: tensor `{name}` has shape {:?}, expected one dimension", t.shape());
            }
            Ok((t.shape().to_vec(), t.data()))
        };
        let (shape, noise) = tensor("noise", safetensors::Dtype::F64)?;
        if shape[0] != listed.len() {
            bail!("{file}: tensor `noise` has {} values for {} entries", shape[0], listed.len());
        }
        let noise: Vec<f64> = noise.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
        let (_, ids) = tensor("input_ids", safetensors::Dtype::I64)?;
        let input_ids = ids.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
        let mut entries = Vec::with_capacity(listed.len());
        for (k, (listed, noise)) in listed.into_iter().zip(noise).enumerate() {
            let (module, role, part) = match listed.as_slice() {
                [m, r] => (m.clone(), r.as_str(), Part::Decoder),
                [m, r, p] if p == "encoder" => (m.clone(), r.as_str(), Part::Encoder),
                other => bail!("{file}: metadata `entries[{k}]` is {other:?}, expected [module, role] or [module, role, \"encoder\"]"),
            };
            let role = match role {
                "output" => Role::Output,
                "input" => Role::Input,
                other => bail!("{file}: metadata `entries[{k}]` has role {other:?}, expected \"output\" or \"input\""),
            };
            if part == Part::Encoder && frames.is_empty() {
                bail!("{file}: `entries[{k}]` ({module}) is an encoder's, but the metadata states no `frames`");
            }
            if !(noise.is_finite() && noise >= 0.0) {
                bail!("{file}: `noise[{k}]` ({module}) is {noise}, expected a finite number >= 0");
            }
            let (_, v) = tensor(&format!("values.{k:03}"), safetensors::Dtype::F32)?;
            let values = v.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
            entries.push(Entry { module, role, part, values, noise });
        }
        let prompt = field("prompt")?.clone();
        Ok(ModuleGolden { entries, frames, input_ids, prompt })
    }
}
