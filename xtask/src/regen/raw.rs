//! The reference's raw outputs for a case's stream, as goldens.py writes them (safetensors: tensors and string
//! metadata), read back for the case goldens.

use std::collections::HashMap;
use std::path::Path;

use mobius_conformance::judge::golden::{Hex, PositionTop};

use super::ledger::check_format;

/// The format of the raw outputs this xtask reads (goldens.py writes `common.RAW_FORMAT` into their metadata).
pub const RAW_FORMAT: &str = "golden-raw-v1";

/// One tensor of the reference's raw outputs.
pub struct RawTensor {
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
    pub dtype: safetensors::Dtype,
}

/// The reference's raw outputs (written by goldens.py): tensors and string metadata.
pub struct RawRun {
    pub tensors: HashMap<String, RawTensor>,
    pub meta: HashMap<String, String>,
}

pub fn read_raw(path: &Path) -> Result<RawRun, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let meta = meta.metadata().clone().unwrap_or_default();
    check_format(path, meta.get("format").map(String::as_str), RAW_FORMAT, "xtask/reference/goldens.py")?;
    let tensors = st
        .names()
        .into_iter()
        .map(|n| {
            let t = st.tensor(n).expect("listed tensor");
            (n.to_string(), RawTensor { shape: t.shape().to_vec(), data: t.data().to_vec(), dtype: t.dtype() })
        })
        .collect();
    Ok(RawRun { tensors, meta })
}

/// A raw output's tensor `name` (shape and bytes), which must be there with `dtype`; errors name the file.
pub fn raw_tensor<'a>(
    raw: &Path,
    tensors: &'a HashMap<String, RawTensor>,
    name: &str,
    dtype: safetensors::Dtype,
) -> Result<(&'a [usize], &'a [u8]), String> {
    let t = tensors.get(name).ok_or_else(|| format!("{}: tensor `{name}` missing", raw.display()))?;
    if t.dtype != dtype {
        return Err(format!("{}: tensor `{name}` is {:?}, expected {dtype:?}", raw.display(), t.dtype));
    }
    Ok((&t.shape, &t.data))
}

pub fn i64s(b: &[u8]) -> Vec<i64> {
    b.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
}

pub fn f64s(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
}

pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Every prompt position in brief (`position_*` tensors), as the golden stores it; empty for raw outputs from before
/// the reference wrote them.
pub fn read_positions(raw: &Path, tensors: &HashMap<String, RawTensor>, prompt: usize) -> Result<Vec<PositionTop>, String> {
    let get = |name: &str, dtype: safetensors::Dtype| raw_tensor(raw, tensors, name, dtype);
    use safetensors::Dtype::{F32, F64, I64};
    if !tensors.contains_key("position_top_ids") {
        return Ok(Vec::new());
    }
    let (shape, ids) = get("position_top_ids", I64)?;
    let ids = i64s(ids);
    let logits = f32s(get("position_top_logits", F32)?.1);
    let lse = f64s(get("position_logsumexp", F64)?.1);
    let noise = match tensors.contains_key("position_noise") {
        true => Some(f64s(get("position_noise", F64)?.1)),
        false => None,
    };
    let [s, k] = shape[..] else { return Err(format!("{}: position_top_ids has shape {shape:?}, expected [prompt, k]", raw.display())) };
    if s != prompt || k == 0 || logits.len() != s * k || lse.len() != s || noise.as_ref().is_some_and(|n| n.len() != s) {
        return Err(format!(
            "{}: position tensors disagree: {s}x{k} ids, {} logits, {} logsumexps, {:?} noises for a {prompt}-token prompt",
            raw.display(),
            logits.len(),
            lse.len(),
            noise.as_ref().map(Vec::len)
        ));
    }
    Ok((0..s)
        .map(|p| PositionTop {
            ids: ids[p * k..(p + 1) * k].to_vec(),
            logits: logits[p * k..(p + 1) * k].iter().map(|&x| Hex(x as f64)).collect(),
            logsumexp: Hex(lse[p]),
            noise: noise.as_ref().map(|n| Hex(n[p])),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_outputs_of_another_format_are_refused_naming_the_file_and_both_versions() {
        let p = Path::new("raw/qwen3-tiny.text.safetensors");
        assert!(check_format(p, Some(RAW_FORMAT), RAW_FORMAT, "goldens.py").is_ok());
        let e = check_format(p, Some("golden-raw-v0"), RAW_FORMAT, "goldens.py").unwrap_err();
        assert!(e.contains("raw/qwen3-tiny.text.safetensors") && e.contains("\"golden-raw-v0\"") && e.contains(RAW_FORMAT), "{e}");
        let e = check_format(p, None, RAW_FORMAT, "goldens.py").unwrap_err();
        assert!(e.contains("`format` is missing"), "{e}");
    }
}
