//! ChartQA's relaxed accuracy as lmms-eval 0.7.3 has it (`tasks/chartqa/utils.py`, `relaxed_correctness`, after
//! Qwen-VL and Methani et al.).
//!
//! When the prediction reads as a number and the target as a non-zero number, the prediction passes within 5%
//! relative error (`<=`). A string ending in `%` reads as its number over 100 (every trailing `%` is dropped). A
//! number is what Python's `float()` accepts: surrounding whitespace, `_` between digits, any script's decimal
//! digits, exponents, `inf` and `nan`; "1,000" is not one. Otherwise, and for a target of 0, the two must be equal
//! once lowercased. The prediction is scored as given; the gate's task path strips it first, as lmms-eval's
//! `ConfigurableTask.process_results` does for every task (`media_gate::scores`).

use crate::feed::python_str::{py_decimal, py_is_space, py_lower};

/// `relaxed_overall`, kept for every item.
pub const OVERALL: &str = "relaxed_overall";

/// The split metric an item also counts in: `relaxed_human_split` for ChartQA's `type` "human_test",
/// `relaxed_augmented_split` for any other.
pub fn split_metric(kind: &str) -> &'static str {
    if kind == "human_test" { "relaxed_human_split" } else { "relaxed_augmented_split" }
}

/// Python's `float(text)`, or None where it raises ValueError.
pub fn py_float(text: &str) -> Option<f64> {
    // float() strips Python's whitespace except the four information separators U+001C..U+001F, which
    // `str.isspace` counts and float() refuses.
    let s = text.trim_matches(|c: char| py_is_space(c) && !('\u{1c}'..='\u{1f}').contains(&c));
    let mut ascii = String::with_capacity(s.len());
    let mut prev = '\0';
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let c = match py_decimal(c) {
            Some(d) => char::from_digit(d, 10)?,
            None if c.is_ascii() => c,
            None => return None,
        };
        if c == '_' {
            // PEP 515: an underscore only between two digits.
            let next_digit = chars.peek().and_then(|&n| py_decimal(n)).is_some();
            if !prev.is_ascii_digit() || !next_digit {
                return None;
            }
        } else {
            ascii.push(c);
        }
        prev = c;
    }
    // Rust's grammar is Python's for ASCII once underscores are gone (no hex, inf/infinity/nan in any case).
    ascii.parse().ok()
}

fn to_float(text: &str) -> Option<f64> {
    match text.strip_suffix('%') {
        Some(_) => py_float(text.trim_end_matches('%')).map(|v| v / 100.0),
        None => py_float(text),
    }
}

/// `relaxed_correctness(prediction, target)` with its default 5%.
pub fn item(prediction: &str, target: &str) -> bool {
    match (to_float(prediction), to_float(target)) {
        (Some(p), Some(t)) if t != 0.0 => (p - t).abs() / t.abs() <= 0.05,
        _ => py_lower(prediction) == py_lower(target),
    }
}
