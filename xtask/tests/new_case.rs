//! `cargo xtask new-case` takes a model the suite has never seen to green trials in one command: case file, goldens
//! from the Hugging Face reference, the margin report, the trials. The model is a tiny Phi-3, whose checkpoint fuses
//! projections (`qkv_proj`, `gate_up_proj`) that the mobius export keeps apart, and the package is its int4 build:
//! so the same command proves that int4 goldens (the reference with the package's dequantized weights) are made
//! for a fused-projection architecture.
//!
//! It runs the reference, so it needs the reference venv (torch, transformers, mobius). `cargo test` never installs
//! it: the test runs where the venv already exists (MOBIUS_REFERENCE_VENV, or target/reference-venv after any
//! `cargo xtask venv`) and otherwise says it did not run. The YAML that new-case writes is tested without Python in
//! xtask/src/new_case.rs.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn venv_python() -> Option<PathBuf> {
    let venv = std::env::var_os("MOBIUS_REFERENCE_VENV").map_or_else(|| workspace().join("target/reference-venv"), PathBuf::from);
    Some(venv.join("bin/python")).filter(|p| p.is_file())
}

#[test]
fn new_case_takes_a_fused_projection_model_to_green_int4_trials_in_one_command() {
    let Some(python) = venv_python() else {
        eprintln!("SKIPPED: no reference venv (set MOBIUS_REFERENCE_VENV or run `cargo xtask venv`): new-case runs the HF reference");
        return;
    };
    let work = std::env::temp_dir().join(format!("mobius-new-case-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let (model, root) = (work.join("phi3-tiny"), work.join("suite"));
    std::fs::create_dir_all(&root).unwrap();
    let built =
        Command::new(python).args(["-m", "reference.phi3_tiny"]).arg(&model).env("PYTHONPATH", workspace().join("xtask")).output().unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));

    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["new-case", "--root"])
        .arg(&root)
        .arg("--hf")
        .arg(model.join("hf"))
        .arg("--package")
        .arg(model.join("onnx/default-int4"))
        .arg("--external-paths")
        .args(["--max-new-tokens", "8", "--prompt", "class Stack:\n    def __init__(self):\n        self.items = []\n"])
        .env_remove("CI")
        .env("MOBIUS_TEST_DEVICE", "cpu")
        .output()
        .unwrap();
    let log = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{log}");
    let case = std::fs::read_to_string(root.join("cases/causal-lm/phi3-tiny.yaml")).unwrap();
    assert!(case.contains("model_type: \"phi3\"") && case.contains("external_paths: true"), "{case}");
    assert!(case.contains("eps: [default]") && case.contains("dtypes: [int4]"), "variant from the folder name: {case}");
    assert!(log.contains("WROTE      cases/causal-lm/phi3-tiny.yaml"), "{log}");
    for golden in ["phi3-tiny.json", "phi3-tiny_generation.json", "phi3-tiny.int4.json", "phi3-tiny.int4_generation.json"] {
        assert!(log.contains(&format!("SAVED      goldens/causal-lm/{golden}")), "{golden}:\n{log}");
    }
    // The int4 reference ran with the package's own weights, the fused HF parameters rebuilt from their parts.
    let int4 = std::fs::read_to_string(root.join("goldens/causal-lm/phi3-tiny.int4.json")).unwrap();
    assert!(int4.contains("int4 weights of") && int4.contains("dequantized"), "{int4}");
    assert!(log.contains("dequantized=10"), "4 fused or plain Linear weights x 2 layers, the head, the embedding:\n{log}");
    assert!(log.contains("smallest reference margin of phi3-tiny (text, int4 golden):"), "{log}");
    for trial in ["phi3-tiny/text/default/int4/L4", "phi3-tiny/text/default/int4/L5"] {
        assert!(log.contains(&format!("PASS       {trial}")), "{trial} is not green:\n{log}");
    }
    let _ = std::fs::remove_dir_all(&work);
}

fn new_case(root: &Path, args: &[&std::ffi::OsStr]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["new-case", "--root"])
        .arg(root)
        .args(args)
        .env_remove("CI")
        .env("MOBIUS_TEST_DEVICE", "cpu")
        .output()
        .unwrap();
    (out.status.success(), format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// From weights to every variant in one command: a tiny Qwen2 with q/k/v biases (no bundled case has its
/// architecture) built by new-case itself into default and cpu packages, f32 and int4, all four judged green; and a
/// default-initialised one, whose greedy stream loops over two tokens, warned about and refused under --strict.
#[test]
fn new_case_builds_every_variant_from_weights_and_warns_about_a_degenerate_stream() {
    let Some(python) = venv_python() else {
        eprintln!("SKIPPED: no reference venv (set MOBIUS_REFERENCE_VENV or run `cargo xtask venv`): new-case builds with mobius");
        return;
    };
    let work = std::env::temp_dir().join(format!("mobius-new-case-build-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let root = work.join("suite");
    std::fs::create_dir_all(&root).unwrap();
    let make = |dir: &Path, flat: bool| {
        let mut c = Command::new(&python);
        c.args(["-m", "reference.qwen2_tiny"]).arg(dir).env("PYTHONPATH", workspace().join("xtask"));
        if flat {
            c.arg("--flat");
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let (sharp, flat) = (work.join("qwen2-tiny"), work.join("qwen2-flat"));
    make(&sharp, false);
    make(&flat, true);

    let t0 = std::time::Instant::now();
    let prompt = "The quick brown fox jumps over the lazy dog. The quick brown fox";
    let (ok, log) = new_case(
        &root,
        &[
            "--hf".as_ref(),
            sharp.as_os_str(),
            "--eps".as_ref(),
            "default,cpu".as_ref(),
            "--dtypes".as_ref(),
            "f32,int4".as_ref(),
            "--external-paths".as_ref(),
            "--max-new-tokens".as_ref(),
            "8".as_ref(),
            "--prompt".as_ref(),
            prompt.as_ref(),
        ],
    );
    eprintln!("new-case --eps default,cpu --dtypes f32,int4: {:.1}s", t0.elapsed().as_secs_f64());
    assert!(ok, "{log}");
    assert!(log.contains("BUILT      4 packages"), "{log}");
    let case = std::fs::read_to_string(root.join("cases/causal-lm/qwen2-tiny.yaml")).unwrap();
    assert!(case.contains("model_type: \"qwen2\""), "{case}");
    assert!(case.contains("eps: [default, cpu]") && case.contains("dtypes: [f32, int4]"), "{case}");
    assert!(case.contains("package: \"target/cases/qwen2-tiny/onnx/{ep}-{dtype}\""), "inside the root, by template: {case}");
    for variant in ["default-f32", "default-int4", "cpu-f32", "cpu-int4"] {
        assert!(root.join("target/cases/qwen2-tiny/onnx").join(variant).join("genai_config.json").is_file(), "{variant}");
        let (ep, dtype) = variant.split_once('-').unwrap();
        for level in ["L4", "L5"] {
            let trial = format!("qwen2-tiny/text/{ep}/{dtype}/{level}");
            assert!(log.contains(&format!("PASS       {trial}")), "{trial} is not green:\n{log}");
        }
    }
    assert!(!log.contains("DEGENERATE"), "{log}");

    // A default-initialised model: its stream cannot catch a decode bug; new-case says so, and --strict refuses it.
    let args: Vec<std::ffi::OsString> =
        ["--hf", flat.to_str().unwrap(), "--external-paths", "--no-run", "--strict", "--max-new-tokens", "8", "--prompt", prompt]
            .iter()
            .map(Into::into)
            .collect();
    let (ok, log) = new_case(&root, &args.iter().map(|a| a.as_os_str()).collect::<Vec<_>>());
    assert!(log.contains("DEGENERATE qwen2-flat") && log.contains("cannot catch a decode bug"), "{log}");
    assert!(!ok && log.contains("new-case --strict: 1 degenerate golden stream"), "{log}");
    let _ = std::fs::remove_dir_all(&work);
}
