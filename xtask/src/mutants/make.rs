//! Making a mutant: its case laid out in a scratch root as the suite reads it, with the mutated package part patched
//! in place of the copy.

use std::path::{Path, PathBuf};

use mobius_conformance::feed::package::GenaiConfig;
use mobius_conformance::plan::case::{Case, Location, Variant};
use mobius_conformance::plan::suite::Suite;
use onnx_bytes::Model;
use serde_json::Value;

use super::catalogue::{Mutant, Part};
use crate::scratch;

/// [`scratch::lay_out`], each case file without its `manifest:` field: a mutant differs from the builder's record on
/// purpose, and the trials must judge it rather than refuse it at the integrity check.
pub(super) fn lay_out(repo: &Suite, root: &Path, cases: &[&Case], keep: impl Fn(&Case, &Variant) -> bool) -> Result<(), String> {
    scratch::lay_out(repo, root, cases, keep)?;
    for case in cases.iter().filter(|c| c.spec.manifest.is_some()) {
        unchecked(&root.join(&case.file))?;
    }
    Ok(())
}

/// The scratch copy of a case file without its `manifest:` field, written as a new file (never through a link).
fn unchecked(case_file: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(case_file).map_err(|e| format!("{}: {e}", case_file.display()))?;
    let kept: String = text.lines().filter(|l| !l.starts_with("manifest:")).map(|l| format!("{l}\n")).collect();
    let _ = std::fs::remove_file(case_file);
    std::fs::write(case_file, kept).map_err(|e| format!("{}: {e}", case_file.display()))
}

/// The model file of a package that `part` names.
fn part_file(package: &Path, part: Part) -> Result<PathBuf, String> {
    let component = |c: Option<mobius_conformance::feed::package::Component>, what: &str| {
        c.map(|c| package.join(c.file)).ok_or_else(|| format!("{}/genai_config.json names no {what} model", package.display()))
    };
    match part {
        Part::Decoder => mobius_conformance::feed::package::package_model(package).map_err(|e| e.to_string()),
        Part::Vision => component(GenaiConfig::load(package).map_err(|e| e.to_string())?.vision, "vision"),
        Part::Speech => component(GenaiConfig::load(package).map_err(|e| e.to_string())?.speech, "speech"),
        Part::Encoder => {
            let cfg = GenaiConfig::load(package).map_err(|e| e.to_string())?;
            Ok(package.join(mobius_conformance::run::encoders::encoder_component(&cfg).file))
        }
    }
}

/// What a mutant changed, and where.
pub(super) struct Patched {
    pub(super) file: String,
    pub(super) what: String,
    pub(super) bytes_changed: usize,
}

/// Lays out `root` for the mutant and writes its patched model there, in place of the copy.
pub(super) fn make(repo: &Suite, root: &Path, case: &Case, m: &Mutant) -> Result<Patched, String> {
    let variant = case
        .variants(&repo.root)
        .into_iter()
        .find(|v| v.ep == m.ep && v.dtype == m.dtype)
        .ok_or_else(|| format!("{}: lists no {}/{} variant", case.file, m.ep, m.dtype))?;
    let Some(Location::Local(package)) = variant.package else {
        return Err(format!("{}: the {}/{} package is not a local path", case.file, m.ep, m.dtype));
    };
    let file = part_file(&package, m.part)?;
    let rel = file.strip_prefix(&repo.root).map_err(|_| format!("{}: outside the repository", file.display()))?.to_path_buf();
    let mut model = Model::read(&file)?;
    let before = (model.bytes.clone(), model.data.clone());
    let what = (m.patch)(&mut model, &read_json(&package.join("genai_config.json"))?)?;
    let mut bytes_changed = 0;
    for (old, new) in std::iter::once((&before.0, &model.bytes)).chain(before.1.iter().filter_map(|(k, v)| Some((v, model.data.get(k)?)))) {
        if old.len() != new.len() {
            return Err(format!("{}: the patch changed a file's length ({} -> {})", file.display(), old.len(), new.len()));
        }
        bytes_changed += old.iter().zip(new).filter(|(a, b)| a != b).count();
    }
    if bytes_changed == 0 {
        return Err(format!("{}: the patch changed nothing ({what})", file.display()));
    }
    lay_out(repo, root, &[case], |c, v| c.name == case.name && v.ep == m.ep && v.dtype == m.dtype)?;
    let dir = root.join(&rel);
    let dir = dir.parent().unwrap_or(root);
    // A linked copy (the real tier) must not be written through: the link would carry the patch into the cache.
    for name in
        std::iter::once(file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()).chain(model.data.keys().cloned())
    {
        let p = dir.join(&name);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
            std::fs::remove_file(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    model.write(dir)?;
    Ok(Patched { file: rel.to_string_lossy().replace('\\', "/"), what, bytes_changed })
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutants::catalogue::MUTANTS;
    use mobius_conformance::paths::workspace_root;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    #[test]
    fn every_mutant_is_a_same_length_patch_of_the_committed_fixtures() {
        let repo = Suite::open(&workspace_root());
        let cases: BTreeMap<String, Arc<Case>> = repo.load_cases().into_iter().flatten().map(|c| (c.name.clone(), c)).collect();
        for m in MUTANTS.iter().filter(|m| !m.real) {
            let root = std::env::temp_dir().join(format!("mobius-mutants-unit-{}-{}", m.name, std::process::id()));
            let p = make(&repo, &root, &cases[m.case], m).unwrap_or_else(|e| panic!("{}: {e}", m.name));
            assert!(p.bytes_changed > 0, "{}", m.name);
            let _ = std::fs::remove_dir_all(root);
        }
    }
}
