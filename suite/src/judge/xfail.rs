//! Expected failures: the failure a case file says a trial has, and whether the trial's own failure is that one.
//!
//! Strict both ways: a listed trial that passes fails ("unexpectedly passed"), and one that fails otherwise than
//! stated fails too, printing the expected and the actual failure. Only a verdict's failure can be expected: a trial
//! that never reached a verdict (a package that does not load, a missing package or golden under CI, a stale golden)
//! carries no [`Failure`] and is never absorbed.

use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::vocab::{Dtype, Ep, Level, Modality};

/// What kind of verdict failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// L4: prefill logits out of tolerance (or a wrong argmax).
    Logits,
    /// L5: the greedy stream diverges from the reference's for real.
    Tokens,
    /// L5: the tokens hold, but a teacher-forced decode step's logits leave tolerance.
    StepLogits,
    /// The accuracy gate: benchmark accuracy moved beyond its bound.
    Accuracy,
    /// genai: onnxruntime-genai's own processor built another prompt than Hugging Face's.
    Prompt,
    /// The package's logits hold NaN or infinity (no diff range can hold it).
    NonFinite,
    /// The package's logits rows have another length than the golden's vocabulary (checked before finiteness, so an
    /// expected `non_finite` never absorbs it).
    VocabSize,
    /// The package's runtime refused it: onnxruntime-genai (the genai level) or ONNX Runtime (a model file it will
    /// not load, at any level); an expectation names what its error says.
    Refused,
    /// The distribution level: the next-token distributions' KL divergence from the fp32 reference over its limit.
    Distribution,
}

impl FailureKind {
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Logits => "logits",
            FailureKind::Tokens => "tokens",
            FailureKind::StepLogits => "step_logits",
            FailureKind::Accuracy => "accuracy",
            FailureKind::Prompt => "prompt",
            FailureKind::NonFinite => "non_finite",
            FailureKind::VocabSize => "vocab_size",
            FailureKind::Refused => "refused",
            FailureKind::Distribution => "distribution",
        }
    }

    fn parse(s: &str) -> Option<FailureKind> {
        [
            FailureKind::Logits,
            FailureKind::Tokens,
            FailureKind::StepLogits,
            FailureKind::Accuracy,
            FailureKind::Prompt,
            FailureKind::NonFinite,
            FailureKind::VocabSize,
            FailureKind::Refused,
            FailureKind::Distribution,
        ]
        .into_iter()
        .find(|k| k.name() == s)
    }

    /// In words, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            FailureKind::Logits => "L4 prefill logits out of tolerance",
            FailureKind::Tokens => "L5 greedy tokens diverge",
            FailureKind::StepLogits => "L5 decode-step logits out of tolerance",
            FailureKind::Accuracy => "accuracy outside the gate",
            FailureKind::Prompt => "genai's processor prompt differs from Hugging Face's",
            FailureKind::NonFinite => "logits are NaN or infinite",
            FailureKind::VocabSize => "the logits' vocabulary is not the golden's",
            FailureKind::Refused => "the runtime refused the package",
            FailureKind::Distribution => "next-token distributions too far from the fp32 reference's",
        }
    }

    /// The levels whose verdicts give this kind (genai judges prefill logits as L4 and tokens as L5 do).
    pub fn levels(self) -> &'static [Level] {
        match self {
            FailureKind::Logits => &[Level::L4, Level::Genai],
            FailureKind::Tokens => &[Level::L5, Level::Genai],
            FailureKind::StepLogits => &[Level::L5],
            FailureKind::Accuracy => &[Level::Accuracy, Level::AccuracyGenai],
            FailureKind::Prompt => &[Level::Genai],
            FailureKind::NonFinite => &[Level::L4, Level::L5, Level::Genai, Level::Accuracy, Level::AccuracyGenai, Level::Dist],
            FailureKind::VocabSize => &[Level::L4, Level::L5, Level::Genai, Level::Dist],
            FailureKind::Refused => &[
                Level::L4,
                Level::L5,
                Level::Genai,
                Level::VisionEncoder,
                Level::AudioEncoder,
                Level::Accuracy,
                Level::AccuracyGenai,
                Level::Dist,
            ],
            FailureKind::Distribution => &[Level::Dist],
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl<'de> Deserialize<'de> for FailureKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        FailureKind::parse(&s).ok_or_else(|| {
            de::Error::custom(format!(
                "unknown failure {s:?}, expected one of logits, tokens, step_logits, accuracy, prompt, non_finite, vocab_size, refused, distribution"
            ))
        })
    }
}

/// A verdict's failure, in the numbers an expectation states.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub kind: FailureKind,
    /// The largest |package - reference| logit difference the verdict measured (L4: over the last position's
    /// vocabulary and every prompt position's stored logits; L5: over every teacher-forced step).
    pub max_abs_diff: Option<f64>,
    /// L5: the first diverging token (`tokens`) or the first step whose logits leave tolerance (`step_logits`).
    pub first_step: Option<usize>,
    /// L4: the first prompt position whose logits leave tolerance (goldens that store every position).
    pub first_position: Option<usize>,
    /// `refused`: the runtime's own error (onnxruntime-genai's or ONNX Runtime's), as it gave it.
    pub refusal: Option<String>,
}

impl Failure {
    /// A failure of `kind` with nothing measured yet.
    pub fn of(kind: FailureKind) -> Failure {
        Failure { kind, max_abs_diff: None, first_step: None, first_position: None, refusal: None }
    }

    /// The runtime's refusal of the package, with its error.
    pub fn refused(error: String) -> Failure {
        Failure { refusal: Some(error), ..Failure::of(FailureKind::Refused) }
    }

    /// A prefill-logits failure measured as `max_abs_diff`: `non_finite` when that is NaN or infinite (the package
    /// computed no number there), else `logits`.
    pub fn prefill(max_abs_diff: Option<f64>) -> Failure {
        let kind = if max_abs_diff.is_some_and(|d| !d.is_finite()) { FailureKind::NonFinite } else { FailureKind::Logits };
        Failure { max_abs_diff, ..Failure::of(kind) }
    }
}

impl fmt::Display for Failure {
    /// As the case file would state it, so a measured failure can be pasted into an `expect`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{ failure: {}", self.kind)?;
        if let Some(d) = self.max_abs_diff {
            write!(f, ", max_abs_diff: {d:.6e}")?;
        }
        if let Some(s) = self.first_step {
            write!(f, ", first_step: {s}")?;
        }
        if let Some(p) = self.first_position {
            write!(f, ", first_position: {p}")?;
        }
        if let Some(m) = &self.refusal {
            write!(f, ", message: {m:?}")?;
        }
        write!(f, " }} ({})", self.kind.describe())
    }
}

/// Why a failure is not the one an xfail entry expects.
#[derive(Debug, Clone, PartialEq)]
pub enum Mismatch {
    /// The trial ended without a verdict: bad input or a broken set-up, never an expected failure.
    NoVerdict,
    Kind {
        got: FailureKind,
        expected: FailureKind,
    },
    OutsideRange {
        got: f64,
        range: [f64; 2],
    },
    NoDiffMeasured,
    Step {
        got: Option<usize>,
        expected: usize,
    },
    Position {
        got: Option<usize>,
        expected: usize,
    },
    /// The runtime refused the package, but its error does not say what the entry expects.
    Message {
        expected: String,
    },
    /// The entry states no failure to expect.
    NoneStated,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let none = |v: &Option<usize>| v.map_or_else(|| "none".to_string(), |g| g.to_string());
        match self {
            Mismatch::NoVerdict => f.write_str(
                "the trial failed without reaching a verdict (a load error, a missing package or golden, a stale golden, \
                 bad input), which is never an expected failure",
            ),
            Mismatch::Kind { got, expected } => write!(f, "the failure is {got} ({}), not {expected}", got.describe()),
            Mismatch::OutsideRange { got, range: [lo, hi] } => write!(f, "max |diff| {got:.6e} is outside the expected [{lo:e}, {hi:e}]"),
            Mismatch::NoDiffMeasured => f.write_str("the verdict measured no max |diff| to hold against the expected range"),
            Mismatch::Step { got, expected } => {
                write!(f, "the failure starts at step {}, not at the expected step {expected}", none(got))
            }
            Mismatch::Position { got, expected } => {
                write!(f, "the logits leave tolerance from prompt position {}, not from the expected position {expected}", none(got))
            }
            Mismatch::Message { expected } => write!(f, "the runtime's error does not contain the expected {expected:?}"),
            Mismatch::NoneStated => f.write_str("the xfail entry states no expected failure"),
        }
    }
}

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
        if let Some(m) = &self.message
            && !got.refusal.as_deref().is_some_and(|r| r.contains(m.as_str()))
        {
            return Some(Mismatch::Message { expected: m.clone() });
        }
        None
    }

    /// What `failure` needs stated, given its kind; `at` names the field in messages.
    fn validate(&self, at: &str, levels: &[Level]) -> std::result::Result<(), String> {
        let kind = self.failure;
        if let Some(l) = levels.iter().find(|l| !kind.levels().contains(l)) {
            let gives: Vec<String> = kind.levels().iter().map(ToString::to_string).collect();
            return Err(format!(
                "{at}.failure` is `{kind}`, which only a {} trial gives, but `levels` lists {l}; give each level its own xfail entry",
                gives.join(" or ")
            ));
        }
        if matches!(kind, FailureKind::Logits | FailureKind::StepLogits) && self.max_abs_diff.is_none() {
            return Err(format!("{at}.max_abs_diff` is missing: a `{kind}` failure states its range, `[lo, hi]`"));
        }
        if matches!(kind, FailureKind::Tokens | FailureKind::StepLogits) && self.first_step.is_none() {
            return Err(format!("{at}.first_step` is missing: a `{kind}` failure states the step where it starts"));
        }
        if self.first_position.is_some() && (kind != FailureKind::Logits || levels.contains(&Level::Genai)) {
            return Err(format!(
                "{at}.first_position` is given, but only L4's `logits` failure has a prompt position (genai judges the last one)"
            ));
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

/// Checks a case's xfail entries: each names its levels, a reason and the failure it expects, and no two name the
/// same trial. Errors name the field.
pub fn validate(entries: &[Xfail]) -> std::result::Result<(), String> {
    for (i, x) in entries.iter().enumerate() {
        let at = if entries.len() == 1 { "`xfail".to_string() } else { format!("`xfail[{i}]") };
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
        e.validate(&format!("field {at}.expect"), &x.levels)?;
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
        let err = validate(&[entry(vec![Level::L4, Level::L5], Some("{ failure: logits, max_abs_diff: [1, 2] }"))]).unwrap_err();
        assert!(err.contains("only a L4 or genai trial gives") && err.contains("lists L5"), "{err}");
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
        // Only L4 has prompt positions: genai's logits are its last position's.
        let positioned = "{ failure: logits, max_abs_diff: [1, 2], first_position: 3 }";
        assert_eq!(validate(&[entry(vec![Level::L4], Some(positioned))]), Ok(()));
        let err = validate(&[entry(vec![Level::Genai], Some(positioned))]).unwrap_err();
        assert!(err.contains("first_position` is given, but only L4"), "{err}");
        let err = validate(&[entry(vec![Level::L5], Some("{ failure: tokens, first_step: 0, first_position: 3 }"))]).unwrap_err();
        assert!(err.contains("first_position` is given"), "{err}");
    }
}
