//! The `genai` level's verdict: what onnxruntime-genai computed from the package (its config, model and greedy
//! generator) against the goldens. Pure: a [`crate::genai::Run`] and goldens in, an outcome out.
//!
//! The prefill logits are judged as L4 judges the suite's own runner (the dtype's L4 tolerance), the tokens as L5
//! does (the dtype's match ratio), so a package that only genai runs wrong fails here and nowhere else.

use crate::genai::{GENAI_VERSION, Run};
use crate::golden::{GenerationGolden, PrefillGolden};
use crate::report::{self, Context};
use crate::tolerance::Tolerance;
use crate::trial::{Outcome, Status};
use crate::verdict;

/// The L4 side: the golden, its full logits when it has them, the tolerance; the same for L5.
pub struct Goldens<'a> {
    pub prefill: Option<(&'a PrefillGolden, Option<&'a [f32]>, &'a Tolerance, &'a str)>,
    pub generation: Option<(&'a GenerationGolden, &'a Tolerance, &'a str)>,
}

/// The worst of both verdicts, with both reports under one heading that says genai computed them.
pub fn judge(ctx: &Context, run: &Run, goldens: &Goldens) -> Outcome {
    let mut message = format!(
        "{}: genai: the package as onnxruntime-genai {GENAI_VERSION} runs it ({}), greedy, {} generated tokens\n",
        ctx.trial,
        run.library.display(),
        run.tokens.len()
    );
    let mut status = Status::Pass;
    let mut max_abs_diff = None;
    let mut first_divergence = None;
    if let Some((golden, full, tol, file)) = goldens.prefill {
        let r = verdict::judge_prefill(&run.prefill_logits, golden, full, tol);
        max_abs_diff = r.comparison.as_ref().map(|c| c.max_abs).or(r.worst.map(|(_, w, g)| (g - w).abs()));
        status = status.max(r.verdict.into());
        message.push_str(&report::prefill(&Context { golden_file: file, ..*ctx }, &r));
    }
    if let Some((golden, tol, file)) = goldens.generation {
        let r = verdict::judge_generation(&run.tokens, golden, None, tol);
        first_divergence = r.first_divergence.as_ref().map(|d| d.index);
        status = status.max(r.verdict.into());
        message.push_str(&report::generation(&Context { golden_file: file, ..*ctx }, &r));
    }
    Outcome { status, message, max_abs_diff, first_divergence, snapshot: None, detail: None }
}
