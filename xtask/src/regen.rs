//! `fixtures` and `regen-goldens`: the reference runs in Python, the goldens are derived and written here.
//!
//! Python only dumps raw reference outputs (safetensors); this side tokenizes the prompt itself and checks it
//! matches, derives the golden JSON with the suite's own codec, and is the only writer of `goldens/`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mobius_conformance::feed::inputs::{Inputs, NamedTensor, TensorData};
use mobius_conformance::feed::package::package_model;
use mobius_conformance::feed::tokenizer::TextTokenizer;
use mobius_conformance::judge::golden::{self, Hex, PositionTop, Provenance, ReferenceRun};
use mobius_conformance::judge::tolerance::Logits;
use mobius_conformance::paths::relative;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::case::{Case, Location};
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::run::bootstrap::target_dir;
use mobius_conformance::vocab::{Dtype, Level, Modality};

use reference_setup::venv;

pub mod compare;

/// Runs `python -m reference.<module> args` (see [`venv::reference_command`]), inheriting stdout and stderr.
pub fn run_reference(module: &str, args: &[std::ffi::OsString]) -> Result<(), String> {
    let mut cmd = venv::reference_command(module)?;
    cmd.args(args);
    let status = cmd.status().map_err(|e| format!("running {cmd:?}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{cmd:?} failed: {status}")) }
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
    (
        "lmms-data",
        "lmms_data",
        "tests/data/lmms/hub (+ datasets.json; checks the task files against taskfiles.json)",
        Some("gemma4-mm-tiny"),
    ),
    ("log-mel", "log_mel_expected", "tests/data/log_mel/expected.json", None),
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
    while let Some(a) = it.next() {
        match a.as_str() {
            "--case" => {
                let g = it.next().ok_or("--case needs a glob")?;
                o.case_glob = Some(glob::Pattern::new(g).map_err(|e| format!("--case {g:?}: {e}"))?);
            }
            "--level" => {
                let l = it.next().ok_or("--level needs L4, L5 or dist")?;
                o.level = Some(
                    Level::parse(l)
                        .filter(|l| matches!(l, Level::L4 | Level::L5 | Level::Dist))
                        .ok_or_else(|| format!("--level {l:?}: expected L4, L5 or dist"))?,
                );
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

/// A case (in one modality) the reference will run, and what it must produce.
struct Job {
    case: Case,
    modality: Modality,
    /// The dtype whose golden this is: float32 for the reference itself; int4 for its kernel-parity twin.
    dtype: Dtype,
    raw: PathBuf,
    /// The prompt as the case's tokenizer.json encodes it: text jobs must match the reference's ids exactly.
    /// Media jobs take their ids from the Hugging Face processor (chat template, expanded media tokens).
    ids: Option<Vec<i64>>,
}

/// The int4 package whose weights the kernel-parity reference runs with: the first local int4 variant of the case
/// (every build flavour quantizes the same float32 weights with the same quantizer, so they dequantize alike).
/// An encoder-decoder's is the package folder: both of its models are dequantized.
fn int4_package(suite: &Suite, case: &Case) -> Option<Result<PathBuf, String>> {
    let v = case.variants(&suite.root).into_iter().find(|v| v.dtype == Dtype::Int4)?;
    Some(match &v.package {
        Some(Location::Local(p)) if case.is_speech_to_text() => Ok(p.clone()),
        Some(Location::Local(p)) => package_model(p).map_err(|e| e.to_string()),
        _ => Err(format!("the {}/{} variant names no local package to dequantize", v.ep, v.dtype)),
    })
}

/// The reference job for one modality of a case (and dtype: f32, or int4 for kernel parity), or the SKIPPED lines
/// saying why there is none.
fn plan_job(
    suite: &Suite,
    case: &Case,
    modality: Modality,
    dtype: Dtype,
    work: &Path,
) -> Result<Result<(serde_json::Value, Job), Vec<String>>, String> {
    let root = &suite.root;
    let paths = suite.golden_paths(case, modality, dtype);
    let skip = |why: &str| {
        let lines = case.levels().iter().map(|l| if *l == Level::L4 { &paths.prefill } else { &paths.generation });
        Ok(Err(lines.map(|p| format!("SKIPPED    {} ({why})", relative(root, p))).collect()))
    };
    let tok = case.tokenizer_location(root).map(|l| l.resolve("tokenizer.json"));
    let (Some(reference), Some(prompt), Some(tok)) = (case.reference_dir(root), case.prompt(), tok) else {
        return skip("the case names no `reference` weights or no prompt: its goldens are not made here");
    };
    if !reference.is_dir() {
        return skip(&format!("reference {} is not a directory", reference.display()));
    }
    let tok = tok.map_err(|e| e.to_string())?;
    let ids = match modality {
        Modality::Text => Some(TextTokenizer::load(&tok).and_then(|t| t.encode(prompt)).map_err(|e| e.to_string())?),
        _ => None,
    };
    let media =
        |files: &[String], wanted: bool| -> Vec<PathBuf> { if wanted { files.iter().map(|f| root.join(f)).collect() } else { vec![] } };
    let images = media(&case.spec.inputs.images, matches!(modality, Modality::Image | Modality::ImageAudio));
    let genai = genai_config_at(suite, case);
    let audio = media(&case.spec.inputs.audio, matches!(modality, Modality::Audio | Modality::ImageAudio));
    // What the reference reads stays inside the suite root, symlinks resolved, unless the case opts out.
    if !case.spec.external_paths {
        let local_tok = matches!(case.tokenizer_location(root), Some(Location::Local(_))).then_some(("tokenizer", &tok));
        let local_genai = genai.as_ref().filter(|(_, local)| *local).map(|(g, _)| ("matrix.package", g));
        let named = [("reference", &reference)].into_iter().chain(local_tok).chain(local_genai);
        let media = images.iter().map(|p| ("inputs.images", p)).chain(audio.iter().map(|p| ("inputs.audio", p)));
        for (field, p) in named.chain(media) {
            let what = format!("{}: field `{field}`", case.file);
            mobius_conformance::paths::confine(root, p, &what, mobius_conformance::paths::CASE_HINT).map_err(|e| e.to_string())?;
        }
    }
    let dequantize = match dtype.golden_suffix().and_then(|_| int4_package(suite, case)) {
        None => None,
        Some(Ok(model)) => Some(model),
        Some(Err(why)) => return skip(&why),
    };
    let suffix = dtype.golden_suffix().map(|s| format!(".{s}")).unwrap_or_default();
    let raw = work.join(format!("{}.{}{suffix}.safetensors", case.name, modality.slug()));
    let mut spec = serde_json::json!({
        "case": case.name,
        "modality": modality.name(),
        "reference": reference,
        "tokenizer": tok,
        "processor": reference,
        "images": images,
        "audio": audio,
        "prompt": prompt,
        "max_new_tokens": case.max_new_tokens(),
        "eos_token_id": case.spec.generation.eos_token_id,
        "genai_config": genai.map(|(g, _)| g),
        "trust_remote_code": case.spec.trust_remote_code,
        "task_type": case.spec.task_type,
        // A multilingual Whisper's forced prefix: `<|lang|>` and the task token (speech.py refuses to guess them).
        "language": case.spec.generation.lang,
        "task": case.spec.generation.task,
        "out": raw,
    });
    if let Some(model) = &dequantize {
        spec["dequantize"] = serde_json::json!(model);
    }
    Ok(Ok((spec, Job { case: case.clone(), modality, dtype, raw, ids })))
}

/// The genai_config.json of the case's first package that has one (local, or in the Hugging Face cache): where the
/// reference, like the suite's runner, finds the EOS ids when the case names none (`common.eos_ids`).
pub fn genai_config(suite: &Suite, case: &Case) -> Option<PathBuf> {
    genai_config_at(suite, case).map(|(file, _)| file)
}

/// [`genai_config`], and whether it is a local package's (to be kept inside the root) or the Hub cache's.
fn genai_config_at(suite: &Suite, case: &Case) -> Option<(PathBuf, bool)> {
    case.variants(&suite.root).into_iter().filter_map(|v| v.package).find_map(|p| {
        let file = p.resolve("genai_config.json").ok()?.join("genai_config.json");
        file.is_file().then_some((file, matches!(p, Location::Local(_))))
    })
}

/// The format of the raw outputs this xtask reads (goldens.py writes `common.RAW_FORMAT` into their metadata).
pub const RAW_FORMAT: &str = "golden-raw-v1";

/// A golden's smallest reference top1-top2 margin, and the loosest near-tie margin of the dtypes it judges.
#[derive(Debug, Clone, PartialEq)]
pub struct Margin {
    /// `<case> (<modality>, <dtype> golden)`.
    pub what: String,
    pub min: f64,
    /// Where: 0 is the prefill's last position, k the k-th generated token's step.
    pub step: usize,
    pub steps: usize,
    pub near_tie: Option<(f64, Dtype)>,
}

impl Margin {
    pub fn near_a_tie(&self) -> bool {
        self.near_tie.is_some_and(|(m, _)| self.min < m)
    }
}

pub fn regen_goldens(args: &[String]) -> Result<(), String> {
    run(&parse(args)?).map(drop)
}

/// Runs the reference for the selected cases and writes their goldens; returns each golden's margin.
fn run(opts: &Options) -> Result<Vec<Margin>, String> {
    let mut margins = Vec::new();
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
    let root = opts.root.clone().or_else(|| std::env::var_os("MOBIUS_SUITE_ROOT").map(PathBuf::from)).unwrap_or_else(workspace_root);
    let suite = Suite::open(&root);
    suite.check(&format!("--root {}", root.display())).map_err(|e| format!("regen-goldens: {e}"))?;
    for stale in golden::remove_stale_temps(&suite.goldens_dir) {
        println!("REMOVED    {} (a temp file a killed regen left)", relative(&root, &stale));
    }
    let work = target_dir().join("regen-goldens").join(std::process::id().to_string());
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;

    let mut failures = 0;
    let mut matched = 0;
    let mut jobs = Vec::new();
    let mut dist_jobs = Vec::new();
    for loaded in suite.load_cases() {
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
        // One reference golden per modality, plus an int4 kernel-parity one when the case has int4 builds: for text,
        // and for an encoder-decoder (whose speech.py dequantizes both models).
        let int4 = case.variants(&root).iter().any(|v| v.dtype == Dtype::Int4);
        let parity = |m: Modality| m == Modality::Text || case.is_speech_to_text();
        let dtypes = |m: Modality| if int4 && parity(m) { vec![Dtype::F32, Dtype::Int4] } else { vec![Dtype::F32] };
        if opts.level.is_none_or(|l| l == Level::Dist) {
            match crate::dist_goldens::plan(&suite, &case, opts.from_raw.as_deref().unwrap_or(&work)) {
                Ok(j) => dist_jobs.extend(j),
                Err(e) => {
                    println!("ERROR      {}: {e}", case.file);
                    failures += 1;
                }
            }
        }
        if opts.level == Some(Level::Dist) {
            continue;
        }
        for modality in case.modalities() {
            for dtype in dtypes(modality) {
                match plan_job(&suite, &case, modality, dtype, opts.from_raw.as_deref().unwrap_or(&work)) {
                    Ok(Ok(job)) => jobs.push(job),
                    Ok(Err(skipped)) => skipped.iter().for_each(|l| println!("{l}")),
                    Err(e) => {
                        println!("ERROR      {}: {e}", case.file);
                        failures += 1;
                    }
                }
            }
        }
    }
    if matched == 0 {
        let glob = opts.case_glob.as_ref().map_or_else(|| "*".to_string(), |g| g.as_str().to_string());
        return Err(format!("regen-goldens: --case {glob:?} matches no case under {}", suite.cases_dir.display()));
    }
    // Accuracy-gate baselines for the cases with `accuracy` tasks.
    let mut baseline_jobs = Vec::new();
    let mut media_jobs = Vec::new();
    if opts.level.is_none() {
        for case in suite.load_cases().into_iter().flatten() {
            if opts.case_glob.as_ref().is_some_and(|g| !names_case(g, &case)) || case.spec.accuracy.is_empty() {
                continue;
            }
            if case.spec.trust_remote_code && !opts.allow_remote_code {
                continue;
            }
            match crate::baselines::plan(&suite, &case, opts.from_raw.as_deref().unwrap_or(&work)) {
                Ok(j) => baseline_jobs.extend(j),
                Err(e) => {
                    println!("ERROR      {}: {e}", case.file);
                    failures += 1;
                }
            }
            match crate::media_baselines::plan(&suite, &case, opts.from_raw.as_deref().unwrap_or(&work)) {
                Ok(j) => media_jobs.extend(j),
                Err(e) => {
                    println!("ERROR      {}: {e}", case.file);
                    failures += 1;
                }
            }
        }
    }
    // The fixtures' Hugging Face weights are derived, not committed: rebuild (and hash-check) those of the cases this
    // run covers, and only those, in the fixtures folder their `reference` names (inside the root given).
    if opts.from_raw.is_none() {
        let cases = jobs
            .iter()
            .map(|(_, j)| &j.case)
            .chain(baseline_jobs.iter().map(|(_, b)| b.case()))
            .chain(media_jobs.iter().map(|(_, b)| b.case()))
            .chain(dist_jobs.iter().map(|(_, d)| &d.case));
        derive_missing(cases.filter_map(|c| c.reference_dir(&root)))?;
    }
    if !baseline_jobs.is_empty() && opts.from_raw.is_none() {
        let spec = serde_json::json!({ "jobs": baseline_jobs.iter().map(|(j, _)| j).collect::<Vec<_>>() });
        let spec_path = work.join("loglik.json");
        std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).map_err(|e| format!("{}: {e}", spec_path.display()))?;
        run_reference("loglik", &[spec_path.into_os_string()])?;
    }
    if !media_jobs.is_empty() && opts.from_raw.is_none() {
        let spec = serde_json::json!({ "jobs": media_jobs.iter().map(|(j, _)| j).collect::<Vec<_>>() });
        let spec_path = work.join("lmms_run.json");
        std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).map_err(|e| format!("{}: {e}", spec_path.display()))?;
        run_reference("lmms_run", &[spec_path.into_os_string()])?;
    }
    // Goldens (and baselines) this run made or compared: none means it did nothing, which must not look like success.
    let mut considered = 0;
    let mut tally = Tally::default();
    // A baseline's lines (or its error, which counts), then its raw outputs kept where --keep-raw asks.
    let mut finish = |written: Result<Vec<String>, String>, out: &Path, raw: &Path| {
        considered += 1;
        match written {
            Ok(lines) => lines.iter().for_each(|l| println!("{l}")),
            Err(e) => {
                println!("ERROR      {}: {e}", relative(&root, out));
                failures += 1;
            }
        }
        if let Some(keep) = &opts.keep_raw {
            let _ = std::fs::create_dir_all(keep);
            let to = keep.join(raw.file_name().unwrap());
            if !same_file(raw, &to) {
                let _ = std::fs::copy(raw, to);
            }
        }
    };
    for (_, job) in &media_jobs {
        let written = crate::media_baselines::derive(&suite, job).and_then(|(b, inputs, line)| {
            let mut lines = vec![line];
            lines.extend(crate::media_baselines::write(&suite, job, &b, inputs.as_deref(), opts.force, opts.dry_run, &mut tally)?);
            Ok(lines)
        });
        finish(written, job.out_path(), job.raw_path());
    }
    if !dist_jobs.is_empty() && opts.from_raw.is_none() {
        let spec = serde_json::json!({ "jobs": dist_jobs.iter().map(|(j, _)| j).collect::<Vec<_>>() });
        let spec_path = work.join("dist.json");
        std::fs::write(&spec_path, serde_json::to_vec_pretty(&spec).unwrap()).map_err(|e| format!("{}: {e}", spec_path.display()))?;
        run_reference("dist", &[spec_path.into_os_string()])?;
    }
    for (_, job) in &dist_jobs {
        if let Some(from) = opts.from_raw.as_ref().filter(|_| !job.raw.is_file()) {
            // Raw outputs kept before the case had a distribution golden: nothing to make it from here.
            println!("SKIPPED    {} (--from-raw {} holds no raw output for it)", relative(&root, &job.out), from.display());
            continue;
        }
        let written = crate::dist_goldens::write(&suite, job, opts.force, opts.dry_run, &mut tally);
        finish(written, &job.out, &job.raw);
    }
    for (_, job) in &baseline_jobs {
        let written = crate::baselines::derive(&suite, job).and_then(|(_, bytes, line)| {
            Ok(vec![line, crate::baselines::write(&suite, job, &bytes, opts.force, opts.dry_run, &mut tally)?])
        });
        finish(written, job.out_path(), job.raw_path());
    }
    if !jobs.is_empty() && opts.from_raw.is_none() {
        let spec = serde_json::json!({ "jobs": jobs.iter().map(|(j, _)| j).collect::<Vec<_>>() });
        let spec_path = work.join("jobs.json");
        std::fs::write(&spec_path, serde_json::to_vec_pretty(&spec).unwrap()).map_err(|e| format!("{}: {e}", spec_path.display()))?;
        run_reference("goldens", &[spec_path.into_os_string()])?;
        if let Some(keep) = &opts.keep_raw {
            std::fs::create_dir_all(keep).map_err(|e| format!("{}: {e}", keep.display()))?;
            for (_, job) in &jobs {
                let to = keep.join(job.raw.file_name().unwrap());
                if !same_file(&job.raw, &to) {
                    std::fs::copy(&job.raw, &to).map_err(|e| format!("{}: {e}", to.display()))?;
                }
            }
        }
    }
    for (_, job) in &jobs {
        match write_case_goldens(&suite, job, opts, &mut margins, &mut tally) {
            Ok((lines, n)) => {
                considered += n;
                lines.iter().for_each(|l| println!("{l}"));
            }
            Err(e) => {
                println!("ERROR      {}: {e}", job.case.file);
                failures += 1;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    tally.lines().iter().for_each(|l| println!("{l}"));
    if failures > 0 {
        return Err(format!("{failures} case(s) failed"));
    }
    if considered == 0 {
        let level = opts.level.map_or_else(String::new, |l| format!(" at --level {l}"));
        return Err(format!(
            "regen-goldens: nothing to regenerate{level}: no case matched has a golden of that level it can make (see the \
             SKIPPED lines above)"
        ));
    }
    Ok(margins)
}

/// `regen-goldens` for one case of the suite at `root`, for `new-case`.
pub fn regen_case(root: &Path, case: &str, force: bool) -> Result<Vec<Margin>, String> {
    let case_glob = Some(glob::Pattern::escape(case)).map(|g| glob::Pattern::new(&g).map_err(|e| e.to_string())).transpose()?;
    run(&Options { case_glob, root: Some(root.to_path_buf()), force, ..Options::default() })
}

/// Whether two paths name one folder (both resolved; equal text when neither exists yet).
fn same_folder(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Whether copying `from` to `to` would copy a file onto itself (which truncates it).
fn same_file(from: &Path, to: &Path) -> bool {
    to.exists() && same_folder(from, to)
}

/// One tensor of the reference's raw outputs.
struct RawTensor {
    shape: Vec<usize>,
    data: Vec<u8>,
    dtype: safetensors::Dtype,
}

/// The reference's raw outputs (written by goldens.py): tensors and string metadata.
struct RawRun {
    tensors: HashMap<String, RawTensor>,
    meta: HashMap<String, String>,
}

fn read_raw(path: &Path) -> Result<RawRun, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let meta = meta.metadata().clone().unwrap_or_default();
    check_format(path, meta.get("format").map(String::as_str), RAW_FORMAT, "xtask/reference/goldens.py")?;
    let tensors = st
        .names()
        .into_iter()
        .map(|n| {
            let t = st.tensor(n).expect("listed tensor");
            (n.to_string(), RawTensor { shape: t.shape().to_vec(), data: t.data().to_vec(), dtype: t.dtype() })
        })
        .collect();
    Ok(RawRun { tensors, meta })
}

/// The raw outputs' metadata field `format` against the version this xtask reads; a mismatch says which side is
/// older and how to get a matching pair.
pub fn check_format(path: &Path, got: Option<&str>, want: &str, writer: &str) -> Result<(), String> {
    match got {
        Some(g) if g == want => Ok(()),
        got => Err(format!(
            "{}: metadata field `format` is {}, this xtask reads {want:?}: the raw outputs come from another version of {writer} \
             (rerun the reference without --from-raw, or use the xtask of the same checkout)",
            path.display(),
            got.map_or_else(|| "missing".to_string(), |g| format!("{g:?}"))
        )),
    }
}

/// A raw output's tensor `name` (shape and bytes), which must be there with `dtype`; errors name the file.
fn raw_tensor<'a>(
    raw: &Path,
    tensors: &'a HashMap<String, RawTensor>,
    name: &str,
    dtype: safetensors::Dtype,
) -> Result<(&'a [usize], &'a [u8]), String> {
    let t = tensors.get(name).ok_or_else(|| format!("{}: tensor `{name}` missing", raw.display()))?;
    if t.dtype != dtype {
        return Err(format!("{}: tensor `{name}` is {:?}, expected {dtype:?}", raw.display(), t.dtype));
    }
    Ok((&t.shape, &t.data))
}

fn i64s(b: &[u8]) -> Vec<i64> {
    b.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
}

fn f64s(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Derives one job's goldens and writes them, all together or none; returns the lines to print and how many
/// goldens it made or compared.
fn write_case_goldens(
    suite: &Suite,
    job: &Job,
    opts: &Options,
    margins: &mut Vec<Margin>,
    tally: &mut Tally,
) -> Result<(Vec<String>, usize), String> {
    let RawRun { tensors, meta } = read_raw(&job.raw)?;
    let get = |name: &str, dtype: safetensors::Dtype| raw_tensor(&job.raw, &tensors, name, dtype);
    use safetensors::Dtype::{F32, I64};
    let input_ids = i64s(get("input_ids", I64)?.1);
    if let Some(ids) = &job.ids
        && input_ids != *ids
    {
        return Err(format!(
            "the reference tokenized the prompt to {input_ids:?} but tokenizer.json gives {ids:?}: the Rust and Python tokenizers disagree"
        ));
    }
    // What the model is fed, as the Hugging Face processor made it (media jobs), or the token ids (text jobs).
    let mut fed = Inputs { tensors: Vec::new() };
    let mut features = Inputs { tensors: Vec::new() };
    for (name, t) in &tensors {
        let named = |n: &str| -> Result<NamedTensor, String> {
            let data = TensorData::from_safetensors(t.dtype, &t.data)
                .ok_or_else(|| format!("{}: tensor `{name}` has dtype {:?}", job.raw.display(), t.dtype))?;
            Ok(NamedTensor { name: n.to_string(), shape: t.shape.iter().map(|&d| d as i64).collect(), data })
        };
        if let Some(n) = name.strip_prefix("input.") {
            fed.tensors.push(named(n)?);
        } else if name == "image_features" || name == "audio_features" || name.starts_with("audio_features.") {
            // The encoder's state, with (speech-to-text) which frames are stored and the reference's own noise.
            features.tensors.push(named(name)?);
        }
    }
    fed.tensors.sort_by(|a, b| a.name.cmp(&b.name));
    features.tensors.sort_by(|a, b| a.name.cmp(&b.name));
    let media = fed.tensors.iter().any(|t| t.name != "input_ids");
    let fed = if fed.tensors.is_empty() { Inputs::from_token_ids(&input_ids) } else { fed };
    if fed.input_ids() != input_ids {
        return Err(format!("{}: `input.input_ids` differs from `input_ids`", job.raw.display()));
    }
    let prefill_logits = f32s(get("prefill_logits", F32)?.1);
    // Raw outputs from before the noise floor have no float64 prefill: their goldens are judged by atol/rtol.
    let prefill_logits_f64 = match tensors.contains_key("prefill_logits_f64") {
        true => Some(f64s(get("prefill_logits_f64", safetensors::Dtype::F64)?.1)),
        false => None,
    };
    let positions = read_positions(&job.raw, &tensors, input_ids.len())?;
    let generated_tokens = i64s(get("generated_tokens", I64)?.1);
    let (step_shape, step_data) = get("step_logits", F32)?;
    let vocab = prefill_logits.len();
    if step_shape.len() != 2 || step_shape[1] != vocab || step_shape[0] != generated_tokens.len() {
        return Err(format!("step_logits has shape {step_shape:?}, expected [{}, {vocab}]", generated_tokens.len()));
    }
    let step_logits: Vec<Vec<f32>> = f32s(step_data).chunks(vocab).map(<[f32]>::to_vec).collect();
    let m = |k: &str| meta.get(k).cloned().unwrap_or_default();
    let root = &suite.root;
    let run = ReferenceRun {
        input_hash: fed.hash(),
        input_ids,
        prefill_logits,
        prefill_logits_f64,
        positions,
        generated_tokens,
        step_logits,
        generated_text: m("generated_text"),
        provenance: Provenance {
            weights: meta.get("dequantized_from").map(|m| format!("int4 weights of {} dequantized", relative(root, Path::new(m)))),
            ..provenance(root, &job.case, &meta)
        },
    };
    if job.dtype.golden_suffix().is_some() && run.provenance.weights.is_none() {
        return Err(format!("{}: the reference did not say it ran with dequantized {} weights", job.raw.display(), job.dtype));
    }
    let paths = suite.golden_paths(&job.case, job.modality, job.dtype);
    let sidecar_name = paths.sidecar().file_name().unwrap().to_string_lossy().into_owned();
    let files = golden::from_reference(
        &run,
        &job.case.spec.model_id,
        job.case.prompt().unwrap_or_default(),
        job.case.max_new_tokens(),
        &sidecar_name,
    )
    .map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    let each = run.step_logits.iter().map(|l| mobius_conformance::numeric::TopK::of(l, 2).margin());
    if let Some((step, min)) = each.enumerate().min_by(|a, b| a.1.total_cmp(&b.1)) {
        let what = format!("{} ({}, {} golden)", job.case.name, job.modality, job.dtype);
        lines.push(format!(
            "margin     {what}: smallest reference top1-top2 margin over prefill and {} steps = {min:.4} (step {step})",
            run.step_logits.len()
        ));
        let near_tie = loosest_near_tie(suite, job);
        if let Some((loosest, dtype)) = near_tie
            && min < loosest
        {
            lines.push(format!(
                "WARNING    {what}: that margin is under the near-tie margin {loosest} of {dtype}, which this golden also judges: \
                 an honest {dtype} flip there would only be AMBIGUOUS; pick a seed or prompt with larger margins"
            ));
        }
        margins.push(Margin { what, min, step, steps: run.step_logits.len(), near_tie });
    }
    let mut targets: Vec<(Kind, PathBuf, Vec<u8>)> = Vec::new();
    if media && job.dtype.golden_suffix().is_none() {
        // A multi-media stream keeps only what its single-media streams (written earlier in this run) do not hold.
        let mut own = Inputs { tensors: fed.tensors.clone() };
        for shared in &paths.shared_inputs {
            let bytes =
                std::fs::read(shared).map_err(|e| format!("{}: {e} (its single-media golden must exist first)", relative(root, shared)))?;
            let theirs = Inputs::from_safetensors(&relative(root, shared), &bytes).map_err(|e| e.to_string())?;
            own.tensors.retain(|t| !theirs.tensors.iter().any(|o| o == t));
        }
        targets.push((Kind::Inputs, paths.inputs.clone(), own.to_safetensors().map_err(|e| e.to_string())?));
    }
    // An int4 encoder is judged against its own kernel-parity reference's features, as its logits are.
    if !features.tensors.is_empty() {
        targets.push((Kind::Features, paths.features.clone(), features.to_safetensors().map_err(|e| e.to_string())?));
    }
    for &level in job.case.levels() {
        if opts.level.is_some_and(|l| l != level) {
            continue;
        }
        match level {
            Level::L4 => {
                targets.push((Kind::Prefill, paths.prefill.clone(), files.prefill.clone()));
                if let Some(s) = &files.sidecar {
                    targets.push((Kind::Sidecar, paths.sidecar(), s.clone()));
                }
            }
            Level::L5 => targets.push((Kind::Generation, paths.generation.clone(), files.generation.clone())),
            Level::VisionEncoder | Level::AudioEncoder | Level::Accuracy | Level::AccuracyGenai | Level::Genai | Level::Dist => {}
        }
    }
    // The noise the reference measured for this stream, as its stored L4 golden records it (else as this run did).
    let bounds = compare::Bounds::of_prefill(&std::fs::read(&paths.prefill).unwrap_or_else(|_| files.prefill.clone()));
    // A case's goldens change together or not at all: one that differs (by more than the reference's noise) without
    // --force holds back the others, and the ones written go to disk in one step.
    let considered = targets.len();
    let compared: Vec<(Kind, PathBuf, Vec<u8>, Option<compare::Diff>)> = targets
        .into_iter()
        .map(|(kind, path, bytes)| {
            let diff = std::fs::read(&path).ok().map(|old| kind.compare(&bounds, &old, &bytes));
            (kind, path, bytes, diff)
        })
        .collect();
    let held_back = !opts.force && compared.iter().any(|(.., d)| d.as_ref().is_some_and(compare::Diff::is_change));
    let mut to_write = Vec::new();
    for (kind, path, bytes, diff) in compared {
        let shown = relative(root, &path);
        let (line, outcome) = match diff {
            Some(compare::Diff::Same) => (format!("UNCHANGED  {shown}"), Outcome::Unchanged),
            Some(d @ compare::Diff::NoiseOnly { .. }) if !opts.force => (format!("UNCHANGED  {shown} ({d})"), Outcome::NoiseOnly),
            Some(d @ compare::Diff::Changed { .. }) if !opts.force => {
                (format!("SKIPPED    {shown} (differs from the reference now, at {d}; pass --force to overwrite)"), Outcome::Changed)
            }
            _ if held_back => (
                format!("SKIPPED    {shown} (another golden of this case differs; pass --force to write them together)"),
                Outcome::HeldBack,
            ),
            _ if opts.dry_run => (format!("SAVED      {shown} (dry run: not written)"), Outcome::Saved),
            _ => {
                to_write.push((path, bytes));
                (format!("SAVED      {shown}"), Outcome::Saved)
            }
        };
        tally.add(kind, outcome);
        lines.push(line);
    }
    golden::write_all_atomic(&to_write).map_err(|e| format!("{e} (none of this case's goldens was changed)"))?;
    Ok((lines, considered))
}

/// Writes (or not) one golden file given how it compares with the stored one (`diff`, `None` when there is none):
/// UNCHANGED when equal or within noise, SKIPPED when it differs more without `force`, else SAVED (atomically;
/// not written on a dry run). `(force, dry_run)` as the options give them; counts the outcome under `kind`.
pub fn write_one(
    out: &Path,
    shown: &str,
    bytes: &[u8],
    diff: Option<compare::Diff>,
    (force, dry_run): (bool, bool),
    kind: Kind,
    tally: &mut Tally,
) -> Result<String, String> {
    let (line, outcome) = match diff {
        Some(compare::Diff::Same) => (format!("UNCHANGED  {shown}"), Outcome::Unchanged),
        Some(d @ compare::Diff::NoiseOnly { .. }) if !force => (format!("UNCHANGED  {shown} ({d})"), Outcome::NoiseOnly),
        Some(d @ compare::Diff::Changed { .. }) if !force => {
            (format!("SKIPPED    {shown} (differs from the reference now, at {d}; pass --force to overwrite)"), Outcome::Changed)
        }
        _ if dry_run => (format!("SAVED      {shown} (dry run: not written)"), Outcome::Saved),
        _ => {
            golden::write_atomic(out, bytes).map_err(|e| e.to_string())?;
            (format!("SAVED      {shown}"), Outcome::Saved)
        }
    };
    tally.add(kind, outcome);
    Ok(line)
}

/// What a golden file holds, for comparing it within noise and for the counts a run prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Prefill,
    Sidecar,
    Generation,
    Inputs,
    Features,
    Baseline,
    Dist,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Prefill => "L4 logits and positions",
            Kind::Sidecar => "L4 full-logits sidecars",
            Kind::Generation => "L5 tokens and step logits",
            Kind::Inputs => "processed media inputs",
            Kind::Features => "encoder features",
            Kind::Baseline => "accuracy baselines",
            Kind::Dist => "dist top-k log-probabilities",
        }
    }

    /// A stored file of this kind against the regenerated one. The processed inputs are what the model is fed:
    /// compared exactly. Encoder features are judged by the stream's last-position noise, the one measure of the
    /// reference's float32 error it has (an audio stream has none: exact).
    fn compare(self, bounds: &compare::Bounds, old: &[u8], new: &[u8]) -> compare::Diff {
        match self {
            Kind::Prefill => compare::json(old, new, &|p| bounds.prefill(p)),
            Kind::Generation => compare::json(old, new, &|p| bounds.generation(p)),
            Kind::Sidecar | Kind::Features => compare::safetensors(old, new, bounds.last),
            Kind::Inputs => compare::safetensors(old, new, None),
            Kind::Baseline => compare::json(old, new, &|_| None),
            Kind::Dist => compare::safetensors(old, new, Some(1e-5)),
        }
    }
}

/// What became of one golden file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Unchanged,
    NoiseOnly,
    Changed,
    HeldBack,
    Saved,
}

/// Per kind of golden: how many were unchanged, noise only, changed (over the noise), held back, saved.
#[derive(Debug, Default)]
pub struct Tally(std::collections::BTreeMap<Kind, [usize; 5]>);

impl Tally {
    pub fn add(&mut self, kind: Kind, outcome: Outcome) {
        let i = match outcome {
            Outcome::Unchanged => 0,
            Outcome::NoiseOnly => 1,
            Outcome::Changed => 2,
            Outcome::HeldBack => 3,
            Outcome::Saved => 4,
        };
        self.0.entry(kind).or_default()[i] += 1;
    }

    /// One line per kind, for the end of a run.
    pub fn lines(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|(k, [u, n, c, h, s])| {
                format!("counted    {}: {u} unchanged, {n} noise only, {c} changed, {h} held back, {s} saved", k.name())
            })
            .collect()
    }
}

/// Every prompt position in brief (`position_*` tensors), as the golden stores it; empty for raw outputs from before
/// the reference wrote them.
fn read_positions(raw: &Path, tensors: &HashMap<String, RawTensor>, prompt: usize) -> Result<Vec<PositionTop>, String> {
    let get = |name: &str, dtype: safetensors::Dtype| raw_tensor(raw, tensors, name, dtype);
    use safetensors::Dtype::{F32, F64, I64};
    if !tensors.contains_key("position_top_ids") {
        return Ok(Vec::new());
    }
    let (shape, ids) = get("position_top_ids", I64)?;
    let ids = i64s(ids);
    let logits = f32s(get("position_top_logits", F32)?.1);
    let lse = f64s(get("position_logsumexp", F64)?.1);
    let noise = match tensors.contains_key("position_noise") {
        true => Some(f64s(get("position_noise", F64)?.1)),
        false => None,
    };
    let [s, k] = shape[..] else { return Err(format!("{}: position_top_ids has shape {shape:?}, expected [prompt, k]", raw.display())) };
    if s != prompt || k == 0 || logits.len() != s * k || lse.len() != s || noise.as_ref().is_some_and(|n| n.len() != s) {
        return Err(format!(
            "{}: position tensors disagree: {s}x{k} ids, {} logits, {} logsumexps, {:?} noises for a {prompt}-token prompt",
            raw.display(),
            logits.len(),
            lse.len(),
            noise.as_ref().map(Vec::len)
        ));
    }
    Ok((0..s)
        .map(|p| PositionTop {
            ids: ids[p * k..(p + 1) * k].to_vec(),
            logits: logits[p * k..(p + 1) * k].iter().map(|&x| Hex(x as f64)).collect(),
            logsumexp: Hex(lse[p]),
            noise: noise.as_ref().map(|n| Hex(n[p])),
        })
        .collect())
}

/// The loosest near-tie margin (L4 or L5) among the dtypes this job's golden judges, with that dtype.
fn loosest_near_tie(suite: &Suite, job: &Job) -> Option<(f64, Dtype)> {
    let policy = suite.policy.as_ref().ok()?;
    let judged = job.case.variants(&suite.root).into_iter().map(|v| v.dtype).filter(|d| d.golden_suffix() == job.dtype.golden_suffix());
    judged
        .flat_map(|d| {
            [Logits::Prefill, Logits::Stream]
                .map(|l| (policy.resolve(l, d, job.case.spec.tolerance.as_ref(), job.case.spec.min_token_match_ratio).near_tie_margin, d))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// Where a reference run came from: the case's weights, run in float32 on the CPU by the versions the raw outputs
/// name (`meta`).
pub fn provenance(root: &Path, case: &Case, meta: &HashMap<String, String>) -> Provenance {
    let m = |k: &str| meta.get(k).cloned().unwrap_or_default();
    Provenance {
        reference: relative(root, &case.reference_dir(root).unwrap_or_default()),
        transformers: m("transformers"),
        torch: m("torch"),
        dtype: "float32".into(),
        device: "cpu".into(),
        weights: None,
    }
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

    #[test]
    fn raw_outputs_of_another_format_are_refused_naming_the_file_and_both_versions() {
        let p = Path::new("raw/qwen3-tiny.text.safetensors");
        assert!(check_format(p, Some(RAW_FORMAT), RAW_FORMAT, "goldens.py").is_ok());
        let e = check_format(p, Some("golden-raw-v0"), RAW_FORMAT, "goldens.py").unwrap_err();
        assert!(e.contains("raw/qwen3-tiny.text.safetensors") && e.contains("\"golden-raw-v0\"") && e.contains(RAW_FORMAT), "{e}");
        let e = check_format(p, None, RAW_FORMAT, "goldens.py").unwrap_err();
        assert!(e.contains("`format` is missing"), "{e}");
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
