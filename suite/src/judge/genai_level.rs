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
use crate::verdict::{self, Verdict};
use crate::xfail::{Failure, FailureKind};

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
    // What an xfail entry can expect: the prefill's logits when they fail, else the stream's tokens.
    let mut failure = None;
    if let Some((golden, full, tol, file)) = goldens.prefill {
        let r = verdict::judge_prefill(&run.prefill_logits, golden, full, tol);
        max_abs_diff = r.comparison.as_ref().map(|c| c.max_abs).or(r.worst.map(|(_, w, g)| (g - w).abs()));
        if r.verdict == Verdict::Fail {
            failure = Some(Box::new(Failure::prefill(max_abs_diff)));
        }
        status = status.max(r.verdict.into());
        message.push_str(&report::prefill(&Context { golden_file: file, ..*ctx }, &r));
    }
    if let Some((golden, tol, file)) = goldens.generation {
        let r = verdict::judge_generation(&run.tokens, golden, None, tol);
        first_divergence = r.first_divergence.as_ref().map(|d| d.index);
        if r.verdict == Verdict::Fail && failure.is_none() {
            failure = Some(Box::new(Failure {
                kind: FailureKind::Tokens,
                max_abs_diff: None,
                first_step: first_divergence,
                first_position: None,
            }));
        }
        status = status.max(r.verdict.into());
        message.push_str(&report::generation(&Context { golden_file: file, ..*ctx }, &r));
    }
    Outcome { status, message, max_abs_diff, first_divergence, snapshot: None, detail: None, failure }
}

/// The prompt a processor is given, from the ids the Hugging Face processor made of it: every expanded media block
/// (`<begin> <soft> x n <end>`, a run of one repeated id between two others) back to its one placeholder (`<soft>`).
pub fn placeholder_ids(expanded: &[i64]) -> Vec<i64> {
    let mut out = Vec::with_capacity(expanded.len());
    let mut i = 0;
    while i < expanded.len() {
        let id = expanded[i];
        let run = expanded[i..].iter().take_while(|&&x| x == id).count();
        if run >= 2 && i > 0 && i + run < expanded.len() {
            // Drop the block's opening token (already pushed) and its closing one.
            out.pop();
            out.push(id);
            i += run + 1;
        } else {
            out.push(id);
            i += 1;
        }
    }
    out
}

/// The failure message for a processor prompt that is not Hugging Face's: both, as ids and as text, and where they
/// part. `None` when they are equal.
pub fn prompt_difference(hf: &[i64], genai: &[i64], text: &dyn Fn(&[i64]) -> String) -> Option<String> {
    if hf == genai {
        return None;
    }
    let at = hf.iter().zip(genai).position(|(a, b)| a != b).unwrap_or(hf.len().min(genai.len()));
    Some(format!(
        "genai's processor built another prompt than Hugging Face's: {} ids against {}, first different at position {at}\n  \
         Hugging Face ids: {hf:?}\n  genai ids:        {genai:?}\n  Hugging Face text: {:?}\n  genai text:        {:?}\n",
        genai.len(),
        hf.len(),
        text(hf),
        text(genai)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_blocks_collapse_to_their_placeholder() {
        // <bos> <turn> user \n <|image> <|image|> x3 <image|> text
        assert_eq!(placeholder_ids(&[2, 11, 97, 4, 6, 6, 6, 5, 300]), [2, 11, 97, 6, 300]);
        assert_eq!(placeholder_ids(&[2, 4, 6, 6, 5, 8, 10, 10, 9, 1]), [2, 6, 10, 1]);
        assert_eq!(placeholder_ids(&[2, 11, 97]), [2, 11, 97]);
        let d = prompt_difference(&[1, 2, 3], &[1, 9, 2, 3], &|ids: &[i64]| format!("{ids:?}")).unwrap();
        assert!(d.contains("first different at position 1") && d.contains("[1, 9, 2, 3]"), "{d}");
        assert_eq!(prompt_difference(&[1], &[1], &|_: &[i64]| String::new()), None);
    }
}
