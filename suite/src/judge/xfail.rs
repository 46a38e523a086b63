//! Expected failures: the failure a case file says a trial has, and whether the trial's own failure is that one.
//!
//! Strict both ways: a listed trial that passes fails ("unexpectedly passed"), and one that fails otherwise than
//! stated fails too, printing the expected and the actual failure. Only a verdict's failure can be expected: a trial
//! that never reached a verdict (a package that does not load, a missing package or golden under CI, a stale golden)
//! carries no [`Failure`] and is never absorbed.

use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::outcome::{Failure, FailureKind, Mismatch};
use crate::vocab::{Dtype, Ep, Level, Modality};

/// The failure an xfail entry expects.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub failure: FailureKind,
    /// `[lo, hi]`: the measured max |diff| must lie inside (a bug that got better or worse is a different failure).
    #[serde(default)]
    pub max_abs_diff: Option<[f64; 2]>,
    /// The exact step where the failure starts.
    #[serde(default)]
    pub first_step: Option<usize>,
    /// L4 `logits`: the exact prompt position where the logits first leave tolerance (optional).
    #[serde(default)]
    pub first_position: Option<usize>,
    /// `logits` or `non_finite` of a level that localizes its failures (L4): the first module out of the
    /// reference's noise (or the first not finite), by its Hugging Face path (`model.layers.5.self_attn`).
    #[serde(default)]
    pub first_module: Option<String>,
    /// `refused`: text the runtime's error must contain (required for that kind: a refusal for another reason is
    /// another failure).
    #[serde(default)]
    pub message: Option<String>,
}

impl Expect {
    /// Why `got` is not this failure, if it is not.
    pub fn mismatch(&self, got: Option<&Failure>) -> Option<Mismatch> {
        let Some(got) = got else { return Some(Mismatch::NoVerdict) };
        if got.kind != self.failure {
            return Some(Mismatch::Kind { got: got.kind, expected: self.failure });
        }
        if let Some([lo, hi]) = self.max_abs_diff {
            match got.max_abs_diff {
                Some(d) if (lo..=hi).contains(&d) => {}
                Some(d) => return Some(Mismatch::OutsideRange { got: d, range: [lo, hi] }),
                None => return Some(Mismatch::NoDiffMeasured),
            }
        }
        if let Some(s) = self.first_step
            && got.first_step != Some(s)
        {
            return Some(Mismatch::Step { got: got.first_step, expected: s });
        }
        if let Some(p) = self.first_position
            && got.first_position != Some(p)
        {
            return Some(Mismatch::Position { got: got.first_position, expected: p });
        }
        if let Some(m) = &self.first_module
            && got.first_module.as_deref() != Some(m.as_str())
        {
            return Some(Mismatch::Module { got: got.first_module.clone(), expected: m.clone() });
        }
        if let Some(m) = &self.message
            && !got.refusal.as_deref().is_some_and(|r| r.contains(m.as_str()))
        {
            return Some(Mismatch::Message { expected: m.clone() });
        }
        None
    }

    /// What `failure` needs stated, given its kind; `at` names the field in messages. Whether the entry's levels
    /// give that failure is theirs to say: the trial plan checks it (`level::Kind::failures`).
    fn validate(&self, at: &str) -> std::result::Result<(), String> {
        let kind = self.failure;
        if matches!(kind, FailureKind::Logits | FailureKind::StepLogits) && self.max_abs_diff.is_none() {
            return Err(format!("{at}.max_abs_diff` is missing: a `{kind}` failure states its range, `[lo, hi]`"));
        }
        if matches!(kind, FailureKind::Tokens | FailureKind::StepLogits) && self.first_step.is_none() {
            return Err(format!("{at}.first_step` is missing: a `{kind}` failure states the step where it starts"));
        }
        if self.first_position.is_some() && kind != FailureKind::Logits {
            return Err(format!("{at}.first_position` is given, but only a `logits` failure has a prompt position"));
        }
        if self.first_module.is_some() && !matches!(kind, FailureKind::Logits | FailureKind::NonFinite) {
            return Err(format!("{at}.first_module` is given, but only a `logits` or `non_finite` failure is localized to a module"));
        }
        match (kind, &self.message) {
            (FailureKind::Refused, None) => {
                return Err(format!("{at}.message` is missing: a `refused` failure states text the runtime's error contains"));
            }
            (FailureKind::Refused, Some(m)) if m.trim().is_empty() => {
                return Err(format!("{at}.message` is empty: state text the runtime's error contains"));
            }
            (FailureKind::Refused, Some(_)) | (_, None) => {}
            (_, Some(_)) => return Err(format!("{at}.message` is given, but only a `refused` failure has an error message")),
        }
        if let Some([lo, hi]) = self.max_abs_diff
            && !(lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo <= hi)
        {
            return Err(format!("{at}.max_abs_diff` is [{lo}, {hi}]; expected [lo, hi] with 0 <= lo <= hi"));
        }
        Ok(())
    }
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{ failure: {}", self.failure)?;
        if let Some([lo, hi]) = self.max_abs_diff {
            write!(f, ", max_abs_diff: [{lo:e}, {hi:e}]")?;
        }
        if let Some(s) = self.first_step {
            write!(f, ", first_step: {s}")?;
        }
        if let Some(p) = self.first_position {
            write!(f, ", first_position: {p}")?;
        }
        if let Some(m) = &self.first_module {
            write!(f, ", first_module: {m:?}")?;
        }
        if let Some(m) = &self.message {
            write!(f, ", message: {m:?}")?;
        }
        write!(f, " }} ({})", self.failure.describe())
    }
}

/// An expected failure, in the case file where everyone sees it. Empty filters match every value.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Xfail {
    pub levels: Vec<Level>,
    #[serde(default)]
    pub eps: Vec<Ep>,
    #[serde(default)]
    pub dtypes: Vec<Dtype>,
    #[serde(default)]
    pub modalities: Vec<Modality>,
    pub reason: String,
    /// Which failure: required (validation refuses an entry without it, rather than let it absorb any failure).
    #[serde(default)]
    pub expect: Option<Expect>,
}

impl Xfail {
    pub fn applies(&self, modality: Modality, ep: Ep, dtype: Dtype, level: Level) -> bool {
        fn any<T: PartialEq>(list: &[T], v: T) -> bool {
            list.is_empty() || list.contains(&v)
        }
        self.levels.contains(&level) && any(&self.eps, ep) && any(&self.dtypes, dtype) && any(&self.modalities, modality)
    }

    /// Whether some trial is named by both entries.
    fn overlaps(&self, other: &Xfail) -> bool {
        fn meet<T: PartialEq>(a: &[T], b: &[T]) -> bool {
            a.is_empty() || b.is_empty() || a.iter().any(|x| b.contains(x))
        }
        self.levels.iter().any(|l| other.levels.contains(l))
            && meet(&self.eps, &other.eps)
            && meet(&self.dtypes, &other.dtypes)
            && meet(&self.modalities, &other.modalities)
    }
}

/// How messages name entry `i` of `n` xfail entries: `` `xfail `` alone, else `` `xfail[i] `` (the backtick opens
/// the field's name; the message closes it after the rest of the path).
pub fn field(n: usize, i: usize) -> String {
    if n == 1 { "`xfail".to_string() } else { format!("`xfail[{i}]") }
}

/// Checks a case's xfail entries: each names its levels, a reason and the failure it expects, and no two name the
/// same trial. Errors name the field.
pub fn validate(entries: &[Xfail]) -> std::result::Result<(), String> {
    for (i, x) in entries.iter().enumerate() {
        let at = field(entries.len(), i);
        if x.levels.is_empty() || x.reason.trim().is_empty() {
            return Err(format!("field {at}` needs a non-empty `levels` list and a `reason`"));
        }
        let Some(e) = &x.expect else {
            return Err(format!(
                "field {at}.expect` is missing: an expected failure must state which failure it expects, or it would \
                 absorb any failure. Add e.g. `expect: {{ failure: logits, max_abs_diff: [lo, hi] }}` (L4), \
                 `{{ failure: tokens, first_step: N }}` or `{{ failure: step_logits, max_abs_diff: [lo, hi], first_step: N }}` (L5); \
                 a failing trial prints its measured failure in that form"
            ));
        };
        e.validate(&format!("field {at}.expect"))?;
        if let Some(j) = entries[..i].iter().position(|o| o.overlaps(x)) {
            return Err(format!("fields `xfail[{j}]` and {at}` both name some trial; each trial has at most one expected failure"));
        }
    }
    Ok(())
}

/// `xfail:` holds one entry or a list of them.
pub fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Vec<Xfail>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<Xfail>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an xfail entry or a list of them")
        }
        fn visit_map<A: MapAccess<'de>>(self, a: A) -> std::result::Result<Self::Value, A::Error> {
            Xfail::deserialize(de::value::MapAccessDeserializer::new(a)).map(|x| vec![x])
        }
        fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> std::result::Result<Self::Value, A::Error> {
            Vec::<Xfail>::deserialize(de::value::SeqAccessDeserializer::new(a))
        }
        fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
            Ok(Vec::new())
        }
    }
    d.deserialize_any(V)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect(yaml: &str) -> Expect {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn failure(kind: FailureKind, max_abs_diff: Option<f64>, first_step: Option<usize>) -> Failure {
        Failure { max_abs_diff, first_step, ..Failure::of(kind) }
    }

    #[test]
    fn a_device_that_did_not_start_is_never_an_expected_failure() {
        let e = serde_saphyr::from_str::<Expect>("{ failure: device }").unwrap_err().to_string();
        assert!(e.contains("unknown failure \"device\"") && e.contains("are never expected"), "{e}");
        // Nor an encoder's features: a tower that computes other features is never the expectation.
        let e = serde_saphyr::from_str::<Expect>("{ failure: features }").unwrap_err().to_string();
        assert!(e.contains("unknown failure \"features\"") && e.contains("`features`, an encoder's"), "{e}");
    }

    #[test]
    fn a_first_module_is_held_to_the_one_localized() {
        let e = expect("{ failure: logits, max_abs_diff: [0.1, 1.0], first_module: \"model.layers.5.self_attn\" }");
        let at = |m: Option<&str>| Failure { first_module: m.map(String::from), ..failure(FailureKind::Logits, Some(0.4), None) };
        assert_eq!(e.mismatch(Some(&at(Some("model.layers.5.self_attn")))), None);
        let other = e.mismatch(Some(&at(Some("model.layers.4.mlp")))).unwrap().to_string();
        assert!(other.contains("is model.layers.4.mlp, not the expected model.layers.5.self_attn"), "{other}");
        assert!(e.mismatch(Some(&at(None))).unwrap().to_string().contains("no module was localized"));
        let e = expect("{ failure: tokens, first_step: 0, first_module: \"m\" }").validate("field `xfail.expect").unwrap_err();
        assert!(e.contains("first_module` is given, but only a `logits` or `non_finite` failure"), "{e}");
    }

    #[test]
    fn a_refusal_is_expected_by_what_the_runtime_said() {
        let e = expect(r#"{ failure: refused, message: 'Unknown value "decoder_input_ids"' }"#);
        let said = |m: &str| Failure::refused(m.to_string());
        assert_eq!(e.mismatch(Some(&said(r#"JSON Error: model:decoder:inputs: Unknown value "decoder_input_ids" at line 15"#))), None);
        let why = e.mismatch(Some(&said("Decoder-only CPU embedding requires the dynamic-batching Engine."))).unwrap().to_string();
        assert!(why.contains(r#"does not contain the expected "Unknown value \"decoder_input_ids\"""#), "{why}");
        let why = e.mismatch(Some(&failure(FailureKind::Tokens, None, Some(0)))).unwrap().to_string();
        assert!(why.contains("the failure is tokens"), "{why}");
        let entry = |e: &str| Xfail {
            levels: vec![Level::Genai],
            eps: vec![],
            dtypes: vec![],
            modalities: vec![],
            reason: "r".into(),
            expect: Some(expect(e)),
        };
        let err = validate(&[entry("{ failure: refused }")]).unwrap_err();
        assert!(err.contains("`xfail.expect.message` is missing"), "{err}");
        let err = validate(&[entry("{ failure: tokens, first_step: 1, message: x }")]).unwrap_err();
        assert!(err.contains("only a `refused` failure has an error message"), "{err}");
        // ONNX Runtime refusing a model file is a refusal at any level, an encoder's included.
        for level in [Level::L4, Level::L5, Level::AudioEncoder] {
            assert!(validate(&[Xfail { levels: vec![level], ..entry("{ failure: refused, message: x }") }]).is_ok());
        }
        assert!(validate(&[entry("{ failure: refused, message: x }")]).is_ok());
    }

    #[test]
    fn only_the_stated_failure_matches() {
        let e = expect("{ failure: logits, max_abs_diff: [8.5, 9.4] }");
        assert_eq!(e.mismatch(Some(&failure(FailureKind::Logits, Some(8.95), None))), None);
        // A different bug of the same kind: KV heads swapped on top moved the diff to 5.60.
        let why = e.mismatch(Some(&failure(FailureKind::Logits, Some(5.60), None))).unwrap().to_string();
        assert!(why.contains("5.6") && why.contains("outside the expected [8.5e0, 9.4e0]"), "{why}");
        let why = e.mismatch(Some(&failure(FailureKind::Tokens, None, Some(0)))).unwrap().to_string();
        assert!(why.contains("the failure is tokens") && why.contains("not logits"), "{why}");
        assert_eq!(e.mismatch(None), Some(Mismatch::NoVerdict));
        let why = Mismatch::NoVerdict.to_string();
        assert!(why.contains("never an expected failure"), "{why}");

        let e = expect("{ failure: step_logits, max_abs_diff: [0.5, 1.0], first_step: 3 }");
        assert_eq!(e.mismatch(Some(&failure(FailureKind::StepLogits, Some(0.8), Some(3)))), None);
        let why = e.mismatch(Some(&failure(FailureKind::StepLogits, Some(0.8), Some(2)))).unwrap().to_string();
        assert!(why.contains("starts at step 2, not at the expected step 3"), "{why}");
        let why = e.mismatch(Some(&failure(FailureKind::StepLogits, None, Some(3)))).unwrap().to_string();
        assert!(why.contains("no max |diff|"), "{why}");

        // L4's prompt position, when stated, must be the one the logits leave tolerance from.
        let e = expect("{ failure: logits, max_abs_diff: [0.1, 1.0], first_position: 1 }");
        let at = |p: Option<usize>| Failure { first_position: p, ..failure(FailureKind::Logits, Some(0.4), None) };
        assert_eq!(e.mismatch(Some(&at(Some(1)))), None);
        let why = e.mismatch(Some(&at(Some(30)))).unwrap().to_string();
        assert!(why.contains("from prompt position 30, not from the expected position 1"), "{why}");
        let why = e.mismatch(Some(&at(None))).unwrap().to_string();
        assert!(why.contains("from prompt position none"), "{why}");
    }

    #[test]
    fn an_entry_states_what_its_kind_needs() {
        let entry = |levels: Vec<Level>, e: Option<&str>| Xfail {
            levels,
            eps: vec![],
            dtypes: vec![],
            modalities: vec![],
            reason: "r".into(),
            expect: e.map(expect),
        };
        let err = validate(&[entry(vec![Level::L4], None)]).unwrap_err();
        assert!(err.contains("field `xfail.expect` is missing"), "{err}");
        let err = validate(&[entry(vec![Level::L4], Some("{ failure: logits }"))]).unwrap_err();
        assert!(err.contains("`xfail.expect.max_abs_diff` is missing"), "{err}");
        let err = validate(&[entry(vec![Level::L5], Some("{ failure: tokens }"))]).unwrap_err();
        assert!(err.contains("first_step` is missing"), "{err}");
        let err = validate(&[entry(vec![Level::L4], Some("{ failure: logits, max_abs_diff: [2, 1] }"))]).unwrap_err();
        assert!(err.contains("0 <= lo <= hi"), "{err}");
        let twice = [
            entry(vec![Level::L5], Some("{ failure: tokens, first_step: 0 }")),
            entry(vec![Level::L5], Some("{ failure: tokens, first_step: 1 }")),
        ];
        assert!(validate(&twice).unwrap_err().contains("`xfail[0]` and `xfail[1]` both name some trial"));
        assert_eq!(validate(&[entry(vec![Level::L5], Some("{ failure: tokens, first_step: 0 }"))]), Ok(()));
        // Only a logits failure has prompt positions (which levels state one is the plan's check).
        let positioned = "{ failure: logits, max_abs_diff: [1, 2], first_position: 3 }";
        assert_eq!(validate(&[entry(vec![Level::L4], Some(positioned))]), Ok(()));
        let err = validate(&[entry(vec![Level::L5], Some("{ failure: tokens, first_step: 0, first_position: 3 }"))]).unwrap_err();
        assert!(err.contains("first_position` is given"), "{err}");
    }
}
