//! Whisper's `basic.py`: `remove_symbols_and_diacritics`, `remove_symbols` and the `BasicTextNormalizer`, with the
//! two steps `english.py` repeats (words between brackets dropped, whitespace runs made one space).

use std::sync::OnceLock;

use regex::Regex;

use super::re_sub::{compile, sub};
use crate::feed::python_str::{py_is_mark_symbol_punct, py_is_nonspacing_mark, py_lower, py_nfkc, py_nfkd};

/// The patterns, compiled once; `\s` is spelled `[\s\x1C-\x1F]` to be Python's.
struct Patterns {
    brackets: Regex,
    parens: Regex,
    spaces: Regex,
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| Patterns {
        brackets: compile(r"[<\[][^>\]]*[>\]]"),
        parens: compile(r"\(([^)]+?)\)"),
        spaces: compile(r"[\s\x1C-\x1F]+"),
    })
}

/// Letters NFKD leaves whole, and what `remove_symbols_and_diacritics` writes for them.
fn additional_diacritic(c: char) -> Option<&'static str> {
    Some(match c {
        'œ' => "oe",
        'Œ' => "OE",
        'ø' => "o",
        'Ø' => "O",
        'æ' => "ae",
        'Æ' => "AE",
        'ß' => "ss",
        'ẞ' => "SS",
        'đ' => "d",
        'Đ' => "D",
        'ð' => "d",
        'Ð' => "D",
        'þ' => "th",
        'Þ' => "th",
        'ł' => "l",
        'Ł' => "L",
        _ => return None,
    })
}

/// `remove_symbols_and_diacritics(s, keep)`: NFKD, then a character of `keep` stays, a listed letter is spelled
/// out, a nonspacing mark goes, any other mark, symbol or punctuation becomes a space.
pub fn remove_symbols_and_diacritics(s: &str, keep: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in py_nfkd(s).chars() {
        if keep.contains(c) {
            out.push(c);
        } else if let Some(r) = additional_diacritic(c) {
            out.push_str(r);
        } else if py_is_nonspacing_mark(c) {
        } else if py_is_mark_symbol_punct(c) {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// `remove_symbols(s)`: NFKC, then every mark, symbol or punctuation becomes a space.
pub fn remove_symbols(s: &str) -> String {
    py_nfkc(s).chars().map(|c| if py_is_mark_symbol_punct(c) { ' ' } else { c }).collect()
}

/// The words between `<...>` or `[...]`, then between `(...)`, dropped.
pub fn drop_bracketed(s: &str) -> String {
    let p = patterns();
    let s = sub(&p.brackets, s, |_| String::new());
    sub(&p.parens, &s, |_| String::new())
}

/// Every run of Python whitespace made one space.
pub fn collapse_spaces(s: &str) -> String {
    sub(&patterns().spaces, s, |_| " ".into())
}

/// `BasicTextNormalizer()(s)` (diacritics kept, letters not split): lowercase, drop `<...>`/`[...]` and `(...)`,
/// symbols to spaces, whitespace runs to one space. The ends are not stripped.
pub fn basic_normalize(s: &str) -> String {
    let s = drop_bracketed(&py_lower(s));
    collapse_spaces(&py_lower(&remove_symbols(&s)))
}
