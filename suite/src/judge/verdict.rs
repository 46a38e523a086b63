//! Verdicts: pure functions of (outputs, golden, tolerance). They never touch ONNX Runtime, so every path is tested
//! with crafted numbers.

use std::fmt;

use crate::feed::inputs::Inputs;
use crate::judge::golden::{GenerationGolden, Noise, PrefillGolden};
use crate::judge::tolerance::Tolerance;
use crate::outcome::Status;
use mobius_numeric::{Comparison, TopK, compare, overlap};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Pass,
    /// A near-tie in the reference explains the difference: counted as a pass, and shown.
    Ambiguous,
    Fail,
}

impl From<Verdict> for Status {
    fn from(v: Verdict) -> Status {
        match v {
            Verdict::Pass => Status::Pass,
            Verdict::Ambiguous => Status::Ambiguous,
            Verdict::Fail => Status::Fail,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Pass => "PASS",
            Verdict::Ambiguous => "AMBIGUOUS",
            Verdict::Fail => "FAIL",
        })
    }
}

/// The noise-floor judgement of one logits vector: the package's |diff| statistics as multiples of the reference's own
/// float32-vs-float64 noise. Statistics are in the order p50, p99, max.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoiseJudgement {
    /// The package's |got - reference| statistics.
    pub diff: [f64; 3],
    /// The reference's noise statistics, each floored at half an ulp of the largest |reference logit|, times the
    /// dtype's scale.
    pub floor: [f64; 3],
    /// diff / floor.
    pub multiple: [f64; 3],
    /// The policy's limits on `multiple`.
    pub limit: [f64; 3],
    /// The largest multiple / limit: the policy's own statistic, at most 1 to pass.
    pub score: f64,
}

pub const STATS: [&str; 3] = ["p50", "p99", "max"];

impl NoiseJudgement {
    /// Each statistic over its limit (NaN counts as over).
    pub fn over_limits(&self) -> Vec<OverLimit> {
        (0..3)
            .filter(|&i| {
                !matches!(self.multiple[i].partial_cmp(&self.limit[i]), Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal))
            })
            .map(|i| OverLimit {
                stat: STATS[i],
                diff: self.diff[i],
                multiple: self.multiple[i],
                floor: self.floor[i],
                limit: self.limit[i],
            })
            .collect()
    }
}

/// One noise statistic over its limit: the package's |diff|, as a multiple of the noise floor, and the limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OverLimit {
    /// `p50`, `p99` or `max`.
    pub stat: &'static str,
    pub diff: f64,
    pub multiple: f64,
    pub floor: f64,
    pub limit: f64,
}

/// Half an ulp of float32 at `largest`: the finest error float32 can express at that scale, the least a noise floor is.
fn half_ulp(largest: f64) -> f64 {
    largest * f64::from(f32::EPSILON) / 2.0
}

/// Judges `got` against `want` in multiples of the reference's noise.
pub fn judge_noise(got: &[f32], want: &[f32], noise: &Noise, tol: &Tolerance) -> NoiseJudgement {
    let d: Vec<f64> = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w as f64).abs()).collect();
    let [max, p50, p99] = mobius_numeric::spread(&d);
    let diff = [p50, p99, max];
    let largest = want.iter().fold(0.0f64, |m, &w| if w.is_finite() { m.max((w as f64).abs()) } else { m });
    let noise = [noise.p50.0, noise.p99.0, noise.max.0];
    let floor = noise.map(|n| n.max(half_ulp(largest)).max(f64::MIN_POSITIVE) * tol.noise_dtype_scale);
    let limit = [tol.noise_multiple_p50, tol.noise_multiple_p99, tol.noise_multiple_max];
    let multiple = [0, 1, 2].map(|i| diff[i] / floor[i]);
    let score = (0..3).map(|i| if limit[i] > 0.0 { multiple[i] / limit[i] } else { f64::INFINITY }).fold(0.0, f64::max);
    NoiseJudgement { diff, floor, multiple, limit, score: if score.is_nan() { f64::INFINITY } else { score } }
}

/// L4: how the package's last-position logits compare with the reference's.
#[derive(Debug, Clone, PartialEq)]
pub struct PrefillReport {
    pub verdict: Verdict,
    pub reasons: Vec<PrefillReason>,
    pub got_top: TopK,
    pub want_top1: i64,
    pub want_top2: i64,
    pub want_margin: Option<f64>,
    /// The reference's logit for the package's top-1 (when the reference has it).
    pub want_logit_of_got_top1: Option<f64>,
    pub want_top1_logit: Option<f64>,
    /// Against the full reference vector, when the golden has it.
    pub comparison: Option<Comparison>,
    /// Element `i` of the worst violation: (id, reference, package).
    pub worst: Option<(usize, f64, f64)>,
    pub top10_overlap: usize,
    /// The noise-floor judgement, when the golden records the reference's noise (it replaces atol/rtol then).
    pub noise: Option<NoiseJudgement>,
    /// Every prompt position, when the golden stores them (set by [`with_positions`]).
    pub positions: Option<Positions>,
    pub tolerance: Tolerance,
}

/// Why an L4 verdict is not a plain pass, with the numbers it was decided by (`report::verdict` words it).
#[derive(Debug, Clone, PartialEq)]
pub enum PrefillReason {
    /// The reference's full vector and the package's have different lengths.
    VocabularySize {
        reference: usize,
        package: usize,
    },
    /// The noise-floor judgement's statistics over their limits.
    OverNoise {
        over: Vec<OverLimit>,
    },
    /// Logits of the full vector outside atol + rtol * |ref|, and the worst.
    OutsideTolerance {
        violations: usize,
        of: usize,
        id: usize,
        expected: f64,
        got: f64,
    },
    Cosine {
        cosine: f64,
        floor: f64,
    },
    /// One of the reference's top-10 ids is past the end of the package's logits.
    TopIdOutside {
        id: i64,
        logits: usize,
    },
    /// Of the reference's top-10 logits (all a mobius golden has), those outside atol + rtol * |ref|, and the worst.
    TopOutsideTolerance {
        outside: usize,
        id: usize,
        expected: f64,
        got: f64,
    },
    TopOverlap {
        overlap: usize,
        of: usize,
        needed: usize,
    },
    /// The package's argmax is not the reference's; `near_tie` when the reference's margin explains it.
    Argmax {
        got: i64,
        want: i64,
        margin: Option<f64>,
        near_tie_margin: f64,
        near_tie: bool,
    },
    /// A prompt position out of tolerance (the first), with how many are and the largest |diff|.
    PositionsOut {
        first: PositionViolation,
        out: usize,
        of: usize,
        by_noise: bool,
        max_abs: f64,
        max_at: usize,
    },
}

/// Judges prefill logits. `reference` is the golden's full last-position vector, when it has one; without it the
/// golden's top-10 logits are compared at their ids.
pub fn judge_prefill(got: &[f32], golden: &PrefillGolden, reference: Option<&[f32]>, tol: &Tolerance) -> PrefillReport {
    let got_top = TopK::of(got, 10);
    let mut reasons = Vec::new();
    let want_margin = golden.margin();
    let want_top1_logit = golden.top10_logits.first().map(|h| h.0);
    let want_logit_of = |id: i64| -> Option<f64> {
        match reference {
            Some(r) => r.get(id as usize).map(|&x| x as f64),
            None => golden.top10_ids.iter().position(|&i| i == id).map(|p| golden.top10_logits[p].0),
        }
    };
    let want_logit_of_got_top1 = got_top.ids.first().and_then(|&id| want_logit_of(id));
    let mut hard_fail = false;

    let mut noise = None;
    let (comparison, worst) = match reference {
        Some(r) if r.len() != got.len() => {
            reasons.push(PrefillReason::VocabularySize { reference: r.len(), package: got.len() });
            hard_fail = true;
            (None, None)
        }
        Some(r) => {
            let c = compare(got, r, tol.atol, tol.rtol);
            let worst = c.worst_violation_at.map(|i| (i, r[i] as f64, got[i] as f64));
            if let Some(n) = &golden.reference_noise {
                let j = judge_noise(got, r, n, tol);
                let over = j.over_limits();
                if !over.is_empty() {
                    reasons.push(PrefillReason::OverNoise { over });
                    hard_fail = true;
                }
                noise = Some(j);
            } else if let Some((i, w, g)) = worst {
                reasons.push(PrefillReason::OutsideTolerance { violations: c.violations, of: r.len(), id: i, expected: w, got: g });
                hard_fail = true;
            }
            if c.cosine < tol.cosine_min {
                reasons.push(PrefillReason::Cosine { cosine: c.cosine, floor: tol.cosine_min });
                hard_fail = true;
            }
            (Some(c), worst)
        }
        None => {
            // mobius' goldens: only the top-10 logits are known.
            let mut worst: Option<(usize, f64, f64)> = None;
            let mut bad = 0;
            for (&id, w) in golden.top10_ids.iter().zip(&golden.top10_logits) {
                let Some(&g) = usize::try_from(id).ok().and_then(|i| got.get(i)) else {
                    reasons.push(PrefillReason::TopIdOutside { id, logits: got.len() });
                    hard_fail = true;
                    continue;
                };
                let d = (g as f64 - w.0).abs();
                if d > tol.atol + tol.rtol * w.0.abs() {
                    bad += 1;
                    if worst.is_none_or(|(_, ww, gg)| d > (gg - ww).abs()) {
                        worst = Some((id as usize, w.0, g as f64));
                    }
                }
            }
            if let Some((i, w, g)) = worst {
                reasons.push(PrefillReason::TopOutsideTolerance { outside: bad, id: i, expected: w, got: g });
                hard_fail = true;
            }
            (None, worst)
        }
    };

    let top10_overlap = overlap(&got_top.ids, &golden.top10_ids);
    let needed = (tol.top10_overlap_min as usize).min(golden.top10_ids.len());
    if top10_overlap < needed {
        reasons.push(PrefillReason::TopOverlap { overlap: top10_overlap, of: golden.top10_ids.len(), needed });
        hard_fail = true;
    }

    let mut verdict = if hard_fail { Verdict::Fail } else { Verdict::Pass };
    let got_top1 = got_top.ids.first().copied().unwrap_or(-1);
    if got_top1 != golden.top1_id {
        // A flip is a near-tie when the reference itself scores the package's choice within the margin of its top-1.
        let near_tie = match (want_top1_logit, want_logit_of_got_top1) {
            (Some(a), Some(b)) => a - b < tol.near_tie_margin,
            _ => want_margin.is_some_and(|m| m < tol.near_tie_margin) && got_top1 == golden.top2_id,
        };
        // A near-tie states the reference's margin over the package's choice, a real flip its top-1's over its top-2.
        let margin = if near_tie { want_top1_logit.zip(want_logit_of_got_top1).map(|(a, b)| a - b).or(want_margin) } else { want_margin };
        reasons.push(PrefillReason::Argmax { got: got_top1, want: golden.top1_id, margin, near_tie_margin: tol.near_tie_margin, near_tie });
        if !near_tie {
            verdict = Verdict::Fail;
        } else if verdict == Verdict::Pass {
            verdict = Verdict::Ambiguous;
        }
    }
    PrefillReport {
        verdict,
        reasons,
        got_top,
        want_top1: golden.top1_id,
        want_top2: golden.top2_id,
        want_margin,
        want_logit_of_got_top1,
        want_top1_logit,
        comparison,
        worst,
        top10_overlap,
        noise,
        positions: None,
        tolerance: *tol,
    }
}

/// Where a prompt position's logits first leave tolerance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PositionViolation {
    pub position: usize,
    /// The token id, or `None` for the position's logsumexp.
    pub id: Option<i64>,
    pub reference: f64,
    pub package: f64,
    pub bound: f64,
}

/// L4 over every prompt position: the package's logits at the golden's stored per-position ids, and each
/// position's logsumexp (which stands for the rest of the vocabulary).
#[derive(Debug, Clone, PartialEq)]
pub struct Positions {
    /// max |package - reference| per position (infinite where the package's number is missing or not finite).
    pub per_position: Vec<f64>,
    pub max_abs: f64,
    pub max_at: usize,
    pub first_out: Option<PositionViolation>,
    pub positions_out: usize,
    /// Whether the bounds came from the reference's per-position noise (else atol + rtol * |ref|).
    pub by_noise: bool,
}

/// Judges every prompt position. `got[p]` holds the package's logits at `golden.positions[p].ids` and its logsumexp.
/// With a noise floor the bound at a position is the policy's max multiple of the reference's own noise there
/// (floored at half an ulp of its largest stored number, times the dtype's scale), as L4's last-position `max`
/// statistic; without one it is atol + rtol * |ref|. `None` when the golden stores no positions (mobius' goldens).
pub fn judge_positions(got: &[mobius_numeric::PositionLogits], golden: &PrefillGolden, tol: &Tolerance) -> Option<Positions> {
    if golden.positions.is_empty() {
        return None;
    }
    let by_noise = golden.reference_noise.is_some() && golden.positions.iter().all(|p| p.noise.is_some());
    let rows = golden.positions.iter().enumerate().map(|(position, want)| {
        let pkg = got.get(position);
        let largest = want.logits.iter().map(|h| h.0.abs()).fold(want.logsumexp.0.abs(), f64::max);
        let noise_bound = want
            .noise
            .filter(|_| by_noise)
            .map(|n| tol.noise_multiple_max * tol.noise_dtype_scale * n.0.max(half_ulp(largest)).max(f64::MIN_POSITIVE));
        let bound = move |w: f64| noise_bound.unwrap_or(tol.atol + tol.rtol * w.abs());
        want.ids
            .iter()
            .zip(&want.logits)
            .enumerate()
            .map(move |(k, (&id, w))| (Some(id), w.0, pkg.and_then(|p| p.watched.get(k)).map_or(f64::NAN, |&g| g as f64)))
            .chain(std::iter::once((None, want.logsumexp.0, pkg.map_or(f64::NAN, |p| p.logsumexp))))
            .map(move |(id, w, g)| (id, w, g, bound(w)))
    });
    let r = judge_rows(rows);
    Some(Positions {
        per_position: r.per_row,
        max_abs: r.max_abs,
        max_at: r.max_at,
        first_out: r.first_out.map(|o| PositionViolation {
            position: o.row,
            id: o.what,
            reference: o.reference,
            package: o.package,
            bound: o.bound,
        }),
        positions_out: r.rows_out,
        by_noise,
    })
}

/// Folds the every-position judgement into an L4 report: a position out of tolerance fails the trial, and the reason
/// names the first one.
pub fn with_positions(mut r: PrefillReport, p: Positions) -> PrefillReport {
    if let Some(first) = p.first_out {
        r.reasons.push(PrefillReason::PositionsOut {
            first,
            out: p.positions_out,
            of: p.per_position.len(),
            by_noise: p.by_noise,
            max_abs: p.max_abs,
            max_at: p.max_at,
        });
        r.verdict = Verdict::Fail;
    }
    r.positions = Some(p);
    r
}

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

/// Why a golden no longer belongs to the case's inputs, if it does not: its input hash differs, or (for mobius'
/// goldens, which carry no hash) its prompt or input ids differ. A stale golden is reported as such, never as a diff.
pub fn staleness(
    golden_hash: Option<&str>,
    golden_prompt: Option<&str>,
    golden_ids: &[i64],
    prompt: &str,
    inputs: &Inputs,
) -> Option<String> {
    if let Some(p) = golden_prompt
        && p != prompt
    {
        return Some(format!("was made from prompt {p:?}, but the case states {prompt:?}"));
    }
    let hash = inputs.hash();
    match golden_hash {
        Some(h) if h != hash => Some(format!("was made from other inputs (input_hash {h}; the case's inputs hash to {hash})")),
        None if !golden_ids.is_empty() && golden_ids != inputs.input_ids() => {
            Some(format!("was made from input ids {golden_ids:?}, but the case's prompt tokenizes to {:?}", inputs.input_ids()))
        }
        _ => None,
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

/// The worst number of a row past its bound.
struct RowViolation<K> {
    row: usize,
    /// Which number of the row (a token id; for a position, `None` is its logsumexp).
    what: K,
    reference: f64,
    package: f64,
    bound: f64,
}

/// Rows of stored reference numbers against the package's (decode steps, prompt positions).
struct Rows<K> {
    per_row: Vec<f64>,
    max_abs: f64,
    max_at: usize,
    first_out: Option<RowViolation<K>>,
    rows_out: usize,
}

/// Judges rows of `(what, reference, package, bound)`: per row its max |package - reference| and its worst number
/// past `bound`; over the rows the largest, where, the first row out and how many are out. A NaN (a missing number,
/// a non-finite logit) counts as infinite: out of tolerance, and the largest diff.
fn judge_rows<K: Copy, R: Iterator<Item = (K, f64, f64, f64)>>(rows: impl Iterator<Item = R>) -> Rows<K> {
    let mut r = Rows { per_row: Vec::new(), max_abs: 0.0, max_at: 0, first_out: None, rows_out: 0 };
    for (row, numbers) in rows.enumerate() {
        let mut worst = 0.0f64;
        let mut out: Option<RowViolation<K>> = None;
        for (what, reference, package, bound) in numbers {
            let d = (package - reference).abs();
            let d = if d.is_nan() { f64::INFINITY } else { d };
            worst = worst.max(d);
            if d > bound && out.as_ref().is_none_or(|o| d > (o.package - o.reference).abs()) {
                out = Some(RowViolation { row, what, reference, package, bound });
            }
        }
        r.per_row.push(worst);
        if worst > r.max_abs {
            (r.max_abs, r.max_at) = (worst, row);
        }
        if let Some(o) = out {
            r.rows_out += 1;
            r.first_out.get_or_insert(o);
        }
    }
    r
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
