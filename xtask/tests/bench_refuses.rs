//! `cargo xtask bench` cannot lie: a section whose trials fail names them, prints no figure, and the bench exits
//! non-zero; over a sound root the same sections pass every trial and print their figures. Both run the overhead
//! and scaling sections through `--root` on a scratch suite root holding one tiny case (qwen3-tiny, cpu/f32, L4+L5).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mobius_conformance::paths::workspace_root;
use serde_json::Value;

const CASE: &str = r#"model_id: "mobius-conformance/qwen3-tiny"
model_type: "qwen3"
revision: "fixture"
task_type: "text-generation"
dtype: "float32"
inputs:
  prompts:
    - "Question: What is the capital of France?\nAnswer: The capital of France is Paris, a city known for"
level: "L4+L5"
generation:
  max_new_tokens: 16
  do_sample: false
reference: "fixtures/qwen3-tiny/hf"
tokenizer: "fixtures/tokenizer"
matrix:
  eps: [cpu]
  dtypes: [f32]
  package: "fixtures/qwen3-tiny/onnx/{ep}-{dtype}"
"#;

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())).flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// A suite root under the system's temporary folder with the one case, what it reads, and its two goldens.
fn scratch_root(tag: &str) -> PathBuf {
    let (repo, root) = (workspace_root(), std::env::temp_dir().join(format!("mobius-bench-{tag}-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&root);
    for dir in ["fixtures/qwen3-tiny/onnx/cpu-f32", "fixtures/qwen3-tiny/hf", "fixtures/tokenizer"] {
        copy_tree(&repo.join(dir), &root.join(dir));
    }
    std::fs::create_dir_all(root.join("cases/causal-lm")).unwrap();
    std::fs::write(root.join("cases/causal-lm/qwen3-tiny.yaml"), CASE).unwrap();
    std::fs::copy(repo.join("cases/tolerances.yaml"), root.join("cases/tolerances.yaml")).unwrap();
    std::fs::create_dir_all(root.join("goldens/causal-lm")).unwrap();
    for g in ["qwen3-tiny.json", "qwen3-tiny_generation.json"] {
        std::fs::copy(repo.join("goldens/causal-lm").join(g), root.join("goldens/causal-lm").join(g)).unwrap();
    }
    root
}

/// `cargo xtask bench --only <only> --skip-python --root <root> --json <file>`: its output and report.
fn bench(root: &Path, only: &str) -> (Output, String, Value) {
    let json = root.with_extension("json");
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["bench", "--only", only, "--skip-python", "--root"])
        .arg(root)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("xtask runs");
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let report = std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("no report at {} ({e}):\n{text}", json.display()));
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_dir_all(root);
    (out, text, serde_json::from_str(&report).unwrap())
}

#[test]
fn a_failing_trial_makes_the_bench_report_it_print_no_figure_and_exit_non_zero() {
    let root = scratch_root("corrupt");
    // The golden's top logit doubled wherever it is stored: L4 and genai (judged against it too) must fail; L5 passes.
    let golden = root.join("goldens/causal-lm/qwen3-tiny.json");
    let text = std::fs::read_to_string(&golden).unwrap();
    let top = "\"0x1.5acbea0000000p+2\"";
    assert!(text.contains(top), "the committed golden's top logit moved: update this test");
    std::fs::write(&golden, text.replace(top, "\"0x1.5acbea0000000p+3\"")).unwrap();

    let (out, text, report) = bench(&root, "overhead,scaling");
    assert!(!out.status.success(), "the bench passed over a failing trial:\n{text}");
    let failed = ["qwen3-tiny/text/cpu/f32/L4", "qwen3-tiny/text/cpu/f32/genai"];
    assert!(text.contains("bench: these sections report no figure") && text.contains(failed[0]), "{text}");
    assert!(!text.contains("overhead_ratio ="), "a ratio was printed over failed trials:\n{text}");

    assert_eq!(report["overhead_ratio"], Value::Null, "{report:#}");
    let overhead = &report["overhead"];
    assert_eq!(overhead["failed"], serde_json::json!(failed), "{report:#}");
    assert!(overhead["refused"].is_string() && overhead.get("wall_seconds").is_none(), "{report:#}");
    let scaling = report["scaling"].as_array().unwrap();
    assert_eq!(scaling.len(), 3, "{report:#}");
    for (row, copies) in scaling.iter().zip([1u64, 2, 4]) {
        assert_eq!(row["copies"], copies);
        assert_eq!(row["failed"].as_array().map(Vec::len), Some(2 * copies as usize), "two failed trials per copy: {row:#}");
        assert!(row["refused"].is_string() && row.get("wall_seconds").is_none() && row.get("vs_1x").is_none(), "{row:#}");
    }
}

#[test]
fn over_a_sound_root_every_trial_passes_and_the_figures_are_printed() {
    let (out, text, report) = bench(&scratch_root("sound"), "overhead,scaling");
    assert!(out.status.success(), "{text}");
    let overhead = &report["overhead"];
    let (wall, own) = (overhead["wall_seconds"].as_f64().unwrap(), overhead["suite_seconds"].as_f64().unwrap());
    let engines: f64 = ["ort_run_seconds", "ort_load_seconds", "genai_seconds"].iter().map(|k| overhead[k].as_f64().unwrap()).sum();
    assert!(overhead["ort_run_seconds"].as_f64().unwrap() > 0.0 && own >= 0.0, "{report:#}");
    assert!((wall - engines - own).abs() < 1e-9 && report["overhead_ratio"].as_f64() == Some(own / engines), "{report:#}");
    assert!(
        text.contains("overhead_ratio = the suite's own s / (ONNX Runtime run calls + ONNX Runtime session loads + onnxruntime-genai) s"),
        "{text}"
    );

    let scaling = report["scaling"].as_array().unwrap();
    let trials = scaling[0]["trials"].as_u64().unwrap();
    assert!(trials >= 2, "{report:#}");
    for (row, copies) in scaling.iter().zip([1u64, 2, 4]) {
        assert_eq!(row["trials"].as_u64(), Some(copies * trials), "{row:#}");
        assert_eq!(row["failed"], serde_json::json!([]), "{row:#}");
        assert_eq!(row["skipped"], 0, "{row:#}");
        assert!(row["wall_seconds"].as_f64().is_some() && row["vs_1x"].as_f64().is_some(), "{row:#}");
    }
}

#[test]
fn a_missing_golden_fails_its_trial_instead_of_skipping_it_so_no_figure_is_taken_without_its_work() {
    let root = scratch_root("missing");
    std::fs::remove_file(root.join("goldens/causal-lm/qwen3-tiny_generation.json")).unwrap();
    let (out, text, report) = bench(&root, "overhead");
    assert!(!out.status.success(), "the bench passed without the L5 golden:\n{text}");
    assert_eq!(report["overhead"]["skipped"], 0, "{report:#}");
    assert!(report["overhead"]["failed"].as_array().unwrap().iter().any(|t| t == "qwen3-tiny/text/cpu/f32/L5"), "{report:#}");
    assert_eq!(report["overhead_ratio"], Value::Null, "{report:#}");
}
