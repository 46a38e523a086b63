//! lm-evaluation-harness task files, read unchanged: `include:`, `dataset_path`/`dataset_name`/splits over local
//! data, `doc_to_text`/`doc_to_choice`/`doc_to_target` as Jinja (minijinja, with the Python methods lm-eval's
//! templates call), `description`, `fewshot_config`, `metric_list`, and `process_docs`.
//!
//! Python cannot run here: a `!function` is refused, naming it, unless it is one of the well-known lm-eval
//! functions reimplemented below ([`known_process_docs`]). Data never comes from the network: each split is read
//! from a folder the case gives, or from the Hugging Face hub cache (`datasets--<org>--<name>/snapshots/<rev>/`),
//! found by [`split_files`] alone (one place to confine paths).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;

use crate::accuracy::doc::Doc;
use crate::accuracy::include::{self, Included, inherit};
use crate::error::{Error, Result, bail};
use crate::feed::python_str::{py_capitalize, py_is_space, python_method};

pub mod python_re;

/// The fields of an lm-eval task file the suite reads; others (`tag`, `metadata`, `should_decontaminate`, ...) are
/// ignored, as they do not change what is scored.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Config {
    pub include: Option<String>,
    pub task: Option<String>,
    pub dataset_path: Option<String>,
    pub dataset_name: Option<String>,
    pub dataset_kwargs: Option<DatasetKwargs>,
    pub training_split: Option<String>,
    pub validation_split: Option<String>,
    pub test_split: Option<String>,
    pub fewshot_split: Option<String>,
    pub process_docs: Option<serde_saphyr::Tagged<String>>,
    pub doc_to_text: Option<serde_saphyr::Tagged<Value>>,
    pub doc_to_choice: Option<serde_saphyr::Tagged<Value>>,
    pub doc_to_target: Option<serde_saphyr::Tagged<Value>>,
    pub description: Option<String>,
    pub target_delimiter: Option<String>,
    pub fewshot_delimiter: Option<String>,
    pub fewshot_config: Option<FewshotConfig>,
    pub num_fewshot: Option<usize>,
    pub output_type: Option<String>,
    pub metric_list: Option<Vec<MetricEntry>>,
    pub generation_kwargs: Option<Value>,
    pub filter_list: Option<Value>,
    pub use_prompt: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct DatasetKwargs {
    /// `dataset_path: json` style: split -> file(s), relative to the suite root.
    pub data_files: Option<BTreeMap<String, Files>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Files {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct FewshotConfig {
    pub sampler: Option<String>,
    pub split: Option<String>,
    pub samples: Option<Value>,
    pub doc_to_text: Option<Value>,
    pub doc_to_choice: Option<Value>,
    pub doc_to_target: Option<Value>,
    pub process_docs: Option<serde_saphyr::Tagged<String>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct MetricEntry {
    pub metric: String,
}

/// Whether a YAML text is an lm-eval task file rather than the suite's own dialect.
pub fn is_lmeval(text: &str) -> bool {
    text.lines().any(|l| {
        let key = l.split(':').next().unwrap_or_default().trim().trim_matches('"');
        !l.starts_with([' ', '\t', '#']) && matches!(key, "dataset_path" | "include")
    })
}

impl Included for Config {
    fn take_include(&mut self) -> Option<String> {
        self.include.take()
    }

    fn inherit(&mut self, parent: Config) {
        let child = self;
        inherit!(child, parent; task, dataset_path, dataset_name, dataset_kwargs, training_split, validation_split,
            test_split, fewshot_split, process_docs, doc_to_text, doc_to_choice, doc_to_target, description,
            target_delimiter, fewshot_delimiter, fewshot_config, num_fewshot, output_type, metric_list, generation_kwargs,
            filter_list, use_prompt);
    }
}

/// Reads an lm-eval task file with its `include:` chain (the included file first, this file's keys over it).
pub fn load_config(path: &Path, shown: &str) -> Result<Config> {
    include::load_chain(path, shown)
}

/// A template-or-field the way lm-eval takes it, checked not to be Python.
pub fn plain(field: &str, v: &Option<serde_saphyr::Tagged<Value>>, shown: &str) -> Result<Option<Value>> {
    match v {
        None => Ok(None),
        Some(t) => {
            refuse_tag(field, t.1.clone(), &t.0, shown)?;
            Ok(Some(t.0.clone()))
        }
    }
}

fn refuse_tag(field: &str, tag: Option<String>, value: &Value, shown: &str) -> Result<()> {
    match tag {
        Some(t) if t.contains("function") => bail!(
            "{shown}: field `{field}` is Python (`!function {}`), which the suite cannot run; write it as a Jinja \
             template or a field name",
            value.as_str().unwrap_or_default()
        ),
        _ => Ok(()),
    }
}

/// A `process_docs` function lm-eval's own tasks use, reimplemented: `(dataset_path, function)` -> the function.
type ProcessDocs = fn(&Doc) -> Result<Doc>;

/// The lm-eval `process_docs` functions the suite knows, by the dataset they belong to and their `!function`
/// name. Anything else is refused: an unknown Python function would silently score other text.
pub fn known_process_docs(dataset_path: &str, function: &str) -> Option<ProcessDocs> {
    match (dataset_path, function) {
        ("Rowan/hellaswag" | "hellaswag", "utils.process_docs") => Some(hellaswag_doc),
        _ => None,
    }
}

/// The `process_docs` of a task file, resolved, or a clear refusal.
pub fn process_docs(c: &Config, shown: &str) -> Result<Option<ProcessDocs>> {
    let Some(t) = &c.process_docs else { return Ok(None) };
    let name = t.0.trim();
    let dataset = c.dataset_path.as_deref().unwrap_or_default();
    match known_process_docs(dataset, name) {
        Some(f) => Ok(Some(f)),
        None => bail!(
            "{shown}: field `process_docs` is Python (`!function {name}` of dataset `{dataset}`), which the suite \
             cannot run; it knows lm-eval's own process_docs of: hellaswag (Rowan/hellaswag, utils.process_docs). \
             Store the processed documents as the data instead and drop `process_docs`"
        ),
    }
}

/// lm-eval's `tasks/hellaswag/utils.py`: `preprocess` of one string.
fn hellaswag_preprocess(text: &str) -> String {
    static BRACKETS: OnceLock<regex::Regex> = OnceLock::new();
    let re = BRACKETS.get_or_init(|| regex::Regex::new(r"\[.*?\]").expect("a valid pattern"));
    let t = text.trim_matches(py_is_space).replace(" [title]", ". ");
    re.replace_all(&t, "").replace("  ", " ")
}

/// lm-eval's `tasks/hellaswag/utils.py`: `process_docs` on one document (`dataset.map` keeps the old columns).
fn hellaswag_doc(doc: &Doc) -> Result<Doc> {
    let s = |k: &str| {
        doc.get(k).and_then(Value::as_str).ok_or_else(|| Error::new(format!("hellaswag: field `{k}` is missing or not a string")))
    };
    let ctx = format!("{} {}", s("ctx_a")?, py_capitalize(s("ctx_b")?));
    let endings = doc.get("endings").and_then(Value::as_array).ok_or_else(|| Error::new("hellaswag: field `endings` is not a list"))?;
    let choices: Vec<Value> = endings
        .iter()
        .map(|e| e.as_str().map(|e| Value::String(hellaswag_preprocess(e))))
        .collect::<Option<_>>()
        .ok_or_else(|| Error::new("hellaswag: an ending is not a string"))?;
    let label = match doc.get("label") {
        Some(Value::String(l)) => {
            l.trim().parse::<i64>().map_err(|_| Error::new(format!("hellaswag: field `label` is {l:?}, not an integer")))?
        }
        Some(Value::Number(n)) => n.as_i64().ok_or_else(|| Error::new("hellaswag: field `label` is not an integer"))?,
        _ => bail!("hellaswag: field `label` is missing"),
    };
    let mut out = doc.clone();
    out.insert("query".into(), Value::String(hellaswag_preprocess(&format!("{}: {ctx}", s("activity_label")?))));
    out.insert("choices".into(), Value::Array(choices));
    out.insert("gold".into(), Value::from(label));
    Ok(out)
}

/// The files holding one split, in order. With `data_files` (lm-eval's `dataset_path: json`), those, relative
/// to `root`; else the shards `<split>-*.{jsonl,json,parquet}` (or `<split>.*`) under `<base>/<dataset_name>/`,
/// `<base>/data/` or `<base>/`, where `base` is `data_dir` when the case gives one, else the dataset's snapshot in
/// the Hugging Face hub cache. Every path the gate reads task data from comes from here.
pub fn split_files(
    root: &Path,
    data_dir: Option<&Path>,
    hub_cache: Option<&Path>,
    c: &Config,
    split: &str,
    shown: &str,
) -> Result<Vec<PathBuf>> {
    if let Some(files) = c.dataset_kwargs.as_ref().and_then(|k| k.data_files.as_ref()) {
        let f = files.get(split).ok_or_else(|| Error::new(format!("{shown}: `dataset_kwargs.data_files` has no split `{split}`")))?;
        let list = match f {
            Files::One(p) => vec![p.clone()],
            Files::Many(v) => v.clone(),
        };
        return Ok(list.into_iter().map(|p| root.join(p)).collect());
    }
    let dataset = c.dataset_path.as_deref().ok_or_else(|| Error::new(format!("{shown}: no `dataset_path`")))?;
    let base = match data_dir {
        Some(d) => d.to_path_buf(),
        None => {
            let cache = hub_cache.ok_or_else(|| {
                Error::new(format!("{shown}: dataset `{dataset}` has no `data` folder, and this run names no Hugging Face hub cache"))
            })?;
            hub_snapshot(cache, dataset).ok_or_else(|| {
                Error::new(format!(
                    "{shown}: dataset `{dataset}` is not in the Hugging Face hub cache ({}); download it there, or give \
                     the case a `data` folder",
                    cache.display()
                ))
            })?
        }
    };
    let mut dirs = Vec::new();
    if let Some(n) = &c.dataset_name {
        dirs.push(base.join(n));
    }
    dirs.extend([base.join("data"), base.clone()]);
    for dir in &dirs {
        let Ok(rd) = std::fs::read_dir(dir) else { continue };
        let mut hits: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                let stem = name.split('.').next().unwrap_or_default();
                let ext_ok = [".jsonl", ".json", ".parquet"].iter().any(|x| name.ends_with(x));
                ext_ok && (stem == split || stem.starts_with(&format!("{split}-")))
            })
            .collect();
        if !hits.is_empty() {
            hits.sort();
            return Ok(hits);
        }
    }
    bail!(
        "{shown}: no file for split `{split}` of `{dataset}` (looked for {split}-*.jsonl / .json / .parquet in {})",
        dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
    )
}

/// `<cache>/datasets--<org>--<name>/snapshots/<rev>/`: the revision `refs/main` names, else the only one.
pub fn hub_snapshot(cache: &Path, dataset: &str) -> Option<PathBuf> {
    let repo = cache.join(format!("datasets--{}", dataset.replace('/', "--")));
    let snaps = repo.join("snapshots");
    if let Ok(rev) = std::fs::read_to_string(repo.join("refs/main")) {
        let p = snaps.join(rev.trim());
        if p.is_dir() {
            return Some(p);
        }
    }
    let mut all: Vec<PathBuf> = std::fs::read_dir(&snaps).ok()?.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    all.sort();
    if all.len() == 1 { all.pop() } else { None }
}

/// The rows of a Parquet file as documents (nested lists and structs as JSON arrays and objects). The parquet crate
/// panics on some corrupt files (a slice past a page's end): that is the file's error, never the run's.
fn read_parquet(path: &Path) -> std::result::Result<Vec<Doc>, String> {
    std::panic::catch_unwind(|| parquet_rows(path)).unwrap_or_else(|panic| {
        let why = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
        Err(format!("not a Parquet file the reader can read (it gave up: {})", why.unwrap_or_default()))
    })
}

fn parquet_rows(path: &Path) -> std::result::Result<Vec<Doc>, String> {
    use parquet::file::reader::FileReader;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let reader = parquet::file::serialized_reader::SerializedFileReader::new(file).map_err(|e| e.to_string())?;
    let rows = reader.get_row_iter(None).map_err(|e| e.to_string())?;
    rows.map(|row| match row.map_err(|e| e.to_string())?.to_json_value() {
        Value::Object(m) => Ok(m.into_iter().collect()),
        v => Err(format!("a row is {v}, not a record")),
    })
    .collect()
}

/// Reads the documents of a split's files: JSONL (one object a line), JSON (an array of objects) or Parquet.
pub fn read_docs(files: &[PathBuf], shown: &str) -> Result<Vec<Doc>> {
    let mut out = Vec::new();
    for f in files {
        let name = f.display().to_string();
        if name.ends_with(".parquet") {
            out.extend(read_parquet(f).map_err(|e| Error::new(format!("{shown}: {name}: {e}")))?);
            continue;
        }
        let text = std::fs::read_to_string(f).map_err(|e| Error::new(format!("{shown}: {name}: {e}")))?;
        if name.ends_with(".json") && text.trim_start().starts_with('[') {
            let v: Vec<Doc> = serde_json::from_str(&text).map_err(|e| Error::new(format!("{shown}: {name}: {e}")))?;
            out.extend(v);
        } else {
            for (n, l) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                out.push(serde_json::from_str(l).map_err(|e| Error::new(format!("{shown}: {name}:{}: {e}", n + 1)))?);
            }
        }
    }
    Ok(out)
}

/// The Jinja environment lm-eval renders with: strict undefined, trailing newline kept, `regex_replace`, and the
/// Python methods its task templates call on strings and lists.
fn env() -> &'static minijinja::Environment<'static> {
    static ENV: OnceLock<minijinja::Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut e = minijinja::Environment::new();
        e.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        e.set_keep_trailing_newline(true);
        e.add_filter("regex_replace", |s: String, pattern: String, repl: String| -> std::result::Result<String, minijinja::Error> {
            let re = regex::Regex::new(&pattern)
                .map_err(|err| minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, err.to_string()))?;
            Ok(re.replace_all(&s, repl.replace("\\", "$").as_str()).into_owned())
        });
        e.set_unknown_method_callback(python_method);
        e
    })
}

/// Renders a template over a document, as lm-eval's `apply_template`.
pub fn fill_template(template: &str, doc: &Doc) -> Result<String> {
    env().render_str(template, doc).map_err(|e| Error::new(format!("template {template:?}: {e}")))
}

/// A template that is one `{{ expression }}`: its value, not its text (lm-eval renders such a template and reads
/// the Python literal back with `ast.literal_eval`; evaluating the expression gives the same list).
pub fn evaluate(template: &str, doc: &Doc) -> Result<Option<Value>> {
    let t = template.trim();
    let Some(inner) = t.strip_prefix("{{").and_then(|t| t.strip_suffix("}}")) else { return Ok(None) };
    if inner.contains("{{") || inner.contains("}}") || inner.contains("{%") {
        return Ok(None);
    }
    let expr = env().compile_expression(inner).map_err(|e| Error::new(format!("template {template:?}: {e}")))?;
    let v = expr.eval(doc).map_err(|e| Error::new(format!("template {template:?}: {e}")))?;
    serde_json::to_value(&v).map(Some).map_err(|e| Error::new(format!("template {template:?}: {e}")))
}
