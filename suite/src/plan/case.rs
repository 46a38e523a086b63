//! The case file: one YAML per model, a strict superset of mobius' `cases/<task>/<id>.yaml` schema.
//!
//! Unknown fields are errors (a typo must never silently drop a check). mobius' files load unchanged; our extensions
//! (`reference`, `tokenizer`, `modalities`, `matrix`, `tolerance`) are all optional.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

use crate::error::{Error, Result, bail};
use crate::judge::tolerance::ToleranceOverride;
use crate::judge::xfail::Xfail;
use crate::plan::hub::HubRef;
use crate::vocab::{Dtype, Ep, Level, Modality};

/// What a case file holds, field for field.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseSpec {
    pub model_id: String,
    pub model_type: String,
    pub revision: String,
    pub task_type: String,
    /// mobius' one dtype (`float32`, ...): the reference's dtype, and the package dtype when `matrix` is absent.
    pub dtype: Dtype,
    pub level: Levels,
    #[serde(default)]
    pub inputs: Inputs,
    #[serde(default)]
    pub generation: Generation,
    #[serde(default)]
    pub trust_remote_code: bool,
    #[serde(default)]
    pub skip_reason: Option<String>,
    #[serde(default)]
    pub ci_skip_reason: Option<String>,
    #[serde(default)]
    pub min_token_match_ratio: Option<f64>,
    #[serde(default)]
    pub notes: Option<String>,
    #[serde(default)]
    pub architecture: Option<String>,

    /// Hugging Face weights the goldens are made from (a directory under the repository).
    #[serde(default)]
    pub reference: Option<String>,
    /// Directory holding `tokenizer.json`; defaults to `reference`.
    #[serde(default)]
    pub tokenizer: Option<String>,
    #[serde(default)]
    pub modalities: Option<Vec<Modality>>,
    #[serde(default)]
    pub matrix: Option<Matrix>,
    #[serde(default)]
    pub tolerance: Option<ToleranceOverride>,
    /// Trials expected to fail, each with the failure it expects (one entry or a list), strictly: one that passes,
    /// or fails otherwise, is reported as a failure.
    #[serde(default, deserialize_with = "crate::judge::xfail::one_or_many")]
    pub xfail: Vec<Xfail>,
    /// Benchmark tasks (`cases/tasks/<task>.yaml`, or lm-eval task files) the accuracy gate runs on every variant
    /// of the matrix: trials `<task>/<case>/<ep>/<dtype>/accuracy`, judged against
    /// `goldens/baselines/<task>/<case>.json`. An entry is the task file's path, or `{task: path, data: folder,
    /// num_fewshot, metric, limit, max_delta_points, flip_alpha, max_flipped_points}`.
    #[serde(default)]
    pub accuracy: Vec<AccuracyTask>,
    /// Lets local paths point outside the suite root (absolute, or `..` above it). Off: a case cannot read
    /// files elsewhere on the machine by accident.
    #[serde(default)]
    pub external_paths: bool,
    /// The command that builds this case's packages and reference when they are not in the checkout (the real
    /// tier: `cargo xtask real`). A trial whose package is absent then skips naming it, and fails under CI.
    #[serde(default)]
    pub build_command: Option<String>,
    /// The builder's manifest of the packages (`fixtures/real/MANIFEST.json`: a sha256 and a size per file, relative
    /// to its `root`): every trial first checks its package's files against it, so a truncated or replaced file
    /// fails naming itself before ONNX Runtime reads it.
    #[serde(default)]
    pub manifest: Option<String>,
    /// The model must be there: a package missing from the Hugging Face cache fails its trials instead of
    /// skipping them (as every case does under `MOBIUS_REQUIRE_MODELS=1` or `cargo xtask ci --require`).
    #[serde(default)]
    pub required: bool,
    /// The distribution level (`dist`): the package's next-token distributions over a teacher-forced corpus against
    /// the fp32 reference's, for every variant of the matrix (text only; the first prompt's case runs it).
    #[serde(default)]
    pub distribution: Option<Distribution>,
    /// The localize level (`level::localize`): deviations along the model this case knows of, each with the range
    /// of its noise multiple and why.
    #[serde(default)]
    pub localize: crate::level::localize::judge::LocalizeSpec,
}

/// The `distribution:` block: the corpus, the chunk length and how many of the reference's top ids the golden keeps
/// per scored position (the rest is one tail bucket). A text case's corpus is documents (`{"text"}` a line) cut
/// into chunks of `n_ctx` tokens; a speech-to-text case's is utterances (`{"name", "audio", "text"}` a line), each
/// its own segment: the clip through the package's encoder, its transcript teacher-forced after the decoder's
/// forced prefix.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Distribution {
    #[serde(default)]
    corpus: Option<String>,
    #[serde(default)]
    n_ctx: Option<usize>,
    #[serde(default = "Distribution::default_k")]
    pub k: usize,
}

impl Distribution {
    /// The suite's own corpus: documents written for it (prose, code, numbers, French, a dialogue).
    pub const CORPUS: &'static str = "fixtures/dist/corpus.jsonl";

    /// The corpus file, relative to the suite root: the case's, else (text) the suite's own. A speech case names
    /// its own (validation refuses one without).
    pub fn corpus(&self) -> &str {
        self.corpus.as_deref().unwrap_or(Distribution::CORPUS)
    }

    /// The chunk length of a text corpus (256 unless the case says); a speech corpus has none (its segments are its
    /// utterances).
    pub fn n_ctx(&self) -> usize {
        self.n_ctx.unwrap_or(256)
    }

    fn default_k() -> usize {
        32
    }
}

/// One of a case's accuracy tasks: a task file, or a task file with where its data is and the case's overrides.
#[derive(Debug, Clone, PartialEq)]
pub enum AccuracyTask {
    File(String),
    With(Box<AccuracyEntry>),
}

impl<'de> Deserialize<'de> for AccuracyTask {
    /// A path, or a map; the map's own error (a misspelt or out-of-range field) is kept, where serde's untagged
    /// enum would only say that no variant matched.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(AccuracyTask::File(s)),
            v @ serde_json::Value::Object(_) => {
                AccuracyEntry::deserialize(v).map(|e| AccuracyTask::With(Box::new(e))).map_err(D::Error::custom)
            }
            other => Err(D::Error::custom(format!("an accuracy entry is {other}, expected a task file's path or a map with `task`"))),
        }
    }
}

/// A task with what the case overrides of it: `task`, `data`, and the task's own overrides in the same map.
#[derive(Debug, Clone, PartialEq)]
pub struct AccuracyEntry {
    pub task: String,
    /// An lm-eval task file's dataset folder (laid out like the dataset's repository), relative to the suite
    /// root; without it, the Hugging Face hub cache.
    pub data: Option<String>,
    pub overrides: crate::accuracy::resolve::Overrides,
}

impl<'de> Deserialize<'de> for AccuracyEntry {
    /// One flat map. serde's `flatten` would let an unknown field through, so the overrides are read from what
    /// `task` and `data` leave, where their own `deny_unknown_fields` refuses a misspelt one.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        use serde_json::Value;
        let mut map = serde_json::Map::deserialize(d)?;
        let mut text = |field: &'static str| match map.remove(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(D::Error::custom(format!("field `{field}` is {other}, expected a string"))),
        };
        let task = text("task")?.ok_or_else(|| D::Error::missing_field("task"))?;
        let data = text("data")?;
        let overrides = crate::accuracy::resolve::Overrides::deserialize(Value::Object(map))
            .map_err(|e| D::Error::custom(format!("{e}, or `task` or `data`")))?;
        Ok(AccuracyEntry { task, data, overrides })
    }
}

impl AccuracyTask {
    /// The task file, relative to the suite root.
    pub fn file(&self) -> &str {
        match self {
            AccuracyTask::File(f) => f,
            AccuracyTask::With(e) => &e.task,
        }
    }

    /// What the case says about the task; the data folder resolved against `root` (the one place it is), read
    /// outside the root only when the case sets `external_paths`. The hub cache is the run's, set where the task
    /// is loaded.
    pub fn source(&self, root: &Path, external_paths: bool) -> crate::accuracy::resolve::Source {
        match self {
            AccuracyTask::File(_) => crate::accuracy::resolve::Source::with_external_paths(external_paths),
            AccuracyTask::With(e) => crate::accuracy::resolve::Source {
                data: e.data.as_ref().map(|d| root.join(d)),
                overrides: e.overrides.clone(),
                external_paths,
                hub_cache: None,
            },
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inputs {
    #[serde(default)]
    pub prompts: Vec<String>,
    #[serde(default)]
    pub images: Vec<String>,
    #[serde(default)]
    pub audio: Vec<String>,
    #[serde(default)]
    pub decoder_prompt: Option<String>,
    /// Each prompt is one user turn rendered through the tokenizer's chat template with the generation prompt
    /// (transformers' `apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)`),
    /// the prompt an instruction-tuned model receives; its ids are the rendered text's, no special token added.
    #[serde(default)]
    pub chat: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generation {
    #[serde(default)]
    pub max_new_tokens: Option<u32>,
    #[serde(default)]
    pub do_sample: Option<bool>,
    #[serde(default)]
    pub eos_token_id: Option<i64>,
    /// mobius' target language; for a multilingual Whisper, the `<|lang|>` its decoder prefix forces (`en`).
    #[serde(default)]
    pub lang: Option<String>,
    /// Whisper's task token for a multilingual model: `transcribe` or `translate`.
    #[serde(default)]
    pub task: Option<SpeechTask>,
    #[serde(default)]
    pub target_model_id: Option<String>,
}

/// What a multilingual Whisper is asked to do (the task token of its forced prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SpeechTask {
    Transcribe,
    Translate,
}

impl SpeechTask {
    /// The task's name as the generation config and `generate()` spell it.
    pub fn name(self) -> &'static str {
        match self {
            SpeechTask::Transcribe => "transcribe",
            SpeechTask::Translate => "translate",
        }
    }
}

/// The variants a case covers: every `eps` x `dtypes` pair, each its own package.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Matrix {
    pub eps: Vec<Ep>,
    pub dtypes: Vec<Dtype>,
    /// Path template with `{ep}` and `{dtype}`, e.g. `fixtures/qwen3-tiny/onnx/{ep}-{dtype}`.
    #[serde(default)]
    pub package: Option<String>,
    /// Explicit paths per variant, keyed `<ep>/<dtype>`; they win over `package`.
    #[serde(default)]
    pub packages: BTreeMap<String, String>,
}

/// mobius' `level: "L4" | "L5" | "L4+L5"`: the levels a case selects, joined by `+`. Which levels a case may select
/// is the levels' to say (`level::Kind::selected_by_case`); the trial plan holds the case to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Levels(pub Vec<Level>);

impl<'de> Deserialize<'de> for Levels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let levels: Option<Vec<Level>> = s.split('+').map(|p| Level::parse(p.trim())).collect();
        match levels {
            Some(mut v) if !v.is_empty() => {
                v.sort();
                v.dedup();
                Ok(Levels(v))
            }
            _ => Err(serde::de::Error::custom(format!(
                "unknown level {s:?}, expected level names joined by `+` (\"L4\", \"L5\" or \"L4+L5\")"
            ))),
        }
    }
}

/// Where a package or tokenizer lives: a path under the suite root, or a Hub reference resolved through the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Local(PathBuf),
    Hub(HubRef),
}

impl Location {
    pub fn parse(root: &Path, s: &str) -> Result<Location> {
        match HubRef::parse(s) {
            Some(r) => r.map(Location::Hub),
            None => Ok(Location::Local(root.join(s))),
        }
    }

    /// The local directory (or file), resolving Hub references through the run's hub; `marker` is a file that must
    /// be in a Hub subfolder for it to count as present.
    pub fn resolve(&self, marker: &str, hub: &crate::context::Hub) -> Result<PathBuf> {
        match self {
            Location::Local(p) => Ok(p.clone()),
            Location::Hub(h) => h.resolve(marker, hub),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Local(p) => write!(f, "{}", p.display()),
            Location::Hub(h) => write!(f, "{h}"),
        }
    }
}

/// One package a case runs: a build flavour at a dtype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    pub ep: Ep,
    pub dtype: Dtype,
    /// The package; `None` when the case names none.
    pub package: Option<Location>,
}

/// What a broken case file's text still says (see [`crate::plan::discovery::guess`]).
pub struct GuessedSpec {
    pub eps: Vec<Ep>,
    pub dtypes: Vec<Dtype>,
    pub levels: Vec<Level>,
    pub modalities: Vec<Modality>,
    pub task_type: String,
    pub accuracy: Vec<String>,
    pub distribution: bool,
}

/// A parsed, validated case.
#[derive(Debug, Clone)]
pub struct Case {
    /// File stem: `qwen3-tiny` for `cases/causal-lm/qwen3-tiny.yaml`.
    pub name: String,
    /// The folder between `cases/` and the file (`causal-lm`), mirrored under `goldens/`.
    pub task_dir: String,
    /// Path of the case file relative to the suite root, with `/` separators.
    pub file: String,
    pub spec: CaseSpec,
}

impl Case {
    /// Parses a case file's text. `file` is its display path, used in every message.
    pub fn parse(file: &str, task_dir: &str, name: &str, text: &str) -> Result<Case> {
        let spec: CaseSpec = serde_saphyr::from_str(text).map_err(|e| Error::new(format!("{file}: {e}")))?;
        let case = Case { name: name.to_string(), task_dir: task_dir.to_string(), file: file.to_string(), spec };
        case.validate()?;
        Ok(case)
    }

    /// The case a broken case file would have been, as far as [`crate::plan::discovery::guess`] could read it: only
    /// what the trial plan asks of a case is filled in.
    pub fn guessed(name: &str, file: &str, task_dir: &str, g: GuessedSpec) -> Case {
        let spec = CaseSpec {
            model_id: String::new(),
            model_type: String::new(),
            revision: String::new(),
            task_type: g.task_type,
            dtype: g.dtypes.first().copied().unwrap_or(Dtype::F32),
            level: Levels(g.levels),
            inputs: Inputs::default(),
            generation: Generation::default(),
            trust_remote_code: false,
            skip_reason: None,
            ci_skip_reason: None,
            min_token_match_ratio: None,
            notes: None,
            architecture: None,
            reference: None,
            tokenizer: None,
            modalities: Some(g.modalities),
            matrix: Some(Matrix { eps: g.eps, dtypes: g.dtypes, package: None, packages: BTreeMap::new() }),
            tolerance: None,
            xfail: Vec::new(),
            accuracy: g.accuracy.into_iter().map(AccuracyTask::File).collect(),
            external_paths: true,
            build_command: None,
            manifest: None,
            required: false,
            distribution: g.distribution.then(|| Distribution { corpus: None, n_ctx: None, k: Distribution::default_k() }),
            localize: Default::default(),
        };
        Case { name: name.to_string(), task_dir: task_dir.to_string(), file: file.to_string(), spec }
    }

    fn validate(&self) -> Result<()> {
        let s = &self.spec;
        let file = &self.file;
        if s.model_id.trim().is_empty() {
            bail!("{file}: field `model_id` is empty");
        }
        if crate::plan::task_type::support(&s.task_type).is_none() {
            bail!(
                "{file}: field `task_type` is {:?}, which mobius' schema does not list; expected one of {}",
                s.task_type,
                crate::plan::task_type::known()
            );
        }
        if let Some(r) = s.min_token_match_ratio
            && !(r > 0.0 && r <= 1.0)
        {
            bail!("{file}: field `min_token_match_ratio` is {r}, expected a number in (0, 1] (0 would pass any stream)");
        }
        if let Some(m) = s.generation.max_new_tokens
            && !(1..=crate::vocab::MAX_NEW_TOKENS).contains(&m)
        {
            bail!("{file}: field `generation.max_new_tokens` is {m}, expected 1..={}", crate::vocab::MAX_NEW_TOKENS);
        }
        if let Some(m) = &s.matrix {
            if m.eps.is_empty() || m.dtypes.is_empty() {
                bail!("{file}: field `matrix` needs at least one entry in `eps` and in `dtypes`");
            }
            for key in m.packages.keys() {
                let ok = key
                    .split_once('/')
                    .and_then(|(e, d)| Some((Ep::parse(e)?, Dtype::parse(d)?)))
                    .is_some_and(|(e, d)| m.eps.contains(&e) && m.dtypes.contains(&d));
                if !ok {
                    bail!(
                        "{file}: field `matrix.packages` has key {key:?}; expected `<ep>/<dtype>` with an ep from `matrix.eps` and a dtype from `matrix.dtypes`"
                    );
                }
            }
        }
        let mut paths: Vec<(&str, &String)> = Vec::new();
        if let Some(m) = &s.matrix {
            paths.extend(m.package.iter().map(|p| ("matrix.package", p)));
            paths.extend(m.packages.values().map(|p| ("matrix.packages", p)));
        }
        paths.extend(s.tokenizer.iter().map(|p| ("tokenizer", p)));
        paths.extend(s.reference.iter().map(|p| ("reference", p)));
        paths.extend(s.inputs.images.iter().map(|p| ("inputs.images", p)));
        paths.extend(s.inputs.audio.iter().map(|p| ("inputs.audio", p)));
        paths.extend(s.distribution.iter().filter_map(|d| d.corpus.as_ref()).map(|c| ("distribution.corpus", c)));
        if let Some(d) = &s.distribution {
            self.validate_distribution(d)?;
        }
        let accuracy_data: Vec<String> = s
            .accuracy
            .iter()
            .filter_map(|a| match a {
                AccuracyTask::With(e) => e.data.clone(),
                AccuracyTask::File(_) => None,
            })
            .collect();
        let accuracy_files: Vec<String> = s.accuracy.iter().map(|a| a.file().to_string()).collect();
        paths.extend(accuracy_files.iter().map(|p| ("accuracy", p)));
        paths.extend(accuracy_data.iter().map(|p| ("accuracy.data", p)));
        // The manifest is the suite's own record: always inside the root, whatever `external_paths` says.
        if let Some(m) = s.manifest.as_deref() {
            if m.trim().is_empty() {
                bail!(
                    "{file}: field `manifest` is empty: name the builder's manifest (fixtures/real/MANIFEST.json), or leave the field out"
                );
            }
            if !crate::paths::stays_inside(m) {
                bail!("{file}: field `manifest`: path {m:?} leaves the suite root; the manifest is committed with the suite");
            }
        }
        for (field, p) in paths {
            self.validate_path(field, p)?;
        }
        crate::judge::xfail::validate(&s.xfail).map_err(|e| Error::new(format!("{file}: {e}")))?;
        if let Some(t) = &s.tolerance {
            t.validate().map_err(|e| e.context(format!("{file}: field `tolerance`")))?;
        }
        Ok(())
    }

    /// The `distribution:` block holds what the case's kind of corpus needs.
    fn validate_distribution(&self, d: &Distribution) -> Result<()> {
        let (s, file) = (&self.spec, &self.file);
        if s.task_type == "speech-to-text" {
            if d.corpus.is_none() {
                bail!(
                    "{file}: field `distribution.corpus` is missing: a speech-to-text case names its utterances (a JSON \
                     lines file of {{\"name\", \"audio\", \"text\"}})"
                );
            }
            if d.n_ctx.is_some() {
                bail!("{file}: field `distribution.n_ctx`: a speech-to-text case's segments are its utterances, not chunks");
            }
        } else if !(8..=8192).contains(&d.n_ctx()) || !d.n_ctx().is_multiple_of(2) {
            bail!("{file}: field `distribution.n_ctx` is {}, expected an even number in 8..=8192", d.n_ctx());
        }
        if !(1..=1024).contains(&d.k) {
            bail!("{file}: field `distribution.k` is {}, expected 1..=1024", d.k);
        }
        Ok(())
    }

    /// A path a field names: a well-formed `hf://` reference, or a path that stays inside the suite root unless the
    /// case sets `external_paths`.
    fn validate_path(&self, field: &str, p: &str) -> Result<()> {
        let (s, file) = (&self.spec, &self.file);
        match HubRef::parse(p) {
            Some(Err(e)) => bail!("{file}: field `{field}`: {e}"),
            Some(Ok(_)) => {}
            None if !s.external_paths && !crate::paths::stays_inside(p) => bail!(
                "{file}: field `{field}`: path {p:?} leaves the suite root; paths are relative to the folder holding \
                 `cases/`. Set `external_paths: true` in the case if it really must read files elsewhere"
            ),
            None => {}
        }
        Ok(())
    }

    pub fn levels(&self) -> &[Level] {
        &self.spec.level.0
    }

    /// The modalities this case runs: as listed, or inferred from its inputs (mobius' files list none).
    pub fn modalities(&self) -> Vec<Modality> {
        if let Some(m) = &self.spec.modalities {
            return m.clone();
        }
        let i = &self.spec.inputs;
        vec![match (i.images.is_empty(), i.audio.is_empty()) {
            (false, false) => Modality::ImageAudio,
            (false, true) => Modality::Image,
            (true, false) => Modality::Audio,
            (true, true) => Modality::Text,
        }]
    }

    /// Every (ep, dtype) package the case covers, sorted, with package paths resolved against `root`.
    pub fn variants(&self, root: &Path) -> Vec<Variant> {
        let Some(m) = &self.spec.matrix else {
            return vec![Variant { ep: Ep::Default, dtype: self.spec.dtype, package: None }];
        };
        let mut out = Vec::new();
        for &ep in &m.eps {
            for &dtype in &m.dtypes {
                let key = format!("{ep}/{dtype}");
                let path = m
                    .packages
                    .get(&key)
                    .cloned()
                    .or_else(|| m.package.as_ref().map(|t| t.replace("{ep}", ep.name()).replace("{dtype}", dtype.name())));
                // Paths were validated when the case was parsed.
                let package = path.and_then(|p| Location::parse(root, &p).ok());
                out.push(Variant { ep, dtype, package });
            }
        }
        out.sort_by_key(|v| (v.ep, v.dtype));
        out.dedup_by_key(|v| (v.ep, v.dtype));
        out
    }

    /// The prompt the goldens were made from (a case with several prompts is split into one case per prompt when
    /// the suite loads it: see [`crate::plan::corpus::per_prompt`]).
    /// The case's prompt. A speech-to-text case has no text prompt: its prompt is its clip, named by its file name
    /// (as mobius' goldens record it), and the decoder's prefix is what the model's generation config forces.
    pub fn prompt(&self) -> Option<&str> {
        if let Some(p) = self.spec.inputs.prompts.first() {
            return Some(p);
        }
        let clip = self.spec.inputs.audio.first().filter(|_| self.is_speech_to_text())?;
        Some(clip.rsplit('/').next().unwrap_or(clip))
    }

    /// A text prompt's ids, through the chat template where `inputs.chat` says so (an error names the field).
    pub fn prompt_ids(&self, tokenizer: &crate::feed::tokenizer::TextTokenizer, prompt: &str) -> Result<Vec<i64>> {
        let chat = self.spec.inputs.chat;
        tokenizer
            .encode_prompt(prompt, chat)
            .map_err(|e| if chat { Error::new(format!("{}: field `inputs.chat`: {e}", self.file)) } else { e })
    }

    /// The case file's first prompt (or clip), whose name is the file's: not a later one's `<case>.p<k>`
    /// (`plan::corpus::per_prompt`).
    pub fn is_first_prompt(&self) -> bool {
        let stem = std::path::Path::new(&self.file).file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        self.name.strip_prefix(stem).and_then(|rest| rest.strip_prefix(".p")).is_none_or(|k| k.parse::<usize>().is_err())
    }

    /// An encoder-decoder speech recognizer (mobius' `speech-to-text`).
    pub fn is_speech_to_text(&self) -> bool {
        self.spec.task_type == "speech-to-text"
    }

    pub fn max_new_tokens(&self) -> u32 {
        self.spec.generation.max_new_tokens.unwrap_or(16)
    }

    /// Where `tokenizer.json` is: `tokenizer`, else `reference`, else none (then the package's own is used).
    pub fn tokenizer_location(&self, root: &Path) -> Option<Location> {
        self.spec.tokenizer.as_ref().or(self.spec.reference.as_ref()).and_then(|p| Location::parse(root, p).ok())
    }

    pub fn reference_dir(&self, root: &Path) -> Option<PathBuf> {
        self.spec.reference.as_ref().map(|p| root.join(p))
    }
}
