//! The real tier at real size: load, memory, prefill and decode of its packages against the peer loops.

use std::path::Path;
use std::time::Instant;

use mobius_conformance::feed::package::package_model;
use mobius_conformance::run::runtime::Provider;
use mobius_conformance::run::sessions;
use serde_json::{Value, json};

use super::loops::{DecodeLoop, OrtOnlyLoop, peak_rss_mb, rss_mb, step_rate, suite_prefill, synthetic};
use super::options::Options;
use super::python::{Served, settle};
use super::stats::{Stats, finite_stats, ratio};

/// New tokens a run in the real section: many short runs in rotation (`--pairs` rounds of them) pin a ratio down
/// better than a few long ones on a machine whose speed drifts over seconds.
pub(super) const REAL_TOKENS: usize = 48;

pub(super) fn dir_mb(dir: &Path) -> f64 {
    std::fs::read_dir(dir).into_iter().flatten().flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len() as f64).sum::<f64>() / 1e6
}

/// The real tier at real size (`cargo xtask real`; skipped when it is not built): per package, the session's load
/// time and the memory it adds against its size on disk, prefill latency at two lengths (one past Gemma-3's
/// 512-token window), and decode throughput of the suite's loop against onnxruntime-genai and the Python
/// onnxruntime loop and a Rust loop of ONNX Runtime calls alone, in `--pairs` rounds of [`REAL_TOKENS`]-token runs,
/// each round in a rotated order. Only the last position's logits row ever leaves ONNX Runtime's output.
/// Each ratio is given twice: over whole runs, and at the median decode step (every loop's steps timed from one
/// run call's end to the next), which a burst of the machine's noise inside one engine's run does not move.
pub(super) fn real_section(o: &Options, table: &mut Vec<String>) -> Result<Vec<Value>, String> {
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
        out.push(real_package(o, &root, rel, tokens, table)?);
    }
    table.push(format!("peak resident memory after the real tier: {:.0} MB", peak_rss_mb()));
    Ok(out)
}

/// One package of the real tier measured: its table row and its report entry.
fn real_package(o: &Options, root: &Path, rel: &str, tokens: usize, table: &mut Vec<String>) -> Result<Value, String> {
    let pkg = root.join(rel);
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(pkg.join("genai_config.json")).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let vocab = cfg["model"]["vocab_size"].as_i64().ok_or_else(|| format!("{rel}: genai_config.json has no model.vocab_size"))?;
    let model = package_model(&pkg).map_err(|e| e.to_string())?;
    let size = dir_mb(&pkg);
    let before = rss_mb();
    let t0 = Instant::now();
    let decoder = sessions::decoder(&model, Provider::Cpu).map_err(|e| e.to_string())?;
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
    let rows = real_rounds(o, rel, tokens, (&suite, &thin), py.as_mut())?;
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
    Ok(json!({
        "package": rel, "size_mb": size, "load_seconds": load, "rss_added_mb": added,
        "prefill_seconds": { "64": pre[0].json(), "600": pre[1].json() },
        "decode_tokens": tokens, "rounds": o.pairs, "suite": j(col(0)), "genai": j(col(1)), "python_ort": j(col(2)),
        "decode_vs_genai": j(vs(1)), "decode_vs_python_ort": j(vs(2)), "ort_only_rust": j(col(3)),
        "decode_vs_ort_only_rust": j(vs(3)),
        "median_step": { "suite": j(col(4)), "genai": j(col(5)), "python_ort": j(col(6)), "ort_only_rust": j(col(7)),
                         "vs_genai": j(vs_step(1)), "vs_python_ort": j(vs_step(2)), "vs_ort_only_rust": j(vs_step(3)) },
        "own_ms_per_token": { "suite": j(col(8)), "ort_only_rust": j(col(9)), "python_ort": j(col(10)) },
        "peak_rss_mb_so_far": peak_rss_mb(),
    }))
}

/// `o.pairs` rounds of the four loops on one package, each round in a rotated order: one row of figures a round.
fn real_rounds(
    o: &Options,
    rel: &str,
    tokens: usize,
    (suite, thin): (&DecodeLoop, &OrtOnlyLoop),
    mut py: Option<&mut Served>,
) -> Result<Vec<[f64; 11]>, String> {
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
                    let Some(py) = py.as_deref_mut() else { continue };
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
    Ok(rows)
}
