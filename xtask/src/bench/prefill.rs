//! Prefill latency: the suite against Python onnxruntime, per prompt length (the fixtures' RoPE tables end at 256).

use mobius_conformance::run::runtime::Provider;
use serde_json::{Value, json};

use super::loops::{FLAVOURS, package, suite_prefill, synthetic};
use super::options::Options;
use super::python::python;
use super::stats::{Stats, ratio};

pub(super) fn prefill_section(o: &Options, table: &mut Vec<String>) -> Result<Vec<Value>, String> {
    let reps = o.repeats.to_string();
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
    Ok(prefill)
}
