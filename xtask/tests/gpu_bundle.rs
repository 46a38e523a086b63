//! `cargo xtask gpu-bundle`, tested where there is no GPU: a CPU-flavoured bundle of this build's xtask, in parts of
//! at most the size asked for, each named in the manifest with its sha256; its run.sh unpacks it and runs CPU trials
//! with nothing but the bundle (`MOBIUS_TEST_DEVICE=cpu`), and refuses a damaged or missing part by name.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mobius_conformance::digest::sha256_hex;

const PART_MIB: u64 = 8;

fn scratch(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("mobius-gpu-bundle-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn run_script(bundle: &Path, args: &[&str]) -> Output {
    Command::new("sh")
        .arg(bundle.join("run.sh"))
        .args(args)
        .env("MOBIUS_TEST_DEVICE", "cpu")
        // Nothing from this build's environment: the bundle brings its runtime and its suite.
        .env_remove("ORT_DYLIB_PATH")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("MOBIUS_SUITE_ROOT")
        .output()
        .expect("sh runs")
}

#[test]
fn a_bundle_in_parts_runs_cpu_trials_from_itself_and_refuses_a_damaged_part() {
    let bins = scratch("bin");
    std::fs::copy(env!("CARGO_BIN_EXE_xtask"), bins.join("xtask")).unwrap();
    let out = scratch("out");
    let made = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["gpu-bundle", "--flavor", "cpu", "--part-mib", &PART_MIB.to_string(), "--out"])
        .arg(&out)
        .arg("--bin-dir")
        .arg(&bins)
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&made.stdout), String::from_utf8_lossy(&made.stderr));
    assert!(made.status.success(), "{said}");

    // Parts of at most the size asked for, every one in the manifest with its own sha256, and the whole archive's.
    let manifest = std::fs::read_to_string(out.join("MANIFEST.sha256")).unwrap();
    let mut parts: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("bundle.tar.gz.part-"))
        .collect();
    parts.sort();
    assert!(parts.len() >= 2, "a bundle of this size spans several {PART_MIB} MiB parts: {said}");
    let mut whole = Vec::new();
    for p in &parts {
        let bytes = std::fs::read(p).unwrap();
        assert!(bytes.len() as u64 <= PART_MIB << 20, "{} is {} bytes", p.display(), bytes.len());
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        assert!(manifest.contains(&format!("{}  {name}\n", sha256_hex(&bytes))), "{name} in the manifest:\n{manifest}");
        whole.extend(bytes);
    }
    assert!(manifest.starts_with(&format!("# whole archive: {}", sha256_hex(&whole))), "{manifest}");
    assert!(said.contains(&format!("{} parts of at most {PART_MIB} MiB", parts.len())), "{said}");

    // The script runs the CPU trials from the bundle alone.
    // The genai level runs from the bundled onnxruntime-genai: the runner installs nothing.
    let ran = run_script(
        &out,
        &[
            "--filter",
            "qwen3-tiny/text/default/f32/L4",
            "--filter",
            "qwen3-tiny/text/default/f32/L5",
            "--filter",
            "qwen3-tiny/text/default/f32/genai",
        ],
    );
    let text = format!("{}{}", String::from_utf8_lossy(&ran.stdout), String::from_utf8_lossy(&ran.stderr));
    assert!(ran.status.success(), "{text}");
    assert!(text.contains("3 trials in") && text.contains("3 passed"), "{text}");
    assert!(!text.contains("installing"), "nothing is installed on the runner: {text}");
    assert!(out.join("unpacked/target/onnxruntime-genai/onnxruntime-genai-0.18.0/onnxruntime_genai/libonnxruntime-genai.so").is_file());
    let summary = std::fs::read_to_string(out.join("unpacked/report/summary.json")).unwrap();
    assert!(summary.contains("qwen3-tiny/text/default/f32/L4"), "{summary}");
    assert!(out.join("unpacked/ort/onnxruntime/capi/libonnxruntime.so.1.31.1").is_file());
    // The wheel's Python binding is not the suite's to load: left out.
    let capi: Vec<String> = std::fs::read_dir(out.join("unpacked/ort/onnxruntime/capi"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    assert!(!capi.iter().any(|n| n.starts_with("onnxruntime_pybind11_state")), "{capi:?}");

    // A damaged part is refused by name, before anything runs; so is a missing one.
    let damaged = &parts[1];
    let mut bytes = std::fs::read(damaged).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(damaged, &bytes).unwrap();
    let ran = run_script(&out, &["--filter", "qwen3-tiny/text/default/f32/L4"]);
    let text = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(2), "{text}");
    let name = damaged.file_name().unwrap().to_string_lossy();
    assert!(text.contains(&format!("{name}: FAILED")) && text.contains("differs from MANIFEST.sha256"), "{text}");
    std::fs::remove_file(damaged).unwrap();
    let ran = run_script(&out, &["--filter", "qwen3-tiny/text/default/f32/L4"]);
    let text = String::from_utf8_lossy(&ran.stderr);
    assert!(ran.status.code() == Some(2) && text.contains("parts missing") && text.contains(&*name), "{text}");

    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&bins);
}
