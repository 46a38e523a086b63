//! Benchmark tasks for the accuracy gate, with lm-evaluation-harness 0.4 semantics: a task file ([`spec`], or an
//! lm-eval file read into one by [`lmeval_file`]) with its documents, and the requests a model answers (contexts,
//! continuations, token ids).
//!
//! The rules are lm-eval's, because its numbers are what users compare against:
//! - the context is the first `num_fewshot` documents of the few-shot split (`first_n` sampler), each
//!   `doc_to_text + target_delimiter + target`, joined and followed by `fewshot_delimiter`, then `doc_to_text(doc)`;
//! - a multiple-choice continuation is `target_delimiter + choice`; trailing whitespace of the context moves to
//!   the front of the continuation;
//! - context and context+continuation are each tokenized with the tokenizer's default special tokens, and the
//!   continuation's tokens are the whole string's tokens after the context's. Where a token merges across that
//!   boundary (the whole string's first tokens are not the context's), the item is counted and reported.

pub mod chat;
pub mod lmeval_file;
pub mod spec;

use std::path::{Path, PathBuf};

use crate::accuracy::doc::{Doc, read_jsonl};
use crate::accuracy::lmeval;
use crate::accuracy::resolve::{Source, task_name};
use crate::error::{Error, Result, bail};
use crate::feed::python_str::py_is_space;
use crate::feed::tokenizer::TextTokenizer;
use spec::{OutputType, TaskSpec};

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
    let items = task.requests(tokenizer, source)?;
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
            let (spec, docs, fewshot) = lmeval_file::read(root, file, source)?;
            return Ok(Task::new(file, spec, docs, fewshot));
        }
        // A file outside the root is read by opt-in only, and its lines are never echoed in a message.
        let spec: TaskSpec = serde_saphyr::from_str_with_options(&text, serde_saphyr::options! { with_snippet: inside })
            .map_err(|e| if inside { Error::new(format!("{file}: {e}")) } else { crate::paths::withheld(file, &e.to_string()) })?;
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
        Ok(Task::new(file, spec, docs, fewshot))
    }

    /// The task's name is the file's `task:` when it states one, else the file's stem.
    fn new(file: &str, spec: TaskSpec, docs: Vec<Doc>, fewshot: Vec<Doc>) -> Task {
        let name = spec.task.clone().unwrap_or_else(|| task_name(file));
        Task { name, file: file.to_string(), spec, docs, fewshot }
    }

    /// The few-shot prefix of `doc`'s context (lm-eval's `first_n` sampler). When the few-shot split is the test
    /// split, `doc` itself (every copy of it, by equality) is left out of the pool first, as lm-eval does.
    pub fn fewshot_prefix(&self, doc: Option<&Doc>) -> Result<String> {
        let s = &self.spec;
        let pool = self.fewshot_pool(doc)?;
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

    /// The few-shot pool of `doc` (lm-eval's `first_n` sampler draws its first `num_fewshot`): when the few-shot split
    /// is the test split, `doc` itself (every copy of it, by equality) is left out first, as lm-eval does.
    fn fewshot_pool(&self, doc: Option<&Doc>) -> Result<Vec<&Doc>> {
        let exclude = doc.filter(|_| self.fewshot_is_test());
        let pool: Vec<&Doc> = self.fewshot.iter().filter(|d| exclude.is_none_or(|x| x != *d)).collect();
        if pool.len() < self.spec.num_fewshot {
            bail!("{}: `num_fewshot` is {} but the few-shot pool has {} documents", self.file, self.spec.num_fewshot, pool.len());
        }
        Ok(pool)
    }

    /// Whether the few-shot examples come from the scored split itself.
    fn fewshot_is_test(&self) -> bool {
        self.spec.fewshot.as_deref().is_some_and(|f| Path::new(f) == Path::new(&self.spec.test))
    }

    /// Every document's request, tokenized.
    pub fn items(&self, tokenizer: &TextTokenizer) -> Result<Vec<Item>> {
        self.items_with(tokenizer, None)
    }

    /// Every document's request as the case asks for it: through the tokenizer's chat template where its entry sets
    /// `apply_chat_template` (with `fewshot_as_multiturn`, on by default there as in lm-eval, and `system_instruction`).
    pub fn requests(&self, tokenizer: &TextTokenizer, source: &Source) -> Result<Vec<Item>> {
        let o = &source.overrides;
        if !o.apply_chat_template {
            if o.fewshot_as_multiturn.is_some() || o.system_instruction.is_some() {
                bail!("{}: `fewshot_as_multiturn` and `system_instruction` need `apply_chat_template: true`", self.file);
            }
            return self.items(tokenizer);
        }
        let dir = tokenizer.path.parent().unwrap_or(Path::new("."));
        let template = crate::feed::chat_template::ChatTemplate::load(dir, None)
            .map_err(|e| e.context(format!("{}: `apply_chat_template`", self.file)))?;
        let chat = chat::Chat {
            template,
            fewshot_as_multiturn: o.fewshot_as_multiturn.unwrap_or(true),
            system_instruction: o.system_instruction.clone(),
        };
        self.items_with(tokenizer, Some(&chat))
    }

    /// Every document's request, tokenized, through a chat template where `chat` is given ([`chat`]).
    pub fn items_with(&self, tokenizer: &TextTokenizer, chat: Option<&chat::Chat>) -> Result<Vec<Item>> {
        if let Some(chat) = chat {
            return self
                .docs
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let context = self.chat_context(d, chat)?;
                    // Under a chat template the continuation is the bare choice (lm-eval drops `target_delimiter`).
                    item(&self.spec, i, d, &context, "", tokenizer).map_err(|e| e.context(format!("{}: document {i}", self.file)))
                })
                .collect();
        }
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
                let context =
                    self.spec.text(d).map(|t| format!("{prefix}{t}")).map_err(|e| e.context(format!("{}: document {i}", self.file)))?;
                item(&self.spec, i, d, &context, &self.spec.target_delimiter, tokenizer)
                    .map_err(|e| e.context(format!("{}: document {i}", self.file)))
            })
            .collect()
    }
}

/// One document's request: its `context`, tokenized with each choice after `delimiter`, or its target.
fn item(spec: &TaskSpec, i: usize, doc: &Doc, context: &str, delimiter: &str, tokenizer: &TextTokenizer) -> Result<Item> {
    let context = context.to_string();
    match spec.output_type {
        OutputType::GenerateUntil => {
            let target = spec.target_text(doc)?;
            Ok(Item { doc: i, kind: ItemKind::Generate { context_ids: tokenizer.encode_request(&context)?, target }, context })
        }
        OutputType::MultipleChoice => {
            let choices = spec.choices(doc)?;
            let gold = spec.gold(doc, &choices)?;
            let mut context_ids = Vec::new();
            let mut continuations = Vec::with_capacity(choices.len());
            let mut boundary_merge = false;
            let mut ctx_text = context.clone();
            for c in &choices {
                let pair = encode_pair(tokenizer, &context, &format!("{delimiter}{c}"))?;
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
