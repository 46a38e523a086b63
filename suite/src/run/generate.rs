//! Prefill and greedy generation with the KV cache, over a [`Decoder`] and the package's [`Pipeline`].

use crate::error::{Result, bail};
use crate::run::decoder::{Decoder, StepOutput};
use crate::run::pipeline::Pipeline;
use mobius_numeric::{PositionLogits, Step, TopK, argmax, scan_row};

/// Last-position logits of a prefill over `ids`.
pub fn prefill(decoder: &Decoder, pipeline: &Pipeline, ids: &[i64]) -> Result<Vec<f32>> {
    let mut cache = decoder.new_cache_with(pipeline.context())?;
    let out = decoder.step(pipeline.input(ids, true)?, &mut cache)?;
    Ok(out.logits)
}

/// [`prefill`], and every prompt position in brief: its logits at `watch[p]` (the golden's ids for position `p`) and
/// its logsumexp.
pub fn prefill_positions(decoder: &Decoder, pipeline: &Pipeline, ids: &[i64], watch: &[&[i64]]) -> Result<(Vec<f32>, Vec<PositionLogits>)> {
    let (out, positions) = decoder.prefill_positions(pipeline.input(ids, true)?, pipeline.context(), watch)?;
    Ok((out.logits, positions))
}

/// The logits of the last `rows` positions of a prefill over `ids`.
pub fn prefill_rows(decoder: &Decoder, pipeline: &Pipeline, ids: &[i64], rows: usize) -> Result<StepOutput> {
    let past = decoder.new_cache_with(pipeline.context())?;
    let (out, _) = decoder.forward(pipeline.input(ids, true)?, &past, rows)?;
    Ok(out)
}

/// A greedy run: what the package chose at every step.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    /// Tokens fed back: the package's choices, or the forced ones when teacher-forced.
    pub tokens: Vec<i64>,
    pub steps: Vec<Step>,
    /// The prefill's last-position logits (step 0), kept whole for the L4 comparison.
    pub prefill_logits: Vec<f32>,
}

impl Generated {
    pub fn chosen(&self) -> Vec<i64> {
        self.steps.iter().map(|s| s.chosen).collect()
    }
}

/// Token ids greedy decoding never chooses, as Hugging Face's `generate()` applies them from a model's
/// `generation_config.json` (`suppress_tokens` at every step, `begin_suppress_tokens` at the first generated one:
/// Whisper's). The logits themselves are kept raw: only the choice skips these ids.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Suppress {
    pub always: Vec<i64>,
    pub at_begin: Vec<i64>,
}

impl Suppress {
    /// The argmax of `logits` over the ids step `step` may choose (the plain argmax when nothing is suppressed).
    /// `top`, the row's top-k when every logit in it is finite, decides without another pass over the row unless
    /// every id in it is banned: the row's best allowed id is then the first allowed one in `top` (larger logit
    /// first, the lower id on ties, as the full scan prefers).
    pub fn choose(&self, logits: &[f32], step: usize, top: Option<&TopK>) -> usize {
        let banned = |i: usize| {
            let i = i as i64;
            self.always.contains(&i) || (step == 0 && self.at_begin.contains(&i))
        };
        if let Some(&id) = top.and_then(|t| t.ids.iter().find(|&&id| !banned(id as usize))) {
            return id as usize;
        }
        if self.always.is_empty() && (step > 0 || self.at_begin.is_empty()) {
            return argmax(logits);
        }
        // As `argmax`: the first of equal maxima; a NaN row keeps the first allowed id.
        let mut best: Option<(usize, f32)> = None;
        for (i, &x) in logits.iter().enumerate().filter(|&(i, _)| !banned(i)) {
            if best.is_none_or(|(_, b)| x > b) {
                best = Some((i, x));
            }
        }
        best.map_or(0, |(i, _)| i)
    }
}

/// Greedy decoding: up to `max_new_tokens`, stopping after an EOS token (which is kept, as Hugging Face does).
/// With `forced`, the given tokens are fed back instead of the package's choices (teacher forcing), and the run
/// lasts exactly `forced.len()` steps, so every step can be compared with the reference's. Step `i` keeps the logits
/// at `watch[i]`'s ids (an id outside the vocabulary reads NaN; no watch list keeps none).
pub fn greedy(
    decoder: &Decoder,
    pipeline: &Pipeline,
    prompt: &[i64],
    max_new_tokens: usize,
    eos: &[i64],
    forced: Option<&[i64]>,
    watch: &[&[i64]],
) -> Result<Generated> {
    greedy_with(decoder, pipeline, prompt, max_new_tokens, eos, forced, watch, &Suppress::default())
}

/// [`greedy`], never choosing the ids `suppress` bans.
#[allow(clippy::too_many_arguments)]
pub fn greedy_with(
    decoder: &Decoder,
    pipeline: &Pipeline,
    prompt: &[i64],
    max_new_tokens: usize,
    eos: &[i64],
    forced: Option<&[i64]>,
    watch: &[&[i64]],
    suppress: &Suppress,
) -> Result<Generated> {
    let limit = forced.map_or(max_new_tokens, <[i64]>::len);
    check_budget(limit)?;
    let mut run = decoder.start_with(prompt.len() + limit, pipeline.context())?;
    let prefill_logits = decoder.advance(&mut run, pipeline.input(prompt, true)?)?.to_vec();
    let mut tokens: Vec<i64> = Vec::with_capacity(limit);
    let mut steps = Vec::with_capacity(limit);
    for i in 0..limit {
        let logits = match tokens.last() {
            None => &prefill_logits[..],
            Some(&fed) => pipeline.advance_token(decoder, &mut run, fed)?,
        };
        let watched = watch.get(i).map_or_else(Vec::new, |ids| {
            ids.iter().map(|&id| usize::try_from(id).ok().and_then(|id| logits.get(id)).copied().unwrap_or(f32::NAN)).collect()
        });
        let step = choose_step(logits, i, suppress, watched);
        let chosen = step.chosen;
        steps.push(step);
        let next = forced.map_or(chosen, |f| f[i]);
        tokens.push(next);
        if forced.is_none() && eos.contains(&next) {
            break;
        }
    }
    Ok(Generated { tokens, steps, prefill_logits })
}

/// Refuses a run of more than [`crate::vocab::MAX_NEW_TOKENS`] new tokens.
pub fn check_budget(limit: usize) -> Result<()> {
    if limit > crate::vocab::MAX_NEW_TOKENS as usize {
        bail!(
            "asked for {limit} new tokens; at most {} are generated (a case or golden past that is refused)",
            crate::vocab::MAX_NEW_TOKENS
        );
    }
    Ok(())
}

/// Greedy step `step` of a run over its logits row: one pass over the row gives what the step keeps (its top-10,
/// whether it is finite), and the choice, never an id `suppress` bans, reads that top-k unless the row is not finite.
pub fn choose_step(logits: &[f32], step: usize, suppress: &Suppress, watched: Vec<f32>) -> Step {
    let (top, non_finite) = scan_row(logits, 10);
    let chosen = suppress.choose(logits, step, non_finite.is_none().then_some(&top)) as i64;
    Step { chosen, top, watched, non_finite }
}
