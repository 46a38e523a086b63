//! L5, greedy generation with the KV cache: the tokens against the reference's, the first divergence classified, a
//! teacher-forced re-run, and every decode step's logits at the reference's stored ids.

pub mod judged;
pub mod render;
pub mod review_trial;

use self::judged::Judged;
use super::Kind;
use crate::error::Result;
use crate::feed::generation_config::GenerationConfig;
use crate::judge::finite::{self, ExpectedVocab};
use crate::judge::golden::PrefillGolden;
use crate::judge::prefill;
use crate::judge::stream;
use crate::judge::tolerance::{Logits, Tolerance};
use crate::judge::verdict::Verdict;
use crate::level::trial::{Prepared, Trial};
use crate::outcome::{Failure, FailureKind, Outcome, Status};
use crate::plan::case::Case;
use crate::report::{self, snapshot};
use crate::run::decoder::Decoder;
use crate::run::generate::{self, Suppress};
use crate::run::pipeline::Pipeline;
use crate::vocab::{Level, Modality};
use std::path::Path;

pub struct L5;

impl Kind for L5 {
    fn level(&self) -> Level {
        Level::L5
    }

    fn planned(&self, case: &Case, _: Modality) -> bool {
        case.levels().contains(&Level::L5)
    }

    fn selected_by_case(&self) -> bool {
        true
    }

    fn failures(&self) -> &'static [FailureKind] {
        &[FailureKind::Tokens, FailureKind::StepLogits, FailureKind::NonFinite, FailureKind::VocabSize, FailureKind::Refused]
    }

    fn greedy(&self) -> bool {
        true
    }

    fn regenerates_alone(&self) -> bool {
        true
    }

    fn measured(&self, o: &Outcome) -> Option<String> {
        render::measured(o)
    }

    fn run(&self, t: &Trial) -> Result<Outcome> {
        match t.open(|g| g.generation.clone(), Logits::Stream)? {
            Ok(o) => run_generation(t, &o.p, &o.decoder, &o.pipeline),
            Err(end) => Ok(end),
        }
    }
}

fn run_generation(t: &Trial, p: &Prepared, decoder: &Decoder, pipeline: &Pipeline) -> Result<Outcome> {
    let (inputs, tol, golden_file) = (&p.inputs, &p.tol, &p.golden_file);
    let golden = t.generation_golden(&p.golden_path, p.prompt, inputs)?;
    // The stream's length is part of what the golden pins: a case asking for another length has a golden made
    // for a different check.
    let case_max = t.case.max_new_tokens();
    if let Some(g) = golden.max_new_tokens
        && g != case_max
    {
        return Err(t.stale(format!(
            "{golden_file} was made with max_new_tokens {g}, but {} field `generation.max_new_tokens` is {case_max}",
            t.case.file
        )));
    }
    if golden.generated_tokens.len() > case_max as usize {
        return Err(t.stale(format!(
            "{golden_file} holds {} generated tokens, more than {} field `generation.max_new_tokens` ({case_max}) allows",
            golden.generated_tokens.len(),
            t.case.file
        )));
    }
    let eos = t.eos_ids(&p.package)?;
    let max_new = t.max_new(Some(&golden));
    // Each step keeps the package's logits at the reference's stored ids for that step.
    let watch: Vec<&[i64]> = golden.steps.iter().map(|s| s.ids.as_slice()).collect();
    let suppress = if pipeline.suppresses_tokens() { suppression(t, &p.package)? } else { Suppress::default() };
    let run =
        |forced: Option<&[i64]>| generate::greedy_with(decoder, pipeline, inputs.input_ids(), max_new, &eos, forced, &watch, &suppress);
    let free = run(None)?;
    let place = decoder.model.display().to_string();
    let largest_id = golden.steps.iter().flat_map(|s| s.ids.iter().copied()).chain(golden.generated_tokens.iter().copied()).max();
    let expected = ExpectedVocab { golden: None, config: t.package_vocab(&p.package)?, largest_id };
    let vocab = expected.check(free.prefill_logits.len());
    if let Some(o) = t.unjudgeable(&place, vocab, finite::stream(&free.prefill_logits, &free.steps), golden_file, &p.package) {
        return Ok(o);
    }
    let got = free.chosen();
    // A stream equal to the golden's was fed the golden's tokens: it is its own teacher-forced run.
    let forced = if got != golden.generated_tokens && !golden.generated_tokens.is_empty() {
        let forced = run(Some(&golden.generated_tokens))?;
        let non_finite = finite::stream(&forced.prefill_logits, &forced.steps);
        if let Some(o) = t.unjudgeable(&place, None, non_finite, golden_file, &p.package) {
            return Ok(o);
        }
        Some(forced)
    } else {
        None
    };
    let r = stream::judge_generation(&got, &golden, forced.as_ref().map(|f| f.chosen()).as_deref(), tol);
    let teacher: Vec<Vec<f32>> = forced.as_ref().unwrap_or(&free).steps.iter().map(|s| s.watched.clone()).collect();
    let step_logits = stream::judge_step_logits(&teacher, &golden, tol);
    let tokens_failed = r.verdict == Verdict::Fail;
    let r = match &step_logits {
        Some(s) => stream::with_step_logits(r, s),
        None => r,
    };
    let steps = forced.as_ref().unwrap_or(&free);
    let max_step_diff = step_logits.as_ref().map(|s| s.max_abs);
    // The tokens' failure first (what a person sees first); step logits alone fail as `step_logits`.
    let failure = (r.verdict == Verdict::Fail).then(|| {
        Box::new(match (tokens_failed, step_logits.as_ref().and_then(|s| s.first_out)) {
            (false, Some(o)) => Failure { max_abs_diff: max_step_diff, first_step: Some(o.step), ..Failure::of(FailureKind::StepLogits) },
            _ => Failure {
                max_abs_diff: max_step_diff,
                first_step: r.first_divergence.as_ref().map(|d| d.index),
                ..Failure::of(FailureKind::Tokens)
            },
        })
    });
    let regenerate = t.regenerate();
    let ctx = t.report_context(&p.tokenizer, golden_file, golden.provenance.as_ref(), &regenerate, p.policy);
    let outcome = Outcome {
        status: r.verdict.into(),
        message: report::verdict::generation(&ctx, &r),
        max_abs_diff: max_step_diff,
        first_divergence: r.first_divergence.as_ref().map(|d| d.index),
        failure,
        judgement: Some(std::sync::Arc::new(Judged {
            report: r.clone(),
            numbers: judged::numbers(&r, &golden, &steps.steps, forced.is_some(), step_logits.as_ref()),
        })),
        ..Outcome::new(Status::Pass, "")
    };
    let tokenizer = &p.tokenizer;
    let token = |id: i64| tokenizer.token(id);
    let text = |ids: &[i64]| tokenizer.decode(ids);
    // Step logits out of the policy at any step (they are judged teacher-forced, so every step is comparable, the
    // divergence's own and those after it): numbers, which no snapshot reviews. An honest near-tie flip keeps them
    // within the policy.
    let numbers_out = step_logits.as_ref().and_then(|s| s.first_out).map(|o| o.step);
    Ok(review_trial::review_snapshot(t, outcome, numbers_out, || {
        let l4 = p.paths.prefill.is_file().then(|| l4_note(&p.paths.prefill, &free.prefill_logits, tol)).flatten();
        (snapshot::render(t.name, &r, &golden, &token, &text), format!("{}\n{}", t.name, l4.unwrap_or_default()))
    }))
}

/// The ids an encoder-decoder's greedy stream never chooses, as `generate()` applies them: from the
/// `generation_config.json` beside the case's tokenizer (its `tokenizer` or `reference`), else the package's.
fn suppression(t: &Trial, package: &Path) -> Result<Suppress> {
    let dir = match t.case.tokenizer_location(&t.suite.root) {
        Some(l) => l.resolve("generation_config.json", &t.ctx.hub)?,
        None => package.to_path_buf(),
    };
    let c = GenerationConfig::load(&dir, &format!("{} (L5 of a speech-to-text case)", t.case.file))?;
    Ok(Suppress { always: c.suppress_tokens, at_begin: c.begin_suppress_tokens })
}

/// The L4 numbers of this stream's prefill, for the snapshot's description.
fn l4_note(golden_path: &Path, logits: &[f32], tol: &Tolerance) -> Option<String> {
    let golden = PrefillGolden::load(golden_path).ok()?;
    let reference = golden.full_logits(golden_path).ok()?;
    let r = prefill::judge_prefill(logits, &golden, reference.as_deref(), tol);
    let c = r.comparison?;
    Some(format!("L4 of this prefill: {} max |diff| {:.3e} at id {}, cosine {:.7}", r.verdict, c.max_abs, c.max_abs_at, c.cosine))
}
