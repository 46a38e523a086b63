//! `cargo xtask gpu-check`: what a machine with an NVIDIA GPU runs, in one go and one summary: every trial with
//! `MOBIUS_TEST_DEVICE=cuda` semantics (the `default` and `cuda` builds on the CUDA execution provider, strict, TF32
//! off; `cpu` builds stay on the CPU), then the CUDA part of the benchmark (the suite's decode loop and prefill on
//! CUDA against the same on the CPU). Exit status: non-zero when any trial fails or CUDA cannot start.

use std::time::Instant;

use mobius_conformance::context::RunContext;
use mobius_conformance::outcome::Status;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::run::runtime::Provider;
use mobius_conformance::trial;
use mobius_conformance::vocab::Device;

use crate::bench::{Stats, package, peak_rss_mb, prompt_ids, suite_decode, suite_prefill, synthetic};

pub fn gpu_check(args: &[String]) -> Result<(), String> {
    let device = match args {
        [] => RunContext::from_env().ok().map(|c| c.device).filter(|d| *d != Device::Cpu).unwrap_or(Device::Cuda { id: 0 }),
        [flag, d] if flag == "--device" => Device::parse(d).ok_or_else(|| format!("--device {d:?}: expected cuda or cuda:<id>"))?,
        other => return Err(format!("gpu-check: unexpected arguments {other:?}; usage: cargo xtask gpu-check [--device cuda:<id>]")),
    };
    let Device::Cuda { id } = device else { return Err("gpu-check runs on CUDA; --device cpu makes no sense here".into()) };
    let started = Instant::now();
    let suite = Suite::open(&workspace_root());
    let plan = mobius_conformance::trial::matrix::plan(&suite);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(4);
    let rows =
        trial::run_parallel(&suite, &plan, &RunContext { device, ..RunContext::from_env().map_err(|e| e.to_string())? }, threads, |f| {
            if f.outcome.status == Status::Fail {
                eprintln!("FAIL {}\n{}", f.name, f.outcome.message);
            }
        });
    let trials_s = started.elapsed().as_secs_f64();
    let failed: Vec<&str> = rows.iter().filter(|r| r.outcome.is_fail()).map(|r| r.name.as_str()).collect();

    // The CUDA part of the benchmark: the same loops on both providers, so the ratio says what CUDA buys here.
    let mut lines = Vec::new();
    let prompt = prompt_ids()?;
    for m in ["qwen3-tiny", "gemma4-tiny"] {
        let pkg = package(m, "default");
        let cuda = suite_decode(&pkg, &prompt, 128, 5, Provider::Cuda { id });
        let cpu = suite_decode(&pkg, &prompt, 128, 5, Provider::Cpu);
        match (cuda, cpu) {
            (Ok(g), Ok(c)) => {
                let same = g.ids == c.ids;
                let (g, c) = (Stats::of(g.rates), Stats::of(c.rates));
                lines.push(format!(
                    "decode {m} default f32: CUDA {:.0} tok/s, CPU {:.0} tok/s ({:.2}x); same 128 tokens: {}",
                    g.median,
                    c.median,
                    g.median / c.median,
                    same
                ))
            }
            (Err(e), _) | (_, Err(e)) => lines.push(format!("decode {m}: ERROR {e}")),
        }
        let ids = synthetic(256, 512, 2);
        match (suite_prefill(&pkg, &ids, 5, Provider::Cuda { id }), suite_prefill(&pkg, &ids, 5, Provider::Cpu)) {
            (Ok(g), Ok(c)) => {
                lines.push(format!("prefill {m} default f32, 256 tokens: CUDA {:.3} ms, CPU {:.3} ms", g.median * 1e3, c.median * 1e3))
            }
            (Err(e), _) | (_, Err(e)) => lines.push(format!("prefill {m}: ERROR {e}")),
        }
    }
    println!("gpu-check on {device}: {} trials in {trials_s:.1}s", rows.len());
    println!("  {}", mobius_conformance::report::summary::tally(&rows));
    for f in &failed {
        println!("  FAILED {f}");
    }
    for l in &lines {
        println!("  {l}");
    }
    println!("  peak resident memory {:.0} MB; total {:.1}s", peak_rss_mb(), started.elapsed().as_secs_f64());
    if failed.is_empty() && !lines.iter().any(|l| l.contains("ERROR")) { Ok(()) } else { Err(format!("{} trial(s) failed", failed.len())) }
}
