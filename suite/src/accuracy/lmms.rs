//! lmms-eval task files, read unchanged: `include:`, `dataset_path`/`dataset_name`/`test_split` over local data
//! (Parquet with image bytes and audio, in each dataset's real schema), `generation_kwargs`,
//! `lmms_eval_specific_kwargs` and `metric_list`.
//!
//! Their Python hooks (`!function utils.*`) are reimplemented in one registry keyed by the task's family and the
//! function's name ([`hook`]); anything else is refused by name, because an unknown hook would silently score other
//! text. The stop list is lmms-eval's: the task's `until`, else its `fewshot_delimiter` (`"\n\n"`), the default that
//! cut two-paragraph answers before their answer.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::accuracy::doc::Doc;
use crate::accuracy::include::{self, Included, inherit};
use crate::accuracy::lmeval;
use crate::accuracy::scorers::{anls, ocrbench, relaxed, wer};
use crate::error::{Error, Result, bail};

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

/// Whether a task file is lmms-eval's: its `include:` chain feeds media or carries lmms-eval's per-model prompt
/// kwargs (lm-eval's files do neither). A file that does not read is not (its reader says why).
pub fn is_lmms_file(path: &Path) -> bool {
    path.is_file() && load_config(path, "").is_ok_and(|c| c.doc_to_visual.is_some() || c.lmms_eval_specific_kwargs.is_some())
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

/// Reads a task file with its `include:` chain (the included file first, this file's keys over it).
pub fn load_config(path: &Path, shown: &str) -> Result<Config> {
    include::load_chain(path, shown)
}

/// The lmms-eval task families whose hooks the suite reimplements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    OcrBench,
    DocVqa,
    ChartQa,
    LibriSpeech,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::OcrBench => "ocrbench",
            Family::DocVqa => "docvqa",
            Family::ChartQa => "chartqa",
            Family::LibriSpeech => "librispeech",
        }
    }

    /// The metrics its results carry, the gated one first, with their direction.
    pub fn metrics(self) -> &'static [(&'static str, Direction)] {
        use Direction::*;
        match self {
            Family::OcrBench => &[("ocrbench_accuracy", HigherIsBetter)],
            Family::DocVqa => &[("anls", HigherIsBetter)],
            Family::ChartQa => {
                &[("relaxed_overall", HigherIsBetter), ("relaxed_human_split", HigherIsBetter), ("relaxed_augmented_split", HigherIsBetter)]
            }
            Family::LibriSpeech => &[("wer", LowerIsBetter)],
        }
    }

    /// Whether an item's score is right-or-wrong (McNemar decides) rather than graded.
    pub fn binary(self) -> bool {
        matches!(self, Family::OcrBench | Family::ChartQa)
    }

    /// What a task feeds the model beside its text.
    pub fn medium(self) -> Medium {
        if self == Family::LibriSpeech { Medium::Audio } else { Medium::Image }
    }
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

/// Which of a family's hooks a `!function` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookKind {
    DocToVisual,
    DocToText,
    DocToTarget,
    ProcessResults,
    Aggregation,
}

/// The registry: `(dataset_path, function)` -> the family and the hook it is. Every lmms-eval function the suite
/// runs is listed here, reimplemented in [`doc_text`], [`doc_media`] and [`score`].
pub fn hook(dataset_path: &str, function: &str) -> Option<(Family, HookKind)> {
    use Family::*;
    use HookKind::*;
    let f = function.trim();
    let family = match dataset_path {
        "echo840/OCRBench" => OcrBench,
        "lmms-lab/DocVQA" | "lmms-lab-encoder/DocVQA" => DocVqa,
        "lmms-lab/ChartQA" | "lmms-lab-encoder/ChartQA" => ChartQa,
        "lmms-lab/librispeech" | "lmms-lab-audio/librispeech" => LibriSpeech,
        _ => return None,
    };
    let kind = match (family, f) {
        (OcrBench, "utils.ocrbench_doc_to_visual")
        | (DocVqa, "utils.docvqa_doc_to_visual")
        | (ChartQa, "utils.chartqa_doc_to_visual")
        | (LibriSpeech, "utils.librispeech_doc_to_audio") => DocToVisual,
        (OcrBench, "utils.ocrbench_doc_to_text")
        | (DocVqa, "utils.docvqa_doc_to_text")
        | (ChartQa, "utils.chartqa_doc_to_text")
        | (LibriSpeech, "utils.librispeech_doc_to_text") => DocToText,
        (LibriSpeech, "utils.librispeech_doc_to_target") => DocToTarget,
        (OcrBench, "utils.ocrbench_process_results")
        | (ChartQa, "utils.chartqa_process_results")
        | (LibriSpeech, "utils.librispeech_process_result") => ProcessResults,
        (OcrBench, "utils.ocrbench_aggregate_accuracy") | (LibriSpeech, "utils.librispeech_wer") => Aggregation,
        _ => return None,
    };
    Some((family, kind))
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

impl MediaTask {
    /// Reads `file` (an lmms-eval task file, relative to `root`) and its test split from `data_dir` (a folder laid
    /// out like the dataset's repository) or the Hugging Face hub cache.
    pub fn load(root: &Path, file: &str, data_dir: Option<&Path>, limit: Option<usize>) -> Result<MediaTask> {
        let c = load_config(&root.join(file), file)?;
        let dataset = c.dataset_path.clone().ok_or_else(|| Error::new(format!("{file}: no `dataset_path`")))?;
        let name = c.task.clone().unwrap_or_else(|| Path::new(file).file_stem().and_then(|s| s.to_str()).unwrap_or("task").to_string());
        if let Some(o) = c.output_type.as_deref()
            && o != "generate_until"
        {
            bail!("{file}: field `output_type` is `{o}`; the multimodal gate runs generate_until");
        }
        if c.num_fewshot.unwrap_or(0) > 0 {
            bail!("{file}: field `num_fewshot` is {}; the multimodal gate runs 0-shot, as lmms-eval does", c.num_fewshot.unwrap_or(0));
        }
        if c.filter_list.is_some() {
            bail!("{file}: field `filter_list` is not supported for lmms-eval tasks (the answer is the generation itself)");
        }
        if let Some(t) = &c.process_docs {
            bail!("{file}: field `process_docs` is Python (`!function {}`), which the suite cannot run", t.0.as_str().unwrap_or("?"));
        }
        // Every hook must be one the registry knows, and all of one family.
        let mut family = None;
        let mut check = |field: &str, v: &Option<serde_saphyr::Tagged<Value>>, want: HookKind| -> Result<bool> {
            let Some(t) = v else { return Ok(false) };
            let is_function = t.1.as_deref().is_some_and(|tag| tag.contains("function"));
            if !is_function {
                return Ok(false);
            }
            let f = t.0.as_str().unwrap_or_default();
            match hook(&dataset, f) {
                Some((fam, kind)) if kind == want && family.is_none_or(|x| x == fam) => {
                    family = Some(fam);
                    Ok(true)
                }
                _ => bail!(
                    "{file}: field `{field}` is Python (`!function {f}` of dataset `{dataset}`), which the suite cannot \
                     run; it knows lmms-eval's own hooks of: ocrbench (echo840/OCRBench), docvqa (lmms-lab/DocVQA), \
                     chartqa (lmms-lab/ChartQA), librispeech (lmms-lab/librispeech)"
                ),
            }
        };
        check("doc_to_visual", &c.doc_to_visual, HookKind::DocToVisual)?;
        let text_hook = check("doc_to_text", &c.doc_to_text, HookKind::DocToText)?;
        let target_hook = check("doc_to_target", &c.doc_to_target, HookKind::DocToTarget)?;
        check("process_results", &c.process_results, HookKind::ProcessResults)?;
        for m in c.metric_list.iter().flatten() {
            if let Some(a) = &m.aggregation {
                check("metric_list.aggregation", &Some(a.clone()), HookKind::Aggregation)?;
            }
        }
        let family = family.ok_or_else(|| {
            Error::new(format!("{file}: no `doc_to_visual` hook the suite knows: it cannot tell which media the task feeds"))
        })?;
        if !text_hook {
            bail!("{file}: field `doc_to_text` must be the task's own hook (utils.{}_doc_to_text)", family.name());
        }
        let target_field = match (&c.doc_to_target, target_hook) {
            (_, true) => "gt".to_string(),
            (Some(t), false) => {
                t.0.as_str().map(str::to_string).ok_or_else(|| Error::new(format!("{file}: field `doc_to_target` is not a field name")))?
            }
            (None, false) => bail!("{file}: no `doc_to_target`"),
        };
        let expected_target = match family {
            Family::OcrBench | Family::ChartQa => "answer",
            Family::DocVqa => "answers",
            Family::LibriSpeech => "gt",
        };
        if target_field != expected_target {
            bail!("{file}: field `doc_to_target` is `{target_field}`; lmms-eval's {} scorer reads `{expected_target}`", family.name());
        }
        let listed: Vec<String> = c.metric_list.iter().flatten().map(|m| m.metric.trim().to_string()).collect();
        let known: Vec<&str> = family.metrics().iter().map(|(m, _)| *m).collect();
        if let Some(m) = listed.iter().find(|m| !known.contains(&m.as_str())) {
            bail!("{file}: metric `{m}` in `metric_list` is not one the {} scorer gives ({})", family.name(), known.join(", "));
        }
        let metric = listed.first().cloned().unwrap_or_else(|| known[0].to_string());
        let direction = family.metrics().iter().find(|(m, _)| *m == metric).map_or(Direction::HigherIsBetter, |(_, d)| *d);
        if let Some(hib) = c.metric_list.iter().flatten().find(|m| m.metric.trim() == metric).and_then(|m| m.higher_is_better)
            && hib != (direction == Direction::HigherIsBetter)
        {
            bail!("{file}: metric `{metric}` says higher_is_better: {hib}, which is not the scorer's direction");
        }
        let kw = c.generation_kwargs.clone().unwrap_or(Value::Null);
        let max_new_tokens = match kw.get("max_new_tokens") {
            None | Some(Value::Null) => 128,
            Some(v) => v.as_u64().filter(|&n| n > 0 && n <= crate::vocab::MAX_NEW_TOKENS as u64).ok_or_else(|| {
                Error::new(format!(
                    "{file}: field `generation_kwargs.max_new_tokens` is {v}, expected 1 to {}",
                    crate::vocab::MAX_NEW_TOKENS
                ))
            })? as usize,
        };
        for (k, ok) in [("do_sample", Value::Bool(false)), ("num_beams", Value::from(1))] {
            if let Some(v) = kw.get(k)
                && !(v == &ok || (k == "do_sample" && v == &Value::String("False".into())))
            {
                bail!("{file}: field `generation_kwargs.{k}` is {v}; the gate decodes greedily (do_sample false, num_beams 1)");
            }
        }
        if let Some(t) = kw.get("temperature").and_then(Value::as_f64)
            && t != 0.0
        {
            bail!("{file}: field `generation_kwargs.temperature` is {t}; the gate decodes greedily (temperature 0)");
        }
        let delimiter = c.fewshot_delimiter.clone().unwrap_or_else(|| "\n\n".to_string());
        let until = match kw.get("until") {
            None => vec![delimiter],
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| x.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| Error::new(format!("{file}: field `generation_kwargs.until` holds a non-string")))?,
            Some(v) => bail!("{file}: field `generation_kwargs.until` is {v}, expected a string or a list of strings"),
        };
        let default = c.lmms_eval_specific_kwargs.as_ref().and_then(|k| k.get("default"));
        let prompt = |k: &str| default.and_then(|d| d.get(k)).and_then(Value::as_str).unwrap_or_default().to_string();
        let split = c.test_split.clone().ok_or_else(|| Error::new(format!("{file}: no `test_split`")))?;
        let lc = lmeval::Config { dataset_path: Some(dataset.clone()), dataset_name: c.dataset_name.clone(), ..lmeval::Config::default() };
        let files = lmeval::split_files(root, data_dir, &lc, &split, file)?;
        let mut docs = lmeval::read_docs(&files, file)?;
        if let Some(n) = limit {
            docs.truncate(n);
        }
        if docs.is_empty() {
            bail!("{file}: split `{split}` has no documents");
        }
        Ok(MediaTask {
            name,
            file: file.to_string(),
            family,
            metrics: if listed.is_empty() { vec![metric.clone()] } else { listed },
            metric,
            direction,
            max_new_tokens,
            until,
            pre_prompt: prompt("pre_prompt"),
            post_prompt: prompt("post_prompt"),
            docs,
        })
    }

    /// The items: each document's prompt text, media and answers, as the task's hooks give them.
    pub fn items(&self) -> Result<Vec<MediaItem>> {
        self.docs.iter().enumerate().map(|(i, d)| self.item(i, d).map_err(|e| e.context(format!("{}: document {i}", self.file)))).collect()
    }

    fn item(&self, doc: usize, d: &Doc) -> Result<MediaItem> {
        let field = |k: &str| d.get(k).ok_or_else(|| Error::new(format!("field `{k}` is missing")));
        let text_of = |k: &str| field(k)?.as_str().map(str::to_string).ok_or_else(|| Error::new(format!("field `{k}` is not a string")));
        let answers = |k: &str| -> Result<Vec<String>> {
            match field(k)? {
                Value::String(s) => Ok(vec![s.clone()]),
                Value::Array(a) => a
                    .iter()
                    .map(|x| x.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| Error::new(format!("field `{k}` holds a non-string"))),
                v => bail!("field `{k}` is {v}, expected a string or a list of strings"),
            }
        };
        let (pre, post) = (&self.pre_prompt, &self.post_prompt);
        let (question, answers, kind) = match self.family {
            // ocrbench_doc_to_text strips the question; the others take it as it is.
            Family::OcrBench => (
                format!("{pre}{}{post}", text_of("question")?.trim_matches(crate::accuracy::python_str::py_is_space)),
                answers("answer")?,
                text_of("dataset")?,
            ),
            Family::DocVqa => (format!("{pre}{}{post}", text_of("question")?), answers("answers")?, String::new()),
            Family::ChartQa => (format!("{pre}{}{post}", text_of("question")?), answers("answer")?, text_of("type")?),
            Family::LibriSpeech => (
                format!("{pre}Please recognize the speech and only output the recognized content:{post}"),
                vec![text_of("gt")?],
                text_of("task")?,
            ),
        };
        let medium = match self.family.medium() {
            Medium::Image => "image",
            Medium::Audio => "audio",
        };
        if answers.is_empty() {
            bail!("the answer field holds an empty list: an item needs at least one answer to be scored");
        }
        let media = media_bytes(field(medium)?).map_err(|e| Error::new(format!("field `{medium}`: {e}")))?;
        Ok(MediaItem { doc, question, answers, kind, media })
    }
}

/// A dataset's `Image` or `Audio` value as stored in Parquet: `{bytes, path}` (the file's bytes), or an audio
/// `{array, sampling_rate}`.
fn media_bytes(v: &Value) -> std::result::Result<Media, String> {
    let bytes = v.get("bytes").filter(|b| !b.is_null());
    if let Some(b) = bytes {
        return match b {
            // The Parquet reader gives binary columns as base64 text when they are not UTF-8.
            Value::String(s) => decode_binary(s).map(Media::File),
            Value::Array(a) => a
                .iter()
                .map(|x| x.as_u64().and_then(|x| u8::try_from(x).ok()))
                .collect::<Option<Vec<u8>>>()
                .map(Media::File)
                .ok_or("`bytes` is not a byte list".into()),
            other => Err(format!("`bytes` is {other}")),
        };
    }
    if let (Some(a), Some(r)) = (v.get("array").and_then(Value::as_array), v.get("sampling_rate").and_then(Value::as_u64)) {
        let samples = a.iter().map(|x| x.as_f64().map(|x| x as f32)).collect::<Option<Vec<f32>>>().ok_or("`array` holds a non-number")?;
        return Ok(Media::Samples { samples, rate: r as u32 });
    }
    Err("expected {bytes, path} or {array, sampling_rate}".into())
}

/// The Parquet record reader's JSON of a binary value: base64 (standard alphabet, padded).
fn decode_binary(s: &str) -> std::result::Result<Vec<u8>, String> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        })
    }
    let t = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(t.len() * 3 / 4);
    for chunk in t.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c).ok_or_else(|| format!("`bytes` is not base64 (character {:?})", c as char))? << (18 - 6 * i);
        }
        let take = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return Err("`bytes` is truncated base64".into()),
        };
        out.extend_from_slice(&acc.to_be_bytes()[1..1 + take]);
    }
    Ok(out)
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
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
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
    /// OCRBench's `dataset` (HME100k is scored apart), ChartQA's `type` (its split), LibriSpeech's `task`.
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

/// The task's `process_results` on one prediction, as lmms-eval computes it.
pub fn score(family: Family, item: &MediaItem, prediction: &str) -> ItemScore {
    let mut values = BTreeMap::new();
    let mut edits = None;
    match family {
        Family::OcrBench => {
            // ocrbench_process_results strips the prediction first.
            let pred = prediction.trim_matches(crate::accuracy::python_str::py_is_space);
            values.insert("ocrbench_accuracy".into(), ocrbench::item_correct(pred, &item.answers, &item.kind) as u8 as f64);
        }
        Family::DocVqa => {
            values.insert("anls".into(), anls::item(prediction, &item.answers));
        }
        Family::ChartQa => {
            let s = relaxed::item(prediction, &item.answers[0]) as u8 as f64;
            values.insert("relaxed_overall".into(), s);
            let split = if item.kind == "human_test" { "relaxed_human_split" } else { "relaxed_augmented_split" };
            values.insert(split.into(), s);
        }
        Family::LibriSpeech => {
            let e = wer::utterance(&item.answers[0], prediction);
            values.insert("wer".into(), if e.words == 0 { 0.0 } else { 100.0 * e.edits as f64 / e.words as f64 });
            edits = Some(e);
        }
    }
    ItemScore { values, edits }
}

/// The task's aggregate of `metric` over items, as lmms-eval reports it: OCRBench's count over 1,000, the mean of
/// per-item values (items without the metric left out), and corpus WER (all edits over all words, x100). In the
/// metric's own units: a fraction for accuracies and ANLS, WER points for WER.
pub fn aggregate(family: Family, metric: &str, scores: &[ItemScore]) -> f64 {
    match family {
        Family::OcrBench => {
            let correct: Vec<bool> = scores.iter().map(|s| s.values.get(metric).copied().unwrap_or(0.0) > 0.5).collect();
            ocrbench::aggregate(&correct).score
        }
        Family::LibriSpeech => wer::corpus(&scores.iter().filter_map(|s| s.edits).collect::<Vec<_>>()),
        _ => {
            let v: Vec<f64> = scores.iter().filter_map(|s| s.values.get(metric).copied()).collect();
            if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_of_the_parquet_reader_decodes() {
        assert_eq!(decode_binary("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_binary("aGVsbG8h").unwrap(), b"hello!");
        assert_eq!(decode_binary("aGk=").unwrap(), b"hi");
        assert!(decode_binary("a$").is_err());
    }

    #[test]
    fn the_registry_knows_each_family_by_its_dataset_and_refuses_the_rest() {
        assert_eq!(hook("echo840/OCRBench", "utils.ocrbench_process_results"), Some((Family::OcrBench, HookKind::ProcessResults)));
        assert_eq!(hook("lmms-lab-audio/librispeech", " utils.librispeech_wer"), Some((Family::LibriSpeech, HookKind::Aggregation)));
        assert_eq!(hook("echo840/OCRBench", "utils.chartqa_process_results"), None);
        assert_eq!(hook("someone/else", "utils.ocrbench_doc_to_text"), None);
    }
}
