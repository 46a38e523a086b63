//! Bugs that shipped in real exports, as same-length patches of a [`Model`]: shared by `cargo xtask mutants` and the
//! suite's own tests, so both make the very same broken package. Each says what it changed.

use crate::Model;

/// Layer `layer`'s attention node reads `past_key_values.<layer>.key` and `.value` swapped: a decode-only bug, since a
/// prefill's cache is empty.
pub fn swap_past_kv(m: &mut Model, layer: usize) -> Result<String, String> {
    let (key, value) = (format!("past_key_values.{layer}.key"), format!("past_key_values.{layer}.value"));
    let node = m
        .graph
        .nodes
        .iter()
        .find(|n| n.inputs.contains(&key) && n.inputs.contains(&value))
        .ok_or_else(|| format!("{}: no node reads both `{key}` and `{value}`", m.path.display()))?;
    let at = |name: &str| node.inputs.iter().position(|i| i == name).unwrap_or_default();
    let (name, op, k, v) = (node.label().to_string(), node.op_type.clone(), at(&key), at(&value));
    m.swap_inputs(&name, k, v)?;
    Ok(format!("`{name}` ({op}) inputs {k} `{key}` and {v} `{value}` swapped"))
}

/// Every RoPE table (`*cos_cache`, `*sin_cache`: one row per position, float32 or float16) x1.01 from row `from` on.
pub fn rope_wrong_from(m: &mut Model, from: usize) -> Result<String, String> {
    let tables: Vec<String> = m
        .graph
        .initializers
        .iter()
        .filter(|t| t.name.ends_with("cos_cache") || t.name.ends_with("sin_cache"))
        .map(|t| t.name.clone())
        .collect();
    if tables.is_empty() {
        return Err(format!("{}: no `*cos_cache` / `*sin_cache` initializer", m.path.display()));
    }
    for name in &tables {
        let t = m.tensor(name)?;
        let [rows, cols] = t.dims[..] else {
            return Err(format!("{}: `{name}` has shape {:?}, expected [positions, dim]", m.path.display(), t.dims));
        };
        if from as i64 >= rows {
            return Err(format!("{}: `{name}` has {rows} positions; cannot change it from position {from}", m.path.display()));
        }
        let mut v = m.floats(name)?;
        v[from * cols as usize..].iter_mut().for_each(|x| *x *= 1.01);
        m.set_floats(name, &v)?;
    }
    Ok(format!("{} x1.01 from position {from} on", tables.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", ")))
}
