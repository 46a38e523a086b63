//! `summary.md`: what a reviewer of a pull request reads first, in this order: a one-line verdict with the counts;
//! each failure with its full message (collapsed); the case x modality x EP/dtype matrix with a mark per level; then
//! the rest (the passes to look at, every trial's numbers with one column per metric, the skips grouped by reason).

use std::fmt::Write;

use super::matrix::{self, LEGEND};
use crate::outcome::{Counts, Finished, NumbersTable, Outcome, Status};

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

/// A table cell's number, or a dash.
pub fn num(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "–".into(), f)
}

/// A table cell's number in scientific notation, or a dash.
pub fn sci(v: Option<f64>) -> String {
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

/// One table per kind of trial, each metric in its own column: the tables and their cells are the judgements'
/// (`Judgement::summary_row`), in their tables' order.
fn numbers(s: &mut String, trials: &[Finished]) {
    let mut by_table: Vec<(&NumbersTable, Vec<String>)> = Vec::new();
    for r in trials.iter().filter(|t| t.outcome.status != Status::Skip) {
        for (table, cells) in r.outcome.judgement.iter().chain(&r.outcome.diagnosis).filter_map(|j| j.summary_row()) {
            let row = format!("| {} | {} | {cells} | {:.2} |", code_cell(&r.name), r.outcome.status.name(), r.seconds);
            match by_table.iter_mut().find(|(t, _)| std::ptr::eq(*t, table)) {
                Some((_, rows)) => rows.push(row),
                None => by_table.push((table, vec![row])),
            }
        }
    }
    by_table.sort_by_key(|(t, _)| t.order);
    let tables: Vec<(String, String)> = by_table
        .into_iter()
        .map(|(t, rows)| {
            let columns = t.columns.split(" | ").count() + 3;
            let header = format!("| trial | verdict | {} | time (s) |\n|{}\n", t.columns, "---|".repeat(columns));
            (format!("{} ({})", t.title, rows.len()), header + &rows.join("\n") + "\n")
        })
        .collect();
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
    use crate::outcome::{Judgement, NumbersTable, Outcome};

    fn done(name: &str, o: Outcome) -> Finished {
        Finished { name: name.into(), outcome: o, seconds: 0.5 }
    }

    /// A judgement as a level gives it, with its reasons and one summary row.
    #[derive(Debug)]
    struct Reasons(Vec<String>);

    static TABLE: NumbersTable = NumbersTable { order: 1, title: "Streams", columns: "tokens \\| matching | ratio" };

    impl Judgement for Reasons {
        fn reasons(&self) -> Vec<String> {
            self.0.clone()
        }
        fn summary_row(&self) -> Option<(&'static NumbersTable, String)> {
            Some((&TABLE, "1/2 | 0.500".into()))
        }
    }

    /// A failed L5 trial whose judgement gives `reasons`, with `message` as its rendered text.
    fn judged(message: &str, reasons: &[&str]) -> Outcome {
        let r = Reasons(reasons.iter().map(|r| r.to_string()).collect());
        Outcome { judgement: Some(std::sync::Arc::new(r)), ..Outcome::fail(message) }
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
        // The judgement's own table, with its columns between the verdict and the time.
        assert!(
            md.contains(
                "<summary>Streams (1)</summary>\n\n| trial | verdict | tokens \\| matching | ratio | time (s) |\n|---|---|---|---|---|\n"
            ),
            "{md}"
        );
        assert!(md.contains("| `q/text/default/f32/L5` | FAIL | 1/2 | 0.500 | 0.50 |"), "{md}");
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
