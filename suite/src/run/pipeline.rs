//! How a trial's tokens reach the decoder, and the component (encoder) verdicts that go with it.

use std::path::Path;

use crate::case::Level;
use crate::error::{Error, Result};
use crate::generate::{self, Embedder, Front};
use crate::inputs::{Inputs, TensorData};
use crate::runtime::{self, Provider};
use crate::tolerance::Tolerance;
use crate::trial::{Outcome, Status};

/// How a trial's tokens reach the decoder: directly, or through the package's embedding session with the media
/// features its vision and audio encoders computed from the stored inputs.
pub struct Pipeline {
    embedder: Option<Embedder>,
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
        if decoder.io.token_input == runtime::TokenInput::Ids {
            if has_media {
                return Err(Error::new(format!(
                    "{}: the decoder takes input_ids; media inputs need a package with an embedding session",
                    package.display()
                )));
            }
            return Ok(Pipeline { embedder: None });
        }
        let cfg = crate::package::GenaiConfig::load(package)?;
        let component = |c: Option<crate::package::Component>, what: &str| {
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
            audio_features = Some(generate::encode_audio(&audio, &c, (fs, fv), (ms, mv))?);
        }
        Ok(Pipeline { embedder: Some(Embedder { session, component: embed_c, image_features, audio_features, hidden }) })
    }

    pub fn front(&self) -> Front<'_> {
        self.embedder.as_ref().map_or(Front::Ids, Front::Embedding)
    }

    /// Component parity: the encoder's features against the reference's, element-wise under the dtype's L4
    /// tolerance; then the features must reach the decoder (zeroing them must move the prompt's last logits).
    pub fn judge_component(
        &self,
        level: Level,
        reference: &Inputs,
        file: &str,
        tol: &Tolerance,
        prefill: impl Fn(&Pipeline) -> Result<Vec<f32>>,
    ) -> Result<Outcome> {
        let (component, name) = match level {
            Level::VisionEncoder => ("vision_encoder", "image_features"),
            _ => ("audio_encoder", "audio_features"),
        };
        let e = self.embedder.as_ref().ok_or_else(|| Error::new(format!("{component}: the package has no embedding session")))?;
        let got = if level == Level::VisionEncoder { &e.image_features } else { &e.audio_features };
        let got = got.as_ref().ok_or_else(|| Error::new(format!("{component}: the inputs have no media for it")))?;
        let (got_shape, got_data) = (&got.shape, &got.data);
        let (want_shape, want) = match tensor(reference, name, file)? {
            (s, TensorData::F32(v)) => (s.to_vec(), v),
            _ => return Err(wrong_type(file, name, "float32")),
        };
        let mut reasons = Vec::new();
        if *got_shape != want_shape {
            reasons.push(format!("{component}: `{name}` has shape {got_shape:?}, the reference's is {want_shape:?}"));
        }
        let c = crate::logits::compare(got_data, want, tol.atol, tol.rtol);
        let cols = (*want_shape.last().unwrap_or(&1)).max(1) as usize;
        if let Some(i) = c.worst_violation_at.filter(|_| *got_shape == want_shape) {
            reasons.push(format!(
                "{component}: {} of {} values of `{name}` outside atol+rtol*|ref|; worst at [{}, {}]: expected {:.6}, got {:.6}",
                c.violations,
                want.len(),
                i / cols,
                i % cols,
                want[i],
                got_data[i]
            ));
        }
        // The features must matter: with them zeroed, the prompt's last logits must move.
        let with = prefill(self)?;
        let zeroed = {
            let mut e = e.clone();
            let slot = if level == Level::VisionEncoder { &mut e.image_features } else { &mut e.audio_features };
            *slot = slot.as_ref().map(generate::Features::zeroed);
            prefill(&Pipeline { embedder: Some(e) })?
        };
        let moved = crate::logits::compare(&with, &zeroed, 0.0, 0.0).max_abs;
        let floor = (100.0 * tol.atol).max(1e-3);
        if moved <= floor {
            reasons.push(format!(
                "{component}: zeroing `{name}` moved the last logits by only {moved:.3e} (<= {floor:.1e}): the media never reach the decoder"
            ));
        }
        let summary = format!(
            "{component}: `{name}` {got_shape:?} max |diff| {:.3e} at [{}, {}], cosine {:.7}; zeroing it moves the last logits by {moved:.3e}",
            c.max_abs,
            c.max_abs_at / cols,
            c.max_abs_at % cols,
            c.cosine
        );
        let status = if reasons.is_empty() { Status::Pass } else { Status::Fail };
        let mut message = format!("{summary}\n");
        for r in &reasons {
            message.push_str(&format!("  - {r}\n"));
        }
        message.push_str(&format!("  policy: {tol}\n  reference: {file}\n"));
        let detail = crate::report::detail::component(component, got_data, want, cols, tol.atol, moved);
        Ok(Outcome {
            status,
            message,
            max_abs_diff: Some(c.max_abs),
            first_divergence: None,
            snapshot: None,
            detail: Some(Box::new(crate::report::detail::Detail::Component(detail))),
            // Encoder levels cannot be named in an xfail yet: their failures are never expected.
            failure: None,
        })
    }
}
