//! `summary.md`: what a reviewer of a pull request reads first, in this order: a one-line verdict with the counts;
//! each failure with its full message (collapsed); the case x modality x EP/dtype matrix with a mark per level; then
//! the rest (the passes to look at, every trial's numbers with one column per metric, the skips grouped by reason).

use std::fmt::Write;

use super::matrix::{self, LEGEND};
use crate::judge::detail::Detail;
use crate::outcome::{Counts, Finished, Outcome, Status};

/// What a report says about the run as a whole.
#[derive(Debug, Clone)]
pub struct Run {
    pub device: String,
    pub wall_seconds: f64,
}

/// "3 passed, 0 ambiguous, 0 accepted, 1 xfail, 2 skipped, 0 failed": how a set of finished trials ended.
pub fn tally(rows: &[Finished]) -> String {
    let c = Counts::of(rows);
    format!(
        "{} passed, {} ambiguous, {} accepted, {} xfail, {} skipped, {} failed",
        c.pass, c.ambiguous, c.accepted, c.xfail, c.skip, c.fail
    )
}

/// What `summary.md` says while a run of `n` trials is under way (and after it, if it was killed).
pub fn incomplete(n: usize) -> String {
    format!("# Conformance summary\n\nINCOMPLETE: a run of {n} trials started and did not finish (killed?); no verdict is claimed.\n")
}

/// How many trials ended each way, most urgent first: "1 failed · 100 passed · 2 ambiguous · 9 skipped".
pub fn counts(trials: &[Finished]) -> String {
    let n = |s: Status| trials.iter().filter(|t| t.outcome.status == s).count();
    let parts = [
        (n(Status::Fail), "failed"),
        (n(Status::Pass), "passed"),
        (n(Status::Ambiguous), "ambiguous"),
        (n(Status::Accepted), "accepted"),
        (n(Status::ExpectedFailure), "xfail"),
        (n(Status::Skip), "skipped"),
    ];
    parts.iter().filter(|(k, what)| *k > 0 || *what == "failed").map(|(k, what)| format!("{k} {what}")).collect::<Vec<_>>().join(" · ")
}

/// The one-line verdict: "❌ FAIL: 1 failed · 100 passed · ... (112 trials on cpu, 45.2 s)".
pub fn verdict_line(trials: &[Finished], run: &Run) -> String {
    let failed = trials.iter().any(|t| t.outcome.is_fail());
    format!(
        "{} {}: {} ({} trials on {}, {:.1} s)",
        if failed { "❌" } else { "✅" },
        if failed { "FAIL" } else { "PASS" },
        counts(trials),
        trials.len(),
        run.device,
        run.wall_seconds
    )
}

/// The line that says why a trial ended as it did: its judgement's first reason, else its message's first line
/// without the trial's own name (which the reader already sees).
pub fn headline(name: &str, outcome: &Outcome) -> String {
    let reason = outcome.judgement.as_ref().and_then(|j| j.reasons().first().and_then(|r| r.lines().next()).map(str::to_string));
    reason.unwrap_or_else(|| {
        let first = outcome.message.lines().next().unwrap_or("");
        first.strip_prefix(name).map_or(first, |r| r.trim_start_matches(':').trim_start()).to_string()
    })
}

/// A Markdown table cell: one line, every character GitHub Markdown or HTML would read as markup escaped (a case
/// name or reason is text, never formatting or a tag in the pull-request comment).
fn cell(s: &str) -> String {
    md_text(&s.replace('\n', " "))
}

/// Text for a GitHub Markdown table cell: its inline markup backslash-escaped, `<`, `>` and `&` as entities.
fn md_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            // Inside a cell (never at a line's start, where `#`, `+` or `-` would count) these are the markup.
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '~' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// An inline code span that holds `s` whatever backticks it has: a delimiter longer than its longest run.
fn code(s: &str) -> String {
    let s = s.replace('\n', " ");
    let longest = s.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    if longest == 0 {
        return format!("`{s}`");
    }
    let ticks = "`".repeat(longest + 1);
    format!("{ticks} {s} {ticks}")
}

/// [`code`] inside a table cell, whose pipes GitHub would take as cell breaks even inside a code span.
fn code_cell(s: &str) -> String {
    code(s).replace('|', "\\|")
}

/// A fence longer than any backtick run in `text`, so a message can never close its own code block.
fn fence(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    "`".repeat(longest.max(2) + 1)
}

fn details(out: &mut String, summary: &str, body: &str) {
    let f = fence(body);
    let _ = writeln!(out, "<details><summary>{}</summary>\n\n{f}text\n{}\n{f}\n\n</details>\n", html_text(summary), body.trim_end());
}

/// Text for inside an HTML element of the Markdown (a `<summary>`).
fn html_text(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn num(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "–".into(), f)
}

fn sci(v: Option<f64>) -> String {
    num(v, |x| format!("{x:.2e}"))
}

pub fn markdown(trials: &[Finished], run: &Run) -> String {
    let mut s = format!("## Conformance: {}\n\n", verdict_line(trials, run));

    let failed: Vec<&Finished> = trials.iter().filter(|t| t.outcome.is_fail()).collect();
    if !failed.is_empty() {
        let _ = writeln!(s, "### Failures ({})\n", failed.len());
        for t in &failed {
            details(&mut s, &format!("❌ {}: {}", t.name, headline(&t.name, &t.outcome)), &t.outcome.message);
        }
    }

    let m = matrix::build(trials);
    let _ = writeln!(s, "### Matrix\n\n{LEGEND}\n");
    let _ = writeln!(s, "| case · modality | {} |", m.columns.join(" | "));
    let _ = writeln!(s, "|---|{}", "---|".repeat(m.columns.len()));
    for row in &m.rows {
        let cells: Vec<String> = row
            .cells
            .iter()
            .map(|c| c.iter().map(|e| format!("{} {}", e.level, matrix::mark(e.status))).collect::<Vec<_>>().join(" "))
            .collect();
        let _ = writeln!(s, "| {} | {} |", cell(&row.label), cells.join(" | "));
    }
    s.push('\n');

    let shown: Vec<&Finished> =
        trials.iter().filter(|t| matches!(t.outcome.status, Status::Ambiguous | Status::Accepted | Status::ExpectedFailure)).collect();
    if !shown.is_empty() {
        let _ = writeln!(s, "### Passes to look at ({})\n", shown.len());
        for t in shown {
            let o = &t.outcome;
            details(&mut s, &format!("{} {} {}: {}", matrix::mark(o.status), o.status.name(), t.name, headline(&t.name, o)), &o.message);
        }
    }

    numbers(&mut s, trials);
    skips(&mut s, trials);
    s
}

/// One table per kind of trial, each metric in its own column.
fn numbers(s: &mut String, trials: &[Finished]) {
    let ran = || trials.iter().filter(|t| t.outcome.status != Status::Skip);
    let mut tables: Vec<(String, String)> = Vec::new();

    let mut t = String::from(
        "| trial | verdict | max \\|logit diff\\| | at id | cosine | outside tolerance | top-10 overlap | reference margin | time (s) |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut n = 0;
    for r in ran() {
        let Some(Detail::Prefill(d)) = r.outcome.detail.as_deref() else { continue };
        n += 1;
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {}/10 | {} | {:.2} |",
            code_cell(&r.name),
            r.outcome.status.name(),
            sci(d.max_abs),
            d.max_abs_at.map_or("–".into(), |i| i.to_string()),
            num(d.cosine, |c| format!("{c:.7}")),
            d.violations.map_or("–".into(), |v| v.to_string()),
            d.top10_overlap,
            num(d.reference_margin, |m| format!("{m:.4}")),
            r.seconds
        );
    }
    tables.push((format!("L4 prefill logits ({n})"), t));

    let mut t = String::from(
        "| trial | verdict | tokens matching | match ratio | first divergence (step) | divergence | time (s) |\n|---|---|---|---|---|---|---|\n",
    );
    let mut n = 0;
    for r in ran() {
        let Some(Detail::Generation(d)) = r.outcome.detail.as_deref() else { continue };
        n += 1;
        let _ = writeln!(
            t,
            "| {} | {} | {}/{} | {:.3} | {} | {} | {:.2} |",
            code_cell(&r.name),
            r.outcome.status.name(),
            d.matches,
            d.total,
            d.ratio,
            d.first_divergence.map_or("–".into(), |i| i.to_string()),
            d.divergence.unwrap_or("–"),
            r.seconds
        );
    }
    tables.push((format!("L5 generation ({n})"), t));

    let mut t = String::from(
        "| trial | verdict | max \\|feature diff\\| | cosine | zeroing moves logits by | time (s) |\n|---|---|---|---|---|---|\n",
    );
    let mut n = 0;
    for r in ran() {
        let Some(Detail::Component(d)) = r.outcome.detail.as_deref() else { continue };
        n += 1;
        let _ = writeln!(
            t,
            "| {} | {} | {:.2e} | {:.7} | {:.2e} | {:.2} |",
            code_cell(&r.name),
            r.outcome.status.name(),
            d.max_abs,
            d.cosine,
            d.moved,
            r.seconds
        );
    }
    tables.push((format!("Encoders ({n})"), t));

    let mut t = String::from(
        "| trial | verdict | metric | accuracy | reference | Δ accuracy (points) | allowed (points) | items flipped | max \\|log-likelihood diff\\| | time (s) |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut n = 0;
    for r in ran() {
        let Some(Detail::Accuracy(d)) = r.outcome.detail.as_deref() else { continue };
        n += 1;
        let _ = writeln!(
            t,
            "| {} | {} | {} | {:.2}% | {:.2}% | {:+.2} | ±{:.2} | {}/{} | {} | {:.2} |",
            code_cell(&r.name),
            r.outcome.status.name(),
            d.metric,
            100.0 * d.got,
            100.0 * d.reference,
            d.delta_points,
            d.max_delta_points,
            d.flips.len(),
            d.n,
            sci(d.max_loglik_diff),
            r.seconds
        );
    }
    tables.push((format!("Accuracy gate ({n})"), t));

    let mut t = String::from(
        "| trial | verdict | metric | package | reference | Δ (points) | allowed (points) | worse / better | paired p | detectable (points) | stop cuts | time (s) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut n = 0;
    for r in ran() {
        let Some(Detail::Media(d)) = r.outcome.detail.as_deref() else { continue };
        n += 1;
        let dir = if d.lower_is_better { " (lower is better)" } else { "" };
        let _ = writeln!(
            t,
            "| {} | {} | {}{dir} | {:.2} | {:.2} | {:+.2} | ±{:.2} | {} / {} of {} | {:.3} | {:.2} | {} | {:.2} |",
            code_cell(&r.name),
            r.outcome.status.name(),
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
            r.seconds
        );
    }
    tables.push((format!("Multimodal gate ({n})"), t));

    let _ = writeln!(s, "### Numbers\n");
    for (title, table) in tables.into_iter().filter(|(_, t)| t.lines().count() > 2) {
        let _ = writeln!(s, "<details><summary>{title}</summary>\n\n{table}\n</details>\n");
    }
}

/// Skips, one line per distinct reason, with the trials it covers collapsed under it.
fn skips(s: &mut String, trials: &[Finished]) {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for t in trials.iter().filter(|t| t.outcome.status == Status::Skip) {
        let why = t.outcome.message.trim();
        match groups.iter_mut().find(|(w, _)| *w == why) {
            Some((_, names)) => names.push(&t.name),
            None => groups.push((why, vec![&t.name])),
        }
    }
    if groups.is_empty() {
        return;
    }
    let total: usize = groups.iter().map(|g| g.1.len()).sum();
    let _ = writeln!(s, "### Skipped ({total}, {} reasons)\n", groups.len());
    groups.sort_by_key(|g| std::cmp::Reverse(g.1.len()));
    for (why, names) in groups {
        let list: String = names.iter().map(|n| format!("- {}\n", code(n))).collect();
        let _ = writeln!(
            s,
            "<details><summary>{} × {}</summary>\n\n{list}\n</details>\n",
            names.len(),
            html_text(why.lines().next().unwrap_or(""))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;

    fn done(name: &str, o: Outcome) -> Finished {
        Finished { name: name.into(), outcome: o, seconds: 0.5 }
    }

    /// A failed L5 trial whose judgement gives `reasons`, with `message` as its rendered text.
    fn judged(message: &str, reasons: &[&str]) -> Outcome {
        use crate::judge::verdict::{GenerationReport, Verdict};
        use crate::outcome::Judgement;
        let r = GenerationReport {
            verdict: Verdict::Fail,
            reasons: reasons.iter().map(|r| r.to_string()).collect(),
            expected: vec![1, 2],
            got: vec![1, 3],
            matches: 1,
            ratio: 0.5,
            first_divergence: None,
            teacher_forced: None,
            tolerance: crate::judge::tolerance::Tolerance::builtin(crate::vocab::Level::L5, crate::vocab::Dtype::F32),
        };
        Outcome { judgement: Some(Judgement::Generation(Box::new(r))), ..Outcome::fail(message) }
    }

    #[test]
    fn verdict_first_then_failures_matrix_and_grouped_skips() {
        let fail = judged(
            "q/text/default/f32/L5: L5 FAIL (cases/q.yaml)\n  - step 3 is a real divergence\n  ```x```\n",
            &["step 3 is a real divergence"],
        );
        let rows = [
            done("q/text/default/f32/L4", Outcome { status: Status::Pass, ..Outcome::skip("") }),
            done("q/text/default/f32/L5", fail),
            done("q/text/cpu/f32/L4", Outcome::skip("no CUDA")),
            done("q/text/cpu/f32/L5", Outcome::skip("no CUDA")),
        ];
        let md = markdown(&rows, &Run { device: "cpu".into(), wall_seconds: 1.3 });
        let first = md.lines().next().unwrap();
        assert_eq!(first, "## Conformance: ❌ FAIL: 1 failed · 1 passed · 2 skipped (4 trials on cpu, 1.3 s)");
        let fail_at = md.find("<summary>❌ q/text/default/f32/L5: step 3 is a real divergence</summary>").expect(&md);
        assert!(md[fail_at..].contains("````text\n") && md.contains("  ```x```"), "{md}");
        let matrix_at = md.find("| case · modality | default/f32 | cpu/f32 |").expect(&md);
        assert!(fail_at < matrix_at);
        assert!(md.contains("| q · text | L4 ✅ L5 ❌ | L4 ➖ L5 ➖ |"), "{md}");
        assert!(md.contains("<summary>2 × no CUDA</summary>"), "{md}");
        assert_eq!(md.matches("no CUDA").count(), 1, "a skip reason is written once: {md}");
    }

    #[test]
    fn case_names_and_reasons_are_text_in_the_markdown() {
        let name = "x<img src=a>*b*[l](u)|`q`/text/default/f32/L4";
        let rows = [done(name, Outcome::skip("no <b>CUDA</b> | *bold*"))];
        let md = markdown(&rows, &Run { device: "cpu".into(), wall_seconds: 0.1 });
        // Outside code spans nothing is markup: no tag, no emphasis, no link.
        let outside_code: String = md.lines().filter(|l| !l.starts_with("- `")).collect();
        assert!(!outside_code.contains("<img") && !outside_code.contains("<b>"), "{md}");
        assert!(md.contains("x&lt;img src=a&gt;\\*b\\*\\[l\\](u)\\|\\`q\\` · text"), "{md}");
        assert_eq!(cell("gemma4-mm-tiny · image+audio"), "gemma4-mm-tiny · image+audio", "a plain name stays as it is");
        assert!(md.contains("- `` x<img src=a>*b*[l](u)|`q`/text/default/f32/L4 ``"), "the skip list quotes the name as code: {md}");
        assert_eq!(code("a`b"), "`` a`b ``");
        assert_eq!(code_cell("a|b"), "`a\\|b`");
    }

    #[test]
    fn headline_is_the_first_reason_or_the_first_line_without_the_name() {
        // The judgement's first reason (its first line), never a line searched for in the message.
        let o = judged("t: L5 FAIL\n  - not this", &["3 of 9 tokens differ\n  and more", "later"]);
        assert_eq!(headline("t", &o), "3 of 9 tokens differ");
        assert_eq!(headline("t/case", &Outcome::fail("t/case: the case does not load:\n  - bad")), "the case does not load:");
    }
}
