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

use crate::accuracy::gate::GatePolicy;
use crate::accuracy::lmeval;
use crate::error::{Error, Result, bail};
use crate::feed::tokenizer::TextTokenizer;

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

fn fewshot_override<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<usize>, D::Error> {
    count(d, "num_fewshot")
}

fn limit_count<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<usize>, D::Error> {
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

/// What a case says about a task it runs: where an lm-eval task file's data lives (else the Hugging Face hub
/// cache), and overrides of its shots, metric, size and gate thresholds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Source {
    /// A folder laid out like a dataset repository: `<dataset_name>/<split>-*.jsonl`, `data/<split>-*.jsonl`, ...
    pub data: Option<PathBuf>,
    pub overrides: Overrides,
    /// The case's `external_paths`: whether the task's files may lie outside the suite root.
    pub external_paths: bool,
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
    pub protocol: Option<crate::accuracy::protocol::Protocol>,
    /// The model's weights are random (a seeded fixture): its scores mean nothing, and the report says so; the
    /// trial proves the plumbing (hooks, media, protocol, stops, scorers) by the package's every output being the
    /// reference's, character for character.
    #[serde(default)]
    pub plumbing_only: bool,
}

impl Source {
    /// Whether the task runs in the multimodal gate: the case pins a `protocol` (which only lmms-eval tasks take),
    /// or the file reads as lmms-eval's. A broken lmms-eval file with a protocol still goes there, to fail by name.
    pub fn is_multimodal(&self, root: &Path, file: &str) -> bool {
        self.overrides.protocol.is_some() || crate::accuracy::lmms::is_lmms_file(&root.join(file))
    }

    /// No overrides; reading outside the suite root as the case allows.
    pub fn with_external_paths(external_paths: bool) -> Source {
        Source { external_paths, ..Source::default() }
    }
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
    /// The whole few-shot split (the pool `num_fewshot` examples are drawn from).
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

impl Item {
    /// Every token sequence the item feeds the model, in order: the context, then each choice's continuation.
    pub fn sequences(&self) -> Vec<&[i64]> {
        match &self.kind {
            ItemKind::MultipleChoice { context_ids, continuations, .. } => {
                std::iter::once(context_ids.as_slice()).chain(continuations.iter().map(Vec::as_slice)).collect()
            }
            ItemKind::Generate { context_ids, .. } => vec![context_ids],
        }
    }
}

/// A loaded task and its tokenized requests.
pub type Loaded = std::sync::Arc<(Task, Vec<Item>)>;

/// A task with its requests tokenized, shared by every variant's trial in the process (the same documents and
/// tokenizer give the same requests; tokenizing a few hundred items per trial would cost more than scoring them).
pub fn load_items(root: &Path, file: &str, tokenizer: &TextTokenizer, external: bool) -> Result<Loaded> {
    load_items_with(root, file, &Source::with_external_paths(external), tokenizer)
}

/// [`load_items`] with what the case says about the task.
pub fn load_items_with(root: &Path, file: &str, source: &Source, tokenizer: &TextTokenizer) -> Result<Loaded> {
    type Cache = std::sync::Mutex<std::collections::HashMap<(PathBuf, String, PathBuf), Loaded>>;
    static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
    let key = (root.join(file), format!("{source:?}"), tokenizer.path.clone());
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(hit.clone());
    }
    let task = Task::load_with(root, file, source)?;
    let items = task.items(tokenizer)?;
    let loaded = std::sync::Arc::new((task, items));
    cache.lock().unwrap_or_else(|p| p.into_inner()).insert(key, loaded.clone());
    Ok(loaded)
}

impl Task {
    /// Loads `file` (a task YAML: the suite's dialect, or an lm-eval task file) and its data; paths are relative
    /// to `root`. An lm-eval file reads its dataset from the Hugging Face hub cache.
    pub fn load(root: &Path, file: &str) -> Result<Task> {
        Task::load_with(root, file, &Source::default())
    }

    /// [`Task::load`] with what a case says about the task: where an lm-eval task file's data is, how many shots,
    /// and whether it may read outside the suite root (`external_paths: true`): without it, the task file and its
    /// data must lie inside `root`, symlinks resolved.
    pub fn load_with(root: &Path, file: &str, source: &Source) -> Result<Task> {
        let external = source.external_paths;
        let path = root.join(file);
        let inside = crate::paths::check_case_path(root, file, external, file)?;
        crate::paths::regular_file(&path, file)?;
        let text = std::fs::read_to_string(&path).map_err(|e| Error::new(format!("{file}: {e}")))?;
        if lmeval::is_lmeval(&text) {
            return Task::load_lmeval(root, file, source);
        }
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

    fn load_lmeval(root: &Path, file: &str, source: &Source) -> Result<Task> {
        let path = root.join(file);
        if let Some(data) = &source.data {
            let what = format!("{file}: the case's `data` for it");
            let rel = data.strip_prefix(root).unwrap_or(data);
            crate::paths::check_case_path(root, &rel.to_string_lossy(), source.external_paths, &what)?;
        }
        let c = lmeval::load_config(&path, file)?;
        if c.use_prompt.is_some() {
            bail!("{file}: field `use_prompt` (promptsource) is not supported");
        }
        let text = lmeval::plain("doc_to_text", &c.doc_to_text, file)?;
        let choice = lmeval::plain("doc_to_choice", &c.doc_to_choice, file)?;
        let target = lmeval::plain("doc_to_target", &c.doc_to_target, file)?;
        let process = lmeval::process_docs(&c, file)?;
        let output_type = match c.output_type.as_deref().unwrap_or("generate_until") {
            "multiple_choice" => OutputType::MultipleChoice,
            "generate_until" => OutputType::GenerateUntil,
            o => bail!("{file}: field `output_type` is `{o}`; the gate runs multiple_choice and generate_until"),
        };
        let supported: &[&str] = if output_type == OutputType::MultipleChoice { &["acc", "acc_norm"] } else { &["exact_match"] };
        let metrics: Vec<String> = c.metric_list.iter().flatten().map(|m| m.metric.clone()).collect();
        let metric_name = match &source.overrides.metric {
            Some(m) => m.clone(),
            None => metrics.iter().find(|m| supported.contains(&m.as_str())).cloned().unwrap_or_else(|| supported[0].to_string()),
        };
        if !metrics.is_empty() && !metrics.contains(&metric_name) {
            bail!("{file}: metric `{metric_name}` is not in the task's `metric_list` ({})", metrics.join(", "));
        }
        let metric = match metric_name.as_str() {
            "acc" => Metric::Acc,
            "acc_norm" => Metric::AccNorm,
            "exact_match" => Metric::ExactMatch,
            m => bail!("{file}: metric `{m}` is not one the gate holds (acc, acc_norm, exact_match)"),
        };
        let fs = c.fewshot_config.clone().unwrap_or_default();
        if fs.doc_to_text.is_some() || fs.doc_to_choice.is_some() || fs.doc_to_target.is_some() || fs.samples.is_some() {
            bail!("{file}: `fewshot_config` with its own doc_to_* or samples is not supported");
        }
        if fs.process_docs.is_some() {
            bail!("{file}: `fewshot_config.process_docs` is Python, which the suite cannot run");
        }
        let num_fewshot = source.overrides.num_fewshot.or(c.num_fewshot).unwrap_or(0);
        if num_fewshot > 0 && fs.sampler.as_deref() != Some("first_n") {
            bail!(
                "{file}: {num_fewshot}-shot with sampler `{}` draws examples with Python's random generator; the gate \
                 runs `fewshot_config: {{sampler: first_n}}` or 0-shot",
                fs.sampler.as_deref().unwrap_or("default")
            );
        }
        let test_split = c
            .test_split
            .clone()
            .or(c.validation_split.clone())
            .ok_or_else(|| Error::new(format!("{file}: neither `test_split` nor `validation_split`")))?;
        let fewshot_split = fs.split.clone().or(c.fewshot_split.clone()).or(c.training_split.clone()).or(c.validation_split.clone());
        let (answer_regex, generation_kwargs) = match output_type {
            OutputType::MultipleChoice => (None, None),
            OutputType::GenerateUntil => {
                let kw: GenerationKwargs = match &c.generation_kwargs {
                    Some(v) => {
                        let until = match v.get("until") {
                            Some(serde_json::Value::String(s)) => vec![s.clone()],
                            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect(),
                            _ => Vec::new(),
                        };
                        GenerationKwargs { until, max_gen_toks: v.get("max_gen_toks").and_then(|x| x.as_u64()).map_or(256, |x| x as usize) }
                    }
                    None => GenerationKwargs { until: vec!["\n\n".into()], max_gen_toks: 256 },
                };
                (regex_filter(c.filter_list.as_ref(), file)?, Some(kw))
            }
        };
        let string = |v: Option<serde_json::Value>, field: &str| -> Result<String> {
            match v {
                Some(serde_json::Value::String(s)) => Ok(s),
                None => bail!("{file}: no `{field}`"),
                Some(o) => bail!("{file}: field `{field}` is {o}; the gate takes a field name or a Jinja template here"),
            }
        };
        let doc_to_choice = match choice {
            None => None,
            Some(serde_json::Value::Array(a)) => Some(Choices::List(a.iter().map(|v| scalar(v).unwrap_or_default()).collect())),
            Some(serde_json::Value::Object(m)) => Some(Choices::List(m.values().map(|v| scalar(v).unwrap_or_default()).collect())),
            Some(v) => Some(Choices::Field(string(Some(v), "doc_to_choice")?)),
        };
        let doc_to_target = match target {
            Some(serde_json::Value::Number(n)) if n.as_u64().is_some() => Target::Index(n.as_u64().unwrap_or_default()),
            v => Target::Field(string(v, "doc_to_target")?),
        };
        let dataset = c.dataset_path.clone().unwrap_or_else(|| "json".into());
        let spec = TaskSpec {
            task: c.task.clone(),
            test: format!("{dataset}:{test_split}"),
            fewshot: fewshot_split.as_ref().map(|s| format!("{dataset}:{s}")),
            output_type,
            doc_to_text: string(text, "doc_to_text")?,
            doc_to_choice,
            doc_to_target,
            description: c.description.clone().unwrap_or_default(),
            target_delimiter: c.target_delimiter.clone().unwrap_or_else(space),
            fewshot_delimiter: c.fewshot_delimiter.clone().unwrap_or_else(blank_line),
            num_fewshot,
            fewshot_sampler: Sampler::FirstN,
            metric,
            generation_kwargs,
            answer_regex,
            max_delta_points: source.overrides.max_delta_points,
            flip_alpha: source.overrides.flip_alpha,
            max_flipped_points: source.overrides.max_flipped_points,
            limit: source.overrides.limit,
        };
        spec.validate(file)?;
        let read = |split: &str| -> Result<Vec<Doc>> {
            let files = lmeval::split_files(root, source.data.as_deref(), &c, split, file)?;
            let docs = lmeval::read_docs(&files, file)?;
            match process {
                Some(f) => docs
                    .iter()
                    .enumerate()
                    .map(|(i, d)| f(d).map_err(|e| e.context(format!("{file}: split `{split}` document {i}"))))
                    .collect(),
                None => Ok(docs),
            }
        };
        let mut docs = read(&test_split)?;
        if let Some(n) = source.overrides.limit {
            docs.truncate(n);
        }
        let fewshot = match &fewshot_split {
            Some(s) if num_fewshot > 0 => read(s)?,
            _ => Vec::new(),
        };
        let name = c.task.clone().unwrap_or_else(|| path.file_stem().and_then(|s| s.to_str()).unwrap_or("task").to_string());
        Ok(Task { name, file: file.to_string(), spec, docs, fewshot })
    }

    /// The few-shot prefix of `doc`'s context (lm-eval's `first_n` sampler). When the few-shot split is the test
    /// split, `doc` itself (every copy of it, by equality) is left out of the pool first, as lm-eval does.
    pub fn fewshot_prefix(&self, doc: Option<&Doc>) -> Result<String> {
        let s = &self.spec;
        let exclude = doc.filter(|_| self.fewshot_is_test());
        let pool: Vec<&Doc> = self.fewshot.iter().filter(|d| exclude.is_none_or(|x| x != *d)).collect();
        if pool.len() < s.num_fewshot {
            bail!("{}: `num_fewshot` is {} but the few-shot pool has {} documents", self.file, s.num_fewshot, pool.len());
        }
        let mut out = match (s.description.contains("{{"), doc) {
            (true, Some(d)) => {
                lmeval::fill_template(&s.description, d).map_err(|e| e.context(format!("{}: field `description`", self.file)))?
            }
            _ => s.description.clone(),
        };
        for (i, d) in pool.into_iter().take(s.num_fewshot).enumerate() {
            let what = || format!("{}: few-shot document {i}", self.file);
            out.push_str(&s.text(d).map_err(|e| e.context(what()))?);
            out.push_str(&s.target_delimiter);
            out.push_str(&s.target_text(d).map_err(|e| e.context(what()))?);
            out.push_str(&s.fewshot_delimiter);
        }
        Ok(out)
    }

    /// Whether the few-shot examples come from the scored split itself.
    fn fewshot_is_test(&self) -> bool {
        self.spec.fewshot.as_deref().is_some_and(|f| Path::new(f) == Path::new(&self.spec.test))
    }

    /// Every document's request, tokenized.
    pub fn items(&self, tokenizer: &TextTokenizer) -> Result<Vec<Item>> {
        let per_doc = self.fewshot_is_test() || self.spec.description.contains("{{");
        let shared = if per_doc { None } else { Some(self.fewshot_prefix(None)?) };
        self.docs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let prefix = match &shared {
                    Some(p) => p.clone(),
                    None => self.fewshot_prefix(Some(d))?,
                };
                self.spec.item(i, d, &prefix, tokenizer).map_err(|e| e.context(format!("{}: document {i}", self.file)))
            })
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
            lmeval::python_re::compile(r).map_err(|e| e.context(format!("{file}: field `answer_regex`")))?;
        }
        self.gate_policy(false).validate(file)?;
        Ok(())
    }

    /// The gate's thresholds: this task's, else the defaults. `ci` makes a task too small to decide them fail.
    pub fn gate_policy(&self, ci: bool) -> GatePolicy {
        let d = GatePolicy::default();
        GatePolicy {
            max_delta_points: self.max_delta_points.unwrap_or(d.max_delta_points),
            flip_alpha: self.flip_alpha.unwrap_or(d.flip_alpha),
            max_flipped_points: self.max_flipped_points,
            refuse_small: ci,
        }
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
    fn choices(&self, doc: &Doc) -> Result<Vec<String>> {
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
    fn gold(&self, doc: &Doc, choices: &[String]) -> Result<usize> {
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
    fn target_text(&self, doc: &Doc) -> Result<String> {
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

    fn item(&self, i: usize, doc: &Doc, prefix: &str, tokenizer: &TextTokenizer) -> Result<Item> {
        let context = format!("{prefix}{}", self.text(doc)?);
        match self.output_type {
            OutputType::GenerateUntil => {
                let target = self.target_text(doc)?;
                Ok(Item { doc: i, kind: ItemKind::Generate { context_ids: tokenizer.encode_request(&context)?, target }, context })
            }
            OutputType::MultipleChoice => {
                let choices = self.choices(doc)?;
                let gold = self.gold(doc, &choices)?;
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

/// lm-eval's `_encode_pair`: trailing whitespace of the context (Python's `str.rstrip`) moves to the
/// continuation; the continuation's tokens are those of `context + continuation` after the context's own.
pub fn encode_pair(tokenizer: &TextTokenizer, context: &str, continuation: &str) -> Result<Pair> {
    let trimmed = context.trim_end_matches(py_is_space);
    let (context, continuation) = (trimmed.to_string(), format!("{}{continuation}", &context[trimmed.len()..]));
    let whole = tokenizer.encode_request(&format!("{context}{continuation}"))?;
    let ctx = tokenizer.encode_request(&context)?;
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

/// Python's `str.isspace`, which `str.strip` and `str.rstrip` use: Unicode White_Space (Rust's
/// `char::is_whitespace`) plus the information separators U+001C..U+001F.
pub fn py_is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// The answer lm-eval compares with the target. Without a pattern: the generation itself, unchanged (lm-eval
/// compares the raw string). With one, its `regex` filter: the first match of the pattern as Python's `re` reads
/// it ([`lmeval::python_re`]; `findall`'s first element: the whole match without groups, group 1 with one, the
/// first non-empty group with more), stripped of Python whitespace; `[invalid]` when nothing matches.
pub fn extract_answer(regex: Option<&str>, generated: &str) -> String {
    const FALLBACK: &str = "[invalid]";
    let Some(r) = regex.and_then(compiled) else { return generated.to_string() };
    let Some(c) = r.captures(generated) else { return FALLBACK.into() };
    let m = match c.len() {
        1 => c.get(0).map(|m| m.as_str()),
        2 => Some(c.get(1).map_or("", |m| m.as_str())),
        _ => c.iter().skip(1).flatten().map(|m| m.as_str()).find(|m| !m.is_empty()).or(Some(FALLBACK)),
    };
    m.unwrap_or_default().trim_matches(py_is_space).to_string()
}

/// `pattern` (Python's `re`, translated) compiled once per process (every item of a task extracts its answer with
/// the same one); `None` when it is refused (task loading has already said so, naming the file).
fn compiled(pattern: &str) -> Option<regex::Regex> {
    static CACHE: std::sync::OnceLock<std::sync::Mutex<BTreeMap<String, Option<regex::Regex>>>> = std::sync::OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    cache.entry(pattern.to_string()).or_insert_with(|| lmeval::python_re::compile(pattern).ok()).clone()
}

/// Cuts a generation at the first stop string (lm-eval's `until`, and lmms-eval's): the text before the first
/// occurrence of any of them; an empty string never stops.
pub fn cut_at_stop<'a>(text: &'a str, until: &[String]) -> &'a str {
    first_stop(text, until).map_or(text, |(at, _)| &text[..at])
}

/// Where the first stop string of `until` occurs in `text`, and which one (at a tie, the one that sorts first).
pub fn first_stop<'a>(text: &str, until: &'a [String]) -> Option<(usize, &'a str)> {
    until.iter().filter(|s| !s.is_empty()).filter_map(|s| text.find(s.as_str()).map(|at| (at, s.as_str()))).min()
}

/// lm-eval's `filter_list` for generate_until, as far as the gate follows it: none, or one `regex` filter (with
/// `take_first`), whose pattern becomes the answer regex.
fn regex_filter(filters: Option<&serde_json::Value>, file: &str) -> Result<Option<String>> {
    let Some(list) = filters.and_then(|f| f.as_array()) else { return Ok(None) };
    let first = list.first().and_then(|f| f.get("filter")).and_then(|f| f.as_array()).cloned().unwrap_or_default();
    let mut pattern = None;
    for step in &first {
        match step.get("function").and_then(|f| f.as_str()) {
            Some("regex") => pattern = step.get("regex_pattern").and_then(|p| p.as_str()).map(str::to_string),
            Some("take_first") => {}
            f => bail!("{file}: `filter_list` function {f:?} is not supported (regex, take_first)"),
        }
    }
    Ok(pattern)
}
