//! The accuracy gate: a package's benchmark accuracy against the reference's, within `max_delta_points` (1.0 by
//! default), with the items whose answer flipped and the standard error always reported.
//!
//! The reference side (`cargo xtask regen-goldens`) writes `goldens/baselines/<task>/<model>.json`: the Hugging
//! Face accuracy and every item's per-choice log-likelihoods (hex floats), or its generated answer. [`crate::eval`]
//! runs the same requests through ONNX Runtime; this module only judges: numbers in, verdict out, like
//! [`crate::verdict`], so every path is tested on crafted log-likelihoods without a session.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{At, Error, Result, bail};
use crate::golden::{Hex, Provenance};
pub use crate::scoring::Scored;
use crate::scoring::{self, Picks};
use crate::task::{Item, ItemKind, Metric};

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
        let text = std::fs::read_to_string(path).at(shown)?;
        let b: Baseline = serde_json::from_str(&text).map_err(|e| Error::new(format!("{shown}: {e}")))?;
        if b.items.len() != b.n {
            bail!("{shown}: field `items` has {} entries but `n` is {}", b.items.len(), b.n);
        }
        Ok(b)
    }

    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("a baseline serializes");
        v.push(b'\n');
        v
    }
}

/// sha256 over every item's token ids (context, then each continuation), in order.
pub fn requests_hash(items: &[Item]) -> String {
    let mut h = Sha256::new();
    for it in items {
        let seqs: Vec<&[i64]> = match &it.kind {
            ItemKind::MultipleChoice { context_ids, continuations, .. } => {
                std::iter::once(context_ids.as_slice()).chain(continuations.iter().map(Vec::as_slice)).collect()
            }
            ItemKind::Generate { context_ids, .. } => vec![context_ids],
        };
        for s in seqs {
            h.update((s.len() as u64).to_le_bytes());
            s.iter().for_each(|t| h.update(t.to_le_bytes()));
        }
        h.update([0xff]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
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

/// The gate's verdict on one task x variant.
#[derive(Debug, Clone, PartialEq)]
pub struct GateReport {
    pub reference: f64,
    pub got: f64,
    pub stderr_reference: f64,
    pub stderr_got: f64,
    pub delta_points: f64,
    pub max_delta_points: f64,
    pub pass: bool,
    pub flips: Vec<Flip>,
    /// Largest |log-likelihood difference| over every choice (multiple choice).
    pub max_loglik_diff: Option<f64>,
    pub n: usize,
}

/// Compares the package's scores with the baseline. Pure: numbers in, verdict out.
pub fn judge(items: &[Item], got: &[Scored], baseline: &Baseline, metric: Metric, max_delta_points: f64) -> Result<GateReport> {
    if items.len() != baseline.items.len() || got.len() != items.len() {
        bail!("the baseline has {} items, the task {} and the package answered {}", baseline.items.len(), items.len(), got.len());
    }
    let mut ref_ok = Vec::with_capacity(items.len());
    let mut got_ok = Vec::with_capacity(items.len());
    let mut flips = Vec::new();
    let mut max_diff: Option<f64> = None;
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
            let d = r.iter().zip(x).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            max_diff = Some(max_diff.map_or(d, |m: f64| m.max(d)));
        }
        let (rc, rwhich) = judge_item(item, &reference, metric);
        let (gc, gwhich) = judge_item(item, g, metric);
        ref_ok.push(rc);
        got_ok.push(gc);
        if rwhich != gwhich {
            let margin = |s: &Scored, which: &str| match s {
                Scored::Choices(l) => which.parse().ok().map(|i| scoring::margin(&metric_scores(item, l, metric), i)),
                Scored::Answer(_) => None,
            };
            flips.push(Flip {
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
    let (reference, stderr_reference) = scoring::mean_stderr(&ref_ok);
    let (got_acc, stderr_got) = scoring::mean_stderr(&got_ok);
    let delta_points = 100.0 * (got_acc - reference);
    Ok(GateReport {
        reference,
        got: got_acc,
        stderr_reference,
        stderr_got,
        delta_points,
        max_delta_points,
        pass: delta_points.abs() <= max_delta_points + 1e-9,
        flips,
        max_loglik_diff: max_diff,
        n: items.len(),
    })
}

/// The report a person reads. It holds only numbers that repeat exactly run after run (speed is `cargo xtask bench`'s).
pub fn render(trial: &str, metric: Metric, r: &GateReport, baseline_file: &str, regenerate: &str) -> String {
    let mut s = format!(
        "{trial}: {}: {} {:.2}% (reference {:.2}%, stderr {:.2} / {:.2} points), delta {:+.2} points, allowed +-{:.2}; n={}; {} item(s) flipped\n",
        if r.pass { "PASS" } else { "FAIL" },
        metric.name(),
        100.0 * r.got,
        100.0 * r.reference,
        100.0 * r.stderr_got,
        100.0 * r.stderr_reference,
        r.delta_points,
        r.max_delta_points,
        r.n,
        r.flips.len(),
    );
    if let Some(d) = r.max_loglik_diff {
        s.push_str(&format!("  max |log-likelihood diff| over all choices: {d:.3e}\n"));
    }
    for f in r.flips.iter().take(20) {
        let m = |x: Option<f64>| x.map_or_else(String::new, |m| format!(" (margin {m:.4})"));
        s.push_str(&format!(
            "  doc {}: reference chose {}{} [{}], package chose {}{} [{}]\n",
            f.doc,
            f.reference,
            m(f.reference_margin),
            if f.reference_correct { "right" } else { "wrong" },
            f.got,
            m(f.got_margin),
            if f.got_correct { "right" } else { "wrong" },
        ));
    }
    if r.flips.len() > 20 {
        s.push_str(&format!("  ... and {} more\n", r.flips.len() - 20));
    }
    s.push_str(&format!("  baseline: {baseline_file}; regenerate (only if the reference changed): {regenerate}\n"));
    s
}
