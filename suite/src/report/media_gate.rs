//! The multimodal gate's report: the protocol both sides ran under, the score both ways with the paired test, what
//! the task can detect, the items that changed with both outputs, scores and margins, and where the stop list cut.

use crate::accuracy::gate::fmt_p;
use crate::accuracy::lmms::{Direction, MediaTask};
use crate::accuracy::media_gate::MediaGateReport;
use crate::accuracy::protocol::Protocol;

/// Quotes a model output on one line, shortened.
fn quote(s: &str) -> String {
    let q: String = s.chars().take(120).collect();
    let more = if s.chars().count() > 120 { "..." } else { "" };
    format!("{:?}{more}", q)
}

/// `plumbing_only`: the case says the model's weights are random, so the scores are printed as meaningless.
pub fn render(
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
        "  protocol: prompt {}, system prompt {}, media {}, answer {}, stops {:?}{}, max_new_tokens {}\n",
        serde_json::to_string(&protocol.prompt).unwrap_or_default(),
        protocol.system_prompt.as_deref().map_or_else(|| "none".to_string(), quote),
        serde_json::to_string(&protocol.media).unwrap_or_default(),
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
pub fn non_finite(trial: &str, item: &str, step: usize) -> String {
    format!(
        "{trial}: FAIL: {item}: the package's logits at generated step {step} contain non-finite values (NaN or \
         infinite); no score is computed"
    )
}
