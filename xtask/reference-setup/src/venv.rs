//! The reference venv: created on first use from the hash-locked requirements, re-synced when the lock changes.
//!
//! `xtask/reference/requirements.txt` holds the human-edited top-level pins; `requirements.lock` beside it (written by
//! `lock.py`) holds the full transitive closure, every distribution pinned with `==` and the sha256 of each file pip
//! may take for it. Only the lock installs, with `pip install --require-hashes --no-deps`: a package nobody listed, a
//! changed version or a swapped file is an error, never a quiet install. sdists are built with
//! `--no-build-isolation`, against the build tools the lock itself pins (installed first, hash-checked), because an
//! isolated build would fetch setuptools from the index unchecked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{target_dir, workspace_root};
use sha2::{Digest, Sha256};

/// Distributions an sdist build in the venv needs; installed from the lock before anything else.
const BUILD_TOOLS: [&str; 2] = ["setuptools", "wheel"];

fn reference_dir() -> PathBuf {
    workspace_root().join("xtask").join("reference")
}

pub fn requirements() -> PathBuf {
    reference_dir().join("requirements.txt")
}

pub fn lock() -> PathBuf {
    reference_dir().join("requirements.lock")
}

pub fn venv_dir() -> PathBuf {
    std::env::var_os("MOBIUS_REFERENCE_VENV").map(PathBuf::from).unwrap_or_else(|| target_dir().join("reference-venv"))
}

pub fn python() -> PathBuf {
    venv_dir().join("bin").join("python")
}

/// `python -m reference.<module>` in the venv (made first if needed): the reference side is one Python package,
/// `xtask/reference`, found through `PYTHONPATH` (the folder above it), so every module imports its siblings by name
/// and paths given on the command line stay relative to the caller's folder. Offline, unbuffered, quiet.
pub fn reference_command(module: &str) -> Result<Command, String> {
    ensure()?;
    package_command(module)
}

/// `python -m reference.<module>` in the scratch venv that holds lmms-eval 0.7.3 without its runtime
/// (`xtask/reference/lmms-eval.lock`, hash-checked; made under target/ on first use, remade when the lock changes):
/// lmms-eval's pins cannot share the reference venv's, and its scorers need only a few packages.
pub fn lmms_eval_command(module: &str) -> Result<Command, String> {
    let lock = reference_dir().join("lmms-eval.lock");
    let lock_text = read(&lock)?;
    parse_lock(&lock_text).map_err(|e| format!("{}: {e}", lock.display()))?;
    let want = sha256_hex(lock_text.as_bytes());
    let dir = target_dir().join("lmms-eval-venv");
    let python = dir.join("bin").join("python");
    let stamp = dir.join(".lock.sha256");
    if !(std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == want) && python.is_file()) {
        eprintln!("xtask: making the lmms-eval venv at {} from {}", dir.display(), lock.display());
        let _ = std::fs::remove_dir_all(&dir);
        let py = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        run(Command::new(&py).args(["-m", "venv"]).arg(&dir))
            .map_err(|e| format!("{e}\ncreating the venv needs Python 3 with the venv module (apt-get install python3-venv)"))?;
        run(Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--require-hashes", "--no-deps", "-r"])
            .arg(&lock))?;
        std::fs::write(&stamp, &want).map_err(|e| format!("{}: {e}", stamp.display()))?;
    }
    package_command_with(&python, module)
}

/// [`reference_command`] in the venv as it is, not synced first: for `lock`, which reads a venv that a changed
/// requirements.txt was just installed into (syncing would refuse the lock as stale, or undo the install).
fn package_command(module: &str) -> Result<Command, String> {
    if !python().is_file() {
        return Err(format!("no reference venv at {}: run `cargo xtask venv` first", venv_dir().display()));
    }
    package_command_with(&python(), module)
}

/// `python -m reference.<module>` with `python`, the reference package on `PYTHONPATH`.
fn package_command_with(python: &Path, module: &str) -> Result<Command, String> {
    let mut cmd = Command::new(python);
    let xtask = reference_dir().parent().expect("xtask/reference has a parent").to_path_buf();
    let path = std::env::join_paths(std::iter::once(xtask).chain(std::env::var_os("PYTHONPATH").iter().flat_map(std::env::split_paths)))
        .map_err(|e| format!("PYTHONPATH: {e}"))?;
    cmd.arg("-m")
        .arg(format!("reference.{module}"))
        .env("PYTHONPATH", path)
        .env("PYTHONUNBUFFERED", "1")
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_VERBOSITY", "error");
    Ok(cmd)
}

/// `cargo xtask lock [--check]`: rewrite requirements.lock from the venv (`reference.lock`), or check it is current.
pub fn lock_task(args: &[String]) -> Result<(), String> {
    if let Some(other) = args.iter().find(|a| *a != "--check") {
        return Err(format!("lock: unknown option `{other}`"));
    }
    run(package_command("lock")?.args(args))
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("running {cmd:?}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{cmd:?} failed: {status}")) }
}

/// A distribution name as pip compares them (PEP 503): lower case, runs of `-`, `_`, `.` as one `-`.
fn canonical(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// `name==version`, with a name pip accepts and a plain version (no extras, markers, wildcards or ranges).
fn pin(spec: &str) -> Option<(String, String)> {
    let (name, version) = spec.split_once("==")?;
    let name_ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let version_ok = !version.is_empty() && version.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '!' | '-' | '_'));
    (name_ok && version_ok).then(|| (name.to_string(), version.to_string()))
}

/// One entry of the lock.
#[derive(Debug, Clone, PartialEq)]
pub struct Locked {
    pub name: String,
    pub version: String,
    pub hashes: Vec<String>,
}

impl Locked {
    fn render(&self) -> String {
        let mut s = format!("{}=={}", self.name, self.version);
        for h in &self.hashes {
            s.push_str(&format!(" \\\n    --hash=sha256:{h}"));
        }
        s.push('\n');
        s
    }
}

/// Parses a lock: logical lines (`\` continues one), each exactly `name==version` followed by one or more
/// `--hash=sha256:<64 lower-case hex>`; comments and blank lines aside, nothing else is accepted.
pub fn parse_lock(text: &str) -> Result<BTreeMap<String, Locked>, String> {
    let mut out = BTreeMap::new();
    let mut logical = String::new();
    let mut start = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if logical.is_empty() {
            start = i + 1;
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                logical.push_str(head);
                logical.push(' ');
                continue;
            }
            None => logical.push_str(line),
        }
        let entry = std::mem::take(&mut logical);
        let mut words = entry.split_whitespace();
        let spec = words.next().unwrap_or_default();
        let (name, version) = pin(spec).ok_or_else(|| format!("line {start}: `{spec}` is not pinned as name==version"))?;
        let mut hashes = Vec::new();
        for w in words {
            let h = w
                .strip_prefix("--hash=sha256:")
                .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
                .ok_or_else(|| format!("line {start} ({name}): `{w}` is not --hash=sha256:<64 hex digits>"))?;
            hashes.push(h.to_string());
        }
        if hashes.is_empty() {
            return Err(format!("line {start}: {name}=={version} has no --hash=sha256:"));
        }
        if out.insert(canonical(&name), Locked { name: name.clone(), version, hashes }).is_some() {
            return Err(format!("line {start}: {name} is locked twice"));
        }
    }
    if !logical.is_empty() {
        return Err("the lock ends inside a continued line".into());
    }
    Ok(out)
}

/// The top-level pins of requirements.txt, by canonical name.
pub fn parse_requirements(text: &str) -> Result<BTreeMap<String, (String, String)>, String> {
    let mut out = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let (name, version) = pin(line).ok_or_else(|| format!("line {}: `{line}` is not pinned as name==version", i + 1))?;
        out.insert(canonical(&name), (name, version));
    }
    Ok(out)
}

/// Parses the lock and checks it against requirements.txt: every top-level pin locked at the same version.
pub fn check_lock(requirements: &str, lock: &str) -> Result<BTreeMap<String, Locked>, String> {
    let locked = parse_lock(lock).map_err(|e| format!("requirements.lock: {e}"))?;
    let pins = parse_requirements(requirements).map_err(|e| format!("requirements.txt: {e}"))?;
    let stale: Vec<String> = pins
        .iter()
        .filter_map(|(key, (name, version))| match locked.get(key) {
            Some(l) if &l.version == version => None,
            Some(l) => Some(format!("{name}: requirements.txt {version}, lock {}", l.version)),
            None => Some(format!("{name}=={version}: not in the lock")),
        })
        .collect();
    if stale.is_empty() {
        Ok(locked)
    } else {
        Err(format!(
            "requirements.lock is stale against requirements.txt:\n  {}\nregenerate it (see the head of requirements.txt): \
             pip install -r requirements.txt into the venv, then run `cargo xtask lock`",
            stale.join("\n  ")
        ))
    }
}

/// The sha256 of `bytes` in lower-case hex: a lock file's stamp (this crate builds without the suite, whose
/// `feed::integrity::sha256_file` xtask uses).
fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Makes sure the venv exists and matches `requirements.lock`; returns its directory.
pub fn ensure() -> Result<PathBuf, String> {
    let (req, lock) = (requirements(), lock());
    let lock_text = read(&lock)?;
    let locked = check_lock(&read(&req)?, &lock_text)?;
    let want = sha256_hex(lock_text.as_bytes());
    let dir = venv_dir();
    let stamp = dir.join(".requirements-lock.sha256");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == want) && python().is_file() {
        return Ok(dir);
    }
    eprintln!("xtask: syncing the reference venv at {} with {} (torch is large: minutes on first use)", dir.display(), lock.display());
    if !python().is_file() {
        let py = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        run(Command::new(&py).args(["-m", "venv"]).arg(&dir))
            .map_err(|e| format!("{e}\ncreating the venv needs Python 3 with the venv module (apt-get install python3-venv)"))?;
    }
    let pip = |file: &Path, extra: &[&str]| {
        run(Command::new(python())
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--require-hashes", "--no-deps"])
            .args(extra)
            .arg("-r")
            .arg(file))
    };
    // The build tools first, hash-checked like the rest, so that sdists build against them and nothing unlocked.
    let tools: String = BUILD_TOOLS.iter().filter_map(|t| locked.get(*t)).map(Locked::render).collect();
    if !tools.is_empty() {
        let file = dir.join(".build-tools.lock");
        std::fs::write(&file, tools).map_err(|e| format!("{}: {e}", file.display()))?;
        pip(&file, &[])?;
    }
    pip(&lock, &["--no-build-isolation"])?;
    // --no-deps trusts the lock to be closed; pip check says when it is not (a dependency missing or at a wrong version).
    let check = Command::new(python())
        .args(["-m", "pip", "check", "--disable-pip-version-check"])
        .output()
        .map_err(|e| format!("running pip check: {e}"))?;
    if !check.status.success() {
        return Err(format!(
            "pip check in the venv: {}{}the lock is not a closed set: regenerate it with `cargo xtask lock`",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        ));
    }
    std::fs::write(&stamp, &want).map_err(|e| format!("{}: {e}", stamp.display()))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn committed_lock_is_well_formed_and_covers_requirements() {
        let lock_text = read(&lock()).unwrap();
        let locked = check_lock(&read(&requirements()).unwrap(), &lock_text).unwrap_or_else(|e| panic!("{e}"));
        // Every non-comment line belongs to an entry: a pin line or a hash line.
        for line in lock_text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let line = line.trim_end_matches('\\').trim();
            assert!(line.starts_with("--hash=sha256:") || line.contains("=="), "stray lock line: {line}");
        }
        // The build tools sdists need are locked too (torch itself depends on setuptools).
        assert!(locked.contains_key("setuptools"), "setuptools missing from the lock");
        assert!(!locked.contains_key("pip"), "pip comes with the venv; the lock must not reinstall it");
        assert!(locked.len() >= parse_requirements(&read(&requirements()).unwrap()).unwrap().len());
    }

    #[test]
    fn parses_continued_entries() {
        let text = format!("# c\nFoo_Bar==1.0 \\\n    --hash=sha256:{H} \\\n    --hash=sha256:{H}\n\nbaz==2.0.post1 --hash=sha256:{H}\n");
        let l = parse_lock(&text).unwrap();
        assert_eq!(l["foo-bar"].version, "1.0");
        assert_eq!(l["foo-bar"].hashes.len(), 2);
        assert_eq!(l["baz"].hashes, vec![H.to_string()]);
        assert_eq!(parse_lock(&l["foo-bar"].render()).unwrap()["foo-bar"], l["foo-bar"]);
    }

    #[test]
    fn rejects_malformed_entries() {
        for bad in [
            "foo>=1.0 --hash=sha256:H".replace('H', H),
            "foo --hash=sha256:H".replace('H', H),
            "foo==1.0".to_string(),
            "foo==1.0 \\\n".to_string(),
            "foo==1.0 --hash=sha256:abc".to_string(),
            "foo==1.0 --hash=md5:H".replace('H', H),
            "foo==1.0 --hash=sha256:H".replace('H', &H.to_uppercase()),
            "foo==1.0 --hash=sha256:H --index-url=http://x".replace('H', H),
            "foo==1.0 --hash=sha256:H\nFOO==1.0 --hash=sha256:H".replace('H', H),
            "foo[bar]==1.0 --hash=sha256:H".replace('H', H),
        ] {
            assert!(parse_lock(&bad).is_err(), "accepted: {bad}");
        }
    }

    #[test]
    fn stale_lock_is_reported() {
        let lock = format!("torch==2.15.0 --hash=sha256:{H}\nhuggingface-hub==1.33.0 --hash=sha256:{H}\n");
        assert!(check_lock("torch==2.15.0\nhuggingface_hub==1.33.0  # comment\n", &lock).is_ok());
        let e = check_lock("torch==2.16.0\n", &lock).unwrap_err();
        assert!(e.contains("torch: requirements.txt 2.16.0, lock 2.15.0"), "{e}");
        let e = check_lock("lm-eval==0.4.13\n", &lock).unwrap_err();
        assert!(e.contains("lm-eval==0.4.13: not in the lock"), "{e}");
        assert!(check_lock("torch>=2\n", &lock).is_err());
    }
}
