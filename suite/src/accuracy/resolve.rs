//! A case's accuracy entry, resolved once: the task file, the name its trials and baselines go by, what the case says
//! about it, and which gate runs it (text: lm-eval's, on token ids; media: lmms-eval's, through the package's own
//! pipeline). Planning, the trials and regen ask here rather than deciding again.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::accuracy::policy::Thresholds;
use crate::accuracy::protocol::Protocol;
use crate::accuracy::task::spec::{fewshot_override, limit_count};

/// What a case says about a task it runs: where an lm-eval task file's data lives (else the Hugging Face hub
/// cache), and overrides of its shots, metric, size and gate thresholds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Source {
    /// A folder laid out like a dataset repository: `<dataset_name>/<split>-*.jsonl`, `data/<split>-*.jsonl`, ...
    pub data: Option<PathBuf>,
    pub overrides: Overrides,
    /// The case's `external_paths`: whether the task's files may lie outside the suite root.
    pub external_paths: bool,
    /// The run's Hugging Face hub cache (`context::Hub`), where a dataset without `data` is looked up; `None` where
    /// the run names none (a dataset must then come with its folder).
    pub hub_cache: Option<PathBuf>,
}

/// What a case's `accuracy` entry may override of a task: its shots, metric, size and the gate's thresholds.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overrides {
    #[serde(default, deserialize_with = "fewshot_override")]
    pub num_fewshot: Option<usize>,
    #[serde(default)]
    pub metric: Option<String>,
    #[serde(default, deserialize_with = "limit_count")]
    pub limit: Option<usize>,
    #[serde(default)]
    pub max_delta_points: Option<f64>,
    #[serde(default)]
    pub flip_alpha: Option<f64>,
    #[serde(default)]
    pub max_flipped_points: Option<f64>,
    /// An lmms-eval task's pinned protocol: how its question and media reach the model, where it stops, what the
    /// answer is (required for those tasks; refused for lm-eval's).
    #[serde(default)]
    pub protocol: Option<Protocol>,
    /// The model's weights are random (a seeded fixture): its scores mean nothing, and the report says so; the
    /// trial proves the plumbing (hooks, media, protocol, stops, scorers) by the package's every output being the
    /// reference's, character for character.
    #[serde(default)]
    pub plumbing_only: bool,
    /// lm-eval's `--apply_chat_template`: the requests go through the tokenizer's chat template
    /// (`accuracy/task/chat.rs`).
    #[serde(default)]
    pub apply_chat_template: bool,
    /// lm-eval's `--fewshot_as_multiturn` (its default under a chat template: on).
    #[serde(default)]
    pub fewshot_as_multiturn: Option<bool>,
    /// lm-eval's `--system_instruction`.
    #[serde(default)]
    pub system_instruction: Option<String>,
}

impl Source {
    /// No overrides; reading outside the suite root as the case allows.
    pub fn with_external_paths(external_paths: bool) -> Source {
        Source { external_paths, ..Source::default() }
    }
}

impl Overrides {
    /// The gate's thresholds the case states.
    pub fn thresholds(&self) -> Thresholds {
        Thresholds { max_delta_points: self.max_delta_points, flip_alpha: self.flip_alpha, max_flipped_points: self.max_flipped_points }
    }
}

/// Which gate runs a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    /// lm-eval's (or the suite's own dialect): log-likelihoods or generations on token ids.
    Text,
    /// lmms-eval's: media and questions through the package's own pipeline.
    Media,
}

impl TaskKind {
    /// Media when the case pins a `protocol` (which only lmms-eval tasks take) or the file reads as lmms-eval's; a
    /// broken lmms-eval file with a protocol still goes there, to fail by name.
    pub fn of(root: &Path, file: &str, source: &Source) -> TaskKind {
        if source.overrides.protocol.is_some() || crate::accuracy::lmms::config::is_lmms_file(&root.join(file)) {
            TaskKind::Media
        } else {
            TaskKind::Text
        }
    }
}

/// A case's accuracy entry, resolved against the suite root.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedTask {
    /// The task file, relative to the suite root.
    pub file: String,
    /// The name in trial names and under `goldens/baselines/`: [`task_name`].
    pub name: String,
    pub source: Source,
    pub kind: TaskKind,
}

impl ResolvedTask {
    pub fn new(root: &Path, file: &str, source: Source) -> ResolvedTask {
        let kind = TaskKind::of(root, file, &source);
        ResolvedTask { file: file.to_string(), name: task_name(file), source, kind }
    }
}

/// A task's name in trial names and under `goldens/baselines/`: its file's stem. (A loaded task's own name is the
/// file's `task:` when it states one, else this.)
pub fn task_name(file: &str) -> String {
    Path::new(file).file_stem().and_then(|s| s.to_str()).unwrap_or("task").to_string()
}
