//! A built package checked against the manifest its builder recorded, before any of it reaches ONNX Runtime.
//!
//! The manifest (`fixtures/real/MANIFEST.json` for the real tier) names, for every file it covers, a path relative
//! to its `root` (a folder relative to the suite root), the file's sha256 and its size in bytes. A trial checks
//! every file the manifest lists under its package: present, the recorded size (a truncated `model.onnx.data` is
//! caught here, not by ONNX Runtime's own error), and the recorded sha256.
//!
//! Hashing a real package's gigabytes on every run would cost more than the trials, so the hash comes from the
//! builder's stamp when it can: `<package>/.stamp.json` holds `{"files": {"<path>": [size, mtime_ns, sha256]}}` for
//! what the builder wrote. While a file's size and modification time are the stamp's, the stamp's sha256 stands for
//! the file's; when they differ (the file was touched or replaced), the file is hashed in full. Each file is verified
//! once per process, however many trials read it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::UNIX_EPOCH;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::error::{At, Error, Result, bail};

/// A builder's record of the files it made.
#[derive(Debug)]
pub struct Manifest {
    /// The manifest file, as the suite names it (relative to the suite root).
    pub file: String,
    /// The folder its paths are relative to.
    pub root: PathBuf,
    pub files: BTreeMap<String, Recorded>,
}

/// One file as the builder recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub sha256: String,
    pub size: u64,
}

#[derive(Deserialize)]
struct Raw {
    root: Option<String>,
    #[serde(default)]
    files: BTreeMap<String, String>,
    #[serde(default)]
    sizes: BTreeMap<String, u64>,
}

impl Manifest {
    /// Reads `file` (relative to `suite_root`), whose `root` field names the folder its paths are relative to.
    pub fn load(suite_root: &Path, file: &str) -> Result<Manifest> {
        let path = suite_root.join(file);
        let text = std::fs::read_to_string(&path).at(file)?;
        Manifest::parse(suite_root, file, &text)
    }

    pub fn parse(suite_root: &Path, file: &str, text: &str) -> Result<Manifest> {
        let raw: Raw = serde_json::from_str(text).map_err(|e| Error::new(format!("{file}: {e}")))?;
        let Some(root) = raw.root.filter(|r| !r.trim().is_empty()) else {
            bail!("{file}: field `root` is missing: the folder, relative to the suite root, that its `files` are relative to");
        };
        if raw.files.is_empty() {
            bail!("{file}: field `files` lists no file");
        }
        let mut files = BTreeMap::new();
        for (name, sha256) in raw.files {
            let plain = Path::new(&name).components().all(|c| matches!(c, std::path::Component::Normal(_)));
            if !plain || name.contains('\\') {
                bail!("{file}: field `files` names {name:?}, which is not a plain relative path below `root`");
            }
            if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!("{file}: field `files.{name}` is not a sha256 (64 hex digits)");
            }
            let Some(&size) = raw.sizes.get(&name) else {
                bail!("{file}: field `sizes` has no entry for `{name}` (rebuild the manifest with the builder's --record)");
            };
            files.insert(name, Recorded { sha256: sha256.to_ascii_lowercase(), size });
        }
        if let Some(extra) = raw.sizes.keys().find(|k| !files.contains_key(*k)) {
            bail!("{file}: field `sizes` has `{extra}`, which `files` does not list");
        }
        Ok(Manifest { file: file.to_string(), root: suite_root.join(root), files })
    }

    /// The files it records under `dir` (a folder below its root), by their path relative to `dir`.
    fn under(&self, dir: &Path) -> Result<(String, Vec<(&str, &Recorded)>)> {
        let Ok(rel) = dir.strip_prefix(&self.root) else {
            bail!("{} lies outside {}, the folder the manifest {} describes", dir.display(), self.root.display(), self.file);
        };
        let prefix = rel.to_string_lossy().replace('\\', "/");
        let files: Vec<_> = self
            .files
            .iter()
            .filter_map(|(name, r)| name.strip_prefix(&prefix).and_then(|n| n.strip_prefix('/')).map(|n| (n, r)))
            .collect();
        if files.is_empty() {
            bail!("the manifest {} records no file under `{prefix}/`", self.file);
        }
        Ok((prefix, files))
    }
}

/// What one file of a package is when it is not what the manifest recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    Missing,
    Size {
        got: u64,
    },
    /// `from_stamp`: the sha256 is the one the builder's stamp records for the file as it is (size and mtime match).
    Sha256 {
        got: String,
        from_stamp: bool,
    },
}

/// A file of the package that disagrees with the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bad {
    /// Its path as the manifest names it.
    pub name: String,
    pub recorded: Recorded,
    pub mismatch: Mismatch,
}

/// How a package's files were verified.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checked {
    pub files: usize,
    /// Files whose sha256 was computed here (the rest stood on the builder's stamp, or on an earlier trial's check).
    pub hashed: usize,
}

/// Checks every file `manifest` records under `dir`: the first file that disagrees, or how many were checked.
pub fn check(manifest: &Manifest, dir: &Path) -> Result<std::result::Result<Checked, Bad>> {
    let (prefix, files) = manifest.under(dir)?;
    let stamp = Stamp::read(dir);
    let mut checked = Checked::default();
    for (rel, recorded) in files {
        let path = dir.join(rel);
        let bad = |mismatch| Bad { name: format!("{prefix}/{rel}"), recorded: recorded.clone(), mismatch };
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Err(bad(Mismatch::Missing))),
            Err(e) => bail!("{}: {e}", path.display()),
        };
        if meta.len() != recorded.size {
            return Ok(Err(bad(Mismatch::Size { got: meta.len() })));
        }
        let mtime = meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos());
        let key = (path.clone(), meta.len(), mtime, recorded.sha256.clone());
        checked.files += 1;
        if verified().lock().map(|v| v.contains(&key)).unwrap_or(false) {
            continue;
        }
        let from_stamp = stamp.get(rel).filter(|s| s.size == meta.len() && s.mtime_ns == mtime).map(|s| s.sha256.clone());
        let (sha, stamped) = match from_stamp {
            Some(s) => (s, true),
            None => {
                let (sha, computed) = hash_once(&key)?;
                checked.hashed += usize::from(computed);
                (sha, false)
            }
        };
        if sha != recorded.sha256 {
            return Ok(Err(bad(Mismatch::Sha256 { got: sha, from_stamp: stamped })));
        }
        if let Ok(mut v) = verified().lock() {
            v.insert(key);
        }
    }
    Ok(Ok(checked))
}

type Key = (PathBuf, u64, u128, String);

fn verified() -> &'static Mutex<HashSet<Key>> {
    static V: OnceLock<Mutex<HashSet<Key>>> = OnceLock::new();
    V.get_or_init(Mutex::default)
}

/// A file's sha256 as it is now (its path, size and mtime: a file rewritten in place is hashed again), computed once
/// per process even when several trials ask at once; and whether this call computed it.
fn hash_once(key: &Key) -> Result<(String, bool)> {
    type Cell = Arc<OnceLock<std::result::Result<String, String>>>;
    type AsItIs = (PathBuf, u64, u128);
    static HASHES: OnceLock<Mutex<HashMap<AsItIs, Cell>>> = OnceLock::new();
    let cell = {
        let mut m = HASHES.get_or_init(Mutex::default).lock().map_err(|_| Error::new("integrity: hash table poisoned"))?;
        m.entry((key.0.clone(), key.1, key.2)).or_default().clone()
    };
    let mut computed = false;
    let sha = cell.get_or_init(|| {
        computed = true;
        sha256_file(&key.0).map_err(|e| e.to_string())
    });
    sha.clone().map(|s| (s, computed)).map_err(Error::new)
}

pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).at(path.display())?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).at(path.display())?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(crate::digest::hex(h))
}

struct StampEntry {
    size: u64,
    mtime_ns: u128,
    sha256: String,
}

/// The builder's `.stamp.json` of a folder; an unreadable or foreign one is no stamp (every file is then hashed).
struct Stamp(HashMap<String, StampEntry>);

impl Stamp {
    fn read(dir: &Path) -> Stamp {
        let text = std::fs::read_to_string(dir.join(".stamp.json")).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let mut out = HashMap::new();
        if let Some(files) = v["files"].as_object() {
            for (rel, e) in files {
                if let (Some(size), Some(mtime), Some(sha)) = (e[0].as_u64(), e[1].as_u64(), e[2].as_str()) {
                    out.insert(rel.clone(), StampEntry { size, mtime_ns: u128::from(mtime), sha256: sha.to_ascii_lowercase() });
                }
            }
        }
        Stamp(out)
    }

    fn get(&self, rel: &str) -> Option<&StampEntry> {
        self.0.get(rel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "0000000000000000000000000000000000000000000000000000000000000000";

    #[test]
    fn a_manifest_states_its_root_and_a_size_for_every_file() {
        let root = Path::new("/suite");
        let ok = format!(r#"{{"root": "target/real", "files": {{"m/a": "{SHA}"}}, "sizes": {{"m/a": 3}}}}"#);
        let m = Manifest::parse(root, "M.json", &ok).unwrap();
        assert_eq!(m.root, root.join("target/real"));
        assert_eq!(m.files["m/a"], Recorded { sha256: SHA.into(), size: 3 });
        let no_root = format!(r#"{{"files": {{"m/a": "{SHA}"}}, "sizes": {{"m/a": 3}}}}"#);
        assert!(Manifest::parse(root, "M.json", &no_root).unwrap_err().to_string().contains("field `root`"));
        let no_size = format!(r#"{{"root": "r", "files": {{"m/a": "{SHA}"}}}}"#);
        assert!(Manifest::parse(root, "M.json", &no_size).unwrap_err().to_string().contains("no entry for `m/a`"));
        let bad_sha = r#"{"root": "r", "files": {"m/a": "abc"}, "sizes": {"m/a": 3}}"#;
        assert!(Manifest::parse(root, "M.json", bad_sha).unwrap_err().to_string().contains("`files.m/a` is not a sha256"));
        for escape in ["m/../../etc/passwd", "/etc/passwd"] {
            let text = format!(r#"{{"root": "r", "files": {{"{escape}": "{SHA}"}}, "sizes": {{"{escape}": 3}}}}"#);
            let e = Manifest::parse(root, "M.json", &text).unwrap_err().to_string();
            assert!(e.contains("not a plain relative path"), "{escape}: {e}");
        }
        let extra = format!(r#"{{"root": "r", "files": {{"m/a": "{SHA}"}}, "sizes": {{"m/a": 3, "m/b": 1}}}}"#);
        assert!(Manifest::parse(root, "M.json", &extra).unwrap_err().to_string().contains("`m/b`"));
    }
}
