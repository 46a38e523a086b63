//! `junit.xml`: the run as JUnit test cases, for CI systems that show them.

use std::fmt::Write;

use super::markup::escape;
use crate::outcome::{Finished, Status};
use crate::vocab::TrialId;

/// What `junit.xml` says while a run of `n` trials is under way (and after it, if it was killed).
pub fn incomplete(n: usize) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"mobius-conformance\" tests=\"1\" failures=\"1\">\n  \
         <testsuite name=\"conformance\" tests=\"1\" failures=\"1\">\n    <testcase classname=\"run\" name=\"incomplete\">\n      \
         <failure message=\"a run of {n} trials started and did not finish\"/>\n    </testcase>\n  </testsuite>\n</testsuites>\n"
    )
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// One testcase per trial, its classname the case/modality/ep/dtype and its name the level.
pub fn report(rows: &[Finished], wall: f64) -> String {
    let failures = rows.iter().filter(|r| r.outcome.is_fail()).count();
    let skipped = rows.iter().filter(|r| r.outcome.status == Status::Skip).count();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(s, "<testsuites name=\"mobius-conformance\" tests=\"{}\" failures=\"{failures}\" time=\"{wall:.3}\">", rows.len());
    let _ = writeln!(
        s,
        "  <testsuite name=\"conformance\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\" time=\"{wall:.3}\">",
        rows.len()
    );
    for r in rows {
        let (class, name) = TrialId::parse(&r.name).map_or_else(|| (String::new(), r.name.clone()), |id| id.group_and_leaf());
        let _ = write!(s, "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\"", escape(&class), escape(&name), r.seconds);
        let msg = escape(&r.outcome.message);
        // Where a failure was localized along the model: a property of the testcase, for tools to read.
        let props = match r.outcome.failure.as_ref().and_then(|f| f.first_module.as_deref()) {
            Some(m) => format!("\n      <properties><property name=\"first_module\" value=\"{}\"/></properties>", escape(m)),
            None => String::new(),
        };
        match r.outcome.status {
            Status::Fail => {
                let _ = writeln!(
                    s,
                    ">{props}\n      <failure message=\"{}\">{msg}</failure>\n    </testcase>",
                    escape(first_line(&r.outcome.message))
                );
            }
            Status::Skip => {
                let _ = writeln!(s, ">\n      <skipped message=\"{msg}\"/>\n    </testcase>");
            }
            Status::Pass => {
                let _ = writeln!(s, "/>");
            }
            _ => {
                let _ = writeln!(s, ">{props}\n      <system-out>{msg}</system-out>\n    </testcase>");
            }
        }
    }
    s.push_str("  </testsuite>\n</testsuites>\n");
    s
}
