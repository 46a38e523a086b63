//! The `genai` level's verdict: what onnxruntime-genai computed from the package (its config, model and greedy
//! generator) against the goldens. Pure: genai's outputs and goldens in, a judgement out.
//!
//! The prefill logits are judged as L4 judges the suite's own runner (the dtype's L4 tolerance), the tokens as L5
//! does (the dtype's match ratio), so a package that only genai runs wrong fails here and nowhere else.

use std::path::PathBuf;

use crate::judge::golden::{GenerationGolden, PrefillGolden};
use crate::judge::prefill::{self, PrefillReport};
use crate::judge::stream::{self, GenerationReport};
use crate::judge::tolerance::Tolerance;
use crate::judge::verdict::Verdict;
use crate::outcome::{Failure, FailureKind};
use crate::vocab::Modality;

/// The L4 side: the golden, its full logits when it has them, the tolerance, its file; the same for L5.
pub struct Goldens<'a> {
    pub prefill: Option<(&'a PrefillGolden, Option<&'a [f32]>, &'a Tolerance, &'a str)>,
    pub generation: Option<(&'a GenerationGolden, &'a Tolerance, &'a str)>,
}

/// How genai was fed: a text prompt's ids appended to its generator, or a media prompt through its processor.
#[derive(Debug, Clone, PartialEq)]
pub enum Feed {
    Ids { library: PathBuf, version: &'static str, generated: usize },
    Processor { modality: Modality },
}

/// genai's processor built another prompt than Hugging Face's (its render module words the reason: both lengths
/// and where they part).
#[derive(Debug, Clone, PartialEq)]
pub struct PromptDifference {
    pub hf: Vec<i64>,
    pub genai: Vec<i64>,
    /// The first position where they differ (the shorter one's length when one is the other's prefix).
    pub at: usize,
    pub hf_text: String,
    pub genai_text: String,
}

/// The genai level's judgement: the worst of its verdicts, each with the golden file it was judged against.
#[derive(Debug, Clone, PartialEq)]
pub struct GenaiReport {
    pub feed: Feed,
    pub status: Verdict,
    pub prompt: Option<PromptDifference>,
    pub prefill: Option<(PrefillReport, String)>,
    pub generation: Option<(GenerationReport, String)>,
    /// What an xfail entry can expect: the prompt, else the prefill's logits, else the stream's tokens.
    pub failure: Option<Failure>,
    pub max_abs_diff: Option<f64>,
    pub first_divergence: Option<usize>,
}

fn worst(a: Verdict, b: Verdict) -> Verdict {
    let rank = |v: Verdict| match v {
        Verdict::Pass => 0,
        Verdict::Ambiguous => 1,
        Verdict::Fail => 2,
    };
    if rank(b) > rank(a) { b } else { a }
}

/// Judges what genai computed: its prompt (when its processor built it), its prefill logits as L4 judges the
/// suite's own runner, its tokens as L5 does.
pub fn judge(
    feed: Feed,
    prompt: Option<PromptDifference>,
    prefill_logits: Option<&[f32]>,
    tokens: &[i64],
    goldens: &Goldens,
) -> GenaiReport {
    let mut status = Verdict::Pass;
    let mut failure = None;
    if prompt.is_some() {
        status = Verdict::Fail;
        failure = Some(Failure::of(FailureKind::Prompt));
    }
    let mut max_abs_diff = None;
    let prefill = match (goldens.prefill, prefill_logits) {
        (Some((golden, full, tol, file)), Some(logits)) => {
            let r = prefill::judge_prefill(logits, golden, full, tol);
            max_abs_diff = r.comparison.as_ref().map(|c| c.max_abs).or(r.worst.map(|(_, w, g)| (g - w).abs()));
            if r.verdict == Verdict::Fail && failure.is_none() {
                failure = Some(Failure::prefill(max_abs_diff));
            }
            status = worst(status, r.verdict);
            Some((r, file.to_string()))
        }
        _ => None,
    };
    let mut first_divergence = None;
    let generation = goldens.generation.map(|(golden, tol, file)| {
        let r = stream::judge_generation(tokens, golden, None, tol);
        let first_step = r.first_divergence.as_ref().map(|d| d.index);
        if r.verdict == Verdict::Fail && failure.is_none() {
            failure = Some(Failure { first_step, ..Failure::of(FailureKind::Tokens) });
        }
        status = worst(status, r.verdict);
        first_divergence = first_step;
        (r, file.to_string())
    });
    // A media prompt's stream is judged for its tokens alone (no prefill logits, no diff to report).
    if matches!(feed, Feed::Processor { .. }) {
        first_divergence = None;
    }
    GenaiReport { feed, status, prompt, prefill, generation, failure, max_abs_diff, first_divergence }
}

/// How genai's processor prompt differs from Hugging Face's, if it does.
pub fn prompt_difference(hf: &[i64], genai: &[i64], text: &dyn Fn(&[i64]) -> String) -> Option<PromptDifference> {
    if hf == genai {
        return None;
    }
    let at = hf.iter().zip(genai).position(|(a, b)| a != b).unwrap_or(hf.len().min(genai.len()));
    Some(PromptDifference { hf: hf.to_vec(), genai: genai.to_vec(), at, hf_text: text(hf), genai_text: text(genai) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_difference_names_where_the_ids_part() {
        let d = prompt_difference(&[1, 2, 3], &[1, 9, 2, 3], &|ids: &[i64]| format!("{ids:?}")).unwrap();
        assert_eq!((d.at, d.genai.as_slice(), d.genai_text.as_str()), (1, &[1, 9, 2, 3][..], "[1, 9, 2, 3]"));
        assert_eq!(prompt_difference(&[1], &[1], &|_: &[i64]| String::new()), None);
    }
}
