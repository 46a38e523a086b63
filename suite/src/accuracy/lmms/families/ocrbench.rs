//! OCRBench (`tasks/ocrbench/utils.py`): the question stripped, an item right when an answer is in the stripped
//! prediction ([`scorers::ocrbench`]), and lmms-eval's score the count over 1,000. The gate holds the raw share
//! (right over n) instead, which a subset does not under-report, and shows the count beside it.

use crate::accuracy::doc::{self, Doc};
use crate::accuracy::lmms::{Direction, Facts, HookKind, ItemScore, MediaItem, Medium, Scorer};
use crate::accuracy::scorers;
use crate::error::Result;
use crate::feed::python_str::py_is_space;

pub struct OcrBench;

const FACTS: Facts = Facts {
    name: "ocrbench",
    datasets: &["echo840/OCRBench"],
    hooks: &[
        ("utils.ocrbench_doc_to_visual", HookKind::DocToVisual),
        ("utils.ocrbench_doc_to_text", HookKind::DocToText),
        ("utils.ocrbench_process_results", HookKind::ProcessResults),
        ("utils.ocrbench_aggregate_accuracy", HookKind::Aggregation),
    ],
    target: "answer",
    medium: Medium::Image,
    metrics: &[("ocrbench_accuracy", Direction::HigherIsBetter)],
    binary: true,
};

/// How many items are right.
fn correct(metric: &str, scores: &[ItemScore]) -> usize {
    scores.iter().filter(|x| x.values.get(metric).copied().unwrap_or(0.0) > 0.5).count()
}

impl Scorer for OcrBench {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    /// `ocrbench_doc_to_text` strips the question.
    fn question(&self, d: &Doc, pre: &str, post: &str) -> Result<String> {
        Ok(format!("{pre}{}{post}", doc::text(d, "question")?.trim_matches(py_is_space)))
    }

    /// The document's `dataset`: HME100k is scored apart.
    fn kind(&self, d: &Doc) -> Result<String> {
        doc::text(d, "dataset")
    }

    /// `ocrbench_process_results` strips the prediction first.
    fn score(&self, item: &MediaItem, prediction: &str) -> ItemScore {
        let pred = prediction.trim_matches(py_is_space);
        let right = scorers::ocrbench::item_correct(pred, &item.answers, &item.kind);
        ItemScore { values: [("ocrbench_accuracy".to_string(), right as u8 as f64)].into(), edits: None }
    }

    /// `ocrbench_aggregate_accuracy`: the count over 1,000.
    fn aggregate(&self, metric: &str, scores: &[ItemScore]) -> f64 {
        let right: Vec<bool> = scores.iter().map(|s| s.values.get(metric).copied().unwrap_or(0.0) > 0.5).collect();
        scorers::ocrbench::aggregate(&right).score
    }

    /// The raw share, right over n: lmms-eval's own score divides by 1,000, so a subset would under-report every
    /// change.
    fn gated_points(&self, metric: &str, scores: &[ItemScore]) -> f64 {
        100.0 * correct(metric, scores) as f64 / scores.len().max(1) as f64
    }

    fn raw_count(&self, metric: &str, scores: &[ItemScore]) -> Option<usize> {
        Some(correct(metric, scores))
    }
}
