//! ANLS as lmms-eval 0.7.3 scores DocVQA (`api/metrics.py`, `anls`, after Qwen-VL's `infographicsvqa_eval.py`).
//!
//! Per answer: both strings stripped, lowercased and their whitespace runs made one space; their Levenshtein
//! distance over characters (unit costs) divided by the longer of the two *raw* strings, each measured after
//! `str.upper()` (so "ß" counts two). The item scores 1 minus the smallest such distance, set to 0 when below 0.5
//! (`< 0.5`: exactly 0.5 is kept). The task is the mean over items.

use crate::feed::python_str::{py_lower, py_split, py_strip};

/// The metric itself, `anls(references, [prediction])["anls"]`; no answers score 0 (lmms-eval would raise).
pub fn anls(prediction: &str, answers: &[String]) -> f64 {
    let norm = |s: &str| py_split(&py_lower(py_strip(s))).collect::<Vec<_>>().join(" ");
    let upper_len = |s: &str| crate::feed::python_str::py_upper(s).chars().count();
    let det = norm(prediction);
    let min = answers
        .iter()
        .map(|a| {
            let dist = strsim::levenshtein(&norm(a), &det);
            let length = upper_len(a).max(upper_len(prediction));
            if length == 0 { 0.0 } else { dist as f64 / length as f64 }
        })
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))));
    let Some(min) = min else { return 0.0 };
    let score = 1.0 - min;
    if score < 0.5 { 0.0 } else { score }
}

/// One DocVQA item as lmms-eval scores it: docvqa_val has no `process_results`, and lmms-eval's default one
/// strips the generation before the metric sees it.
pub fn item(prediction: &str, answers: &[String]) -> f64 {
    anls(py_strip(prediction), answers)
}

/// The task's `mean` aggregation (a left-to-right sum over the count); NaN with no items.
pub fn aggregate(items: &[f64]) -> f64 {
    items.iter().fold(0.0, |a, b| a + b) / items.len() as f64
}
