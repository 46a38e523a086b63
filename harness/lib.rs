//! The libtest-mimic face of the suite: one [`Trial`] per planned conformance trial.
//!
//! Thin on purpose: planning, running and judging live in the library; this maps outcomes onto libtest's
//! pass / fail / ignored, so filters, `--list`, `--exact`, `--ignored` and nextest work as usual. Each trial runs in
//! the harness's trial worker ([`worker`]), a process of its own, so that a runtime that crashes costs its own trial.

use std::path::PathBuf;
use std::sync::Arc;

use libtest_mimic::{Arguments, Completion, Failed, Trial};
use mobius_conformance::context::RunContext;
use mobius_conformance::outcome::Status;
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::report;

pub mod worker;

use worker::{Ran, Workers};

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

/// Every trial of the suite at `root`, under the settings the environment gives (read once, here), each run in
/// `workers` ([`worker`]: a runtime that crashes costs its own trial).
pub fn trials(root: &std::path::Path, workers: &Arc<Workers>) -> Vec<Trial> {
    let suite = Suite::open(root);
    let ctx = RunContext::from_env();
    mobius_conformance::trial::matrix::plan(&suite)
        .into_iter()
        .map(|spec| {
            let (ctx, workers) = (ctx.clone(), workers.clone());
            Trial::ignorable_test(spec.name.clone(), move || {
                ctx.map_err(|e| Failed::from(format!("{}: {e}", spec.name)))?;
                let (status, message) = match workers.run(&spec.name).map_err(|e| Failed::from(format!("{}: {e}", spec.name)))? {
                    Ran::Crashed(crash) => return Err(Failed::from(report::crashed(&spec.name, &crash))),
                    Ran::Done(status, message, beside) => {
                        if let Some(crash) = beside {
                            eprintln!("{}", report::crashed_beside(&spec.name, &crash));
                        }
                        (status, message)
                    }
                };
                match status {
                    Status::Pass => Ok(Completion::Completed),
                    // Passes a person should still see.
                    Status::Ambiguous | Status::Accepted | Status::ExpectedFailure => {
                        eprintln!("{message}");
                        Ok(Completion::Completed)
                    }
                    Status::Skip => Ok(Completion::ignored_with(message)),
                    Status::Fail => Err(Failed::from(message)),
                }
            })
        })
        .collect()
}

/// The conformance harness's `main`, over `args` (the program's name first): a trial worker when the first
/// argument is [`worker::FLAG`], else libtest's runner over every trial, each in the shared worker.
pub fn main_with(args: Vec<String>) -> ! {
    if args.get(1).map(String::as_str) == Some(worker::FLAG) {
        let root = args.get(2).map(PathBuf::from).unwrap_or_else(suite_root);
        worker::serve(&root);
    }
    let args = Arguments::from_iter(args);
    let root = suite_root();
    if let Err(e) = check(&args, &root) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
    let workers = match Workers::new(&root) {
        Ok(w) => Arc::new(w),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let conclusion = libtest_mimic::run(&args, trials(&root, &workers));
    if let Some(crash) = workers.close() {
        eprintln!("{}", report::crashed_at_exit(&crash));
    }
    conclusion.exit()
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
