//! L4: prefill. The last prompt position's logits over the vocabulary, and every prompt position's stored logits,
//! against the reference.

use super::{Prepared, Trial};
use crate::error::Result;
use crate::judge::finite::{self, ExpectedVocab};
use crate::judge::verdict::{self, Verdict};
use crate::level::prefill::judged::{self, Judged};
use crate::outcome::{Failure, Outcome, Status};
use crate::report;
use crate::run::decoder::Decoder;
use crate::run::generate;
use crate::run::pipeline::Pipeline;

impl Trial<'_> {
    pub(super) fn run_prefill(&self, p: &Prepared, decoder: &Decoder, pipeline: &Pipeline) -> Result<Outcome> {
        let (inputs, tol) = (&p.inputs, &p.tol);
        let golden = self.prefill_golden(&p.golden_path, p.prompt, inputs)?;
        let reference = golden.full_logits(&p.golden_path)?;
        // Every prompt position the golden stores is judged at its ids; the last one over the vocabulary.
        let watch: Vec<&[i64]> = golden.positions.iter().map(|p| p.ids.as_slice()).collect();
        let (got, positions) = match watch.is_empty() {
            true => (generate::prefill(decoder, pipeline, inputs.input_ids())?, Vec::new()),
            false => generate::prefill_positions(decoder, pipeline, inputs.input_ids(), &watch)?,
        };
        let largest_id = golden.positions.iter().flat_map(|p| p.ids.iter().copied()).chain(golden.top10_ids.iter().copied()).max();
        let expected = ExpectedVocab {
            golden: golden.vocab_size.or(reference.as_ref().map(Vec::len)),
            config: self.package_vocab(&p.package)?,
            largest_id,
        };
        let non_finite = finite::positions(&positions).or_else(|| finite::row(&got, 0));
        let place = decoder.model.display().to_string();
        if let Some(o) = self.unjudgeable(&place, expected.check(got.len()), non_finite, &p.golden_file, &p.package) {
            return Ok(o);
        }
        let r = verdict::judge_prefill(&got, &golden, reference.as_deref(), tol);
        let r = match verdict::judge_positions(&positions, &golden, tol) {
            Some(p) => verdict::with_positions(r, p),
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
        let regenerate = self.regenerate();
        let ctx = self.report_context(&p.tokenizer, &p.golden_file, &regenerate, p.policy);
        Ok(Outcome {
            status: r.verdict.into(),
            message: report::verdict::prefill(&ctx, &r),
            max_abs_diff: max_abs,
            failure,
            judgement: Some(std::sync::Arc::new(Judged { report: r, numbers: d })),
            ..Outcome::new(Status::Pass, "")
        })
    }
}
