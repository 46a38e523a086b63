//! What every regen job writes through: a regenerated file against the stored one (UNCHANGED, SKIPPED, SAVED),
//! `--force` and `--dry-run`, the atomic write, the counts a run ends with, and what the reference's raw outputs must
//! say of themselves (their format, the versions that made them).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use mobius_conformance::judge::golden::{self, Provenance};
use mobius_conformance::paths::relative;
use mobius_conformance::plan::case::Case;
use mobius_conformance::vocab::Dtype;

use super::compare::Diff;

/// What a golden file holds, for the counts at the end of a run: its name there, and where among them its line
/// comes (by `order`, then by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Kind {
    pub order: u8,
    pub name: &'static str,
}

/// What became of one golden file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Unchanged,
    NoiseOnly,
    Changed,
    HeldBack,
    Saved,
}

/// Per kind of golden: how many were unchanged, noise only, changed (over the noise), held back, saved.
#[derive(Debug, Default)]
pub struct Tally(BTreeMap<Kind, [usize; 5]>);

impl Tally {
    pub fn add(&mut self, kind: Kind, outcome: Outcome) {
        let i = match outcome {
            Outcome::Unchanged => 0,
            Outcome::NoiseOnly => 1,
            Outcome::Changed => 2,
            Outcome::HeldBack => 3,
            Outcome::Saved => 4,
        };
        self.0.entry(kind).or_default()[i] += 1;
    }

    /// One line per kind, for the end of a run.
    pub fn lines(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|(k, [u, n, c, h, s])| {
                format!("counted    {}: {u} unchanged, {n} noise only, {c} changed, {h} held back, {s} saved", k.name)
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A regenerated file against the stored one, in the words its line gives.
#[derive(Debug, Clone, PartialEq)]
pub enum Standing {
    /// Nothing is stored yet.
    New,
    /// Byte for byte the same.
    Same,
    /// Moved by less than the reference's noise: kept unless `--force`; how far it moved.
    Noise(String),
    /// Differs: kept unless `--force`; where, when that is known.
    Changed(Option<String>),
}

impl From<Option<Diff>> for Standing {
    fn from(diff: Option<Diff>) -> Standing {
        match diff {
            None => Standing::New,
            Some(Diff::Same) => Standing::Same,
            Some(d) if d.is_change() => Standing::Changed(Some(d.to_string())),
            Some(d) => Standing::Noise(d.to_string()),
        }
    }
}

/// A golden's smallest reference top1-top2 margin, and the loosest near-tie margin of the dtypes it judges.
#[derive(Debug, Clone, PartialEq)]
pub struct Margin {
    /// `<case> (<modality>, <dtype> golden)`.
    pub what: String,
    pub min: f64,
    /// Where: 0 is the prefill's last position, k the k-th generated token's step.
    pub step: usize,
    pub steps: usize,
    pub near_tie: Option<(f64, Dtype)>,
    /// Every position's margin: the prefill's last, then each generated step's.
    pub each: Vec<f64>,
    /// The tokens the reference generated.
    pub tokens: Vec<i64>,
}

impl Margin {
    pub fn near_a_tie(&self) -> bool {
        self.near_tie.is_some_and(|(m, _)| self.min < m)
    }
}

/// One run's writes: `--force`, `--dry-run` and `--from-raw` as given, what became of each file, and the goldens'
/// margins.
#[derive(Debug, Default)]
pub struct Ledger {
    force: bool,
    dry_run: bool,
    /// The folder of raw outputs kept earlier that this run reads instead of running the reference.
    pub from_raw: Option<PathBuf>,
    tally: Tally,
    pub margins: Vec<Margin>,
}

impl Ledger {
    pub fn new(force: bool, dry_run: bool, from_raw: Option<PathBuf>) -> Ledger {
        Ledger { force, dry_run, from_raw, ..Ledger::default() }
    }

    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Writes (or not) one file given how it stands against the stored one: UNCHANGED when equal or within noise,
    /// SKIPPED when it differs more without `--force`, else SAVED (atomically; not written on a dry run).
    pub fn write_one(&mut self, kind: Kind, out: &Path, shown: &str, bytes: &[u8], standing: Standing) -> Result<String, String> {
        let (line, outcome, write) = self.verdict(shown, &standing, false);
        if write {
            golden::write_atomic(out, bytes).map_err(|e| e.to_string())?;
        }
        self.tally.add(kind, outcome);
        Ok(line)
    }

    /// Writes (or not) a case's goldens, which change together or not at all: one that differs (by more than the
    /// reference's noise) without `--force` holds back the others, and the ones written go to disk in one step.
    pub fn write_together(&mut self, root: &Path, files: Vec<(Kind, PathBuf, Vec<u8>, Standing)>) -> Result<Vec<String>, String> {
        let held_back = !self.force && files.iter().any(|(.., s)| matches!(s, Standing::Changed(_)));
        let mut lines = Vec::new();
        let mut to_write = Vec::new();
        for (kind, path, bytes, standing) in files {
            let (line, outcome, write) = self.verdict(&relative(root, &path), &standing, held_back);
            if write {
                to_write.push((path, bytes));
            }
            self.tally.add(kind, outcome);
            lines.push(line);
        }
        golden::write_all_atomic(&to_write).map_err(|e| format!("{e} (none of this case's goldens was changed)"))?;
        Ok(lines)
    }

    /// A file's line, its outcome, and whether to write it.
    fn verdict(&self, shown: &str, standing: &Standing, held_back: bool) -> (String, Outcome, bool) {
        match standing {
            Standing::Same => (format!("UNCHANGED  {shown}"), Outcome::Unchanged, false),
            Standing::Noise(how) if !self.force => (format!("UNCHANGED  {shown} ({how})"), Outcome::NoiseOnly, false),
            Standing::Changed(at) if !self.force => {
                let at = at.as_ref().map(|a| format!(", at {a}")).unwrap_or_default();
                (format!("SKIPPED    {shown} (differs from the reference now{at}; pass --force to overwrite)"), Outcome::Changed, false)
            }
            _ if held_back => (
                format!("SKIPPED    {shown} (another golden of this case differs; pass --force to write them together)"),
                Outcome::HeldBack,
                false,
            ),
            _ if self.dry_run => (format!("SAVED      {shown} (dry run: not written)"), Outcome::Saved, false),
            _ => (format!("SAVED      {shown}"), Outcome::Saved, true),
        }
    }
}

/// The raw outputs' metadata field `format` against the version this xtask reads; a mismatch says which side is
/// older and how to get a matching pair.
pub fn check_format(path: &Path, got: Option<&str>, want: &str, writer: &str) -> Result<(), String> {
    match got {
        Some(g) if g == want => Ok(()),
        got => Err(format!(
            "{}: metadata field `format` is {}, this xtask reads {want:?}: the raw outputs come from another version of {writer} \
             (rerun the reference without --from-raw, or use the xtask of the same checkout)",
            path.display(),
            got.map_or_else(|| "missing".to_string(), |g| format!("{g:?}"))
        )),
    }
}

/// Where a reference run came from: the case's weights, run in float32 on the CPU by the versions the raw outputs
/// name (`meta`).
pub fn provenance(root: &Path, case: &Case, meta: &HashMap<String, String>) -> Provenance {
    let m = |k: &str| meta.get(k).cloned().unwrap_or_default();
    Provenance {
        reference: relative(root, &case.reference_dir(root).unwrap_or_default()),
        transformers: m("transformers"),
        torch: m("torch"),
        dtype: "float32".into(),
        device: "cpu".into(),
        weights: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFILL: Kind = Kind { order: 0, name: "L4 logits and positions" };

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mobius-ledger-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_golden_that_differs_holds_back_the_others_of_its_case_unless_forced() {
        let dir = scratch("together");
        let (a, b) = (dir.join("a.json"), dir.join("b.json"));
        let files = || {
            vec![
                (PREFILL, a.clone(), b"a".to_vec(), Standing::Changed(Some("x: y".into()))),
                (PREFILL, b.clone(), b"b".to_vec(), Standing::New),
            ]
        };
        let mut ledger = Ledger::new(false, false, None);
        let lines = ledger.write_together(&dir, files()).unwrap();
        assert_eq!(lines[0], "SKIPPED    a.json (differs from the reference now, at x: y; pass --force to overwrite)");
        assert_eq!(lines[1], "SKIPPED    b.json (another golden of this case differs; pass --force to write them together)");
        assert!(!a.exists() && !b.exists(), "a held-back golden was written");
        assert_eq!(
            ledger.tally().lines(),
            ["counted    L4 logits and positions: 0 unchanged, 0 noise only, 1 changed, 1 held back, 0 saved"]
        );
        let mut forced = Ledger::new(true, false, None);
        assert_eq!(forced.write_together(&dir, files()).unwrap(), ["SAVED      a.json", "SAVED      b.json"]);
        assert_eq!((std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap()), (b"a".to_vec(), b"b".to_vec()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn noise_is_kept_a_dry_run_writes_nothing_and_a_change_without_a_place_says_so() {
        let dir = scratch("one");
        let out = dir.join("c.json");
        let mut ledger = Ledger::new(false, true, None);
        let noise = Standing::Noise("noise only: by 1e-7".into());
        assert_eq!(ledger.write_one(PREFILL, &out, "c.json", b"c", noise).unwrap(), "UNCHANGED  c.json (noise only: by 1e-7)");
        assert_eq!(ledger.write_one(PREFILL, &out, "c.json", b"c", Standing::New).unwrap(), "SAVED      c.json (dry run: not written)");
        let changed = ledger.write_one(PREFILL, &out, "c.json", b"c", Standing::Changed(None)).unwrap();
        assert_eq!(changed, "SKIPPED    c.json (differs from the reference now; pass --force to overwrite)");
        assert!(!out.exists(), "a dry run wrote");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
