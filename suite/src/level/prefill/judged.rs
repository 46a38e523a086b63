//! L4's judgement: the verdict's report and the numbers and series the reviewer's reports show of it.

use crate::judge::prefill::PrefillReport;
use crate::judge::profile::Profile;
use crate::outcome::Outcome;

/// The L4 judgement of an outcome, when it has one.
pub fn of(o: &Outcome) -> Option<&Judged> {
    o.judgement.as_ref()?.downcast::<Judged>()
}

/// What L4 decided, as the reports read it.
#[derive(Debug, Clone)]
pub struct Judged {
    pub report: PrefillReport,
    pub numbers: Numbers,
}

/// L4: the last prompt position's logits against the reference's.
#[derive(Debug, Clone, PartialEq)]
pub struct Numbers {
    /// Over the whole vocabulary, when the golden has the reference's full vector; else over its top-10.
    pub max_abs: Option<f64>,
    pub max_abs_at: Option<usize>,
    pub cosine: Option<f64>,
    pub violations: Option<usize>,
    pub top10_overlap: usize,
    pub reference_margin: Option<f64>,
    pub atol: f64,
    /// |package - reference| over the vocabulary ids at the last prompt position.
    pub vocab_profile: Option<Profile>,
    /// max |diff| per prompt position, at the golden's stored ids and the position's logsumexp (goldens that store
    /// every position).
    pub positions: Option<Profile>,
    /// Whether each position was bounded by the reference's own noise there (else by atol + rtol * |ref|).
    pub positions_by_noise: bool,
}

/// L4's numbers and the |diff| profile over the vocabulary.
pub fn numbers(r: &PrefillReport, got: &[f32], reference: Option<&[f32]>) -> Numbers {
    let vocab_profile =
        reference.filter(|w| w.len() == got.len()).map(|w| Profile::of(got.iter().zip(w).map(|(&g, &w)| (g as f64 - w as f64).abs())));
    Numbers {
        max_abs: r.comparison.as_ref().map(|c| c.max_abs).or(r.worst.map(|(_, w, g)| (g - w).abs())),
        max_abs_at: r.comparison.as_ref().map(|c| c.max_abs_at).or(r.worst.map(|w| w.0)),
        cosine: r.comparison.as_ref().map(|c| c.cosine),
        violations: r.comparison.as_ref().map(|c| c.violations),
        top10_overlap: r.top10_overlap,
        reference_margin: r.want_margin,
        atol: r.tolerance.atol,
        vocab_profile,
        positions: r.positions.as_ref().map(|p| Profile::of(p.per_position.iter().copied())),
        positions_by_noise: r.positions.as_ref().is_some_and(|p| p.by_noise),
    }
}
