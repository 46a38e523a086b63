//! Bad input never crashes the harness: each bad case, package, tokenizer or golden fails its own trial with a
//! message naming the file (and field), and the rest of the run goes on.

mod common;

use std::path::Path;

use common::{Scratch, copy_tree, run_all, write};
use mobius_conformance::outcome::Status;
use mobius_conformance::paths::workspace_root;

/// A suite root with the qwen3-tiny case and goldens, whose cpu-f32 package is a private copy `corrupt` may damage,
/// and whose case text `edit` may change.
fn scratch(tag: &str, corrupt: impl Fn(&Path), edit: impl Fn(String) -> String) -> Scratch {
    let repo = workspace_root();
    let scratch = Scratch::new(&format!("bad-{tag}"));
    let root = scratch.0.clone();
    let pkg = root.join("pkg");
    copy_tree(&repo.join("fixtures/qwen3-tiny/onnx/cpu-f32"), &pkg);
    corrupt(&pkg);
    let text = std::fs::read_to_string(repo.join("cases/causal-lm/qwen3-tiny.yaml"))
        .unwrap()
        .replace("\"fixtures/qwen3-tiny/hf\"", &format!("\"{}\"", repo.join("fixtures/qwen3-tiny/hf").display()))
        .replace("\"fixtures/tokenizer\"", &format!("\"{}\"", repo.join("fixtures/tokenizer").display()))
        .replace("eps: [default, cpu]", "eps: [cpu]")
        .replace("dtypes: [f32, f16, bf16, int4]", "dtypes: [f32]")
        .lines()
        // The distribution level has its own tests (tests/dist.rs): these are about L4 and L5.
        .filter(|l| !l.contains("packages:") && !l.contains("cpu/f16:") && !l.contains("cpu/bf16:") && !l.starts_with("distribution:"))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .replace("\"fixtures/qwen3-tiny/onnx/{ep}-{dtype}\"", "\"pkg\"");
    write(&root.join("cases/causal-lm/qwen3-tiny.yaml"), &edit(text + "external_paths: true\n"));
    copy_tree(&repo.join("goldens/causal-lm"), &root.join("goldens/causal-lm"));
    scratch
}

fn assert_fails_naming(root: &Path, needles: &[&str]) {
    let (genai, all): (Vec<_>, Vec<_>) = run_all(root).into_iter().partition(|(name, _)| name.ends_with("/genai"));
    assert_eq!(all.len(), 2, "both levels planned");
    // onnxruntime-genai meets the same bad package: it fails too, in its own words.
    assert_eq!(genai.len(), 1, "the genai level planned");
    for (name, o) in &genai {
        assert_eq!(o.status, Status::Fail, "{name}: {}", o.message);
        assert!(o.message.starts_with(name.as_str()), "the message names the trial: {}", o.message);
    }
    for (name, o) in all {
        assert_eq!(o.status, Status::Fail, "{name}: {}", o.message);
        assert!(o.message.starts_with(&name), "the message names the trial: {}", o.message);
        for n in needles {
            assert!(o.message.contains(n), "{name}: expected {n:?} in: {}", o.message);
        }
    }
}

#[test]
fn nan_logits() {
    let s = scratch(
        "nan",
        |pkg| {
            let p = pkg.join("model.onnx.data");
            let n = std::fs::metadata(&p).unwrap().len() as usize;
            std::fs::write(&p, f32::NAN.to_le_bytes().repeat(n / 4)).unwrap();
        },
        |t| t,
    );
    assert_fails_naming(&s.0, &["pkg/model.onnx", "non-finite", "NaN"]);
}

#[test]
fn truncated_onnx() {
    let s = scratch(
        "truncated",
        |pkg| {
            let p = pkg.join("model.onnx");
            let b = std::fs::read(&p).unwrap();
            std::fs::write(&p, &b[..b.len() / 2]).unwrap();
        },
        |t| t,
    );
    assert_fails_naming(&s.0, &["pkg/model.onnx", "loading the model"]);
}

#[test]
fn not_onnx_at_all() {
    let s = scratch("notonnx", |pkg| std::fs::write(pkg.join("model.onnx"), "{\"this is\": \"json\"}").unwrap(), |t| t);
    assert_fails_naming(&s.0, &["pkg/model.onnx", "loading the model"]);
}

#[test]
fn missing_external_weights() {
    let s = scratch("nodata", |pkg| std::fs::remove_file(pkg.join("model.onnx.data")).unwrap(), |t| t);
    assert_fails_naming(&s.0, &["pkg/model.onnx"]);
}

#[test]
fn missing_package() {
    let s = scratch("nopkg", |_| {}, |t| t.replace("\"pkg\"", "\"no/such/package\""));
    assert_fails_naming(&s.0, &["cases/causal-lm/qwen3-tiny.yaml", "no/such/package", "does not exist"]);
}

#[test]
fn missing_tokenizer() {
    let s = scratch(
        "notok",
        |_| {},
        |t| {
            t.lines().filter(|l| !l.starts_with("tokenizer:")).map(|l| format!("{l}\n")).collect::<String>()
                + "tokenizer: \"no/tokenizer/here\"\n"
        },
    );
    assert_fails_naming(&s.0, &["cases/causal-lm/qwen3-tiny.yaml", "field `tokenizer`", "no/tokenizer/here", "no such folder"]);
}

#[test]
fn missing_golden_skips_locally_and_fails_under_ci() {
    let s = scratch("nogolden", |_| {}, |t| t);
    std::fs::remove_file(s.0.join("goldens/causal-lm/qwen3-tiny.json")).unwrap();
    let all = run_all(&s.0);
    let (_, l4) = all.iter().find(|(n, _)| n.ends_with("/L4")).unwrap();
    assert_eq!(l4.status, Status::Skip, "{}", l4.message);
    assert!(l4.message.contains("goldens/causal-lm/qwen3-tiny.json") && l4.message.contains("regen-goldens"), "{}", l4.message);
    let name = all.iter().map(|(n, _)| n).find(|n| n.ends_with("/L4")).unwrap();
    let under_ci = common::run_in(&s.0, name, &common::ci());
    assert_eq!(under_ci.status, Status::Fail, "{}", under_ci.message);
    assert!(
        under_ci.message.contains("goldens/causal-lm/qwen3-tiny.json") && under_ci.message.contains("CI is set"),
        "{}",
        under_ci.message
    );
    let (_, l5) = all.iter().find(|(n, _)| n.ends_with("/L5")).unwrap();
    assert_eq!(l5.status, Status::Pass, "the other level still runs: {}", l5.message);
}

#[test]
fn one_bad_case_does_not_stop_the_others() {
    let s = scratch("mixed", |_| {}, |t| t);
    std::fs::write(s.0.join("cases/causal-lm/broken.yaml"), "model_id: [unterminated\n").unwrap();
    std::fs::write(s.0.join("cases/causal-lm/typo.yaml"), "model_id: x\nmodel_typo: y\n").unwrap();
    let all = run_all(&s.0);
    let status = |n: &str| all.iter().find(|(name, _)| name == n).map(|(_, o)| o.status);
    assert_eq!(status("broken/case"), Some(Status::Fail));
    assert_eq!(status("typo/case"), Some(Status::Fail));
    assert_eq!(status("qwen3-tiny/text/cpu/f32/L4"), Some(Status::Pass));
    assert_eq!(status("qwen3-tiny/text/cpu/f32/L5"), Some(Status::Pass));
    let typo = &all.iter().find(|(n, _)| n == "typo/case").unwrap().1.message;
    assert!(typo.contains("cases/causal-lm/typo.yaml") && typo.contains("model_typo"), "{typo}");
}

#[test]
fn corrupt_golden_fails_its_trial() {
    let s = scratch("badgolden", |_| {}, |t| t);
    let p = s.0.join("goldens/causal-lm/qwen3-tiny_generation.json");
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, text.replacen("\"0x1.", "\"0xq.", 1)).unwrap();
    let all = run_all(&s.0);
    let l5 = &all.iter().find(|(n, _)| n.ends_with("/L5")).unwrap().1;
    assert_eq!(l5.status, Status::Fail);
    assert!(l5.message.contains("qwen3-tiny_generation.json") && l5.message.contains("0xq."), "{}", l5.message);
    assert_eq!(all.iter().find(|(n, _)| n.ends_with("/L4")).unwrap().1.status, Status::Pass);
}

/// One model file asked for as a decoder and then as an encoder (a package naming its decoder as another session)
/// gets an error naming the file and both roles, whichever came first; the first role keeps working.
#[test]
fn a_model_file_is_a_decoder_or_an_encoder_not_both() {
    use mobius_conformance::run::runtime::Provider;
    use mobius_conformance::run::sessions;
    let model = workspace_root().join("fixtures/llama-tiny/onnx/cpu-f32/model.onnx");
    sessions::decoder(&model, Provider::Cpu).expect("the decoder loads");
    let e = sessions::encoder(&model, Provider::Cpu).err().expect("the same file as an encoder is refused").to_string();
    assert!(e.contains(&model.display().to_string()) && e.contains("already loaded as a decoder, not an encoder"), "{e}");
    sessions::decoder(&model, Provider::Cpu).expect("still a decoder");
}

/// Rewrites a golden's JSON in place.
fn edit_json(p: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

fn outcome(all: &[(String, mobius_conformance::outcome::Outcome)], suffix: &str) -> mobius_conformance::outcome::Outcome {
    all.iter().find(|(n, _)| n.ends_with(suffix)).unwrap_or_else(|| panic!("no trial *{suffix}")).1.clone()
}

#[test]
fn a_huge_max_new_tokens_is_refused_naming_the_field_and_never_aborts() {
    // In the case: the case does not load, and says which field.
    let s = scratch("huge-case", |_| {}, |t| t.replace("max_new_tokens: 16", "max_new_tokens: 4000000000"));
    for (name, o) in run_all(&s.0) {
        assert_eq!(o.status, Status::Fail, "{name}");
        assert!(o.message.contains("generation.max_new_tokens") && o.message.contains("4000000000"), "{name}: {}", o.message);
    }
    // In the golden: its L5 trial fails naming the file and field.
    let s = scratch("huge-golden", |_| {}, |t| t);
    edit_json(&s.0.join("goldens/causal-lm/qwen3-tiny_generation.json"), |v| v["max_new_tokens"] = 4_000_000_000u64.into());
    let l5 = outcome(&run_all(&s.0), "/L5");
    assert_eq!(l5.status, Status::Fail);
    assert!(l5.message.contains("qwen3-tiny_generation.json") && l5.message.contains("`max_new_tokens`"), "{}", l5.message);
    // And generation itself refuses, instead of reserving the whole stream up front (which aborted the process).
    use mobius_conformance::run::{generate, pipeline::Pipeline, runtime, sessions};
    let model = workspace_root().join("fixtures/qwen3-tiny/onnx/cpu-f32/model.onnx");
    let d = sessions::decoder(&model, runtime::Provider::Cpu).unwrap();
    let e = generate::greedy(&d, &Pipeline::Text, &[2, 40], 4_000_000_000, &[], None, &[]).expect_err("refused").to_string();
    assert!(e.contains("4000000000 new tokens"), "{e}");
}

#[test]
fn non_finite_numbers_in_a_top10_golden_fail_naming_the_field() {
    for (field, index, value) in [("top10_logits", 3, "nan"), ("top10_logits", 0, "inf"), ("logits_summary", 2, "-inf")] {
        let s = scratch(&format!("nan-golden-{field}-{index}"), |_| {}, |t| t);
        // mobius' layout: top-10 only, no full logits, so those numbers are all the L4 check has.
        edit_json(&s.0.join("goldens/causal-lm/qwen3-tiny.json"), |v| {
            let o = v.as_object_mut().unwrap();
            o.remove("last_logits");
            o.remove("input_hash");
            o[field][index] = value.into();
        });
        let l4 = outcome(&run_all(&s.0), "/L4");
        assert_eq!(l4.status, Status::Fail, "{field}[{index}] = {value}: {}", l4.message);
        assert!(l4.message.contains("qwen3-tiny.json") && l4.message.contains(&format!("`{field}[{index}]`")), "{}", l4.message);
    }
}

#[test]
fn a_top10_id_the_package_does_not_have_fails_instead_of_being_skipped() {
    let s = scratch("bad-id", |_| {}, |t| t);
    edit_json(&s.0.join("goldens/causal-lm/qwen3-tiny.json"), |v| {
        let o = v.as_object_mut().unwrap();
        o.remove("last_logits");
        o.remove("vocab_size");
        o["top10_ids"][9] = 999_999.into();
    });
    let l4 = outcome(&run_all(&s.0), "/L4");
    assert_eq!(l4.status, Status::Fail, "{}", l4.message);
    // A golden id past the package's rows is a vocabulary that differs, named before any verdict.
    assert!(
        l4.message.contains("reads ids up to 999999") && l4.message.contains("vocab_size: expected at least 1000000, got 512"),
        "{}",
        l4.message
    );
    assert_eq!(l4.failure.as_ref().map(|f| f.kind.name()), Some("vocab_size"), "{}", l4.message);
}

#[test]
fn an_empty_generation_golden_fails_naming_the_field() {
    let s = scratch("empty-l5", |_| {}, |t| t);
    edit_json(&s.0.join("goldens/causal-lm/qwen3-tiny_generation.json"), |v| {
        v["generated_tokens"] = serde_json::json!([]);
        v["steps"] = serde_json::json!([]);
    });
    let l5 = outcome(&run_all(&s.0), "/L5");
    assert_eq!(l5.status, Status::Fail, "{}", l5.message);
    assert!(l5.message.contains("qwen3-tiny_generation.json") && l5.message.contains("`generated_tokens` is empty"), "{}", l5.message);
}

#[test]
fn an_invalid_genai_config_fails_naming_the_file_and_field() {
    let s = scratch("bad-genai", |pkg| std::fs::write(pkg.join("genai_config.json"), "{ \"model\": ").unwrap(), |t| t);
    assert_fails_naming(&s.0, &["pkg/genai_config.json"]);
    let s = scratch(
        "bad-genai-eos",
        |pkg| {
            let p = pkg.join("genai_config.json");
            edit_json(&p, |v| v["model"]["eos_token_id"] = "one".into());
        },
        |t| t,
    );
    assert_fails_naming(&s.0, &["pkg/genai_config.json", "`model.eos_token_id`"]);
    let s = scratch(
        "bad-genai-share",
        |pkg| edit_json(&pkg.join("genai_config.json"), |v| v["search"]["past_present_share_buffer"] = 1.into()),
        |t| t,
    );
    assert_fails_naming(&s.0, &["pkg/genai_config.json", "`search.past_present_share_buffer`"]);
    for bad in [serde_json::json!(0), serde_json::json!("512"), serde_json::json!(-1), serde_json::json!(5.5)] {
        let s =
            scratch("bad-genai-vocab", |pkg| edit_json(&pkg.join("genai_config.json"), |v| v["model"]["vocab_size"] = bad.clone()), |t| t);
        assert_fails_naming(&s.0, &["pkg/genai_config.json", "`model.vocab_size`", "positive whole number"]);
    }
}

#[test]
fn a_genai_config_filename_leaving_the_package_is_refused() {
    for (tag, filename) in [("dotdot", "../other/model.onnx"), ("abs", "/tmp/model.onnx")] {
        let s = scratch(
            &format!("escape-{tag}"),
            |pkg| edit_json(&pkg.join("genai_config.json"), |v| v["model"]["decoder"]["filename"] = filename.into()),
            |t| t,
        );
        // A working model where the escaping name points: it must not be run in this package's name.
        copy_tree(&workspace_root().join("fixtures/qwen3-tiny/onnx/cpu-f32"), &s.0.join("other"));
        assert_fails_naming(&s.0, &["pkg/genai_config.json", "`model.decoder.filename`", filename]);
    }
}

#[test]
fn a_tolerance_override_loose_enough_to_pass_another_model_is_refused() {
    let s = scratch("loose", |_| {}, |t| t + "tolerance:\n  atol: 100.0\n");
    let l4 = outcome(&run_all(&s.0), "/L4");
    assert_eq!(l4.status, Status::Fail, "{}", l4.message);
    assert!(l4.message.contains("cases/causal-lm/qwen3-tiny.yaml") && l4.message.contains("`tolerance.atol`"), "{}", l4.message);
    for (block, field) in [
        ("cosine_min: 0.0", "cosine_min"),
        ("top10_overlap_min: 0", "top10_overlap_min"),
        ("min_token_match_ratio: 0.1", "min_token_match_ratio"),
    ] {
        let s = scratch(&format!("loose-{field}"), |_| {}, |t| t + &format!("tolerance:\n  {block}\n"));
        let failing: Vec<_> = run_all(&s.0).into_iter().filter(|(_, o)| o.message.contains(&format!("`tolerance.{field}`"))).collect();
        assert!(!failing.is_empty() && failing.iter().all(|(_, o)| o.status == Status::Fail), "{field}: {failing:?}");
    }
    // Loosening within bounds is the case's call, and still passes.
    let s = scratch("loose-ok", |_| {}, |t| t + "tolerance:\n  atol: 5.0e-4\n");
    assert!(run_all(&s.0).iter().all(|(_, o)| o.status == Status::Pass));
}

#[test]
fn a_changed_max_new_tokens_makes_the_generation_golden_stale() {
    let s = scratch("stale-max", |_| {}, |t| t.replace("max_new_tokens: 16", "max_new_tokens: 8"));
    let all = run_all(&s.0);
    let l5 = outcome(&all, "/L5");
    assert_eq!(l5.status, Status::Fail, "{}", l5.message);
    assert!(l5.message.contains("golden is stale") && l5.message.contains("generation.max_new_tokens"), "{}", l5.message);
    assert_eq!(outcome(&all, "/L4").status, Status::Pass, "prefill does not depend on it");
}

#[test]
fn a_prompt_of_no_tokens_is_refused_naming_the_field() {
    // A tokenizer that adds no BOS: the empty prompt is then no ids at all.
    let s = scratch(
        "empty-prompt",
        |_| {},
        |t| {
            t.lines()
                .map(|l| match l.trim_start() {
                    l2 if l2.starts_with("- \"Question:") => "    - \"\"\n".to_string(),
                    l2 if l2.starts_with("tokenizer:") => "tokenizer: \"tok\"\n".to_string(),
                    _ => format!("{l}\n"),
                })
                .collect()
        },
    );
    let mut tok: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(workspace_root().join("fixtures/tokenizer/tokenizer.json")).unwrap()).unwrap();
    tok["post_processor"] = serde_json::Value::Null;
    write(&s.0.join("tok/tokenizer.json"), &tok.to_string());
    let all = run_all(&s.0);
    let judged: Vec<_> = all.iter().filter(|(n, _)| n.ends_with("/L4") || n.ends_with("/L5")).collect();
    assert_eq!(judged.len(), 2);
    for (name, o) in judged {
        assert_eq!(o.status, Status::Fail, "{name}: {}", o.message);
        assert!(o.message.contains("field `inputs.prompts`") && o.message.contains("no ids"), "{name}: {}", o.message);
    }
}
