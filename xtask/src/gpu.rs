//! `cargo xtask gpu-check`: what a machine with an NVIDIA GPU runs, in one go and one summary: every trial with
//! `MOBIUS_TEST_DEVICE=cuda` semantics (the `default` and `cuda` builds on the CUDA execution provider, strict, TF32
//! off; `cpu` builds stay on the CPU), then the CUDA part of the benchmark (the suite's decode loop and prefill on
//! CUDA against the same on the CPU). Exit status: non-zero when any trial fails or is skipped, when CUDA's greedy
//! tokens are not the CPU's, or when a bench loop cannot run (CUDA cannot start); the list says which. Every level
//! is planned, onnxruntime-genai's included (its CUDA build, `onnxruntime-genai-cuda`, pinned beside the CPU one).

use std::fmt;
use std::time::Instant;

use mobius_conformance::context::RunContext;
use mobius_conformance::outcome::{Finished, Status};
use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::run::placement::{self, Placement};
use mobius_conformance::run::runtime::Provider;
use mobius_conformance::run::sessions;
use mobius_conformance::trial;
use mobius_conformance::vocab::Device;

use crate::bench::{Stats, package_in, peak_rss_mb, prompt_ids_in, suite_decode, suite_prefill, synthetic};

pub fn gpu_check(args: &[String]) -> Result<(), String> {
    let mut device = RunContext::from_env().ok().map(|c| c.device).filter(|d| *d != Device::Cpu).unwrap_or(Device::Cuda { id: 0 });
    let mut root = std::env::var_os("MOBIUS_SUITE_ROOT").map_or_else(workspace_root, std::path::PathBuf::from);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match (a.as_str(), it.next()) {
            ("--device", Some(d)) => device = Device::parse(d).ok_or_else(|| format!("--device {d:?}: expected cuda or cuda:<id>"))?,
            ("--root", Some(r)) => root = r.into(),
            _ => {
                return Err(format!(
                    "gpu-check: unexpected arguments {args:?}; usage: cargo xtask gpu-check [--device cuda:<id>] [--root DIR]"
                ));
            }
        }
    }
    let Device::Cuda { id } = device else { return Err("gpu-check runs on CUDA; --device cpu makes no sense here".into()) };
    let started = Instant::now();
    let suite = Suite::open(&root);
    let plan = mobius_conformance::trial::matrix::plan(&suite);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(4);
    let ctx = RunContext { device, ..RunContext::from_env().map_err(|e| e.to_string())? };
    let (placements, mut errors) = placements(&suite, &plan, &ctx, threads)?;
    let rows = trial::run_parallel(&suite, &plan, &ctx, threads, |f| {
        if f.outcome.status == Status::Fail {
            eprintln!("FAIL {}\n{}", f.name, f.outcome.message);
        }
    });
    let trials_s = started.elapsed().as_secs_f64();

    // The CUDA part of the benchmark: the same loops on both providers, so the ratio says what CUDA buys here, and
    // the same greedy tokens, so a device bug the trials' goldens miss still fails the check.
    let (mut lines, mut checks) = (Vec::new(), Vec::new());
    let prompt = prompt_ids_in(&root)?;
    for m in ["qwen3-tiny", "gemma4-tiny"] {
        let pkg = package_in(&root, m, "default");
        let cuda = suite_decode(&pkg, &prompt, 128, 5, Provider::Cuda { id });
        let cpu = suite_decode(&pkg, &prompt, 128, 5, Provider::Cpu);
        match (cuda, cpu) {
            (Ok(g), Ok(c)) => {
                let check = TokenCheck { model: m.to_string(), cuda: g.ids, cpu: c.ids };
                let (g, c) = (Stats::of(g.rates), Stats::of(c.rates));
                lines.push(format!(
                    "decode {m} default f32: CUDA {:.0} tok/s, CPU {:.0} tok/s ({:.2}x); same {} tokens: {}",
                    g.median,
                    c.median,
                    g.median / c.median,
                    check.cpu.len(),
                    check.first_difference().is_none()
                ));
                checks.push(check);
            }
            (Err(e), _) | (_, Err(e)) => errors.push((format!("decode {m}"), e)),
        }
        let ids = synthetic(256, 512, 2);
        match (suite_prefill(&pkg, &ids, 5, Provider::Cuda { id }), suite_prefill(&pkg, &ids, 5, Provider::Cpu)) {
            (Ok(g), Ok(c)) => {
                lines.push(format!("prefill {m} default f32, 256 tokens: CUDA {:.3} ms, CPU {:.3} ms", g.median * 1e3, c.median * 1e3))
            }
            (Err(e), _) | (_, Err(e)) => errors.push((format!("prefill {m}"), e)),
        }
    }
    println!("gpu-check on {device}: {} trials in {trials_s:.1}s", rows.len());
    println!("  {}", mobius_conformance::report::summary::tally(&rows));
    println!(
        "  node placement: {} sessions on {device} profiled, {} node runs, {} nodes with floating-point outputs off the device",
        placements.len(),
        placements.iter().map(|p| p.node_runs).sum::<usize>(),
        placements.iter().map(|p| p.fallbacks.len()).sum::<usize>()
    );
    for l in &lines {
        println!("  {l}");
    }
    println!("  peak resident memory {:.0} MB; total {:.1}s", peak_rss_mb(), started.elapsed().as_secs_f64());
    verdict(&problems(&rows, &checks, &placements, errors))
}

/// Bench loops (or checks) that could not run: what, and why.
type Errors = Vec<(String, String)>;

/// Where each node of every package the trials run on the device ran: the prefill-type trials (L4, the encoder
/// levels: every decoder, encoder and embedding session, each run a few times) once more with ONNX Runtime's
/// profiler on, their sessions then dropped so that it writes each profile, and each read against the device
/// (`run::placement`). Returns the placements, or why they could not be read as a problem of the run.
fn placements(
    suite: &Suite,
    plan: &[mobius_conformance::plan::suite::TrialSpec],
    ctx: &RunContext,
    threads: usize,
) -> Result<(Vec<Placement>, Errors), String> {
    use mobius_conformance::vocab::Level;
    let prefill: Vec<_> =
        plan.iter().filter(|t| matches!(t.id.level(), Some(Level::L4 | Level::VisionEncoder | Level::AudioEncoder))).cloned().collect();
    let profiles = std::env::temp_dir().join(format!("mobius-gpu-check-profiles-{}", std::process::id()));
    std::fs::create_dir_all(&profiles).map_err(|e| format!("{}: {e}", profiles.display()))?;
    placement::start(Some(profiles.clone()));
    trial::run_parallel(suite, &prefill, ctx, threads, |_| {});
    placement::start(None);
    sessions::clear();
    let read = placement::fallbacks();
    let _ = std::fs::remove_dir_all(&profiles);
    Ok(match read {
        Ok(p) => (p, Vec::new()),
        Err(e) => (Vec::new(), vec![("reading where the nodes ran".to_string(), e.to_string())]),
    })
}

/// The bench's token check on one model: CUDA's greedy tokens and the CPU's, from the same prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenCheck {
    pub model: String,
    pub cuda: Vec<i64>,
    pub cpu: Vec<i64>,
}

impl TokenCheck {
    /// The first step where the two streams differ (a missing token counts), if any.
    fn first_difference(&self) -> Option<usize> {
        (0..self.cuda.len().max(self.cpu.len())).find(|&i| self.cuda.get(i) != self.cpu.get(i))
    }
}

/// What makes gpu-check fail.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    /// A trial failed on the device.
    Failed { trial: String },
    /// A trial it planned was skipped: every level runs on CUDA, so a skip is a trial it would claim to have run
    /// and did not (a package or golden missing on the runner, a level that could not start).
    Skipped { trial: String, why: String },
    /// CUDA's greedy tokens are not the CPU's.
    TokensDiffer { model: String, step: usize, cuda: Option<i64>, cpu: Option<i64> },
    /// A session of a trial ran nodes with floating-point outputs on another provider than its own (ONNX
    /// Runtime's profile says where each node ran): compute that quietly left the device.
    Fallback { model: String, nodes: Vec<String> },
    /// A bench loop could not run (CUDA did not start, the package did not load).
    Bench { what: String, error: String },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Failed { trial } => write!(f, "FAILED {trial}"),
            Problem::Skipped { trial, why } => write!(f, "SKIPPED {trial}: {why}"),
            Problem::TokensDiffer { model, step, cuda, cpu } => {
                write!(f, "TOKENS DIFFER decode {model}: at step {step} CUDA chose {cuda:?}, the CPU {cpu:?}")
            }
            Problem::Fallback { model, nodes } => {
                let shown: Vec<&str> = nodes.iter().take(5).map(String::as_str).collect();
                let more = if nodes.len() > 5 { format!(" and {} more", nodes.len() - 5) } else { String::new() };
                write!(f, "OFF THE DEVICE {model}: {} nodes ran on the CPU: {}{more}", nodes.len(), shown.join("; "))
            }
            Problem::Bench { what, error } => write!(f, "ERROR {what}: {error}"),
        }
    }
}

/// Every problem of a gpu-check run: its failed and skipped trials, its sessions with nodes off the device, its
/// token checks that differ and its bench loops that could not run.
pub fn problems(rows: &[Finished], checks: &[TokenCheck], placements: &[Placement], errors: Vec<(String, String)>) -> Vec<Problem> {
    let trials = rows.iter().filter_map(|r| match r.outcome.status {
        Status::Fail => Some(Problem::Failed { trial: r.name.clone() }),
        Status::Skip => Some(Problem::Skipped { trial: r.name.clone(), why: r.outcome.message.clone() }),
        _ => None,
    });
    let tokens = checks.iter().filter_map(|c| {
        let step = c.first_difference()?;
        Some(Problem::TokensDiffer { model: c.model.clone(), step, cuda: c.cuda.get(step).copied(), cpu: c.cpu.get(step).copied() })
    });
    let off = placements.iter().filter(|p| !p.fallbacks.is_empty()).map(|p| Problem::Fallback {
        model: p.session.model.display().to_string(),
        nodes: p.fallbacks.iter().map(|f| format!("{} {} ({}) on {}", f.op, f.node, f.outputs.join(", "), f.ran_on)).collect(),
    });
    let bench = errors.into_iter().map(|(what, error)| Problem::Bench { what, error });
    trials.chain(off).chain(tokens).chain(bench).collect()
}

/// gpu-check's exit: success with no problem, else the list.
fn verdict(problems: &[Problem]) -> Result<(), String> {
    if problems.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
    Err(format!("gpu-check found {} problem(s):\n{}", problems.len(), list.join("\n")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mobius_conformance::outcome::Outcome;

    fn row(name: &str, outcome: Outcome) -> Finished {
        Finished { name: name.to_string(), outcome, seconds: 0.1 }
    }

    fn same(model: &str) -> TokenCheck {
        TokenCheck { model: model.to_string(), cuda: vec![5, 6, 7], cpu: vec![5, 6, 7] }
    }

    #[test]
    fn a_clean_run_passes() {
        let rows = [row("qwen3-tiny/text/default/f32/L4", Outcome::new(Status::Pass, ""))];
        assert_eq!(problems(&rows, &[same("qwen3-tiny")], &[], vec![]), vec![]);
        assert_eq!(verdict(&[]), Ok(()));
    }

    #[test]
    fn a_token_mismatch_fails_naming_the_step() {
        let rows = [row("qwen3-tiny/text/default/f32/L4", Outcome::new(Status::Pass, ""))];
        let differ = TokenCheck { model: "gemma4-tiny".into(), cuda: vec![5, 6, 9], cpu: vec![5, 6, 7] };
        let p = problems(&rows, &[same("qwen3-tiny"), differ], &[], vec![]);
        assert_eq!(p, vec![Problem::TokensDiffer { model: "gemma4-tiny".into(), step: 2, cuda: Some(9), cpu: Some(7) }]);
        let e = verdict(&p).unwrap_err();
        assert!(e.contains("TOKENS DIFFER decode gemma4-tiny: at step 2 CUDA chose Some(9), the CPU Some(7)"), "{e}");
        // A stream cut short differs where it ends.
        let short = TokenCheck { model: "m".into(), cuda: vec![5, 6], cpu: vec![5, 6, 7] };
        assert_eq!(short.first_difference(), Some(2));
    }

    #[test]
    fn a_skipped_trial_fails_with_its_reason() {
        let rows = [
            row("qwen3-tiny/text/default/f32/L4", Outcome::new(Status::Pass, "")),
            row("qwen3-tiny/text/default/f32/L5", Outcome::skip("the package is not built")),
        ];
        let p = problems(&rows, &[same("qwen3-tiny")], &[], vec![]);
        assert_eq!(p, vec![Problem::Skipped { trial: "qwen3-tiny/text/default/f32/L5".into(), why: "the package is not built".into() }]);
        assert!(verdict(&p).unwrap_err().contains("SKIPPED qwen3-tiny/text/default/f32/L5: the package is not built"));
    }

    #[test]
    fn failed_trials_and_bench_errors_fail() {
        let rows = [row("qwen3-tiny/text/default/f16/L4", Outcome::fail("logits differ"))];
        let p = problems(&rows, &[], &[], vec![("decode qwen3-tiny".into(), "CUDA did not start".into())]);
        assert_eq!(p.len(), 2, "{p:?}");
        let e = verdict(&p).unwrap_err();
        assert!(e.contains("FAILED qwen3-tiny/text/default/f16/L4") && e.contains("ERROR decode qwen3-tiny: CUDA did not start"), "{e}");
    }

    #[test]
    fn a_session_with_compute_off_the_device_fails_naming_its_nodes() {
        use mobius_conformance::run::placement::{Fallback, Profiled};
        let session = Profiled { model: "pkg/model.onnx".into(), provider: Provider::Cuda { id: 0 }, prefix: "p".into() };
        let node = |i: usize| Fallback {
            node: format!("layers.{i}/Attention_node"),
            op: "Attention".into(),
            ran_on: "CPUExecutionProvider".into(),
            outputs: vec!["float [1,3,64]".into()],
        };
        let off = Placement { session: session.clone(), node_runs: 40, fallbacks: (0..7).map(node).collect() };
        let clean = Placement { session, node_runs: 40, fallbacks: vec![] };
        let rows = [row("qwen3-tiny/text/default/f32/L4", Outcome::new(Status::Pass, ""))];
        assert_eq!(problems(&rows, &[same("qwen3-tiny")], std::slice::from_ref(&clean), vec![]), vec![]);
        let p = problems(&rows, &[same("qwen3-tiny")], &[clean, off], vec![]);
        let e = verdict(&p).unwrap_err();
        assert!(e.contains("OFF THE DEVICE pkg/model.onnx: 7 nodes ran on the CPU: Attention layers.0/Attention_node (float [1,3,64]) on CPUExecutionProvider;"), "{e}");
        assert!(e.contains("and 2 more"), "{e}");
    }
}
