//! Whisper's text normalizers as lmms-eval 0.7.3 vendors them (`tasks/librispeech/whisper_normalizer/basic.py`,
//! `english.py`), ported step for step with Python's own string semantics, since LibriSpeech's WER is computed on
//! their output:
//!
//! - `str.lower`, `str.split` and `str.strip` as Python has them (its whitespace adds U+001C..U+001F to Unicode's);
//! - `re`'s `\s` likewise, its `\d` (decimal digits) and its `\b`, whose word characters are those `str.isalnum`
//!   accepts and `_` (the `regex` crate's `\w` also takes marks and connectors, so `\b` is judged here by hand);
//! - `unicodedata.category` and `str.isdecimal` from `unicode_classes.txt`, written from Python 3.11's
//!   `unicodedata` (Unicode 14.0.0) by `xtask/reference/lmms_scorers.py`;
//! - NFKC and NFKD from `unicode-normalization-alignments` (Unicode 9.0.0, already in the tree through
//!   `tokenizers`): characters whose decomposition is newer than Unicode 9 may normalize apart from Python's;
//! - Python's integers are unbounded (`a decillion` is 10^33), so the number normalizer counts in decimal strings.
//!
//! `english.json`, the British-to-American spelling map, is lmms-eval's file unchanged
//! (sha256 fe59aa7a85cd73cd20a6cb99f0c573bfa5235f720baa570e53576af05167f0bb).

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use regex::{Captures, Regex};
use unicode_normalization_alignments::UnicodeNormalization;

// ------------------------------------------------------------------------------------------------ Python's text

/// Python's `str.isspace`: Unicode's White_Space and the four information separators U+001C..U+001F.
pub fn py_is_space(c: char) -> bool {
    crate::accuracy::task::py_is_space(c)
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
        include_str!("unicode_classes.txt")
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

/// `unicodedata.category(c)[0] in "MSP"`.
fn is_mark_symbol_punct(c: char) -> bool {
    matches!(class(c), Class::Mn | Class::Mark | Class::Symbol | Class::Punct)
}

/// A decimal digit's value, as `int()` reads it: the digits of every script come in runs of ten from zero.
pub fn py_decimal(c: char) -> Option<u32> {
    if c.is_ascii_digit() {
        return Some(c as u32 - '0' as u32);
    }
    run_of(c).filter(|r| r.2 == Class::Digit).map(|(first, _, _)| (c as u32 - first) % 10)
}

/// Whether byte offset `i` of `s` is a `re` word boundary (`\b`): one side a word character, the other not.
fn at_boundary(s: &str, i: usize) -> bool {
    let before = s[..i].chars().next_back().is_some_and(py_is_word);
    let after = s[i..].chars().next().is_some_and(py_is_word);
    before != after
}

/// `re.sub` (or `re.split`, through `spans`) for a pattern with `\b` at its start (`lead`) or end (`trail`): the
/// regex proposes the leftmost match, and one whose edges are not boundaries gives way to the next a character on.
/// Right for the patterns here, where a match at a given start cannot be cut otherwise to meet the boundary.
fn bounded_spans(re: &Regex, s: &str, lead: bool, trail: bool) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut pos = 0;
    while pos <= s.len() {
        let Some(m) = re.find_at(s, pos) else { break };
        if (!lead || at_boundary(s, m.start())) && (!trail || at_boundary(s, m.end())) && m.end() > m.start() {
            spans.push((m.start(), m.end()));
            pos = m.end();
        } else {
            pos = m.start() + s[m.start()..].chars().next().map_or(1, char::len_utf8);
        }
    }
    spans
}

fn sub_bounded(re: &Regex, s: &str, lead: bool, trail: bool, rep: impl Fn(&Captures) -> String) -> String {
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for (a, b) in bounded_spans(re, s, lead, trail) {
        out.push_str(&s[last..a]);
        // The span is the regex's own match at `a`, so capturing there finds it again.
        if let Some(c) = re.captures_at(s, a) {
            out.push_str(&rep(&c));
        }
        last = b;
    }
    out.push_str(&s[last..]);
    out
}

/// `re.sub` of a literal alternation framed by optional `\b`s: at each position the alternatives are tried in
/// their order, as Python's backtracking does.
fn sub_literals(s: &str, alternatives: &[&str], lead: bool, trail: bool, rep: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    'scan: while i < s.len() {
        if !lead || at_boundary(s, i) {
            for alt in alternatives {
                if s[i..].starts_with(alt) && (!trail || at_boundary(s, i + alt.len())) {
                    out.push_str(rep);
                    i += alt.len();
                    continue 'scan;
                }
            }
        }
        let c = s[i..].chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// `re.sub(pattern, template, s)` for a pattern without `\b`: the `regex` crate agrees with `re` on these.
fn sub(re: &Regex, s: &str, rep: impl Fn(&Captures) -> String) -> String {
    re.replace_all(s, |c: &Captures| rep(c)).into_owned()
}

fn group<'a>(c: &Captures<'a>, i: usize) -> &'a str {
    c.get(i).map_or("", |m| m.as_str())
}

/// The patterns, compiled once; `\s` is spelled `[\s\x1C-\x1F]` to be Python's.
struct Patterns {
    brackets: Regex,
    parens: Regex,
    spaces: Regex,
    space_apostrophe: Regex,
    digit_comma_digit: Regex,
    period: Regex,
    symbol_not_before_digit: Regex,
    percent_not_after_digit: Regex,
    and_a_half: Regex,
    letter_digit: Regex,
    digit_letter: Regex,
    digit_suffix: Regex,
    number: Regex,
    cents_after: Regex,
    cents_only: Regex,
    one: Regex,
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| {
        let r = |p: &str| Regex::new(p).unwrap_or_else(|e| panic!("normalizer pattern {p:?}: {e}"));
        Patterns {
            brackets: r(r"[<\[][^>\]]*[>\]]"),
            parens: r(r"\(([^)]+?)\)"),
            spaces: r(r"[\s\x1C-\x1F]+"),
            space_apostrophe: r(r"[\s\x1C-\x1F]+'"),
            digit_comma_digit: r(r"(\d),(\d)"),
            period: r(r"\.([^0-9]|$)"),
            symbol_not_before_digit: r(r"[.$¢€£]([^0-9])"),
            percent_not_after_digit: r(r"([^0-9])%"),
            and_a_half: r(r"and[\s\x1C-\x1F]+a[\s\x1C-\x1F]+half"),
            letter_digit: r(r"([a-z])([0-9])"),
            digit_letter: r(r"([0-9])([a-z])"),
            digit_suffix: r(r"([0-9])[\s\x1C-\x1F]+(st|nd|rd|th|s)"),
            number: r(r"^\d+(\.\d+)?$"),
            cents_after: r(r"([€£$])([0-9]+) (?:and )?¢([0-9]{1,2})"),
            cents_only: r(r"[€£$]0.([0-9]{1,2})"),
            one: r(r"1(s?)"),
        }
    })
}

// ------------------------------------------------------------------------------------------------ basic.py

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
    for (c, _) in s.nfkd() {
        if keep.contains(c) {
            out.push(c);
        } else if let Some(r) = additional_diacritic(c) {
            out.push_str(r);
        } else if class(c) == Class::Mn {
        } else if is_mark_symbol_punct(c) {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// `remove_symbols(s)`: NFKC, then every mark, symbol or punctuation becomes a space.
pub fn remove_symbols(s: &str) -> String {
    s.nfkc().map(|(c, _)| if is_mark_symbol_punct(c) { ' ' } else { c }).collect()
}

/// `BasicTextNormalizer()(s)` (diacritics kept, letters not split): lowercase, drop `<...>`/`[...]` and `(...)`,
/// symbols to spaces, whitespace runs to one space. The ends are not stripped.
pub fn basic_normalize(s: &str) -> String {
    let p = patterns();
    let s = py_lower(s);
    let s = sub(&p.brackets, &s, |_| String::new());
    let s = sub(&p.parens, &s, |_| String::new());
    let s = py_lower(&remove_symbols(&s));
    sub(&p.spaces, &s, |_| " ".into())
}

// ------------------------------------------------------------------------------------------------ numbers

/// A non-negative integer of any size, in decimal digits without leading zeros.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Int(String);

impl Int {
    fn small(n: u64) -> Int {
        Int(n.to_string())
    }

    /// `10 ** zeros`.
    fn pow10(zeros: usize) -> Int {
        Int(format!("1{}", "0".repeat(zeros)))
    }

    /// From ASCII digits, leading zeros dropped.
    fn from_digits(d: &str) -> Int {
        let t = d.trim_start_matches('0');
        Int(if t.is_empty() { "0".into() } else { t.into() })
    }

    fn is_zero(&self) -> bool {
        self.0 == "0"
    }

    /// `self % 10 ** k`.
    fn low(&self, k: usize) -> u64 {
        let d = &self.0[self.0.len().saturating_sub(k)..];
        d.parse().unwrap_or(0)
    }

    fn add(&self, other: &Int) -> Int {
        let (a, b) = (self.0.as_bytes(), other.0.as_bytes());
        let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
        let (mut i, mut j, mut carry) = (a.len(), b.len(), 0u8);
        while i > 0 || j > 0 || carry > 0 {
            let mut d = carry;
            if i > 0 {
                i -= 1;
                d += a[i] - b'0';
            }
            if j > 0 {
                j -= 1;
                d += b[j] - b'0';
            }
            out.push(b'0' + d % 10);
            carry = d / 10;
        }
        out.reverse();
        Int::from_digits(&String::from_utf8_lossy(&out))
    }

    /// `self // 1000 * 1000 + self % 1000 * multiplier`, the number normalizer's step for a multiplier word.
    fn scale_last_group(&self, multiplier_zeros: usize) -> Int {
        let residual = self.low(3);
        let n = self.0.len();
        let before = if n > 3 { Int(format!("{}000", &self.0[..n - 3])) } else { Int::small(0) };
        let scaled = if residual == 0 { Int::small(0) } else { Int(format!("{residual}{}", "0".repeat(multiplier_zeros))) };
        before.add(&scaled)
    }
}

/// A rational read from a string as `fractions.Fraction(s)` reads it, for the strings the normalizer builds
/// (digits of any script and at most one `.`; never a sign, an exponent or a `/`): `digits / 10 ** scale`.
struct Decimal {
    digits: String,
    scale: usize,
}

impl Decimal {
    fn parse(s: &str) -> Option<Decimal> {
        let (int, frac) = match s.split_once('.') {
            Some((i, f)) => (i, f),
            None => (s, ""),
        };
        // Fraction's lookahead `(?=\d|\.\d)`: a digit first, or a `.` and a digit.
        let starts = int.chars().next().is_some_and(|c| py_decimal(c).is_some())
            || (int.is_empty() && frac.chars().next().is_some_and(|c| py_decimal(c).is_some()));
        if !starts {
            return None;
        }
        let mut digits = String::new();
        for c in int.chars().chain(frac.chars()) {
            digits.push(char::from_digit(py_decimal(c)?, 10)?);
        }
        Some(Decimal { digits, scale: frac.chars().count() })
    }

    /// `self * 10 ** zeros` when it is an integer.
    fn times_pow10(&self, zeros: usize) -> Option<Int> {
        if zeros >= self.scale {
            return Some(Int::from_digits(&format!("{}{}", self.digits, "0".repeat(zeros - self.scale))));
        }
        let cut = self.scale - zeros;
        let n = self.digits.len();
        let (head, tail) = self.digits.split_at(n.saturating_sub(cut));
        tail.bytes().all(|b| b == b'0').then(|| Int::from_digits(head))
    }
}

/// The number normalizer's running value: an integer, or a string of digits it is spelling out.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Int(Int),
    Str(String),
}

impl Value {
    fn text(&self) -> String {
        match self {
            Value::Int(i) => i.0.clone(),
            Value::Str(s) => s.clone(),
        }
    }

    /// `str(value or "")`: zero and the empty string are false.
    fn text_or_empty(v: &Option<Value>) -> String {
        match v {
            Some(Value::Int(i)) if i.is_zero() => String::new(),
            Some(v) => v.text(),
            None => String::new(),
        }
    }

    /// `value[:-1]`, on the string the branches guarantee.
    fn drop_last(&self) -> String {
        let mut t = self.text();
        t.pop();
        t
    }
}

const ONES: [&str; 19] = [
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];
const TENS: [&str; 8] = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"];
const MULTIPLIERS: [&str; 12] = [
    "hundred",
    "thousand",
    "million",
    "billion",
    "trillion",
    "quadrillion",
    "quintillion",
    "sextillion",
    "septillion",
    "octillion",
    "nonillion",
    "decillion",
];

/// `EnglishNumberNormalizer`: its vocabulary, built once as `__init__` builds it.
struct Numbers {
    zeros: HashSet<&'static str>,
    ones: HashMap<String, u64>,
    ones_suffixed: HashMap<String, (u64, &'static str)>,
    tens: HashMap<String, u64>,
    tens_suffixed: HashMap<String, (u64, &'static str)>,
    /// Multipliers by their power of ten.
    multipliers: HashMap<String, usize>,
    multipliers_suffixed: HashMap<String, (usize, &'static str)>,
    preceding_prefixers: HashMap<&'static str, &'static str>,
    following_prefixers: HashMap<&'static str, &'static str>,
    words: HashSet<String>,
    decimals: HashSet<String>,
}

fn is_prefix_char(c: char) -> bool {
    matches!(c, '-' | '+' | '£' | '€' | '$' | '¢')
}

impl Numbers {
    fn new() -> Numbers {
        let ones: HashMap<String, u64> = ONES.iter().enumerate().map(|(i, n)| (n.to_string(), i as u64 + 1)).collect();
        let mut ones_suffixed: HashMap<String, (u64, &'static str)> = HashMap::new();
        for (i, n) in ONES.iter().enumerate() {
            let plural = if *n == "six" { "sixes".to_string() } else { format!("{n}s") };
            ones_suffixed.insert(plural, (i as u64 + 1, "s"));
        }
        for (w, v, s) in
            [("zeroth", 0, "th"), ("first", 1, "st"), ("second", 2, "nd"), ("third", 3, "rd"), ("fifth", 5, "th"), ("twelfth", 12, "th")]
        {
            ones_suffixed.insert(w.into(), (v, s));
        }
        for (i, n) in ONES.iter().enumerate() {
            let v = i as u64 + 1;
            if v > 3 && v != 5 && v != 12 {
                ones_suffixed.insert(format!("{n}{}", if n.ends_with('t') { "h" } else { "th" }), (v, "th"));
            }
        }
        let tens: HashMap<String, u64> = TENS.iter().enumerate().map(|(i, n)| (n.to_string(), 20 + 10 * i as u64)).collect();
        let mut tens_suffixed = HashMap::new();
        for (n, &v) in &tens {
            tens_suffixed.insert(n.replace('y', "ies"), (v, "s"));
            tens_suffixed.insert(n.replace('y', "ieth"), (v, "th"));
        }
        let zeros_of = |i: usize| if i == 0 { 2 } else { 3 * i };
        let multipliers: HashMap<String, usize> = MULTIPLIERS.iter().enumerate().map(|(i, n)| (n.to_string(), zeros_of(i))).collect();
        let mut multipliers_suffixed = HashMap::new();
        for (n, &z) in &multipliers {
            multipliers_suffixed.insert(format!("{n}s"), (z, "s"));
            multipliers_suffixed.insert(format!("{n}th"), (z, "th"));
        }
        let zeros: HashSet<&'static str> = ["o", "oh", "zero"].into();
        let preceding_prefixers: HashMap<&'static str, &'static str> =
            [("minus", "-"), ("negative", "-"), ("plus", "+"), ("positive", "+")].into();
        let following_prefixers: HashMap<&'static str, &'static str> = [
            ("pound", "£"),
            ("pounds", "£"),
            ("euro", "€"),
            ("euros", "€"),
            ("dollar", "$"),
            ("dollars", "$"),
            ("cent", "¢"),
            ("cents", "¢"),
        ]
        .into();
        let mut words: HashSet<String> = HashSet::new();
        words.extend(zeros.iter().map(|w| w.to_string()));
        words.extend(ones.keys().cloned());
        words.extend(ones_suffixed.keys().cloned());
        words.extend(tens.keys().cloned());
        words.extend(tens_suffixed.keys().cloned());
        words.extend(multipliers.keys().cloned());
        words.extend(multipliers_suffixed.keys().cloned());
        words.extend(preceding_prefixers.keys().map(|w| w.to_string()));
        words.extend(following_prefixers.keys().map(|w| w.to_string()));
        words.extend(["per", "percent", "and", "double", "triple", "point"].map(String::from));
        let mut decimals: HashSet<String> = ones.keys().cloned().collect();
        decimals.extend(tens.keys().cloned());
        decimals.extend(zeros.iter().map(|w| w.to_string()));
        Numbers {
            zeros,
            ones,
            ones_suffixed,
            tens,
            tens_suffixed,
            multipliers,
            multipliers_suffixed,
            preceding_prefixers,
            following_prefixers,
            words,
            decimals,
        }
    }

    fn is_numeric(&self, w: &str) -> bool {
        patterns().number.is_match(w)
    }

    /// `process_words`: the words with spelled numbers read as numbers.
    fn process_words(&self, words: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        let mut prefix: Option<String> = None;
        let mut value: Option<Value> = None;
        let mut skip = false;

        // `output(result)`: the result with the pending prefix; value and prefix are cleared.
        let output = |r: String, prefix: &mut Option<String>, value: &mut Option<Value>| -> String {
            let r = match prefix.take() {
                Some(p) => p + &r,
                None => r,
            };
            *value = None;
            r
        };

        for i in 0..words.len() {
            if skip {
                skip = false;
                continue;
            }
            let prev = if i == 0 { None } else { Some(words[i - 1]) };
            let current = words[i];
            let next = words.get(i + 1).copied();
            let next_is_numeric = next.is_some_and(|n| self.is_numeric(n));
            let next_in = |set: &dyn Fn(&str) -> bool| next.is_some_and(set);
            let prev_in = |set: &dyn Fn(&str) -> bool| prev.is_some_and(set);
            let first = current.chars().next().unwrap_or(' ');
            let has_prefix = is_prefix_char(first);
            let without_prefix = if has_prefix { &current[first.len_utf8()..] } else { current };

            if self.is_numeric(without_prefix) {
                // Arabic numbers, possibly after a sign or a currency symbol.
                let Some(f) = Decimal::parse(without_prefix) else { continue };
                if let Some(v) = &value {
                    if let Value::Str(s) = v
                        && s.ends_with('.')
                    {
                        // Decimals or an address's parts, glued on.
                        value = Some(Value::Str(format!("{s}{current}")));
                        continue;
                    }
                    let t = v.text();
                    out.push(output(t, &mut prefix, &mut value));
                }
                if has_prefix {
                    prefix = Some(first.to_string());
                }
                value = Some(match f.times_pow10(0) {
                    Some(n) => Value::Int(n),
                    None => Value::Str(without_prefix.to_string()),
                });
            } else if !self.words.contains(current) {
                if let Some(v) = &value {
                    let t = v.text();
                    out.push(output(t, &mut prefix, &mut value));
                }
                out.push(output(current.to_string(), &mut prefix, &mut value));
            } else if self.zeros.contains(current) {
                value = Some(Value::Str(Value::text_or_empty(&value) + "0"));
            } else if let Some(&ones) = self.ones.get(current) {
                // A string, or a digit after a digit, is spelled on; an integer takes the digit into its last place.
                let spelled = matches!(value, Some(Value::Str(_))) || prev_in(&|p| self.ones.contains_key(p));
                let after_tens = prev_in(&|p| self.tens.contains_key(p)) && ones < 10;
                value = Some(match &value {
                    None => Value::Int(Int::small(ones)),
                    Some(Value::Int(n)) if !spelled => {
                        let place = if ones < 10 { n.low(1) } else { n.low(2) };
                        if place == 0 { Value::Int(n.add(&Int::small(ones))) } else { Value::Str(format!("{}{ones}", n.0)) }
                    }
                    Some(v) if after_tens => Value::Str(format!("{}{ones}", v.drop_last())),
                    Some(v) => Value::Str(format!("{}{ones}", v.text())),
                });
            } else if let Some(&(ones, suffix)) = self.ones_suffixed.get(current) {
                // An ordinal or a plural: the number ends here.
                let spelled = matches!(value, Some(Value::Str(_))) || prev_in(&|p| self.ones.contains_key(p));
                let after_tens = prev_in(&|p| self.tens.contains_key(p)) && ones < 10;
                let r = match &value {
                    None => format!("{ones}{suffix}"),
                    Some(Value::Int(n)) if !spelled => {
                        let place = if ones < 10 { n.low(1) } else { n.low(2) };
                        if place == 0 { format!("{}{suffix}", n.add(&Int::small(ones)).0) } else { format!("{}{ones}{suffix}", n.0) }
                    }
                    Some(v) if after_tens => format!("{}{ones}{suffix}", v.drop_last()),
                    Some(v) => format!("{}{ones}{suffix}", v.text()),
                };
                out.push(output(r, &mut prefix, &mut value));
                value = None;
            } else if let Some(&tens) = self.tens.get(current) {
                value = Some(match &value {
                    None => Value::Int(Int::small(tens)),
                    Some(Value::Str(s)) => Value::Str(format!("{s}{tens}")),
                    Some(Value::Int(n)) if n.low(2) == 0 => Value::Int(n.add(&Int::small(tens))),
                    Some(Value::Int(n)) => Value::Str(format!("{}{tens}", n.0)),
                });
            } else if let Some(&(tens, suffix)) = self.tens_suffixed.get(current) {
                let r = match &value {
                    None => format!("{tens}{suffix}"),
                    Some(Value::Str(s)) => format!("{s}{tens}{suffix}"),
                    Some(Value::Int(n)) if n.low(2) == 0 => format!("{}{suffix}", n.add(&Int::small(tens)).0),
                    Some(Value::Int(n)) => format!("{}{tens}{suffix}", n.0),
                };
                out.push(output(r, &mut prefix, &mut value));
            } else if let Some(&zeros) = self.multipliers.get(current) {
                match value.clone() {
                    None => value = Some(Value::Int(Int::pow10(zeros))),
                    Some(Value::Int(n)) if !n.is_zero() => value = Some(Value::Int(n.scale_last_group(zeros))),
                    // A string (or zero) is read as a fraction and multiplied when the product is whole.
                    Some(v) => match Decimal::parse(&v.text()).and_then(|f| f.times_pow10(zeros)) {
                        Some(p) => value = Some(Value::Int(p)),
                        None => {
                            out.push(output(v.text(), &mut prefix, &mut value));
                            value = Some(Value::Int(Int::pow10(zeros)));
                        }
                    },
                }
            } else if let Some(&(zeros, suffix)) = self.multipliers_suffixed.get(current) {
                match value.clone() {
                    None => out.push(output(format!("{}{suffix}", Int::pow10(zeros).0), &mut prefix, &mut value)),
                    Some(Value::Str(s)) => match Decimal::parse(&s).and_then(|f| f.times_pow10(zeros)) {
                        Some(p) => out.push(output(format!("{}{suffix}", p.0), &mut prefix, &mut value)),
                        None => {
                            out.push(output(s, &mut prefix, &mut value));
                            out.push(output(format!("{}{suffix}", Int::pow10(zeros).0), &mut prefix, &mut value));
                        }
                    },
                    Some(Value::Int(n)) => {
                        let n = n.scale_last_group(zeros);
                        out.push(output(format!("{}{suffix}", n.0), &mut prefix, &mut value));
                    }
                }
                value = None;
            } else if let Some(&sign) = self.preceding_prefixers.get(current) {
                // A sign applies when a number follows.
                if let Some(v) = &value {
                    let t = v.text();
                    out.push(output(t, &mut prefix, &mut value));
                }
                if next_in(&|n| self.words.contains(n)) || next_is_numeric {
                    prefix = Some(sign.to_string());
                } else {
                    out.push(output(current.to_string(), &mut prefix, &mut value));
                }
            } else if let Some(&symbol) = self.following_prefixers.get(current) {
                // A currency applies after a number.
                if let Some(v) = &value {
                    prefix = Some(symbol.to_string());
                    let t = v.text();
                    out.push(output(t, &mut prefix, &mut value));
                } else {
                    out.push(output(current.to_string(), &mut prefix, &mut value));
                }
            } else if current == "per" || current == "percent" {
                if let Some(v) = &value {
                    let t = v.text();
                    if current == "percent" {
                        out.push(output(t + "%", &mut prefix, &mut value));
                    } else if next == Some("cent") {
                        out.push(output(t + "%", &mut prefix, &mut value));
                        skip = true;
                    } else {
                        out.push(output(t, &mut prefix, &mut value));
                        out.push(output(current.to_string(), &mut prefix, &mut value));
                    }
                } else {
                    out.push(output(current.to_string(), &mut prefix, &mut value));
                }
            } else {
                // "and", "double", "triple", "point": special only before what can be a number.
                if !next_in(&|n| self.words.contains(n)) && !next_is_numeric {
                    if let Some(v) = &value {
                        let t = v.text();
                        out.push(output(t, &mut prefix, &mut value));
                    }
                    out.push(output(current.to_string(), &mut prefix, &mut value));
                } else if current == "and" {
                    // "and" after hundreds, thousands, ... is dropped.
                    if !prev_in(&|p| self.multipliers.contains_key(p)) {
                        if let Some(v) = &value {
                            let t = v.text();
                            out.push(output(t, &mut prefix, &mut value));
                        }
                        out.push(output(current.to_string(), &mut prefix, &mut value));
                    }
                } else if current == "double" || current == "triple" {
                    if next_in(&|n| self.ones.contains_key(n) || self.zeros.contains(n)) {
                        let repeats = if current == "double" { 2 } else { 3 };
                        let ones = next.and_then(|n| self.ones.get(n)).copied().unwrap_or(0);
                        value = Some(Value::Str(Value::text_or_empty(&value) + &ones.to_string().repeat(repeats)));
                        skip = true;
                    } else {
                        if let Some(v) = &value {
                            let t = v.text();
                            out.push(output(t, &mut prefix, &mut value));
                        }
                        out.push(output(current.to_string(), &mut prefix, &mut value));
                    }
                } else if next_in(&|n| self.decimals.contains(n)) || next_is_numeric {
                    // "point" before a digit; before anything else it is dropped.
                    value = Some(Value::Str(Value::text_or_empty(&value) + "."));
                }
            }
        }
        if let Some(v) = &value {
            let t = v.text();
            out.push(output(t, &mut prefix, &mut value));
        }
        out
    }

    /// `preprocess`: "<number> and a half" as "<number> point five", numbers apart from letters, suffixes kept on.
    fn preprocess(&self, s: &str) -> String {
        let p = patterns();
        let spans = bounded_spans(&p.and_a_half, s, true, true);
        let mut segments = Vec::with_capacity(spans.len() + 1);
        let mut last = 0;
        for (a, b) in &spans {
            segments.push(&s[last..*a]);
            last = *b;
        }
        segments.push(&s[last..]);
        let mut results: Vec<&str> = Vec::new();
        for (i, segment) in segments.iter().enumerate() {
            if py_strip(segment).is_empty() {
                continue;
            }
            results.push(segment);
            if i + 1 < segments.len() {
                let last_word = py_split(segment).last().unwrap_or("");
                if self.decimals.contains(last_word) || self.multipliers.contains_key(last_word) {
                    results.push("point five");
                } else {
                    results.push("and a half");
                }
            }
        }
        let s = results.join(" ");
        let s = sub(&p.letter_digit, &s, |c| format!("{} {}", group(c, 1), group(c, 2)));
        let s = sub(&p.digit_letter, &s, |c| format!("{} {}", group(c, 1), group(c, 2)));
        sub_bounded(&p.digit_suffix, &s, false, true, |c| format!("{}{}", group(c, 1), group(c, 2)))
    }

    /// `postprocess`: cents joined to their currency, "1" written "one".
    fn postprocess(&self, s: &str) -> String {
        let p = patterns();
        let s = sub_bounded(&p.cents_after, s, false, true, |c| {
            let cents: u32 = group(c, 3).parse().unwrap_or(0);
            format!("{}{}.{cents:02}", group(c, 1), group(c, 2))
        });
        let s = sub_bounded(&p.cents_only, &s, false, true, |c| format!("¢{}", group(c, 1).parse::<u32>().unwrap_or(0)));
        sub_bounded(&p.one, &s, true, true, |c| format!("one{}", group(c, 1)))
    }

    fn normalize(&self, s: &str) -> String {
        let s = self.preprocess(s);
        let words: Vec<&str> = py_split(&s).collect();
        self.postprocess(&self.process_words(&words).join(" "))
    }
}

// ------------------------------------------------------------------------------------------------ english.py

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
        let s = py_lower(s);
        let s = sub(&p.brackets, &s, |_| String::new());
        let s = sub(&p.parens, &s, |_| String::new());
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
        sub(&p.spaces, &s, |_| " ".into())
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
    fn the_class_table_covers_pythons_categories() {
        assert_eq!(classes().len(), include_str!("unicode_classes.txt").lines().filter(|l| !l.starts_with('#')).count());
        assert_eq!(class('\u{301}'), Class::Mn);
        assert_eq!(class('€'), Class::Symbol);
        assert_eq!(class('…'), Class::Punct);
        assert_eq!(class('²'), Class::Alnum);
        assert_eq!(py_decimal('٣'), Some(3));
        assert_eq!(py_decimal('𝟗'), Some(9));
        assert!(!py_is_word('\u{301}') && py_is_word('_') && py_is_word('é'));
    }

    #[test]
    fn python_word_boundaries_differ_from_the_regex_crates() {
        // A combining accent is no word character to Python, so "mr" before one is a word of its own (the
        // accent then goes with the diacritics, the trailing space with the spelling pass's split): lmms-eval's
        // EnglishTextNormalizer gives "mister".
        assert_eq!(EnglishTextNormalizer::shared().normalize("mr\u{301}"), "mister");
        assert_eq!(EnglishTextNormalizer::shared().normalize("mr\u{301}x"), "mister x");
    }

    #[test]
    fn big_numbers_are_exact() {
        assert_eq!(Int::from_digits("999").scale_last_group(33).0, format!("999{}", "0".repeat(33)));
        assert_eq!(Int::from_digits("1999").add(&Int::small(1)).0, "2000");
        // Fraction("1.50") * 10 is whole; Fraction("1.55") * 10 is not.
        assert_eq!(Decimal::parse("1.50").and_then(|d| d.times_pow10(1)), Some(Int::small(15)));
        assert_eq!(Decimal::parse("1.55").and_then(|d| d.times_pow10(1)), None);
        assert_eq!(Decimal::parse("1.50").and_then(|d| d.times_pow10(2)), Some(Int::small(150)));
        assert_eq!(Decimal::parse(".5").and_then(|d| d.times_pow10(3)), Some(Int::small(500)));
        assert!(Decimal::parse(".").is_none() && Decimal::parse("1.2.3").is_none());
    }
}
