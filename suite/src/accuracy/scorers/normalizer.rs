//! Whisper's text normalizers as lmms-eval 0.7.3 vendors them (`tasks/librispeech/whisper_normalizer/basic.py`,
//! `english.py`), ported step for step with Python's own string semantics ([`crate::feed::python_str`]), since
//! LibriSpeech's WER is computed on their output:
//!
//! - [`basic`]: `basic.py`, the `BasicTextNormalizer` and the symbol and diacritic removers;
//! - [`english`]: `english.py`'s `EnglishTextNormalizer`, with its number normalizer (`numbers`, counting in
//!   `decimal`'s unbounded integers) and `english.json`, lmms-eval's British-to-American spelling map;
//! - `re_sub`: `re.sub` with Python's `\b`.
//!
//! NFKC and NFKD come from `unicode-normalization-alignments` (Unicode 9.0.0, already in the tree through
//! `tokenizers`): characters whose decomposition is newer than Unicode 9 may normalize apart from Python's.

pub mod basic;
mod decimal;
pub mod english;
mod numbers;
mod re_sub;
