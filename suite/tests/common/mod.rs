//! Helpers shared by the tests that lay out their own suite root in a temp folder.
#![allow(dead_code)] // each test crate uses its own subset

pub mod whisper_tiny;

use std::path::{Path, PathBuf};

use mobius_conformance::context::RunContext;
use mobius_conformance::outcome::Outcome;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::trial;

/// A temp folder, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A fresh, empty folder named for the test and the process.
    pub fn new(tag: &str) -> Scratch {
        let root = std::env::temp_dir().join(format!("mobius-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        Scratch(root)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Copies a folder tree.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.path().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Writes a file, making its folder.
pub fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// Runs the trial `name` of the suite at `root` on the CPU, as a local run (not CI).
pub fn run(root: &Path, name: &str) -> Outcome {
    run_in(root, name, &RunContext::local())
}

/// Runs the trial `name` of the suite at `root` under `ctx`.
pub fn run_in(root: &Path, name: &str, ctx: &RunContext) -> Outcome {
    let suite = Suite::open(root);
    let spec =
        mobius_conformance::trial::matrix::plan(&suite).into_iter().find(|t| t.name == name).unwrap_or_else(|| panic!("no trial {name}"));
    trial::run(&suite, &spec, ctx)
}

/// A CI run on the CPU.
pub fn ci() -> RunContext {
    RunContext { ci: true, ..RunContext::local() }
}

/// Runs every trial of the suite at `root` on the CPU, in name order.
pub fn run_all(root: &Path) -> Vec<(String, Outcome)> {
    let suite = Suite::open(root);
    mobius_conformance::trial::matrix::plan(&suite)
        .iter()
        .map(|spec| (spec.name.clone(), trial::run(&suite, spec, &RunContext::local())))
        .collect()
}

/// A self-contained suite root: the qwen3-tiny case on its cpu-f32 package and tokenizer, with its goldens and the
/// distribution corpus, all copied inside; `edit` rewrites the case text.
pub fn qwen3_tiny_root(tag: &str, edit: impl Fn(String) -> String) -> Scratch {
    let repo = workspace_root();
    let s = Scratch::new(tag);
    copy_tree(&repo.join("fixtures/qwen3-tiny/onnx/cpu-f32"), &s.0.join("pkg"));
    copy_tree(&repo.join("fixtures/tokenizer"), &s.0.join("tok"));
    copy_tree(&repo.join("goldens/causal-lm"), &s.0.join("goldens/causal-lm"));
    copy_tree(&repo.join("fixtures/dist"), &s.0.join("fixtures/dist"));
    let case = std::fs::read_to_string(repo.join("cases/causal-lm/qwen3-tiny.yaml")).unwrap();
    let case: String = case
        .lines()
        .filter(|l| !l.starts_with("reference:") && !l.starts_with("tokenizer:") && !l.contains("cpu/f16:") && !l.contains("cpu/bf16:"))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .replace("eps: [default, cpu]", "eps: [cpu]")
        .replace("dtypes: [f32, f16, bf16, int4]", "dtypes: [f32]")
        .replace("  packages:\n", "")
        .replace("\"fixtures/qwen3-tiny/onnx/{ep}-{dtype}\"", "\"pkg\"");
    write(&s.0.join("cases/causal-lm/qwen3-tiny.yaml"), &edit(case + "tokenizer: \"tok\"\n"));
    s
}
