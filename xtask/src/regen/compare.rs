//! A regenerated golden against the stored one, within the reference's own noise.
//!
//! The same reference on another CPU sums its floats in another order: its logits move by a few ulp while nothing
//! that it decides (ids, tokens, hashes) moves at all. A golden whose every float moved by less than the noise the
//! reference measured for it (its `reference_noise`, per position where stored) is unchanged: rewriting it would
//! churn a pull request, and needing `--force` for it would hide a real change. Everything else compares exactly.
//!
//! The noise is how far one float32 run sits from the float64 one; two float32 runs that each sit within it differ by
//! less than twice it (the triangle inequality), and no less will do: regenerated with torch's AVX2 kernels on this
//! suite's AVX-512 machine, one-ulp moves reach 1.11 times a position's noise (qwen3-tiny, position 24).

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

/// Two float32 runs, each within the noise of the float64 one, differ by less than this many times the noise.
pub const TWO_RUNS: f64 = 2.0;

/// How a regenerated file compares with the stored one.
#[derive(Debug, Clone, PartialEq)]
pub enum Diff {
    /// Byte for byte the same.
    Same,
    /// Only floats moved, each by less than [`TWO_RUNS`] times the reference's noise at its place; `max` is the
    /// largest move, at `at`, where the noise is `noise`.
    NoiseOnly { max: f64, at: String, noise: f64 },
    /// Something moved that must not (an id, a token, a hash, a shape), or a float moved by its noise or more.
    Changed { at: String, why: String },
}

impl Diff {
    pub fn is_change(&self) -> bool {
        matches!(self, Diff::Changed { .. })
    }
}

impl fmt::Display for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Diff::Same => write!(f, "the same bytes"),
            Diff::NoiseOnly { max, at, noise } => {
                write!(f, "noise only: max Δ {max:.3e}, at {at}, where the reference's noise is {noise:.3e}")
            }
            Diff::Changed { at, why } => write!(f, "{at}: {why}"),
        }
    }
}

/// The reference's measured noise, as a stored L4 golden records it: the bound each kind of value is judged by.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bounds {
    /// `reference_noise.max`: the last prompt position's max |f32 - f64| over the vocabulary.
    pub last: Option<f64>,
    /// `positions[i].noise`, per prompt position.
    pub positions: Vec<Option<f64>>,
}

impl Bounds {
    /// The bounds an L4 golden's text records; none when it records no noise (mobius' goldens, audio streams).
    pub fn of_prefill(text: &[u8]) -> Bounds {
        let Ok(v) = serde_json::from_slice::<Value>(text) else { return Bounds::default() };
        let last = v.pointer("/reference_noise/max").and_then(hex);
        let positions = match v.get("positions") {
            Some(Value::Array(ps)) => ps.iter().map(|p| p.get("noise").and_then(hex)).collect(),
            _ => Vec::new(),
        };
        Bounds { last, positions }
    }

    /// The largest noise the reference measured anywhere in the prompt: the bound of a decode step's logits, whose
    /// own noise is not measured (a step's logits sit at one more position of the same model).
    pub fn steps(&self) -> Option<f64> {
        self.positions.iter().flatten().copied().chain(self.last).reduce(f64::max)
    }

    /// The bound at a path of an L4 golden: a position's floats by that position's noise, the last position's
    /// (top-10, summary, full logits, the noise statistics themselves) by `reference_noise.max`; everything else
    /// (ids, hashes, sizes, provenance) is exact.
    pub fn prefill(&self, path: &[Seg]) -> Option<f64> {
        match path {
            [Seg::Key("positions"), Seg::Index(i), Seg::Key("logits" | "logsumexp" | "noise"), ..] => {
                self.positions.get(*i).copied().flatten()
            }
            [Seg::Key("top10_logits" | "logits_summary" | "last_logits" | "reference_noise"), ..] => self.last,
            _ => None,
        }
    }

    /// The bound at a path of an L5 golden: the steps' logits by [`Bounds::steps`]; the tokens, ids and text exact.
    pub fn generation(&self, path: &[Seg]) -> Option<f64> {
        match path {
            [Seg::Key("steps"), Seg::Index(_), Seg::Key("logits"), ..] => self.steps(),
            _ => None,
        }
    }
}

/// One step of a path into a JSON document.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

fn render(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if s.is_empty() => s.push_str(k),
            Seg::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    if s.is_empty() { "the document".into() } else { s }
}

/// A float a golden stores: a hex-float string, or a JSON number.
fn hex(v: &Value) -> Option<f64> {
    match v {
        Value::String(s) => mobius_conformance::judge::hexfloat::parse_f64(s).ok(),
        Value::Number(n) => n.as_f64(),
        _ => None,
    }
}

struct Walk<'b> {
    bound: &'b dyn Fn(&[Seg]) -> Option<f64>,
    /// The largest float move so far, where, and its bound.
    max: Option<(f64, String, f64)>,
}

impl Walk<'_> {
    fn value<'a>(&mut self, path: &mut Vec<Seg<'a>>, old: &'a Value, new: &'a Value) -> Result<(), (String, String)> {
        match (old, new) {
            (Value::Object(a), Value::Object(b)) => {
                let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
                for k in keys {
                    path.push(Seg::Key(k));
                    match (a.get(k), b.get(k)) {
                        (Some(x), Some(y)) => self.value(path, x, y)?,
                        (Some(_), None) => return Err((render(path), "stored, no longer written".into())),
                        (None, _) => return Err((render(path), "new: the stored golden has no such field".into())),
                    }
                    path.pop();
                }
                Ok(())
            }
            (Value::Array(a), Value::Array(b)) => {
                if a.len() != b.len() {
                    return Err((render(path), format!("{} entries, stored {}", b.len(), a.len())));
                }
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    path.push(Seg::Index(i));
                    self.value(path, x, y)?;
                    path.pop();
                }
                Ok(())
            }
            _ if old == new => Ok(()),
            _ => self.leaf(path, old, new),
        }
    }

    fn leaf(&mut self, path: &[Seg], old: &Value, new: &Value) -> Result<(), (String, String)> {
        let at = render(path);
        let shown = |v: &Value| v.to_string();
        let Some(bound) = (self.bound)(path) else {
            return Err((at, format!("{} now, stored {} (compared exactly)", shown(new), shown(old))));
        };
        let (Some(x), Some(y)) = (hex(old), hex(new)) else {
            return Err((at, format!("{} now, stored {} (not numbers)", shown(new), shown(old))));
        };
        self.float(at, x, y, bound)
    }

    fn float(&mut self, at: String, old: f64, new: f64, noise: f64) -> Result<(), (String, String)> {
        let d = (new - old).abs();
        // NaN never passes: it is not less than anything.
        if d.partial_cmp(&(TWO_RUNS * noise)) != Some(std::cmp::Ordering::Less) {
            return Err((at, format!("{new:e} now, stored {old:e}: Δ {d:.3e} is not under twice the reference's noise {noise:.3e}")));
        }
        if self.max.as_ref().is_none_or(|(m, _, _)| d > *m) {
            self.max = Some((d, at, noise));
        }
        Ok(())
    }

    fn finish(self) -> Diff {
        match self.max {
            Some((max, at, noise)) => Diff::NoiseOnly { max, at, noise },
            // Different bytes with equal values (key order, spelling): no value moved at all.
            None => Diff::NoiseOnly { max: 0.0, at: "no value (formatting only)".into(), noise: 0.0 },
        }
    }
}

/// Two JSON goldens, floats judged by the noise `bound` gives at their path (`None`: exact).
pub fn json(old: &[u8], new: &[u8], bound: &dyn Fn(&[Seg]) -> Option<f64>) -> Diff {
    if old == new {
        return Diff::Same;
    }
    let parse =
        |b: &[u8], which: &str| serde_json::from_slice::<Value>(b).map_err(|e| Diff::Changed { at: which.into(), why: e.to_string() });
    let (a, b) = match (parse(old, "the stored file"), parse(new, "the new file")) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(d), _) | (_, Err(d)) => return d,
    };
    let mut walk = Walk { bound, max: None };
    match walk.value(&mut Vec::new(), &a, &b) {
        Ok(()) => walk.finish(),
        Err((at, why)) => Diff::Changed { at, why },
    }
}

/// Two safetensors files: the same tensor names, dtypes and shapes; float32 and float64 values within the noise
/// `bound` (`None`: exact), every other dtype exact.
pub fn safetensors(old: &[u8], new: &[u8], bound: Option<f64>) -> Diff {
    use safetensors::{Dtype, SafeTensors};
    if old == new {
        return Diff::Same;
    }
    let changed = |at: &str, why: String| Diff::Changed { at: at.into(), why };
    let (a, b) = match (SafeTensors::deserialize(old), SafeTensors::deserialize(new)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) => return changed("the stored file", e.to_string()),
        (_, Err(e)) => return changed("the new file", e.to_string()),
    };
    let names = |s: &SafeTensors| s.names().into_iter().map(String::from).collect::<BTreeSet<_>>();
    if names(&a) != names(&b) {
        return changed("tensors", format!("{:?} now, stored {:?}", names(&b), names(&a)));
    }
    let no_bound = |_: &[Seg]| None;
    let mut walk = Walk { bound: &no_bound, max: None };
    for name in names(&a) {
        let (x, y) = (a.tensor(&name).unwrap(), b.tensor(&name).unwrap());
        if x.dtype() != y.dtype() || x.shape() != y.shape() {
            return changed(&name, format!("{:?} {:?} now, stored {:?} {:?}", y.dtype(), y.shape(), x.dtype(), x.shape()));
        }
        let floats = |d: &[u8]| -> Option<Vec<f64>> {
            match x.dtype() {
                Dtype::F32 => Some(d.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect()),
                Dtype::F64 => Some(d.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()),
                _ => None,
            }
        };
        if x.data() == y.data() {
            continue;
        }
        let (Some(bound), Some(xs), Some(ys)) = (bound, floats(x.data()), floats(y.data())) else {
            let first = x.data().iter().zip(y.data()).position(|(p, q)| p != q).unwrap_or(0);
            return changed(&name, format!("{:?} data differs from byte {first} on (compared exactly)", x.dtype()));
        };
        for (i, (&p, &q)) in xs.iter().zip(&ys).enumerate() {
            if p.to_bits() != q.to_bits()
                && let Err((at, why)) = walk.float(format!("{name}[{i}]"), p, q, bound)
            {
                return Diff::Changed { at, why };
            }
        }
    }
    walk.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mobius_conformance::judge::hexfloat::format_f64;

    /// A crafted L4 golden: last-position noise 1e-5, position noise 2e-5 and 4e-5.
    fn prefill(top: f64, pos: f64, lse: f64, noise: f64, ids: [i64; 2]) -> Vec<u8> {
        let h = format_f64;
        serde_json::to_vec_pretty(&serde_json::json!({
            "top1_id": ids[0], "top2_id": ids[1], "top10_ids": ids,
            "top10_logits": [h(top), h(1.0)], "logits_summary": [h(top), h(-1.0), h(0.0), h(1.0)],
            "input_ids": [2, 7], "input_hash": "ab12", "vocab_size": 8,
            "last_logits": [h(top), h(1.0), h(0.0), h(0.0), h(0.0), h(0.0), h(0.0), h(0.0)],
            "reference_noise": {"max": h(noise), "p50": h(noise / 4.0), "p99": h(noise / 2.0)},
            "positions": [
                {"ids": [3, 4], "logits": [h(pos), h(0.5)], "logsumexp": h(lse), "noise": h(2e-5)},
                {"ids": [ids[0], ids[1]], "logits": [h(top), h(1.0)], "logsumexp": h(lse), "noise": h(4e-5)},
            ],
        }))
        .unwrap()
    }

    fn generation(step: f64, tokens: [i64; 2]) -> Vec<u8> {
        let h = format_f64;
        serde_json::to_vec_pretty(&serde_json::json!({
            "model_id": "m", "prompt": "p", "generated_tokens": tokens, "max_new_tokens": 2,
            "steps": [{"ids": [tokens[0], 5], "logits": [h(step), h(1.0)]}, {"ids": [tokens[1], 5], "logits": [h(3.0), h(1.0)]}],
        }))
        .unwrap()
    }

    fn l4(old: &[u8], new: &[u8]) -> Diff {
        let b = Bounds::of_prefill(old);
        json(old, new, &|p| b.prefill(p))
    }

    #[test]
    fn identical_bytes_are_the_same() {
        let g = prefill(5.0, 2.0, 6.0, 1e-5, [1, 2]);
        assert_eq!(l4(&g, &g), Diff::Same);
    }

    #[test]
    fn last_position_logits_within_the_noise_are_noise_only_and_say_where() {
        let old = prefill(5.0, 2.0, 6.0, 1e-5, [1, 2]);
        let d = l4(&old, &prefill(5.0 + 6e-6, 2.0, 6.0, 1e-5, [1, 2]));
        let Diff::NoiseOnly { max, at, noise } = &d else { panic!("{d:?}") };
        assert!((max - 6e-6).abs() < 1e-9 && *noise == 1e-5, "{d:?}");
        assert!(at.contains("logits"), "{at}");
        assert!(d.to_string().starts_with("noise only: max Δ 6.000e-6, at "), "{d}");
        // Up to twice the noise: two runs that each sit within it of the float64 one.
        assert!(matches!(l4(&old, &prefill(5.0 + 1.9e-5, 2.0, 6.0, 1e-5, [1, 2])), Diff::NoiseOnly { .. }));
        // At twice the noise or over it: a change, named.
        let d = l4(&old, &prefill(5.0 + 2.1e-5, 2.0, 6.0, 1e-5, [1, 2]));
        assert!(d.is_change() && d.to_string().contains("not under twice the reference's noise 1.000e-5"), "{d}");
    }

    #[test]
    fn each_position_is_judged_by_its_own_noise() {
        let old = prefill(5.0, 2.0, 6.0, 1e-5, [1, 2]);
        // 6e-5 is over twice position 0's noise (2e-5) ...
        let d = l4(&old, &prefill(5.0, 2.0 + 6e-5, 6.0, 1e-5, [1, 2]));
        assert!(matches!(&d, Diff::Changed { at, .. } if at == "positions[0].logits[0]"), "{d:?}");
        // ... while a logsumexp 6e-5 off is under twice position 1's (4e-5) but not position 0's.
        let d = l4(&old, &prefill(5.0, 2.0, 6.0 + 6e-5, 1e-5, [1, 2]));
        assert!(matches!(&d, Diff::Changed { at, .. } if at == "positions[0].logsumexp"), "{d:?}");
        let d = l4(&old, &prefill(5.0, 2.0 + 3e-5, 6.0 + 3e-5, 1e-5, [1, 2]));
        assert!(matches!(d, Diff::NoiseOnly { .. }), "{d:?}");
    }

    #[test]
    fn the_noise_fields_move_within_the_noise_too() {
        let old = prefill(5.0, 2.0, 6.0, 1e-5, [1, 2]);
        let d = l4(&old, &prefill(5.0, 2.0, 6.0, 1e-5 + 1e-11, [1, 2]));
        assert!(matches!(&d, Diff::NoiseOnly { at, .. } if at.starts_with("reference_noise.")), "{d:?}");
        let d = l4(&old, &prefill(5.0, 2.0, 6.0, 3.5e-5, [1, 2]));
        assert!(matches!(&d, Diff::Changed { at, .. } if at == "reference_noise.max"), "{d:?}");
    }

    #[test]
    fn ids_and_hashes_stay_exact_however_small_the_logit_move() {
        let old = prefill(5.0, 2.0, 6.0, 1e-5, [1, 2]);
        let d = l4(&old, &prefill(5.0, 2.0, 6.0, 1e-5, [2, 1]));
        assert!(
            matches!(&d, Diff::Changed { at, why } if at == "positions[1].ids[0]" || at == "top10_ids[0]" || at == "top1_id" && why.contains("exactly")),
            "{d:?}"
        );
        let new = String::from_utf8(old.clone()).unwrap().replace("ab12", "ab13");
        let d = l4(&old, new.as_bytes());
        assert!(matches!(&d, Diff::Changed { at, why } if at == "input_hash" && why.contains("exactly")), "{d:?}");
    }

    #[test]
    fn a_golden_without_noise_compares_exactly() {
        let old = String::from_utf8(prefill(5.0, 2.0, 6.0, 1e-5, [1, 2])).unwrap();
        let mut v: Value = serde_json::from_str(&old).unwrap();
        v.as_object_mut().unwrap().remove("reference_noise");
        let old = serde_json::to_vec(&v).unwrap();
        let mut w = v.clone();
        w["top10_logits"][0] = format_f64(5.0 + 1e-9).into();
        let d = l4(&old, &serde_json::to_vec(&w).unwrap());
        assert!(matches!(&d, Diff::Changed { at, .. } if at == "top10_logits[0]"), "{d:?}");
    }

    #[test]
    fn step_logits_are_bounded_by_the_largest_noise_measured_and_tokens_are_exact() {
        let b = Bounds::of_prefill(&prefill(5.0, 2.0, 6.0, 1e-5, [1, 2]));
        assert_eq!(b.steps(), Some(4e-5));
        let l5 = |old: &[u8], new: &[u8]| json(old, new, &|p| b.generation(p));
        let old = generation(4.0, [1, 2]);
        let d = l5(&old, &generation(4.0 + 7e-5, [1, 2]));
        assert!(matches!(&d, Diff::NoiseOnly { at, .. } if at == "steps[0].logits[0]"), "{d:?}");
        let d = l5(&old, &generation(4.0 + 9e-5, [1, 2]));
        assert!(matches!(&d, Diff::Changed { at, .. } if at == "steps[0].logits[0]"), "{d:?}");
        let d = l5(&old, &generation(4.0, [1, 3]));
        assert!(matches!(&d, Diff::Changed { at, .. } if at == "generated_tokens[1]"), "{d:?}");
    }

    #[test]
    fn a_field_added_or_dropped_is_a_change() {
        let old = generation(4.0, [1, 2]);
        let mut v: Value = serde_json::from_slice(&old).unwrap();
        v["generated_text"] = "x".into();
        let d = json(&old, &serde_json::to_vec(&v).unwrap(), &|_| Some(1.0));
        assert!(matches!(&d, Diff::Changed { at, .. } if at == "generated_text"), "{d:?}");
    }

    /// Features and sidecars: float tensors within the bound, integer tensors and shapes exact.
    fn st(features: &[f32], ids: &[i64]) -> Vec<u8> {
        use safetensors::tensor::TensorView;
        let f: Vec<u8> = features.iter().flat_map(|x| x.to_le_bytes()).collect();
        let i: Vec<u8> = ids.iter().flat_map(|x| x.to_le_bytes()).collect();
        let views = vec![
            ("image_features", TensorView::new(safetensors::Dtype::F32, vec![features.len()], &f).unwrap()),
            ("input_ids", TensorView::new(safetensors::Dtype::I64, vec![ids.len()], &i).unwrap()),
        ];
        safetensors::serialize(views, None).unwrap()
    }

    #[test]
    fn feature_tensors_move_within_the_noise_and_integer_tensors_not_at_all() {
        let old = st(&[1.0, 2.0, 3.0], &[2, 7]);
        let d = safetensors(&old, &st(&[1.0, 2.0 + 4e-6, 3.0], &[2, 7]), Some(1e-5));
        assert!(matches!(&d, Diff::NoiseOnly { at, .. } if at == "image_features[1]"), "{d:?}");
        let d = safetensors(&old, &st(&[1.0, 2.0 + 3e-5, 3.0], &[2, 7]), Some(1e-5));
        assert!(matches!(&d, Diff::Changed { at, .. } if at == "image_features[1]"), "{d:?}");
        let d = safetensors(&old, &st(&[1.0, 2.0, 3.0], &[2, 8]), Some(1e-5));
        assert!(matches!(&d, Diff::Changed { at, .. } if at == "input_ids"), "{d:?}");
        let d = safetensors(&old, &st(&[1.0, 2.0 + 4e-6, 3.0], &[2, 7]), None);
        assert!(d.is_change(), "no noise measured: exact: {d:?}");
        let d = safetensors(&old, &st(&[1.0, 2.0], &[2, 7]), Some(1.0));
        assert!(matches!(&d, Diff::Changed { at, .. } if at == "image_features"), "a shape that moved: {d:?}");
    }

    #[test]
    fn a_nan_is_never_noise() {
        let old = st(&[1.0], &[2]);
        let d = safetensors(&old, &st(&[f32::NAN], &[2]), Some(1e9));
        assert!(d.is_change(), "{d:?}");
    }
}
