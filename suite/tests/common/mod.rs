//! Helpers shared by the tests that lay out their own suite root in a temp folder.
#![allow(dead_code)] // each test crate uses its own subset

use std::path::{Path, PathBuf};

use mobius_conformance::context::RunContext;
use mobius_conformance::outcome::Outcome;
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
    let spec = suite.plan().into_iter().find(|t| t.name == name).unwrap_or_else(|| panic!("no trial {name}"));
    trial::run(&suite, &spec, ctx)
}

/// A CI run on the CPU.
pub fn ci() -> RunContext {
    RunContext { ci: true, ..RunContext::local() }
}

/// Runs every trial of the suite at `root` on the CPU, in name order.
pub fn run_all(root: &Path) -> Vec<(String, Outcome)> {
    let suite = Suite::open(root);
    suite.plan().iter().map(|spec| (spec.name.clone(), trial::run(&suite, spec, &RunContext::local()))).collect()
}
