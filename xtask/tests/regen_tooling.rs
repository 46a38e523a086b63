//! `regen-goldens` and `ci` as a user drives them: a run that does nothing, or would destroy its own input, says so
//! and exits non-zero; leftovers of killed runs are cleaned up; a killed `ci` never leaves a report claiming more
//! than ran.

#![cfg(unix)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::raw_from_goldens;
use mobius_conformance::paths::workspace_root;

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A suite root with qwen3-tiny's f32 case and goldens (fixtures linked in, as the sigkill test lays it out), and
/// the reference's raw outputs in `raw/`.
fn setup(tag: &str) -> (Scratch, PathBuf, PathBuf) {
    let repo = workspace_root();
    let s = Scratch(std::env::temp_dir().join(format!("mobius-xtask-{tag}-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&s.0);
    let (root, raw) = (s.0.join("suite"), s.0.join("raw"));
    std::fs::create_dir_all(root.join("cases/causal-lm")).unwrap();
    std::fs::create_dir_all(root.join("goldens/causal-lm")).unwrap();
    std::fs::create_dir_all(&raw).unwrap();
    std::os::unix::fs::symlink(repo.join("fixtures"), root.join("fixtures")).unwrap();
    let text =
        std::fs::read_to_string(repo.join("cases/causal-lm/qwen3-tiny.yaml")).unwrap().replace(", int4]", "]") + "external_paths: true\n";
    std::fs::write(root.join("cases/causal-lm/qwen3-tiny.yaml"), text).unwrap();
    for f in ["qwen3-tiny.json", "qwen3-tiny_generation.json"] {
        std::fs::copy(repo.join("goldens/causal-lm").join(f), root.join("goldens/causal-lm").join(f)).unwrap();
    }
    raw_from_goldens("qwen3-tiny", &raw);
    (s, root, raw)
}

fn xtask(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).env("CI", "true").output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn regen(root: &Path, extra: &[&str]) -> Output {
    let mut args: Vec<&std::ffi::OsStr> = vec!["regen-goldens".as_ref(), "--allow-ci".as_ref(), "--root".as_ref(), root.as_os_str()];
    args.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
    xtask(&args)
}

#[test]
fn keep_raw_into_the_from_raw_folder_is_refused_and_the_raw_files_survive() {
    let (_s, root, raw) = setup("samefolder");
    let file = raw.join("qwen3-tiny.text.safetensors");
    let before = std::fs::read(&file).unwrap();
    let d = raw.to_str().unwrap();
    let o = regen(&root, &["--from-raw", d, "--keep-raw", d]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("--keep-raw") && text(&o).contains("same folder"), "{}", text(&o));
    assert_eq!(std::fs::read(&file).unwrap(), before, "the raw outputs were changed");
    // Spelled differently (a trailing `/.`), it is still the same folder.
    let o = regen(&root, &["--from-raw", d, "--keep-raw", &format!("{d}/.")]);
    assert!(!o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read(&file).unwrap(), before);
}

#[test]
fn a_regen_that_does_nothing_says_so_and_fails() {
    let (_s, root, raw) = setup("nothing");
    let d = raw.to_str().unwrap();
    let o = regen(&root, &["--from-raw", d, "--case", "no-such-case*"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("no-such-case*") && text(&o).contains("matches no case"), "{}", text(&o));
    // A level the case has no golden of.
    let case = root.join("cases/causal-lm/qwen3-tiny.yaml");
    std::fs::write(&case, std::fs::read_to_string(&case).unwrap().replace("level: \"L4+L5\"", "level: \"L4\"")).unwrap();
    let o = regen(&root, &["--from-raw", d, "--level", "L5"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("nothing to regenerate at --level L5"), "{}", text(&o));
    // A nonexistent root.
    let o = regen(&root.join("nope"), &["--from-raw", d]);
    assert!(!o.status.success() && text(&o).contains("not a folder"), "{}", text(&o));
    // The same run that does something exits 0.
    let o = regen(&root, &["--from-raw", d, "--level", "L4"]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn temp_files_of_killed_writers_are_removed_and_ignored_by_git() {
    let (_s, root, raw) = setup("temps");
    let dir = root.join("goldens/causal-lm");
    // A dead writer's temp file (no process has this id), and one of this (live) process.
    let dead = dir.join(".qwen3-tiny.json.tmp.4000000000");
    let live = dir.join(format!(".qwen3-tiny.json.tmp.{}", std::process::id()));
    std::fs::write(&dead, b"half a golden").unwrap();
    std::fs::write(&live, b"being written").unwrap();
    let o = regen(&root, &["--from-raw", raw.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!dead.exists(), "the dead writer's temp file is still there");
    assert!(live.exists(), "a live writer's temp file was removed");
    assert!(text(&o).contains("REMOVED") && text(&o).contains(".qwen3-tiny.json.tmp.4000000000"), "{}", text(&o));
    // Meanwhile git does not offer them for commit.
    let repo = workspace_root();
    if let Ok(o) =
        Command::new("git").arg("-C").arg(&repo).args(["check-ignore", "-q", "goldens/causal-lm/.qwen3-tiny.json.tmp.123"]).output()
        && o.status.code().is_some_and(|c| c <= 1)
    {
        assert!(o.status.success(), "git does not ignore golden temp files: add them to .gitignore");
    }
}

#[test]
fn a_killed_ci_never_leaves_the_previous_all_pass_report() {
    let (_s, root, _raw) = setup("cikill");
    let out = root.join("report");
    std::fs::create_dir_all(&out).unwrap();
    let stale = "{\"complete\": true, \"total\": 99, \"failed\": 0, \"trials\": []}";
    std::fs::write(out.join("summary.json"), stale).unwrap();
    std::fs::write(out.join("junit.xml"), "<testsuites tests=\"99\" failures=\"0\"/>").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["ci", "--out"])
        .arg(&out)
        .arg("--root")
        .arg(&root)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill it as soon as the old report is gone (or it has finished).
    let t0 = std::time::Instant::now();
    while std::fs::read_to_string(out.join("summary.json")).is_ok_and(|t| t == stale) && t0.elapsed().as_secs() < 120 {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let _ = child.kill();
    let _ = child.wait();
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert!(!junit.contains("tests=\"99\""), "the previous run's junit.xml survived: {junit}");
    match json["complete"].as_bool() {
        Some(false) => assert!(junit.contains("incomplete"), "{junit}"),
        // It finished before the kill: then it claims exactly what ran.
        Some(true) => assert_eq!(json["trials"].as_array().map(|a| a.len() as u64), json["total"].as_u64(), "{json}"),
        None => panic!("summary.json says nothing about completeness: {json}"),
    }
}

#[test]
fn ci_refuses_a_filter_matching_nothing_and_a_root_without_cases() {
    let (_s, root, _raw) = setup("cifilter");
    let out = root.join("report");
    let o = xtask(&[
        "ci".as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
        "--root".as_ref(),
        root.as_os_str(),
        "--filter".as_ref(),
        "/tpu/".as_ref(),
    ]);
    assert!(!o.status.success() && text(&o).contains("no trial matches"), "{}", text(&o));
    let nowhere = root.join("nope");
    let o = xtask(&["ci".as_ref(), "--out".as_ref(), out.as_os_str(), "--root".as_ref(), nowhere.as_os_str()]);
    assert!(!o.status.success() && text(&o).contains("not a folder"), "{}", text(&o));
}

#[test]
fn regen_reads_no_reference_outside_the_root_unless_the_case_opts_in() {
    let (_s, root, raw) = setup("outside");
    // `fixtures/` is a symlink out of this root: without the opt-in, the reference's weights are refused.
    let case = root.join("cases/causal-lm/qwen3-tiny.yaml");
    std::fs::write(&case, std::fs::read_to_string(&case).unwrap().replace("external_paths: true\n", "")).unwrap();
    let o = regen(&root, &["--from-raw", raw.to_str().unwrap()]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("field `reference`") && text(&o).contains("outside the suite root"), "{}", text(&o));
}

/// The stored L5 golden with its first step's top logit moved by `delta`.
fn nudge_step_logit(path: &Path, delta: f64) {
    use mobius_conformance::judge::hexfloat::{format_f64, parse_f64};
    let mut g: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let x = parse_f64(g["steps"][0]["logits"][0].as_str().unwrap()).unwrap();
    g["steps"][0]["logits"][0] = format_f64(x + delta).into();
    std::fs::write(path, serde_json::to_vec_pretty(&g).unwrap()).unwrap();
}

#[test]
fn a_golden_that_moved_by_less_than_the_reference_noise_is_unchanged_and_kept_and_a_larger_move_is_a_change() {
    let (_s, root, raw) = setup("noise");
    let d = raw.to_str().unwrap();
    let generation = root.join("goldens/causal-lm/qwen3-tiny_generation.json");
    // The goldens as these raw outputs give them (raw_from_goldens has no float64 run: no `reference_noise`; the
    // positions keep theirs, which bound the steps).
    assert!(regen(&root, &["--from-raw", d, "--force"]).status.success());
    // A few ulp, as another CPU's rounding gives: under the noise the golden records (~1e-6 and up).
    nudge_step_logit(&generation, 2e-7);
    let stored = std::fs::read(&generation).unwrap();
    let o = regen(&root, &["--from-raw", d]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("UNCHANGED  goldens/causal-lm/qwen3-tiny_generation.json (noise only: max Δ")
            && text(&o).contains("at steps[0].logits[0]"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("UNCHANGED  goldens/causal-lm/qwen3-tiny.json\n"), "{}", text(&o));
    assert!(text(&o).contains("counted    L5 tokens and step logits: 0 unchanged, 1 noise only, 0 changed"), "{}", text(&o));
    assert_eq!(std::fs::read(&generation).unwrap(), stored, "a noise-only golden was rewritten");
    // --force still rewrites it (back to exactly what the reference gives).
    let o = regen(&root, &["--from-raw", d, "--force"]);
    assert!(o.status.success() && text(&o).contains("SAVED      goldens/causal-lm/qwen3-tiny_generation.json"), "{}", text(&o));
    assert_ne!(std::fs::read(&generation).unwrap(), stored);
    // Far past the noise: a change, named where, and not written without --force.
    nudge_step_logit(&generation, 1e-3);
    let stored = std::fs::read(&generation).unwrap();
    let o = regen(&root, &["--from-raw", d]);
    assert!(
        text(&o).contains("SKIPPED    goldens/causal-lm/qwen3-tiny_generation.json (differs from the reference now, at steps[0].logits[0]"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read(&generation).unwrap(), stored);
}

/// A stream that diverges from its golden, with no reviewed snapshot: the run's output carries the suite's lines
/// (what differs, the review command) and none of insta's own banners.
#[test]
fn a_snapshot_failure_prints_the_suite_s_lines_and_no_insta_banner() {
    let (_s, root, _raw) = setup("quiet-insta");
    let golden = root.join("goldens/causal-lm/qwen3-tiny_generation.json");
    let mut g: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&golden).unwrap()).unwrap();
    // A token change the step logits cannot see (no per-step data, as mobius' goldens): reviewable.
    g["generated_tokens"][3] = g["steps"][3]["ids"][9].clone();
    g.as_object_mut().unwrap().remove("steps");
    std::fs::write(&golden, serde_json::to_string_pretty(&g).unwrap()).unwrap();
    let out = root.join("report");
    let l5 = "qwen3-tiny/text/cpu/f32/L5";
    let o =
        xtask(&["ci".as_ref(), "--out".as_ref(), out.as_os_str(), "--root".as_ref(), root.as_os_str(), "--filter".as_ref(), l5.as_ref()]);
    let said = text(&o);
    assert!(!o.status.success(), "{said}");
    assert!(said.contains(&format!("FAIL       {l5}")), "{said}");
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("no reviewed snapshot yet") && summary.contains("review: cargo insta review"), "{summary}");
    for banner in ["Stopped on the first failure", "To update snapshots", "Snapshot Summary", "Snapshot file:"] {
        assert!(!said.contains(banner), "insta's `{banner}` in the run's output:\n{said}");
    }
}
