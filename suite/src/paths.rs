//! Where the suite may read: files inside its root. A case reaches elsewhere only when it says
//! `external_paths: true`; goldens, case files, tolerances and snapshots never do.
//!
//! Two checks, because a path can leave a folder in two ways: by its text (absolute, or `..` above the folder),
//! checked before anything is opened; and through a symlink inside the folder, checked by resolving it.

use std::path::{Component, Path, PathBuf};

use crate::error::{Result, bail};

/// Whether `p`, joined to a folder, stays inside it by its text: not absolute (in any platform's spelling), and no
/// `..` climbing above the folder.
pub fn stays_inside(p: &str) -> bool {
    let path = Path::new(p);
    if path.is_absolute() || p.starts_with('/') || p.starts_with('\\') || p.get(1..3) == Some(":\\") || p.get(1..3) == Some(":/") {
        return false;
    }
    let mut depth = 0i32;
    for c in p.split(['/', '\\']) {
        match c {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => depth += 1,
        }
    }
    true
}

/// Whether `p` is one plain file name: no folder, no `.`/`..`, nothing a join could take elsewhere.
pub fn is_plain_name(p: &str) -> bool {
    !p.is_empty() && p != "." && p != ".." && !p.contains(['/', '\\', '\0']) && p.get(1..2) != Some(":")
}

/// `path` with its symlinks resolved; when it does not exist, its deepest existing ancestor resolved, with the rest
/// appended (so a missing file under a symlinked folder still resolves to where it would be).
fn resolve(path: &Path) -> Option<PathBuf> {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            let mut out = real;
            for c in rest.iter().rev() {
                out.push(c);
            }
            return Some(out);
        }
        match (at.file_name(), at.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                at = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
            }
            _ => return None,
        }
    }
}

/// Whether `path`, symlinks resolved, lies inside `folder` (symlinks resolved too).
pub fn is_within(folder: &Path, path: &Path) -> bool {
    match (resolve(folder), resolve(path)) {
        (Some(f), Some(p)) => p.starts_with(&f) && !p.components().any(|c| c == Component::ParentDir),
        _ => false,
    }
}

/// Errs when `path` resolves (through symlinks) to a place outside `root`. `what` names the file or field in the
/// message, `hint` says what to do; the message names paths only, never what the file holds.
pub fn confine(root: &Path, path: &Path, what: &str, hint: &str) -> Result<()> {
    if is_within(root, path) {
        return Ok(());
    }
    let shown = path.strip_prefix(root).unwrap_or(path).to_string_lossy().replace('\\', "/");
    let to = resolve(path).map_or_else(|| "an unresolvable place".to_string(), |p| p.display().to_string());
    bail!("{what}: {shown} resolves to {to}, outside the suite root {} (a symlink leaves it); {hint}", root.display())
}

/// Checks a path a case (or a task it runs) names, relative to `root`: unless `external`, by its text and through
/// symlinks it must stay inside. Returns whether it is inside (a file outside is read by opt-in only, and never
/// echoed in a message).
pub fn check_case_path(root: &Path, p: &str, external: bool, what: &str) -> Result<bool> {
    let inside = stays_inside(p) && is_within(root, &root.join(p));
    if !inside && !external {
        if !stays_inside(p) {
            bail!("{what}: path {p:?} leaves the suite root; paths are relative to the folder holding `cases/`; {CASE_HINT}");
        }
        confine(root, &root.join(p), what, CASE_HINT)?;
    }
    Ok(inside)
}

/// A parse error for a file outside the root, which may hold anything (a key of `/etc/shadow` would show in
/// "unknown field ..."): the file and where, never what the parser quoted from it.
pub fn withheld(file: &str, message: &str) -> crate::Error {
    // serde's own suffix (" at line 3, column 7"), or a JSONL reader's `file:3:` prefix.
    let at = message.rfind(" at line ").map(|i| message[i + 1..].lines().next().unwrap_or("").trim()).unwrap_or("");
    let line = message.split(": ").next().and_then(|f| f.rsplit(':').next()).filter(|n| n.parse::<usize>().is_ok());
    let at = match (at, line) {
        ("", Some(n)) => format!("at line {n}"),
        (at, _) => at.to_string(),
    };
    let at = if at.is_empty() { String::new() } else { format!(" {at}") };
    crate::Error::new(format!(
        "{file}: does not parse{at} (the parser's message is withheld: the file lies outside the suite root and may hold anything)"
    ))
}

/// Errs when `path` exists but is not a regular file (a FIFO would block a read forever, a device never end).
pub fn regular_file(path: &Path, what: &str) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() && !m.is_dir() => bail!("{what}: {} is not a regular file (a FIFO, socket or device?)", path.display()),
        _ => Ok(()),
    }
}

/// The hint for paths a case names: how to allow them.
pub const CASE_HINT: &str = "set `external_paths: true` in the case if it really must read files elsewhere";

/// The hint for files the suite derives from the root (goldens, snapshots, case files, tolerances).
pub const SUITE_HINT: &str = "the suite reads these only inside its root: replace the symlink with the file itself";

/// `path` relative to `root`, with `/` separators, for messages.
pub fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).to_string_lossy().replace('\\', "/")
}

/// The repository root (the folder holding the workspace `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_checks() {
        for bad in ["/etc/passwd", "\\x", "C:\\x", "c:/x", "..", "a/../..", "../a", "a/b/../../../c"] {
            assert!(!stays_inside(bad), "{bad}");
        }
        for good in ["a", "a/b", "a/../b", "./a", "a/b/.."] {
            assert!(stays_inside(good), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "a\\b", "c:x", "/x"] {
            assert!(!is_plain_name(bad), "{bad}");
        }
        assert!(is_plain_name("x.logits.safetensors"));
    }
}
