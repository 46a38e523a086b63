//! Turning verdicts into what a person reads: expected, got, where, the policy, and the command that fixes it.

pub mod dist;
pub mod gate;
pub mod html;
pub mod json;
pub mod junit;
pub mod matrix;
pub mod media_gate;
pub mod snapshot;
pub mod summary;
mod svg;

use std::fmt::Write;

use crate::feed::integrity::{Bad, Mismatch};
use crate::judge::component::ComponentReport;
use crate::judge::finite::{NonFinite, VocabMismatch, VocabSource};
use crate::judge::genai_level::{Feed, GenaiReport};
use crate::judge::verdict::{DivergenceKind, GenerationReport, PrefillReport, STATS};

/// What a rendered report needs beyond the verdict: names, paths and token text.
pub struct Context<'a> {
    pub trial: &'a str,
    pub case_file: &'a str,
    pub golden_file: &'a str,
    pub regenerate: &'a str,
    pub policy_source: &'a str,
    /// Shows token ids as the package's tokenizer reads them.
    pub tokenizer: &'a crate::feed::tokenizer::TextTokenizer,
}

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

/// A component level's report: the features against the reference's, and how far zeroing them moved the logits.
pub fn component(trial: &str, r: &ComponentReport, reference_file: &str, regenerate: &str) -> String {
    let c = &r.comparison;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{trial}: {}: `{}` {:?} max |diff| {:.3e} at [{}, {}], cosine {:.7}; zeroing it moves the last logits by {:.3e}",
        r.component,
        r.tensor,
        r.got_shape,
        c.max_abs,
        c.max_abs_at / r.cols,
        c.max_abs_at % r.cols,
        c.cosine,
        r.moved
    );
    if let Some(n) = r.frames_compared {
        let _ = writeln!(s, "  compared at the {n} frames the reference stores (of {})", r.want_shape.get(1).copied().unwrap_or(0));
    }
    if let Some(j) = &r.noise {
        let _ = writeln!(
            s,
            "  noise policy: |diff| p50/p99/max {:.3e}/{:.3e}/{:.3e} = {:.1}x/{:.1}x/{:.1}x the reference's own noise (limits {}x/{}x/{}x)",
            j.diff[0], j.diff[1], j.diff[2], j.multiple[0], j.multiple[1], j.multiple[2], j.limit[0], j.limit[1], j.limit[2]
        );
    }
    for reason in &r.reasons {
        let _ = writeln!(s, "  - {reason}");
    }
    let _ = writeln!(s, "  policy: {}\n  reference: {reference_file}", r.tolerance);
    let _ = writeln!(s, "  regenerate (only if the reference changed): {regenerate}");
    s
}

/// genai's refusal of a package: what it said, and where the package is. A verdict (the package does not run in its
/// own runtime), which an xfail entry may expect by its message.
pub fn genai_refused(trial: &str, case_file: &str, package: &str, message: &str) -> String {
    format!(
        "{trial}: genai FAIL ({case_file}): onnxruntime-genai refused the package {package}\n  genai said: {message}\n  \
         the package does not run in its own runtime; the L4 and L5 levels judge it through ONNX Runtime directly\n"
    )
}

/// The genai level's report: how genai was fed, then its prompt difference and the L4 and L5 reports it was judged
/// by, under one heading that says genai computed them.
pub fn genai(ctx: &Context, r: &GenaiReport) -> String {
    let mut s = match &r.feed {
        Feed::Ids { library, version, generated } => format!(
            "{}: genai: the package as onnxruntime-genai {version} runs it ({}), greedy, {generated} generated tokens\n",
            ctx.trial,
            library.display()
        ),
        Feed::Processor { modality } => format!("{}: genai: {modality} prompt through onnxruntime-genai's own processor\n", ctx.trial),
    };
    if let Some(d) = &r.prompt {
        let _ = write!(
            s,
            "  - {}\n  Hugging Face ids: {:?}\n  genai ids:        {:?}\n  Hugging Face text: {:?}\n  genai text:        {:?}\n",
            d.reason, d.hf, d.genai, d.hf_text, d.genai_text
        );
    }
    if let Some((p, file)) = &r.prefill {
        s.push_str(&prefill(&Context { golden_file: file, ..*ctx }, p));
    }
    if let Some((g, file)) = &r.generation {
        s.push_str(&generation(&Context { golden_file: file, ..*ctx }, g));
    }
    s
}

/// Logits no verdict can reason about: where the first NaN or infinity is. `place` names what computed them (the
/// model file, onnxruntime-genai on the package, a task's document).
pub fn non_finite(trial: &str, place: &str, nf: &NonFinite) -> String {
    match nf {
        NonFinite::Step { step, count, first_id, value } => {
            format!("{trial}: {place}: logits at generation step {step} contain {count} non-finite values; first at id {first_id}: {value}")
        }
        NonFinite::Position { position, of, logsumexp } => {
            format!("{trial}: {place}: logits at prompt position {position} of {of} contain non-finite values (logsumexp {logsumexp})")
        }
    }
}

/// A package file that is not what its builder's manifest recorded.
pub fn integrity(trial: &str, package: &str, manifest: &str, bad: &Bad, build: Option<&str>) -> String {
    let rebuild = build.map_or_else(|| "rebuild it".to_string(), |b| format!("rebuild it with `{b}`"));
    let (what, fix) = match &bad.mismatch {
        Mismatch::Missing => ("is missing".to_string(), rebuild),
        Mismatch::Size { got } => {
            (format!("has {got} bytes where the manifest records {} (truncated or replaced)", bad.recorded.size), rebuild)
        }
        Mismatch::Sha256 { got, from_stamp: false } => {
            (format!("has sha256 {got} where the manifest records {}", bad.recorded.sha256), rebuild)
        }
        // The builder trusts the same stamp, so a plain rebuild would skip the step: the stamp must go first.
        Mismatch::Sha256 { got, from_stamp: true } => (
            format!("is recorded in {package}/.stamp.json with sha256 {got} where the manifest records {}", bad.recorded.sha256),
            format!("delete {package} (its stamp with it) and {rebuild}"),
        ),
    };
    format!("{trial}: package {package} does not match {manifest}: {} {what}; {fix}\n", bad.name)
}

/// A package whose logits rows are not the vocabulary the golden, the package's own config or the ids read state.
/// `golden_file` is what the trial judges against (a golden, or a gate's baseline); `ids_from` holds the ids a
/// `WatchedIds` bound comes from (the golden, or the task's requests); `package` is the package folder.
pub fn vocab_size(
    trial: &str,
    place: &str,
    v: &VocabMismatch,
    golden_file: &str,
    ids_from: &str,
    package: &str,
    regenerate: &str,
) -> String {
    let (expected, fix) = match v.source {
        VocabSource::Golden => (
            format!("{golden_file} has a vocabulary of {}", v.expected),
            format!("regenerate (only if the reference changed): {regenerate}"),
        ),
        VocabSource::WatchedIds => (
            format!("{ids_from} reads ids up to {}, so at least {} are expected", v.expected - 1, v.expected),
            format!("regenerate (only if the reference changed): {regenerate}"),
        ),
        // Goldens cannot fix a package that disagrees with its own config.
        VocabSource::PackageConfig => (
            format!("{package}/genai_config.json states `model.vocab_size` {}", v.expected),
            "the package disagrees with its own config: fix `model.vocab_size` there or rebuild the package".to_string(),
        ),
    };
    format!(
        "{trial}: {place}: vocab_size: expected {}{}, got {}: the package's logits have {} entries per position, but \
         {expected}\n  {fix}\n",
        if v.source == VocabSource::WatchedIds { "at least " } else { "" },
        v.expected,
        v.got,
        v.got
    )
}
