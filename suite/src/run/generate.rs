//! Prefill and greedy generation with the KV cache, over a [`Decoder`].

use std::sync::Arc;

use ort::session::SessionInputValue;
use ort::value::{DynValue, Tensor};

use crate::error::{Error, Result, bail};
use crate::feed::package::Component;
use crate::numeric::{PositionLogits, Step, TopK, argmax, scan_row};
use crate::run::runtime::{Decoder, Encoder, StepInput};

/// Turns token ids into what the decoder takes: the ids themselves, or embeddings from the package's embedding
/// session, with the media features on the prompt step only; or, for an encoder-decoder, the ids with the
/// encoder's states that every call reads (bound once per stream).
pub enum Front<'a> {
    Ids,
    Embedding(&'a Embedder),
    CrossAttention(&'a Features),
}

/// An encoder's output, kept on the host: fed to the embedding session once, compared with the reference's.
#[derive(Debug, Clone, PartialEq)]
pub struct Features {
    pub shape: Vec<i64>,
    pub data: Vec<f32>,
}

impl Features {
    /// An encoder output as f32 (a half-precision build's, widened exactly).
    pub fn from_value(v: &DynValue, what: &str) -> Result<Features> {
        let err = |e: ort::Error| Error::new(format!("{what}: {e}"));
        if let Ok((shape, data)) = v.try_extract_tensor::<half::f16>() {
            return Ok(Features { shape: shape.to_vec(), data: data.iter().map(|x| x.to_f32()).collect() });
        }
        if let Ok((shape, data)) = v.try_extract_tensor::<half::bf16>() {
            return Ok(Features { shape: shape.to_vec(), data: data.iter().map(|x| x.to_f32()).collect() });
        }
        let (shape, data) = v.try_extract_tensor::<f32>().map_err(err)?;
        Ok(Features { shape: shape.to_vec(), data: data.to_vec() })
    }

    /// The same shape, all zeros: the features of media that carry no information.
    pub fn zeroed(&self) -> Features {
        Features { shape: self.shape.clone(), data: vec![0.0; self.data.len()] }
    }
}

/// The embedding session of a multimodal package, and the media features of the prompt.
#[derive(Clone)]
pub struct Embedder {
    pub session: Arc<Encoder>,
    pub component: Component,
    /// Encoder outputs [tokens, hidden]; `None` for an absent modality (fed as an empty [0, hidden] tensor).
    pub image_features: Option<Features>,
    pub audio_features: Option<Features>,
    pub hidden: i64,
}

impl Front<'_> {
    /// The encoder states an encoder-decoder's decoder reads; `None` for a decoder-only model.
    pub fn context(&self) -> Option<&Features> {
        match self {
            Front::CrossAttention(f) => Some(f),
            Front::Ids | Front::Embedding(_) => None,
        }
    }

    pub fn input(&self, ids: &[i64], prompt_step: bool) -> Result<StepInput> {
        let Front::Embedding(e) = self else { return Ok(StepInput::Ids(ids.to_vec())) };
        let c = &e.component;
        let model = e.session.model.display();
        let tensor_err = |err: ort::Error| Error::new(format!("{model}: {err}"));
        let empty = Features { shape: vec![0, e.hidden], data: Vec::new() };
        let media = |f: &Option<Features>| -> Result<SessionInputValue<'static>> {
            let f = f.as_ref().filter(|_| prompt_step).unwrap_or(&empty);
            Ok(Tensor::<f32>::from_array((f.shape.clone(), f.data.clone())).map_err(tensor_err)?.into())
        };
        let feeds = vec![
            (
                c.input("input_ids").to_string(),
                Tensor::<i64>::from_array(([1, ids.len() as i64], ids.to_vec())).map_err(tensor_err)?.into(),
            ),
            (c.input("image_features").to_string(), media(&e.image_features)?),
            (c.input("audio_features").to_string(), media(&e.audio_features)?),
        ];
        let mut out = e.session.run(feeds, &[c.output("inputs_embeds"), c.output("per_layer_inputs")])?.into_iter();
        let (embeds, per_layer) = (out.next().expect("asked for two outputs"), out.next());
        Ok(StepInput::Embeds { embeds, per_layer, len: ids.len() })
    }
}

/// Last-position logits of a prefill over `ids`.
pub fn prefill(decoder: &Decoder, front: &Front, ids: &[i64]) -> Result<Vec<f32>> {
    let mut cache = decoder.new_cache_with(front.context())?;
    let out = decoder.step(front.input(ids, true)?, &mut cache)?;
    Ok(out.logits)
}

/// [`prefill`], and every prompt position in brief: its logits at `watch[p]` (the golden's ids for position `p`) and
/// its logsumexp.
pub fn prefill_positions(decoder: &Decoder, front: &Front, ids: &[i64], watch: &[&[i64]]) -> Result<(Vec<f32>, Vec<PositionLogits>)> {
    let (out, positions) = decoder.prefill_positions(front.input(ids, true)?, front.context(), watch)?;
    Ok((out.logits, positions))
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
    front: &Front,
    prompt: &[i64],
    max_new_tokens: usize,
    eos: &[i64],
    forced: Option<&[i64]>,
    watch: &[&[i64]],
) -> Result<Generated> {
    greedy_with(decoder, front, prompt, max_new_tokens, eos, forced, watch, &Suppress::default())
}

/// [`greedy`], never choosing the ids `suppress` bans.
#[allow(clippy::too_many_arguments)]
pub fn greedy_with(
    decoder: &Decoder,
    front: &Front,
    prompt: &[i64],
    max_new_tokens: usize,
    eos: &[i64],
    forced: Option<&[i64]>,
    watch: &[&[i64]],
    suppress: &Suppress,
) -> Result<Generated> {
    let limit = forced.map_or(max_new_tokens, <[i64]>::len);
    check_budget(limit)?;
    let mut run = decoder.start_with(prompt.len() + limit, front.context())?;
    let prefill_logits = decoder.advance(&mut run, front.input(prompt, true)?)?.to_vec();
    let mut tokens: Vec<i64> = Vec::with_capacity(limit);
    let mut steps = Vec::with_capacity(limit);
    for i in 0..limit {
        let logits = match tokens.last() {
            None => &prefill_logits[..],
            Some(&fed) => match front {
                Front::Ids | Front::CrossAttention(_) => decoder.advance_token(&mut run, fed)?,
                Front::Embedding(_) => decoder.advance(&mut run, front.input(&[fed], false)?)?,
            },
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

/// Runs a package's vision encoder: `pixel_values` as stored (uint8: the processor's values are exactly
/// `f32(u8) * f32(1/255)`) with shape [1, patches, 3 * patch^2], and `pixel_position_ids` [1, patches, 2].
pub fn encode_image(vision: &Encoder, c: &Component, pixels: (&[i64], &[u8]), positions: (&[i64], &[i64])) -> Result<Features> {
    let err = |e: ort::Error| Error::new(format!("{}: {e}", vision.model.display()));
    // Exactly what the processor computes (u8 times the f32 nearest 1/255); dividing by 255 differs in the last bit.
    let scaled: Vec<f32> = pixels.1.iter().map(|&p| p as f32 * (1.0f32 / 255.0)).collect();
    let feeds = vec![
        (c.input("pixel_values").to_string(), Tensor::<f32>::from_array((pixels.0.to_vec(), scaled)).map_err(err)?.into()),
        (
            c.input("pixel_position_ids").to_string(),
            Tensor::<i64>::from_array((positions.0.to_vec(), positions.1.to_vec())).map_err(err)?.into(),
        ),
    ];
    Features::from_value(&vision.run(feeds, &[c.output("image_features")])?.remove(0), "vision_encoder")
}

/// Runs a package's audio encoder on log-mel `input_features` [1, frames, mels] and their mask [1, frames].
pub fn encode_audio(audio: &Encoder, c: &Component, features: (&[i64], &[f32]), mask: (&[i64], &[bool])) -> Result<Features> {
    let err = |e: ort::Error| Error::new(format!("{}: {e}", audio.model.display()));
    let feeds = vec![
        (c.input("audio_embeds").to_string(), Tensor::<f32>::from_array((features.0.to_vec(), features.1.to_vec())).map_err(err)?.into()),
        (c.input("attention_mask").to_string(), Tensor::<bool>::from_array((mask.0.to_vec(), mask.1.to_vec())).map_err(err)?.into()),
    ];
    Features::from_value(&audio.run(feeds, &[c.output("audio_features")])?.remove(0), "audio_encoder")
}
