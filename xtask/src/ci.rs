//! `cargo xtask ci --out DIR`: run every trial and write summary.md, summary.json and junit.xml for a CI system.
//! The exit code follows the verdicts: non-zero when any trial fails.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use mobius_conformance::bootstrap::workspace_root;
use mobius_conformance::runtime::Device;
use mobius_conformance::trial::{self, Finished as Row, Status, Suite};

pub fn ci(args: &[String]) -> Result<(), String> {
    let mut out: Option<PathBuf> = None;
    let mut root = std::env::var_os("MOBIUS_SUITE_ROOT").map_or_else(workspace_root, PathBuf::from);
    let mut filters = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--out" => out = Some(PathBuf::from(it.next().ok_or("--out needs a directory")?)),
            "--filter" => filters.push(it.next().ok_or("--filter needs a substring")?.clone()),
            "--root" => root = PathBuf::from(it.next().ok_or("--root needs a directory")?),
            other => return Err(format!("ci: unknown option `{other}`")),
        }
    }
    let out = out.ok_or("ci: --out DIR is required")?;
    let device = Device::from_env().map_err(|e| e.to_string())?;
    let suite = Suite::open(&root);
    let plan: Vec<_> =
        suite.plan().into_iter().filter(|t| filters.is_empty() || filters.iter().any(|f| t.name.contains(f.as_str()))).collect();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let started = Instant::now();
    let rows = trial::run_parallel(&suite, &plan, device, threads, |f| {
        println!("{:<10} {} ({:.2}s)", f.outcome.status.name(), f.name, f.seconds);
    });
    let wall = started.elapsed().as_secs_f64();
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let write = |name: &str, text: String| std::fs::write(out.join(name), text).map_err(|e| format!("{}: {e}", out.join(name).display()));
    write("summary.md", markdown(&rows, wall, device))?;
    write("summary.json", json(&rows, wall, device))?;
    write("junit.xml", junit(&rows, wall))?;
    let failed: Vec<&Row> = rows.iter().filter(|r| r.outcome.is_fail()).collect();
    for r in &failed {
        eprintln!("\n{}", r.outcome.message);
    }
    println!("\n{} trials in {wall:.1}s: {}; reports in {}", rows.len(), trial::tally(&rows), out.display());
    if failed.is_empty() { Ok(()) } else { Err(format!("{} trial(s) failed", failed.len())) }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

fn markdown(rows: &[Row], wall: f64, device: Device) -> String {
    let mut s = format!("# Conformance summary\n\n{} trials on {device} in {wall:.1}s\n\n", rows.len());
    s.push_str("| trial | verdict | max abs diff | first divergence | time (s) | note |\n|---|---|---|---|---|---|\n");
    for r in rows {
        let o = &r.outcome;
        let note = match o.status {
            Status::Pass => String::new(),
            _ => first_line(&o.message).replace('|', "\\|"),
        };
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} | {:.2} | {} |",
            r.name,
            o.status.name(),
            o.max_abs_diff.map_or_else(|| "-".into(), |d| format!("{d:.2e}")),
            o.first_divergence.map_or_else(|| "-".into(), |d| d.to_string()),
            r.seconds,
            note
        );
    }
    s
}

fn json(rows: &[Row], wall: f64, device: Device) -> String {
    let trials: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "name": r.name,
                "verdict": r.outcome.status.name(),
                "max_abs_diff": r.outcome.max_abs_diff,
                "first_divergence": r.outcome.first_divergence,
                "seconds": r.seconds,
                "message": r.outcome.message,
            })
        })
        .collect();
    let failed = rows.iter().filter(|r| r.outcome.is_fail()).count();
    serde_json::to_string_pretty(&serde_json::json!({
        "device": device.to_string(),
        "wall_seconds": wall,
        "total": rows.len(),
        "failed": failed,
        "trials": trials,
    }))
    .unwrap()
        + "\n"
}

fn xml_escape(s: &str) -> String {
    s.chars()
        .filter(|&c| c == '\t' || c == '\n' || c == '\r' || c >= ' ')
        .map(|c| match c {
            '&' => "&amp;".to_string(),
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '"' => "&quot;".to_string(),
            c => c.to_string(),
        })
        .collect()
}

fn junit(rows: &[Row], wall: f64) -> String {
    let failures = rows.iter().filter(|r| r.outcome.is_fail()).count();
    let skipped = rows.iter().filter(|r| r.outcome.status == Status::Skip).count();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(s, "<testsuites name=\"mobius-conformance\" tests=\"{}\" failures=\"{failures}\" time=\"{wall:.3}\">", rows.len());
    let _ = writeln!(
        s,
        "  <testsuite name=\"conformance\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\" time=\"{wall:.3}\">",
        rows.len()
    );
    for r in rows {
        let (class, name) = r.name.rsplit_once('/').unwrap_or(("", &r.name));
        let _ = write!(s, "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\"", xml_escape(class), xml_escape(name), r.seconds);
        let msg = xml_escape(&r.outcome.message);
        match r.outcome.status {
            Status::Fail => {
                let _ = writeln!(
                    s,
                    ">\n      <failure message=\"{}\">{msg}</failure>\n    </testcase>",
                    xml_escape(first_line(&r.outcome.message))
                );
            }
            Status::Skip => {
                let _ = writeln!(s, ">\n      <skipped message=\"{msg}\"/>\n    </testcase>");
            }
            Status::Pass => {
                let _ = writeln!(s, "/>");
            }
            _ => {
                let _ = writeln!(s, ">\n      <system-out>{msg}</system-out>\n    </testcase>");
            }
        }
    }
    s.push_str("  </testsuite>\n</testsuites>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suite(tag: &str, cases: &[(&str, &str)]) -> PathBuf {
        let root = std::env::temp_dir().join(format!("mobius-xtask-ci-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (name, text) in cases {
            let p = root.join("cases/t").join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        root
    }

    const SKIPPED: &str =
        "model_id: m\nmodel_type: q\nrevision: r\ntask_type: text-generation\ndtype: float32\nlevel: L4+L5\nskip_reason: not today\n";

    fn run(root: &std::path::Path) -> (Result<(), String>, String, serde_json::Value, String) {
        let out = root.join("report");
        let r = ci(&["--out".into(), out.to_string_lossy().into_owned(), "--root".into(), root.to_string_lossy().into_owned()]);
        let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
        let json = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
        let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
        (r, md, json, junit)
    }

    #[test]
    fn writes_three_reports_and_exit_follows_verdicts() {
        let root = suite("ok", &[("a.yaml", SKIPPED)]);
        let (r, md, json, junit) = run(&root);
        assert!(r.is_ok(), "{r:?}");
        assert!(md.contains("| `a/text/default/f32/L4` | SKIP |"), "{md}");
        // L4, L5 and genai.
        assert_eq!((json["total"].as_u64(), json["failed"].as_u64()), (Some(3), Some(0)));
        assert!(junit.contains("tests=\"3\" failures=\"0\""), "{junit}");

        let root_bad = suite("bad", &[("a.yaml", SKIPPED), ("b.yaml", "model_id: m\nbogus: <&>\n")]);
        let (r, md, json, junit) = run(&root_bad);
        assert!(r.is_err());
        assert!(md.contains("| `b/case` | FAIL |"), "{md}");
        assert_eq!(json["failed"].as_u64(), Some(1));
        assert!(junit.contains("<failure message=") && junit.contains("&lt;&amp;&gt;"), "{junit}");
        let _ = std::fs::remove_dir_all(root);
        let _ = std::fs::remove_dir_all(root_bad);
    }
}
