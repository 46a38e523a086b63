//! One greedy stream over the decoder: a single IoBinding for the whole run, the KV cache kept where the session
//! computes, and only the logits read back.

use ort::memory::{Allocator, MemoryInfo};
use ort::session::{IoBinding, SessionOutputs};
use ort::value::{DynValue, Tensor};

use crate::error::{Result, bail};
use crate::run::crossing;
use crate::run::decoder::io::TokenInput;
use crate::run::decoder::logits::read_last_rows_into;
use crate::run::decoder::{Decoder, StepInput};
use crate::run::encoder_session::Features;
use crate::run::runtime::{Provider, ort_err};
use crate::run::timing::timed;

/// A greedy run's state: one IoBinding for the whole run, the KV cache kept where the session computes (device
/// memory on CUDA), and only the logits copied to the host. With a share-buffer graph the cache is one buffer per
/// layer of the run's full length, bound once as both `past_*` and `present_*`; otherwise each step's `present_*`
/// values are bound as the next step's `past_*`, without leaving the device. One-token steps
/// ([`Decoder::advance_token`]) write their token and position into two preallocated tensors, bound again every
/// step (see [`HostInputs`]), and read the logits from one preallocated host tensor: a decode step allocates no
/// buffer but its `attention_mask`.
pub struct Generation {
    bind: Binder,
    /// Growing cache: the previous step's present values (empty before the first step).
    values: Vec<(DynValue, DynValue)>,
    /// Share-buffer cache: the buffers, kept alive while bound.
    _shared: Vec<(DynValue, DynValue)>,
    /// An encoder-decoder's encoder states, bound once for the whole stream and kept alive while bound.
    _context: Option<DynValue>,
    /// The one-token step's bound tensors, made on the first one-token step.
    one: Option<OneToken>,
    /// Whether the binding's logits are `one`'s (a multi-token step binds its own).
    logits_bound: bool,
    /// The last position's logits as f32, rewritten by every step.
    logits: Vec<f32>,
    capacity: usize,
    pub len: usize,
    kv_memory: MemoryInfo<'static>,
    host_memory: MemoryInfo<'static>,
}

/// `input_ids` and `position_ids` [1, 1], written and bound again every step, and the logits [1, 1, vocab] on the
/// host.
struct OneToken {
    ids: Tensor<i64>,
    position: Option<Tensor<i64>>,
    /// `None` when the graph does not declare its vocabulary size (the logits are then bound to the host device).
    logits: Option<DynValue>,
}

/// How the session sees a host tensor bound as an input. ONNX Runtime's IoBinding copies a host input to the device
/// that consumes it when it is bound (`BindInput`, `CopyOneInputAcrossDevices` on CUDA) and aliases it on the CPU:
/// on the CPU a tensor written after it was bound is seen, on a GPU it is not. So every step binds its inputs again
/// after writing them, and [`HostInputs::CopiedAtBind`] makes the CPU behave as the device does, so that a test here
/// sees what a GPU run would.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostInputs {
    /// As ONNX Runtime does on the CPU: the session reads the host tensor when it runs.
    #[default]
    Aliased,
    /// As ONNX Runtime does for a device: the session reads a copy made when the tensor was bound.
    CopiedAtBind,
}

/// The generation's IoBinding, and how it hands host inputs to the session.
struct Binder {
    binding: IoBinding,
    host_inputs: HostInputs,
    /// Under [`HostInputs::CopiedAtBind`], the copies bound, kept alive while bound.
    copies: Vec<(String, Tensor<i64>)>,
}

impl Binder {
    /// Binds the host tensor `value` as the input `name`, as the session will see it: from now until it is bound
    /// again, what it holds now (on a device; and on the CPU under [`HostInputs::CopiedAtBind`]).
    fn host(&mut self, name: &str, value: &Tensor<i64>) -> std::result::Result<(), ort::Error> {
        match self.host_inputs {
            HostInputs::Aliased => crossing::bind_host(&mut self.binding, name, value),
            HostInputs::CopiedAtBind => {
                let (shape, data) = value.extract_tensor();
                let copy = Tensor::<i64>::from_array((shape.to_vec(), data.to_vec()))?;
                crossing::bind_host(&mut self.binding, name, &copy)?;
                self.copies.retain(|(n, _)| n != name);
                self.copies.push((name.to_string(), copy));
                Ok(())
            }
        }
    }
}

impl Generation {
    /// Makes the session see this generation's host inputs as a device does (a copy made when each is bound), on
    /// any provider; see [`HostInputs`].
    pub fn copy_host_inputs_at_bind(&mut self) {
        self.bind.host_inputs = HostInputs::CopiedAtBind;
    }
}

impl Decoder {
    /// Starts a generation of at most `capacity` positions (prompt and new tokens) of a decoder-only model.
    pub fn start(&self, capacity: usize) -> Result<Generation> {
        self.start_with(capacity, None)
    }

    /// [`Decoder::start`], with the encoder states an encoder-decoder's every step reads (bound once).
    pub fn start_with(&self, capacity: usize, context: Option<&Features>) -> Result<Generation> {
        let model = self.model.display();
        let context = self.context_value(context)?;
        let err = ort_err(format!("{model}: setting up the generation's IoBinding on {}", self.provider));
        let session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let mut binding = session.create_binding().map_err(&err)?;
        let (kv_memory, host_memory) = (crossing::device_memory(self.provider).map_err(&err)?, crossing::host_memory().map_err(&err)?);
        let mut shared = Vec::new();
        if self.share_buffer {
            let allocator = match self.provider {
                Provider::Cpu => None,
                Provider::Cuda { .. } => Some(Allocator::new(&session, kv_memory.clone()).map_err(&err)?),
            };
            let allocator = allocator.as_ref().unwrap_or_else(|| session.allocator());
            for l in &self.io.cache {
                let shape = [1, l.kv_heads, capacity as i64, l.head_dim];
                let mut k = self.io.cache_type.new_tensor(allocator, &shape).map_err(&err)?;
                let mut v = self.io.cache_type.new_tensor(allocator, &shape).map_err(&err)?;
                binding.bind_input(l.past_key.as_str(), &k).map_err(&err)?;
                binding.bind_input(l.past_value.as_str(), &v).map_err(&err)?;
                binding.bind_output(l.present_key.as_str(), &mut k).map_err(&err)?;
                binding.bind_output(l.present_value.as_str(), &mut v).map_err(&err)?;
                shared.push((k, v));
            }
        }
        if let (Some(c), Some(v)) = (&self.io.context, &context) {
            crossing::bind_host(&mut binding, c.name.as_str(), v).map_err(&err)?;
        }
        drop(session);
        let values = if self.share_buffer { Vec::new() } else { self.empty_cache_values()? };
        Ok(Generation {
            bind: Binder { binding, host_inputs: HostInputs::Aliased, copies: Vec::new() },
            values,
            _shared: shared,
            _context: context,
            one: None,
            logits_bound: false,
            logits: Vec::new(),
            capacity,
            len: 0,
            kv_memory,
            host_memory,
        })
    }

    /// Runs `input` after the generation's cache, returns the last position's logits and advances it.
    pub fn advance<'g>(&self, g: &'g mut Generation, input: StepInput) -> Result<&'g [f32]> {
        let model = self.model.display();
        let t = input.len();
        self.check_capacity(g, t)?;
        let err = ort_err(format!("{model}: binding inputs"));
        for (name, value) in self.feeds(input, g.len)? {
            crossing::bind_host(&mut g.bind.binding, name, &value).map_err(&err)?;
        }
        // The prompt's logits stay on the device; only the last row crosses.
        let logits_name = self.io.names.logits.as_str();
        g.bind.binding.bind_output_to_device(logits_name, &g.kv_memory).map_err(&err)?;
        g.logits_bound = false;
        let (ty, mut logits) = (self.io.logits_type, std::mem::take(&mut g.logits));
        let ran = self.run_step(g, t, |out| read_last_rows_into(&out[logits_name], ty, t as i64, 1, &mut logits));
        g.logits = logits;
        ran?;
        Ok(&g.logits)
    }

    /// Runs one token after the generation's cache (a token-id decoder), returns its logits and advances it:
    /// the decode loop's step, which binds its inputs anew ([`Decoder::bind_token_step`]) and allocates no buffer but
    /// the attention mask.
    pub fn advance_token<'g>(&self, g: &'g mut Generation, token: i64) -> Result<&'g [f32]> {
        let model = self.model.display();
        if self.io.token_input != TokenInput::Ids {
            bail!("{model}: the decoder takes {:?}; one-token steps feed `input_ids`", self.io.token_input);
        }
        self.check_capacity(g, 1)?;
        let err = ort_err(format!("{model}: binding the one-token step"));
        if g.one.is_none() {
            let session = self.session.lock().unwrap_or_else(|p| p.into_inner());
            let allocator = session.allocator();
            let ids = Tensor::<i64>::new(allocator, [1i64, 1]).map_err(&err)?;
            let position = if self.io.has_position_ids { Some(Tensor::<i64>::new(allocator, [1i64, 1]).map_err(&err)?) } else { None };
            let logits = match self.io.vocab {
                Some(vocab) => Some(self.io.logits_type.new_tensor(allocator, &[1, 1, vocab]).map_err(&err)?),
                None => None,
            };
            g.one = Some(OneToken { ids, position, logits });
        }
        self.bind_token_step(g, token).map_err(&err)?;
        let names = &self.io.names;
        let (ty, mut logits) = (self.io.logits_type, std::mem::take(&mut g.logits));
        // The bound tensors stay out of `g` while it runs (they are bound, not borrowed, by the binding).
        let one = g.one.take();
        let bound = one.as_ref().and_then(|o| o.logits.as_ref());
        let ran = self.run_step(g, 1, |out| read_last_rows_into(bound.unwrap_or(&out[names.logits.as_str()]), ty, 1, 1, &mut logits));
        (g.one, g.logits) = (one, logits);
        ran?;
        Ok(&g.logits)
    }

    /// A one-token step's bindings, all made here: its token and position written into the step's tensors and then
    /// bound, with a mask of the new length, every step (a host input is copied to its device when it is bound, so
    /// one written after binding would never reach it: [`HostInputs`]); the logits bound once, to a host tensor.
    fn bind_token_step(&self, g: &mut Generation, token: i64) -> std::result::Result<(), ort::Error> {
        let names = &self.io.names;
        let one = g.one.as_mut().expect("made by advance_token");
        one.ids.extract_tensor_mut().1[0] = token;
        g.bind.host(names.input_ids.as_str(), &one.ids)?;
        if let Some(p) = &mut one.position {
            p.extract_tensor_mut().1[0] = g.len as i64;
            g.bind.host(names.position_ids.as_str(), p)?;
        }
        if self.io.has_attention_mask {
            let total = g.len + 1;
            g.bind.host(names.attention_mask.as_str(), &Tensor::<i64>::from_array(([1, total], vec![1i64; total]))?)?;
        }
        if !g.logits_bound {
            match &mut one.logits {
                Some(l) => g.bind.binding.bind_output(names.logits.as_str(), l)?,
                None => g.bind.binding.bind_output_to_device(names.logits.as_str(), &g.host_memory)?,
            }
            g.logits_bound = true;
        }
        Ok(())
    }

    fn check_capacity(&self, g: &Generation, t: usize) -> Result<()> {
        if self.share_buffer && g.len + t > g.capacity {
            bail!("{}: generation reached {} positions, past the {} it was started with", self.model.display(), g.len + t, g.capacity);
        }
        Ok(())
    }

    /// Binds a growing cache's past and present, runs the binding, and keeps the present values as the next
    /// step's past; the caller reads the logits from the returned outputs (or from its own bound tensor).
    fn run_step<R>(&self, g: &mut Generation, t: usize, read: impl FnOnce(&SessionOutputs<'_>) -> Result<R>) -> Result<R> {
        let model = self.model.display();
        if !self.share_buffer {
            let err = ort_err(format!("{model}: binding the KV cache"));
            for (layer, (k, v)) in self.io.cache.iter().zip(&g.values) {
                g.bind.binding.bind_input(layer.past_key.as_str(), k).map_err(&err)?;
                g.bind.binding.bind_input(layer.past_value.as_str(), v).map_err(&err)?;
                g.bind.binding.bind_output_to_device(layer.present_key.as_str(), &g.kv_memory).map_err(&err)?;
                g.bind.binding.bind_output_to_device(layer.present_value.as_str(), &g.kv_memory).map_err(&err)?;
            }
        }
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let mut outputs = timed(|| session.run_binding(&g.bind.binding)).map_err(ort_err(format!("{model}: run on {}", self.provider)))?;
        let out = read(&outputs).map_err(|e| e.context(format!("{model}: output `logits`")))?;
        if !self.share_buffer {
            let values = self.take_present(&mut outputs)?;
            drop(outputs);
            g.values = values;
        }
        g.len += t;
        Ok(out)
    }
}
