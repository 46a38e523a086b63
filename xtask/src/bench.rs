//! `cargo xtask bench`: what the suite costs, side by side with the tools people use today, in one run.
//!
//! Every figure is a median over repeats (with min and max), measured in this process or in the reference venv's
//! Python (`xtask/reference/bench.py`) on the same packages and the same machine, and reported as a ratio against
//! its peer. Nothing here is a test: speed is measured and compared, never asserted in `cargo test`. A section whose
//! trials fail, or whose work is not what it says (a copy of the cases that lost a file, no trial run), prints why
//! and no figure, and the bench exits non-zero.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use mobius_conformance::accuracy::eval;
use mobius_conformance::accuracy::task;
use mobius_conformance::context::RunContext;
use mobius_conformance::feed::generation_config::GenerationConfig;
use mobius_conformance::feed::inputs::Inputs;
use mobius_conformance::feed::package::GenaiConfig;
use mobius_conformance::feed::package::package_model;
use mobius_conformance::feed::tokenizer::TextTokenizer;
use mobius_conformance::outcome::{Counts, Status};
use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::case::{Case, SpeechTask};
use mobius_conformance::plan::suite::{Suite, TrialSpec};
use mobius_conformance::run::genai;
use mobius_conformance::run::generate::{self, Front, Suppress};
use mobius_conformance::run::pipeline::Pipeline;
use mobius_conformance::run::runtime::{self, Provider, StepInput};
use mobius_conformance::trial;
use mobius_conformance::vocab::{Dtype, Ep, Modality};
use serde_json::{Value, json};

use reference_setup::venv;

/// Median, min and max of repeated measurements.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    pub fn of(mut v: Vec<f64>) -> Stats {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Stats { median, min: v[0], max: v[n - 1] }
    }

    fn from_json(v: &Value) -> Option<Stats> {
        Some(Stats { median: v["median"].as_f64()?, min: v["min"].as_f64()?, max: v["max"].as_f64()? })
    }

    fn json(&self) -> Value {
        json!({ "median": self.median, "min": self.min, "max": self.max })
    }
}

struct Options {
    json: Option<PathBuf>,
    repeats: usize,
    pairs: usize,
    tokens: usize,
    skip_python: bool,
    only: Vec<String>,
    /// The suite root the overhead and scaling sections run (`--root`); this repository when `None`.
    root: Option<PathBuf>,
}

impl Options {
    fn runs(&self, section: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == section)
    }
}

const SECTIONS: [&str; 8] = ["decode", "prefill", "gate", "overhead", "scaling", "real", "gate-real", "speech"];

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options { json: None, repeats: 5, pairs: 15, tokens: 128, skip_python: false, only: Vec::new(), root: None };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => o.json = Some(PathBuf::from(it.next().ok_or("--json needs a file")?)),
            "--repeats" => o.repeats = it.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0).ok_or("--repeats needs a count")?,
            "--tokens" => o.tokens = it.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0).ok_or("--tokens needs a count")?,
            "--pairs" => o.pairs = it.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0).ok_or("--pairs needs a count")?,
            "--skip-python" => o.skip_python = true,
            "--root" => {
                let dir = PathBuf::from(it.next().ok_or("--root needs a suite root")?);
                Suite::open(&dir).check("bench: --root").map_err(|e| e.to_string())?;
                o.root = Some(std::fs::canonicalize(&dir).map_err(|e| format!("bench: --root {}: {e}", dir.display()))?);
            }
            "--only" => {
                let list = it.next().ok_or("--only needs a list of sections")?;
                for section in list.split(',').filter(|s| !s.is_empty()) {
                    if !SECTIONS.contains(&section) {
                        return Err(format!("bench: --only: unknown section `{section}` (sections: {})", SECTIONS.join(", ")));
                    }
                    o.only.push(section.to_string());
                }
            }
            other => return Err(format!("bench: unknown option `{other}`")),
        }
    }
    Ok(o)
}

/// `bench.py` with `args`, run by the reference venv's Python from the repository root, offline, one OpenMP thread.
fn bench_py<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Result<Command, String> {
    venv::ensure()?;
    let mut c = Command::new(venv::python());
    c.arg(workspace_root().join("xtask").join("reference").join("bench.py"))
        .args(args)
        .current_dir(workspace_root())
        .env("HF_HUB_OFFLINE", "1")
        .env("OMP_NUM_THREADS", "1");
    Ok(c)
}

/// Runs `bench.py` in the reference venv and parses the one JSON object it prints.
fn python(args: &[String]) -> Result<Value, String> {
    let out = bench_py(args)?.output().map_err(|e| format!("running bench.py: {e}"))?;
    if !out.status.success() {
        return Err(format!("bench.py {} failed ({}):\n{}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr)));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("bench.py {}: {e}", args.join(" ")))
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

/// New tokens a run in the real section: many short runs in rotation (`--pairs` rounds of them) pin a ratio down
/// better than a few long ones on a machine whose speed drifts over seconds.
const REAL_TOKENS: usize = 48;

const MODELS: [&str; 4] = ["qwen3-tiny", "llama-tiny", "gemma3-tiny", "gemma4-tiny"];
const FLAVOURS: [&str; 2] = ["default", "cpu"];

pub fn package(model: &str, flavour: &str) -> PathBuf {
    workspace_root().join("fixtures").join(model).join("onnx").join(format!("{flavour}-f32"))
}

/// The case's prompt, as the suite tokenizes it.
pub fn prompt_ids() -> Result<Vec<i64>, String> {
    let tok = TextTokenizer::load(&workspace_root().join("fixtures/tokenizer")).map_err(|e| e.to_string())?;
    tok.encode("Question: What is the capital of France?\nAnswer: The capital of France is Paris, a city known for")
        .map_err(|e| e.to_string())
}

/// The suite's decode throughput (tokens/s), every repeat, and the tokens it chose.
pub struct SuiteDecode {
    pub rates: Vec<f64>,
    pub ids: Vec<i64>,
}

/// The suite's own greedy loop (`generate::greedy`, the one L5 trials run) on one package: `tokens` new tokens
/// after `prompt`, no EOS stop; the session is made and warmed first, as the suite shares it across trials.
pub struct DecodeLoop {
    decoder: std::sync::Arc<runtime::Decoder>,
    prompt: Vec<i64>,
    tokens: usize,
    pub ids: Vec<i64>,
}

impl DecodeLoop {
    pub fn new(package: &Path, prompt: &[i64], tokens: usize, provider: Provider) -> Result<DecodeLoop, String> {
        let model = package_model(package).map_err(|e| e.to_string())?;
        let decoder = runtime::decoder(&model, provider).map_err(|e| e.to_string())?;
        let mut l = DecodeLoop { decoder, prompt: prompt.to_vec(), tokens, ids: Vec::new() };
        l.ids = generate::greedy(&l.decoder, &Front::Ids, &l.prompt, tokens, &[], None, &[]).map_err(|e| e.to_string())?.chosen();
        Ok(l)
    }

    /// One timed run.
    pub fn run(&self) -> Result<LoopRun, String> {
        let (run, ids) = LoopRun::time(self.tokens, || {
            Ok(generate::greedy(&self.decoder, &Front::Ids, &self.prompt, self.tokens, &[], None, &[]).map_err(|e| e.to_string())?.chosen())
        })?;
        if ids != self.ids {
            return Err(format!("{}: the greedy tokens changed between runs", self.decoder.model.display()));
        }
        Ok(run)
    }
}

/// One timed run of a Rust decode loop.
pub struct LoopRun {
    /// Tokens per second of the whole loop.
    pub rate: f64,
    /// Tokens per second of its time inside ONNX Runtime's run calls.
    pub inside: f64,
    /// Each decode step's seconds, from one run call's end to the next: the loop's own work on a step's output and
    /// the next run (bench.py times its Python loops the same way).
    pub steps: Vec<f64>,
}

impl LoopRun {
    /// Times `greedy`, a loop making `tokens` tokens on this thread, and returns what it returned.
    fn time<T>(tokens: usize, greedy: impl FnOnce() -> Result<T, String>) -> Result<(LoopRun, T), String> {
        let (t0, r0) = (Instant::now(), runtime::run_seconds());
        runtime::record_run_ends();
        let out = greedy();
        let ends = runtime::take_run_ends();
        let (wall, inside) = (t0.elapsed().as_secs_f64(), runtime::run_seconds() - r0);
        Ok((LoopRun::of(tokens, wall, inside, &ends), out?))
    }

    fn of(tokens: usize, wall: f64, inside: f64, ends: &[Instant]) -> LoopRun {
        let steps = ends.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
        LoopRun { rate: tokens as f64 / wall, inside: tokens as f64 / inside, steps }
    }

    /// The loop's own time per token outside ONNX Runtime's run calls (ms): the part of it that is not ONNX Runtime's.
    fn own_ms(&self) -> f64 {
        1e3 * (1.0 / self.rate - 1.0 / self.inside)
    }
}

/// Tokens per second at the median decode step: a figure a burst of the machine's noise during a few steps does not
/// move, where the whole run's rate takes every step as it came.
fn step_rate(steps: &[f64]) -> f64 {
    if steps.is_empty() { f64::NAN } else { 1.0 / Stats::of(steps.to_vec()).median }
}

/// The thinnest Rust loop over the same session: one plain `run` a step (the prompt, then one token), the present
/// values fed back as the next step's past, the last row's argmax, nothing else (no IoBinding, no checks): the peer
/// the suite's own loop is held to.
pub struct OrtOnlyLoop {
    decoder: std::sync::Arc<runtime::Decoder>,
    prompt: Vec<i64>,
    tokens: usize,
}

impl OrtOnlyLoop {
    pub fn new(package: &Path, prompt: &[i64], tokens: usize, provider: Provider) -> Result<OrtOnlyLoop, String> {
        let model = package_model(package).map_err(|e| e.to_string())?;
        let decoder = runtime::decoder(&model, provider).map_err(|e| e.to_string())?;
        Ok(OrtOnlyLoop { decoder, prompt: prompt.to_vec(), tokens })
    }

    /// One timed run, and the tokens it chose.
    pub fn run(&self) -> Result<(LoopRun, Vec<i64>), String> {
        LoopRun::time(self.tokens, || self.greedy())
    }

    fn greedy(&self) -> Result<Vec<i64>, String> {
        let mut cache = self.decoder.new_cache().map_err(|e| e.to_string())?;
        let mut input = self.prompt.clone();
        let mut ids = Vec::with_capacity(self.tokens);
        for _ in 0..self.tokens {
            let out = self.decoder.step(StepInput::Ids(input), &mut cache).map_err(|e| e.to_string())?;
            let next = mobius_conformance::numeric::argmax(out.last()) as i64;
            ids.push(next);
            input = vec![next];
        }
        Ok(ids)
    }
}

pub fn suite_decode(package: &Path, prompt: &[i64], tokens: usize, repeats: usize, provider: Provider) -> Result<SuiteDecode, String> {
    let l = DecodeLoop::new(package, prompt, tokens, provider)?;
    let runs = (0..repeats).map(|_| l.run()).collect::<Result<Vec<_>, _>>()?;
    Ok(SuiteDecode { rates: runs.iter().map(|r| r.rate).collect(), ids: l.ids })
}

/// bench.py's synthetic prompt of `len` tokens: [bos] + [4 + (7 i) mod (vocab - 4)].
pub fn synthetic(len: usize, vocab: i64, bos: i64) -> Vec<i64> {
    std::iter::once(bos).chain((0..len as i64 - 1).map(|i| 4 + (7 * i) % (vocab - 4))).collect()
}

pub fn suite_prefill(package: &Path, ids: &[i64], repeats: usize, provider: Provider) -> Result<Stats, String> {
    let model = package_model(package).map_err(|e| e.to_string())?;
    let decoder = runtime::decoder(&model, provider).map_err(|e| e.to_string())?;
    let run = || -> Result<f64, String> {
        let empty = decoder.new_cache().map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        decoder.forward(StepInput::Ids(ids.to_vec()), &empty, 1).map_err(|e| e.to_string())?;
        Ok(t0.elapsed().as_secs_f64())
    };
    run()?;
    Ok(Stats::of((0..repeats).map(|_| run()).collect::<Result<_, _>>()?))
}

/// Items per second of the accuracy gate on `tasks` (the trained fixture's f32 package), session warm.
fn suite_gate(tasks: &[&str], repeats: usize) -> Result<(Stats, usize), String> {
    let root = workspace_root();
    let tok = TextTokenizer::load(&root.join("fixtures/arith-tiny/hf")).map_err(|e| e.to_string())?;
    let package = root.join("fixtures/arith-tiny/onnx/default-f32");
    let model = package_model(&package).map_err(|e| e.to_string())?;
    let decoder = runtime::decoder(&model, Provider::Cpu).map_err(|e| e.to_string())?;
    let cfg = GenaiConfig::load(&package).map_err(|e| e.to_string())?;
    let loaded: Vec<_> = tasks
        .iter()
        .map(|t| task::load_items(&root, &format!("cases/tasks/{t}.yaml"), &tok, false).map_err(|e| e.to_string()))
        .collect::<Result<_, String>>()?;
    let n: usize = loaded.iter().map(|l| l.1.len()).sum();
    let run = || -> Result<f64, String> {
        let t0 = Instant::now();
        for loaded in &loaded {
            let (task, items) = (&loaded.0, &loaded.1);
            eval::score(std::slice::from_ref(&decoder), task, items, &tok, &cfg.eos_token_ids, cfg.vocab_size, eval::Strategy::Cached)
                .map_err(|e| e.to_string())?;
        }
        Ok(n as f64 / t0.elapsed().as_secs_f64())
    };
    run()?;
    Ok((Stats::of((0..repeats).map(|_| run()).collect::<Result<_, _>>()?), n))
}

/// Peak resident memory of this process (VmHWM), in MB.
pub fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok()))
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// The settings the bench's trials run under: CI's, so a golden, baseline or inputs file missing from the root fails
/// instead of skipping, and no figure is taken over trials that did no work. A skip the case states itself (an L5
/// under sampling, a model not downloaded) stays a skip, and is counted.
fn bench_context() -> RunContext {
    RunContext { ci: true, ..RunContext::local() }
}

/// The tiny tier of a suite, as these figures always measured; the real tier has its own section.
fn tiny_plan(suite: &Suite) -> Vec<TrialSpec> {
    suite.plan().into_iter().filter(|t| !t.is_built_elsewhere()).collect()
}

/// A whole trial set timed: the wall time on `threads` workers, the time inside each engine, and how every trial
/// ended.
struct Timed {
    wall: f64,
    /// Inside the suite's ONNX Runtime run calls.
    ort_runs: f64,
    /// Inside ONNX Runtime making the suite's sessions.
    ort_loads: f64,
    /// Inside onnxruntime-genai (its own ONNX Runtime sessions included).
    genai: f64,
    trials: usize,
    counts: Counts,
    /// The trials that failed, by name: a figure measured on them measures nothing.
    failed: Vec<String>,
    /// The trials that skipped, each with the first line of why: work the figure does not include.
    skipped: Vec<(String, String)>,
    /// The first failed trial's message, first lines: what a reader needs to start on the failures.
    first_failure: Option<String>,
}

impl Timed {
    fn engines(&self) -> f64 {
        self.ort_runs + self.ort_loads + self.genai
    }

    /// The suite's own time: what the engines do not account for (the wall time is one worker's only with one
    /// worker, so only then).
    fn suite_seconds(&self) -> f64 {
        self.wall - self.engines()
    }

    /// `N trials (P passed, X xfail, S skipped, F failed)`; passed counts the ambiguous and accepted passes too.
    fn tally(&self) -> String {
        let c = &self.counts;
        format!(
            "{} trials ({} passed, {} xfail, {} skipped, {} failed)",
            self.trials,
            c.pass + c.ambiguous + c.accepted,
            c.xfail,
            c.skip,
            c.fail
        )
    }

    /// Why no figure may be taken from this run, if none may: trials failed, or none did any work.
    fn refusal(&self) -> Option<String> {
        if !self.failed.is_empty() {
            let names: Vec<&str> = self.failed.iter().take(5).map(String::as_str).collect();
            let more = if self.failed.len() > 5 { format!(" and {} more", self.failed.len() - 5) } else { String::new() };
            let first = self.first_failure.as_deref().map_or(String::new(), |m| format!("; the first says: {m}"));
            return Some(format!("{} of {} trials failed ({}{more}){first}", self.failed.len(), self.trials, names.join(", ")));
        }
        (self.counts.skip == self.trials).then(|| format!("no trial ran ({})", self.tally()))
    }

    /// Why no overhead figure may be taken from this one-worker run: [`Timed::refusal`], no time inside any engine,
    /// or more time inside them than the wall time (work on other threads, whose rest is not the suite's own).
    fn overhead_refusal(&self) -> Option<String> {
        self.refusal().or_else(|| (self.engines() <= 0.0).then(|| format!("no time inside any engine ({})", self.tally()))).or_else(|| {
            (self.suite_seconds() < 0.0).then(|| {
                format!(
                    "the engines' time ({:.3}s) exceeds the wall time ({:.3}s): some of the work ran on other threads, so the rest is not the suite's own",
                    self.engines(),
                    self.wall
                )
            })
        })
    }

    fn json(&self) -> Value {
        let c = &self.counts;
        json!({ "trials": self.trials, "passed": c.pass + c.ambiguous + c.accepted, "xfail": c.xfail, "skipped": c.skip,
                "failed": self.failed })
    }
}

fn time_trials(root: &Path, threads: usize) -> Timed {
    let suite = Suite::open(root);
    let plan = tiny_plan(&suite);
    let engines = || (runtime::run_seconds(), runtime::load_seconds(), genai::run_seconds());
    let (r0, l0, g0) = engines();
    // One worker is one thread: the gates' items are not shared out over sessions of their own either.
    let ctx = RunContext { gate_sessions: (threads == 1).then_some(1), ..bench_context() };
    let t0 = Instant::now();
    let done = trial::run_parallel(&suite, &plan, &ctx, threads, |_| {});
    let wall = t0.elapsed().as_secs_f64();
    let (r1, l1, g1) = engines();
    let failed = done.iter().filter(|f| f.outcome.is_fail()).map(|f| f.name.clone()).collect();
    let first_failure =
        done.iter().find(|f| f.outcome.is_fail()).map(|f| f.outcome.message.lines().take(3).collect::<Vec<_>>().join(" / "));
    let skipped = done
        .iter()
        .filter(|f| f.outcome.status == Status::Skip)
        .map(|f| (f.name.clone(), f.outcome.message.lines().next().unwrap_or_default().to_string()))
        .collect();
    let counts = Counts::of(&done);
    Timed { wall, ort_runs: r1 - r0, ort_loads: l1 - l0, genai: g1 - g0, trials: plan.len(), counts, failed, skipped, first_failure }
}

/// Suite overhead: the root's whole tiny tier on one worker, sessions warm (a first run makes them), its wall time
/// split between the engines and the suite's own code.
fn overhead_section(source: &Path, table: &mut Vec<String>, failures: &mut Vec<String>) -> (Value, Option<f64>) {
    let warm = time_trials(source, 1);
    // A first run that failed is the answer: timing the same failures again would add nothing.
    let t = if warm.refusal().is_none() { time_trials(source, 1) } else { warm };
    let why = t.overhead_refusal();
    table.push(String::new());
    if let Some(why) = why {
        table.push(format!("suite overhead: {}: {why}: no figure", shown(source)));
        failures.push(format!("overhead: {why}"));
        let mut v = t.json();
        v["refused"] = json!(why);
        return (v, None);
    }
    let (own, engines) = (t.suite_seconds(), t.engines());
    let r = ratio(own, engines);
    let share = |s: f64| format!("{s:.3}s ({:.1}%)", 100.0 * s / t.wall);
    table.push(format!("suite overhead: {}, 1 worker, sessions warm: wall {:.3}s", t.tally(), t.wall));
    table.push(format!(
        "  = ONNX Runtime run calls {} + ONNX Runtime session loads {} + onnxruntime-genai {} + the suite's own {}",
        share(t.ort_runs),
        share(t.ort_loads),
        share(t.genai),
        share(own)
    ));
    table.push(format!("  overhead_ratio = {OVERHEAD_DEFINITION} = {own:.3} / {engines:.3} = {r:.3}"));
    let mut v = t.json();
    for (k, x) in [
        ("wall_seconds", t.wall),
        ("ort_run_seconds", t.ort_runs),
        ("ort_load_seconds", t.ort_loads),
        ("genai_seconds", t.genai),
        ("suite_seconds", own),
        ("overhead_ratio", r),
    ] {
        v[k] = json!(x);
    }
    v["overhead_definition"] = json!(OVERHEAD_DEFINITION);
    v["skipped_trials"] = t.skipped.iter().map(|(name, why)| json!({ "trial": name, "why": why })).collect();
    (v, Some(r))
}

/// What `overhead_ratio` divides: 0 would be a suite costing nothing beyond the engines it drives.
const OVERHEAD_DEFINITION: &str = "the suite's own s / (ONNX Runtime run calls + ONNX Runtime session loads + onnxruntime-genai) s";

/// Scaling: 1x, 2x and 4x copies of the root's cases on every core, sessions shared within a size as in a run (each
/// size's root is new, so its sessions are made in its time). A size whose trials fail, whose plan is not its copies
/// of the root's trials, or whose skips do not scale with it (a copy that lost a file) gets no figure; ratios are
/// taken against a passing 1x only.
fn scaling_section(source: &Path, cores: usize, table: &mut Vec<String>, failures: &mut Vec<String>) -> Result<Vec<Value>, String> {
    let planned = tiny_plan(&Suite::open(source)).len();
    let scratch = mobius_conformance::run::bootstrap::target_dir().join("bench").join(format!("scaling-{}", std::process::id()));
    table.push(String::new());
    table.push(format!(
        "| scaling ({cores} workers, sessions made per size) | trials | passed | xfail | skipped | failed | wall s | vs 1x |"
    ));
    table.push("|---|---|---|---|---|---|---|---|".into());
    let (mut rows, mut notes) = (Vec::new(), Vec::new());
    let mut base: Option<(f64, usize)> = None;
    for copies in [1usize, 2, 4] {
        let root = scratch.join(format!("x{copies}"));
        let made = crate::scratch::replicate(source, &root, copies);
        let t = made.map(|()| time_trials(&root, cores));
        let _ = std::fs::remove_dir_all(&root);
        let t = t?;
        let why = t.refusal().or_else(|| {
            if t.trials != copies * planned {
                Some(format!("{} trials planned, not {copies} x the root's {planned}: the copy is not the cases", t.trials))
            } else {
                base.filter(|&(_, skip)| t.counts.skip != copies * skip).map(|(_, skip)| {
                    format!("{} trials skipped, not {copies} x the 1x's {skip}: the copy lost what they read", t.counts.skip)
                })
            }
        });
        let c = &t.counts;
        let cells = format!("| {copies}x | {} | {} | {} | {} | {} |", t.trials, c.pass + c.ambiguous + c.accepted, c.xfail, c.skip, c.fail);
        let mut v = t.json();
        v["copies"] = json!(copies);
        match why {
            Some(why) => {
                table.push(format!("{cells} - (no figure) | - |"));
                notes.push(format!("scaling {copies}x: {why}: no figure"));
                failures.push(format!("scaling {copies}x: {why}"));
                v["refused"] = json!(why);
            }
            None => {
                if copies == 1 {
                    base = Some((t.wall, c.skip));
                }
                let vs = base.map(|(b, _)| t.wall / b);
                table.push(format!("{cells} {:.3} | {} |", t.wall, vs.map_or("-".into(), |v| format!("{v:.2}x"))));
                v["wall_seconds"] = json!(t.wall);
                v["vs_1x"] = json!(vs);
                // Summed over the workers, so not parts of the wall time.
                v["ort_run_seconds"] = json!(t.ort_runs);
                v["ort_load_seconds"] = json!(t.ort_loads);
                v["genai_seconds"] = json!(t.genai);
            }
        }
        rows.push(v);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    table.append(&mut notes);
    Ok(rows)
}

/// Median, min and max of the finite figures.
fn finite_stats(v: impl IntoIterator<Item = f64>) -> Option<Stats> {
    let v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
    (!v.is_empty()).then(|| Stats::of(v))
}

/// A `bench.py` server (`decode-serve`, `speech-serve`): the Python side loaded and warm in a child process, run
/// once per request line, so the caller can time its own runs between them.
struct Served {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
    /// `bench.py <subcommand>`, for messages.
    what: String,
    ready: Value,
}

const ENGINES: [&str; 3] = ["genai", "genai-package", "ort"];

impl Served {
    /// `bench.py decode-serve` with every engine of [`ENGINES`] on `pkg`, `tokens` new tokens a run.
    fn start(pkg: &Path, prompt: &str, tokens: usize) -> Result<Served, String> {
        let (pkg, tokens, engines) = (pkg.to_string_lossy(), tokens.to_string(), ENGINES.join(","));
        let args =
            ["decode-serve", "--package", &pkg, "--prompt-ids", prompt, "--tokens", &tokens, "--engines", &engines, "--threads", "1"];
        Served::spawn(&args.map(String::from))
    }

    /// `bench.py` with `args` (its subcommand first), once it has printed its ready line.
    fn spawn(args: &[String]) -> Result<Served, String> {
        let what = format!("bench.py {}", args.first().map_or("", String::as_str));
        let mut child = bench_py(args)?
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .map_err(|e| format!("running {what}: {e}"))?;
        let input = child.stdin.take().expect("piped");
        let output = std::io::BufReader::new(child.stdout.take().expect("piped"));
        let mut s = Served { child, input, output, what, ready: Value::Null };
        s.ready = s.line()?;
        Ok(s)
    }

    fn line(&mut self) -> Result<Value, String> {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut self.output, &mut line).map_err(|e| format!("{}: {e}", self.what))?;
        if line.is_empty() {
            return Err(format!("{} stopped early (its error is above)", self.what));
        }
        serde_json::from_str(&line).map_err(|e| format!("{}: {e}: {line}", self.what))
    }

    /// The answer to one run, asked for by `request` (an engine's name, a clip's index), and its seconds.
    fn request(&mut self, request: &str) -> Result<(f64, Value), String> {
        use std::io::Write;
        writeln!(self.input, "{request}").and_then(|_| self.input.flush()).map_err(|e| format!("{}: {e}", self.what))?;
        let v = self.line()?;
        let seconds = v["seconds"].as_f64().ok_or_else(|| format!("{}: no seconds in {v}", self.what))?;
        Ok((seconds, v))
    }

    /// The seconds of one run, asked for by `request`.
    fn seconds(&mut self, request: &str) -> Result<f64, String> {
        Ok(self.request(request)?.0)
    }

    /// One run of `engine`: its tokens per second, its decode steps' seconds (as [`LoopRun::steps`]) and, where the
    /// engine times its model runs (python ort), its own time per token outside them (ms).
    fn run(&mut self, engine: &str, tokens: usize) -> Result<(f64, Vec<f64>, f64), String> {
        let (seconds, v) = self.request(engine)?;
        let steps = v["steps"].as_array().map(|a| a.iter().filter_map(Value::as_f64).collect::<Vec<_>>());
        let steps = steps.ok_or_else(|| format!("{}: no steps in {v}", self.what))?;
        let own = v["inside_seconds"].as_f64().map_or(f64::NAN, |inside| 1e3 * (seconds - inside) / tokens as f64);
        Ok((tokens as f64 / seconds, steps, own))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = writeln!(self.input);
        let _ = self.child.wait();
    }
}

/// A pause before each timed run: ONNX Runtime's intra-op pool (genai with the package's settings has one per
/// core) spins for a while after a run, and on a small machine that would be charged to whoever runs next.
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(30));
}

/// Decode throughput of every text fixture and flavour. The suite's loop and the Python engines run in turns,
/// one run each per pair (the order alternating), and every ratio is taken within a pair, so this machine's drifts
/// in speed (up to 2x over seconds here) fall on both sides of it. Figures are medians over pairs, with min and max.
fn decode_section(o: &Options, table: &mut Vec<String>) -> Result<Vec<Value>, String> {
    let prompt = prompt_ids()?;
    let prompt_arg = prompt.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
    table.push(format!(
        "| decode ({} tokens, tok/s, {} pairs) | suite | suite, ORT runs only | genai 1 thread | genai package settings | python ort | genai via the suite's binding | vs genai | ceiling vs genai | vs python ort |",
        o.tokens, o.pairs
    ));
    table.push("|---|---|---|---|---|---|---|---|---|---|".into());
    let (mut decode, mut notes) = (Vec::new(), Vec::new());
    for m in MODELS {
        for f in FLAVOURS {
            let pkg = package(m, f);
            let suite = DecodeLoop::new(&pkg, &prompt, o.tokens, Provider::Cpu)?;
            let mut py = if o.skip_python { None } else { Some(Served::start(&pkg, &prompt_arg, o.tokens)?) };
            // onnxruntime-genai through the suite's own binding (the genai level's), loaded once and kept warm.
            let genai_rs = mobius_conformance::run::genai::Model::load(&pkg, Provider::Cpu).map_err(|e| e.to_string())?;
            let mut genai_rs_ids = Vec::new();
            // One row per pair: suite, suite inside ORT, then each Python engine, then genai through the binding.
            let mut rows: Vec<[f64; 6]> = Vec::new();
            for pair in 0..o.pairs {
                let mut row = [f64::NAN; 6];
                settle();
                let t0 = std::time::Instant::now();
                let run = genai_rs.greedy(&prompt, o.tokens).map_err(|e| e.to_string())?;
                row[5] = run.tokens.len() as f64 / t0.elapsed().as_secs_f64();
                genai_rs_ids = run.tokens;
                let suite_run = |row: &mut [f64; 6]| -> Result<(), String> {
                    settle();
                    let r = suite.run()?;
                    (row[0], row[1]) = (r.rate, r.inside);
                    Ok(())
                };
                if pair % 2 == 0 {
                    suite_run(&mut row)?;
                }
                if let Some(py) = py.as_mut() {
                    for (i, e) in ENGINES.iter().enumerate() {
                        settle();
                        row[2 + i] = py.run(e, o.tokens)?.0;
                    }
                }
                if pair % 2 == 1 {
                    suite_run(&mut row)?;
                }
                rows.push(row);
            }
            let col = |i: usize| finite_stats(rows.iter().map(|r| r[i]));
            // The binding stops at EOS (it sets no min_length, as the genai level wants): a shorter run is other
            // work than the others' `tokens` steps, so it gets no figure.
            let binding = if genai_rs_ids.len() == o.tokens {
                col(5)
            } else {
                notes.push(format!(
                    "decode: {m} {f}: onnxruntime-genai through the suite's binding stopped at EOS after {} of {} tokens: no figure",
                    genai_rs_ids.len(),
                    o.tokens
                ));
                None
            };
            let paired = |f: &dyn Fn(&[f64; 6]) -> f64| finite_stats(rows.iter().map(f));
            // genai's peer figure is its better setting in the pair: one thread or the package's own.
            let vs_genai = paired(&|r| ratio(r[0], r[2].max(r[3])));
            let ceiling = paired(&|r| ratio(r[1], r[2].max(r[3])));
            let vs_ort = paired(&|r| ratio(r[0], r[4]));
            // The Python loop masks EOS as genai's min_length does; the suite's loop does not, so ids are compared
            // up to the first step where the reference's raw argmax was EOS.
            let ready = py.as_ref().map_or(Value::Null, |p| p.ready.clone());
            let masked = ready["eos_masked_steps"]["ort"]
                .as_array()
                .and_then(|a| a.first())
                .and_then(Value::as_u64)
                .map_or(suite.ids.len(), |s| s as usize);
            let same = |engine: &str| {
                ready["ids"][engine]
                    .as_array()
                    .map(|r| r.iter().take(masked).map(|v| v.as_i64()).eq(suite.ids.iter().take(masked).map(|&i| Some(i))))
            };
            drop(py.take());
            let cell = |s: Option<Stats>| s.map_or("-".into(), |s| format!("{:.0}", s.median));
            let r = |x: Option<Stats>| x.map_or("-".into(), |x| format!("{:.2} ({:.2}-{:.2})", x.median, x.min, x.max));
            table.push(format!(
                "| {m} {f} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                cell(col(0)),
                cell(col(1)),
                cell(col(2)),
                cell(col(3)),
                cell(col(4)),
                cell(binding),
                r(vs_genai),
                r(ceiling),
                r(vs_ort)
            ));
            let j = |s: Option<Stats>| s.map(|s| s.json());
            decode.push(json!({
                "model": m, "flavour": f, "pairs": o.pairs,
                "suite": j(col(0)), "suite_inside_ort_runs": j(col(1)),
                "genai": j(col(2)), "genai_package_settings": j(col(3)), "python_ort": j(col(4)), "genai_suite_binding": j(binding),
                "genai_suite_binding_tokens": genai_rs_ids.len(),
                "decode_vs_genai": j(vs_genai), "decode_ceiling_vs_genai": j(ceiling), "decode_vs_python_ort": j(vs_ort),
                "same_ids_until_eos": {
                    "genai": same("genai"), "python_ort": same("ort"),
                    "genai_suite_binding": genai_rs_ids.iter().take(masked).eq(suite.ids.iter().take(masked)),
                },
                "compared_steps": masked,
            }));
        }
    }
    table.append(&mut notes);
    Ok(decode)
}

/// Resident memory of this process now (VmRSS), in MB.
fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok()))
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn dir_mb(dir: &Path) -> f64 {
    std::fs::read_dir(dir).into_iter().flatten().flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len() as f64).sum::<f64>() / 1e6
}

/// The real tier at real size (`cargo xtask real`; skipped when it is not built): per package, the session's load
/// time and the memory it adds against its size on disk, prefill latency at two lengths (one past Gemma-3's
/// 512-token window), and decode throughput of the suite's loop against onnxruntime-genai and the Python
/// onnxruntime loop and a Rust loop of ONNX Runtime calls alone, in `--pairs` rounds of [`REAL_TOKENS`]-token runs,
/// each round in a rotated order. Only the last position's logits row ever leaves ONNX Runtime's output.
/// Each ratio is given twice: over whole runs, and at the median decode step (every loop's steps timed from one
/// run call's end to the next), which a burst of the machine's noise inside one engine's run does not move.
fn real_section(o: &Options, table: &mut Vec<String>) -> Result<Vec<Value>, String> {
    let root = reference_setup::real::link();
    let packages = [
        "gemma3-270m/onnx/default-f32",
        "gemma3-270m/onnx/default-int4",
        "smollm2-135m/onnx/default-f32",
        "smollm2-135m/onnx/default-int4",
    ];
    if !root.join(packages[0]).is_dir() {
        table.push("real tier: not built (`cargo xtask real`): skipped".into());
        return Ok(Vec::new());
    }
    let tokens = o.tokens.min(REAL_TOKENS);
    table.push(String::new());
    table.push(format!(
        "| real tier | size MB | load s | RSS added MB | prefill 64 ms | prefill 600 ms | decode {} tok/s (suite; {} rounds) | genai | python ort | ort-only rust | vs genai: run; median step | vs python ort: run; median step | vs ort-only rust: run; median step | own ms/token: suite, ort-only rust, python ort |",
        tokens,
        o.pairs
    ));
    table.push("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|".into());
    let mut out = Vec::new();
    for rel in packages {
        let pkg = root.join(rel);
        let cfg: Value = serde_json::from_str(&std::fs::read_to_string(pkg.join("genai_config.json")).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        let vocab = cfg["model"]["vocab_size"].as_i64().ok_or_else(|| format!("{rel}: genai_config.json has no model.vocab_size"))?;
        let model = package_model(&pkg).map_err(|e| e.to_string())?;
        let size = dir_mb(&pkg);
        let before = rss_mb();
        let t0 = Instant::now();
        let decoder = runtime::decoder(&model, Provider::Cpu).map_err(|e| e.to_string())?;
        let load = t0.elapsed().as_secs_f64();
        let added = rss_mb() - before;
        drop(decoder);
        let bos = cfg["model"]["bos_token_id"].as_i64().unwrap_or(1);
        let pre: Vec<Stats> = [64usize, 600]
            .iter()
            .map(|&l| suite_prefill(&pkg, &synthetic(l, vocab, bos), o.repeats.min(3), Provider::Cpu))
            .collect::<Result<_, _>>()?;
        let prompt = synthetic(32, vocab, bos);
        let prompt_arg = prompt.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        let suite = DecodeLoop::new(&pkg, &prompt, tokens, Provider::Cpu)?;
        let thin = OrtOnlyLoop::new(&pkg, &prompt, tokens, Provider::Cpu)?;
        let mut py = if o.skip_python { None } else { Some(Served::start(&pkg, &prompt_arg, tokens)?) };
        // Per round, for the suite, genai, python ort and the ORT-only loop: tok/s of the whole run (columns 0-3) and
        // at the median step (4-7); then the suite's, the ORT-only loop's and python ort's own time per token outside
        // ONNX Runtime's run calls (ms, 8-10).
        let mut rows: Vec<[f64; 11]> = Vec::new();
        for round in 0..o.pairs {
            let mut row = [f64::NAN; 11];
            // Each loop takes each place in the order equally often (a rotation), so a drift of the machine's speed
            // within a round falls on every loop alike.
            for k in 0..4 {
                settle();
                match (round + k) % 4 {
                    0 => {
                        let r = suite.run()?;
                        (row[0], row[4], row[8]) = (r.rate, step_rate(&r.steps), r.own_ms());
                    }
                    3 => {
                        let (r, ids) = thin.run()?;
                        if ids != suite.ids {
                            return Err(format!("{rel}: the ORT-only loop chose other tokens than the suite's loop: no figure"));
                        }
                        (row[3], row[7], row[9]) = (r.rate, step_rate(&r.steps), r.own_ms());
                    }
                    i => {
                        let Some(py) = py.as_mut() else { continue };
                        let (rate, steps, own) = py.run(if i == 1 { "genai" } else { "ort" }, tokens)?;
                        (row[i], row[4 + i]) = (rate, step_rate(&steps));
                        if i == 2 {
                            row[10] = own;
                        }
                    }
                }
            }
            rows.push(row);
        }
        drop(py.take());
        let col = |i: usize| finite_stats(rows.iter().map(|r| r[i]));
        // The suite against peer `i`, pair by pair: whole runs, or median steps.
        let vs = |i: usize| finite_stats(rows.iter().map(|r| ratio(r[0], r[i])));
        let vs_step = |i: usize| finite_stats(rows.iter().map(|r| ratio(r[4], r[4 + i])));
        let cell = |s: Option<Stats>| s.map_or("-".into(), |s| format!("{:.1}", s.median));
        let r2 = |s: Option<Stats>| s.map_or("-".into(), |s| format!("{:.2} ({:.2}-{:.2})", s.median, s.min, s.max));
        let ms = |s: Option<Stats>| s.map_or("-".into(), |s| format!("{:.2}", s.median));
        let both = |i: usize| format!("{}; {}", r2(vs(i)), r2(vs_step(i)));
        table.push(format!(
            "| {rel} | {size:.0} | {load:.2} | {added:.0} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {}, {}, {} |",
            pre[0].median * 1e3,
            pre[1].median * 1e3,
            cell(col(0)),
            cell(col(1)),
            cell(col(2)),
            cell(col(3)),
            both(1),
            both(2),
            both(3),
            ms(col(8)),
            ms(col(9)),
            ms(col(10))
        ));
        let j = |s: Option<Stats>| s.map(|s| s.json());
        out.push(json!({
            "package": rel, "size_mb": size, "load_seconds": load, "rss_added_mb": added,
            "prefill_seconds": { "64": pre[0].json(), "600": pre[1].json() },
            "decode_tokens": tokens, "rounds": o.pairs, "suite": j(col(0)), "genai": j(col(1)), "python_ort": j(col(2)),
            "decode_vs_genai": j(vs(1)), "decode_vs_python_ort": j(vs(2)), "ort_only_rust": j(col(3)),
            "decode_vs_ort_only_rust": j(vs(3)),
            "median_step": { "suite": j(col(4)), "genai": j(col(5)), "python_ort": j(col(6)), "ort_only_rust": j(col(7)),
                             "vs_genai": j(vs_step(1)), "vs_python_ort": j(vs_step(2)), "vs_ort_only_rust": j(vs_step(3)) },
            "own_ms_per_token": { "suite": j(col(8)), "ort_only_rust": j(col(9)), "python_ort": j(col(10)) },
            "peak_rss_mb_so_far": peak_rss_mb(),
        }));
    }
    table.push(format!("peak resident memory after the real tier: {:.0} MB", peak_rss_mb()));
    Ok(out)
}

/// The real accuracy gate (`cases/tasks/knowledge.yaml`, 300 items x 4 choices) on each model's f32 package, three
/// ways, in one run: lm-eval's own requests (context + continuation per choice, one session), the context once and
/// the continuations from its cache (one session), and the trial's scoring (that, with the items shared out to one
/// session per core). Every way must give the same picks; the ratios are against the uncached scoring.
fn gate_real(root: &Path, table: &mut Vec<String>) -> Result<Vec<Value>, String> {
    use mobius_conformance::accuracy::eval::Strategy;
    if !root.join("gemma3-270m/onnx/default-f32").is_dir() {
        table.push("real gate: the real tier is not built (`cargo xtask real`): skipped".into());
        return Ok(Vec::new());
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
    table.push(String::new());
    table.push(format!(
        "| real gate (knowledge, 300 items) | uncached s (lm-eval's requests, 1 session) | cached s (1 session) | cached s ({cores} sessions: the trial) | cached vs uncached | trial vs uncached |"
    ));
    table.push("|---|---|---|---|---|---|".into());
    let mut out = Vec::new();
    for model in ["gemma3-270m", "smollm2-135m"] {
        let pkg = root.join(model).join("onnx/default-f32");
        let tok = TextTokenizer::load(&root.join(model).join("hf")).map_err(|e| e.to_string())?;
        let cfg = GenaiConfig::load(&pkg).map_err(|e| e.to_string())?;
        let model_file = package_model(&pkg).map_err(|e| e.to_string())?;
        let loaded = task::load_items(&workspace_root(), "cases/tasks/knowledge.yaml", &tok, false).map_err(|e| e.to_string())?;
        let (task, items) = (&loaded.0, &loaded.1);
        let mut decoders = vec![runtime::decoder(&model_file, Provider::Cpu).map_err(|e| e.to_string())?];
        for _ in 1..cores {
            decoders.push(runtime::decoder_replica(&model_file, Provider::Cpu).map_err(|e| e.to_string())?);
        }
        let time = |d: &[std::sync::Arc<runtime::Decoder>], s: Strategy| -> Result<(f64, Vec<Option<usize>>), String> {
            settle();
            let t0 = Instant::now();
            let scored = eval::score(d, task, items, &tok, &cfg.eos_token_ids, cfg.vocab_size, s).map_err(|e| e.to_string())?;
            let seconds = t0.elapsed().as_secs_f64();
            if scored.stopped.is_some() || scored.scored.len() != items.len() {
                return Err(format!("{model}: the gate stopped before its last item"));
            }
            let picks = scored
                .scored
                .iter()
                .map(|s| match s {
                    mobius_conformance::accuracy::scoring::Scored::Choices(c) => {
                        Some(mobius_conformance::accuracy::scoring::first_argmax(c))
                    }
                    _ => None,
                })
                .collect();
            Ok((seconds, picks))
        };
        let (uncached, picks_u) = time(&decoders[..1], Strategy::Uncached)?;
        let (cached, picks_c) = time(&decoders[..1], Strategy::Cached)?;
        let (trial, picks_t) = time(&decoders, Strategy::Cached)?;
        let differ =
            picks_u.iter().zip(&picks_c).filter(|(a, b)| a != b).count() + picks_c.iter().zip(&picks_t).filter(|(a, b)| a != b).count();
        if differ > 0 {
            return Err(format!("{model}: the three scorings pick differently on {differ} item(s): no figure"));
        }
        table.push(format!(
            "| {model}/default-f32 | {uncached:.1} | {cached:.1} | {trial:.1} | {:.2}x | {:.2}x |",
            uncached / cached,
            uncached / trial
        ));
        out.push(json!({
            "gate": format!("knowledge/{model}/default/f32"), "items": items.len(), "sessions": cores,
            "uncached_seconds": uncached, "cached_seconds": cached, "trial_seconds": trial,
            "cached_speedup": uncached / cached, "trial_speedup": uncached / trial,
        }));
    }
    Ok(out)
}

/// The speech-to-text cases the `speech` section measures: the committed fixture (always there, so the section
/// runs without the real tier) and the real tier's Whisper models, skipped until `cargo xtask real` builds them and
/// their goldens are made.
const SPEECH_CASES: [&str; 3] =
    ["cases/speech-to-text/whisper-tiny.yaml", "cases/real/whisper-tiny-en.yaml", "cases/real/whisper-base.yaml"];

/// One Whisper model of the `speech` section, as its case file states it: the default-f32 package, the Hugging Face
/// folder, how greedy decoding is set, and one clip per case the suite splits the file into.
struct SpeechModel {
    file: String,
    package: PathBuf,
    hf: PathBuf,
    /// The folder of the `generation_config.json` whose suppression generate() applies: the case's tokenizer
    /// folder, as the L5 trial reads it, else the package.
    generation: PathBuf,
    build: Option<String>,
    max_new: usize,
    eos: Option<i64>,
    language: Option<String>,
    task: Option<&'static str>,
    clips: Vec<SpeechClip>,
}

/// One clip: the per-clip case (`whisper-tiny-en`, `whisper-tiny-en.p2`, ...), its golden inputs (`input_features`,
/// and `input_ids`, the forced prefix) and its audio file.
struct SpeechClip {
    case: String,
    inputs: PathBuf,
    audio: PathBuf,
}

/// A path as the table shows it: relative to the repository where it is inside it.
fn shown(p: &Path) -> String {
    p.strip_prefix(workspace_root()).unwrap_or(p).display().to_string()
}

impl SpeechModel {
    fn of(suite: &Suite, case: &Case) -> Result<SpeechModel, String> {
        let (root, file) = (&suite.root, &case.file);
        let package = case
            .variants(root)
            .into_iter()
            .find(|v| v.ep == Ep::Default && v.dtype == Dtype::F32)
            .and_then(|v| v.package)
            .ok_or_else(|| format!("{file}: its matrix names no default-f32 package"))?
            .resolve("genai_config.json")
            .map_err(|e| e.to_string())?;
        let hf = case.reference_dir(root).ok_or_else(|| format!("{file}: no `reference` (the Hugging Face folder generate() runs)"))?;
        let generation = match case.tokenizer_location(root) {
            Some(l) => l.resolve("generation_config.json").map_err(|e| e.to_string())?,
            None => package.clone(),
        };
        let g = &case.spec.generation;
        let task = g.task.map(SpeechTask::name);
        Ok(SpeechModel {
            file: file.clone(),
            package,
            hf,
            generation,
            build: case.spec.build_command.clone(),
            max_new: case.max_new_tokens() as usize,
            eos: g.eos_token_id,
            language: g.lang.clone(),
            task,
            clips: Vec::new(),
        })
    }

    /// Why the model cannot be measured yet, if it cannot: its package or weights are not built, or a clip's goldens
    /// are not made. The fixture's Hugging Face weights are derived from its package (as the gate's are), when the
    /// Python side is to run.
    fn missing(&self, skip_python: bool) -> Result<Option<String>, String> {
        let build = self.build.as_deref().unwrap_or("cargo xtask fixtures");
        if !self.package.join("genai_config.json").is_file() {
            return Ok(Some(format!("{} is not built (`{build}`)", shown(&self.package))));
        }
        if !skip_python && !self.hf.join("model.safetensors").is_file() {
            match crate::regen::missing_derived(&self.hf)? {
                Some((_, name)) => crate::regen::fixtures(&["--hf-only".into(), "--only".into(), name])?,
                None => return Ok(Some(format!("{} has no model.safetensors (`{build}`)", shown(&self.hf)))),
            }
        }
        let absent: Vec<&SpeechClip> = self.clips.iter().filter(|c| !c.inputs.is_file()).collect();
        // One clip: its own case's name; several: the glob over the model's clips (`<case>`, `<case>.p2`, ...).
        let glob = match &absent[..] {
            [] => return Ok(None),
            [one] => one.case.clone(),
            _ => format!("{}*", self.clips[0].case),
        };
        let more = if absent.len() > 1 { format!(" and {} more", absent.len() - 1) } else { String::new() };
        Ok(Some(format!("{}{more} not made yet (`cargo xtask regen-goldens --case '{glob}'`)", shown(&absent[0].inputs))))
    }
}

/// The section's models, in [`SPEECH_CASES`]' order, each with its clips in the order the suite splits them.
fn speech_models(suite: &Suite) -> Result<Vec<SpeechModel>, String> {
    let mut models: Vec<SpeechModel> = Vec::new();
    for loaded in suite.load_cases() {
        let case = match loaded {
            Ok(c) if SPEECH_CASES.contains(&c.file.as_str()) => c,
            Err(b) if SPEECH_CASES.contains(&b.file.as_str()) => return Err(b.error.to_string()),
            _ => continue,
        };
        let audio = case.spec.inputs.audio.first().ok_or_else(|| format!("{}: no `inputs.audio` clip", case.file))?;
        let modality = case.modalities().first().copied().unwrap_or(Modality::Audio);
        let clip = SpeechClip {
            case: case.name.clone(),
            inputs: suite.golden_paths(&case, modality, Dtype::F32).inputs,
            audio: suite.root.join(audio),
        };
        match models.iter_mut().find(|m| m.file == case.file) {
            Some(m) => m.clips.push(clip),
            None => models.push(SpeechModel { clips: vec![clip], ..SpeechModel::of(suite, &case)? }),
        }
    }
    models.sort_by_key(|m| SPEECH_CASES.iter().position(|f| *f == m.file));
    Ok(models)
}

/// A clip ready to run: its stored inputs, read once (feature extraction and reading are timed on neither side),
/// and the seconds of audio its features hold.
struct LoadedClip {
    case: String,
    file: String,
    audio: String,
    inputs: Inputs,
    audio_seconds: f64,
}

impl LoadedClip {
    fn load(m: &SpeechModel, c: &SpeechClip) -> Result<LoadedClip, String> {
        let file = shown(&c.inputs);
        let bytes = std::fs::read(&c.inputs).map_err(|e| format!("{file}: {e}"))?;
        let inputs = Inputs::from_safetensors(&file, &bytes).map_err(|e| e.to_string())?;
        let frames = inputs
            .get("input_features")
            .and_then(|t| t.shape.last().copied())
            .ok_or_else(|| format!("{file}: no tensor `input_features` (the log-mel features)"))?;
        let window = frames as f64 * feature_hop_seconds(&m.hf)?;
        // Whisper hears at most its window (the fixture's is 4 s): audio past it is not processed, so not counted.
        let audio_seconds = flac_seconds(&c.audio)?.min(window);
        let audio = c.audio.file_name().map_or_else(|| shown(&c.audio), |n| n.to_string_lossy().into_owned());
        Ok(LoadedClip { case: c.case.clone(), file, audio, inputs, audio_seconds })
    }
}

/// Seconds per feature frame: `hop_length / sampling_rate` of the model's preprocessor_config.json.
fn feature_hop_seconds(hf: &Path) -> Result<f64, String> {
    let path = hf.join("preprocessor_config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    match (v["hop_length"].as_f64(), v["sampling_rate"].as_f64()) {
        (Some(hop), Some(rate)) if rate > 0.0 => Ok(hop / rate),
        _ => Err(format!("{}: no `hop_length` and `sampling_rate` (how long a feature frame is)", path.display())),
    }
}

/// A FLAC file's duration, from the STREAMINFO block the format puts first.
fn flac_seconds(path: &Path) -> Result<f64, String> {
    use std::io::Read;
    let mut head = [0u8; 26];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).map_err(|e| format!("{}: {e}", path.display()))?;
    flac_duration(&head).ok_or_else(|| {
        format!("{}: not a FLAC file stating its length (the bench reads a clip's duration from FLAC's header)", path.display())
    })
}

/// Duration from a FLAC file's first 26 bytes: `fLaC`, the STREAMINFO block's header, then after its block and
/// frame sizes (10 bytes), 64 bits holding the sample rate (20 bits), channels and bits per sample (8), and the
/// total samples (36). `None` for anything else, or a stream that does not state its length (0 samples).
fn flac_duration(head: &[u8; 26]) -> Option<f64> {
    if &head[..4] != b"fLaC" || head[4] & 0x7f != 0 {
        return None;
    }
    let bits = u64::from_be_bytes(head[18..26].try_into().ok()?);
    let (rate, samples) = (bits >> 44, bits & ((1 << 36) - 1));
    (rate > 0 && samples > 0).then(|| samples as f64 / rate as f64)
}

/// The suite's own speech-to-text run, as its L5 trial makes it: the package's encoder on the stored features
/// (`Pipeline::build`), then `greedy_with` from the stored prefix with generate()'s suppression, stopping after
/// EOS. Sessions are made before any run is timed, as the suite shares them across trials.
struct SuiteSpeech {
    package: PathBuf,
    decoder: std::sync::Arc<runtime::Decoder>,
    suppress: Suppress,
    eos: Vec<i64>,
    max_new: usize,
}

impl SuiteSpeech {
    fn new(m: &SpeechModel) -> Result<SuiteSpeech, String> {
        let err = |e: mobius_conformance::error::Error| e.to_string();
        let decoder = runtime::decoder(&package_model(&m.package).map_err(err)?, Provider::Cpu).map_err(err)?;
        let g = GenerationConfig::load(&m.generation, &format!("{} (the bench's speech section)", m.file)).map_err(err)?;
        let eos = match m.eos {
            Some(e) => vec![e],
            None => GenaiConfig::load(&m.package).map_err(err)?.eos_token_ids,
        };
        let suppress = Suppress { always: g.suppress_tokens, at_begin: g.begin_suppress_tokens };
        Ok(SuiteSpeech { package: m.package.clone(), decoder, suppress, eos, max_new: m.max_new })
    }

    /// One run on a clip, timed whole (encoder and decoding): its seconds, the part of them inside ONNX Runtime's
    /// run calls, and the tokens chosen, EOS included.
    fn run(&self, clip: &LoadedClip) -> Result<(f64, f64, Vec<i64>), String> {
        let err = |e: mobius_conformance::error::Error| e.to_string();
        let (t0, r0) = (Instant::now(), runtime::run_seconds());
        let pipeline = Pipeline::build(&self.package, &self.decoder, Provider::Cpu, &clip.inputs, &clip.file).map_err(err)?;
        let front = pipeline.front();
        let prefix = clip.inputs.input_ids();
        let run = generate::greedy_with(&self.decoder, &front, prefix, self.max_new, &self.eos, None, &[], &self.suppress).map_err(err)?;
        Ok((t0.elapsed().as_secs_f64(), runtime::run_seconds() - r0, run.chosen()))
    }
}

/// `bench.py speech-serve`: Hugging Face's generate() on the model's clips, loaded, warm and run once per request.
fn serve_whisper(m: &SpeechModel) -> Result<Served, String> {
    let inputs: Vec<String> = m.clips.iter().map(|c| c.inputs.to_string_lossy().into_owned()).collect();
    let mut args: Vec<String> = ["speech-serve", "--hf", &m.hf.to_string_lossy(), "--inputs", &inputs.join(",")].map(String::from).to_vec();
    args.extend(["--max-new-tokens".into(), m.max_new.to_string(), "--threads".into(), "1".into()]);
    if let Some(l) = &m.language {
        args.extend(["--language".into(), l.clone()]);
    }
    if let Some(t) = m.task {
        args.extend(["--task".into(), t.into()]);
    }
    Served::spawn(&args)
}

/// The first step where two token streams differ (the shorter one's end when one is the other's start).
fn first_difference(a: &[i64], b: &[i64]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y).or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())))
}

/// Where the suite's stream and generate()'s first differ. generate() drops the EOS that ends a Whisper transcript,
/// which the suite's stream keeps (it stops after it, as the goldens hold it), so a suite stream ending in EOS is
/// compared without it.
fn differs_from_generate(ours: &[i64], theirs: &[i64], eos: &[i64]) -> Option<usize> {
    let ours = match ours.split_last() {
        Some((last, rest)) if eos.contains(last) => rest,
        _ => ours,
    };
    first_difference(ours, theirs)
}

/// `repeats` pairs of runs on one clip, each run timed alone and the order alternating within pairs: seconds of
/// [the suite, the suite inside ONNX Runtime's run calls, HF] (HF NaN without Python). Every suite run must choose
/// `ids` again.
fn speech_pairs(
    suite: &SuiteSpeech,
    clip: &LoadedClip,
    ids: &[i64],
    mut hf: Option<&mut Served>,
    index: usize,
    repeats: usize,
) -> Result<Vec<[f64; 3]>, String> {
    let ours = |pair: &mut [f64; 3]| -> Result<(), String> {
        settle();
        let again;
        (pair[0], pair[1], again) = suite.run(clip)?;
        if again != ids {
            return Err(format!("{}: the suite's greedy tokens changed between runs", clip.file));
        }
        Ok(())
    };
    let mut pairs = Vec::with_capacity(repeats);
    for r in 0..repeats {
        let mut pair = [f64::NAN; 3];
        if r % 2 == 0 {
            ours(&mut pair)?;
        }
        if let Some(served) = hf.as_deref_mut() {
            settle();
            pair[2] = served.seconds(&index.to_string())?;
        }
        if r % 2 == 1 {
            ours(&mut pair)?;
        }
        pairs.push(pair);
    }
    Ok(pairs)
}

/// onnxruntime-genai on the package, through the suite's binding (the genai level's). mobius' Whisper packages are
/// refused today; the section prints genai's own message where its figure would be, rather than leave a silent gap.
fn genai_speech(package: &Path) -> (String, Value) {
    let p = shown(package);
    match mobius_conformance::run::genai::Model::open(package, Provider::Cpu) {
        Ok(Err(r)) => {
            (format!("onnxruntime-genai refuses {p}: {}: no genai figure", r.message), json!({ "package": p, "refused": r.message }))
        }
        Ok(Ok(_)) => (format!("onnxruntime-genai loads {p} now: add it to the speech section"), json!({ "package": p, "refused": null })),
        Err(e) => (format!("onnxruntime-genai could not be run on {p}: {e}"), json!({ "package": p, "error": e.to_string() })),
    }
}

/// The tokens generate() chose on each clip (EOS included), from `speech-serve`'s ready line.
fn served_ids(served: &Served, clips: usize) -> Result<Vec<Vec<i64>>, String> {
    (0..clips)
        .map(|i| {
            let ids = served.ready["clips"][i]["ids"].as_array().and_then(|a| a.iter().map(Value::as_i64).collect());
            ids.ok_or_else(|| format!("{}: no ids for clip {i} in {}", served.what, served.ready))
        })
        .collect()
}

/// One model's clips measured: a table row and a report entry per clip. Clips whose tokens differ between the suite
/// and generate() get no figure and are pushed to `failures`.
fn speech_model(o: &Options, m: &SpeechModel, rows: &mut Vec<String>, failures: &mut Vec<String>) -> Result<Vec<Value>, String> {
    let suite = SuiteSpeech::new(m)?;
    let clips: Vec<LoadedClip> = m.clips.iter().map(|c| LoadedClip::load(m, c)).collect::<Result<_, _>>()?;
    let mut hf = if o.skip_python { None } else { Some(serve_whisper(m)?) };
    let hf_ids = hf.as_ref().map(|h| served_ids(h, clips.len())).transpose()?;
    let mut out = Vec::new();
    for (i, clip) in clips.iter().enumerate() {
        let (_, _, ids) = suite.run(clip)?; // warm-up: the tokens every timed run must repeat
        let label = format!("{} {}", clip.case, clip.audio);
        let entry = |figures: Value| {
            let mut e = json!({ "case": clip.case, "clip": clip.audio, "package": shown(&m.package), "audio_seconds": clip.audio_seconds,
                                "tokens": ids.len(), "repeats": o.repeats });
            if let (Some(e), Value::Object(figures)) = (e.as_object_mut(), figures) {
                e.extend(figures);
            }
            e
        };
        let theirs = hf_ids.as_ref().map(|all| &all[i]);
        if let Some((step, theirs)) = theirs.and_then(|t| Some((differs_from_generate(&ids, t, &suite.eos)?, t.len()))) {
            let why = format!("the suite's tokens differ from generate()'s from step {step} ({} vs {theirs} tokens)", ids.len());
            rows.push(format!("| {label} | {:.2} | - | {why}: no figure | - | - | - |", clip.audio_seconds));
            failures.push(format!("speech {label}: {why}"));
            out.push(entry(json!({ "same_tokens": false, "first_difference": step })));
            continue;
        }
        let pairs = speech_pairs(&suite, clip, &ids, hf.as_mut(), i, o.repeats)?;
        let rtf = |k: usize| finite_stats(pairs.iter().map(|p| p[k] / clip.audio_seconds));
        let vs = finite_stats(pairs.iter().map(|p| ratio(p[2], p[0])));
        let cell = |s: Option<Stats>, digits: usize| {
            s.map_or("-".into(), |s| format!("{:.digits$} ({:.digits$}-{:.digits$})", s.median, s.min, s.max))
        };
        rows.push(format!(
            "| {label} | {:.2} | {} | {} | {} | {} | {} |",
            clip.audio_seconds,
            ids.len(),
            cell(rtf(0), 4),
            cell(rtf(1), 4),
            cell(rtf(2), 4),
            cell(vs, 2)
        ));
        let j = |s: Option<Stats>| s.map(|s| s.json());
        out.push(entry(
            json!({ "same_tokens": hf.as_ref().map(|_| true), "suite_rtf": j(rtf(0)), "suite_inside_ort_runs_rtf": j(rtf(1)), "hf_rtf": j(rtf(2)), "speech_hf_vs_suite": j(vs) }),
        ));
    }
    Ok(out)
}

/// Speech-to-text's real-time factor (processing seconds / audio seconds; lower is faster) of Whisper, encoder and
/// greedy decoding with the self-attention KV cache on one intra-op thread: the suite's runner against Hugging Face
/// transformers' generate() (torch, one thread), both from the same stored log-mel features and prefix, in
/// interleaved pairs per clip; the ratio is taken within each pair. A model not built, or without goldens, is
/// skipped naming what to run; onnxruntime-genai's refusal of the packages is printed with its message.
fn speech_section(o: &Options, table: &mut Vec<String>, failures: &mut Vec<String>) -> Result<(Vec<Value>, Vec<Value>), String> {
    let models = speech_models(&Suite::open(&workspace_root()))?;
    let mut notes: Vec<String> = SPEECH_CASES
        .iter()
        .filter(|f| !models.iter().any(|m| m.file == **f))
        .map(|f| format!("speech: {f}: no such case: skipped"))
        .collect();
    let (mut rows, mut clips, mut genai) = (Vec::new(), Vec::new(), Vec::new());
    for m in &models {
        if let Some(why) = m.missing(o.skip_python)? {
            notes.push(format!("speech: {}: {why}: skipped", m.file));
            continue;
        }
        let (line, verdict) = genai_speech(&m.package);
        notes.push(format!("speech: {line}"));
        genai.push(verdict);
        clips.extend(speech_model(o, m, &mut rows, failures)?);
    }
    table.push(String::new());
    if !rows.is_empty() {
        table.push(format!(
            "| speech-to-text RTF (s / audio s; 1 thread, {} repeats) | audio s | tokens | suite | suite, ORT runs only | HF transformers generate() | HF / suite |",
            o.repeats
        ));
        table.push("|---|---|---|---|---|---|---|".into());
        table.append(&mut rows);
    }
    table.append(&mut notes);
    Ok((clips, genai))
}

pub fn bench(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let reps = o.repeats.to_string();
    let mut table: Vec<String> = Vec::new();
    let mut report = serde_json::Map::new();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    report.insert("machine".into(), json!({ "cores": cores, "intra_op_threads": 1 }));
    eprintln!("bench: {} repeats, {} tokens, {cores} cores; reference tools from the xtask venv", o.repeats, o.tokens);

    // Decode throughput: the suite's loop vs onnxruntime-genai vs a plain Python onnxruntime loop.
    if o.runs("decode") {
        let decode = decode_section(&o, &mut table)?;
        report.insert("decode".into(), Value::Array(decode));
    }

    // Prefill latency: the suite vs Python onnxruntime, per prompt length (the fixtures' RoPE tables end at 256).
    if o.runs("prefill") {
        table.push(String::new());
        table.push("| prefill (ms) | length | suite | python ort | python / suite |".into());
        table.push("|---|---|---|---|---|".into());
        let lengths = [16usize, 64, 128, 256];
        let mut prefill = Vec::new();
        for m in ["qwen3-tiny", "gemma4-tiny"] {
            for f in FLAVOURS {
                let pkg = package(m, f);
                let py = if o.skip_python {
                    Value::Null
                } else {
                    let l = lengths.map(|l| l.to_string()).join(",");
                    python(
                        &["prefill", "--package", &pkg.to_string_lossy(), "--lengths", &l, "--repeats", &reps, "--threads", "1"]
                            .map(String::from),
                    )?
                };
                for &len in &lengths {
                    let suite = suite_prefill(&pkg, &synthetic(len, 512, 2), o.repeats, Provider::Cpu)?;
                    let entry = py["lengths"].as_array().and_then(|a| a.iter().find(|e| e["length"].as_u64() == Some(len as u64)));
                    let pys = entry.and_then(|e| Stats::from_json(&e["seconds"]));
                    let speedup = pys.map(|p| ratio(p.median, suite.median));
                    table.push(format!(
                        "| {m} {f} | {len} | {:.3} | {} | {} |",
                        suite.median * 1e3,
                        pys.map_or("-".into(), |p| format!("{:.3}", p.median * 1e3)),
                        speedup.map_or("-".into(), |x| format!("{x:.2}"))
                    ));
                    prefill.push(json!({ "model": m, "flavour": f, "length": len, "suite_seconds": suite.json(),
                        "python_ort_seconds": pys.map(|s| s.json()), "prefill_vs_python_ort": speedup }));
                }
            }
        }
        report.insert("prefill".into(), Value::Array(prefill));
    }

    // The accuracy gate vs lm-eval itself on the same items (arith + arith-control, 0-shot).
    let mut gate_vs = None;
    if o.runs("gate") {
        let (gate_stats, n) = suite_gate(&["arith", "arith-control"], o.repeats)?;
        let mut lmeval = serde_json::Map::new();
        let mut best_lmeval: Option<f64> = None;
        if !o.skip_python {
            // lm-eval runs the Hugging Face weights, which are derived from the committed package: make them if absent.
            if !workspace_root().join("fixtures/arith-tiny/hf/model.safetensors").is_file() {
                crate::regen::fixtures(&["--hf-only", "--only", "arith-tiny"].map(String::from))?;
            }
            for batch in [1, 8] {
                let v = python(
                    &[
                        "lmeval",
                        "--tasks",
                        "arith,arith-control",
                        "--include-path",
                        "xtask/reference/lmeval",
                        "--pretrained",
                        "fixtures/arith-tiny/hf",
                        "--batch-size",
                        &batch.to_string(),
                        "--threads",
                        "1",
                    ]
                    .map(String::from),
                )?;
                let s = Stats::from_json(&v["items_per_s"]);
                if let Some(s) = s {
                    best_lmeval = Some(best_lmeval.map_or(s.median, |b: f64| b.max(s.median)));
                }
                lmeval.insert(format!("batch_{batch}"), json!({ "items_per_s": s.map(|s| s.json()), "results": v["results"] }));
            }
        }
        gate_vs = best_lmeval.map(|b| ratio(gate_stats.median, b));
        table.push(String::new());
        table.push(format!(
            "accuracy gate: {:.0} items/s over {n} items; lm-eval 0.4.13 (hf, batch 1 / 8): {} items/s; gate_vs_lmeval (vs the faster) {}",
            gate_stats.median,
            ["batch_1", "batch_8"]
                .map(|b| lmeval.get(b).and_then(|v| v["items_per_s"]["median"].as_f64()).map_or("-".into(), |x| format!("{x:.0}")))
                .join(" / "),
            gate_vs.map_or("-".into(), |x| format!("{x:.2}"))
        ));
        report.insert(
            "gate".into(),
            json!({ "suite_items_per_s": gate_stats.json(), "items": n, "lmeval": lmeval, "gate_vs_lmeval": gate_vs }),
        );
    }

    // Suite overhead, and scaling with the number of cases: the trials of `--root` (this repository by default).
    let mut overhead = None;
    let mut failures = Vec::new();
    let source = o.root.clone().unwrap_or_else(workspace_root);
    if o.runs("overhead") {
        let (v, r) = overhead_section(&source, &mut table, &mut failures);
        overhead = r;
        report.insert("overhead".into(), v);
    }
    if o.runs("scaling") {
        let scaling = scaling_section(&source, cores, &mut table, &mut failures)?;
        report.insert("scaling".into(), Value::Array(scaling));
    }

    if o.runs("real") {
        let real = real_section(&o, &mut table)?;
        report.insert("real".into(), Value::Array(real));
    }
    if o.runs("gate-real") {
        let gate = gate_real(&reference_setup::real::link(), &mut table)?;
        report.insert("gate_real".into(), Value::Array(gate));
    }

    // Speech-to-text: Whisper's real-time factor through the suite vs Hugging Face's generate().
    if o.runs("speech") {
        let (clips, genai) = speech_section(&o, &mut table, &mut failures)?;
        report.insert("speech".into(), Value::Array(clips));
        report.insert("speech_genai".into(), Value::Array(genai));
    }

    let rss = peak_rss_mb();
    table.push(format!("peak resident memory of the suite process: {rss:.0} MB"));
    report.insert("peak_rss_mb".into(), json!(rss));
    if let Some((c, cap)) = runtime::session_counts() {
        table.push(format!(
            "sessions: {} made, {} dropped to stay under the cap of {cap} (MOBIUS_MAX_SESSIONS), at most {} alive at once",
            c.made, c.dropped, c.peak_alive
        ));
        report.insert("sessions".into(), json!({ "made": c.made, "dropped": c.dropped, "peak_alive": c.peak_alive, "cap": cap }));
    }
    // The headline figures: the worst fixture's median ratio, as the targets read.
    let worst = |report: &serde_json::Map<String, Value>, section: &str, key: &str, per: &str| -> Value {
        let v: Vec<f64> = report
            .get(section)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|d| d[key]["median"].as_f64().or(d[key].as_f64())).filter(|x| x.is_finite()).collect())
            .unwrap_or_default();
        if v.is_empty() { Value::Null } else { json!({ "min": v.iter().copied().fold(f64::INFINITY, f64::min), "per": per }) }
    };
    for (key, section, per) in [
        ("decode_vs_genai", "decode", "fixture and flavour (median over pairs)"),
        ("decode_ceiling_vs_genai", "decode", "fixture and flavour (median over pairs)"),
        ("decode_vs_python_ort", "decode", "fixture and flavour (median over pairs)"),
        ("prefill_vs_python_ort", "prefill", "fixture, flavour and length"),
        ("speech_hf_vs_suite", "speech", "model and clip (median over repeats)"),
    ] {
        let v = worst(&report, section, key, per);
        report.insert(key.into(), v);
    }
    report.insert("gate_vs_lmeval".into(), json!(gate_vs));
    report.insert("overhead_ratio".into(), json!(overhead));

    println!("{}", table.join("\n"));
    if let Some(path) = &o.json {
        let text = serde_json::to_string_pretty(&Value::Object(report)).unwrap();
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
        println!("\nwrote {}", path.display());
    }
    if !failures.is_empty() {
        return Err(format!("bench: these sections report no figure: {}", failures.join("; ")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first 26 bytes of a FLAC file: `fLaC`, a last-block STREAMINFO header of 34 bytes, block and frame sizes,
    /// then the sample rate (20 bits), channels - 1 (3), bits per sample - 1 (5) and the total samples (36).
    fn flac_head(rate: u64, samples: u64) -> [u8; 26] {
        let mut head = [0u8; 26];
        head[..8].copy_from_slice(&[b'f', b'L', b'a', b'C', 0x80, 0, 0, 34]);
        let bits = (rate << 44) | (15 << 36) | samples; // mono, 16 bits
        head[18..].copy_from_slice(&bits.to_be_bytes());
        head
    }

    #[test]
    fn flac_duration_reads_streaminfo_and_refuses_what_does_not_state_it() {
        assert_eq!(flac_duration(&flac_head(16_000, 145_840)), Some(9.115));
        assert_eq!(flac_duration(&flac_head(48_000, (1 << 36) - 1)), Some(((1u64 << 36) - 1) as f64 / 48_000.0));
        assert_eq!(flac_duration(&flac_head(16_000, 0)), None, "a stream of unknown length");
        let mut wav = flac_head(16_000, 1);
        wav[..4].copy_from_slice(b"RIFF");
        assert_eq!(flac_duration(&wav), None);
        let mut padding_first = flac_head(16_000, 1);
        padding_first[4] = 1;
        assert_eq!(flac_duration(&padding_first), None, "STREAMINFO must come first");
    }

    #[test]
    fn the_committed_clip_is_as_long_as_soundfile_says() {
        let clip = workspace_root().join("fixtures/media/652-129742-0006.flac");
        assert_eq!(flac_seconds(&clip).unwrap(), 9.115);
        let e = flac_seconds(&workspace_root().join("Cargo.toml")).unwrap_err();
        assert!(e.contains("Cargo.toml") && e.contains("not a FLAC file"), "{e}");
    }

    #[test]
    fn an_overhead_run_whose_engines_outlast_its_wall_time_gets_no_figure() {
        let counts = Counts { pass: 3, ..Counts::default() };
        let timed = |wall: f64, ort_runs: f64, genai: f64| Timed {
            wall,
            ort_runs,
            ort_loads: 0.0,
            genai,
            trials: 3,
            counts,
            failed: Vec::new(),
            skipped: Vec::new(),
            first_failure: None,
        };
        assert_eq!(timed(3.6, 1.6, 1.5).overhead_refusal(), None, "the suite's own 0.5 s of 3.6 s");
        let why = timed(2.931, 1.498, 1.568).overhead_refusal().expect("engines 3.066 s > wall 2.931 s");
        assert!(why.contains("engines' time (3.066s) exceeds the wall time (2.931s)"), "{why}");
        let idle = timed(1.0, 0.0, 0.0).overhead_refusal().expect("no engine time");
        assert!(idle.starts_with("no time inside any engine (3 trials"), "{idle}");
    }

    #[test]
    fn a_loop_s_steps_are_the_gaps_between_its_run_ends_and_its_step_rate_their_median() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + std::time::Duration::from_millis(ms);
        // Four run ends (the prompt's, then three steps of 10, 50 and 20 ms) over 0.2 s of wall, 0.1 s inside runs.
        let run = LoopRun::of(4, 0.2, 0.1, &[at(0), at(10), at(60), at(80)]);
        let steps: Vec<u64> = run.steps.iter().map(|s| (s * 1e3).round() as u64).collect();
        assert_eq!(steps, [10, 50, 20]);
        assert!((step_rate(&run.steps) - 50.0).abs() < 1e-6, "the median step is 20 ms: 50 tok/s");
        assert!((run.own_ms() - 25.0).abs() < 1e-9, "(0.2 - 0.1) s over 4 tokens");
        assert!(step_rate(&[]).is_nan(), "no steps, no figure");
    }

    #[test]
    fn first_difference_is_the_first_unequal_step_or_the_shorter_end() {
        assert_eq!(first_difference(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_difference(&[1, 2, 3], &[1, 9, 3]), Some(1));
        assert_eq!(first_difference(&[1, 2], &[1, 2, 3]), Some(2));
        assert_eq!(first_difference(&[], &[4]), Some(0));
    }

    #[test]
    fn generate_s_stream_is_the_suite_s_without_its_closing_eos() {
        let eos = [50256];
        assert_eq!(differs_from_generate(&[6756, 1364, 50256], &[6756, 1364], &eos), None);
        assert_eq!(differs_from_generate(&[6756, 1364], &[6756, 1364], &eos), None, "stopped by the length limit");
        assert_eq!(differs_from_generate(&[6756, 1364, 50256], &[6756, 1364, 50256], &eos), Some(2));
        assert_eq!(differs_from_generate(&[6756, 13, 50256], &[6756, 1364], &eos), Some(1));
    }
}
