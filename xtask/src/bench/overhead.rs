//! Suite overhead: the root's whole tiny tier on one worker, its wall time split between the engines and the suite's
//! own code; and the trial runs the scaling section times too.

use std::path::Path;
use std::time::Instant;

use mobius_conformance::context::RunContext;
use mobius_conformance::outcome::{Counts, Status};
use mobius_conformance::plan::suite::{Suite, TrialSpec};
use mobius_conformance::run::genai;
use mobius_conformance::run::timing;
use mobius_conformance::trial;
use serde_json::{Value, json};

use super::report::shown;
use super::stats::ratio;

/// The settings the bench's trials run under: CI's, so a golden, baseline or inputs file missing from the root fails
/// instead of skipping, and no figure is taken over trials that did no work. A skip the case states itself (an L5
/// under sampling, a model not downloaded) stays a skip, and is counted.
pub(super) fn bench_context() -> RunContext {
    RunContext { ci: true, ..RunContext::local() }
}

/// The tiny tier of a suite, as these figures always measured; the real tier has its own section.
pub(super) fn tiny_plan(suite: &Suite) -> Vec<TrialSpec> {
    mobius_conformance::trial::matrix::plan(suite).into_iter().filter(|t| !t.is_built_elsewhere()).collect()
}

/// A whole trial set timed: the wall time on `threads` workers, the time inside each engine, and how every trial
/// ended.
pub(super) struct Timed {
    pub(super) wall: f64,
    /// Inside the suite's ONNX Runtime run calls.
    pub(super) ort_runs: f64,
    /// Inside ONNX Runtime making the suite's sessions.
    pub(super) ort_loads: f64,
    /// Inside onnxruntime-genai (its own ONNX Runtime sessions included).
    pub(super) genai: f64,
    pub(super) trials: usize,
    pub(super) counts: Counts,
    /// The trials that failed, by name: a figure measured on them measures nothing.
    pub(super) failed: Vec<String>,
    /// The trials that skipped, each with the first line of why: work the figure does not include.
    pub(super) skipped: Vec<(String, String)>,
    /// The first failed trial's message, first lines: what a reader needs to start on the failures.
    pub(super) first_failure: Option<String>,
}

impl Timed {
    fn engines(&self) -> f64 {
        self.ort_runs + self.ort_loads + self.genai
    }

    /// The suite's own time: what the engines do not account for (the wall time is one worker's only with one
    /// worker, so only then).
    fn suite_seconds(&self) -> f64 {
        self.wall - self.engines()
    }

    /// `N trials (P passed, X xfail, S skipped, F failed)`; passed counts the ambiguous and accepted passes too.
    fn tally(&self) -> String {
        let c = &self.counts;
        format!(
            "{} trials ({} passed, {} xfail, {} skipped, {} failed)",
            self.trials,
            c.pass + c.ambiguous + c.accepted,
            c.xfail,
            c.skip,
            c.fail
        )
    }

    /// Why no figure may be taken from this run, if none may: trials failed, or none did any work.
    pub(super) fn refusal(&self) -> Option<String> {
        if !self.failed.is_empty() {
            let names: Vec<&str> = self.failed.iter().take(5).map(String::as_str).collect();
            let more = if self.failed.len() > 5 { format!(" and {} more", self.failed.len() - 5) } else { String::new() };
            let first = self.first_failure.as_deref().map_or(String::new(), |m| format!("; the first says: {m}"));
            return Some(format!("{} of {} trials failed ({}{more}){first}", self.failed.len(), self.trials, names.join(", ")));
        }
        (self.counts.skip == self.trials).then(|| format!("no trial ran ({})", self.tally()))
    }

    /// Why no overhead figure may be taken from this one-worker run: [`Timed::refusal`], no time inside any engine,
    /// or more time inside them than the wall time (work on other threads, whose rest is not the suite's own).
    fn overhead_refusal(&self) -> Option<String> {
        self.refusal().or_else(|| (self.engines() <= 0.0).then(|| format!("no time inside any engine ({})", self.tally()))).or_else(|| {
            (self.suite_seconds() < 0.0).then(|| {
                format!(
                    "the engines' time ({:.3}s) exceeds the wall time ({:.3}s): some of the work ran on other threads, so the rest is not the suite's own",
                    self.engines(),
                    self.wall
                )
            })
        })
    }

    pub(super) fn json(&self) -> Value {
        let c = &self.counts;
        json!({ "trials": self.trials, "passed": c.pass + c.ambiguous + c.accepted, "xfail": c.xfail, "skipped": c.skip,
                "failed": self.failed })
    }
}

pub(super) fn time_trials(root: &Path, threads: usize) -> Timed {
    let suite = Suite::open(root);
    let plan = tiny_plan(&suite);
    let engines = || (timing::run_seconds(), timing::load_seconds(), genai::run_seconds());
    let (r0, l0, g0) = engines();
    // One worker is one thread: the gates' items are not shared out over sessions of their own either.
    let ctx = RunContext { gate_sessions: (threads == 1).then_some(1), ..bench_context() };
    let t0 = Instant::now();
    let done = trial::run_parallel(&suite, &plan, &ctx, threads, |_| {});
    let wall = t0.elapsed().as_secs_f64();
    let (r1, l1, g1) = engines();
    let failed = done.iter().filter(|f| f.outcome.is_fail()).map(|f| f.name.clone()).collect();
    let first_failure =
        done.iter().find(|f| f.outcome.is_fail()).map(|f| f.outcome.message.lines().take(3).collect::<Vec<_>>().join(" / "));
    let skipped = done
        .iter()
        .filter(|f| f.outcome.status == Status::Skip)
        .map(|f| (f.name.clone(), f.outcome.message.lines().next().unwrap_or_default().to_string()))
        .collect();
    let counts = Counts::of(&done);
    Timed { wall, ort_runs: r1 - r0, ort_loads: l1 - l0, genai: g1 - g0, trials: plan.len(), counts, failed, skipped, first_failure }
}

/// Suite overhead: the root's whole tiny tier on one worker, sessions warm (a first run makes them), its wall time
/// split between the engines and the suite's own code.
pub(super) fn overhead_section(source: &Path, table: &mut Vec<String>, failures: &mut Vec<String>) -> (Value, Option<f64>) {
    let warm = time_trials(source, 1);
    // A first run that failed is the answer: timing the same failures again would add nothing.
    let t = if warm.refusal().is_none() { time_trials(source, 1) } else { warm };
    let why = t.overhead_refusal();
    table.push(String::new());
    if let Some(why) = why {
        table.push(format!("suite overhead: {}: {why}: no figure", shown(source)));
        failures.push(format!("overhead: {why}"));
        let mut v = t.json();
        v["refused"] = json!(why);
        return (v, None);
    }
    let (own, engines) = (t.suite_seconds(), t.engines());
    let r = ratio(own, engines);
    let share = |s: f64| format!("{s:.3}s ({:.1}%)", 100.0 * s / t.wall);
    table.push(format!("suite overhead: {}, 1 worker, sessions warm: wall {:.3}s", t.tally(), t.wall));
    table.push(format!(
        "  = ONNX Runtime run calls {} + ONNX Runtime session loads {} + onnxruntime-genai {} + the suite's own {}",
        share(t.ort_runs),
        share(t.ort_loads),
        share(t.genai),
        share(own)
    ));
    table.push(format!("  overhead_ratio = {OVERHEAD_DEFINITION} = {own:.3} / {engines:.3} = {r:.3}"));
    let mut v = t.json();
    for (k, x) in [
        ("wall_seconds", t.wall),
        ("ort_run_seconds", t.ort_runs),
        ("ort_load_seconds", t.ort_loads),
        ("genai_seconds", t.genai),
        ("suite_seconds", own),
        ("overhead_ratio", r),
    ] {
        v[k] = json!(x);
    }
    v["overhead_definition"] = json!(OVERHEAD_DEFINITION);
    v["skipped_trials"] = t.skipped.iter().map(|(name, why)| json!({ "trial": name, "why": why })).collect();
    (v, Some(r))
}

/// What `overhead_ratio` divides: 0 would be a suite costing nothing beyond the engines it drives.
pub(super) const OVERHEAD_DEFINITION: &str =
    "the suite's own s / (ONNX Runtime run calls + ONNX Runtime session loads + onnxruntime-genai) s";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overhead_run_whose_engines_outlast_its_wall_time_gets_no_figure() {
        let counts = Counts { pass: 3, ..Counts::default() };
        let timed = |wall: f64, ort_runs: f64, genai: f64| Timed {
            wall,
            ort_runs,
            ort_loads: 0.0,
            genai,
            trials: 3,
            counts,
            failed: Vec::new(),
            skipped: Vec::new(),
            first_failure: None,
        };
        assert_eq!(timed(3.6, 1.6, 1.5).overhead_refusal(), None, "the suite's own 0.5 s of 3.6 s");
        let why = timed(2.931, 1.498, 1.568).overhead_refusal().expect("engines 3.066 s > wall 2.931 s");
        assert!(why.contains("engines' time (3.066s) exceeds the wall time (2.931s)"), "{why}");
        let idle = timed(1.0, 0.0, 0.0).overhead_refusal().expect("no engine time");
        assert!(idle.starts_with("no time inside any engine (3 trials"), "{idle}");
    }
}
