//! A runtime that crashes costs its own trial: the conformance harness runs a suite whose packages name a custom-op
//! library that crashes on purpose (`crash/crash_ops.c`, built here with the C compiler Rust links with), once by
//! SIGSEGV and once by abort(); ONNX Runtime calls it when the suite's own session registers it (L4) and
//! onnxruntime-genai when it loads the package (genai). Each of those trials fails naming its signal, the runtime
//! call it crashed in and the library's last words; the clean case's trials, run in the same harness, pass.
//!
//! This binary is the harness too: run with `--as-conformance` it is `cargo test -p harness --test conformance` over
//! the suite root the test lays out, and with the worker flag it is that harness's worker.

use std::path::Path;
use std::process::Command;

#[path = "../../suite/tests/common/mod.rs"]
mod common;

use common::{Scratch, copy_tree};
use libtest_mimic::{Arguments, Failed, Trial};
use mobius_conformance::paths::workspace_root;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("--as-conformance") => harness::main_with([&args[..1], &args[2..]].concat()),
        Some(flag) if flag == harness::worker::FLAG => harness::main_with(args),
        _ => {
            let trials = vec![Trial::test("a_crashing_runtime_fails_its_own_trial_and_the_others_report", crash_isolation)];
            libtest_mimic::run(&Arguments::from_args(), trials).exit()
        }
    }
}

/// The qwen3-tiny fixture's cpu-f32 package at `to`; with `crash`, its genai_config names the crash library built
/// with `crash` defined (`-DCRASH_ABORT`, or `""` for SIGSEGV) beside its model.
fn package(to: &Path, crash: Option<&str>) {
    copy_tree(&workspace_root().join("fixtures/qwen3-tiny/onnx/cpu-f32"), to);
    let Some(define) = crash else { return };
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/crash/crash_ops.c");
    let mut cc = Command::new("cc");
    cc.args(["-shared", "-fPIC", "-o"]).arg(to.join("libcrash_ops.so")).arg(&source);
    if !define.is_empty() {
        cc.arg(define);
    }
    let status = cc.status().unwrap_or_else(|e| panic!("running `cc` (the C compiler Rust links with) on {}: {e}", source.display()));
    assert!(status.success(), "cc failed on {}: {status}", source.display());
    let config = to.join("genai_config.json");
    let text = std::fs::read_to_string(&config).unwrap();
    let edited =
        text.replacen("\"session_options\": {", "\"session_options\": {\n                \"custom_ops_library\": \"libcrash_ops.so\",", 1);
    assert_ne!(text, edited, "{}: no session_options to edit", config.display());
    std::fs::write(&config, edited).unwrap();
}

/// A case of the qwen3-tiny fixture on the package at `pkg`: L4 (and genai, which follows from it), cpu f32.
fn case(root: &Path, folder: &str, stem: &str, pkg: &str) {
    let repo = workspace_root();
    let text = std::fs::read_to_string(repo.join("cases/causal-lm/qwen3-tiny.yaml")).unwrap();
    let text: String = text
        .lines()
        .filter(|l| !["reference:", "tokenizer:", "distribution:", "level:"].iter().any(|p| l.starts_with(p)))
        .filter(|l| !l.contains("cpu/f16:") && !l.contains("cpu/bf16:") && !l.starts_with("  packages:"))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .replace("eps: [default, cpu]", "eps: [cpu]")
        .replace("dtypes: [f32, f16, bf16, int4]", "dtypes: [f32]")
        .replace("\"fixtures/qwen3-tiny/onnx/{ep}-{dtype}\"", &format!("\"{pkg}\""));
    let file = root.join(format!("cases/{folder}/{stem}.yaml"));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, text + "level: \"L4\"\ntokenizer: \"tok\"\n").unwrap();
    let goldens = root.join(format!("goldens/{folder}"));
    std::fs::create_dir_all(&goldens).unwrap();
    for suffix in [".json", "_generation.json", ".modules.safetensors"] {
        std::fs::copy(repo.join(format!("goldens/causal-lm/qwen3-tiny{suffix}")), goldens.join(format!("{stem}{suffix}"))).unwrap();
    }
}

fn crash_isolation() -> Result<(), Failed> {
    let root = Scratch::new("crash");
    copy_tree(&workspace_root().join("fixtures/tokenizer"), &root.0.join("tok"));
    package(&root.0.join("clean"), None);
    package(&root.0.join("segv"), Some(""));
    package(&root.0.join("abort"), Some("-DCRASH_ABORT"));
    case(&root.0, "causal-lm", "qwen3-tiny", "clean");
    case(&root.0, "crash", "segv", "segv");
    case(&root.0, "crash", "abort", "abort");

    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--as-conformance", "--test-threads", "2"])
        .env("MOBIUS_SUITE_ROOT", &root.0)
        .output()
        .map_err(|e| format!("running the harness: {e}"))?;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let shown = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    let verdict = |name: &str| {
        // libtest pads the names to one width: `test a      ... ok`.
        let verdict =
            |l: &str| l.strip_prefix("test ")?.split_once(" ... ").filter(|(n, _)| n.trim_end() == name).map(|(_, v)| v.to_string());
        stdout.lines().find_map(verdict).unwrap_or_default()
    };
    let failure =
        |name: &str| stdout.split(&format!("---- {name} ----")).nth(1).map(|s| s.split("\n---- ").next().unwrap_or(s)).unwrap_or("");

    for name in ["qwen3-tiny/text/cpu/f32/L4", "qwen3-tiny/text/cpu/f32/genai"] {
        assert_eq!(verdict(name), "ok", "the clean case's {name} passes beside the crashes\n{shown}");
    }
    let crashes = [
        ("segv/text/cpu/f32/L4", "SIGSEGV (signal 11) in onnxruntime: registering the package's custom-op library"),
        ("segv/text/cpu/f32/genai", "SIGSEGV (signal 11) in onnxruntime-genai: loading the model"),
        ("abort/text/cpu/f32/L4", "SIGABRT (signal 6) in onnxruntime: registering the package's custom-op library"),
        ("abort/text/cpu/f32/genai", "SIGABRT (signal 6) in onnxruntime-genai: loading the model"),
    ];
    for (name, how) in crashes {
        assert_eq!(verdict(name), "FAILED", "{name} fails\n{shown}");
        let message = failure(name);
        assert!(
            message.contains(&format!("{name}: the runtime crashed the process: {how}")),
            "{name}'s signal and call:\n{message}\n{shown}"
        );
        assert!(message.contains("| crash_ops: RegisterCustomOps called; crashing on purpose"), "{name}'s last words:\n{message}");
        assert!(message.contains(&format!("cargo test -p harness --test conformance -- --exact {name}")), "{message}");
    }
    assert!(stdout.contains("test result: FAILED. 2 passed; 4 failed"), "every trial reports\n{shown}");
    assert_eq!(out.status.code(), Some(101), "the run fails as libtest's does\n{shown}");
    Ok(())
}
