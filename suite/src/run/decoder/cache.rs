//! The decoder run with plain session calls and its KV cache handed back: a cache can be continued several ways (a
//! shared context, the gate's choices) and cut back to fewer positions (a rejected guess's, `run::drafted`).

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use ort::session::SessionInputValue;
use ort::value::{DynValue, PrimitiveTensorElementType, Tensor};

use crate::error::{Error, Result, bail};
use crate::run::decoder::io::Float;
use crate::run::decoder::logits::{read_last_rows, sum_up_rows};
use crate::run::decoder::{Decoder, StepInput, StepOutput};
use crate::run::encoder_session::Features;
use crate::run::runtime::ort_err;
use crate::run::timing::timed;
use mobius_numeric::PositionLogits;

/// The KV cache between steps: the previous step's `present.*` outputs, fed back as `past_key_values.*`.
pub struct Cache {
    values: Vec<(DynValue, DynValue)>,
    pub len: usize,
    /// An encoder-decoder's encoder states, fed with every call (shared by the caches grown from this one).
    context: Option<Arc<DynValue>>,
}

impl Decoder {
    /// An empty cache of a decoder-only model.
    pub fn new_cache(&self) -> Result<Cache> {
        self.new_cache_with(None)
    }

    /// An empty cache, with the encoder states an encoder-decoder's every call reads.
    pub fn new_cache_with(&self, context: Option<&Features>) -> Result<Cache> {
        let context = self.context_value(context)?.map(Arc::new);
        Ok(Cache { values: self.empty_cache_values()?, len: 0, context })
    }

    /// Runs `input` (batch 1) after `cache`, returns the last position's logits and advances the cache.
    pub fn step(&self, input: StepInput, cache: &mut Cache) -> Result<StepOutput> {
        let (out, next) = self.forward(input, cache, 1)?;
        *cache = next;
        Ok(out)
    }

    /// Runs `input` (batch 1) after `past`, which stays as it was (a shared context can be continued several
    /// ways); returns the logits of the last `rows` positions and the cache grown by the input.
    pub fn forward(&self, input: StepInput, past: &Cache, rows: usize) -> Result<(StepOutput, Cache)> {
        let t = input.len() as i64;
        if rows == 0 || rows as i64 > t {
            bail!("{}: asked for the logits of {rows} positions of a {t}-token input", self.model.display());
        }
        let ty = self.io.logits_type;
        let ((logits, vocab), cache) = self.forward_reading(input, past, |v| read_last_rows(v, ty, t, rows))?;
        Ok((StepOutput { logits, vocab }, cache))
    }

    /// `cache` cut back to its first `len` positions (a rejected guess's positions dropped, see `run::drafted`); the
    /// encoder states stay shared. Each layer's `[1, kv_heads, positions, head_dim]` values are copied up to `len`.
    pub fn truncate(&self, cache: &Cache, len: usize) -> Result<Cache> {
        let model = self.model.display();
        if len > cache.len {
            bail!("{model}: cannot cut a {}-position KV cache to {len} positions", cache.len);
        }
        fn cut<T: PrimitiveTensorElementType + Copy + fmt::Debug + 'static>(v: &DynValue, len: usize) -> Result<DynValue> {
            let (shape, data) = v.try_extract_tensor::<T>().map_err(|e| Error::new(e.to_string()))?;
            let &[b, h, positions, d] = &shape[..] else { bail!("a KV cache tensor of shape {:?}, expected 4 dimensions", shape.to_vec()) };
            let (rows, positions, d) = ((b * h) as usize, positions as usize, d as usize);
            let mut out = Vec::with_capacity(rows * len * d);
            for r in 0..rows {
                out.extend_from_slice(&data[r * positions * d..][..len * d]);
            }
            Ok(Tensor::<T>::from_array(([b, h, len as i64, d as i64], out)).map_err(|e| Error::new(e.to_string()))?.into_dyn())
        }
        let cut = |v: &DynValue| -> Result<DynValue> {
            match self.io.cache_type {
                Float::F32 => cut::<f32>(v, len),
                Float::F16 => cut::<half::f16>(v, len),
                Float::Bf16 => cut::<half::bf16>(v, len),
            }
            .map_err(|e| e.context(format!("{model}: cutting the KV cache to {len} positions")))
        };
        let values = cache.values.iter().map(|(k, v)| Ok((cut(k)?, cut(v)?))).collect::<Result<_>>()?;
        Ok(Cache { values, len, context: cache.context.clone() })
    }

    /// A prefill of `input` from an empty cache that also sums up every prompt position where ONNX Runtime left the
    /// logits: `watch[p]`'s logits and the logsumexp of position `p`. Only the last row and those numbers are copied,
    /// never the `[prompt, vocab]` block.
    pub fn prefill_positions(
        &self,
        input: StepInput,
        context: Option<&Features>,
        watch: &[&[i64]],
    ) -> Result<(StepOutput, Vec<PositionLogits>)> {
        let t = input.len() as i64;
        if watch.len() as i64 != t {
            bail!("{}: {} positions to watch for a {t}-token prompt", self.model.display(), watch.len());
        }
        let ty = self.io.logits_type;
        let past = self.new_cache_with(context)?;
        let (out, _) = self.forward_reading(input, &past, |v| {
            let (logits, vocab) = read_last_rows(v, ty, t, 1)?;
            Ok((StepOutput { logits, vocab }, sum_up_rows(v, ty, watch)?))
        })?;
        Ok(out)
    }

    /// One run of the session after `past`; `read` takes what it needs from the `logits` output.
    fn forward_reading<R>(&self, input: StepInput, past: &Cache, read: impl FnOnce(&DynValue) -> Result<R>) -> Result<(R, Cache)> {
        let logits = self.io.names.logits.as_str();
        self.forward_outputs(input, past, |outputs| read(&outputs[logits]).map_err(|e| e.context(format!("output `{logits}`"))))
    }

    /// One run of the session after `past`; `read` takes what it needs from its outputs (the cache's are taken after).
    pub(super) fn forward_outputs<R>(
        &self,
        input: StepInput,
        past: &Cache,
        read: impl FnOnce(&ort::session::SessionOutputs<'_>) -> Result<R>,
    ) -> Result<(R, Cache)> {
        let model = self.model.display();
        let t = input.len() as i64;
        let total = past.len as i64 + t;
        let mut inputs: Vec<(Cow<'static, str>, SessionInputValue<'_>)> = Vec::with_capacity(4 + 2 * past.values.len());
        inputs.extend(self.feeds(input, past.len)?.into_iter().map(|(name, value)| (Cow::Owned(name.to_string()), value.into())));
        for (layer, (k, v)) in self.io.cache.iter().zip(&past.values) {
            inputs.push((layer.past_key.clone().into(), k.into()));
            inputs.push((layer.past_value.clone().into(), v.into()));
        }
        match (&self.io.context, &past.context) {
            (Some(c), Some(v)) => inputs.push((c.name.clone().into(), (&**v).into())),
            (None, None) => {}
            (Some(c), None) => bail!("{model}: the decoder takes `{}`, its encoder's states, and none were given", c.name),
            (None, Some(_)) => bail!("{model}: encoder states were given, but the decoder takes none"),
        }
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let mut outputs = timed(|| session.run(inputs)).map_err(ort_err(format!("{model}: run on {}", self.provider)))?;
        let read = read(&outputs).map_err(|e| e.context(&model))?;
        let values = self.take_present(&mut outputs)?;
        Ok((read, Cache { values, len: total as usize, context: past.context.clone() }))
    }
}
