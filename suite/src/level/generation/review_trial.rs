//! A stream's reviewed snapshot: a token divergence a person accepted with `cargo insta review` is the expectation
//! of that one variant. A snapshot reviews tokens only: a stream whose step logits left the noise policy (at any
//! step: they are judged teacher-forced) fails whatever its snapshot says, and is offered no review. The rule of when a stream is
//! judged by its snapshot is a pure function, tested on crafted values; the review itself is insta's
//! (`report::snapshot`).

use super::render;
use crate::level::trial::Trial;
use crate::outcome::{Outcome, Status};
use crate::paths;
use crate::report::snapshot;

/// What a stream's snapshot does for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Nothing: the outcome stands.
    Stands,
    /// The stream's numbers failed before its tokens changed: it fails, with no review offered, snapshot or not.
    NotReviewable,
    /// Judged by the snapshot: equal to it, accepted; else failed, with a `.snap.new` to review.
    Judged,
}

/// The rule: a failing stream whose step logits left the noise policy (`numbers_out`) is not reviewable; otherwise a stream with a committed snapshot is judged by it (it must still equal it), and a
/// failing one without is too, so that insta leaves a `.snap.new` to review, unless an xfail entry already states
/// why it fails.
pub fn snapshot_rule(status: Status, numbers_out: bool, committed: bool, expected_to_fail: bool) -> Rule {
    if status == Status::Fail && numbers_out {
        Rule::NotReviewable
    } else if committed || (status == Status::Fail && !expected_to_fail) {
        Rule::Judged
    } else {
        Rule::Stands
    }
}

/// A stream as its snapshot leaves it ([`snapshot_rule`]): equal to the reviewed one, it passes as ACCEPTED;
/// differing, it fails, and insta leaves a `.snap.new` to review (not under CI); with its step logits out of the
/// policy (`numbers_out`: the first such step), it fails whatever the snapshot says. A `.snap.new` left beside a
/// passing stream, or beside one whose numbers failed (which no review may accept), is reported. `render` gives (content, description).
pub fn review_snapshot(t: &Trial, o: Outcome, numbers_out: Option<usize>, render: impl FnOnce() -> (String, String)) -> Outcome {
    let dir = t.suite.snapshots_dir(&t.case.task_dir);
    let Some(name) = t.id.snapshot_stem(&t.case.name) else { return o };
    // A snapshot's content is echoed in the diff: only one inside the root is read.
    if let Err(e) = paths::confine(&t.suite.root, &snapshot::path(&dir, &name), "snapshot", paths::SUITE_HINT) {
        return Outcome { status: Status::Fail, message: render::with_error(&o.message, &e), ..o };
    }
    let file = snapshot::path(&dir, &name);
    let committed = file.is_file();
    let pending = snapshot::pending(&file);
    let stale = |o: Outcome| match o.status {
        Status::Pass | Status::Accepted if pending.is_file() => {
            Outcome { message: render::stale_pending(&o.message, &t.rel(&pending)), ..o }
        }
        _ => o,
    };
    let not_to_accept = |message: String| if pending.is_file() { render::stale_pending(&message, &t.rel(&pending)) } else { message };
    let (content, description) = match (snapshot_rule(o.status, numbers_out.is_some(), committed, t.xfail().is_some()), numbers_out) {
        (Rule::Stands, _) => return stale(o),
        (Rule::NotReviewable, Some(step)) => {
            let message = not_to_accept(render::numbers_not_reviewable(&o.message, step, committed.then(|| t.rel(&file)).as_deref()));
            return Outcome { message, snapshot: Some(render().0), ..o };
        }
        _ => render(),
    };
    let (status, message) = match snapshot::assert(&dir, &name, &content, &description, &t.suite.root, t.ctx.snapshots()) {
        Ok(()) => (Status::Accepted, render::accepted(&o.message, &t.rel(&file))),
        Err(e) => (Status::Fail, render::snapshot_differs(&o.message, &e, &content)),
    };
    stale(Outcome { status, message, snapshot: Some(content), ..o })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_committed_snapshot_always_judges_and_an_entry_spares_a_failing_stream_its_review() {
        // Committed: always compared, whatever the status or entry.
        for s in [Status::Pass, Status::Fail] {
            assert_eq!(snapshot_rule(s, false, true, true), Rule::Judged);
            assert_eq!(snapshot_rule(s, false, true, false), Rule::Judged);
        }
        assert_eq!(snapshot_rule(Status::Fail, false, false, false), Rule::Judged);
        assert_eq!(snapshot_rule(Status::Fail, false, false, true), Rule::Stands);
        assert_eq!(snapshot_rule(Status::Pass, false, false, false), Rule::Stands);
    }

    #[test]
    fn numbers_that_failed_before_the_tokens_changed_are_never_reviewed() {
        // With or without a committed snapshot or an entry: it fails, and nothing is offered for review.
        for (committed, entry) in [(true, false), (false, false), (true, true), (false, true)] {
            assert_eq!(snapshot_rule(Status::Fail, true, committed, entry), Rule::NotReviewable);
        }
        // A passing stream has no numbers out.
        assert_eq!(snapshot_rule(Status::Pass, false, true, false), Rule::Judged);
    }
}
