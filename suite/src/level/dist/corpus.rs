//! The distribution level's corpora as the golden cut them: a text corpus's documents, chunked as llama.cpp does;
//! a speech corpus's utterances, each a clip and its transcript.

use serde::Deserialize;

use crate::error::{Error, Result, bail};

/// Chunks the corpus as the golden did (and llama.cpp does): the text's ids (no special tokens) cut into chunks of
/// `n_ctx`, the remainder dropped, each chunk's first id replaced by `bos` when the tokenizer has one.
pub fn chunk_ids(ids: &[i64], n_ctx: usize, bos: Option<i64>) -> Vec<i64> {
    let n = ids.len() / n_ctx;
    let mut out = ids[..n * n_ctx].to_vec();
    if let Some(b) = bos {
        for c in 0..n {
            out[c * n_ctx] = b;
        }
    }
    out
}

/// The corpus file's documents joined by a blank line (what `dist.py` tokenizes).
pub fn corpus_text(file: &str, text: &str) -> Result<String> {
    let mut docs = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        #[derive(Deserialize)]
        struct Doc {
            text: String,
        }
        let doc: Doc = serde_json::from_str(line).map_err(|e| Error::new(format!("{file}: line {}: {e}", i + 1)))?;
        if doc.text.is_empty() {
            bail!("{file}: line {}: field `text` is empty", i + 1);
        }
        docs.push(doc.text);
    }
    if docs.is_empty() {
        bail!("{file}: no document (one JSON object with a `text` a line)");
    }
    Ok(docs.join("\n\n"))
}

/// One utterance of a speech corpus: its name, its clip (a path relative to the suite root) and its transcript.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Utterance {
    pub name: String,
    pub audio: String,
    pub text: String,
}

/// A speech corpus: one `{"name", "audio", "text"}` object a line, names unique, none empty.
pub fn speech_corpus(file: &str, text: &str) -> Result<Vec<Utterance>> {
    let mut out: Vec<Utterance> = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let u: Utterance = serde_json::from_str(line).map_err(|e| Error::new(format!("{file}: line {}: {e}", i + 1)))?;
        for (field, v) in [("name", &u.name), ("audio", &u.audio), ("text", &u.text)] {
            if v.trim().is_empty() {
                bail!("{file}: line {}: field `{field}` is empty", i + 1);
            }
        }
        if out.iter().any(|o| o.name == u.name) {
            bail!("{file}: line {}: utterance `{}` is named twice", i + 1, u.name);
        }
        out.push(u);
    }
    if out.is_empty() {
        bail!("{file}: no utterance (one JSON object with `name`, `audio` and `text` a line)");
    }
    Ok(out)
}

/// A transcript as the decoder is forced through it: with the leading space Whisper writes before its first word
/// (what `dist.py` tokenizes too).
pub fn transcript(text: &str) -> String {
    format!(" {}", text.trim())
}
