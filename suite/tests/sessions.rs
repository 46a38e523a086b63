//! The session cache's cap on real trials: with room for one session, trials over several packages still reach
//! the outcomes they reach with every session kept, sessions are dropped and made again, and no more are alive
//! at once than the trials in flight hold.
//!
//! Its own test binary: the cap is fixed once per process, from the run context (`MOBIUS_MAX_SESSIONS`).

use std::collections::BTreeSet;

use mobius_conformance::context::RunContext;
use mobius_conformance::outcome::Status;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::run::sessions;
use mobius_conformance::trial;

#[test]
fn a_cap_of_one_session_drops_and_remakes_sessions_and_changes_no_outcome() {
    let ctx = RunContext { max_sessions: 1, ..RunContext::local() };
    let suite = Suite::open(&workspace_root());
    let plan: Vec<_> = mobius_conformance::trial::matrix::plan(&suite)
        .into_iter()
        .filter(|t| ["qwen3-tiny/text/cpu/", "llama-tiny/text/cpu/"].iter().any(|p| t.name.starts_with(p)))
        .filter(|t| t.name.contains("/f32/") || t.name.contains("/int4/"))
        // genai keeps its own sessions, outside the suite's cache; the distribution level uses the same decoder.
        .filter(|t| !t.name.ends_with("/genai") && !t.name.ends_with("/dist"))
        .collect();
    let packages: BTreeSet<String> = plan.iter().map(|t| t.name.rsplit_once('/').unwrap().0.to_string()).collect();
    assert_eq!(plan.len(), 8, "qwen3 and llama, cpu f32 and int4, L4 and L5: {:?}", plan.iter().map(|t| &t.name).collect::<Vec<_>>());
    let workers = 2;
    // Twice over: the second pass needs the sessions the first one's later trials pushed out.
    for pass in 0..2 {
        for f in trial::run_parallel(&suite, &plan, &ctx, workers, |_| {}) {
            assert_eq!(f.outcome.status, Status::Pass, "pass {pass}, {}: {}", f.name, f.outcome.message);
        }
    }
    let (counts, cap) = sessions::session_counts().expect("ONNX Runtime was loaded");
    assert_eq!(cap, 1);
    assert!(counts.dropped > 0, "{counts:?}");
    assert!(counts.made > packages.len(), "sessions were made again after being dropped: {counts:?} for {} packages", packages.len());
    // A text trial holds one session (its decoder); at most `workers` are held while a new one is made.
    assert!(counts.peak_alive <= cap + workers, "{counts:?}");
}
