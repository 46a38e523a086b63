//! `cargo xtask ci --out DIR`: run every trial and write summary.md (the pull request's summary), index.html (the
//! reviewer's report, self-contained), summary.json and junit.xml for a CI system. The exit code follows the
//! verdicts: non-zero when any trial fails.

use std::path::PathBuf;
use std::time::Instant;

use mobius_conformance::context::RunContext;
use mobius_conformance::outcome::Finished as Row;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::report::{html, json, junit, summary};
use mobius_conformance::trial;

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
    let plan: Vec<_> = mobius_conformance::trial::matrix::plan(&suite)
        .into_iter()
        .filter(|t| filters.is_empty() || filters.iter().any(|f| t.name.contains(f.as_str())))
        .collect();
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
    write("junit.xml", junit::incomplete(plan.len()))?;
    write("summary.md", summary::incomplete(plan.len()))?;
    write("index.html", html::incomplete(plan.len()))?;
    write("summary.json", json::incomplete(plan.len()))?;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let started = Instant::now();
    let rows = trial::run_parallel(&suite, &plan, &ctx, threads, |f| {
        println!("{:<10} {} ({:.2}s)", f.outcome.status.name(), f.name, f.seconds);
    });
    let wall = started.elapsed().as_secs_f64();
    let run = summary::Run { device: device.to_string(), wall_seconds: wall };
    write("summary.md", summary::markdown(&rows, &run))?;
    write("index.html", html::page(&rows, &run))?;
    write("summary.json", json::summary(&rows, wall, device))?;
    write("junit.xml", junit::report(&rows, wall))?;
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
