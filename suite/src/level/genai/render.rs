//! The genai level's words: how genai was fed, then its prompt difference and the L4 and L5 reports it was judged
//! by (their words are `report::verdict`'s), under one heading that says genai computed them; and its refusal.

use std::fmt::Write;

use super::judge::{Feed, GenaiReport, PromptDifference};
use crate::outcome::{Judgement, NumbersTable, Outcome};
use crate::report::Context;
use crate::report::verdict::{generation, prefill};

/// What a failing genai trial measured: its largest logit difference and where its stream diverged.
pub fn measured(o: &Outcome) -> Option<String> {
    let step = o.first_divergence.map(|d| format!(", first divergence at step {d}"));
    o.max_abs_diff.map(|d| format!("max |logit diff| {d:.3e}{}", step.unwrap_or_default()))
}

/// The reason a prompt difference gives: both lengths and where they part.
fn prompt_reason(d: &PromptDifference) -> String {
    format!(
        "genai's processor built another prompt than Hugging Face's: {} ids against {}, first different at position {}",
        d.genai.len(),
        d.hf.len(),
        d.at
    )
}

impl Judgement for GenaiReport {
    /// Every verdict's reasons, in the order the message prints them.
    fn reasons(&self) -> Vec<String> {
        let prompt = self.prompt.iter().map(prompt_reason);
        let prefill = self.prefill.iter().flat_map(|(r, _)| r.reasons.iter().map(ToString::to_string));
        prompt.chain(prefill).chain(self.generation.iter().flat_map(|(r, _)| r.reasons.iter().map(ToString::to_string))).collect()
    }

    fn summary_row(&self) -> Option<(&'static NumbersTable, String)> {
        None
    }
}

/// The genai level's report: how genai was fed, then its prompt difference and the L4 and L5 reports it was judged
/// by, under one heading that says genai computed them.
pub fn message(ctx: &Context, r: &GenaiReport) -> String {
    let mut s = match &r.feed {
        Feed::Ids { library, version, generated } => format!(
            "{}: genai: the package as onnxruntime-genai {version} runs it ({}), greedy, {generated} generated tokens\n",
            ctx.trial,
            library.display()
        ),
        Feed::Processor { modality } => format!("{}: genai: {modality} prompt through onnxruntime-genai's own processor\n", ctx.trial),
    };
    if let Some(d) = &r.prompt {
        let _ = write!(
            s,
            "  - {}\n  Hugging Face ids: {:?}\n  genai ids:        {:?}\n  Hugging Face text: {:?}\n  genai text:        {:?}\n",
            prompt_reason(d),
            d.hf,
            d.genai,
            d.hf_text,
            d.genai_text
        );
    }
    if let Some((p, file)) = &r.prefill {
        s.push_str(&prefill(&Context { golden_file: file, next: ctx.next.clone(), ..*ctx }, p));
    }
    if let Some((g, file)) = &r.generation {
        s.push_str(&generation(&Context { golden_file: file, next: ctx.next.clone(), ..*ctx }, g));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_difference_is_worded_with_both_lengths_and_where_they_part() {
        let d = super::super::judge::prompt_difference(&[1, 2, 3], &[1, 9, 2, 3], &|ids: &[i64]| format!("{ids:?}")).unwrap();
        assert_eq!(
            prompt_reason(&d),
            "genai's processor built another prompt than Hugging Face's: 4 ids against 3, first different at position 1"
        );
    }
}
