//! `english.py`'s `EnglishNumberNormalizer`: spelled numbers read as digits ("twenty five" as "25", "two and a half
//! million" as "2500000", "five dollars" as "$5", "twentieth" as "20th"), step for step as Whisper's, since
//! LibriSpeech's WER is computed on its output.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use regex::Regex;

use super::decimal::{Decimal, Int};
use super::re_sub::{bounded_spans, compile, group, sub, sub_bounded};
use crate::feed::python_str::{py_split, py_strip};

/// The patterns, compiled once; `\s` is spelled `[\s\x1C-\x1F]` to be Python's.
struct Patterns {
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
    P.get_or_init(|| Patterns {
        and_a_half: compile(r"and[\s\x1C-\x1F]+a[\s\x1C-\x1F]+half"),
        letter_digit: compile(r"([a-z])([0-9])"),
        digit_letter: compile(r"([0-9])([a-z])"),
        digit_suffix: compile(r"([0-9])[\s\x1C-\x1F]+(st|nd|rd|th|s)"),
        number: compile(r"^\d+(\.\d+)?$"),
        cents_after: compile(r"([€£$])([0-9]+) (?:and )?¢([0-9]{1,2})"),
        cents_only: compile(r"[€£$]0.([0-9]{1,2})"),
        one: compile(r"1(s?)"),
    })
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
            Value::Int(i) => i.as_str().to_string(),
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
pub struct Numbers {
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
    pub fn new() -> Numbers {
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
        let mut reading = Reading { numbers: self, out: Vec::new(), prefix: None, value: None };
        let mut skip = false;
        for i in 0..words.len() {
            if skip {
                skip = false;
                continue;
            }
            let next = words.get(i + 1).copied();
            let word = Word {
                prev: i.checked_sub(1).map(|p| words[p]),
                current: words[i],
                next,
                next_is_numeric: next.is_some_and(|n| self.is_numeric(n)),
            };
            skip = reading.word(&word);
        }
        reading.flush();
        reading.out
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

    /// `EnglishNumberNormalizer()(s)`.
    pub fn normalize(&self, s: &str) -> String {
        let s = self.preprocess(s);
        let words: Vec<&str> = py_split(&s).collect();
        self.postprocess(&self.process_words(&words).join(" "))
    }
}

/// One word of `process_words`, with its neighbours.
struct Word<'w> {
    prev: Option<&'w str>,
    current: &'w str,
    next: Option<&'w str>,
    next_is_numeric: bool,
}

/// `process_words`' state: the words written so far, the sign or currency waiting for its number, and the number
/// being read. Each kind of word has its branch below, in the order `process_words` tries them.
struct Reading<'a> {
    numbers: &'a Numbers,
    out: Vec<String>,
    prefix: Option<String>,
    value: Option<Value>,
}

impl Reading<'_> {
    /// `output(result)`: the result with the pending prefix; value and prefix are cleared.
    fn emit(&mut self, result: String) {
        let r = match self.prefix.take() {
            Some(p) => p + &result,
            None => result,
        };
        self.value = None;
        self.out.push(r);
    }

    /// The number being read, written out.
    fn flush(&mut self) {
        if let Some(v) = &self.value {
            let t = v.text();
            self.emit(t);
        }
    }

    /// One word; whether the next one is taken with it.
    fn word(&mut self, w: &Word) -> bool {
        let n = self.numbers;
        let current = w.current;
        let first = current.chars().next().unwrap_or(' ');
        let has_prefix = is_prefix_char(first);
        let without_prefix = if has_prefix { &current[first.len_utf8()..] } else { current };
        if n.is_numeric(without_prefix) {
            self.arabic(current, has_prefix.then_some(first), without_prefix);
        } else if !n.words.contains(current) {
            self.flush();
            self.emit(current.to_string());
        } else if n.zeros.contains(current) {
            self.value = Some(Value::Str(Value::text_or_empty(&self.value) + "0"));
        } else if let Some(&ones) = n.ones.get(current) {
            self.value = Some(self.with_ones(w, ones));
        } else if let Some(&(ones, suffix)) = n.ones_suffixed.get(current) {
            // An ordinal or a plural: the number ends here.
            let r = self.with_ones(w, ones).text() + suffix;
            self.emit(r);
        } else if let Some(&tens) = n.tens.get(current) {
            self.value = Some(self.with_tens(tens));
        } else if let Some(&(tens, suffix)) = n.tens_suffixed.get(current) {
            let r = self.with_tens(tens).text() + suffix;
            self.emit(r);
        } else if let Some(&zeros) = n.multipliers.get(current) {
            self.multiplier(zeros);
        } else if let Some(&(zeros, suffix)) = n.multipliers_suffixed.get(current) {
            self.multiplier_suffixed(zeros, suffix);
        } else if let Some(&sign) = n.preceding_prefixers.get(current) {
            // A sign applies when a number follows.
            self.flush();
            if w.next.is_some_and(|x| n.words.contains(x)) || w.next_is_numeric {
                self.prefix = Some(sign.to_string());
            } else {
                self.emit(current.to_string());
            }
        } else if let Some(&symbol) = n.following_prefixers.get(current) {
            // A currency applies after a number.
            if self.value.is_some() {
                self.prefix = Some(symbol.to_string());
                self.flush();
            } else {
                self.emit(current.to_string());
            }
        } else if current == "per" || current == "percent" {
            return self.percent(w);
        } else {
            return self.connective(w);
        }
        false
    }

    /// Arabic numbers, possibly after a sign or a currency symbol.
    fn arabic(&mut self, current: &str, prefix: Option<char>, without_prefix: &str) {
        let Some(f) = Decimal::parse(without_prefix) else { return };
        if let Some(Value::Str(s)) = &self.value
            && s.ends_with('.')
        {
            // Decimals or an address's parts, glued on.
            self.value = Some(Value::Str(format!("{s}{current}")));
            return;
        }
        self.flush();
        if let Some(p) = prefix {
            self.prefix = Some(p.to_string());
        }
        self.value = Some(match f.times_pow10(0) {
            Some(n) => Value::Int(n),
            None => Value::Str(without_prefix.to_string()),
        });
    }

    /// The value with a digit word (one to nineteen) taken in: a string, or a digit after a digit, is spelled on;
    /// an integer takes the digit into its last place.
    fn with_ones(&self, w: &Word, ones: u64) -> Value {
        let n = self.numbers;
        let spelled = matches!(self.value, Some(Value::Str(_))) || w.prev.is_some_and(|p| n.ones.contains_key(p));
        let after_tens = w.prev.is_some_and(|p| n.tens.contains_key(p)) && ones < 10;
        match &self.value {
            None => Value::Int(Int::small(ones)),
            Some(Value::Int(v)) if !spelled => {
                let place = if ones < 10 { v.low(1) } else { v.low(2) };
                if place == 0 { Value::Int(v.add(&Int::small(ones))) } else { Value::Str(format!("{}{ones}", v.as_str())) }
            }
            Some(v) if after_tens => Value::Str(format!("{}{ones}", v.drop_last())),
            Some(v) => Value::Str(format!("{}{ones}", v.text())),
        }
    }

    /// The value with a tens word (twenty to ninety) taken in.
    fn with_tens(&self, tens: u64) -> Value {
        match &self.value {
            None => Value::Int(Int::small(tens)),
            Some(Value::Str(s)) => Value::Str(format!("{s}{tens}")),
            Some(Value::Int(v)) if v.low(2) == 0 => Value::Int(v.add(&Int::small(tens))),
            Some(Value::Int(v)) => Value::Str(format!("{}{tens}", v.as_str())),
        }
    }

    /// "hundred", "thousand", ...: the value multiplied.
    fn multiplier(&mut self, zeros: usize) {
        match self.value.clone() {
            None => self.value = Some(Value::Int(Int::pow10(zeros))),
            Some(Value::Int(v)) if !v.is_zero() => self.value = Some(Value::Int(v.scale_last_group(zeros))),
            // A string (or zero) is read as a fraction and multiplied when the product is whole.
            Some(v) => match Decimal::parse(&v.text()).and_then(|f| f.times_pow10(zeros)) {
                Some(p) => self.value = Some(Value::Int(p)),
                None => {
                    self.emit(v.text());
                    self.value = Some(Value::Int(Int::pow10(zeros)));
                }
            },
        }
    }

    /// "hundreds", "thousandth", ...: the value multiplied, and the number ends here.
    fn multiplier_suffixed(&mut self, zeros: usize, suffix: &str) {
        match self.value.clone() {
            None => self.emit(format!("{}{suffix}", Int::pow10(zeros).as_str())),
            Some(Value::Str(s)) => match Decimal::parse(&s).and_then(|f| f.times_pow10(zeros)) {
                Some(p) => self.emit(format!("{}{suffix}", p.as_str())),
                None => {
                    self.emit(s);
                    self.emit(format!("{}{suffix}", Int::pow10(zeros).as_str()));
                }
            },
            Some(Value::Int(v)) => self.emit(format!("{}{suffix}", v.scale_last_group(zeros).as_str())),
        }
        self.value = None;
    }

    /// "percent", or "per cent" (whose "cent" is taken with it): the value as a percentage.
    fn percent(&mut self, w: &Word) -> bool {
        let Some(v) = &self.value else {
            self.emit(w.current.to_string());
            return false;
        };
        let t = v.text();
        if w.current == "percent" {
            self.emit(t + "%");
        } else if w.next == Some("cent") {
            self.emit(t + "%");
            return true;
        } else {
            self.emit(t);
            self.emit(w.current.to_string());
        }
        false
    }

    /// "and", "double", "triple", "point": special only before what can be a number.
    fn connective(&mut self, w: &Word) -> bool {
        let n = self.numbers;
        let current = w.current;
        if !w.next.is_some_and(|x| n.words.contains(x)) && !w.next_is_numeric {
            self.flush();
            self.emit(current.to_string());
        } else if current == "and" {
            // "and" after hundreds, thousands, ... is dropped.
            if !w.prev.is_some_and(|p| n.multipliers.contains_key(p)) {
                self.flush();
                self.emit(current.to_string());
            }
        } else if current == "double" || current == "triple" {
            if w.next.is_some_and(|x| n.ones.contains_key(x) || n.zeros.contains(x)) {
                let repeats = if current == "double" { 2 } else { 3 };
                let ones = w.next.and_then(|x| n.ones.get(x)).copied().unwrap_or(0);
                self.value = Some(Value::Str(Value::text_or_empty(&self.value) + &ones.to_string().repeat(repeats)));
                return true;
            }
            self.flush();
            self.emit(current.to_string());
        } else if w.next.is_some_and(|x| n.decimals.contains(x)) || w.next_is_numeric {
            // "point" before a digit; before anything else it is dropped.
            self.value = Some(Value::Str(Value::text_or_empty(&self.value) + "."));
        }
        false
    }
}
