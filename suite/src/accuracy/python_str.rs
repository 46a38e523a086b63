//! Python's string rules, as the task files and the scorers need them: lm-eval and lmms-eval run on Python's `str`,
//! and the numbers the gate compares with are what those rules give.
//!
//! - `str.isspace`, and with it `str.split()`, `str.strip()` and `re`'s `\s`: Unicode's White_Space plus the four
//!   information separators U+001C..U+001F;
//! - `str.lower` and `str.capitalize`;
//! - `re`'s word characters (for `\b`: `str.isalnum()` or `_`; the `regex` crate's `\w` also takes marks and
//!   connectors), `str.isdecimal` and a decimal digit's value, and `unicodedata.category`'s first letter, from
//!   `scorers/unicode_classes.txt`, written from Python 3.11's `unicodedata` (Unicode 14.0.0) by
//!   `xtask/reference/lmms_scorers.py`;
//! - `str.lower`, `str.upper` and `unicodedata.normalize`'s NFKD and NFKC over Python 3.11's Unicode 14.0, where
//!   Rust's standard library and the normalization crate are newer: a character 14.0 did not assign
//!   (`scorers/unicode_unassigned.txt`, written by the same script) is left as Python leaves it.
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

/// `str.lower()`: full case mapping with the final sigma, as Rust's `to_lowercase` does, over Python 3.11's Unicode
/// 14.0: a character Rust maps (Unicode 16) that was not yet in 14.0, or that maps to one that was not (U+A7CB and its
/// pair), is left as it is, as Python leaves it.
pub fn py_lower(s: &str) -> String {
    // Between the characters kept, Rust's string lowering, final sigma included: a kept character is neither cased
    // nor case-ignorable to Python, so a sigma beside it is final or not exactly as at the end or start of a string.
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some((i, c)) = rest.char_indices().find(|&(_, c)| !in_14(c, c.to_lowercase())) {
        out.push_str(&rest[..i].to_lowercase());
        out.push(c);
        rest = &rest[i + c.len_utf8()..];
    }
    out.push_str(&rest.to_lowercase());
    out
}

/// `str.upper()` of one character, over Unicode 14.0 as [`py_lower`].
fn py_upper_char(c: char) -> Vec<char> {
    if in_14(c, c.to_uppercase()) { c.to_uppercase().collect() } else { vec![c] }
}

/// `str.upper()`, over Unicode 14.0 as [`py_lower`].
pub fn py_upper(s: &str) -> String {
    s.chars().flat_map(py_upper_char).collect()
}

/// Whether Python 3.11 maps `c` as Rust does (`mapped`): `c` and what it maps to were in Unicode 14.0, or `c` is left
/// alone.
fn in_14(c: char, mapped: impl Iterator<Item = char> + Clone) -> bool {
    let mut same = mapped.clone();
    (same.next() == Some(c) && same.next().is_none()) || (py_assigned(c) && mapped.into_iter().all(py_assigned))
}

/// Whether Python 3.11's `unicodedata` (Unicode 14.0) assigns `c`: not in a run of `scorers/unicode_unassigned.txt`.
pub fn py_assigned(c: char) -> bool {
    static RUNS: OnceLock<Vec<(u32, u32)>> = OnceLock::new();
    let runs = RUNS.get_or_init(|| {
        include_str!("scorers/unicode_unassigned.txt")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once(' ').and_then(|(a, b)| Some((u32::from_str_radix(a, 16).ok()?, u32::from_str_radix(b, 16).ok()?))))
            .collect()
    });
    let cp = c as u32;
    let i = runs.partition_point(|&(_, last)| last < cp);
    runs.get(i).is_none_or(|&(first, _)| first > cp)
}

/// `unicodedata.normalize("NFKD", s)` over Unicode 14.0. Unicode's normalization stability makes a string of
/// characters Unicode 14.0 assigns normalize the same under any later version; a character it did not assign has
/// no decomposition there and combines with nothing (a starter of class 0), so the string is normalized in runs
/// between those characters, which stay as they are.
pub fn py_nfkd(s: &str) -> String {
    normalized(s, |run| unicode_normalization::UnicodeNormalization::nfkd(run).collect())
}

/// `unicodedata.normalize("NFKC", s)` over Unicode 14.0, as [`py_nfkd`].
pub fn py_nfkc(s: &str) -> String {
    normalized(s, |run| unicode_normalization::UnicodeNormalization::nfkc(run).collect())
}

fn normalized(s: &str, form: impl Fn(&str) -> String) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some((i, c)) = rest.char_indices().find(|&(_, c)| !py_assigned(c)) {
        out.push_str(&form(&rest[..i]));
        out.push(c);
        rest = &rest[i + c.len_utf8()..];
    }
    out.push_str(&form(rest));
    out
}

/// `str.capitalize()`: the first character upper case, the rest lower case.
pub fn py_capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => py_upper_char(f).into_iter().chain(py_lower(c.as_str()).chars()).collect(),
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

/// `str.isdecimal` as a regex class (`[\x{30}-\x{39}...]`): Python 3.11's decimal digits, for a pattern's `\d`.
pub fn py_decimal_class() -> String {
    let runs: String = classes().iter().filter(|r| r.2 == Class::Digit).map(|&(a, b, _)| format!("\\x{{{a:x}}}-\\x{{{b:x}}}")).collect();
    format!("[{runs}]")
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
