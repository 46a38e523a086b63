//! Verdicts: pure functions of (outputs, golden, tolerance). They never touch ONNX Runtime, so every path is tested
//! with crafted numbers. Here what L4's ([`crate::judge::prefill`]) and L5's ([`crate::judge::stream`]) verdicts
//! share: the verdict, the noise-floor judgement, a golden's staleness and the judging of rows of stored numbers.

use std::fmt;

use crate::feed::inputs::Inputs;
use crate::judge::golden::Noise;
use crate::judge::tolerance::Tolerance;
use crate::outcome::Status;

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
pub(crate) fn half_ulp(largest: f64) -> f64 {
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

/// Why a golden no longer belongs to the case's inputs (a stale golden is reported as such, never as a diff);
/// `report::verdict` words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stale {
    /// The golden states the prompt it was made from, and the case states another.
    Prompt { golden: String, case: String },
    /// The golden's input hash is not the hash of the case's inputs.
    InputHash { golden: String, case: String },
    /// The golden's input ids (mobius' goldens carry no hash) are not what the case's prompt tokenizes to.
    InputIds { golden: Vec<i64>, case: Vec<i64> },
}

/// Why a golden no longer belongs to the case's inputs, if it does not: its prompt differs, its input hash differs,
/// or (for mobius' goldens, which carry no hash) its input ids differ.
pub fn staleness(
    golden_hash: Option<&str>,
    golden_prompt: Option<&str>,
    golden_ids: &[i64],
    prompt: &str,
    inputs: &Inputs,
) -> Option<Stale> {
    if let Some(p) = golden_prompt
        && p != prompt
    {
        return Some(Stale::Prompt { golden: p.to_string(), case: prompt.to_string() });
    }
    let hash = inputs.hash();
    match golden_hash {
        Some(h) if h != hash => Some(Stale::InputHash { golden: h.to_string(), case: hash }),
        None if !golden_ids.is_empty() && golden_ids != inputs.input_ids() => {
            Some(Stale::InputIds { golden: golden_ids.to_vec(), case: inputs.input_ids().to_vec() })
        }
        _ => None,
    }
}

/// The worst number of a row past its bound.
pub(crate) struct RowViolation<K> {
    pub(crate) row: usize,
    /// Which number of the row (a token id; for a position, `None` is its logsumexp).
    pub(crate) what: K,
    pub(crate) reference: f64,
    pub(crate) package: f64,
    pub(crate) bound: f64,
}

/// Rows of stored reference numbers against the package's (decode steps, prompt positions).
pub(crate) struct Rows<K> {
    pub(crate) per_row: Vec<f64>,
    pub(crate) max_abs: f64,
    pub(crate) max_at: usize,
    pub(crate) first_out: Option<RowViolation<K>>,
    pub(crate) rows_out: usize,
}

/// Judges rows of `(what, reference, package, bound)`: per row its max |package - reference| and its worst number
/// past `bound`; over the rows the largest, where, the first row out and how many are out. A NaN (a missing number,
/// a non-finite logit) counts as infinite: out of tolerance, and the largest diff.
pub(crate) fn judge_rows<K: Copy, R: Iterator<Item = (K, f64, f64, f64)>>(rows: impl Iterator<Item = R>) -> Rows<K> {
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
