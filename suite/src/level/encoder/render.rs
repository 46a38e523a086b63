//! An encoder level's words and plots: the message (the features against the reference's, how far zeroing them
//! moved the logits), the HTML report's numbers with the per-row |diff|, and its summary row.

use std::fmt::{self, Write};

use super::judge::{ComponentReason, ComponentReport, Judged, Numbers};
use crate::outcome::{Judgement, NumbersTable, Outcome, Shown};
use crate::report::svg::{self, LineChart, Series};
use crate::report::verdict::over_limits;

/// What a failing encoder trial measured: its features' largest difference.
pub fn measured(o: &Outcome) -> Option<String> {
    o.max_abs_diff.map(|d| format!("max |feature diff| {d:.3e}"))
}

static TABLE: NumbersTable =
    NumbersTable { order: 3, title: "Encoders", columns: "max \\|feature diff\\| | cosine | zeroing moves logits by" };

impl Judgement for Judged {
    fn reasons(&self) -> Vec<String> {
        self.report.reasons.iter().map(ToString::to_string).collect()
    }

    fn shown(&self) -> Shown {
        shown_of(&self.numbers)
    }

    fn summary_row(&self) -> Option<(&'static NumbersTable, String)> {
        let d = &self.numbers;
        Some((&TABLE, format!("{:.2e} | {:.7} | {:.2e}", d.max_abs, d.cosine, d.moved)))
    }
}

/// An encoder level's message: the features against the reference's, and how far zeroing them moved the logits.
pub fn message(trial: &str, r: &ComponentReport, reference_file: &str, regenerate: &str) -> String {
    let c = &r.comparison;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{trial}: {}: `{}` {:?} max |diff| {:.3e} at [{}, {}], cosine {:.7}; zeroing it moves the last logits by {:.3e}",
        r.component,
        r.tensor,
        r.got_shape,
        c.max_abs,
        c.max_abs_at / r.cols,
        c.max_abs_at % r.cols,
        c.cosine,
        r.moved
    );
    if let Some(n) = r.frames_compared {
        let _ = writeln!(s, "  compared at the {n} frames the reference stores (of {})", r.want_shape.get(1).copied().unwrap_or(0));
    }
    if let Some(j) = &r.noise {
        let _ = writeln!(
            s,
            "  noise policy: |diff| p50/p99/max {:.3e}/{:.3e}/{:.3e} = {:.1}x/{:.1}x/{:.1}x the reference's own noise (limits {}x/{}x/{}x)",
            j.diff[0], j.diff[1], j.diff[2], j.multiple[0], j.multiple[1], j.multiple[2], j.limit[0], j.limit[1], j.limit[2]
        );
    }
    for reason in &r.reasons {
        let _ = writeln!(s, "  - {reason}");
    }
    let _ = writeln!(s, "  policy: {}\n  reference: {reference_file}", r.tolerance);
    let _ = writeln!(s, "  regenerate (only if the reference changed): {regenerate}");
    s
}

impl fmt::Display for ComponentReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ComponentReason::Shape { component, tensor, got, want } => {
                write!(f, "{component}: `{tensor}` has shape {got:?}, the reference's is {want:?}")
            }
            ComponentReason::OverNoise { component, tensor, over, at: [row, col], expected, got } => write!(
                f,
                "{component}: `{tensor}` differs by more than the noise policy allows: {}; largest at [{row}, {col}]: expected \
                 {expected:.6}, got {got:.6}",
                over_limits(over)
            ),
            ComponentReason::OutsideTolerance { component, tensor, violations, of, at: [row, col], expected, got } => write!(
                f,
                "{component}: {violations} of {of} values of `{tensor}` outside atol+rtol*|ref|; worst at [{row}, {col}]: expected \
                 {expected:.6}, got {got:.6}"
            ),
            ComponentReason::Unreached { component, tensor, moved, floor } => write!(
                f,
                "{component}: zeroing `{tensor}` moved the last logits by only {moved:.3e} (<= {floor:.1e}): the media never reach \
                 the decoder"
            ),
        }
    }
}

fn shown_of(d: &Numbers) -> Shown {
    let (mut rows, mut plots) = (Vec::new(), Vec::new());
    rows.push(("max |feature diff|", format!("{:.3e}", d.max_abs)));
    rows.push(("cosine", format!("{:.7}", d.cosine)));
    rows.push(("zeroing the features moves the last logits by", format!("{:.3e}", d.moved)));
    plots.push(svg::line_chart(&LineChart {
        title: &format!("{}: max |diff| per feature row", d.component),
        x_label: "row (media token)",
        x_scale: d.rows.bucket as f64,
        log_y: true,
        series: vec![Series { label: "|diff|", color: "#0969da", points: d.rows.points() }],
        thresholds: vec![(d.atol, format!("atol {:.0e}", d.atol))],
        markers: vec![],
    }));
    Shown { numbers: rows, plots }
}
