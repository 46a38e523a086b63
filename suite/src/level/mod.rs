//! The levels, each one module, listed once in [`ALL`]. A level's module holds what makes it that level: which
//! trials a case has of it (its plan rule), the failures its verdicts give (what an xfail entry may state), its
//! golden and how its trial runs and is judged (`mod.rs`, the glue), its pure parts (a golden's format, statistics,
//! the verdict: the other files of its folder) and its words and plots (`render.rs`). Nothing outside a level's
//! module decides anything for it: the plan, the xfail checks, the reports and `xtask` ask the level through
//! [`Kind`].
//!
//! A new level is a folder here, a line in [`ALL`] and its id in `vocab`'s `levels!` list.

pub mod dist;
pub mod encoder;
pub mod gate;
pub mod genai;
pub mod generation;
pub mod localize;
pub mod prefill;
pub mod speech;
pub mod trial;

use crate::error::Result;
use crate::outcome::{FailureKind, Outcome};
use crate::plan::case::Case;
use crate::vocab::{Level, Modality};
use trial::Trial;

/// What a level is, as the rest of the suite asks it.
pub trait Kind: Sync {
    /// The level's id: its name in trial names, case files and the tolerance policy.
    fn level(&self) -> Level;

    /// Whether `case` has a trial of this level for `modality` (for every variant of its matrix).
    fn planned(&self, _case: &Case, _modality: Modality) -> bool {
        false
    }

    /// Whether a gate level has a trial for an accuracy task of the case, given whether the task is a media
    /// (lmms-eval) task; the other levels have none.
    fn planned_for_task(&self, _media: bool) -> bool {
        false
    }

    /// Whether a case file's `level:` field selects this level (mobius' `L4`, `L5`, `L4+L5`); the others follow
    /// from the case's modalities, tasks and blocks.
    fn selected_by_case(&self) -> bool {
        false
    }

    /// The failures this level's verdicts give: what an xfail entry naming it may expect.
    fn failures(&self) -> &'static [FailureKind];

    /// Whether its `logits` failure states the first prompt position out of tolerance (`first_position`).
    fn states_position(&self) -> bool {
        false
    }

    /// Whether a measured failure of it (`logits`, `non_finite`, an encoder's `features`) is localized along the model afterwards
    /// ([`localize`]): its failure then names the first module out of the reference's noise, which an xfail entry may
    /// state (`first_module`).
    fn localizes(&self) -> bool {
        false
    }

    /// Whether it judges a greedy stream, so that a sampled case (`generation.do_sample`) skips it.
    fn greedy(&self) -> bool {
        false
    }

    /// What a failing trial of this level measured, as `xtask mutants` prints it beside the trial that caught a
    /// mutant (`None`: the trial failed without measuring).
    fn measured(&self, _outcome: &Outcome) -> Option<String> {
        None
    }

    /// The level's own statistic of a trial, at most 1 passing: the separation table of `xtask mutants` sets the
    /// smallest a mutant gave against the largest a clean run gave.
    fn score(&self, _outcome: &Outcome) -> Option<f64> {
        None
    }

    /// Whether `xtask mutants` prints a separation table of [`Kind::score`]: its title and its key in the JSON report.
    fn separation(&self) -> Option<Separation> {
        None
    }

    /// Whether `xtask mutants` shows this level's trial of each mutated variant in a column of its own (its header):
    /// its score and verdict, caught or not.
    fn mutant_column(&self) -> Option<&'static str> {
        None
    }

    /// How close to a bug a failure of this level points (lower is closer): the failing trial of the lowest one
    /// names a mutant's catch (an encoder's features, then the prefill logits, then the rest).
    fn locality(&self) -> u8 {
        2
    }

    /// Runs one planned trial of this level to its outcome: placed, fed, run and judged. An error is the trial's
    /// failure (a load error, bad input, a stale golden), which no xfail entry absorbs.
    fn run(&self, t: &Trial) -> Result<Outcome>;

    /// Whether its golden can be made alone (`cargo xtask regen-goldens --level <name>`); the others' are made with
    /// the case's goldens.
    fn regenerates_alone(&self) -> bool {
        false
    }
}

/// A separation table of `xtask mutants`: a level's own statistic on the mutants' failing trials against the clean
/// trials', per model and dtype.
pub struct Separation {
    /// The line printed above the table.
    pub title: &'static str,
    /// The table's key in the JSON report.
    pub key: &'static str,
}

/// Every level, in [`Level`]'s order.
pub static ALL: [&dyn Kind; 9] = [
    &prefill::L4,
    &generation::L5,
    &encoder::VISION,
    &encoder::AUDIO,
    &gate::ACCURACY,
    &genai::Genai,
    &gate::ACCURACY_GENAI,
    &dist::Dist,
    &localize::Localize,
];

/// The level whose id is `level`.
pub fn of(level: Level) -> &'static dyn Kind {
    *ALL.iter().find(|k| k.level() == level).unwrap_or_else(|| panic!("level {level} is missing from level::ALL"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_id_is_in_the_table_once_and_in_order() {
        let ids: Vec<Level> = ALL.iter().map(|k| k.level()).collect();
        assert_eq!(ids, Level::ALL, "level::ALL lists each level of vocab's `levels!` once, in its order");
    }
}
