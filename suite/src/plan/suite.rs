//! The suite on disk: its root's layout, its tolerance policy, its cases (each loaded on its own) and the trial plan,
//! one trial per case x modality x ep x dtype x level. A case that does not load plans failing trials of its own
//! (`<case>/case`, and every trial it would have had); it never stops the others.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::judge::golden::GoldenPaths;
use crate::judge::tolerance::Policy;
use crate::paths::{self, relative};
use crate::plan::case::{Case, Variant};
use crate::plan::corpus;
use crate::vocab::{Dtype, Level, Modality, TrialId};

/// A suite root: `cases/` and `goldens/` (or mobius' `golden/`) beside each other.
#[derive(Debug, Clone)]
pub struct Suite {
    pub root: PathBuf,
    pub cases_dir: PathBuf,
    pub goldens_dir: PathBuf,
    pub policy: std::result::Result<Arc<Policy>, Error>,
}

impl Suite {
    pub fn open(root: &Path) -> Suite {
        let cases_dir = root.join("cases");
        let goldens_dir = ["goldens", "golden"].iter().map(|d| root.join(d)).find(|d| d.is_dir()).unwrap_or_else(|| root.join("goldens"));
        let policy = [cases_dir.join("tolerances.yaml"), root.join("default_tolerances.yaml")]
            .into_iter()
            .find(|p| p.exists())
            .map_or_else(
                || Ok(Policy::builtin()),
                |p| {
                    // One that is there but not a readable file is an error, never the built-in defaults.
                    paths::confine(root, &p, "tolerance policy", paths::SUITE_HINT)?;
                    paths::regular_file(&p, "tolerance policy")?;
                    Policy::load(&p)
                },
            )
            .map(|mut p| {
                p.source = relative(root, Path::new(&p.source));
                // mobius' file (at the root, beside its `golden/`) was written for mobius' argmax-only verdicts.
                if p.source == "default_tolerances.yaml" {
                    p.tighten_only();
                }
                Arc::new(p)
            });
        Suite { root: root.to_path_buf(), cases_dir, goldens_dir, policy }
    }

    /// ` --root <root>` when this suite is not the repository's own, for the commands a message prints.
    pub fn root_option(&self) -> String {
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        if canon(&self.root) == canon(&crate::paths::workspace_root()) {
            String::new()
        } else {
            let shown = self.root.to_string_lossy().replace('\\', "/");
            if shown.contains(char::is_whitespace) { format!(" --root '{shown}'") } else { format!(" --root {shown}") }
        }
    }

    /// Errs when the root cannot be a suite: no such folder, no `cases/` in it, or no case file under that. A
    /// mistyped MOBIUS_SUITE_ROOT or `--root` must stop the run, never run zero trials and pass.
    pub fn check(&self, setting: &str) -> Result<()> {
        let root = self.root.display();
        if !self.root.is_dir() {
            return Err(Error::new(format!("{setting}: the suite root {root} is not a folder")));
        }
        if !self.cases_dir.is_dir() {
            return Err(Error::new(format!("{setting}: the suite root {root} has no `cases/` folder")));
        }
        if crate::plan::discovery::case_files(&self.root, &self.cases_dir).is_empty() {
            return Err(Error::new(format!("{setting}: no case file (`*.yaml`) under {}", self.cases_dir.display())));
        }
        Ok(())
    }

    /// Every case file under `cases/`, sorted, each parsed on its own; a case with several prompts gives one case per
    /// prompt ([`corpus::per_prompt`]).
    pub fn load_cases(&self) -> Vec<std::result::Result<Arc<Case>, BrokenCase>> {
        let found = crate::plan::discovery::case_files(&self.root, &self.cases_dir);
        let stem = |p: &Path| p.file_stem().map_or_else(|| "?".to_string(), |s| s.to_string_lossy().into_owned());
        // Two files of one name in one folder (`t.yaml`, `t.YAML`, `t.yml`) would share trial names and goldens. In
        // different task folders they do not: `plan` prefixes the folder.
        let mut by_name: std::collections::BTreeMap<(PathBuf, String), Vec<String>> = Default::default();
        for f in &found {
            if let crate::plan::discovery::Found::File(p) = f {
                let dir = p.parent().map(Path::to_path_buf).unwrap_or_default();
                by_name.entry((dir, stem(p))).or_default().push(relative(&self.root, p));
            }
        }
        found
            .into_iter()
            .map(|f| {
                let path = match f {
                    crate::plan::discovery::Found::File(p) => p,
                    crate::plan::discovery::Found::Unreadable(p, e) => {
                        let (name, file) = (stem(&p), relative(&self.root, &p));
                        let error = e.context(&file);
                        // An unreadable case file plans every trial it could have had; a folder, only its own.
                        let is_file = crate::plan::discovery::is_yaml(&p);
                        let task_dir = corpus::task_dir_of(&file);
                        let guess = is_file.then(|| Arc::new(crate::plan::discovery::guess(&name, &file, &task_dir, None)));
                        return Err(BrokenCase { guess, name, file, error });
                    }
                };
                let file = relative(&self.root, &path);
                let name = stem(&path);
                let task_dir = path
                    .parent()
                    .and_then(|p| p.strip_prefix(&self.cases_dir).ok())
                    .map(|p| p.to_string_lossy().replace('\\', "/"))
                    .unwrap_or_default();
                let text = std::fs::read_to_string(&path).map_err(|e| Error::new(format!("{file}: {e}")));
                let expected =
                    || Some(Arc::new(crate::plan::discovery::guess(&name, &file, &task_dir, text.as_ref().ok().map(String::as_str))));
                let twins = &by_name[&(path.parent().map(Path::to_path_buf).unwrap_or_default(), name.clone())];
                if twins.len() > 1 {
                    let error = Error::new(format!(
                        "{file}: the case name `{name}` is also used by {} in the same folder; trial names and goldens would \
                         collide: rename one",
                        twins.iter().filter(|t| **t != file).cloned().collect::<Vec<_>>().join(", ")
                    ));
                    return Err(BrokenCase { guess: expected(), name, file, error });
                }
                match text.clone().and_then(|t| Case::parse(&file, &task_dir, &name, &t)) {
                    Ok(c) => Ok(c),
                    Err(error) => Err(BrokenCase { guess: expected(), name, file, error }),
                }
            })
            .flat_map(|c| match c {
                Ok(case) => corpus::per_prompt(case).into_iter().map(|c| Ok(Arc::new(c))).collect(),
                Err(b) => vec![Err(b)],
            })
            .collect()
    }

    /// Where reviewed snapshots of a task live. In this repository that is inside the `harness` package, because
    /// `cargo insta review` looks for pending snapshots in package folders only; elsewhere beside the goldens.
    pub fn snapshots_dir(&self, task_dir: &str) -> PathBuf {
        let harness = self.root.join("harness");
        if harness.join("Cargo.toml").is_file() {
            harness.join("snapshots").join(task_dir)
        } else {
            self.goldens_dir.join(task_dir).join("snapshots")
        }
    }

    /// A case with one modality keeps mobius' names (`<case>.json`); with several, each has `<case>.<modality>.json`.
    /// A dtype judged against its own reference (int4: kernel parity) adds its suffix, `<case>.int4.json`, the
    /// encoder features too (`<case>.int4.features.safetensors`: an int4 encoder's reference is the dequantized
    /// one); the processed inputs stay those of the float32 reference. A half-precision dtype's module golden has its
    /// own suffix too (`<case>.f16.modules.safetensors`: [`Dtype::module_golden_suffix`]); its other goldens are the
    /// float32 reference's.
    pub fn golden_paths(&self, case: &Case, modality: Modality, dtype: Dtype) -> GoldenPaths {
        let stem = if case.modalities().len() > 1 { format!("{}.{}", case.name, modality.slug()) } else { case.name.clone() };
        let mut base = GoldenPaths::new(&self.goldens_dir, &case.task_dir, &stem);
        if modality == Modality::ImageAudio {
            base.shared_inputs = [Modality::Image, Modality::Audio]
                .map(|m| GoldenPaths::new(&self.goldens_dir, &case.task_dir, &format!("{}.{}", case.name, m.slug())).inputs)
                .to_vec();
        }
        let mut paths = match dtype.golden_suffix() {
            None => base,
            Some(suffix) => GoldenPaths {
                inputs: base.inputs,
                shared_inputs: base.shared_inputs,
                ..GoldenPaths::new(&self.goldens_dir, &case.task_dir, &format!("{stem}.{suffix}"))
            },
        };
        if let Some(suffix) = dtype.module_golden_suffix() {
            paths.modules = GoldenPaths::new(&self.goldens_dir, &case.task_dir, &format!("{stem}.{suffix}")).modules;
        }
        paths
    }

    /// `goldens/baselines/<task>/<case>.json`: the reference's accuracy and per-item scores on a task.
    /// The distribution level's golden: one per case, against the fp32 reference whatever the variant's dtype.
    pub fn dist_golden_path(&self, case: &Case) -> PathBuf {
        let dir = if case.task_dir.is_empty() { self.goldens_dir.clone() } else { self.goldens_dir.join(&case.task_dir) };
        dir.join(format!("{}.dist.safetensors", case.name))
    }

    pub fn baseline_path(&self, task: &str, case: &str) -> PathBuf {
        self.goldens_dir.join("baselines").join(task).join(format!("{case}.json"))
    }
}

#[derive(Debug, Clone)]
pub struct BrokenCase {
    pub name: String,
    pub file: String,
    pub error: Error,
    /// The case it would have been, as far as its text says (see [`crate::plan::discovery::guess`]): the plan gives
    /// it every trial that case would have had, each failing. `None`: only its own `<case>/case` trial.
    pub guess: Option<Arc<Case>>,
}

#[derive(Debug, Clone)]
pub enum TrialKind {
    Broken(BrokenCase),
    Conformance {
        case: Arc<Case>,
        modality: Modality,
        variant: Variant,
        level: Level,
    },
    /// The accuracy gate: one benchmark task on one variant, resolved once when planned (its file, its name, what
    /// the case says of it, and which gate runs it).
    Accuracy {
        case: Arc<Case>,
        task: Box<crate::accuracy::resolve::ResolvedTask>,
        variant: Variant,
        /// The gate's level: the task through the suite's own runner, or a media task's items through onnxruntime-genai.
        level: Level,
    },
}

#[derive(Debug, Clone)]
pub struct TrialSpec {
    pub id: TrialId,
    /// The libtest name, `id` displayed.
    pub name: String,
    pub kind: TrialKind,
}

impl TrialKind {
    /// The case file the trial comes from.
    pub fn case_file(&self) -> &str {
        match self {
            TrialKind::Broken(b) => &b.file,
            TrialKind::Conformance { case, .. } | TrialKind::Accuracy { case, .. } => &case.file,
        }
    }
}

impl TrialSpec {
    pub fn new(id: TrialId, kind: TrialKind) -> TrialSpec {
        TrialSpec { name: id.to_string(), id, kind }
    }

    /// Whether the trial belongs to a case whose packages are built outside the checkout (`build_command`: the
    /// real tier). Whole-suite measurements of the tiny tier (repeatability, bench overhead) leave these out.
    pub fn is_built_elsewhere(&self) -> bool {
        match &self.kind {
            TrialKind::Conformance { case, .. } | TrialKind::Accuracy { case, .. } => case.spec.build_command.is_some(),
            TrialKind::Broken(_) => false,
        }
    }
}
