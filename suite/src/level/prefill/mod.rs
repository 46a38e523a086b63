//! L4, prefill: the last prompt position's logits over the vocabulary, and every stored prompt position's logits,
//! against the reference.

pub mod judged;
pub mod render;

use self::judged::Judged;
use super::{Kind, Separation};
use crate::error::Result;
use crate::judge::finite::{self, ExpectedVocab};
use crate::judge::prefill;
use crate::judge::tolerance::Logits;
use crate::judge::verdict::Verdict;
use crate::level::trial::{Prepared, Trial};
use crate::outcome::{Failure, FailureKind, Outcome, Status};
use crate::plan::case::Case;
use crate::report;
use crate::run::decoder::Decoder;
use crate::run::generate;
use crate::run::pipeline::Pipeline;
use crate::vocab::{Level, Modality};

pub struct L4;

impl Kind for L4 {
    fn level(&self) -> Level {
        Level::L4
    }

    fn planned(&self, case: &Case, _: Modality) -> bool {
        case.levels().contains(&Level::L4)
    }

    fn selected_by_case(&self) -> bool {
        true
    }

    fn failures(&self) -> &'static [FailureKind] {
        &[FailureKind::Logits, FailureKind::NonFinite, FailureKind::VocabSize, FailureKind::Refused]
    }

    fn states_position(&self) -> bool {
        true
    }

    fn localizes(&self) -> bool {
        true
    }

    fn regenerates_alone(&self) -> bool {
        true
    }

    fn measured(&self, o: &Outcome) -> Option<String> {
        render::measured(o)
    }

    fn score(&self, o: &Outcome) -> Option<f64> {
        judged::of(o)?.report.noise.as_ref().map(|n| n.score)
    }

    fn separation(&self) -> Option<Separation> {
        Some(Separation { title: "separation (noise score: the tolerance policy's statistic, <= 1 passes)", key: "separation" })
    }

    fn locality(&self) -> u8 {
        1
    }

    fn run(&self, t: &Trial) -> Result<Outcome> {
        match t.open(|g| g.prefill.clone(), Logits::Prefill)? {
            Ok(o) => run_prefill(t, &o.p, &o.decoder, &o.pipeline),
            Err(end) => Ok(end),
        }
    }
}

fn run_prefill(t: &Trial, p: &Prepared, decoder: &Decoder, pipeline: &Pipeline) -> Result<Outcome> {
    let (inputs, tol) = (&p.inputs, &p.tol);
    let golden = t.prefill_golden(&p.golden_path, p.prompt, inputs)?;
    let reference = golden.full_logits(&p.golden_path)?;
    // Every prompt position the golden stores is judged at its ids; the last one over the vocabulary.
    let watch: Vec<&[i64]> = golden.positions.iter().map(|p| p.ids.as_slice()).collect();
    let (got, positions) = match watch.is_empty() {
        true => (generate::prefill(decoder, pipeline, inputs.input_ids())?, Vec::new()),
        false => generate::prefill_positions(decoder, pipeline, inputs.input_ids(), &watch)?,
    };
    let largest_id = golden.positions.iter().flat_map(|p| p.ids.iter().copied()).chain(golden.top10_ids.iter().copied()).max();
    let expected =
        ExpectedVocab { golden: golden.vocab_size.or(reference.as_ref().map(Vec::len)), config: t.package_vocab(&p.package)?, largest_id };
    let non_finite = finite::positions(&positions).or_else(|| finite::row(&got, 0));
    let place = decoder.model.display().to_string();
    if let Some(o) = t.unjudgeable(&place, expected.check(got.len()), non_finite, &p.golden_file, &p.package) {
        return Ok(o);
    }
    let r = prefill::judge_prefill(&got, &golden, reference.as_deref(), tol);
    let r = match prefill::judge_positions(&positions, &golden, tol) {
        Some(p) => prefill::with_positions(r, p),
        None => r,
    };
    let d = judged::numbers(&r, &got, reference.as_deref());
    // The largest difference L4 measured: the last position's, or an earlier position's when larger.
    let max_abs = match (d.max_abs, r.positions.as_ref().map(|p| p.max_abs)) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let failure = (r.verdict == Verdict::Fail).then(|| {
        let first_position = r.positions.as_ref().and_then(|p| p.first_out).map(|o| o.position);
        Box::new(Failure { first_position, ..Failure::prefill(max_abs) })
    });
    let regenerate = t.regenerate();
    let ctx = t.report_context(&p.tokenizer, &p.golden_file, golden.provenance.as_ref(), &regenerate, p.policy);
    Ok(Outcome {
        status: r.verdict.into(),
        message: report::verdict::prefill(&ctx, &r),
        max_abs_diff: max_abs,
        failure,
        judgement: Some(std::sync::Arc::new(Judged { report: r, numbers: d })),
        ..Outcome::new(Status::Pass, "")
    })
}
