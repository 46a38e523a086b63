//! The multimodal pipeline (Gemma-4's): the package's vision and audio encoders on the stored media, their features
//! and the prompt's ids through its embedding session, and the decoder fed the embeddings (with per-layer inputs when
//! it takes them).

use std::path::Path;
use std::sync::Arc;

use ort::session::SessionInputValue;
use ort::value::Tensor;

use crate::error::{Error, Result};
use crate::feed::inputs::Inputs;
use crate::feed::package::{Component, GenaiConfig};
use crate::run::decoder::StepInput;
use crate::run::encoder_session::{Encoder, Features};
use crate::run::encoders;
use crate::run::runtime::Provider;
use crate::run::sessions;
use crate::vocab::Modality;

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

/// The embedding session `cfg` names, with the features of the media `inputs` hold (`file` names them).
pub fn build(package: &Path, cfg: &GenaiConfig, provider: Provider, inputs: &Inputs, file: &str) -> Result<Embedder> {
    let component = |c: Option<Component>, what: &str| {
        c.ok_or_else(|| Error::new(format!("{}/genai_config.json: no `model.{what}` session", package.display())))
    };
    let embed_c = component(cfg.embedding.clone(), "embedding")?;
    let session = sessions::encoder(&package.join(&embed_c.file), provider)?;
    let hidden = session.input(embed_c.input("image_features"))?.shape.get(1).copied().unwrap_or(-1);
    let image_features = match inputs.get("pixel_values") {
        Some(_) => Some(encoders::image(package, &component(cfg.vision.clone(), "vision")?, provider, inputs, file)?),
        None => None,
    };
    let audio_features = match inputs.get("input_features") {
        Some(_) => Some(encoders::audio(package, &component(cfg.speech.clone(), "speech")?, provider, inputs, file)?),
        None => None,
    };
    Ok(Embedder { session, component: embed_c, image_features, audio_features, hidden })
}

impl Embedder {
    /// The embeddings of `ids` (and per-layer inputs, when the session makes them), with the media features on the
    /// prompt step only.
    pub fn input(&self, ids: &[i64], prompt_step: bool) -> Result<StepInput> {
        let c = &self.component;
        let feeds = self.feeds(&self.session, ids, prompt_step)?;
        let mut out = self.session.run(feeds, &[c.output("inputs_embeds"), c.output("per_layer_inputs")])?.into_iter();
        let (embeds, per_layer) = (out.next().expect("asked for two outputs"), out.next());
        Ok(StepInput::Embeds { embeds, per_layer, len: ids.len() })
    }

    /// The prompt step's feeds of `session` (this embedder's, or its exposed copy): `ids` and the media features.
    fn feeds(&self, session: &Encoder, ids: &[i64], prompt_step: bool) -> Result<Vec<(String, SessionInputValue<'static>)>> {
        let c = &self.component;
        let model = session.model.display();
        let tensor_err = |err: ort::Error| Error::new(format!("{model}: {err}"));
        let empty = Features { shape: vec![0, self.hidden], data: Vec::new() };
        let media = |f: &Option<Features>| -> Result<SessionInputValue<'static>> {
            let f = f.as_ref().filter(|_| prompt_step).unwrap_or(&empty);
            Ok(Tensor::<f32>::from_array((f.shape.clone(), f.data.clone())).map_err(tensor_err)?.into())
        };
        Ok(vec![
            (
                c.input("input_ids").to_string(),
                Tensor::<i64>::from_array(([1, ids.len() as i64], ids.to_vec())).map_err(tensor_err)?.into(),
            ),
            (c.input("image_features").to_string(), media(&self.image_features)?),
            (c.input("audio_features").to_string(), media(&self.audio_features)?),
        ])
    }

    /// The embedding session's graph (its model file's `bytes`) with `values` exposed, run on the prompt `ids` and
    /// this embedder's media features (`level::localize`).
    pub fn values(&self, bytes: &[u8], ids: &[i64], values: &[&str]) -> Result<Vec<encoders::Exposed>> {
        let session = Encoder::exposing(&self.session.model, bytes, self.session.provider, values)?;
        let feeds = self.feeds(&session, ids, true)?;
        encoders::exposed(&session, feeds, values)
    }

    /// The features the encoder of `media` (image or audio) computed, and this embedder with them zeroed
    /// (`component` names the encoder in errors).
    pub fn zeroed(&self, media: Modality, component: &str) -> Result<(&Features, Embedder)> {
        let got = if media == Modality::Image { &self.image_features } else { &self.audio_features };
        let got = got.as_ref().ok_or_else(|| Error::new(format!("{component}: the inputs have no media for it")))?;
        let mut e = self.clone();
        let slot = if media == Modality::Image { &mut e.image_features } else { &mut e.audio_features };
        *slot = slot.as_ref().map(Features::zeroed);
        Ok((got, e))
    }
}
