//! How far the mutants land from the clean variants on a level's own statistic, per model and dtype.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use mobius_conformance::outcome::{Finished, Status};
use mobius_conformance::vocab::TrialId;

use super::run::MutantRun;
use mobius_conformance::level::Kind;

/// Per model and dtype: the smallest score a mutant's trial of the level measured over the largest a clean trial of
/// it measured (both the level's own statistic). `model_of` maps a case name to its model.
pub(super) fn separation(runs: &[MutantRun], clean: &[Finished], model_of: &dyn Fn(&str) -> String, of: &dyn Kind) -> String {
    let key = |name: &str| -> Option<(String, String)> {
        match TrialId::parse(name)? {
            TrialId::Conformance { case, dtype, level, .. } if level == of.level() => Some((model_of(&case), dtype.to_string())),
            _ => None,
        }
    };
    type Extreme = Option<(f64, String)>;
    let mut table: BTreeMap<(String, String), (Extreme, Extreme)> = BTreeMap::new();
    for f in clean.iter().filter(|f| !f.outcome.is_fail() && f.outcome.status != Status::ExpectedFailure) {
        if let (Some(k), Some(sc)) = (key(&f.name), of.score(&f.outcome)) {
            let e = &mut table.entry(k).or_default().0;
            if e.as_ref().is_none_or(|(v, _)| sc > *v) {
                *e = Some((sc, f.name.clone()));
            }
        }
    }
    // A mutant's score counts where its level caught it: a decode-only bug leaves the prefill exact by design (L5
    // judges it).
    for r in runs {
        for f in r.failed() {
            if let (Some(k), Some(sc)) = (key(&f.name), of.score(&f.outcome)) {
                let e = &mut table.entry(k).or_default().1;
                if e.as_ref().is_none_or(|(v, _)| sc < *v) {
                    *e = Some((sc, r.mutant.name.to_string()));
                }
            }
        }
    }
    let mut s = String::from(
        "| model | dtype | largest clean score (trial) | smallest mutant score (mutant) | separation |\n|---|---|---|---|---|\n",
    );
    for ((model, dtype), (c, m)) in &table {
        let show = |v: &Option<(f64, String)>| v.as_ref().map_or("-".to_string(), |(x, n)| format!("{x:.4} (`{n}`)"));
        let sep = match (c, m) {
            (Some((c, _)), Some((m, _))) if *c > 0.0 => format!("{:.1}x", m / c),
            _ => "-".into(),
        };
        let _ = writeln!(s, "| {model} | {dtype} | {} | {} | {sep} |", show(c), show(m));
    }
    s
}
