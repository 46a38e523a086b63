//! L4's verdict: the package's prefill logits against the golden's, at the last position and at every prompt
//! position.

use crate::judge::golden::PrefillGolden;
use crate::judge::tolerance::Tolerance;
use crate::judge::verdict::{NoiseJudgement, OverLimit, Verdict, half_ulp, judge_noise, judge_rows};
use mobius_numeric::{Comparison, TopK, compare, overlap};

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
    let (comparison, worst, noise) = match reference {
        Some(r) if r.len() != got.len() => {
            reasons.push(PrefillReason::VocabularySize { reference: r.len(), package: got.len() });
            (None, None, None)
        }
        Some(r) => full_vector(got, r, golden, tol, &mut reasons),
        None => (None, top10_only(got, golden, tol, &mut reasons), None),
    };
    let top10_overlap = overlap(&got_top.ids, &golden.top10_ids);
    let needed = (tol.top10_overlap_min as usize).min(golden.top10_ids.len());
    if top10_overlap < needed {
        reasons.push(PrefillReason::TopOverlap { overlap: top10_overlap, of: golden.top10_ids.len(), needed });
    }
    // Every reason so far fails the trial; an argmax flip fails it unless the reference's near-tie explains it.
    let mut verdict = if reasons.is_empty() { Verdict::Pass } else { Verdict::Fail };
    let want_top1_logit = golden.top10_logits.first().map(|h| h.0);
    let want_logit_of_got_top1 = got_top.ids.first().and_then(|&id| match reference {
        Some(r) => usize::try_from(id).ok().and_then(|i| r.get(i)).map(|&x| x as f64),
        None => golden.top10_ids.iter().position(|&i| i == id).map(|p| golden.top10_logits[p].0),
    });
    let got_top1 = got_top.ids.first().copied().unwrap_or(-1);
    if got_top1 != golden.top1_id {
        let flip = argmax_flip(got_top1, golden, want_top1_logit, want_logit_of_got_top1, tol);
        verdict = match (&flip, verdict) {
            (PrefillReason::Argmax { near_tie: false, .. }, _) => Verdict::Fail,
            (_, Verdict::Pass) => Verdict::Ambiguous,
            (_, v) => v,
        };
        reasons.push(flip);
    }
    PrefillReport {
        verdict,
        reasons,
        got_top,
        want_top1: golden.top1_id,
        want_top2: golden.top2_id,
        want_margin: golden.margin(),
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

/// The worst logit out of tolerance: its id, the reference's number and the package's.
type Worst = Option<(usize, f64, f64)>;

/// The package's full vector against the reference's (of the same length): by the noise policy when the golden
/// records the reference's noise, else element by element; and the cosine. Each failing check adds its reason.
fn full_vector(
    got: &[f32],
    r: &[f32],
    golden: &PrefillGolden,
    tol: &Tolerance,
    reasons: &mut Vec<PrefillReason>,
) -> (Option<Comparison>, Worst, Option<NoiseJudgement>) {
    let c = compare(got, r, tol.atol, tol.rtol);
    let worst = c.worst_violation_at.map(|i| (i, r[i] as f64, got[i] as f64));
    let mut noise = None;
    if let Some(n) = &golden.reference_noise {
        let j = judge_noise(got, r, n, tol);
        let over = j.over_limits();
        if !over.is_empty() {
            reasons.push(PrefillReason::OverNoise { over });
        }
        noise = Some(j);
    } else if let Some((i, w, g)) = worst {
        reasons.push(PrefillReason::OutsideTolerance { violations: c.violations, of: r.len(), id: i, expected: w, got: g });
    }
    if c.cosine < tol.cosine_min {
        reasons.push(PrefillReason::Cosine { cosine: c.cosine, floor: tol.cosine_min });
    }
    (Some(c), worst, noise)
}

/// mobius' goldens, which know only the reference's top-10 logits: the package's logits at those ids. Each id past
/// the package's vocabulary adds its reason, and the ids out of tolerance one more.
fn top10_only(got: &[f32], golden: &PrefillGolden, tol: &Tolerance, reasons: &mut Vec<PrefillReason>) -> Worst {
    let mut worst: Worst = None;
    let mut bad = 0;
    for (&id, w) in golden.top10_ids.iter().zip(&golden.top10_logits) {
        let Some(&g) = usize::try_from(id).ok().and_then(|i| got.get(i)) else {
            reasons.push(PrefillReason::TopIdOutside { id, logits: got.len() });
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
    }
    worst
}

/// The package's argmax is not the reference's: a near-tie when the reference itself scores the package's choice
/// within the margin of its top-1 (or, knowing only its top-2, when the package took the runner-up of a close pair).
fn argmax_flip(
    got_top1: i64,
    golden: &PrefillGolden,
    want_top1_logit: Option<f64>,
    want_logit_of_got_top1: Option<f64>,
    tol: &Tolerance,
) -> PrefillReason {
    let want_margin = golden.margin();
    let near_tie = match (want_top1_logit, want_logit_of_got_top1) {
        (Some(a), Some(b)) => a - b < tol.near_tie_margin,
        _ => want_margin.is_some_and(|m| m < tol.near_tie_margin) && got_top1 == golden.top2_id,
    };
    // A near-tie states the reference's margin over the package's choice, a real flip its top-1's over its top-2.
    let margin = if near_tie { want_top1_logit.zip(want_logit_of_got_top1).map(|(a, b)| a - b).or(want_margin) } else { want_margin };
    PrefillReason::Argmax { got: got_top1, want: golden.top1_id, margin, near_tie_margin: tol.near_tie_margin, near_tie }
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
