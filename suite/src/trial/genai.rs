//! The genai level: the package as onnxruntime-genai runs it (its config, model, processor and greedy generator),
//! judged against the L4 and L5 goldens that exist.

use std::path::PathBuf;

use super::{Prepared, Trial};
use crate::error::Result;
use crate::judge::finite::{self, ExpectedVocab};
use crate::judge::golden::GenerationGolden;
use crate::judge::tolerance::Logits;
use crate::level::genai::judge::{self, Feed, GenaiReport};
use crate::outcome::Failure;
use crate::outcome::{Outcome, Status};
use crate::run::genai::Refusal;
use crate::run::runtime::{self, Provider};
use crate::vocab::{Dtype, Modality};

impl Trial<'_> {
    /// The package through onnxruntime-genai: the prompt's ids appended to its generator, greedy to the golden's
    /// length, judged against the L4 and L5 goldens that exist. A package genai refuses fails with genai's message.
    pub(super) fn run_genai(&self, p: &Prepared, provider: Provider) -> Result<Outcome> {
        if let Provider::Cuda { .. } = provider {
            return Ok(Outcome::skip(format!(
                "the pinned onnxruntime-genai=={} wheel is its CPU build; genai on CUDA needs onnxruntime-genai-cuda, which \
                 the suite does not pin yet",
                crate::run::genai::GENAI_VERSION
            )));
        }
        let (package, paths, inputs, policy) = (&p.package, &p.paths, &p.inputs, p.policy);
        if self.modality != Modality::Text {
            return self.run_genai_media(p, provider);
        }
        let prefill = if paths.prefill.is_file() { Some(self.prefill_golden(&paths.prefill, p.prompt, inputs)?) } else { None };
        let full = match &prefill {
            Some(g) => g.full_logits(&paths.prefill)?,
            None => None,
        };
        let generation = if paths.generation.is_file() { Some(self.generation_golden(&paths.generation, p.prompt, inputs)?) } else { None };
        let (prefill_file, generation_file) = (self.rel(&paths.prefill), self.rel(&paths.generation));
        let max_new = self.max_new(generation.as_ref());
        let model = match crate::run::genai::Model::open(package, provider)? {
            Ok(m) => m,
            Err(refusal) => return Ok(self.genai_refused(package, provider, refusal)),
        };
        let run = match model.greedy(inputs.input_ids(), max_new) {
            Ok(run) => run,
            Err(e) => {
                if let Some(skip) = self.cpu_cannot_run(&e.to_string(), provider) {
                    return Ok(skip);
                }
                return Err(e.context(format!("{}: genai failed on the package {}", self.case.file, self.rel(package))));
            }
        };
        let place = format!("onnxruntime-genai on {}", self.rel(package));
        let expected = ExpectedVocab {
            golden: prefill.as_ref().and_then(|g| g.vocab_size),
            config: self.package_vocab(package)?,
            largest_id: generation.as_ref().and_then(|g| g.steps.iter().flat_map(|s| s.ids.iter().copied()).max()),
        };
        let vocab = expected.check(run.prefill_logits.len());
        if let Some(o) = self.unjudgeable(&place, vocab, finite::row(&run.prefill_logits, 0), &prefill_file, package) {
            return Ok(o);
        }
        // genai is judged as L4 and L5 are: each with its level's tolerance, the case's override checked against both.
        let (tol4, tol5) = (self.tolerance(policy, Logits::Prefill)?, self.tolerance(policy, Logits::Stream)?);
        let goldens = judge::Goldens {
            prefill: prefill.as_ref().map(|g| (g, full.as_deref(), &tol4, prefill_file.as_str())),
            generation: generation.as_ref().map(|g| (g, &tol5, generation_file.as_str())),
        };
        let feed = Feed::Ids { library: run.library.clone(), version: crate::run::genai::GENAI_VERSION, generated: run.tokens.len() };
        let r = judge::judge(feed, None, Some(&run.prefill_logits), &run.tokens, &goldens);
        let regenerate = self.regenerate();
        let ctx = self.report_context(&p.tokenizer, &generation_file, &regenerate, policy);
        Ok(genai_outcome(crate::level::genai::render::message(&ctx, &r), r))
    }

    /// A media prompt through genai's own processor: the prompt it builds must be Hugging Face's (else the trial
    /// fails showing both), and its greedy tokens on what it built are judged against the L5 golden.
    fn run_genai_media(&self, p: &Prepared, provider: Provider) -> Result<Outcome> {
        let (package, paths, tokenizer, policy) = (&p.package, &p.paths, &p.tokenizer, p.policy);
        let hf = p.inputs.input_ids();
        let prompt = tokenizer.decode_raw(&crate::level::genai::judge::placeholder_ids(hf));
        let media = |files: &[String], wanted: bool| -> Vec<PathBuf> {
            if wanted { files.iter().map(|f| self.suite.root.join(f)).collect() } else { Vec::new() }
        };
        let images = media(&self.case.spec.inputs.images, matches!(self.modality, Modality::Image | Modality::ImageAudio));
        let audio = media(&self.case.spec.inputs.audio, matches!(self.modality, Modality::Audio | Modality::ImageAudio));
        let generation = if paths.generation.is_file() { Some(GenerationGolden::load(&paths.generation)?) } else { None };
        let max_new = self.max_new(generation.as_ref());
        let model = match crate::run::genai::Model::open(package, provider)? {
            Ok(m) => m,
            Err(refusal) => return Ok(self.genai_refused(package, provider, refusal)),
        };
        let run = model
            .greedy_media(&prompt, &images, &audio, max_new)
            .map_err(|e| e.context(format!("{}: genai failed on the package {}", self.case.file, self.rel(package))))?;
        let text = |ids: &[i64]| tokenizer.decode_raw(ids);
        let difference = judge::prompt_difference(hf, &run.processor_ids, &text);
        let tol = self.tolerance(policy, Logits::Stream)?;
        let file = self.rel(&paths.generation);
        let goldens = judge::Goldens { prefill: None, generation: generation.as_ref().map(|g| (g, &tol, file.as_str())) };
        let r = judge::judge(Feed::Processor { modality: self.modality }, difference, None, &run.tokens, &goldens);
        let regenerate = self.regenerate();
        let ctx = self.report_context(tokenizer, &file, &regenerate, policy);
        Ok(genai_outcome(crate::level::genai::render::message(&ctx, &r), r))
    }
}

impl Trial<'_> {
    /// genai refused the package: a failure of this level (the package does not run in its own runtime), which a
    /// strict xfail may expect by genai's message.
    pub(super) fn genai_refused(&self, package: &std::path::Path, provider: Provider, refusal: Refusal) -> Outcome {
        if let Some(skip) = self.cpu_cannot_run(&refusal.message, provider) {
            return skip;
        }
        let message = crate::level::genai::render::refused(self.name, &self.case.file, &self.rel(package), &refusal.message);
        Outcome { failure: Some(Box::new(Failure::refused(refusal.message))), ..Outcome::fail(message) }
    }

    /// As for the suite's own runner: a half-precision build the CPU EP has no kernels for skips, naming the node.
    fn cpu_cannot_run(&self, error: &str, provider: Provider) -> Option<Outcome> {
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
