//! The libtest-mimic face of the suite: one [`Trial`] per planned conformance trial.
//!
//! Thin on purpose: planning, running and judging live in the library; this maps outcomes onto libtest's
//! pass / fail / ignored, so filters, `--list`, `--exact`, `--ignored` and nextest work as usual.

use std::path::PathBuf;
use std::sync::Arc;

use libtest_mimic::{Completion, Failed, Trial};
use mobius_conformance::runtime::Device;
use mobius_conformance::trial::{self, Status, Suite};

/// The suite root: `MOBIUS_SUITE_ROOT`, else the repository this harness was built in.
pub fn suite_root() -> PathBuf {
    std::env::var_os("MOBIUS_SUITE_ROOT").map(PathBuf::from).unwrap_or_else(mobius_conformance::bootstrap::workspace_root)
}

/// Every trial of the suite at `root`, for the device named by the environment.
pub fn trials(root: &std::path::Path) -> Vec<Trial> {
    let suite = Arc::new(Suite::open(root));
    let device = Device::from_env();
    suite
        .plan()
        .into_iter()
        .map(|spec| {
            let suite = suite.clone();
            let device = device.clone();
            Trial::ignorable_test(spec.name.clone(), move || {
                let device = device.map_err(|e| Failed::from(format!("{}: {e}", spec.name)))?;
                let outcome = trial::run(&suite, &spec, device);
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
