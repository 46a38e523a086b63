//! How a trial ended: its status, the message a person reads, the structured judgement and the numbers behind it,
//! and the counts over a run. A leaf over the judges' result types: every stage and face may import it.

use crate::accuracy::gate::GateReport;
use crate::error::Error;
use crate::judge::component::ComponentReport;
use crate::judge::detail::Detail;
use crate::judge::dist::DistReport;
use crate::judge::genai_level::GenaiReport;
use crate::judge::verdict::{GenerationReport, PrefillReport, Verdict};
use crate::judge::xfail::{Failure, Mismatch};

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
}

impl From<Verdict> for Status {
    fn from(v: Verdict) -> Status {
        match v {
            Verdict::Pass => Status::Pass,
            Verdict::Ambiguous => Status::Ambiguous,
            Verdict::Fail => Status::Fail,
        }
    }
}

/// What a judge decided, as data: the verdict, its reasons and every number it measured. `report/` renders it; the
/// summary, the HTML, JSON, JUnit and `xtask mutants` read its fields, never the message.
#[derive(Debug, Clone, PartialEq)]
pub enum Judgement {
    /// L4: the last position over the vocabulary, and every stored prompt position.
    Prefill(Box<PrefillReport>),
    /// L5: the stream, its first divergence, the teacher-forced run and the step logits.
    Generation(Box<GenerationReport>),
    /// A media encoder's features, and whether they reach the decoder.
    Component(Box<ComponentReport>),
    /// The package through onnxruntime-genai.
    Genai(Box<GenaiReport>),
    /// The accuracy gate on one task.
    Accuracy(Box<GateReport>),
    /// The distribution level: KL divergence from the fp32 reference over the corpus.
    Dist(Box<DistReport>),
}

impl Judgement {
    /// Why it failed (or what it warns about), in the order the report prints them as `- ` lines.
    pub fn reasons(&self) -> Vec<&str> {
        match self {
            Judgement::Prefill(r) => r.reasons.iter().map(String::as_str).collect(),
            Judgement::Generation(r) => r.reasons.iter().map(String::as_str).collect(),
            Judgement::Component(r) => r.reasons.iter().map(String::as_str).collect(),
            Judgement::Genai(r) => r.reasons(),
            // The gate prints its reasons as notes under its numbers; its headline is its first line.
            Judgement::Accuracy(_) => Vec::new(),
            Judgement::Dist(r) => r.reasons.iter().map(String::as_str).collect(),
        }
    }

    /// The noise policy's own statistic of an L4 judgement (at most 1 passes).
    pub fn noise_score(&self) -> Option<f64> {
        match self {
            Judgement::Prefill(r) => r.noise.as_ref().map(|n| n.score),
            _ => None,
        }
    }

    /// L5's tokens kept: (matching, compared).
    pub fn tokens_kept(&self) -> Option<(usize, usize)> {
        match self {
            Judgement::Generation(r) => Some((r.matches, r.expected.len().max(r.got.len()))),
            _ => None,
        }
    }
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
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub status: Status,
    /// What `report/` rendered of it.
    pub message: String,
    /// The judgement, when a judge reached one (`None` for a skip or an error).
    pub judgement: Option<Judgement>,
    /// How the case's xfail entry settled it, when one names it.
    pub settled: Option<Box<Settled>>,
    /// The command that regenerates this trial's golden or baseline (a case's trials; not a case that does not load).
    pub regenerate: Option<String>,
    pub max_abs_diff: Option<f64>,
    pub first_divergence: Option<usize>,
    /// The rendered L5 snapshot, when the trial compared one.
    pub snapshot: Option<String>,
    /// Every number the verdict measured, and the series the reports plot.
    pub detail: Option<Box<Detail>>,
    /// What failed, when a verdict failed (what an xfail entry can expect); `None` for a pass or an error.
    pub failure: Option<Box<Failure>>,
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
            detail: None,
            failure: None,
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
    /// message).
    pub fn from_error(trial: &str, error: &Error) -> Outcome {
        let failure = error.is_refusal().then(|| Box::new(crate::judge::xfail::Failure::refused(error.message().to_string())));
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
