//! The genai level: the package as onnxruntime-genai runs it (its `genai_config.json`, model, tokenizer, processor
//! and greedy generator): tokens against the L5 golden, prefill logits against the L4 golden.

pub mod judge;
pub mod render;

use self::judge::{Feed, GenaiReport};
use super::Kind;
use crate::error::Result;
use crate::judge::finite::{self, ExpectedVocab};
use crate::judge::golden::{GenerationGolden, GoldenPaths};
use crate::judge::tolerance::Logits;
use crate::level::trial::{Prepared, Trial};
use crate::outcome::{FailureKind, Outcome, Status};
use crate::plan::case::Case;
use crate::run::genai::library::cpu_build_on_cuda;
use crate::run::runtime::Provider;
use crate::vocab::{Level, Modality};
use std::path::PathBuf;

pub struct Genai;

impl Kind for Genai {
    fn level(&self) -> Level {
        Level::Genai
    }

    /// Every modality of every case: a package is right only if its own runtime runs it right.
    fn planned(&self, _: &Case, _: Modality) -> bool {
        true
    }

    fn failures(&self) -> &'static [FailureKind] {
        &[
            FailureKind::Logits,
            FailureKind::Tokens,
            FailureKind::Prompt,
            FailureKind::NonFinite,
            FailureKind::VocabSize,
            FailureKind::Refused,
        ]
    }

    fn greedy(&self) -> bool {
        true
    }

    /// Its prefill failures: the package's graph localized as the suite's own runtime runs it.
    fn localizes(&self) -> bool {
        true
    }

    fn measured(&self, o: &Outcome) -> Option<String> {
        render::measured(o)
    }

    fn run(&self, t: &Trial) -> Result<Outcome> {
        // genai is judged against both goldens; it needs at least one.
        let golden =
            |g: &GoldenPaths| if !g.generation.is_file() && g.prefill.is_file() { g.prefill.clone() } else { g.generation.clone() };
        let p = match t.prepare(golden, Logits::Prefill)? {
            Ok(p) => p,
            Err(o) => return Ok(o),
        };
        run_genai(t, &p, p.provider)
    }
}

/// The package through onnxruntime-genai: the prompt's ids appended to its generator, greedy to the golden's
/// length, judged against the L4 and L5 goldens that exist. A package genai refuses fails with genai's message.
fn run_genai(t: &Trial, p: &Prepared, provider: Provider) -> Result<Outcome> {
    if let Some(why) = cpu_build_on_cuda(provider)? {
        return Ok(Outcome::skip(why));
    }
    let (package, paths, inputs, policy) = (&p.package, &p.paths, &p.inputs, p.policy);
    if t.modality != Modality::Text {
        return run_genai_media(t, p, provider);
    }
    let prefill = if paths.prefill.is_file() { Some(t.prefill_golden(&paths.prefill, p.prompt, inputs)?) } else { None };
    let full = match &prefill {
        Some(g) => g.full_logits(&paths.prefill)?,
        None => None,
    };
    let generation = if paths.generation.is_file() { Some(t.generation_golden(&paths.generation, p.prompt, inputs)?) } else { None };
    let (prefill_file, generation_file) = (t.rel(&paths.prefill), t.rel(&paths.generation));
    let max_new = t.max_new(generation.as_ref());
    let model = match crate::run::genai::Model::open(package, provider)? {
        Ok(m) => m,
        Err(refusal) => return Ok(t.genai_refused(package, provider, refusal)),
    };
    let run = match model.greedy(inputs.input_ids(), max_new) {
        Ok(run) => run,
        Err(e) => {
            if let Some(skip) = t.cpu_cannot_run(&e.to_string(), provider) {
                return Ok(skip);
            }
            return Err(e.context(format!("{}: genai failed on the package {}", t.case.file, t.rel(package))));
        }
    };
    let place = format!("onnxruntime-genai on {}", t.rel(package));
    let expected = ExpectedVocab {
        golden: prefill.as_ref().and_then(|g| g.vocab_size),
        config: t.package_vocab(package)?,
        largest_id: generation.as_ref().and_then(|g| g.steps.iter().flat_map(|s| s.ids.iter().copied()).max()),
    };
    let vocab = expected.check(run.prefill_logits.len());
    if let Some(o) = t.unjudgeable(&place, vocab, finite::row(&run.prefill_logits, 0), &prefill_file, package) {
        return Ok(o);
    }
    // genai is judged as L4 and L5 are: each with its level's tolerance, the case's override checked against both.
    let (tol4, tol5) = (t.tolerance(policy, Logits::Prefill)?, t.tolerance(policy, Logits::Stream)?);
    let goldens = judge::Goldens {
        prefill: prefill.as_ref().map(|g| (g, full.as_deref(), &tol4, prefill_file.as_str())),
        generation: generation.as_ref().map(|g| (g, &tol5, generation_file.as_str())),
    };
    let feed = Feed::Ids { library: run.library.clone(), version: crate::run::genai::version::GENAI_VERSION, generated: run.tokens.len() };
    let r = judge::judge(feed, None, Some(&run.prefill_logits), &run.tokens, &goldens);
    let regenerate = t.regenerate();
    // Who made the goldens: the generation golden's maker, else the prefill golden's (a case with only the latter).
    let provenance =
        generation.as_ref().and_then(|g| g.provenance.as_ref()).or_else(|| prefill.as_ref().and_then(|g| g.provenance.as_ref()));
    let ctx = t.report_context(&p.tokenizer, &generation_file, provenance, &regenerate, policy);
    Ok(genai_outcome(crate::level::genai::render::message(&ctx, &r), r))
}

/// A media prompt through genai's own processor: the prompt it builds must be Hugging Face's (else the trial
/// fails showing both), and its greedy tokens on what it built are judged against the L5 golden.
fn run_genai_media(t: &Trial, p: &Prepared, provider: Provider) -> Result<Outcome> {
    let (package, paths, tokenizer, policy) = (&p.package, &p.paths, &p.tokenizer, p.policy);
    let hf = p.inputs.input_ids();
    let prompt = tokenizer.decode_raw(&crate::run::genai::processor::placeholder_ids(hf));
    let media = |files: &[String], wanted: bool| -> Vec<PathBuf> {
        if wanted { files.iter().map(|f| t.suite.root.join(f)).collect() } else { Vec::new() }
    };
    let images = media(&t.case.spec.inputs.images, matches!(t.modality, Modality::Image | Modality::ImageAudio));
    let audio = media(&t.case.spec.inputs.audio, matches!(t.modality, Modality::Audio | Modality::ImageAudio));
    let generation = if paths.generation.is_file() { Some(GenerationGolden::load(&paths.generation)?) } else { None };
    let max_new = t.max_new(generation.as_ref());
    let model = match crate::run::genai::Model::open(package, provider)? {
        Ok(m) => m,
        Err(refusal) => return Ok(t.genai_refused(package, provider, refusal)),
    };
    let run = model
        .greedy_media(&prompt, &images, &audio, max_new)
        .map_err(|e| e.context(format!("{}: genai failed on the package {}", t.case.file, t.rel(package))))?;
    let text = |ids: &[i64]| tokenizer.decode_raw(ids);
    let difference = judge::prompt_difference(hf, &run.processor_ids, &text);
    let tol = t.tolerance(policy, Logits::Stream)?;
    let file = t.rel(&paths.generation);
    let goldens = judge::Goldens { prefill: None, generation: generation.as_ref().map(|g| (g, &tol, file.as_str())) };
    let r = judge::judge(Feed::Processor { modality: t.modality }, difference, None, &run.tokens, &goldens);
    let regenerate = t.regenerate();
    let ctx = t.report_context(tokenizer, &file, generation.as_ref().and_then(|g| g.provenance.as_ref()), &regenerate, policy);
    Ok(genai_outcome(crate::level::genai::render::message(&ctx, &r), r))
}

fn genai_outcome(message: String, r: GenaiReport) -> Outcome {
    Outcome {
        status: r.status.into(),
        message,
        max_abs_diff: r.max_abs_diff,
        first_divergence: r.first_divergence,
        failure: r.failure.clone().map(Box::new),
        judgement: Some(std::sync::Arc::new(r)),
        ..Outcome::new(Status::Pass, "")
    }
}
