//! Decode throughput of the text fixtures: the suite's loop against onnxruntime-genai and a plain Python onnxruntime
//! loop, in pairs.

use mobius_conformance::run::runtime::Provider;
use serde_json::{Value, json};

use super::loops::{DecodeLoop, FLAVOURS, MODELS, package, prompt_ids};
use super::options::Options;
use super::python::{ENGINES, Served, settle};
use super::stats::{Stats, finite_stats, ratio};

/// Decode throughput of every text fixture and flavour. The suite's loop and the Python engines run in turns,
/// one run each per pair (the order alternating), and every ratio is taken within a pair, so this machine's drifts
/// in speed (up to 2x over seconds here) fall on both sides of it. Figures are medians over pairs, with min and max.
pub(super) fn decode_section(o: &Options, table: &mut Vec<String>) -> Result<Vec<Value>, String> {
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
            decode.push(decode_one(o, &prompt, &prompt_arg, (m, f), table, &mut notes)?);
        }
    }
    table.append(&mut notes);
    Ok(decode)
}

/// One fixture and flavour: its table row, its notes, and its report entry.
fn decode_one(
    o: &Options,
    prompt: &[i64],
    prompt_arg: &str,
    (m, f): (&str, &str),
    table: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Result<Value, String> {
    let pkg = package(m, f);
    let suite = DecodeLoop::new(&pkg, prompt, o.tokens, Provider::Cpu)?;
    let mut py = if o.skip_python { None } else { Some(Served::start(&pkg, prompt_arg, o.tokens)?) };
    // onnxruntime-genai through the suite's own binding (the genai level's), loaded once and kept warm.
    let genai_rs = mobius_conformance::run::genai::Model::load(&pkg, Provider::Cpu).map_err(|e| e.to_string())?;
    let (rows, genai_rs_ids) = decode_pairs(o, prompt, &suite, py.as_mut(), &genai_rs)?;
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
    let masked =
        ready["eos_masked_steps"]["ort"].as_array().and_then(|a| a.first()).and_then(Value::as_u64).map_or(suite.ids.len(), |s| s as usize);
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
    Ok(json!({
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
    }))
}

/// `o.pairs` pairs of runs: per pair (one row), the suite's tokens per second, inside ORT, each Python engine's, and
/// genai's through the suite's binding; with the tokens the binding chose on its last run.
fn decode_pairs(
    o: &Options,
    prompt: &[i64],
    suite: &DecodeLoop,
    mut py: Option<&mut Served>,
    genai_rs: &mobius_conformance::run::genai::Model,
) -> Result<(Vec<[f64; 6]>, Vec<i64>), String> {
    let mut genai_rs_ids = Vec::new();
    // One row per pair: suite, suite inside ORT, then each Python engine, then genai through the binding.
    let mut rows: Vec<[f64; 6]> = Vec::new();
    for pair in 0..o.pairs {
        let mut row = [f64::NAN; 6];
        settle();
        let t0 = std::time::Instant::now();
        let run = genai_rs.greedy(prompt, o.tokens).map_err(|e| e.to_string())?;
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
        if let Some(py) = py.as_deref_mut() {
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
    Ok((rows, genai_rs_ids))
}
