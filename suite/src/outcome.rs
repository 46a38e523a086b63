//! How a trial ended: its status, the message a person reads, the judgement behind it (behind the one face every
//! report reads), and the counts over a run. A leaf: it names no stage, so every stage and face may import it.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, de};

use crate::error::Error;

/// How a trial ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Pass,
    /// A near-tie explains the difference: a pass, shown.
    Ambiguous,
    /// The output diverges from the golden exactly as a reviewed, committed snapshot says: a pass, shown.
    Accepted,
    /// Failed, as the case's `xfail` says it does: a pass, shown.
    ExpectedFailure,
    Skip,
    Fail,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Ambiguous => "AMBIGUOUS",
            Status::Accepted => "ACCEPTED",
            Status::ExpectedFailure => "XFAIL",
            Status::Skip => "SKIP",
            Status::Fail => "FAIL",
        }
    }

    /// The status [`Status::name`] names.
    pub fn from_name(name: &str) -> Option<Status> {
        use Status::*;
        [Pass, Ambiguous, Accepted, ExpectedFailure, Skip, Fail].into_iter().find(|s| s.name() == name)
    }
}

/// What the HTML report shows beside a verdict: numbers, each with its label, and plots or tables as inline SVG or
/// HTML.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Shown {
    pub numbers: Vec<(&'static str, String)>,
    pub plots: Vec<String>,
}

/// What a judge decided, as data, behind the face the reports read. Each level's judgement type implements it in
/// the level's render module: the reasons, numbers and plots are words and pictures of the level's own numbers, and
/// `report/` gathers them without knowing any level. A face that needs a level's own numbers (`xtask mutants`) asks
/// the level, which downcasts it (`dyn Judgement::downcast`).
pub trait Judgement: Any + fmt::Debug + Send + Sync {
    /// Why it failed (or what it warns about), in the order the report prints them as `- ` lines.
    fn reasons(&self) -> Vec<String>;
    /// What the HTML report shows beside the verdict (none unless the level says).
    fn shown(&self) -> Shown {
        Shown::default()
    }
    /// Its row in `summary.md`'s numbers: the table it belongs in and its cells between the trial's verdict and time.
    fn summary_row(&self) -> Option<(&'static NumbersTable, String)>;
    /// The change in benchmark accuracy, in points (`summary.json`'s `accuracy_delta_points`): the gates'.
    fn accuracy_delta_points(&self) -> Option<f64> {
        None
    }
}

impl dyn Judgement {
    /// The level's own judgement, when it is a `T`.
    pub fn downcast<T: Judgement>(&self) -> Option<&T> {
        (self as &dyn Any).downcast_ref()
    }
}

/// One of `summary.md`'s numbers tables: one per kind of trial, in `order`, each metric in its own column.
#[derive(Debug, PartialEq, Eq)]
pub struct NumbersTable {
    pub order: u8,
    pub title: &'static str,
    /// The columns between `trial | verdict` and `time (s)`, as a Markdown header's cells (`a | b | c`).
    pub columns: &'static str,
}

/// How a strict xfail entry settled a trial, when one names it.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// It failed as the entry states.
    Expected,
    /// It failed otherwise: another kind, a number outside the range, or no verdict at all.
    NotExpected(Mismatch),
    /// It passed: the entry is stale.
    UnexpectedlyPassed,
}

/// A trial's result: its status, the message a person reads, and the numbers a summary table shows.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: Status,
    /// What `report/` rendered of it.
    pub message: String,
    /// The judgement, when a judge reached one (`None` for a skip or an error).
    pub judgement: Option<Arc<dyn Judgement>>,
    /// How the case's xfail entry settled it, when one names it.
    pub settled: Option<Box<Settled>>,
    /// The command that regenerates this trial's golden or baseline (a case's trials; not a case that does not load).
    pub regenerate: Option<String>,
    pub max_abs_diff: Option<f64>,
    pub first_divergence: Option<usize>,
    /// The rendered L5 snapshot, when the trial compared one.
    pub snapshot: Option<String>,
    /// What failed, when a verdict failed (what an xfail entry can expect); `None` for a pass or an error.
    pub failure: Option<Box<Failure>>,
    /// A second judgement made after the verdict failed: where along the model the package leaves the reference
    /// (`level::localize`), shown beside the level's own.
    pub diagnosis: Option<Arc<dyn Judgement>>,
}

impl Outcome {
    pub fn new(status: Status, message: impl Into<String>) -> Outcome {
        Outcome {
            status,
            message: message.into(),
            judgement: None,
            settled: None,
            regenerate: None,
            max_abs_diff: None,
            first_divergence: None,
            snapshot: None,
            failure: None,
            diagnosis: None,
        }
    }

    pub fn skip(reason: impl Into<String>) -> Outcome {
        Outcome::new(Status::Skip, reason)
    }

    pub fn fail(message: impl Into<String>) -> Outcome {
        Outcome::new(Status::Fail, message)
    }

    /// A trial that ended in `error`: bad input or a broken set-up, a failure no xfail entry can expect; except ONNX
    /// Runtime's refusal to load the package, the package's failure, which an entry may expect (`refused`, by its
    /// message), and a device that did not start (`device`, which no entry may expect).
    pub fn from_error(trial: &str, error: &Error) -> Outcome {
        let failure = if error.is_refusal() {
            Some(Box::new(Failure::refused(error.message().to_string())))
        } else if error.is_device() {
            Some(Box::new(Failure::device(error.message().to_string())))
        } else {
            None
        };
        Outcome { failure, ..Outcome::fail(format!("{trial}: {error}")) }
    }

    pub fn is_fail(&self) -> bool {
        self.status == Status::Fail
    }
}

/// A finished trial, with how long it took.
#[derive(Debug, Clone)]
pub struct Finished {
    pub name: String,
    pub outcome: Outcome,
    pub seconds: f64,
}

/// How many finished trials ended each way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub pass: usize,
    pub ambiguous: usize,
    pub accepted: usize,
    pub xfail: usize,
    pub skip: usize,
    pub fail: usize,
}

impl Counts {
    pub fn of(rows: &[Finished]) -> Counts {
        let mut c = Counts::default();
        for r in rows {
            *match r.outcome.status {
                Status::Pass => &mut c.pass,
                Status::Ambiguous => &mut c.ambiguous,
                Status::Accepted => &mut c.accepted,
                Status::ExpectedFailure => &mut c.xfail,
                Status::Skip => &mut c.skip,
                Status::Fail => &mut c.fail,
            } += 1;
        }
        c
    }
}

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
    /// The device did not start (CUDA's provider, a device id, cuDNN): the machine's failure, never the package's,
    /// so no level lists it and no xfail entry absorbs it.
    Device,
    /// An encoder level: the media encoder's features leave the reference's (or never reach the decoder). Never
    /// expected: no xfail entry states it.
    Features,
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
            FailureKind::Device => "device",
            FailureKind::Features => "features",
        }
    }

    /// The kinds an xfail entry may state: every one but `device`, the machine's failure, which none absorbs, and
    /// `features`, an encoder's, which is never expected.
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
            FailureKind::Device => "the device did not start",
            FailureKind::Features => "an encoder's features differ from the reference's",
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
                "unknown failure {s:?}, expected one of logits, tokens, step_logits, accuracy, prompt, non_finite, vocab_size, refused, distribution (`device`, the machine's failure, and `features`, an encoder's, are never expected)"
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
    /// `refused` and `device`: the runtime's own error (onnxruntime-genai's or ONNX Runtime's), as it gave it.
    pub refusal: Option<String>,
    /// A prefill-type failure localized along the model (`level::localize`): the first module out of the
    /// reference's noise, or the first with a NaN or an infinity; `None` when nothing was localized.
    pub first_module: Option<String>,
}

impl Failure {
    /// A failure of `kind` with nothing measured yet.
    pub fn of(kind: FailureKind) -> Failure {
        Failure { kind, max_abs_diff: None, first_step: None, first_position: None, refusal: None, first_module: None }
    }

    /// The runtime's refusal of the package, with its error.
    pub fn refused(error: String) -> Failure {
        Failure { refusal: Some(error), ..Failure::of(FailureKind::Refused) }
    }

    /// The device that did not start, with ONNX Runtime's error.
    pub fn device(error: String) -> Failure {
        Failure { refusal: Some(error), ..Failure::of(FailureKind::Device) }
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
        if let Some(m) = &self.first_module {
            write!(f, ", first_module: {m:?}")?;
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
    /// Localization named another first module (or none).
    Module {
        got: Option<String>,
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
            Mismatch::Module { got: Some(got), expected } => {
                write!(f, "the first module out of the reference's noise is {got}, not the expected {expected}")
            }
            Mismatch::Module { got: None, expected } => {
                write!(f, "no module was localized (no module golden, or every module within noise), not the expected {expected}")
            }
            Mismatch::NoneStated => f.write_str("the xfail entry states no expected failure"),
        }
    }
}
