//! The figures' arithmetic: a median with its range, and a ratio that is no figure where its peer has none.

use serde_json::{Value, json};

/// Median, min and max of repeated measurements.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    pub fn of(mut v: Vec<f64>) -> Stats {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Stats { median, min: v[0], max: v[n - 1] }
    }

    pub(super) fn from_json(v: &Value) -> Option<Stats> {
        Some(Stats { median: v["median"].as_f64()?, min: v["min"].as_f64()?, max: v["max"].as_f64()? })
    }

    pub(super) fn json(&self) -> Value {
        json!({ "median": self.median, "min": self.min, "max": self.max })
    }
}

pub(super) fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

/// Median, min and max of the finite figures.
pub(super) fn finite_stats(v: impl IntoIterator<Item = f64>) -> Option<Stats> {
    let v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
    (!v.is_empty()).then(|| Stats::of(v))
}
