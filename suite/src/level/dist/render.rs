//! The distribution level's words and plots: llama.cpp's `--kl-divergence` statistics, under its names where they
//! mean the same thing, then the verdict against the golden's floor; the HTML report's numbers and its two plots
//! (the KL's quantile function and its profile along the corpus).

use std::fmt::{self, Write as _};

use super::judge::{DistReason, DistReport, KldOver};
use super::stats::{Estimate, MIN_PPL_POSITIONS, Spread, percentile};
use crate::judge::profile::Profile;
use crate::outcome::{Judgement, NumbersTable, Outcome, Shown};
use crate::report::svg::{self, LineChart, Series};

/// What a failing dist trial measured: its score and the statistics behind it.
pub fn measured(o: &Outcome) -> Option<String> {
    let r = super::judge::of(o)?;
    Some(format!(
        "dist score {:.3} (mean KLD {:.3e}, 99.0% {:.3e}, same top {:.2}%, deviation {:.2e})",
        r.score(),
        r.stats.kld.value,
        r.stats.p99_kld(),
        100.0 * r.stats.same_top.value,
        r.deviation
    ))
}

impl Judgement for DistReport {
    fn reasons(&self) -> Vec<String> {
        self.reasons.iter().map(ToString::to_string).collect()
    }

    fn shown(&self) -> Shown {
        shown_of(self)
    }

    fn summary_row(&self) -> Option<(&'static NumbersTable, String)> {
        None
    }
}

impl fmt::Display for DistReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let over = |f: &mut fmt::Formatter<'_>, what: &str, k: &KldOver| {
            write!(
                f,
                "{what} {:.4e} is over its limit {:.4e} ({}x the floor's {:.4e} + {:.1e}; {:.2}x the limit)",
                k.kld, k.limit, k.multiple, k.floor, k.abs, k.score
            )
        };
        match self {
            DistReason::Mean(k) => over(f, "mean KLD", k),
            DistReason::P99(k) => over(f, "99.0% KLD", k),
            DistReason::Deviation { deviation, against, limit } => write!(
                f,
                "the per-position KL sits {deviation:.4e} (mean |package - floor| over the floor's mean) from the floor's ({against}), \
                 over its limit {limit:.1e}: this package's {} differs from the floor's",
                if against.contains("int4") { "quantization" } else { "numerics" }
            ),
        }
    }
}

/// llama.cpp's fixed six decimals, or four significant digits where those would print only zeros (a clean f32 or
/// f16 package's KL).
fn num(x: f64) -> String {
    if x != 0.0 && x.abs() < 1e-3 { format!("{x:10.4e}") } else { format!("{x:10.6}") }
}

fn pct(e: Estimate) -> String {
    format!("{:7.3} ± {:5.3} %", 100.0 * e.value, 100.0 * e.uncertainty)
}

fn spread_lines(s: &mut String, what: &str, spread: &Spread, scale: f64, unit: &str) {
    for &(p, v) in &spread.points {
        let name = match p {
            100.0 => "Maximum".to_string(),
            0.0 => "Minimum".to_string(),
            50.0 => "Median ".to_string(),
            p => format!("{:>4.1}%  ", p),
        };
        let _ = writeln!(s, "    {name} {what}: {}{unit}", num(v * scale));
    }
}

/// The verdict's message: the headline, the statistics, the reasons, the numbers it was judged by and how to
/// regenerate the golden.
pub fn message(trial: &str, r: &DistReport, golden_file: &str, regenerate: &str) -> String {
    let st = &r.stats;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{trial}: dist {}: mean KLD {:.4e} ({:.2}x its limit), 99.0% KLD {:.4e} ({:.2}x its limit), same top p {:.2}% over {} positions",
        if r.pass { "PASS" } else { "FAIL" },
        st.kld.value,
        r.mean_score,
        st.p99_kld(),
        r.p99_score,
        100.0 * st.same_top.value,
        st.positions
    );
    for reason in &r.reasons {
        let _ = writeln!(s, "  - {reason}");
    }
    let _ = writeln!(s, "  ====== Perplexity statistics ======");
    match &st.perplexity {
        Some(p) => {
            let _ = writeln!(s, "    Mean PPL(Q)                   : {:10.6} ± {:10.6}", p.ppl_q.value, p.ppl_q.uncertainty);
            let _ = writeln!(s, "    Mean PPL(base)                : {:10.6} ± {:10.6}", p.ppl_base.value, p.ppl_base.uncertainty);
            let _ = writeln!(s, "    Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2}%", 100.0 * p.cor);
            let _ = writeln!(s, "    Mean ln(PPL(Q)/PPL(base))     : {:10.6} ± {:10.6}", p.ln_ratio.value, p.ln_ratio.uncertainty);
            let _ = writeln!(s, "    Mean PPL(Q)/PPL(base)         : {:10.6} ± {:10.6}", p.ratio.value, p.ratio.uncertainty);
            let _ = writeln!(s, "    Mean PPL(Q)-PPL(base)         : {:10.6} ± {:10.6}", p.difference.value, p.difference.uncertainty);
        }
        None => {
            let _ = writeln!(s, "    (printed from {MIN_PPL_POSITIONS} scored positions on; this corpus has {})", st.positions);
        }
    }
    let _ = writeln!(s, "  ====== KL divergence statistics ======");
    let _ = writeln!(s, "    Mean    KLD: {} ± {}", num(st.kld.value), num(st.kld.uncertainty));
    spread_lines(&mut s, "KLD", &st.kld_spread, 1.0, "");
    let _ = writeln!(s, "  ====== Token probability statistics ======");
    let _ = writeln!(s, "    Mean    Δp: {}", pct(st.delta_p));
    spread_lines(&mut s, "Δp", &st.delta_p_spread, 100.0, "%");
    let _ = writeln!(s, "    RMS Δp    : {}", pct(st.rms_delta_p));
    let _ = writeln!(s, "    Same top p: {}", pct(st.same_top));
    let f = &r.floor;
    let _ = writeln!(
        s,
        "  floor ({}): mean KLD {:.4e}, 99.0% KLD {:.4e}, same top p {:.2}%; limits: mean {:.4e}, 99.0% {:.4e} \
         (kld_multiple_mean {}, kld_multiple_p99 {}, kld_abs {:.1e})",
        f.against,
        f.mean_kld,
        f.p99_kld,
        100.0 * f.same_top,
        r.mean_limit,
        r.p99_limit,
        r.tolerance.kld_multiple_mean,
        r.tolerance.kld_multiple_p99,
        r.tolerance.kld_abs
    );
    let _ = writeln!(
        s,
        "  paired with the floor position by position: mean |KL - floor KL| is {:.4e} of the floor's mean{}",
        r.deviation,
        match (r.tolerance.max_deviation, r.deviation_score) {
            (Some(m), Some(sc)) => format!(" (limit {m:.1e}, {sc:.2}x it)"),
            _ => " (not gated for this dtype)".to_string(),
        }
    );
    let bound = match &r.check {
        Some(c) if !c.non_finite && c.positions > 0 => format!(
            "; at regen this variant's full-vocabulary KL was {:.4e} and the partition caught {:.2}% of it",
            c.mean_kld,
            100.0 * c.captured
        ),
        _ => String::new(),
    };
    let _ = writeln!(s, "  KL over the reference's top {} ids + one tail bin: a lower bound of the full-vocabulary KL{bound}", r.k);
    let _ = writeln!(s, "  golden: {golden_file}\n  regenerate (only if the reference or the corpus changed): {regenerate}");
    s
}

fn shown_of(d: &DistReport) -> Shown {
    let (mut rows, mut plots) = (Vec::new(), Vec::new());
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
    let mut sorted: Vec<f32> = d.kld.iter().map(|&v| v as f32).collect();
    sorted.sort_by(f32::total_cmp);
    let quantiles: Vec<Option<f64>> = (0..=100).map(|p| Some(percentile(&sorted, p as f32 / 100.0) as f64).filter(|v| *v > 0.0)).collect();
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
        series: vec![Series { label: "KLD", color: "#8250df", points: profile.points() }],
        thresholds: vec![],
        markers: vec![],
    }));
    Shown { numbers: rows, plots }
}
