//! Every reading the mutants task takes from a particular level, in one place (each is its level's to own): what a
//! failing trial measured, which failing check names the catch, the table's distribution column, and the levels
//! whose statistic the separation tables compare.

use mobius_conformance::judge::xfail::{FailureKind, Mismatch};
use mobius_conformance::outcome::{Finished, Judgement, Outcome, Settled};
use mobius_conformance::vocab::{Level, TrialId};

/// A separation table: per model and dtype, a level's own statistic on the mutants' failing trials against the
/// clean trials'.
pub(super) struct Separation {
    pub(super) level: Level,
    /// The level's statistic of a verdict: at most 1 passes.
    pub(super) score: fn(&Outcome) -> Option<f64>,
    /// The line printed above the table.
    pub(super) title: &'static str,
    /// The table's key in the JSON report.
    pub(super) key: &'static str,
}

/// The separation tables, in the order they are printed.
pub(super) const SEPARATIONS: [Separation; 2] = [
    Separation {
        level: Level::L4,
        score: noise_score,
        title: "separation (noise score: the tolerance policy's statistic, <= 1 passes)",
        key: "separation",
    },
    Separation {
        level: Level::Dist,
        score: dist_score,
        title: "dist separation (dist score: its larger KL statistic over its limit, <= 1 passes)",
        key: "dist_separation",
    },
];

/// The header of the table's last column: [`level_cell`]'s.
pub(super) const LEVEL_COLUMN: &str = "dist (score, verdict)";

/// The distribution level on the mutated variant, for the table's last column: its score (over its limit) and
/// verdict; `None` for a trial of another level.
pub(super) fn level_cell(r: &Finished) -> Option<String> {
    (TrialId::parse(&r.name).and_then(|id| id.level()) == Some(Level::Dist))
        .then(|| format!("{} {}", dist_score(&r.outcome).map_or("-".into(), |x| format!("{x:.2}")), r.outcome.status.name()))
}

/// The most local failing check names the catch: an encoder's features, then the prefill logits, then generation.
pub(super) fn rank(name: &str) -> (u8, &str) {
    let r = match TrialId::parse(name).and_then(|id| id.level()) {
        Some(Level::VisionEncoder | Level::AudioEncoder) => 0,
        Some(Level::L4) => 1,
        _ => 2,
    };
    (r, name)
}

/// What a failing trial measured, from its judgement: the logits' max difference (L4), the tokens kept (L5), the
/// features' max difference (encoders). None for a trial that failed without measuring (an error).
pub(super) fn measured(f: &Finished) -> Option<String> {
    let o = &f.outcome;
    match o.settled.as_deref() {
        Some(Settled::NotExpected(Mismatch::NoVerdict)) => return Some("a load error the xfail did not absorb".into()),
        Some(Settled::NotExpected(Mismatch::Kind { got: FailureKind::Refused, .. })) => {
            return Some("the runtime refused the package, which the xfail did not absorb".into());
        }
        _ => {}
    }
    let judgement = o.judgement.as_ref();
    match TrialId::parse(&f.name)?.level()? {
        Level::L4 => o.max_abs_diff.map(|d| {
            let from = o.failure.as_ref().and_then(|f| f.first_position).map(|p| format!(", from prompt position {p}"));
            match judgement.and_then(Judgement::noise_score) {
                Some(s) => format!("noise score {s:.3}, max |logit diff| {d:.3e}{}", from.unwrap_or_default()),
                None => format!("max |logit diff| {d:.3e}{}", from.unwrap_or_default()),
            }
        }),
        Level::L5 => {
            let (kept, total) = judgement.and_then(Judgement::tokens_kept)?;
            let step = o.first_divergence.map(|d| format!(", first divergence at step {d}"));
            let logits = o.failure.as_ref().filter(|f| f.kind == FailureKind::StepLogits).map(|f| {
                format!(
                    ", step logits out from step {} (max |diff| {:.3e})",
                    f.first_step.unwrap_or_default(),
                    f.max_abs_diff.unwrap_or(f64::NAN)
                )
            });
            Some(format!("{kept}/{total} tokens kept{}{}", step.unwrap_or_default(), logits.unwrap_or_default()))
        }
        Level::Dist => match judgement? {
            Judgement::Dist(r) => Some(format!(
                "dist score {:.3} (mean KLD {:.3e}, 99.0% {:.3e}, same top {:.2}%, deviation {:.2e})",
                r.mean_score.max(r.p99_score).max(r.deviation_score.unwrap_or(0.0)),
                r.stats.kld.value,
                r.stats.p99_kld(),
                100.0 * r.stats.same_top.value,
                r.deviation
            )),
            _ => None,
        },
        _ => o.max_abs_diff.map(|d| format!("max |feature diff| {d:.3e}")),
    }
}

/// The distribution level's own statistic: the larger of its two KL statistics over its limit (at most 1 passes).
fn dist_score(o: &Outcome) -> Option<f64> {
    match o.judgement.as_ref()? {
        Judgement::Dist(r) => Some(r.mean_score.max(r.p99_score).max(r.deviation_score.unwrap_or(0.0))),
        _ => None,
    }
}

/// The tolerance policy's own statistic of an L4 verdict: at most 1 passes.
fn noise_score(o: &Outcome) -> Option<f64> {
    o.judgement.as_ref().and_then(Judgement::noise_score)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use mobius_conformance::outcome::Status;
    use mobius_conformance::vocab::Dtype;

    pub(in crate::mutants) fn finished(name: &str, status: Status, message: &str, max_abs_diff: Option<f64>) -> Finished {
        let outcome = Outcome { status, max_abs_diff, first_divergence: Some(3), ..Outcome::new(status, message) };
        Finished { name: name.into(), outcome, seconds: 0.0 }
    }

    /// An L5 trial whose stream kept `matches` of 16 tokens.
    pub(in crate::mutants) fn stream(name: &str, matches: usize) -> Finished {
        use mobius_conformance::judge::verdict::{GenerationReport, Verdict};
        let r = GenerationReport {
            verdict: Verdict::Fail,
            reasons: vec![],
            expected: (0..16).collect(),
            got: (0..16).map(|i| if (i as usize) < matches { i } else { -1 }).collect(),
            matches,
            ratio: matches as f64 / 16.0,
            first_divergence: None,
            teacher_forced: None,
            tolerance: mobius_conformance::judge::tolerance::Tolerance::builtin(Level::L5, Dtype::F32),
        };
        let mut f = finished(name, Status::Fail, "", None);
        f.outcome.judgement = Some(Judgement::Generation(Box::new(r)));
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
    }
}
