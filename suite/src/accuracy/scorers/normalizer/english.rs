//! Whisper's `english.py`: the `EnglishTextNormalizer`, with its spelling map (`english.json`, lmms-eval's file
//! unchanged, sha256 fe59aa7a85cd73cd20a6cb99f0c573bfa5235f720baa570e53576af05167f0bb) and its number normalizer
//! ([`super::numbers`]).

use std::collections::HashMap;
use std::sync::OnceLock;

use regex::Regex;

use super::basic::{collapse_spaces, drop_bracketed, remove_symbols_and_diacritics};
use super::numbers::Numbers;
use super::re_sub::{compile, group, sub, sub_literals};
use crate::feed::python_str::{py_lower, py_split};

/// The patterns, compiled once; `\s` is spelled `[\s\x1C-\x1F]` to be Python's.
struct Patterns {
    space_apostrophe: Regex,
    digit_comma_digit: Regex,
    period: Regex,
    symbol_not_before_digit: Regex,
    percent_not_after_digit: Regex,
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| Patterns {
        space_apostrophe: compile(r"[\s\x1C-\x1F]+'"),
        digit_comma_digit: compile(r"(\d),(\d)"),
        period: compile(r"\.([^0-9]|$)"),
        symbol_not_before_digit: compile(r"[.$¢€£]([^0-9])"),
        percent_not_after_digit: compile(r"([^0-9])%"),
    })
}

/// lmms-eval's `english.json`: British spellings to American ones.
const SPELLINGS: &str = include_str!("english.json");

/// The `\b...\b` contractions and titles, in `EnglishTextNormalizer`'s order.
const BOUNDED_REPLACERS: [(&str, &str); 35] = [
    ("won't", "will not"),
    ("can't", "can not"),
    ("let's", "let us"),
    ("ain't", "aint"),
    ("y'all", "you all"),
    ("wanna", "want to"),
    ("gotta", "got to"),
    ("gonna", "going to"),
    ("i'ma", "i am going to"),
    ("imma", "i am going to"),
    ("woulda", "would have"),
    ("coulda", "could have"),
    ("shoulda", "should have"),
    ("ma'am", "madam"),
    ("mr", "mister "),
    ("mrs", "missus "),
    ("st", "saint "),
    ("dr", "doctor "),
    ("prof", "professor "),
    ("capt", "captain "),
    ("gov", "governor "),
    ("ald", "alderman "),
    ("gen", "general "),
    ("sen", "senator "),
    ("rep", "representative "),
    ("pres", "president "),
    ("rev", "reverend "),
    ("hon", "honorable "),
    ("asst", "assistant "),
    ("assoc", "associate "),
    ("lt", "lieutenant "),
    ("col", "colonel "),
    ("jr", "junior "),
    ("sr", "senior "),
    ("esq", "esquire "),
];

/// The perfect tenses and general contractions (a `\b` after only), in order after the ones above.
const TRAILING_REPLACERS: [(&str, &str); 14] = [
    ("'d been", " had been"),
    ("'s been", " has been"),
    ("'d gone", " had gone"),
    ("'s gone", " has gone"),
    ("'d done", " had done"),
    ("'s got", " has got"),
    ("n't", " not"),
    ("'re", " are"),
    ("'s", " is"),
    ("'d", " would"),
    ("'ll", " will"),
    ("'t", " not"),
    ("'ve", " have"),
    ("'m", " am"),
];

/// Whisper's `EnglishTextNormalizer`: fillers dropped, contractions and titles spelled out, numbers in digits,
/// American spellings, symbols away from numbers removed. Built once (it reads the spelling map).
pub struct EnglishTextNormalizer {
    numbers: Numbers,
    spellings: HashMap<String, String>,
}

impl Default for EnglishTextNormalizer {
    fn default() -> Self {
        Self::new()
    }
}

impl EnglishTextNormalizer {
    pub fn new() -> EnglishTextNormalizer {
        // The map is compiled in and checked by this module's tests.
        let spellings = serde_json::from_str(SPELLINGS).unwrap_or_default();
        EnglishTextNormalizer { numbers: Numbers::new(), spellings }
    }

    /// One shared normalizer: building one parses the spelling map.
    pub fn shared() -> &'static EnglishTextNormalizer {
        static N: OnceLock<EnglishTextNormalizer> = OnceLock::new();
        N.get_or_init(EnglishTextNormalizer::new)
    }

    /// `EnglishTextNormalizer()(s)`. The ends are not stripped (a leading or trailing space may stay).
    pub fn normalize(&self, s: &str) -> String {
        let p = patterns();
        let s = drop_bracketed(&py_lower(s));
        let s = sub_literals(&s, &["hmm", "mm", "mhm", "mmm", "uh", "um"], true, true, "");
        let s = sub(&p.space_apostrophe, &s, |_| "'".into());
        let mut s = s;
        for (from, to) in BOUNDED_REPLACERS {
            s = sub_literals(&s, &[from], true, true, to);
        }
        for (from, to) in TRAILING_REPLACERS {
            s = sub_literals(&s, &[from], false, true, to);
        }
        let s = sub(&p.digit_comma_digit, &s, |c| format!("{}{}", group(c, 1), group(c, 2)));
        let s = sub(&p.period, &s, |c| format!(" {}", group(c, 1)));
        let s = remove_symbols_and_diacritics(&s, ".%$¢€£");
        let s = self.numbers.normalize(&s);
        let s = py_split(&s).map(|w| self.spellings.get(w).map_or(w, String::as_str)).collect::<Vec<_>>().join(" ");
        let s = sub(&p.symbol_not_before_digit, &s, |c| format!(" {}", group(c, 1)));
        let s = sub(&p.percent_not_after_digit, &s, |c| format!("{} ", group(c, 1)));
        collapse_spaces(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spelling_map_is_lmms_evals() {
        // len(EnglishSpellingNormalizer().mapping) in lmms-eval 0.7.3.
        let n = EnglishTextNormalizer::new();
        assert_eq!(n.spellings.len(), 1_739);
        assert_eq!(n.spellings.get("colour").map(String::as_str), Some("color"));
    }

    #[test]
    fn python_word_boundaries_differ_from_the_regex_crates() {
        // A combining accent is no word character to Python, so "mr" before one is a word of its own (the
        // accent then goes with the diacritics, the trailing space with the spelling pass's split): lmms-eval's
        // EnglishTextNormalizer gives "mister".
        assert_eq!(EnglishTextNormalizer::shared().normalize("mr\u{301}"), "mister");
        assert_eq!(EnglishTextNormalizer::shared().normalize("mr\u{301}x"), "mister x");
    }
}
