//! Prefill and greedy generation with the KV cache, over a [`Decoder`].

use crate::error::{Result, bail};
use crate::logits::{TopK, argmax};
use crate::runtime::Decoder;

/// Rejects logits a verdict cannot reason about, naming where the first bad value is.
pub fn check_finite(logits: &[f32], step: usize) -> Result<()> {
    if let Some(i) = logits.iter().position(|x| !x.is_finite()) {
        let n = logits.iter().filter(|x| !x.is_finite()).count();
        bail!("logits at generation step {step} contain {n} non-finite values; first at id {i}: {}", logits[i]);
    }
    Ok(())
}

/// Last-position logits of a prefill over `ids`.
pub fn prefill(decoder: &Decoder, ids: &[i64]) -> Result<Vec<f32>> {
    let mut cache = decoder.new_cache()?;
    let out = decoder.step(ids, &mut cache)?;
    check_finite(&out.last_logits, 0).map_err(|e| e.context(decoder.model.display()))?;
    Ok(out.last_logits)
}

/// One generation step as the package saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The package's own greedy choice at this step.
    pub chosen: i64,
    pub top: TopK,
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

/// Greedy decoding: up to `max_new_tokens`, stopping after an EOS token (which is kept, as Hugging Face does).
/// With `forced`, the given tokens are fed back instead of the package's choices (teacher forcing), and the run
/// lasts exactly `forced.len()` steps, so every step can be compared with the reference's.
pub fn greedy(decoder: &Decoder, prompt: &[i64], max_new_tokens: usize, eos: &[i64], forced: Option<&[i64]>) -> Result<Generated> {
    let mut cache = decoder.new_cache()?;
    let mut logits = decoder.step(prompt, &mut cache)?.last_logits;
    let model = decoder.model.display();
    check_finite(&logits, 0).map_err(|e| e.context(&model))?;
    let prefill_logits = logits.clone();
    let limit = forced.map_or(max_new_tokens, <[i64]>::len);
    let mut tokens = Vec::with_capacity(limit);
    let mut steps = Vec::with_capacity(limit);
    for i in 0..limit {
        let chosen = argmax(&logits) as i64;
        steps.push(Step { chosen, top: TopK::of(&logits, 10) });
        let next = forced.map_or(chosen, |f| f[i]);
        tokens.push(next);
        if i + 1 == limit || (forced.is_none() && eos.contains(&next)) {
            break;
        }
        logits = decoder.step(&[next], &mut cache)?.last_logits;
        check_finite(&logits, i + 1).map_err(|e| e.context(&model))?;
    }
    Ok(Generated { tokens, steps, prefill_logits })
}
