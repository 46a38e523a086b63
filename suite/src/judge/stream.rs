//! L5's verdict: the package's greedy stream against the golden's, and its teacher-forced decode steps' logits.

use crate::judge::golden::GenerationGolden;
use crate::judge::tolerance::Tolerance;
use crate::judge::verdict::{Verdict, judge_rows};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DivergenceKind {
    /// The reference was near a tie there and the package took the reference's runner-up.
    NearTieFlip,
    Real,
    /// The golden has no per-step reference data (mobius' goldens), so the flip cannot be classified.
    Unclassified,
}

/// Where the package's stream first left the reference's.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    pub index: usize,
    pub expected: Option<i64>,
    pub got: Option<i64>,
    pub kind: DivergenceKind,
    pub reference_margin: Option<f64>,
    pub reference_logit_expected: Option<f64>,
    pub reference_logit_got: Option<f64>,
}

/// The stream re-run with the golden's tokens fed back, compared step by step.
#[derive(Debug, Clone, PartialEq)]
pub struct TeacherForced {
    pub steps: usize,
    pub agree: usize,
    /// Disagreeing steps that are not near-tie flips.
    pub real_disagreements: Vec<usize>,
    pub near_tie_disagreements: Vec<usize>,
}

impl TeacherForced {
    /// Agreement counting near-tie flips as agreement (what the verdict uses).
    pub fn ratio(&self) -> f64 {
        if self.steps == 0 { 1.0 } else { (self.steps - self.real_disagreements.len()) as f64 / self.steps as f64 }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GenerationReport {
    pub verdict: Verdict,
    pub reasons: Vec<GenerationReason>,
    pub expected: Vec<i64>,
    pub got: Vec<i64>,
    pub matches: usize,
    pub ratio: f64,
    pub first_divergence: Option<Divergence>,
    pub teacher_forced: Option<TeacherForced>,
    pub tolerance: Tolerance,
}

/// Why an L5 verdict is not a plain pass, with the numbers it was decided by (`report::verdict` words it).
#[derive(Debug, Clone, PartialEq)]
pub enum GenerationReason {
    /// The streams differ; `within` when the share of matching tokens still meets the policy's ratio.
    TokenMatch { matches: usize, n: usize, ratio: f64, min_ratio: f64, within: bool },
    /// The first divergence is a near-tie flip, and teacher-forced the package agrees enough.
    NearTieAgrees { step: usize, margin: Option<f64>, agree: usize, steps: usize, near_tie_flips: Vec<usize> },
    /// The first divergence is a near-tie flip, but teacher-forced the package disagrees at these real steps.
    NearTieDisagrees { step: usize, real: Vec<usize> },
    /// The first divergence is real: how far the reference preferred its own token.
    RealDivergence { step: usize, preferred_by: Option<f64>, near_tie_margin: f64 },
    /// A teacher-forced decode step out of tolerance (the first), with how many are, the largest |diff|, and what
    /// the greedy tokens did there.
    StepLogitsOut { first: StepViolation, out: usize, of: usize, max_abs: f64, max_at: usize, tokens: TokensThere },
}

/// What the greedy tokens did at the first decode step whose logits leave tolerance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokensThere {
    /// The streams never diverge.
    AllAgree,
    /// They agree at that step, and first diverge at a later one.
    AgreeUntil(usize),
    /// They had diverged already, at this step.
    DivergedAt(usize),
}

/// Classifies the package's choice at step `i` against the golden: near-tie flip or real.
fn classify(
    golden: &GenerationGolden,
    i: usize,
    got: Option<i64>,
    tol: &Tolerance,
) -> (DivergenceKind, Option<f64>, Option<f64>, Option<f64>) {
    let Some(step) = golden.steps.get(i) else { return (DivergenceKind::Unclassified, None, None, None) };
    let margin = step.margin();
    let expected = golden.generated_tokens.get(i).copied();
    let le = expected.and_then(|e| step.logit_of(e));
    let lg = got.and_then(|g| step.logit_of(g));
    let near = match (step.logits.first(), lg) {
        (Some(top), Some(lg)) => top.0 - lg < tol.near_tie_margin,
        _ => false,
    };
    let kind = if near && got.is_some() { DivergenceKind::NearTieFlip } else { DivergenceKind::Real };
    (kind, margin, le, lg)
}

/// Judges a free-running greedy stream, with the teacher-forced re-run when the stream diverged.
pub fn judge_generation(got: &[i64], golden: &GenerationGolden, forced_choices: Option<&[i64]>, tol: &Tolerance) -> GenerationReport {
    let expected = &golden.generated_tokens;
    let n = expected.len().max(got.len());
    let matches = expected.iter().zip(got).filter(|(a, b)| a == b).count();
    let ratio = if n == 0 { 1.0 } else { matches as f64 / n as f64 };
    let mut reasons = Vec::new();
    let first = (0..n).find(|&i| expected.get(i) != got.get(i));
    let first_divergence = first.map(|index| {
        let (kind, reference_margin, reference_logit_expected, reference_logit_got) = classify(golden, index, got.get(index).copied(), tol);
        Divergence {
            index,
            expected: expected.get(index).copied(),
            got: got.get(index).copied(),
            kind,
            reference_margin,
            reference_logit_expected,
            reference_logit_got,
        }
    });
    let teacher_forced = first_divergence.as_ref().and(forced_choices).map(|choices| {
        let mut tf = TeacherForced { steps: expected.len(), agree: 0, real_disagreements: vec![], near_tie_disagreements: vec![] };
        for (i, &e) in expected.iter().enumerate() {
            let c = choices.get(i).copied();
            if c == Some(e) {
                tf.agree += 1;
            } else if classify(golden, i, c, tol).0 == DivergenceKind::NearTieFlip {
                tf.near_tie_disagreements.push(i);
            } else {
                tf.real_disagreements.push(i);
            }
        }
        tf
    });

    let verdict = match &first_divergence {
        None => Verdict::Pass,
        Some(_) if ratio >= tol.min_token_match_ratio => {
            reasons.push(GenerationReason::TokenMatch { matches, n, ratio, min_ratio: tol.min_token_match_ratio, within: true });
            Verdict::Pass
        }
        Some(d) => {
            reasons.push(GenerationReason::TokenMatch { matches, n, ratio, min_ratio: tol.min_token_match_ratio, within: false });
            match (d.kind, &teacher_forced) {
                (DivergenceKind::NearTieFlip, Some(tf)) if tf.ratio() >= tol.min_token_match_ratio => {
                    reasons.push(GenerationReason::NearTieAgrees {
                        step: d.index,
                        margin: d.reference_margin,
                        agree: tf.agree,
                        steps: tf.steps,
                        near_tie_flips: tf.near_tie_disagreements.clone(),
                    });
                    Verdict::Ambiguous
                }
                (DivergenceKind::NearTieFlip, Some(tf)) => {
                    reasons.push(GenerationReason::NearTieDisagrees { step: d.index, real: tf.real_disagreements.clone() });
                    Verdict::Fail
                }
                (DivergenceKind::Real, _) => {
                    reasons.push(GenerationReason::RealDivergence {
                        step: d.index,
                        preferred_by: d.reference_logit_expected.zip(d.reference_logit_got).map(|(a, b)| a - b).or(d.reference_margin),
                        near_tie_margin: tol.near_tie_margin,
                    });
                    Verdict::Fail
                }
                _ => Verdict::Fail,
            }
        }
    };
    GenerationReport {
        verdict,
        reasons,
        expected: expected.clone(),
        got: got.to_vec(),
        matches,
        ratio,
        first_divergence,
        teacher_forced,
        tolerance: *tol,
    }
}

/// Where a teacher-forced decode step's logits first leave tolerance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepViolation {
    pub step: usize,
    pub id: i64,
    pub reference: f64,
    pub package: f64,
    /// atol + rtol * |reference|.
    pub bound: f64,
}

/// L5's logits: every teacher-forced decode step against the reference's stored per-step logits, at its ids.
#[derive(Debug, Clone, PartialEq)]
pub struct StepLogits {
    /// max |package - reference| per step (NaN where the package's logit is missing or not finite).
    pub per_step: Vec<f64>,
    /// The largest |diff| and its step.
    pub max_abs: f64,
    pub max_at: usize,
    pub first_out: Option<StepViolation>,
    /// How many steps hold a logit out of tolerance.
    pub steps_out: usize,
}

/// Judges decode-step logits. `got[i]` are the package's logits at `golden.steps[i].ids`, from a run fed the
/// golden's tokens (teacher-forced, so every step is comparable however the free stream went). The element rule is
/// the policy's logit check, |got - ref| <= atol + rtol * |ref|, kept here alone so a changed numeric policy is one
/// edit. `None` when the golden stores no per-step logits (mobius' goldens).
pub fn judge_step_logits(got: &[Vec<f32>], golden: &GenerationGolden, tol: &Tolerance) -> Option<StepLogits> {
    if golden.steps.is_empty() {
        return None;
    }
    let rows = golden.steps.iter().enumerate().map(|(step, want)| {
        let pkg = got.get(step).map_or(&[][..], Vec::as_slice);
        want.ids
            .iter()
            .zip(&want.logits)
            .enumerate()
            .map(move |(k, (&id, w))| (id, w.0, pkg.get(k).map_or(f64::NAN, |&g| g as f64), tol.atol + tol.rtol * w.0.abs()))
    });
    let r = judge_rows(rows);
    Some(StepLogits {
        per_step: r.per_row,
        max_abs: r.max_abs,
        max_at: r.max_at,
        first_out: r.first_out.map(|o| StepViolation {
            step: o.row,
            id: o.what,
            reference: o.reference,
            package: o.package,
            bound: o.bound,
        }),
        steps_out: r.rows_out,
    })
}
/// Folds the step-logits judgement into an L5 report: logits out of tolerance at any step fail the trial, whatever
/// the tokens did; the reason names the first such step, by how much, and whether the tokens still agree there.
pub fn with_step_logits(mut r: GenerationReport, s: &StepLogits) -> GenerationReport {
    let Some(first) = s.first_out else { return r };
    let tokens = match &r.first_divergence {
        None => TokensThere::AllAgree,
        Some(d) if d.index > first.step => TokensThere::AgreeUntil(d.index),
        Some(d) => TokensThere::DivergedAt(d.index),
    };
    r.reasons.push(GenerationReason::StepLogitsOut {
        first,
        out: s.steps_out,
        of: s.per_step.len(),
        max_abs: s.max_abs,
        max_at: s.max_at,
        tokens,
    });
    r.verdict = Verdict::Fail;
    r
}
