//! ChartQA (`tasks/chartqa/utils.py`): relaxed accuracy against the document's `answer` ([`relaxed`]),
//! counted overall and in the item's split (its `type`), each the mean of its items.

use crate::accuracy::doc::{self, Doc};
use crate::accuracy::lmms::{Direction, Facts, HookKind, ItemScore, MediaItem, Medium, Scorer};
use crate::accuracy::scorers::relaxed;
use crate::error::Result;

pub struct ChartQa;

const FACTS: Facts = Facts {
    name: "chartqa",
    datasets: &["lmms-lab/ChartQA", "lmms-lab-encoder/ChartQA"],
    hooks: &[
        ("utils.chartqa_doc_to_visual", HookKind::DocToVisual),
        ("utils.chartqa_doc_to_text", HookKind::DocToText),
        ("utils.chartqa_process_results", HookKind::ProcessResults),
    ],
    target: "answer",
    medium: Medium::Image,
    metrics: &[
        (relaxed::OVERALL, Direction::HigherIsBetter),
        ("relaxed_human_split", Direction::HigherIsBetter),
        ("relaxed_augmented_split", Direction::HigherIsBetter),
    ],
    binary: true,
};

impl Scorer for ChartQa {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    /// The document's `type`: its split.
    fn kind(&self, d: &Doc) -> Result<String> {
        doc::text(d, "type")
    }

    fn score(&self, item: &MediaItem, prediction: &str) -> ItemScore {
        let s = relaxed::item(prediction, &item.answers[0]) as u8 as f64;
        let values = [(relaxed::OVERALL.to_string(), s), (relaxed::split_metric(&item.kind).to_string(), s)].into();
        ItemScore { values, edits: None }
    }
}
