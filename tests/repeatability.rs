//! The same trials give the same verdicts and the same reported numbers, run after run and at any parallelism.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use mobius_conformance::bootstrap::workspace_root;
use mobius_conformance::runtime::Device;
use mobius_conformance::trial::{self, Suite, TrialSpec};

type Row = (String, String, String, Option<u64>, Option<usize>);

/// Runs every trial on `threads` workers; rows sorted by trial name.
fn run(suite: &Suite, plan: &[TrialSpec], threads: usize) -> Vec<Row> {
    let rows = Mutex::new(Vec::new());
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while let Some(spec) = plan.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let o = trial::run(suite, spec, Device::Cpu);
                    let row =
                        (spec.name.clone(), o.status.name().to_string(), o.message, o.max_abs_diff.map(f64::to_bits), o.first_divergence);
                    rows.lock().unwrap().push(row);
                }
            });
        }
    });
    let mut rows = rows.into_inner().unwrap();
    rows.sort();
    rows
}

#[test]
fn verdicts_and_diffs_repeat_exactly_at_1_2_and_8_threads() {
    let suite = Suite::open(&workspace_root());
    let plan = suite.plan();
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
