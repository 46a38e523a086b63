//! A stream's reviewed snapshot: a token divergence a person accepted with `cargo insta review` is the expectation
//! of that one variant. The rule of when a stream is judged by its snapshot is a pure function, tested on crafted
//! values; the review itself is insta's (`report::snapshot`).

use super::render;
use crate::level::trial::Trial;
use crate::outcome::{Outcome, Status};
use crate::paths;
use crate::report::snapshot;

/// Whether a stream is judged by its snapshot: one with a committed snapshot always is (it must still equal it); a
/// failing one without is, so that insta leaves a `.snap.new` to review, unless an xfail entry already states why
/// it fails.
pub fn compare_snapshot(status: Status, committed: bool, expected_to_fail: bool) -> bool {
    committed || (status == Status::Fail && !expected_to_fail)
}

/// A stream judged by its snapshot ([`compare_snapshot`]): equal to the reviewed one, it passes as ACCEPTED;
/// otherwise it fails, and insta leaves a `.snap.new` to review (not under CI). `render` gives (content,
/// description).
pub fn review_snapshot(t: &Trial, o: Outcome, render: impl FnOnce() -> (String, String)) -> Outcome {
    let dir = t.suite.snapshots_dir(&t.case.task_dir);
    let Some(name) = t.id.snapshot_stem(&t.case.name) else { return o };
    // A snapshot's content is echoed in the diff: only one inside the root is read.
    if let Err(e) = paths::confine(&t.suite.root, &snapshot::path(&dir, &name), "snapshot", paths::SUITE_HINT) {
        return Outcome { status: Status::Fail, message: render::with_error(&o.message, &e), ..o };
    }
    let committed = snapshot::path(&dir, &name).is_file();
    if !compare_snapshot(o.status, committed, t.xfail().is_some()) {
        return o;
    }
    let (content, description) = render();
    let (status, message) = match snapshot::assert(&dir, &name, &content, &description, &t.suite.root, t.ctx.snapshots()) {
        Ok(()) => (Status::Accepted, render::accepted(&o.message, &t.rel(&snapshot::path(&dir, &name)))),
        Err(e) => (Status::Fail, render::snapshot_differs(&o.message, &e, &content)),
    };
    Outcome { status, message, snapshot: Some(content), ..o }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_committed_snapshot_always_judges_and_an_entry_spares_a_failing_stream_its_review() {
        // Committed: always compared, whatever the status or entry.
        for s in [Status::Pass, Status::Fail] {
            assert!(compare_snapshot(s, true, true) && compare_snapshot(s, true, false));
        }
        assert!(compare_snapshot(Status::Fail, false, false));
        assert!(!compare_snapshot(Status::Fail, false, true));
        assert!(!compare_snapshot(Status::Pass, false, false));
    }
}
