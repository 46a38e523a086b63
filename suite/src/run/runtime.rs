//! ONNX Runtime: one environment per process, one session per (model file, execution provider), shared by the
//! trials that use it. The runtime knows nothing of goldens or verdicts.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use ort::environment::Environment;
use ort::ep;
use ort::memory::{AllocationDevice, Allocator, AllocatorType, MemoryInfo, MemoryType};
use ort::session::{IoBinding, Session};
use ort::value::{DynValue, Tensor, TensorElementType};

use crate::error::{Error, Result, bail};
use crate::numeric::PositionLogits;
use crate::run::bootstrap::{self, Flavor};
use crate::run::generate::Features;
use crate::run::sessions::{self, SessionCache, Shared};
use crate::vocab::{Device, Ep};

/// The execution provider a session is created with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    Cpu,
    Cuda { id: i32 },
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Provider::Cpu => f.write_str("CPUExecutionProvider"),
            Provider::Cuda { id } => write!(f, "CUDAExecutionProvider (device {id})"),
        }
    }
}

/// A loaded session of either kind (a model file is one or the other).
#[derive(Clone)]
enum Loaded {
    Decoder(Arc<Decoder>),
    Encoder(Arc<Encoder>),
}

impl Shared for Loaded {
    fn in_use(&self) -> bool {
        match self {
            Loaded::Decoder(d) => d.in_use(),
            Loaded::Encoder(e) => e.in_use(),
        }
    }
}

struct Runtime {
    env: Environment,
    sessions: Mutex<SessionCache<(PathBuf, Provider), Loaded>>,
    library: PathBuf,
}

static RUNTIME: OnceLock<std::result::Result<Runtime, Error>> = OnceLock::new();

/// The ONNX Runtime build this process loads, fixed once: by [`use_device`], else by `MOBIUS_TEST_DEVICE`.
static FLAVOR: OnceLock<Flavor> = OnceLock::new();

/// The build a device needs: the CUDA build on a CUDA device (it runs the CPU execution provider too, for the `cpu`
/// flavour's trials), the CPU build otherwise.
pub fn flavor_for(device: Device) -> Flavor {
    match device {
        Device::Cpu => Flavor::Cpu,
        Device::Cuda { .. } => Flavor::Gpu,
    }
}

/// Fixes the build for the run's device before any session is made, so the device setting chooses it, never the
/// trial that happens to start first. The first call wins; returns the build the process uses.
pub fn use_device(device: Device) -> Flavor {
    *FLAVOR.get_or_init(|| flavor_for(device))
}

fn process_flavor() -> Flavor {
    *FLAVOR.get_or_init(|| flavor_for(Device::from_env().unwrap_or(Device::Cpu)))
}

/// The ONNX Runtime library this process loaded, once a session was made.
pub fn loaded_library() -> Option<PathBuf> {
    Some(RUNTIME.get()?.as_ref().ok()?.library.clone())
}

fn runtime() -> Result<&'static Runtime> {
    RUNTIME
        .get_or_init(|| {
            let lib = bootstrap::locate(process_flavor())?;
            let builder = ort::init_from(&lib).map_err(|e| Error::new(format!("loading ONNX Runtime from {}: {e}", lib.display())))?;
            let env = builder
                .with_name("mobius-conformance")
                .build()
                .map_err(|e| Error::new(format!("creating the ONNX Runtime environment ({}): {e}", lib.display())))?;
            Ok(Runtime { env, sessions: Mutex::new(SessionCache::new(sessions::cap_from_env()?)), library: lib })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Loads ONNX Runtime (the build the run's device chose, [`use_device`]) into the process, if no session has yet:
/// onnxruntime-genai binds to the image already loaded ([`crate::run::genai`]).
pub fn load() -> Result<()> {
    runtime().map(|_| ())
}

/// Time spent inside ONNX Runtime's run calls by this process, all sessions and threads together (nanoseconds).
static RUN_NANOS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Seconds this process has spent inside ONNX Runtime's run calls so far (summed over threads): what the suite
/// costs beyond it is its own overhead.
pub fn run_seconds() -> f64 {
    RUN_NANOS.load(std::sync::atomic::Ordering::Relaxed) as f64 * 1e-9
}

/// Time spent inside ONNX Runtime making sessions (reading and optimising the graph), nanoseconds: the engine's
/// time too, which the bench keeps apart from its run calls and from the suite's own.
static LOAD_NANOS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Seconds this process has spent inside ONNX Runtime making sessions so far (summed over threads).
pub fn load_seconds() -> f64 {
    LOAD_NANOS.load(std::sync::atomic::Ordering::Relaxed) as f64 * 1e-9
}

thread_local! {
    /// When this thread records them ([`record_run_ends`]), the moment each of its run calls returned.
    static RUN_ENDS: std::cell::RefCell<Option<Vec<std::time::Instant>>> = const { std::cell::RefCell::new(None) };
}

/// Starts recording, on this thread, the moment each ONNX Runtime run call returns (dropping any earlier record).
/// A decode loop makes one run a step, so the gaps between the ends are its steps, each with the loop's own work on
/// the step's output: the bench times every loop, Python's too, that way.
pub fn record_run_ends() {
    RUN_ENDS.with(|r| *r.borrow_mut() = Some(Vec::new()));
}

/// What [`record_run_ends`] recorded on this thread since, and stops recording.
pub fn take_run_ends() -> Vec<std::time::Instant> {
    RUN_ENDS.with(|r| r.borrow_mut().take()).unwrap_or_default()
}

fn timed<T>(f: impl FnOnce() -> T) -> T {
    let t0 = std::time::Instant::now();
    let out = f();
    let end = std::time::Instant::now();
    RUN_NANOS.fetch_add((end - t0).as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
    RUN_ENDS.with(|r| {
        if let Some(ends) = r.borrow_mut().as_mut() {
            ends.push(end);
        }
    });
    out
}

/// Intra-op threads per session. Fixed (default 1) so results repeat exactly; trials run in parallel instead.
fn intra_threads() -> Result<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    parse_intra_threads(std::env::var("MOBIUS_INTRA_THREADS").ok().as_deref(), cores)
}

/// `MOBIUS_INTRA_THREADS`: unset means 1; otherwise 1 up to 4x the machine's cores (ONNX Runtime makes the threads
/// when the session is created, so an absurd number hangs the run before any trial ends); anything else is an
/// error naming the setting.
pub fn parse_intra_threads(value: Option<&str>, cores: usize) -> Result<usize> {
    let Some(v) = value else { return Ok(1) };
    let max = 4 * cores.max(1);
    match v.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => bail!("MOBIUS_INTRA_THREADS={v:?}: expected a whole number from 1 to {max} (4 x this machine's {cores} cores)"),
    }
}

fn create_session(env: &Environment, model: &Path, provider: Provider) -> Result<Session> {
    let fail = |what: &str, e: &dyn fmt::Display| Error::new(format!("{}: {what}: {e}", model.display()));
    let mut b = Session::builder(env).map_err(|e| fail("session options", &e))?;
    b = b.with_intra_threads(intra_threads()?).map_err(|e| fail("intra-op threads", &e))?;
    b = b.with_inter_threads(1).map_err(|e| fail("inter-op threads", &e))?;
    if let Provider::Cuda { id } = provider {
        // Strict: a CUDA trial must never fall back to the CPU quietly. TF32 stays off: it is not float32.
        let cuda = ep::CUDA::default().with_device_id(id).with_tf32(false).build().error_on_failure();
        b = b.with_execution_providers([cuda]).map_err(|e| fail("registering the CUDA execution provider", &e))?;
    }
    if !model.is_file() {
        bail!("{}: no such model file", model.display());
    }
    // The file is there: a refusal now is the package's (an invalid graph), not the set-up's.
    let t0 = std::time::Instant::now();
    let session = b.commit_from_file(model);
    LOAD_NANOS.fetch_add(t0.elapsed().as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
    session.map_err(|e| Error::refused(fail("loading the model", &e).message()))
}

/// Why ONNX Runtime's CPU EP cannot run a half-precision build, when that is why its session could not be made:
/// a node without a kernel ("Could not find an implementation for MatMul(13) node with name '...'"), or, for
/// bfloat16, an op whose CPU function body cannot take it ("Type Error: Type parameter (T) of Optype (Add) bound
/// to different types (tensor(bfloat16) and tensor(float)..."; ORT expands Attention with a mask that way).
pub fn cpu_cannot_run(e: &Error, bf16: bool) -> Option<&str> {
    let m = e.message();
    let at = m
        .find("Could not find an implementation for ")
        .or_else(|| m.find("Type Error: ").filter(|&i| bf16 && m[i..].lines().next().is_some_and(|l| l.contains("tensor(bfloat16)"))))?;
    let rest = &m[at..];
    Some(rest.lines().next().unwrap_or(rest).trim_end())
}

/// The shared session of `model` on `provider`, made by `make` the first time anyone asks (or again after the
/// cache dropped it to stay under its cap).
fn cached(rt: &Runtime, model: &Path, provider: Provider, make: impl FnOnce() -> Result<Loaded>) -> Result<Loaded> {
    let (cell, dropped) = rt.sessions.lock().unwrap_or_else(|p| p.into_inner()).cell(&(model.to_path_buf(), provider));
    drop(dropped);
    cell.get_or_init(make).clone()
}

/// How this process's session cache has been used so far, and its cap (`MOBIUS_MAX_SESSIONS`); `None` before
/// ONNX Runtime is loaded.
pub fn session_counts() -> Option<(sessions::Counts, usize)> {
    let rt = RUNTIME.get()?.as_ref().ok()?;
    let cache = rt.sessions.lock().unwrap_or_else(|p| p.into_inner());
    Some((cache.counts(), cache.cap()))
}

/// A decoder session, shared: `Session::run` needs `&mut`, so callers take turns.
pub fn decoder(model: &Path, provider: Provider) -> Result<Arc<Decoder>> {
    let rt = runtime()?;
    let loaded = cached(rt, model, provider, || Ok(Loaded::Decoder(Arc::new(load_decoder(rt, model, provider)?))))?;
    match loaded {
        Loaded::Decoder(d) => Ok(d),
        Loaded::Encoder(_) => bail!("{}: already loaded as an encoder, not a decoder", model.display()),
    }
}

/// A decoder session of its own, outside the shared cache (dropped with the last handle): a second worker's, so two
/// threads can run the same model at once (`Session::run` takes `&mut`). Same options, so the same results.
pub fn decoder_replica(model: &Path, provider: Provider) -> Result<Arc<Decoder>> {
    Ok(Arc::new(load_decoder(runtime()?, model, provider)?))
}

fn load_decoder(rt: &Runtime, model: &Path, provider: Provider) -> Result<Decoder> {
    let session = create_session(&rt.env, model, provider)?;
    // The package's genai_config.json sits beside the decoder, or one folder up (a multi-model package's
    // `decoder/model.onnx`); it names the decoder's tensors and says whether its cache can be shared.
    let config = model.ancestors().skip(1).take(2).find_map(|p| crate::feed::package::GenaiConfig::load_if_present(p).ok().flatten());
    let roles = config.as_ref().and_then(|c| c.decoder.clone()).unwrap_or_default();
    let io = DecoderIo::discover(&session, &roles).map_err(|e| e.context(model.display()))?;
    // Only a GroupQueryAttention graph (no `position_ids`) reads past and writes present in one buffer.
    let share_buffer = !io.has_position_ids && io.has_attention_mask && config.is_some_and(|c| c.share_buffer);
    Ok(Decoder { session: Mutex::new(session), io, model: model.to_path_buf(), provider, share_buffer })
}

/// Any other session of a package (embedding, vision or audio encoder), shared like decoders.
pub fn encoder(model: &Path, provider: Provider) -> Result<Arc<Encoder>> {
    let rt = runtime()?;
    let loaded = cached(rt, model, provider, || {
        let session = create_session(&rt.env, model, provider)?;
        let ports = |outlets: &[ort::value::Outlet]| -> Vec<Port> {
            outlets
                .iter()
                .map(|o| Port {
                    name: o.name().to_string(),
                    ty: o.dtype().tensor_type(),
                    shape: o.dtype().tensor_shape().map(|s| s.to_vec()).unwrap_or_default(),
                })
                .collect()
        };
        let (inputs, outputs) = (ports(session.inputs()), ports(session.outputs()));
        Ok(Loaded::Encoder(Arc::new(Encoder { session: Mutex::new(session), inputs, outputs, model: model.to_path_buf(), provider })))
    })?;
    match loaded {
        Loaded::Encoder(e) => Ok(e),
        Loaded::Decoder(_) => bail!("{}: already loaded as a decoder, not an encoder", model.display()),
    }
}

/// A session input or output as the model declares it (-1 for a dynamic dimension).
#[derive(Debug, Clone, PartialEq)]
pub struct Port {
    pub name: String,
    pub ty: Option<TensorElementType>,
    pub shape: Vec<i64>,
}

/// A non-decoder session: run once per input, outputs handed back whole.
pub struct Encoder {
    session: Mutex<Session>,
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
    pub model: PathBuf,
    pub provider: Provider,
}

impl Encoder {
    pub fn input(&self, name: &str) -> Result<&Port> {
        self.inputs.iter().find(|p| p.name == name).ok_or_else(|| {
            let have: Vec<&str> = self.inputs.iter().map(|p| p.name.as_str()).collect();
            Error::new(format!("{}: no input `{name}` (inputs: {})", self.model.display(), have.join(", ")))
        })
    }

    /// Runs with `feeds` (checked against the declared inputs: every input fed, element types equal, static
    /// dimensions equal) and returns the named outputs.
    pub fn run(&self, feeds: Vec<(String, ort::session::SessionInputValue<'_>)>, outputs: &[&str]) -> Result<Vec<DynValue>> {
        let model = self.model.display();
        for port in &self.inputs {
            let Some((_, v)) = feeds.iter().find(|(n, _)| *n == port.name) else {
                bail!("{model}: input `{}` was not fed", port.name);
            };
            let (ty, shape) = (v.dtype().tensor_type(), v.dtype().tensor_shape().map(|s| s.to_vec()).unwrap_or_default());
            let dims_ok = shape.len() == port.shape.len() && shape.iter().zip(&port.shape).all(|(&g, &w)| w < 0 || g == w);
            if ty != port.ty || !dims_ok {
                bail!("{model}: input `{}` is {ty:?} {shape:?}, but the model declares {:?} {:?}", port.name, port.ty, port.shape);
            }
        }
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = timed(|| session.run(feeds)).map_err(ort_err(format!("{model}: run on {}", self.provider)))?;
        outputs.iter().map(|&n| out.remove(n).ok_or_else(|| Error::new(format!("{model}: no output `{n}`")))).collect()
    }
}

/// Element types the suite feeds and reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Float {
    F32,
    F16,
    Bf16,
}

impl Float {
    fn of(t: TensorElementType) -> Option<Float> {
        match t {
            TensorElementType::Float32 => Some(Float::F32),
            TensorElementType::Float16 => Some(Float::F16),
            TensorElementType::Bfloat16 => Some(Float::Bf16),
            _ => None,
        }
    }
}

/// One layer's KV cache: input and output names, and its shape [batch, kv_heads, seq, head_dim].
#[derive(Debug, Clone, PartialEq)]
pub struct CacheLayer {
    pub past_key: String,
    pub past_value: String,
    pub present_key: String,
    pub present_value: String,
    pub kv_heads: i64,
    pub head_dim: i64,
}

/// How the decoder takes its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenInput {
    /// `input_ids` [batch, seq].
    Ids,
    /// `inputs_embeds` [batch, seq, hidden] from the package's embedding session, and `per_layer_inputs` when the
    /// model has per-layer inputs (Gemma-4).
    Embeds { per_layer: bool },
}

/// The decoder's tensor names: genai_config.json's `model.decoder.inputs` / `outputs` where it maps a role (a
/// Whisper decoder takes `decoder_input_ids`), else the role's own name; checked against the session.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderNames {
    pub input_ids: String,
    pub inputs_embeds: String,
    pub per_layer_inputs: String,
    pub attention_mask: String,
    pub position_ids: String,
    pub logits: String,
}

/// The encoder states an encoder-decoder's decoder reads at every step (its cross-attention's keys and values):
/// `encoder_hidden_states` [batch, frames, hidden], fed once per stream.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextInput {
    pub name: String,
    pub ty: Float,
    pub shape: Vec<i64>,
}

/// What the decoder takes and returns, read from the session itself (names as the package maps them).
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderIo {
    pub names: DecoderNames,
    pub token_input: TokenInput,
    pub has_attention_mask: bool,
    pub has_position_ids: bool,
    /// An encoder-decoder's cross-attention input; `None` for a decoder-only model.
    pub context: Option<ContextInput>,
    pub cache: Vec<CacheLayer>,
    pub cache_type: Float,
    pub logits_type: Float,
    /// The logits' last dimension, when the graph declares it.
    pub vocab: Option<i64>,
}

impl DecoderIo {
    fn discover(session: &Session, roles: &crate::feed::package::Component) -> Result<DecoderIo> {
        let inputs: HashMap<&str, &ort::value::ValueType> = session.inputs().iter().map(|o| (o.name(), o.dtype())).collect();
        let outputs: HashMap<&str, &ort::value::ValueType> = session.outputs().iter().map(|o| (o.name(), o.dtype())).collect();
        let listing = || {
            let mut v: Vec<_> = inputs.keys().copied().collect();
            v.sort();
            v.join(", ")
        };
        let names = DecoderNames {
            // mobius maps Whisper's ids under their own name (`decoder_input_ids`), genai under the role.
            input_ids: roles
                .inputs
                .get("input_ids")
                .or(roles.inputs.get("decoder_input_ids"))
                .map_or("input_ids", String::as_str)
                .to_string(),
            inputs_embeds: roles.input("inputs_embeds").to_string(),
            per_layer_inputs: roles.input("per_layer_inputs").to_string(),
            attention_mask: roles.input("attention_mask").to_string(),
            position_ids: roles.input("position_ids").to_string(),
            logits: roles.output("logits").to_string(),
        };
        let token_input = if inputs.contains_key(names.input_ids.as_str()) {
            TokenInput::Ids
        } else if inputs.contains_key(names.inputs_embeds.as_str()) {
            TokenInput::Embeds { per_layer: inputs.contains_key(names.per_layer_inputs.as_str()) }
        } else {
            bail!("the decoder has neither `{}` nor `{}` (inputs: {})", names.input_ids, names.inputs_embeds, listing());
        };
        let Some(logits) = outputs.get(names.logits.as_str()) else { bail!("the decoder has no `{}` output", names.logits) };
        let context_name = roles.input("encoder_hidden_states");
        let context = match inputs.get(context_name) {
            None => None,
            Some(t) => Some(ContextInput {
                name: context_name.to_string(),
                ty: t
                    .tensor_type()
                    .and_then(Float::of)
                    .ok_or_else(|| Error::new(format!("input `{context_name}` is {t}, expected a float tensor")))?,
                shape: t.tensor_shape().map(|s| s.to_vec()).unwrap_or_default(),
            }),
        };
        let vocab = logits.tensor_shape().and_then(|s| s.last().copied()).filter(|&v| v > 0);
        let logits_type = logits
            .tensor_type()
            .and_then(Float::of)
            .ok_or_else(|| Error::new(format!("output `logits` is {logits}, expected a float tensor")))?;
        let mut cache = Vec::new();
        let mut cache_type = None;
        // genai's templates (`past_key_values.%d.key`), as the package maps them.
        let layer = |role: &str, default: &str, i: usize, output: bool| {
            let template = if output { roles.outputs.get(role) } else { roles.inputs.get(role) };
            template.map_or(default, String::as_str).replace("%d", &i.to_string())
        };
        for i in 0.. {
            let past_key = layer("past_key_names", "past_key_values.%d.key", i, false);
            let Some(kt) = inputs.get(past_key.as_str()) else { break };
            let past_value = layer("past_value_names", "past_key_values.%d.value", i, false);
            let present_key = layer("present_key_names", "present.%d.key", i, true);
            let present_value = layer("present_value_names", "present.%d.value", i, true);
            for name in [&past_value] {
                if !inputs.contains_key(name.as_str()) {
                    bail!("the decoder has `{past_key}` but no `{name}` input");
                }
            }
            for name in [&present_key, &present_value] {
                if !outputs.contains_key(name.as_str()) {
                    bail!("the decoder has `{past_key}` but no `{name}` output");
                }
            }
            let shape = kt.tensor_shape().map(|s| s.to_vec()).unwrap_or_default();
            let [_, kv_heads, _, head_dim] = shape[..] else {
                bail!("input `{past_key}` has shape {shape:?}, expected [batch, kv_heads, past_seq, head_dim]");
            };
            if kv_heads <= 0 || head_dim <= 0 {
                bail!("input `{past_key}` has shape {shape:?}: kv_heads and head_dim must be static");
            }
            let t = kt
                .tensor_type()
                .and_then(Float::of)
                .ok_or_else(|| Error::new(format!("input `{past_key}` is {kt}, expected a float tensor")))?;
            if *cache_type.get_or_insert(t) != t {
                bail!("input `{past_key}` is {t:?} but earlier cache inputs are {cache_type:?}");
            }
            cache.push(CacheLayer { past_key, past_value, present_key, present_value, kv_heads, head_dim });
        }
        Ok(DecoderIo {
            token_input,
            has_attention_mask: inputs.contains_key(names.attention_mask.as_str()),
            has_position_ids: inputs.contains_key(names.position_ids.as_str()),
            context,
            names,
            cache,
            cache_type: cache_type.unwrap_or(Float::F32),
            logits_type,
            vocab,
        })
    }
}

/// A loaded decoder and what it expects.
pub struct Decoder {
    session: Mutex<Session>,
    pub io: DecoderIo,
    pub model: PathBuf,
    pub provider: Provider,
    /// Generation keeps one preallocated KV buffer per layer, shared by past and present (see [`Generation`]).
    pub share_buffer: bool,
}

/// A greedy run's state: one IoBinding for the whole run, the KV cache kept where the session computes (device
/// memory on CUDA), and only the logits copied to the host. With a share-buffer graph the cache is one buffer per
/// layer of the run's full length, bound once as both `past_*` and `present_*`; otherwise each step's `present_*`
/// values are bound as the next step's `past_*`, without leaving the device. One-token steps
/// ([`Decoder::advance_token`]) write their token and position into tensors bound once and read the logits from
/// one preallocated host tensor: a decode step allocates no buffer but its `attention_mask`.
pub struct Generation {
    binding: IoBinding,
    /// Growing cache: the previous step's present values (empty before the first step).
    values: Vec<(DynValue, DynValue)>,
    /// Share-buffer cache: the buffers, kept alive while bound.
    _shared: Vec<(DynValue, DynValue)>,
    /// An encoder-decoder's encoder states, bound once for the whole stream and kept alive while bound.
    _context: Option<DynValue>,
    /// The one-token step's bound tensors, made on the first one-token step.
    one: Option<OneToken>,
    /// Whether `one` is what the binding holds now (a multi-token step rebinds its own inputs and logits).
    one_bound: bool,
    /// The last position's logits as f32, rewritten by every step.
    logits: Vec<f32>,
    capacity: usize,
    pub len: usize,
    kv_memory: MemoryInfo<'static>,
    host_memory: MemoryInfo<'static>,
}

/// `input_ids` and `position_ids` [1, 1], rewritten in place, and the logits [1, 1, vocab] on the host.
struct OneToken {
    ids: Tensor<i64>,
    position: Option<Tensor<i64>>,
    /// `None` when the graph does not declare its vocabulary size (the logits are then bound to the host device).
    logits: Option<DynValue>,
}

/// The KV cache between steps: the previous step's `present.*` outputs, fed back as `past_key_values.*`.
pub struct Cache {
    values: Vec<(DynValue, DynValue)>,
    pub len: usize,
    /// An encoder-decoder's encoder states, fed with every call (shared by the caches grown from this one).
    context: Option<Arc<DynValue>>,
}

/// The tokens of one forward call: ids, or their embeddings (from the package's embedding session).
pub enum StepInput {
    Ids(Vec<i64>),
    Embeds { embeds: DynValue, per_layer: Option<DynValue>, len: usize },
}

impl StepInput {
    fn len(&self) -> usize {
        match self {
            StepInput::Ids(ids) => ids.len(),
            StepInput::Embeds { len, .. } => *len,
        }
    }
}

/// What one forward call returns: the logits of its last `rows` positions (as f32, row after row).
pub struct StepOutput {
    pub logits: Vec<f32>,
    pub vocab: usize,
}

impl StepOutput {
    /// The last position's logits.
    pub fn last(&self) -> &[f32] {
        &self.logits[self.logits.len() - self.vocab..]
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.logits[i * self.vocab..(i + 1) * self.vocab]
    }
}

fn ort_err(what: impl fmt::Display) -> impl Fn(ort::Error) -> Error {
    move |e| Error::new(format!("{what}: {e}"))
}

fn empty_cache_tensor(t: Float, shape: [i64; 4]) -> Result<DynValue> {
    let err = ort_err("creating an empty KV cache tensor");
    Ok(match t {
        Float::F32 => Tensor::<f32>::from_array((shape, Vec::<f32>::new())).map_err(err)?.into_dyn(),
        Float::F16 => Tensor::<half::f16>::from_array((shape, Vec::<half::f16>::new())).map_err(err)?.into_dyn(),
        Float::Bf16 => Tensor::<half::bf16>::from_array((shape, Vec::<half::bf16>::new())).map_err(err)?.into_dyn(),
    })
}

fn memory(provider: Provider) -> std::result::Result<(MemoryInfo<'static>, MemoryInfo<'static>), ort::Error> {
    let host = MemoryInfo::new(AllocationDevice::CPU, 0, AllocatorType::Device, MemoryType::Default)?;
    let kv = match provider {
        Provider::Cpu => MemoryInfo::new(AllocationDevice::CPU, 0, AllocatorType::Device, MemoryType::Default)?,
        Provider::Cuda { id } => MemoryInfo::new(AllocationDevice::CUDA, id, AllocatorType::Device, MemoryType::Default)?,
    };
    Ok((kv, host))
}

fn new_float_tensor(allocator: &Allocator, t: Float, shape: &[i64]) -> std::result::Result<DynValue, ort::Error> {
    let shape = shape.to_vec();
    Ok(match t {
        Float::F32 => Tensor::<f32>::new(allocator, shape)?.into_dyn(),
        Float::F16 => Tensor::<half::f16>::new(allocator, shape)?.into_dyn(),
        Float::Bf16 => Tensor::<half::bf16>::new(allocator, shape)?.into_dyn(),
    })
}

impl Decoder {
    /// Starts a generation of at most `capacity` positions (prompt and new tokens) of a decoder-only model.
    pub fn start(&self, capacity: usize) -> Result<Generation> {
        self.start_with(capacity, None)
    }

    /// The encoder states an encoder-decoder's decoder is fed, as its declared input: element type converted,
    /// static dimensions checked. `None` (and no context) for a decoder-only model; a mismatch either way is an error.
    fn context_value(&self, context: Option<&Features>) -> Result<Option<DynValue>> {
        let model = self.model.display();
        let (want, got) = match (&self.io.context, context) {
            (None, None) => return Ok(None),
            (Some(want), Some(got)) => (want, got),
            (Some(want), None) => bail!("{model}: the decoder takes `{}`, its encoder's states, and none were given", want.name),
            (None, Some(_)) => bail!("{model}: encoder states were given, but the decoder takes no `encoder_hidden_states`"),
        };
        let dims_ok = got.shape.len() == want.shape.len() && got.shape.iter().zip(&want.shape).all(|(&g, &w)| w < 0 || g == w);
        if !dims_ok {
            bail!("{model}: the encoder's states are {:?}, but input `{}` is declared {:?}", got.shape, want.name, want.shape);
        }
        let err = ort_err(format!("{model}: input `{}`", want.name));
        let shape = got.shape.clone();
        Ok(Some(match want.ty {
            Float::F32 => Tensor::<f32>::from_array((shape, got.data.clone())).map_err(err)?.into_dyn(),
            Float::F16 => Tensor::<half::f16>::from_array((shape, got.data.iter().map(|&x| half::f16::from_f32(x)).collect::<Vec<_>>()))
                .map_err(err)?
                .into_dyn(),
            Float::Bf16 => Tensor::<half::bf16>::from_array((shape, got.data.iter().map(|&x| half::bf16::from_f32(x)).collect::<Vec<_>>()))
                .map_err(err)?
                .into_dyn(),
        }))
    }

    /// [`Decoder::start`], with the encoder states an encoder-decoder's every step reads (bound once).
    pub fn start_with(&self, capacity: usize, context: Option<&Features>) -> Result<Generation> {
        let model = self.model.display();
        let context = self.context_value(context)?;
        let err = ort_err(format!("{model}: setting up the generation's IoBinding on {}", self.provider));
        let session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let mut binding = session.create_binding().map_err(&err)?;
        let (kv_memory, host_memory) = memory(self.provider).map_err(&err)?;
        let mut shared = Vec::new();
        if self.share_buffer {
            let allocator = match self.provider {
                Provider::Cpu => None,
                Provider::Cuda { .. } => Some(Allocator::new(&session, kv_memory.clone()).map_err(&err)?),
            };
            let allocator = allocator.as_ref().unwrap_or_else(|| session.allocator());
            for l in &self.io.cache {
                let shape = [1, l.kv_heads, capacity as i64, l.head_dim];
                let mut k = new_float_tensor(allocator, self.io.cache_type, &shape).map_err(&err)?;
                let mut v = new_float_tensor(allocator, self.io.cache_type, &shape).map_err(&err)?;
                binding.bind_input(l.past_key.as_str(), &k).map_err(&err)?;
                binding.bind_input(l.past_value.as_str(), &v).map_err(&err)?;
                binding.bind_output(l.present_key.as_str(), &mut k).map_err(&err)?;
                binding.bind_output(l.present_value.as_str(), &mut v).map_err(&err)?;
                shared.push((k, v));
            }
        }
        if let (Some(c), Some(v)) = (&self.io.context, &context) {
            binding.bind_input(c.name.as_str(), v).map_err(&err)?;
        }
        drop(session);
        let values = if self.share_buffer { Vec::new() } else { self.empty_cache_values()? };
        Ok(Generation {
            binding,
            values,
            _shared: shared,
            _context: context,
            one: None,
            one_bound: false,
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
            g.binding.bind_input(name, &value).map_err(&err)?;
        }
        let logits_name = self.io.names.logits.as_str();
        g.binding.bind_output_to_device(logits_name, &g.host_memory).map_err(&err)?;
        g.one_bound = false;
        let (ty, mut logits) = (self.io.logits_type, std::mem::take(&mut g.logits));
        let ran = self.run_step(g, t, |out| read_last_rows_into(&out[logits_name], ty, t as i64, 1, &mut logits));
        g.logits = logits;
        ran?;
        Ok(&g.logits)
    }

    /// Runs one token after the generation's cache (a token-id decoder), returns its logits and advances it:
    /// the decode loop's step, which writes into tensors bound once and allocates no buffer but the attention mask.
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
                Some(vocab) => Some(new_float_tensor(allocator, self.io.logits_type, &[1, 1, vocab]).map_err(&err)?),
                None => None,
            };
            g.one = Some(OneToken { ids, position, logits });
        }
        let one = g.one.as_mut().expect("made above");
        one.ids.extract_tensor_mut().1[0] = token;
        if let Some(p) = &mut one.position {
            p.extract_tensor_mut().1[0] = g.len as i64;
        }
        let names = &self.io.names;
        if !g.one_bound {
            g.binding.bind_input(names.input_ids.as_str(), &one.ids).map_err(&err)?;
            if let Some(p) = &one.position {
                g.binding.bind_input(names.position_ids.as_str(), p).map_err(&err)?;
            }
            match &mut one.logits {
                Some(l) => g.binding.bind_output(names.logits.as_str(), l).map_err(&err)?,
                None => g.binding.bind_output_to_device(names.logits.as_str(), &g.host_memory).map_err(&err)?,
            }
            g.one_bound = true;
        }
        if self.io.has_attention_mask {
            let total = g.len + 1;
            let mask = Tensor::<i64>::from_array(([1, total], vec![1i64; total])).map_err(&err)?;
            g.binding.bind_input(names.attention_mask.as_str(), &mask).map_err(&err)?;
        }
        let (ty, mut logits) = (self.io.logits_type, std::mem::take(&mut g.logits));
        // The bound tensors stay out of `g` while it runs (they are bound, not borrowed, by the binding).
        let one = g.one.take();
        let bound = one.as_ref().and_then(|o| o.logits.as_ref());
        let ran = self.run_step(g, 1, |out| read_last_rows_into(bound.unwrap_or(&out[names.logits.as_str()]), ty, 1, 1, &mut logits));
        (g.one, g.logits) = (one, logits);
        ran?;
        Ok(&g.logits)
    }

    fn check_capacity(&self, g: &Generation, t: usize) -> Result<()> {
        if self.share_buffer && g.len + t > g.capacity {
            bail!("{}: generation reached {} positions, past the {} it was started with", self.model.display(), g.len + t, g.capacity);
        }
        Ok(())
    }

    /// Binds a growing cache's past and present, runs the binding, and keeps the present values as the next
    /// step's past; the caller reads the logits from the returned outputs (or from its own bound tensor).
    fn run_step<R>(&self, g: &mut Generation, t: usize, read: impl FnOnce(&ort::session::SessionOutputs<'_>) -> Result<R>) -> Result<R> {
        let model = self.model.display();
        if !self.share_buffer {
            let err = ort_err(format!("{model}: binding the KV cache"));
            for (layer, (k, v)) in self.io.cache.iter().zip(&g.values) {
                g.binding.bind_input(layer.past_key.as_str(), k).map_err(&err)?;
                g.binding.bind_input(layer.past_value.as_str(), v).map_err(&err)?;
                g.binding.bind_output_to_device(layer.present_key.as_str(), &g.kv_memory).map_err(&err)?;
                g.binding.bind_output_to_device(layer.present_value.as_str(), &g.kv_memory).map_err(&err)?;
            }
        }
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let mut outputs = timed(|| session.run_binding(&g.binding)).map_err(ort_err(format!("{model}: run on {}", self.provider)))?;
        let out = read(&outputs).map_err(|e| e.context(format!("{model}: output `logits`")))?;
        if !self.share_buffer {
            let values = self.take_present(&mut outputs)?;
            drop(outputs);
            g.values = values;
        }
        g.len += t;
        Ok(out)
    }

    /// An empty cache of a decoder-only model.
    pub fn new_cache(&self) -> Result<Cache> {
        self.new_cache_with(None)
    }

    /// An empty cache, with the encoder states an encoder-decoder's every call reads.
    pub fn new_cache_with(&self, context: Option<&Features>) -> Result<Cache> {
        let context = self.context_value(context)?.map(Arc::new);
        Ok(Cache { values: self.empty_cache_values()?, len: 0, context })
    }

    /// Every layer's past key and value with no position yet.
    fn empty_cache_values(&self) -> Result<Vec<(DynValue, DynValue)>> {
        self.io
            .cache
            .iter()
            .map(|l| {
                let shape = [1, l.kv_heads, 0, l.head_dim];
                Ok((empty_cache_tensor(self.io.cache_type, shape)?, empty_cache_tensor(self.io.cache_type, shape)?))
            })
            .collect()
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
        fn cut<T: ort::value::PrimitiveTensorElementType + Copy + fmt::Debug + 'static>(v: &DynValue, len: usize) -> Result<DynValue> {
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
        let model = self.model.display();
        let t = input.len() as i64;
        let total = past.len as i64 + t;
        let mut inputs: Vec<(std::borrow::Cow<'static, str>, ort::session::SessionInputValue<'_>)> =
            Vec::with_capacity(4 + 2 * past.values.len());
        inputs.extend(
            self.feeds(input, past.len)?.into_iter().map(|(name, value)| (std::borrow::Cow::Owned(name.to_string()), value.into())),
        );
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
        let logits = self.io.names.logits.as_str();
        let read = read(&outputs[logits]).map_err(|e| e.context(format!("{model}: output `{logits}`")))?;
        let values = self.take_present(&mut outputs)?;
        Ok((read, Cache { values, len: total as usize, context: past.context.clone() }))
    }

    /// The inputs of one step besides the cache: its tokens (ids, or embeddings and per-layer inputs), and the
    /// attention mask and positions the graph takes, after `past_len` cached positions.
    fn feeds(&self, input: StepInput, past_len: usize) -> Result<Vec<(&str, DynValue)>> {
        let model = self.model.display();
        let err = ort_err(format!("{model}: building inputs"));
        let (t, past) = (input.len() as i64, past_len as i64);
        let names = &self.io.names;
        let mut feeds = Vec::with_capacity(4);
        match (input, self.io.token_input) {
            (StepInput::Ids(ids), TokenInput::Ids) => {
                feeds.push((names.input_ids.as_str(), Tensor::<i64>::from_array(([1, t], ids)).map_err(&err)?.into_dyn()));
            }
            (StepInput::Embeds { embeds, per_layer, .. }, TokenInput::Embeds { per_layer: wants }) => {
                feeds.push((names.inputs_embeds.as_str(), embeds));
                match (per_layer, wants) {
                    (Some(p), true) => feeds.push((names.per_layer_inputs.as_str(), p)),
                    (None, false) => {}
                    (_, wants) => bail!("{model}: the decoder {} `per_layer_inputs`", if wants { "needs" } else { "takes no" }),
                }
            }
            (_, want) => bail!("{model}: the decoder takes {want:?}, but was fed the other kind of token input"),
        }
        if self.io.has_attention_mask {
            let total = past + t;
            let mask = Tensor::<i64>::from_array(([1, total], vec![1i64; total as usize])).map_err(&err)?.into_dyn();
            feeds.push((names.attention_mask.as_str(), mask));
        }
        if self.io.has_position_ids {
            let pos: Vec<i64> = (past..past + t).collect();
            feeds.push((names.position_ids.as_str(), Tensor::<i64>::from_array(([1, t], pos)).map_err(&err)?.into_dyn()));
        }
        Ok(feeds)
    }

    /// The `present.*` outputs of a run, layer by layer: the next step's cache.
    fn take_present(&self, outputs: &mut ort::session::SessionOutputs<'_>) -> Result<Vec<(DynValue, DynValue)>> {
        self.io
            .cache
            .iter()
            .map(|layer| match (outputs.remove(&layer.present_key), outputs.remove(&layer.present_value)) {
                (Some(k), Some(v)) => Ok((k, v)),
                _ => bail!("{}: output `{}`/`{}` missing after run", self.model.display(), layer.present_key, layer.present_value),
            })
            .collect()
    }
}

/// The last `rows` rows of a `[1, t, vocab]` float tensor, as f32, and the vocabulary size: only what the verdict
/// needs is copied.
fn read_last_rows(v: &DynValue, ty: Float, t: i64, rows: usize) -> Result<(Vec<f32>, usize)> {
    let mut out = Vec::new();
    let vocab = read_last_rows_into(v, ty, t, rows, &mut out)?;
    Ok((out, vocab))
}

/// The data of a `[1, t, vocab]` logits tensor, in place, and the vocabulary size; any other shape is an error.
fn logits_rows<T: ort::value::PrimitiveTensorElementType>(v: &DynValue, t: i64) -> Result<(&[T], i64)> {
    let (shape, data) = v.try_extract_tensor::<T>().map_err(|e| Error::new(e.to_string()))?;
    let vocab = shape.last().copied().unwrap_or(0);
    if shape.len() != 3 || shape[0] != 1 || shape[1] != t || vocab <= 0 || data.len() as i64 != t * vocab {
        bail!("shape {:?}, expected [1, {t}, vocab]", shape.to_vec());
    }
    Ok((data, vocab))
}

/// Every row of a `[1, t, vocab]` float tensor in brief (`watch.len()` is `t`), read in place.
fn sum_up_rows(v: &DynValue, ty: Float, watch: &[&[i64]]) -> Result<Vec<PositionLogits>> {
    fn rows<T: ort::value::PrimitiveTensorElementType + Copy>(
        v: &DynValue,
        watch: &[&[i64]],
        f: impl Fn(T) -> f32,
    ) -> Result<Vec<PositionLogits>> {
        let (data, vocab) = logits_rows::<T>(v, watch.len() as i64)?;
        Ok(data
            .chunks_exact(vocab as usize)
            .zip(watch)
            .map(|(row, ids)| PositionLogits {
                watched: ids.iter().map(|&id| usize::try_from(id).ok().and_then(|i| row.get(i)).map_or(f32::NAN, |&x| f(x))).collect(),
                logsumexp: crate::numeric::logsumexp(row.iter().map(|&x| f(x))),
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
fn read_last_rows_into(v: &DynValue, ty: Float, t: i64, rows: usize, out: &mut Vec<f32>) -> Result<usize> {
    use half::slice::HalfFloatSliceExt;
    /// The last `rows` rows of `v`, widened by `widen` (a slice copy or `half`'s vectorised conversion: this runs
    /// once per decode step over the whole vocabulary, in a crate built at opt-level 1).
    fn last<T: ort::value::PrimitiveTensorElementType + Copy>(
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

/// Which execution provider runs a variant on `device`, or why it cannot run here.
pub fn provider_for(ep: Ep, device: Device) -> std::result::Result<Provider, String> {
    match (ep, device) {
        (Ep::Cpu, _) => Ok(Provider::Cpu),
        (Ep::Default, Device::Cpu) => Ok(Provider::Cpu),
        (Ep::Default | Ep::Cuda, Device::Cuda { id }) => Ok(Provider::Cuda { id }),
        (Ep::Cuda, Device::Cpu) => {
            Err("a `cuda` build needs the CUDA execution provider; run with MOBIUS_TEST_DEVICE=cuda on a GPU machine".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ends_are_recorded_per_thread_only_while_asked_for() {
        timed(|| ());
        assert!(take_run_ends().is_empty(), "nothing is recorded unless asked");
        record_run_ends();
        let before = std::time::Instant::now();
        timed(|| ());
        std::thread::spawn(|| timed(|| ())).join().unwrap();
        timed(|| ());
        let ends = take_run_ends();
        assert_eq!(ends.len(), 2, "this thread's two runs, not the other thread's");
        assert!(before <= ends[0] && ends[0] <= ends[1]);
        timed(|| ());
        assert!(take_run_ends().is_empty(), "taking the record stops it");
    }

    #[test]
    fn cpu_cannot_run_names_the_node_or_the_bf16_type_error_and_nothing_else() {
        let missing = Error::new(
            "m.onnx: loading the model: [ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for MatMul(13) node with name 'q_proj/MatMul'\nmore",
        );
        assert_eq!(cpu_cannot_run(&missing, false), Some("Could not find an implementation for MatMul(13) node with name 'q_proj/MatMul'"));
        let typed = Error::new(
            "m.onnx: loading the model: [ONNXRuntimeError] : 1 : FAIL : Type Error: Type parameter (T) of Optype (Add) bound to different types (tensor(bfloat16) and tensor(float) in node ().",
        );
        assert!(cpu_cannot_run(&typed, true).is_some_and(|w| w.starts_with("Type Error:") && w.contains("tensor(bfloat16)")));
        assert_eq!(cpu_cannot_run(&typed, false), None, "a type error is only the CPU EP's limit for a bf16 build");
        assert_eq!(cpu_cannot_run(&Error::new("m.onnx: loading the model: protobuf parsing failed"), true), None);
    }

    #[test]
    fn intra_threads_are_bounded_and_garbage_is_an_error_naming_the_setting() {
        assert_eq!(parse_intra_threads(None, 8).unwrap(), 1);
        assert_eq!(parse_intra_threads(Some("4"), 8).unwrap(), 4);
        assert_eq!(parse_intra_threads(Some("32"), 8).unwrap(), 32);
        for bad in ["100000", "33", "0", "-1", "many", ""] {
            let e = parse_intra_threads(Some(bad), 8).unwrap_err().to_string();
            assert!(e.contains("MOBIUS_INTRA_THREADS") && e.contains("1 to 32"), "{bad}: {e}");
        }
    }
}
