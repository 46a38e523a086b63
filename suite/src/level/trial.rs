//! A trial as a level runs it: where it runs and what it reads (its provider, its package, its session, its
//! tokenizer), or why it skips; its golden found, confined and checked against the case's inputs; and the outcomes
//! every level shares (a missing or stale golden, logits no verdict can reason about). Each level's module takes a
//! [`Trial`] from here and runs it to its outcome.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::accuracy::resolve::ResolvedTask;
use crate::context::RunContext;
use crate::error::{Error, Result};
use crate::feed::inputs::Inputs;
use crate::feed::integrity::{self, Manifest};
use crate::feed::tokenizer::TextTokenizer;
use crate::judge::finite::{NonFinite, VocabMismatch};
use crate::judge::golden::{GenerationGolden, GoldenPaths, PrefillGolden};
use crate::judge::tolerance::{Logits, Policy, Tolerance};
use crate::judge::verdict;
use crate::judge::xfail::Xfail;
use crate::outcome::{Failure, FailureKind, Outcome};
use crate::paths;
use crate::paths::relative;
use crate::plan::case::{Case, Location, Variant};
use crate::plan::corpus;
use crate::plan::suite::Suite;
use crate::report;
use crate::run::decoder::Decoder;
use crate::run::genai::api::Refusal;
use crate::run::pipeline::Pipeline;
use crate::run::runtime::{self, Provider};
use crate::run::sessions;
use crate::vocab::{Dtype, Level, Modality, TrialId};

/// A step's value, or the outcome that ends the trial before it (a skip, a failure the step already judged).
pub type Ends<T> = std::result::Result<T, Outcome>;

/// One planned trial, as its level runs it.
pub struct Trial<'a> {
    pub suite: &'a Suite,
    pub id: &'a TrialId,
    /// The libtest name, `id` displayed.
    pub name: &'a str,
    pub case: &'a Case,
    pub modality: Modality,
    pub variant: &'a Variant,
    pub level: Level,
    /// A gate's task, resolved when planned; `None` for the other levels.
    pub task: Option<&'a ResolvedTask>,
    pub ctx: &'a RunContext,
}

/// What every level of a conformance trial has once it is placed and fed: the package and its session, the golden
/// it is judged against, the resolved tolerance, the prompt's inputs and the tokenizer that shows them.
pub struct Prepared<'a> {
    pub package: PathBuf,
    pub provider: Provider,
    pub paths: GoldenPaths,
    pub golden_path: PathBuf,
    pub golden_file: String,
    pub policy: &'a Policy,
    pub tol: Tolerance,
    pub prompt: &'a str,
    pub tokenizer: Arc<TextTokenizer>,
    pub inputs: Inputs,
}

/// A prepared trial with its package's decoder session and pipeline open (inputs -> runtime).
pub struct Opened<'a> {
    pub p: Prepared<'a>,
    pub decoder: Arc<Decoder>,
    pub pipeline: Pipeline,
}

impl Trial<'_> {
    /// The command that remakes this trial's golden: the level's alone where it can be made alone, else the case's
    /// goldens (features, inputs and baselines are written with them, whatever the level).
    pub fn regenerate(&self) -> String {
        let level = if super::of(self.level).regenerates_alone() { format!(" --level {}", self.level) } else { String::new() };
        format!("cargo xtask regen-goldens --case {}{level} --force{}", self.id.case(), self.suite.root_option())
    }

    /// What every report of this trial names: the trial, its case file, the golden (and, by its `provenance`, what a
    /// failure calls for), how to regenerate it, the policy.
    pub fn report_context<'a>(
        &'a self,
        tokenizer: &'a TextTokenizer,
        golden_file: &'a str,
        provenance: Option<&crate::judge::golden::Provenance>,
        regenerate: &'a str,
        policy: &'a crate::judge::tolerance::Policy,
    ) -> report::Context<'a> {
        let next = self.next_step(provenance);
        report::Context {
            trial: self.name,
            case_file: &self.case.file,
            golden_file,
            regenerate,
            next,
            policy_source: &policy.source,
            tokenizer,
        }
    }

    /// What a measured failure against a golden of `provenance` calls for: the golden reached the verdict, so its
    /// inputs are the case's (a stale one is refused before); made by the pinned reference, the package changed.
    pub fn next_step(&self, provenance: Option<&crate::judge::golden::Provenance>) -> report::NextStep {
        let localize = format!("cargo xtask localize{} {}", self.suite.root_option(), self.name);
        match provenance {
            Some(p) => match p.reference_changes() {
                changes if changes.is_empty() => {
                    report::NextStep::Package { transformers: p.transformers.clone(), torch: p.torch.clone(), localize }
                }
                changes => report::NextStep::Regenerate { changes, command: self.regenerate() },
            },
            None => report::NextStep::Unknown { regenerate: self.regenerate(), localize },
        }
    }

    pub fn rel(&self, p: &Path) -> String {
        relative(&self.suite.root, p)
    }

    /// A golden whose inputs no longer match the case: the error that says so, and how to regenerate it.
    pub fn stale(&self, reason: String) -> Error {
        Error::new(format!("golden is stale: {reason}\n  regenerate: {}", self.regenerate()))
    }

    /// The L4 golden at `path`, checked against the prompt's inputs.
    pub fn prefill_golden(&self, path: &Path, prompt: &str, inputs: &Inputs) -> Result<PrefillGolden> {
        let golden = PrefillGolden::load(path)?;
        match verdict::staleness(golden.input_hash.as_deref(), None, &golden.input_ids, prompt, inputs) {
            Some(why) => Err(self.stale(format!("{} {why} ({})", self.rel(path), self.case.file))),
            None => Ok(golden),
        }
    }

    /// The L5 golden at `path`, checked against the prompt's inputs.
    pub fn generation_golden(&self, path: &Path, prompt: &str, inputs: &Inputs) -> Result<GenerationGolden> {
        let golden = GenerationGolden::load(path)?;
        match verdict::staleness(golden.input_hash.as_deref(), Some(&golden.prompt), &[], prompt, inputs) {
            Some(why) => Err(self.stale(format!("{} {why} ({})", self.rel(path), self.case.file))),
            None => Ok(golden),
        }
    }

    /// Logits no verdict can reason about, as the trial's failure: a vocabulary of another size first (its ids past
    /// the end read as NaN), then NaN or infinity. `place` names what computed them.
    pub fn unjudgeable(
        &self,
        place: &str,
        vocab: Option<VocabMismatch>,
        non_finite: Option<NonFinite>,
        golden_file: &str,
        package: &Path,
    ) -> Option<Outcome> {
        match vocab {
            Some(v) => Some(self.vocab_size(place, v, golden_file, golden_file, package)),
            None => non_finite.map(|nf| self.non_finite(place, nf)),
        }
    }

    /// Logits rows of another length than the vocabulary, as the trial's own failure (never an expected `non_finite`);
    /// `ids_from` holds the ids a lower bound comes from.
    pub fn vocab_size(&self, place: &str, v: VocabMismatch, golden_file: &str, ids_from: &str, package: &Path) -> Outcome {
        let failure = Some(Box::new(Failure::of(FailureKind::VocabSize)));
        let message = report::vocab_size(self.name, place, &v, golden_file, ids_from, &self.rel(package), &self.regenerate());
        Outcome { failure, ..Outcome::fail(message) }
    }

    /// NaN or infinite logits, as the trial's measured failure, with where they start.
    pub fn non_finite(&self, place: &str, nf: NonFinite) -> Outcome {
        let first_step = match nf {
            NonFinite::Step { step, .. } => Some(step),
            NonFinite::Position { .. } => None,
        };
        let first_position = match nf {
            NonFinite::Position { position, .. } => Some(position),
            NonFinite::Step { .. } => None,
        };
        let failure = Some(Box::new(Failure { first_step, first_position, ..Failure::of(FailureKind::NonFinite) }));
        Outcome { failure, ..Outcome::fail(report::non_finite(self.name, place, &nf)) }
    }

    /// The stream length a trial generates: the golden's, else the case's.
    pub fn max_new(&self, golden: Option<&GenerationGolden>) -> usize {
        golden.and_then(|g| g.max_new_tokens).unwrap_or(self.case.max_new_tokens()) as usize
    }

    /// The tolerance `level` is judged with: the policy's, with the case's override checked against it.
    pub fn tolerance(&self, policy: &Policy, table: Logits) -> Result<Tolerance> {
        let spec = &self.case.spec;
        policy.for_trial(table, self.variant.dtype, spec.tolerance.as_ref(), spec.min_token_match_ratio).map_err(|e| {
            e.context(format!("{} ({} for {}/{}, {})", self.case.file, table, self.variant.dtype, self.variant.ep, policy.source))
        })
    }

    /// EOS ids: the case's `generation.eos_token_id`, else the package's genai_config.json, else none. A
    /// genai_config.json that is there but invalid is an error, never "no EOS".
    pub fn eos_ids(&self, package: &Path) -> Result<Vec<i64>> {
        if let Some(e) = self.case.spec.generation.eos_token_id {
            return Ok(vec![e]);
        }
        Ok(crate::feed::package::GenaiConfig::load_if_present(package)?.map(|c| c.eos_token_ids).unwrap_or_default())
    }

    /// The vocabulary the package's config states for its logits, if it has a config that states one.
    pub fn package_vocab(&self, package: &Path) -> Result<Option<usize>> {
        Ok(crate::feed::package::GenaiConfig::load_if_present(package)?.and_then(|c| c.vocab_size))
    }

    /// The case's xfail entry naming this trial, if any.
    pub fn xfail(&self) -> Option<&Xfail> {
        let v = self.variant;
        self.case.spec.xfail.iter().find(|x| x.applies(self.modality, v.ep, v.dtype, self.level))
    }

    /// A conformance trial's start, shared by the levels judged against the case's goldens: placed, its golden
    /// (`golden` picks it from the case's golden files) found and confined, a media trial's stored inputs there, the
    /// policy's `table` resolved, the prompt fed; or the outcome that ends it first (a skip, a missing golden).
    pub fn prepare(&self, golden: impl Fn(&GoldenPaths) -> PathBuf, table: Logits) -> Result<Ends<Prepared<'_>>> {
        let (provider, package) = match self.placement() {
            Ok(p) => p,
            Err(skip) => return Ok(Err(skip)),
        };
        let paths = self.suite.golden_paths(self.case, self.modality, self.variant.dtype);
        let golden_path = golden(&paths);
        paths::confine(&self.suite.root, &golden_path, "golden", paths::SUITE_HINT)?;
        if !golden_path.is_file() {
            return Ok(Err(self.missing(&golden_path)));
        }
        let media = self.modality != Modality::Text;
        for p in std::iter::once(&paths.inputs).chain(&paths.shared_inputs).filter(|_| media) {
            paths::confine(&self.suite.root, p, "golden", paths::SUITE_HINT)?;
        }
        let inputs_needed = std::iter::once(&paths.inputs).chain(&paths.shared_inputs).filter(|_| media);
        if let Some(missing) = inputs_needed.into_iter().find(|p| !p.is_file()) {
            let msg = corpus::missing_inputs(self.case, &self.rel(missing));
            // Under CI, inputs the suite makes itself (the case names its reference) must be committed.
            return Ok(Err(if self.ctx.ci && self.case.spec.reference.is_some() {
                Outcome::fail(format!("{}: {msg} and commit them (CI is set)", self.name))
            } else {
                Outcome::skip(msg)
            }));
        }
        let policy = self.suite.policy.as_ref().map_err(Clone::clone)?;
        let tol = self.tolerance(policy, table)?;

        // case -> inputs
        let Some(prompt) = self.case.prompt() else {
            return Err(Error::new(format!("{}: field `inputs.prompts` is empty; a text case needs one prompt", self.case.file)));
        };
        let tokenizer = self.tokenizer(&package)?;
        // Media inputs are what the Hugging Face processor made (chat template, expanded media tokens, pixels, mel
        // features), stored beside the goldens; text is tokenized here, so a changed prompt shows as a stale golden.
        let inputs = match media {
            true => paths.load_inputs(|p| self.rel(p))?,
            false => Inputs::from_token_ids(&self.case.prompt_ids(&tokenizer, prompt)?),
        };
        if inputs.input_ids().is_empty() {
            return Err(Error::new(format!(
                "{}: field `inputs.prompts`: the prompt {prompt:?} tokenizes to no ids; a trial needs at least one token",
                self.case.file
            )));
        }
        let golden_file = self.rel(&golden_path);
        Ok(Ok(Prepared { package, provider, paths, golden_path, golden_file, policy, tol, prompt, tokenizer, inputs }))
    }

    /// [`Trial::prepare`], then the prepared trial's decoder session and the pipeline its package runs: what the
    /// levels that run the package through the suite's own runtime start from; or the outcome that ends it first.
    pub fn open(&self, golden: impl Fn(&GoldenPaths) -> PathBuf, table: Logits) -> Result<Ends<Opened<'_>>> {
        let p = match self.prepare(golden, table)? {
            Ok(p) => p,
            Err(o) => return Ok(Err(o)),
        };
        Ok(self.session(&p)?.map(|(decoder, pipeline)| Opened { p, decoder, pipeline }))
    }

    /// The prepared trial's decoder session and the pipeline its package runs (inputs -> runtime), or a skip.
    fn session(&self, p: &Prepared) -> Result<Ends<(Arc<Decoder>, Pipeline)>> {
        let decoder = match self.decoder(&p.package, p.provider)? {
            Ok(d) => d,
            Err(skip) => return Ok(Err(skip)),
        };
        let pipeline = Pipeline::build(&p.package, &decoder, p.provider, &p.inputs, &self.rel(&p.paths.inputs))?;
        Ok(Ok((decoder, pipeline)))
    }

    /// Where the variant runs and its package directory, or why the trial skips.
    // A skip is this function's ordinary answer, given once per trial: boxing it buys nothing.
    #[allow(clippy::result_large_err)]
    pub fn placement(&self) -> std::result::Result<(Provider, PathBuf), Outcome> {
        let spec = &self.case.spec;
        if let Some(why) = corpus::level_skip(self.case, self.level, super::of(self.level).greedy()) {
            return Err(Outcome::skip(why));
        }
        if let Some(r) = spec.skip_reason.as_deref().filter(|r| !r.trim().is_empty()) {
            return Err(Outcome::skip(format!("skip_reason: {r}")));
        }
        if self.ctx.ci
            && let Some(r) = spec.ci_skip_reason.as_deref().filter(|r| !r.trim().is_empty())
        {
            return Err(Outcome::skip(format!("ci_skip_reason (CI is set): {r}")));
        }
        let provider = runtime::provider_for(self.variant.ep, self.ctx.device).map_err(Outcome::skip)?;
        let Some(location) = &self.variant.package else {
            return Err(Outcome::skip(format!(
                "{} names no package for {}/{} of {}: add `matrix.package` (a folder, or hf://org/repo[@rev][/subfolder] \
                 for an export in the Hugging Face cache) to run it",
                self.case.file, self.variant.ep, self.variant.dtype, spec.model_id
            )));
        };
        let package = match location {
            // A model that is not downloaded is absent, not broken: say what is missing and how to get it. Unless
            // it is required (the case's `required`, or MOBIUS_REQUIRE_MODELS): then a gate on it must not go green.
            Location::Hub(_) => location.resolve("genai_config.json", &self.ctx.hub).map_err(|e| match self.required() {
                Some(why) => Outcome::fail(format!("{}: model absent, and {why}: {e}", self.name)),
                None => Outcome::skip(format!("model absent: {e}")),
            })?,
            Location::Local(p) => {
                if !spec.external_paths {
                    self.confine_package(p).map_err(|e| Outcome::fail(format!("{}: {e}", self.name)))?;
                }
                p.clone()
            }
        };
        if let Some(build) = spec.build_command.as_deref()
            && !package.exists()
        {
            let msg = format!("package {} is not built; build it with `{build}`", self.rel(&package));
            return Err(if self.ctx.ci {
                Outcome::fail(format!("{}: {msg} (CI is set: the real tier must run)", self.name))
            } else {
                Outcome::skip(msg)
            });
        }
        if let Some(manifest) = spec.manifest.as_deref() {
            self.check_manifest(manifest, &package)?;
        }
        Ok((provider, package))
    }

    /// The package's files against the builder's manifest, before ONNX Runtime reads any of them.
    #[allow(clippy::result_large_err)]
    pub fn check_manifest(&self, manifest: &str, package: &Path) -> std::result::Result<(), Outcome> {
        let fail = |e: crate::error::Error| Outcome::fail(format!("{}: {}: field `manifest`: {e}", self.name, self.case.file));
        let m = Manifest::load(&self.suite.root, manifest).map_err(fail)?;
        match integrity::check(&m, package).map_err(fail)? {
            Ok(_) => Ok(()),
            Err(bad) => {
                Err(Outcome::fail(report::integrity(self.name, &self.rel(package), &m.file, &bad, self.case.spec.build_command.as_deref())))
            }
        }
    }

    /// Why a missing model fails this trial instead of skipping it, if it does.
    pub fn required(&self) -> Option<String> {
        if self.case.spec.required {
            Some(format!("{} sets `required: true`", self.case.file))
        } else if self.ctx.require_models {
            Some("models are required in this run (MOBIUS_REQUIRE_MODELS=1 or `xtask ci --require`)".to_string())
        } else {
            None
        }
    }

    /// A local package and the files its genai_config.json names stay inside the suite root, symlinks resolved.
    pub fn confine_package(&self, package: &Path) -> Result<()> {
        let what = format!("{}: field `matrix.package` ({}/{})", self.case.file, self.variant.ep, self.variant.dtype);
        let root = &self.suite.root;
        paths::confine(root, package, &what, paths::CASE_HINT)?;
        if !package.is_dir() {
            return Ok(());
        }
        let config = package.join("genai_config.json");
        paths::confine(root, &config, &what, paths::CASE_HINT)?;
        let cfg = crate::feed::package::GenaiConfig::load_if_present(package)?;
        let named = cfg.as_ref().map(|c| c.files()).unwrap_or_default();
        for file in named.into_iter().chain(["model.onnx"]) {
            let model = package.join(file);
            paths::confine(root, &model, &format!("{what}: model `{file}`"), paths::CASE_HINT)?;
            let data = package.join(format!("{file}.data"));
            paths::confine(root, &data, &format!("{what}: external data of `{file}`"), paths::CASE_HINT)?;
        }
        Ok(())
    }

    /// The package's decoder session, or a skip naming the node when the CPU EP cannot run a half-precision build.
    pub fn decoder(&self, package: &Path, provider: Provider) -> Result<Ends<Arc<Decoder>>> {
        let model = crate::feed::package::package_model(package)
            .map_err(|e| e.context(format!("{}: package for {}/{}", self.case.file, self.variant.ep, self.variant.dtype)))?;
        match sessions::decoder(&model, provider) {
            Ok(d) => Ok(Ok(d)),
            // A half-precision build the CPU EP has no kernels for (bf16 MatMul, ...) cannot run here: say which
            // node, and where it runs. A float32 or int4 build missing a kernel is a broken package: it fails.
            Err(e) if matches!(self.variant.dtype, Dtype::F16 | Dtype::Bf16) && provider == Provider::Cpu => {
                let Some(why) = runtime::cpu_cannot_run(&e, self.variant.dtype == Dtype::Bf16) else { return Err(e) };
                Ok(Err(Outcome::skip(format!(
                    "ONNX Runtime's CPU execution provider cannot run this {} build: {why}; run it with MOBIUS_TEST_DEVICE=cuda",
                    self.variant.dtype
                ))))
            }
            Err(e) => Err(e),
        }
    }

    /// A missing golden or baseline: a skip here, a failure under CI (pre-merge gating must never pass a case whose
    /// golden was forgotten).
    pub fn missing(&self, path: &Path) -> Outcome {
        let msg = format!("no golden at {}; make it with `{}`", self.rel(path), self.regenerate());
        if self.ctx.ci { Outcome::fail(format!("{}: {msg} and commit it (CI is set)", self.name)) } else { Outcome::skip(msg) }
    }

    /// The case's tokenizer: `tokenizer`, else `reference`, else the package's own.
    pub fn tokenizer(&self, package: &Path) -> Result<Arc<TextTokenizer>> {
        let location = self.case.tokenizer_location(&self.suite.root);
        if let Some(Location::Local(p)) = &location
            && !self.case.spec.external_paths
        {
            let what = format!("{}: field `tokenizer` (or `reference`)", self.case.file);
            paths::confine(&self.suite.root, p, &what, paths::CASE_HINT)?;
            paths::confine(&self.suite.root, &p.join("tokenizer.json"), &what, paths::CASE_HINT)?;
        }
        let (tok_dir, field) = match location {
            Some(l) => (
                l.resolve("tokenizer.json", &self.ctx.hub).map_err(|e| e.context(format!("{}: field `tokenizer`", self.case.file)))?,
                "field `tokenizer` (or `reference`)",
            ),
            None => (package.to_path_buf(), "the package's tokenizer"),
        };
        TextTokenizer::load(&tok_dir).map_err(|e| e.context(format!("{}: {field}", self.case.file)))
    }

    /// genai refused the package: a failure of this level (the package does not run in its own runtime), which a
    /// strict xfail may expect by genai's message.
    pub fn genai_refused(&self, package: &std::path::Path, provider: Provider, refusal: Refusal) -> Outcome {
        if let Some(skip) = self.cpu_cannot_run(&refusal.message, provider) {
            return skip;
        }
        let message = report::genai_refused(self.name, &self.case.file, &self.rel(package), &refusal.message);
        Outcome { failure: Some(Box::new(Failure::refused(refusal.message))), ..Outcome::fail(message) }
    }

    /// As for the suite's own runner: a half-precision build the CPU EP has no kernels for skips, naming the node.
    pub fn cpu_cannot_run(&self, error: &str, provider: Provider) -> Option<Outcome> {
        if !matches!(self.variant.dtype, Dtype::F16 | Dtype::Bf16) || provider != Provider::Cpu {
            return None;
        }
        let e = crate::error::Error::new(error.to_string());
        let why = runtime::cpu_cannot_run(&e, self.variant.dtype == Dtype::Bf16)?;
        Some(Outcome::skip(format!(
            "ONNX Runtime's CPU execution provider (under onnxruntime-genai) cannot run this {} build: {why}; run it with MOBIUS_TEST_DEVICE=cuda",
            self.variant.dtype
        )))
    }
}

/// `text` with `prefix` before each line.
pub fn indent(text: &str, prefix: &str) -> String {
    text.lines().map(|l| format!("{prefix}{l}\n")).collect()
}
