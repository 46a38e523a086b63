//! The suite on disk and its trials: case -> inputs -> runtime -> outputs -> verdict -> report.
//!
//! One trial per case x modality x ep x dtype x level, named `<case>/<modality>/<ep>/<dtype>/<level>`. A case that
//! does not load becomes one failing trial of its own (`<case>/case`); it never stops the others.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::case::{Case, Dtype, Ep, Level, Location, Modality, Variant};
use crate::error::{Error, Result};
use crate::gate;
use crate::generate;
use crate::golden::{GenerationGolden, GoldenPaths, PrefillGolden};
use crate::inputs::Inputs;
use crate::pipeline::Pipeline;
use crate::report;
use crate::runtime::{self, Device, Provider};
use crate::snapshot;
use crate::tokenizer::TextTokenizer;
use crate::tolerance::{Policy, Tolerance};
use crate::verdict::{self, Verdict};

/// A suite root: `cases/` and `goldens/` (or mobius' `golden/`) beside each other.
#[derive(Debug, Clone)]
pub struct Suite {
    pub root: PathBuf,
    pub cases_dir: PathBuf,
    pub goldens_dir: PathBuf,
    pub policy: std::result::Result<Arc<Policy>, Error>,
}

impl Suite {
    pub fn open(root: &Path) -> Suite {
        let cases_dir = root.join("cases");
        let goldens_dir = ["goldens", "golden"].iter().map(|d| root.join(d)).find(|d| d.is_dir()).unwrap_or_else(|| root.join("goldens"));
        let policy = [cases_dir.join("tolerances.yaml"), root.join("default_tolerances.yaml")]
            .into_iter()
            .find(|p| p.is_file())
            .map_or_else(|| Ok(Policy::builtin()), |p| Policy::load(&p))
            .map(|mut p| {
                p.source = relative(root, Path::new(&p.source));
                Arc::new(p)
            });
        Suite { root: root.to_path_buf(), cases_dir, goldens_dir, policy }
    }

    /// Every case file under `cases/`, sorted, each parsed on its own.
    pub fn load_cases(&self) -> Vec<std::result::Result<Arc<Case>, BrokenCase>> {
        let mut files = Vec::new();
        collect_yaml(&self.cases_dir, &mut files);
        files.sort();
        files
            .into_iter()
            .filter(|p| p != &self.cases_dir.join("tolerances.yaml") && !p.starts_with(self.cases_dir.join("tasks")))
            .map(|path| {
                let file = relative(&self.root, &path);
                let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("?").to_string();
                let task_dir = path
                    .parent()
                    .and_then(|p| p.strip_prefix(&self.cases_dir).ok())
                    .map(|p| p.to_string_lossy().replace('\\', "/"))
                    .unwrap_or_default();
                std::fs::read_to_string(&path)
                    .map_err(|e| Error::new(format!("{file}: {e}")))
                    .and_then(|text| Case::parse(&file, &task_dir, &name, &text))
                    .map(Arc::new)
                    .map_err(|error| BrokenCase { name, file, error })
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

    /// All trials, sorted by name.
    pub fn plan(&self) -> Vec<TrialSpec> {
        let mut out = Vec::new();
        for c in self.load_cases() {
            match c {
                Err(b) => out.push(TrialSpec { name: format!("{}/case", b.name), kind: TrialKind::Broken(b) }),
                Ok(case) => {
                    for task in &case.spec.accuracy {
                        let task_name = Path::new(task).file_stem().and_then(|s| s.to_str()).unwrap_or("task").to_string();
                        for variant in case.variants(&self.root) {
                            out.push(TrialSpec {
                                name: format!("{task_name}/{}/{}/{}/accuracy", case.name, variant.ep, variant.dtype),
                                kind: TrialKind::Accuracy { case: case.clone(), task: task.clone(), task_name: task_name.clone(), variant },
                            });
                        }
                    }
                    for modality in case.modalities() {
                        for variant in case.variants(&self.root) {
                            for level in Level::for_modality(case.levels(), modality) {
                                let name = format!("{}/{}/{}/{}/{}", case.name, modality, variant.ep, variant.dtype, level);
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
        out
    }
}

fn collect_yaml(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_yaml(&p, out);
        } else if matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")) {
            out.push(p);
        }
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
}

impl Outcome {
    fn new(status: Status, message: impl Into<String>) -> Outcome {
        Outcome { status, message: message.into(), max_abs_diff: None, first_divergence: None, snapshot: None }
    }

    pub fn skip(reason: impl Into<String>) -> Outcome {
        Outcome::new(Status::Skip, reason)
    }

    pub fn fail(message: impl Into<String>) -> Outcome {
        Outcome::new(Status::Fail, message)
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
                    let outcome = run(suite, spec, device);
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
    match &spec.kind {
        TrialKind::Broken(b) => Outcome::fail(format!("{}: the case does not load:\n  {}", spec.name, b.error)),
        TrialKind::Conformance { case, modality, variant, level } => {
            let t = Trial { suite, name: &spec.name, case, modality: *modality, variant, level: *level, device };
            let outcome = t.run().unwrap_or_else(|e| Outcome::fail(format!("{}: {e}", spec.name)));
            t.apply_xfail(outcome)
        }
        TrialKind::Accuracy { case, task, task_name, variant } => {
            let t = Trial { suite, name: &spec.name, case, modality: Modality::Text, variant, level: Level::Accuracy, device };
            let outcome = t.run_accuracy(task, task_name).unwrap_or_else(|e| Outcome::fail(format!("{}: {e}", spec.name)));
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
        match self.level {
            // Features and inputs are written with the case's goldens, whatever the level.
            Level::VisionEncoder | Level::AudioEncoder | Level::Accuracy => {
                format!("cargo xtask regen-goldens --case {} --force", self.case.name)
            }
            level => format!("cargo xtask regen-goldens --case {} --level {level} --force", self.case.name),
        }
    }

    fn rel(&self, p: &Path) -> String {
        relative(&self.suite.root, p)
    }

    /// Strict expected failures: a listed trial that fails passes as XFAIL; one that passes is a failure.
    fn apply_xfail(&self, o: Outcome) -> Outcome {
        let Some(x) = &self.case.spec.xfail else { return o };
        if !x.applies(self.modality, self.variant.ep, self.variant.dtype, self.level) {
            return o;
        }
        match o.status {
            Status::Fail => {
                Outcome { status: Status::ExpectedFailure, message: format!("{}: XFAIL ({})\n{}", self.name, x.reason, o.message), ..o }
            }
            Status::Skip | Status::ExpectedFailure => o,
            _ => Outcome {
                status: Status::Fail,
                message: format!(
                    "{}: unexpectedly passed ({}): remove the xfail from {} (reason was: {})",
                    self.name,
                    o.status.name(),
                    self.case.file,
                    x.reason
                ),
                ..o
            },
        }
    }

    /// Where the variant runs and its package directory, or why the trial skips.
    fn placement(&self) -> std::result::Result<(Provider, PathBuf), Outcome> {
        let spec = &self.case.spec;
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
            // A model that is not downloaded is absent, not broken: say what is missing and how to get it.
            Location::Hub(_) => location.resolve("genai_config.json").map_err(|e| Outcome::skip(format!("model absent: {e}")))?,
            Location::Local(p) => p.clone(),
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
        let (tok_dir, field) = match self.case.tokenizer_location(&self.suite.root) {
            Some(l) => (
                l.resolve("tokenizer.json").map_err(|e| e.context(format!("{}: field `tokenizer`", self.case.file)))?,
                "field `tokenizer` (or `reference`)",
            ),
            None => (package.to_path_buf(), "the package's tokenizer"),
        };
        TextTokenizer::load(&tok_dir).map_err(|e| e.context(format!("{}: {field}", self.case.file)))
    }

    /// The accuracy gate on one task: the package's benchmark accuracy against the reference's baseline.
    fn run_accuracy(&self, task_file: &str, task_name: &str) -> Result<Outcome> {
        let (provider, package) = match self.placement() {
            Ok(p) => p,
            Err(skip) => return Ok(skip),
        };
        let baseline_path = self.suite.baseline_path(task_name, &self.case.name);
        if !baseline_path.is_file() {
            return Ok(self.missing(&baseline_path));
        }
        let baseline_file = self.rel(&baseline_path);
        let baseline = gate::Baseline::load(&baseline_path, &baseline_file)?;
        let tokenizer = self.tokenizer(&package)?;
        let loaded = crate::task::load_items(&self.suite.root, task_file, &tokenizer).map_err(|e| e.context(&self.case.file))?;
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
        let eos = self.eos_ids(&package);
        let got = gate::score(&decoder, task, items, &tokenizer, &eos).map_err(|e| e.context(task_file))?;
        let max_delta = task.spec.max_delta_points.unwrap_or(1.0);
        let r = gate::judge(items, &got, &baseline, task.spec.metric, max_delta).map_err(|e| e.context(&baseline_file))?;
        let message = gate::render(self.name, task.spec.metric, &r, &baseline_file, &self.regenerate());
        Ok(Outcome {
            status: if r.pass { Status::Pass } else { Status::Fail },
            message,
            max_abs_diff: Some(r.delta_points.abs()),
            first_divergence: None,
            snapshot: None,
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
            Level::Accuracy => return Err(Error::new("accuracy trials run through run_accuracy")),
        };
        let media = self.modality != Modality::Text;
        let needed =
            std::iter::once(golden_path).chain(media.then_some(&paths.inputs)).chain(if media { &paths.shared_inputs[..] } else { &[] });
        let missing = needed.into_iter().find(|p| !p.is_file());
        if let Some(missing) = missing {
            return Ok(self.missing(missing));
        }
        let policy = self.suite.policy.as_ref().map_err(Clone::clone)?;
        let tol = policy.resolve(self.level, self.variant.dtype, spec.tolerance.as_ref(), spec.min_token_match_ratio);

        // case -> inputs
        let Some(prompt) = self.case.prompt() else {
            return Err(Error::new(format!("{}: field `inputs.prompts` is empty; a text case needs one prompt", self.case.file)));
        };
        let tokenizer = self.tokenizer(package)?;
        // Media inputs are what the Hugging Face processor made (chat template, expanded media tokens, pixels, mel
        // features), stored beside the goldens; text is tokenized here, so a changed prompt shows as a stale golden.
        let inputs = if media { paths.load_inputs(|p| self.rel(p))? } else { Inputs::from_token_ids(&tokenizer.encode(prompt)?) };

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
        let ctx = report::Context {
            trial: self.name,
            case_file: &self.case.file,
            golden_file: &golden_file,
            regenerate: &regenerate,
            policy_source: &policy.source,
            token: &token,
            text: &text,
        };
        let stale = |reason: String| Error::new(format!("golden is stale: {reason}\n  regenerate: {}", self.regenerate()));

        // outputs -> verdict -> report
        match self.level {
            Level::L4 => {
                let golden = PrefillGolden::load(golden_path)?;
                if let Some(why) = verdict::staleness(golden.input_hash.as_deref(), None, &golden.input_ids, prompt, &inputs) {
                    return Err(stale(format!("{golden_file} {why} ({})", self.case.file)));
                }
                let reference = golden.full_logits(golden_path)?;
                let got = generate::prefill(&decoder, &front, inputs.input_ids())?;
                let r = verdict::judge_prefill(&got, &golden, reference.as_deref(), &tol);
                let max_abs_diff = r.comparison.as_ref().map(|c| c.max_abs).or(r.worst.map(|(_, w, g)| (g - w).abs()));
                Ok(Outcome {
                    status: r.verdict.into(),
                    message: report::prefill(&ctx, &r),
                    max_abs_diff,
                    first_divergence: None,
                    snapshot: None,
                })
            }
            Level::L5 => {
                let golden = GenerationGolden::load(golden_path)?;
                if let Some(why) = verdict::staleness(golden.input_hash.as_deref(), Some(&golden.prompt), &[], prompt, &inputs) {
                    return Err(stale(format!("{golden_file} {why} ({})", self.case.file)));
                }
                let eos = self.eos_ids(package);
                let max_new = golden.max_new_tokens.unwrap_or(self.case.max_new_tokens()) as usize;
                let free = generate::greedy(&decoder, &front, inputs.input_ids(), max_new, &eos, None)?;
                let got = free.chosen();
                let forced = if got != golden.generated_tokens && !golden.generated_tokens.is_empty() {
                    Some(
                        generate::greedy(
                            &decoder,
                            &generate::Front::Ids,
                            inputs.input_ids(),
                            max_new,
                            &eos,
                            Some(&golden.generated_tokens),
                        )?
                        .chosen(),
                    )
                } else {
                    None
                };
                let r = verdict::judge_generation(&got, &golden, forced.as_deref(), &tol);
                let outcome = Outcome {
                    status: r.verdict.into(),
                    message: report::generation(&ctx, &r),
                    max_abs_diff: None,
                    first_divergence: r.first_divergence.as_ref().map(|d| d.index),
                    snapshot: None,
                };
                Ok(self.review_snapshot(outcome, || {
                    let l4 = paths.prefill.is_file().then(|| self.l4_note(&paths.prefill, &free.prefill_logits, &tol)).flatten();
                    (snapshot::render(self.name, &r, &golden, &token, &text), format!("{}\n{}", self.name, l4.unwrap_or_default()))
                }))
            }
            Level::Accuracy => Err(Error::new("accuracy trials run through run_accuracy")),
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

    /// A failing stream, or one with a committed snapshot, is judged by its snapshot: equal to the reviewed one, it
    /// passes as ACCEPTED; otherwise it fails, and insta leaves a `.snap.new` to review (not under CI). An expected
    /// failure needs no review: its reason is already written in the case. `render` gives (content, description).
    fn review_snapshot(&self, o: Outcome, render: impl FnOnce() -> (String, String)) -> Outcome {
        let dir = self.suite.snapshots_dir(&self.case.task_dir);
        let v = self.variant;
        let name = format!("{}__{}__{}__{}__{}", self.case.name, self.modality.slug(), v.ep, v.dtype, self.level);
        let committed = snapshot::path(&dir, &name).is_file();
        let expected_to_fail = self.case.spec.xfail.as_ref().is_some_and(|x| x.applies(self.modality, v.ep, v.dtype, self.level));
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

    /// EOS ids: the case's `generation.eos_token_id`, else the package's genai_config.json, else none.
    fn eos_ids(&self, package: &Path) -> Vec<i64> {
        if let Some(e) = self.case.spec.generation.eos_token_id {
            return vec![e];
        }
        crate::package::GenaiConfig::load(package).map(|c| c.eos_token_ids).unwrap_or_default()
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
    let file = crate::package::GenaiConfig::load(package).ok().and_then(|c| c.decoder_file).unwrap_or_else(|| "model.onnx".into());
    let model = package.join(&file);
    if !model.is_file() {
        return Err(Error::new(format!("{}: decoder model `{file}` not found", package.display())));
    }
    Ok(model)
}
