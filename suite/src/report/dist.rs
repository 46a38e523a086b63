//! The distribution level's text: llama.cpp's `--kl-divergence` statistics, under its names where they mean the same
//! thing, then the verdict against the golden's floor.

use std::fmt::Write as _;

use crate::judge::dist::{DistReport, Estimate, MIN_PPL_POSITIONS, Spread};

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
pub fn render(trial: &str, r: &DistReport, golden_file: &str, regenerate: &str) -> String {
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
