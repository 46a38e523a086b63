//! The mutants' results as a table and as JSON.

use std::fmt::Write as _;

use mobius_conformance::outcome::Finished;
use serde_json::{Value, json};

use super::levels::{column_cell, columns, measured};
use super::run::MutantRun;

pub(super) fn run_json(run: &MutantRun) -> Value {
    let m = run.mutant;
    let patched = run.patched.as_ref().ok();
    json!({
        "name": m.name,
        "bug": m.bug,
        "case": m.case,
        "variant": format!("{}/{}", m.ep, m.dtype),
        "file": patched.map(|p| &p.file),
        "patch": patched.map(|p| &p.what),
        "bytes_changed": patched.map(|p| p.bytes_changed),
        "error": run.patched.as_ref().err(),
        "trials": run.rows.iter().map(trial_json).collect::<Vec<_>>(),
        "failed": run.failed().map(|r| r.name.clone()).collect::<Vec<_>>(),
        "caught_by": run.caught_by().map(|r| r.name.clone()),
        "measured": run.caught_by().and_then(measured),
        "module": m.module,
        "localized_to": run.localized().and_then(|(_, got)| got),
        "problem": run.problem(),
    })
}

pub(super) fn trial_json(r: &Finished) -> Value {
    json!({
        "name": r.name,
        "verdict": r.outcome.status.name(),
        "measured": measured(r),
        "max_abs_diff": r.outcome.max_abs_diff,
        "first_divergence": r.outcome.first_divergence,
        "seconds": r.seconds,
        "message": r.outcome.message,
    })
}

fn short(case: &str, name: &str) -> String {
    name.strip_prefix(case).and_then(|n| n.strip_prefix('/')).unwrap_or(name).to_string()
}

pub(super) fn table(runs: &[MutantRun]) -> String {
    let headers: String = columns().map(|(_, h)| format!(" {h} |")).collect();
    let rules = "---|".repeat(7 + columns().count());
    let mut s = format!("| mutant | bug | patched | trials failed | caught by | measured diff | localized to |{headers}\n|{rules}\n");
    for c in runs {
        let m = c.mutant;
        let patched = match &c.patched {
            Ok(p) => format!("`{}`: {}; {} bytes changed", p.file, p.what, p.bytes_changed),
            Err(e) => format!("not made: {e}"),
        };
        let failed: Vec<String> =
            c.failed().map(|r| format!("`{}` ({})", short(m.case, &r.name), measured(r).unwrap_or_else(|| "error".into()))).collect();
        let failed = format!("{}/{}: {}", failed.len(), c.rows.len(), if failed.is_empty() { "none".into() } else { failed.join(", ") });
        let (by, diff) =
            c.caught_by().map_or(("**none**".to_string(), "-".to_string()), |r| (format!("`{}`", r.name), measured(r).unwrap_or_default()));
        // `-` where the case has no trial of the column's level.
        let cells: String = columns()
            .map(|(kind, _)| {
                let cell = c.rows.iter().filter_map(|r| column_cell(kind, r)).collect::<Vec<_>>().join(", ");
                format!(" {} |", if cell.is_empty() { "-".to_string() } else { cell })
            })
            .collect();
        // The module the first failing prefill-type trial named, marked where it is not the mutant's own.
        let localized = match (c.localized(), m.module, m.miss) {
            (None, _, _) => "-".to_string(),
            (Some((_, got)), _, Some(why)) => format!("{} (a miss: {why})", got.map_or("not localized".to_string(), |g| format!("`{g}`"))),
            (Some((_, None)), _, None) => "not localized".to_string(),
            (Some((_, Some(got))), Some(want), None) if got != want => format!("`{got}` (**not** `{want}`)"),
            (Some((_, Some(got))), _, None) => format!("`{got}`"),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {by} | {diff} | {localized} |{cells}",
            m.name,
            m.bug,
            patched.replace('|', "\\|"),
            failed.replace('|', "\\|"),
            diff = diff.replace('|', "\\|")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutants::catalogue::MUTANTS;
    use crate::mutants::levels::tests::{finished, stream};
    use crate::mutants::make::Patched;
    use mobius_conformance::outcome::Status;

    #[test]
    fn the_most_local_failing_check_names_the_catch() {
        let c = MutantRun {
            mutant: &MUTANTS[0],
            patched: Ok(Patched { file: "f".into(), what: "w".into(), bytes_changed: 1 }),
            rows: vec![
                finished("qwen3-tiny/audio/default/f32/L4", Status::Fail, "", Some(1.0)),
                stream("qwen3-tiny/audio/default/f32/L5", 1),
                finished("qwen3-tiny/audio/default/f32/audio_encoder", Status::Fail, "", Some(1.0)),
                finished("qwen3-tiny/text/default/f32/L4", Status::Pass, "", Some(0.0)),
            ],
        };
        assert_eq!(c.caught_by().map(|r| r.name.as_str()), Some("qwen3-tiny/audio/default/f32/audio_encoder"));
        assert_eq!(c.problem(), None);
        let t = table(std::slice::from_ref(&c));
        assert!(t.contains("| 3/4: `audio/default/f32/L4` (max \\|logit diff\\| 1.000e0)"), "{t}");

        let survived = MutantRun { rows: vec![finished("qwen3-tiny/text/default/f32/L4", Status::Ambiguous, "", Some(1.0))], ..c };
        assert!(survived.problem().unwrap().contains("SURVIVED"), "AMBIGUOUS is a pass");
        let errored = MutantRun { rows: vec![finished("qwen3-tiny/text/default/f32/L4", Status::Fail, "boom", None)], ..survived };
        assert!(errored.problem().unwrap().contains("no verdict measured it"));
    }
}
