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
use crate::run::bootstrap::{self, Flavor};
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
/// package's refusal ([`Error::refused`]); anything before that (no such file, a provider that will not register)
/// is the set-up's error.
pub(super) fn create_session(model: &Path, provider: Provider) -> Result<Session> {
    let env = &runtime()?.env;
    let fail = |what: &str, e: &dyn fmt::Display| Error::new(format!("{}: {what}: {e}", model.display()));
    let mut b = Session::builder(env).map_err(|e| fail("session options", &e))?;
    b = b.with_intra_threads(settings().intra_threads).map_err(|e| fail("intra-op threads", &e))?;
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
    let session = timing::timed_load(|| b.commit_from_file(model));
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
