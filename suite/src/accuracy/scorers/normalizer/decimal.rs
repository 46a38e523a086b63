//! Python's integers and `fractions.Fraction`, as far as the number normalizer needs them. Python's integers are
//! unbounded (`a decillion` is 10^33), so these count in decimal strings.

use crate::feed::python_str::py_decimal;

/// A non-negative integer of any size, in decimal digits without leading zeros.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Int(String);

impl Int {
    pub fn small(n: u64) -> Int {
        Int(n.to_string())
    }

    /// `10 ** zeros`.
    pub fn pow10(zeros: usize) -> Int {
        Int(format!("1{}", "0".repeat(zeros)))
    }

    /// From ASCII digits, leading zeros dropped.
    pub fn from_digits(d: &str) -> Int {
        let t = d.trim_start_matches('0');
        Int(if t.is_empty() { "0".into() } else { t.into() })
    }

    /// The digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_zero(&self) -> bool {
        self.0 == "0"
    }

    /// `self % 10 ** k`.
    pub fn low(&self, k: usize) -> u64 {
        let d = &self.0[self.0.len().saturating_sub(k)..];
        d.parse().unwrap_or(0)
    }

    pub fn add(&self, other: &Int) -> Int {
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
    pub fn scale_last_group(&self, multiplier_zeros: usize) -> Int {
        let residual = self.low(3);
        let n = self.0.len();
        let before = if n > 3 { Int(format!("{}000", &self.0[..n - 3])) } else { Int::small(0) };
        let scaled = if residual == 0 { Int::small(0) } else { Int(format!("{residual}{}", "0".repeat(multiplier_zeros))) };
        before.add(&scaled)
    }
}

/// A rational read from a string as `fractions.Fraction(s)` reads it, for the strings the normalizer builds
/// (digits of any script and at most one `.`; never a sign, an exponent or a `/`): `digits / 10 ** scale`.
pub struct Decimal {
    digits: String,
    scale: usize,
}

impl Decimal {
    pub fn parse(s: &str) -> Option<Decimal> {
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
    pub fn times_pow10(&self, zeros: usize) -> Option<Int> {
        if zeros >= self.scale {
            return Some(Int::from_digits(&format!("{}{}", self.digits, "0".repeat(zeros - self.scale))));
        }
        let cut = self.scale - zeros;
        let n = self.digits.len();
        let (head, tail) = self.digits.split_at(n.saturating_sub(cut));
        tail.bytes().all(|b| b == b'0').then(|| Int::from_digits(head))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
