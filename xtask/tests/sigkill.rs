//! `regen-goldens` killed with SIGKILL at any moment leaves every golden either old or new: never truncated, never
//! missing. The run is real except for Python: it re-derives the goldens from the reference's raw outputs
//! (`--from-raw`), which this test rebuilds from the committed goldens, so it needs no torch.

#![cfg(unix)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::raw_from_goldens;
use mobius_conformance::paths::workspace_root;

const CASES: [&str; 2] = ["qwen3-tiny", "llama-tiny"];

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn regen(root: &Path, raw: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xtask"));
    c.args(["regen-goldens", "--force", "--allow-ci", "--root"]).arg(root).arg("--from-raw").arg(raw);
    c.stdout(Stdio::null()).stderr(Stdio::null());
    c
}

#[test]
fn sigkill_at_any_moment_leaves_each_golden_old_or_new() {
    let repo = workspace_root();
    let s = Scratch(std::env::temp_dir().join(format!("mobius-sigkill-{}", std::process::id())));
    let (root, raw) = (s.0.join("suite"), s.0.join("raw"));
    std::fs::create_dir_all(root.join("cases/causal-lm")).unwrap();
    std::fs::create_dir_all(root.join("goldens/causal-lm")).unwrap();
    std::fs::create_dir_all(&raw).unwrap();
    // The same relative paths as the repository's cases (goldens record the reference's path).
    std::os::unix::fs::symlink(repo.join("fixtures"), root.join("fixtures")).unwrap();
    let mut goldens = Vec::new();
    for case in CASES {
        // The f32 goldens only: the int4 kernel-parity ones come from another reference run.
        let text = std::fs::read_to_string(repo.join(format!("cases/causal-lm/{case}.yaml"))).unwrap().replace(", int4]", "]")
            + "external_paths: true\n";
        std::fs::write(root.join(format!("cases/causal-lm/{case}.yaml")), text).unwrap();
        raw_from_goldens(case, &raw);
        for f in [format!("{case}.json"), format!("{case}_generation.json")] {
            let new = std::fs::read(repo.join("goldens/causal-lm").join(&f)).unwrap();
            let mut old = new.clone();
            old.extend_from_slice(b" \n"); // a different, still valid, earlier golden
            goldens.push((root.join("goldens/causal-lm").join(&f), old, new));
        }
    }
    let reset = |g: &[(PathBuf, Vec<u8>, Vec<u8>)]| g.iter().for_each(|(p, old, _)| std::fs::write(p, old).unwrap());

    // A full run turns every old golden into the new one (and so proves the raw outputs reproduce them).
    reset(&goldens);
    let t0 = Instant::now();
    assert!(regen(&root, &raw).status().unwrap().success());
    let full = t0.elapsed();
    // The raw outputs rebuilt from a golden hold no float64 reference (only its summary is committed), so the
    // regenerated golden lacks `reference_noise`; everything else must come back as committed.
    let without_noise = |bytes: &[u8]| {
        let mut v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
        if let Some(o) = v.as_object_mut() {
            o.remove("reference_noise");
        }
        v
    };
    for (p, _, new) in &mut goldens {
        let got = std::fs::read(&*p).unwrap();
        assert!(without_noise(&got) == without_noise(new), "{} was not regenerated from the raw outputs", p.display());
        *new = got;
    }

    let (mut saw_old, mut saw_new, mut x) = (0, 0, 0x9e3779b97f4a7c15u64);
    for round in 0..40 {
        reset(&goldens);
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let delay = Duration::from_micros((x >> 33) % (full.as_micros() as u64 + 1));
        let mut child = regen(&root, &raw).spawn().unwrap();
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        for (p, old, new) in &goldens {
            let now =
                std::fs::read(p).unwrap_or_else(|e| panic!("round {round} (killed after {delay:?}): {} is missing: {e}", p.display()));
            assert!(now == *old || now == *new, "round {round} (killed after {delay:?}): {} is torn ({} bytes)", p.display(), now.len());
            if now == *new { saw_new += 1 } else { saw_old += 1 }
        }
    }
    eprintln!("40 kills within a {full:?} run: {saw_old} goldens found old, {saw_new} new, none torn or missing");
    // The kills landed before, during and after the writes.
    assert!(saw_old > 0 && saw_new > 0, "old {saw_old}, new {saw_new}: the kills never fell inside the run (full run {full:?})");
    // The temp files the killed runs left are removed by the next run (and git ignores them meanwhile).
    assert!(regen(&root, &raw).status().unwrap().success());
    let stray: Vec<_> = std::fs::read_dir(root.join("goldens/causal-lm"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(stray.is_empty(), "temp files left in goldens/: {stray:?}");
}
