//! The suite on disk and its trials: case -> inputs -> runtime -> outputs -> verdict -> report.
//!
//! One trial per case x modality x ep x dtype x level, named `<case>/<modality>/<ep>/<dtype>/<level>`. A case that
//! does not load becomes one failing trial of its own (`<case>/case`); it never stops the others.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::case::{Case, Dtype, Ep, Level, Location, Modality, Variant};
use crate::corpus;
use crate::error::{Error, Result};
use crate::gate;
use crate::generate;
use crate::golden::{GenerationGolden, GoldenPaths, PrefillGolden};
use crate::inputs::Inputs;
use crate::pipeline::Pipeline;
use crate::report::{self, detail, detail::Detail};
use crate::runtime::{self, Device, Provider};
use crate::snapshot;
use crate::tokenizer::TextTokenizer;
use crate::tolerance::{Policy, Tolerance};
use crate::verdict::{self, Verdict};
use crate::xfail::{Failure, FailureKind};

/// A suite root: `cases/` and `goldens/` (or mobius' `golden/`) beside each other.
#[derive(Debug, Clone)]
pub struct Suite {
    pub root: PathBuf,
    pub cases_dir: PathBuf,
    pub goldens_dir: PathBuf,
    pub policy: std::result::Result<Arc<Policy>, Error>,
    /// A model missing from the Hugging Face cache fails instead of skipping (`MOBIUS_REQUIRE_MODELS=1`,
    /// `cargo xtask ci --require`; a case can ask for it alone with `required: true`).
    pub require_models: bool,
}

impl Suite {
    pub fn open(root: &Path) -> Suite {
        let cases_dir = root.join("cases");
        let goldens_dir = ["goldens", "golden"].iter().map(|d| root.join(d)).find(|d| d.is_dir()).unwrap_or_else(|| root.join("goldens"));
        let policy = [cases_dir.join("tolerances.yaml"), root.join("default_tolerances.yaml")]
            .into_iter()
            .find(|p| p.exists())
            .map_or_else(
                || Ok(Policy::builtin()),
                |p| {
                    // One that is there but not a readable file is an error, never the built-in defaults.
                    crate::paths::confine(root, &p, "tolerance policy", crate::paths::SUITE_HINT)?;
                    crate::paths::regular_file(&p, "tolerance policy")?;
                    Policy::load(&p)
                },
            )
            .map(|mut p| {
                p.source = relative(root, Path::new(&p.source));
                // mobius' file (at the root, beside its `golden/`) was written for mobius' argmax-only verdicts.
                if p.source == "default_tolerances.yaml" {
                    p.tighten_only();
                }
                Arc::new(p)
            });
        let require_models = std::env::var("MOBIUS_REQUIRE_MODELS").is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes"));
        Suite { root: root.to_path_buf(), cases_dir, goldens_dir, policy, require_models }
    }

    /// ` --root <root>` when this suite is not the repository's own, for the commands a message prints.
    pub fn root_option(&self) -> String {
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        if canon(&self.root) == canon(&crate::bootstrap::workspace_root()) {
            String::new()
        } else {
            let shown = self.root.to_string_lossy().replace('\\', "/");
            if shown.contains(char::is_whitespace) { format!(" --root '{shown}'") } else { format!(" --root {shown}") }
        }
    }

    /// Errs when the root cannot be a suite: no such folder, no `cases/` in it, or no case file under that. A
    /// mistyped MOBIUS_SUITE_ROOT or `--root` must stop the run, never run zero trials and pass.
    pub fn check(&self, setting: &str) -> Result<()> {
        let root = self.root.display();
        if !self.root.is_dir() {
            return Err(Error::new(format!("{setting}: the suite root {root} is not a folder")));
        }
        if !self.cases_dir.is_dir() {
            return Err(Error::new(format!("{setting}: the suite root {root} has no `cases/` folder")));
        }
        if crate::discovery::case_files(&self.root, &self.cases_dir).is_empty() {
            return Err(Error::new(format!("{setting}: no case file (`*.yaml`) under {}", self.cases_dir.display())));
        }
        Ok(())
    }

    /// Every case file under `cases/`, sorted, each parsed on its own; a case with several prompts gives one case per
    /// prompt ([`corpus::per_prompt`]).
    pub fn load_cases(&self) -> Vec<std::result::Result<Arc<Case>, BrokenCase>> {
        let found = crate::discovery::case_files(&self.root, &self.cases_dir);
        let stem = |p: &Path| p.file_stem().map_or_else(|| "?".to_string(), |s| s.to_string_lossy().into_owned());
        // Two files of one name in one folder (`t.yaml`, `t.YAML`, `t.yml`) would share trial names and goldens. In
        // different task folders they do not: `plan` prefixes the folder.
        let mut by_name: std::collections::BTreeMap<(PathBuf, String), Vec<String>> = Default::default();
        for f in &found {
            if let crate::discovery::Found::File(p) = f {
                let dir = p.parent().map(Path::to_path_buf).unwrap_or_default();
                by_name.entry((dir, stem(p))).or_default().push(relative(&self.root, p));
            }
        }
        found
            .into_iter()
            .map(|f| {
                let path = match f {
                    crate::discovery::Found::File(p) => p,
                    crate::discovery::Found::Unreadable(p, e) => {
                        let (name, file) = (stem(&p), relative(&self.root, &p));
                        let error = e.context(&file);
                        // An unreadable case file plans every trial it could have had; a folder, only its own.
                        let is_file = crate::discovery::is_yaml(&p);
                        let expected = if is_file { crate::discovery::expected_trials(&name, None) } else { Vec::new() };
                        return Err(BrokenCase { expected, name, file, error });
                    }
                };
                let file = relative(&self.root, &path);
                let name = stem(&path);
                let task_dir = path
                    .parent()
                    .and_then(|p| p.strip_prefix(&self.cases_dir).ok())
                    .map(|p| p.to_string_lossy().replace('\\', "/"))
                    .unwrap_or_default();
                let text = std::fs::read_to_string(&path).map_err(|e| Error::new(format!("{file}: {e}")));
                let expected = || crate::discovery::expected_trials(&name, text.as_ref().ok().map(String::as_str));
                let twins = &by_name[&(path.parent().map(Path::to_path_buf).unwrap_or_default(), name.clone())];
                if twins.len() > 1 {
                    let error = Error::new(format!(
                        "{file}: the case name `{name}` is also used by {} in the same folder; trial names and goldens would \
                         collide: rename one",
                        twins.iter().filter(|t| **t != file).cloned().collect::<Vec<_>>().join(", ")
                    ));
                    return Err(BrokenCase { expected: expected(), name, file, error });
                }
                match text.clone().and_then(|t| Case::parse(&file, &task_dir, &name, &t)) {
                    Ok(c) => Ok(c),
                    Err(error) => Err(BrokenCase { expected: expected(), name, file, error }),
                }
            })
            .flat_map(|c| match c {
                Ok(case) => corpus::per_prompt(case).into_iter().map(|c| Ok(Arc::new(c))).collect(),
                Err(b) => vec![Err(b)],
            })
            .collect()
    }

    /// Where reviewed snapshots of a task live. In this repository that is inside the `harness` package, because
    /// `cargo insta review` looks for pending snapshots in package folders only; elsewhere beside the goldens.
    pub fn snapshots_dir(&self, task_dir: &str) -> PathBuf {
        let harness = self.root.join("harness");
        if harness.join("Cargo.toml").is_file() {
            harness.join("snapshots").join(task_dir)
        } else {
            self.goldens_dir.join(task_dir).join("snapshots")
        }
    }

    /// A case with one modality keeps mobius' names (`<case>.json`); with several, each has `<case>.<modality>.json`.
    /// A dtype judged against its own reference (int4: kernel parity) adds its suffix, `<case>.int4.json`; the
    /// processed inputs and encoder features stay those of the float32 reference.
    pub fn golden_paths(&self, case: &Case, modality: Modality, dtype: Dtype) -> GoldenPaths {
        let stem = if case.modalities().len() > 1 { format!("{}.{}", case.name, modality.slug()) } else { case.name.clone() };
        let mut base = GoldenPaths::new(&self.goldens_dir, &case.task_dir, &stem);
        if modality == Modality::ImageAudio {
            base.shared_inputs = [Modality::Image, Modality::Audio]
                .map(|m| GoldenPaths::new(&self.goldens_dir, &case.task_dir, &format!("{}.{}", case.name, m.slug())).inputs)
                .to_vec();
        }
        match dtype.golden_suffix() {
            None => base,
            Some(suffix) => GoldenPaths {
                inputs: base.inputs,
                features: base.features,
                shared_inputs: base.shared_inputs,
                ..GoldenPaths::new(&self.goldens_dir, &case.task_dir, &format!("{stem}.{suffix}"))
            },
        }
    }

    /// `goldens/baselines/<task>/<case>.json`: the reference's accuracy and per-item scores on a task.
    pub fn baseline_path(&self, task: &str, case: &str) -> PathBuf {
        self.goldens_dir.join("baselines").join(task).join(format!("{case}.json"))
    }

    /// All trials, sorted by name. Names start with the case's name, or `<task folder>/<case>` where two cases in
    /// different task folders share a name.
    pub fn plan(&self) -> Vec<TrialSpec> {
        let mut out = Vec::new();
        let loaded = self.load_cases();
        let subject = |c: &std::result::Result<Arc<Case>, BrokenCase>| match c {
            Ok(case) => (case.task_dir.clone(), case.name.clone()),
            Err(b) => (corpus::task_dir_of(&b.file), b.name.clone()),
        };
        let subjects: Vec<(String, String)> = loaded.iter().map(subject).collect();
        let prefixes = corpus::trial_prefixes(subjects.iter().map(|(d, n)| (d.as_str(), n.as_str())));
        for c in loaded {
            let prefix = &prefixes[&subject(&c)];
            match c {
                Err(b) => {
                    // The trials it would have had fail too, so a filter aimed at them still finds the failure.
                    let renamed = |n: &String| match n.strip_prefix(b.name.as_str()) {
                        Some(rest) if prefix != &b.name => format!("{prefix}{rest}"),
                        _ => n.clone(),
                    };
                    for name in b.expected.iter().map(renamed).chain([format!("{prefix}/case")]) {
                        out.push(TrialSpec { name, kind: TrialKind::Broken(b.clone()) });
                    }
                }
                Ok(case) => {
                    for entry in &case.spec.accuracy {
                        let task = entry.file();
                        let task_name = Path::new(task).file_stem().and_then(|s| s.to_str()).unwrap_or("task").to_string();
                        let source = entry.source(&self.root, case.spec.external_paths);
                        for variant in case.variants(&self.root) {
                            out.push(TrialSpec {
                                name: format!("{task_name}/{prefix}/{}/{}/accuracy", variant.ep, variant.dtype),
                                kind: TrialKind::Accuracy {
                                    case: case.clone(),
                                    task: task.to_string(),
                                    task_name: task_name.clone(),
                                    source: source.clone(),
                                    variant,
                                },
                            });
                        }
                    }
                    for modality in case.modalities() {
                        for variant in case.variants(&self.root) {
                            for level in Level::for_modality(case.levels(), modality) {
                                let name = format!("{prefix}/{}/{}/{}/{}", modality, variant.ep, variant.dtype, level);
                                out.push(TrialSpec {
                                    name,
                                    kind: TrialKind::Conformance { case: case.clone(), modality, variant: variant.clone(), level },
                                });
                            }
                        }
                    }
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out.dedup_by(|a, b| a.name == b.name);
        out
    }
}

/// `path` relative to `root`, with `/` separators, for messages.
pub fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).to_string_lossy().replace('\\', "/")
}

#[derive(Debug, Clone)]
pub struct BrokenCase {
    pub name: String,
    pub file: String,
    pub error: Error,
    /// The trials it would have had, as far as its text says (see [`crate::discovery::expected_trials`]).
    pub expected: Vec<String>,
}

#[derive(Debug, Clone)]
pub enum TrialKind {
    Broken(BrokenCase),
    Conformance {
        case: Arc<Case>,
        modality: Modality,
        variant: Variant,
        level: Level,
    },
    /// The accuracy gate: one benchmark task (its YAML file, and its name) on one variant.
    Accuracy {
        case: Arc<Case>,
        task: String,
        task_name: String,
        /// What the case says about the task (data folder, overrides).
        source: crate::task::Source,
        variant: Variant,
    },
}

#[derive(Debug, Clone)]
pub struct TrialSpec {
    pub name: String,
    pub kind: TrialKind,
}

impl TrialSpec {
    /// Whether the trial belongs to a case whose packages are built outside the checkout (`build_command`: the
    /// real tier). Whole-suite measurements of the tiny tier (repeatability, bench overhead) leave these out.
    pub fn is_built_elsewhere(&self) -> bool {
        match &self.kind {
            TrialKind::Conformance { case, .. } | TrialKind::Accuracy { case, .. } => case.spec.build_command.is_some(),
            TrialKind::Broken(_) => false,
        }
    }
}

/// How a trial ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Pass,
    /// A near-tie explains the difference: a pass, shown.
    Ambiguous,
    /// The output diverges from the golden exactly as a reviewed, committed snapshot says: a pass, shown.
    Accepted,
    /// Failed, as the case's `xfail` says it does: a pass, shown.
    ExpectedFailure,
    Skip,
    Fail,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Ambiguous => "AMBIGUOUS",
            Status::Accepted => "ACCEPTED",
            Status::ExpectedFailure => "XFAIL",
            Status::Skip => "SKIP",
            Status::Fail => "FAIL",
        }
    }
}

impl From<Verdict> for Status {
    fn from(v: Verdict) -> Status {
        match v {
            Verdict::Pass => Status::Pass,
            Verdict::Ambiguous => Status::Ambiguous,
            Verdict::Fail => Status::Fail,
        }
    }
}

/// A trial's result: its status, the message a person reads, and the numbers a summary table shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub status: Status,
    pub message: String,
    pub max_abs_diff: Option<f64>,
    pub first_divergence: Option<usize>,
    /// The rendered L5 snapshot, when the trial compared one.
    pub snapshot: Option<String>,
    /// Every number the verdict measured, and the series the reports plot.
    pub detail: Option<Box<Detail>>,
    /// What failed, when a verdict failed (what an xfail entry can expect); `None` for a pass or an error.
    pub failure: Option<Box<Failure>>,
}

impl Outcome {
    fn new(status: Status, message: impl Into<String>) -> Outcome {
        Outcome { status, message: message.into(), max_abs_diff: None, first_divergence: None, snapshot: None, detail: None, failure: None }
    }

    pub fn skip(reason: impl Into<String>) -> Outcome {
        Outcome::new(Status::Skip, reason)
    }

    pub fn fail(message: impl Into<String>) -> Outcome {
        Outcome::new(Status::Fail, message)
    }

    /// A trial that ended in `error`: a failure, which an xfail may expect only when it measured the package
    /// computing NaN or infinite logits (every other error is bad input or a broken set-up, never expected).
    pub fn from_error(trial: &str, error: &Error) -> Outcome {
        let failure = error
            .is_non_finite()
            .then(|| Box::new(Failure { kind: FailureKind::NonFinite, max_abs_diff: None, first_step: None, first_position: None }));
        Outcome { failure, ..Outcome::fail(format!("{trial}: {error}")) }
    }

    pub fn is_fail(&self) -> bool {
        self.status == Status::Fail
    }
}

/// A finished trial, with how long it took.
#[derive(Debug, Clone)]
pub struct Finished {
    pub name: String,
    pub outcome: Outcome,
    pub seconds: f64,
}

/// "3 passed, 0 ambiguous, 0 accepted, 1 xfail, 2 skipped, 0 failed": how a set of finished trials ended.
pub fn tally(rows: &[Finished]) -> String {
    let count = |s: Status| rows.iter().filter(|r| r.outcome.status == s).count();
    format!(
        "{} passed, {} ambiguous, {} accepted, {} xfail, {} skipped, {} failed",
        count(Status::Pass),
        count(Status::Ambiguous),
        count(Status::Accepted),
        count(Status::ExpectedFailure),
        count(Status::Skip),
        count(Status::Fail)
    )
}

/// Runs `plan` on `threads` workers (sessions are shared between them), calling `on_done` as each trial ends.
/// Returns every result, sorted by trial name.
pub fn run_parallel(
    suite: &Suite,
    plan: &[TrialSpec],
    device: Device,
    threads: usize,
    on_done: impl Fn(&Finished) + Sync,
) -> Vec<Finished> {
    let done = std::sync::Mutex::new(Vec::with_capacity(plan.len()));
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                while let Some(spec) = plan.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                    let t0 = std::time::Instant::now();
                    let outcome = guarded(&spec.name, || run(suite, spec, device));
                    let f = Finished { name: spec.name.clone(), outcome, seconds: t0.elapsed().as_secs_f64() };
                    on_done(&f);
                    done.lock().unwrap_or_else(|p| p.into_inner()).push(f);
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    done.sort_by(|a, b| a.name.cmp(&b.name));
    done
}

/// Runs one trial so that a panic inside it (a bug of the suite, or an input no check foresaw) fails that trial
/// with the panic's message instead of taking the whole run, and its report, down with it.
pub fn guarded(name: &str, trial: impl FnOnce() -> Outcome) -> Outcome {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(trial)).unwrap_or_else(|p| {
        let why = p.downcast_ref::<String>().map(String::as_str).or_else(|| p.downcast_ref::<&str>().copied()).unwrap_or("(no message)");
        Outcome::fail(format!("{name}: the trial panicked: {why}"))
    })
}

/// Which execution provider runs a variant on `device`, or why it cannot run here.
pub fn provider_for(ep: Ep, device: Device) -> std::result::Result<Provider, String> {
    match (ep, device) {
        (Ep::Cpu, _) => Ok(Provider::Cpu),
        (Ep::Default, Device::Cpu) => Ok(Provider::Cpu),
        (Ep::Default | Ep::Cuda, Device::Cuda { id }) => Ok(Provider::Cuda { id }),
        (Ep::Cuda, Device::Cpu) => {
            Err("a `cuda` build needs the CUDA execution provider; run with MOBIUS_TEST_DEVICE=cuda on a GPU machine".into())
        }
    }
}

/// Runs one trial to its outcome. Never panics on bad input: every error becomes a failure naming its source.
pub fn run(suite: &Suite, spec: &TrialSpec, device: Device) -> Outcome {
    runtime::use_device(device);
    match &spec.kind {
        TrialKind::Broken(b) => Outcome::fail(format!("{}: the case does not load:\n  {}", spec.name, b.error)),
        TrialKind::Conformance { case, modality, variant, level } => {
            let t = Trial { suite, name: &spec.name, case, modality: *modality, variant, level: *level, device };
            let outcome = t.run().unwrap_or_else(|e| Outcome::from_error(&spec.name, &e));
            t.apply_xfail(outcome)
        }
        TrialKind::Accuracy { case, task, task_name, source, variant } => {
            let t = Trial { suite, name: &spec.name, case, modality: Modality::Text, variant, level: Level::Accuracy, device };
            let outcome = t.run_accuracy(task, task_name, source).unwrap_or_else(|e| Outcome::from_error(&spec.name, &e));
            t.apply_xfail(outcome)
        }
    }
}

struct Trial<'a> {
    suite: &'a Suite,
    name: &'a str,
    case: &'a Case,
    modality: Modality,
    variant: &'a Variant,
    level: Level,
    device: Device,
}

impl Trial<'_> {
    fn regenerate(&self) -> String {
        let level = match self.level {
            // Features and inputs are written with the case's goldens, whatever the level.
            Level::VisionEncoder | Level::AudioEncoder | Level::Accuracy | Level::Genai => String::new(),
            level => format!(" --level {level}"),
        };
        format!("cargo xtask regen-goldens --case {}{level} --force{}", self.case.name, self.suite.root_option())
    }

    /// What every report of this trial names: the trial, its case file, the golden, how to regenerate it, the policy.
    fn report_context<'a>(
        &'a self,
        tokenizer: &'a TextTokenizer,
        golden_file: &'a str,
        regenerate: &'a str,
        policy: &'a crate::tolerance::Policy,
    ) -> report::Context<'a> {
        report::Context { trial: self.name, case_file: &self.case.file, golden_file, regenerate, policy_source: &policy.source, tokenizer }
    }

    fn rel(&self, p: &Path) -> String {
        relative(&self.suite.root, p)
    }

    /// The case's xfail entry naming this trial, if any.
    fn xfail(&self) -> Option<&crate::xfail::Xfail> {
        let v = self.variant;
        self.case.spec.xfail.iter().find(|x| x.applies(self.modality, v.ep, v.dtype, self.level))
    }

    /// Strict expected failures: a listed trial that fails exactly as its entry expects passes as XFAIL; one that
    /// passes, or fails otherwise (another kind, a diff outside the range, another step, no verdict at all), fails
    /// and prints both the expected and the actual failure.
    fn apply_xfail(&self, o: Outcome) -> Outcome {
        let Some(x) = self.xfail() else { return o };
        let expected = x.expect.as_ref().map_or_else(|| "(none stated)".to_string(), ToString::to_string);
        let actual = o.failure.as_ref().map_or_else(|| "no verdict failure".to_string(), ToString::to_string);
        match o.status {
            Status::Fail => {
                let mismatch = match &x.expect {
                    Some(e) => e.mismatch(o.failure.as_deref()),
                    None => Some("the xfail entry states no expected failure".into()),
                };
                match mismatch {
                    None => Outcome {
                        status: Status::ExpectedFailure,
                        message: format!(
                            "{}: XFAIL ({})\n  expected: {expected}\n  actual:   {actual}\n{}",
                            self.name, x.reason, o.message
                        ),
                        ..o
                    },
                    Some(why) => Outcome {
                        status: Status::Fail,
                        message: format!(
                            "{}: not the expected failure: {why}\n  expected: {expected} (xfail in {}: {})\n  actual:   {actual}\n{}",
                            self.name, self.case.file, x.reason, o.message
                        ),
                        ..o
                    },
                }
            }
            Status::Skip | Status::ExpectedFailure => o,
            _ => Outcome {
                status: Status::Fail,
                message: format!(
                    "{}: unexpectedly passed ({}): remove the xfail from {} (reason was: {})\n  expected: {expected}\n{}",
                    self.name,
                    o.status.name(),
                    self.case.file,
                    x.reason,
                    o.message
                ),
                ..o
            },
        }
    }

    /// Where the variant runs and its package directory, or why the trial skips.
    fn placement(&self) -> std::result::Result<(Provider, PathBuf), Outcome> {
        let spec = &self.case.spec;
        if let Some(why) = corpus::level_skip(self.case, self.level) {
            return Err(Outcome::skip(why));
        }
        if let Some(r) = spec.skip_reason.as_deref().filter(|r| !r.trim().is_empty()) {
            return Err(Outcome::skip(format!("skip_reason: {r}")));
        }
        if std::env::var_os("CI").is_some()
            && let Some(r) = spec.ci_skip_reason.as_deref().filter(|r| !r.trim().is_empty())
        {
            return Err(Outcome::skip(format!("ci_skip_reason (CI is set): {r}")));
        }
        let provider = provider_for(self.variant.ep, self.device).map_err(Outcome::skip)?;
        let Some(location) = &self.variant.package else {
            return Err(Outcome::skip(format!(
                "{} names no package for {}/{}: add `matrix.package` (or `matrix.packages`) to run it",
                self.case.file, self.variant.ep, self.variant.dtype
            )));
        };
        let package = match location {
            // A model that is not downloaded is absent, not broken: say what is missing and how to get it. Unless
            // it is required (the case's `required`, or MOBIUS_REQUIRE_MODELS): then a gate on it must not go green.
            Location::Hub(_) => location.resolve("genai_config.json").map_err(|e| match self.required() {
                Some(why) => Outcome::fail(format!("{}: model absent, and {why}: {e}", self.name)),
                None => Outcome::skip(format!("model absent: {e}")),
            })?,
            Location::Local(p) => {
                if !spec.external_paths {
                    self.confine_package(p).map_err(|e| Outcome::fail(format!("{}: {e}", self.name)))?;
                }
                p.clone()
            }
        };
        if let Some(build) = spec.build_command.as_deref()
            && !package.exists()
        {
            let msg = format!("package {} is not built; build it with `{build}`", self.rel(&package));
            return Err(if std::env::var_os("CI").is_some() {
                Outcome::fail(format!("{}: {msg} (CI is set: the real tier must run)", self.name))
            } else {
                Outcome::skip(msg)
            });
        }
        Ok((provider, package))
    }

    /// Why a missing model fails this trial instead of skipping it, if it does.
    fn required(&self) -> Option<String> {
        if self.case.spec.required {
            Some(format!("{} sets `required: true`", self.case.file))
        } else if self.suite.require_models {
            Some("models are required in this run (MOBIUS_REQUIRE_MODELS=1 or `xtask ci --require`)".to_string())
        } else {
            None
        }
    }

    /// A local package and the files its genai_config.json names stay inside the suite root, symlinks resolved.
    fn confine_package(&self, package: &Path) -> Result<()> {
        let what = format!("{}: field `matrix.package` ({}/{})", self.case.file, self.variant.ep, self.variant.dtype);
        let root = &self.suite.root;
        crate::paths::confine(root, package, &what, crate::paths::CASE_HINT)?;
        if !package.is_dir() {
            return Ok(());
        }
        let config = package.join("genai_config.json");
        crate::paths::confine(root, &config, &what, crate::paths::CASE_HINT)?;
        let cfg = crate::package::GenaiConfig::load_if_present(package)?;
        let named = cfg.as_ref().map(|c| c.files()).unwrap_or_default();
        for file in named.into_iter().chain(["model.onnx"]) {
            let model = package.join(file);
            crate::paths::confine(root, &model, &format!("{what}: model `{file}`"), crate::paths::CASE_HINT)?;
            let data = package.join(format!("{file}.data"));
            crate::paths::confine(root, &data, &format!("{what}: external data of `{file}`"), crate::paths::CASE_HINT)?;
        }
        Ok(())
    }

    /// The package's decoder session, or a skip naming the node when the CPU EP cannot run a half-precision build.
    fn decoder(&self, package: &Path, provider: Provider) -> Result<std::result::Result<Arc<runtime::Decoder>, Outcome>> {
        let model = package_model(package)
            .map_err(|e| e.context(format!("{}: package for {}/{}", self.case.file, self.variant.ep, self.variant.dtype)))?;
        match runtime::decoder(&model, provider) {
            Ok(d) => Ok(Ok(d)),
            // A half-precision build the CPU EP has no kernels for (bf16 MatMul, ...) cannot run here: say which
            // node, and where it runs. A float32 or int4 build missing a kernel is a broken package: it fails.
            Err(e) if matches!(self.variant.dtype, Dtype::F16 | Dtype::Bf16) && provider == Provider::Cpu => {
                let Some(why) = runtime::cpu_cannot_run(&e, self.variant.dtype == Dtype::Bf16) else { return Err(e) };
                Ok(Err(Outcome::skip(format!(
                    "ONNX Runtime's CPU execution provider cannot run this {} build: {why}; run it with MOBIUS_TEST_DEVICE=cuda",
                    self.variant.dtype
                ))))
            }
            Err(e) => Err(e),
        }
    }

    /// A missing golden or baseline: a skip here, a failure under CI (pre-merge gating must never pass a case whose
    /// golden was forgotten).
    fn missing(&self, path: &Path) -> Outcome {
        let msg = format!("no golden at {}; make it with `{}`", self.rel(path), self.regenerate());
        if std::env::var_os("CI").is_some() {
            Outcome::fail(format!("{}: {msg} and commit it (CI is set)", self.name))
        } else {
            Outcome::skip(msg)
        }
    }

    /// The case's tokenizer: `tokenizer`, else `reference`, else the package's own.
    fn tokenizer(&self, package: &Path) -> Result<Arc<TextTokenizer>> {
        let location = self.case.tokenizer_location(&self.suite.root);
        if let Some(Location::Local(p)) = &location
            && !self.case.spec.external_paths
        {
            let what = format!("{}: field `tokenizer` (or `reference`)", self.case.file);
            crate::paths::confine(&self.suite.root, p, &what, crate::paths::CASE_HINT)?;
            crate::paths::confine(&self.suite.root, &p.join("tokenizer.json"), &what, crate::paths::CASE_HINT)?;
        }
        let (tok_dir, field) = match location {
            Some(l) => (
                l.resolve("tokenizer.json").map_err(|e| e.context(format!("{}: field `tokenizer`", self.case.file)))?,
                "field `tokenizer` (or `reference`)",
            ),
            None => (package.to_path_buf(), "the package's tokenizer"),
        };
        TextTokenizer::load(&tok_dir).map_err(|e| e.context(format!("{}: {field}", self.case.file)))
    }

    /// The accuracy gate on one task: the package's benchmark accuracy against the reference's baseline.
    fn run_accuracy(&self, task_file: &str, task_name: &str, source: &crate::task::Source) -> Result<Outcome> {
        let (provider, package) = match self.placement() {
            Ok(p) => p,
            Err(skip) => return Ok(skip),
        };
        let baseline_path = self.suite.baseline_path(task_name, &self.case.name);
        if !baseline_path.is_file() {
            return Ok(self.missing(&baseline_path));
        }
        let baseline_file = self.rel(&baseline_path);
        crate::paths::confine(&self.suite.root, &baseline_path, "baseline", crate::paths::SUITE_HINT)?;
        let baseline = gate::Baseline::load(&baseline_path, &baseline_file)?;
        let tokenizer = self.tokenizer(&package)?;
        let loaded =
            crate::task::load_items_with(&self.suite.root, task_file, source, &tokenizer).map_err(|e| e.context(&self.case.file))?;
        let (task, items) = (&loaded.0, &loaded.1);
        if baseline.requests_hash != gate::requests_hash(items) {
            return Err(Error::new(format!(
                "baseline is stale: {baseline_file} was made from other requests than {task_file} and {} give now \
                 (the task, its data or the tokenizer changed)\n  regenerate: {}",
                tokenizer.path.display(),
                self.regenerate()
            )));
        }
        let decoder = match self.decoder(&package, provider)? {
            Ok(d) => d,
            Err(skip) => return Ok(skip),
        };
        let eos = self.eos_ids(&package)?;
        let got = crate::eval::score(&decoder, task, items, &tokenizer, &eos).map_err(|e| e.context(task_file))?;
        let policy = task.spec.gate_policy(std::env::var_os("CI").is_some());
        let r = gate::judge(items, &got, &baseline, task.spec.metric, &policy).map_err(|e| e.context(&baseline_file))?;
        let message = gate::render(self.name, task.spec.metric, &r, &baseline_file, &self.regenerate());
        Ok(Outcome {
            status: if r.pass { Status::Pass } else { Status::Fail },
            message,
            // The largest log-likelihood difference; the change in accuracy is the detail's own number.
            max_abs_diff: r.max_loglik_diff,
            first_divergence: None,
            snapshot: None,
            detail: Some(Box::new(Detail::Accuracy(detail::accuracy(task.spec.metric.name(), &r)))),
            failure: (!r.pass).then(|| {
                Box::new(Failure { kind: FailureKind::Accuracy, max_abs_diff: r.max_loglik_diff, first_step: None, first_position: None })
            }),
        })
    }

    fn run(&self) -> Result<Outcome> {
        let spec = &self.case.spec;
        let (provider, package) = match self.placement() {
            Ok(p) => p,
            Err(skip) => return Ok(skip),
        };
        let package = &package;
        let paths = self.suite.golden_paths(self.case, self.modality, self.variant.dtype);
        let golden_path = match self.level {
            Level::L4 => &paths.prefill,
            Level::L5 => &paths.generation,
            Level::VisionEncoder | Level::AudioEncoder => &paths.features,
            // genai is judged against both goldens; it needs at least one.
            Level::Genai if !paths.generation.is_file() && paths.prefill.is_file() => &paths.prefill,
            Level::Genai => &paths.generation,
            Level::Accuracy => return Err(Error::new("accuracy trials run through run_accuracy")),
        };
        crate::paths::confine(&self.suite.root, golden_path, "golden", crate::paths::SUITE_HINT)?;
        if !golden_path.is_file() {
            return Ok(self.missing(golden_path));
        }
        let media = self.modality != Modality::Text;
        for p in std::iter::once(&paths.inputs).chain(&paths.shared_inputs).filter(|_| media) {
            crate::paths::confine(&self.suite.root, p, "golden", crate::paths::SUITE_HINT)?;
        }
        let inputs_needed = std::iter::once(&paths.inputs).chain(&paths.shared_inputs).filter(|_| media);
        if let Some(missing) = inputs_needed.into_iter().find(|p| !p.is_file()) {
            let msg = corpus::missing_inputs(self.case, &self.rel(missing));
            // Under CI, inputs the suite makes itself (the case names its reference) must be committed.
            return Ok(if std::env::var_os("CI").is_some() && self.case.spec.reference.is_some() {
                Outcome::fail(format!("{}: {msg} and commit them (CI is set)", self.name))
            } else {
                Outcome::skip(msg)
            });
        }
        let policy = self.suite.policy.as_ref().map_err(Clone::clone)?;
        let tol = policy.resolve(self.level, self.variant.dtype, spec.tolerance.as_ref(), spec.min_token_match_ratio);
        if spec.tolerance.is_some() {
            let base = policy.resolve(self.level, self.variant.dtype, None, spec.min_token_match_ratio);
            crate::tolerance::check_loosening(&base, &tol).map_err(|e| {
                e.context(format!("{} ({} for {}/{}, {})", self.case.file, self.level, self.variant.dtype, self.variant.ep, policy.source))
            })?;
        }

        // case -> inputs
        let Some(prompt) = self.case.prompt() else {
            return Err(Error::new(format!("{}: field `inputs.prompts` is empty; a text case needs one prompt", self.case.file)));
        };
        let tokenizer = self.tokenizer(package)?;
        // Media inputs are what the Hugging Face processor made (chat template, expanded media tokens, pixels, mel
        // features), stored beside the goldens; text is tokenized here, so a changed prompt shows as a stale golden.
        let inputs = if media { paths.load_inputs(|p| self.rel(p))? } else { Inputs::from_token_ids(&tokenizer.encode(prompt)?) };

        if self.level == Level::Genai {
            return self.run_genai(package, provider, &paths, &inputs, prompt, &tokenizer, policy);
        }

        // inputs -> runtime
        let decoder = match self.decoder(package, provider)? {
            Ok(d) => d,
            Err(skip) => return Ok(skip),
        };
        let pipeline = Pipeline::build(package, &decoder, provider, &inputs, &self.rel(&paths.inputs))?;
        let front = pipeline.front();
        let golden_file = self.rel(golden_path);
        let token = |id: i64| tokenizer.token(id);
        let text = |ids: &[i64]| tokenizer.decode(ids);
        let regenerate = self.regenerate();
        let ctx = self.report_context(&tokenizer, &golden_file, &regenerate, policy);
        let stale = |reason: String| Error::new(format!("golden is stale: {reason}\n  regenerate: {}", self.regenerate()));

        // outputs -> verdict -> report
        match self.level {
            Level::L4 => {
                let golden = PrefillGolden::load(golden_path)?;
                if let Some(why) = verdict::staleness(golden.input_hash.as_deref(), None, &golden.input_ids, prompt, &inputs) {
                    return Err(stale(format!("{golden_file} {why} ({})", self.case.file)));
                }
                let reference = golden.full_logits(golden_path)?;
                // Every prompt position the golden stores is judged at its ids; the last one over the vocabulary.
                let watch: Vec<&[i64]> = golden.positions.iter().map(|p| p.ids.as_slice()).collect();
                let (got, positions) = match watch.is_empty() {
                    true => (generate::prefill(&decoder, &front, inputs.input_ids())?, Vec::new()),
                    false => generate::prefill_positions(&decoder, &front, inputs.input_ids(), &watch)?,
                };
                let r = verdict::judge_prefill(&got, &golden, reference.as_deref(), &tol);
                let r = match verdict::judge_positions(&positions, &golden, &tol) {
                    Some(p) => verdict::with_positions(r, p),
                    None => r,
                };
                let d = detail::prefill(&r, &got, reference.as_deref());
                // The largest difference L4 measured: the last position's, or an earlier position's when larger.
                let max_abs = match (d.max_abs, r.positions.as_ref().map(|p| p.max_abs)) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                let failure = (r.verdict == Verdict::Fail).then(|| {
                    let first_position = r.positions.as_ref().and_then(|p| p.first_out).map(|o| o.position);
                    Box::new(Failure { first_position, ..Failure::prefill(max_abs) })
                });
                Ok(Outcome {
                    status: r.verdict.into(),
                    message: report::prefill(&ctx, &r),
                    max_abs_diff: max_abs,
                    first_divergence: None,
                    snapshot: None,
                    detail: Some(Box::new(Detail::Prefill(d))),
                    failure,
                })
            }
            Level::L5 => {
                let golden = GenerationGolden::load(golden_path)?;
                if let Some(why) = verdict::staleness(golden.input_hash.as_deref(), Some(&golden.prompt), &[], prompt, &inputs) {
                    return Err(stale(format!("{golden_file} {why} ({})", self.case.file)));
                }
                // The stream's length is part of what the golden pins: a case asking for another length has a
                // golden made for a different check.
                if let Some(g) = golden.max_new_tokens
                    && g != self.case.max_new_tokens()
                {
                    return Err(stale(format!(
                        "{golden_file} was made with max_new_tokens {g}, but {} field `generation.max_new_tokens` is {}",
                        self.case.file,
                        self.case.max_new_tokens()
                    )));
                }
                if golden.generated_tokens.len() > self.case.max_new_tokens() as usize {
                    return Err(stale(format!(
                        "{golden_file} holds {} generated tokens, more than {} field `generation.max_new_tokens` ({}) allows",
                        golden.generated_tokens.len(),
                        self.case.file,
                        self.case.max_new_tokens()
                    )));
                }
                let eos = self.eos_ids(package)?;
                let max_new = golden.max_new_tokens.unwrap_or(self.case.max_new_tokens()) as usize;
                // Each step keeps the package's logits at the reference's stored ids for that step.
                let watch: Vec<&[i64]> = golden.steps.iter().map(|s| s.ids.as_slice()).collect();
                let free = generate::greedy(&decoder, &front, inputs.input_ids(), max_new, &eos, None, &watch)?;
                let got = free.chosen();
                // A stream equal to the golden's was fed the golden's tokens: it is its own teacher-forced run.
                let forced = if got != golden.generated_tokens && !golden.generated_tokens.is_empty() {
                    Some(generate::greedy(&decoder, &front, inputs.input_ids(), max_new, &eos, Some(&golden.generated_tokens), &watch)?)
                } else {
                    None
                };
                let r = verdict::judge_generation(&got, &golden, forced.as_ref().map(|f| f.chosen()).as_deref(), &tol);
                let teacher: Vec<Vec<f32>> = forced.as_ref().unwrap_or(&free).steps.iter().map(|s| s.watched.clone()).collect();
                let step_logits = verdict::judge_step_logits(&teacher, &golden, &tol);
                let tokens_failed = r.verdict == Verdict::Fail;
                let r = match &step_logits {
                    Some(s) => verdict::with_step_logits(r, s),
                    None => r,
                };
                let steps = forced.as_ref().unwrap_or(&free);
                let max_step_diff = step_logits.as_ref().map(|s| s.max_abs);
                // The tokens' failure first (what a person sees first); step logits alone fail as `step_logits`.
                let failure = (r.verdict == Verdict::Fail).then(|| {
                    Box::new(match (tokens_failed, step_logits.as_ref().and_then(|s| s.first_out)) {
                        (false, Some(o)) => Failure {
                            kind: FailureKind::StepLogits,
                            max_abs_diff: max_step_diff,
                            first_step: Some(o.step),
                            first_position: None,
                        },
                        _ => Failure {
                            kind: FailureKind::Tokens,
                            max_abs_diff: max_step_diff,
                            first_step: r.first_divergence.as_ref().map(|d| d.index),
                            first_position: None,
                        },
                    })
                });
                let outcome = Outcome {
                    status: r.verdict.into(),
                    message: report::generation(&ctx, &r),
                    max_abs_diff: max_step_diff,
                    first_divergence: r.first_divergence.as_ref().map(|d| d.index),
                    snapshot: None,
                    failure,
                    detail: Some(Box::new(Detail::Generation(detail::generation(&r, &golden, &steps.steps, forced.is_some())))),
                };
                Ok(self.review_snapshot(outcome, || {
                    let l4 = paths.prefill.is_file().then(|| self.l4_note(&paths.prefill, &free.prefill_logits, &tol)).flatten();
                    (snapshot::render(self.name, &r, &golden, &token, &text), format!("{}\n{}", self.name, l4.unwrap_or_default()))
                }))
            }
            Level::Accuracy => Err(Error::new("accuracy trials run through run_accuracy")),
            Level::Genai => Err(Error::new("genai trials run through run_genai")),
            Level::VisionEncoder | Level::AudioEncoder => {
                let features = Inputs::from_safetensors(
                    &golden_file,
                    &std::fs::read(golden_path).map_err(|e| Error::new(format!("{golden_file}: {e}")))?,
                )?;
                let prefill = |p: &Pipeline| generate::prefill(&decoder, &p.front(), inputs.input_ids());
                let r = pipeline.judge_component(self.level, &features, &golden_file, &tol, prefill)?;
                let message = format!("{}: {}  regenerate (only if the reference changed): {}\n", self.name, r.message, self.regenerate());
                Ok(Outcome { message, ..r })
            }
        }
    }

    /// The package through onnxruntime-genai: the prompt's ids appended to its generator, greedy to the golden's
    /// length, judged against the L4 and L5 goldens that exist. A package genai refuses fails with genai's message.
    #[allow(clippy::too_many_arguments)]
    fn run_genai(
        &self,
        package: &Path,
        provider: Provider,
        paths: &GoldenPaths,
        inputs: &Inputs,
        prompt: &str,
        tokenizer: &TextTokenizer,
        policy: &Policy,
    ) -> Result<Outcome> {
        if let Provider::Cuda { .. } = provider {
            return Ok(Outcome::skip(format!(
                "the pinned onnxruntime-genai=={} wheel is its CPU build; genai on CUDA needs onnxruntime-genai-cuda, which \
                 the suite does not pin yet",
                crate::genai::GENAI_VERSION
            )));
        }
        if self.modality != Modality::Text {
            return self.run_genai_media(package, provider, paths, inputs, tokenizer, policy);
        }
        let spec = &self.case.spec;
        let stale = |file: &str, why: String| {
            Error::new(format!("golden is stale: {file} {why} ({})\n  regenerate: {}", self.case.file, self.regenerate()))
        };
        let prefill = if paths.prefill.is_file() { Some(PrefillGolden::load(&paths.prefill)?) } else { None };
        let full = match &prefill {
            Some(g) => g.full_logits(&paths.prefill)?,
            None => None,
        };
        let generation = if paths.generation.is_file() { Some(GenerationGolden::load(&paths.generation)?) } else { None };
        let (prefill_file, generation_file) = (self.rel(&paths.prefill), self.rel(&paths.generation));
        if let Some(g) = &prefill
            && let Some(why) = verdict::staleness(g.input_hash.as_deref(), None, &g.input_ids, prompt, inputs)
        {
            return Err(stale(&prefill_file, why));
        }
        if let Some(g) = &generation
            && let Some(why) = verdict::staleness(g.input_hash.as_deref(), Some(&g.prompt), &[], prompt, inputs)
        {
            return Err(stale(&generation_file, why));
        }
        let max_new = generation.as_ref().and_then(|g| g.max_new_tokens).unwrap_or(self.case.max_new_tokens()) as usize;
        let run = match crate::genai::greedy(package, provider, inputs.input_ids(), max_new) {
            Ok(run) => run,
            // As for the suite's own runner: a half-precision build the CPU EP has no kernels for skips, naming the node.
            Err(e) if matches!(self.variant.dtype, Dtype::F16 | Dtype::Bf16) && provider == Provider::Cpu => {
                let Some(why) = runtime::cpu_cannot_run(&e, self.variant.dtype == Dtype::Bf16) else { return Err(e) };
                return Ok(Outcome::skip(format!(
                    "ONNX Runtime's CPU execution provider (under onnxruntime-genai) cannot run this {} build: {why}; run it with MOBIUS_TEST_DEVICE=cuda",
                    self.variant.dtype
                )));
            }
            Err(e) => {
                return Err(e.context(format!("{}: genai refused or failed on the package {}", self.case.file, self.rel(package))));
            }
        };
        generate::check_finite(&run.prefill_logits, 0).map_err(|e| e.context(format!("onnxruntime-genai on {}", self.rel(package))))?;
        let (dtype, ratio) = (self.variant.dtype, spec.min_token_match_ratio);
        let tol4 = policy.resolve(Level::L4, dtype, spec.tolerance.as_ref(), ratio);
        let tol5 = policy.resolve(Level::L5, dtype, spec.tolerance.as_ref(), ratio);
        let goldens = crate::genai_level::Goldens {
            prefill: prefill.as_ref().map(|g| (g, full.as_deref(), &tol4, prefill_file.as_str())),
            generation: generation.as_ref().map(|g| (g, &tol5, generation_file.as_str())),
        };
        let regenerate = self.regenerate();
        let ctx = self.report_context(tokenizer, &generation_file, &regenerate, policy);
        Ok(crate::genai_level::judge(&ctx, &run, &goldens))
    }

    /// A media prompt through genai's own processor: the prompt it builds must be Hugging Face's (else the trial
    /// fails showing both), and its greedy tokens on what it built are judged against the L5 golden.
    fn run_genai_media(
        &self,
        package: &Path,
        provider: Provider,
        paths: &GoldenPaths,
        inputs: &Inputs,
        tokenizer: &TextTokenizer,
        policy: &Policy,
    ) -> Result<Outcome> {
        let hf = inputs.input_ids();
        let prompt = tokenizer.decode_raw(&crate::genai_level::placeholder_ids(hf));
        let media = |files: &[String], wanted: bool| -> Vec<PathBuf> {
            if wanted { files.iter().map(|f| self.suite.root.join(f)).collect() } else { Vec::new() }
        };
        let images = media(&self.case.spec.inputs.images, matches!(self.modality, Modality::Image | Modality::ImageAudio));
        let audio = media(&self.case.spec.inputs.audio, matches!(self.modality, Modality::Audio | Modality::ImageAudio));
        let generation = if paths.generation.is_file() { Some(GenerationGolden::load(&paths.generation)?) } else { None };
        let max_new = generation.as_ref().and_then(|g| g.max_new_tokens).unwrap_or(self.case.max_new_tokens()) as usize;
        let run = crate::genai::Model::load(package, provider)
            .and_then(|m| m.greedy_media(&prompt, &images, &audio, max_new))
            .map_err(|e| e.context(format!("{}: genai refused or failed on the package {}", self.case.file, self.rel(package))))?;
        let text = |ids: &[i64]| tokenizer.decode_raw(ids);
        let mut message = format!("{}: genai: {} prompt through onnxruntime-genai's own processor\n", self.name, self.modality);
        let mut status = Status::Pass;
        let mut failure = None;
        if let Some(d) = crate::genai_level::prompt_difference(hf, &run.processor_ids, &text) {
            status = Status::Fail;
            failure = Some(Box::new(Failure { kind: FailureKind::Prompt, max_abs_diff: None, first_step: None, first_position: None }));
            message.push_str(&format!("  - {d}"));
        }
        if let Some(g) = &generation {
            let spec = &self.case.spec;
            let tol = policy.resolve(Level::L5, self.variant.dtype, spec.tolerance.as_ref(), spec.min_token_match_ratio);
            let r = verdict::judge_generation(&run.tokens, g, None, &tol);
            if r.verdict == Verdict::Fail && failure.is_none() {
                let first_step = r.first_divergence.as_ref().map(|d| d.index);
                failure = Some(Box::new(Failure { kind: FailureKind::Tokens, max_abs_diff: None, first_step, first_position: None }));
            }
            status = status.max(r.verdict.into());
            let (file, regenerate) = (self.rel(&paths.generation), self.regenerate());
            let ctx = self.report_context(tokenizer, &file, &regenerate, policy);
            message.push_str(&report::generation(&ctx, &r));
        }
        Ok(Outcome { status, message, max_abs_diff: None, first_divergence: None, snapshot: None, detail: None, failure })
    }

    /// A failing stream, or one with a committed snapshot, is judged by its snapshot: equal to the reviewed one, it
    /// passes as ACCEPTED; otherwise it fails, and insta leaves a `.snap.new` to review (not under CI). An expected
    /// failure needs no review: its reason is already written in the case. `render` gives (content, description).
    fn review_snapshot(&self, o: Outcome, render: impl FnOnce() -> (String, String)) -> Outcome {
        let dir = self.suite.snapshots_dir(&self.case.task_dir);
        let v = self.variant;
        let name = format!("{}__{}__{}__{}__{}", self.case.name, self.modality.slug(), v.ep, v.dtype, self.level);
        // A snapshot's content is echoed in the diff: only one inside the root is read.
        if let Err(e) = crate::paths::confine(&self.suite.root, &snapshot::path(&dir, &name), "snapshot", crate::paths::SUITE_HINT) {
            return Outcome { status: Status::Fail, message: format!("{}  {e}\n", o.message), ..o };
        }
        let committed = snapshot::path(&dir, &name).is_file();
        let expected_to_fail = self.xfail().is_some();
        if !committed && (o.status != Status::Fail || expected_to_fail) {
            return o;
        }
        let (content, description) = render();
        let (status, message) = match snapshot::assert(&dir, &name, &content, &description, &self.suite.root) {
            Ok(()) => {
                let shown = self.rel(&snapshot::path(&dir, &name));
                (Status::Accepted, format!("{}  accepted: the stream equals the reviewed snapshot {shown}\n", o.message))
            }
            Err(e) => (Status::Fail, format!("{}  {e}\n  snapshot:\n{}", o.message, indent(&content, "    "))),
        };
        Outcome { status, message, snapshot: Some(content), ..o }
    }

    /// The L4 numbers of this stream's prefill, for the snapshot's description.
    fn l4_note(&self, golden_path: &Path, logits: &[f32], tol: &Tolerance) -> Option<String> {
        let golden = PrefillGolden::load(golden_path).ok()?;
        let reference = golden.full_logits(golden_path).ok()?;
        let r = verdict::judge_prefill(logits, &golden, reference.as_deref(), tol);
        let c = r.comparison?;
        Some(format!("L4 of this prefill: {} max |diff| {:.3e} at id {}, cosine {:.7}", r.verdict, c.max_abs, c.max_abs_at, c.cosine))
    }

    /// EOS ids: the case's `generation.eos_token_id`, else the package's genai_config.json, else none. A
    /// genai_config.json that is there but invalid is an error, never "no EOS".
    fn eos_ids(&self, package: &Path) -> Result<Vec<i64>> {
        if let Some(e) = self.case.spec.generation.eos_token_id {
            return Ok(vec![e]);
        }
        Ok(crate::package::GenaiConfig::load_if_present(package)?.map(|c| c.eos_token_ids).unwrap_or_default())
    }
}

fn indent(text: &str, prefix: &str) -> String {
    text.lines().map(|l| format!("{prefix}{l}\n")).collect()
}

/// The decoder model file of a package directory (via genai_config.json), or the file itself.
pub fn package_model(package: &Path) -> Result<PathBuf> {
    if package.is_file() {
        return Ok(package.to_path_buf());
    }
    if !package.is_dir() {
        return Err(Error::new(format!("{} does not exist", package.display())));
    }
    let file = crate::package::GenaiConfig::load_if_present(package)?.and_then(|c| c.decoder_file).unwrap_or_else(|| "model.onnx".into());
    let model = package.join(&file);
    if !model.is_file() {
        return Err(Error::new(format!("{}: decoder model `{file}` not found", package.display())));
    }
    Ok(model)
}
