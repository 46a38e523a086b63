//! The encoder-decoder pipeline (Whisper, mobius' `speech-to-text`): the stored log-mel `input_features` go through
//! the package's encoder once; its states are what the decoder's cross-attention reads at every step, so the
//! decoder runs with them bound once per stream and its self-attention cache kept warm, as the text path does.

use std::path::Path;

use crate::error::{Result, bail};
use crate::feed::inputs::Inputs;
use crate::feed::package::GenaiConfig;
use crate::run::decoder::Decoder;
use crate::run::decoder::io::DecoderIo;
use crate::run::encoder_session::Features;
use crate::run::encoders;
use crate::run::runtime::Provider;
use crate::vocab::Modality;

/// Whether a package is an encoder-decoder one: its genai_config.json names an encoder or its decoder reads the
/// encoder's states.
pub fn is_encoder_decoder(cfg: &GenaiConfig, io: &DecoderIo) -> bool {
    cfg.encoder.is_some() || io.context.is_some()
}

/// Runs the package's encoder on the stored `input_features` [1, mels, frames]: the states the decoder reads.
pub fn encode(package: &Path, cfg: &GenaiConfig, decoder: &Decoder, provider: Provider, inputs: &Inputs, file: &str) -> Result<Features> {
    let shown = package.display();
    let c = &encoders::encoder_component(cfg);
    if !package.join(&c.file).is_file() {
        bail!("{shown}: the decoder reads encoder states, but genai_config.json names no `model.encoder` and there is no {}", c.file);
    }
    if decoder.io.context.is_none() {
        bail!("{shown}: genai_config.json names an encoder, but the decoder takes no `encoder_hidden_states` input");
    }
    encoders::speech(package, c, provider, inputs, file)
}

/// The encoder states zeroed, for the encoder level's check that they reach the decoder: an encoder-decoder's one
/// encoder is its audio encoder (`component` names the one asked for, in errors).
pub fn zeroed(states: &Features, media: Modality, component: &str) -> Result<Features> {
    if media != Modality::Audio {
        bail!("{component}: an encoder-decoder package has an audio encoder only");
    }
    Ok(states.zeroed())
}
