//! `hf://` package references, resolved against a Hugging Face cache laid out by the test.

use hf_hub::Cache;
use mobius_conformance::plan::hub::HubRef;

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

fn cache(tag: &str) -> (std::path::PathBuf, Cache) {
    let dir = std::env::temp_dir().join(format!("mobius-hub-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let repo = dir.join("models--acme--tiny-onnx");
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), SHA).unwrap();
    let pkg = repo.join("snapshots").join(SHA).join("cpu-fp32");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(pkg.join("genai_config.json"), "{}").unwrap();
    (dir.clone(), Cache::new(dir))
}

#[test]
fn parses_references() {
    let r = HubRef::parse("hf://acme/tiny-onnx@v1.2/cpu-fp32/").unwrap().unwrap();
    assert_eq!((r.repo.as_str(), r.revision.as_str(), r.subfolder.as_str()), ("acme/tiny-onnx", "v1.2", "cpu-fp32"));
    let r = HubRef::parse("hf://acme/tiny-onnx").unwrap().unwrap();
    assert_eq!((r.revision.as_str(), r.subfolder.as_str()), ("main", ""));
    assert!(HubRef::parse("fixtures/x").is_none());
    for bad in [
        "hf://acme",
        "hf:///x",
        "hf://acme/x@",
        "hf://acme/x/../../etc",
        "hf://..a/a",
        "hf://acme/x..y",
        "hf://acme/x@v..1",
        "hf://-acme/x",
        "hf://acme/x.",
        "hf://acme/a--b",
    ] {
        assert!(HubRef::parse(bad).unwrap().is_err(), "{bad}");
    }
}

#[test]
fn resolves_branch_and_commit_through_the_cache() {
    let (dir, cache) = cache("resolve");
    let want = dir.join("models--acme--tiny-onnx/snapshots").join(SHA).join("cpu-fp32");
    let by_branch = HubRef::parse("hf://acme/tiny-onnx@main/cpu-fp32").unwrap().unwrap();
    assert_eq!(by_branch.resolve_in(&cache, "genai_config.json").unwrap(), want);
    let by_commit = HubRef::parse(&format!("hf://acme/tiny-onnx@{SHA}/cpu-fp32")).unwrap().unwrap();
    assert_eq!(by_commit.resolve_in(&cache, "genai_config.json").unwrap(), want);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn absent_model_says_what_is_missing_and_how_to_fetch_it() {
    let (dir, cache) = cache("absent");
    let r = HubRef::parse("hf://acme/tiny-onnx@main/cuda-fp16").unwrap().unwrap();
    let e = r.resolve_in(&cache, "genai_config.json").unwrap_err().to_string();
    assert!(e.contains("hf://acme/tiny-onnx@main/cuda-fp16") && e.contains("cuda-fp16/genai_config.json"), "{e}");
    // huggingface_hub 1.x (which the reference venv pins) has `hf`; `huggingface-cli download` fails there.
    assert!(e.contains("`hf download acme/tiny-onnx --revision main --include 'cuda-fp16/*'`"), "{e}");
    let other = HubRef::parse("hf://acme/other").unwrap().unwrap();
    assert!(other.resolve_in(&cache, "genai_config.json").is_err());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_cache_is_found_as_huggingface_hub_finds_it() {
    use mobius_conformance::context::hub_cache as cache_dir;
    use std::path::PathBuf;
    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| vars.iter().find(|v| v.0 == k).map(|v| v.1.to_string())
    }
    let all = [("HF_HUB_CACHE", "/c"), ("HUGGINGFACE_HUB_CACHE", "/old"), ("HF_HOME", "/h"), ("XDG_CACHE_HOME", "/x")];
    assert_eq!(cache_dir(env(&all)), PathBuf::from("/c"));
    assert_eq!(cache_dir(env(&all[1..])), PathBuf::from("/old"));
    assert_eq!(cache_dir(env(&[("HF_HUB_CACHE", ""), ("HF_HOME", "/h")])), PathBuf::from("/h/hub"));
    assert_eq!(cache_dir(env(&all[3..])), PathBuf::from("/x/huggingface/hub"));
    assert!(cache_dir(env(&[])).ends_with(".cache/huggingface/hub"));
}
