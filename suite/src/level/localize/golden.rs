//! The localize level's golden (`<case>[.<dtype>].modules.safetensors`, written by `xtask/reference/modules.py`):
//! the reference's output of each module along the model's path at the last prompt position, in the order the
//! modules run, each with its own float32-vs-float64 noise. Read and checked here, tensor by tensor.
//!
//! Layout: `values.<k>` float32 `[n_k]` (k zero-padded to three digits), `noise` float64 `[M]`, `input_ids` int64
//! `[S]`; metadata `format` ([`FORMAT`]), `prompt`, and `entries`: a JSON list, one per k, of `[module, role]` (a
//! decoder's, at the last prompt position), `[module, role, "encoder"]` (an encoder-decoder's encoder module, kept at
//! the encoder `frames` the metadata lists, their rows one after another), or `[module, role, "vision" | "audio",
//! [rows]]` (a multimodal model's tower or projector, kept at those rows of its tensor).
//!
//! A half-precision variant's golden (`<case>[.<modality>].f16.modules.safetensors`, `.bf16.`) is the reference with
//! its weights rounded to that dtype (`modules.py`'s `round_to`), so that it differs from the package by the package's
//! half-precision arithmetic alone. It is stored as its difference from the float32 golden beside it ([`DELTA_FORMAT`],
//! a quarter of the size, which keeps a real case within 1 MiB): `delta.<k>` int8 `[n_k]`, `step` float64 `[M]` (one
//! delta unit of entry k: its largest |difference| over 127), `noise` float64 `[M]` (the rounded reference's own
//! float32-vs-float64 noise), `input_ids`; metadata `format`, `prompt`, `weights_rounded_to`, `base` (the float32
//! golden's file name, in the same folder) and `base_sha256` (its bytes when the difference was taken: a base made
//! again since is stale, and said so). Entry k's values are the base's plus `delta x step`, off by at most half a
//! step (its `storage`, which the verdict adds to the noise floor).

use std::path::Path;

use crate::error::{At, Error, Result, bail};

/// The golden's format, as `modules.py` writes it (`MODULES_FORMAT`).
pub const FORMAT: &str = "modules-raw-v1";

/// A half-precision golden's format: its difference from the float32 golden beside it.
pub const DELTA_FORMAT: &str = "modules-delta-v1";

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
    /// How far the golden's storage may have moved them (a half-precision golden's half step; 0 for float32 values
    /// stored whole): added to the noise floor as it is, not scaled by the dtype as the reference's noise is.
    pub storage: f64,
}

/// The reference's module outputs for a case's first prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct ModuleGolden {
    pub entries: Vec<Entry>,
    pub input_ids: Vec<i64>,
    pub prompt: String,
}

impl ModuleGolden {
    /// The golden at `path`, a half-precision one read over the float32 golden it names beside it.
    pub fn load(path: &Path) -> Result<ModuleGolden> {
        let file = path.display().to_string();
        let bytes = std::fs::read(path).at(&file)?;
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).at(&file)?;
        if meta.metadata().as_ref().and_then(|m| m.get("format")).map(String::as_str) != Some(DELTA_FORMAT) {
            return ModuleGolden::parse(&file, &bytes);
        }
        let meta = crate::judge::golden::safetensors_metadata(&file, &bytes, DELTA_FORMAT)?;
        let base = meta.get("base").ok_or_else(|| Error::new(format!("{file}: metadata field `base` is missing")))?;
        if base.is_empty() || base.contains(['/', '\\']) || base.starts_with('.') {
            bail!("{file}: metadata `base` is {base:?}, expected the file name of the float32 golden beside it");
        }
        let base_path = path.with_file_name(base);
        let base_file = base_path.display().to_string();
        let base_bytes = std::fs::read(&base_path).at(&base_file)?;
        ModuleGolden::parse_delta(&file, &bytes, &ModuleGolden::parse(&base_file, &base_bytes)?, &base_bytes)
    }

    /// The bytes of `self` (a half-precision reference's golden) stored over `base` (the float32 golden, whose file
    /// `base_name` holds `base_bytes`), in [`DELTA_FORMAT`].
    pub fn delta_bytes(&self, base: &ModuleGolden, base_name: &str, base_bytes: &[u8], rounded_to: &str) -> Result<Vec<u8>> {
        if self.input_ids != base.input_ids || self.entries.len() != base.entries.len() {
            bail!("the {rounded_to} reference recorded another prompt or another number of modules than the float32 golden {base_name}");
        }
        let mut tensors: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
        let (mut step, mut noise) = (Vec::new(), Vec::new());
        for (k, (e, b)) in self.entries.iter().zip(&base.entries).enumerate() {
            if (&e.module, e.role, e.part, &e.rows, e.values.len()) != (&b.module, b.role, b.part, &b.rows, b.values.len()) {
                bail!(
                    "entry {k}: the {rounded_to} reference recorded {} ({}) where the float32 golden {base_name} has {} ({})",
                    e.module,
                    e.role.name(),
                    b.module,
                    b.role.name()
                );
            }
            let diff: Vec<f64> = e.values.iter().zip(&b.values).map(|(&h, &f)| h as f64 - f as f64).collect();
            if diff.iter().any(|d| !d.is_finite()) {
                bail!("entry {k} ({}): the {rounded_to} reference or the float32 golden {base_name} is not finite there", e.module);
            }
            let s = diff.iter().fold(0f64, |m, d| m.max(d.abs())) / 127.0;
            let q: Vec<u8> = diff.iter().map(|d| if s == 0.0 { 0 } else { (d / s).round().clamp(-127.0, 127.0) as i8 as u8 }).collect();
            tensors.push((format!("delta.{k:03}"), safetensors::Dtype::I8, vec![q.len()], q));
            step.push(s);
            noise.push(e.noise);
        }
        let f64s = |v: &[f64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        tensors.push(("step".into(), safetensors::Dtype::F64, vec![step.len()], f64s(&step)));
        tensors.push(("noise".into(), safetensors::Dtype::F64, vec![noise.len()], f64s(&noise)));
        let ids: Vec<u8> = self.input_ids.iter().flat_map(|x| x.to_le_bytes()).collect();
        tensors.push(("input_ids".into(), safetensors::Dtype::I64, vec![self.input_ids.len()], ids));
        let views = tensors
            .iter()
            .map(|(n, d, shape, data)| safetensors::tensor::TensorView::new(*d, shape.clone(), data).map(|v| (n.clone(), v)))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::new(format!("{base_name}: {e}")))?;
        let meta = [
            ("format", DELTA_FORMAT),
            ("prompt", &self.prompt),
            ("weights_rounded_to", rounded_to),
            ("base", base_name),
            ("base_sha256", &crate::digest::sha256_hex(base_bytes)),
        ];
        let meta = meta.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        safetensors::serialize(views, Some(meta)).map_err(|e| Error::new(format!("{base_name}: {e}")))
    }

    /// `bytes` (a [`DELTA_FORMAT`] golden; `file` names it) read over `base`, whose file holds `base_bytes`.
    pub fn parse_delta(file: &str, bytes: &[u8], base: &ModuleGolden, base_bytes: &[u8]) -> Result<ModuleGolden> {
        let meta = crate::judge::golden::safetensors_metadata(file, bytes, DELTA_FORMAT)?;
        let field = |name: &str| meta.get(name).ok_or_else(|| Error::new(format!("{file}: metadata field `{name}` is missing")));
        let (base_name, made) = (field("base")?, field("base_sha256")?);
        let now = crate::digest::sha256_hex(base_bytes);
        if *made != now {
            bail!(
                "{file} is stored as its difference from {base_name} as it was (sha256 {made}), but {base_name} is now {now}: \
                 the float32 golden was made again since; make this one again too (cargo xtask regen-goldens --level localize)"
            );
        }
        let st = safetensors::SafeTensors::deserialize(bytes).at(file)?;
        let tensor = |name: &str, dtype: safetensors::Dtype, len: Option<usize>| -> Result<&[u8]> {
            let t = st.tensor(name).at(format!("{file}: tensor `{name}`"))?;
            if t.dtype() != dtype || t.shape().len() != 1 || len.is_some_and(|n| t.shape()[0] != n) {
                bail!(
                    "{file}: tensor `{name}` is {:?} {:?}, expected {dtype:?} [{}]",
                    t.dtype(),
                    t.shape(),
                    len.map_or("n".into(), |n| n.to_string())
                );
            }
            Ok(t.data())
        };
        let m = base.entries.len();
        let f64s = |d: &[u8]| d.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect::<Vec<f64>>();
        let (step, noise) =
            (f64s(tensor("step", safetensors::Dtype::F64, Some(m))?), f64s(tensor("noise", safetensors::Dtype::F64, Some(m))?));
        let input_ids: Vec<i64> = tensor("input_ids", safetensors::Dtype::I64, None)?
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        if input_ids != base.input_ids {
            bail!("{file}: its `input_ids` are not those of {base_name}");
        }
        let mut entries = Vec::with_capacity(m);
        for (k, b) in base.entries.iter().enumerate() {
            let (s, n) = (step[k], noise[k]);
            if !(s.is_finite() && s >= 0.0 && n.is_finite() && n >= 0.0) {
                bail!("{file}: `step[{k}]` or `noise[{k}]` ({}) is {s} or {n}, expected finite numbers >= 0", b.module);
            }
            let delta = tensor(&format!("delta.{k:03}"), safetensors::Dtype::I8, Some(b.values.len()))?;
            let values = b.values.iter().zip(delta).map(|(&f, &d)| (f as f64 + (d as i8) as f64 * s) as f32).collect();
            entries.push(Entry { values, noise: n, storage: s / 2.0, ..b.clone() });
        }
        Ok(ModuleGolden { entries, input_ids, prompt: field("prompt")?.clone() })
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
            entries.push(Entry { module, role, part, rows, values, noise, storage: 0.0 });
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
    fn a_half_precision_golden_is_read_back_over_its_base_within_half_a_step_and_a_changed_base_is_stale() {
        let base_bytes = golden(r#"["model.layers.0.mlp", "output"]"#);
        let base = ModuleGolden::parse("base", &base_bytes).unwrap();
        let mut half = base.clone();
        half.entries[0].values = vec![1.0 + 3e-4, 2.0 - 1e-4];
        half.entries[0].noise = 1e-7;
        let bytes = half.delta_bytes(&base, "b.modules.safetensors", &base_bytes, "float16").unwrap();
        let back = ModuleGolden::parse_delta("h", &bytes, &base, &base_bytes).unwrap();
        let step = 3e-4 / 127.0;
        for (got, want) in back.entries.iter().zip(&half.entries) {
            assert_eq!((&got.module, got.role, got.part, &got.rows), (&want.module, want.role, want.part, &want.rows));
            for (g, w) in got.values.iter().zip(&want.values) {
                assert!(((g - w) as f64).abs() <= step / 2.0 + 1e-7, "{g} vs {w}");
            }
        }
        assert_eq!(back.entries[0].noise, 1e-7, "its own noise");
        assert!((back.entries[0].storage - step / 2.0).abs() < 1e-9, "and half a step for its storage");
        assert_eq!(back.entries[1].values, base.entries[1].values, "an entry equal to its base is stored as nothing");
        let mut other = base_bytes.clone();
        let n = other.len();
        other[n - 1] ^= 1;
        let e = ModuleGolden::parse_delta("h", &bytes, &base, &other).unwrap_err().to_string();
        assert!(e.contains("the float32 golden was made again since"), "{e}");
        // Another module than the base's is refused when it is made.
        let mut wrong = half.clone();
        wrong.entries[1].module = "model.layers.1.mlp".into();
        let e = wrong.delta_bytes(&base, "b", &base_bytes, "float16").unwrap_err().to_string();
        assert!(e.contains("recorded model.layers.1.mlp (output) where the float32 golden b has"), "{e}");
    }

    #[test]
    fn a_half_precision_golden_loads_from_its_file_over_the_base_beside_it() {
        let dir = std::env::temp_dir().join(format!("mc-delta-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let base_bytes = golden(r#"["model.norm", "input"]"#);
        let base = ModuleGolden::parse("base", &base_bytes).unwrap();
        std::fs::write(dir.join("c.modules.safetensors"), &base_bytes).unwrap();
        let bytes = base.delta_bytes(&base, "c.modules.safetensors", &base_bytes, "bfloat16").unwrap();
        std::fs::write(dir.join("c.bf16.modules.safetensors"), &bytes).unwrap();
        let got = ModuleGolden::load(&dir.join("c.bf16.modules.safetensors")).unwrap();
        assert_eq!(got.entries.iter().map(|e| &e.values).collect::<Vec<_>>(), base.entries.iter().map(|e| &e.values).collect::<Vec<_>>());
        let escaping = base.delta_bytes(&base, "../c.modules.safetensors", &base_bytes, "bfloat16").unwrap();
        std::fs::write(dir.join("d.bf16.modules.safetensors"), &escaping).unwrap();
        let e = ModuleGolden::load(&dir.join("d.bf16.modules.safetensors")).unwrap_err().to_string();
        assert!(e.contains("expected the file name of the float32 golden beside it"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
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
