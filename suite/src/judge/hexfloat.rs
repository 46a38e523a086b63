//! C99 hexadecimal floating-point literals, as Python's `float.hex()` writes them.
//!
//! Goldens store floats this way because it round-trips exactly: `0x1.a8075e0000000p+2` is one binary64 value,
//! with no decimal rounding in between. Reference logits are float32 widened to float64, so every golden value also
//! converts back to `f32` without loss.

use std::fmt;

/// Why a string is not a hex float. Carries the offending text so callers can name it with the file and field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseHexFloatError {
    pub text: String,
    pub reason: &'static str,
}

impl fmt::Display for ParseHexFloatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not a hex float ({}); expected e.g. \"-0x1.a8075ep+2\" as Python's float.hex() writes", self.text, self.reason)
    }
}

impl std::error::Error for ParseHexFloatError {}

/// Formats `x` exactly as Python's `float.hex()` does (`0x1.8000000000000p+1`, `-0x0.0p+0`, `inf`, `nan`).
pub fn format_f64(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".to_string() } else { "-inf".to_string() };
    }
    let sign = if x.is_sign_negative() { "-" } else { "" };
    let bits = x.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i64;
    let mantissa = bits & ((1u64 << 52) - 1);
    if biased == 0 && mantissa == 0 {
        return format!("{sign}0x0.0p+0");
    }
    // Python normalises subnormals to a leading 1 as well: 5e-324.hex() == '0x0.0000000000001p-1022'.
    let (lead, exp) = if biased == 0 { (0, -1022) } else { (1, biased - 1023) };
    let exp_sign = if exp < 0 { "-" } else { "+" };
    format!("{sign}0x{lead}.{mantissa:013x}p{exp_sign}{}", exp.abs())
}

/// Formats an `f32` through its exact `f64` widening, as Python does for a float32 value.
pub fn format_f32(x: f32) -> String {
    format_f64(x as f64)
}

/// Parses a hex float (`[-+]0x<hex>[.<hex>][p[-+]<dec>]`), or `inf`, `-inf`, `nan` as Python writes them.
/// Decimal literals are also accepted, since hand-edited files use them.
pub fn parse_f64(text: &str) -> Result<f64, ParseHexFloatError> {
    let err = |reason| ParseHexFloatError { text: text.to_string(), reason };
    let s = text.trim();
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let signed = |v: f64| if negative { -v } else { v };
    match body.to_ascii_lowercase().as_str() {
        "inf" | "infinity" => return Ok(signed(f64::INFINITY)),
        "nan" => return Ok(f64::NAN),
        _ => {}
    }
    let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) else {
        return body
            .parse::<f64>()
            .ok()
            .filter(|_| body.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+')))
            .map(signed)
            .ok_or_else(|| err("no 0x prefix and not a decimal number"));
    };
    let (digits, exp_text) = match hex.find(['p', 'P']) {
        Some(i) => (&hex[..i], Some(&hex[i + 1..])),
        None => (hex, None),
    };
    let binary_exp: i64 = match exp_text {
        None => 0,
        Some("") => return Err(err("empty exponent after 'p'")),
        Some(e) => {
            let unsigned = e.strip_prefix(['+', '-']).unwrap_or(e);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err("exponent is not a decimal integer"));
            }
            // Clamp absurd exponents; the result saturates to 0 or infinity either way.
            e.parse::<i64>().unwrap_or(if e.starts_with('-') { -100_000 } else { 100_000 }).clamp(-100_000, 100_000)
        }
    };
    let (int_part, frac_part) = match digits.find('.') {
        Some(i) => (&digits[..i], &digits[i + 1..]),
        None => (digits, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(err("no hex digits"));
    }
    // Accumulate up to 64 significant bits exactly; later digits only decide rounding (sticky bit).
    let mut mant: u64 = 0;
    let mut exp = binary_exp;
    let mut sticky = false;
    let mut significant = false;
    for (i, c) in int_part.chars().chain(frac_part.chars()).enumerate() {
        let d = c.to_digit(16).ok_or_else(|| err("invalid hex digit"))? as u64;
        let in_fraction = i >= int_part.len();
        if !significant && d == 0 {
            if in_fraction {
                exp -= 4;
            }
            continue;
        }
        significant = true;
        if mant >> 60 == 0 {
            mant = (mant << 4) | d;
            if in_fraction {
                exp -= 4;
            }
        } else {
            sticky |= d != 0;
            if !in_fraction {
                exp += 4;
            }
        }
    }
    Ok(signed(compose(mant, exp, sticky)))
}

/// `mant * 2^exp` correctly rounded (to nearest, ties to even) to binary64; `sticky` marks nonzero bits below `mant`.
fn compose(mant: u64, exp: i64, sticky: bool) -> f64 {
    if mant == 0 {
        return 0.0;
    }
    let top = 63 - mant.leading_zeros() as i64; // value = 1.xxx * 2^(top + exp)
    let e = top + exp;
    if e > 1023 {
        return f64::INFINITY;
    }
    // Number of mantissa bits kept: 53 for normals, fewer for subnormals.
    let keep = if e >= -1022 { 53 } else { 53 - (-1022 - e) };
    if keep <= 0 {
        // Below half the smallest subnormal, or exactly half (ties to even gives 0) unless sticky.
        let half_min = keep == 0 && (mant.is_power_of_two() && !sticky);
        return if keep == 0 && !half_min { f64::from_bits(1) } else { 0.0 };
    }
    let shift = top + 1 - keep; // bits of mant to drop
    let (mut kept, round_up) = if shift > 0 {
        let kept = mant >> shift;
        let rem = mant & ((1u64 << shift) - 1);
        let half = 1u64 << (shift - 1);
        let up = rem > half || (rem == half && (sticky || kept & 1 == 1));
        (kept, up)
    } else {
        (mant << (-shift), false)
    };
    if round_up {
        kept += 1;
    }
    if e < -1022 {
        // Subnormal: the bits are the value in units of 2^-1074; rounding up into 2^52 lands on the smallest normal.
        return f64::from_bits(kept);
    }
    let mut e = e;
    if kept >> 53 != 0 {
        kept >>= 1;
        e += 1;
        if e > 1023 {
            return f64::INFINITY;
        }
    }
    f64::from_bits((((e + 1023) as u64) << 52) | (kept & ((1u64 << 52) - 1)))
}

/// Parses a hex float that must be an `f32` widened to `f64` (as goldens of float32 logits are).
pub fn parse_f32(text: &str) -> Result<f32, ParseHexFloatError> {
    let v = parse_f64(text)?;
    let narrowed = v as f32;
    if v.is_nan() || narrowed as f64 == v {
        Ok(narrowed)
    } else {
        Err(ParseHexFloatError { text: text.to_string(), reason: "value is not exactly representable as float32" })
    }
}
