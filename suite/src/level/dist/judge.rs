//! The distribution level's verdict: how far a package's next-token distributions sit from the **fp32 reference**'s
//! over a teacher-forced corpus, for every dtype alike, in llama.cpp's `--kl-divergence` terms (mean KL divergence
//! with its uncertainty and its spread, Δp, "same top p", the perplexity ratio).
//!
//! The golden (`<case>.dist.safetensors`, written by `xtask/reference/dist.py`) keeps, per scored position, the
//! reference's top-k log-probabilities and the log of the mass outside them (a tail bucket), and the log-probability
//! of the corpus's own next token. KL is computed over that partition (the top k ids one by one, the rest as one
//! bin): by the log-sum inequality it is a lower bound of the full-vocabulary KL, and the golden records, per
//! variant at regen, how much of the full KL it captured.
//!
//! The verdict holds mean and p99 KL within multiples of a floor the golden measured on the reference itself for
//! the trial's dtype (the float64 model for f32; the model cast to f16 / bf16; the suite's own round-to-nearest
//! int4), never of anything read from the package, so a quantizer that is wrong in the same way as its own
//! dequantized weights still shows.

use serde::Deserialize;

use super::golden::{Check, Floor};
use super::stats::{Position, Stats};
use crate::error::{Error, Result, bail};
use crate::judge::tolerance::Policy;
use crate::outcome::Outcome;
use crate::vocab::{Dtype, Level};

/// The gate's numbers for one dtype (`cases/tolerances.yaml`, `dist:`): mean and p99 KL at most these multiples
/// of the golden's floor for the dtype, plus an absolute allowance for a floor that is (near) zero.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistTolerance {
    pub kld_multiple_mean: f64,
    pub kld_multiple_p99: f64,
    pub kld_abs: f64,
    /// When set: the mean |package KL - floor KL| over the positions, paired, over the floor's mean KL, must stay
    /// under it. For int4, whose floor is the suite's own round-to-nearest quantization of the reference, this is
    /// how far the package's quantizer sits from an independent one: a 1% error in one weight is lost in int4's own
    /// mean KL, not in the pairing.
    #[serde(default)]
    pub max_deviation: Option<f64>,
}

impl DistTolerance {
    /// The numbers for `dtype`: the policy's `dist:` entry, else the built-in table's, read and checked here; an
    /// error names the file and the field.
    pub fn of(policy: &Policy, dtype: Dtype) -> Result<DistTolerance> {
        let (file, v) = policy
            .section(Level::Dist, dtype)
            .ok_or_else(|| Error::new(format!("{}: no entry `dist.{dtype}` (nor in the built-in table)", policy.source)))?;
        let at = format!("{file}: field `dist.{dtype}`");
        let t: DistTolerance = serde_json::from_value(v.clone()).map_err(|e| Error::new(format!("{at}: {e}")))?;
        t.validate().map_err(|e| e.context(&at))?;
        Ok(t)
    }

    pub fn validate(&self) -> Result<()> {
        let deviation = ("max_deviation", self.max_deviation.unwrap_or(0.0));
        for (name, v) in [
            ("kld_multiple_mean", self.kld_multiple_mean),
            ("kld_multiple_p99", self.kld_multiple_p99),
            ("kld_abs", self.kld_abs),
            deviation,
        ] {
            if !(v.is_finite() && v >= 0.0) {
                bail!("`{name}` is {v}, expected a finite number >= 0");
            }
        }
        Ok(())
    }
}

/// The verdict on one trial, as data.
#[derive(Debug, Clone, PartialEq)]
pub struct DistReport {
    pub pass: bool,
    pub stats: Stats,
    pub floor: Floor,
    pub tolerance: DistTolerance,
    /// The limits the two statistics were held to.
    pub mean_limit: f64,
    pub p99_limit: f64,
    /// Each statistic over its limit (at most 1 passes; NaN counts as over).
    pub mean_score: f64,
    pub p99_score: f64,
    /// mean |package KL - floor KL| over the floor's mean KL, position by position, and over its limit when gated.
    pub deviation: f64,
    pub deviation_score: Option<f64>,
    pub k: usize,
    /// What regen measured of this variant: the share of the full KL that the top-k + tail partition captured.
    pub check: Option<Check>,
    /// The KL per scored position, in corpus order (the report's plots).
    pub kld: Vec<f64>,
    pub reasons: Vec<DistReason>,
}

/// Why a dist trial fails, with the numbers it was decided by (its render module words it).
#[derive(Debug, Clone, PartialEq)]
pub enum DistReason {
    /// Mean KL over its limit: `multiple` x the floor's mean + `abs`; `score` is the KL over the limit.
    Mean(KldOver),
    /// 99th-percentile KL over its limit, likewise.
    P99(KldOver),
    /// The paired deviation from the floor (`against` names the floor) over its limit.
    Deviation { deviation: f64, against: String, limit: f64 },
}

/// A KL statistic over its limit, and the numbers of the limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KldOver {
    pub kld: f64,
    pub limit: f64,
    pub multiple: f64,
    pub floor: f64,
    pub abs: f64,
    pub score: f64,
}

impl DistReport {
    /// The level's own statistic: the largest of its statistics over its limit (at most 1 passes).
    pub fn score(&self) -> f64 {
        self.mean_score.max(self.p99_score).max(self.deviation_score.unwrap_or(0.0))
    }
}

/// The dist judgement of an outcome, when it has one.
pub fn of(o: &Outcome) -> Option<&DistReport> {
    o.judgement.as_ref()?.downcast::<DistReport>()
}

/// Judges the measured positions against the floor for the trial's dtype (`floor_kld`: the floor's KL at each).
pub fn judge(positions: &[Position], floor: &Floor, floor_kld: &[f32], tol: DistTolerance, k: usize, check: Option<Check>) -> DistReport {
    let stats = Stats::of(positions);
    let paired: f64 = positions.iter().zip(floor_kld).map(|(p, &f)| (p.kld - f as f64).abs()).sum::<f64>() / positions.len().max(1) as f64;
    let deviation = if floor.mean_kld > 0.0 { paired / floor.mean_kld } else { f64::INFINITY };
    let deviation_score = tol.max_deviation.map(|m| if deviation.is_nan() { f64::INFINITY } else { deviation / m });
    let mean_limit = tol.kld_multiple_mean * floor.mean_kld + tol.kld_abs;
    let p99_limit = tol.kld_multiple_p99 * floor.p99_kld + tol.kld_abs;
    let score = |v: f64, limit: f64| if v.is_nan() { f64::INFINITY } else { v / limit };
    let (mean_score, p99_score) = (score(stats.kld.value, mean_limit), score(stats.p99_kld(), p99_limit));
    let mut reasons = Vec::new();
    if mean_score > 1.0 {
        reasons.push(DistReason::Mean(KldOver {
            kld: stats.kld.value,
            limit: mean_limit,
            multiple: tol.kld_multiple_mean,
            floor: floor.mean_kld,
            abs: tol.kld_abs,
            score: mean_score,
        }));
    }
    if p99_score > 1.0 {
        reasons.push(DistReason::P99(KldOver {
            kld: stats.p99_kld(),
            limit: p99_limit,
            multiple: tol.kld_multiple_p99,
            floor: floor.p99_kld,
            abs: tol.kld_abs,
            score: p99_score,
        }));
    }
    if let (Some(score), Some(limit)) = (deviation_score, tol.max_deviation)
        && score > 1.0
    {
        reasons.push(DistReason::Deviation { deviation, against: floor.against.clone(), limit });
    }
    DistReport {
        pass: reasons.is_empty(),
        deviation,
        deviation_score,
        kld: positions.iter().map(|p| p.kld).collect(),
        stats,
        floor: floor.clone(),
        tolerance: tol,
        mean_limit,
        p99_limit,
        mean_score,
        p99_score,
        k,
        check,
        reasons,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_numbers_come_from_the_policy_and_are_checked_naming_the_field() {
        let builtin = DistTolerance::of(&Policy::builtin(), Dtype::Int4).unwrap();
        assert!(builtin.max_deviation.is_some(), "int4 is paired with its floor");
        let p = Policy::parse("t.yaml", "dist:\n  f32: { kld_multiple_mean: 2, kld_multiple_p99: 2, kld_abs: -1 }\n").unwrap();
        let e = DistTolerance::of(&p, Dtype::F32).unwrap_err().to_string();
        assert!(e.contains("t.yaml: field `dist.f32`") && e.contains("kld_abs"), "{e}");
        let p = Policy::parse("t.yaml", "dist:\n  f32: { kld_multiple_mean: 2, bogus: 1 }\n").unwrap();
        let e = DistTolerance::of(&p, Dtype::F32).unwrap_err().to_string();
        assert!(e.contains("t.yaml: field `dist.f32`") && e.contains("bogus"), "{e}");
    }

    #[test]
    fn the_verdict_fails_over_either_limit_and_on_nan() {
        let floor = Floor {
            non_finite: false,
            positions: 4,
            mean_kld: 1e-3,
            p99_kld: 1e-2,
            max_kld: 2e-2,
            same_top: 1.0,
            against: "x".into(),
            full_mean_kld: None,
        };
        let tol = DistTolerance { kld_multiple_mean: 2.0, kld_multiple_p99: 2.0, kld_abs: 0.0, max_deviation: None };
        let at = |kld: f64| Position { kld, delta_p: 0.0, logq_target: -1.0, logp_target: -1.0, same_top: true };
        let f = [1e-3f32; 100];
        assert!(judge(&[at(1e-3), at(1e-3)], &floor, &f, tol, 8, None).pass);
        let r = judge(&[at(3e-3), at(3e-3)], &floor, &f, tol, 8, None);
        assert!(!r.pass && r.reasons[0].to_string().starts_with("mean KLD"), "{:?}", r.reasons);
        // A tail of large divergences fails the 99th percentile even where the mean holds.
        let loose_mean = DistTolerance { kld_multiple_mean: 100.0, ..tol };
        let r = judge(&[at(1e-4); 97].iter().copied().chain([at(0.05); 3]).collect::<Vec<_>>(), &floor, &f, loose_mean, 8, None);
        assert!(!r.pass && r.reasons.len() == 1 && r.reasons[0].to_string().starts_with("99.0% KLD"), "{:?}", r.reasons);
        assert!(!judge(&[at(f64::NAN)], &floor, &f, tol, 8, None).pass);
        // Paired: the same mean KL, moved position by position, passes the mean and fails the deviation.
        let gated = DistTolerance { max_deviation: Some(0.1), ..tol };
        let swapped = [at(0.5e-3), at(1.5e-3)];
        assert!(judge(&swapped, &floor, &f, tol, 8, None).pass);
        let r = judge(&swapped, &floor, &f, gated, 8, None);
        assert!(!r.pass && (r.deviation - 0.5).abs() < 1e-6, "{} {:?}", r.deviation, r.reasons);
    }
}
