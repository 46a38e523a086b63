//! The words of the logits verdicts (`judge::prefill`, `judge::stream`) that L4, L5 and genai share: the prefill
//! report and the greedy stream's report, each with expected, got, where, the policy and the command that regenerates
//! the golden; and a stale golden's reason.

use std::fmt::{self, Write};

use super::Context;
use crate::judge::prefill::{PrefillReason, PrefillReport};
use crate::judge::stream::{DivergenceKind, GenerationReason, GenerationReport, TokensThere};
use crate::judge::verdict::{OverLimit, STATS, Stale, Verdict};

fn tok(ctx: &Context, id: i64) -> String {
    format!("{id} {:?}", ctx.tokenizer.token(id))
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |x| format!("{x:.6}"))
}

/// A margin as a reason states it.
fn margin(v: Option<f64>) -> String {
    v.map_or_else(|| "unknown".into(), |m| format!("{m:.4}"))
}

impl fmt::Display for OverLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} |diff| {:.3e} is {:.1}x the noise floor {:.3e} (limit {}x)",
            self.stat, self.diff, self.multiple, self.floor, self.limit
        )
    }
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stale::Prompt { golden, case } => write!(f, "was made from prompt {golden:?}, but the case states {case:?}"),
            Stale::InputHash { golden, case } => {
                write!(f, "was made from other inputs (input_hash {golden}; the case's inputs hash to {case})")
            }
            Stale::InputIds { golden, case } => {
                write!(f, "was made from input ids {golden:?}, but the case's prompt tokenizes to {case:?}")
            }
        }
    }
}

/// The statistics over their limits, on one line.
pub fn over_limits(over: &[OverLimit]) -> String {
    over.iter().map(OverLimit::to_string).collect::<Vec<_>>().join("; ")
}

impl fmt::Display for PrefillReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrefillReason::VocabularySize { reference, package } => {
                write!(f, "vocabulary size differs: the reference has {reference} logits, the package {package}")
            }
            PrefillReason::OverNoise { over } => {
                write!(f, "logits differ by more than the noise policy allows: {}", over_limits(over))
            }
            PrefillReason::OutsideTolerance { violations, of, id, expected, got } => write!(
                f,
                "{violations} of {of} logits outside atol+rtol*|ref|; worst at id {id}: expected {expected:.6}, got {got:.6} (|diff| {:.3e})",
                (got - expected).abs()
            ),
            PrefillReason::Cosine { cosine, floor } => write!(f, "cosine similarity {cosine:.6} is under the floor {floor}"),
            PrefillReason::TopIdOutside { id, logits } => {
                write!(f, "the reference's top-10 id {id} is outside the package's {logits} logits")
            }
            PrefillReason::TopOutsideTolerance { outside, id, expected, got } => write!(
                f,
                "{outside} of the reference's top-10 logits outside atol+rtol*|ref|; worst at id {id}: expected {expected:.6}, got {got:.6}"
            ),
            PrefillReason::TopOverlap { overlap, of, needed } => write!(f, "top-10 overlap {overlap}/{of} is under {needed}"),
            PrefillReason::Argmax { got, want, margin: m, near_tie_margin, near_tie: true } => {
                write!(f, "argmax is {got}, the reference's is {want} (a near-tie: reference margin {} < {near_tie_margin})", margin(*m))
            }
            PrefillReason::Argmax { got, want, margin: m, near_tie_margin, near_tie: false } => write!(
                f,
                "argmax is {got}, the reference's is {want} (reference margin {}, not a near-tie under {near_tie_margin})",
                margin(*m)
            ),
            PrefillReason::PositionsOut { first: o, out, of, by_noise, max_abs, max_at } => {
                let what = o.id.map_or_else(|| "its logsumexp".to_string(), |id| format!("id {id}"));
                let rule = if *by_noise { "the noise policy's bound" } else { "atol+rtol*|ref|" };
                write!(
                    f,
                    "prompt logits leave tolerance from position {} on ({out} of {of} positions): at {what} the reference has {:.6}, \
                     the package {:.6} (|diff| {:.3e} > {rule} {:.3e}); max |diff| {max_abs:.3e} at position {max_at}",
                    o.position,
                    o.reference,
                    o.package,
                    (o.package - o.reference).abs(),
                    o.bound,
                )
            }
        }
    }
}

impl fmt::Display for GenerationReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GenerationReason::TokenMatch { matches, n, ratio, min_ratio, within } => {
                let side = if *within { "within" } else { "under" };
                write!(f, "token match {matches}/{n} = {ratio:.3} is {side} min_token_match_ratio {min_ratio}")
            }
            GenerationReason::NearTieAgrees { step, margin: m, agree, steps, near_tie_flips } => write!(
                f,
                "step {step} is a near-tie flip (reference margin {}), and teacher-forced the package agrees at {agree}/{steps} steps \
                 (near-tie flips at {near_tie_flips:?})",
                margin(*m)
            ),
            GenerationReason::NearTieDisagrees { step, real } => {
                write!(f, "step {step} is a near-tie flip, but teacher-forced the package still disagrees at steps {real:?}")
            }
            GenerationReason::RealDivergence { step, preferred_by, near_tie_margin } => write!(
                f,
                "step {step} is a real divergence: the reference preferred its token by {} (near-tie margin {near_tie_margin})",
                margin(*preferred_by)
            ),
            GenerationReason::StepLogitsOut { first: o, out, of, max_abs, max_at, tokens } => {
                let tokens = match tokens {
                    TokensThere::AllAgree => "the greedy tokens still all agree".to_string(),
                    TokensThere::AgreeUntil(at) => format!("the greedy tokens still agree there (they first diverge at step {at})"),
                    TokensThere::DivergedAt(at) => format!("the greedy tokens already diverged at step {at}"),
                };
                write!(
                    f,
                    "decode-step logits leave tolerance from step {} on ({out} of {of} teacher-forced steps): at id {} the reference \
                     has {:.6}, the package {:.6} (|diff| {:.3e} > atol+rtol*|ref| {:.3e}); max |diff| {max_abs:.3e} at step {max_at}; \
                     {tokens}",
                    o.step,
                    o.id,
                    o.reference,
                    o.package,
                    (o.package - o.reference).abs(),
                    o.bound,
                )
            }
        }
    }
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
        if let Some(o) = &p.first_out {
            let _ = writeln!(s, "  reading:  {}", position_reading(o.position));
        }
    }
    if let Some(n) = &r.noise {
        let stat =
            |i: usize| format!("{} {:.3e} = {:.1}x floor {:.3e} (limit {}x)", STATS[i], n.diff[i], n.multiple[i], n.floor[i], n.limit[i]);
        let _ = writeln!(s, "  noise:    score {:.4} (<= 1 passes): {}; {}; {}", n.score, stat(0), stat(1), stat(2));
    }
    let _ = writeln!(s, "  policy:   {} [{}]", r.tolerance, ctx.policy_source);
    let _ = writeln!(s, "  golden:   {}", ctx.golden_file);
    if r.verdict == Verdict::Fail {
        s.push_str(&super::next_step(&ctx.next));
    } else {
        let _ = writeln!(s, "  regenerate (only if the reference changed): {}", ctx.regenerate);
    }
    s
}

/// What the first position out of tolerance suggests, in one line.
fn position_reading(first: usize) -> String {
    match first {
        0 => "out from position 0 on: something every position computes differs (the embedding, a norm, the MLP, the \
              attention's value or output projection, the head), not a mask or a position"
            .to_string(),
        1 => "position 0 is within tolerance: it attends only to itself, so queries and keys cannot change it; what \
              differs acts on the attention scores (the query or key projections, RoPE, the mask)"
            .to_string(),
        n => format!(
            "positions 0 to {} are within tolerance: what differs depends on the position (RoPE past a point, the \
             attention mask or window, the cache), not on a weight every position uses",
            n - 1
        ),
    }
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
    // The first step the stream fails at: its first divergence, or its first step whose logits left tolerance.
    let logits_out = r.reasons.iter().find_map(|x| match x {
        GenerationReason::StepLogitsOut { first, .. } => Some(first.step),
        _ => None,
    });
    let first = r.first_divergence.as_ref().map(|d| d.index).into_iter().chain(logits_out).min();
    match (r.verdict == Verdict::Fail, first) {
        (true, Some(step)) if step > 0 => s.push_str(&super::next_step_decoding(&ctx.next, step)),
        (true, _) => s.push_str(&super::next_step(&ctx.next)),
        (false, _) => {
            let _ = writeln!(s, "  regenerate (only if the reference changed): {}", ctx.regenerate);
        }
    }
    s
}
