//! The case's tokenizer (`tokenizer.json`), loaded once per path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Error, Result};

pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    pub path: PathBuf,
    /// The text of the token lm-eval prefixes requests with: `bos_token` of the `tokenizer_config.json` beside
    /// `tokenizer.json`, else its `eos_token` (Hugging Face's `bos_token_id`, else `eos_token_id`).
    pub prefix_token: Option<String>,
}

impl TextTokenizer {
    /// Loads `dir/tokenizer.json` (or the file itself), shared across trials.
    pub fn load(dir_or_file: &Path) -> Result<Arc<TextTokenizer>> {
        static CACHE: OnceLock<Mutex<HashMap<PathBuf, Arc<TextTokenizer>>>> = OnceLock::new();
        if !dir_or_file.exists() {
            return Err(Error::new(format!(
                "{}: no such folder or file (expected a folder holding tokenizer.json)",
                dir_or_file.display()
            )));
        }
        let path = if dir_or_file.is_dir() { dir_or_file.join("tokenizer.json") } else { dir_or_file.to_path_buf() };
        crate::paths::regular_file(&path, "tokenizer")?;
        let mut cache = CACHE.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = cache.get(&path) {
            return Ok(t.clone());
        }
        let inner = tokenizers::Tokenizer::from_file(&path).map_err(|e| Error::new(format!("{}: {e}", path.display())))?;
        let prefix_token = prefix_token(&path.with_file_name("tokenizer_config.json"));
        let t = Arc::new(TextTokenizer { inner, path: path.clone(), prefix_token });
        cache.insert(path, t.clone());
        Ok(t)
    }

    /// Token ids as Hugging Face's `tokenizer(prompt)` gives them (special tokens added).
    pub fn encode(&self, text: &str) -> Result<Vec<i64>> {
        let enc = self.inner.encode(text, true).map_err(|e| Error::new(format!("{}: encoding the prompt: {e}", self.path.display())))?;
        Ok(enc.get_ids().iter().map(|&i| i as i64).collect())
    }

    /// A case's prompt as its ids: as [`TextTokenizer::encode`] gives them, or with `chat`, rendered as one user turn
    /// through the chat template beside the tokenizer with the generation prompt and encoded with no special token
    /// added, as transformers' `apply_chat_template(..., add_generation_prompt=True, tokenize=True)`.
    pub fn encode_prompt(&self, prompt: &str, chat: bool) -> Result<Vec<i64>> {
        if !chat {
            return self.encode(prompt);
        }
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let template = crate::feed::chat_template::ChatTemplate::load(dir, None)?;
        let messages = crate::feed::chat_template::messages_json([("user", prompt)]);
        let how = crate::feed::chat_template::Render { add_generation_prompt: true, ..Default::default() };
        let text = template.render(&messages, &how)?;
        self.encode_plain(&text)
    }

    /// Token ids with no special token (Hugging Face's `tokenizer(text, add_special_tokens=False)`).
    pub fn encode_plain(&self, text: &str) -> Result<Vec<i64>> {
        let enc = self.inner.encode(text, false).map_err(|e| Error::new(format!("{}: encoding a text: {e}", self.path.display())))?;
        Ok(enc.get_ids().iter().map(|&i| i as i64).collect())
    }

    /// The id the tokenizer puts before a text (its BOS), if it puts one: the first id of `tokenizer("")`.
    pub fn bos(&self) -> Result<Option<i64>> {
        Ok(self.encode("")?.first().copied())
    }

    /// Token ids as lm-eval's `hf` model encodes a request: with the special tokens, unless the text already starts
    /// with the prefix (BOS) token's text, which would otherwise be doubled.
    pub fn encode_request(&self, text: &str) -> Result<Vec<i64>> {
        let special = !self.prefix_token.as_deref().is_some_and(|b| !b.is_empty() && text.starts_with(b));
        let enc = self.inner.encode(text, special).map_err(|e| Error::new(format!("{}: encoding a request: {e}", self.path.display())))?;
        Ok(enc.get_ids().iter().map(|&i| i as i64).collect())
    }

    /// Text for display; ids the vocabulary lacks show as `<id?>`.
    pub fn decode(&self, ids: &[i64]) -> String {
        let ok: Vec<u32> = ids.iter().filter_map(|&i| u32::try_from(i).ok()).collect();
        if ok.len() == ids.len()
            && ok.iter().all(|&i| (i as usize) < self.inner.get_vocab_size(true))
            && let Ok(s) = self.inner.decode(&ok, true)
        {
            return s;
        }
        ids.iter().map(|&i| self.token(i)).collect::<Vec<_>>().join("")
    }

    /// One token's text, quoted-friendly.
    /// The text of `ids` with special tokens kept (a chat prompt as a processor reads it).
    pub fn decode_raw(&self, ids: &[i64]) -> String {
        let ok: Vec<u32> = ids.iter().filter_map(|&i| u32::try_from(i).ok()).collect();
        self.inner.decode(&ok, false).unwrap_or_default()
    }

    pub fn token(&self, id: i64) -> String {
        u32::try_from(id).ok().and_then(|i| self.inner.decode(&[i], false).ok()).unwrap_or_else(|| format!("<{id}?>"))
    }
}

/// `bos_token` (else `eos_token`) of a `tokenizer_config.json`, as a string or `{content: ...}`; `None` when the
/// file or both fields are missing.
fn prefix_token(config: &Path) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(config).ok()?).ok()?;
    let text = |k: &str| match v.get(k)? {
        serde_json::Value::String(s) => Some(s.clone()),
        o => o.get("content")?.as_str().map(str::to_string),
    };
    text("bos_token").or_else(|| text("eos_token"))
}
