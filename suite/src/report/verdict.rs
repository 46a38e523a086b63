//! The words of the logits verdicts (`judge::verdict`) that L4, L5 and genai share: the prefill report and the
//! greedy stream's report, each with expected, got, where, the policy and the command that regenerates the golden.

use std::fmt::Write;

use super::Context;
use crate::judge::verdict::{DivergenceKind, GenerationReport, PrefillReport, STATS};

fn tok(ctx: &Context, id: i64) -> String {
    format!("{id} {:?}", ctx.tokenizer.token(id))
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |x| format!("{x:.6}"))
}

pub fn prefill(ctx: &Context, r: &PrefillReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}: L4 {} ({})", ctx.trial, r.verdict, ctx.case_file);
    for reason in &r.reasons {
        let _ = writeln!(s, "  - {reason}");
    }
    let _ = writeln!(s, "  expected: top1 {} logit {}", tok(ctx, r.want_top1), opt(r.want_top1_logit));
    let _ = writeln!(
        s,
        "  got:      top1 {} logit {:.6} (reference logit for it: {})",
        tok(ctx, r.got_top.ids[0]),
        r.got_top.logits[0],
        opt(r.want_logit_of_got_top1)
    );
    let _ = writeln!(s, "  where:    last prompt position, reference margin top1-top2 {}", opt(r.want_margin));
    if let Some(c) = &r.comparison {
        let _ = writeln!(
            s,
            "  vector:   max |diff| {:.3e} at id {}, max rel {:.3e}, cosine {:.7}, {} outside tolerance, top-10 overlap {}/10",
            c.max_abs, c.max_abs_at, c.max_rel, c.cosine, c.violations, r.top10_overlap
        );
    } else {
        let _ = writeln!(s, "  vector:   golden has only its top-10 logits; top-10 overlap {}/10", r.top10_overlap);
    }
    if let Some(p) = &r.positions {
        let _ = writeln!(
            s,
            "  positions: {} judged ({} out of tolerance), max |diff| {:.3e} at position {}; profile {}",
            p.per_position.len(),
            p.positions_out,
            p.max_abs,
            p.max_at,
            position_profile(&p.per_position)
        );
    }
    if let Some(n) = &r.noise {
        let stat =
            |i: usize| format!("{} {:.3e} = {:.1}x floor {:.3e} (limit {}x)", STATS[i], n.diff[i], n.multiple[i], n.floor[i], n.limit[i]);
        let _ = writeln!(s, "  noise:    score {:.4} (<= 1 passes): {}; {}; {}", n.score, stat(0), stat(1), stat(2));
    }
    let _ = writeln!(s, "  policy:   {} [{}]", r.tolerance, ctx.policy_source);
    let _ = writeln!(s, "  golden:   {}", ctx.golden_file);
    let _ = writeln!(s, "  regenerate (only if the reference changed): {}", ctx.regenerate);
    s
}

/// max |diff| per prompt position in at most 8 ranges, so a bug that starts mid-prompt shows where: `0-29 3.1e-6 |
/// 30-59 2.4e-1`.
fn position_profile(per_position: &[f64]) -> String {
    let chunk = per_position.len().div_ceil(8).max(1);
    let ranges: Vec<String> = per_position
        .chunks(chunk)
        .enumerate()
        .map(|(i, c)| {
            let (lo, hi) = (i * chunk, i * chunk + c.len() - 1);
            let worst = c.iter().copied().fold(0.0, f64::max);
            if lo == hi { format!("{lo} {worst:.1e}") } else { format!("{lo}-{hi} {worst:.1e}") }
        })
        .collect();
    ranges.join(" | ")
}

pub fn generation(ctx: &Context, r: &GenerationReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}: L5 {} ({})", ctx.trial, r.verdict, ctx.case_file);
    for reason in &r.reasons {
        let _ = writeln!(s, "  - {reason}");
    }
    let _ = writeln!(s, "  expected: {:?}", ctx.tokenizer.decode(&r.expected));
    let _ = writeln!(s, "  got:      {:?}", ctx.tokenizer.decode(&r.got));
    let _ = writeln!(s, "  tokens:   {}/{} match ({:.3})", r.matches, r.expected.len().max(r.got.len()), r.ratio);
    if let Some(d) = &r.first_divergence {
        let kind = match d.kind {
            DivergenceKind::NearTieFlip => "near-tie flip",
            DivergenceKind::Real => "real divergence",
            DivergenceKind::Unclassified => "unclassified (golden has no per-step reference data)",
        };
        let show = |t: Option<i64>| t.map_or_else(|| "<end of stream>".to_string(), |t| tok(ctx, t));
        let _ = writeln!(s, "  where:    step {} ({kind})", d.index);
        let _ = writeln!(s, "            expected {} (reference logit {})", show(d.expected), opt(d.reference_logit_expected));
        let _ = writeln!(s, "            got      {} (reference logit {})", show(d.got), opt(d.reference_logit_got));
        let _ = writeln!(s, "            reference margin top1-top2 at that step: {}", opt(d.reference_margin));
        let lo = d.index.saturating_sub(2);
        let hi = (d.index + 3).min(r.expected.len().max(r.got.len()));
        let _ = writeln!(s, "            step  expected            got");
        for i in lo..hi {
            let cell = |v: &Vec<i64>| v.get(i).map_or_else(|| "-".to_string(), |&t| tok(ctx, t));
            let mark = if r.expected.get(i) != r.got.get(i) { "*" } else { " " };
            let _ = writeln!(s, "          {mark}{i:>4}  {:<18}  {}", cell(&r.expected), cell(&r.got));
        }
    }
    if let Some(tf) = &r.teacher_forced {
        let _ = writeln!(
            s,
            "  teacher-forced: {}/{} steps agree; near-tie flips at {:?}; real disagreements at {:?}",
            tf.agree, tf.steps, tf.near_tie_disagreements, tf.real_disagreements
        );
    }
    let _ = writeln!(s, "  policy:   {} [{}]", r.tolerance, ctx.policy_source);
    let _ = writeln!(s, "  golden:   {}", ctx.golden_file);
    let _ = writeln!(s, "  regenerate (only if the reference changed): {}", ctx.regenerate);
    s
}
