//! Reading a decoder's `[1, t, vocab]` logits output where ONNX Runtime left it: only the rows a verdict needs cross
//! to the host ([`crate::run::crossing`]) and are widened to f32; every position in brief takes the whole block in one
//! copy and sums it up there.

use ort::value::{DynTensorValueType, DynValue, PrimitiveTensorElementType};

use crate::error::{Error, Result, bail};
use crate::run::crossing;
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

/// A prefill's logits as L4's every-position check reads them: the last row as f32, the vocabulary size, and every
/// row of the `[1, t, vocab]` tensor in brief (`watch.len()` is `t`), all from one copy of the block to the host.
pub(super) fn prefill_rows(v: &DynValue, ty: Float, watch: &[&[i64]]) -> Result<(Vec<f32>, usize, Vec<PositionLogits>)> {
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
    let t = watch.len() as i64;
    positions(v, t)?;
    let v = &*crossing::to_host(v, "logits").map_err(|e| Error::new(e.to_string()))?;
    let mut last = Vec::new();
    let vocab = widen_last_rows(v, ty, t, 1, &mut last)?;
    let summed = match ty {
        Float::F32 => rows::<f32>(v, watch, |x| x),
        Float::F16 => rows::<half::f16>(v, watch, half::f16::to_f32),
        Float::Bf16 => rows::<half::bf16>(v, watch, half::bf16::to_f32),
    }?;
    Ok((last, vocab, summed))
}

/// Checks that `v`, wherever it lives, is a `[1, t, vocab]` tensor before any of it is copied.
fn positions(v: &DynValue, t: i64) -> Result<()> {
    let tensor = v.view().downcast::<DynTensorValueType>().map_err(|e| Error::new(e.to_string()))?;
    match &tensor.shape()[..] {
        &[1, got, vocab] if got == t && vocab > 0 => Ok(()),
        shape => bail!("shape {:?}, expected [1, {t}, vocab]", shape.to_vec()),
    }
}

/// [`read_last_rows`] into `out` (cleared first), so a decode loop reuses one buffer; returns the vocabulary size.
/// Only those rows cross to the host.
pub(super) fn read_last_rows_into(v: &DynValue, ty: Float, t: i64, rows: usize, out: &mut Vec<f32>) -> Result<usize> {
    positions(v, t)?;
    let (host, t) = crossing::last_rows(v, "logits", rows).map_err(|e| Error::new(e.to_string()))?;
    widen_last_rows(&host, ty, t as i64, rows, out)
}

/// The last `rows` rows of the host tensor `v` (`[1, t, vocab]`) widened to f32 into `out`; the vocabulary size.
fn widen_last_rows(v: &DynValue, ty: Float, t: i64, rows: usize, out: &mut Vec<f32>) -> Result<usize> {
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
