//! The seeded fixtures' derived Hugging Face weights are pure functions of committed data and seeds: deriving them
//! with other thread counts and with torch's vectorised kernels restricted to AVX2 (this suite's machines run
//! AVX-512) gives the bytes that fixtures/MANIFEST.json records. A forward pass that decides a weight again (as the
//! multimodal fixture's clamp calibration once did) makes the weights depend on the CPU's summation order, and fails
//! here.
//!
//! It runs the reference, so it needs the reference venv. `cargo test` never installs it: without it the test says it
//! did not run, except under `CI` (where `.ci/run` builds the venv first), where that is a failure.

#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

use mobius_conformance::paths::workspace_root as workspace;

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fixtures folder holding only the committed inputs of a derivation (the MANIFEST, the tokenizer, the media, the
/// clamp bounds), none of the derived files.
fn scratch_fixtures(tag: &str) -> (Scratch, PathBuf) {
    let repo = workspace().join("fixtures");
    let s = Scratch(std::env::temp_dir().join(format!("mobius-derive-{tag}-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&s.0);
    let out = s.0.join("fixtures");
    std::fs::create_dir_all(out.join("gemma4-mm-tiny")).unwrap();
    std::fs::copy(repo.join("MANIFEST.json"), out.join("MANIFEST.json")).unwrap();
    std::fs::copy(repo.join("gemma4-mm-tiny/clamps.json"), out.join("gemma4-mm-tiny/clamps.json")).unwrap();
    for d in ["tokenizer", "media"] {
        std::os::unix::fs::symlink(repo.join(d), out.join(d)).unwrap();
    }
    (s, out)
}

fn derive(python: &Path, out: &Path, env: &[(&str, &str)], threads: &str) -> Output {
    let mut cmd = Command::new(python);
    cmd.args(["-m", "reference.fixtures", "--out"])
        .arg(out)
        .args(["--hf-only", "--threads", threads, "--only", "gemma4-mm-tiny", "qwen3-tiny", "gemma4-tiny"])
        .env("PYTHONPATH", workspace().join("xtask"))
        .env("HF_HUB_OFFLINE", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn log(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn derived_weights_match_the_manifest_under_other_threads_and_kernels() {
    let Some(python) = common::venv_python("deriving the fixtures runs torch") else { return };
    for (tag, env, threads) in [
        ("avx2-1", &[("ATEN_CPU_CAPABILITY", "avx2"), ("OMP_NUM_THREADS", "1")][..], "1"),
        ("native-2", &[("OMP_NUM_THREADS", "2")][..], "2"),
    ] {
        let (_s, out) = scratch_fixtures(tag);
        let o = derive(&python, &out, env, threads);
        let text = log(&o);
        assert!(o.status.success(), "{tag}: the derived weights do not reproduce:\n{text}");
        for name in ["gemma4-mm-tiny", "qwen3-tiny", "gemma4-tiny"] {
            assert!(text.contains(&format!("{name}: hf/ rebuilt")), "{tag}: {name} was not checked:\n{text}");
            assert!(out.join(name).join("hf/model.safetensors").is_file(), "{tag}: {name}");
        }
    }
}

#[test]
fn the_clamp_bounds_are_read_from_their_committed_file_and_a_changed_one_fails_by_name() {
    let Some(python) = common::venv_python("deriving the fixtures runs torch") else { return };
    let (_s, out) = scratch_fixtures("clamps");
    let clamps = out.join("gemma4-mm-tiny/clamps.json");
    let text = std::fs::read_to_string(&clamps).unwrap();
    // One bound one float32 ulp off: the MANIFEST's record of the committed file catches it before any weight is made.
    let (at, _) = text.match_indices("\"input_max\": \"0x1.").next().unwrap();
    let digit = at + "\"input_max\": \"0x1.".len() + 5;
    let mut bytes = text.into_bytes();
    bytes[digit] = if bytes[digit] == b'0' { b'2' } else { b'0' };
    std::fs::write(&clamps, &bytes).unwrap();
    let o = derive(&python, &out, &[], "1");
    assert!(!o.status.success(), "{}", log(&o));
    assert!(log(&o).contains("gemma4-mm-tiny/clamps.json: sha256"), "{}", log(&o));
    // Without the file the derivation stops and says how to get it back; it never calibrates on its own.
    std::fs::remove_file(&clamps).unwrap();
    let o = derive(&python, &out, &[], "1");
    assert!(!o.status.success(), "{}", log(&o));
    assert!(log(&o).contains("clamps.json: missing") && log(&o).contains("--recalibrate-clamps"), "{}", log(&o));
    assert!(!out.join("gemma4-mm-tiny/hf").exists(), "a failed derivation left weights behind");
}
