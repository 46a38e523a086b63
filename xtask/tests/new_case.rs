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
