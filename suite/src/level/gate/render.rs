//! The gates' words and plots: the text gate's and the media gate's messages (the score both ways with the paired
//! test, what the task can detect, the items that changed with both margins or outputs, where the stop list cut),
//! the HTML report's numbers, flipped items and thumbnails, and their summary rows.

use std::fmt::{self, Write};

use super::judged::{MAX_MEDIA_FLIPS, MediaJudged, MediaNumbers, TextJudged, TextNumbers, Thumbnail};
use crate::accuracy::gate::{GateReason, GateReport, min_significant_flips};
use crate::accuracy::lmms::{Direction, MediaTask};
use crate::accuracy::media_gate::{MediaGateReason, MediaGateReport};
use crate::accuracy::protocol::Protocol;
use crate::accuracy::task::spec::Metric;
use crate::outcome::{Judgement, NumbersTable, Outcome, Shown};
use crate::report::html;
use crate::report::markup::escape;
use crate::report::summary::sci;
use crate::report::svg;

/// What a failing gate trial measured: the change in its metric, in points.
pub fn measured(o: &Outcome) -> Option<String> {
    o.judgement.as_ref()?.accuracy_delta_points().map(|d| format!("accuracy {d:+.2} points"))
}

static TEXT_TABLE: NumbersTable = NumbersTable {
    order: 4,
    title: "Accuracy gate",
    columns: "metric | accuracy | reference | Δ accuracy (points) | allowed (points) | items flipped | max \\|log-likelihood diff\\|",
};

static MEDIA_TABLE: NumbersTable = NumbersTable {
    order: 5,
    title: "Multimodal gate",
    columns: "metric | package | reference | Δ (points) | allowed (points) | worse / better | paired p | detectable (points) | stop cuts",
};

impl Judgement for TextJudged {
    // The gate prints its reasons as notes under its numbers; its headline is its first line.
    fn reasons(&self) -> Vec<String> {
        Vec::new()
    }

    fn shown(&self) -> Shown {
        accuracy_shown(&self.numbers)
    }

    fn summary_row(&self) -> Option<(&'static NumbersTable, String)> {
        let d = &self.numbers;
        let cells = format!(
            "{} | {:.2}% | {:.2}% | {:+.2} | ±{:.2} | {}/{} | {}",
            d.metric,
            100.0 * d.got,
            100.0 * d.reference,
            d.delta_points,
            d.max_delta_points,
            d.flips.len(),
            d.n,
            sci(d.max_loglik_diff),
        );
        Some((&TEXT_TABLE, cells))
    }

    fn accuracy_delta_points(&self) -> Option<f64> {
        Some(self.numbers.delta_points)
    }
}

impl Judgement for MediaJudged {
    fn reasons(&self) -> Vec<String> {
        Vec::new()
    }

    fn shown(&self) -> Shown {
        media_shown(&self.numbers)
    }

    fn summary_row(&self) -> Option<(&'static NumbersTable, String)> {
        let d = &self.numbers;
        let dir = if d.lower_is_better { " (lower is better)" } else { "" };
        let cells = format!(
            "{}{dir} | {:.2} | {:.2} | {:+.2} | ±{:.2} | {} / {} of {} | {:.3} | {:.2} | {}",
            d.metric,
            d.got,
            d.reference,
            d.delta_points,
            d.max_delta_points,
            d.worse,
            d.better,
            d.n,
            d.p_value,
            d.min_detectable_points,
            d.cuts.len(),
        );
        Some((&MEDIA_TABLE, cells))
    }

    fn accuracy_delta_points(&self) -> Option<f64> {
        Some(self.numbers.delta_points)
    }
}

/// A p-value as the gate prints it.
fn fmt_p(p: f64) -> String {
    if p >= 1e-3 { format!("{p:.4}") } else { format!("{p:.2e}") }
}

/// Why a task too small for the net rule fails it (`refused`) or only warns, the test that decides then named.
fn too_small(f: &mut fmt::Formatter<'_>, what: fmt::Arguments<'_>, refused: bool, test: &str) -> fmt::Result {
    if refused {
        write!(f, "{what}; refused (CI): give the task more items or raise `max_delta_points`")
    } else {
        write!(f, "WARNING: {what}; the net rule is not applied, the {test} decides (under CI this fails)")
    }
}

impl fmt::Display for GateReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateReason::TooSmall { max_delta_points, points_per_item, n, need, refused } => too_small(
                f,
                format_args!(
                    "the task is too small to decide +-{max_delta_points:.2} points: one item moves accuracy {points_per_item:.2} \
                     points (n={n}; it takes {need} items)"
                ),
                *refused,
                "flip test",
            ),
            GateReason::NetDelta { delta_points, max_delta_points } => {
                write!(f, "net delta {delta_points:+.2} points exceeds +-{max_delta_points:.2}")
            }
            GateReason::FlipsLean { lost, gained, p_value, flip_alpha } => write!(
                f,
                "the flips lean one way: {lost} lost, {gained} gained, McNemar exact p = {} < {flip_alpha} (a shift this uneven is \
                 not chance)",
                fmt_p(*p_value)
            ),
            GateReason::TooManyFlipped { items, points, max_flipped_points } => {
                write!(f, "{items} items changed correctness ({points:.2} points), more than max_flipped_points {max_flipped_points:.2}")
            }
        }
    }
}

impl fmt::Display for MediaGateReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MediaGateReason::NotANumber { metric, reference, got } => {
                write!(f, "{metric} is not a number (reference {reference}, package {got}): nothing was scored")
            }
            MediaGateReason::TooSmall { metric, max_delta_points, largest_move, n, refused } => too_small(
                f,
                format_args!(
                    "the task is too small to decide +-{max_delta_points:.2} points: one item moves {metric} by up to \
                     {largest_move:.2} points (n={n})"
                ),
                *refused,
                "paired test",
            ),
            MediaGateReason::NetDelta { metric, delta_points, max_delta_points } => {
                write!(f, "net delta {delta_points:+.2} {metric} points exceeds +-{max_delta_points:.2}")
            }
            MediaGateReason::ItemsLean { worse, better, p_value, flip_alpha, test } => {
                write!(f, "the changed items lean one way: {worse} worse, {better} better, p = {} < {flip_alpha} ({test})", fmt_p(*p_value))
            }
            MediaGateReason::TooManyChanged { items, points, max_flipped_points } => {
                write!(f, "{items} items changed ({points:.2} points), more than max_flipped_points {max_flipped_points:.2}")
            }
            MediaGateReason::PlumbingDiffers { docs, n } => write!(
                f,
                "plumbing only: {} of {n} outputs differ from the reference's (docs {}); with random weights only outputs equal \
                 to the reference's show that the task, media, protocol and scorer reach the model as they reach the reference",
                docs.len(),
                docs.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// The report a person reads. It holds only numbers that repeat exactly run after run (speed is `cargo xtask bench`'s).
pub fn text_message(trial: &str, metric: Metric, r: &GateReport, baseline_file: &str, regenerate: &str) -> String {
    let p = &r.policy;
    let mut s = format!(
        "{trial}: {}: {} {:.2}% (reference {:.2}%, stderr {:.2} / {:.2} points), delta {:+.2} points, allowed +-{:.2}; n={}; {} item(s) flipped\n",
        if r.pass { "PASS" } else { "FAIL" },
        metric.name(),
        100.0 * r.got,
        100.0 * r.reference,
        100.0 * r.stderr_got,
        100.0 * r.stderr_reference,
        r.delta_points,
        p.max_delta_points,
        r.n,
        r.flips.len(),
    );
    s.push_str(&format!(
        "  flips: {} lost (right -> wrong), {} gained (wrong -> right); McNemar exact p = {} (fails under flip_alpha {})\n",
        r.lost,
        r.gained,
        fmt_p(r.flip_p_value),
        p.flip_alpha
    ));
    s.push_str(&format!(
        "  minimum detectable delta: {:.2} points ({} one-way flips at n={}); one item = {:.2} points{}\n",
        r.min_detectable_points,
        min_significant_flips(p.flip_alpha),
        r.n,
        r.points_per_item,
        p.max_flipped_points.map_or_else(String::new, |m| format!("; max_flipped_points {m:.2}")),
    ));
    for reason in &r.reasons {
        s.push_str(&format!("  {reason}\n"));
    }
    if let Some(d) = r.max_loglik_diff {
        s.push_str(&format!("  max |log-likelihood diff| over all choices: {d:.3e}\n"));
    }
    for f in r.flips.iter().take(20) {
        let m = |x: Option<f64>| x.map_or_else(String::new, |m| format!(" (margin {m:.4})"));
        s.push_str(&format!(
            "  doc {}: reference chose {}{} [{}], package chose {}{} [{}]\n",
            f.doc,
            f.reference,
            m(f.reference_margin),
            if f.reference_correct { "right" } else { "wrong" },
            f.got,
            m(f.got_margin),
            if f.got_correct { "right" } else { "wrong" },
        ));
    }
    if r.flips.len() > 20 {
        s.push_str(&format!("  ... and {} more\n", r.flips.len() - 20));
    }
    s.push_str(&format!("  baseline: {baseline_file}; regenerate (only if the reference changed): {regenerate}\n"));
    s
}

/// Quotes a model output on one line, shortened.
/// The reasoning blocks a protocol removes, and whether that is lmms-eval's command-line default.
fn reasoning(tags: &[[String; 2]]) -> String {
    let pairs: Vec<String> = tags.iter().map(|[a, b]| format!("{a}...{b}")).collect();
    match tags {
        [] => "none".to_string(),
        t if *t == crate::accuracy::protocol::lmms_eval_reasoning_tags()[..] => {
            format!("{} (lmms-eval's --reasoning_tags default)", pairs.join(", "))
        }
        _ => pairs.join(", "),
    }
}

fn quote(s: &str) -> String {
    let q: String = s.chars().take(120).collect();
    let more = if s.chars().count() > 120 { "..." } else { "" };
    format!("{:?}{more}", q)
}

/// `plumbing_only`: the case says the model's weights are random, so the scores are printed as meaningless.
pub fn media_message(
    trial: &str,
    task: &MediaTask,
    protocol: &Protocol,
    r: &MediaGateReport,
    plumbing_only: bool,
    baseline_file: &str,
    regenerate: &str,
) -> String {
    let p = &r.policy;
    let dir = if r.direction == Direction::LowerIsBetter { "lower is better" } else { "higher is better" };
    let mut s = format!(
        "{trial}: {}: {} {:.2} (reference {:.2}; {dir}), delta {:+.2} points, allowed +-{:.2}; n={}; {} worse, {} better\n",
        if r.pass { "PASS" } else { "FAIL" },
        r.metric,
        r.got,
        r.reference,
        r.delta_points,
        p.max_delta_points,
        r.n,
        r.worse,
        r.better,
    );
    if plumbing_only {
        s.push_str(
            "  plumbing only: the model's weights are random, so these scores mean nothing about the model; the trial \
             checks that the package answers as the reference does through the same task, media, protocol and scorer\n",
        );
    }
    s.push_str(&format!("  paired test: p = {} ({}); fails under flip_alpha {}\n", fmt_p(r.p_value), r.test, p.flip_alpha));
    s.push_str(&format!("  minimum detectable difference: {:.2} points at n={}\n", r.min_detectable_points, r.n));
    if let Some((rc, gc, n)) = r.raw_counts {
        s.push_str(&format!(
            "  raw counts: reference {rc}/{n}, package {gc}/{n}; lmms-eval's score divides by 1000: {:.4} vs {:.4}\n",
            rc as f64 / 1000.0,
            gc as f64 / 1000.0
        ));
    }
    for (m, (a, b)) in r.metrics.iter().filter(|(m, _)| **m != r.metric) {
        s.push_str(&format!("  {m}: reference {a:.2}, package {b:.2}\n"));
    }
    s.push_str(&format!(
        "  protocol: prompt {}, system prompt {}, media {}, reasoning blocks removed {}, answer {}, stops {:?}{}, max_new_tokens {}\n",
        serde_json::to_string(&protocol.prompt).unwrap_or_default(),
        protocol.system_prompt.as_deref().map_or_else(|| "none".to_string(), quote),
        serde_json::to_string(&protocol.media).unwrap_or_default(),
        reasoning(&protocol.reasoning_tags),
        protocol.answer_after.as_deref().map_or_else(|| "the whole output".to_string(), |m| format!("after the last {m:?}")),
        r.stop.until,
        if protocol.ignore_stop_strings { format!(" (the task's {:?} ignored)", task.until) } else { String::new() },
        task.max_new_tokens,
    ));
    for reason in &r.reasons {
        s.push_str(&format!("  {reason}\n"));
    }
    let st = &r.stop;
    if st.cuts.is_empty() {
        s.push_str("  stop strings changed no item's score\n");
    } else {
        s.push_str(&format!(
            "  STOP-STRING TRAP: the stop list changed {} item score(s); {} with the cut outputs: reference {:.2}, package {:.2}; \
             with the whole outputs: reference {:.2}, package {:.2}\n",
            st.cuts.len(),
            r.metric,
            st.reference_cut,
            st.got_cut,
            st.reference_full,
            st.got_full
        ));
        for c in st.cuts.iter().take(20) {
            s.push_str(&format!(
                "    doc {} ({}): cut at {:?}: score {} cut, {} whole\n",
                c.doc,
                if c.reference { "reference" } else { "package" },
                c.stop,
                c.score_cut,
                c.score_full
            ));
        }
    }
    for f in r.flips.iter().take(20) {
        let m = |x: Option<f64>| x.map_or_else(String::new, |m| format!(", margin {m:.3}"));
        s.push_str(&format!(
            "  doc {}: reference {} (score {}{}) vs package {} (score {}{})\n",
            f.doc,
            quote(&f.reference),
            f.reference_score,
            m(f.reference_margin),
            quote(&f.got),
            f.got_score,
            m(f.got_margin)
        ));
    }
    if r.flips.len() > 20 {
        s.push_str(&format!("  ... and {} more\n", r.flips.len() - 20));
    }
    s.push_str(&format!("  baseline: {baseline_file}; regenerate (only if the reference changed): {regenerate}\n"));
    s
}

/// The genai engine's note: for how many items genai's own processor built another prompt than the reference
/// processor's (its outputs are judged all the same: the package's runtime is what users run).
pub fn genai_prompts(differ: &[usize], n: usize) -> String {
    if differ.is_empty() {
        return format!("  genai's processor built the reference processor's prompt for all {n} items\n");
    }
    let docs: Vec<String> = differ.iter().take(10).map(|d| d.to_string()).collect();
    let more = if differ.len() > 10 { ", ..." } else { "" };
    format!(
        "  genai's processor built another prompt than the reference processor's for {} of {n} items (docs {}{more}); \
         the scores above are genai's on its own prompts\n",
        differ.len(),
        docs.join(", ")
    )
}

/// The package's logits went non-finite on an item: the trial's verdict, before any score.
pub fn media_non_finite(trial: &str, item: &str, step: usize) -> String {
    format!(
        "{trial}: FAIL: {item}: the package's logits at generated step {step} contain non-finite values (NaN or \
         infinite); no score is computed"
    )
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

fn media_shown(d: &MediaNumbers) -> Shown {
    let (mut rows, mut plots) = (Vec::new(), Vec::new());
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
        return Shown { numbers: rows, plots };
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
    Shown { numbers: rows, plots }
}

fn accuracy_shown(d: &TextNumbers) -> Shown {
    let (mut rows, mut plots) = (Vec::new(), Vec::new());
    rows.push(("metric", d.metric.to_string()));
    rows.push(("accuracy", format!("{:.2}% (reference {:.2}%)", 100.0 * d.got, 100.0 * d.reference)));
    rows.push(("Δ accuracy", format!("{:+.2} points (allowed ±{:.2})", d.delta_points, d.max_delta_points)));
    rows.push(("items flipped", format!("{} of {}", d.flips.len(), d.n)));
    rows.push(("max |log-likelihood diff|", html::sci(d.max_loglik_diff)));
    if d.flips.is_empty() {
        return Shown { numbers: rows, plots };
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
    Shown { numbers: rows, plots }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_media_gate_shows_each_changed_item_with_its_image_or_waveform_and_the_stop_cuts() {
        assert_eq!(base64(b"hello"), "aGVsbG8=");
        assert_eq!(base64(b"hi!"), "aGkh");
        let flip = |doc, thumbnail| super::super::judged::MediaFlipDetail {
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
        let d = MediaNumbers {
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
        let Shown { numbers: rows, plots } = media_shown(&d);
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
}
