//! What a package's encoders compute from the stored inputs: its vision encoder on the processor's patches, its
//! audio encoder on log-mel features (both feeding the embedding session), and an encoder-decoder's encoder (Whisper)
//! whose states its decoder reads. Each checks the stored tensors it reads, naming the stored file, before ONNX
//! Runtime meets them.

use std::path::Path;

use ort::session::SessionInputValue;
use ort::value::{Tensor, TensorElementType};

use crate::error::{Error, Result, bail};
use crate::feed::inputs::{Inputs, TensorData};
use crate::feed::package::{Component, GenaiConfig};
use crate::run::encoder_session::{Encoder, Features};
use crate::run::runtime::Provider;
use crate::run::sessions;

fn tensor<'a>(inputs: &'a Inputs, name: &str, file: &str) -> Result<(&'a [i64], &'a TensorData)> {
    let t = inputs.get(name).ok_or_else(|| Error::new(format!("{file}: no tensor `{name}`")))?;
    Ok((&t.shape, &t.data))
}

fn wrong_type(file: &str, name: &str, want: &str) -> Error {
    Error::new(format!("{file}: tensor `{name}` must be {want}"))
}

/// The vision encoder `c` of `package` on the stored `pixel_values` and `pixel_position_ids` (`file` names them).
pub fn image(package: &Path, c: &Component, provider: Provider, inputs: &Inputs, file: &str) -> Result<Features> {
    let vision = sessions::encoder(&package.join(&c.file), provider)?;
    let (pixels, positions) = image_tensors(inputs, file)?;
    encode_image(&vision, c, pixels, positions)
}

/// A stored tensor's shape and values.
type Stored<'a, T> = (&'a [i64], &'a [T]);

/// The stored `pixel_values` and `pixel_position_ids`, checked: one position per patch, two coordinates each.
fn image_tensors<'a>(inputs: &'a Inputs, file: &str) -> Result<(Stored<'a, u8>, Stored<'a, i64>)> {
    let (ps, pv) = tensor(inputs, "pixel_values", file)?;
    let (qs, qv) = tensor(inputs, "pixel_position_ids", file)?;
    let (TensorData::U8(pv), TensorData::I64(qv)) = (pv, qv) else {
        return Err(wrong_type(file, "pixel_values / pixel_position_ids", "uint8 / int64"));
    };
    // Checked here, naming the stored file, before a mismatch reaches ONNX Runtime as an error deep inside the
    // vision encoder.
    if ps.len() != 3 || qs.len() != 3 || ps[..2] != qs[..2] || qs[2] != 2 {
        bail!(
            "{file}: tensor `pixel_values` has shape {ps:?} and `pixel_position_ids` {qs:?}; expected [batch, patches, \
             values] and [batch, patches, 2] with the same batch and patches"
        );
    }
    Ok(((ps, pv), (qs, qv)))
}

/// Runs a package's vision encoder: `pixel_values` as stored (uint8: the processor's values are exactly
/// `f32(u8) * f32(1/255)`) with shape [1, patches, 3 * patch^2], and `pixel_position_ids` [1, patches, 2].
pub fn encode_image(vision: &Encoder, c: &Component, pixels: (&[i64], &[u8]), positions: (&[i64], &[i64])) -> Result<Features> {
    let feeds = image_feeds(vision, c, pixels, positions)?;
    Features::from_value(&vision.run(feeds, &[c.output("image_features")])?.remove(0), "vision_encoder")
}

type Feeds = Vec<(String, SessionInputValue<'static>)>;

fn image_feeds(vision: &Encoder, c: &Component, pixels: (&[i64], &[u8]), positions: (&[i64], &[i64])) -> Result<Feeds> {
    let err = |e: ort::Error| Error::new(format!("{}: {e}", vision.model.display()));
    // Exactly what the processor computes (u8 times the f32 nearest 1/255); dividing by 255 differs in the last bit.
    let scaled: Vec<f32> = pixels.1.iter().map(|&p| p as f32 * (1.0f32 / 255.0)).collect();
    Ok(vec![
        (c.input("pixel_values").to_string(), Tensor::<f32>::from_array((pixels.0.to_vec(), scaled)).map_err(err)?.into()),
        (
            c.input("pixel_position_ids").to_string(),
            Tensor::<i64>::from_array((positions.0.to_vec(), positions.1.to_vec())).map_err(err)?.into(),
        ),
    ])
}

/// The audio encoder `c` of `package` on the stored `input_features` and `input_features_mask` (`file` names them).
pub fn audio(package: &Path, c: &Component, provider: Provider, inputs: &Inputs, file: &str) -> Result<Features> {
    let audio = sessions::encoder(&package.join(&c.file), provider)?;
    let (features, mask) = audio_tensors(inputs, file)?;
    encode_audio(&audio, c, features, mask)
}

/// The stored `input_features` and `input_features_mask`, checked: one mask value per frame.
fn audio_tensors<'a>(inputs: &'a Inputs, file: &str) -> Result<(Stored<'a, f32>, Stored<'a, bool>)> {
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
    Ok(((fs, fv), (ms, mv)))
}

/// Runs a package's audio encoder on log-mel `input_features` [1, frames, mels] and their mask [1, frames].
pub fn encode_audio(audio: &Encoder, c: &Component, features: (&[i64], &[f32]), mask: (&[i64], &[bool])) -> Result<Features> {
    let feeds = audio_feeds(audio, c, features, mask)?;
    Features::from_value(&audio.run(feeds, &[c.output("audio_features")])?.remove(0), "audio_encoder")
}

fn audio_feeds(audio: &Encoder, c: &Component, features: (&[i64], &[f32]), mask: (&[i64], &[bool])) -> Result<Feeds> {
    let err = |e: ort::Error| Error::new(format!("{}: {e}", audio.model.display()));
    Ok(vec![
        (c.input("audio_embeds").to_string(), Tensor::<f32>::from_array((features.0.to_vec(), features.1.to_vec())).map_err(err)?.into()),
        (c.input("attention_mask").to_string(), Tensor::<bool>::from_array((mask.0.to_vec(), mask.1.to_vec())).map_err(err)?.into()),
    ])
}

/// A value a localization reads from an exposed session: the whole tensor as float32, or why it cannot be read.
pub type Exposed = std::result::Result<Features, String>;

/// The media encoder `c` of `package` (its model file's `bytes`, as the caller read them) for `media` (image or
/// audio) on the stored inputs, with `values` of its graph exposed (`level::localize`).
#[allow(clippy::too_many_arguments)]
pub fn media_values(
    package: &Path,
    c: &Component,
    bytes: &[u8],
    provider: Provider,
    media: crate::vocab::Modality,
    inputs: &Inputs,
    file: &str,
    values: &[&str],
) -> Result<Vec<Exposed>> {
    let encoder = Encoder::exposing(&package.join(&c.file), bytes, provider, values)?;
    let feeds = match media {
        crate::vocab::Modality::Image => {
            let (pixels, positions) = image_tensors(inputs, file)?;
            image_feeds(&encoder, c, pixels, positions)?
        }
        _ => {
            let (features, mask) = audio_tensors(inputs, file)?;
            audio_feeds(&encoder, c, features, mask)?
        }
    };
    exposed(&encoder, feeds, values)
}

/// `values` of an exposed session's run on `feeds`, each as float32 or why not.
pub fn exposed(encoder: &Encoder, feeds: Feeds, values: &[&str]) -> Result<Vec<Exposed>> {
    let out = encoder.run(feeds, values)?;
    Ok(out.iter().map(crate::run::decoder::exposed::floats).collect())
}

/// An encoder-decoder package's encoder: `model.encoder` of its genai_config.json, else `encoder/model.onnx`.
/// mobius-onnx 0.1.0 writes no `model.encoder` for Whisper, and that is the file it always builds (named in the error
/// when it is not there either).
pub fn encoder_component(cfg: &GenaiConfig) -> Component {
    cfg.encoder.clone().unwrap_or_else(|| Component { file: "encoder/model.onnx".into(), ..Component::default() })
}

/// An encoder-decoder's encoder `c` of `package` on the stored `input_features` [1, mels, frames] (`file` names
/// them): the states its decoder reads.
pub fn speech(package: &Path, c: &Component, provider: Provider, inputs: &Inputs, file: &str) -> Result<Features> {
    let encoder = sessions::encoder(&package.join(&c.file), provider)?;
    let feed = speech_feed(&encoder, c, inputs, file)?;
    let out = c.output("encoder_hidden_states");
    Features::from_value(&encoder.run(vec![feed], &[out])?.remove(0), &format!("{}: output `{out}`", encoder.model.display()))
}

/// The speech encoder `c` of `package` (its model file's `bytes`, as the caller read them) on the stored features
/// with `values` of its graph exposed (`level::localize`).
pub fn speech_values(
    package: &Path,
    c: &Component,
    bytes: &[u8],
    provider: Provider,
    inputs: &Inputs,
    file: &str,
    values: &[&str],
) -> Result<Vec<Exposed>> {
    let encoder = Encoder::exposing(&package.join(&c.file), bytes, provider, values)?;
    let feed = speech_feed(&encoder, c, inputs, file)?;
    exposed(&encoder, vec![feed], values)
}

/// The speech encoder's one feed: the stored log-mel features, in the element type it declares.
fn speech_feed(encoder: &Encoder, c: &Component, inputs: &Inputs, file: &str) -> Result<(String, SessionInputValue<'static>)> {
    let t = inputs.get("input_features").ok_or_else(|| Error::new(format!("{file}: no tensor `input_features` (the log-mel features)")))?;
    let TensorData::F32(values) = &t.data else { bail!("{file}: tensor `input_features` must be float32") };
    if t.shape.len() != 3 || t.shape[0] != 1 {
        bail!("{file}: tensor `input_features` has shape {:?}; expected [1, mel bins, frames]", t.shape);
    }
    let name = speech_input_name(c, encoder)?;
    let err = |e: ort::Error| Error::new(format!("{}: {e}", encoder.model.display()));
    let port = encoder.input(&name)?;
    let value: SessionInputValue = match port.ty {
        Some(TensorElementType::Float16) => {
            let half: Vec<half::f16> = values.iter().map(|&x| half::f16::from_f32(x)).collect();
            Tensor::<half::f16>::from_array((t.shape.clone(), half)).map_err(err)?.into()
        }
        _ => Tensor::<f32>::from_array((t.shape.clone(), values.clone())).map_err(err)?.into(),
    };
    Ok((name, value))
}

/// The speech encoder's features input: the role genai_config maps (`audio_features`, `input_features`), else the
/// session's one input.
fn speech_input_name(c: &Component, encoder: &Encoder) -> Result<String> {
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
