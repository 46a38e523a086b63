//! The fixtures' derived Hugging Face weights are pure functions of committed data: read back from each fixture's
//! committed f32 package, they are the bytes fixtures/MANIFEST.json records under any thread count and with torch's
//! vectorised kernels switched off (`ATEN_CPU_CAPABILITY=default`, whose torch.randn gives other bits than the AVX2
//! and AVX-512 kernels that seeded them). Re-seeding the weights, or a forward pass deciding one (as the multimodal
//! fixture's clamp calibration once did), fails here.
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

const FIXTURES: [&str; 5] = ["qwen3-tiny", "llama-tiny", "gemma3-tiny", "gemma4-tiny", "gemma4-mm-tiny"];

/// A fixtures folder holding only the committed inputs of a derivation (the MANIFEST, the tokenizer, each fixture's
/// committed hf/ files and its packages), none of the derived files. `copy_package`: that fixture's packages are a
/// copy (to be edited), the others links to the checkout's.
fn scratch_fixtures(tag: &str, copy_package: Option<&str>) -> (Scratch, PathBuf) {
    let repo = workspace().join("fixtures");
    let s = Scratch(std::env::temp_dir().join(format!("mobius-derive-{tag}-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&s.0);
    let out = s.0.join("fixtures");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::copy(repo.join("MANIFEST.json"), out.join("MANIFEST.json")).unwrap();
    std::os::unix::fs::symlink(repo.join("tokenizer"), out.join("tokenizer")).unwrap();
    let committed = git_files(&repo);
    for name in FIXTURES {
        std::fs::create_dir_all(out.join(name).join("hf")).unwrap();
        for f in committed.iter().filter_map(|f| f.strip_prefix(&format!("{name}/hf/"))) {
            std::fs::copy(repo.join(name).join("hf").join(f), out.join(name).join("hf").join(f)).unwrap();
        }
        if copy_package == Some(name) {
            std::fs::create_dir_all(out.join(name).join("onnx")).unwrap();
            let cp = Command::new("cp").arg("-r").arg(repo.join(name).join("onnx/default-f32")).arg(out.join(name).join("onnx")).status();
            assert!(cp.unwrap().success(), "cp -r {name}/onnx/default-f32");
        } else {
            std::os::unix::fs::symlink(repo.join(name).join("onnx"), out.join(name).join("onnx")).unwrap();
        }
    }
    (s, out)
}

/// The committed files under `dir`, relative to it.
fn git_files(dir: &Path) -> Vec<String> {
    let o = Command::new("git").arg("-C").arg(dir).args(["ls-files", "."]).output().unwrap();
    assert!(o.status.success(), "git ls-files: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().lines().map(str::to_string).collect()
}

fn derive(python: &Path, out: &Path, env: &[(&str, &str)], threads: &str) -> Output {
    let mut cmd = Command::new(python);
    cmd.args(["-m", "reference.fixtures", "--out"])
        .arg(out)
        .args(["--hf-only", "--threads", threads, "--only"])
        .args(FIXTURES)
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
        ("scalar-1", &[("ATEN_CPU_CAPABILITY", "default"), ("OMP_NUM_THREADS", "1")][..], "1"),
        ("native-2", &[("OMP_NUM_THREADS", "2")][..], "2"),
    ] {
        let (_s, out) = scratch_fixtures(tag, None);
        let o = derive(&python, &out, env, threads);
        let text = log(&o);
        assert!(o.status.success(), "{tag}: the derived weights do not reproduce:\n{text}");
        for name in FIXTURES {
            assert!(text.contains(&format!("{name}: hf/ rebuilt")), "{tag}: {name} was not checked:\n{text}");
            assert!(out.join(name).join("hf/model.safetensors").is_file(), "{tag}: {name}");
        }
    }
}

/// A package whose weights changed by one float32 ulp no longer gives back the recorded weights: the derivation
/// fails naming the file and the package, and leaves nothing behind.
#[test]
fn a_changed_package_fails_the_derivation_by_name_and_leaves_no_weights() {
    let Some(python) = common::venv_python("deriving the fixtures runs torch") else { return };
    let (_s, out) = scratch_fixtures("changed", Some("gemma4-mm-tiny"));
    let pkg = out.join("gemma4-mm-tiny/onnx/default-f32/decoder");
    let mut m = onnx_bytes::Model::read(&pkg.join("model.onnx")).unwrap();
    let name = m.graph.initializers.iter().find(|t| t.name.contains("layers.0.mlp.down_proj")).expect("down_proj").name.clone();
    let mut w = m.f32s(&name).unwrap();
    w[7] = f32::from_bits(w[7].to_bits() + 1);
    m.set_f32s(&name, &w).unwrap();
    m.write(&pkg).unwrap();
    let o = derive(&python, &out, &[], "1");
    assert!(!o.status.success(), "{}", log(&o));
    let text = log(&o);
    assert!(text.contains("gemma4-mm-tiny/hf/model.safetensors: sha256") && text.contains("onnx/default-f32"), "{text}");
    assert!(!out.join("gemma4-mm-tiny/hf/model.safetensors").exists(), "a failed derivation left weights behind");
}
