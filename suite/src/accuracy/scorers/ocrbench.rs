//! OCRBench's scorer as lmms-eval 0.7.3 has it (`tasks/ocrbench/utils.py`): an item counts when one of its answers
//! is a substring of the prediction, and the task reports the count over 1,000.
//!
//! Both sides are prepared alike. HME100k (handwritten formulas) keeps case: stripped, newlines made spaces, then
//! every space (U+0020 only) removed. Every other dataset: fullwidth ASCII and the ideographic space folded to ASCII
//! (no wider NFKC), lowercased, stripped, newlines made spaces. An answer that prepares to nothing (empty or
//! blank) is in every prediction, so it always counts.

use crate::feed::python_str::{py_lower, py_strip};

/// `_fold_fullwidth_ascii`: U+FF01..U+FF5E to their ASCII forms, U+3000 to a space.
fn fold_fullwidth(s: &str) -> String {
    s.chars()
        .map(|c| match c as u32 {
            cp @ 0xFF01..=0xFF5E => char::from_u32(cp - 0xFEE0).unwrap_or(c),
            0x3000 => ' ',
            _ => c,
        })
        .collect()
}

fn prepare(s: &str, hme: bool) -> String {
    if hme { py_strip(s).replace('\n', " ").replace(' ', "") } else { py_strip(&py_lower(&fold_fullwidth(s))).replace('\n', " ") }
}

/// `ocrbench_process_results` on one generation: whether it holds one of `answers` (the prediction is stripped
/// first). `dataset_name` is the document's `dataset`; only `HME100k`, exactly, is scored apart.
pub fn item_correct(prediction: &str, answers: &[String], dataset_name: &str) -> bool {
    let hme = dataset_name == "HME100k";
    let predict = prepare(py_strip(prediction), hme);
    answers.iter().any(|a| predict.contains(&prepare(a, hme)))
}

/// The task's aggregate. `score` is what lmms-eval reports, the count over 1,000 whatever the number of items
/// (the benchmark's full size); `raw` is the count over the items scored, the number to read on a subset.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OcrBench {
    pub correct: usize,
    pub n: usize,
    pub score: f64,
    /// NaN with no items.
    pub raw: f64,
}

/// `ocrbench_aggregate_accuracy`: lmms-eval sums per question type, then over all ten types, which is the plain
/// count. (Its tally is a module-level dict it never resets, so a second aggregation in one process adds to the
/// first; this one starts from zero.)
pub fn aggregate(correct: &[bool]) -> OcrBench {
    let c = correct.iter().filter(|&&x| x).count();
    let n = correct.len();
    OcrBench { correct: c, n, score: c as f64 / 1000.0, raw: if n == 0 { f64::NAN } else { c as f64 / n as f64 } }
}
