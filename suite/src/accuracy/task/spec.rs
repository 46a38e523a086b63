//! A task file in the suite's own dialect (`cases/tasks/<name>.yaml`), the form an lm-eval task file is also read
//! into ([`super::lmeval_file`]): its fields, their checks, and what its `doc_to_*` fields give for a document.

use serde::Deserialize;

use crate::accuracy::doc::Doc;
use crate::accuracy::lmeval;
use crate::accuracy::policy::{GatePolicy, Thresholds};
use crate::error::{Error, Result, bail};

/// A task file (`cases/tasks/<name>.yaml`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// Name in trial names and under `goldens/baselines/`; defaults to the file stem.
    #[serde(default)]
    pub task: Option<String>,
    /// JSONL file of the scored documents, relative to the suite root.
    pub test: String,
    /// JSONL file the few-shot examples come from (required when `num_fewshot` > 0).
    #[serde(default)]
    pub fewshot: Option<String>,
    pub output_type: OutputType,
    /// Template over the document's fields: `{{question}}`.
    pub doc_to_text: String,
    /// Multiple choice: the field holding the list of choices, a Jinja expression giving it (`"{{[a, b]}}"`), or
    /// the list itself.
    #[serde(default)]
    pub doc_to_choice: Option<Choices>,
    /// The answer: a field, a Jinja template, or a fixed index. Multiple choice: the choice's index (a string that
    /// is a choice counts as that choice); generate_until: the expected string.
    pub doc_to_target: Target,
    /// Text before the few-shot examples (lm-eval's `description`; a Jinja template over the document).
    #[serde(default)]
    pub description: String,
    #[serde(default = "space")]
    pub target_delimiter: String,
    #[serde(default = "blank_line")]
    pub fewshot_delimiter: String,
    #[serde(default, deserialize_with = "fewshot_count")]
    pub num_fewshot: usize,
    #[serde(default)]
    pub fewshot_sampler: Sampler,
    /// The metric the gate holds: `acc` or `acc_norm` (multiple choice), `exact_match` (generate_until).
    pub metric: Metric,
    /// generate_until: stop strings and the token budget.
    #[serde(default)]
    pub generation_kwargs: Option<GenerationKwargs>,
    /// generate_until: the answer is the first match of this regex (Python's `re` syntax and classes) in the
    /// generated text (its group 1 when it has groups), as lm-eval's `regex` filter takes it; `[invalid]` when
    /// nothing matches. A pattern Rust's regex cannot match as Python does is refused at load, by feature.
    #[serde(default)]
    pub answer_regex: Option<String>,
    /// The gate: |accuracy(ONNX) - accuracy(reference)| in points (0-100) may not exceed this. Default 1.0.
    #[serde(default)]
    pub max_delta_points: Option<f64>,
    /// The gate's paired test: McNemar's exact p-value on the flips under this fails. Default 0.05.
    #[serde(default)]
    pub flip_alpha: Option<f64>,
    /// The gate: at most this many items (in points) may change correctness, whichever way. Default: no limit.
    #[serde(default)]
    pub max_flipped_points: Option<f64>,
    /// Only the first `limit` documents (lm-eval's `--limit`).
    #[serde(default, deserialize_with = "limit_count")]
    pub limit: Option<usize>,
}

/// The most documents or few-shot examples a count may name: far past any task, small enough that a typo shows.
pub const MAX_COUNT: u64 = 1_000_000;

/// A count field: a whole number `0..=MAX_COUNT`, or absent; anything else names the field and the range (serde's
/// own message for `"two"` or 2^64 names neither).
fn count<'de, D: serde::Deserializer<'de>>(d: D, field: &str) -> std::result::Result<Option<usize>, D::Error> {
    use serde::de::Error as _;
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::Number(n) if n.as_u64().is_some_and(|v| v <= MAX_COUNT) => Ok(n.as_u64().map(|v| v as usize)),
        other => Err(D::Error::custom(format!("field `{field}` is {other}, expected a whole number from 0 to {MAX_COUNT}"))),
    }
}

fn fewshot_count<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<usize, D::Error> {
    count(d, "num_fewshot").map(Option::unwrap_or_default)
}

pub fn fewshot_override<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<usize>, D::Error> {
    count(d, "num_fewshot")
}

pub fn limit_count<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<usize>, D::Error> {
    count(d, "limit")
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Choices {
    List(Vec<String>),
    Field(String),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Target {
    Index(u64),
    Field(String),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Index(i) => write!(f, "{i}"),
            Target::Field(s) => f.write_str(s),
        }
    }
}

/// A document's answer as lm-eval reads `doc_to_target`: an index or a string.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    Index(usize),
    Text(String),
}

/// `target_delimiter`'s default.
pub fn space() -> String {
    " ".into()
}

/// `fewshot_delimiter`'s default.
pub fn blank_line() -> String {
    "\n\n".into()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputType {
    MultipleChoice,
    GenerateUntil,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sampler {
    #[default]
    FirstN,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Acc,
    AccNorm,
    ExactMatch,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::Acc => "acc",
            Metric::AccNorm => "acc_norm",
            Metric::ExactMatch => "exact_match",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerationKwargs {
    #[serde(default)]
    pub until: Vec<String>,
    #[serde(default = "max_gen_toks")]
    pub max_gen_toks: usize,
}

fn max_gen_toks() -> usize {
    256
}

impl TaskSpec {
    /// Errors name `file`.
    pub fn validate(&self, file: &str) -> Result<()> {
        match (self.output_type, self.metric) {
            (OutputType::MultipleChoice, Metric::Acc | Metric::AccNorm) => {
                if self.doc_to_choice.is_none() {
                    bail!("{file}: a multiple_choice task needs `doc_to_choice` (the field holding the choices)");
                }
            }
            (OutputType::GenerateUntil, Metric::ExactMatch) => {
                if self.generation_kwargs.is_none() {
                    bail!("{file}: a generate_until task needs `generation_kwargs` (`until`, `max_gen_toks`)");
                }
            }
            (o, m) => bail!("{file}: field `metric`: {} does not apply to output_type {o:?}", m.name()),
        }
        if self.num_fewshot > 0 && self.fewshot.is_none() {
            bail!("{file}: field `num_fewshot` is {} but no `fewshot` split is named", self.num_fewshot);
        }
        if let Some(r) = &self.answer_regex {
            lmeval::python_re::compile(r).map_err(|e| e.context(format!("{file}: field `answer_regex`")))?;
        }
        GatePolicy::for_task(self.thresholds(), false).validate(file)?;
        Ok(())
    }

    /// The gate's thresholds this task states (a case's overrides of an lm-eval task's are copied in at load).
    pub fn thresholds(&self) -> Thresholds {
        Thresholds { max_delta_points: self.max_delta_points, flip_alpha: self.flip_alpha, max_flipped_points: self.max_flipped_points }
    }

    /// `doc_to_text`: a bare field name is that field's value (lm-eval's rule), else a Jinja template over the
    /// document.
    pub fn text(&self, doc: &Doc) -> Result<String> {
        match doc.get(&self.doc_to_text) {
            Some(v) => scalar(v).ok_or_else(|| Error::new(format!("field `{}` (doc_to_text) is {v}, not a scalar", self.doc_to_text))),
            None => lmeval::fill_template(&self.doc_to_text, doc).map_err(|e| e.context("doc_to_text")),
        }
    }

    /// `doc_to_choice`: a list field, an expression giving a list, or the list itself.
    pub fn choices(&self, doc: &Doc) -> Result<Vec<String>> {
        let list = match &self.doc_to_choice {
            None => bail!("no `doc_to_choice`"),
            Some(Choices::List(l)) => return Ok(l.clone()),
            Some(Choices::Field(f)) => match doc.get(f) {
                Some(v) => v.clone(),
                None => lmeval::evaluate(f, doc).map_err(|e| e.context("doc_to_choice"))?.ok_or_else(|| {
                    Error::new(format!("field `{f}` (doc_to_choice) is not in the document, nor one `{{{{ expression }}}}`"))
                })?,
            },
        };
        let serde_json::Value::Array(list) = list else { bail!("doc_to_choice gives {list}, not a list") };
        list.iter().map(|v| scalar(v).ok_or_else(|| Error::new(format!("doc_to_choice holds a non-scalar choice: {v}")))).collect()
    }

    /// `doc_to_target` as lm-eval reads it: a field's value, a fixed index, or a rendered template, which is an
    /// index when it is all digits and the task has choices.
    fn target(&self, doc: &Doc) -> Result<Answer> {
        let v = match &self.doc_to_target {
            Target::Index(i) => return Ok(Answer::Index(*i as usize)),
            Target::Field(f) => match doc.get(f) {
                Some(v) => v.clone(),
                None => {
                    let s = lmeval::fill_template(f, doc).map_err(|e| e.context("doc_to_target"))?;
                    if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()) && self.doc_to_choice.is_some() {
                        return Ok(Answer::Index(s.parse().map_err(|_| Error::new(format!("doc_to_target gives {s:?}")))?));
                    }
                    return Ok(Answer::Text(s));
                }
            },
        };
        match &v {
            serde_json::Value::Number(n) if n.as_u64().is_some() => Ok(Answer::Index(n.as_u64().unwrap_or_default() as usize)),
            _ => scalar(&v).map(Answer::Text).ok_or_else(|| Error::new(format!("field `{}` (doc_to_target) is {v}", self.doc_to_target))),
        }
    }

    /// The gold index of a multiple-choice document (a target string names its choice).
    pub fn gold(&self, doc: &Doc, choices: &[String]) -> Result<usize> {
        let i = match self.target(doc)? {
            Answer::Index(i) => i,
            Answer::Text(t) => choices
                .iter()
                .position(|c| *c == t)
                .ok_or_else(|| Error::new(format!("doc_to_target `{}` gives {t:?}, which is not a choice", self.doc_to_target)))?,
        };
        if i >= choices.len() {
            bail!("doc_to_target `{}` gives {i} but there are {} choices", self.doc_to_target, choices.len());
        }
        Ok(i)
    }

    /// The answer as text, as a few-shot example shows it: the gold choice, or the target string.
    pub fn target_text(&self, doc: &Doc) -> Result<String> {
        match self.output_type {
            OutputType::MultipleChoice => {
                let choices = self.choices(doc)?;
                Ok(choices[self.gold(doc, &choices)?].clone())
            }
            OutputType::GenerateUntil => match self.target(doc)? {
                Answer::Text(t) => Ok(t),
                Answer::Index(i) => Ok(i.to_string()),
            },
        }
    }
}

/// A document value as the text lm-eval renders it: a string, number or boolean; `None` for a list or a map.
pub fn scalar(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}
