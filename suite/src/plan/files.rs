//! Every file under a suite root that one case reads, derived from the case's fields and the suite's own path
//! functions, never from file names: what a scratch copy of the suite must hold to run the case's trials as the suite
//! itself runs them (`cargo xtask mutants` lays its roots out from it, `cargo xtask bench` its scaling copies).

use std::path::{Component, Path, PathBuf};

use crate::accuracy::resolve::{TaskKind, task_name};
use crate::accuracy::task::spec::TaskSpec;
use crate::accuracy::{include, lmeval, lmms, media_gate};
use crate::plan::case::{AccuracyTask, Case, Location, Variant};
use crate::plan::suite::Suite;
use crate::vocab::{Dtype, Level, TrialId};

/// One case's files, by why it reads them. Every path is the suite root joined with a path the case states or the
/// suite derives; one outside the root (`external_paths`, a Hugging Face hub reference) is left out, since a copy of
/// the root cannot hold it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CaseFiles {
    pub case_file: PathBuf,
    /// The files named for the case: its goldens of every kind (prefill with its logits sidecar, generation,
    /// processed inputs, encoder features, per modality and per dtype with goldens of its own), its distribution
    /// golden, its accuracy baselines with their stored media inputs, and its reviewed snapshots. Listed whether made
    /// yet or not, in an order that follows the case's fields alone: the same case under another name, or in another
    /// root, lists its own files at the same places.
    pub own: Vec<PathBuf>,
    /// Each variant and the files of its package (none for a package on the Hub or outside the root).
    pub packages: Vec<(Variant, Vec<PathBuf>)>,
    /// What the case reads and may share with other cases, every file that is there: its tokenizer and reference
    /// folders, its media inputs, its accuracy tasks with their `include:` chains, data and documents, its
    /// distribution corpus with a speech corpus's clips, and the packages' manifest.
    pub shared: Vec<PathBuf>,
}

impl CaseFiles {
    /// Every listed file that is there.
    pub fn existing(&self) -> Vec<&Path> {
        let packages = self.packages.iter().flat_map(|(_, files)| files);
        std::iter::once(&self.case_file)
            .chain(&self.own)
            .chain(packages)
            .chain(&self.shared)
            .map(PathBuf::as_path)
            .filter(|p| p.is_file())
            .collect()
    }
}

impl Suite {
    /// The files under this root that `case`'s trials read (see [`CaseFiles`]).
    pub fn files_of(&self, case: &Case) -> CaseFiles {
        let packages = case
            .variants(&self.root)
            .into_iter()
            .map(|v| {
                let files = match &v.package {
                    Some(Location::Local(p)) => self.files_below(p),
                    _ => Vec::new(),
                };
                (v, files)
            })
            .collect();
        CaseFiles { case_file: self.root.join(&case.file), own: self.own_files(case), packages, shared: self.shared_files(case) }
    }

    fn own_files(&self, case: &Case) -> Vec<PathBuf> {
        let variants = case.variants(&self.root);
        let mut dtypes: Vec<Dtype> = variants.iter().map(|v| v.dtype).chain([case.spec.dtype]).collect();
        dtypes.sort();
        dtypes.dedup();
        let mut own = Vec::new();
        for modality in case.modalities() {
            for &dtype in &dtypes {
                let g = self.golden_paths(case, modality, dtype);
                own.extend([g.sidecar(), g.prefill, g.generation, g.inputs, g.features, g.modules]);
                own.extend(g.shared_inputs);
            }
        }
        if case.spec.distribution.is_some() {
            own.push(self.dist_golden_path(case));
        }
        for entry in &case.spec.accuracy {
            let baseline = self.baseline_path(&task_name(entry.file()), &case.name);
            own.push(media_gate::inputs_path(&baseline));
            own.push(baseline);
        }
        let snapshots = self.snapshots_dir(&case.task_dir);
        for modality in case.modalities() {
            for v in &variants {
                // Whichever level a trial is of: a snapshot's name is its trial's, and only a stream keeps one.
                for &level in Level::ALL {
                    let id = TrialId::Conformance { case: case.name.clone(), modality, ep: v.ep, dtype: v.dtype, level };
                    // The name `report::snapshot::path` gives a snapshot.
                    own.extend(id.snapshot_stem(&case.name).map(|stem| snapshots.join(format!("{stem}.snap"))));
                }
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        own.retain(|p| seen.insert(p.clone()));
        own.into_iter().filter(|p| self.holds(p)).collect()
    }

    fn shared_files(&self, case: &Case) -> Vec<PathBuf> {
        let (root, spec) = (&self.root, &case.spec);
        let local = |p: &String| match Location::parse(root, p) {
            Ok(Location::Local(p)) => Some(p),
            _ => None,
        };
        let named = [&spec.reference, &spec.tokenizer].into_iter().flatten().chain(&spec.inputs.images).chain(&spec.inputs.audio);
        let mut read: Vec<PathBuf> = named.filter_map(local).collect();
        read.extend(spec.manifest.iter().map(|m| root.join(m)));
        for entry in &spec.accuracy {
            read.extend(self.task_files(case, entry));
        }
        if let Some(d) = &spec.distribution {
            let corpus = root.join(d.corpus());
            if case.is_speech_to_text() {
                let text = std::fs::read_to_string(&corpus).unwrap_or_default();
                let utterances = crate::level::dist::corpus::speech_corpus(d.corpus(), &text).unwrap_or_default();
                read.extend(utterances.into_iter().map(|u| root.join(u.audio)));
            }
            read.push(corpus);
        }
        let mut files: Vec<PathBuf> = read.iter().flat_map(|p| self.files_below(p)).collect();
        files.sort();
        files.dedup();
        files
    }

    /// An accuracy task's files: the task file with its `include:` chain, the case's data folder for it, and the
    /// documents the file names (the suite's own dialect: `test` and `fewshot`; lm-eval's: `dataset_kwargs.data_files`).
    /// A dataset in the Hugging Face hub cache is outside the root.
    fn task_files(&self, case: &Case, entry: &AccuracyTask) -> Vec<PathBuf> {
        let (root, file) = (&self.root, entry.file());
        let path = root.join(file);
        let source = entry.source(root, case.spec.external_paths);
        // The task file and its `include:` chain, each read as the task's loader reads it.
        let mut out = match TaskKind::of(root, file, &source) {
            TaskKind::Media => include::chain_files::<lmms::config::Config>(&path),
            TaskKind::Text => include::chain_files::<lmeval::Config>(&path),
        };
        out.extend(source.data);
        match std::fs::read_to_string(&path) {
            Ok(text) if !lmeval::is_lmeval(&text) => {
                if let Ok(spec) = serde_saphyr::from_str::<TaskSpec>(&text) {
                    out.extend(std::iter::once(spec.test).chain(spec.fewshot).map(|d| root.join(d)));
                }
            }
            Ok(_) => {
                let config = lmeval::load_config(&path, file).ok();
                let data_files = config.and_then(|c| c.dataset_kwargs?.data_files).unwrap_or_default();
                for files in data_files.into_values() {
                    match files {
                        lmeval::Files::One(f) => out.push(root.join(f)),
                        lmeval::Files::Many(v) => out.extend(v.into_iter().map(|f| root.join(f))),
                    }
                }
            }
            Err(_) => {}
        }
        out
    }

    /// `p`'s files: itself, or every file below a folder (links followed, sorted); nothing when it is not there or
    /// not under the root.
    fn files_below(&self, p: &Path) -> Vec<PathBuf> {
        if !self.holds(p) {
            return Vec::new();
        }
        if p.is_file() {
            return vec![p.to_path_buf()];
        }
        let mut entries: Vec<PathBuf> = std::fs::read_dir(p).into_iter().flatten().flatten().map(|e| e.path()).collect();
        entries.sort();
        entries.iter().flat_map(|e| self.files_below(e)).collect()
    }

    /// Whether `p` names a place under the root, as written (a `..` that climbs out is not).
    fn holds(&self, p: &Path) -> bool {
        p.strip_prefix(&self.root).is_ok_and(|rel| !rel.components().any(|c| matches!(c, Component::ParentDir)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::workspace_root;

    fn repository() -> (Suite, Vec<std::sync::Arc<Case>>) {
        let suite = Suite::open(&workspace_root());
        let cases = suite.load_cases().into_iter().map(|c| c.unwrap_or_else(|b| panic!("{}: {}", b.file, b.error))).collect();
        (suite, cases)
    }

    /// All files under `dir`, recursively.
    fn all_files(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.path().is_dir() { out.extend(all_files(&e.path())) } else { out.push(e.path()) }
        }
        out
    }

    #[test]
    fn every_golden_baseline_and_snapshot_of_the_repository_is_some_case_s_own() {
        let (suite, cases) = repository();
        let own: std::collections::BTreeSet<PathBuf> = cases.iter().flat_map(|c| suite.files_of(c).own).collect();
        let stored: Vec<PathBuf> =
            all_files(&suite.goldens_dir).into_iter().chain(all_files(&suite.root.join("harness/snapshots"))).collect();
        assert!(stored.len() > 100, "{} files under {}", stored.len(), suite.goldens_dir.display());
        let unclaimed: Vec<String> = stored.iter().filter(|f| !own.contains(*f)).map(|f| f.display().to_string()).collect();
        assert!(unclaimed.is_empty(), "files no case's files_of names (a golden kind it misses?):\n{}", unclaimed.join("\n"));
    }

    #[test]
    fn a_case_s_files_are_its_own_and_what_its_fields_name() {
        let (suite, cases) = repository();
        let case = |name: &str| cases.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no case {name}"));
        let rel = |p: &Path| p.strip_prefix(&suite.root).unwrap().to_string_lossy().replace('\\', "/");
        let listed = |name: &str| -> Vec<String> { suite.files_of(case(name)).existing().into_iter().map(rel).collect() };

        let qwen = listed("qwen3-tiny");
        for f in [
            "cases/causal-lm/qwen3-tiny.yaml",
            "goldens/causal-lm/qwen3-tiny.json",
            "goldens/causal-lm/qwen3-tiny_generation.json",
            "goldens/causal-lm/qwen3-tiny.int4.json",
            "goldens/causal-lm/qwen3-tiny.dist.safetensors",
            "fixtures/dist/corpus.jsonl",
            "fixtures/tokenizer/tokenizer.json",
            "fixtures/qwen3-tiny/onnx/cpu-f32/genai_config.json",
        ] {
            assert!(qwen.iter().any(|q| q == f), "qwen3-tiny lacks {f}: {qwen:#?}");
        }
        // Named for the case, not for every case whose name it begins.
        assert!(!qwen.iter().any(|f| f.contains("qwen3-tiny-lmeval")), "{qwen:#?}");

        // An lm-eval task: its include chain and the case's data folder.
        let lmeval = listed("qwen3-tiny-lmeval");
        for f in [
            "goldens/baselines/hellaswag/qwen3-tiny-lmeval.json",
            "tests/data/lmeval/lm_eval_tasks/mmlu/default/mmlu_abstract_algebra.yaml",
        ] {
            assert!(lmeval.iter().any(|q| q == f), "qwen3-tiny-lmeval lacks {f}: {lmeval:#?}");
        }
        let mmlu = lmeval.iter().filter(|f| f.starts_with("tests/data/lmeval/lm_eval_tasks/mmlu/")).count();
        assert!(mmlu >= 2, "the mmlu task and the file it includes: {lmeval:#?}");
        assert!(lmeval.iter().any(|f| f.starts_with("tests/data/lmeval/hub/datasets--cais--mmlu/snapshots/fixture/")), "{lmeval:#?}");

        // The suite's own task dialect names its documents.
        let arith = listed("arith-tiny");
        let test =
            serde_saphyr::from_str::<TaskSpec>(&std::fs::read_to_string(suite.root.join("cases/tasks/arith.yaml")).unwrap()).unwrap().test;
        assert!(arith.contains(&test) && arith.iter().any(|f| f == "goldens/baselines/arith-3shot/arith-tiny.json"), "{arith:#?}");

        // lmms-eval tasks with their stored media inputs, an include chain, and the media; several modalities.
        let mm = listed("gemma4-mm-tiny");
        for f in [
            "goldens/baselines/chartqa/gemma4-mm-tiny.inputs.safetensors.sz",
            "tests/data/lmms/lmms_eval_tasks/docvqa/_default_template_docvqa_yaml",
            "fixtures/media/pipeline-cat-chonk.jpeg",
            "goldens/image-text-to-text/gemma4-mm-tiny.image_audio.inputs.safetensors",
            "goldens/image-text-to-text/gemma4-mm-tiny.audio.features.safetensors",
        ] {
            assert!(mm.iter().any(|q| q == f), "gemma4-mm-tiny lacks {f}: {mm:#?}");
        }

        // A speech corpus's clips.
        let whisper = listed("whisper-tiny");
        let corpus = std::fs::read_to_string(suite.root.join("fixtures/dist/speech-tiny.jsonl")).unwrap();
        for u in crate::level::dist::corpus::speech_corpus("speech-tiny.jsonl", &corpus).unwrap() {
            assert!(whisper.contains(&u.audio), "whisper-tiny lacks its corpus clip {}: {whisper:#?}", u.audio);
        }
    }

    #[test]
    fn a_case_under_another_name_lists_its_own_files_at_the_same_places() {
        let (suite, cases) = repository();
        for case in &cases {
            let renamed = Case { name: format!("{}-copy0", case.name), ..(**case).clone() };
            let (a, b) = (suite.files_of(case).own, suite.files_of(&renamed).own);
            assert_eq!(a.len(), b.len(), "{}", case.name);
            for (a, b) in a.iter().zip(&b) {
                let a = a.file_name().unwrap().to_string_lossy().replacen(&case.name, &renamed.name, 1);
                assert_eq!(a, b.file_name().unwrap().to_string_lossy(), "{}", case.name);
            }
        }
    }
}
