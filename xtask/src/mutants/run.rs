//! Running the suite on a scratch root, and what a mutant's run came to: the trials that failed, the one that names
//! the catch, or why the mutant counts against the suite.

use std::path::Path;

use mobius_conformance::context::RunContext;
use mobius_conformance::outcome::Finished;
use mobius_conformance::plan::suite::{Suite, TrialKind, TrialSpec};
use mobius_conformance::trial;

use super::catalogue::Mutant;
use super::levels::{localizes, measured, rank};
use super::make::Patched;

/// The trials of the suite at `root` that `pick` selects, run with the suite's normal verdicts.
pub(super) fn run_root(root: &Path, ctx: &RunContext, threads: usize, pick: &dyn Fn(&TrialSpec) -> bool) -> Vec<Finished> {
    let suite = Suite::open(root);
    let plan: Vec<TrialSpec> = mobius_conformance::trial::matrix::plan(&suite).into_iter().filter(|t| pick(t)).collect();
    trial::run_parallel(&suite, &plan, ctx, threads, |_| {})
}

/// Whether a trial runs what the mutant patched: its case's mutated variant, in a modality that runs the part.
pub(super) fn runs_mutant(m: &Mutant, t: &TrialSpec) -> bool {
    match &t.kind {
        TrialKind::Conformance { case, modality, variant, .. } => {
            case.name == m.case && variant.ep == m.ep && variant.dtype == m.dtype && m.part.runs_in(*modality)
        }
        TrialKind::Broken(b) => b.name == m.case,
        TrialKind::Accuracy { case, variant, .. } => case.name == m.case && variant.ep == m.ep && variant.dtype == m.dtype,
    }
}

pub(super) struct MutantRun {
    pub(super) mutant: &'static Mutant,
    pub(super) patched: Result<Patched, String>,
    pub(super) rows: Vec<Finished>,
}

impl MutantRun {
    pub(super) fn failed(&self) -> impl Iterator<Item = &Finished> {
        self.rows.iter().filter(|r| r.outcome.is_fail())
    }

    /// The failing trial with a measurement that names the catch.
    pub(super) fn caught_by(&self) -> Option<&Finished> {
        self.failed().filter(|r| measured(r).is_some()).min_by(|a, b| rank(&a.name).cmp(&rank(&b.name)))
    }

    /// The first failing trial that localized itself (a prefill-type level's), and the module it named.
    pub(super) fn localized(&self) -> Option<(&Finished, Option<&str>)> {
        let localizing = |r: &&Finished| r.outcome.is_fail() && r.outcome.failure.is_some() && localizes(&r.name);
        let r = self.rows.iter().filter(localizing).min_by(|a, b| rank(&a.name).cmp(&rank(&b.name)))?;
        Some((r, r.outcome.failure.as_ref().and_then(|f| f.first_module.as_deref())))
    }

    /// Why the localization is not the mutant's own module, when a prefill-type trial caught it.
    fn mislocalized(&self) -> Option<String> {
        let (r, got) = self.localized()?;
        let m = self.mutant;
        match (m.module, got) {
            (Some(_), _) if m.miss.is_some() => None,
            (Some(want), Some(got)) if want == got => None,
            (Some(want), Some(got)) => Some(format!("{}: {} localized it to {got}, not to {want}", m.name, r.name)),
            (Some(want), None) => Some(format!("{}: {} did not localize it (expected {want})", m.name, r.name)),
            (None, _) => None,
        }
    }

    pub(super) fn problem(&self) -> Option<String> {
        let m = self.mutant.name;
        if let Some(why) = self.mislocalized().filter(|_| self.caught_by().is_some()) {
            return Some(why);
        }
        match &self.patched {
            Err(e) => Some(format!("{m}: could not be made: {e}")),
            Ok(_) if self.rows.is_empty() => Some(format!("{m}: no trial ran it")),
            Ok(_) if self.caught_by().is_some() => None,
            Ok(_) if self.failed().next().is_some() => Some(format!("{m}: only broke the run, no verdict measured it")),
            Ok(_) => Some(format!("{m}: SURVIVED: every trial passed")),
        }
    }
}
