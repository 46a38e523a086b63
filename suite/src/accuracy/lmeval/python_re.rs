//! lm-eval's `regex` filter compiles its pattern with Python's `re` (a str pattern, Unicode classes); the suite
//! matches with Rust's `regex`, whose classes, anchors and case folding mean other things. A pattern is therefore
//! translated into a Rust regex that finds the same first match with the same groups, or refused, naming the
//! feature, when Rust's `regex` cannot say what Python's `re` means.
//!
//! The rules (checked code point by code point against Python in tests/data/lmeval/corners-crafted.json):
//! - `\s`, `\d`, `\w` and their complements are Python's sets ([`tables`]: `str.isspace`, `str.isdecimal`,
//!   `str.isalnum` plus `_`, in the reference Python's Unicode version), in and out of brackets;
//! - `.` stops at `\n` only, `(?s)` lifts that; `^` and `(?m)` anchors are Rust's equals; `\Z` is `\z`;
//! - `$` without `(?m)` also matches before a final `\n`: it becomes `\n?\z`, which consumes that newline, so it is
//!   taken only where nothing can follow it and no capturing group holds it (the filter strips the match);
//! - `(?i)` is spelled out per character with Python's rule (`lower(c)` equal, plus its fixes: `ı` with `i`, `ſ`
//!   with `s`), for ASCII letters; a case-insensitive non-ASCII letter is refused;
//! - brackets are rebuilt, so Rust's nested classes and `&&`, `--`, `~~` operators are plain characters as in
//!   Python; `{` that is no repetition is a character; `(?#...)` is dropped;
//! - refused: lookaround, backreferences, conditionals, atomic groups, possessive quantifiers, `\b` and `\B` (a word
//!   boundary is Rust's own `\w`), `\N{...}`, the flags `a`, `L` and `x`, and what Python itself rejects.

use std::fmt;
use std::sync::OnceLock;

use crate::error::{Error, Result};

mod tables;

/// Why a pattern cannot be matched as Python matches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The feature, as a reader would look it up.
    pub feature: &'static str,
    /// Its offset in the pattern, in characters.
    pub at: usize,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at character {}: Rust's regex cannot match it as Python's re does", self.feature, self.at)
    }
}

/// `pattern` (Python `re`, default flags) compiled as a Rust regex of the same meaning; the error names the
/// pattern and the refused feature.
pub fn compile(pattern: &str) -> Result<regex::Regex> {
    let rust = translate(pattern).map_err(|r| Error::new(format!("regex {pattern:?}: {r}")))?;
    regex::Regex::new(&rust).map_err(|e| Error::new(format!("regex {pattern:?} (as {rust:?}): {e}")))
}

/// The Rust regex that means what `pattern` means to Python's `re`.
pub fn translate(pattern: &str) -> std::result::Result<String, Refused> {
    let mut p = Parser {
        chars: pattern.chars().collect(),
        pos: 0,
        out: String::new(),
        flags: Flags::default(),
        frames: vec![Frame::root()],
        dollar: false,
        last: Last::None,
    };
    p.run()?;
    Ok(p.out)
}

#[derive(Debug, Clone, Copy, Default)]
struct Flags {
    i: bool,
    m: bool,
    s: bool,
}

/// An open group: whether it captures, the flags outside it, and the end-anchor state at its start and after any
/// of its finished alternatives.
struct Frame {
    capturing: bool,
    outer: Flags,
    dollar_at_open: bool,
    dollar_any: bool,
}

impl Frame {
    fn root() -> Frame {
        Frame { capturing: false, outer: Flags::default(), dollar_at_open: false, dollar_any: false }
    }
}

/// What a quantifier would repeat.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Last {
    /// Nothing (start, `(`, `|`, an anchor, a quantifier): Python says "nothing to repeat" or "multiple repeat".
    None,
    Atom,
    /// A group that may end at a translated `$`.
    DollarGroup,
}

/// One member of a bracket: a range of characters, or a class (`\d`...), maybe negated.
#[derive(Debug, Clone, Copy)]
enum Member {
    Range(char, char),
    Class(Class, bool),
}

#[derive(Debug, Clone, Copy)]
enum Class {
    Space,
    Digit,
    Word,
}

impl Class {
    /// The class's members in Rust's bracket syntax, built once.
    fn items(self) -> &'static str {
        static CELLS: [OnceLock<String>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
        let (cell, table) = match self {
            Class::Space => (&CELLS[0], tables::SPACE),
            Class::Digit => (&CELLS[1], tables::DIGIT),
            Class::Word => (&CELLS[2], tables::WORD),
        };
        cell.get_or_init(|| {
            table.iter().map(|&(a, b)| if a == b { format!("\\x{{{a:x}}}") } else { format!("\\x{{{a:x}}}-\\x{{{b:x}}}") }).collect()
        })
    }

    fn bracket(self, negated: bool) -> String {
        format!("[{}{}]", if negated { "^" } else { "" }, self.items())
    }
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    out: String,
    flags: Flags,
    frames: Vec<Frame>,
    /// A translated `$` may be the last thing matched: nothing that consumes may follow.
    dollar: bool,
    last: Last,
}

fn refuse<T>(feature: &'static str, at: usize) -> std::result::Result<T, Refused> {
    Err(Refused { feature, at })
}

/// Python's ignore-case partners of an ASCII letter (`lower(ch) == lower(c)`, with the fixes sre adds): the two
/// cases, and the non-ASCII characters that join them.
fn ascii_case_partners(c: char) -> Vec<char> {
    let lower = c.to_ascii_lowercase();
    let mut v = vec![lower, lower.to_ascii_uppercase()];
    match lower {
        'i' => v.extend(['\u{130}', '\u{131}']),
        'k' => v.push('\u{212a}'),
        's' => v.push('\u{17f}'),
        _ => {}
    }
    v
}

/// Whether a character has case (Python's `iscased`: it changes under lower or upper). Case pairs are stable
/// across Unicode versions, so a character Rust finds uncased is uncased for Python too.
fn is_cased(c: char) -> bool {
    !c.to_lowercase().eq(std::iter::once(c)) || !c.to_uppercase().eq(std::iter::once(c))
}

fn hex(c: char) -> String {
    format!("\\x{{{:x}}}", c as u32)
}

impl Parser {
    fn peek(&self, k: usize) -> Option<char> {
        self.chars.get(self.pos + k).copied()
    }

    fn run(&mut self) -> std::result::Result<(), Refused> {
        while let Some(c) = self.peek(0) {
            let at = self.pos;
            self.pos += 1;
            match c {
                '\\' => self.escape(at)?,
                '[' => self.bracket(at)?,
                '(' => self.open(at)?,
                ')' => self.close(at)?,
                '|' => {
                    let f = self.frames.last_mut().expect("the root frame");
                    f.dollar_any |= self.dollar;
                    self.dollar = f.dollar_at_open;
                    self.out.push('|');
                    self.last = Last::None;
                }
                '*' | '+' | '?' => self.quantifier(c.to_string(), at)?,
                '{' => match self.repetition() {
                    Some(q) => self.quantifier(q, at)?,
                    None => self.literal('{', at)?,
                },
                '^' => self.anchor(if self.flags.m { "(?m:^)" } else { "\\A" }),
                '$' if self.flags.m => self.anchor("(?m:$)"),
                '$' => {
                    self.anchor("(?:\\n?\\z)");
                    self.dollar = true;
                }
                '.' => {
                    let dot = if self.flags.s { "(?s:.)" } else { "." };
                    self.consume(dot.to_string(), at)?;
                }
                c => self.literal(c, at)?,
            }
        }
        if self.frames.len() > 1 {
            return refuse("an unclosed group (Python rejects it)", self.chars.len());
        }
        Ok(())
    }

    fn anchor(&mut self, rust: &str) {
        self.out.push_str(rust);
        self.last = Last::None;
    }

    /// Emits something that consumes a character: not after a translated `$`.
    fn consume(&mut self, rust: String, at: usize) -> std::result::Result<(), Refused> {
        if self.dollar {
            return refuse("`$` (without (?m)) followed by more pattern", at);
        }
        self.out.push_str(&rust);
        self.last = Last::Atom;
        Ok(())
    }

    fn literal(&mut self, c: char, at: usize) -> std::result::Result<(), Refused> {
        if self.flags.i && is_cased(c) {
            if !c.is_ascii() {
                return refuse("a case-insensitive non-ASCII letter", at);
            }
            let members: String = ascii_case_partners(c).into_iter().map(hex).collect();
            return self.consume(format!("[{members}]"), at);
        }
        self.consume(hex(c), at)
    }

    /// `{m}`, `{m,}`, `{,n}`, `{m,n}` after the `{`; `None` (and nothing read) when it is a plain `{`.
    fn repetition(&mut self) -> Option<String> {
        let rest: String = self.chars[self.pos..].iter().take_while(|&&c| c != '}').collect();
        if self.pos + rest.chars().count() >= self.chars.len() {
            return None;
        }
        let (lo, hi) = match rest.split_once(',') {
            Some((lo, hi)) => (lo, Some(hi)),
            None => (rest.as_str(), None),
        };
        let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
        if !digits(lo) || !hi.is_none_or(digits) || (hi.is_none() && lo.is_empty()) {
            return None;
        }
        self.pos += rest.chars().count() + 1;
        let lo = if lo.is_empty() { "0" } else { lo };
        Some(match hi {
            None => format!("{{{lo}}}"),
            Some("") => format!("{{{lo},}}"),
            Some(hi) => format!("{{{lo},{hi}}}"),
        })
    }

    fn quantifier(&mut self, q: String, at: usize) -> std::result::Result<(), Refused> {
        match self.last {
            Last::None => return refuse("a quantifier with nothing to repeat (Python rejects it)", at),
            Last::DollarGroup => return refuse("a repeated group that may end at `$` (without (?m))", at),
            Last::Atom => {}
        }
        self.out.push_str(&q);
        match self.peek(0) {
            Some('?') => {
                self.pos += 1;
                self.out.push('?');
            }
            Some('+') => return refuse("a possessive quantifier", self.pos),
            _ => {}
        }
        self.last = Last::None;
        Ok(())
    }

    fn open(&mut self, at: usize) -> std::result::Result<(), Refused> {
        let mut capturing = true;
        let mut flags = self.flags;
        if self.peek(0) == Some('?') {
            self.pos += 1;
            capturing = false;
            match self.peek(0) {
                Some(':') => self.pos += 1,
                Some('P') => match self.peek(1) {
                    Some('<') => {
                        let Some(end) = self.chars[self.pos..].iter().position(|&c| c == '>') else {
                            return refuse("an unterminated group name (Python rejects it)", at);
                        };
                        self.pos += end + 1;
                        capturing = true;
                    }
                    Some('=') => return refuse("a backreference (?P=name)", at),
                    _ => return refuse("an unknown (?P extension (Python rejects it)", at),
                },
                Some('#') => {
                    let Some(end) = self.chars[self.pos..].iter().position(|&c| c == ')') else {
                        return refuse("an unterminated comment (Python rejects it)", at);
                    };
                    self.pos += end + 1;
                    return Ok(());
                }
                Some('=') | Some('!') => return refuse("a lookahead", at),
                Some('<') if matches!(self.peek(1), Some('=') | Some('!')) => return refuse("a lookbehind", at),
                Some('(') => return refuse("a conditional group", at),
                Some('>') => return refuse("an atomic group", at),
                _ => {
                    let (on, off, scoped) = self.flag_letters(at)?;
                    let apply = |f: &mut Flags, letters: &[char], v: bool| {
                        for l in letters {
                            match l {
                                'i' => f.i = v,
                                'm' => f.m = v,
                                's' => f.s = v,
                                _ => {}
                            }
                        }
                    };
                    if !scoped {
                        let at_start = self.out.is_empty() && self.frames.len() == 1;
                        if !at_start || !off.is_empty() {
                            return refuse("global flags not at the start of the pattern (Python rejects them)", at);
                        }
                        apply(&mut self.flags, &on, true);
                        return Ok(());
                    }
                    apply(&mut flags, &on, true);
                    apply(&mut flags, &off, false);
                }
            }
        }
        self.frames.push(Frame { capturing, outer: self.flags, dollar_at_open: self.dollar, dollar_any: false });
        self.flags = flags;
        self.out.push_str(if capturing { "(" } else { "(?:" });
        self.last = Last::None;
        Ok(())
    }

    /// The letters of `(?aiLmsux-imsx` up to `)` (global) or `:` (scoped): (set, cleared, scoped).
    fn flag_letters(&mut self, at: usize) -> std::result::Result<(Vec<char>, Vec<char>, bool), Refused> {
        let (mut on, mut off, mut minus) = (Vec::new(), Vec::new(), false);
        loop {
            let Some(c) = self.peek(0) else { return refuse("an unterminated group (Python rejects it)", at) };
            self.pos += 1;
            match c {
                ')' | ':' => return Ok((on, off, c == ':')),
                '-' if !minus => minus = true,
                'i' | 'm' | 's' | 'u' => {
                    if minus {
                        off.push(c)
                    } else {
                        on.push(c)
                    }
                }
                'x' => return refuse("the verbose flag (?x)", at),
                'a' => return refuse("the ASCII flag (?a)", at),
                'L' => return refuse("the locale flag (?L)", at),
                _ => return refuse("an unknown group extension (Python rejects it)", at),
            }
        }
    }

    fn close(&mut self, at: usize) -> std::result::Result<(), Refused> {
        if self.frames.len() == 1 {
            return refuse("an unbalanced `)` (Python rejects it)", at);
        }
        let f = self.frames.pop().expect("an open group");
        let dollar = f.dollar_any || self.dollar;
        if f.capturing && dollar {
            return refuse("`$` (without (?m)) inside a capturing group", at);
        }
        self.flags = f.outer;
        self.dollar = dollar;
        self.out.push(')');
        self.last = if dollar { Last::DollarGroup } else { Last::Atom };
        Ok(())
    }

    /// A character escape's value (`\n`, `\x41`, `\u00e9`, `\0`...), the `\` and letter already read.
    fn char_escape(&mut self, c: char, at: usize) -> std::result::Result<Option<char>, Refused> {
        let hex_digits = |p: &mut Parser, n: usize| -> std::result::Result<char, Refused> {
            let s: String = p.chars.get(p.pos..p.pos + n).map(|s| s.iter().collect()).unwrap_or_default();
            let v = (s.len() == n).then(|| u32::from_str_radix(&s, 16).ok()).flatten().and_then(char::from_u32);
            p.pos += n;
            v.map_or_else(|| refuse("a malformed hexadecimal escape (Python rejects it)", at), Ok)
        };
        Ok(Some(match c {
            'a' => '\u{7}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\u{b}',
            'x' => hex_digits(self, 2)?,
            'u' => hex_digits(self, 4)?,
            'U' => hex_digits(self, 8)?,
            '0' => {
                let mut v = 0u32;
                for _ in 0..2 {
                    match self.peek(0).and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            v = v * 8 + d;
                            self.pos += 1;
                        }
                        None => break,
                    }
                }
                char::from_u32(v).unwrap_or('\0')
            }
            '1'..='9' => return refuse("a backreference or octal escape", at),
            'N' => return refuse("a named character escape \\N{...}", at),
            c if c.is_ascii_alphanumeric() => return Ok(None),
            c => c,
        }))
    }

    fn escape(&mut self, at: usize) -> std::result::Result<(), Refused> {
        let Some(c) = self.peek(0) else { return refuse("a trailing backslash (Python rejects it)", at) };
        self.pos += 1;
        let class = |cls: Class, neg: bool| cls.bracket(neg);
        match c {
            's' | 'S' => self.consume(class(Class::Space, c == 'S'), at),
            'd' | 'D' => self.consume(class(Class::Digit, c == 'D'), at),
            'w' | 'W' => self.consume(class(Class::Word, c == 'W'), at),
            'A' => {
                self.anchor("\\A");
                Ok(())
            }
            'Z' => {
                self.anchor("\\z");
                Ok(())
            }
            'b' | 'B' => refuse("a word boundary \\b or \\B (Rust's is Unicode's word, not Python's)", at),
            c => match self.char_escape(c, at)? {
                Some(ch) => self.literal(ch, at),
                None => refuse("an unknown escape (Python rejects it)", at),
            },
        }
    }

    /// One bracket member's character, or a class.
    fn bracket_atom(&mut self) -> std::result::Result<Option<Member>, Refused> {
        let at = self.pos;
        let Some(c) = self.peek(0) else { return Ok(None) };
        self.pos += 1;
        if c != '\\' {
            return Ok(Some(Member::Range(c, c)));
        }
        let Some(e) = self.peek(0) else { return refuse("a trailing backslash (Python rejects it)", at) };
        self.pos += 1;
        Ok(Some(match e {
            's' | 'S' => Member::Class(Class::Space, e == 'S'),
            'd' | 'D' => Member::Class(Class::Digit, e == 'D'),
            'w' | 'W' => Member::Class(Class::Word, e == 'W'),
            'b' => Member::Range('\u{8}', '\u{8}'),
            e => match self.char_escape(e, at)? {
                Some(ch) => Member::Range(ch, ch),
                None => return refuse("an unknown escape in brackets (Python rejects it)", at),
            },
        }))
    }

    fn bracket(&mut self, at: usize) -> std::result::Result<(), Refused> {
        let negated = self.peek(0) == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut members = Vec::new();
        let mut first = true;
        loop {
            match self.peek(0) {
                None => return refuse("an unterminated [ (Python rejects it)", at),
                Some(']') if !first => {
                    self.pos += 1;
                    break;
                }
                _ => {}
            }
            first = false;
            let Some(lo) = self.bracket_atom()? else { return refuse("an unterminated [ (Python rejects it)", at) };
            if self.peek(0) == Some('-') && self.peek(1).is_some_and(|c| c != ']') {
                let dash = self.pos;
                self.pos += 1;
                let hi = self.bracket_atom()?;
                match (lo, hi) {
                    (Member::Range(a, _), Some(Member::Range(b, _))) if a <= b => members.push(Member::Range(a, b)),
                    _ => return refuse("a bad character range (Python rejects it)", dash),
                }
            } else {
                members.push(lo);
            }
        }
        let mut text = String::from("[");
        if negated {
            text.push('^');
        }
        for m in &members {
            match *m {
                Member::Range(a, b) => {
                    if self.flags.i {
                        self.fold_range(a, b, &mut text, at)?;
                    }
                    text.push_str(&hex(a));
                    if b != a {
                        text.push('-');
                        text.push_str(&hex(b));
                    }
                }
                Member::Class(c, neg) => text.push_str(&c.bracket(neg)),
            }
        }
        text.push(']');
        self.consume(text, at)
    }

    /// Under `(?i)`, the characters a bracket's range also matches (Python: `lower(ch)` is in the folded set).
    fn fold_range(&self, a: char, b: char, text: &mut String, at: usize) -> std::result::Result<(), Refused> {
        for c in a..=b {
            if !is_cased(c) {
                continue;
            }
            if !c.is_ascii() {
                return refuse("a case-insensitive non-ASCII letter", at);
            }
            for p in ascii_case_partners(c) {
                text.push_str(&hex(p));
            }
        }
        Ok(())
    }
}
