//! How a trial's tokens reach the decoder, and what the media encoders computed on the way.

use std::path::Path;

use crate::error::{Error, Result, bail};
use crate::feed::inputs::{Inputs, TensorData};
use crate::run::generate::{self, Embedder, Features, Front};
use crate::run::runtime::{self, Provider};
use crate::vocab::Modality;

/// How a trial's tokens reach the decoder: directly, or through the package's embedding session with the media
/// features its vision and audio encoders computed from the stored inputs.
pub struct Pipeline {
    embedder: Option<Embedder>,
    /// An encoder-decoder's encoder states ([`crate::run::speech`]).
    speech: Option<Features>,
}

fn tensor<'a>(inputs: &'a Inputs, name: &str, file: &str) -> Result<(&'a [i64], &'a TensorData)> {
    let t = inputs.get(name).ok_or_else(|| Error::new(format!("{file}: no tensor `{name}`")))?;
    Ok((&t.shape, &t.data))
}

fn wrong_type(file: &str, name: &str, want: &str) -> Error {
    Error::new(format!("{file}: tensor `{name}` must be {want}"))
}

impl Pipeline {
    pub fn build(package: &Path, decoder: &runtime::Decoder, provider: Provider, inputs: &Inputs, file: &str) -> Result<Pipeline> {
        let has_media = inputs.tensors.iter().any(|t| t.name != "input_ids");
        let config = crate::feed::package::GenaiConfig::load_if_present(package)?;
        if let Some(cfg) = config.as_ref().filter(|c| crate::run::speech::is_encoder_decoder(c, decoder)) {
            let states = crate::run::speech::encode(package, cfg, decoder, provider, inputs, file)?;
            return Ok(Pipeline { embedder: None, speech: Some(states) });
        }
        if decoder.io.context.is_some() {
            bail!("{}: the decoder reads encoder states, but the package has no genai_config.json naming its encoder", package.display());
        }
        if decoder.io.token_input == runtime::TokenInput::Ids {
            if has_media {
                return Err(Error::new(format!(
                    "{}: the decoder takes input_ids; media inputs need a package with an embedding session",
                    package.display()
                )));
            }
            return Ok(Pipeline { embedder: None, speech: None });
        }
        let cfg =
            config.ok_or_else(|| Error::new(format!("{}: no genai_config.json: its embedding session is not named", package.display())))?;
        let component = |c: Option<crate::feed::package::Component>, what: &str| {
            c.ok_or_else(|| Error::new(format!("{}/genai_config.json: no `model.{what}` session", package.display())))
        };
        let embed_c = component(cfg.embedding.clone(), "embedding")?;
        let session = runtime::encoder(&package.join(&embed_c.file), provider)?;
        let hidden = session.input(embed_c.input("image_features"))?.shape.get(1).copied().unwrap_or(-1);
        let mut image_features = None;
        if inputs.get("pixel_values").is_some() {
            let c = component(cfg.vision.clone(), "vision")?;
            let vision = runtime::encoder(&package.join(&c.file), provider)?;
            let (ps, pv) = tensor(inputs, "pixel_values", file)?;
            let (qs, qv) = tensor(inputs, "pixel_position_ids", file)?;
            let (TensorData::U8(pv), TensorData::I64(qv)) = (pv, qv) else {
                return Err(wrong_type(file, "pixel_values / pixel_position_ids", "uint8 / int64"));
            };
            // One position per patch, two coordinates each: checked here, naming the stored file, before a
            // mismatch reaches ONNX Runtime as an error deep inside the vision encoder.
            if ps.len() != 3 || qs.len() != 3 || ps[..2] != qs[..2] || qs[2] != 2 {
                bail!(
                    "{file}: tensor `pixel_values` has shape {ps:?} and `pixel_position_ids` {qs:?}; expected [batch, patches, \
                     values] and [batch, patches, 2] with the same batch and patches"
                );
            }
            image_features = Some(generate::encode_image(&vision, &c, (ps, pv), (qs, qv))?);
        }
        let mut audio_features = None;
        if inputs.get("input_features").is_some() {
            let c = component(cfg.speech.clone(), "speech")?;
            let audio = runtime::encoder(&package.join(&c.file), provider)?;
            let (fs, fv) = tensor(inputs, "input_features", file)?;
            let (ms, mv) = tensor(inputs, "input_features_mask", file)?;
            let (TensorData::F32(fv), TensorData::Bool(mv)) = (fv, mv) else {
                return Err(wrong_type(file, "input_features / input_features_mask", "float32 / bool"));
            };
            if fs.len() != 3 || ms.len() != 2 || fs[..2] != ms[..] {
                bail!(
                    "{file}: tensor `input_features` has shape {fs:?} and `input_features_mask` {ms:?}; expected [batch, \
                     frames, mel bins] and [batch, frames] with the same batch and frames"
                );
            }
            audio_features = Some(generate::encode_audio(&audio, &c, (fs, fv), (ms, mv))?);
        }
        Ok(Pipeline { embedder: Some(Embedder { session, component: embed_c, image_features, audio_features, hidden }), speech: None })
    }

    pub fn front(&self) -> Front<'_> {
        match (&self.speech, &self.embedder) {
            (Some(states), _) => Front::CrossAttention(states),
            (None, e) => e.as_ref().map_or(Front::Ids, Front::Embedding),
        }
    }

    /// Whether the package is an encoder-decoder one.
    pub fn is_speech(&self) -> bool {
        self.speech.is_some()
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
        if let Some(states) = &self.speech {
            if media != Modality::Audio {
                bail!("{component}: an encoder-decoder package has an audio encoder only");
            }
            let with = prefill(self)?;
            let zeroed = prefill(&Pipeline { embedder: None, speech: Some(states.zeroed()) })?;
            return Ok(ComponentRun { shape: states.shape.clone(), features: states.data.clone(), with, zeroed });
        }
        let e = self.embedder.as_ref().ok_or_else(|| Error::new(format!("{component}: the package has no embedding session")))?;
        let got = if media == Modality::Image { &e.image_features } else { &e.audio_features };
        let got = got.as_ref().ok_or_else(|| Error::new(format!("{component}: the inputs have no media for it")))?;
        let with = prefill(self)?;
        let zeroed = {
            let mut e = e.clone();
            let slot = if media == Modality::Image { &mut e.image_features } else { &mut e.audio_features };
            *slot = slot.as_ref().map(generate::Features::zeroed);
            prefill(&Pipeline { embedder: Some(e), speech: None })?
        };
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
