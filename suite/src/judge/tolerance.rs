//! One tolerance policy: per table and dtype, overridable per case, printed in every verdict.
//!
//! The file (`cases/tolerances.yaml`) has mobius' shape (`L4: {float32: {near_tie_margin: ...}}`), so mobius'
//! `default_tolerances.yaml` loads unchanged; unknown fields are errors. Its two logits tables are read here (the
//! prefill table is the file's `L4`, the stream table its `L5`; the levels that judge logits pick theirs); any other
//! section is a level's own numbers, kept as the file states them for that level to read (`Policy::section`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result, bail};
use crate::vocab::{Dtype, Level};

/// The policy's two tables of logits tolerances: one for a prompt's logits, one for a greedy stream's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Logits {
    /// The prefill table, the file's `L4`.
    Prefill,
    /// The stream table, the file's `L5`.
    Stream,
}

impl Logits {
    /// The section the policy file keeps it under.
    pub fn section(self) -> &'static str {
        match self {
            Logits::Prefill => "L4",
            Logits::Stream => "L5",
        }
    }

    fn parse(s: &str) -> Option<Logits> {
        [Logits::Prefill, Logits::Stream].into_iter().find(|t| t.section() == s)
    }
}

impl fmt::Display for Logits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.section())
    }
}

/// The numbers a verdict is judged by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Element-wise logit check: |got - want| <= atol + rtol * |want|.
    pub atol: f64,
    pub rtol: f64,
    /// Reference top1-top2 margins under this are near-ties: an argmax flip there is not a failure.
    pub near_tie_margin: f64,
    /// How many of the reference's top-10 ids must be in the package's top 10.
    pub top10_overlap_min: u32,
    /// Cosine similarity floor of the last-position logits.
    pub cosine_min: f64,
    /// L5: fraction of generated tokens that must equal the golden's, position by position.
    pub min_token_match_ratio: f64,
    /// The noise-floor policy (goldens that record the reference's float32-vs-float64 noise): the package's
    /// |diff| statistics may be at most these multiples of the reference's own noise (each floored at half an ulp
    /// of the largest reference logit), the noise first scaled by `noise_dtype_scale`. In place of atol/rtol.
    pub noise_multiple_p50: f64,
    pub noise_multiple_p99: f64,
    pub noise_multiple_max: f64,
    /// The dtype's unit roundoff over float32's (2^-24): 1 for f32 and int4 kernel parity, 2^13 for f16, 2^16 for bf16.
    pub noise_dtype_scale: f64,
}

/// The suite's own table: `cases/tolerances.yaml`, read into the library at build time, so the built-in numbers and
/// the file cannot disagree. Every (level, dtype) entry states every number; the measurements behind them are that
/// file's comments, the one place they are kept.
const TABLE: &str = include_str!("../../../cases/tolerances.yaml");

fn builtin_table() -> &'static BTreeMap<(Logits, Dtype), Tolerance> {
    static TABLE_PARSED: std::sync::OnceLock<BTreeMap<(Logits, Dtype), Tolerance>> = std::sync::OnceLock::new();
    TABLE_PARSED.get_or_init(|| complete_table("cases/tolerances.yaml", TABLE).unwrap_or_else(|e| panic!("the built-in policy: {e}")))
}

/// The built-in table as a policy: what a suite root's own file leaves out, its levels' own sections included.
fn builtin_policy() -> &'static Policy {
    static POLICY: std::sync::OnceLock<Policy> = std::sync::OnceLock::new();
    POLICY.get_or_init(|| Policy::parse("cases/tolerances.yaml", TABLE).unwrap_or_else(|e| panic!("the built-in policy: {e}")))
}

/// Every logits table x dtype entry of `text`, each with all its numbers (a table with a gap is an error naming it).
pub fn complete_table(file: &str, text: &str) -> Result<BTreeMap<(Logits, Dtype), Tolerance>> {
    let policy = Policy::parse(file, text)?;
    let mut out = BTreeMap::new();
    for level in [Logits::Prefill, Logits::Stream] {
        for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::Int4] {
            let Some(o) = policy.entries.get(&(level, dtype)) else { bail!("{file}: no entry `{level}.{dtype}`") };
            let missing = |name: &str| {
                Error::new(format!("{file}: field `{level}.{dtype}.{name}` is missing; the built-in table states every number"))
            };
            let t = Tolerance {
                atol: o.atol.ok_or_else(|| missing("atol"))?,
                rtol: o.rtol.ok_or_else(|| missing("rtol"))?,
                near_tie_margin: o.near_tie_margin.ok_or_else(|| missing("near_tie_margin"))?,
                top10_overlap_min: o.top10_overlap_min.ok_or_else(|| missing("top10_overlap_min"))?,
                cosine_min: o.cosine_min.ok_or_else(|| missing("cosine_min"))?,
                min_token_match_ratio: o.min_token_match_ratio.ok_or_else(|| missing("min_token_match_ratio"))?,
                noise_multiple_p50: o.noise_multiple_p50.ok_or_else(|| missing("noise_multiple_p50"))?,
                noise_multiple_p99: o.noise_multiple_p99.ok_or_else(|| missing("noise_multiple_p99"))?,
                noise_multiple_max: o.noise_multiple_max.ok_or_else(|| missing("noise_multiple_max"))?,
                noise_dtype_scale: o.noise_dtype_scale.ok_or_else(|| missing("noise_dtype_scale"))?,
            };
            out.insert((level, dtype), t);
        }
    }
    Ok(out)
}

impl Tolerance {
    /// Built-in defaults, what a suite root's policy file leaves out: the suite's own table (`cases/tolerances.yaml`).
    pub fn builtin(table: Logits, dtype: Dtype) -> Tolerance {
        builtin_table()[&(table, dtype)]
    }

    fn apply(&mut self, o: &ToleranceOverride) {
        macro_rules! set { ($($f:ident),*) => { $( if let Some(v) = o.$f { self.$f = v; } )* } }
        set!(
            atol,
            rtol,
            near_tie_margin,
            top10_overlap_min,
            cosine_min,
            min_token_match_ratio,
            noise_multiple_p50,
            noise_multiple_p99,
            noise_multiple_max,
            noise_dtype_scale
        );
    }
}

impl fmt::Display for Tolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "atol={:e} rtol={:e} near_tie_margin={} top10_overlap_min={}/10 cosine_min={} min_token_match_ratio={} \
             noise_multiple p50/p99/max={}/{}/{} noise_dtype_scale={}",
            self.atol,
            self.rtol,
            self.near_tie_margin,
            self.top10_overlap_min,
            self.cosine_min,
            self.min_token_match_ratio,
            self.noise_multiple_p50,
            self.noise_multiple_p99,
            self.noise_multiple_max,
            self.noise_dtype_scale
        )
    }
}

/// Some of the numbers: a policy-file entry or a case's `tolerance:` block.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToleranceOverride {
    #[serde(default)]
    pub atol: Option<f64>,
    #[serde(default)]
    pub rtol: Option<f64>,
    #[serde(default)]
    pub near_tie_margin: Option<f64>,
    #[serde(default)]
    pub top10_overlap_min: Option<u32>,
    #[serde(default)]
    pub cosine_min: Option<f64>,
    #[serde(default)]
    pub min_token_match_ratio: Option<f64>,
    #[serde(default)]
    pub noise_multiple_p50: Option<f64>,
    #[serde(default)]
    pub noise_multiple_p99: Option<f64>,
    #[serde(default)]
    pub noise_multiple_max: Option<f64>,
    #[serde(default)]
    pub noise_dtype_scale: Option<f64>,
    /// mobius' diagnostic thresholds: accepted so its file loads; they gate nothing.
    #[serde(default)]
    pub top10_jaccard_warn: Option<f64>,
    #[serde(default)]
    pub cosine_similarity_warn: Option<f64>,
}

impl ToleranceOverride {
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("atol", self.atol),
            ("rtol", self.rtol),
            ("near_tie_margin", self.near_tie_margin),
            ("noise_multiple_p50", self.noise_multiple_p50),
            ("noise_multiple_p99", self.noise_multiple_p99),
            ("noise_multiple_max", self.noise_multiple_max),
            ("noise_dtype_scale", self.noise_dtype_scale),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                bail!("`{name}` is {v}, expected a finite number >= 0");
            }
        }
        for (name, v) in [("cosine_min", self.cosine_min), ("min_token_match_ratio", self.min_token_match_ratio)] {
            if let Some(v) = v
                && !(-1.0..=1.0).contains(&v)
            {
                bail!("`{name}` is {v}, expected a number in [-1, 1]");
            }
        }
        if let Some(n) = self.top10_overlap_min
            && n > 10
        {
            bail!("`top10_overlap_min` is {n}, expected 0..=10");
        }
        Ok(())
    }
}

/// The whole policy: logits table -> dtype -> numbers, over the built-in defaults, and the levels' own sections.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    entries: BTreeMap<(Logits, Dtype), ToleranceOverride>,
    /// The sections of levels with numbers of their own shape (`dist:`), per dtype as the file states them: the
    /// level reads and checks its own (`Policy::section`).
    sections: BTreeMap<(Level, Dtype), serde_json::Value>,
    /// Where the table came from, for messages.
    pub source: String,
}

impl Policy {
    pub fn builtin() -> Policy {
        Policy { entries: BTreeMap::new(), sections: BTreeMap::new(), source: "built-in defaults".into() }
    }

    /// Reads a policy file (ours or mobius' `default_tolerances.yaml`).
    pub fn load(path: &Path) -> Result<Policy> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| Error::new(format!("{file}: {e}")))?;
        Policy::parse(&file, &text)
    }

    pub fn parse(file: &str, text: &str) -> Result<Policy> {
        let raw: BTreeMap<String, BTreeMap<String, serde_json::Value>> =
            serde_saphyr::from_str(text).map_err(|e| Error::new(format!("{file}: {e}")))?;
        let mut entries = BTreeMap::new();
        let mut sections = BTreeMap::new();
        for (level_name, by_dtype) in raw {
            let level = match Logits::parse(&level_name) {
                Some(l) => l,
                // mobius' L3 (synthetic op parity) has no trials here; it may be present, it is not used.
                None if level_name == "L3" => continue,
                None => {
                    // Another level's own numbers: kept as stated, for that level to read and check.
                    let Some(level) = Level::parse(&level_name) else {
                        bail!(
                            "{file}: unknown level `{level_name}`, expected L4, L5 or a level with numbers of its own ({}); \
                             L3 is accepted and unused",
                            Level::names()
                        );
                    };
                    for (dtype_name, v) in by_dtype {
                        let Some(dtype) = Dtype::parse(&dtype_name) else {
                            bail!("{file}: field `{level_name}.{dtype_name}`: unknown dtype, expected f32, f16, bf16 or int4");
                        };
                        sections.insert((level, dtype), v);
                    }
                    continue;
                }
            };
            for (dtype_name, v) in by_dtype {
                let Some(dtype) = Dtype::parse(&dtype_name) else {
                    bail!("{file}: field `{level_name}.{dtype_name}`: unknown dtype, expected f32, f16, bf16 or int4");
                };
                let o: ToleranceOverride =
                    serde_json::from_value(v).map_err(|e| Error::new(format!("{file}: field `{level_name}.{dtype_name}`: {e}")))?;
                o.validate().map_err(|e| e.context(format!("{file}: field `{level_name}.{dtype_name}`")))?;
                entries.insert((level, dtype), o);
            }
        }
        Ok(Policy { entries, sections, source: file.to_string() })
    }

    /// Keeps only the entries that tighten the built-in numbers, for a policy file written for another suite (mobius'
    /// `default_tolerances.yaml`): its int4 near-tie margin of 1.0 and match ratio of 0.7 would otherwise silently
    /// loosen the suite's own. A case's `tolerance:` (or `min_token_match_ratio`) may still loosen, in the open. The
    /// refused values are named in [`Policy::source`], which every verdict prints; they are also returned.
    pub fn tighten_only(&mut self) -> Vec<String> {
        let mut refused = Vec::new();
        for ((level, dtype), o) in self.entries.iter_mut() {
            let base = Tolerance::builtin(*level, *dtype);
            let at = format!("{level}.{dtype}");
            macro_rules! keep_if {
                ($f:ident, $looser:expr) => {
                    if let Some(v) = o.$f
                        && $looser(v, base.$f)
                    {
                        refused.push(format!("{at}.{}={v} (the suite's is {})", stringify!($f), base.$f));
                        o.$f = None;
                    }
                };
            }
            let bigger = |v: f64, b: f64| v > b;
            let smaller = |v: f64, b: f64| v < b;
            keep_if!(atol, bigger);
            keep_if!(rtol, bigger);
            keep_if!(near_tie_margin, bigger);
            keep_if!(cosine_min, smaller);
            keep_if!(min_token_match_ratio, smaller);
            keep_if!(top10_overlap_min, |v: u32, b: u32| v < b);
        }
        self.source = if refused.is_empty() {
            format!("{} (another suite's file: only values at least as tight as the suite's are taken; all were)", self.source)
        } else {
            format!(
                "{} (another suite's file: only values at least as tight as the suite's are taken; not taken, as looser: {}; \
                 a case's `tolerance:` may loosen)",
                self.source,
                refused.join(", ")
            )
        };
        refused
    }

    /// The numbers a trial is judged by in `table`, with the case's override checked against the policy's own: the
    /// one resolver every logits level goes through (a genai trial calls it for both tables, each checked).
    pub fn for_trial(
        &self,
        level: Logits,
        dtype: Dtype,
        case: Option<&ToleranceOverride>,
        case_min_ratio: Option<f64>,
    ) -> Result<Tolerance> {
        let tol = self.resolve(level, dtype, case, case_min_ratio);
        if case.is_some() {
            check_loosening(&self.resolve(level, dtype, None, case_min_ratio), &tol)?;
        }
        Ok(tol)
    }

    /// A level's own section for `dtype`, as its file states it: this policy's, else the built-in table's; with
    /// the file it comes from, for the level's messages. `None` when neither has one.
    pub fn section(&self, level: Level, dtype: Dtype) -> Option<(&str, &serde_json::Value)> {
        let own = self.sections.get(&(level, dtype)).map(|v| (self.source.as_str(), v));
        own.or_else(|| builtin_policy().sections.get(&(level, dtype)).map(|v| ("cases/tolerances.yaml", v)))
    }

    /// The levels this policy states numbers of their own for.
    pub fn section_levels(&self) -> impl Iterator<Item = Level> + '_ {
        self.sections.keys().map(|(l, _)| *l)
    }

    /// The numbers for one trial: built-in, then the policy file, then the case's overrides.
    pub fn resolve(&self, level: Logits, dtype: Dtype, case: Option<&ToleranceOverride>, case_min_ratio: Option<f64>) -> Tolerance {
        let mut t = Tolerance::builtin(level, dtype);
        if let Some(o) = self.entries.get(&(level, dtype)) {
            t.apply(o);
        }
        if let Some(r) = case_min_ratio {
            t.min_token_match_ratio = r;
        }
        if let Some(o) = case {
            t.apply(o);
        }
        t
    }
}

/// How far a case's `tolerance:` block may loosen the policy: each bound at most this many times looser (atol,
/// rtol, near-tie margin, 1 - cosine floor), the top-10 overlap at most 3 ids lower, the token match ratio at most
/// half the policy's. Looser than that, an override would pass another model; that belongs in the policy file,
/// where it applies to every case and is reviewed as such.
pub const MAX_LOOSENING: f64 = 10.0;

/// Errs naming the field when `case` (the policy with a case's overrides) is looser than `policy` allows.
pub fn check_loosening(policy: &Tolerance, case: &Tolerance) -> Result<()> {
    let ratio = |name: &str, base: f64, got: f64| -> Result<()> {
        let limit = MAX_LOOSENING * base;
        if got > limit {
            bail!(
                "field `tolerance.{name}` is {got:e}, looser than {MAX_LOOSENING}x the policy's {base:e} (limit {limit:e}): \
                 an override that loose would pass another model"
            );
        }
        Ok(())
    };
    ratio("atol", policy.atol, case.atol)?;
    ratio("rtol", policy.rtol, case.rtol)?;
    ratio("near_tie_margin", policy.near_tie_margin, case.near_tie_margin)?;
    // The noise policy's numbers bound L4 at the last position and at every prompt position: the same cap.
    ratio("noise_multiple_p50", policy.noise_multiple_p50, case.noise_multiple_p50)?;
    ratio("noise_multiple_p99", policy.noise_multiple_p99, case.noise_multiple_p99)?;
    ratio("noise_multiple_max", policy.noise_multiple_max, case.noise_multiple_max)?;
    ratio("noise_dtype_scale", policy.noise_dtype_scale, case.noise_dtype_scale)?;
    let floor = 1.0 - MAX_LOOSENING * (1.0 - policy.cosine_min);
    if case.cosine_min < floor {
        bail!(
            "field `tolerance.cosine_min` is {}, under {floor} (1 - {MAX_LOOSENING}x the policy's 1 - {}): an override that loose \
             would pass another model",
            case.cosine_min,
            policy.cosine_min
        );
    }
    let overlap = policy.top10_overlap_min.saturating_sub(3);
    if case.top10_overlap_min < overlap {
        bail!(
            "field `tolerance.top10_overlap_min` is {}, under {overlap} (the policy's {} less 3)",
            case.top10_overlap_min,
            policy.top10_overlap_min
        );
    }
    let ratio_floor = policy.min_token_match_ratio / 2.0;
    if case.min_token_match_ratio < ratio_floor {
        bail!(
            "field `tolerance.min_token_match_ratio` is {}, under {ratio_floor} (half the policy's {})",
            case.min_token_match_ratio,
            policy.min_token_match_ratio
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_table_is_the_file_and_a_gap_in_it_is_an_error() {
        // Every table and dtype resolves from the file's own entries; the f16 noise limit sits where it was measured.
        let t = Tolerance::builtin(Logits::Prefill, Dtype::F16);
        assert_eq!((t.noise_multiple_max, t.noise_dtype_scale, t.top10_overlap_min), (0.8, 8192.0, 8));
        assert_eq!(Tolerance::builtin(Logits::Stream, Dtype::Bf16).min_token_match_ratio, 0.8);
        let gap = TABLE.replacen("noise_dtype_scale: 8192", "", 1);
        let e = complete_table("t.yaml", &gap).unwrap_err().to_string();
        assert!(e.contains("t.yaml") && e.contains("L4.f16.noise_dtype_scale") && e.contains("missing"), "{e}");
        let e = complete_table("t.yaml", "L4: {}\n").unwrap_err().to_string();
        assert!(e.contains("no entry `L4.f32`"), "{e}");
    }

    #[test]
    fn for_trial_checks_an_override_in_every_table_it_resolves() {
        let p = Policy::builtin();
        let loose = ToleranceOverride { atol: Some(1.0), ..Default::default() };
        for table in [Logits::Prefill, Logits::Stream] {
            let e = p.for_trial(table, Dtype::F32, Some(&loose), None).unwrap_err().to_string();
            assert!(e.contains("tolerance.atol"), "{table}: {e}");
        }
        let fine = ToleranceOverride { atol: Some(2e-4), ..Default::default() };
        assert_eq!(p.for_trial(Logits::Prefill, Dtype::F32, Some(&fine), None).unwrap().atol, 2e-4);
    }

    #[test]
    fn another_levels_section_is_kept_for_it_and_an_unknown_one_refused() {
        let p = Policy::parse("t.yaml", "dist:\n  int4: { kld_abs: 1 }\n").unwrap();
        assert_eq!(p.section(Level::Dist, Dtype::Int4), Some(("t.yaml", &serde_json::json!({ "kld_abs": 1 }))));
        assert_eq!(p.section(Level::Dist, Dtype::F32).map(|s| s.0), Some("cases/tolerances.yaml"), "else the built-in one");
        let e = Policy::parse("t.yaml", "L9:\n  f32: {}\n").unwrap_err().to_string();
        assert!(e.contains("t.yaml") && e.contains("unknown level `L9`"), "{e}");
        let e = Policy::parse("t.yaml", "dist:\n  f64: {}\n").unwrap_err().to_string();
        assert!(e.contains("field `dist.f64`: unknown dtype"), "{e}");
    }
}
