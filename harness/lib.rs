//! The libtest-mimic face of the suite: one [`Trial`] per planned conformance trial.
//!
//! Thin on purpose: planning, running and judging live in the library; this maps outcomes onto libtest's
//! pass / fail / ignored, so filters, `--list`, `--exact`, `--ignored` and nextest work as usual.

use std::path::PathBuf;
use std::sync::Arc;

use libtest_mimic::{Arguments, Completion, Failed, Trial};
use mobius_conformance::context::RunContext;
use mobius_conformance::outcome::Status;
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::trial;

/// The suite root: `MOBIUS_SUITE_ROOT`, else the repository this harness was built in.
pub fn suite_root() -> PathBuf {
    std::env::var_os("MOBIUS_SUITE_ROOT").map(PathBuf::from).unwrap_or_else(mobius_conformance::paths::workspace_root)
}

/// Refuses a run that would hang or run nothing: `--test-threads 0` (libtest-mimic would wait for workers it never
/// starts) and a suite root with no cases (zero trials would pass).
pub fn check(args: &Arguments, root: &std::path::Path) -> Result<(), String> {
    if args.test_threads == Some(0) {
        return Err("--test-threads 0: the number of test threads must be at least 1".into());
    }
    let setting = match std::env::var_os("MOBIUS_SUITE_ROOT") {
        Some(v) => format!("MOBIUS_SUITE_ROOT={}", v.to_string_lossy()),
        None => format!("the suite root {}", root.display()),
    };
    Suite::open(root).check(&setting).map_err(|e| e.to_string())
}

/// Every trial of the suite at `root`, under the settings the environment gives (read once, here).
pub fn trials(root: &std::path::Path) -> Vec<Trial> {
    let suite = Arc::new(Suite::open(root));
    let ctx = RunContext::from_env();
    mobius_conformance::trial::matrix::plan(&suite)
        .into_iter()
        .map(|spec| {
            let suite = suite.clone();
            let ctx = ctx.clone();
            Trial::ignorable_test(spec.name.clone(), move || {
                let ctx = ctx.map_err(|e| Failed::from(format!("{}: {e}", spec.name)))?;
                let outcome = trial::run(&suite, &spec, &ctx);
                match outcome.status {
                    Status::Pass => Ok(Completion::Completed),
                    // Passes a person should still see.
                    Status::Ambiguous | Status::Accepted | Status::ExpectedFailure => {
                        eprintln!("{}", outcome.message);
                        Ok(Completion::Completed)
                    }
                    Status::Skip => Ok(Completion::ignored_with(outcome.message)),
                    Status::Fail => Err(Failed::from(outcome.message)),
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Arguments {
        Arguments::from_iter(std::iter::once("conformance").chain(a.iter().copied()))
    }

    #[test]
    fn zero_test_threads_is_refused_naming_the_setting() {
        let root = mobius_conformance::paths::workspace_root();
        let e = check(&args(&["--test-threads", "0"]), &root).unwrap_err();
        assert!(e.contains("--test-threads 0"), "{e}");
        check(&args(&["--test-threads", "1"]), &root).expect("one thread is fine");
    }

    #[test]
    fn a_root_without_cases_is_refused_naming_it() {
        let missing = std::env::temp_dir().join(format!("mobius-no-such-root-{}", std::process::id()));
        let e = check(&args(&[]), &missing).unwrap_err();
        assert!(e.contains(&missing.display().to_string()) && e.contains("not a folder"), "{e}");
        let empty = std::env::temp_dir().join(format!("mobius-empty-root-{}", std::process::id()));
        std::fs::create_dir_all(empty.join("cases/tasks")).unwrap();
        std::fs::write(empty.join("cases/tasks/t.yaml"), "test: x.jsonl\n").unwrap();
        let e = check(&args(&[]), &empty).unwrap_err();
        assert!(e.contains("no case file"), "{e}");
        let _ = std::fs::remove_dir_all(empty);
    }
}
