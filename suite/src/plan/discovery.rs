//! Finding the case files under `cases/`, so that none is missed without a word: every `.yaml`/`.yml` file in any
//! spelling of the extension, in any folder (a case under `cases/tasks/` too), and every folder that cannot be read
//! or leaves the suite root named as a broken entry. A case that does not load still plans the trials it would
//! have had, each failing, so a name filter aimed at them finds the failure.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::Error;
use crate::vocab::{Dtype, Ep, Level, Modality, TrialId};

/// Folders deeper than this under `cases/` are not walked (a symlink loop is caught before it gets there).
const MAX_DEPTH: usize = 32;

/// One entry under `cases/`: a YAML file to load, or a place that could not be walked (with why).
#[derive(Debug, Clone)]
pub enum Found {
    File(PathBuf),
    Unreadable(PathBuf, Error),
}

/// Every YAML file under `cases_dir`, sorted, with the folders that could not be read. Symlinks are followed only
/// inside `root`; task files (`cases/tasks/`) and the tolerance table are left out, but a file under `cases/tasks/`
/// with a `model_id` is a case and is kept.
pub fn case_files(root: &Path, cases_dir: &Path) -> Vec<Found> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    walk(root, cases_dir, 0, &mut seen, &mut out);
    out.retain(|f| match f {
        Found::File(p) => is_case_file(cases_dir, p),
        Found::Unreadable(..) => true,
    });
    out.sort_by(|a, b| path_of(a).cmp(path_of(b)));
    out
}

fn path_of(f: &Found) -> &Path {
    match f {
        Found::File(p) | Found::Unreadable(p, _) => p,
    }
}

pub fn is_yaml(p: &Path) -> bool {
    p.extension().and_then(|e| e.to_str()).is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
}

fn is_case_file(cases_dir: &Path, p: &Path) -> bool {
    if p.parent() == Some(cases_dir) && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n == "tolerances.yaml") {
        return false;
    }
    if p.starts_with(cases_dir.join("tasks")) {
        // Task files live here; a case placed here by mistake is still a case.
        return std::fs::read_to_string(p).ok().and_then(|t| top_level(&t)).is_some_and(|v| v.get("model_id").is_some());
    }
    true
}

fn walk(root: &Path, dir: &Path, depth: usize, seen: &mut HashSet<PathBuf>, out: &mut Vec<Found>) {
    let real = match std::fs::canonicalize(dir) {
        Ok(r) => r,
        Err(e) => {
            if depth > 0 || dir.exists() {
                out.push(Found::Unreadable(dir.to_path_buf(), Error::new(e.to_string())));
            }
            return;
        }
    };
    if !seen.insert(real.clone()) {
        return; // A folder reached twice (a symlink loop, or two links to one place) is walked once.
    }
    if depth > MAX_DEPTH {
        out.push(Found::Unreadable(dir.to_path_buf(), Error::new(format!("more than {MAX_DEPTH} folders deep"))));
        return;
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => {
            out.push(Found::Unreadable(dir.to_path_buf(), Error::new(e.to_string())));
            return;
        }
    };
    let mut paths = Vec::new();
    for e in entries {
        match e {
            Ok(e) => paths.push(e.path()),
            Err(e) => out.push(Found::Unreadable(dir.to_path_buf(), Error::new(e.to_string()))),
        }
    }
    // Real entries before symlinks, each sorted: a folder reached both ways is walked by its own path, the same on
    // every run.
    let is_link = |p: &Path| p.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink());
    paths.sort_by_key(|p| (is_link(p), p.clone()));
    for p in paths {
        let is_link = is_link(&p);
        if is_link && (is_yaml(&p) || p.is_dir()) && !crate::paths::is_within(root, &p) {
            let what = if p.is_dir() { "folder" } else { "case file" };
            out.push(Found::Unreadable(
                p.clone(),
                Error::new(format!("this {what} is a symlink to a place outside the suite root; {}", crate::paths::SUITE_HINT)),
            ));
            continue;
        }
        if p.is_dir() {
            walk(root, &p, depth + 1, seen, out);
        } else if is_yaml(&p) && !p.is_file() {
            // A FIFO or device named like a case would block the read forever.
            out.push(Found::Unreadable(p, Error::new("not a regular file (a FIFO, socket or device?)")));
        } else if is_yaml(&p) {
            out.push(Found::File(p));
        }
    }
}

/// A YAML file's top level as JSON values, when it parses to a mapping (for guessing what a broken case held).
pub fn top_level(text: &str) -> Option<serde_json::Map<String, Value>> {
    let opts = serde_saphyr::options! { with_snippet: false };
    match serde_saphyr::from_str_with_options::<Value>(text, opts).ok()? {
        Value::Object(m) => Some(m),
        _ => None,
    }
}

/// The trials a case that does not load would have had, as far as its text says: its eps, dtypes, levels,
/// modalities and accuracy tasks where they can be read, every value where they cannot. Each becomes a failing
/// trial, so a filter aimed at the case's real trials still finds the failure.
pub fn expected_trials(name: &str, text: Option<&str>) -> Vec<TrialId> {
    let top = text.and_then(top_level).unwrap_or_default();
    let strings = |v: Option<&Value>| -> Option<Vec<String>> {
        match v? {
            Value::Array(a) => Some(a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()),
            Value::String(s) => Some(vec![s.clone()]),
            _ => None,
        }
    };
    fn parsed<T>(names: Option<Vec<String>>, parse: impl Fn(&str) -> Option<T>, all: &[T]) -> Vec<T>
    where
        T: Copy + Ord,
    {
        let got: BTreeSet<T> = names.unwrap_or_default().iter().filter_map(|s| parse(s)).collect();
        if got.is_empty() { all.to_vec() } else { got.into_iter().collect() }
    }
    let matrix = top.get("matrix");
    let eps = parsed(strings(matrix.and_then(|m| m.get("eps"))), Ep::parse, &[Ep::Default, Ep::Cpu, Ep::Cuda]);
    let mut dtypes =
        parsed(strings(matrix.and_then(|m| m.get("dtypes"))), Dtype::parse, &[Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::Int4]);
    if matrix.is_none()
        && let Some(d) = top.get("dtype").and_then(Value::as_str).and_then(Dtype::parse)
    {
        dtypes = vec![d];
    }
    let levels_text = top.get("level").and_then(Value::as_str).map(|s| s.split('+').map(|p| p.trim().to_string()).collect());
    let mut levels = parsed(levels_text, |s| Level::parse(s).filter(|l| matches!(l, Level::L4 | Level::L5)), &[Level::L4, Level::L5]);
    if top.get("distribution").is_some_and(|d| !d.is_null()) {
        levels.push(Level::Dist);
    }
    let speech = top.get("task_type").and_then(Value::as_str) == Some("speech-to-text");
    let inputs = top.get("inputs");
    let has = |k: &str| inputs.and_then(|i| i.get(k)).and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    let inferred = match (has("images"), has("audio")) {
        (true, true) => Some(Modality::ImageAudio),
        (true, false) => Some(Modality::Image),
        (false, true) => Some(Modality::Audio),
        (false, false) => None,
    };
    let all_modalities = [Modality::Text, Modality::Image, Modality::Audio, Modality::ImageAudio];
    let modalities = match strings(top.get("modalities")) {
        Some(m) => parsed(Some(m), Modality::parse, &all_modalities),
        None if text.is_some_and(|t| top_level(t).is_some()) => vec![inferred.unwrap_or(Modality::Text)],
        None => all_modalities.to_vec(),
    };
    let mut out = BTreeMap::new();
    let case = name.to_string();
    for &modality in &modalities {
        for &ep in &eps {
            for &dtype in &dtypes {
                for level in Level::for_modality(&levels, modality, speech) {
                    let id = TrialId::Conformance { case: case.clone(), modality, ep, dtype, level };
                    out.insert(id.to_string(), id);
                }
            }
        }
    }
    // An accuracy entry is a task file's path, or a map naming it in `task`.
    let tasks: Vec<String> = match top.get("accuracy") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_string).or_else(|| x.get("task").and_then(Value::as_str).map(str::to_string)))
            .collect(),
        other => strings(other).unwrap_or_default(),
    };
    for task in tasks {
        let task = crate::accuracy::resolve::task_name(&task);
        for &ep in &eps {
            for &dtype in &dtypes {
                let id = TrialId::Accuracy { task: task.clone(), case: case.clone(), ep, dtype, level: Level::Accuracy };
                out.insert(id.to_string(), id);
            }
        }
    }
    out.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_case_plans_what_its_text_says_or_everything() {
        let text = "model_id: x\nlevel: L4\nmatrix:\n  eps: [cpu]\n  dtypes: [f32, int4]\nbogus: 1\naccuracy: [cases/tasks/t.yaml]\n";
        let names = |ids: Vec<TrialId>| ids.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(
            names(expected_trials("x", Some(text))),
            [
                "t/x/cpu/f32/accuracy",
                "t/x/cpu/int4/accuracy",
                "x/text/cpu/f32/L4",
                "x/text/cpu/f32/genai",
                "x/text/cpu/int4/L4",
                "x/text/cpu/int4/genai"
            ]
        );
        let all = names(expected_trials("x", Some("model_id: [unclosed")));
        assert_eq!(all.len(), 3 * 4 * (3 + 4 + 4 + 5), "every ep, dtype, modality and level (genai included): {all:?}");
        assert!(all.contains(&"x/image+audio/cuda/bf16/audio_encoder".to_string()));
        // An accuracy entry that is a map names its task in `task`: a broken case still plans that trial.
        let text =
            "model_id: x\nlevel: L4\nmatrix: {eps: [cpu], dtypes: [f32]}\naccuracy: [{task: cases/tasks/k.yaml, limit: 3}]\nbogus: 1\n";
        assert!(names(expected_trials("x", Some(text))).contains(&"k/x/cpu/f32/accuracy".to_string()));
    }
}
