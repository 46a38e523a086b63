//! `report/index.html`: the reviewer's report as one self-contained page (inline CSS and SVG, no script, nothing
//! fetched). The verdict line, the failures, the matrix with every mark a link into its trial, then one section per
//! trial with its verdict, its numbers, its message and the plots its data allow: the |diff| profile over the
//! vocabulary, the per-step margins and diffs of an L5 stream with the first divergence marked, an encoder's
//! per-row feature diffs, and the gate's flipped items with both margins.

use std::fmt::Write;

use super::matrix;
use super::summary::{Run, headline, verdict_line};
use super::svg::{self, LineChart, Series};
use crate::judge::detail::{Accuracy, Component, Detail, Generation, MAX_MEDIA_FLIPS, MediaGate, Prefill, Profile, Thumbnail};
use crate::outcome::{Finished, Status};

pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

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
    match o.detail.as_deref() {
        Some(Detail::Prefill(d)) => prefill(d, &mut rows, &mut plots),
        Some(Detail::Generation(d)) => generation(d, &mut rows, &mut plots),
        Some(Detail::Component(d)) => component(d, &mut rows, &mut plots),
        Some(Detail::Accuracy(d)) => accuracy(d, &mut rows, &mut plots),
        Some(Detail::Media(d)) => media(d, &mut rows, &mut plots),
        Some(Detail::Dist(d)) => dist(d, &mut rows, &mut plots),
        None => {}
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

fn sci(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |x| format!("{x:.3e}"))
}

fn profile_points(p: &Profile) -> Vec<Option<f64>> {
    p.values.iter().map(|&v| Some(v)).collect()
}

fn prefill(d: &Prefill, rows: &mut Vec<(&str, String)>, plots: &mut Vec<String>) {
    rows.push(("max |logit diff|", format!("{}{}", sci(d.max_abs), d.max_abs_at.map_or(String::new(), |i| format!(" at id {i}")))));
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
            series: vec![Series { label: "|diff|", color: "#0969da", points: profile_points(p) }],
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
            series: vec![Series { label: "max |diff|", color: "#8250df", points: profile_points(p) }],
            // A noise-floor golden bounds each position by the reference's own noise there: no one line to draw.
            thresholds: if d.positions_by_noise { vec![] } else { vec![(d.atol, format!("atol {:.0e}", d.atol))] },
            markers: vec![],
        })),
        None => {
            plots.push("<p class=\"hook\">Per-position profile: the golden stores the last position only (mobius' own goldens).</p>".into())
        }
    }
}

fn generation(d: &Generation, rows: &mut Vec<(&str, String)>, plots: &mut Vec<String>) {
    rows.push(("tokens matching", format!("{}/{} ({:.3})", d.matches, d.total, d.ratio)));
    rows.push((
        "first divergence",
        d.first_divergence.map_or("none".into(), |i| format!("step {i} ({})", d.divergence.unwrap_or("unclassified"))),
    ));
    rows.push(("steps compared", if d.teacher_forced { "teacher-forced re-run (every step)".into() } else { "free run".to_string() }));
    if d.steps.is_empty() {
        return;
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
}

fn dist(d: &crate::judge::dist::DistReport, rows: &mut Vec<(&str, String)>, plots: &mut Vec<String>) {
    let st = &d.stats;
    rows.push(("mean KLD", format!("{:.4e} ± {:.2e} (limit {:.4e})", st.kld.value, st.kld.uncertainty, d.mean_limit)));
    rows.push(("99.0% KLD", format!("{:.4e} (limit {:.4e})", st.p99_kld(), d.p99_limit)));
    rows.push(("same top p", format!("{:.3} ± {:.3} %", 100.0 * st.same_top.value, 100.0 * st.same_top.uncertainty)));
    rows.push(("RMS Δp", format!("{:.3} %", 100.0 * st.rms_delta_p.value)));
    if let Some(p) = &st.perplexity {
        rows.push(("PPL(Q)/PPL(base)", format!("{:.6} ± {:.6}", p.ratio.value, p.ratio.uncertainty)));
    }
    rows.push(("scored positions", format!("{} (top {} + tail)", st.positions, d.k)));
    rows.push(("floor", format!("{}: mean {:.3e}, 99.0% {:.3e}", d.floor.against, d.floor.mean_kld, d.floor.p99_kld)));
    // The distribution itself: the KL at each percentile of the positions (the quantile function), 100 points.
    let mut sorted = d.kld.clone();
    sorted.sort_by(f64::total_cmp);
    let quantiles: Vec<Option<f64>> =
        (0..=100).map(|p| Some(crate::judge::dist::percentile(&sorted, p as f64 / 100.0)).filter(|v| *v > 0.0)).collect();
    plots.push(svg::line_chart(&LineChart {
        title: "KL from the fp32 reference at each percentile of the positions",
        x_label: "percentile",
        x_scale: 1.0,
        log_y: true,
        series: vec![Series { label: "KLD", color: "#0969da", points: quantiles }],
        thresholds: vec![
            (d.p99_limit, format!("99.0% limit {:.1e}", d.p99_limit)),
            (d.mean_limit, format!("mean limit {:.1e}", d.mean_limit)),
        ],
        markers: vec![(99.0, "99.0%".into())],
    }));
    let profile = Profile::of(d.kld.iter().map(|v| v.max(0.0)));
    plots.push(svg::line_chart(&LineChart {
        title: "KL divergence per scored position, in corpus order (max per bucket)",
        x_label: "scored position",
        x_scale: profile.bucket as f64,
        log_y: true,
        series: vec![Series { label: "KLD", color: "#8250df", points: profile_points(&profile) }],
        thresholds: vec![],
        markers: vec![],
    }));
}

fn component(d: &Component, rows: &mut Vec<(&str, String)>, plots: &mut Vec<String>) {
    rows.push(("max |feature diff|", format!("{:.3e}", d.max_abs)));
    rows.push(("cosine", format!("{:.7}", d.cosine)));
    rows.push(("zeroing the features moves the last logits by", format!("{:.3e}", d.moved)));
    plots.push(svg::line_chart(&LineChart {
        title: &format!("{}: max |diff| per feature row", d.component),
        x_label: "row (media token)",
        x_scale: d.rows.bucket as f64,
        log_y: true,
        series: vec![Series { label: "|diff|", color: "#0969da", points: profile_points(&d.rows) }],
        thresholds: vec![(d.atol, format!("atol {:.0e}", d.atol))],
        markers: vec![],
    }));
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            out.push(if i <= c.len() { A[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

fn thumbnail(t: &Thumbnail) -> String {
    match t {
        Thumbnail::Image(b) => {
            let mime = if b.starts_with(&[0xff, 0xd8]) { "image/jpeg" } else { "image/png" };
            format!("<img class=\"thumb\" alt=\"the item's image\" src=\"data:{mime};base64,{}\">", base64(b))
        }
        Thumbnail::Wave(peaks) => {
            let (w, h) = (peaks.len().max(1) as f64, 40.0);
            let max = peaks.iter().fold(1e-9f32, |m, &x| m.max(x)) as f64;
            let bars: String = peaks
                .iter()
                .enumerate()
                .map(|(i, &p)| {
                    let y = (p as f64 / max) * (h / 2.0 - 1.0);
                    format!("M{i} {:.1}V{:.1}", h / 2.0 - y, h / 2.0 + y)
                })
                .collect();
            format!(
                "<svg class=\"thumb\" role=\"img\" aria-label=\"waveform\" viewBox=\"0 0 {w} {h}\" width=\"160\" height=\"40\"><path d=\"{bars}\" stroke=\"#0969da\" stroke-width=\"0.8\"/></svg>"
            )
        }
        Thumbnail::None => "–".into(),
    }
}

fn media(d: &MediaGate, rows: &mut Vec<(&str, String)>, plots: &mut Vec<String>) {
    let dir = if d.lower_is_better { "lower is better" } else { "higher is better" };
    rows.push(("metric", format!("{} ({dir})", d.metric)));
    rows.push(("score", format!("{:.2} (reference {:.2})", d.got, d.reference)));
    rows.push(("Δ", format!("{:+.2} points (allowed ±{:.2})", d.delta_points, d.max_delta_points)));
    rows.push(("items changed", format!("{} worse, {} better of {}; paired p = {:.4} ({})", d.worse, d.better, d.n, d.p_value, d.test)));
    let small = if d.too_small { "; too small for the net rule: the paired test decides" } else { "" };
    rows.push(("detectable", format!("{:.2} points at n={}{small}", d.min_detectable_points, d.n)));
    let (rc, rf, gc, gf) = d.stop_scores;
    rows.push((
        "stop list",
        format!("{} item score(s) changed; cut: {rc:.2} / {gc:.2}, whole: {rf:.2} / {gf:.2} (reference / package)", d.cuts.len()),
    ));
    if !d.cuts.is_empty() {
        let mut t = String::from("<table><tr><th>doc</th><th>side</th><th>stop</th><th>score cut</th><th>score whole</th></tr>");
        for (doc, is_ref, stop, c, f) in d.cuts.iter().take(MAX_MEDIA_FLIPS) {
            let side = if *is_ref { "reference" } else { "package" };
            let _ = write!(t, "<tr><td>{doc}</td><td>{side}</td><td>{}</td><td>{c}</td><td>{f}</td></tr>", escape(&format!("{stop:?}")));
        }
        t.push_str("</table>");
        plots.push(t);
    }
    if d.flips.is_empty() {
        return;
    }
    let mut t = String::from(
        "<table class=\"media-flips\"><tr><th>doc</th><th>medium</th><th>reference output</th><th>score</th><th>margin</th>\
         <th>package output</th><th>score</th><th>margin</th></tr>",
    );
    let margin = |m: Option<f64>| m.map_or_else(String::new, |m| format!("{m:.3}"));
    for detail in &d.flips {
        let f = &detail.flip;
        let _ = write!(
            t,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            f.doc,
            thumbnail(&detail.thumbnail),
            escape(&f.reference),
            f.reference_score,
            margin(f.reference_margin),
            escape(&f.got),
            f.got_score,
            margin(f.got_margin)
        );
    }
    t.push_str("</table>");
    plots.push(t);
}

fn accuracy(d: &Accuracy, rows: &mut Vec<(&str, String)>, plots: &mut Vec<String>) {
    rows.push(("metric", d.metric.to_string()));
    rows.push(("accuracy", format!("{:.2}% (reference {:.2}%)", 100.0 * d.got, 100.0 * d.reference)));
    rows.push(("Δ accuracy", format!("{:+.2} points (allowed ±{:.2})", d.delta_points, d.max_delta_points)));
    rows.push(("items flipped", format!("{} of {}", d.flips.len(), d.n)));
    rows.push(("max |log-likelihood diff|", sci(d.max_loglik_diff)));
    if d.flips.is_empty() {
        return;
    }
    let items: Vec<(String, Option<f64>, Option<f64>)> =
        d.flips.iter().take(40).map(|f| (format!("doc {}", f.doc), f.reference_margin, f.got_margin)).collect();
    let more = if d.flips.len() > 40 { format!(" (first 40 of {})", d.flips.len()) } else { String::new() };
    plots.push(svg::paired_bars(
        &format!("flipped items: each side's margin for its own answer{more}"),
        ("reference", "#1a7f37"),
        ("package", "#bc4c00"),
        &items,
    ));
    let mut t = String::from("<table><tr><th>doc</th><th>reference chose</th><th>margin</th><th>package chose</th><th>margin</th></tr>");
    for f in &d.flips {
        let right = |ok: bool| if ok { "right" } else { "wrong" };
        let m = |x: Option<f64>| x.map_or("–".into(), |m| format!("{m:.4}"));
        let _ = write!(
            t,
            "<tr><td>{}</td><td>{} ({})</td><td>{}</td><td>{} ({})</td><td>{}</td></tr>",
            f.doc,
            escape(&f.reference),
            right(f.reference_correct),
            m(f.reference_margin),
            escape(&f.got),
            right(f.got_correct),
            m(f.got_margin)
        );
    }
    t.push_str("</table>");
    plots.push(t);
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
    use crate::judge::detail::{MediaFlipDetail, StepPoint};
    use crate::outcome::Outcome;

    #[test]
    fn a_media_gate_shows_each_changed_item_with_its_image_or_waveform_and_the_stop_cuts() {
        assert_eq!(base64(b"hello"), "aGVsbG8=");
        assert_eq!(base64(b"hi!"), "aGkh");
        let flip = |doc, thumbnail| MediaFlipDetail {
            flip: crate::accuracy::media_gate::MediaFlip {
                doc,
                reference: "HARBOR".into(),
                got: "HARB<OR>".into(),
                reference_score: 1.0,
                got_score: 0.0,
                reference_margin: Some(0.25),
                got_margin: None,
            },
            thumbnail,
        };
        let d = MediaGate {
            metric: "wer".into(),
            lower_is_better: true,
            reference: 5.0,
            got: 6.5,
            delta_points: 1.5,
            max_delta_points: 1.0,
            n: 200,
            worse: 9,
            better: 2,
            p_value: 0.06,
            test: "exact sign-flip test".into(),
            min_detectable_points: 1.47,
            too_small: false,
            stop_scores: (5.0, 4.0, 6.5, 6.0),
            cuts: vec![(3, false, "\n\n".into(), 0.0, 1.0)],
            flips: vec![flip(1, Thumbnail::Image(b"\x89PNG....".to_vec())), flip(2, Thumbnail::Wave(vec![0.1, 0.5, 0.2]))],
        };
        let (mut rows, mut plots) = (Vec::new(), Vec::new());
        media(&d, &mut rows, &mut plots);
        let html = plots.join("");
        assert!(html.contains("src=\"data:image/png;base64,iVBORy4uLi4=\""), "{html}");
        assert!(html.contains("aria-label=\"waveform\"") && html.contains("M1 1.0V39.0"), "{html}");
        assert!(html.contains("HARB&lt;OR&gt;"), "outputs are escaped: {html}");
        assert!(html.contains("<td>3</td><td>package</td><td>&quot;\\n\\n&quot;</td>"), "{html}");
        assert!(rows.iter().any(|(k, v)| *k == "metric" && v == "wer (lower is better)"));
        assert!(rows.iter().any(|(k, v)| *k == "stop list" && v.contains("cut: 5.00 / 6.50, whole: 4.00 / 6.00")), "{rows:?}");
        assert!(rows.iter().any(|(k, v)| *k == "detectable" && v == "1.47 points at n=200"), "{rows:?}");
        assert!(html.contains("<td>1</td><td>0.250</td>"), "the reference's margin beside its score: {html}");
    }

    #[test]
    fn the_page_links_every_matrix_mark_to_its_trial_and_draws_the_stream() {
        let stream = Generation {
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
        let fail =
            Outcome { detail: Some(Box::new(Detail::Generation(stream))), ..Outcome::fail("q/text/default/f32/L5: L5 FAIL\n  - <real>") };
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
        assert!(html.contains("first divergence: step 2") && html.contains("&lt;real&gt;"));
        assert!(html.find(&format!("id=\"{id}\"")) < html.find("id=\"t0-"), "failures come first");
        assert!(!html.contains("<script") && !html.contains("http"), "self-contained: nothing fetched");
    }
}
