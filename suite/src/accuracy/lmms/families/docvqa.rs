//! DocVQA (`tasks/docvqa/utils.py`): no `process_results` of its own, so lmms-eval's default strips the generation
//! and scores it with the `anls` metric (`api/metrics.py`, [`scorers::anls`]) over the document's `answers`; the
//! task's number is their mean.

use crate::accuracy::lmms::{Direction, Facts, HookKind, ItemScore, MediaItem, Medium, Scorer};
use crate::accuracy::scorers;

pub struct DocVqa;

const FACTS: Facts = Facts {
    name: "docvqa",
    datasets: &["lmms-lab/DocVQA", "lmms-lab-encoder/DocVQA"],
    hooks: &[("utils.docvqa_doc_to_visual", HookKind::DocToVisual), ("utils.docvqa_doc_to_text", HookKind::DocToText)],
    target: "answers",
    medium: Medium::Image,
    metrics: &[("anls", Direction::HigherIsBetter)],
    binary: false,
};

impl Scorer for DocVqa {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn score(&self, item: &MediaItem, prediction: &str) -> ItemScore {
        ItemScore { values: [("anls".to_string(), scorers::anls::item(prediction, &item.answers))].into(), edits: None }
    }
}
