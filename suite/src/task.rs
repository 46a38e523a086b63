//! Benchmark tasks for the accuracy gate, with lm-evaluation-harness 0.4 semantics: the YAML that defines a task,
//! its JSONL documents, and the requests a model answers (contexts, continuations, token ids).
//!
//! The rules are lm-eval's, because its numbers are what users compare against:
//! - the context is the first `num_fewshot` documents of the few-shot split (`first_n` sampler), each
//!   `doc_to_text + target_delimiter + target`, joined and followed by `fewshot_delimiter`, then `doc_to_text(doc)`;
//! - a multiple-choice continuation is `target_delimiter + choice`; trailing whitespace of the context moves to
//!   the front of the continuation;
//! - context and context+continuation are each tokenized with the tokenizer's default special tokens, and the
//!   continuation's tokens are the whole string's tokens after the context's. Where a token merges across that
//!   boundary (the whole string's first tokens are not the context's), the item is counted and reported.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result, bail};
use crate::tokenizer::TextTokenizer;

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
    /// Multiple choice: the field holding the list of choices.
    #[serde(default)]
    pub doc_to_choice: Option<String>,
    /// The field holding the answer: the choice's index (multiple choice) or the expected string (generate_until).
    pub doc_to_target: String,
    #[serde(default = "space")]
    pub target_delimiter: String,
    #[serde(default = "blank_line")]
    pub fewshot_delimiter: String,
    #[serde(default)]
    pub num_fewshot: usize,
    #[serde(default)]
    pub fewshot_sampler: Sampler,
    /// The metric the gate holds: `acc` or `acc_norm` (multiple choice), `exact_match` (generate_until).
    pub metric: Metric,
    /// generate_until: stop strings and the token budget.
    #[serde(default)]
    pub generation_kwargs: Option<GenerationKwargs>,
    /// generate_until: the answer is the first match of this regex in the generated text (its group 1 when it has
    /// groups), as lm-eval's `regex` filter takes it; `[invalid]` when nothing matches.
    #[serde(default)]
    pub answer_regex: Option<String>,
    /// The gate: |accuracy(ONNX) - accuracy(reference)| in points (0-100) may not exceed this. Default 1.0.
    #[serde(default)]
    pub max_delta_points: Option<f64>,
    /// Only the first `limit` documents (lm-eval's `--limit`).
    #[serde(default)]
    pub limit: Option<usize>,
}

fn space() -> String {
    " ".into()
}

fn blank_line() -> String {
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

/// One document: its JSONL fields.
pub type Doc = BTreeMap<String, serde_json::Value>;

/// A loaded task: the spec, its documents and few-shot examples.
#[derive(Debug, Clone)]
pub struct Task {
    pub name: String,
    /// The task file, relative to the suite root.
    pub file: String,
    pub spec: TaskSpec,
    pub docs: Vec<Doc>,
    pub fewshot: Vec<Doc>,
}

/// What the model is asked for one document.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub doc: usize,
    /// The context as text (few-shot examples and the question), after the whitespace rule.
    pub context: String,
    pub kind: ItemKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ItemKind {
    MultipleChoice {
        /// The choices as the task gives them (`acc_norm` divides by their length in characters).
        choices: Vec<String>,
        gold: usize,
        /// Token ids: the context's, and each choice's continuation.
        context_ids: Vec<i64>,
        continuations: Vec<Vec<i64>>,
        /// Whether a token merges across the context/continuation boundary for some choice.
        boundary_merge: bool,
    },
    Generate {
        context_ids: Vec<i64>,
        target: String,
    },
}

/// A loaded task and its tokenized requests.
pub type Loaded = std::sync::Arc<(Task, Vec<Item>)>;

/// A task with its requests tokenized, shared by every variant's trial in the process (the same documents and
/// tokenizer give the same requests; tokenizing a few hundred items per trial would cost more than scoring them).
pub fn load_items(root: &Path, file: &str, tokenizer: &TextTokenizer, external: bool) -> Result<Loaded> {
    type Cache = std::sync::Mutex<std::collections::HashMap<(PathBuf, PathBuf, bool), Loaded>>;
    static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
    let key = (root.join(file), tokenizer.path.clone(), external);
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(hit.clone());
    }
    let task = Task::load_with(root, file, external)?;
    let items = task.items(tokenizer)?;
    let loaded = std::sync::Arc::new((task, items));
    cache.lock().unwrap_or_else(|p| p.into_inner()).insert(key, loaded.clone());
    Ok(loaded)
}

impl Task {
    /// Loads `file` (a task YAML) and its JSONL data; paths are relative to `root`.
    pub fn load(root: &Path, file: &str) -> Result<Task> {
        Task::load_with(root, file, false)
    }

    /// [`Task::load`], for a case that may read outside the suite root (`external_paths: true`) or not: without
    /// it, the task file and its data must lie inside `root`, symlinks resolved.
    pub fn load_with(root: &Path, file: &str, external: bool) -> Result<Task> {
        let path = root.join(file);
        let inside = crate::paths::check_case_path(root, file, external, file)?;
        crate::paths::regular_file(&path, file)?;
        let text = std::fs::read_to_string(&path).map_err(|e| Error::new(format!("{file}: {e}")))?;
        // A file outside the root is read by opt-in only, and its lines are never echoed in a message.
        let spec: TaskSpec = serde_saphyr::from_str_with_options(&text, serde_saphyr::options! { with_snippet: inside })
            .map_err(|e| if inside { Error::new(format!("{file}: {e}")) } else { crate::paths::withheld(file, &e.to_string()) })?;
        let name = spec.task.clone().unwrap_or_else(|| path.file_stem().and_then(|s| s.to_str()).unwrap_or("task").to_string());
        spec.validate(file)?;
        // Data outside the root (opted in) is read, but what its parser quotes from it is not shown.
        let read = |data: &str, field: &str| -> Result<Vec<Doc>> {
            let what = format!("{file}: field `{field}`");
            let inside = crate::paths::check_case_path(root, data, external, &what)?;
            read_jsonl(root, data).map_err(|e| if inside { e.context(&what) } else { crate::paths::withheld(&what, e.message()) })
        };
        let docs = read(&spec.test, "test")?;
        let docs = match spec.limit {
            Some(n) => docs.into_iter().take(n).collect(),
            None => docs,
        };
        let fewshot = match &spec.fewshot {
            Some(f) if spec.num_fewshot > 0 => read(f, "fewshot")?,
            _ => Vec::new(),
        };
        if fewshot.len() < spec.num_fewshot {
            bail!("{file}: field `num_fewshot` is {} but the few-shot split has {} documents", spec.num_fewshot, fewshot.len());
        }
        Ok(Task { name, file: file.to_string(), spec, docs, fewshot })
    }

    /// The few-shot prefix every document's context starts with (lm-eval's `first_n` sampler).
    pub fn fewshot_prefix(&self) -> Result<String> {
        let s = &self.spec;
        let mut out = String::new();
        for (i, d) in self.fewshot.iter().take(s.num_fewshot).enumerate() {
            let what = || format!("{}: few-shot document {i}", self.file);
            out.push_str(&s.text(d).map_err(|e| e.context(what()))?);
            out.push_str(&s.target_delimiter);
            out.push_str(&s.target_text(d).map_err(|e| e.context(what()))?);
            out.push_str(&s.fewshot_delimiter);
        }
        Ok(out)
    }

    /// Every document's request, tokenized.
    pub fn items(&self, tokenizer: &TextTokenizer) -> Result<Vec<Item>> {
        let prefix = self.fewshot_prefix()?;
        self.docs
            .iter()
            .enumerate()
            .map(|(i, d)| self.spec.item(i, d, &prefix, tokenizer).map_err(|e| e.context(format!("{}: document {i}", self.file))))
            .collect()
    }
}

impl TaskSpec {
    fn validate(&self, file: &str) -> Result<()> {
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
            regex::Regex::new(r).map_err(|e| Error::new(format!("{file}: field `answer_regex`: {e}")))?;
        }
        if let Some(d) = self.max_delta_points
            && !(d.is_finite() && d >= 0.0)
        {
            bail!("{file}: field `max_delta_points` is {d}, expected a number >= 0");
        }
        Ok(())
    }

    /// `doc_to_text` with every `{{field}}` replaced by the document's value.
    pub fn text(&self, doc: &Doc) -> Result<String> {
        render(&self.doc_to_text, doc)
    }

    fn choices(&self, doc: &Doc) -> Result<Vec<String>> {
        let field = self.doc_to_choice.as_deref().unwrap_or_default();
        let Some(serde_json::Value::Array(list)) = doc.get(field) else {
            bail!("field `{field}` (doc_to_choice) is missing or not a list");
        };
        list.iter().map(|v| scalar(v).ok_or_else(|| Error::new(format!("field `{field}` holds a non-scalar choice: {v}")))).collect()
    }

    fn target(&self, doc: &Doc) -> Result<serde_json::Value> {
        doc.get(&self.doc_to_target)
            .cloned()
            .ok_or_else(|| Error::new(format!("field `{}` (doc_to_target) is missing", self.doc_to_target)))
    }

    /// The gold index of a multiple-choice document.
    fn gold(&self, doc: &Doc, n: usize) -> Result<usize> {
        let t = self.target(doc)?;
        let i = t.as_u64().ok_or_else(|| Error::new(format!("field `{}` is {t}, expected a choice index", self.doc_to_target)))? as usize;
        if i >= n {
            bail!("field `{}` is {i} but there are {n} choices", self.doc_to_target);
        }
        Ok(i)
    }

    /// The answer as text, as a few-shot example shows it: the gold choice, or the target string.
    fn target_text(&self, doc: &Doc) -> Result<String> {
        match self.output_type {
            OutputType::MultipleChoice => {
                let choices = self.choices(doc)?;
                Ok(choices[self.gold(doc, choices.len())?].clone())
            }
            OutputType::GenerateUntil => {
                let t = self.target(doc)?;
                scalar(&t).ok_or_else(|| Error::new(format!("field `{}` is {t}, expected a string", self.doc_to_target)))
            }
        }
    }

    fn item(&self, i: usize, doc: &Doc, prefix: &str, tokenizer: &TextTokenizer) -> Result<Item> {
        let context = format!("{prefix}{}", self.text(doc)?);
        match self.output_type {
            OutputType::GenerateUntil => {
                let target = self.target_text(doc)?;
                Ok(Item { doc: i, kind: ItemKind::Generate { context_ids: tokenizer.encode(&context)?, target }, context })
            }
            OutputType::MultipleChoice => {
                let choices = self.choices(doc)?;
                let gold = self.gold(doc, choices.len())?;
                let mut context_ids = Vec::new();
                let mut continuations = Vec::with_capacity(choices.len());
                let mut boundary_merge = false;
                let mut ctx_text = context.clone();
                for c in &choices {
                    let pair = encode_pair(tokenizer, &context, &format!("{}{c}", self.target_delimiter))?;
                    boundary_merge |= pair.boundary_merge;
                    context_ids = pair.context;
                    ctx_text = pair.context_text;
                    continuations.push(pair.continuation);
                }
                Ok(Item {
                    doc: i,
                    context: ctx_text,
                    kind: ItemKind::MultipleChoice { choices, gold, context_ids, continuations, boundary_merge },
                })
            }
        }
    }
}

/// A (context, continuation) pair tokenized by lm-eval's rules.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    pub context_text: String,
    pub continuation_text: String,
    pub context: Vec<i64>,
    pub continuation: Vec<i64>,
    /// The whole string's tokens do not start with the context's: a token spans the boundary.
    pub boundary_merge: bool,
}

/// lm-eval's `_encode_pair`: trailing whitespace of the context moves to the continuation; the continuation's
/// tokens are those of `context + continuation` after the context's own.
pub fn encode_pair(tokenizer: &TextTokenizer, context: &str, continuation: &str) -> Result<Pair> {
    let trimmed = context.trim_end();
    let (context, continuation) = (trimmed.to_string(), format!("{}{continuation}", &context[trimmed.len()..]));
    let whole = tokenizer.encode(&format!("{context}{continuation}"))?;
    let ctx = tokenizer.encode(&context)?;
    let boundary_merge = !whole.starts_with(&ctx);
    let cont = whole.get(ctx.len()..).unwrap_or_default().to_vec();
    if cont.is_empty() {
        bail!("the continuation {continuation:?} has no tokens of its own after the context");
    }
    Ok(Pair { context_text: context, continuation_text: continuation, context: ctx, continuation: cont, boundary_merge })
}

fn scalar(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Replaces `{{ field }}` with the document's value; an unknown field is an error naming it.
pub fn render(template: &str, doc: &Doc) -> Result<String> {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find("}}") else { bail!("template {template:?} has an unclosed `{{{{`") };
        let field = rest[start + 2..start + end].trim();
        let v = doc.get(field).ok_or_else(|| Error::new(format!("template field `{field}` is not in the document")))?;
        out.push_str(&scalar(v).ok_or_else(|| Error::new(format!("template field `{field}` is {v}, not a scalar")))?);
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Reads a JSONL file (relative to `root`): one JSON object per non-empty line; errors name the line.
pub fn read_jsonl(root: &Path, file: &str) -> Result<Vec<Doc>> {
    let path: PathBuf = root.join(file);
    crate::paths::regular_file(&path, file)?;
    let text = std::fs::read_to_string(&path).map_err(|e| Error::new(format!("{file}: {e}")))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| serde_json::from_str::<Doc>(l).map_err(|e| Error::new(format!("{file}:{}: {e}", n + 1))))
        .collect()
}

/// lm-eval's `regex` filter for generate_until: the first match (group 1 if the pattern has groups), else
/// `[invalid]`; without a pattern the generation itself, stripped.
pub fn extract_answer(regex: Option<&str>, generated: &str) -> String {
    let Some(r) = regex.and_then(compiled) else { return generated.trim().to_string() };
    match r.captures(generated) {
        Some(c) => c.get(1).or_else(|| c.get(0)).map_or_else(String::new, |m| m.as_str().to_string()),
        None => "[invalid]".into(),
    }
}

/// `pattern` compiled once per process (every item of a task extracts its answer with the same one); `None` when
/// it does not compile (task loading has already said so, naming the file).
fn compiled(pattern: &str) -> Option<regex::Regex> {
    static CACHE: std::sync::OnceLock<std::sync::Mutex<BTreeMap<String, Option<regex::Regex>>>> = std::sync::OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    cache.entry(pattern.to_string()).or_insert_with(|| regex::Regex::new(pattern).ok()).clone()
}

/// Cuts a generation at the first stop string (lm-eval's `until`).
pub fn cut_at_stop(text: &str, until: &[String]) -> String {
    let end = until.iter().filter(|s| !s.is_empty()).filter_map(|s| text.find(s.as_str())).min().unwrap_or(text.len());
    text[..end].to_string()
}
