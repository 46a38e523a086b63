//! L4's words and plots: the prefill report's message (shared with genai, in `report::verdict`), the HTML
//! report's numbers with the |diff| profile over the vocabulary and per prompt position, and its summary row.

use super::judged::{Judged, Numbers};
use crate::outcome::{Judgement, NumbersTable, Outcome, Shown};
use crate::report::html;
use crate::report::summary::{num, sci};
use crate::report::svg::{self, LineChart, Series};

/// What a failing L4 trial measured: its noise score and largest difference, and where along the prompt it starts.
pub fn measured(o: &Outcome) -> Option<String> {
    let d = o.max_abs_diff?;
    let from = o.failure.as_ref().and_then(|f| f.first_position).map(|p| format!(", from prompt position {p}"));
    Some(match super::judged::of(o).and_then(|j| j.report.noise.as_ref()) {
        Some(n) => format!("noise score {:.3}, max |logit diff| {d:.3e}{}", n.score, from.unwrap_or_default()),
        None => format!("max |logit diff| {d:.3e}{}", from.unwrap_or_default()),
    })
}

static TABLE: NumbersTable = NumbersTable {
    order: 1,
    title: "L4 prefill logits",
    columns: "max \\|logit diff\\| | at id | cosine | outside tolerance | top-10 overlap | reference margin",
};

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
            "{} | {} | {} | {} | {}/10 | {}",
            sci(d.max_abs),
            d.max_abs_at.map_or("–".into(), |i| i.to_string()),
            num(d.cosine, |c| format!("{c:.7}")),
            d.violations.map_or("–".into(), |v| v.to_string()),
            d.top10_overlap,
            num(d.reference_margin, |m| format!("{m:.4}")),
        );
        Some((&TABLE, cells))
    }
}

fn shown_of(d: &Numbers) -> Shown {
    let (mut rows, mut plots) = (Vec::new(), Vec::new());
    rows.push(("max |logit diff|", format!("{}{}", html::sci(d.max_abs), d.max_abs_at.map_or(String::new(), |i| format!(" at id {i}")))));
    rows.push(("cosine", d.cosine.map_or("–".into(), |c| format!("{c:.7}"))));
    rows.push(("logits outside tolerance", d.violations.map_or("–".into(), |v| v.to_string())));
    rows.push(("top-10 overlap", format!("{}/10", d.top10_overlap)));
    rows.push(("reference margin top1-top2", d.reference_margin.map_or("–".into(), |m| format!("{m:.4}"))));
    if let Some(p) = &d.vocab_profile {
        let title = if p.bucket > 1 {
            format!("|package - reference| over the vocabulary, last position (max per {} ids)", p.bucket)
        } else {
            "|package - reference| over the vocabulary, last position".to_string()
        };
        plots.push(svg::line_chart(&LineChart {
            title: &title,
            x_label: "token id",
            x_scale: p.bucket as f64,
            log_y: true,
            series: vec![Series { label: "|diff|", color: "#0969da", points: p.points() }],
            thresholds: vec![(d.atol, format!("atol {:.0e}", d.atol))],
            markers: d.max_abs_at.map(|at| ((at / p.bucket) as f64, format!("max at id {at}"))).into_iter().collect(),
        }));
    }
    match &d.positions {
        Some(p) => plots.push(svg::line_chart(&LineChart {
            title: "max |diff| per prompt position",
            x_label: "position",
            x_scale: p.bucket as f64,
            log_y: true,
            series: vec![Series { label: "max |diff|", color: "#8250df", points: p.points() }],
            // A noise-floor golden bounds each position by the reference's own noise there: no one line to draw.
            thresholds: if d.positions_by_noise { vec![] } else { vec![(d.atol, format!("atol {:.0e}", d.atol))] },
            markers: vec![],
        })),
        None => {
            plots.push("<p class=\"hook\">Per-position profile: the golden stores the last position only (mobius' own goldens).</p>".into())
        }
    }
    Shown { numbers: rows, plots }
}
