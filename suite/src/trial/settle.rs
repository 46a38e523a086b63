//! Settling a trial's expectation: the reviewed snapshot of a stream, then the case's strict xfail entry. The rules
//! are two pure functions, [`compare_snapshot`] and [`settle`], whose precedence is written here once and tested on
//! crafted values; the methods below only gather their inputs and word the result.

use super::{Trial, indent};
use crate::judge::xfail::Xfail;
use crate::outcome::{Failure, Mismatch, Outcome, Settled, Status};
use crate::paths;
use crate::report::snapshot;

/// Whether a stream is judged by its snapshot: one with a committed snapshot always is (it must still equal it); a
/// failing one without is, so that insta leaves a `.snap.new` to review, unless an xfail entry already states why
/// it fails.
pub fn compare_snapshot(status: Status, committed: bool, expected_to_fail: bool) -> bool {
    committed || (status == Status::Fail && !expected_to_fail)
}

/// The strict xfail rule. With no entry the status stands. With one: a failure it states passes as XFAIL; another
/// failure, or one without a verdict, fails; a pass (or an accepted snapshot) fails as an unexpected pass; a skip
/// stays a skip.
pub fn settle(status: Status, failure: Option<&Failure>, entry: Option<&Xfail>) -> (Status, Option<Settled>) {
    let Some(x) = entry else { return (status, None) };
    match status {
        Status::Fail => {
            let mismatch = match &x.expect {
                Some(e) => e.mismatch(failure),
                None => Some(Mismatch::NoneStated),
            };
            match mismatch {
                None => (Status::ExpectedFailure, Some(Settled::Expected)),
                Some(why) => (Status::Fail, Some(Settled::NotExpected(why))),
            }
        }
        Status::Skip | Status::ExpectedFailure => (status, None),
        Status::Pass | Status::Ambiguous | Status::Accepted => (Status::Fail, Some(Settled::UnexpectedlyPassed)),
    }
}

impl Trial<'_> {
    /// The case's xfail entry naming this trial, if any.
    pub(super) fn xfail(&self) -> Option<&Xfail> {
        let v = self.variant;
        self.case.spec.xfail.iter().find(|x| x.applies(self.modality, v.ep, v.dtype, self.level))
    }

    /// Strict expected failures ([`settle`]), with both the expected and the actual failure printed.
    pub(super) fn apply_xfail(&self, o: Outcome) -> Outcome {
        let Some(x) = self.xfail() else { return o };
        let (status, settled) = settle(o.status, o.failure.as_deref(), Some(x));
        let expected = x.expect.as_ref().map_or_else(|| "(none stated)".to_string(), ToString::to_string);
        let actual = o.failure.as_ref().map_or_else(|| "no verdict failure".to_string(), ToString::to_string);
        let message = match &settled {
            None => return o,
            Some(Settled::Expected) => {
                format!("{}: XFAIL ({})\n  expected: {expected}\n  actual:   {actual}\n{}", self.name, x.reason, o.message)
            }
            Some(Settled::NotExpected(why)) => format!(
                "{}: not the expected failure: {why}\n  expected: {expected} (xfail in {}: {})\n  actual:   {actual}\n{}",
                self.name, self.case.file, x.reason, o.message
            ),
            Some(Settled::UnexpectedlyPassed) => format!(
                "{}: unexpectedly passed ({}): remove the xfail from {} (reason was: {})\n  expected: {expected}\n{}",
                self.name,
                o.status.name(),
                self.case.file,
                x.reason,
                o.message
            ),
        };
        Outcome { status, message, settled: settled.map(Box::new), ..o }
    }

    /// A stream judged by its snapshot ([`compare_snapshot`]): equal to the reviewed one, it passes as ACCEPTED;
    /// otherwise it fails, and insta leaves a `.snap.new` to review (not under CI). `render` gives (content,
    /// description).
    pub(super) fn review_snapshot(&self, o: Outcome, render: impl FnOnce() -> (String, String)) -> Outcome {
        let dir = self.suite.snapshots_dir(&self.case.task_dir);
        let Some(name) = self.id.snapshot_stem(&self.case.name) else { return o };
        // A snapshot's content is echoed in the diff: only one inside the root is read.
        if let Err(e) = paths::confine(&self.suite.root, &snapshot::path(&dir, &name), "snapshot", paths::SUITE_HINT) {
            return Outcome { status: Status::Fail, message: format!("{}  {e}\n", o.message), ..o };
        }
        let committed = snapshot::path(&dir, &name).is_file();
        if !compare_snapshot(o.status, committed, self.xfail().is_some()) {
            return o;
        }
        let (content, description) = render();
        let (status, message) = match snapshot::assert(&dir, &name, &content, &description, &self.suite.root, self.ctx.snapshots()) {
            Ok(()) => {
                let shown = self.rel(&snapshot::path(&dir, &name));
                (Status::Accepted, format!("{}  accepted: the stream equals the reviewed snapshot {shown}\n", o.message))
            }
            Err(e) => (Status::Fail, format!("{}  {e}\n  snapshot:\n{}", o.message, indent(&content, "    "))),
        };
        Outcome { status, message, snapshot: Some(content), ..o }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::xfail::Expect;
    use crate::outcome::FailureKind;

    fn entry(expect: Option<Expect>) -> Xfail {
        Xfail { levels: vec![], eps: vec![], dtypes: vec![], modalities: vec![], reason: "known".into(), expect }
    }

    fn failure(kind: FailureKind, max_abs_diff: Option<f64>) -> Failure {
        Failure { max_abs_diff, ..Failure::of(kind) }
    }

    #[test]
    fn without_an_entry_the_status_stands() {
        for s in [Status::Pass, Status::Ambiguous, Status::Accepted, Status::Skip, Status::Fail] {
            assert_eq!(settle(s, None, None), (s, None));
        }
    }

    #[test]
    fn an_entry_absorbs_only_the_failure_it_states() {
        let logits = entry(Some(Expect {
            failure: FailureKind::Logits,
            max_abs_diff: Some([1.0, 2.0]),
            first_step: None,
            first_position: None,
            message: None,
        }));
        let f = failure(FailureKind::Logits, Some(1.5));
        assert_eq!(settle(Status::Fail, Some(&f), Some(&logits)), (Status::ExpectedFailure, Some(Settled::Expected)));
        let far = failure(FailureKind::Logits, Some(3.0));
        assert!(matches!(
            settle(Status::Fail, Some(&far), Some(&logits)),
            (Status::Fail, Some(Settled::NotExpected(Mismatch::OutsideRange { .. })))
        ));
        let tokens = failure(FailureKind::Tokens, None);
        assert!(matches!(
            settle(Status::Fail, Some(&tokens), Some(&logits)),
            (Status::Fail, Some(Settled::NotExpected(Mismatch::Kind { .. })))
        ));
        // An error (no verdict) is never expected; nor is anything when the entry states nothing.
        assert_eq!(settle(Status::Fail, None, Some(&logits)), (Status::Fail, Some(Settled::NotExpected(Mismatch::NoVerdict))));
        assert_eq!(settle(Status::Fail, Some(&f), Some(&entry(None))), (Status::Fail, Some(Settled::NotExpected(Mismatch::NoneStated))));
    }

    #[test]
    fn a_pass_under_an_entry_fails_and_a_skip_stays() {
        let e =
            entry(Some(Expect { failure: FailureKind::Tokens, max_abs_diff: None, first_step: None, first_position: None, message: None }));
        for s in [Status::Pass, Status::Ambiguous, Status::Accepted] {
            assert_eq!(settle(s, None, Some(&e)), (Status::Fail, Some(Settled::UnexpectedlyPassed)), "{s:?}");
        }
        assert_eq!(settle(Status::Skip, None, Some(&e)), (Status::Skip, None));
    }

    #[test]
    fn the_snapshot_comes_first_and_an_entry_spares_a_failing_stream_its_review() {
        // Committed: always compared, whatever the status or entry.
        for s in [Status::Pass, Status::Fail] {
            assert!(compare_snapshot(s, true, true) && compare_snapshot(s, true, false));
        }
        assert!(compare_snapshot(Status::Fail, false, false));
        assert!(!compare_snapshot(Status::Fail, false, true));
        assert!(!compare_snapshot(Status::Pass, false, false));
        // A stream accepted by its snapshot, under an xfail entry, is an unexpected pass.
        let e = entry(Some(Expect {
            failure: FailureKind::Tokens,
            max_abs_diff: None,
            first_step: Some(0),
            first_position: None,
            message: None,
        }));
        assert_eq!(settle(Status::Accepted, None, Some(&e)).0, Status::Fail);
    }
}
