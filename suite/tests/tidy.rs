//! Tidy checks of the library's architecture, as rust-analyzer keeps its own: which stage folder of `suite/src`
//! may import which, that nothing but the faces imports the orchestrator, and that only `report/` and `trial/`
//! render text. Each rule reads the source, so a new import that breaks one fails here, naming the file and line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Leaves any stage may import, and the stage folders, as `suite/src` lays them out.
const LEAVES: [&str; 6] = ["context", "error", "numeric", "outcome", "paths", "vocab"];
const STAGES: [&str; 7] = ["plan", "feed", "run", "judge", "accuracy", "report", "trial"];

/// Every import edge between the library's top-level modules that is allowed, `from -> to`. A new edge must be
/// added here on purpose; a forbidden one (see the rules below) cannot be.
const ALLOWED: &[(&str, &str)] = &[
    ("accuracy", "error"),
    ("accuracy", "feed"),
    ("accuracy", "judge"),
    ("accuracy", "numeric"),
    ("accuracy", "paths"),
    ("accuracy", "run"),
    ("accuracy", "vocab"),
    ("context", "error"),
    ("context", "vocab"),
    ("feed", "error"),
    ("feed", "paths"),
    ("judge", "accuracy"),
    ("judge", "error"),
    ("judge", "feed"),
    ("judge", "numeric"),
    ("judge", "paths"),
    ("judge", "vocab"),
    ("outcome", "accuracy"),
    ("outcome", "error"),
    ("outcome", "judge"),
    ("paths", "error"),
    ("plan", "accuracy"),
    ("plan", "error"),
    ("plan", "judge"),
    ("plan", "paths"),
    ("plan", "vocab"),
    ("report", "accuracy"),
    ("report", "context"),
    ("report", "feed"),
    ("report", "judge"),
    ("report", "outcome"),
    ("report", "paths"),
    ("report", "vocab"),
    ("run", "context"),
    ("run", "error"),
    ("run", "feed"),
    ("run", "numeric"),
    ("run", "paths"),
    ("run", "vocab"),
    ("trial", "accuracy"),
    ("trial", "context"),
    ("trial", "error"),
    ("trial", "feed"),
    ("trial", "judge"),
    ("trial", "outcome"),
    ("trial", "paths"),
    ("trial", "plan"),
    ("trial", "report"),
    ("trial", "run"),
    ("trial", "vocab"),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// (module, file relative to `src/`, text without its `#[cfg(test)]` module and comments) for every file.
fn sources() -> Vec<(String, String, String)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(src()).unwrap().to_string_lossy().replace('\\', "/");
            let module = rel.split('/').next().unwrap().trim_end_matches(".rs").to_string();
            let text = std::fs::read_to_string(&p).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap();
            let code: String = code.lines().filter(|l| !l.trim_start().starts_with("//")).map(|l| format!("{l}\n")).collect();
            (module, rel, code)
        })
        .collect()
}

/// `crate::<module>` paths a file names, with the line of each.
fn imports(code: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in code.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let tail = &rest[at + "crate::".len()..];
            let name: String = tail.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            rest = &tail[name.len()..];
            if !name.is_empty() {
                out.push((i + 1, name));
            }
        }
    }
    out
}

fn edges() -> BTreeMap<(String, String), Vec<String>> {
    let known: BTreeSet<&str> = LEAVES.iter().chain(STAGES.iter()).copied().collect();
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (module, rel, code) in sources() {
        if module == "lib" {
            continue;
        }
        for (line, to) in imports(&code) {
            if to != module && known.contains(to.as_str()) {
                out.entry((module.clone(), to)).or_default().push(format!("{rel}:{line}"));
            }
        }
    }
    out
}

#[test]
fn stage_imports_are_the_allowed_ones() {
    let allowed: BTreeSet<(String, String)> = ALLOWED.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    let found = edges();
    let unexpected: Vec<String> =
        found.iter().filter(|(e, _)| !allowed.contains(*e)).map(|((a, b), at)| format!("{a} -> {b} (at {})", at.join(", "))).collect();
    assert!(unexpected.is_empty(), "imports between stages that ALLOWED does not list:\n  {}", unexpected.join("\n  "));
    let stale: Vec<String> = allowed.iter().filter(|e| !found.contains_key(*e)).map(|(a, b)| format!("{a} -> {b}")).collect();
    assert!(stale.is_empty(), "ALLOWED lists edges nothing uses (remove them): {}", stale.join(", "));
}

#[test]
fn judges_never_import_the_runtime_and_the_runtime_never_a_judge() {
    for ((from, to), at) in edges() {
        let forbidden =
            matches!((from.as_str(), to.as_str()), ("judge", "run") | ("run", "judge") | ("run", "report") | ("judge", "report"));
        assert!(!forbidden, "{from} imports {to} at {}: judges are pure functions of outputs, and only report/ renders", at.join(", "));
    }
}

#[test]
fn nothing_below_the_orchestrator_imports_it() {
    for (module, rel, code) in sources() {
        if module == "trial" || module == "lib" {
            continue;
        }
        for (line, to) in imports(&code) {
            assert!(to != "trial", "{rel}:{line} imports crate::trial; only the faces (harness, xtask) may");
        }
    }
}

#[test]
fn the_leaves_import_no_stage() {
    for ((from, to), at) in edges() {
        if LEAVES.contains(&from.as_str()) && from != "outcome" {
            assert!(!STAGES.contains(&to.as_str()), "leaf {from} imports stage {to} at {}", at.join(", "));
        }
    }
    // The outcome leaf holds the judges' result types and nothing of the stages that produce or render them.
    for ((from, to), at) in edges() {
        if from == "outcome" {
            assert!(matches!(to.as_str(), "judge" | "accuracy" | "error"), "outcome imports {to} at {}", at.join(", "));
        }
    }
}

#[test]
fn only_report_and_trial_render_text() {
    for (module, rel, code) in sources() {
        if module == "report" || module == "trial" {
            continue;
        }
        for (i, line) in code.lines().enumerate() {
            let renders = line.contains("fmt::Write") || line.contains("fn render") || line.contains("writeln!(");
            assert!(!renders, "{rel}:{}: renders text outside report/ and trial/: {}", i + 1, line.trim());
            assert!(!line.contains("crate::report"), "{rel}:{}: imports report/; only trial/ turns judgements into text", i + 1);
        }
    }
}

#[test]
fn no_flat_re_exports_and_no_environment_reads_in_the_stages() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let re_exports: Vec<&str> = lib.lines().filter(|l| l.starts_with("pub use") && !l.contains("error::{Error, Result}")).collect();
    assert!(re_exports.is_empty(), "lib.rs re-exports modules at the crate root: {re_exports:?}");
    for (module, rel, code) in sources() {
        for (i, line) in code.lines().enumerate() {
            let reads_ci = line.contains("var_os(\"CI\")") || line.contains("var(\"CI\")");
            assert!(!reads_ci || module == "context", "{rel}:{}: reads CI; the run context does, once", i + 1);
            let reads_required = line.contains("\"MOBIUS_REQUIRE_MODELS\"");
            assert!(!reads_required || module == "context", "{rel}:{}: reads MOBIUS_REQUIRE_MODELS outside the run context", i + 1);
            // The run's own settings, as the run context names them: the runtime is handed them, it never reads them.
            for setting in ["MOBIUS_TEST_DEVICE", "MOBIUS_TEST_EP", "MOBIUS_INTRA_THREADS", "MOBIUS_MAX_SESSIONS", "MOBIUS_SPEECH_DECODE"] {
                let reads = line.contains(&format!("\"{setting}\""));
                assert!(!reads || module == "context", "{rel}:{}: reads {setting} outside the run context", i + 1);
            }
        }
    }
}

#[test]
fn the_rules_see_what_they_check() {
    // A rule that reads nothing passes vacuously: make sure the source is there and edges are found.
    let found = edges();
    assert!(sources().len() > 40, "suite/src has {} files", sources().len());
    assert!(found.contains_key(&("trial".to_string(), "judge".to_string())), "{found:?}");
    assert_eq!(imports("use crate::judge::verdict; x(crate::run::y)"), [(1, "judge".to_string()), (1, "run".to_string())]);
}
