//! The accuracy gate's speed: on the trained fixture against lm-eval itself, and on the real tier three ways.

use std::path::Path;
use std::time::Instant;

use mobius_conformance::accuracy::eval;
use mobius_conformance::accuracy::task;
use mobius_conformance::feed::package::{GenaiConfig, package_model};
use mobius_conformance::feed::tokenizer::TextTokenizer;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::run::decoder::Decoder;
use mobius_conformance::run::runtime::Provider;
use mobius_conformance::run::sessions;
use serde_json::{Value, json};

use super::options::Options;
use super::python::{python, settle};
use super::stats::{Stats, ratio};

/// Items per second of the accuracy gate on `tasks` (the trained fixture's f32 package), session warm.
pub(super) fn suite_gate(tasks: &[&str], repeats: usize) -> Result<(Stats, usize), String> {
    let root = workspace_root();
    let tok = TextTokenizer::load(&root.join("fixtures/arith-tiny/hf")).map_err(|e| e.to_string())?;
    let package = root.join("fixtures/arith-tiny/onnx/default-f32");
    let model = package_model(&package).map_err(|e| e.to_string())?;
    let decoder = sessions::decoder(&model, Provider::Cpu).map_err(|e| e.to_string())?;
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

/// The real accuracy gate (`cases/tasks/knowledge.yaml`, 300 items x 4 choices) on each model's f32 package, three
/// ways, in one run: lm-eval's own requests (context + continuation per choice, one session), the context once and
/// the continuations from its cache (one session), and the trial's scoring (that, with the items shared out to one
/// session per core). Every way must give the same picks; the ratios are against the uncached scoring.
pub(super) fn gate_real(root: &Path, table: &mut Vec<String>) -> Result<Vec<Value>, String> {
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
        let mut decoders = vec![sessions::decoder(&model_file, Provider::Cpu).map_err(|e| e.to_string())?];
        for _ in 1..cores {
            decoders.push(sessions::decoder_replica(&model_file, Provider::Cpu).map_err(|e| e.to_string())?);
        }
        let time = |d: &[std::sync::Arc<Decoder>], s: Strategy| -> Result<(f64, Vec<Option<usize>>), String> {
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

/// The accuracy gate against lm-eval itself on the same items (arith + arith-control, 0-shot): the report's entry and
/// the gate's ratio against lm-eval's faster batch size.
pub(super) fn gate_section(o: &Options, table: &mut Vec<String>) -> Result<(Value, Option<f64>), String> {
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
    let gate_vs = best_lmeval.map(|b| ratio(gate_stats.median, b));
    table.push(String::new());
    table.push(format!(
        "accuracy gate: {:.0} items/s over {n} items; lm-eval 0.4.13 (hf, batch 1 / 8): {} items/s; gate_vs_lmeval (vs the faster) {}",
        gate_stats.median,
        ["batch_1", "batch_8"]
            .map(|b| lmeval.get(b).and_then(|v| v["items_per_s"]["median"].as_f64()).map_or("-".into(), |x| format!("{x:.0}")))
            .join(" / "),
        gate_vs.map_or("-".into(), |x| format!("{x:.2}"))
    ));
    let entry = json!({ "suite_items_per_s": gate_stats.json(), "items": n, "lmeval": lmeval, "gate_vs_lmeval": gate_vs });
    Ok((entry, gate_vs))
}
