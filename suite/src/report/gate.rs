//! The accuracy gate's report: the accuracy both ways, the flips with the paired test, what the task can detect,
//! and the items that flipped with both margins.

use crate::accuracy::gate::{GateReport, fmt_p, min_significant_flips};
use crate::accuracy::task::spec::Metric;

/// The report a person reads. It holds only numbers that repeat exactly run after run (speed is `cargo xtask bench`'s).
pub fn render(trial: &str, metric: Metric, r: &GateReport, baseline_file: &str, regenerate: &str) -> String {
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
