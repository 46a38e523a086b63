//! Finds the ONNX Runtime shared library, or installs it once from PyPI into a cache under `target/`.
//!
//! `ort` is built with `load-dynamic`: nothing is downloaded at build time (its default CDN download fails offline).
//! At run time the library comes from `ORT_DYLIB_PATH`, else from the cache, else from `python3 -m pip install
//! --no-deps --require-hashes --target <cache> -r suite/locks/onnxruntime-<version>.txt`: only wheels whose sha256 the
//! lock lists install. Several test processes may start at once: a file lock serialises the install, and the
//! finished tree is renamed into place, so no process sees half an install.
//!
//! The CUDA flavour's lock also pins the NVIDIA wheels (CUDA 13 runtime, cuBLAS, cuFFT, cuRAND, NVRTC, nvJitLink,
//! cuDNN 9) that ONNX Runtime's CUDA provider loads. They land in `<tree>/nvidia/*/lib`, which no loader searches
//! and `LD_LIBRARY_PATH` cannot name once the process runs, so [`locate`] preloads them (see
//! [`preload_cuda_libraries`]) before ONNX Runtime loads `libonnxruntime_providers_cuda.so`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::context::Places;
use crate::error::{At, Error, Result, bail};

/// The ONNX Runtime release the suite is pinned to (the `ort` crate's `api-31` needs >= 1.31).
pub const ORT_VERSION: &str = "1.31.1";

/// Which wheel: the CPU build, or the CUDA build (`onnxruntime-gpu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Cpu,
    Gpu,
}

impl Flavor {
    pub fn package(self) -> &'static str {
        match self {
            Flavor::Cpu => "onnxruntime",
            Flavor::Gpu => "onnxruntime-gpu",
        }
    }

    /// The pinned requirement with the hash of every published wheel (`suite/locks/`).
    pub fn lock(self) -> &'static str {
        match self {
            Flavor::Cpu => include_str!("../../locks/onnxruntime-1.31.1.txt"),
            Flavor::Gpu => include_str!("../../locks/onnxruntime-gpu-1.31.1.txt"),
        }
    }
}

/// Where the cache lives: the build folder `places` names (`CARGO_TARGET_DIR`), else the one this binary was built in
/// (the nearest folder above it holding cargo's `CACHEDIR.TAG`), else the workspace's `target/`. A process told
/// nothing (a test binary) so finds the installs a run under `CARGO_TARGET_DIR` made.
pub fn target_dir(places: &Places) -> PathBuf {
    places.target_dir.clone().unwrap_or_else(|| {
        let exe = std::env::current_exe().ok();
        let built_in = exe.as_deref().and_then(|e| e.ancestors().find(|d| d.join("CACHEDIR.TAG").is_file())).map(Path::to_path_buf);
        built_in.unwrap_or_else(|| crate::paths::workspace_root().join("target"))
    })
}

/// Where the library is, installing it first if need be. For [`Flavor::Gpu`] the NVIDIA libraries found beside it
/// are preloaded too (see [`preload_cuda_libraries`]), so the CUDA provider finds them when a session registers it.
pub fn locate(flavor: Flavor, places: &Places) -> Result<PathBuf> {
    let lib = locate_library(flavor, places)?;
    if flavor == Flavor::Gpu {
        preload_cuda_libraries(&lib, places)?;
    }
    Ok(lib)
}

fn locate_library(flavor: Flavor, places: &Places) -> Result<PathBuf> {
    if let Some(p) = places.ort_library.clone() {
        if !p.is_file() {
            bail!("ORT_DYLIB_PATH is {}, which is not a file; point it at libonnxruntime.so.{ORT_VERSION} or unset it", p.display());
        }
        return Ok(p);
    }
    let cache = target_dir(places).join("onnxruntime").join(format!("{}-{ORT_VERSION}", flavor.package()));
    if let Some(lib) = installed(flavor, &cache) {
        return Ok(lib);
    }
    install(flavor, &cache, places)?;
    installed(flavor, &cache).ok_or_else(|| {
        Error::new(format!(
            "installed {}=={ORT_VERSION} into {} but found no ONNX Runtime library in it",
            flavor.package(),
            cache.display()
        ))
    })
}

/// Records, inside an installed tree, the lock it was installed from.
const STAMP: &str = ".mobius-lock.txt";

/// The library of a finished install. A CUDA tree must also have been installed from today's lock: one from an older
/// lock (before the NVIDIA wheels were in it, say) is installed again. A CPU tree is taken as it is, so an existing
/// cache keeps working offline.
fn installed(flavor: Flavor, cache: &Path) -> Option<PathBuf> {
    let lib = find_library(cache)?;
    if flavor == Flavor::Gpu && fs::read_to_string(cache.join(STAMP)).ok().as_deref() != Some(flavor.lock()) {
        return None;
    }
    Some(lib)
}

/// The shared library inside an installed wheel tree (`onnxruntime/capi/libonnxruntime.so.1.31.1`).
fn find_library(tree: &Path) -> Option<PathBuf> {
    let capi = tree.join("onnxruntime").join("capi");
    let mut hits: Vec<PathBuf> = fs::read_dir(&capi)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            (n.starts_with("libonnxruntime.so") || (n.starts_with("libonnxruntime") && n.ends_with(".dylib")) || n == "onnxruntime.dll")
                && !n.contains("providers")
        })
        .collect();
    hits.sort();
    hits.pop()
}

fn install(flavor: Flavor, cache: &Path, places: &Places) -> Result<()> {
    let what = match flavor {
        Flavor::Cpu => String::new(),
        Flavor::Gpu => " and its NVIDIA CUDA 13 / cuDNN 9 wheels (about 1.6 GB to download, 2.6 GB installed)".into(),
    };
    let done = |c: &Path| installed(flavor, c).is_some();
    install_once(&format!("{}=={ORT_VERSION}{what}", flavor.package()), flavor.lock(), cache, done, places)
}

/// Installs what `lock` pins into `cache`, once per machine: a file lock beside `cache` serialises concurrent
/// processes (one that waited finds the work done, `done(cache)`), the tree is built in a staging folder and renamed
/// into place, so no process ever sees half an install. `what` names it in the one line printed.
pub fn install_once(what: &str, lock: &str, cache: &Path, done: impl Fn(&Path) -> bool, places: &Places) -> Result<()> {
    let parent = cache.parent().expect("cache has a parent");
    fs::create_dir_all(parent).at(parent.display())?;
    let lock_path = parent.join(".install.lock");
    let lock_file = fs::File::create(&lock_path).at(lock_path.display())?;
    lock_file.lock().at(format!("locking {}", lock_path.display()))?;
    // Another process may have finished while we waited for the lock.
    if done(cache) {
        return Ok(());
    }
    let name = cache.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let staging = parent.join(format!(".staging-{name}-{}", std::process::id()));
    eprintln!("mobius-conformance: installing {what} into {} (first run only)", cache.display());
    install_locked(lock, &staging, places)?;
    let stamp = staging.join(STAMP);
    fs::write(&stamp, lock).at(stamp.display())?;
    if cache.exists() {
        fs::remove_dir_all(cache).at(cache.display())?;
    }
    fs::rename(&staging, cache).at(format!("moving {} to {}", staging.display(), cache.display()))?;
    Ok(())
}

/// `pip install --require-hashes --no-deps --target dest -r <lock>`: only the exact bytes the lock names install.
pub fn install_locked(lock: &str, dest: &Path, places: &Places) -> Result<()> {
    let requirement =
        lock.lines().find(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty()).unwrap_or("?").trim_end_matches([' ', '\\']);
    let _ = fs::remove_dir_all(dest);
    let parent = dest.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(parent).at(parent.display())?;
    let lock_file = parent.join(format!(".lock-{}.txt", std::process::id()));
    fs::write(&lock_file, lock).at(lock_file.display())?;
    let python = places.python.clone().unwrap_or_else(|| "python3".into());
    let output = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary=:all:",
            "--require-hashes",
            "--target",
        ])
        .arg(dest)
        .arg("-r")
        .arg(&lock_file)
        .output();
    let _ = fs::remove_file(&lock_file);
    let output = match output {
        Ok(o) => o,
        Err(e) => bail!(
            "could not run `{python} -m pip` to install {requirement}: {e}. Install Python 3 with pip \
             (e.g. `apt-get install python3-pip`), or download the wheel yourself and set \
             ORT_DYLIB_PATH to its onnxruntime/capi/libonnxruntime.so.{ORT_VERSION}"
        ),
    };
    if !output.status.success() {
        let _ = fs::remove_dir_all(dest);
        bail!(
            "`{python} -m pip install --require-hashes {requirement}` failed ({}):\n{}{}\nIf pip is missing, install it \
             (`apt-get install python3-pip`) or set ORT_DYLIB_PATH to an existing libonnxruntime.so.{ORT_VERSION}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// The NVIDIA libraries ONNX Runtime 1.31.1's CUDA provider loads (it is a CUDA 13.0 build; cuDNN 9), each after
/// the ones it needs. cuDNN's own sub-libraries are not listed: `libcudnn.so.9` opens them from its directory when it
/// needs them. Interposers that would replace symbols process-wide (`libnvblas`, `libcufftw`) are never loaded.
pub const CUDA_LIBRARIES: &[&str] = &[
    "libcudart.so.13",
    "libcublasLt.so.13",
    "libcublas.so.13",
    "libnvJitLink.so.13",
    "libnvrtc.so.13",
    "libcurand.so.10",
    "libcufft.so.12",
    "libcudnn.so.9",
];

/// Loads the NVIDIA libraries of the `nvidia-*` wheels installed next to `ort_lib` (the ONNX Runtime library), with
/// `RTLD_NOW | RTLD_GLOBAL`, in the order of [`CUDA_LIBRARIES`], and returns the files it loaded.
///
/// The wheels put them in `<site-packages>/nvidia/{cu13,cudnn,...}/lib`; the `nvidia/` folder is looked for beside
/// `ort_lib` and up to three folders above it (`onnxruntime/capi/lib...` puts it two above), which covers both the
/// bootstrap's own install and an `ORT_DYLIB_PATH` into a Python environment. Once loaded, a library is what the
/// dynamic loader hands ONNX Runtime's CUDA provider when it asks for that name, wherever the provider would have
/// searched; they stay loaded for the life of the process.
///
/// Nothing to load is not an error: with no `nvidia/` folder (e.g. CUDA installed system-wide, or not at all) or a
/// library missing from it, this loads what it finds, possibly nothing, and ONNX Runtime's strict CUDA registration
/// then succeeds from the system's libraries or fails with its own message. A library that is there but does not load
/// (damaged, wrong architecture, a missing dependency) is an error naming the file and the loader's reason.
pub fn preload_cuda_libraries(ort_lib: &Path, places: &Places) -> Result<Vec<PathBuf>> {
    let Some(nvidia) = nvidia_tree(ort_lib) else {
        return Ok(Vec::new());
    };
    let mut lib_dirs: Vec<PathBuf> =
        fs::read_dir(&nvidia).at(nvidia.display())?.filter_map(|e| e.ok().map(|e| e.path().join("lib"))).filter(|d| d.is_dir()).collect();
    lib_dirs.sort();
    let mut loaded = Vec::new();
    for name in CUDA_LIBRARIES {
        let Some(path) = lib_dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()) else {
            continue;
        };
        load_global(&path).map_err(|e| {
            Error::new(format!(
                "preloading {} for ONNX Runtime's CUDA execution provider: {e}. The NVIDIA wheel that holds it is \
                 damaged or incomplete: reinstall it (for the suite's own install, delete {} and run again)",
                path.display(),
                target_dir(places).join("onnxruntime").join(format!("{}-{ORT_VERSION}", Flavor::Gpu.package())).display()
            ))
        })?;
        loaded.push(path);
    }
    Ok(loaded)
}

/// The `nvidia/` folder of the Python tree the ONNX Runtime library sits in, if any.
fn nvidia_tree(ort_lib: &Path) -> Option<PathBuf> {
    let real = fs::canonicalize(ort_lib).ok();
    [Some(ort_lib), real.as_deref()]
        .into_iter()
        .flatten()
        .filter_map(Path::parent)
        .flat_map(|dir| dir.ancestors().take(4))
        .map(|dir| dir.join("nvidia"))
        .find(|n| n.is_dir())
}

#[cfg(unix)]
fn load_global(path: &Path) -> std::result::Result<(), String> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: loading runs the library's initialisers. These are NVIDIA's runtime libraries, from hash-pinned wheels
    // or the environment ORT_DYLIB_PATH names; the CUDA provider would load and initialise the same files itself.
    let library = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }.map_err(|e| e.to_string())?;
    // Never unloaded: the CUDA provider binds to it for the life of the process.
    let _ = library.into_raw();
    Ok(())
}

#[cfg(not(unix))]
fn load_global(path: &Path) -> std::result::Result<(), String> {
    // The NVIDIA wheels' Windows DLLs are `bin/*.dll`: no file of these names is there to reach this.
    Err(format!("{} is a Linux library", path.display()))
}
