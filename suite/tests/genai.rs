//! The `genai` level: the package as onnxruntime-genai 0.18.0 runs it, against the goldens; a package genai refuses
//! fails with genai's own message.

mod common;

use common::{Scratch, copy_tree, run, write};
use mobius_conformance::outcome::Status;
use mobius_conformance::paths::workspace_root;

const CASE: &str = "qwen3-tiny";

/// A suite root with the repository's qwen3-tiny case and goldens; its cpu/f32 variant is a copy of the fixture
/// package whose genai_config.json `edit` rewrites.
fn scratch(tag: &str, edit: impl Fn(String) -> String) -> Scratch {
    let repo = workspace_root();
    let scratch = Scratch::new(&format!("genai-{tag}"));
    let root = scratch.0.clone();
    let package = root.join("pkg/cpu-f32");
    copy_tree(&repo.join("fixtures/qwen3-tiny/onnx/cpu-f32"), &package);
    let config = package.join("genai_config.json");
    write(&config, &edit(std::fs::read_to_string(&config).unwrap()));
    let text = std::fs::read_to_string(repo.join(format!("cases/causal-lm/{CASE}.yaml"))).unwrap();
    let text = text.replace("\"fixtures/qwen3-tiny/onnx/{ep}-{dtype}\"", "\"pkg/{ep}-{dtype}\"");
    let text = text.replace("\"fixtures/", &format!("\"{}/fixtures/", repo.display())) + "external_paths: true\n";
    write(&root.join(format!("cases/causal-lm/{CASE}.yaml")), &text);
    for suffix in [".json", "_generation.json"] {
        let name = format!("{CASE}{suffix}");
        write(&root.join("goldens/causal-lm").join(&name), &std::fs::read_to_string(repo.join("goldens/causal-lm").join(&name)).unwrap());
    }
    std::fs::copy(repo.join("cases/tolerances.yaml"), root.join("cases/tolerances.yaml")).unwrap();
    scratch
}

#[test]
fn the_clean_package_passes_in_genai_on_logits_and_tokens() {
    let s = scratch("clean", |t| t);
    let o = run(&s.0, &format!("{CASE}/text/cpu/f32/genai"));
    assert_eq!(o.status, Status::Pass, "{}", o.message);
    for needle in ["onnxruntime-genai 0.18.0", "L4 PASS", "L5 PASS", "max |diff|"] {
        assert!(o.message.contains(needle), "{needle}: {}", o.message);
    }
}

#[test]
fn a_bad_genai_config_fails_the_genai_level_with_genais_message() {
    // A model type genai does not know: genai refuses the package when it loads it.
    let s = scratch("bad-type", |t| t.replacen("\"type\": \"qwen2\"", "\"type\": \"qwen9\"", 1));
    let o = run(&s.0, &format!("{CASE}/text/cpu/f32/genai"));
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    // A verdict of this level (genai refused the package), with genai's own words kept for an xfail to expect.
    let f = o.failure.as_deref().expect("a refusal is a verdict's failure");
    assert_eq!(f.kind, mobius_conformance::outcome::FailureKind::Refused);
    assert!(f.refusal.as_deref().is_some_and(|m| m.contains("Unsupported model_type in config.json: qwen9")), "{f:?}");
    for needle in ["onnxruntime-genai 0.18.0 (loading the model)", "qwen9", "onnxruntime-genai refused the package pkg/cpu-f32"] {
        assert!(o.message.contains(needle), "{needle}: {}", o.message);
    }
    // The suite's own runner reads the graph directly: the same package still passes L4, which is why the level exists.
    assert_eq!(run(&s.0, &format!("{CASE}/text/cpu/f32/L4")).status, Status::Pass);

    // A config that is not JSON at all.
    let s = scratch("bad-json", |t| t.replacen('{', "{,", 1));
    let o = run(&s.0, &format!("{CASE}/text/cpu/f32/genai"));
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains("onnxruntime-genai 0.18.0 (reading genai_config.json)"), "{}", o.message);
}

#[test]
fn a_context_length_shorter_than_the_prompt_fails_in_genai() {
    let s = scratch("short-context", |t| {
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        let mut v = v;
        v["model"]["context_length"] = serde_json::json!(8);
        serde_json::to_string_pretty(&v).unwrap()
    });
    let o = run(&s.0, &format!("{CASE}/text/cpu/f32/genai"));
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains("onnxruntime-genai 0.18.0 (creating the generator)"), "{}", o.message);
    assert!(o.message.contains("cannot be greater than model context_length (8)"), "{}", o.message);
}
