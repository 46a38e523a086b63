//! L5's words and plots: the stream's report (shared with genai, in `report::verdict`), the HTML report's numbers
//! with the per-step margins and logit differences, the first divergence marked, and its summary row.

use super::judged::{Judged, Numbers};
use crate::outcome::{FailureKind, Judgement, NumbersTable, Outcome, Shown};
use crate::report::svg::{self, LineChart, Series};

/// What a failing L5 trial measured: the tokens kept, where they diverge, and where the step logits leave tolerance.
pub fn measured(o: &Outcome) -> Option<String> {
    let r = &super::judged::of(o)?.report;
    let (kept, total) = (r.matches, r.expected.len().max(r.got.len()));
    let step = o.first_divergence.map(|d| format!(", first divergence at step {d}"));
    let logits = o.failure.as_ref().filter(|f| f.kind == FailureKind::StepLogits).map(|f| {
        format!(", step logits out from step {} (max |diff| {:.3e})", f.first_step.unwrap_or_default(), f.max_abs_diff.unwrap_or(f64::NAN))
    });
    Some(format!("{kept}/{total} tokens kept{}{}", step.unwrap_or_default(), logits.unwrap_or_default()))
}

/// A stream equal to its reviewed snapshot: the message, and where the snapshot is.
pub fn accepted(message: &str, snapshot: &str) -> String {
    format!("{message}  accepted: the stream equals the reviewed snapshot {snapshot}\n")
}

/// A stream that differs from its reviewed snapshot (or has none to equal): insta's diff and the stream's snapshot.
pub fn snapshot_differs(message: &str, e: &str, content: &str) -> String {
    let indented: String = content.lines().map(|l| format!("    {l}\n")).collect();
    format!("{message}  {e}\n  snapshot:\n{indented}")
}

/// A stream whose step logits left the noise policy: no snapshot reviews that, and no review is offered. `snapshot`
/// is the committed one its tokens may still equal.
pub fn numbers_not_reviewable(message: &str, step: usize, snapshot: Option<&str>) -> String {
    let tokens = match snapshot {
        Some(s) => format!("its tokens may equal the reviewed snapshot {s}, but "),
        None => String::new(),
    };
    format!(
        "{message}  not reviewable: {tokens}its step logits left the noise policy at step {step}; a snapshot reviews \
         a change of tokens, never of numbers, so this fails until the package (or, if it changed, the reference) is \
         fixed\n"
    )
}

/// A pending snapshot an earlier failing run left, beside a stream that passes now or whose numbers failed: stale,
/// never to be accepted.
pub fn stale_pending(message: &str, pending: &str) -> String {
    format!("{message}  stale: {pending} is left from an earlier run and must not be accepted; `cargo insta reject` removes it\n")
}

/// The message with an error that ended its review.
pub fn with_error(message: &str, e: &crate::error::Error) -> String {
    format!("{message}  {e}\n")
}

static TABLE: NumbersTable =
    NumbersTable { order: 2, title: "L5 generation", columns: "tokens matching | match ratio | first divergence (step) | divergence" };

impl Judgement for Judged {
    fn reasons(&self) -> Vec<String> {
        self.report.reasons.iter().map(ToString::to_string).collect()
    }

    fn shown(&self) -> Shown {
        shown_of(&self.numbers)
    }

    fn summary_row(&self) -> Option<(&'static NumbersTable, String)> {
        let d = &self.numbers;
        let cells = format!(
            "{}/{} | {:.3} | {} | {}",
            d.matches,
            d.total,
            d.ratio,
            d.first_divergence.map_or("–".into(), |i| i.to_string()),
            d.divergence.unwrap_or("–"),
        );
        Some((&TABLE, cells))
    }
}

fn shown_of(d: &Numbers) -> Shown {
    let (mut rows, mut plots) = (Vec::new(), Vec::new());
    rows.push(("tokens matching", format!("{}/{} ({:.3})", d.matches, d.total, d.ratio)));
    rows.push((
        "first divergence",
        d.first_divergence.map_or("none".into(), |i| format!("step {i} ({})", d.divergence.unwrap_or("unclassified"))),
    ));
    rows.push(("steps compared", if d.teacher_forced { "teacher-forced re-run (every step)".into() } else { "free run".to_string() }));
    if d.steps.is_empty() {
        return Shown { numbers: rows, plots };
    }
    let markers: Vec<(f64, String)> = d.first_divergence.map(|i| (i as f64, format!("first divergence: step {i}"))).into_iter().collect();
    plots.push(svg::line_chart(&LineChart {
        title: "top1 - top2 margin per step",
        x_label: "generation step",
        x_scale: 1.0,
        log_y: false,
        series: vec![
            Series { label: "reference", color: "#1a7f37", points: d.steps.iter().map(|p| p.reference_margin).collect() },
            Series { label: "package", color: "#bc4c00", points: d.steps.iter().map(|p| p.package_margin).collect() },
        ],
        thresholds: vec![(d.near_tie_margin, format!("near-tie {}", d.near_tie_margin))],
        markers: markers.clone(),
    }));
    if d.steps.iter().any(|p| p.max_abs.is_some()) {
        plots.push(svg::line_chart(&LineChart {
            title: "max |logit diff| per step (reference's top-10 ids)",
            x_label: "generation step",
            x_scale: 1.0,
            log_y: true,
            series: vec![Series { label: "|diff|", color: "#0969da", points: d.steps.iter().map(|p| p.max_abs).collect() }],
            thresholds: vec![],
            markers,
        }));
    }
    Shown { numbers: rows, plots }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::level::generation::judged::StepPoint;

    #[test]
    fn a_stream_draws_its_margins_and_diffs_with_the_first_divergence_marked() {
        let stream = Numbers {
            matches: 2,
            total: 4,
            ratio: 0.5,
            first_divergence: Some(2),
            divergence: Some("real"),
            near_tie_margin: 0.01,
            teacher_forced: true,
            steps: (0..4)
                .map(|i| StepPoint { reference_margin: Some(1.0 + i as f64), package_margin: Some(1.0), max_abs: Some(1e-5), agree: i < 2 })
                .collect(),
        };
        let Shown { numbers: rows, plots } = shown_of(&stream);
        let svg = plots.join("");
        assert_eq!(plots.len(), 2, "margins, and the per-step diffs");
        assert!(svg.contains("first divergence: step 2"), "{svg}");
        assert!(rows.iter().any(|(k, v)| *k == "first divergence" && v == "step 2 (real)"), "{rows:?}");
    }
}
