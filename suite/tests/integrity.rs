//! A package is checked against its builder's manifest before ONNX Runtime reads it: a truncated or replaced file
//! fails its trials naming the file and both sizes (or hashes); the builder's stamp saves the full hash while the
//! file is as it was written.

mod common;

use std::path::Path;

use common::{Scratch, copy_tree, run, write};
use mobius_conformance::feed::integrity::{self, Manifest, Mismatch};
use mobius_conformance::outcome::Status;
use mobius_conformance::paths::workspace_root;

const PKG: &str = "target/real/qwen3-tiny/onnx/cpu-f32";

/// A suite root holding qwen3-tiny's case and goldens, its cpu f32 package copied to `target/real/...` as the real
/// tier's builder lays it out, and a manifest of that package written as the builder writes one.
fn root(tag: &str) -> Scratch {
    let repo = workspace_root();
    let s = Scratch::new(tag);
    let pkg = s.0.join(PKG);
    copy_tree(&repo.join("fixtures/qwen3-tiny/onnx/cpu-f32"), &pkg);
    let mut files = serde_json::Map::new();
    let mut sizes = serde_json::Map::new();
    for e in std::fs::read_dir(&pkg).unwrap() {
        let p = e.unwrap().path();
        let name = format!("qwen3-tiny/onnx/cpu-f32/{}", p.file_name().unwrap().to_str().unwrap());
        files.insert(name.clone(), integrity::sha256_file(&p).unwrap().into());
        sizes.insert(name, std::fs::metadata(&p).unwrap().len().into());
    }
    let manifest = serde_json::json!({ "root": "target/real", "files": files, "sizes": sizes });
    write(&s.0.join("fixtures/real/MANIFEST.json"), &serde_json::to_string_pretty(&manifest).unwrap());
    let text = std::fs::read_to_string(repo.join("cases/causal-lm/qwen3-tiny.yaml")).unwrap();
    let text = text.replace("\"fixtures/", &format!("\"{}/fixtures/", repo.display()));
    let mut lines: Vec<String> = text.lines().filter(|l| !l.trim_start().starts_with("package:")).map(str::to_string).collect();
    let i = lines.iter().position(|l| l.trim_start().starts_with("matrix:")).unwrap();
    lines.insert(i + 1, format!("  package: \"{PKG}\""));
    let case =
        lines.join("\n") + "\nexternal_paths: true\nbuild_command: \"cargo xtask real\"\nmanifest: \"fixtures/real/MANIFEST.json\"\n";
    write(&s.0.join("cases/causal-lm/qwen3-tiny.yaml"), &case);
    for name in ["qwen3-tiny.json", "qwen3-tiny_generation.json"] {
        std::fs::copy(repo.join("goldens/causal-lm").join(name), {
            std::fs::create_dir_all(s.0.join("goldens/causal-lm")).unwrap();
            s.0.join("goldens/causal-lm").join(name)
        })
        .unwrap();
    }
    std::fs::copy(repo.join("cases/tolerances.yaml"), s.0.join("cases/tolerances.yaml")).unwrap();
    s
}

const L4: &str = "qwen3-tiny/text/cpu/f32/L4";

#[test]
fn a_package_as_its_manifest_records_runs() {
    let s = root("integrity-clean");
    let o = run(&s.0, L4);
    assert_eq!(o.status, Status::Pass, "{}", o.message);
}

#[test]
fn a_truncated_file_fails_naming_it_and_both_sizes_before_onnx_runtime() {
    let s = root("integrity-truncated");
    let data = s.0.join(PKG).join("model.onnx.data");
    let full = std::fs::metadata(&data).unwrap().len();
    let bytes = std::fs::read(&data).unwrap();
    std::fs::write(&data, &bytes[..bytes.len() / 2]).unwrap();
    for level in ["L4", "L5"] {
        let o = run(&s.0, &format!("qwen3-tiny/text/cpu/f32/{level}"));
        assert_eq!(o.status, Status::Fail, "{}", o.message);
        let want = format!(
            "does not match fixtures/real/MANIFEST.json: qwen3-tiny/onnx/cpu-f32/model.onnx.data has {} bytes where the \
             manifest records {full} (truncated or replaced); rebuild it with `cargo xtask real`",
            full / 2
        );
        assert!(o.message.contains(&want), "{}", o.message);
        assert!(!o.message.contains("onnxruntime") && !o.message.contains("ONNX Runtime"), "{}", o.message);
    }
}

#[test]
fn a_replaced_file_of_the_same_size_fails_on_its_hash_and_a_missing_one_is_named() {
    let s = root("integrity-replaced");
    let data = s.0.join(PKG).join("model.onnx.data");
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[100] ^= 0x01;
    std::fs::write(&data, &bytes).unwrap();
    let o = run(&s.0, L4);
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains("model.onnx.data has sha256 ") && o.message.contains("where the manifest records"), "{}", o.message);
    assert!(o.message.contains("rebuild it with `cargo xtask real`"), "{}", o.message);

    std::fs::remove_file(s.0.join(PKG).join("genai_config.json")).unwrap();
    let o = run(&s.0, L4);
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains("qwen3-tiny/onnx/cpu-f32/genai_config.json is missing"), "{}", o.message);
}

/// The builder's stamp stands for the hash while size and mtime are its own; a touched file is hashed in full, and a
/// stamp that lies about an untouched file's hash is caught by the manifest.
#[test]
fn the_builders_stamp_saves_the_hash_only_while_the_file_is_as_it_wrote_it() {
    let s = root("integrity-stamp");
    let pkg = s.0.join(PKG);
    let m = Manifest::load(&s.0, "fixtures/real/MANIFEST.json").unwrap();
    let stamp = |sha_of: &dyn Fn(&Path) -> String| {
        let mut files = serde_json::Map::new();
        for e in std::fs::read_dir(&pkg).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            if name == ".stamp.json" {
                continue;
            }
            let meta = std::fs::metadata(&p).unwrap();
            let mtime = meta.modified().unwrap().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
            files.insert(name, serde_json::json!([meta.len(), mtime, sha_of(&p)]));
        }
        write(&pkg.join(".stamp.json"), &serde_json::json!({ "key": "k", "files": files }).to_string());
    };
    let checked = integrity::check(&m, &pkg).unwrap().unwrap();
    assert_eq!((checked.files, checked.hashed), (3, 3), "no stamp: every file hashed");

    // A fresh manifest path per check would still hit this process's memo; a second folder with the same files
    // and a stamp shows the stamp itself doing the work.
    let other = s.0.join("target/real/qwen3-tiny/onnx/cpu-f32-stamped");
    copy_tree(&pkg, &other);
    std::fs::rename(&pkg, s.0.join("moved")).unwrap();
    std::fs::rename(&other, &pkg).unwrap();
    stamp(&|p| integrity::sha256_file(p).unwrap());
    let checked = integrity::check(&m, &pkg).unwrap().unwrap();
    assert_eq!((checked.files, checked.hashed), (3, 0), "a matching stamp: nothing hashed");

    // The stamp claims a wrong hash for untouched files: the manifest disagrees, so the package fails.
    let again = s.0.join("target/real/qwen3-tiny/onnx/cpu-f32-lying");
    copy_tree(&pkg, &again);
    std::fs::remove_dir_all(&pkg).unwrap();
    std::fs::rename(&again, &pkg).unwrap();
    stamp(&|_| "ab".repeat(32));
    let bad = integrity::check(&m, &pkg).unwrap().unwrap_err();
    assert!(matches!(bad.mismatch, Mismatch::Sha256 { from_stamp: true, .. }), "{bad:?}");
    // The builder trusts its stamp too, so the advice is to delete the package before rebuilding it.
    let o = run(&s.0, L4);
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains(".stamp.json with sha256 abab") && o.message.contains(&format!("delete {PKG}")), "{}", o.message);

    // A stamp that is not the builder's (not JSON, or entries of another shape) is no stamp: every file is hashed.
    for (tag, junk) in [("junk", "not json"), ("shape", r#"{"files": {"model.onnx": {"size": 1}}}"#)] {
        let fresh = s.0.join(format!("target/real/qwen3-tiny/onnx/cpu-f32-{tag}"));
        copy_tree(&pkg, &fresh);
        std::fs::remove_dir_all(&pkg).unwrap();
        std::fs::rename(&fresh, &pkg).unwrap();
        write(&pkg.join(".stamp.json"), junk);
        let checked = integrity::check(&m, &pkg).unwrap().unwrap();
        assert_eq!((checked.files, checked.hashed), (3, 3), "{tag}: a foreign stamp stands for nothing");
    }
}

/// A package outside the folder its manifest describes, or one the manifest records nothing of, fails naming both.
#[test]
fn a_package_the_manifest_does_not_describe_is_refused_by_name() {
    let s = root("integrity-elsewhere");
    let m = Manifest::load(&s.0, "fixtures/real/MANIFEST.json").unwrap();
    let e = integrity::check(&m, &s.0.join("fixtures/qwen3-tiny")).unwrap_err().to_string();
    assert!(e.contains("lies outside") && e.contains("fixtures/real/MANIFEST.json"), "{e}");
    let e = integrity::check(&m, &s.0.join("target/real/qwen3-tiny/onnx/cpu-int4")).unwrap_err().to_string();
    assert!(e.contains("records no file under `qwen3-tiny/onnx/cpu-int4/`"), "{e}");
}

/// An empty `manifest:` is a case error naming the field, not a check skipped.
#[test]
fn an_empty_manifest_field_is_refused_naming_it() {
    let s = root("integrity-empty");
    let case = s.0.join("cases/causal-lm/qwen3-tiny.yaml");
    let text = std::fs::read_to_string(&case).unwrap().replace("manifest: \"fixtures/real/MANIFEST.json\"", "manifest: \"\"");
    std::fs::write(&case, text).unwrap();
    let o = run(&s.0, L4);
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains("field `manifest` is empty"), "{}", o.message);
}
