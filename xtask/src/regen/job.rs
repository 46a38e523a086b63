//! The one shape of a regen job: planned per case, made by one reference module from the JSON jobs it is handed, read
//! back and written here through the ledger. `regen::run` loops over a list of jobs; a new kind of golden (a new
//! level's) is one module implementing [`Job`] and one line in that list.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use mobius_conformance::plan::case::{Case, Location};
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::vocab::Level;

use reference_setup::venv;

use super::ledger::Ledger;

/// The reference module that makes a job's raw outputs: `python -m reference.<module> <work>/<jobs_file>`, the file
/// holding `{"jobs": [...]}`, one planned unit's JSON each.
pub struct Reference {
    pub module: &'static str,
    pub jobs_file: &'static str,
}

/// What a job is planned with.
pub struct Scope<'a> {
    pub suite: &'a Suite,
    /// Where the reference writes each unit's raw outputs: the run's work folder, or `--from-raw`'s.
    pub raw_dir: &'a Path,
    /// The level `--level` names, if any.
    pub level: Option<Level>,
}

/// One unit of a case as planned.
pub enum Planned<U> {
    /// A unit, and the JSON the reference reads for it.
    Make { spec: serde_json::Value, unit: U },
    /// No unit: the SKIPPED lines of the goldens it would have made, saying why.
    Skip(Vec<String>),
}

impl<U> Planned<U> {
    /// Units planned together, each with its JSON, or the error that stopped them all.
    pub fn each(planned: Result<impl IntoIterator<Item = (serde_json::Value, U)>, String>) -> Vec<Result<Planned<U>, String>> {
        match planned {
            Ok(units) => units.into_iter().map(|(spec, unit)| Ok(Planned::Make { spec, unit })).collect(),
            Err(e) => vec![Err(e)],
        }
    }
}

/// One kind of file `regen-goldens` makes.
pub trait Job {
    /// What the reference makes one raw file for: a case's stream, an accuracy task's baseline, a case's corpus.
    type Unit;
    /// The levels `--level` selects this job by; a job with none runs only when no `--level` is given.
    const LEVELS: &'static [Level];
    const REFERENCE: Reference;

    /// The units of `case`, each planned or the error that stops it. Reads the suite and writes nothing but what the
    /// reference is to read beside its raw outputs.
    fn plan(&self, scope: &Scope, case: &Case) -> Vec<Result<Planned<Self::Unit>, String>>;
    /// The case a unit belongs to (its `reference` folder must hold the derived fixture files before the run).
    fn case<'u>(&self, unit: &'u Self::Unit) -> &'u Case;
    /// The raw outputs the reference writes for a unit (`--keep-raw` keeps them).
    fn raw<'u>(&self, unit: &'u Self::Unit) -> &'u Path;
    /// What a unit's ERROR line names.
    fn what(&self, suite: &Suite, unit: &Self::Unit) -> String;
    /// Reads a unit's raw outputs back and writes its files through the ledger; returns the lines to print.
    fn write(&self, suite: &Suite, unit: &Self::Unit, ledger: &mut Ledger) -> Result<Vec<String>, String>;
}

/// A job with the units planned so far, whatever their type: what `regen::run` holds one of per job.
pub trait Stage {
    fn levels(&self) -> &'static [Level];
    /// Plans `case`, printing its SKIPPED and ERROR lines; returns how many failed.
    fn plan(&mut self, scope: &Scope, case: &Case) -> usize;
    /// The `reference` folders of the cases planned.
    fn references(&self, root: &Path) -> Vec<PathBuf>;
    /// Runs the reference over the units (unless the raw outputs come from `--from-raw`) and keeps its raw outputs in
    /// `keep_raw`, then writes each unit, printing its lines; returns how many failed. An error stops the run.
    fn make(&mut self, suite: &Suite, work: &Path, keep_raw: Option<&Path>, ledger: &mut Ledger) -> Result<usize, String>;
}

/// A [`Job`] and its units.
pub struct Batch<J: Job> {
    job: J,
    units: Vec<(serde_json::Value, J::Unit)>,
}

impl<J: Job + 'static> Batch<J> {
    pub fn boxed(job: J) -> Box<dyn Stage> {
        Box::new(Batch { job, units: Vec::new() })
    }
}

impl<J: Job> Stage for Batch<J> {
    fn levels(&self) -> &'static [Level] {
        J::LEVELS
    }

    fn plan(&mut self, scope: &Scope, case: &Case) -> usize {
        let mut failures = 0;
        for planned in self.job.plan(scope, case) {
            match planned {
                Ok(Planned::Make { spec, unit }) => self.units.push((spec, unit)),
                Ok(Planned::Skip(lines)) => lines.iter().for_each(|l| println!("{l}")),
                Err(e) => {
                    println!("ERROR      {}: {e}", case.file);
                    failures += 1;
                }
            }
        }
        failures
    }

    fn references(&self, root: &Path) -> Vec<PathBuf> {
        self.units.iter().filter_map(|(_, u)| self.job.case(u).reference_dir(root)).collect()
    }

    fn make(&mut self, suite: &Suite, work: &Path, keep_raw: Option<&Path>, ledger: &mut Ledger) -> Result<usize, String> {
        if !self.units.is_empty() && ledger.from_raw.is_none() {
            let spec = serde_json::json!({ "jobs": self.units.iter().map(|(s, _)| s).collect::<Vec<_>>() });
            let path = work.join(J::REFERENCE.jobs_file);
            std::fs::write(&path, serde_json::to_vec(&spec).unwrap()).map_err(|e| format!("{}: {e}", path.display()))?;
            run_reference(J::REFERENCE.module, &[path.into_os_string()])?;
            if let Some(keep) = keep_raw {
                keep_raws(self.units.iter().map(|(_, u)| self.job.raw(u)), keep)?;
            }
        }
        let mut failures = 0;
        for (_, unit) in &self.units {
            match self.job.write(suite, unit, ledger) {
                Ok(lines) => lines.iter().for_each(|l| println!("{l}")),
                Err(e) => {
                    println!("ERROR      {}: {e}", self.job.what(suite, unit));
                    failures += 1;
                }
            }
        }
        Ok(failures)
    }
}

/// Runs `python -m reference.<module> args` (see [`venv::reference_command`]), inheriting stdout and stderr.
pub fn run_reference(module: &str, args: &[OsString]) -> Result<(), String> {
    let mut cmd = venv::reference_command(module)?;
    cmd.args(args);
    let status = cmd.status().map_err(|e| format!("running {cmd:?}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{cmd:?} failed: {status}")) }
}

/// Copies the raw outputs into `keep` (`--keep-raw`), for a later `--from-raw`.
fn keep_raws<'a>(raws: impl Iterator<Item = &'a Path>, keep: &Path) -> Result<(), String> {
    std::fs::create_dir_all(keep).map_err(|e| format!("{}: {e}", keep.display()))?;
    for raw in raws {
        let to = keep.join(raw.file_name().unwrap());
        if !same_file(raw, &to) {
            std::fs::copy(raw, &to).map_err(|e| format!("{}: {e}", to.display()))?;
        }
    }
    Ok(())
}

/// Whether two paths name one folder (both resolved; equal text when neither exists yet).
pub fn same_folder(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Whether copying `from` to `to` would copy a file onto itself (which truncates it).
fn same_file(from: &Path, to: &Path) -> bool {
    to.exists() && same_folder(from, to)
}

/// The genai_config.json of the case's first package that has one (local, or in the Hugging Face cache): where the
/// reference, like the suite's runner, finds the EOS ids when the case names none (`common.eos_ids`).
pub fn genai_config(suite: &Suite, case: &Case) -> Option<PathBuf> {
    genai_config_at(suite, case).map(|(file, _)| file)
}

/// [`genai_config`], and whether it is a local package's (to be kept inside the root) or the Hub cache's.
pub fn genai_config_at(suite: &Suite, case: &Case) -> Option<(PathBuf, bool)> {
    let hub = crate::hub().ok()?;
    case.variants(&suite.root).into_iter().filter_map(|v| v.package).find_map(|p| {
        let file = p.resolve("genai_config.json", hub).ok()?.join("genai_config.json");
        file.is_file().then_some((file, matches!(p, Location::Local(_))))
    })
}
