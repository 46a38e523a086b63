//! Tidy checks of the library's architecture, as rust-analyzer keeps its own. They state rules, not today's edges:
//! every file of `suite/src` belongs to a stage, each stage has a rank, and a file imports only stages of a lower rank
//! (or its own stage's files); the judges are pure; the leaves are leaves; only the report stages word a judgement;
//! every environment read goes through the run context; nothing re-exports. Each rule is a function over the
//! source, run on the real tree and, in `rules_fail_on_planted_violations`, on a planted violation it must catch.

use std::path::{Path, PathBuf};

/// The stages, lowest first. A file may import files of a stage of a lower rank, and files of its own module.
const RANKS: &[(&str, u32)] = &[
    ("error", 0),
    ("digest", 0),
    ("vocab", 1),
    ("paths", 1),
    ("context", 2),
    ("outcome", 2),
    ("feed", 3),
    ("judge", 4),
    ("run", 4),
    ("accuracy", 5),
    // A level's pure files (`level/<x>/*.rs` but its glue and its words): its golden's format, its statistics,
    // its verdict, the numbers it keeps.
    ("level-pure", 6),
    ("report", 7),
    // A level's words and plots (`level/<x>/render.rs`).
    ("level-render", 8),
    ("plan", 9),
    // The table and the kit (`level/*.rs`), and a level's glue (`level/<x>/mod.rs`, `level/<x>/*_trial.rs`).
    ("level", 10),
    ("trial", 11),
];

/// The leaves: the shared vocabulary any stage may import. They import nothing but lower leaves.
const LEAVES: &[&str] = &["error", "digest", "vocab", "paths", "context", "outcome"];

/// The stages that word judgements; outside them a judgement is data.
const REPORTING: &[&str] = &["report", "level-render"];

/// The stages of pure functions of (outputs, golden, policy): they never run a package, word a report, or plan.
const PURE: &[&str] = &["judge", "level-pure"];

/// One source file: its path below `src/` (with `/`), and its code without comments and its `#[cfg(test)]` module.
#[derive(Clone)]
struct File {
    rel: String,
    code: String,
}

impl File {
    fn new(rel: &str, code: &str) -> File {
        let code = code.split("#[cfg(test)]").next().unwrap_or_default();
        let code = code.lines().map(|l| if l.trim_start().starts_with("//") { "" } else { l }).collect::<Vec<_>>().join("\n");
        File { rel: rel.to_string(), code }
    }

    /// The module path of the file: `level/dist/render.rs` -> [level, dist, render]; `level/dist/mod.rs` -> [level, dist].
    fn module(&self) -> Vec<String> {
        let mut parts: Vec<String> = self.rel.trim_end_matches(".rs").split('/').map(str::to_string).collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        parts
    }

    fn stage(&self) -> &'static str {
        stage_of(&self.rel)
    }
}

/// The stage of a file below `src/`.
fn stage_of(rel: &str) -> &'static str {
    let parts: Vec<&str> = rel.split('/').collect();
    let name = |s: &str| RANKS.iter().find(|(n, _)| *n == s).map_or("unknown", |(n, _)| n);
    match parts.as_slice() {
        ["level", _] => "level",
        ["level", _, file, ..] if *file == "mod.rs" || file.ends_with("_trial.rs") => "level",
        ["level", _, file, ..] if file.starts_with("render") => "level-render",
        ["level", _, _, ..] => "level-pure",
        [top, ..] => name(top.trim_end_matches(".rs")),
        [] => "unknown",
    }
}

fn rank(stage: &str) -> u32 {
    RANKS.iter().find(|(n, _)| *n == stage).map_or(u32::MAX, |(_, r)| *r)
}

/// The level folder a file sits in (`level/dist/...` -> `dist`), if any.
fn level_folder(rel: &str) -> Option<&str> {
    let mut parts = rel.split('/');
    (parts.next() == Some("level")).then(|| parts.next()).flatten().filter(|_| rel.matches('/').count() >= 2)
}

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

/// Every file of the library, but `lib.rs` (which only declares the modules).
fn sources() -> Vec<File> {
    let mut paths = Vec::new();
    rust_files(&src(), &mut paths);
    paths
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(src()).unwrap().to_string_lossy().replace('\\', "/");
            File::new(&rel, &std::fs::read_to_string(&p).unwrap())
        })
        .filter(|f| f.rel != "lib.rs")
        .collect()
}

/// The module paths a file names (`crate::a::b`, `super::c`, `self::d` resolved against the file's module), with
/// the line of each.
fn imports(f: &File) -> Vec<(usize, Vec<String>)> {
    let module = f.module();
    let here_is_dir = f.rel.ends_with("mod.rs");
    let mut out = Vec::new();
    for (i, line) in f.code.lines().enumerate() {
        for start in ["crate::", "super::", "self::"] {
            let mut rest = line;
            while let Some(at) = rest.find(start) {
                let before = rest[..at].chars().last();
                let tail = &rest[at + start.len()..];
                let span: String = tail.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':').collect();
                let path: Vec<String> = span.split("::").map(str::to_string).take_while(|s| !s.is_empty()).collect();
                rest = tail;
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') || path.is_empty() {
                    continue;
                }
                let mut full: Vec<String> = match start {
                    "crate::" => Vec::new(),
                    // In `mod.rs` the module is the folder; elsewhere a file's `super` is its folder's module.
                    "super::" if here_is_dir => module[..module.len().saturating_sub(1)].to_vec(),
                    "super::" => module[..module.len().saturating_sub(1)].to_vec(),
                    _ if here_is_dir => module.clone(),
                    _ => module.clone(),
                };
                full.extend(path);
                out.push((i + 1, full));
            }
        }
    }
    out
}

/// The file a module path lands in: the longest prefix that is a file (or a folder's `mod.rs`) among `files`.
fn target<'a>(files: &'a [File], path: &[String]) -> Option<&'a File> {
    (1..=path.len()).rev().find_map(|n| {
        let p = path[..n].join("/");
        files.iter().find(|f| f.rel == format!("{p}.rs") || f.rel == format!("{p}/mod.rs"))
    })
}

/// Every import between two files: (from, to, line).
fn edges(files: &[File]) -> Vec<(&File, &File, usize)> {
    let mut out = Vec::new();
    for f in files {
        for (line, path) in imports(f) {
            if let Some(t) = target(files, &path).filter(|t| t.rel != f.rel) {
                out.push((f, t, line));
            }
        }
    }
    out
}

/// Rule 1: imports only go down. A file imports files of a lower-ranked stage, or of its own stage and module
/// (`judge/` files one another); a level's files import their own folder's, the table's and the kit's, never another
/// level's.
fn imports_go_down(files: &[File]) -> Vec<String> {
    let mut out = Vec::new();
    for (f, t, line) in edges(files) {
        let (a, b) = (f.stage(), t.stage());
        let same_module = f.module().first() == t.module().first();
        let ok = if f.rel.starts_with("level/") && t.rel.starts_with("level/") {
            let (fa, ta) = (level_folder(&f.rel), level_folder(&t.rel));
            // Within one level (or the table and the kit), by rank; the table and the kit may import every level.
            let related = fa == ta || fa.is_none() || ta.is_none();
            let table_or_kit = fa.is_none() && a == "level";
            related && (rank(b) < rank(a) || a == b || table_or_kit)
        } else {
            rank(b) < rank(a) || (a == b && same_module)
        };
        if !ok {
            out.push(format!("{}:{line} ({a}, rank {}) imports {} ({b}, rank {})", f.rel, rank(a), t.rel, rank(b)));
        }
    }
    out
}

/// Rule 2: the judges are pure: no runtime, no words, no plan, no level glue.
fn judges_are_pure(files: &[File]) -> Vec<String> {
    let forbidden = ["run", "report", "level-render", "plan", "level", "trial"];
    edges(files)
        .into_iter()
        .filter(|(f, t, _)| PURE.contains(&f.stage()) && forbidden.contains(&t.stage()))
        .map(|(f, t, line)| format!("{}:{line}: a judge imports {} ({}); judges are pure functions of outputs", f.rel, t.rel, t.stage()))
        .collect()
}

/// Rule 3: the leaves are leaves: they import no stage.
fn leaves_are_leaves(files: &[File]) -> Vec<String> {
    edges(files)
        .into_iter()
        .filter(|(f, t, _)| LEAVES.contains(&f.stage()) && !LEAVES.contains(&t.stage()))
        .map(|(f, t, line)| format!("{}:{line}: leaf {} imports {} ({})", f.rel, f.stage(), t.rel, t.stage()))
        .collect()
}

/// What builds an error: a `format!` whose statement holds one of these builds an error's message.
const BUILDS_AN_ERROR_OR_A_NAME: &[&str] = &["Error::new(", "bail!(", ".context(", "Err(", "panic!(", ".expect("];

/// The statements of `code` (split at `;`, `{` and `}` outside strings), with the line each starts on.
fn statements(code: &str) -> Vec<(usize, String)> {
    let (mut out, mut cur, mut line, mut start) = (Vec::new(), String::new(), 1, 1);
    let (mut in_str, mut escaped) = (false, false);
    for c in code.chars() {
        if c == '\n' {
            line += 1;
        }
        if in_str {
            in_str = c != '"' || escaped;
            escaped = c == '\\' && !escaped;
            cur.push(c);
            continue;
        }
        if c == '"' {
            in_str = true;
        }
        if matches!(c, ';' | '{' | '}') {
            cur.push(c);
            out.push((start, std::mem::take(&mut cur)));
            start = line;
        } else {
            cur.push(c);
        }
    }
    out.push((start, cur));
    out
}

/// Where a judgement's reasons are held (as [`tight`] writes code): a statement with one of these that also builds
/// text words a reason.
const HOLDS_A_REASON: &[&str] = &["reasons.push(", "reasons.extend(", "reasons:vec![", "reason:", "reason="];

/// `code` without its whitespace and its strings' contents, so `r.reasons\n    .push(` reads as `r.reasons.push(` and
/// no string's text reads as code.
fn tight(code: &str) -> String {
    let (mut out, mut in_str, mut escaped) = (String::new(), false, false);
    for c in code.chars() {
        if in_str {
            in_str = c != '"' || escaped;
            escaped = c == '\\' && !escaped;
        } else if c == '"' {
            in_str = true;
        } else if !c.is_whitespace() {
            out.push(c);
        }
    }
    out
}

/// The stage that builds no text but errors (their messages name the file and the field): the orchestrator hands
/// every outcome's words to `report/`.
const NO_TEXT: &[&str] = &["trial"];

/// Rule 4: only the reporting stages word a judgement. Anywhere else: no `fmt::Write` and no `writeln!`; `write!`
/// only in a value's own `Display` (its spelling, as a case file states it); no judgement's reasons worded nor kept
/// as text (a judge's reasons are typed data the report words). In the orchestrator, `format!` only builds an error.
fn only_reports_render(files: &[File]) -> Vec<String> {
    let mut out = Vec::new();
    for f in files.iter().filter(|f| !REPORTING.contains(&f.stage())) {
        let mut in_display = 0usize;
        for (i, l) in f.code.lines().enumerate() {
            if l.contains("fmt::Write") || l.contains("writeln!(") {
                out.push(format!("{}:{}: renders text (fmt::Write, writeln!): {}", f.rel, i + 1, l.trim()));
            }
            if l.contains("impl fmt::Display for") || l.contains("impl std::fmt::Display for") {
                in_display = 1;
            } else if in_display > 0 {
                in_display += l.matches('{').count();
                in_display = in_display.saturating_sub(l.matches('}').count());
            }
            if l.contains("write!(") && in_display == 0 {
                out.push(format!("{}:{}: write! outside a Display: {}", f.rel, i + 1, l.trim()));
            }
            if l.contains("reasons: Vec<String>") {
                out.push(format!("{}:{}: keeps a judgement's reasons as text; a judge keeps them as data: {}", f.rel, i + 1, l.trim()));
            }
        }
        for (line, s) in statements(&f.code) {
            if s.contains("format!(") && HOLDS_A_REASON.iter().any(|w| tight(&s).contains(w)) {
                let first = s.trim().lines().next().unwrap_or_default().trim().to_string();
                out.push(format!("{}:{line}: words a judgement's reason; a judge keeps it as data: {first}", f.rel));
            }
        }
        if !NO_TEXT.contains(&f.stage()) {
            continue;
        }
        for (line, s) in statements(&f.code) {
            if s.contains("format!(") && !BUILDS_AN_ERROR_OR_A_NAME.iter().any(|m| s.contains(m)) {
                let first = s.trim().lines().next().unwrap_or_default().trim().to_string();
                out.push(format!("{}:{line}: format! that builds neither an error nor a name: {first}", f.rel));
            }
        }
    }
    out
}

/// Rule 5: every environment read goes through the run context (`context.rs`), read once by the faces.
fn environment_through_the_context(files: &[File]) -> Vec<String> {
    let reads = ["env::var(", "env::var_os(", "env::vars(", "var_os(\"", "var(\""];
    let mut out = Vec::new();
    for f in files.iter().filter(|f| f.rel != "context.rs") {
        for (i, l) in f.code.lines().enumerate() {
            if reads.iter().any(|r| l.contains(r)) || l.contains("::from_env()") {
                out.push(format!("{}:{}: reads the environment; the run context does, once: {}", f.rel, i + 1, l.trim()));
            }
        }
    }
    out
}

/// Rule 6: nothing re-exports: a path names its stage (`mobius_conformance::judge::verdict`). A crate-internal
/// macro is exported by `pub(crate) use <macro>;` beside its `macro_rules!`, the one form allowed.
fn no_re_exports(files: &[File]) -> Vec<String> {
    let mut out = Vec::new();
    for f in files {
        for (i, l) in f.code.lines().enumerate() {
            let t = l.trim_start();
            let exported =
                t.strip_prefix("pub use ").or_else(|| t.strip_prefix("pub(crate) use ")).or_else(|| t.strip_prefix("pub(super) use "));
            let Some(what) = exported else { continue };
            let name = what.trim_end_matches(';').trim();
            let own_macro = f.code.contains(&format!("macro_rules! {name}"));
            if !own_macro {
                out.push(format!("{}:{}: re-exports `{name}`", f.rel, i + 1));
            }
        }
    }
    out
}

fn fail_on(rule: &str, found: Vec<String>) {
    assert!(found.is_empty(), "{rule}:\n  {}", found.join("\n  "));
}

#[test]
fn every_file_has_a_stage_with_a_rank() {
    let unknown: Vec<String> = sources().iter().filter(|f| rank(f.stage()) == u32::MAX).map(|f| f.rel.clone()).collect();
    assert!(unknown.is_empty(), "files of no stage (add the stage to RANKS): {unknown:?}");
}

#[test]
fn imports_only_go_down() {
    fail_on("imports that do not go down", imports_go_down(&sources()));
}

#[test]
fn the_judges_are_pure() {
    fail_on("judges that are not pure", judges_are_pure(&sources()));
}

#[test]
fn the_leaves_are_leaves() {
    fail_on("leaves that import a stage", leaves_are_leaves(&sources()));
}

#[test]
fn only_the_reporting_stages_word_a_judgement() {
    fail_on("text built outside report/ and the levels' render.rs", only_reports_render(&sources()));
}

#[test]
fn every_environment_read_goes_through_the_run_context() {
    fail_on("environment reads outside context.rs", environment_through_the_context(&sources()));
}

#[test]
fn nothing_re_exports() {
    fail_on("re-exports", no_re_exports(&sources()));
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let flat: Vec<&str> = lib.lines().filter(|l| l.starts_with("pub use") && !l.contains("error::{Error, Result}")).collect();
    assert!(flat.is_empty(), "lib.rs re-exports modules at the crate root: {flat:?}");
}

/// Each rule catches a violation planted in a copy of the real tree, and names the planted file.
#[test]
fn rules_fail_on_planted_violations() {
    let real = sources();
    let with = |rel: &str, code: &str| {
        let mut files: Vec<File> = real.iter().filter(|f| f.rel != rel).cloned().collect();
        let base = real.iter().find(|f| f.rel == rel).map_or(String::new(), |f| f.code.clone());
        files.push(File::new(rel, &format!("{base}\n{code}\n")));
        files
    };
    let caught = |found: Vec<String>, rel: &str| found.iter().any(|v| v.starts_with(rel));
    // A stage importing one above it, and one level importing another.
    assert!(caught(imports_go_down(&with("plan/case.rs", "use crate::trial::matrix;")), "plan/case.rs"));
    assert!(caught(imports_go_down(&with("feed/audio.rs", "use crate::accuracy::gate;")), "feed/audio.rs"));
    assert!(caught(imports_go_down(&with("level/dist/mod.rs", "use crate::level::prefill::judged;")), "level/dist/mod.rs"));
    assert!(caught(imports_go_down(&with("level/dist/judge.rs", "use super::render;")), "level/dist/judge.rs"));
    assert!(caught(imports_go_down(&with("run/generate.rs", "use crate::judge::verdict;")), "run/generate.rs"));
    // A judge that runs a package, or words its verdict.
    assert!(caught(judges_are_pure(&with("judge/verdict.rs", "use crate::run::sessions;")), "judge/verdict.rs"));
    assert!(caught(judges_are_pure(&with("level/dist/stats.rs", "use crate::report::svg;")), "level/dist/stats.rs"));
    // A leaf that imports a stage (the outcome leaf included).
    assert!(caught(leaves_are_leaves(&with("outcome.rs", "use crate::judge::verdict::Verdict;")), "outcome.rs"));
    assert!(caught(leaves_are_leaves(&with("vocab.rs", "use crate::plan::case::Case;")), "vocab.rs"));
    // Text outside the reporting stages: a judge's words, the orchestrator's, a writer.
    assert!(caught(
        only_reports_render(&with("judge/verdict.rs", "fn f(reasons: &mut Vec<String>) { reasons.push(format!(\"{}\", 1)); }")),
        "judge/verdict.rs"
    ));
    assert!(caught(
        only_reports_render(&with("accuracy/gate.rs", "fn f(r: &mut R) {\n    r.reasons\n        .push(format!(\"{}\", 1));\n}")),
        "accuracy/gate.rs"
    ));
    assert!(caught(only_reports_render(&with("level/dist/judge.rs", "pub struct R { pub reasons: Vec<String> }")), "level/dist/judge.rs"));
    assert!(caught(
        only_reports_render(&with("level/genai/judge.rs", "fn f() -> D { D { reason: format!(\"{}\", 1) } }")),
        "level/genai/judge.rs"
    ));
    assert!(caught(only_reports_render(&with("trial/mod.rs", "fn f() -> String { format!(\"{} FAIL\", 1) }")), "trial/mod.rs"));
    assert!(caught(
        only_reports_render(&with("judge/tolerance.rs", "fn f(s: &mut String) { let _ = write!(s, \"x\"); }")),
        "judge/tolerance.rs"
    ));
    assert!(caught(only_reports_render(&with("level/dist/mod.rs", "use std::fmt::Write;")), "level/dist/mod.rs"));
    // An environment read in a stage, and a re-export anywhere.
    assert!(caught(environment_through_the_context(&with("run/runtime.rs", "fn f() { let _ = std::env::var(\"X\"); }")), "run/runtime.rs"));
    assert!(caught(environment_through_the_context(&with("plan/hub.rs", "fn f() { let _ = Api::from_env(); }")), "plan/hub.rs"));
    assert!(caught(no_re_exports(&with("accuracy/gate.rs", "pub use crate::accuracy::policy::GatePolicy;")), "accuracy/gate.rs"));
    // And what each rule allows still passes: an error's message, a value's Display, a macro's export.
    assert!(!caught(only_reports_render(&with("trial/matrix.rs", "fn f() -> Result<()> { bail!(\"{}\", 1) }")), "trial/matrix.rs"));
    assert!(!caught(
        only_reports_render(&with(
            "judge/verdict.rs",
            "fn f(reasons: &mut Vec<R>) { reasons.push(R::Cosine { cosine: 0.5, floor: 0.9 }); }"
        )),
        "judge/verdict.rs"
    ));
    assert!(no_re_exports(&real).is_empty());
}

#[test]
fn the_rules_see_what_they_check() {
    // A rule that reads nothing passes vacuously: make sure the source is there and the edges are found.
    let files = sources();
    assert!(files.len() > 80, "suite/src has {} files", files.len());
    let found = edges(&files);
    let has = |from: &str, to: &str| found.iter().any(|(f, t, _)| f.rel == from && t.rel == to);
    assert!(has("trial/mod.rs", "level/mod.rs") && has("level/dist/render.rs", "level/dist/judge.rs"), "edges read");
    assert!(has("level/dist/mod.rs", "level/trial.rs"), "a level's glue reads the kit");
    assert_eq!(stage_of("level/dist/render.rs"), "level-render");
    assert_eq!(stage_of("level/dist/stats.rs"), "level-pure");
    assert_eq!(stage_of("level/gate/media_trial.rs"), "level");
    assert_eq!(stage_of("level/trial.rs"), "level");
    assert_eq!(stage_of("judge/verdict.rs"), "judge");
    let f = File::new("level/dist/render.rs", "use super::judge::DistReport; x(crate::report::svg::line_chart)");
    let paths: Vec<String> = imports(&f).into_iter().map(|(_, p)| p.join("::")).collect();
    assert_eq!(paths, ["report::svg::line_chart", "level::dist::judge::DistReport"]);
}
