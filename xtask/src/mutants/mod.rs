//! `cargo xtask mutants`: the suite's self-test. Each mutant is a copy of a committed fixture package with one bug that
//! shipped in a real export, made at run time by a same-length byte patch of its ONNX files (see `onnx_bytes`). Each is laid
//! out in a scratch suite root beside the case's goldens, at the very path the case names, and the suite runs the
//! mutated variant's trials with its normal verdicts: every mutant must fail at least one of them, with a measured
//! difference. The unpatched variants of the same cases, laid out the same way, must not fail.

mod catalogue;
mod levels;
mod make;
mod patches;
mod report;
mod run;
mod separation;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use mobius_conformance::context::RunContext;
use mobius_conformance::outcome::Finished;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::case::{Case, Location};
use mobius_conformance::plan::suite::Suite;
use serde_json::{Value, json};

use crate::scratch::Scratch;
use catalogue::{MUTANTS, Mutant};
use run::MutantRun;

struct Options {
    json: Option<PathBuf>,
    only: Vec<String>,
    keep: Option<PathBuf>,
    real: bool,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut o = Options { json: None, only: Vec::new(), keep: None, real: false };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--json" => o.json = Some(PathBuf::from(it.next().ok_or("--json needs a file")?)),
                "--only" => o.only.push(it.next().ok_or("--only needs a mutant name")?.clone()),
                "--keep" => o.keep = Some(PathBuf::from(it.next().ok_or("--keep needs a directory")?)),
                "--real" => o.real = true,
                other => return Err(format!("mutants: unknown option `{other}`")),
            }
        }
        if let Some(bad) = o.only.iter().find(|o| !MUTANTS.iter().any(|m| m.name == o.as_str())) {
            let names: Vec<&str> = MUTANTS.iter().map(|m| m.name).collect();
            return Err(format!("mutants: no mutant `{bad}`; there are {names:?}"));
        }
        Ok(o)
    }
}

/// The repository's cases by name. A case that does not load is an error only if a mutant derives from it.
struct Cases {
    repo: Suite,
    by_name: BTreeMap<String, Result<Arc<Case>, String>>,
}

impl Cases {
    fn load(repo: Suite) -> Cases {
        let mut by_name = BTreeMap::new();
        for c in repo.load_cases() {
            match c {
                Ok(c) => by_name.insert(c.name.clone(), Ok(c)),
                Err(b) => by_name.insert(b.name.clone(), Err(format!("{}: {}", b.file, b.error))),
            };
        }
        Cases { repo, by_name }
    }

    fn get(&self, name: &str) -> Result<&Case, String> {
        match self.by_name.get(name) {
            Some(c) => c.as_ref().map(Arc::as_ref).map_err(Clone::clone),
            None => Err(format!("mutants: no case `{name}` under {}", self.repo.cases_dir.display())),
        }
    }

    fn model_of(&self, name: &str) -> String {
        self.by_name.get(name).and_then(|c| c.as_ref().ok()).map_or(name.to_string(), |c| c.spec.model_id.clone())
    }

    /// Whether the mutant's package is there: the real tier's need `cargo xtask real`.
    fn built(&self, m: &Mutant) -> bool {
        !m.real
            || self.get(m.case).is_ok_and(|c| {
                c.variants(&self.repo.root)
                    .iter()
                    .any(|v| v.ep == m.ep && v.dtype == m.dtype && matches!(&v.package, Some(Location::Local(p)) if p.exists()))
            })
    }
}

/// The mutants to run: the tiny tier's, the real tier's too with `--real` (minutes each on 2 cores), or the ones
/// `--only` names. The real tier's need its packages: without them, say so and run the rest.
fn select(o: &Options, cases: &Cases) -> Vec<&'static Mutant> {
    let selected: Vec<&'static Mutant> =
        MUTANTS.iter().filter(|m| if o.only.is_empty() { o.real || !m.real } else { o.only.iter().any(|n| n == m.name) }).collect();
    for m in selected.iter().filter(|m| !cases.built(m)) {
        println!("SKIPPED    {:<24} the real tier is not built: `cargo xtask real`", m.name);
    }
    selected.into_iter().filter(|m| cases.built(m)).collect()
}

/// Where the suite runs: the context and the number of workers.
struct Runner {
    ctx: RunContext,
    threads: usize,
}

impl Runner {
    /// The unpatched variants of every case a mutant derives from, laid out the same way: the control. Its trials and
    /// their seconds.
    fn clean(&self, cases: &Cases, targets: &BTreeSet<&str>, scratch: &Path) -> Result<(Vec<Finished>, f64), String> {
        let clean_cases = targets.iter().map(|t| cases.get(t)).collect::<Result<Vec<_>, _>>()?;
        let root = scratch.join("clean");
        let _ = std::fs::remove_dir_all(&root);
        make::lay_out(&cases.repo, &root, &clean_cases, |_, _| true)?;
        let t0 = Instant::now();
        let clean = run::run_root(&root, &self.ctx, self.threads, &|_| true);
        Ok((clean, t0.elapsed().as_secs_f64()))
    }

    /// One mutant made in its own root and its variant's trials run; says whether it was caught.
    fn mutant(&self, cases: &Cases, m: &'static Mutant, scratch: &Path) -> Result<MutantRun, String> {
        let t0 = Instant::now();
        let root = scratch.join(m.name);
        let _ = std::fs::remove_dir_all(&root);
        let patched = make::make(&cases.repo, &root, cases.get(m.case)?, m);
        let rows = match &patched {
            Ok(_) => run::run_root(&root, &self.ctx, self.threads, &|t| run::runs_mutant(m, t)),
            Err(_) => Vec::new(),
        };
        let c = MutantRun { mutant: m, patched, rows };
        let took = format!("[{} trials, {:.1}s]", c.rows.len(), t0.elapsed().as_secs_f64());
        match (c.caught_by(), c.problem()) {
            (Some(by), _) => println!("CAUGHT     {:<24} by {} ({}) {took}", m.name, by.name, levels::measured(by).unwrap_or_default()),
            (None, problem) => println!("NOT CAUGHT {:<24} {} {took}", m.name, problem.unwrap_or_default()),
        }
        Ok(c)
    }
}

/// What the runs came to: the control and every mutant.
struct Results<'a> {
    runs: Vec<MutantRun>,
    clean: Vec<Finished>,
    targets: BTreeSet<&'a str>,
    wall: f64,
}

impl Results<'_> {
    /// Prints the table, the separations and the control's tally; returns the separation tables by their JSON key
    /// and the problems.
    fn print(&self, cases: &Cases, clean_seconds: f64) -> (Vec<(&'static str, String)>, Vec<String>) {
        println!("\n{}", report::table(&self.runs));
        let model_of = |name: &str| cases.model_of(name);
        let mut separations = Vec::new();
        for (kind, of) in levels::separations() {
            let table = separation::separation(&self.runs, &self.clean, &model_of, kind);
            println!("{}:\n{table}", of.title);
            separations.push((of.key, table));
        }
        let clean_failed: Vec<&Finished> = self.clean.iter().filter(|r| r.outcome.is_fail()).collect();
        println!(
            "clean ({}): {} trials in {clean_seconds:.1}s: {}",
            self.targets.iter().copied().collect::<Vec<_>>().join(", "),
            self.clean.len(),
            mobius_conformance::report::summary::tally(&self.clean)
        );
        for r in &clean_failed {
            eprintln!("\n{}", r.outcome.message);
        }
        let mut problems: Vec<String> = self.runs.iter().filter_map(MutantRun::problem).collect();
        problems.extend(clean_failed.iter().map(|r| format!("clean trial {} failed", r.name)));
        if self.clean.is_empty() {
            problems.push("no clean trial ran".into());
        }
        (separations, problems)
    }

    fn json(&self, device: String, separations: Vec<(&'static str, String)>, problems: &[String]) -> Value {
        let mut report = json!({
            "device": device,
            "wall_seconds": self.wall,
            "mutants": self.runs.iter().map(report::run_json).collect::<Vec<_>>(),
            "clean": {
                "cases": self.targets,
                "total": self.clean.len(),
                "failed": self.clean.iter().filter(|r| r.outcome.is_fail()).count(),
                "trials": self.clean.iter().map(report::trial_json).collect::<Vec<_>>(),
            },
            "problems": problems,
            "ok": problems.is_empty(),
        });
        for (key, table) in separations {
            report[key] = json!(table);
        }
        report
    }
}

pub fn mutants(args: &[String]) -> Result<(), String> {
    let o = Options::parse(args)?;
    if std::env::var_os("INSTA_OUTPUT").is_none() {
        // Each L5 stream a mutant changes makes insta print its diff; here that is the expected outcome, not news.
        // SAFETY: the task has started no thread yet.
        unsafe { std::env::set_var("INSTA_OUTPUT", "none") };
    }
    let ctx = RunContext::from_env().map_err(|e| e.to_string())?;
    let device = ctx.device;
    let runner = Runner { ctx, threads: std::thread::available_parallelism().map_or(2, |n| n.get()) };
    let cases = Cases::load(Suite::open(&workspace_root()));
    let selected = select(&o, &cases);
    let scratch = Scratch {
        dir: o.keep.clone().unwrap_or_else(|| std::env::temp_dir().join(format!("mobius-mutants-{}", std::process::id()))),
        keep: o.keep.is_some(),
    };
    let started = Instant::now();
    let targets: BTreeSet<&str> = selected.iter().map(|m| m.case).collect();
    let (clean, clean_seconds) = runner.clean(&cases, &targets, &scratch.dir)?;
    let runs = selected.into_iter().map(|m| runner.mutant(&cases, m, &scratch.dir)).collect::<Result<Vec<_>, _>>()?;
    let outcome = Results { runs, clean, targets, wall: started.elapsed().as_secs_f64() };
    let (separations, problems) = outcome.print(&cases, clean_seconds);
    println!(
        "{} mutants in {:.1}s; scratch roots in {}{}",
        outcome.runs.len(),
        outcome.wall,
        scratch.dir.display(),
        if scratch.keep { "" } else { " (removed)" }
    );
    if let Some(path) = &o.json {
        let report = outcome.json(device.to_string(), separations, &problems);
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())? + "\n";
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if problems.is_empty() { Ok(()) } else { Err(problems.join("\n")) }
}
