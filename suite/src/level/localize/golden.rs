//! The localize level's golden (`<case>[.<dtype>].modules.safetensors`, written by `xtask/reference/modules.py`):
//! the reference's output of each module along the model's path at the last prompt position, in the order the
//! modules run, each with its own float32-vs-float64 noise. Read and checked here, tensor by tensor.
//!
//! Layout: `values.<k>` float32 `[n_k]` (k zero-padded to three digits), `noise` float64 `[M]`, `input_ids` int64
//! `[S]`; metadata `format` ([`FORMAT`]), `prompt`, and `entries`: a JSON list, one per k, of `[module, role]` (a
//! decoder's, at the last prompt position), `[module, role, "encoder"]` (an encoder-decoder's encoder module, kept at
//! the encoder `frames` the metadata lists, their rows one after another), or `[module, role, "vision" | "audio",
//! [rows]]` (a multimodal model's tower or projector, kept at those rows of its tensor).

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

/// Which model of the reference a module is in, so which of the package's graphs holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The text model: the package's decoder (and, for a multimodal package, its embedding session).
    Decoder,
    /// An encoder-decoder's encoder (Whisper's).
    Encoder,
    /// A multimodal model's vision tower and its projector: the package's vision encoder.
    Vision,
    /// A multimodal model's audio tower and its projector: the package's audio encoder.
    Audio,
}

impl Part {
    /// The name a golden's `entries` give it (none for the decoder's, which is the default).
    pub fn name(self) -> &'static str {
        match self {
            Part::Decoder => "decoder",
            Part::Encoder => "encoder",
            Part::Vision => "vision",
            Part::Audio => "audio",
        }
    }
}

/// One module's recorded tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The module's Hugging Face path (`model.layers.5.self_attn`).
    pub module: String,
    pub role: Role,
    pub part: Part,
    /// The rows of its tensor it is kept at, one after another (an encoder's frames, a tower's patches); `None`: the
    /// last prompt position.
    pub rows: Option<Vec<usize>>,
    /// The float32 reference's values there.
    pub values: Vec<f32>,
    /// max |float32 - float64| over them: the reference's own noise there.
    pub noise: f64,
}

/// The reference's module outputs for a case's first prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct ModuleGolden {
    pub entries: Vec<Entry>,
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
        let listed: Vec<Vec<serde_json::Value>> =
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
            let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
            let (module, role, part, rows) = match listed.as_slice() {
                [m, r] => (text(m), text(r), Some(Part::Decoder), None),
                [m, r, p] if p == "encoder" => (text(m), text(r), Some(Part::Encoder), Some(frames.clone())),
                [m, r, p, rows] => {
                    let part = [Part::Vision, Part::Audio].into_iter().find(|part| p == part.name());
                    (text(m), text(r), part, serde_json::from_value::<Vec<usize>>(rows.clone()).ok())
                }
                _ => (None, None, None, None),
            };
            let (Some(module), Some(role), Some(part)) = (module, role, part) else {
                bail!(
                    "{file}: metadata `entries[{k}]` is {}, expected [module, role], [module, role, \"encoder\"] or \
                     [module, role, \"vision\" | \"audio\", [rows]]",
                    serde_json::Value::Array(listed.clone())
                )
            };
            let role = role.as_str();
            let role = match role {
                "output" => Role::Output,
                "input" => Role::Input,
                other => bail!("{file}: metadata `entries[{k}]` has role {other:?}, expected \"output\" or \"input\""),
            };
            match &rows {
                Some(r) if r.is_empty() && part == Part::Encoder => {
                    bail!("{file}: `entries[{k}]` ({module}) is an encoder's, but the metadata states no `frames`")
                }
                Some(r) if r.is_empty() => bail!("{file}: `entries[{k}]` ({module}) is kept at no rows"),
                None if part != Part::Decoder => bail!("{file}: `entries[{k}]` ({module}): its rows are not a list of numbers"),
                _ => {}
            }
            if !(noise.is_finite() && noise >= 0.0) {
                bail!("{file}: `noise[{k}]` ({module}) is {noise}, expected a finite number >= 0");
            }
            let (_, v) = tensor(&format!("values.{k:03}"), safetensors::Dtype::F32)?;
            let values = v.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
            entries.push(Entry { module, role, part, rows, values, noise });
        }
        let prompt = field("prompt")?.clone();
        Ok(ModuleGolden { entries, input_ids, prompt })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A golden of two entries, a decoder's and `tower` (its JSON), each of two values.
    fn golden(tower: &str) -> Vec<u8> {
        let f32s: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let noise: Vec<u8> = [0.5f64, 0.25].iter().flat_map(|v| v.to_le_bytes()).collect();
        let ids: Vec<u8> = 7i64.to_le_bytes().to_vec();
        let view = |dtype, shape: Vec<usize>, data: &'static [u8]| safetensors::tensor::TensorView::new(dtype, shape, data).unwrap();
        let leak = |v: Vec<u8>| -> &'static [u8] { Box::leak(v.into_boxed_slice()) };
        let tensors = vec![
            ("values.000", view(safetensors::Dtype::F32, vec![2], leak(f32s.clone()))),
            ("values.001", view(safetensors::Dtype::F32, vec![2], leak(f32s))),
            ("noise", view(safetensors::Dtype::F64, vec![2], leak(noise))),
            ("input_ids", view(safetensors::Dtype::I64, vec![1], leak(ids))),
        ];
        let meta = [("format", FORMAT), ("prompt", "p"), ("entries", &format!("[[\"model.norm\", \"output\"], {tower}]"))];
        let meta = meta.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        safetensors::serialize(tensors, Some(meta)).unwrap()
    }

    #[test]
    fn a_tower_s_entry_is_kept_at_its_own_rows_and_bad_rows_are_named() {
        let g = ModuleGolden::parse("g", &golden(r#"["model.vision_tower.encoder.layers.0.mlp", "output", "vision", [3, 9]]"#)).unwrap();
        assert_eq!((g.entries[0].part, g.entries[0].rows.clone()), (Part::Decoder, None));
        assert_eq!((g.entries[1].part, g.entries[1].rows.clone()), (Part::Vision, Some(vec![3, 9])));
        for (bad, says) in [
            (r#"["m", "output", "vision", []]"#, "`entries[1]` (m) is kept at no rows"),
            (r#"["m", "output", "vision", "3"]"#, "`entries[1]` (m): its rows are not a list of numbers"),
            (r#"["m", "output", "retina", [3]]"#, "metadata `entries[1]` is [\"m\",\"output\",\"retina\",[3]]"),
            (r#"["m", "output", "encoder"]"#, "is an encoder's, but the metadata states no `frames`"),
        ] {
            let e = ModuleGolden::parse("g", &golden(bad)).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
