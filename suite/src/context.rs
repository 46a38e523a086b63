//! The run's settings, read from the environment once, by the faces (the harness, xtask), and handed to every stage
//! that needs one. The library's stages never read `CI` or the other settings themselves, so tests set each field
//! both ways on any machine.

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::vocab::Device;

/// What a run is told from outside: whether it gates a merge, whether absent models fail, where it runs, and where it
/// finds what it loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunContext {
    /// Pre-merge gating (`CI` set): a missing golden, baseline, inputs file or real-tier package fails instead of
    /// skipping; `ci_skip_reason` skips; snapshots are never written; a gate too small to decide fails.
    pub ci: bool,
    /// A model missing from the Hugging Face cache fails instead of skipping (`MOBIUS_REQUIRE_MODELS=1`,
    /// `cargo xtask ci --require`; a case can ask for it alone with `required: true`).
    pub require_models: bool,
    /// Where the trials run (`MOBIUS_TEST_DEVICE`).
    pub device: Device,
    /// How many sessions a gate shares its items over; `None`: one a core, up to four. The bench's overhead section
    /// sets 1, so that its one worker is one thread and its engines' time is a part of its wall time.
    pub gate_sessions: Option<usize>,
    /// How the speech gate decodes (`MOBIUS_SPEECH_DECODE`): checked against the reference's transcript, by default,
    /// or one step at a time.
    pub speech_decode: SpeechDecode,
    /// Intra-op threads per ONNX Runtime session (`MOBIUS_INTRA_THREADS`, default 1): fixed so results repeat
    /// exactly; trials run in parallel instead.
    pub intra_threads: usize,
    /// How many sessions the process keeps alive (`MOBIUS_MAX_SESSIONS`, default 64).
    pub max_sessions: usize,
    /// Where the runtime libraries, their installs and the interpreter that installs them are.
    pub places: Places,
    /// The Hugging Face hub: its cache and whether a missing model may be downloaded.
    pub hub: Hub,
}

/// Where the run finds what it loads and installs, where the environment says so; `None`: the suite's own place.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Places {
    /// `ORT_DYLIB_PATH`: an ONNX Runtime library to load instead of the locked wheel's.
    pub ort_library: Option<PathBuf>,
    /// `GENAI_DYLIB_PATH`: an onnxruntime-genai library to load instead of the locked wheel's.
    pub genai_library: Option<PathBuf>,
    /// `CARGO_TARGET_DIR`: the build folder, under which the locked wheels are installed (else the workspace's
    /// `target/`).
    pub target_dir: Option<PathBuf>,
    /// `PYTHON`: the interpreter whose pip installs them (else `python3`).
    pub python: Option<String>,
}

/// The Hugging Face hub as this run sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hub {
    /// The hub cache, resolved once by [`hub_cache`]: where a case's `hf://` package and a task's dataset are looked up.
    pub cache: PathBuf,
    /// `MOBIUS_HF_DOWNLOAD=1` and not `HF_HUB_OFFLINE=1`: a package missing from the cache is downloaded.
    pub download: bool,
}

impl Hub {
    /// The hub as a run that is told nothing sees it: `huggingface_hub`'s default cache, no downloads.
    pub fn local() -> Hub {
        Hub { cache: hub_cache(|_| None), download: false }
    }
}

/// The hub cache folder, by `huggingface_hub`'s rules: `HF_HUB_CACHE` (or its older name `HUGGINGFACE_HUB_CACHE`),
/// else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`. `env` reads a
/// variable (empty counts as unset). The one place the suite decides where the cache is.
pub fn hub_cache(env: impl Fn(&str) -> Option<String>) -> PathBuf {
    let var = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("HF_HUB_CACHE")
        .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
        .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
        .or_else(|| var("XDG_CACHE_HOME").map(|x| x.join("huggingface").join("hub")))
        .unwrap_or_else(|| hf_hub::Cache::default().path().clone())
}

/// How the speech gate runs a package's greedy decoding. Both give the package's own greedy tokens (see
/// `run::drafted`); they differ in cost, and in how ONNX Runtime groups the arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpeechDecode {
    /// Many tokens a forward call, checked against the reference's transcript as a draft (`drafted`).
    #[default]
    Drafted,
    /// One forward call a token, as the L5 level decodes (`stepwise`).
    Stepwise,
}

impl SpeechDecode {
    /// `MOBIUS_SPEECH_DECODE`'s value: unset or empty is the default; anything but the two names is an error naming it.
    pub fn parse(value: Option<&str>) -> Result<SpeechDecode> {
        match value.map(str::trim) {
            None | Some("") | Some("drafted") => Ok(SpeechDecode::Drafted),
            Some("stepwise") => Ok(SpeechDecode::Stepwise),
            Some(v) => Err(Error::new(format!("MOBIUS_SPEECH_DECODE={v:?}: expected `drafted` or `stepwise`"))),
        }
    }
}

impl RunContext {
    /// A local run on the CPU: not CI, models not required.
    pub fn local() -> RunContext {
        RunContext {
            ci: false,
            require_models: false,
            device: Device::Cpu,
            gate_sessions: None,
            speech_decode: SpeechDecode::Drafted,
            intra_threads: 1,
            max_sessions: DEFAULT_MAX_SESSIONS,
            places: Places::default(),
            hub: Hub::local(),
        }
    }

    /// The settings as the environment gives them. A setting with a value it does not accept is an error naming it.
    pub fn from_env() -> Result<RunContext> {
        let var = |k: &str| std::env::var(k).ok();
        let device = ["MOBIUS_TEST_DEVICE", "MOBIUS_TEST_EP"].into_iter().find_map(|k| var(k).map(|v| (k, v)));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(RunContext {
            ci: ci_from(var("CI").as_deref()),
            require_models: flag("MOBIUS_REQUIRE_MODELS", var("MOBIUS_REQUIRE_MODELS").as_deref())?,
            device: device_from(device.as_ref().map(|(k, v)| (*k, v.as_str())))?,
            gate_sessions: None,
            speech_decode: SpeechDecode::parse(var("MOBIUS_SPEECH_DECODE").as_deref())?,
            intra_threads: parse_intra_threads(var("MOBIUS_INTRA_THREADS").as_deref(), cores)?,
            max_sessions: parse_max_sessions(var("MOBIUS_MAX_SESSIONS").as_deref())?,
            places: Places {
                ort_library: var("ORT_DYLIB_PATH").map(PathBuf::from),
                genai_library: var("GENAI_DYLIB_PATH").map(PathBuf::from),
                target_dir: var("CARGO_TARGET_DIR").filter(|v| !v.is_empty()).map(PathBuf::from),
                python: var("PYTHON").filter(|v| !v.is_empty()),
            },
            hub: Hub { cache: hub_cache(var), download: on(var("MOBIUS_HF_DOWNLOAD").as_deref()) && !on(var("HF_HUB_OFFLINE").as_deref()) },
        })
    }

    /// What snapshot review may do in this run.
    pub fn snapshots(&self) -> SnapshotMode {
        if self.ci { SnapshotMode::NoUpdate } else { SnapshotMode::WriteNew }
    }
}

/// What a snapshot that does not match may leave behind (insta's `snapshot_update_behavior`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotMode {
    /// Under CI: nothing is written.
    NoUpdate,
    /// Locally: the new output beside the committed one, as `.snap.new`, for `cargo insta review`.
    WriteNew,
}

/// `1` or `true` (any case): a switch the Hugging Face tools read that way.
fn on(value: Option<&str>) -> bool {
    value.is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// `CI` as CI systems set it (`true`, `1`, a system's name): set and not empty, `0` or `false`, means a CI run.
pub fn ci_from(value: Option<&str>) -> bool {
    value.map(str::trim).is_some_and(|v| !v.is_empty() && !v.eq_ignore_ascii_case("false") && v != "0")
}

/// The device a setting names (`MOBIUS_TEST_DEVICE`, else its alias `MOBIUS_TEST_EP`, as `(name, value)`): unset
/// is the CPU; a value [`Device::parse`] does not take is an error naming the setting.
pub fn device_from(setting: Option<(&str, &str)>) -> Result<Device> {
    match setting {
        None => Ok(Device::Cpu),
        Some((k, v)) => Device::parse(v).ok_or_else(|| Error::new(format!("{k}={v:?}: expected `cpu`, `cuda` or `cuda:<device id>`"))),
    }
}

/// `MOBIUS_INTRA_THREADS`: unset means 1; otherwise 1 up to 4x the machine's cores (ONNX Runtime makes the threads
/// when the session is created, so an absurd number hangs the run before any trial ends); anything else is an
/// error naming the setting.
pub fn parse_intra_threads(value: Option<&str>, cores: usize) -> Result<usize> {
    let Some(v) = value else { return Ok(1) };
    let max = 4 * cores.max(1);
    match v.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(Error::new(format!(
            "MOBIUS_INTRA_THREADS={v:?}: expected a whole number from 1 to {max} (4 x this machine's {cores} cores)"
        ))),
    }
}

/// The session cap when `MOBIUS_MAX_SESSIONS` is unset: room for every package of a large case set, bounded all the
/// same.
pub const DEFAULT_MAX_SESSIONS: usize = 64;

/// `MOBIUS_MAX_SESSIONS`: unset means 64; a whole number >= 1 is the cap; anything else is an error naming the
/// setting (a typo must not quietly run with another cap).
pub fn parse_max_sessions(value: Option<&str>) -> Result<usize> {
    match value.map(|v| (v, v.trim().parse::<usize>())) {
        None => Ok(DEFAULT_MAX_SESSIONS),
        Some((_, Ok(n))) if n > 0 => Ok(n),
        Some((v, _)) => Err(Error::new(format!("MOBIUS_MAX_SESSIONS={v:?}: expected a whole number of sessions, at least 1"))),
    }
}

/// A boolean setting of the suite's own: unset, `0` or `false` is off; `1` or `true` is on (any case); anything
/// else is an error naming the setting, never a silent "off".
pub fn flag(name: &str, value: Option<&str>) -> Result<bool> {
    match value.map(str::trim) {
        None | Some("") => Ok(false),
        Some(v) if v == "0" || v.eq_ignore_ascii_case("false") => Ok(false),
        Some(v) if v == "1" || v.eq_ignore_ascii_case("true") => Ok(true),
        Some(v) => Err(Error::new(format!("{name}={v:?}: expected 1 or 0, true or false (any case)"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_take_the_documented_set_and_refuse_the_rest() {
        for (v, want) in
            [(None, false), (Some(""), false), (Some("0"), false), (Some("FALSE"), false), (Some("1"), true), (Some("True"), true)]
        {
            assert_eq!(flag("X", v).unwrap(), want, "{v:?}");
        }
        for v in ["2", "yes", "TRUE!", "on"] {
            let e = flag("MOBIUS_REQUIRE_MODELS", Some(v)).unwrap_err().to_string();
            assert!(e.contains("MOBIUS_REQUIRE_MODELS") && e.contains(v), "{e}");
        }
    }

    #[test]
    fn speech_decode_takes_its_two_names_and_refuses_the_rest() {
        assert_eq!(SpeechDecode::parse(None).unwrap(), SpeechDecode::Drafted);
        assert_eq!(SpeechDecode::parse(Some(" ")).unwrap(), SpeechDecode::Drafted);
        assert_eq!(SpeechDecode::parse(Some("drafted")).unwrap(), SpeechDecode::Drafted);
        assert_eq!(SpeechDecode::parse(Some("stepwise")).unwrap(), SpeechDecode::Stepwise);
        let e = SpeechDecode::parse(Some("fast")).unwrap_err().to_string();
        assert!(e.contains("MOBIUS_SPEECH_DECODE") && e.contains("fast") && e.contains("stepwise"), "{e}");
    }

    #[test]
    fn the_device_setting_takes_cpu_and_cuda_and_refuses_the_rest_naming_it() {
        assert_eq!(device_from(None).unwrap(), Device::Cpu);
        assert_eq!(device_from(Some(("MOBIUS_TEST_DEVICE", "cuda:2"))).unwrap(), Device::Cuda { id: 2 });
        assert_eq!(device_from(Some(("MOBIUS_TEST_EP", " CPU "))).unwrap(), Device::Cpu);
        let e = device_from(Some(("MOBIUS_TEST_EP", "tpu"))).unwrap_err().to_string();
        assert!(e.contains("MOBIUS_TEST_EP=\"tpu\"") && e.contains("cuda:<device id>"), "{e}");
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

    #[test]
    fn the_cap_setting_is_a_positive_number_or_an_error_naming_it() {
        assert_eq!(parse_max_sessions(None).unwrap(), 64);
        assert_eq!(parse_max_sessions(Some(" 3 ")).unwrap(), 3);
        for bad in ["0", "-2", "lots", ""] {
            assert!(parse_max_sessions(Some(bad)).unwrap_err().to_string().contains("MOBIUS_MAX_SESSIONS"), "{bad}");
        }
    }

    #[test]
    fn ci_is_set_unless_empty_zero_or_false() {
        assert!(ci_from(Some("true")) && ci_from(Some("1")) && ci_from(Some("woodpecker")));
        assert!(!ci_from(None) && !ci_from(Some("")) && !ci_from(Some("0")) && !ci_from(Some("false")));
    }
}
