//! lmms-eval task files, read unchanged: `include:`, `dataset_path`/`dataset_name`/`test_split` over local data
//! (Parquet with image bytes and audio, in each dataset's real schema), `generation_kwargs`,
//! `lmms_eval_specific_kwargs` and `metric_list`.
//!
//! This module holds what a loaded task is; [`config`] reads a task file's fields, `load` a task and its items from
//! them, and [`families`] holds each task family's scorer: its Python hooks (`!function utils.*`) reimplemented,
//! its metrics and how they aggregate, one file a family and one table. Anything else is refused by name, because
//! an unknown hook would silently score other text. The stop list is lmms-eval's: the task's `until`, else its
//! `fewshot_delimiter` (`"\n\n"`), the default that cut two-paragraph answers before their answer.

pub mod config;
pub mod families;
mod load;

use std::collections::BTreeMap;

use crate::accuracy::doc::{self, Doc};
use crate::accuracy::scorers::wer;
use crate::error::Result;

/// The lmms-eval task families whose hooks the suite reimplements; each one's facts are its scorer's
/// ([`Family::scorer`], in [`families`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    OcrBench,
    DocVqa,
    ChartQa,
    LibriSpeech,
}

impl Family {
    /// Every family, in the order messages list them.
    pub const ALL: [Family; 4] = [Family::OcrBench, Family::DocVqa, Family::ChartQa, Family::LibriSpeech];
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    HigherIsBetter,
    LowerIsBetter,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Medium {
    Image,
    Audio,
}

impl Medium {
    /// The dataset's column holding it.
    pub fn column(self) -> &'static str {
        match self {
            Medium::Image => "image",
            Medium::Audio => "audio",
        }
    }
}

/// Which of a family's hooks a `!function` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookKind {
    DocToVisual,
    DocToText,
    DocToTarget,
    ProcessResults,
    Aggregation,
}

/// A loaded lmms-eval task: what it asks, how it stops, what it scores, and its documents.
#[derive(Debug, Clone)]
pub struct MediaTask {
    pub name: String,
    /// The task file, relative to the suite root.
    pub file: String,
    pub family: Family,
    /// The gated metric (the first of `metric_list`), and every metric the task reports.
    pub metric: String,
    pub metrics: Vec<String>,
    pub direction: Direction,
    pub max_new_tokens: usize,
    /// The stop list lmms-eval generates with: the task's `until`, else `[fewshot_delimiter]`.
    pub until: Vec<String>,
    /// `lmms_eval_specific_kwargs.default`'s prompt around the question.
    pub pre_prompt: String,
    pub post_prompt: String,
    pub docs: Vec<Doc>,
}

/// One medium of an item: a file's bytes (PNG, JPEG, WAV, FLAC) or decoded samples.
#[derive(Debug, Clone, PartialEq)]
pub enum Media {
    File(Vec<u8>),
    Samples { samples: Vec<f32>, rate: u32 },
}

impl Media {
    /// sha256 of what the model is fed from it, for the baseline's staleness check.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        match self {
            Media::File(b) => h.update(b),
            Media::Samples { samples, rate } => {
                h.update(rate.to_le_bytes());
                samples.iter().for_each(|x| h.update(x.to_le_bytes()));
            }
        }
        crate::digest::hex(h)
    }
}

/// What the model is asked for one document.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaItem {
    pub doc: usize,
    /// `doc_to_text` with the default pre/post prompt.
    pub question: String,
    /// The answers the scorer accepts (one for ChartQA and LibriSpeech).
    pub answers: Vec<String>,
    /// What else of the document the scorer reads: OCRBench's `dataset` (HME100k is scored apart), ChartQA's
    /// `type` (its split), LibriSpeech's `task`.
    pub kind: String,
    pub media: Media,
}

/// One item's scores, per metric of its task (a split metric is absent for items of the other split), and for
/// WER its word edits over its reference words.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemScore {
    pub values: BTreeMap<String, f64>,
    pub edits: Option<wer::Edits>,
}

/// What a task family is, as data: its name, the datasets and hooks it runs, where its answers are, its medium and
/// metrics, and which paired test its items take.
#[derive(Debug)]
pub struct Facts {
    /// The family's name in messages: `ocrbench`.
    pub name: &'static str,
    /// The datasets (`dataset_path`) whose task files it runs, the one messages name first.
    pub datasets: &'static [&'static str],
    /// Its lmms-eval functions (`utils.ocrbench_doc_to_text`), and which hook each is.
    pub hooks: &'static [(&'static str, HookKind)],
    /// The document field lmms-eval's scorer reads the answers from (what `doc_to_target` must name).
    pub target: &'static str,
    /// What a task feeds the model beside its text.
    pub medium: Medium,
    /// The metrics its results carry, the gated one first, with their direction.
    pub metrics: &'static [(&'static str, Direction)],
    /// Whether an item's score is right-or-wrong (McNemar decides) rather than graded (a sign-flip test).
    pub binary: bool,
}

/// One task family as the gate runs it: its [`Facts`], and its hooks (lmms-eval's `tasks/<family>/utils.py`)
/// reimplemented: how it asks, scores an item and aggregates a task. Each family's is one file in
/// `lmms/families/`, listed once in [`Family::scorer`]; what most families share is the default here.
pub trait Scorer: Sync {
    fn facts(&self) -> &'static Facts;

    /// `doc_to_text`: the document's `question` inside the task's default pre- and post-prompt.
    fn question(&self, d: &Doc, pre: &str, post: &str) -> Result<String> {
        Ok(format!("{pre}{}{post}", doc::text(d, "question")?))
    }
    /// The answers the scorer accepts: the target field's string, or its list of strings.
    fn answers(&self, d: &Doc) -> Result<Vec<String>> {
        doc::texts(d, self.facts().target)
    }
    /// What else of the document the scorer reads ([`MediaItem::kind`]); nothing by default.
    fn kind(&self, _d: &Doc) -> Result<String> {
        Ok(String::new())
    }

    /// `process_results` on one prediction.
    fn score(&self, item: &MediaItem, prediction: &str) -> ItemScore;

    /// Items lmms-eval's own code cannot score (it raises where the suite would return a number): refused at load,
    /// naming the document.
    fn check(&self, _items: &[MediaItem]) -> Result<()> {
        Ok(())
    }
    /// The task's aggregate of `metric` over items, as lmms-eval reports it, in the metric's own units: by
    /// default the mean of the items' values (items without the metric left out; 0 with none).
    fn aggregate(&self, metric: &str, scores: &[ItemScore]) -> f64 {
        let v: Vec<f64> = scores.iter().filter_map(|s| s.values.get(metric).copied()).collect();
        if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
    }
    /// The aggregate in points: a fraction's x100 by default.
    fn points(&self, metric: &str, scores: &[ItemScore]) -> f64 {
        100.0 * self.aggregate(metric, scores)
    }
    /// The score the gate holds, in points: the aggregate's by default.
    fn gated_points(&self, metric: &str, scores: &[ItemScore]) -> f64 {
        self.points(metric, scores)
    }
    /// A raw count the report shows beside the score (the items right), where the family's own score hides it.
    fn raw_count(&self, _metric: &str, _scores: &[ItemScore]) -> Option<usize> {
        None
    }
    /// An item's value on the gated metric, as the paired test compares it; `None` for an item the metric does not
    /// cover (a split metric's other split).
    fn item_value(&self, metric: &str, s: &ItemScore) -> Option<f64> {
        s.values.get(metric).copied()
    }
    /// The most each item can move the gated score, in points, from the reference's scores: 100/n by default.
    fn item_weights(&self, reference: &[ItemScore]) -> Vec<f64> {
        vec![100.0 / reference.len().max(1) as f64; reference.len()]
    }
}
