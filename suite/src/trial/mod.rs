//! The orchestrator: the trial plan ([`matrix`]), and each planned trial run by its level (`level::Kind::run`:
//! placed, fed, run, judged, worded) then settled against the case's strict xfail entry ([`settle`]), in parallel
//! over the run's workers, a panic costing its own trial only.

pub mod matrix;
pub mod settle;

use crate::context::RunContext;
use crate::level::{self, trial::Trial};
use crate::outcome::{FailureKind, Finished, Outcome};
use crate::plan::suite::{Suite, TrialKind, TrialSpec};
use crate::report;
use crate::run::runtime;
use crate::vocab::Modality;

/// Runs `plan` on `threads` workers (sessions are shared between them), calling `on_done` as each trial ends.
/// Returns every result, sorted by trial name.
pub fn run_parallel(
    suite: &Suite,
    plan: &[TrialSpec],
    ctx: &RunContext,
    threads: usize,
    on_done: impl Fn(&Finished) + Sync,
) -> Vec<Finished> {
    let done = std::sync::Mutex::new(Vec::with_capacity(plan.len()));
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                while let Some(spec) = plan.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                    let t0 = std::time::Instant::now();
                    let outcome = guarded(&spec.name, || run(suite, spec, ctx));
                    let f = Finished { name: spec.name.clone(), outcome, seconds: t0.elapsed().as_secs_f64() };
                    on_done(&f);
                    done.lock().unwrap_or_else(|p| p.into_inner()).push(f);
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    done.sort_by(|a, b| a.name.cmp(&b.name));
    done
}

/// Runs one trial so that a panic inside it (a bug of the suite, or an input no check foresaw) fails that trial
/// with the panic's message instead of taking the whole run, and its report, down with it.
pub fn guarded(name: &str, trial: impl FnOnce() -> Outcome) -> Outcome {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(trial)).unwrap_or_else(|p| {
        let why = p.downcast_ref::<String>().map(String::as_str).or_else(|| p.downcast_ref::<&str>().copied()).unwrap_or("(no message)");
        Outcome::fail(report::panicked(name, why))
    })
}

/// Runs one trial to its outcome. Never panics on bad input: every error becomes a failure naming its source.
pub fn run(suite: &Suite, spec: &TrialSpec, ctx: &RunContext) -> Outcome {
    run_as(suite, spec, ctx, None)
}

/// The localization of a planned trial's variant (`cargo xtask localize`), whether the trial passes or not: an
/// outcome whose message is the whole table, unsettled by any xfail entry.
pub fn localize(suite: &Suite, spec: &TrialSpec, ctx: &RunContext) -> Outcome {
    run_as(suite, spec, ctx, Some(crate::vocab::Level::Localize))
}

fn run_as(suite: &Suite, spec: &TrialSpec, ctx: &RunContext, as_level: Option<crate::vocab::Level>) -> Outcome {
    runtime::configure(ctx);
    let (case, modality, variant, level, task) = match &spec.kind {
        TrialKind::Broken(b) => return Outcome::fail(report::broken(&spec.name, &b.error)),
        TrialKind::Conformance { case, modality, variant, level } => (case, *modality, variant, *level, None),
        // A gate runs its task as text, whatever the case's modalities.
        TrialKind::Accuracy { case, task, variant, level } => (case, Modality::Text, variant, *level, Some(&**task)),
    };
    let t = Trial { suite, id: &spec.id, name: &spec.name, case, modality, variant, level, task, ctx };
    if let Some(other) = as_level {
        let t = Trial { level: other, ..t };
        return level::of(other).run(&t).unwrap_or_else(|e| Outcome::from_error(&spec.name, &e));
    }
    let kind = level::of(level);
    let outcome = kind.run(&t).unwrap_or_else(|e| Outcome::from_error(&spec.name, &e));
    // A failed verdict of a level that localizes is localized along the model; a pass or an error pays nothing, and
    // so does a failure a strict xfail entry expects without asking where (its module is known, or not wanted).
    let unasked = t.xfail().and_then(|x| x.expect.as_ref()).is_some_and(|e| e.first_module.is_none());
    let prefill_failed =
        outcome.failure.as_ref().is_some_and(|f| matches!(f.kind, FailureKind::Logits | FailureKind::NonFinite | FailureKind::Features));
    let outcome = match prefill_failed && kind.localizes() && !unasked {
        true => level::localize::after_failure(&t, outcome),
        false => outcome,
    };
    Outcome { regenerate: Some(t.regenerate()), ..settle::apply_xfail(&t, outcome) }
}
