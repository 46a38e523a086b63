//! The same trials give the same verdicts and the same reported numbers, run after run and at any parallelism.

use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::suite::{Suite, TrialSpec};
use mobius_conformance::trial;

type Row = (String, &'static str, String, Option<u64>, Option<usize>);

fn run(suite: &Suite, plan: &[TrialSpec], threads: usize) -> Vec<Row> {
    trial::run_parallel(suite, plan, &mobius_conformance::context::RunContext::local(), threads, |_| {})
        .into_iter()
        .map(|f| (f.name, f.outcome.status.name(), f.outcome.message, f.outcome.max_abs_diff.map(f64::to_bits), f.outcome.first_divergence))
        .collect()
}

#[test]
fn verdicts_and_diffs_repeat_exactly_at_1_2_and_8_threads() {
    let suite = Suite::open(&workspace_root());
    // The tiny tier: the real tier's trials (minutes each on 2 cores) are run once by the harness, not five times here.
    let plan: Vec<TrialSpec> = mobius_conformance::trial::matrix::plan(&suite).into_iter().filter(|t| !t.is_built_elsewhere()).collect();
    let first = run(&suite, &plan, 1);
    assert!(first.iter().filter(|r| r.1 == "PASS").count() >= 14, "{first:#?}");
    for (round, threads) in [(2, 1), (3, 1), (4, 2), (5, 8)] {
        let again = run(&suite, &plan, threads);
        assert_eq!(again.len(), first.len());
        for (a, b) in first.iter().zip(&again) {
            assert_eq!(a, b, "run {round} ({threads} threads) differs for {}", a.0);
        }
    }
}
