//! What of a generation is the answer, in both gates: the text before the first stop string (lm-eval's `until`, and
//! lmms-eval's), and for lm-eval's generate_until tasks the match of the task's answer regex.

use std::collections::BTreeMap;

use crate::accuracy::lmeval::python_re;
use crate::feed::python_str::py_is_space;

/// The answer lm-eval compares with the target. Without a pattern: the generation itself, unchanged (lm-eval
/// compares the raw string). With one, its `regex` filter: the first match of the pattern as Python's `re` reads
/// it ([`python_re`]; `findall`'s first element: the whole match without groups, group 1 with one, the first
/// non-empty group with more), stripped of Python whitespace; `[invalid]` when nothing matches.
pub fn extract_answer(regex: Option<&str>, generated: &str) -> String {
    const FALLBACK: &str = "[invalid]";
    let Some(r) = regex.and_then(compiled) else { return generated.to_string() };
    let Some(c) = r.captures(generated) else { return FALLBACK.into() };
    let m = match c.len() {
        1 => c.get(0).map(|m| m.as_str()),
        2 => Some(c.get(1).map_or("", |m| m.as_str())),
        _ => c.iter().skip(1).flatten().map(|m| m.as_str()).find(|m| !m.is_empty()).or(Some(FALLBACK)),
    };
    m.unwrap_or_default().trim_matches(py_is_space).to_string()
}

/// `pattern` (Python's `re`, translated) compiled once per process (every item of a task extracts its answer with
/// the same one); `None` when it is refused (task loading has already said so, naming the file).
fn compiled(pattern: &str) -> Option<regex::Regex> {
    static CACHE: std::sync::OnceLock<std::sync::Mutex<BTreeMap<String, Option<regex::Regex>>>> = std::sync::OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    cache.entry(pattern.to_string()).or_insert_with(|| python_re::compile(pattern).ok()).clone()
}

/// Cuts a generation at the first stop string (lm-eval's `until`, and lmms-eval's): the text before the first
/// occurrence of any of them; an empty string never stops.
pub fn cut_at_stop<'a>(text: &'a str, until: &[String]) -> &'a str {
    first_stop(text, until).map_or(text, |(at, _)| &text[..at])
}

/// Where the first stop string of `until` occurs in `text`, and which one (at a tie, the one that sorts first).
pub fn first_stop<'a>(text: &str, until: &'a [String]) -> Option<(usize, &'a str)> {
    until.iter().filter(|s| !s.is_empty()).filter_map(|s| text.find(s.as_str()).map(|at| (at, s.as_str()))).min()
}
