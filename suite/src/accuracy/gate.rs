//! The accuracy gate: a package's benchmark accuracy against the reference's. It fails when the net delta exceeds
//! `max_delta_points` (1.0 by default), or when the items that flipped lean one way beyond chance (McNemar's exact
//! test at `flip_alpha`, 0.05), even if the net delta is within bounds; it reports the flips with both margins, the
//! standard errors, the minimum detectable delta for the task's size, and warns (refuses under `CI`) when the
//! task is too small to decide its `max_delta_points`.
//!
//! The reference side (`cargo xtask regen-goldens`) writes `goldens/baselines/<task>/<model>.json`: the Hugging
//! Face accuracy and every item's per-choice log-likelihoods (hex floats), or its generated answer. [`crate::accuracy::eval`]
//! runs the same requests through ONNX Runtime; this module only judges: numbers in, verdict out, like
//! [`crate::judge::verdict`], so every path is tested on crafted log-likelihoods without a session.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::accuracy::policy::GatePolicy;
use crate::accuracy::scoring::{self, Picks, Scored};
use crate::accuracy::task::spec::Metric;
use crate::accuracy::task::{Item, ItemKind};
use crate::error::{At, Error, Result, bail};
use crate::judge::golden::{Hex, Provenance};

/// `goldens/baselines/<task>/<model>.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    pub task: String,
    pub model: String,
    pub metric: String,
    pub num_fewshot: usize,
    pub n: usize,
    /// The reference's score on `metric`, in [0, 1].
    pub accuracy: f64,
    pub stderr: f64,
    /// Both multiple-choice metrics, for the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acc: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acc_norm: Option<f64>,
    /// Items where a token merges across the context/continuation boundary (lm-eval's rule still applies).
    pub boundary_merges: usize,
    /// sha256 of every request's token ids: a changed task, data or tokenizer makes the baseline stale.
    pub requests_hash: String,
    pub items: Vec<BaselineItem>,
    pub provenance: Provenance,
}

/// One document's reference outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselineItem {
    /// Multiple choice: each choice's log-likelihood.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logliks: Vec<Hex>,
    /// generate_until: the extracted answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

impl Baseline {
    pub fn load(path: &Path, shown: &str) -> Result<Baseline> {
        read_baseline(path, shown, |b: &Baseline| (b.items.len(), b.n))
    }

    pub fn to_json(&self) -> Vec<u8> {
        baseline_bytes(self)
    }
}

/// A baseline file (the text gate's or the multimodal gate's) read, naming `shown` in its errors; `count` gives
/// its (`items` entries, `n`), which must agree.
pub fn read_baseline<T: serde::de::DeserializeOwned>(path: &Path, shown: &str, count: fn(&T) -> (usize, usize)) -> Result<T> {
    let text = std::fs::read_to_string(path).at(shown)?;
    let b: T = serde_json::from_str(&text).map_err(|e| Error::new(format!("{shown}: {e}")))?;
    let (items, n) = count(&b);
    if items != n {
        bail!("{shown}: field `items` has {items} entries but `n` is {n}");
    }
    Ok(b)
}

/// A baseline as its file holds it: pretty JSON and a final newline.
pub fn baseline_bytes<T: Serialize>(b: &T) -> Vec<u8> {
    let mut v = serde_json::to_vec_pretty(b).expect("a baseline serializes");
    v.push(b'\n');
    v
}

/// sha256 over every item's token ids (context, then each continuation), in order.
pub fn requests_hash(items: &[Item]) -> String {
    let mut h = Sha256::new();
    for it in items {
        for s in it.sequences() {
            h.update((s.len() as u64).to_le_bytes());
            s.iter().for_each(|t| h.update(t.to_le_bytes()));
        }
        h.update([0xff]);
    }
    crate::digest::hex(h)
}

/// Whether `scored` answers `item` correctly under `metric`, and the index or text it chose.
pub fn judge_item(item: &Item, scored: &Scored, metric: Metric) -> (bool, String) {
    match (&item.kind, scored) {
        (ItemKind::MultipleChoice { choices, gold, .. }, Scored::Choices(l)) => {
            let Picks { acc, acc_norm } = scoring::pick(l, choices);
            let chosen = if metric == Metric::AccNorm { acc_norm } else { acc };
            (chosen == *gold, chosen.to_string())
        }
        (ItemKind::Generate { target, .. }, Scored::Answer(a)) => (a == target, a.clone()),
        _ => (false, "?".into()),
    }
}

/// The scores a metric ranks choices by: log-likelihoods, or those divided by the choice's length in characters.
pub fn metric_scores(item: &Item, logliks: &[f64], metric: Metric) -> Vec<f64> {
    match (&item.kind, metric) {
        (ItemKind::MultipleChoice { choices, .. }, Metric::AccNorm) => scoring::normalized(logliks, choices),
        _ => logliks.to_vec(),
    }
}

/// An item whose answer differs between the reference and the package.
#[derive(Debug, Clone, PartialEq)]
pub struct Flip {
    pub doc: usize,
    pub reference: String,
    pub got: String,
    pub reference_correct: bool,
    pub got_correct: bool,
    /// The reference's margin for its own answer under the metric (how close to a tie it was), when scored.
    pub reference_margin: Option<f64>,
    pub got_margin: Option<f64>,
}

/// McNemar's exact test, two-sided: the probability, were a flip equally likely to go either way, of a split of
/// `lost + gained` flips at least as uneven as this one. 1 when nothing flipped.
pub fn mcnemar_exact(lost: usize, gained: usize) -> f64 {
    let n = lost + gained;
    let k = lost.min(gained);
    // P(X <= k), X ~ Binomial(n, 1/2), summed in log space (0.5^n underflows past n = 1074).
    let mut ln_pmf = -(n as f64) * std::f64::consts::LN_2;
    let mut terms = Vec::with_capacity(k + 1);
    for i in 0..=k {
        terms.push(ln_pmf);
        ln_pmf += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    let max = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let tail = max.exp() * terms.iter().map(|t| (t - max).exp()).sum::<f64>();
    (2.0 * tail).min(1.0)
}

/// The fewest flips, all one way, that McNemar's exact test calls significant at `alpha`.
pub fn min_significant_flips(alpha: f64) -> usize {
    (1..=64).find(|&k| mcnemar_exact(k, 0) < alpha).unwrap_or(usize::MAX)
}

/// The gate's verdict on one task x variant: numbers in, verdict and its reasons out.
#[derive(Debug, Clone, PartialEq)]
pub struct GateReport {
    pub reference: f64,
    pub got: f64,
    pub stderr_reference: f64,
    pub stderr_got: f64,
    pub delta_points: f64,
    pub policy: GatePolicy,
    pub pass: bool,
    /// Every item whose answer changed (also wrong -> other wrong), with both margins.
    pub flips: Vec<Flip>,
    /// Items right in the reference and wrong in the package, and the reverse (McNemar's discordant pairs).
    pub lost: usize,
    pub gained: usize,
    /// McNemar's exact two-sided p-value on (`lost`, `gained`).
    pub flip_p_value: f64,
    /// The smallest net change the flip test detects at this size: `min_significant_flips` one-way flips, in points.
    pub min_detectable_points: f64,
    /// What one item moves accuracy by, in points.
    pub points_per_item: f64,
    /// One item moves accuracy by more than `max_delta_points`: the net rule cannot be honoured at this size.
    pub too_small: bool,
    /// Why it failed, or what it warns about.
    pub reasons: Vec<GateReason>,
    /// Largest |log-likelihood difference| over every choice (multiple choice).
    pub max_loglik_diff: Option<f64>,
    pub n: usize,
}

/// Why the text gate failed, or what it warns about, with the numbers it was decided by (the gate's render module
/// words it).
#[derive(Debug, Clone, PartialEq)]
pub enum GateReason {
    /// One item moves accuracy by more than `max_delta_points` (`need` items would do): a failure when `refused`
    /// (the policy's `refuse_small`), else a warning.
    TooSmall {
        max_delta_points: f64,
        points_per_item: f64,
        n: usize,
        need: f64,
        refused: bool,
    },
    NetDelta {
        delta_points: f64,
        max_delta_points: f64,
    },
    /// McNemar's exact test finds the flips lean one way.
    FlipsLean {
        lost: usize,
        gained: usize,
        p_value: f64,
        flip_alpha: f64,
    },
    TooManyFlipped {
        items: usize,
        points: f64,
        max_flipped_points: f64,
    },
}

/// Compares the package's scores with the baseline. Pure: numbers in, verdict out.
///
/// The gate fails when the net delta exceeds `max_delta_points`, or the flips lean one way beyond chance
/// (McNemar, `flip_alpha`), or more items flip than `max_flipped_points` allows. A task where one item moves
/// accuracy by more than `max_delta_points` cannot decide the net rule: there the flip test decides alone and the
/// report warns, unless `refuse_small` makes it a failure.
pub fn judge(items: &[Item], got: &[Scored], baseline: &Baseline, metric: Metric, policy: &GatePolicy) -> Result<GateReport> {
    if items.len() != baseline.items.len() || got.len() != items.len() {
        bail!("the baseline has {} items, the task {} and the package answered {}", baseline.items.len(), items.len(), got.len());
    }
    let sides = sides(items, got, baseline, metric)?;
    let (reference, stderr_reference) = scoring::mean_stderr(&sides.ref_ok);
    let (got_acc, stderr_got) = scoring::mean_stderr(&sides.got_ok);
    let delta_points = 100.0 * (got_acc - reference);
    let lost = sides.ref_ok.iter().zip(&sides.got_ok).filter(|(r, g)| **r && !**g).count();
    let gained = sides.ref_ok.iter().zip(&sides.got_ok).filter(|(r, g)| !**r && **g).count();
    let n = items.len();
    let points_per_item = if n == 0 { f64::INFINITY } else { 100.0 / n as f64 };
    let mut r = GateReport {
        reference,
        got: got_acc,
        stderr_reference,
        stderr_got,
        delta_points,
        policy: *policy,
        pass: true,
        flips: sides.flips,
        lost,
        gained,
        flip_p_value: mcnemar_exact(lost, gained),
        min_detectable_points: (min_significant_flips(policy.flip_alpha) as f64 * points_per_item).min(100.0),
        points_per_item,
        too_small: points_per_item > policy.max_delta_points + 1e-9,
        reasons: Vec::new(),
        max_loglik_diff: sides.max_diff,
        n,
    };
    decide(&mut r);
    Ok(r)
}

/// Every item judged on both sides: which were right, the answers that changed, and the largest log-likelihood
/// difference.
struct Sides {
    ref_ok: Vec<bool>,
    got_ok: Vec<bool>,
    flips: Vec<Flip>,
    max_diff: Option<f64>,
}

fn sides(items: &[Item], got: &[Scored], baseline: &Baseline, metric: Metric) -> Result<Sides> {
    let mut s =
        Sides { ref_ok: Vec::with_capacity(items.len()), got_ok: Vec::with_capacity(items.len()), flips: Vec::new(), max_diff: None };
    for ((item, b), g) in items.iter().zip(&baseline.items).zip(got) {
        let reference = match &item.kind {
            ItemKind::MultipleChoice { choices, .. } => {
                if b.logliks.len() != choices.len() {
                    bail!("document {}: the baseline has {} log-likelihoods for {} choices", item.doc, b.logliks.len(), choices.len());
                }
                Scored::Choices(b.logliks.iter().map(|h| h.0).collect())
            }
            ItemKind::Generate { .. } => Scored::Answer(b.answer.clone().unwrap_or_default()),
        };
        if let (Scored::Choices(r), Scored::Choices(x)) = (&reference, g) {
            let d = r.iter().zip(x).map(|(a, b)| (a - b).abs()).filter(|d| !d.is_nan()).fold(0.0, f64::max);
            s.max_diff = Some(s.max_diff.map_or(d, |m: f64| m.max(d)));
        }
        let (rc, rwhich) = judge_item(item, &reference, metric);
        let (gc, gwhich) = judge_item(item, g, metric);
        s.ref_ok.push(rc);
        s.got_ok.push(gc);
        if rwhich != gwhich {
            let margin = |s: &Scored, which: &str| match s {
                Scored::Choices(l) => which.parse().ok().map(|i| scoring::margin(&metric_scores(item, l, metric), i)),
                Scored::Answer(_) => None,
            };
            s.flips.push(Flip {
                doc: item.doc,
                reference_margin: margin(&reference, &rwhich),
                got_margin: margin(g, &gwhich),
                reference: rwhich,
                got: gwhich,
                reference_correct: rc,
                got_correct: gc,
            });
        }
    }
    Ok(s)
}

/// The verdict from the report's numbers under its policy: `pass`, and a reason for each rule that fails or warns.
fn decide(r: &mut GateReport) {
    let (policy, n, points_per_item, delta_points) = (r.policy, r.n, r.points_per_item, r.delta_points);
    let net_ok = delta_points.abs() <= policy.max_delta_points + 1e-9;
    let max_delta_points = policy.max_delta_points;
    if r.too_small {
        let need = (100.0 / max_delta_points.max(1e-9)).ceil();
        r.reasons.push(GateReason::TooSmall { max_delta_points, points_per_item, n, need, refused: policy.refuse_small });
        if policy.refuse_small {
            r.pass = false;
        }
    } else if !net_ok {
        r.reasons.push(GateReason::NetDelta { delta_points, max_delta_points });
        r.pass = false;
    }
    let (lost, gained) = (r.lost, r.gained);
    if r.flip_p_value < policy.flip_alpha {
        r.reasons.push(GateReason::FlipsLean { lost, gained, p_value: r.flip_p_value, flip_alpha: policy.flip_alpha });
        r.pass = false;
    }
    if let Some(m) = policy.max_flipped_points {
        let flipped = (lost + gained) as f64 * points_per_item;
        if flipped > m + 1e-9 {
            r.reasons.push(GateReason::TooManyFlipped { items: lost + gained, points: flipped, max_flipped_points: m });
            r.pass = false;
        }
    }
}
