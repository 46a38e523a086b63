//! The reference side's set-up: the venv the reference scripts run in (`venv`) and the real tier's models
//! (`real`). A crate of its own with no dependency on the suite: `.ci/run` builds its binary in seconds and runs it
//! beside the workspace's build, since the venv's download and install are mostly waiting on the network and disk.
//! `cargo xtask venv` and `cargo xtask real` run the same code.

use std::path::{Path, PathBuf};

pub mod real;
pub mod venv;

/// The workspace's root: two folders above this crate (`xtask/reference-setup`).
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().and_then(Path::parent).map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Cargo's build folder: `CARGO_TARGET_DIR`, else the workspace's `target/`.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace_root().join("target"), PathBuf::from)
}
