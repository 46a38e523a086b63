//! `fixtures`, `reference-data` and `regen-goldens`: the reference runs in Python, the goldens are derived and
//! written here.
//!
//! Python only dumps raw reference outputs (safetensors); this side reads them back, derives each golden with the
//! suite's own codec, and is the only writer of `goldens/`. Each kind of golden is a [`job::Job`]; [`jobs`] lists
//! them, and a run plans every job for each case, then has each job's reference make its raw outputs and writes
//! what they give ([`ledger`]).

use std::path::{Path, PathBuf};

use mobius_conformance::judge::golden;
use mobius_conformance::paths::relative;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::case::Case;
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::run::bootstrap::target_dir;
use mobius_conformance::vocab::Level;

use reference_setup::venv;

use job::{Batch, Scope, Stage, run_reference, same_folder};
use ledger::{Ledger, Margin};

mod baselines;
mod case_goldens;
mod compare;
mod dist_goldens;
mod job;
pub mod ledger;
mod media_baselines;
mod module_goldens;
mod raw;

/// Every kind of file `regen-goldens` makes, in the order they are made; a new kind is a module implementing
/// [`job::Job`] and one line here. The text baselines come before the case goldens: their noise is that of the
/// stored L4 golden, not of one this run rewrites.
fn jobs() -> Vec<Box<dyn Stage>> {
    vec![
        Batch::boxed(media_baselines::MediaBaselines),
        Batch::boxed(dist_goldens::DistGoldens),
        Batch::boxed(baselines::TextBaselines),
        Batch::boxed(case_goldens::CaseGoldens),
        Batch::boxed(module_goldens::ModuleGoldens),
    ]
}

/// The seeded fixtures behind `references` (Hugging Face folders) whose derived files are missing, grouped by the
/// fixtures folder whose MANIFEST.json records them: `fixtures.py --hf-only --only ...` there, once per folder.
fn derive_missing(references: impl Iterator<Item = PathBuf>) -> Result<(), String> {
    let mut by_root: std::collections::BTreeMap<PathBuf, std::collections::BTreeSet<String>> = Default::default();
    for dir in references {
        if let Some((fixtures, name)) = missing_derived(&dir)? {
            by_root.entry(fixtures).or_default().insert(name);
        }
    }
    for (fixtures, names) in by_root {
        FixtureJob { only: names.into_iter().collect(), hf_only: true, ..FixtureJob::default() }.run(&fixtures)?;
    }
    Ok(())
}

/// For a reference folder `<fixtures>/<name>/hf` that lacks a file its fixtures' MANIFEST.json lists as derived:
/// `(<fixtures>, <name>)`. None when nothing is missing or the folder is no derived fixture (a user's own model).
pub fn missing_derived(dir: &Path) -> Result<Option<(PathBuf, String)>, String> {
    let (Some(model), Some(fixtures)) = (dir.parent(), dir.parent().and_then(Path::parent)) else { return Ok(None) };
    let (Some(name), Some("hf")) = (model.file_name().and_then(|n| n.to_str()), dir.file_name().and_then(|n| n.to_str())) else {
        return Ok(None);
    };
    let manifest = fixtures.join("MANIFEST.json");
    let Ok(text) = std::fs::read_to_string(&manifest) else { return Ok(None) };
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let files = json.pointer("/derived/files").and_then(|f| f.as_array()).ok_or_else(|| {
        format!("{}: field `derived.files` is missing or not a list (the files `fixtures --hf-only` derives)", manifest.display())
    })?;
    let prefix = format!("{name}/hf/");
    let missing = files.iter().filter_map(|f| f.as_str()).filter(|f| f.starts_with(&prefix)).any(|f| !fixtures.join(f).is_file());
    Ok(missing.then(|| (fixtures.to_path_buf(), name.to_string())))
}

/// The committed data that reference tools derive, by name: (module, arguments, what it writes, the derived fixture
/// it reads).
const REFERENCE_DATA: &[(&str, &str, &str, Option<&str>)] = &[
    ("knowledge", "knowledge_items", "fixtures/tasks/knowledge/test.jsonl", None),
    (
        "lmeval-corners",
        "lmeval.corners",
        "tests/data/lmeval/corners.json (+ corners-crafted.json, python_re/tables.rs)",
        Some("arith-tiny"),
    ),
    ("lmeval-taskfiles", "lmeval.taskfiles", "tests/data/lmeval/taskfiles.json", Some("qwen3-tiny")),
    ("lmeval-chat", "lmeval.chat", "tests/data/lmeval/chat.json (after `cargo xtask real`: SmolLM2-135M-Instruct's template)", None),
    (
        "lmms-data",
        "lmms_data",
        "tests/data/lmms/hub (+ datasets.json; checks the task files against taskfiles.json)",
        Some("gemma4-mm-tiny"),
    ),
    ("log-mel", "log_mel_expected", "tests/data/log_mel/expected.json", None),
    (
        "chat-templates",
        "chat_corpus",
        "tests/data/chat/corpus.json (transformers' renderings of fixtures/chat/corpus.json; after `cargo xtask real`)",
        None,
    ),
    (
        "lmms-scorers",
        "lmms_scorers",
        "tests/data/lmms/scorers.json (+ suite/src/accuracy/scorers/unicode_classes.txt), in the lmms-eval venv; scores \
         the committed baselines' predictions, so after `cargo xtask real`",
        None,
    ),
];

/// The entries that run in the lmms-eval venv ([`venv::lmms_eval_command`]) rather than the reference venv.
const IN_LMMS_EVAL_VENV: &[&str] = &["lmms-scorers"];

/// `cargo xtask reference-data [--only NAME ...]`: rewrite the committed data that lm-eval or a seeded generator
/// produces (run from the repository root, where their default paths point); `git diff` then shows any change.
pub fn reference_data(args: &[String]) -> Result<(), String> {
    let names: Vec<&str> = REFERENCE_DATA.iter().map(|d| d.0).collect();
    let mut only = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--only" => {
                let n = it.next().ok_or("--only needs a name")?;
                if !names.contains(&n.as_str()) {
                    return Err(format!("reference-data: --only {n:?}: expected one of {}", names.join(", ")));
                }
                only.push(n.clone());
            }
            other => return Err(format!("reference-data: unknown option `{other}`")),
        }
    }
    let root = workspace_root();
    for (name, module, writes, needs) in REFERENCE_DATA {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        if let Some(fixture) = needs {
            derive_missing(std::iter::once(root.join("fixtures").join(fixture).join("hf")))?;
        }
        let mut cmd = if IN_LMMS_EVAL_VENV.contains(name) { venv::lmms_eval_command(module)? } else { venv::reference_command(module)? };
        cmd.current_dir(&root);
        let status = cmd.status().map_err(|e| format!("running {cmd:?}: {e}"))?;
        if !status.success() {
            return Err(format!("reference-data {name}: {cmd:?} failed: {status}"));
        }
        println!("WROTE      {writes}");
    }
    Ok(())
}

/// The fixture that `reference.arith` builds (trained, not seeded); every other one is `reference.fixtures`'.
const ARITH: &str = "arith-tiny";

pub fn fixtures(args: &[String]) -> Result<(), String> {
    let mut job = FixtureJob::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--only" => job.only.push(it.next().ok_or("--only needs a fixture name")?.clone()),
            "--hf-only" => job.hf_only = true,
            "--retrain" => job.retrain = true,
            "--recalibrate-clamps" => job.pass.push(a.into()),
            "--threads" => job.pass.extend([a.into(), it.next().ok_or("--threads needs a number")?.into()]),
            other => return Err(format!("fixtures: unknown option `{other}`")),
        }
    }
    job.run(&workspace_root().join("fixtures"))
}

/// What `cargo xtask fixtures` was asked to build, split between the two generators.
#[derive(Debug, Default)]
struct FixtureJob {
    only: Vec<String>,
    hf_only: bool,
    retrain: bool,
    /// Options for `reference.fixtures` as given (`--recalibrate-clamps`, `--threads N`).
    pass: Vec<std::ffi::OsString>,
}

impl FixtureJob {
    fn run(&self, out: &Path) -> Result<(), String> {
        let seeded: Vec<&String> = self.only.iter().filter(|n| *n != ARITH).collect();
        // arith-tiny: with --hf-only its derived weights (as every other fixture's), else only when named.
        let arith = if self.only.is_empty() { self.hf_only } else { seeded.len() < self.only.len() };
        if self.retrain && (!arith || self.hf_only) {
            return Err(format!("fixtures: --retrain trains {ARITH} again: pass --only {ARITH}, without --hf-only"));
        }
        if self.only.is_empty() || !seeded.is_empty() {
            let mut argv: Vec<std::ffi::OsString> = vec!["--out".into(), out.into()];
            if self.hf_only {
                argv.push("--hf-only".into());
            }
            if !seeded.is_empty() {
                argv.push("--only".into());
                argv.extend(seeded.iter().map(Into::into));
            }
            argv.extend(self.pass.iter().cloned());
            run_reference("fixtures", &argv)?;
        }
        if arith {
            let mut argv: Vec<std::ffi::OsString> = vec!["--out".into(), out.into()];
            argv.extend(self.hf_only.then(|| "--derive-only".into()));
            argv.extend(self.retrain.then(|| "--retrain".into()));
            run_reference("arith", &argv)?;
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Options {
    case_glob: Option<glob::Pattern>,
    level: Option<Level>,
    force: bool,
    dry_run: bool,
    allow_ci: bool,
    allow_remote_code: bool,
    root: Option<PathBuf>,
    /// Use the reference's raw outputs saved earlier (`--keep-raw`) instead of running it.
    from_raw: Option<PathBuf>,
    keep_raw: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options::default();
    let mut it = args.iter();
    // The levels some job makes goldens of, as `--level` accepts them.
    let mut levels: Vec<Level> = jobs().iter().flat_map(|j| j.levels()).copied().collect();
    levels.sort();
    let names: Vec<&str> = levels.iter().map(|l| l.name()).collect();
    let expected = match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--case" => {
                let g = it.next().ok_or("--case needs a glob")?;
                o.case_glob = Some(glob::Pattern::new(g).map_err(|e| format!("--case {g:?}: {e}"))?);
            }
            "--level" => {
                let l = it.next().ok_or_else(|| format!("--level needs {expected}"))?;
                o.level =
                    Some(Level::parse(l).filter(|l| levels.contains(l)).ok_or_else(|| format!("--level {l:?}: expected {expected}"))?);
            }
            "--force" => o.force = true,
            "--dry-run" => o.dry_run = true,
            "--allow-ci" => o.allow_ci = true,
            "--allow-remote-code" => o.allow_remote_code = true,
            "--root" => o.root = Some(PathBuf::from(it.next().ok_or("--root needs a directory")?)),
            "--from-raw" => o.from_raw = Some(PathBuf::from(it.next().ok_or("--from-raw needs a directory")?)),
            "--keep-raw" => o.keep_raw = Some(PathBuf::from(it.next().ok_or("--keep-raw needs a directory")?)),
            other => return Err(format!("regen-goldens: unknown option `{other}`")),
        }
    }
    Ok(o)
}

/// Builds the packages of the Hugging Face folder `hf` into `out/<ep>-<dtype>`, one per variant, with the reference
/// venv's mobius (int4: the project's quantizer over the same ep's f32 build): `reference/package_build.py`.
pub fn build_packages(hf: &Path, out: &Path, variants: &[String]) -> Result<(), String> {
    let mut args: Vec<std::ffi::OsString> = vec![hf.into(), out.into()];
    args.extend(variants.iter().map(Into::into));
    run_reference("package_build", &args)
}

pub fn regen_goldens(args: &[String]) -> Result<(), String> {
    run(&parse(args)?).map(drop)
}

/// `regen-goldens` for one case of the suite at `root`, for `new-case`.
pub fn regen_case(root: &Path, case: &str, force: bool) -> Result<Vec<Margin>, String> {
    let case_glob = Some(glob::Pattern::escape(case)).map(|g| glob::Pattern::new(&g).map_err(|e| e.to_string())).transpose()?;
    run(&Options { case_glob, root: Some(root.to_path_buf()), force, ..Options::default() })
}

/// Runs the reference for the selected cases and writes their goldens; returns each golden's margin.
fn run(opts: &Options) -> Result<Vec<Margin>, String> {
    refuse(opts)?;
    let root = opts.root.clone().or_else(|| std::env::var_os("MOBIUS_SUITE_ROOT").map(PathBuf::from)).unwrap_or_else(workspace_root);
    let suite = Suite::open(&root);
    suite.check(&format!("--root {}", root.display())).map_err(|e| format!("regen-goldens: {e}"))?;
    for stale in golden::remove_stale_temps(&suite.goldens_dir) {
        println!("REMOVED    {} (a temp file a killed regen left)", relative(&root, &stale));
    }
    let work = target_dir(&crate::context()?.places).join("regen-goldens").join(std::process::id().to_string());
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let mut stages: Vec<Box<dyn Stage>> = jobs().into_iter().filter(|s| opts.level.is_none_or(|l| s.levels().contains(&l))).collect();
    let scope = Scope { suite: &suite, raw_dir: opts.from_raw.as_deref().unwrap_or(&work), level: opts.level };
    let mut failures = plan(&scope, opts, &mut stages)?;
    // The fixtures' Hugging Face weights are derived, not committed: rebuild (and hash-check) those of the cases this
    // run covers, and only those, in the fixtures folder their `reference` names (inside the root given).
    if opts.from_raw.is_none() {
        derive_missing(stages.iter().flat_map(|s| s.references(&root)))?;
    }
    let mut ledger = Ledger::new(opts.force, opts.dry_run, opts.from_raw.clone());
    for stage in &mut stages {
        failures += stage.make(&suite, &work, opts.keep_raw.as_deref(), &mut ledger)?;
    }
    let _ = std::fs::remove_dir_all(&work);
    ledger.tally().lines().iter().for_each(|l| println!("{l}"));
    if failures > 0 {
        return Err(format!("{failures} case(s) failed"));
    }
    // Nothing made or compared means the run did nothing, which must not look like success.
    if ledger.tally().is_empty() {
        let level = opts.level.map_or_else(String::new, |l| format!(" at --level {l}"));
        return Err(format!(
            "regen-goldens: nothing to regenerate{level}: no case matched has a golden of that level it can make (see the \
             SKIPPED lines above)"
        ));
    }
    Ok(ledger.margins)
}

/// The runs refused before anything is read: under CI (goldens are reviewed changes), and one that would copy its
/// raw outputs onto themselves.
fn refuse(opts: &Options) -> Result<(), String> {
    if mobius_conformance::context::RunContext::from_env().map_err(|e| e.to_string())?.ci && !opts.allow_ci {
        return Err("refusing to write goldens under CI (CI is set): goldens are reviewed changes; pass --allow-ci to override".into());
    }
    if let (Some(from), Some(keep)) = (&opts.from_raw, &opts.keep_raw)
        && same_folder(from, keep)
    {
        return Err(format!(
            "regen-goldens: --keep-raw {} and --from-raw {} are the same folder; the raw outputs are already there (copying \
             them onto themselves would empty them): drop --keep-raw",
            keep.display(),
            from.display()
        ));
    }
    Ok(())
}

/// Plans every job for each case `--case` names, printing the lines of the cases refused; returns how many failed.
fn plan(scope: &Scope, opts: &Options, stages: &mut [Box<dyn Stage>]) -> Result<usize, String> {
    let (mut failures, mut matched) = (0, 0);
    for loaded in scope.suite.load_cases() {
        let case = match loaded {
            Ok(c) => c,
            Err(b) => {
                if opts.case_glob.as_ref().is_none_or(|g| g.matches(&b.name)) {
                    println!("ERROR      {}: {}", b.file, b.error);
                    failures += 1;
                    matched += 1;
                }
                continue;
            }
        };
        if opts.case_glob.as_ref().is_some_and(|g| !names_case(g, &case)) {
            continue;
        }
        matched += 1;
        if case.spec.trust_remote_code && !opts.allow_remote_code {
            println!(
                "ERROR      {}: the case sets trust_remote_code, which runs Python code from the model's repository; \
                 refused unless you pass --allow-remote-code",
                case.file
            );
            failures += 1;
            continue;
        }
        failures += stages.iter_mut().map(|s| s.plan(scope, &case)).sum::<usize>();
    }
    if matched == 0 {
        let glob = opts.case_glob.as_ref().map_or_else(|| "*".to_string(), |g| g.as_str().to_string());
        return Err(format!("regen-goldens: --case {glob:?} matches no case under {}", scope.suite.cases_dir.display()));
    }
    Ok(failures)
}

/// `--case` names a case by its name, or by `<task folder>/<name>` as trial names (and their regenerate hints) spell
/// it where two task folders hold a case of one name.
fn names_case(glob: &glob::Pattern, case: &Case) -> bool {
    glob.matches(&case.name) || glob.matches(&format!("{}/{}", case.task_dir, case.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_levels_regen_makes_alone_are_the_ones_the_levels_say() {
        // A trial's regenerate command offers `--level <name>` where its level says its golden is made alone
        // (`level::Kind::regenerates_alone`): the jobs must make exactly those.
        let mut by_jobs: Vec<Level> = jobs().iter().flat_map(|j| j.levels()).copied().collect();
        by_jobs.sort();
        let by_levels: Vec<Level> = mobius_conformance::level::ALL.iter().filter(|k| k.regenerates_alone()).map(|k| k.level()).collect();
        assert_eq!(by_jobs, by_levels);
    }

    #[test]
    fn fixture_options_that_cannot_apply_are_refused_before_anything_runs() {
        let out = Path::new("/nonexistent-fixtures");
        let e = FixtureJob { retrain: true, ..FixtureJob::default() }.run(out).unwrap_err();
        assert!(e.contains("--retrain") && e.contains("--only arith-tiny"), "{e}");
        let e = FixtureJob { retrain: true, hf_only: true, only: vec![ARITH.into()], ..FixtureJob::default() }.run(out).unwrap_err();
        assert!(e.contains("without --hf-only"), "{e}");
        let e = reference_data(&["--only".into(), "corners".into()]).unwrap_err();
        assert!(e.contains("lmeval-corners") && e.contains("knowledge"), "{e}");
        assert!(super::fixtures(&["--bogus".into()]).unwrap_err().contains("unknown option `--bogus`"));
    }

    /// A fixtures folder whose MANIFEST.json derives `a/hf/model.safetensors` and `b/hf/model.safetensors`.
    fn fixtures(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mobius-derive-plan-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for m in ["a", "b", "user"] {
            std::fs::create_dir_all(dir.join(m).join("hf")).unwrap();
        }
        let manifest = serde_json::json!({"derived": {"files": ["a/hf/model.safetensors", "b/hf/model.safetensors"]}});
        std::fs::write(dir.join("MANIFEST.json"), manifest.to_string()).unwrap();
        dir
    }

    #[test]
    fn only_the_fixture_a_case_reads_is_derived_and_in_the_fixtures_folder_it_names() {
        let dir = fixtures("one");
        assert_eq!(missing_derived(&dir.join("a/hf")).unwrap(), Some((dir.clone(), "a".to_string())));
        std::fs::write(dir.join("a/hf/model.safetensors"), b"x").unwrap();
        assert_eq!(missing_derived(&dir.join("a/hf")).unwrap(), None, "nothing missing: nothing to derive");
        assert_eq!(missing_derived(&dir.join("user/hf")).unwrap(), None, "a folder the MANIFEST derives nothing for");
        assert_eq!(missing_derived(&std::env::temp_dir().join("no-such-model/hf")).unwrap(), None);
        std::fs::write(dir.join("MANIFEST.json"), "{}").unwrap();
        let e = missing_derived(&dir.join("b/hf")).unwrap_err();
        assert!(e.contains("MANIFEST.json") && e.contains("derived.files"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn level_names_the_levels_a_job_makes_goldens_of() {
        let level = |l: &str| parse(&["--level".into(), l.into()]).map(|o| o.level);
        assert_eq!(level("dist"), Ok(Some(Level::Dist)));
        assert_eq!(level("L5"), Ok(Some(Level::L5)));
        assert_eq!(level("localize"), Ok(Some(Level::Localize)));
        assert_eq!(level("accuracy").unwrap_err(), "--level \"accuracy\": expected L4, L5, dist or localize");
        assert_eq!(parse(&["--level".into()]).unwrap_err(), "--level needs L4, L5, dist or localize");
    }

    #[test]
    fn a_case_is_named_by_its_name_or_its_folder_qualified_name() {
        let text = "model_id: x\nmodel_type: qwen3\nrevision: r\ntask_type: text-generation\ndtype: float32\nlevel: L4\n";
        let case = Case::parse("cases/other/qwen3-tiny.yaml", "other", "qwen3-tiny", text).unwrap();
        for g in ["qwen3-tiny", "other/qwen3-tiny", "other/*", "qwen3-*"] {
            assert!(names_case(&glob::Pattern::new(g).unwrap(), &case), "{g}");
        }
        for g in ["causal-lm/qwen3-tiny", "other/llama*"] {
            assert!(!names_case(&glob::Pattern::new(g).unwrap(), &case), "{g}");
        }
    }
}
