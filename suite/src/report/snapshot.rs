//! Reviewable snapshots of divergent L5 streams, with insta's conventions.
//!
//! When a stream diverges and fails, the readable story (both texts, a token table around the first divergence
//! with the reference's margins) becomes an insta snapshot: locally a `.snap.new` for `cargo insta review`, under
//! `CI` nothing is written. An accepted (committed) snapshot is the reviewed expectation for that one variant:
//! the trial passes while the output equals it and fails with a diff when it changes.

use std::cell::Cell;
use std::fmt::Write;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Once;

use crate::judge::golden::GenerationGolden;
use crate::judge::stream::{DivergenceKind, GenerationReport};

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// insta reports a mismatch by panicking after printing its diff; that panic is the expected way a snapshot check
/// ends, so its "thread panicked" line and backtrace are noise. Panics elsewhere still reach the previous hook.
fn quiet_panics_here() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
}

/// `goldens/<task>/snapshots/<case>__<modality>__<ep>__<dtype>__L5.snap`.
pub fn path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.snap"))
}

/// Only integers, decoded text and the golden's own margins: nothing a kernel change could nudge without changing
/// the tokens too, so an accepted snapshot stays equal on every machine that produces the same stream.
pub fn render(
    trial: &str,
    r: &GenerationReport,
    golden: &GenerationGolden,
    token: &dyn Fn(i64) -> String,
    text: &dyn Fn(&[i64]) -> String,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "trial: {trial}");
    match &r.first_divergence {
        None => {
            let _ = writeln!(s, "stream: equal to the golden ({} tokens)", r.expected.len());
        }
        Some(d) => {
            let kind = match d.kind {
                DivergenceKind::NearTieFlip => "near-tie flip",
                DivergenceKind::Real => "real divergence",
                DivergenceKind::Unclassified => "unclassified",
            };
            let _ = writeln!(s, "first divergence: step {} ({kind})", d.index);
        }
    }
    let _ = writeln!(s, "token match: {}/{}", r.matches, r.expected.len().max(r.got.len()));
    let _ = writeln!(s, "golden text: {:?}", text(&r.expected));
    let _ = writeln!(s, "onnx text:   {:?}", text(&r.got));
    let _ = writeln!(s);
    let _ = writeln!(s, "  step | golden                   | onnx                     | reference top1-top2");
    let n = r.expected.len().max(r.got.len());
    let (lo, hi) = match &r.first_divergence {
        Some(d) => (d.index.saturating_sub(3), (d.index + 5).min(n)),
        None => (0, n.min(8)),
    };
    for i in lo..hi {
        let cell = |v: &[i64]| v.get(i).map_or_else(|| "-".to_string(), |&t| format!("{t} {:?}", token(t)));
        let mark = if r.expected.get(i) != r.got.get(i) { '*' } else { ' ' };
        let margin = golden.steps.get(i).and_then(|st| st.margin()).map_or_else(|| "n/a".into(), |m| format!("{m:.4}"));
        let _ = writeln!(s, "{mark}{i:>5} | {:<24} | {:<24} | {margin}", cell(&r.expected), cell(&r.got));
    }
    if let Some(tf) = &r.teacher_forced {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "teacher-forced: {}/{} steps agree; near-tie flips at {:?}; real disagreements at {:?}",
            tf.agree, tf.steps, tf.near_tie_disagreements, tf.real_disagreements
        );
    }
    s
}

/// A snapshot file's content below insta's header (`---` ... `---`).
fn body(file: &str) -> &str {
    file.strip_prefix("---\n").and_then(|rest| rest.split_once("\n---\n")).map_or(file, |(_, body)| body)
}

/// Where `got` first differs from the reviewed `want`, line by line: the line's number and both lines.
fn first_difference(want: &str, got: &str) -> String {
    let (w, g): (Vec<&str>, Vec<&str>) = (want.trim_end().lines().collect(), got.trim_end().lines().collect());
    match (0..w.len().max(g.len())).find(|&i| w.get(i) != g.get(i)) {
        Some(i) => format!(
            "line {} of the reviewed snapshot is {:?}, the stream's is {:?}",
            i + 1,
            w.get(i).copied().unwrap_or("(none)"),
            g.get(i).copied().unwrap_or("(none)")
        ),
        None => "the same lines (insta's metadata differs)".to_string(),
    }
}

/// The pending snapshot insta writes beside `file` for review (`<name>.snap.new`).
pub fn pending(file: &Path) -> PathBuf {
    let mut p = file.as_os_str().to_owned();
    p.push(".new");
    PathBuf::from(p)
}

/// Compares `content` with the committed snapshot through insta. `Ok(())` when it matches; otherwise the message
/// to show (insta has printed the diff, and written a `.snap.new` unless running under CI).
pub fn assert(
    dir: &Path,
    name: &str,
    content: &str,
    description: &str,
    root: &Path,
    mode: crate::context::SnapshotMode,
) -> Result<(), String> {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(dir);
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings.set_description(description);
    quiet_panics_here();
    QUIET.with(|q| q.set(true));
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| settings.bind(|| insta::assert_snapshot!(name, content))));
    QUIET.with(|q| q.set(false));
    match result {
        Ok(()) => Ok(()),
        Err(_) => {
            let snap = crate::paths::relative(root, &path(dir, name));
            let written = if mode == crate::context::SnapshotMode::NoUpdate {
                "nothing written (CI is set)".to_string()
            } else {
                format!("new output written to {snap}.new")
            };
            let differs = match std::fs::read_to_string(path(dir, name)) {
                Ok(committed) => first_difference(body(&committed), content),
                Err(_) => "no reviewed snapshot yet".to_string(),
            };
            Err(format!(
                "snapshot {snap} does not match: {differs}; {written}.\n  review: cargo insta review (accept to make this \
                 token divergence the reviewed expectation for this variant)"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_differing_line_is_named_with_both_sides() {
        let file = "---\nsource: x\ndescription: y\n---\na\nb\nc\n";
        assert_eq!(body(file), "a\nb\nc\n");
        assert_eq!(first_difference(body(file), "a\nB\nc\n"), "line 2 of the reviewed snapshot is \"b\", the stream's is \"B\"");
        assert_eq!(first_difference("a\n", "a\nmore\n"), "line 2 of the reviewed snapshot is \"(none)\", the stream's is \"more\"");
    }
}
