//! A package's decoder session: what it takes ([`io`]), the inputs of one forward call, and two ways to run it: a
//! KV cache kept between plain runs that can be continued several ways and cut back ([`cache`]), and one greedy
//! stream over an IoBinding that keeps the cache where the session computes ([`generation`]). Its logits are read
//! where ONNX Runtime left them ([`logits`]).

pub mod cache;
pub mod exposed;
pub mod generation;
pub mod io;
mod logits;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ort::session::{Session, SessionOutputs};
use ort::value::{DynValue, Tensor};

use crate::error::{Result, bail};
use crate::feed::package::GenaiConfig;
use crate::run::decoder::io::{DecoderIo, Float, TokenInput};
use crate::run::encoder_session::Features;
use crate::run::runtime::{self, Provider, ort_err};

/// A loaded decoder and what it expects.
pub struct Decoder {
    session: Mutex<Session>,
    pub io: DecoderIo,
    pub model: PathBuf,
    pub provider: Provider,
    /// Generation keeps one preallocated KV buffer per layer, shared by past and present (see
    /// [`generation::Generation`]).
    pub share_buffer: bool,
}

/// The tokens of one forward call: ids, or their embeddings (from the package's embedding session).
pub enum StepInput {
    Ids(Vec<i64>),
    Embeds { embeds: DynValue, per_layer: Option<DynValue>, len: usize },
}

impl StepInput {
    fn len(&self) -> usize {
        match self {
            StepInput::Ids(ids) => ids.len(),
            StepInput::Embeds { len, .. } => *len,
        }
    }
}

/// What one forward call returns: the logits of its last `rows` positions (as f32, row after row).
pub struct StepOutput {
    pub logits: Vec<f32>,
    pub vocab: usize,
}

impl StepOutput {
    /// The last position's logits.
    pub fn last(&self) -> &[f32] {
        &self.logits[self.logits.len() - self.vocab..]
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.logits[i * self.vocab..(i + 1) * self.vocab]
    }
}

impl Decoder {
    /// A new session of `model` (shared ones come from [`crate::run::sessions::decoder`]), its I/O read from the
    /// session under the names the package maps.
    pub(super) fn load(model: &Path, provider: Provider) -> Result<Decoder> {
        Decoder::with_session(runtime::create_session(model, provider)?, model, provider)
    }

    /// A decoder of an open `session` of `model`.
    fn with_session(session: Session, model: &Path, provider: Provider) -> Result<Decoder> {
        // The package's genai_config.json sits beside the decoder, or one folder up (a multi-model package's
        // `decoder/model.onnx`); it names the decoder's tensors and says whether its cache can be shared.
        let config = model.ancestors().skip(1).take(2).find_map(|p| GenaiConfig::load_if_present(p).ok().flatten());
        let roles = config.as_ref().and_then(|c| c.decoder.clone()).unwrap_or_default();
        let io = DecoderIo::discover(&session, &roles).map_err(|e| e.context(model.display()))?;
        // Only a GroupQueryAttention graph (no `position_ids`) reads past and writes present in one buffer.
        let share_buffer = !io.has_position_ids && io.has_attention_mask && config.is_some_and(|c| c.share_buffer);
        Ok(Decoder { session: Mutex::new(session), io, model: model.to_path_buf(), provider, share_buffer })
    }

    /// The encoder states an encoder-decoder's decoder is fed, as its declared input: element type converted,
    /// static dimensions checked. `None` (and no context) for a decoder-only model; a mismatch either way is an error.
    fn context_value(&self, context: Option<&Features>) -> Result<Option<DynValue>> {
        let model = self.model.display();
        let (want, got) = match (&self.io.context, context) {
            (None, None) => return Ok(None),
            (Some(want), Some(got)) => (want, got),
            (Some(want), None) => bail!("{model}: the decoder takes `{}`, its encoder's states, and none were given", want.name),
            (None, Some(_)) => bail!("{model}: encoder states were given, but the decoder takes no `encoder_hidden_states`"),
        };
        let dims_ok = got.shape.len() == want.shape.len() && got.shape.iter().zip(&want.shape).all(|(&g, &w)| w < 0 || g == w);
        if !dims_ok {
            bail!("{model}: the encoder's states are {:?}, but input `{}` is declared {:?}", got.shape, want.name, want.shape);
        }
        let err = ort_err(format!("{model}: input `{}`", want.name));
        let shape = got.shape.clone();
        Ok(Some(match want.ty {
            Float::F32 => Tensor::<f32>::from_array((shape, got.data.clone())).map_err(err)?.into_dyn(),
            Float::F16 => Tensor::<half::f16>::from_array((shape, got.data.iter().map(|&x| half::f16::from_f32(x)).collect::<Vec<_>>()))
                .map_err(err)?
                .into_dyn(),
            Float::Bf16 => Tensor::<half::bf16>::from_array((shape, got.data.iter().map(|&x| half::bf16::from_f32(x)).collect::<Vec<_>>()))
                .map_err(err)?
                .into_dyn(),
        }))
    }

    /// The inputs of one step besides the cache: its tokens (ids, or embeddings and per-layer inputs), and the
    /// attention mask and positions the graph takes, after `past_len` cached positions.
    fn feeds(&self, input: StepInput, past_len: usize) -> Result<Vec<(&str, DynValue)>> {
        let model = self.model.display();
        let err = ort_err(format!("{model}: building inputs"));
        let (t, past) = (input.len() as i64, past_len as i64);
        let names = &self.io.names;
        let mut feeds = Vec::with_capacity(4);
        match (input, self.io.token_input) {
            (StepInput::Ids(ids), TokenInput::Ids) => {
                feeds.push((names.input_ids.as_str(), Tensor::<i64>::from_array(([1, t], ids)).map_err(&err)?.into_dyn()));
            }
            (StepInput::Embeds { embeds, per_layer, .. }, TokenInput::Embeds { per_layer: wants }) => {
                feeds.push((names.inputs_embeds.as_str(), embeds));
                match (per_layer, wants) {
                    (Some(p), true) => feeds.push((names.per_layer_inputs.as_str(), p)),
                    (None, false) => {}
                    (_, wants) => bail!("{model}: the decoder {} `per_layer_inputs`", if wants { "needs" } else { "takes no" }),
                }
            }
            (_, want) => bail!("{model}: the decoder takes {want:?}, but was fed the other kind of token input"),
        }
        if self.io.has_attention_mask {
            let total = past + t;
            let mask = Tensor::<i64>::from_array(([1, total], vec![1i64; total as usize])).map_err(&err)?.into_dyn();
            feeds.push((names.attention_mask.as_str(), mask));
        }
        if self.io.has_position_ids {
            let pos: Vec<i64> = (past..past + t).collect();
            feeds.push((names.position_ids.as_str(), Tensor::<i64>::from_array(([1, t], pos)).map_err(&err)?.into_dyn()));
        }
        Ok(feeds)
    }

    /// The `present.*` outputs of a run, layer by layer: the next step's cache.
    fn take_present(&self, outputs: &mut SessionOutputs<'_>) -> Result<Vec<(DynValue, DynValue)>> {
        self.io
            .cache
            .iter()
            .map(|layer| match (outputs.remove(&layer.present_key), outputs.remove(&layer.present_value)) {
                (Some(k), Some(v)) => Ok((k, v)),
                _ => bail!("{}: output `{}`/`{}` missing after run", self.model.display(), layer.present_key, layer.present_value),
            })
            .collect()
    }

    /// Every layer's past key and value with no position yet.
    fn empty_cache_values(&self) -> Result<Vec<(DynValue, DynValue)>> {
        self.io
            .cache
            .iter()
            .map(|l| {
                let shape = [1, l.kv_heads, 0, l.head_dim];
                Ok((self.io.cache_type.empty_cache_tensor(shape)?, self.io.cache_type.empty_cache_tensor(shape)?))
            })
            .collect()
    }
}
