//! Where the onnxruntime-genai library is (`GENAI_DYLIB_PATH`, else the pinned wheel installed once under `target/`)
//! and its loading, after the suite's own ONNX Runtime and once its wheel's version is checked.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::Library;

use super::api::Api;
use super::version::{GENAI_VERSION, check_version, wheel_version};
use crate::error::{Error, Result, bail};
use crate::run::bootstrap;
use crate::run::runtime;

/// The pinned requirement with the hash of every published wheel.
const LOCK: &str = include_str!("../../../locks/onnxruntime-genai-0.18.0.txt");

static API: OnceLock<std::result::Result<Api, Error>> = OnceLock::new();

/// Where the library is, installing the pinned wheel first if need be.
fn locate() -> Result<PathBuf> {
    let places = &runtime::settings().places;
    if let Some(p) = places.genai_library.clone() {
        if !p.is_file() {
            bail!("GENAI_DYLIB_PATH is {}, which is not a file; point it at libonnxruntime-genai.so or unset it", p.display());
        }
        return Ok(p);
    }
    let cache = bootstrap::target_dir(places).join("onnxruntime-genai").join(format!("onnxruntime-genai-{GENAI_VERSION}"));
    let found = |tree: &Path| Some(library_in(tree)).filter(|p| p.is_file());
    if let Some(lib) = found(&cache) {
        return Ok(lib);
    }
    bootstrap::install_once(&format!("onnxruntime-genai=={GENAI_VERSION}"), LOCK, &cache, |c| found(c).is_some(), places)?;
    found(&cache).ok_or_else(|| {
        Error::new(format!(
            "installed onnxruntime-genai=={GENAI_VERSION} into {} but found no {} in it",
            cache.display(),
            library_in(&cache).display()
        ))
    })
}

fn library_in(tree: &Path) -> PathBuf {
    let name = if cfg!(windows) {
        "onnxruntime-genai.dll"
    } else if cfg!(target_os = "macos") {
        "libonnxruntime-genai.dylib"
    } else {
        "libonnxruntime-genai.so"
    };
    tree.join("onnxruntime_genai").join(name)
}

/// The bound API. ONNX Runtime is loaded first (the build the run's device chose), so genai binds to the suite's own.
pub(super) fn api() -> Result<&'static Api> {
    runtime::load()?;
    API.get_or_init(|| {
        let path = locate()?;
        check_version(&path, wheel_version(&path).as_deref())?;
        // SAFETY: loading runs the library's initialisers; it is the hash-pinned onnxruntime-genai wheel's own
        // library (or the one GENAI_DYLIB_PATH names), whose C API `api` transcribes from `ort_genai_c.h` of
        // the same release.
        let lib =
            unsafe { Library::new(&path) }.map_err(|e| Error::new(format!("loading onnxruntime-genai from {}: {e}", path.display())))?;
        Api::bind(lib, &path)
    })
    .as_ref()
    .map_err(Clone::clone)
}
