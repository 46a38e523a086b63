//! The encoder-decoder pipeline (Whisper, mobius' `speech-to-text`): the stored log-mel `input_features` go through
//! the package's encoder once; its states are what the decoder's cross-attention reads at every step, so the
//! decoder runs with them bound once per stream and its self-attention cache kept warm, as the text path does.

use std::path::Path;

use ort::value::Tensor;

use crate::error::{Error, Result, bail};
use crate::feed::inputs::{Inputs, TensorData};
use crate::feed::package::{Component, GenaiConfig};
use crate::run::generate::Features;
use crate::run::runtime::{self, Decoder, Provider};

/// Whether a package is an encoder-decoder one: its genai_config.json names an encoder and its decoder reads the
/// encoder's states.
pub fn is_encoder_decoder(cfg: &GenaiConfig, decoder: &Decoder) -> bool {
    cfg.encoder.is_some() || decoder.io.context.is_some()
}

/// The package's encoder: `model.encoder` of its genai_config.json, else `encoder/model.onnx`. mobius-onnx 0.1.0
/// writes no `model.encoder` for Whisper, and that is the file it always builds (named in the error when it is not
/// there either).
pub fn encoder_component(cfg: &GenaiConfig) -> Component {
    cfg.encoder.clone().unwrap_or_else(|| Component { file: "encoder/model.onnx".into(), ..Component::default() })
}

/// Runs the package's encoder on the stored `input_features` [1, mels, frames]: the states the decoder reads.
pub fn encode(package: &Path, cfg: &GenaiConfig, decoder: &Decoder, provider: Provider, inputs: &Inputs, file: &str) -> Result<Features> {
    let shown = package.display();
    let c = &encoder_component(cfg);
    if !package.join(&c.file).is_file() {
        bail!("{shown}: the decoder reads encoder states, but genai_config.json names no `model.encoder` and there is no {}", c.file);
    }
    if decoder.io.context.is_none() {
        bail!("{shown}: genai_config.json names an encoder, but the decoder takes no `encoder_hidden_states` input");
    }
    let t = inputs.get("input_features").ok_or_else(|| Error::new(format!("{file}: no tensor `input_features` (the log-mel features)")))?;
    let TensorData::F32(values) = &t.data else { bail!("{file}: tensor `input_features` must be float32") };
    if t.shape.len() != 3 || t.shape[0] != 1 {
        bail!("{file}: tensor `input_features` has shape {:?}; expected [1, mel bins, frames]", t.shape);
    }
    let encoder = runtime::encoder(&package.join(&c.file), provider)?;
    let name = input_name(c, &encoder)?;
    let err = |e: ort::Error| Error::new(format!("{}: {e}", encoder.model.display()));
    let port = encoder.input(&name)?;
    let value: ort::session::SessionInputValue = match port.ty {
        Some(ort::value::TensorElementType::Float16) => {
            let half: Vec<half::f16> = values.iter().map(|&x| half::f16::from_f32(x)).collect();
            Tensor::<half::f16>::from_array((t.shape.clone(), half)).map_err(err)?.into()
        }
        _ => Tensor::<f32>::from_array((t.shape.clone(), values.clone())).map_err(err)?.into(),
    };
    let out = c.output("encoder_hidden_states");
    Features::from_value(&encoder.run(vec![(name, value)], &[out])?.remove(0), &format!("{}: output `{out}`", encoder.model.display()))
}

/// The encoder's features input: the role genai_config maps (`audio_features`, `input_features`), else the
/// session's one input.
fn input_name(c: &Component, encoder: &runtime::Encoder) -> Result<String> {
    for role in ["audio_features", "input_features"] {
        if let Some(n) = c.inputs.get(role) {
            return Ok(n.clone());
        }
    }
    match &encoder.inputs[..] {
        [one] => Ok(one.name.clone()),
        many => bail!(
            "{}: genai_config.json maps no features input and the encoder has {} inputs ({})",
            encoder.model.display(),
            many.len(),
            many.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
        ),
    }
}
