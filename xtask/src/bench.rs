//! `cargo xtask bench`: what the suite costs, side by side with the tools people use today, in one run.
//!
//! Every figure is a median over repeats (with min and max), measured in this process or in the reference venv's
//! Python (`xtask/reference/bench.py`) on the same packages and the same machine, and reported as a ratio against
//! its peer. Nothing here is a test: speed is measured and compared, never asserted in `cargo test`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use mobius_conformance::bootstrap::workspace_root;
use mobius_conformance::gate;
use mobius_conformance::generate::{self, Front};
use mobius_conformance::package::GenaiConfig;
use mobius_conformance::runtime::{self, Device, Provider, StepInput};
use mobius_conformance::task;
use mobius_conformance::tokenizer::TextTokenizer;
use mobius_conformance::trial::{self, Suite, package_model};
use serde_json::{Value, json};

use crate::venv;

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
    tokens: usize,
    skip_python: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options { json: None, repeats: 5, tokens: 128, skip_python: false };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => o.json = Some(PathBuf::from(it.next().ok_or("--json needs a file")?)),
            "--repeats" => o.repeats = it.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0).ok_or("--repeats needs a count")?,
            "--tokens" => o.tokens = it.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0).ok_or("--tokens needs a count")?,
            "--skip-python" => o.skip_python = true,
            other => return Err(format!("bench: unknown option `{other}`")),
        }
    }
    Ok(o)
}

/// Runs `bench.py` in the reference venv and parses the one JSON object it prints.
fn python(args: &[String]) -> Result<Value, String> {
    venv::ensure()?;
    let script = workspace_root().join("xtask").join("reference").join("bench.py");
    let out = Command::new(venv::python())
        .arg(&script)
        .args(args)
        .current_dir(workspace_root())
        .env("HF_HUB_OFFLINE", "1")
        .env("OMP_NUM_THREADS", "1")
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!("bench.py {} failed ({}):\n{}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr)));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("bench.py {}: {e}", args.join(" ")))
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

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

/// Tokens per second of the suite's own greedy loop (`generate::greedy`, the one L5 trials run), every repeat:
/// `tokens` new tokens after `prompt`, no EOS stop; the session is made and warmed first, as the suite shares it
/// across trials.
pub fn suite_decode(
    package: &Path,
    prompt: &[i64],
    tokens: usize,
    repeats: usize,
    provider: Provider,
) -> Result<(Vec<f64>, Vec<i64>), String> {
    let model = package_model(package).map_err(|e| e.to_string())?;
    let decoder = runtime::decoder(&model, provider).map_err(|e| e.to_string())?;
    let run = || generate::greedy(&decoder, &Front::Ids, prompt, tokens, &[], None).map_err(|e| e.to_string());
    let ids = run()?.chosen();
    let mut rates = Vec::new();
    let (mut wall, r0) = (0.0, runtime::run_seconds());
    for _ in 0..repeats {
        let t0 = Instant::now();
        run()?;
        rates.push(tokens as f64 / t0.elapsed().as_secs_f64());
        wall += t0.elapsed().as_secs_f64();
    }
    if std::env::var_os("MOBIUS_BENCH_VERBOSE").is_some() {
        eprintln!(
            "{}: {:.1}% of the decode loop inside ONNX Runtime runs",
            package.display(),
            100.0 * (runtime::run_seconds() - r0) / wall
        );
    }
    Ok((rates, ids))
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
    let eos = GenaiConfig::load(&package).map_err(|e| e.to_string())?.eos_token_ids;
    let loaded: Vec<_> = tasks
        .iter()
        .map(|t| task::load_items(&root, &format!("cases/tasks/{t}.yaml"), &tok).map_err(|e| e.to_string()))
        .collect::<Result<_, String>>()?;
    let n: usize = loaded.iter().map(|l| l.1.len()).sum();
    let run = || -> Result<f64, String> {
        let t0 = Instant::now();
        for loaded in &loaded {
            let (task, items) = (&loaded.0, &loaded.1);
            gate::score(&decoder, task, items, &tok, &eos).map_err(|e| e.to_string())?;
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

/// A suite root with `copies` copies of every case of the repository (renamed `<case>-copyK`), sharing its
/// fixtures, goldens and baselines by path.
fn replicated_root(copies: usize) -> Result<PathBuf, String> {
    let repo = workspace_root();
    let root = mobius_conformance::bootstrap::target_dir().join("bench").join(format!("x{copies}"));
    let _ = std::fs::remove_dir_all(&root);
    let io = |e: std::io::Error| e.to_string();
    for dir in ["fixtures", "cases/tasks"] {
        let to = root.join(dir);
        std::fs::create_dir_all(to.parent().unwrap()).map_err(io)?;
        std::os::unix::fs::symlink(repo.join(dir), &to).map_err(io)?;
    }
    std::fs::copy(repo.join("cases/tolerances.yaml"), root.join("cases/tolerances.yaml")).map_err(io)?;
    let suite = Suite::open(&repo);
    for case in suite.load_cases().into_iter().flatten() {
        let text = std::fs::read_to_string(repo.join(&case.file)).map_err(io)?;
        for k in 0..copies {
            let name = format!("{}-copy{k}", case.name);
            let dir = root.join("cases").join(&case.task_dir);
            std::fs::create_dir_all(&dir).map_err(io)?;
            std::fs::write(dir.join(format!("{name}.yaml")), &text).map_err(io)?;
            let gdir = repo.join("goldens").join(&case.task_dir);
            let gout = root.join("goldens").join(&case.task_dir);
            std::fs::create_dir_all(&gout).map_err(io)?;
            for e in std::fs::read_dir(&gdir).map_err(io)?.flatten() {
                let f = e.file_name().to_string_lossy().into_owned();
                if let Some(rest) = f.strip_prefix(&case.name)
                    && (rest.starts_with('.') || rest.starts_with('_'))
                {
                    std::fs::copy(e.path(), gout.join(format!("{name}{rest}"))).map_err(io)?;
                }
            }
            for task in &case.spec.accuracy {
                let t = crate::baselines::task_name(task);
                let from = suite.baseline_path(&t, &case.name);
                let to = root.join("goldens/baselines").join(&t).join(format!("{name}.json"));
                std::fs::create_dir_all(to.parent().unwrap()).map_err(io)?;
                if from.is_file() {
                    std::fs::copy(&from, &to).map_err(io)?;
                }
            }
        }
    }
    Ok(root)
}

/// Wall time of a whole trial set on `threads` workers, and the ONNX Runtime run time inside it.
fn time_trials(root: &Path, threads: usize) -> (f64, f64, usize, usize) {
    let suite = Suite::open(root);
    let plan = suite.plan();
    let r0 = runtime::run_seconds();
    let t0 = Instant::now();
    let done = trial::run_parallel(&suite, &plan, Device::Cpu, threads, |_| {});
    let wall = t0.elapsed().as_secs_f64();
    let failed = done.iter().filter(|f| f.outcome.is_fail()).count();
    (wall, runtime::run_seconds() - r0, plan.len(), failed)
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
    let prompt = prompt_ids()?;
    let prompt_arg = prompt.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
    table.push("| decode (128 tokens, tok/s) | suite | genai | python ort | vs genai | vs python ort |".into());
    table.push("|---|---|---|---|---|---|".into());
    let mut decode = Vec::new();
    for m in MODELS {
        for f in FLAVOURS {
            let pkg = package(m, f);
            // The suite is measured before and after the Python tools, so slow drifts of this machine's speed fall
            // on both sides of the ratio.
            let (before, ids) = suite_decode(&pkg, &prompt, o.tokens, o.repeats, Provider::Cpu)?;
            let py = if o.skip_python {
                Value::Null
            } else {
                let a = ["decode", "--package", &pkg.to_string_lossy(), "--prompt-ids", &prompt_arg, "--tokens", &o.tokens.to_string()];
                let mut a: Vec<String> = a.iter().map(|s| s.to_string()).collect();
                a.extend(["--repeats".into(), reps.clone(), "--engine".into(), "both".into(), "--threads".into(), "1".into()]);
                python(&a)?
            };
            let (after, _) = suite_decode(&pkg, &prompt, o.tokens, o.repeats, Provider::Cpu)?;
            let suite = Stats::of([before, after].concat());
            let genai = Stats::from_json(&py["genai"]["tokens_per_s"]);
            let ort = Stats::from_json(&py["ort"]["tokens_per_s"]);
            // The Python loops mask EOS as genai's min_length does; the suite's loop does not, so ids are compared
            // up to the first step where the reference's raw argmax was EOS.
            let masked =
                py["ort"]["eos_masked_steps"].as_array().and_then(|a| a.first()).and_then(Value::as_u64).map_or(ids.len(), |s| s as usize);
            let same = py["ort"]["ids"]
                .as_array()
                .map(|r| r.iter().take(masked).map(|v| v.as_i64()).eq(ids.iter().take(masked).map(|&i| Some(i))));
            let vs_genai = genai.map(|g| ratio(suite.median, g.median));
            let vs_ort = ort.map(|g| ratio(suite.median, g.median));
            let cell = |s: Option<Stats>| s.map_or("-".into(), |s| format!("{:.0}", s.median));
            let r = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.2}"));
            table.push(format!("| {m} {f} | {:.0} | {} | {} | {} | {} |", suite.median, cell(genai), cell(ort), r(vs_genai), r(vs_ort)));
            decode.push(json!({
                "model": m, "flavour": f, "suite": suite.json(), "genai": genai.map(|s| s.json()), "python_ort": ort.map(|s| s.json()),
                "decode_vs_genai": vs_genai, "decode_vs_python_ort": vs_ort, "same_ids_until_eos": same, "compared_steps": masked,
            }));
        }
    }
    report.insert("decode".into(), Value::Array(decode));

    // Prefill latency: the suite vs Python onnxruntime, per prompt length (the fixtures' RoPE tables end at 256).
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

    // The accuracy gate vs lm-eval itself on the same items (arith + arith-control, 0-shot).
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
    report
        .insert("gate".into(), json!({ "suite_items_per_s": gate_stats.json(), "items": n, "lmeval": lmeval, "gate_vs_lmeval": gate_vs }));

    // Suite overhead: the whole default trial set on one worker, wall time vs time inside ONNX Runtime's runs.
    let repo = workspace_root();
    let _warm = time_trials(&repo, 1);
    let (wall, ort, trials, failed) = time_trials(&repo, 1);
    let overhead = ratio(wall, ort);
    table.push(format!(
        "suite overhead: {trials} trials ({failed} failed) on 1 worker, sessions warm: wall {wall:.3}s, inside ONNX Runtime runs {ort:.3}s, overhead_ratio {overhead:.3}"
    ));
    report.insert("overhead".into(), json!({ "trials": trials, "wall_seconds": wall, "ort_run_seconds": ort, "overhead_ratio": overhead }));

    // Scaling: 1x, 2x and 4x copies of the case set, all cores, cold process state per size except sessions.
    let mut scaling = Vec::new();
    let mut base = None;
    for copies in [1usize, 2, 4] {
        let root = replicated_root(copies)?;
        let (wall, _, trials, failed) = time_trials(&root, cores);
        let b = *base.get_or_insert(wall);
        scaling.push(json!({ "copies": copies, "trials": trials, "failed": failed, "wall_seconds": wall, "vs_1x": wall / b }));
        table.push(format!(
            "scaling: {copies}x the cases = {trials} trials ({failed} failed) in {wall:.3}s on {cores} workers ({:.2}x the 1x time)",
            wall / b
        ));
        let _ = std::fs::remove_dir_all(&root);
    }
    report.insert("scaling".into(), Value::Array(scaling));

    let rss = peak_rss_mb();
    table.push(format!("peak resident memory of the suite process: {rss:.0} MB"));
    report.insert("peak_rss_mb".into(), json!(rss));
    let summary = |key: &str, v: Vec<f64>| -> Value {
        let v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() { Value::Null } else { json!({ "min": v.iter().copied().fold(f64::INFINITY, f64::min), "per": key }) }
    };
    let decode_vs_genai: Vec<f64> = report["decode"].as_array().unwrap().iter().filter_map(|d| d["decode_vs_genai"].as_f64()).collect();
    let decode_vs_ort: Vec<f64> = report["decode"].as_array().unwrap().iter().filter_map(|d| d["decode_vs_python_ort"].as_f64()).collect();
    let prefill_vs: Vec<f64> = report["prefill"].as_array().unwrap().iter().filter_map(|d| d["prefill_vs_python_ort"].as_f64()).collect();
    report.insert("decode_vs_genai".into(), summary("fixture and flavour", decode_vs_genai));
    report.insert("decode_vs_python_ort".into(), summary("fixture and flavour", decode_vs_ort));
    report.insert("prefill_vs_python_ort".into(), summary("fixture, flavour and length", prefill_vs));
    report.insert("gate_vs_lmeval".into(), json!(gate_vs));
    report.insert("overhead_ratio".into(), json!(overhead));

    println!("{}", table.join("\n"));
    if let Some(path) = &o.json {
        let text = serde_json::to_string_pretty(&Value::Object(report)).unwrap();
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
        println!("\nwrote {}", path.display());
    }
    Ok(())
}
