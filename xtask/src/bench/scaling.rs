//! Scaling with the number of cases: the root's cases copied 1, 2 and 4 times into scratch roots, each run on every
//! core.

use std::path::Path;

use mobius_conformance::plan::suite::Suite;
use serde_json::{Value, json};

use super::overhead::{time_trials, tiny_plan};

/// Scaling: 1x, 2x and 4x copies of the root's cases on every core, sessions shared within a size as in a run (each
/// size's root is new, so its sessions are made in its time). A size whose trials fail, whose plan is not its copies
/// of the root's trials, or whose skips do not scale with it (a copy that lost a file) gets no figure; ratios are
/// taken against a passing 1x only.
pub(super) fn scaling_section(
    source: &Path,
    cores: usize,
    table: &mut Vec<String>,
    failures: &mut Vec<String>,
) -> Result<Vec<Value>, String> {
    let planned = tiny_plan(&Suite::open(source)).len();
    let scratch = mobius_conformance::run::bootstrap::target_dir(&crate::context()?.places)
        .join("bench")
        .join(format!("scaling-{}", std::process::id()));
    table.push(String::new());
    table.push(format!(
        "| scaling ({cores} workers, sessions made per size) | trials | passed | xfail | skipped | failed | wall s | vs 1x |"
    ));
    table.push("|---|---|---|---|---|---|---|---|".into());
    let (mut rows, mut notes) = (Vec::new(), Vec::new());
    let mut base: Option<(f64, usize)> = None;
    for copies in [1usize, 2, 4] {
        let root = scratch.join(format!("x{copies}"));
        let made = crate::scratch::replicate(source, &root, copies);
        let t = made.map(|()| time_trials(&root, cores));
        let _ = std::fs::remove_dir_all(&root);
        let t = t?;
        let why = t.refusal().or_else(|| {
            if t.trials != copies * planned {
                Some(format!("{} trials planned, not {copies} x the root's {planned}: the copy is not the cases", t.trials))
            } else {
                base.filter(|&(_, skip)| t.counts.skip != copies * skip).map(|(_, skip)| {
                    format!("{} trials skipped, not {copies} x the 1x's {skip}: the copy lost what they read", t.counts.skip)
                })
            }
        });
        let c = &t.counts;
        let cells = format!("| {copies}x | {} | {} | {} | {} | {} |", t.trials, c.pass + c.ambiguous + c.accepted, c.xfail, c.skip, c.fail);
        let mut v = t.json();
        v["copies"] = json!(copies);
        match why {
            Some(why) => {
                table.push(format!("{cells} - (no figure) | - |"));
                notes.push(format!("scaling {copies}x: {why}: no figure"));
                failures.push(format!("scaling {copies}x: {why}"));
                v["refused"] = json!(why);
            }
            None => {
                if copies == 1 {
                    base = Some((t.wall, c.skip));
                }
                let vs = base.map(|(b, _)| t.wall / b);
                table.push(format!("{cells} {:.3} | {} |", t.wall, vs.map_or("-".into(), |v| format!("{v:.2}x"))));
                v["wall_seconds"] = json!(t.wall);
                v["vs_1x"] = json!(vs);
                // Summed over the workers, so not parts of the wall time.
                v["ort_run_seconds"] = json!(t.ort_runs);
                v["ort_load_seconds"] = json!(t.ort_loads);
                v["genai_seconds"] = json!(t.genai);
            }
        }
        rows.push(v);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    table.append(&mut notes);
    Ok(rows)
}
