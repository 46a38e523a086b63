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
        include_str!("../accuracy/scorers/unicode_unassigned.txt")
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
        include_str!("../accuracy/scorers/unicode_classes.txt")
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

/// The Python methods templates call, as a minijinja unknown-method callback (lm-eval's task templates and chat
/// templates run on Python's objects): on a string `strip`, `lstrip`, `rstrip` (Python's whitespace, or the
/// characters given), `upper`, `lower`, `capitalize`, `title`, `replace`, `startswith` and `endswith` (a string or a
/// tuple of them), `split` and `rsplit` (with `maxsplit`), `splitlines`, `join`, `count`, `find`, `rfind`, `index`,
/// `isdigit`, `isalpha`, `isalnum`, `isspace`, `islower`, `isupper`; on a dict `get`, `items`, `keys`, `values`; on a
/// list `index` and `count`. Another is an `UnknownMethod` error that names it.
pub fn python_method(
    _: &minijinja::State,
    value: &minijinja::Value,
    method: &str,
    args: &[minijinja::Value],
) -> std::result::Result<minijinja::Value, minijinja::Error> {
    use minijinja::value::ValueKind;
    use minijinja::{Error as E, ErrorKind as K, Value as V};
    let bad = || E::new(K::UnknownMethod, format!("the suite does not implement Python's `{method}` here"));
    let arg_str = |i: usize| args.get(i).and_then(|a| a.as_str()).map(str::to_string);
    let arg_int = |i: usize| args.get(i).and_then(|a| i64::try_from(a.clone()).ok());
    if let Some(s) = value.as_str() {
        let chars = arg_str(0);
        let strip = |s: &str, left: bool, right: bool| -> String {
            let is = |c: char| chars.as_deref().map_or_else(|| py_is_space(c), |set| set.contains(c));
            let s = if left { s.trim_start_matches(is) } else { s };
            (if right { s.trim_end_matches(is) } else { s }).to_string()
        };
        // A string, or a tuple (list) of strings, as `startswith` and `endswith` take.
        let affixes = || -> std::result::Result<Vec<String>, E> {
            let a = args.first().ok_or_else(bad)?;
            match a.as_str() {
                Some(x) => Ok(vec![x.to_string()]),
                None => a.try_iter().map_err(|_| bad())?.map(|x| x.as_str().map(str::to_string).ok_or_else(bad)).collect(),
            }
        };
        let all = |f: fn(char) -> bool| V::from(!s.is_empty() && s.chars().all(f));
        let cased = |upper: bool| {
            let mut any = false;
            for c in s.chars() {
                if c.is_lowercase() || c.is_uppercase() {
                    any = true;
                    if c.is_uppercase() != upper {
                        return V::from(false);
                    }
                }
            }
            V::from(any)
        };
        let find = |from_end: bool| -> std::result::Result<Option<usize>, E> {
            let needle = arg_str(0).ok_or_else(bad)?;
            let at = if from_end { s.rfind(&needle) } else { s.find(&needle) };
            Ok(at.map(|b| s[..b].chars().count()))
        };
        return Ok(match method {
            "strip" => V::from(strip(s, true, true)),
            "lstrip" => V::from(strip(s, true, false)),
            "rstrip" => V::from(strip(s, false, true)),
            "upper" => V::from(py_upper(s)),
            "lower" => V::from(py_lower(s)),
            "capitalize" => V::from(py_capitalize(s)),
            "title" => V::from(py_title(s)),
            "replace" => match arg_int(2) {
                Some(n) if n >= 0 => V::from(s.replacen(&arg_str(0).ok_or_else(bad)?, &arg_str(1).ok_or_else(bad)?, n as usize)),
                _ => V::from(s.replace(&arg_str(0).ok_or_else(bad)?, &arg_str(1).ok_or_else(bad)?)),
            },
            "startswith" => V::from(affixes()?.iter().any(|a| s.starts_with(a.as_str()))),
            "endswith" => V::from(affixes()?.iter().any(|a| s.ends_with(a.as_str()))),
            "split" | "rsplit" => {
                let max = arg_int(1).filter(|&n| n >= 0).map(|n| n as usize);
                let parts: Vec<String> = match (args.first().filter(|a| !a.is_none()).and_then(|a| a.as_str()), method) {
                    (Some(sep), "split") => match max {
                        Some(n) => s.splitn(n + 1, sep).map(str::to_string).collect(),
                        None => s.split(sep).map(str::to_string).collect(),
                    },
                    (Some(sep), _) => {
                        let mut v: Vec<String> = match max {
                            Some(n) => s.rsplitn(n + 1, sep).map(str::to_string).collect(),
                            None => s.rsplit(sep).map(str::to_string).collect(),
                        };
                        v.reverse();
                        v
                    }
                    (None, _) if max.is_some() => return Err(bad()),
                    (None, _) => py_split(s).map(str::to_string).collect(),
                };
                V::from(parts)
            }
            "splitlines" if args.is_empty() => V::from(py_splitlines(s)),
            "join" => {
                let items = args.first().ok_or_else(bad)?.try_iter().map_err(|_| bad())?;
                let parts: Vec<String> =
                    items.map(|x| x.as_str().map(str::to_string).ok_or_else(bad)).collect::<std::result::Result<_, _>>()?;
                V::from(parts.join(s))
            }
            "count" if args.len() == 1 => {
                let needle = arg_str(0).ok_or_else(bad)?;
                V::from(if needle.is_empty() { s.chars().count() + 1 } else { s.matches(needle.as_str()).count() })
            }
            "find" if args.len() == 1 => V::from(find(false)?.map_or(-1, |i| i as i64)),
            "rfind" if args.len() == 1 => V::from(find(true)?.map_or(-1, |i| i as i64)),
            "index" if args.len() == 1 => V::from(find(false)?.ok_or_else(|| E::new(K::InvalidOperation, "substring not found"))?),
            "isdigit" => all(|c| py_decimal(c).is_some()),
            "isalpha" => all(char::is_alphabetic),
            "isalnum" => all(char::is_alphanumeric),
            "isspace" => all(py_is_space),
            "islower" => cased(false),
            "isupper" => cased(true),
            _ => return Err(bad()),
        });
    }
    if value.kind() == ValueKind::Map {
        let keys: Vec<V> = value.try_iter()?.collect();
        return match method {
            "get" => {
                let k = args.first().ok_or_else(bad)?;
                let v = value.get_item(k)?;
                Ok(if v.is_undefined() { args.get(1).cloned().unwrap_or(V::from(())) } else { v })
            }
            "keys" => Ok(V::from(keys)),
            "values" => Ok(V::from(keys.iter().map(|k| value.get_item(k)).collect::<std::result::Result<Vec<_>, _>>()?)),
            "items" => Ok(V::from(
                keys.iter().map(|k| Ok(V::from(vec![k.clone(), value.get_item(k)?]))).collect::<std::result::Result<Vec<_>, E>>()?,
            )),
            _ => Err(bad()),
        };
    }
    if let Ok(items) = value.try_iter() {
        let items: Vec<V> = items.collect();
        let x = args.first().ok_or_else(bad)?;
        return match method {
            "index" => {
                items.iter().position(|v| v == x).map(V::from).ok_or_else(|| E::new(K::InvalidOperation, format!("{x} is not in list")))
            }
            "count" => Ok(V::from(items.iter().filter(|v| *v == x).count())),
            _ => Err(bad()),
        };
    }
    Err(bad())
}

/// `str.title()`: a letter after a cased letter is lowered, any other letter is raised.
pub fn py_title(s: &str) -> String {
    let mut out = String::new();
    let mut prev_cased = false;
    for c in s.chars() {
        if prev_cased {
            out.push_str(&py_lower(&c.to_string()));
        } else {
            out.extend(py_upper_char(c));
        }
        prev_cased = c.is_lowercase() || c.is_uppercase() || is_titlecase(c);
    }
    out
}

/// The four titlecase digraphs (Lt), which Python counts as cased.
fn is_titlecase(c: char) -> bool {
    matches!(c, '\u{1c5}' | '\u{1c8}' | '\u{1cb}' | '\u{1f2}')
}

/// `str.splitlines()`: lines split at Python's line boundaries (`\n`, `\r`, `\r\n`, `\v`, `\f`, `\x1c`-`\x1e`,
/// `\x85`, U+2028, U+2029), the boundaries dropped.
pub fn py_splitlines(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                out.push(std::mem::take(&mut line));
            }
            '\n' | '\u{b}' | '\u{c}' | '\u{1c}' | '\u{1d}' | '\u{1e}' | '\u{85}' | '\u{2028}' | '\u{2029}' => {
                out.push(std::mem::take(&mut line))
            }
            c => line.push(c),
        }
    }
    if !line.is_empty() {
        out.push(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_table_covers_pythons_categories() {
        assert_eq!(
            classes().len(),
            include_str!("../accuracy/scorers/unicode_classes.txt").lines().filter(|l| !l.starts_with('#')).count()
        );
        assert_eq!(class('\u{301}'), Class::Mn);
        assert_eq!(class('€'), Class::Symbol);
        assert_eq!(class('…'), Class::Punct);
        assert_eq!(class('²'), Class::Alnum);
        assert_eq!(py_decimal('٣'), Some(3));
        assert_eq!(py_decimal('𝟗'), Some(9));
        assert!(!py_is_word('\u{301}') && py_is_word('_') && py_is_word('é'));
    }
}
