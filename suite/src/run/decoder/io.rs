//! What a decoder takes and returns, read from its session: the tensor names its package maps (genai_config.json's
//! `model.decoder` roles), how it takes its tokens, its KV cache's layers, and the element types it reads and writes.

use std::collections::HashMap;

use ort::memory::Allocator;
use ort::session::Session;
use ort::value::{DynValue, Tensor, TensorElementType, ValueType};

use crate::error::{Error, Result, bail};
use crate::feed::package::Component;
use crate::run::runtime::ort_err;

/// Element types the suite feeds and reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Float {
    F32,
    F16,
    Bf16,
}

impl Float {
    fn of(t: TensorElementType) -> Option<Float> {
        match t {
            TensorElementType::Float32 => Some(Float::F32),
            TensorElementType::Float16 => Some(Float::F16),
            TensorElementType::Bfloat16 => Some(Float::Bf16),
            _ => None,
        }
    }

    /// A tensor of this type with no positions yet: an empty layer of a KV cache.
    pub(super) fn empty_cache_tensor(self, shape: [i64; 4]) -> Result<DynValue> {
        let err = ort_err("creating an empty KV cache tensor");
        Ok(match self {
            Float::F32 => Tensor::<f32>::from_array((shape, Vec::<f32>::new())).map_err(err)?.into_dyn(),
            Float::F16 => Tensor::<half::f16>::from_array((shape, Vec::<half::f16>::new())).map_err(err)?.into_dyn(),
            Float::Bf16 => Tensor::<half::bf16>::from_array((shape, Vec::<half::bf16>::new())).map_err(err)?.into_dyn(),
        })
    }

    /// A tensor of this type and `shape` from `allocator` (its memory where the allocator's is).
    pub(super) fn new_tensor(self, allocator: &Allocator, shape: &[i64]) -> std::result::Result<DynValue, ort::Error> {
        let shape = shape.to_vec();
        Ok(match self {
            Float::F32 => Tensor::<f32>::new(allocator, shape)?.into_dyn(),
            Float::F16 => Tensor::<half::f16>::new(allocator, shape)?.into_dyn(),
            Float::Bf16 => Tensor::<half::bf16>::new(allocator, shape)?.into_dyn(),
        })
    }
}

/// One layer's KV cache: input and output names, and its shape [batch, kv_heads, seq, head_dim].
#[derive(Debug, Clone, PartialEq)]
pub struct CacheLayer {
    pub past_key: String,
    pub past_value: String,
    pub present_key: String,
    pub present_value: String,
    pub kv_heads: i64,
    pub head_dim: i64,
}

/// How the decoder takes its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenInput {
    /// `input_ids` [batch, seq].
    Ids,
    /// `inputs_embeds` [batch, seq, hidden] from the package's embedding session, and `per_layer_inputs` when the
    /// model has per-layer inputs (Gemma-4).
    Embeds { per_layer: bool },
}

/// The decoder's tensor names: genai_config.json's `model.decoder.inputs` / `outputs` where it maps a role (a
/// Whisper decoder takes `decoder_input_ids`), else the role's own name; checked against the session.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderNames {
    pub input_ids: String,
    pub inputs_embeds: String,
    pub per_layer_inputs: String,
    pub attention_mask: String,
    pub position_ids: String,
    pub logits: String,
}

impl DecoderNames {
    fn of(roles: &Component) -> DecoderNames {
        DecoderNames {
            // mobius maps Whisper's ids under their own name (`decoder_input_ids`), genai under the role.
            input_ids: roles
                .inputs
                .get("input_ids")
                .or(roles.inputs.get("decoder_input_ids"))
                .map_or("input_ids", String::as_str)
                .to_string(),
            inputs_embeds: roles.input("inputs_embeds").to_string(),
            per_layer_inputs: roles.input("per_layer_inputs").to_string(),
            attention_mask: roles.input("attention_mask").to_string(),
            position_ids: roles.input("position_ids").to_string(),
            logits: roles.output("logits").to_string(),
        }
    }
}

/// The encoder states an encoder-decoder's decoder reads at every step (its cross-attention's keys and values):
/// `encoder_hidden_states` [batch, frames, hidden], fed once per stream.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextInput {
    pub name: String,
    pub ty: Float,
    pub shape: Vec<i64>,
}

/// What the decoder takes and returns, read from the session itself (names as the package maps them).
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderIo {
    pub names: DecoderNames,
    pub token_input: TokenInput,
    pub has_attention_mask: bool,
    pub has_position_ids: bool,
    /// An encoder-decoder's cross-attention input; `None` for a decoder-only model.
    pub context: Option<ContextInput>,
    pub cache: Vec<CacheLayer>,
    pub cache_type: Float,
    pub logits_type: Float,
    /// The logits' last dimension, when the graph declares it.
    pub vocab: Option<i64>,
}

/// A session's inputs or outputs by name.
type Declared<'s> = HashMap<&'s str, &'s ValueType>;

impl DecoderIo {
    /// The decoder's I/O as `session` declares it, under the names `roles` maps.
    pub(super) fn discover(session: &Session, roles: &Component) -> Result<DecoderIo> {
        let inputs: Declared = session.inputs().iter().map(|o| (o.name(), o.dtype())).collect();
        let outputs: Declared = session.outputs().iter().map(|o| (o.name(), o.dtype())).collect();
        let names = DecoderNames::of(roles);
        let token_input = if inputs.contains_key(names.input_ids.as_str()) {
            TokenInput::Ids
        } else if inputs.contains_key(names.inputs_embeds.as_str()) {
            TokenInput::Embeds { per_layer: inputs.contains_key(names.per_layer_inputs.as_str()) }
        } else {
            let mut listing: Vec<_> = inputs.keys().copied().collect();
            listing.sort();
            bail!("the decoder has neither `{}` nor `{}` (inputs: {})", names.input_ids, names.inputs_embeds, listing.join(", "));
        };
        let Some(logits) = outputs.get(names.logits.as_str()) else { bail!("the decoder has no `{}` output", names.logits) };
        let context = context_input(&inputs, roles.input("encoder_hidden_states"))?;
        let vocab = logits.tensor_shape().and_then(|s| s.last().copied()).filter(|&v| v > 0);
        let logits_type = logits
            .tensor_type()
            .and_then(Float::of)
            .ok_or_else(|| Error::new(format!("output `logits` is {logits}, expected a float tensor")))?;
        let (cache, cache_type) = cache_layers(&inputs, &outputs, roles)?;
        Ok(DecoderIo {
            token_input,
            has_attention_mask: inputs.contains_key(names.attention_mask.as_str()),
            has_position_ids: inputs.contains_key(names.position_ids.as_str()),
            context,
            names,
            cache,
            cache_type: cache_type.unwrap_or(Float::F32),
            logits_type,
            vocab,
        })
    }
}

/// The encoder states input `name`, when the decoder has it (an encoder-decoder's).
fn context_input(inputs: &Declared, name: &str) -> Result<Option<ContextInput>> {
    let Some(t) = inputs.get(name) else { return Ok(None) };
    Ok(Some(ContextInput {
        name: name.to_string(),
        ty: t.tensor_type().and_then(Float::of).ok_or_else(|| Error::new(format!("input `{name}` is {t}, expected a float tensor")))?,
        shape: t.tensor_shape().map(|s| s.to_vec()).unwrap_or_default(),
    }))
}

/// The KV cache's layers, in order, under genai's templates (`past_key_values.%d.key`) as the package maps them, and
/// their one element type (`None` without a cache).
fn cache_layers(inputs: &Declared, outputs: &Declared, roles: &Component) -> Result<(Vec<CacheLayer>, Option<Float>)> {
    let mut cache = Vec::new();
    let mut cache_type = None;
    let layer = |role: &str, default: &str, i: usize, output: bool| {
        let template = if output { roles.outputs.get(role) } else { roles.inputs.get(role) };
        template.map_or(default, String::as_str).replace("%d", &i.to_string())
    };
    for i in 0.. {
        let past_key = layer("past_key_names", "past_key_values.%d.key", i, false);
        let Some(kt) = inputs.get(past_key.as_str()) else { break };
        let past_value = layer("past_value_names", "past_key_values.%d.value", i, false);
        let present_key = layer("present_key_names", "present.%d.key", i, true);
        let present_value = layer("present_value_names", "present.%d.value", i, true);
        for name in [&past_value] {
            if !inputs.contains_key(name.as_str()) {
                bail!("the decoder has `{past_key}` but no `{name}` input");
            }
        }
        for name in [&present_key, &present_value] {
            if !outputs.contains_key(name.as_str()) {
                bail!("the decoder has `{past_key}` but no `{name}` output");
            }
        }
        let shape = kt.tensor_shape().map(|s| s.to_vec()).unwrap_or_default();
        let [_, kv_heads, _, head_dim] = shape[..] else {
            bail!("input `{past_key}` has shape {shape:?}, expected [batch, kv_heads, past_seq, head_dim]");
        };
        if kv_heads <= 0 || head_dim <= 0 {
            bail!("input `{past_key}` has shape {shape:?}: kv_heads and head_dim must be static");
        }
        let t = kt
            .tensor_type()
            .and_then(Float::of)
            .ok_or_else(|| Error::new(format!("input `{past_key}` is {kt}, expected a float tensor")))?;
        if *cache_type.get_or_insert(t) != t {
            bail!("input `{past_key}` is {t:?} but earlier cache inputs are {cache_type:?}");
        }
        cache.push(CacheLayer { past_key, past_value, present_key, present_value, kv_heads, head_dim });
    }
    Ok((cache, cache_type))
}
