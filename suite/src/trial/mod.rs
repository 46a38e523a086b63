//! One trial, start to end: place it (where it runs, its package, or why it skips) -> feed its inputs -> run its
//! level -> judge against the golden -> settle the expectation (strict xfail, reviewed snapshot) -> render. One
//! module per level, each loading its golden with the staleness check once; the settling rules live in [`settle`].

mod accuracy;
mod component;
mod dist;
mod genai;
mod generation;
pub mod matrix;
mod media;
mod place;
mod prefill;
mod settle;

use std::path::Path;
use std::sync::Arc;

use crate::context::RunContext;
use crate::error::{Error, Result};
use crate::feed::inputs::Inputs;
use crate::feed::tokenizer::TextTokenizer;
use crate::judge::finite::{NonFinite, VocabMismatch};
use crate::judge::golden::{GenerationGolden, GoldenPaths, PrefillGolden};
use crate::judge::tolerance::{Logits, Policy, Tolerance};
use crate::judge::verdict;
use crate::outcome::{Failure, FailureKind, Finished, Outcome};
use crate::paths;
use crate::paths::relative;
use crate::plan::case::{Case, Variant};
use crate::plan::corpus;
use crate::plan::suite::{Suite, TrialKind, TrialSpec};
use crate::report;
use crate::run::pipeline::Pipeline;
use crate::run::runtime;
use crate::vocab::{Level, Modality, TrialId};
use std::path::PathBuf;

/// Runs `plan` on `threads` workers (sessions are shared between them), calling `on_done` as each trial ends.
/// Returns every result, sorted by trial name.
pub fn run_parallel(
    suite: &Suite,
    plan: &[TrialSpec],
    ctx: &RunContext,
    threads: usize,
    on_done: impl Fn(&Finished) + Sync,
) -> Vec<Finished> {
    let done = std::sync::Mutex::new(Vec::with_capacity(plan.len()));
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                while let Some(spec) = plan.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                    let t0 = std::time::Instant::now();
                    let outcome = guarded(&spec.name, || run(suite, spec, ctx));
                    let f = Finished { name: spec.name.clone(), outcome, seconds: t0.elapsed().as_secs_f64() };
                    on_done(&f);
                    done.lock().unwrap_or_else(|p| p.into_inner()).push(f);
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    done.sort_by(|a, b| a.name.cmp(&b.name));
    done
}

/// Runs one trial so that a panic inside it (a bug of the suite, or an input no check foresaw) fails that trial
/// with the panic's message instead of taking the whole run, and its report, down with it.
pub fn guarded(name: &str, trial: impl FnOnce() -> Outcome) -> Outcome {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(trial)).unwrap_or_else(|p| {
        let why = p.downcast_ref::<String>().map(String::as_str).or_else(|| p.downcast_ref::<&str>().copied()).unwrap_or("(no message)");
        Outcome::fail(format!("{name}: the trial panicked: {why}"))
    })
}

/// Runs one trial to its outcome. Never panics on bad input: every error becomes a failure naming its source.
pub fn run(suite: &Suite, spec: &TrialSpec, ctx: &RunContext) -> Outcome {
    runtime::configure(ctx);
    match &spec.kind {
        TrialKind::Broken(b) => Outcome::fail(format!("{}: the case does not load:\n  {}", spec.name, b.error)),
        TrialKind::Conformance { case, modality, variant, level } => {
            let t = Trial { suite, id: &spec.id, name: &spec.name, case, modality: *modality, variant, level: *level, ctx };
            let outcome = t.run().unwrap_or_else(|e| Outcome::from_error(&spec.name, &e));
            Outcome { regenerate: Some(t.regenerate()), ..t.apply_xfail(outcome) }
        }
        TrialKind::Accuracy { case, task, variant, level } => {
            let t = Trial { suite, id: &spec.id, name: &spec.name, case, modality: Modality::Text, variant, level: *level, ctx };
            let outcome = t.run_accuracy(task).unwrap_or_else(|e| Outcome::from_error(&spec.name, &e));
            Outcome { regenerate: Some(t.regenerate()), ..t.apply_xfail(outcome) }
        }
    }
}

struct Trial<'a> {
    suite: &'a Suite,
    id: &'a TrialId,
    name: &'a str,
    case: &'a Case,
    modality: Modality,
    variant: &'a Variant,
    level: Level,
    ctx: &'a RunContext,
}

/// What every level of a conformance trial has once it is placed and fed: the package and its session, the golden
/// it is judged against, the resolved tolerance, the prompt's inputs and the tokenizer that shows them.
struct Prepared<'a> {
    package: PathBuf,
    paths: GoldenPaths,
    golden_path: PathBuf,
    golden_file: String,
    policy: &'a Policy,
    tol: Tolerance,
    prompt: &'a str,
    tokenizer: Arc<TextTokenizer>,
    inputs: Inputs,
}

impl Trial<'_> {
    fn regenerate(&self) -> String {
        let level = match self.level {
            // Features and inputs are written with the case's goldens, whatever the level.
            Level::VisionEncoder | Level::AudioEncoder | Level::Accuracy | Level::AccuracyGenai | Level::Genai => String::new(),
            level => format!(" --level {level}"),
        };
        format!("cargo xtask regen-goldens --case {}{level} --force{}", self.id.case(), self.suite.root_option())
    }

    /// What every report of this trial names: the trial, its case file, the golden, how to regenerate it, the policy.
    fn report_context<'a>(
        &'a self,
        tokenizer: &'a TextTokenizer,
        golden_file: &'a str,
        regenerate: &'a str,
        policy: &'a crate::judge::tolerance::Policy,
    ) -> report::Context<'a> {
        report::Context { trial: self.name, case_file: &self.case.file, golden_file, regenerate, policy_source: &policy.source, tokenizer }
    }

    fn rel(&self, p: &Path) -> String {
        relative(&self.suite.root, p)
    }

    /// A golden whose inputs no longer match the case: the error that says so, and how to regenerate it.
    fn stale(&self, reason: String) -> Error {
        Error::new(format!("golden is stale: {reason}\n  regenerate: {}", self.regenerate()))
    }

    /// The L4 golden at `path`, checked against the prompt's inputs.
    fn prefill_golden(&self, path: &Path, prompt: &str, inputs: &Inputs) -> Result<PrefillGolden> {
        let golden = PrefillGolden::load(path)?;
        match verdict::staleness(golden.input_hash.as_deref(), None, &golden.input_ids, prompt, inputs) {
            Some(why) => Err(self.stale(format!("{} {why} ({})", self.rel(path), self.case.file))),
            None => Ok(golden),
        }
    }

    /// The L5 golden at `path`, checked against the prompt's inputs.
    fn generation_golden(&self, path: &Path, prompt: &str, inputs: &Inputs) -> Result<GenerationGolden> {
        let golden = GenerationGolden::load(path)?;
        match verdict::staleness(golden.input_hash.as_deref(), Some(&golden.prompt), &[], prompt, inputs) {
            Some(why) => Err(self.stale(format!("{} {why} ({})", self.rel(path), self.case.file))),
            None => Ok(golden),
        }
    }

    /// Logits no verdict can reason about, as the trial's failure: a vocabulary of another size first (its ids past
    /// the end read as NaN), then NaN or infinity. `place` names what computed them.
    fn unjudgeable(
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
    fn vocab_size(&self, place: &str, v: VocabMismatch, golden_file: &str, ids_from: &str, package: &Path) -> Outcome {
        let failure = Some(Box::new(Failure::of(FailureKind::VocabSize)));
        let message = report::vocab_size(self.name, place, &v, golden_file, ids_from, &self.rel(package), &self.regenerate());
        Outcome { failure, ..Outcome::fail(message) }
    }

    /// NaN or infinite logits, as the trial's measured failure, with where they start.
    fn non_finite(&self, place: &str, nf: NonFinite) -> Outcome {
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
    fn max_new(&self, golden: Option<&GenerationGolden>) -> usize {
        golden.and_then(|g| g.max_new_tokens).unwrap_or(self.case.max_new_tokens()) as usize
    }

    /// A conformance trial: placed, its golden found, its inputs fed, then its level run and judged.
    fn run(&self) -> Result<Outcome> {
        if self.level == Level::Dist {
            return self.run_dist();
        }
        let (provider, package) = match self.placement() {
            Ok(p) => p,
            Err(skip) => return Ok(skip),
        };
        let paths = self.suite.golden_paths(self.case, self.modality, self.variant.dtype);
        let golden_path = match self.level {
            Level::L4 => paths.prefill.clone(),
            Level::L5 => paths.generation.clone(),
            Level::VisionEncoder | Level::AudioEncoder => paths.features.clone(),
            // genai is judged against both goldens; it needs at least one.
            Level::Genai if !paths.generation.is_file() && paths.prefill.is_file() => paths.prefill.clone(),
            Level::Genai => paths.generation.clone(),
            Level::Accuracy | Level::AccuracyGenai => return Err(Error::new("accuracy trials run through run_accuracy")),
            Level::Dist => unreachable!("run_dist above"),
        };
        paths::confine(&self.suite.root, &golden_path, "golden", paths::SUITE_HINT)?;
        if !golden_path.is_file() {
            return Ok(self.missing(&golden_path));
        }
        let media = self.modality != Modality::Text;
        for p in std::iter::once(&paths.inputs).chain(&paths.shared_inputs).filter(|_| media) {
            paths::confine(&self.suite.root, p, "golden", paths::SUITE_HINT)?;
        }
        let inputs_needed = std::iter::once(&paths.inputs).chain(&paths.shared_inputs).filter(|_| media);
        if let Some(missing) = inputs_needed.into_iter().find(|p| !p.is_file()) {
            let msg = corpus::missing_inputs(self.case, &self.rel(missing));
            // Under CI, inputs the suite makes itself (the case names its reference) must be committed.
            return Ok(if self.ctx.ci && self.case.spec.reference.is_some() {
                Outcome::fail(format!("{}: {msg} and commit them (CI is set)", self.name))
            } else {
                Outcome::skip(msg)
            });
        }
        let policy = self.suite.policy.as_ref().map_err(Clone::clone)?;
        let tol = self.tolerance(policy, if self.level == Level::L5 { Logits::Stream } else { Logits::Prefill })?;

        // case -> inputs
        let Some(prompt) = self.case.prompt() else {
            return Err(Error::new(format!("{}: field `inputs.prompts` is empty; a text case needs one prompt", self.case.file)));
        };
        let tokenizer = self.tokenizer(&package)?;
        // Media inputs are what the Hugging Face processor made (chat template, expanded media tokens, pixels, mel
        // features), stored beside the goldens; text is tokenized here, so a changed prompt shows as a stale golden.
        let inputs = if media { paths.load_inputs(|p| self.rel(p))? } else { Inputs::from_token_ids(&tokenizer.encode(prompt)?) };
        if inputs.input_ids().is_empty() {
            return Err(Error::new(format!(
                "{}: field `inputs.prompts`: the prompt {prompt:?} tokenizes to no ids; a trial needs at least one token",
                self.case.file
            )));
        }
        let golden_file = self.rel(&golden_path);
        let p = Prepared { package, paths, golden_path, golden_file, policy, tol, prompt, tokenizer, inputs };

        if self.level == Level::Genai {
            return self.run_genai(&p, provider);
        }
        // inputs -> runtime
        let decoder = match self.decoder(&p.package, provider)? {
            Ok(d) => d,
            Err(skip) => return Ok(skip),
        };
        let pipeline = Pipeline::build(&p.package, &decoder, provider, &p.inputs, &self.rel(&p.paths.inputs))?;
        // runtime -> outputs -> judgement -> report
        match self.level {
            Level::L4 => self.run_prefill(&p, &decoder, &pipeline),
            Level::L5 => self.run_generation(&p, &decoder, &pipeline),
            Level::VisionEncoder | Level::AudioEncoder => self.run_component(&p, &decoder, &pipeline),
            Level::Accuracy | Level::AccuracyGenai | Level::Genai | Level::Dist => unreachable!("placed above"),
        }
    }

    /// The tolerance `level` is judged with: the policy's, with the case's override checked against it.
    fn tolerance(&self, policy: &Policy, table: Logits) -> Result<Tolerance> {
        let spec = &self.case.spec;
        policy.for_trial(table, self.variant.dtype, spec.tolerance.as_ref(), spec.min_token_match_ratio).map_err(|e| {
            e.context(format!("{} ({} for {}/{}, {})", self.case.file, table, self.variant.dtype, self.variant.ep, policy.source))
        })
    }

    /// EOS ids: the case's `generation.eos_token_id`, else the package's genai_config.json, else none. A
    /// genai_config.json that is there but invalid is an error, never "no EOS".
    fn eos_ids(&self, package: &Path) -> Result<Vec<i64>> {
        if let Some(e) = self.case.spec.generation.eos_token_id {
            return Ok(vec![e]);
        }
        Ok(crate::feed::package::GenaiConfig::load_if_present(package)?.map(|c| c.eos_token_ids).unwrap_or_default())
    }

    /// The vocabulary the package's config states for its logits, if it has a config that states one.
    fn package_vocab(&self, package: &Path) -> Result<Option<usize>> {
        Ok(crate::feed::package::GenaiConfig::load_if_present(package)?.and_then(|c| c.vocab_size))
    }
}

fn indent(text: &str, prefix: &str) -> String {
    text.lines().map(|l| format!("{prefix}{l}\n")).collect()
}
