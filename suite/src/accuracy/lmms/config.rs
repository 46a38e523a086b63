//! The fields of an lmms-eval task file, read with its `include:` chain.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::accuracy::include::{self, Included, inherit};
use crate::error::Result;

/// The fields of an lmms-eval task file the suite reads. Others (`tag`, `metadata`, `dataset_kwargs.token`, ...)
/// do not change what is scored and are ignored.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Config {
    pub include: Option<String>,
    pub task: Option<String>,
    pub dataset_path: Option<String>,
    pub dataset_name: Option<String>,
    pub test_split: Option<String>,
    pub output_type: Option<String>,
    pub doc_to_visual: Option<serde_saphyr::Tagged<Value>>,
    pub doc_to_text: Option<serde_saphyr::Tagged<Value>>,
    pub doc_to_target: Option<serde_saphyr::Tagged<Value>>,
    pub process_results: Option<serde_saphyr::Tagged<Value>>,
    pub process_docs: Option<serde_saphyr::Tagged<Value>>,
    pub generation_kwargs: Option<Value>,
    pub metric_list: Option<Vec<MetricEntry>>,
    pub lmms_eval_specific_kwargs: Option<BTreeMap<String, Value>>,
    pub fewshot_delimiter: Option<String>,
    pub num_fewshot: Option<usize>,
    pub filter_list: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct MetricEntry {
    pub metric: String,
    #[serde(default)]
    pub aggregation: Option<serde_saphyr::Tagged<Value>>,
    #[serde(default)]
    pub higher_is_better: Option<bool>,
}

impl Included for Config {
    fn take_include(&mut self) -> Option<String> {
        self.include.take()
    }

    fn inherit(&mut self, parent: Config) {
        let child = self;
        inherit!(child, parent; task, dataset_path, dataset_name, test_split, output_type, doc_to_visual, doc_to_text,
            doc_to_target, process_results, process_docs, generation_kwargs, metric_list, lmms_eval_specific_kwargs,
            fewshot_delimiter, num_fewshot, filter_list);
    }
}

/// Whether a task file is lmms-eval's: its `include:` chain feeds media or carries lmms-eval's per-model prompt
/// kwargs (lm-eval's files do neither). A file that does not read is not (its reader says why).
pub fn is_lmms_file(path: &Path) -> bool {
    path.is_file() && load_config(path, "").is_ok_and(|c| c.doc_to_visual.is_some() || c.lmms_eval_specific_kwargs.is_some())
}

/// Reads a task file with its `include:` chain (the included file first, this file's keys over it).
pub fn load_config(path: &Path, shown: &str) -> Result<Config> {
    include::load_chain(path, shown)
}
