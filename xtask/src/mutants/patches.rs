//! The patches: each rewrites one model in place, at the same length (a same-length byte patch of its ONNX files),
//! and says what it changed.

use std::collections::BTreeSet;

use onnx_bytes::{Attr, INT64, Model};
use serde_json::Value;

/// Layer `to`'s cross-attention K and V projections replaced by layer `from`'s: it reads the encoder states as
/// another layer does.
pub(super) fn copy_cross_attention(m: &mut Model, from: usize, to: usize) -> Result<String, String> {
    let mut done = Vec::new();
    for proj in ["k_proj", "v_proj"] {
        let src = matmul_weight(m, &format!("layers.{from}.encoder_attn.{proj}"))?;
        let dst = matmul_weight(m, &format!("layers.{to}.encoder_attn.{proj}"))?;
        let values = m.floats(&src)?;
        m.set_floats(&dst, &values)?;
        done.push(format!("`{dst}` = `{src}`"));
    }
    Ok(done.join("; "))
}

/// Layer `layer`'s cross-attention K and V projections scaled by `factor`: the encoder states it reads, scaled.
pub(super) fn scale_cross_attention(m: &mut Model, layer: usize, factor: f32) -> Result<String, String> {
    let k = scale_matmul_weight(m, &format!("layers.{layer}.encoder_attn.k_proj"), factor)?;
    let v = scale_matmul_weight(m, &format!("layers.{layer}.encoder_attn.v_proj"), factor)?;
    Ok(format!("{k}; {v}"))
}

/// Every value of the float initializer `name` zeroed.
pub(super) fn zero_floats(m: &mut Model, name: &str) -> Result<String, String> {
    let n = m.floats(name)?.len();
    m.set_floats(name, &vec![0.0; n])?;
    Ok(format!("`{name}` ({n} values) zeroed"))
}

/// The initializer a MatMul multiplies by whose name contains `fragment`.
fn matmul_weight(m: &Model, fragment: &str) -> Result<String, String> {
    let found: BTreeSet<&str> = m
        .graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "MatMul")
        .filter_map(|n| n.inputs.get(1))
        .filter(|w| w.contains(fragment) && m.graph.constant(w).is_some())
        .map(String::as_str)
        .collect();
    match found.into_iter().collect::<Vec<_>>().as_slice() {
        [one] => Ok(one.to_string()),
        other => Err(format!("{}: expected one MatMul weight named like `{fragment}`, found {other:?}", m.path.display())),
    }
}

/// A MatMul weight (float32 or float16, rounded back to its type) times `factor`.
pub(super) fn scale_matmul_weight(m: &mut Model, fragment: &str, factor: f32) -> Result<String, String> {
    let name = matmul_weight(m, fragment)?;
    let values: Vec<f32> = m.floats(&name)?.iter().map(|v| v * factor).collect();
    m.set_floats(&name, &values)?;
    Ok(format!("`{name}` ({} values) x{factor}", values.len()))
}

/// Input `index` (1: the packed 4-bit weight, 2: its block scales) of the one MatMulNBits whose weight is named like
/// `fragment`.
fn nbits_input(m: &Model, fragment: &str, index: usize) -> Result<String, String> {
    let found: BTreeSet<String> = m
        .graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "MatMulNBits" && n.inputs.get(1).is_some_and(|w| w.contains(fragment)))
        .filter_map(|n| n.inputs.get(index).cloned())
        .collect();
    let [one] = found.into_iter().collect::<Vec<_>>().try_into().map_err(|found: Vec<String>| {
        format!("{}: expected one MatMulNBits weight named like `{fragment}`, found input {index} {found:?}", m.path.display())
    })?;
    Ok(one)
}

/// Every byte of the packed 4-bit weight (MatMulNBits input 1) whose name contains `fragment`, through `f`.
pub(super) fn map_nbits_codes(m: &mut Model, fragment: &str, what: &str, f: fn(u8) -> u8) -> Result<String, String> {
    let weight = nbits_input(m, fragment, 1)?;
    let codes: Vec<u8> = m.u8s(&weight)?.into_iter().map(f).collect();
    m.set_u8s(&weight, &codes)?;
    Ok(format!("`{weight}` ({} bytes): {what}", codes.len()))
}

/// The first `op` node renamed to an operator no runtime has (same length).
pub(super) fn unknown_operator(m: &mut Model, op: &str, unknown: &str) -> Result<String, String> {
    let node = m.graph.nodes.iter().find(|n| n.op_type == op).ok_or_else(|| format!("{}: no {op} node", m.path.display()))?;
    let name = node.label().to_string();
    m.set_op_type(&name, unknown)?;
    Ok(format!("`{name}` op_type {op} -> {unknown}"))
}

/// The float32 block scales of the MatMulNBits whose quantized weight is named like `fragment`, times `factor`.
pub(super) fn scale_nbits_scales(m: &mut Model, fragment: &str, factor: f32) -> Result<String, String> {
    let scales = nbits_input(m, fragment, 2)?;
    let values: Vec<f32> = m.f32s(&scales)?.iter().map(|v| v * factor).collect();
    m.set_f32s(&scales, &values)?;
    Ok(format!("`{scales}` ({} block scales) x{factor}", values.len()))
}

/// `logits = c * tanh(x / c)`: the Div -> Tanh -> Mul chain, with one scalar `c` for both. Setting `c` to 1e6 makes
/// the cap the identity to float32 precision, as if the exporter had left it out.
pub(super) fn drop_softcap(m: &mut Model) -> Result<String, String> {
    let g = &m.graph;
    let mut caps = BTreeSet::new();
    for tanh in g.nodes.iter().filter(|n| n.op_type == "Tanh") {
        let (Some(x), Some(y)) = (tanh.inputs.first(), tanh.outputs.first()) else { continue };
        let Some(div) = g.producer(x).filter(|n| n.op_type == "Div") else { continue };
        let Some(c) = div.inputs.get(1) else { continue };
        let scaled_back = g.consumers(y).any(|n| n.op_type == "Mul" && n.inputs.contains(c));
        if scaled_back && m.scalar_f32(c).is_some() {
            caps.insert(c.clone());
        }
    }
    let [cap] = caps.into_iter().collect::<Vec<_>>().try_into().map_err(|found: Vec<String>| {
        format!("{}: expected one softcap (Div by c -> Tanh -> Mul by c, c a float scalar), found {found:?}", m.path.display())
    })?;
    let old = m.scalar_f32(&cap).unwrap_or_default();
    m.set_scalar_f32(&cap, 1.0e6)?;
    Ok(format!("softcap `{cap}` {old} -> 1e6 (tanh cap becomes the identity)"))
}

/// The sliding-window mask built in the graph: `Less(query_pos - key_pos, window)`, with `window` an int64 scalar.
pub(super) fn widen_window_mask(m: &mut Model) -> Result<String, String> {
    let windows: BTreeSet<String> = m
        .graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "Less")
        .filter_map(|n| n.inputs.get(1))
        .filter(|w| m.graph.constant(w).is_some_and(|t| t.data_type == INT64 && t.elements() == 1))
        .cloned()
        .collect();
    let [window] = windows.into_iter().collect::<Vec<_>>().try_into().map_err(|found: Vec<String>| {
        format!("{}: expected one sliding-window bound (Less against an int64 scalar), found {found:?}", m.path.display())
    })?;
    let old = m.i64s(&window)?.first().copied().unwrap_or_default();
    m.set_i64s(&window, &[old + 1])?;
    Ok(format!("window bound `{window}` {old} -> {}", old + 1))
}

pub(super) fn widen_gqa_window(m: &mut Model) -> Result<String, String> {
    let nodes: Vec<(String, i64)> = m
        .graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "GroupQueryAttention")
        .filter_map(|n| match n.attribute("local_window_size") {
            Some(Attr::Int(w, _)) if *w > 0 => Some((n.label().to_string(), *w)),
            _ => None,
        })
        .collect();
    if nodes.is_empty() {
        return Err(format!("{}: no GroupQueryAttention has a positive local_window_size", m.path.display()));
    }
    for (node, w) in &nodes {
        m.set_int_attribute(node, "local_window_size", w + 1)?;
    }
    let olds: BTreeSet<i64> = nodes.iter().map(|(_, w)| *w).collect();
    Ok(format!("local_window_size {olds:?} -> +1 on {} GroupQueryAttention nodes", nodes.len()))
}

/// Swaps KV heads 0 and 1 of a K projection. The exporter stores the weight transposed (`[hidden, kv_heads *
/// head_dim]`, `_t`), so a head is a block of columns.
pub(super) fn swap_kv_heads(m: &mut Model, cfg: &Value, fragment: &str) -> Result<String, String> {
    let dec = &cfg["model"]["decoder"];
    let (Some(head), Some(heads)) = (dec["head_size"].as_u64(), dec["num_key_value_heads"].as_u64()) else {
        return Err(format!("{}: genai_config.json has no model.decoder.head_size / num_key_value_heads", m.path.display()));
    };
    let (head, heads) = (head as usize, heads as usize);
    let name = matmul_weight(m, fragment)?;
    let t = m.tensor(&name)?;
    let [rows, cols] = t.dims[..] else { return Err(format!("{}: `{name}` has shape {:?}, expected 2-D", m.path.display(), t.dims)) };
    if heads < 2 || cols as usize != heads * head {
        return Err(format!("{}: `{name}` {:?} is not [hidden, {heads} kv heads x {head}] with 2 heads or more", m.path.display(), t.dims));
    }
    let mut w = m.f32s(&name)?;
    for row in w.chunks_exact_mut(cols as usize) {
        let (h0, rest) = row.split_at_mut(head);
        h0.swap_with_slice(&mut rest[..head]);
    }
    m.set_f32s(&name, &w)?;
    Ok(format!("`{name}` [{rows}, {cols}]: columns of KV heads 0 and 1 swapped"))
}

/// Recomputes every RoPE cos/sin table pair for `factor` x theta. A table is `[positions, half]` with
/// `cos[p][i] = cos(p * inv_freq[i])`, `inv_freq[i] = theta^(-i / half)`: the frequencies come from the table itself
/// (position 1), so `factor` x theta multiplies `inv_freq[i]` by `factor^(-i / half)`.
pub(super) fn scale_rope_theta(m: &mut Model, factor: f64) -> Result<String, String> {
    let pairs: Vec<(String, String)> = m
        .graph
        .initializers
        .iter()
        .filter_map(|t| t.name.strip_suffix("cos_cache").map(|stem| (t.name.clone(), format!("{stem}sin_cache"))))
        .filter(|(_, sin)| m.graph.constant(sin).is_some())
        .collect();
    if pairs.is_empty() {
        return Err(format!("{}: no `*cos_cache` / `*sin_cache` initializer pair", m.path.display()));
    }
    for (cos_name, sin_name) in &pairs {
        let t = m.tensor(cos_name)?;
        let [positions, half] = t.dims[..] else {
            return Err(format!("{}: `{cos_name}` has shape {:?}, expected [positions, half]", m.path.display(), t.dims));
        };
        let (positions, half) = (positions as usize, half as usize);
        let (cos, sin) = (m.f32s(cos_name)?, m.f32s(sin_name)?);
        if positions < 2 || half == 0 || cos.len() != positions * half || sin.len() != cos.len() {
            return Err(format!("{}: `{cos_name}` / `{sin_name}` are not a RoPE table pair", m.path.display()));
        }
        let inv: Vec<f64> = (0..half).map(|i| f64::from(sin[half + i]).atan2(f64::from(cos[half + i]))).collect();
        let table = |inv: &[f64]| -> (Vec<f32>, Vec<f32>) {
            (0..positions * half).map(|k| (k / half) as f64 * inv[k % half]).map(|a| (a.cos() as f32, a.sin() as f32)).unzip()
        };
        // The table must be what this formula gives, or the recomputed one would be wrong for another reason.
        let (c0, s0) = table(&inv);
        let off = c0.iter().chain(&s0).zip(cos.iter().chain(&sin)).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        if off > 1e-3 {
            return Err(format!("{}: `{cos_name}` is not a plain RoPE table (off by {off:.2e} from cos(p * f))", m.path.display()));
        }
        let scaled: Vec<f64> = inv.iter().enumerate().map(|(i, f)| f * factor.powf(-(i as f64) / half as f64)).collect();
        let (c, s) = table(&scaled);
        m.set_f32s(cos_name, &c)?;
        m.set_f32s(sin_name, &s)?;
    }
    let names: Vec<&str> = pairs.iter().map(|(c, _)| c.as_str()).collect();
    Ok(format!("RoPE tables {names:?} (+ sin) recomputed for theta x{factor}"))
}

/// A learned position table `[positions, dim]` read one row late: row p becomes row p + 1 (the last row stays).
pub(super) fn shift_rows(m: &mut Model, name: &str) -> Result<String, String> {
    let t = m.tensor(name)?;
    let [rows, cols] = t.dims[..] else { return Err(format!("{}: `{name}` has shape {:?}, expected 2-D", m.path.display(), t.dims)) };
    let (rows, cols) = (rows as usize, cols as usize);
    let mut v = m.floats(name)?;
    v.copy_within(cols.., 0);
    m.set_floats(name, &v)?;
    Ok(format!("`{name}` [{rows}, {cols}]: row p = old row p + 1"))
}

pub(super) fn zero_per_layer_embeddings(m: &mut Model) -> Result<String, String> {
    let tables: Vec<String> =
        m.graph.initializers.iter().filter(|t| t.name.contains("embed_tokens_per_layer")).map(|t| t.name.clone()).collect();
    let [table] = tables.try_into().map_err(|found: Vec<String>| {
        format!("{}: expected one per-layer embedding table (`*embed_tokens_per_layer*`), found {found:?}", m.path.display())
    })?;
    let t = m.tensor(&table)?;
    m.set_f32s(&table, &vec![0.0; t.elements()])?;
    Ok(format!("`{table}` {:?} zeroed", t.dims))
}

/// Every Clip whose bounds are float scalars (the ClippableLinear clamps) opened to +-f32::MAX.
pub(super) fn open_clips(m: &mut Model) -> Result<String, String> {
    let bounds: BTreeSet<(String, bool)> = m
        .graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "Clip")
        .flat_map(|n| [(n.inputs.get(1), false), (n.inputs.get(2), true)])
        .filter_map(|(b, upper)| b.filter(|b| m.scalar_f32(b).is_some()).map(|b| (b.clone(), upper)))
        .collect();
    if bounds.is_empty() {
        return Err(format!("{}: no Clip with float scalar bounds", m.path.display()));
    }
    for (b, upper) in &bounds {
        m.set_scalar_f32(b, if *upper { f32::MAX } else { f32::MIN })?;
    }
    Ok(format!("{} Clip bounds (ClippableLinear input/output clamps) set to +-f32::MAX", bounds.len()))
}

/// The audio encoder turns its feature mask into an attention bias with `Where(mask, 0, -1e9)`. Swapping the two
/// branches (an in-place exchange of the node's two `input` fields) inverts it: valid frames get -1e9. The mask's
/// other uses (zeroing padded frames, compressing the output) cannot be inverted in place and stay correct.
pub(super) fn invert_audio_mask(m: &mut Model, cfg: &Value) -> Result<String, String> {
    let mask = cfg["model"]["speech"]["inputs"]["attention_mask"].as_str().unwrap_or("input_features_mask").to_string();
    if !m.graph.inputs.contains(&mask) {
        return Err(format!("{}: no graph input `{mask}` (the speech attention_mask in genai_config.json)", m.path.display()));
    }
    let wheres: Vec<String> = m
        .graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "Where" && n.inputs.len() == 3)
        .filter(|n| m.graph.reads_values_of(&n.inputs[0], &mask))
        .filter(|n| m.scalar_f32(&n.inputs[1]) == Some(0.0) && m.scalar_f32(&n.inputs[2]).is_some_and(|v| v < -1e4))
        .map(|n| n.label().to_string())
        .collect();
    if wheres.is_empty() {
        return Err(format!("{}: no Where(mask-derived, 0, large negative) reads `{mask}`", m.path.display()));
    }
    for w in &wheres {
        m.swap_inputs(w, 1, 2)?;
    }
    Ok(format!("{wheres:?}: Where(`{mask}`, 0, -1e9) branches swapped (mask bias inverted)"))
}
