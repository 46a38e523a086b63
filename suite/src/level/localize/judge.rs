//! The localize verdict: module by module in the model's order, the package's tensor against the reference's,
//! finite values first, then in units of the reference's own float32-vs-float64 noise there (floored at half an ulp
//! of the module's largest reference value, scaled by the dtype's `noise_dtype_scale`), out of noise past the
//! dtype's `noise_multiple_max` (the L4 table entry's own numbers; for half precision at least [`HALF_BOUND`], its
//! storage rounding, against the reference with its weights rounded to that dtype). The first module out names the
//! failure.
//!
//! Two things are not news. A deviation flows on: a module past the bound by no more than [`CARRY`] times the
//! largest multiple past the bound before it is *carried*, the upstream deviation seen through it, not a new one (a
//! module within noise carries nothing). And a case may
//! state a deviation it knows (`localize.known`: the module, the range its multiple lies in, why): past the bound and
//! inside its range it is *known*; past the bound and outside it, it is out, as a known bug that changed is news.

use serde::Deserialize;

use super::golden::{Entry, Role};
use super::place::Unplaced;
use crate::judge::tolerance::Tolerance;

/// How far past the largest noise multiple past the bound before it a module may sit and still be that deviation carried on:
/// measured on the real Gemma-3 270M builds, whose embedding deviates by 1,240x its noise (mobius writes the scale
/// as float16's 25.296875) and whose later modules then sit at most 670x (0.54 of it; 0.34 for int4); a bug a module
/// adds (RoPE of the wrong table in layer 5: 16,253x, 13 times the largest before it) stands well clear.
pub const CARRY: f64 = 4.0;

/// The least bound, in noise multiples, for a half-precision package (the table's `noise_dtype_scale` above 1),
/// judged against the reference with its weights rounded to the package's dtype (`<case>.f16.modules.safetensors`):
/// a module's value stored in float16 is off by up to half its ulp, exactly 1x the scaled noise floor, before any
/// arithmetic, and its input carries up to as much again: two roundings. Measured on the clean float16 builds: at
/// most 1.48x (Gemma-3 270M's layer 2 input norm), 1.23x gemma3-tiny, 1.13x SmolLM2-135M, 1.12x llama-tiny, 0.97x
/// qwen3-tiny and gemma4-tiny. (Against the float32 reference the weights' own rounding reached 2.3x, as much as a 1%
/// weight error in qwen3-tiny's layer 0 MLP: 2.49x; against the rounded one that error stands at 2.80x.) The logits'
/// own bound (0.8x) is below the rounding itself.
pub const HALF_BOUND: f64 = 2.0;

/// A deviation a case knows (`localize.known`): its module, the range of its noise multiple, and why.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Known {
    pub module: String,
    pub multiple: [f64; 2],
    pub reason: String,
}

/// A case's `localize:` block.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalizeSpec {
    #[serde(default)]
    pub known: Vec<Known>,
}

/// What the package gave for one recorded module.
#[derive(Debug, Clone, PartialEq)]
pub enum Got {
    /// Its values at the last prompt position.
    Values(Vec<f32>),
    /// The rule did not find it in the graph.
    Unplaced(Unplaced),
    /// The value was there but could not be read at the last prompt position (and why).
    Unreadable(String),
}

/// One module's comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub module: String,
    pub role: Role,
    /// The package's value that carries it (`None`: unplaced).
    pub value: Option<String>,
    /// The rows of its tensor compared (an encoder's frames, a tower's patches); `None`: the last prompt position.
    pub rows: Option<Vec<usize>>,
    pub state: State,
}

#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// max |diff| within `noise_multiple_max` times the noise: `multiple` is max |diff| over the noise.
    Within {
        max_abs: f64,
        multiple: f64,
    },
    Out {
        max_abs: f64,
        multiple: f64,
    },
    /// Past the bound, but no more than [`CARRY`] times the largest multiple before it (row `from`).
    Carried {
        max_abs: f64,
        multiple: f64,
        from: usize,
    },
    /// A deviation the case states, inside its range.
    Known {
        max_abs: f64,
        multiple: f64,
    },
    /// A deviation the case states, outside its range: out.
    KnownMoved {
        max_abs: f64,
        multiple: f64,
        range: [f64; 2],
    },
    /// How many of its values are NaN or infinite.
    NonFinite {
        count: usize,
    },
    /// Another number of values than the reference's.
    Length {
        got: usize,
        want: usize,
    },
    Unplaced(Unplaced),
    Unreadable(String),
}

/// Where along the model the package leaves the reference.
#[derive(Debug, Clone, PartialEq)]
pub struct Localization {
    pub rows: Vec<Row>,
    /// The first row out of noise or not finite.
    pub first: Option<usize>,
    /// The bound, in noise multiples (`noise_multiple_max`).
    pub bound: f64,
}

impl Localization {
    /// The first module out of noise, by its path.
    pub fn first_module(&self) -> Option<&str> {
        self.first.map(|i| self.rows[i].module.as_str())
    }

    /// Compared rows before the first one out, all within noise.
    pub fn within_before(&self) -> usize {
        self.rows[..self.first.unwrap_or(self.rows.len())].iter().filter(|r| matches!(r.state, State::Within { .. })).count()
    }

    /// After the first one out: how many compared rows are past the bound (out or carried), and how many compared.
    pub fn later(&self) -> (usize, usize) {
        let Some(first) = self.first else { return (0, 0) };
        let later = &self.rows[first + 1..];
        let compared = later.iter().filter(|r| r.state.multiple().is_some() || matches!(r.state, State::NonFinite { .. }));
        let out = later.iter().filter(|r| r.state.past(self.bound)).count();
        (out, compared.count())
    }

    /// Modules the rule did not find in the graph.
    pub fn unplaced(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter().filter(|r| matches!(r.state, State::Unplaced(_)))
    }
}

impl State {
    /// Its noise multiple, when it was compared.
    pub fn multiple(&self) -> Option<f64> {
        match *self {
            State::Within { multiple, .. }
            | State::Out { multiple, .. }
            | State::Carried { multiple, .. }
            | State::Known { multiple, .. }
            | State::KnownMoved { multiple, .. } => Some(multiple),
            _ => None,
        }
    }

    /// Whether it is the news a localization names: out, not finite, or a known deviation that moved.
    pub fn is_news(&self) -> bool {
        matches!(self, State::Out { .. } | State::NonFinite { .. } | State::KnownMoved { .. })
    }

    /// Whether it is past `bound` or not finite.
    pub fn past(&self, bound: f64) -> bool {
        matches!(self, State::NonFinite { .. }) || self.multiple().is_some_and(|m| m > bound)
    }
}

/// Half an ulp of float32 at `x`: the smallest noise a float32 value of that size can show.
fn half_ulp(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return f64::MIN_POSITIVE;
    }
    2f64.powi(x.abs().log2().floor() as i32 - 24)
}

/// Judges each entry against what the package gave for it (`got[k]` for `entries[k]`, `value[k]` its name), the
/// case's `known` deviations as stated.
pub fn judge(entries: &[Entry], got: Vec<Got>, value: Vec<Option<String>>, tol: &Tolerance, known: &[Known]) -> Localization {
    let mut rows: Vec<Row> = Vec::with_capacity(entries.len());
    // The largest multiple past the bound so far (a deviation that flows on), and its row: a module within noise
    // carries nothing.
    let mut largest: Option<(f64, usize)> = None;
    for (i, ((e, g), value)) in entries.iter().zip(got).zip(value).enumerate() {
        let state = match g {
            Got::Unplaced(u) => State::Unplaced(u),
            Got::Unreadable(why) => State::Unreadable(why),
            Got::Values(v) if v.len() != e.values.len() => State::Length { got: v.len(), want: e.values.len() },
            Got::Values(v) => match compare(e, &v, tol) {
                State::Out { max_abs, multiple } => {
                    match (known.iter().find(|k| k.module == e.module && e.role == Role::Output), largest) {
                        (Some(k), _) if (k.multiple[0]..=k.multiple[1]).contains(&multiple) => State::Known { max_abs, multiple },
                        (Some(k), _) => State::KnownMoved { max_abs, multiple, range: k.multiple },
                        (None, Some((m, from))) if multiple <= CARRY * m => State::Carried { max_abs, multiple, from },
                        (None, _) => State::Out { max_abs, multiple },
                    }
                }
                other => other,
            },
        };
        if let Some(m) = state.multiple().filter(|&m| m > bound(tol))
            && largest.is_none_or(|(l, _)| m > l)
        {
            largest = Some((m, i));
        }
        rows.push(Row { module: e.module.clone(), role: e.role, value, rows: e.rows.clone(), state });
    }
    let first = rows.iter().position(|r| r.state.is_news());
    Localization { rows, first, bound: bound(tol) }
}

/// The noise multiple a module may sit at: the L4 table's, at least [`HALF_BOUND`] for a half-precision dtype.
pub fn bound(tol: &Tolerance) -> f64 {
    if tol.noise_dtype_scale > 1.0 { tol.noise_multiple_max.max(HALF_BOUND) } else { tol.noise_multiple_max }
}

fn compare(e: &Entry, got: &[f32], tol: &Tolerance) -> State {
    let count = got.iter().filter(|v| !v.is_finite()).count();
    if count > 0 {
        return State::NonFinite { count };
    }
    let largest = e.values.iter().fold(0f64, |m, &v| m.max((v as f64).abs()));
    let noise = e.noise.max(half_ulp(largest)) * tol.noise_dtype_scale + e.storage;
    let max_abs = got.iter().zip(&e.values).fold(0f64, |m, (&g, &w)| m.max((g as f64 - w as f64).abs()));
    let multiple = max_abs / noise;
    if multiple > bound(tol) { State::Out { max_abs, multiple } } else { State::Within { max_abs, multiple } }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tol() -> Tolerance {
        let mut t = Tolerance::builtin(crate::judge::tolerance::Logits::Prefill, crate::vocab::Dtype::F32);
        t.noise_multiple_max = 10.0;
        t
    }

    fn entry(module: &str, values: Vec<f32>, noise: f64) -> Entry {
        Entry {
            module: module.into(),
            role: Role::Output,
            part: super::super::golden::Part::Decoder,
            rows: None,
            values,
            noise,
            storage: 0.0,
        }
    }

    #[test]
    fn the_first_module_out_of_noise_is_named_and_the_rest_counted() {
        let entries =
            [entry("a", vec![1.0, 2.0], 1e-3), entry("b", vec![1.0], 1e-3), entry("c", vec![1.0], 1e-3), entry("d", vec![1.0], 1e-3)];
        let got = vec![Got::Values(vec![1.001, 2.0]), Got::Unplaced(Unplaced::Absent), Got::Values(vec![1.5]), Got::Values(vec![1.0])];
        let l = judge(&entries, got, vec![Some("va".into()), None, Some("vc".into()), Some("vd".into())], &tol(), &[]);
        assert_eq!(l.first_module(), Some("c"));
        assert!(matches!(l.rows[0].state, State::Within { multiple, .. } if (multiple - 1.0).abs() < 1e-3), "{:?}", l.rows[0]);
        assert!(matches!(l.rows[2].state, State::Out { multiple, .. } if (multiple - 500.0).abs() < 1e-6));
        assert_eq!((l.within_before(), l.later(), l.unplaced().count()), (1, (0, 1), 1));
    }

    #[test]
    fn a_nan_is_named_before_any_size_and_a_length_mismatch_is_not_compared() {
        let entries = [entry("a", vec![1.0, 2.0], 1e-3), entry("b", vec![1.0, 2.0], 1e-3)];
        let got = vec![Got::Values(vec![1.0]), Got::Values(vec![f32::NAN, 2.0])];
        let l = judge(&entries, got, vec![None, None], &tol(), &[]);
        assert_eq!(l.rows[0].state, State::Length { got: 1, want: 2 });
        assert_eq!((l.first_module(), &l.rows[1].state), (Some("b"), &State::NonFinite { count: 1 }));
    }

    #[test]
    fn zero_reference_noise_is_floored_at_half_an_ulp() {
        // 1.0's half ulp is 2^-24: a difference of one ulp (2^-23) is two noise units, within 10.
        let l = judge(&[entry("a", vec![1.0], 0.0)], vec![Got::Values(vec![1.0 + f32::EPSILON])], vec![None], &tol(), &[]);
        assert!(matches!(l.rows[0].state, State::Within { multiple, .. } if (multiple - 2.0).abs() < 1e-9), "{:?}", l.rows[0]);
        assert_eq!(l.first, None);
    }

    #[test]
    fn a_deviation_carried_on_is_not_news_and_a_known_one_is_held_to_its_range() {
        // noise 1e-3, bound 10: 0.5 off is 500x.
        let e = |m: &str| entry(m, vec![1.0], 1e-3);
        let entries = [e("embed"), e("a"), e("b"), e("c")];
        let run = |vals: [f32; 4], known: &[Known]| {
            let got = vals.iter().map(|v| Got::Values(vec![1.0 + v])).collect();
            judge(&entries, got, vec![None; 4], &tol(), known)
        };
        // embed 500x, a 1,000x (2 times it: carried), b 5,000x (10 times the largest before: out).
        let l = run([0.5, 1.0, 5.0, 0.0], &[]);
        assert_eq!(l.first_module(), Some("embed"), "unknown, the first deviation is news");
        assert!(matches!(l.rows[1].state, State::Carried { from: 0, .. }), "{:?}", l.rows[1]);
        let known = [Known { module: "embed".into(), multiple: [400.0, 600.0], reason: "why".into() }];
        let l = run([0.5, 1.0, 5.0, 0.0], &known);
        assert!(matches!(l.rows[0].state, State::Known { .. }));
        assert_eq!(l.first_module(), Some("b"), "known embed; a carried; b is new");
        assert_eq!((l.within_before(), l.later()), (0, (0, 1)));
        let l = run([0.7, 0.0, 0.0, 0.0], &known);
        assert!(matches!(l.rows[0].state, State::KnownMoved { .. }), "700x is outside [400, 600]");
        assert_eq!(l.first_module(), Some("embed"));
        // Within noise it is within, known or not (a half-precision build's noise hides it).
        let l = run([0.0, 0.0, 0.0, 0.0], &known);
        assert!(matches!(l.rows[0].state, State::Within { .. }));
        // A module within noise carries nothing: embed 9x (within the bound of 10), a 30x (under 4 times 9) is out.
        let l = run([0.009, 0.03, 0.0, 0.0], &[]);
        assert!(matches!(l.rows[0].state, State::Within { .. }));
        assert_eq!(l.first_module(), Some("a"), "{:?}", l.rows[1]);
    }
}
