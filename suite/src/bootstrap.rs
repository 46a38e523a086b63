//! Finds the ONNX Runtime shared library, or installs it once from PyPI into a cache under `target/`.
//!
//! `ort` is built with `load-dynamic`: nothing is downloaded at build time (its default CDN download fails offline).
//! At run time the library comes from `ORT_DYLIB_PATH`, else from the cache, else from `python3 -m pip install
//! --no-deps --require-hashes --target <cache> -r suite/locks/onnxruntime-<version>.txt`: only wheels whose sha256 the
//! lock lists install. Several test processes may start at once: a file lock serialises the install, and the
//! finished tree is renamed into place, so no process sees half an install.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

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
            Flavor::Cpu => include_str!("../locks/onnxruntime-1.31.1.txt"),
            Flavor::Gpu => include_str!("../locks/onnxruntime-gpu-1.31.1.txt"),
        }
    }
}

/// The workspace's `target/` (or `CARGO_TARGET_DIR`), where the cache lives.
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    workspace_root().join("target")
}

/// The repository root (the folder holding the workspace `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
}

/// Where the library is, installing it first if need be.
pub fn locate(flavor: Flavor) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("ORT_DYLIB_PATH") {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("ORT_DYLIB_PATH is {}, which is not a file; point it at libonnxruntime.so.{ORT_VERSION} or unset it", p.display());
        }
        return Ok(p);
    }
    let cache = target_dir().join("onnxruntime").join(format!("{}-{ORT_VERSION}", flavor.package()));
    if let Some(lib) = find_library(&cache) {
        return Ok(lib);
    }
    install(flavor, &cache)?;
    find_library(&cache).ok_or_else(|| {
        Error::new(format!(
            "installed {}=={ORT_VERSION} into {} but found no ONNX Runtime library in it",
            flavor.package(),
            cache.display()
        ))
    })
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

fn install(flavor: Flavor, cache: &Path) -> Result<()> {
    let parent = cache.parent().expect("cache has a parent");
    fs::create_dir_all(parent).at(parent.display())?;
    let lock_path = parent.join(".install.lock");
    let lock = fs::File::create(&lock_path).at(lock_path.display())?;
    lock.lock().at(format!("locking {}", lock_path.display()))?;
    // Another process may have finished while we waited for the lock.
    if find_library(cache).is_some() {
        return Ok(());
    }
    let staging = parent.join(format!(".staging-{}-{}", flavor.package(), std::process::id()));
    eprintln!("mobius-conformance: installing {}=={ORT_VERSION} into {} (first run only)", flavor.package(), cache.display());
    install_locked(flavor.lock(), &staging)?;
    if cache.exists() {
        fs::remove_dir_all(cache).at(cache.display())?;
    }
    fs::rename(&staging, cache).at(format!("moving {} to {}", staging.display(), cache.display()))?;
    Ok(())
}

/// `pip install --require-hashes --no-deps --target dest -r <lock>`: only the exact bytes the lock names install.
pub fn install_locked(lock: &str, dest: &Path) -> Result<()> {
    let requirement =
        lock.lines().find(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty()).unwrap_or("?").trim_end_matches([' ', '\\']);
    let _ = fs::remove_dir_all(dest);
    let parent = dest.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(parent).at(parent.display())?;
    let lock_file = parent.join(format!(".lock-{}.txt", std::process::id()));
    fs::write(&lock_file, lock).at(lock_file.display())?;
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
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
