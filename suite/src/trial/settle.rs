//! Settling a trial's expectation against the case's strict xfail entry: the rule is one pure function, [`settle`],
//! tested on crafted values; [`apply_xfail`] only gathers its inputs (the words are `report::settled`'s).

use crate::judge::xfail::Xfail;
use crate::level::trial::Trial;
use crate::outcome::{Failure, Mismatch, Outcome, Settled, Status};
use crate::report;

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

/// Strict expected failures ([`settle`]), with both the expected and the actual failure printed.
pub fn apply_xfail(t: &Trial, o: Outcome) -> Outcome {
    let Some(x) = t.xfail() else { return o };
    let (status, settled) = settle(o.status, o.failure.as_deref(), Some(x));
    let Some(how) = &settled else { return o };
    let message = report::settled(t.name, &t.case.file, x, how, &o);
    Outcome { status, message, settled: settled.map(Box::new), ..o }
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
            first_module: None,
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
        let e = entry(Some(Expect {
            failure: FailureKind::Tokens,
            max_abs_diff: None,
            first_step: None,
            first_position: None,
            first_module: None,
            message: None,
        }));
        for s in [Status::Pass, Status::Ambiguous, Status::Accepted] {
            assert_eq!(settle(s, None, Some(&e)), (Status::Fail, Some(Settled::UnexpectedlyPassed)), "{s:?}");
        }
        assert_eq!(settle(Status::Skip, None, Some(&e)), (Status::Skip, None));
    }

    #[test]
    fn a_stream_accepted_by_its_snapshot_under_an_entry_is_an_unexpected_pass() {
        let e = entry(Some(Expect {
            failure: FailureKind::Tokens,
            max_abs_diff: None,
            first_step: Some(0),
            first_position: None,
            first_module: None,
            message: None,
        }));
        assert_eq!(settle(Status::Accepted, None, Some(&e)).0, Status::Fail);
    }
}
