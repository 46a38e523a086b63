//! ONNX Runtime in this process: the library loaded once (the build the run's device needs, [`bootstrap`]), its
//! settings fixed once from the run's context, and sessions made on an execution provider. Sessions are shared
//! through [`crate::run::sessions`]; the runtime knows nothing of goldens or verdicts.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ort::environment::Environment;
use ort::ep;
use ort::session::Session;

use crate::context::{Places, RunContext};
use crate::error::{Error, Result, bail};
use crate::feed::package::GenaiConfig;
use crate::run::bootstrap::{self, Flavor};
use crate::run::last_call::{self, Call};
use crate::run::timing;
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

/// What the process's ONNX Runtime is set up with, from the run's context: the build it loads, the intra-op threads
/// of every session, and how many sessions the cache keeps alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub flavor: Flavor,
    pub intra_threads: usize,
    pub max_sessions: usize,
    /// Where the libraries and their installs are.
    pub places: Places,
}

impl Settings {
    pub fn of(ctx: &RunContext) -> Settings {
        Settings {
            flavor: flavor_for(ctx.device),
            intra_threads: ctx.intra_threads,
            max_sessions: ctx.max_sessions,
            places: ctx.places.clone(),
        }
    }
}

/// The settings this process runs with, fixed once: by [`configure`], else a local run's.
static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// The build a device needs: the CUDA build on a CUDA device (it runs the CPU execution provider too, for the `cpu`
/// flavour's trials), the CPU build otherwise.
pub fn flavor_for(device: Device) -> Flavor {
    match device {
        Device::Cpu => Flavor::Cpu,
        Device::Cuda { .. } => Flavor::Gpu,
    }
}

/// Fixes the process's settings from the run's context before any session is made, so the device setting chooses
/// the build, never the trial that happens to start first. The first call wins; returns the build the process uses.
pub fn configure(ctx: &RunContext) -> Flavor {
    SETTINGS.get_or_init(|| Settings::of(ctx)).flavor
}

/// The process's settings: those [`configure`] fixed, else a local run's ([`RunContext::local`]) for a process that
/// makes sessions with no run context (a test of the runtime itself).
pub fn settings() -> &'static Settings {
    SETTINGS.get_or_init(|| Settings::of(&RunContext::local()))
}

struct Runtime {
    env: Environment,
    library: PathBuf,
}

static RUNTIME: OnceLock<std::result::Result<Runtime, Error>> = OnceLock::new();

fn runtime() -> Result<&'static Runtime> {
    RUNTIME
        .get_or_init(|| {
            let lib = bootstrap::locate(settings().flavor, &settings().places)?;
            let builder = ort::init_from(&lib).map_err(|e| Error::new(format!("loading ONNX Runtime from {}: {e}", lib.display())))?;
            let env = builder
                .with_name("mobius-conformance")
                .build()
                .map_err(|e| Error::new(format!("creating the ONNX Runtime environment ({}): {e}", lib.display())))?;
            Ok(Runtime { env, library: lib })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Loads ONNX Runtime (the build the run's device chose, [`configure`]) into the process, if no session has yet:
/// onnxruntime-genai binds to the image already loaded ([`crate::run::genai`]).
pub fn load() -> Result<()> {
    runtime().map(|_| ())
}

/// The ONNX Runtime library this process loaded, once a session was made.
pub fn loaded_library() -> Option<PathBuf> {
    Some(RUNTIME.get()?.as_ref().ok()?.library.clone())
}

/// An ONNX Runtime error, worded with what was being done.
pub(super) fn ort_err(what: impl fmt::Display) -> impl Fn(ort::Error) -> Error {
    move |e| Error::new(format!("{what}: {e}"))
}

/// A new session of `model` on `provider`, with the process's settings. A file ONNX Runtime will not load is the
/// package's refusal ([`Error::refused`]), unless on CUDA the device will not run a one-node model either: then,
/// as when CUDA's provider will not register, the device did not start ([`Error::device`]). Anything else before
/// the load (no such file) is the set-up's error.
pub(super) fn create_session(model: &Path, provider: Provider) -> Result<Session> {
    create_session_of(model, None, provider)
}

/// As [`create_session`], of `edited`: the bytes of an in-memory copy of `model` and the folder its external data
/// is read from, or of `model`'s file when `None`.
pub(super) fn create_session_of(model: &Path, edited: Option<(&[u8], &Path)>, provider: Provider) -> Result<Session> {
    let fail = |what: &str, e: &dyn fmt::Display| Error::new(format!("{}: {what}: {e}", model.display()));
    let mut b = builder().map_err(|e| Error::new(format!("{}: {e}", model.display())))?;
    if let Some((_, dir)) = edited {
        let dir = dir.to_string_lossy().into_owned();
        b = b
            .with_config_entry("session.model_external_initializers_file_folder_path", dir)
            .map_err(|e| fail("setting where external data is read from", &e))?;
    }
    if let Provider::Cuda { id } = provider {
        b = b
            .with_execution_providers([cuda(id)])
            .map_err(|e| Error::device(fail("registering the CUDA execution provider", &e).message()))?;
    }
    if !model.is_file() {
        bail!("{}: no such model file", model.display());
    }
    // The name a crash handler writes for this model (leaked: once per session made).
    let on: &'static str = Box::leak(model.display().to_string().into_boxed_str());
    if let Some(library) = custom_ops_library(model)? {
        let call = Call { runtime: last_call::Runtime::OnnxRuntime, what: "registering the package's custom-op library", on };
        let refused = |e: &dyn fmt::Display| {
            Error::refused(format!("{}: registering the custom-op library {}: {e}", model.display(), library.display()))
        };
        b = last_call::during(call, || b.with_operator_library(&library).map_err(|e| refused(&e)))?;
    }
    // While placement is being checked (`gpu-check`), ONNX Runtime's profiler records where each node runs.
    if let Some(prefix) = crate::run::placement::register(model, provider) {
        b = b.with_profiling(&prefix).map_err(|e| fail("turning on ONNX Runtime's profiler", &e))?;
    }
    // The file is there: a refusal now is the package's (an invalid graph), not the set-up's, if the device starts.
    let session = timing::timed_load(on, || match edited {
        Some((bytes, _)) => b.commit_from_memory(bytes),
        None => b.commit_from_file(model),
    });
    session.map_err(|e| {
        let e = fail("loading the model", &e);
        match provider {
            Provider::Cuda { id } => match device_starts(id) {
                Err(why) => Error::device(format!("{e}; CUDA device {id} does not run a one-node model either: {why}")),
                Ok(()) => Error::refused(e.message()),
            },
            Provider::Cpu => Error::refused(e.message()),
        }
    })
}

/// The custom-op library the package's `genai_config.json` (beside `model`) names for `model`'s session, as
/// onnxruntime-genai registers it: resolved against the package folder, which it must not leave.
fn custom_ops_library(model: &Path) -> Result<Option<PathBuf>> {
    let (Some(package), Some(file)) = (model.parent(), model.file_name()) else { return Ok(None) };
    let Some(config) = GenaiConfig::load_if_present(package)? else { return Ok(None) };
    let Some(library) = config.component_of(&file.to_string_lossy()).and_then(|c| c.custom_ops_library.clone()) else {
        return Ok(None);
    };
    let path = package.join(&library);
    crate::paths::regular_file(&path, "session_options.custom_ops_library")?;
    Ok(Some(path))
}

/// A session builder with the process's settings; on failure, what was being set and ONNX Runtime's error.
fn builder() -> std::result::Result<ort::session::builder::SessionBuilder, String> {
    let env = &runtime().map_err(|e| e.to_string())?.env;
    let b = Session::builder(env).map_err(|e| format!("session options: {e}"))?;
    let b = b.with_intra_threads(settings().intra_threads).map_err(|e| format!("intra-op threads: {e}"))?;
    b.with_inter_threads(1).map_err(|e| format!("inter-op threads: {e}"))
}

/// CUDA's execution provider on device `id`. Strict: a CUDA trial never falls back to the CPU quietly. TF32 stays
/// off: it is not float32.
fn cuda(id: i32) -> ort::ep::ExecutionProviderDispatch {
    ep::CUDA::default().with_device_id(id).with_tf32(false).build().error_on_failure()
}

/// Whether CUDA device `id` starts: a session of a one-node model ([`PROBE`]) made and run on it, once per process
/// and device; else ONNX Runtime's error.
pub fn device_starts(id: i32) -> std::result::Result<(), String> {
    static STARTS: std::sync::Mutex<Vec<(i32, std::result::Result<(), String>)>> = std::sync::Mutex::new(Vec::new());
    let mut known = STARTS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, r)) = known.iter().find(|(d, _)| *d == id) {
        return r.clone();
    }
    let r = probe(Provider::Cuda { id });
    known.push((id, r.clone()));
    r
}

/// A session of a small model of the suite's own (`bytes`, an ONNX model) on `provider`, with the process's
/// settings: [`PROBE`], and the row reader of `run::crossing`.
pub fn own_session(bytes: &[u8], provider: Provider) -> std::result::Result<Session, String> {
    let mut b = builder()?;
    if let Provider::Cuda { id } = provider {
        b = b.with_execution_providers([cuda(id)]).map_err(|e| format!("registering the CUDA execution provider: {e}"))?;
    }
    b.commit_from_memory(bytes).map_err(|e| format!("loading a one-node model: {e}"))
}

/// Makes and runs a session of [`PROBE`] on `provider`.
pub fn probe(provider: Provider) -> std::result::Result<(), String> {
    let mut session = own_session(&PROBE, provider)?;
    let x = ort::value::Tensor::<f32>::from_array(([1usize], vec![1.0f32])).map_err(|e| e.to_string())?;
    let out = session.run(ort::inputs!["x" => x]).map_err(|e| format!("running a one-node model: {e}"))?;
    let (_, y) = out["y"].try_extract_tensor::<f32>().map_err(|e| e.to_string())?;
    if y != [1.0] {
        return Err(format!("a one-node model's Identity returned {y:?} for [1.0]"));
    }
    Ok(())
}

/// The smallest model a device can run: `y = Identity(x)`, x and y float32 [1], opset 13; onnx.proto's ModelProto
/// written out field by field (tag, then length or value).
#[rustfmt::skip]
pub const PROBE: [u8; 60] = [
    0x08, 8, // ir_version: 8
    0x3a, 52, // graph:
        0x0a, 16, // node:
            0x0a, 1, b'x', // input: "x"
            0x12, 1, b'y', // output: "y"
            0x22, 8, b'I', b'd', b'e', b'n', b't', b'i', b't', b'y', // op_type: "Identity"
        0x5a, 15, // input:
            0x0a, 1, b'x', // name: "x"
            0x12, 10, 0x0a, 8, 0x08, 1, 0x12, 4, 0x0a, 2, 0x08, 1, // type: float32, shape [1]
        0x62, 15, // output:
            0x0a, 1, b'y', // name: "y"
            0x12, 10, 0x0a, 8, 0x08, 1, 0x12, 4, 0x0a, 2, 0x08, 1, // type: float32, shape [1]
    0x42, 2, 0x10, 13, // opset_import: { version: 13 }
];

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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_settings_come_from_the_run_context() {
        let ctx = RunContext { device: Device::Cuda { id: 1 }, intra_threads: 3, max_sessions: 5, ..RunContext::local() };
        assert_eq!(Settings::of(&ctx), Settings { flavor: Flavor::Gpu, intra_threads: 3, max_sessions: 5, places: Places::default() });
        assert_eq!(
            Settings::of(&RunContext::local()),
            Settings { flavor: Flavor::Cpu, intra_threads: 1, max_sessions: 64, places: Places::default() }
        );
    }
}
