//! LibriSpeech's WER as lmms-eval 0.7.3 computes it (`tasks/librispeech/utils.py`, `librispeech_wer`, and
//! `tasks/asr_wer_utils.py`), for English (`task` "asr_en").
//!
//! Each reference and hypothesis goes through `remove_sp` (`<|...|>` tags to spaces, whitespace runs to one space,
//! the space before `!,.?;:` dropped, leading spaces stripped), then `_normalize`: Whisper's
//! EnglishTextNormalizer and, after it, the BasicTextNormalizer; then the EvaluationTokenizer ("none" tokenizer,
//! tokens made only of punctuation dropped, lowercased) and a whitespace split. The task's number is corpus-level:
//! all word edits (unit-cost Levenshtein over words) over all reference words, times 100.

use std::sync::OnceLock;

use regex::Regex;

use super::normalizer::basic::basic_normalize;
use super::normalizer::english::EnglishTextNormalizer;
use crate::feed::python_str::{py_is_punctuation, py_lower, py_split};

/// One utterance's word edits against its reference's word count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edits {
    pub edits: usize,
    pub words: usize,
}

fn remove_sp(text: &str) -> String {
    static P: OnceLock<[Regex; 3]> = OnceLock::new();
    let [tags, spaces, before_punct] = P.get_or_init(|| {
        [r"<\|.*?\|>", r"[\s\x1C-\x1F]+", r" ?([!,.?;:])"].map(|p| Regex::new(p).unwrap_or_else(|e| panic!("remove_sp pattern {p:?}: {e}")))
    });
    let s = tags.replace_all(text, " ");
    let s = spaces.replace_all(&s, " ");
    let s = before_punct.replace_all(&s, "$1");
    s.trim_start_matches(' ').to_string()
}

/// `EvaluationTokenizer.remove_punctuation`: split on single spaces, drop every token made only of punctuation
/// (the empty ones too, so space runs close up).
fn remove_punctuation(s: &str) -> String {
    s.split(' ').filter(|t| !t.chars().all(py_is_punctuation)).collect::<Vec<_>>().join(" ")
}

/// The words lmms-eval scores for one English text, after the whole chain.
pub fn normalize(text: &str) -> Vec<String> {
    let s = remove_sp(text);
    let s = EnglishTextNormalizer::shared().normalize(&s);
    let s = basic_normalize(&s);
    py_split(&py_lower(&remove_punctuation(&s))).map(String::from).collect()
}

/// One utterance: its hypothesis' word edits against its reference.
pub fn utterance(reference: &str, hypothesis: &str) -> Edits {
    let r = normalize(reference);
    let h = normalize(hypothesis);
    Edits { edits: strsim::generic_levenshtein(&r, &h), words: r.len() }
}

/// `librispeech_wer`: all edits over all reference words, x100. NaN without reference words (lmms-eval raises).
pub fn corpus(utterances: &[Edits]) -> f64 {
    let edits: usize = utterances.iter().map(|u| u.edits).sum();
    let words: usize = utterances.iter().map(|u| u.words).sum();
    edits as f64 / words as f64 * 100.0
}
