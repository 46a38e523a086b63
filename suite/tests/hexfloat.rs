//! The hex-float codec: Python's `float.hex()` vectors, and exact round-trips of every f64 and f32.

use mobius_conformance::judge::hexfloat::{format_f32, format_f64, parse_f32, parse_f64};
use proptest::prelude::*;

/// Written by Python 3.11 `float.hex()`.
const PYTHON: &[(&str, f64)] = &[
    ("0x0.0p+0", 0.0),
    ("-0x0.0p+0", -0.0),
    ("0x1.0000000000000p+0", 1.0),
    ("-0x1.8000000000000p+0", -1.5),
    ("0x1.999999999999ap-4", 0.1),
    ("0x1.5555555555555p-2", 0.3333333333333333),
    ("0x1.921fb54442d18p+1", std::f64::consts::PI),
    ("-0x1.a80e5c0000000p+2", -6.625876426696777),
    ("0x0.0000000000001p-1022", 5e-324),
    ("0x1.0000000000000p-1022", 2.2250738585072014e-308),
    ("0x0.fffffffffffffp-1022", 2.225073858507201e-308),
    ("0x1.fffffffffffffp+1023", 1.7976931348623157e+308),
    ("0x0.012688b70e62bp-1022", 1e-310),
    ("0x1.e240c9fbe76c9p+16", 123456.789),
    ("-0x1.ad7f29abcaf48p-24", -1e-07),
    ("0x1.99999a0000000p-4", 0.10000000149011612),
    ("0x1.ffc0000000000p+15", 65504.0),
    ("0x1.fffffe0000000p+127", 3.4028234663852886e+38),
    ("0x1.0000000000000p-149", 1.401298464324817e-45),
];

#[test]
fn matches_python_float_hex_both_ways() {
    for &(text, v) in PYTHON {
        let parsed = parse_f64(text).unwrap();
        assert_eq!(parsed.to_bits(), v.to_bits(), "parse {text}");
        assert_eq!(format_f64(v), text, "format {v:e}");
    }
}

#[test]
fn mobius_golden_values_parse() {
    // From mobius' gemma-4-e2b.json logits_summary.
    assert_eq!(parse_f64("-0x1.ba689efc82a00p+4").unwrap(), -27.65054224621599);
    assert_eq!(parse_f32("-0x1.a8075e0000000p+2").unwrap(), -6.6254496574401855_f64 as f32);
}

#[test]
fn special_values() {
    assert_eq!(format_f64(f64::INFINITY), "inf");
    assert_eq!(format_f64(f64::NEG_INFINITY), "-inf");
    assert_eq!(format_f64(f64::NAN), "nan");
    assert_eq!(parse_f64("inf").unwrap(), f64::INFINITY);
    assert_eq!(parse_f64("-inf").unwrap(), f64::NEG_INFINITY);
    assert!(parse_f64("nan").unwrap().is_nan());
    assert!(parse_f64("-0x0p+0").unwrap().is_sign_negative());
}

#[test]
fn short_and_unnormalised_forms() {
    assert_eq!(parse_f64("0x1p-3").unwrap(), 0.125);
    assert_eq!(parse_f64("0x.8p1").unwrap(), 1.0);
    assert_eq!(parse_f64("0X10").unwrap(), 16.0);
    assert_eq!(parse_f64("0x0.00000000000008p-1022").unwrap(), 0.0, "half the smallest subnormal ties to even: 0");
    assert_eq!(parse_f64("0x0.000000000000081p-1022").unwrap(), 5e-324, "just above half rounds up");
    assert_eq!(parse_f64("0x1.00000000000008p+0").unwrap(), 1.0, "tie rounds to even");
    assert_eq!(parse_f64("0x1.00000000000018p+0").unwrap(), 1.0 + 2.0 * f64::EPSILON, "tie rounds to even (up)");
    assert_eq!(parse_f64("0x1.000000000000080001p+0").unwrap(), 1.0 + f64::EPSILON, "above the tie rounds up");
    assert_eq!(parse_f64("0x1p+1024").unwrap(), f64::INFINITY);
    assert_eq!(parse_f64("0x1p-1080").unwrap(), 0.0);
    assert_eq!(parse_f64("1.5").unwrap(), 1.5, "decimal literals from hand-edited files");
}

#[test]
fn corrupt_text_is_an_error_that_quotes_it() {
    for bad in ["", "0x", "0xg", "0x1.2p", "0x1.2pz", "0x1.2p+", "abc", "0x1..2", "--0x1p0", "1e5x"] {
        let e = parse_f64(bad).expect_err(bad);
        assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
    }
    let e = parse_f32("0x1.0000000000001p+0").unwrap_err();
    assert!(e.to_string().contains("float32"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn every_f64_round_trips(bits in any::<u64>()) {
        let v = f64::from_bits(bits);
        let back = parse_f64(&format_f64(v)).unwrap();
        if v.is_nan() { prop_assert!(back.is_nan()); } else { prop_assert_eq!(back.to_bits(), v.to_bits()); }
    }

    #[test]
    fn every_f32_round_trips(bits in any::<u32>()) {
        let v = f32::from_bits(bits);
        let back = parse_f32(&format_f32(v)).unwrap();
        if v.is_nan() { prop_assert!(back.is_nan()); } else { prop_assert_eq!(back.to_bits(), v.to_bits()); }
    }

    #[test]
    fn subnormals_round_trip(m in 1u64..(1u64 << 52), neg: bool) {
        let v = f64::from_bits(m | ((neg as u64) << 63));
        prop_assert_eq!(parse_f64(&format_f64(v)).unwrap().to_bits(), v.to_bits());
    }

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,40}") {
        let _ = parse_f64(&s);
    }

    #[test]
    fn hexish_text_never_panics(s in "[-+]?0[xX][0-9a-fA-F.]{0,30}([pP][-+]?[0-9]{0,25})?") {
        let _ = parse_f64(&s);
    }
}
