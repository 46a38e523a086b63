//! The decoder run one call at a time with its KV cache handed back: a cache can be continued several ways (a shared
//! context, the gate's choices) and cut back to fewer positions (a rejected guess's, `run::drafted`). Each call binds
//! its outputs where the session computes, so the cache stays there between calls and only the logits' rows a
//! caller reads cross to the host ([`crate::run::crossing`]).

use std::fmt;
use std::sync::Arc;

use ort::value::{DynValue, PrimitiveTensorElementType, Tensor};

use crate::error::{Error, Result, bail};
use crate::run::crossing;
use crate::run::decoder::io::Float;
use crate::run::decoder::logits::{prefill_rows, read_last_rows};
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

    /// An empty cache, with the encoder states an encoder-decoder's every call reads (moved to the device once).
    pub fn new_cache_with(&self, context: Option<&Features>) -> Result<Cache> {
        let context = match (self.context_value(context)?, &self.io.context) {
            (Some(v), Some(c)) => {
                let memory = crossing::device_memory(self.provider).map_err(ort_err("the device's memory"))?;
                let moved =
                    crossing::to_device(v, &memory, &c.name).map_err(ort_err(format!("{}: input `{}`", self.model.display(), c.name)))?;
                Some(Arc::new(moved))
            }
            _ => None,
        };
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
    /// encoder states stay shared. Each layer's `[1, kv_heads, positions, head_dim]` values are copied up to `len`,
    /// through the host: the one call that takes the cache off the device and back.
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
        let memory = crossing::device_memory(self.provider).map_err(ort_err("the device's memory"))?;
        let cut = |v: &DynValue| -> Result<DynValue> {
            let host = crossing::to_host(v, "past cache").map_err(|e| Error::new(e.to_string()))?;
            let host = match self.io.cache_type {
                Float::F32 => cut::<f32>(&host, len),
                Float::F16 => cut::<half::f16>(&host, len),
                Float::Bf16 => cut::<half::bf16>(&host, len),
            };
            crossing::to_device(host?, &memory, "past cache").map_err(|e| Error::new(e.to_string()))
        };
        let cut = |v: &DynValue| cut(v).map_err(|e| e.context(format!("{model}: cutting the KV cache to {len} positions")));
        let values = cache.values.iter().map(|(k, v)| Ok((cut(k)?, cut(v)?))).collect::<Result<_>>()?;
        Ok(Cache { values, len, context: cache.context.clone() })
    }

    /// A prefill of `input` from an empty cache that also sums up every prompt position: `watch[p]`'s logits and the
    /// logsumexp of position `p`, from one host copy of the `[prompt, vocab]` block (in place on the CPU).
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
            let (logits, vocab, positions) = prefill_rows(v, ty, watch)?;
            Ok((StepOutput { logits, vocab }, positions))
        })?;
        Ok(out)
    }

    /// One run of the session after `past`; `read` takes what it needs from the `logits` output.
    fn forward_reading<R>(&self, input: StepInput, past: &Cache, read: impl FnOnce(&DynValue) -> Result<R>) -> Result<(R, Cache)> {
        let logits = self.io.names.logits.as_str();
        self.forward_outputs(input, past, |outputs| read(&outputs[logits]).map_err(|e| e.context(format!("output `{logits}`"))))
    }

    /// One run of the session after `past`; `read` takes what it needs from its outputs (the cache's are taken after).
    /// The step's inputs cross to the device when bound; the cache and the context are bound where they are; every
    /// output is bound to the session's device, and stays there unless `read` takes it to the host.
    pub(super) fn forward_outputs<R>(
        &self,
        input: StepInput,
        past: &Cache,
        read: impl FnOnce(&ort::session::SessionOutputs<'_>) -> Result<R>,
    ) -> Result<(R, Cache)> {
        let model = self.model.display();
        let t = input.len() as i64;
        let total = past.len as i64 + t;
        let feeds = self.feeds(input, past.len)?;
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let err = ort_err(format!("{model}: binding a call on {}", self.provider));
        let mut binding = session.create_binding().map_err(&err)?;
        for (name, value) in &feeds {
            crossing::bind_host(&mut binding, name, value).map_err(&err)?;
        }
        for (layer, (k, v)) in self.io.cache.iter().zip(&past.values) {
            binding.bind_input(layer.past_key.as_str(), k).map_err(&err)?;
            binding.bind_input(layer.past_value.as_str(), v).map_err(&err)?;
        }
        match (&self.io.context, &past.context) {
            (Some(c), Some(v)) => binding.bind_input(c.name.as_str(), &**v).map_err(&err)?,
            (None, None) => {}
            (Some(c), None) => bail!("{model}: the decoder takes `{}`, its encoder's states, and none were given", c.name),
            (None, Some(_)) => bail!("{model}: encoder states were given, but the decoder takes none"),
        }
        let memory = crossing::device_memory(self.provider).map_err(&err)?;
        let outputs: Vec<String> = session.outputs().iter().map(|o| o.name().to_string()).collect();
        for name in &outputs {
            binding.bind_output_to_device(name.as_str(), &memory).map_err(&err)?;
        }
        let mut outputs = timed(|| session.run_binding(&binding)).map_err(ort_err(format!("{model}: run on {}", self.provider)))?;
        let read = read(&outputs).map_err(|e| e.context(&model))?;
        let values = self.take_present(&mut outputs)?;
        Ok((read, Cache { values, len: total as usize, context: past.context.clone() }))
    }
}
