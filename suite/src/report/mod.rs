//! Turning verdicts into what a person reads: expected, got, where, the policy, and the command that fixes it.

pub mod html;
pub mod json;
pub mod junit;
pub mod markup;
pub mod matrix;
pub mod snapshot;
pub mod summary;
pub mod svg;
pub mod verdict;

use crate::feed::integrity::{Bad, Mismatch};
use crate::judge::finite::{NonFinite, VocabMismatch, VocabSource};
use crate::judge::xfail::Xfail;
use crate::outcome::{Outcome, Settled};

/// What a rendered report needs beyond the verdict: names, paths and token text.
pub struct Context<'a> {
    pub trial: &'a str,
    pub case_file: &'a str,
    pub golden_file: &'a str,
    pub regenerate: &'a str,
    /// What a failure calls for, by the golden's provenance.
    pub next: NextStep,
    pub policy_source: &'a str,
    /// Shows token ids as the package's tokenizer reads them.
    pub tokenizer: &'a crate::feed::tokenizer::TextTokenizer,
}

/// What a measured failure calls for, by the provenance of the golden it was measured against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextStep {
    /// The golden was made by the reference the suite pins (its transformers and torch) on the inputs the case
    /// states: the package changed. `localize` is the command that names the module.
    Package { transformers: String, torch: String, localize: String },
    /// The golden was made by another reference than the one pinned (`changes`): regenerate it.
    Regenerate { changes: Vec<crate::judge::golden::ReferenceChange>, command: String },
    /// The golden says nothing of its reference (mobius' own goldens): either may be.
    Unknown { regenerate: String, localize: String },
}

/// The lines a failure's message ends with, by [`NextStep`]: the package points at localization and offers no
/// regeneration; a changed reference offers it.
pub fn next_step(next: &NextStep) -> String {
    match next {
        NextStep::Package { transformers, torch, localize } => {
            format!("{}; where in the model: {localize}\n", package_changed(transformers, torch))
        }
        NextStep::Regenerate { changes, command } => {
            let why: Vec<String> = changes
                .iter()
                .map(|c| format!("{} {} made this golden, the reference venv pins {}", c.package, c.made, c.pinned))
                .collect();
            format!("  the reference changed ({}): regenerate: {command}\n", why.join("; "))
        }
        NextStep::Unknown { regenerate, localize } => {
            format!("  where in the model: {localize}\n  regenerate (only if the reference changed): {regenerate}\n")
        }
    }
}

/// The line a failure against a current golden starts its next step with: the package changed.
fn package_changed(transformers: &str, torch: &str) -> String {
    format!(
        "  the package changed: the golden is current (made by transformers {transformers}, torch {torch}, the reference \
         the suite pins, on the case's inputs)"
    )
}

/// [`next_step`] for a stream that first fails at decode step `step` (past the first, whose logits are the prompt's
/// last position): localization examines the prompt, which is within tolerance, so it is not offered as where.
pub fn next_step_decoding(next: &NextStep, step: usize) -> String {
    let where_ = format!(
        "  where: the prompt's logits are within tolerance and the stream first fails at step {step}, so the difference \
         arises while decoding (the KV cache, positions past the prompt); `cargo xtask localize` examines the prompt's \
         last position and finds nothing there\n"
    );
    match next {
        NextStep::Package { transformers, torch, .. } => format!("{}\n{where_}", package_changed(transformers, torch)),
        NextStep::Regenerate { .. } => next_step(next),
        NextStep::Unknown { regenerate, .. } => format!("{where_}  regenerate (only if the reference changed): {regenerate}\n"),
    }
}

/// Logits no verdict can reason about: where the first NaN or infinity is. `place` names what computed them (the
/// model file, onnxruntime-genai on the package, a task's document).
pub fn non_finite(trial: &str, place: &str, nf: &NonFinite) -> String {
    match nf {
        NonFinite::Step { step, count, first_id, value } => {
            format!("{trial}: {place}: logits at generation step {step} contain {count} non-finite values; first at id {first_id}: {value}")
        }
        NonFinite::Position { position, of, logsumexp } => {
            format!("{trial}: {place}: logits at prompt position {position} of {of} contain non-finite values (logsumexp {logsumexp})")
        }
    }
}

/// A package file that is not what its builder's manifest recorded.
pub fn integrity(trial: &str, package: &str, manifest: &str, bad: &Bad, build: Option<&str>) -> String {
    let rebuild = build.map_or_else(|| "rebuild it".to_string(), |b| format!("rebuild it with `{b}`"));
    let (what, fix) = match &bad.mismatch {
        Mismatch::Missing => ("is missing".to_string(), rebuild),
        Mismatch::Size { got } => {
            (format!("has {got} bytes where the manifest records {} (truncated or replaced)", bad.recorded.size), rebuild)
        }
        Mismatch::Sha256 { got, from_stamp: false } => {
            (format!("has sha256 {got} where the manifest records {}", bad.recorded.sha256), rebuild)
        }
        // The builder trusts the same stamp, so a plain rebuild would skip the step: the stamp must go first.
        Mismatch::Sha256 { got, from_stamp: true } => (
            format!("is recorded in {package}/.stamp.json with sha256 {got} where the manifest records {}", bad.recorded.sha256),
            format!("delete {package} (its stamp with it) and {rebuild}"),
        ),
    };
    format!("{trial}: package {package} does not match {manifest}: {} {what}; {fix}\n", bad.name)
}

/// A package whose logits rows are not the vocabulary the golden, the package's own config or the ids read state.
/// `golden_file` is what the trial judges against (a golden, or a gate's baseline); `ids_from` holds the ids a
/// `WatchedIds` bound comes from (the golden, or the task's requests); `package` is the package folder.
pub fn vocab_size(
    trial: &str,
    place: &str,
    v: &VocabMismatch,
    golden_file: &str,
    ids_from: &str,
    package: &str,
    regenerate: &str,
) -> String {
    let (expected, fix) = match v.source {
        VocabSource::Golden => (
            format!("{golden_file} has a vocabulary of {}", v.expected),
            format!("regenerate (only if the reference changed): {regenerate}"),
        ),
        VocabSource::WatchedIds => (
            format!("{ids_from} reads ids up to {}, so at least {} are expected", v.expected - 1, v.expected),
            format!("regenerate (only if the reference changed): {regenerate}"),
        ),
        // Goldens cannot fix a package that disagrees with its own config.
        VocabSource::PackageConfig => (
            format!("{package}/genai_config.json states `model.vocab_size` {}", v.expected),
            "the package disagrees with its own config: fix `model.vocab_size` there or rebuild the package".to_string(),
        ),
    };
    format!(
        "{trial}: {place}: vocab_size: expected {}{}, got {}: the package's logits have {} entries per position, but \
         {expected}\n  {fix}\n",
        if v.source == VocabSource::WatchedIds { "at least " } else { "" },
        v.expected,
        v.got,
        v.got
    )
}

/// A trial of a case that does not load: the trials it would have had fail with its error.
pub fn broken(trial: &str, error: &crate::error::Error) -> String {
    format!("{trial}: the case does not load:\n  {error}")
}

/// A trial that panicked (a bug of the suite, or an input no check foresaw): its own failure, the run goes on.
pub fn panicked(trial: &str, why: &str) -> String {
    format!("{trial}: the trial panicked: {why}")
}

/// A signal's name, for messages (`SIGSEGV`); its number when the suite has no name for it.
fn signal_name(signal: i32) -> String {
    let known = [
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGTERM, "SIGTERM"),
    ];
    known.iter().find(|(n, _)| *n == signal).map_or_else(|| format!("signal {signal}"), |(_, name)| format!("{name} (signal {signal})"))
}

/// How a crashed process ended and where: `SIGSEGV (signal 11) in onnxruntime: a run call (model.onnx)`.
fn crash_line(c: &crate::run::last_call::Crash) -> String {
    let how = match (c.signal, c.code) {
        (Some(s), _) => signal_name(s),
        (None, Some(code)) => format!("exit status {code}"),
        (None, None) => "an unknown end".to_string(),
    };
    let at = match &c.call {
        Some((call, own)) => {
            let on = if call.on.is_empty() { String::new() } else { format!(" ({})", call.on) };
            let whose = if *own { "" } else { ", on one of its own threads" };
            format!(" in {}: {}{on}{whose}", call.runtime, call.what)
        }
        None => " outside any runtime call the suite noted".to_string(),
    };
    format!("{how}{at}")
}

/// A trial whose runtime crashed its process, again when it ran alone: its own failure; the run's other trials went
/// on in another process.
pub fn crashed(trial: &str, c: &crate::run::last_call::Crash) -> String {
    let mut out = format!(
        "{trial}: the runtime crashed the process: {}\n  it crashed again when run alone in a fresh process; the run's other trials went on",
        crash_line(c)
    );
    if c.last_words.is_empty() {
        out.push_str("\n  the process wrote nothing on stderr");
    } else {
        out.push_str("\n  its last words on stderr:");
        for l in &c.last_words {
            out.push_str(&format!("\n    | {l}"));
        }
    }
    out.push_str(&format!("\n  rerun it alone: cargo test -p harness --test conformance -- --exact {trial}"));
    out
}

/// The process running `trial` beside others crashed, and `trial`, run again alone, did not: the crash belongs to
/// another trial (which reports it) or to trials together.
pub fn crashed_beside(trial: &str, c: &crate::run::last_call::Crash) -> String {
    format!("{trial}: the process running it beside other trials crashed ({}); run again alone, it finished", crash_line(c))
}

/// The shared trial worker ended badly after it gave every verdict (a runtime's teardown at exit): no trial owns it.
pub fn crashed_at_exit(c: &crate::run::last_call::Crash) -> String {
    format!("warning: the trial worker crashed after its last verdict, as it exited: {}", crash_line(c))
}

/// How the case's strict xfail entry `x` settled a trial: expected as stated, another failure, or an unexpected
/// pass; both the expected and the actual failure printed, above the trial's own message.
pub fn settled(trial: &str, case_file: &str, x: &Xfail, how: &Settled, o: &Outcome) -> String {
    let expected = x.expect.as_ref().map_or_else(|| "(none stated)".to_string(), ToString::to_string);
    let actual = o.failure.as_ref().map_or_else(|| "no verdict failure".to_string(), ToString::to_string);
    match how {
        Settled::Expected => format!("{trial}: XFAIL ({})\n  expected: {expected}\n  actual:   {actual}\n{}", x.reason, o.message),
        Settled::NotExpected(why) => format!(
            "{trial}: not the expected failure: {why}\n  expected: {expected} (xfail in {case_file}: {})\n  actual:   {actual}\n{}",
            x.reason, o.message
        ),
        Settled::UnexpectedlyPassed => format!(
            "{trial}: unexpectedly passed ({}): remove the xfail from {case_file} (reason was: {})\n  expected: {expected}\n{}",
            o.status.name(),
            x.reason,
            o.message
        ),
    }
}

/// genai's refusal of a package: what it said, and where the package is. A verdict (the package does not run in its
/// own runtime), which an xfail entry may expect by its message.
pub fn genai_refused(trial: &str, case_file: &str, package: &str, message: &str) -> String {
    format!(
        "{trial}: genai FAIL ({case_file}): onnxruntime-genai refused the package {package}\n  genai said: {message}\n  \
         the package does not run in its own runtime; the L4 and L5 levels judge it through ONNX Runtime directly\n"
    )
}
