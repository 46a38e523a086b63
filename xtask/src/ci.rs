//! `cargo xtask ci --out DIR`: run every trial and write summary.md (the pull request's summary), index.html (the
//! reviewer's report, self-contained), summary.json and junit.xml for a CI system. The exit code follows the
//! verdicts: non-zero when any trial fails.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use mobius_conformance::context::RunContext;
use mobius_conformance::judge::detail::Detail;
use mobius_conformance::outcome::Finished as Row;
use mobius_conformance::outcome::Status;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::report::{html, summary};
use mobius_conformance::trial;
use mobius_conformance::vocab::Device;

pub fn ci(args: &[String]) -> Result<(), String> {
    let mut out: Option<PathBuf> = None;
    let mut root = std::env::var_os("MOBIUS_SUITE_ROOT").map_or_else(workspace_root, PathBuf::from);
    let mut filters = Vec::new();
    let mut require = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--require" => require = true,
            "--out" => out = Some(PathBuf::from(it.next().ok_or("--out needs a directory")?)),
            "--filter" => filters.push(it.next().ok_or("--filter needs a substring")?.clone()),
            "--root" => root = PathBuf::from(it.next().ok_or("--root needs a directory")?),
            other => return Err(format!("ci: unknown option `{other}`")),
        }
    }
    let out = out.ok_or("ci: --out DIR is required")?;
    let mut ctx = RunContext::from_env().map_err(|e| e.to_string())?;
    ctx.require_models |= require;
    let device = ctx.device;
    let suite = Suite::open(&root);
    suite.check(&format!("--root {}", root.display())).map_err(|e| format!("ci: {e}"))?;
    let plan: Vec<_> =
        suite.plan().into_iter().filter(|t| filters.is_empty() || filters.iter().any(|f| t.name.contains(f.as_str()))).collect();
    if plan.is_empty() {
        return Err(format!(
            "ci: no trial matches --filter {filters:?}: zero trials would pass; see `cargo test -p harness --test conformance -- --list`"
        ));
    }
    // The last run's reports go first: a run killed from here on leaves a report saying it did not finish, never
    // the previous run's verdicts.
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let write = |name: &str, text: String| write_report(&out.join(name), text.as_bytes());
    // Each is replaced by one rename; summary.json, which the others' readers check last, goes last.
    write("junit.xml", incomplete_junit(plan.len()))?;
    write("summary.md", incomplete_markdown(plan.len()))?;
    write("index.html", incomplete_html(plan.len()))?;
    write("summary.json", incomplete_json(plan.len()))?;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let started = Instant::now();
    let rows = trial::run_parallel(&suite, &plan, &ctx, threads, |f| {
        println!("{:<10} {} ({:.2}s)", f.outcome.status.name(), f.name, f.seconds);
    });
    let wall = started.elapsed().as_secs_f64();
    let run = summary::Run { device: device.to_string(), wall_seconds: wall };
    write("summary.md", summary::markdown(&rows, &run))?;
    write("index.html", html::page(&rows, &run))?;
    write("summary.json", json(&rows, wall, device))?;
    write("junit.xml", junit(&rows, wall))?;
    let failed: Vec<&Row> = rows.iter().filter(|r| r.outcome.is_fail()).collect();
    for r in &failed {
        eprintln!("\n{}", r.outcome.message);
    }
    println!("\n{} trials in {wall:.1}s: {}; reports in {}", rows.len(), mobius_conformance::report::summary::tally(&rows), out.display());
    if failed.is_empty() { Ok(()) } else { Err(format!("{} trial(s) failed", failed.len())) }
}

/// Writes a report whole or not at all (temp file, then rename): a full disk leaves the previous file, never a
/// truncated one.
fn write_report(path: &std::path::Path, bytes: &[u8]) -> Result<(), String> {
    mobius_conformance::judge::golden::write_atomic(path, bytes).map_err(|e| e.to_string())
}

/// What the reports say while a run of `n` trials is under way (and after it, if it was killed).
fn incomplete_markdown(n: usize) -> String {
    format!("# Conformance summary\n\nINCOMPLETE: a run of {n} trials started and did not finish (killed?); no verdict is claimed.\n")
}

fn incomplete_html(n: usize) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Conformance: incomplete</title></head>\
         <body><h1>Conformance report</h1><p>INCOMPLETE: a run of {n} trials started and did not finish (killed?); no \
         verdict is claimed.</p></body></html>\n"
    )
}

fn incomplete_json(n: usize) -> String {
    let v = serde_json::json!({ "complete": false, "total": n, "finished": 0, "failed": 0, "trials": [] });
    serde_json::to_string_pretty(&v).unwrap() + "\n"
}

fn incomplete_junit(n: usize) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"mobius-conformance\" tests=\"1\" failures=\"1\">\n  \
         <testsuite name=\"conformance\" tests=\"1\" failures=\"1\">\n    <testcase classname=\"run\" name=\"incomplete\">\n      \
         <failure message=\"a run of {n} trials started and did not finish\"/>\n    </testcase>\n  </testsuite>\n</testsuites>\n"
    )
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
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
                "accuracy_delta_points": match r.outcome.detail.as_deref() {
                    Some(Detail::Accuracy(a)) => Some(a.delta_points),
                    _ => None,
                },
                "seconds": r.seconds,
                "message": r.outcome.message,
            })
        })
        .collect();
    let failed = rows.iter().filter(|r| r.outcome.is_fail()).count();
    serde_json::to_string_pretty(&serde_json::json!({
        "complete": true,
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
        assert!(md.starts_with("## Conformance: ✅ PASS: 0 failed · 3 skipped (3 trials on cpu,"), "{md}");
        assert!(md.contains("| a · text | L4 ➖ L5 ➖"), "{md}");
        // L4, L5 and genai.
        assert_eq!((json["total"].as_u64(), json["failed"].as_u64()), (Some(3), Some(0)));
        assert!(junit.contains("tests=\"3\" failures=\"0\""), "{junit}");

        let root_bad = suite("bad", &[("a.yaml", SKIPPED), ("b.yaml", "model_id: m\nbogus: <&>\n")]);
        let (r, md, json, junit) = run(&root_bad);
        assert!(r.is_err());
        assert!(md.starts_with("## Conformance: ❌ FAIL:"), "{md}");
        assert!(md.contains("<summary>❌ b/case: the case does not load:</summary>"), "{md}");
        let html = std::fs::read_to_string(root_bad.join("report/index.html")).unwrap();
        assert!(html.contains("data-status=\"FAIL\"><h3>b/"), "{html}");
        // The broken case fails `b/case` and every trial it might have had (so filters find it), nothing else.
        let failed: Vec<&str> =
            json["trials"].as_array().unwrap().iter().filter(|t| t["verdict"] == "FAIL").map(|t| t["name"].as_str().unwrap()).collect();
        assert!(failed.len() > 1 && failed.iter().all(|n| n.starts_with("b/")), "{failed:?}");
        assert_eq!(json["failed"].as_u64(), Some(failed.len() as u64));
        assert_eq!(json["complete"].as_bool(), Some(true));
        assert!(junit.contains("<failure message=") && junit.contains("&lt;&amp;&gt;"), "{junit}");
        let _ = std::fs::remove_dir_all(root);
        let _ = std::fs::remove_dir_all(root_bad);
    }
}
