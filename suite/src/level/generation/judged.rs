//! L5's judgement: the verdict's report and the numbers and per-step series the reviewer's reports show of it.

use crate::judge::golden::GenerationGolden;
use crate::judge::stream::{DivergenceKind, GenerationReport, StepLogits};
use crate::outcome::Outcome;
use mobius_numeric::Step;

/// The L5 judgement of an outcome, when it has one.
pub fn of(o: &Outcome) -> Option<&Judged> {
    o.judgement.as_ref()?.downcast::<Judged>()
}

/// What L5 decided, as the reports read it.
#[derive(Debug, Clone)]
pub struct Judged {
    pub report: GenerationReport,
    pub numbers: Numbers,
}

/// L5: one greedy stream against the reference's.
#[derive(Debug, Clone, PartialEq)]
pub struct Numbers {
    pub matches: usize,
    pub total: usize,
    pub ratio: f64,
    pub first_divergence: Option<usize>,
    pub divergence: Option<&'static str>,
    pub near_tie_margin: f64,
    /// Whether `steps` come from the teacher-forced re-run (every step fed the reference's tokens, so every step is
    /// comparable) or from the free run (comparable up to the first divergence).
    pub teacher_forced: bool,
    pub steps: Vec<StepPoint>,
}

/// One generation step, as the reference and the package saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepPoint {
    /// The reference's top1 - top2 at this step.
    pub reference_margin: Option<f64>,
    pub package_margin: Option<f64>,
    /// max |package - reference| over the reference's top-10 ids that the package's top-10 also holds.
    pub max_abs: Option<f64>,
    /// The package chose the reference's token.
    pub agree: bool,
}

/// L5's numbers and the per-step series. `steps` are the teacher-forced run's when there is one (`forced`), else
/// the free run's. Each step's max |diff| is the one the verdict judged (`judged`, at the golden's stored ids) when
/// the golden stores per-step logits; for a golden without them, over the reference's top-10 ids the package's
/// top-10 also holds.
pub fn numbers(r: &GenerationReport, golden: &GenerationGolden, steps: &[Step], forced: bool, judged: Option<&StepLogits>) -> Numbers {
    let comparable = if forced { steps.len() } else { r.first_divergence.as_ref().map_or(steps.len(), |d| d.index + 1) };
    let points = (0..golden.generated_tokens.len().max(steps.len()))
        .map(|i| {
            let want = golden.steps.get(i);
            let got = steps.get(i).filter(|_| i < comparable);
            let judged_here = judged.map(|j| j.per_step.get(i).copied().filter(|d| d.is_finite()));
            let max_abs = if let Some(d) = judged_here {
                d
            } else {
                want.zip(got).and_then(|(w, g)| {
                    let shared: Vec<(f64, f64)> = w
                        .ids
                        .iter()
                        .zip(&w.logits)
                        .filter_map(|(id, wl)| g.top.ids.iter().position(|x| x == id).map(|p| (g.top.logits[p] as f64, wl.0)))
                        .collect();
                    (!shared.is_empty()).then(|| shared.iter().map(|(a, b)| (a - b).abs()).fold(0.0, f64::max))
                })
            };
            StepPoint {
                reference_margin: want.and_then(|w| w.margin()),
                package_margin: got.map(|g| g.top.margin()).filter(|m| m.is_finite()),
                max_abs,
                agree: steps.get(i).map(|s| s.chosen) == golden.generated_tokens.get(i).copied(),
            }
        })
        .collect();
    Numbers {
        matches: r.matches,
        total: r.expected.len().max(r.got.len()),
        ratio: r.ratio,
        first_divergence: r.first_divergence.as_ref().map(|d| d.index),
        divergence: r.first_divergence.as_ref().map(|d| match d.kind {
            DivergenceKind::NearTieFlip => "near-tie flip",
            DivergenceKind::Real => "real",
            DivergenceKind::Unclassified => "unclassified",
        }),
        near_tie_margin: r.tolerance.near_tie_margin,
        teacher_forced: forced,
        steps: points,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::golden::{Hex, StepTop};
    use crate::judge::stream::judge_generation;
    use crate::judge::tolerance::Tolerance;
    use mobius_numeric::TopK;

    fn step(ids: &[i64], logits: &[f64]) -> StepTop {
        StepTop { ids: ids.to_vec(), logits: logits.iter().map(|&l| Hex(l)).collect() }
    }

    #[test]
    fn generation_series_compares_steps_up_to_the_divergence_of_a_free_run() {
        let golden = GenerationGolden {
            model_id: "m".into(),
            prompt: "p".into(),
            generated_tokens: vec![5, 6, 7],
            generated_text: None,
            input_hash: None,
            max_new_tokens: None,
            steps: vec![step(&[5, 1], &[3.0, 1.0]), step(&[6, 2], &[2.0, 1.5]), step(&[7, 3], &[4.0, 0.0])],
            provenance: None,
        };
        let pkg = |chosen: i64, ids: &[i64], logits: &[f32]| Step {
            chosen,
            top: TopK { ids: ids.to_vec(), logits: logits.to_vec() },
            watched: Vec::new(),
            non_finite: None,
        };
        let steps = vec![pkg(5, &[5, 1], &[3.25, 1.0]), pkg(2, &[2, 6], &[1.75, 1.7]), pkg(9, &[9, 7], &[1.0, 0.5])];
        let tol = Tolerance::builtin(crate::judge::tolerance::Logits::Stream, crate::vocab::Dtype::F32);
        let r = judge_generation(&[5, 2, 9], &golden, None, &tol);
        let g = numbers(&r, &golden, &steps, false, None);
        assert_eq!((g.first_divergence, g.teacher_forced, g.steps.len()), (Some(1), false, 3));
        assert_eq!(g.steps[0].max_abs, Some(0.25));
        assert_eq!(g.steps[0].reference_margin, Some(2.0));
        assert!((g.steps[1].max_abs.unwrap() - 0.3).abs() < 1e-6, "{:?}", g.steps[1]);
        assert!(!g.steps[1].agree);
        // After the free run diverged the contexts differ: nothing to compare, but the reference margin stays.
        assert_eq!((g.steps[2].max_abs, g.steps[2].package_margin, g.steps[2].reference_margin), (None, None, Some(4.0)));
        let forced = numbers(&r, &golden, &steps, true, None);
        assert_eq!(forced.steps[2].max_abs, Some(3.5));
        // With the verdict's own per-step judgement, the plot shows exactly the numbers it judged.
        let judged = StepLogits { per_step: vec![0.5, f64::NAN, 0.125], max_abs: 0.5, max_at: 0, first_out: None, steps_out: 0 };
        let plotted = numbers(&r, &golden, &steps, true, Some(&judged));
        let series: Vec<Option<f64>> = plotted.steps.iter().map(|s| s.max_abs).collect();
        assert_eq!(series, [Some(0.5), None, Some(0.125)]);
    }
}
