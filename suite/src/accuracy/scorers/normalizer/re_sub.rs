//! `re.sub` and `re.split` as Python runs the normalizers' patterns. The `regex` crate agrees with `re` on them
//! except at `\b`, whose word characters are Python's ([`py_is_word`]): a pattern framed by `\b` is matched here by
//! hand, its boundaries judged by Python's rule.

use regex::{Captures, Regex};

use crate::feed::python_str::py_is_word;

/// A normalizer pattern, compiled; the patterns are constants, so a failure is a bug in this module. Its `\d` (used
/// outside brackets only) is Python 3.11's, `str.isdecimal` over Unicode 14.0: the `regex` crate's is Unicode 16's,
/// where a Kawi digit (U+11F50..) is a digit that Python's normalizers do not see.
pub fn compile(pattern: &str) -> Regex {
    let pattern = pattern.replace(r"\d", &crate::feed::python_str::py_decimal_class());
    Regex::new(&pattern).unwrap_or_else(|e| panic!("normalizer pattern {pattern:?}: {e}"))
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
pub fn bounded_spans(re: &Regex, s: &str, lead: bool, trail: bool) -> Vec<(usize, usize)> {
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

pub fn sub_bounded(re: &Regex, s: &str, lead: bool, trail: bool, rep: impl Fn(&Captures) -> String) -> String {
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
pub fn sub_literals(s: &str, alternatives: &[&str], lead: bool, trail: bool, rep: &str) -> String {
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
pub fn sub(re: &Regex, s: &str, rep: impl Fn(&Captures) -> String) -> String {
    re.replace_all(s, |c: &Captures| rep(c)).into_owned()
}

/// A capture group's text, `""` when it did not take part.
pub fn group<'a>(c: &Captures<'a>, i: usize) -> &'a str {
    c.get(i).map_or("", |m| m.as_str())
}
