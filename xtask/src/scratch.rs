//! Scratch suite roots: some of a suite's cases laid out in a folder of their own, every file at the path the suite
//! reads it from ([`Suite::files_of`]), for `cargo xtask mutants` (a case's files, one package patched) and `cargo
//! xtask bench`'s scaling section (every case, copied under new names). The suite confines what it reads to its
//! root, so a symbolic link out of a scratch root would fail every trial; files are copied or hard-linked, and only
//! what the repository itself reaches through a link (the real tier's cache at `target/real`: gigabytes) is linked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mobius_conformance::plan::case::{Case, Variant};
use mobius_conformance::plan::discovery::{self, Found};
use mobius_conformance::plan::suite::Suite;

/// A scratch folder, removed when dropped unless it was asked for.
pub struct Scratch {
    pub dir: PathBuf,
    pub keep: bool,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// How a file reaches a scratch root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Copied: the root's files are rewritten (a mutant's patched model, its case file).
    Copy,
    /// Hard-linked where the file system allows, else copied: nothing in the root is written (goldens are replaced
    /// by rename, snapshots are not written under CI's settings).
    Link,
}

/// Lays out `root` holding `cases` of `repo`, each with every case its file holds (a file with several prompts or
/// clips is several cases, and the root plans them all): the tolerance policy, the case files, their own and shared
/// files, and the packages of the variants `keep` selects.
pub fn lay_out(repo: &Suite, root: &Path, cases: &[&Case], keep: impl Fn(&Case, &Variant) -> bool) -> Result<(), String> {
    let r = &repo.root;
    for policy in [repo.cases_dir.join("tolerances.yaml"), r.join("default_tolerances.yaml")] {
        place(r, root, &policy, Fill::Copy)?;
    }
    let goldens = root.join(repo.goldens_dir.strip_prefix(r).unwrap_or(Path::new("goldens")));
    std::fs::create_dir_all(&goldens).map_err(|e| format!("{}: {e}", goldens.display()))?;
    let (all, scratch) = (loaded(repo), Suite::open(root));
    for case in cases {
        let mine = repo.files_of(case);
        place(r, root, &mine.case_file, Fill::Copy)?;
        for (_, files) in mine.packages.iter().filter(|(v, _)| keep(case, v)) {
            for f in files {
                place(r, root, f, Fill::Copy)?;
            }
        }
        for sibling in all.iter().filter(|c| c.file == case.file) {
            let files = repo.files_of(sibling);
            for f in &files.shared {
                place(r, root, f, Fill::Copy)?;
            }
            own_to(&files.own, &scratch.files_of(sibling).own, Fill::Copy)?;
        }
    }
    Ok(())
}

/// Makes `to` a suite root holding `copies` copies of every case file of `source` (`t.yaml` becomes `t-copy0.yaml`,
/// `t-copy1.yaml`, ...), each copy's cases with the own files (goldens, baselines, snapshots) of `t`'s at the paths
/// the copy reads them from; everything else of `source` (fixtures, task files and their data, manifests, the
/// tolerance policy) is mirrored as it is, by hard links.
pub fn replicate(source: &Path, to: &Path, copies: usize) -> Result<(), String> {
    fn io(what: &Path) -> impl Fn(std::io::Error) -> String + '_ {
        move |e| format!("bench: scaling root: {}: {e}", what.display())
    }
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).map_err(io(to))?;
    let (source, to) = (std::fs::canonicalize(source).map_err(io(source))?, std::fs::canonicalize(to).map_err(io(to))?);
    let suite = Suite::open(&source);
    let cases: Vec<PathBuf> = discovery::case_files(&source, &suite.cases_dir)
        .into_iter()
        .filter_map(|f| match f {
            Found::File(p) => Some(p),
            Found::Unreadable(..) => None,
        })
        .collect();
    // Not the case files (copied below under their new names), the VCS and build folders, or the scratch root.
    let keep = |p: &Path| {
        let top = p.parent() == Some(source.as_path()) && p.file_name().is_some_and(|n| n == ".git" || n == "target");
        !top && !to.starts_with(p) && !cases.iter().any(|c| c == p)
    };
    mirror(&source, &to, &keep).map_err(io(&source))?;
    let inside = |p: &Path| to.join(p.strip_prefix(&source).unwrap_or(p));
    let mut copied: Vec<(String, String)> = Vec::new();
    for file in &cases {
        let (Some(stem), Some(dir)) = (file.file_stem().and_then(|s| s.to_str()), file.parent()) else { continue };
        let ext = file.extension().map_or(String::new(), |e| format!(".{}", e.to_string_lossy()));
        for k in 0..copies {
            let copy = inside(dir).join(format!("{stem}-copy{k}{ext}"));
            link_or_copy(file, &copy).map_err(io(file))?;
            copied.push((shown(&source, file), shown(&to, &copy)));
        }
    }
    // Each case of a copy is the case of its source file at the same place (a file's prompts split alike).
    let scratch = Suite::open(&to);
    let (ours, theirs) = (by_file(&loaded(&suite)), by_file(&loaded(&scratch)));
    let own: BTreeMap<&str, Vec<Vec<PathBuf>>> =
        ours.iter().map(|(file, cases)| (file.as_str(), cases.iter().map(|c| suite.files_of(c).own).collect())).collect();
    for (from, copy) in &copied {
        let pairs = own.get(from.as_str()).into_iter().flatten().zip(theirs.get(copy).into_iter().flatten());
        for (own, c_copy) in pairs {
            own_to(own, &scratch.files_of(c_copy).own, Fill::Link).map_err(|e| format!("bench: scaling root: {e}"))?;
        }
    }
    Ok(())
}

/// Each of a case's own files that is made, put where a scratch suite reads the same file (the lists pair up: see
/// [`mobius_conformance::plan::files::CaseFiles::own`]).
fn own_to(from: &[PathBuf], to: &[PathBuf], fill: Fill) -> Result<(), String> {
    if from.len() != to.len() {
        return Err(format!("the scratch root lists {} own files of a case, its source {}", to.len(), from.len()));
    }
    for (from, to) in from.iter().zip(to).filter(|(from, _)| from.is_file()) {
        put(from, to, fill).map_err(|e| format!("{}: {e}", from.display()))?;
    }
    Ok(())
}

/// The cases of a suite that load.
fn loaded(suite: &Suite) -> Vec<Arc<Case>> {
    suite.load_cases().into_iter().flatten().collect()
}

/// Cases by the file that holds them, in the order the suite loads them.
fn by_file(cases: &[Arc<Case>]) -> BTreeMap<String, Vec<Arc<Case>>> {
    let mut out: BTreeMap<String, Vec<Arc<Case>>> = BTreeMap::new();
    for c in cases {
        out.entry(c.file.clone()).or_default().push(c.clone());
    }
    out
}

/// `p` relative to `root`, with `/` separators: a case's `file`.
fn shown(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).to_string_lossy().replace('\\', "/")
}

/// Puts `path` (a file of the repository at `repo`) at the same place under `root`; a path outside the repository,
/// or one that is not there, is left alone (the trial reports those as it would anyway). What the repository
/// reaches through a link is linked, never copied: `mutants` turns the files a mutant rewrites into real files first.
pub fn place(repo: &Path, root: &Path, path: &Path, fill: Fill) -> Result<(), String> {
    let Ok(rel) = path.strip_prefix(repo) else { return Ok(()) };
    if !path.exists() {
        return Ok(());
    }
    let to = root.join(rel);
    if behind_link(repo, rel) {
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        let _ = std::fs::remove_file(&to);
        return std::os::unix::fs::symlink(path, &to).map_err(|e| format!("{}: {e}", to.display()));
    }
    put(path, &to, fill).map_err(|e| format!("{}: {e}", path.display()))
}

/// Whether a component of `rel` (below `repo`) is a symbolic link.
fn behind_link(repo: &Path, rel: &Path) -> bool {
    let mut p = repo.to_path_buf();
    rel.components().any(|c| {
        p.push(c);
        std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink())
    })
}

/// The file `from` at `to`, its folder made.
fn put(from: &Path, to: &Path, fill: Fill) -> std::io::Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match fill {
        Fill::Copy => std::fs::copy(from, to).map(drop),
        Fill::Link => link_or_copy(from, to),
    }
}

/// `from` mirrored into `to`: folders made, files hard-linked (copied across file systems), symbolic links made
/// again as they read; what `keep` refuses is left out.
fn mirror(from: &Path, to: &Path, keep: &dyn Fn(&Path) -> bool) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let kind = e.file_type()?;
        if !keep(&src) {
            continue;
        } else if kind.is_dir() {
            mirror(&src, &dst, keep)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else {
            link_or_copy(&src, &dst)?;
        }
    }
    Ok(())
}

fn link_or_copy(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::hard_link(from, to).or_else(|_| std::fs::copy(from, to).map(|_| ()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mobius_conformance::context::RunContext;
    use mobius_conformance::outcome::Finished;
    use mobius_conformance::paths::workspace_root;
    use mobius_conformance::trial;

    /// Every trial's name and verdict.
    fn verdicts(done: &[Finished]) -> Vec<(String, String)> {
        done.iter().map(|f| (f.name.clone(), f.outcome.status.name().to_string())).collect()
    }

    /// A root laid out from `Suite::files_of` runs its cases' trials as the repository runs them: the same trials with
    /// the same verdicts, under CI's settings, where a file the root lacks fails its trial instead of skipping it.
    /// The cases read every kind of file: an lm-eval task's include chain and data folder (qwen3-tiny-lmeval), the
    /// suite's own task dialect and its documents, int4 and f16 goldens (arith-tiny), a speech corpus and its clips,
    /// stored inputs and encoder features (whisper-tiny).
    #[test]
    fn a_laid_out_root_runs_its_cases_trials_as_the_repository_does() {
        let repo = Suite::open(&workspace_root());
        let names = ["qwen3-tiny-lmeval", "arith-tiny", "whisper-tiny"];
        let all = loaded(&repo);
        let cases: Vec<&Case> =
            names.iter().map(|n| all.iter().find(|c| c.name == *n).unwrap_or_else(|| panic!("no case {n}")).as_ref()).collect();
        let root = std::env::temp_dir().join(format!("mobius-scratch-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        lay_out(&repo, &root, &cases, |_, _| true).unwrap();

        let ctx = RunContext { ci: true, ..RunContext::local() };
        let files: Vec<&str> = cases.iter().map(|c| c.file.as_str()).collect();
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let ours: Vec<_> =
            mobius_conformance::trial::matrix::plan(&repo).into_iter().filter(|t| files.contains(&t.kind.case_file())).collect();
        let want = verdicts(&trial::run_parallel(&repo, &ours, &ctx, threads, |_| {}));
        let scratch = Suite::open(&root);
        let got = trial::run_parallel(&scratch, &mobius_conformance::trial::matrix::plan(&scratch), &ctx, threads, |_| {});
        let _ = std::fs::remove_dir_all(&root);
        assert!(want.len() > 20 && !want.iter().any(|(_, v)| v == "FAIL" || v == "SKIP"), "the repository's own run: {want:#?}");
        let differ: Vec<String> = want
            .iter()
            .zip(&got)
            .filter(|((n, v), f)| *n != f.name || *v != f.outcome.status.name())
            .map(|((n, v), f)| format!("{n} {v} / {} {}: {}", f.name, f.outcome.status.name(), f.outcome.message))
            .collect();
        assert!(differ.is_empty() && want.len() == got.len(), "{} vs {} trials; differ:\n{}", want.len(), got.len(), differ.join("\n"));
    }
}
