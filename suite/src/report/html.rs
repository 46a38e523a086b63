//! `report/index.html`: the reviewer's report as one self-contained page (inline CSS and SVG, no script, nothing
//! fetched). The verdict line, the failures, the matrix with every mark a link into its trial, then one section per
//! trial with its verdict, its numbers, its message and the plots its data allow: the |diff| profile over the
//! vocabulary, the per-step margins and diffs of an L5 stream with the first divergence marked, an encoder's
//! per-row feature diffs, and the gate's flipped items with both margins.

use std::fmt::Write;

use super::markup::escape;
use super::matrix;
use super::summary::{Run, headline, verdict_line};
use crate::outcome::{Finished, Status};

/// The anchor of trial `i`: its index keeps it unique, the name keeps it readable.
pub fn anchor(i: usize, name: &str) -> String {
    let slug: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    format!("t{i}-{slug}")
}

/// A status mark from a glyph every system font has (a headless browser or a bare CI machine has no emoji font),
/// coloured by CSS.
fn mark(s: Status) -> String {
    let glyph = match s {
        Status::Pass | Status::Accepted => "✓",
        Status::Ambiguous => "≈",
        Status::ExpectedFailure | Status::Fail => "✗",
        Status::Skip => "–",
    };
    format!("<span class=\"mark {}\">{glyph}</span>", class(s))
}

fn legend() -> String {
    [Status::Pass, Status::Ambiguous, Status::Accepted, Status::ExpectedFailure, Status::Skip, Status::Fail]
        .map(|s| {
            let what = match s {
                Status::Ambiguous => "ambiguous (near-tie, counts as a pass)",
                Status::Accepted => "accepted snapshot",
                Status::ExpectedFailure => "expected failure",
                Status::Skip => "skipped",
                Status::Fail => "FAIL",
                Status::Pass => "pass",
            };
            format!("{} {what}", mark(s))
        })
        .join(" · ")
}

fn class(s: Status) -> &'static str {
    match s {
        Status::Pass => "pass",
        Status::Ambiguous => "ambiguous",
        Status::Accepted => "accepted",
        Status::ExpectedFailure => "xfail",
        Status::Skip => "skip",
        Status::Fail => "fail",
    }
}

const STYLE: &str = "
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1400px;padding:16px 24px;color:#1f2328}
.scroll{overflow-x:auto}.matrix th{white-space:nowrap}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;margin:24px 0 8px;border-bottom:1px solid #d0d7de}
h3{font-size:15px;margin:0 0 6px;font-family:ui-monospace,monospace}
.verdict{font-size:17px;padding:10px 12px;border-radius:6px;background:#dafbe1}.verdict.failed{background:#ffebe9}
table{border-collapse:collapse}td,th{border:1px solid #d0d7de;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f6f8fa}.matrix a{text-decoration:none;margin-right:6px;white-space:nowrap;color:inherit}
.matrix a:hover{text-decoration:underline}.matrix td.has-fail{background:#fff5f5}
section.trial{border:1px solid #d0d7de;border-radius:6px;padding:10px 12px;margin:10px 0}
section.trial:target{outline:3px solid #0969da}section.trial.fail{border-left:6px solid #cf222e}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;margin-left:6px;font-family:system-ui}
.badge.pass{background:#dafbe1}.badge.fail{background:#ffebe9;color:#a40e26}.badge.ambiguous{background:#fff8c5}
.badge.accepted{background:#ddf4ff}.badge.xfail{background:#eaeef2}.badge.skip{background:#eaeef2;color:#57606a}
pre{background:#f6f8fa;padding:8px;overflow-x:auto;font-size:12px;white-space:pre-wrap}
.numbers td:first-child{color:#57606a}.plots{display:flex;flex-wrap:wrap;gap:8px}
.chart{background:#fff;border:1px solid #eaeef2;max-width:100%;height:auto}
.chart .frame{fill:none;stroke:#8c959f}.chart .grid{stroke:#eaeef2}.chart .tick{font-size:10px;fill:#57606a}
.chart .axis{font-size:11px;fill:#57606a}.chart .title{font-size:12px;font-weight:600;fill:#1f2328}
.chart .legend{font-size:10px;fill:#1f2328}.chart .threshold{stroke:#9a6700;stroke-dasharray:4 3}
.chart .marker{stroke:#cf222e;stroke-width:1.5;stroke-dasharray:3 2}.chart .marker-label{font-size:10px;fill:#cf222e}
.hook{color:#57606a;font-style:italic}
.mark{font-weight:700}.mark.pass{color:#1a7f37}.mark.fail{color:#cf222e}.mark.ambiguous{color:#9a6700}
.mark.accepted{color:#0969da}.mark.xfail{color:#6e7781}.mark.skip{color:#6e7781}
";

pub fn page(trials: &[Finished], run: &Run) -> String {
    let failed = trials.iter().any(|t| t.outcome.is_fail());
    let mut s = String::from("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    let _ = write!(
        s,
        "<meta name=\"viewport\" content=\"width=device-width\"><title>Conformance: {}</title><style>{STYLE}</style></head><body>",
        escape(verdict_line(trials, run).split_once(' ').map_or("", |v| v.1))
    );
    let _ = write!(
        s,
        "<h1>Conformance report</h1><p id=\"verdict\" class=\"verdict{}\">{} {}</p>",
        if failed { " failed" } else { "" },
        mark(if failed { Status::Fail } else { Status::Pass }),
        escape(verdict_line(trials, run).split_once(' ').map_or("", |v| v.1))
    );

    let fails: Vec<(usize, &Finished)> = trials.iter().enumerate().filter(|(_, t)| t.outcome.is_fail()).collect();
    if !fails.is_empty() {
        let _ = write!(s, "<h2>Failures ({})</h2><ul id=\"failures\">", fails.len());
        for (i, t) in &fails {
            let _ = write!(
                s,
                "<li><a href=\"#{}\"><code>{}</code></a>: {}</li>",
                anchor(*i, &t.name),
                escape(&t.name),
                escape(&headline(&t.name, &t.outcome))
            );
        }
        s.push_str("</ul>");
    }

    let m = matrix::build(trials);
    let _ = write!(s, "<h2>Matrix</h2><p>{}</p><div class=\"scroll\"><table class=\"matrix\"><tr><th>case · modality</th>", legend());
    for c in &m.columns {
        let _ = write!(s, "<th>{}</th>", escape(c));
    }
    s.push_str("</tr>");
    for row in &m.rows {
        let _ = write!(s, "<tr><th>{}</th>", escape(&row.label));
        for cell in &row.cells {
            let bad = cell.iter().any(|e| e.status == Status::Fail);
            let _ = write!(s, "<td{}>", if bad { " class=\"has-fail\"" } else { "" });
            for e in cell {
                let t = &trials[e.index];
                let _ = write!(
                    s,
                    "<a href=\"#{}\" title=\"{} {}\">{} {}</a>",
                    anchor(e.index, &t.name),
                    escape(&t.name),
                    e.status.name(),
                    escape(&e.level),
                    mark(e.status)
                );
            }
            s.push_str("</td>");
        }
        s.push_str("</tr>");
    }
    s.push_str("</table></div>");

    let _ = write!(s, "<h2>Trials ({})</h2>", trials.len());
    // Failures first, then the rest in name order.
    let mut order: Vec<usize> = (0..trials.len()).collect();
    order.sort_by_key(|&i| (!trials[i].outcome.is_fail(), i));
    for i in order {
        trial(&mut s, i, &trials[i]);
    }
    s.push_str("</body></html>\n");
    s
}

fn trial(s: &mut String, i: usize, t: &Finished) {
    let o = &t.outcome;
    let _ = write!(
        s,
        "<section class=\"trial {}\" id=\"{}\" data-status=\"{}\"><h3>{}<span class=\"badge {}\">{}</span></h3>",
        class(o.status),
        anchor(i, &t.name),
        o.status.name(),
        escape(&t.name),
        class(o.status),
        o.status.name()
    );
    let mut rows: Vec<(&str, String)> = vec![("time", format!("{:.2} s", t.seconds))];
    let mut plots = Vec::new();
    // The level's judgement, then the localization a failed verdict ran (where along the model it leaves).
    for j in o.judgement.iter().chain(&o.diagnosis) {
        let shown = j.shown();
        rows.extend(shown.numbers);
        plots.extend(shown.plots);
    }
    s.push_str("<table class=\"numbers\">");
    for (k, v) in rows {
        let _ = write!(s, "<tr><td>{}</td><td>{}</td></tr>", escape(k), escape(&v));
    }
    s.push_str("</table>");
    if !plots.is_empty() {
        let _ = write!(s, "<div class=\"plots\">{}</div>", plots.join(""));
    }
    if !o.message.is_empty() {
        let _ = write!(s, "<pre>{}</pre>", escape(o.message.trim_end()));
    }
    s.push_str("</section>");
}

/// A number for the HTML report's numbers table, or a dash.
pub fn sci(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |x| format!("{x:.3e}"))
}

/// What `index.html` says while a run of `n` trials is under way (and after it, if it was killed).
pub fn incomplete(n: usize) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Conformance: incomplete</title></head>\
         <body><h1>Conformance report</h1><p>INCOMPLETE: a run of {n} trials started and did not finish (killed?); no \
         verdict is claimed.</p></body></html>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{Judgement, NumbersTable, Outcome, Shown};

    /// A judgement as a level would give it: the page shows its numbers, escaped, and its plots as they are.
    #[derive(Debug)]
    struct Drawn;

    impl Judgement for Drawn {
        fn reasons(&self) -> Vec<String> {
            vec!["<real>".into()]
        }
        fn shown(&self) -> Shown {
            Shown { numbers: vec![("steps", "4 <all>".into())], plots: vec!["<svg>drawn</svg>".into()] }
        }
        fn summary_row(&self) -> Option<(&'static NumbersTable, String)> {
            None
        }
    }

    #[test]
    fn the_page_links_every_matrix_mark_to_its_trial_and_shows_its_judgements_numbers_and_plots() {
        let fail = Outcome { judgement: Some(std::sync::Arc::new(Drawn)), ..Outcome::fail("q/text/default/f32/L5: L5 FAIL\n  - <real>") };
        let trials = [
            Finished { name: "q/text/default/f32/L4".into(), outcome: Outcome { status: Status::Pass, ..Outcome::skip("") }, seconds: 0.1 },
            Finished { name: "q/text/default/f32/L5".into(), outcome: fail, seconds: 0.2 },
        ];
        let html = page(&trials, &Run { device: "cpu".into(), wall_seconds: 1.0 });
        assert!(html.contains("class=\"verdict failed\"><span class=\"mark fail\">✗</span> FAIL: 1 failed · 1 passed"), "{html}");
        assert!(!html.contains('❌') && !html.contains('✅'), "no emoji: a bare machine has no font for them");
        let id = anchor(1, "q/text/default/f32/L5");
        assert_eq!(id, "t1-q-text-default-f32-l5");
        assert_eq!(html.matches(&format!("href=\"#{id}\"")).count(), 2, "failure list and matrix link to it");
        assert!(html.contains(&format!("id=\"{id}\" data-status=\"FAIL\"")));
        assert!(
            html.contains("<svg>drawn</svg>") && html.contains("<td>steps</td><td>4 &lt;all&gt;</td>") && html.contains("&lt;real&gt;")
        );
        assert!(html.find(&format!("id=\"{id}\"")) < html.find("id=\"t0-"), "failures come first");
        assert!(!html.contains("<script") && !html.contains("http"), "self-contained: nothing fetched");
    }
}
