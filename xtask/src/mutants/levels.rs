//! What the mutants task reads of the levels, each through its own module (`level::Kind`): what a failing trial
//! measured, which failing check names the catch, the columns of the levels shown on every mutated variant, and the
//! levels whose own statistic a separation table compares.

use mobius_conformance::level::{self, Kind, Separation};
use mobius_conformance::outcome::{FailureKind, Finished, Mismatch, Outcome, Settled};
use mobius_conformance::vocab::TrialId;

/// The separation tables, in the levels' order: each level with a statistic of its own.
pub(super) fn separations() -> impl Iterator<Item = (&'static dyn Kind, Separation)> {
    level::ALL.iter().filter_map(|k| k.separation().map(|s| (*k, s)))
}

/// The levels shown in a column of their own on every mutated variant, with their headers.
pub(super) fn columns() -> impl Iterator<Item = (&'static dyn Kind, &'static str)> {
    level::ALL.iter().filter_map(|k| k.mutant_column().map(|c| (*k, c)))
}

/// A trial of `kind` on a mutated variant, for its column: its score and verdict; `None` for a trial of another level.
pub(super) fn column_cell(kind: &dyn Kind, r: &Finished) -> Option<String> {
    (TrialId::parse(&r.name).and_then(|id| id.level()) == Some(kind.level()))
        .then(|| format!("{} {}", kind.score(&r.outcome).map_or("-".into(), |x| format!("{x:.2}")), r.outcome.status.name()))
}

/// The most local failing check names the catch (its level's `locality`), then the name.
pub(super) fn rank(name: &str) -> (u8, &str) {
    (TrialId::parse(name).and_then(|id| id.level()).map_or(2, |l| level::of(l).locality()), name)
}

/// Whether a trial's level localizes its failures along the model (`level::Kind::localizes`).
pub(super) fn localizes(name: &str) -> bool {
    TrialId::parse(name).and_then(|id| id.level()).is_some_and(|l| level::of(l).localizes())
}

/// What a failing trial measured, as its level words it; or that it failed without measuring where an xfail
/// expected a verdict. None for a trial that failed without measuring (an error).
pub(super) fn measured(f: &Finished) -> Option<String> {
    let o: &Outcome = &f.outcome;
    match o.settled.as_deref() {
        Some(Settled::NotExpected(Mismatch::NoVerdict)) => return Some("a load error the xfail did not absorb".into()),
        Some(Settled::NotExpected(Mismatch::Kind { got: FailureKind::Refused, .. })) => {
            return Some("the runtime refused the package, which the xfail did not absorb".into());
        }
        _ => {}
    }
    level::of(TrialId::parse(&f.name)?.level()?).measured(o)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use mobius_conformance::level::generation::judged::{Judged, Numbers};
    use mobius_conformance::outcome::Status;
    use mobius_conformance::vocab::Dtype;

    pub(in crate::mutants) fn finished(name: &str, status: Status, message: &str, max_abs_diff: Option<f64>) -> Finished {
        let outcome = Outcome { status, max_abs_diff, first_divergence: Some(3), ..Outcome::new(status, message) };
        Finished { name: name.into(), outcome, seconds: 0.0 }
    }

    /// An L5 trial whose stream kept `matches` of 16 tokens.
    pub(in crate::mutants) fn stream(name: &str, matches: usize) -> Finished {
        use mobius_conformance::judge::stream::GenerationReport;
        use mobius_conformance::judge::tolerance::{Logits, Tolerance};
        use mobius_conformance::judge::verdict::Verdict;
        let r = GenerationReport {
            verdict: Verdict::Fail,
            reasons: vec![],
            expected: (0..16).collect(),
            got: (0..16).map(|i| if (i as usize) < matches { i } else { -1 }).collect(),
            matches,
            ratio: matches as f64 / 16.0,
            first_divergence: None,
            teacher_forced: None,
            tolerance: Tolerance::builtin(Logits::Stream, Dtype::F32),
        };
        let numbers = Numbers {
            matches,
            total: 16,
            ratio: r.ratio,
            first_divergence: None,
            divergence: None,
            near_tie_margin: 0.0,
            teacher_forced: false,
            steps: Vec::new(),
        };
        let mut f = finished(name, Status::Fail, "", None);
        f.outcome.judgement = Some(std::sync::Arc::new(Judged { report: r, numbers }));
        f
    }

    #[test]
    fn measures_each_level_from_its_verdict() {
        let l4 = finished("c/text/default/f32/L4", Status::Fail, "", Some(0.0123));
        assert_eq!(measured(&l4).as_deref(), Some("max |logit diff| 1.230e-2"));
        let l5 = stream("c/text/default/f32/L5", 3);
        assert_eq!(measured(&l5).as_deref(), Some("3/16 tokens kept, first divergence at step 3"));
        let enc = finished("c/audio/default/f32/audio_encoder", Status::Fail, "", Some(2.0));
        assert_eq!(measured(&enc).as_deref(), Some("max |feature diff| 2.000e0"));
        assert_eq!(measured(&finished("c/text/default/f32/L4", Status::Fail, "error", None)), None);
        assert_eq!(rank("c/audio/default/f32/audio_encoder").0, 0);
        assert_eq!(rank("c/text/default/f32/L4").0, 1);
        assert_eq!(rank("c/text/default/f32/L5").0, 2);
        assert_eq!(separations().map(|(_, s)| s.key).collect::<Vec<_>>(), ["separation", "dist_separation"]);
        assert_eq!(columns().map(|(_, c)| c).collect::<Vec<_>>(), ["dist (score, verdict)"]);
    }
}
