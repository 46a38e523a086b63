//! The reference stops its streams at the EOS ids the suite's runner uses (suite/src/trial.rs `eos_ids`): the case's
//! `generation.eos_token_id`, else the package's genai_config.json's, else none. goldens.py and loglik.py (the
//! accuracy gate's `generate_until` baselines) share that one rule (`reference.common.eos_ids`); loglik.py once
//! ignored the case's.
//!
//! It runs the reference on arith-tiny, so it needs the reference venv: without it the test says it did not run,
//! except under `CI`, where that is a failure.

#![cfg(unix)]

use std::path::Path;
use std::process::Command;

mod common;

use mobius_conformance::paths::workspace_root as workspace;

fn python(python: &Path, args: &[&str]) -> std::process::Output {
    Command::new(python).args(args).env("PYTHONPATH", workspace().join("xtask")).current_dir(workspace()).output().unwrap()
}

#[test]
fn the_eos_rule_prefers_the_case_then_the_package_and_names_a_bad_field() {
    let Some(py) = common::venv_python("the reference runs torch") else { return };
    let dir = std::env::temp_dir().join(format!("mobius-eos-rule-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("genai_config.json");
    std::fs::write(&cfg, r#"{"model": {"eos_token_id": [1, 106]}}"#).unwrap();
    let bad = dir.join("bad_genai_config.json");
    std::fs::write(&bad, r#"{"model": {"eos_token_id": "x"}}"#).unwrap();
    let script = format!(
        "from reference.common import eos_ids, ReferenceError\n\
         assert eos_ids(7, {cfg:?}) == [7]\n\
         assert eos_ids([7, 8], None) == [7, 8]\n\
         assert eos_ids(None, {cfg:?}) == [1, 106]\n\
         assert eos_ids(None, None) == []\n\
         try:\n    eos_ids(None, {bad:?})\nexcept ReferenceError as e:\n    print(e)\n",
        cfg = cfg.to_str().unwrap(),
        bad = bad.to_str().unwrap()
    );
    let o = python(&py, &["-c", &script]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("bad_genai_config.json: field `model.eos_token_id`"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// loglik.py's greedy generations (`generated`, `generated_len`) for one prompt of arith-tiny, stopping as `eos`
/// and `genai_config` say.
fn generate(py: &Path, dir: &Path, tag: &str, eos: serde_json::Value, genai_config: Option<&Path>) -> Vec<i64> {
    let out = dir.join(format!("{tag}.safetensors"));
    let job = serde_json::json!({"jobs": [{
        "reference": workspace().join("fixtures/arith-tiny/hf"),
        "out": out,
        "requests": [],
        // "<bos>12+34=": the model answers " 46<eos>".
        "generate": [{"ids": [2, 5, 6, 14, 7, 8, 15], "max_new_tokens": 6}],
        "eos_token_id": eos,
        "genai_config": genai_config,
    }]});
    let spec = dir.join(format!("{tag}.json"));
    std::fs::write(&spec, job.to_string()).unwrap();
    let o = python(py, &["-m", "reference.loglik", spec.to_str().unwrap()]);
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let bytes = std::fs::read(&out).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let i64s = |name: &str| -> Vec<i64> {
        st.tensor(name).unwrap().data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
    };
    let n = i64s("generated_len")[0] as usize;
    i64s("generated")[..n].to_vec()
}

#[test]
fn loglik_generations_stop_at_the_cases_eos_else_the_packages_else_run_to_the_budget() {
    let Some(py) = common::venv_python("the reference runs torch") else { return };
    if !workspace().join("fixtures/arith-tiny/hf/model.safetensors").is_file() {
        let o = python(&py, &["-m", "reference.arith", "--out", "fixtures", "--derive-only"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let dir = std::env::temp_dir().join(format!("mobius-eos-loglik-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let package = workspace().join("fixtures/arith-tiny/onnx/default-f32/genai_config.json");
    // The package's EOS (id 1): the answer, then EOS.
    let by_package = generate(&py, &dir, "package", serde_json::Value::Null, Some(&package));
    assert_eq!(by_package.last(), Some(&1), "{by_package:?}");
    assert!(by_package.len() >= 2 && by_package.len() < 6, "{by_package:?}");
    // The case's EOS wins: the answer's first token, and the stream stops there.
    let first = by_package[0];
    let by_case = generate(&py, &dir, "case", serde_json::json!(first), Some(&package));
    assert_eq!(by_case, vec![first], "the case's eos_token_id {first} was not honoured");
    // Neither: no EOS at all, the whole budget.
    let none = generate(&py, &dir, "none", serde_json::Value::Null, None);
    assert_eq!(none.len(), 6, "{none:?}");
    assert_eq!(none[..by_package.len()], by_package[..], "{none:?} vs {by_package:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
