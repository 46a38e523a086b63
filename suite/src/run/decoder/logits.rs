//! Reading a decoder's `[1, t, vocab]` logits output where ONNX Runtime left it: only the rows a verdict needs are
//! widened to f32 and copied, and the rest summed up in place.

use ort::value::{DynValue, PrimitiveTensorElementType};

use crate::error::{Error, Result, bail};
use crate::run::decoder::io::Float;
use mobius_numeric::PositionLogits;

/// The last `rows` rows of a `[1, t, vocab]` float tensor, as f32, and the vocabulary size: only what the verdict
/// needs is copied.
pub(super) fn read_last_rows(v: &DynValue, ty: Float, t: i64, rows: usize) -> Result<(Vec<f32>, usize)> {
    let mut out = Vec::new();
    let vocab = read_last_rows_into(v, ty, t, rows, &mut out)?;
    Ok((out, vocab))
}

/// The data of a `[1, t, vocab]` logits tensor, in place, and the vocabulary size; any other shape is an error.
fn logits_rows<T: PrimitiveTensorElementType>(v: &DynValue, t: i64) -> Result<(&[T], i64)> {
    let (shape, data) = v.try_extract_tensor::<T>().map_err(|e| Error::new(e.to_string()))?;
    let vocab = shape.last().copied().unwrap_or(0);
    if shape.len() != 3 || shape[0] != 1 || shape[1] != t || vocab <= 0 || data.len() as i64 != t * vocab {
        bail!("shape {:?}, expected [1, {t}, vocab]", shape.to_vec());
    }
    Ok((data, vocab))
}

/// Every row of a `[1, t, vocab]` float tensor in brief (`watch.len()` is `t`), read in place.
pub(super) fn sum_up_rows(v: &DynValue, ty: Float, watch: &[&[i64]]) -> Result<Vec<PositionLogits>> {
    fn rows<T: PrimitiveTensorElementType + Copy>(v: &DynValue, watch: &[&[i64]], f: impl Fn(T) -> f32) -> Result<Vec<PositionLogits>> {
        let (data, vocab) = logits_rows::<T>(v, watch.len() as i64)?;
        Ok(data
            .chunks_exact(vocab as usize)
            .zip(watch)
            .map(|(row, ids)| PositionLogits {
                watched: ids.iter().map(|&id| usize::try_from(id).ok().and_then(|i| row.get(i)).map_or(f32::NAN, |&x| f(x))).collect(),
                logsumexp: mobius_numeric::logsumexp(row.iter().map(|&x| f(x))),
            })
            .collect())
    }
    match ty {
        Float::F32 => rows::<f32>(v, watch, |x| x),
        Float::F16 => rows::<half::f16>(v, watch, half::f16::to_f32),
        Float::Bf16 => rows::<half::bf16>(v, watch, half::bf16::to_f32),
    }
}

/// [`read_last_rows`] into `out` (cleared first), so a decode loop reuses one buffer; returns the vocabulary size.
pub(super) fn read_last_rows_into(v: &DynValue, ty: Float, t: i64, rows: usize, out: &mut Vec<f32>) -> Result<usize> {
    use half::slice::HalfFloatSliceExt;
    /// The last `rows` rows of `v`, widened by `widen` (a slice copy or `half`'s vectorised conversion: this runs
    /// once per decode step over the whole vocabulary, in a crate built at opt-level 1).
    fn last<T: PrimitiveTensorElementType + Copy>(
        v: &DynValue,
        t: i64,
        rows: usize,
        out: &mut Vec<f32>,
        widen: impl Fn(&[T], &mut [f32]),
    ) -> Result<usize> {
        let (data, vocab) = logits_rows::<T>(v, t)?;
        let tail = &data[data.len() - rows * vocab as usize..];
        out.clear();
        out.resize(tail.len(), 0.0);
        widen(tail, out);
        Ok(vocab as usize)
    }
    match ty {
        Float::F32 => last::<f32>(v, t, rows, out, |from, to| to.copy_from_slice(from)),
        Float::F16 => last::<half::f16>(v, t, rows, out, |from, to| from.convert_to_f32_slice(to)),
        Float::Bf16 => last::<half::bf16>(v, t, rows, out, |from, to| from.convert_to_f32_slice(to)),
    }
}
