//! How a trial's tokens reach the decoder, one module per family of package, chosen once (`Family::of`) from the
//! package's genai_config.json and what its decoder takes: a text decoder fed ids ([`text`]); media encoders and an
//! embedding session in front of a decoder fed embeddings ([`multimodal`]); an encoder whose states the decoder
//! reads at every step ([`encoder_decoder`], Whisper). The decode loops ask the pipeline, never the family.

pub mod encoder_decoder;
pub mod multimodal;
pub mod text;

use std::path::Path;

use crate::error::{Result, bail};
use crate::feed::inputs::Inputs;
use crate::feed::package::GenaiConfig;
use crate::run::decoder::generation::Generation;
use crate::run::decoder::io::{DecoderIo, TokenInput};
use crate::run::decoder::{Decoder, StepInput};
use crate::run::encoder_session::Features;
use crate::run::pipeline::multimodal::Embedder;
use crate::run::runtime::Provider;
use crate::vocab::Modality;

/// A package's pipeline with what its encoders computed from one input.
pub enum Pipeline {
    /// Token ids straight into a decoder-only model.
    Text,
    /// The embedding session in front of the decoder, with the media features of the prompt.
    Multimodal(Embedder),
    /// An encoder-decoder's encoder states, read by its decoder with every call.
    EncoderDecoder(Features),
}

/// Which pipeline a package runs, with the genai_config.json that names its sessions.
#[derive(Debug, Clone, PartialEq)]
enum Family {
    Text,
    Multimodal(GenaiConfig),
    EncoderDecoder(GenaiConfig),
}

impl Family {
    /// The family of `package`, from its genai_config.json (if it has one) and its decoder's inputs: the one place
    /// that decides it.
    fn of(package: &Path, config: Option<GenaiConfig>, io: &DecoderIo) -> Result<Family> {
        match config {
            Some(c) if encoder_decoder::is_encoder_decoder(&c, io) => Ok(Family::EncoderDecoder(c)),
            _ if io.context.is_some() => {
                bail!(
                    "{}: the decoder reads encoder states, but the package has no genai_config.json naming its encoder",
                    package.display()
                )
            }
            _ if io.token_input == TokenInput::Ids => Ok(Family::Text),
            Some(c) => Ok(Family::Multimodal(c)),
            None => bail!("{}: no genai_config.json: its embedding session is not named", package.display()),
        }
    }
}

impl Pipeline {
    /// The pipeline of `package` on one input: its family chosen, then its encoders run on `inputs` (`file` names
    /// the stored tensors in errors).
    pub fn build(package: &Path, decoder: &Decoder, provider: Provider, inputs: &Inputs, file: &str) -> Result<Pipeline> {
        Ok(match Family::of(package, GenaiConfig::load_if_present(package)?, &decoder.io)? {
            Family::Text => {
                text::check(package, inputs)?;
                Pipeline::Text
            }
            Family::Multimodal(cfg) => Pipeline::Multimodal(multimodal::build(package, &cfg, provider, inputs, file)?),
            Family::EncoderDecoder(cfg) => {
                Pipeline::EncoderDecoder(encoder_decoder::encode(package, &cfg, decoder, provider, inputs, file)?)
            }
        })
    }

    /// The encoder states an encoder-decoder's decoder reads; `None` for a decoder-only model.
    pub fn context(&self) -> Option<&Features> {
        match self {
            Pipeline::EncoderDecoder(states) => Some(states),
            Pipeline::Text | Pipeline::Multimodal(_) => None,
        }
    }

    /// What the decoder is fed for `ids`: the ids themselves, or their embeddings (with the media features on the
    /// prompt step only).
    pub fn input(&self, ids: &[i64], prompt_step: bool) -> Result<StepInput> {
        match self {
            Pipeline::Multimodal(e) => e.input(ids, prompt_step),
            Pipeline::Text | Pipeline::EncoderDecoder(_) => Ok(StepInput::Ids(ids.to_vec())),
        }
    }

    /// One decode step of a generation: `token` fed after what `g` holds; its logits.
    pub fn advance_token<'g>(&self, decoder: &Decoder, g: &'g mut Generation, token: i64) -> Result<&'g [f32]> {
        match self {
            Pipeline::Text | Pipeline::EncoderDecoder(_) => decoder.advance_token(g, token),
            Pipeline::Multimodal(e) => decoder.advance(g, e.input(&[token], false)?),
        }
    }

    /// Whether the decoder is fed token ids (not embeddings), so that many tokens can be checked in one call.
    pub fn feeds_ids(&self) -> bool {
        !matches!(self, Pipeline::Multimodal(_))
    }

    /// Whether greedy decoding skips the ids the model's generation_config.json suppresses, as Hugging Face's
    /// `generate()` does for an encoder-decoder (Whisper's `suppress_tokens` and `begin_suppress_tokens`).
    pub fn suppresses_tokens(&self) -> bool {
        matches!(self, Pipeline::EncoderDecoder(_))
    }

    /// What the encoder of `media` (image or audio) computed from the stored inputs, and the prompt's last logits
    /// with its features and with them zeroed (the check that the media reach the decoder). `component` names the
    /// encoder in errors.
    pub fn component_outputs(
        &self,
        media: Modality,
        component: &str,
        prefill: impl Fn(&Pipeline) -> Result<Vec<f32>>,
    ) -> Result<ComponentRun> {
        let (got, zeroed) = match self {
            Pipeline::EncoderDecoder(states) => (states, Pipeline::EncoderDecoder(encoder_decoder::zeroed(states, media, component)?)),
            Pipeline::Multimodal(e) => {
                let (got, zeroed) = e.zeroed(media, component)?;
                (got, Pipeline::Multimodal(zeroed))
            }
            Pipeline::Text => bail!("{component}: the package has no embedding session"),
        };
        let with = prefill(self)?;
        let zeroed = prefill(&zeroed)?;
        Ok(ComponentRun { shape: got.shape.clone(), features: got.data.clone(), with, zeroed })
    }
}

/// An encoder's outputs: its features, and the prompt's last logits with them and with them zeroed.
pub struct ComponentRun {
    pub shape: Vec<i64>,
    pub features: Vec<f32>,
    pub with: Vec<f32>,
    pub zeroed: Vec<f32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::package::Component;
    use crate::run::decoder::io::{ContextInput, DecoderNames, Float};

    fn io(token_input: TokenInput, context: bool) -> DecoderIo {
        let name = |n: &str| n.to_string();
        DecoderIo {
            names: DecoderNames {
                input_ids: name("input_ids"),
                inputs_embeds: name("inputs_embeds"),
                per_layer_inputs: name("per_layer_inputs"),
                attention_mask: name("attention_mask"),
                position_ids: name("position_ids"),
                logits: name("logits"),
            },
            token_input,
            has_attention_mask: true,
            has_position_ids: false,
            context: context.then(|| ContextInput { name: name("encoder_hidden_states"), ty: Float::F32, shape: vec![1, -1, 32] }),
            cache: Vec::new(),
            cache_type: Float::F32,
            logits_type: Float::F32,
            vocab: None,
        }
    }

    #[test]
    fn the_family_is_decided_by_the_config_and_the_decoders_inputs() {
        let pkg = Path::new("pkg");
        let plain = GenaiConfig::default();
        let with_encoder = GenaiConfig { encoder: Some(Component::default()), ..GenaiConfig::default() };
        let ids = TokenInput::Ids;
        let embeds = TokenInput::Embeds { per_layer: false };
        let of = |config: Option<&GenaiConfig>, d: DecoderIo| Family::of(pkg, config.cloned(), &d);
        assert_eq!(of(None, io(ids, false)).unwrap(), Family::Text);
        assert_eq!(of(Some(&plain), io(ids, false)).unwrap(), Family::Text);
        assert_eq!(of(Some(&plain), io(embeds, false)).unwrap(), Family::Multimodal(plain.clone()));
        // mobius writes no `model.encoder` for Whisper: a decoder reading encoder states is enough, with a config.
        assert_eq!(of(Some(&plain), io(ids, true)).unwrap(), Family::EncoderDecoder(plain.clone()));
        assert_eq!(of(Some(&with_encoder), io(ids, false)).unwrap(), Family::EncoderDecoder(with_encoder.clone()));
        let e = of(None, io(ids, true)).unwrap_err().to_string();
        assert!(e.contains("the decoder reads encoder states, but the package has no genai_config.json naming its encoder"), "{e}");
        let e = of(None, io(embeds, false)).unwrap_err().to_string();
        assert!(e.contains("no genai_config.json: its embedding session is not named"), "{e}");
    }
}
