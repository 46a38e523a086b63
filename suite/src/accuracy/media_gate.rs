//! The multimodal accuracy gate: a package's lmms-eval score on a task against the Hugging Face reference's, item
//! for item, in the metric's own direction and units (accuracy and ANLS points, WER points; lower WER is better).
//!
//! It fails when the net change exceeds `max_delta_points`, or when the items that changed lean one way beyond
//! chance: McNemar's exact test for right-or-wrong items (OCRBench, relaxed accuracy), an exact sign-flip test on
//! the per-item differences for graded ones (ANLS, each utterance's word edits for WER). Near-tie flips between
//! kernels go both ways and pass; a loss leans one way and fails, even inside the net bound.
//!
//! Every generation is also kept past the task's stop list, up to its token budget, so the gate can say when a stop
//! string changed an item's score, for the reference or the package, and print the task's score both ways.
//! Pure: outputs in, verdict out; [`crate::trial`] runs the package and `cargo xtask regen-goldens` the reference.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::accuracy::answer::{cut_at_stop, first_stop};
use crate::accuracy::gate::mcnemar_exact;
use crate::accuracy::lmms::{Direction, Family, ItemScore, MediaItem, MediaTask, Scorer};
use crate::accuracy::paired;
use crate::accuracy::policy::GatePolicy;
use crate::accuracy::protocol::Protocol;
use crate::error::{Result, bail};
use crate::judge::golden::{Hex, Provenance};

/// `goldens/baselines/<task>/<case>.json` for an lmms-eval task: the reference's output for every item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MediaBaseline {
    pub task: String,
    pub model: String,
    pub metric: String,
    pub n: usize,
    /// The reference's aggregate on `metric` (lmms-eval's number, in its units), for the record.
    pub score: f64,
    pub protocol: Protocol,
    /// The stop list the reference generated under (the task's, after lmms-eval's default and the protocol).
    pub until: Vec<String>,
    pub max_new_tokens: usize,
    /// sha256 over every item's question, answers and media, and the protocol: stale when any changed.
    pub requests_hash: String,
    pub items: Vec<MediaBaselineItem>,
    pub provenance: Provenance,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MediaBaselineItem {
    /// The whole generation, to the token budget or EOS, past any stop string.
    pub full: String,
    /// Generated token ids of `full`.
    pub tokens: Vec<i64>,
    /// The smallest top-1 minus top-2 logit gap over the steps before the stop: how near a tie the greedy path came.
    pub margin: Option<Hex>,
}

impl MediaBaseline {
    pub fn load(path: &Path, shown: &str) -> Result<MediaBaseline> {
        crate::accuracy::gate::read_baseline(path, shown, |b: &MediaBaseline| (b.items.len(), b.n))
    }

    pub fn to_json(&self) -> Vec<u8> {
        crate::accuracy::gate::baseline_bytes(self)
    }
}

/// `goldens/baselines/<task>/<case>.inputs.safetensors.sz`: the reference processor's tensors for image items
/// (`<doc>.<name>`), Snappy-framed, which the package is fed as they are (the gate compares models, not image
/// processors; the items' media hashes tie them to the task).
pub fn inputs_path(baseline: &Path) -> std::path::PathBuf {
    baseline.with_extension("inputs.safetensors.sz")
}

/// sha256 over the items (question, answers, media) and the protocol.
pub fn requests_hash(items: &[MediaItem], protocol: &Protocol, until: &[String], max_new_tokens: usize) -> String {
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(protocol).expect("a protocol serializes"));
    h.update(serde_json::to_vec(until).expect("strings serialize"));
    h.update((max_new_tokens as u64).to_le_bytes());
    for it in items {
        h.update((it.question.len() as u64).to_le_bytes());
        h.update(it.question.as_bytes());
        for a in &it.answers {
            h.update((a.len() as u64).to_le_bytes());
            h.update(a.as_bytes());
        }
        h.update(it.media.digest().as_bytes());
        h.update([0xff]);
    }
    crate::digest::hex(h)
}

/// One side's generation for one item.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub full: String,
    pub margin: Option<f64>,
}

/// An item whose score differs between the reference and the package.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaFlip {
    pub doc: usize,
    pub reference: String,
    pub got: String,
    pub reference_score: f64,
    pub got_score: f64,
    pub reference_margin: Option<f64>,
    pub got_margin: Option<f64>,
}

/// An item whose score the stop list changed, on one side.
#[derive(Debug, Clone, PartialEq)]
pub struct StopCut {
    pub doc: usize,
    /// `true` for the reference's output, `false` for the package's.
    pub reference: bool,
    pub stop: String,
    pub score_cut: f64,
    pub score_full: f64,
}

/// The stop list's effect on the task.
#[derive(Debug, Clone, PartialEq)]
pub struct StopTrap {
    pub until: Vec<String>,
    pub cuts: Vec<StopCut>,
    /// The task's score with the cut outputs (what lmms-eval reports) and with the whole ones, per side.
    pub reference_cut: f64,
    pub reference_full: f64,
    pub got_cut: f64,
    pub got_full: f64,
}

/// The verdict on one task x variant.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaGateReport {
    pub family: Family,
    pub metric: String,
    pub direction: Direction,
    /// The gated scores in points (x100 for fractions; WER is already in points).
    pub reference: f64,
    pub got: f64,
    pub delta_points: f64,
    /// Every metric the task reports, both sides, in points.
    pub metrics: BTreeMap<String, (f64, f64)>,
    /// OCRBench's raw count over n (its lmms-eval score divides by 1,000 whatever n is): (reference, package, n).
    pub raw_counts: Option<(usize, usize, usize)>,
    pub policy: GatePolicy,
    pub pass: bool,
    /// Items worse and better in the package, in the metric's direction.
    pub worse: usize,
    pub better: usize,
    pub p_value: f64,
    /// How `p_value` was computed.
    pub test: String,
    /// The paired bootstrap's 95% interval for the mean per-item difference (positive: the package is better), in
    /// the item's units (a score, or word edits); for the record, not the decision.
    pub interval: Option<paired::Interval>,
    pub min_detectable_points: f64,
    pub too_small: bool,
    pub flips: Vec<MediaFlip>,
    pub stop: StopTrap,
    pub reasons: Vec<MediaGateReason>,
    pub n: usize,
}

/// Why the media gate failed, or what it warns about, with the numbers it was decided by (the gate's render module
/// words it). `metric` is the gated metric's name.
#[derive(Debug, Clone, PartialEq)]
pub enum MediaGateReason {
    /// The gated score is not a number on one side or both: nothing was scored.
    NotANumber {
        metric: String,
        reference: f64,
        got: f64,
    },
    /// One item moves the metric by up to `largest_move` points, more than `max_delta_points`: a failure when
    /// `refused` (the policy's `refuse_small`), else a warning.
    TooSmall {
        metric: String,
        max_delta_points: f64,
        largest_move: f64,
        n: usize,
        refused: bool,
    },
    NetDelta {
        metric: String,
        delta_points: f64,
        max_delta_points: f64,
    },
    /// The paired test (`test` names it) finds the changed items lean one way.
    ItemsLean {
        worse: usize,
        better: usize,
        p_value: f64,
        flip_alpha: f64,
        test: String,
    },
    TooManyChanged {
        items: usize,
        points: f64,
        max_flipped_points: f64,
    },
    /// A plumbing-only task's outputs differ from the reference's at these docs.
    PlumbingDiffers {
        docs: Vec<usize>,
        n: usize,
    },
}

/// Scores of outputs under the task's stop list and the protocol's answer rule. The task's scorer gets what
/// lmms-eval 0.7.3 hands a task's own function: the reasoning blocks its command line removes by default, and every
/// `generate_until` result stripped by `ConfigurableTask.process_results` (`Protocol::scored`).
pub fn scores(task: &MediaTask, items: &[MediaItem], outputs: &[Output], protocol: &Protocol, cut: bool) -> Vec<ItemScore> {
    let until = protocol.stops(&task.until);
    items
        .iter()
        .zip(outputs)
        .map(|(it, o)| {
            let text = if cut { cut_at_stop(&o.full, until) } else { &o.full };
            task.family.scorer().score(it, &protocol.scored(text))
        })
        .collect()
}

/// Judges the package's outputs against the reference's. Pure.
pub fn judge(
    task: &MediaTask,
    items: &[MediaItem],
    reference: &[Output],
    got: &[Output],
    protocol: &Protocol,
    policy: &GatePolicy,
) -> Result<MediaGateReport> {
    let n = items.len();
    if reference.len() != n || got.len() != n {
        bail!("the task has {n} items, the baseline {} and the package answered {}", reference.len(), got.len());
    }
    let scorer = task.family.scorer();
    let metric = task.metric.as_str();
    let rs = scores(task, items, reference, protocol, true);
    let gs = scores(task, items, got, protocol, true);
    // OCRBench is gated on its raw share; lmms-eval's number (over 1,000) is reported beside it.
    let (ref_points, got_points) = (scorer.gated_points(metric, &rs), scorer.gated_points(metric, &gs));
    let raw_counts = scorer.raw_count(metric, &rs).zip(scorer.raw_count(metric, &gs)).map(|(r, g)| (r, g, n));
    let metrics = task.metrics.iter().map(|m| (m.clone(), (scorer.points(m, &rs), scorer.points(m, &gs)))).collect();
    let sign = if task.direction == Direction::HigherIsBetter { 1.0 } else { -1.0 };
    // Per-item differences in the direction of "better", and each item's largest move of the task's metric.
    let (diffs, units): (Vec<f64>, Vec<f64>) = rs
        .iter()
        .zip(&gs)
        .zip(scorer.item_weights(&rs))
        .filter_map(|((r, g), unit)| Some((sign * (scorer.item_value(metric, g)? - scorer.item_value(metric, r)?), unit)))
        .unzip();
    let worse = diffs.iter().filter(|&&d| d < 0.0).count();
    let better = diffs.iter().filter(|&&d| d > 0.0).count();
    let (p_value, test) = if scorer.facts().binary {
        (mcnemar_exact(worse, better), "McNemar exact, two-sided".to_string())
    } else {
        let t = paired::sign_flip(&diffs);
        (t.p_value, t.method.to_string())
    };
    let mut r = MediaGateReport {
        family: task.family,
        metric: metric.to_string(),
        direction: task.direction,
        reference: ref_points,
        got: got_points,
        delta_points: got_points - ref_points,
        metrics,
        raw_counts,
        policy: *policy,
        pass: true,
        worse,
        better,
        p_value,
        test,
        interval: paired::bootstrap_mean(&diffs),
        min_detectable_points: paired::min_detectable(&units, policy.flip_alpha).min(100.0),
        too_small: paired::too_small(&units, policy.max_delta_points),
        flips: flips(scorer, metric, items, (reference, got), (&rs, &gs), protocol.stops(&task.until), protocol),
        stop: stop_trap(task, items, (reference, got), (&rs, &gs), protocol),
        reasons: Vec::new(),
        n,
    };
    decide(&mut r, &diffs, &units);
    Ok(r)
}

/// The verdict from the report's numbers under its policy: `pass`, and a reason for each rule that fails or warns.
/// `diffs` and `units` are the paired test's per-item differences and each item's largest move, in points.
fn decide(r: &mut MediaGateReport, diffs: &[f64], units: &[f64]) {
    let (policy, metric, n, delta_points) = (r.policy, r.metric.clone(), r.n, r.delta_points);
    let max_delta_points = policy.max_delta_points;
    if !delta_points.is_finite() {
        // A corpus WER over no reference words is 0/0: nothing was measured, which must not read as a pass.
        r.reasons.push(MediaGateReason::NotANumber { metric, reference: r.reference, got: r.got });
        r.pass = false;
    } else if r.too_small {
        let largest_move = units.iter().copied().fold(0.0, f64::max);
        r.reasons.push(MediaGateReason::TooSmall { metric, max_delta_points, largest_move, n, refused: policy.refuse_small });
        if policy.refuse_small {
            r.pass = false;
        }
    } else if delta_points.abs() > max_delta_points + 1e-9 {
        r.reasons.push(MediaGateReason::NetDelta { metric, delta_points, max_delta_points });
        r.pass = false;
    }
    if r.p_value < policy.flip_alpha {
        let (worse, better, p_value, test) = (r.worse, r.better, r.p_value, r.test.clone());
        r.reasons.push(MediaGateReason::ItemsLean { worse, better, p_value, flip_alpha: policy.flip_alpha, test });
        r.pass = false;
    }
    if let Some(m) = policy.max_flipped_points {
        let flipped: f64 = diffs.iter().zip(units).filter(|(d, _)| **d != 0.0).map(|(_, u)| u).sum();
        if flipped > m + 1e-9 {
            r.reasons.push(MediaGateReason::TooManyChanged { items: r.worse + r.better, points: flipped, max_flipped_points: m });
            r.pass = false;
        }
    }
}

/// The items whose score on the gated metric differs between the sides, with both answers (cut at `until`) and
/// margins.
fn flips(
    scorer: &dyn Scorer,
    metric: &str,
    items: &[MediaItem],
    (reference, got): (&[Output], &[Output]),
    (rs, gs): (&[ItemScore], &[ItemScore]),
    until: &[String],
    protocol: &Protocol,
) -> Vec<MediaFlip> {
    items
        .iter()
        .enumerate()
        .filter_map(|(i, it)| {
            let (r, g) = (scorer.item_value(metric, &rs[i]), scorer.item_value(metric, &gs[i]));
            let (ro, go) = (protocol.answer(cut_at_stop(&reference[i].full, until)), protocol.answer(cut_at_stop(&got[i].full, until)));
            // An item without the metric on both sides (another split's) has no score to change.
            let (r, g) = (r?, g?);
            (r != g).then(|| MediaFlip {
                doc: it.doc,
                reference: ro.to_string(),
                got: go.to_string(),
                reference_score: r,
                got_score: g,
                reference_margin: reference[i].margin,
                got_margin: got[i].margin,
            })
        })
        .collect()
}

/// A plumbing-only task (random weights: its scores decide nothing) held item for item: every output must be the
/// reference's to the last character, else the docs that differ fail it.
pub fn hold_outputs(r: &mut MediaGateReport, items: &[MediaItem], reference: &[Output], got: &[Output]) {
    let docs: Vec<usize> =
        items.iter().zip(reference.iter().zip(got)).filter(|(_, (a, b))| a.full != b.full).map(|(it, _)| it.doc).collect();
    if !docs.is_empty() {
        r.pass = false;
        r.reasons.push(MediaGateReason::PlumbingDiffers { docs, n: items.len() });
    }
}

/// Where the stop list changed a score: each side's items scored on the cut (`cut_scores`, as the judge scored
/// them: reference, package) and on the whole output.
fn stop_trap(
    task: &MediaTask,
    items: &[MediaItem],
    (reference, got): (&[Output], &[Output]),
    cut_scores: (&[ItemScore], &[ItemScore]),
    protocol: &Protocol,
) -> StopTrap {
    let until = protocol.stops(&task.until).to_vec();
    let (scorer, metric) = (task.family.scorer(), task.metric.as_str());
    let side = |outs: &[Output], cut: &[ItemScore], is_ref: bool, cuts: &mut Vec<StopCut>| -> (f64, f64) {
        let full = scores(task, items, outs, protocol, false);
        for (i, o) in outs.iter().enumerate() {
            let (Some(c), Some(f)) = (scorer.item_value(metric, &cut[i]), scorer.item_value(metric, &full[i])) else { continue };
            if c != f {
                let stop = first_stop(&o.full, &until);
                cuts.push(StopCut {
                    doc: items[i].doc,
                    reference: is_ref,
                    stop: stop.map(|(_, s)| s.to_string()).unwrap_or_default(),
                    score_cut: c,
                    score_full: f,
                });
            }
        }
        (scorer.gated_points(metric, cut), scorer.gated_points(metric, &full))
    };
    let mut cuts = Vec::new();
    let (reference_cut, reference_full) = side(reference, cut_scores.0, true, &mut cuts);
    let (got_cut, got_full) = side(got, cut_scores.1, false, &mut cuts);
    StopTrap { until, cuts, reference_cut, reference_full, got_cut, got_full }
}
