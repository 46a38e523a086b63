//! Where the onnxruntime-genai library is (`GENAI_DYLIB_PATH`, else the pinned wheel installed once under `target/`)
//! and its loading, after the suite's own ONNX Runtime and once its wheel's version is checked.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::Library;

use super::api::Api;
use super::version::{GENAI_VERSION, GenaiBuild, check_version, wheel_version};
use crate::context::Places;
use crate::error::{Error, Result, bail};
use crate::run::bootstrap::{self, Flavor};
use crate::run::runtime;

static API: OnceLock<std::result::Result<Api, Error>> = OnceLock::new();

/// The build that goes with an ONNX Runtime build: genai's CUDA wheel with ONNX Runtime's.
pub fn build_for(flavor: Flavor) -> GenaiBuild {
    match flavor {
        Flavor::Cpu => GenaiBuild::Cpu,
        Flavor::Gpu => GenaiBuild::Cuda,
    }
}

/// Where the library is: `GENAI_DYLIB_PATH`, else the pinned wheel of the process's build ([`build_for`]), installed
/// first if need be.
fn locate() -> Result<PathBuf> {
    let settings = runtime::settings();
    if let Some(p) = settings.places.genai_library.clone() {
        if !p.is_file() {
            bail!("GENAI_DYLIB_PATH is {}, which is not a file; point it at libonnxruntime-genai.so or unset it", p.display());
        }
        return Ok(p);
    }
    Ok(library_in(&installed(build_for(settings.flavor), &settings.places)?))
}

/// The installed tree of `build`'s pinned wheel (under the build folder, `onnxruntime-genai/<wheel>-<version>`),
/// installing it with `pip --require-hashes --no-deps` the first time.
pub fn installed(build: GenaiBuild, places: &Places) -> Result<PathBuf> {
    let wheel = build.wheel();
    let cache = bootstrap::target_dir(places).join("onnxruntime-genai").join(format!("{wheel}-{GENAI_VERSION}"));
    let found = |tree: &Path| library_in(tree).is_file();
    if !found(&cache) {
        bootstrap::install_once(&format!("{wheel}=={GENAI_VERSION}"), build.lock(), &cache, found, places)?;
    }
    if !found(&cache) {
        bail!("installed {wheel}=={GENAI_VERSION} into {} but found no {} in it", cache.display(), library_in(&cache).display());
    }
    Ok(cache)
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
        let found = wheel_version(&path);
        check_version(&path, found.as_ref().map(|(_, v)| v.as_str()))?;
        // SAFETY: loading runs the library's initialisers; it is the hash-pinned onnxruntime-genai wheel's own
        // library (or the one GENAI_DYLIB_PATH names), whose C API `api` transcribes from `ort_genai_c.h` of
        // the same release.
        let lib =
            unsafe { Library::new(&path) }.map_err(|e| Error::new(format!("loading onnxruntime-genai from {}: {e}", path.display())))?;
        Api::bind(lib, &path, found.map_or(GenaiBuild::Cpu, |(b, _)| b))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The build of the library the process binds (loading it first).
pub fn loaded_build() -> Result<GenaiBuild> {
    Ok(api()?.build)
}

/// Why a CUDA trial cannot run through the library the process binds: it is genai's CPU build (`GENAI_DYLIB_PATH`
/// names one), which has no CUDA provider. `None` on the CPU, and on CUDA with the CUDA build.
pub fn cpu_build_on_cuda(provider: runtime::Provider) -> Result<Option<String>> {
    if provider == runtime::Provider::Cpu || loaded_build()? == GenaiBuild::Cuda {
        return Ok(None);
    }
    Ok(Some(format!(
        "the onnxruntime-genai library GENAI_DYLIB_PATH names is its CPU build, which has no CUDA provider; genai on \
         CUDA runs the pinned {}=={GENAI_VERSION} (unset GENAI_DYLIB_PATH, or point it at that wheel's library)",
        GenaiBuild::Cuda.wheel()
    )))
}
