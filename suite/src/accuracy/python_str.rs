//! Python's string rules, as the task files and the scorers need them: lm-eval and lmms-eval run on Python's `str`,
//! and the numbers the gate compares with are what those rules give.
//!
//! - `str.isspace`, and with it `str.split()`, `str.strip()` and `re`'s `\s`: Unicode's White_Space plus the four
//!   information separators U+001C..U+001F;
//! - `str.lower` and `str.capitalize`;
//! - `re`'s word characters (for `\b`: `str.isalnum()` or `_`; the `regex` crate's `\w` also takes marks and
//!   connectors), `str.isdecimal` and a decimal digit's value, and `unicodedata.category`'s first letter, from
//!   `scorers/unicode_classes.txt`, written from Python 3.11's `unicodedata` (Unicode 14.0.0) by
//!   `xtask/reference/lmms_scorers.py`.
//!
//! A leaf: nothing here knows a task or a scorer.

use std::sync::OnceLock;

/// Python's `str.isspace`, which `str.strip` and `str.rstrip` use: Unicode White_Space (Rust's
/// `char::is_whitespace`) plus the information separators U+001C..U+001F.
pub fn py_is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `str.split()` without arguments: runs of Python whitespace separate, none at either end.
pub fn py_split(s: &str) -> impl Iterator<Item = &str> {
    s.split(py_is_space).filter(|w| !w.is_empty())
}

/// `str.strip()` without arguments.
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(py_is_space)
}

/// `str.lower()`: full case mapping with the final sigma, as Rust's `to_lowercase` also does.
pub fn py_lower(s: &str) -> String {
    s.to_lowercase()
}

/// `str.capitalize()`: the first character upper case, the rest lower case.
pub fn py_capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c.flat_map(char::to_lowercase)).collect(),
        None => String::new(),
    }
}

/// Python's view of a code point, coarse enough for what the normalizers ask of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Nonspacing mark (Mn): the diacritics NFKD splits off.
    Mn,
    /// Spacing or enclosing mark (Mc, Me).
    Mark,
    Symbol,
    Punct,
    /// Decimal digit (Nd: `str.isdecimal`, `re`'s `\d`).
    Digit,
    /// Any other letter or number (`str.isalnum`).
    Alnum,
    Other,
}

/// The runs of `unicode_classes.txt`, sorted by first code point.
fn classes() -> &'static [(u32, u32, Class)] {
    static TABLE: OnceLock<Vec<(u32, u32, Class)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        include_str!("scorers/unicode_classes.txt")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let mut f = l.split(' ');
                let first = u32::from_str_radix(f.next()?, 16).ok()?;
                let last = u32::from_str_radix(f.next()?, 16).ok()?;
                let class = match f.next()? {
                    "n" => Class::Mn,
                    "m" => Class::Mark,
                    "s" => Class::Symbol,
                    "p" => Class::Punct,
                    "d" => Class::Digit,
                    "w" => Class::Alnum,
                    _ => return None,
                };
                Some((first, last, class))
            })
            .collect()
    })
}

fn run_of(c: char) -> Option<(u32, u32, Class)> {
    let cp = c as u32;
    let t = classes();
    let i = t.partition_point(|&(_, last, _)| last < cp);
    t.get(i).copied().filter(|&(first, _, _)| first <= cp)
}

fn class(c: char) -> Class {
    if c.is_ascii() {
        return match c {
            'a'..='z' | 'A'..='Z' => Class::Alnum,
            '0'..='9' => Class::Digit,
            '$' | '+' | '<' | '=' | '>' | '^' | '`' | '|' | '~' => Class::Symbol,
            '!'..='/' | ':'..='@' | '['..='_' | '{'..='}' => Class::Punct,
            _ => Class::Other,
        };
    }
    run_of(c).map_or(Class::Other, |(_, _, k)| k)
}

/// `re`'s word character: `str.isalnum()` or `_`.
pub fn py_is_word(c: char) -> bool {
    c == '_' || matches!(class(c), Class::Digit | Class::Alnum)
}

/// `unicodedata.category(c)[0] == "P"`.
pub fn py_is_punctuation(c: char) -> bool {
    class(c) == Class::Punct
}

/// `unicodedata.category(c) == "Mn"`.
pub fn py_is_nonspacing_mark(c: char) -> bool {
    class(c) == Class::Mn
}

/// `unicodedata.category(c)[0] in "MSP"`.
pub fn py_is_mark_symbol_punct(c: char) -> bool {
    matches!(class(c), Class::Mn | Class::Mark | Class::Symbol | Class::Punct)
}

/// A decimal digit's value, as `int()` reads it: the digits of every script come in runs of ten from zero.
pub fn py_decimal(c: char) -> Option<u32> {
    if c.is_ascii_digit() {
        return Some(c as u32 - '0' as u32);
    }
    run_of(c).filter(|r| r.2 == Class::Digit).map(|(first, _, _)| (c as u32 - first) % 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_table_covers_pythons_categories() {
        assert_eq!(classes().len(), include_str!("scorers/unicode_classes.txt").lines().filter(|l| !l.starts_with('#')).count());
        assert_eq!(class('\u{301}'), Class::Mn);
        assert_eq!(class('€'), Class::Symbol);
        assert_eq!(class('…'), Class::Punct);
        assert_eq!(class('²'), Class::Alnum);
        assert_eq!(py_decimal('٣'), Some(3));
        assert_eq!(py_decimal('𝟗'), Some(9));
        assert!(!py_is_word('\u{301}') && py_is_word('_') && py_is_word('é'));
    }
}
