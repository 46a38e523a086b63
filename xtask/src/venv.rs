//! The reference venv: created on first use from the pinned requirements, re-synced when they change.

use std::path::PathBuf;
use std::process::Command;

use mobius_conformance::bootstrap::{target_dir, workspace_root};
use sha2::{Digest, Sha256};

pub fn requirements() -> PathBuf {
    workspace_root().join("xtask").join("reference").join("requirements.txt")
}

pub fn venv_dir() -> PathBuf {
    std::env::var_os("MOBIUS_REFERENCE_VENV").map(PathBuf::from).unwrap_or_else(|| target_dir().join("reference-venv"))
}

pub fn python() -> PathBuf {
    venv_dir().join("bin").join("python")
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("running {cmd:?}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{cmd:?} failed: {status}")) }
}

/// Makes sure the venv exists and matches `requirements.txt`; returns its directory.
pub fn ensure() -> Result<PathBuf, String> {
    let req = requirements();
    let text = std::fs::read(&req).map_err(|e| format!("{}: {e}", req.display()))?;
    let want: String = Sha256::digest(&text).iter().map(|b| format!("{b:02x}")).collect();
    let dir = venv_dir();
    let stamp = dir.join(".requirements.sha256");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == want) && python().is_file() {
        return Ok(dir);
    }
    eprintln!("xtask: setting up the reference venv at {} from {} (torch is large: minutes on first use)", dir.display(), req.display());
    if !python().is_file() {
        let py = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        run(Command::new(&py).args(["-m", "venv"]).arg(&dir))
            .map_err(|e| format!("{e}\ncreating the venv needs Python 3 with the venv module (apt-get install python3-venv)"))?;
    }
    run(Command::new(python()).args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r"]).arg(&req))?;
    std::fs::write(&stamp, &want).map_err(|e| format!("{}: {e}", stamp.display()))?;
    Ok(dir)
}
