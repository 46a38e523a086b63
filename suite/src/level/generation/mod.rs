//! L5, greedy generation with the KV cache: the tokens against the reference's, the first divergence classified, a
//! teacher-forced re-run, and every decode step's logits at the reference's stored ids.

pub mod judged;
pub mod render;

use super::Kind;
use crate::outcome::{FailureKind, Outcome};
use crate::plan::case::Case;
use crate::vocab::{Level, Modality};

pub struct L5;

impl Kind for L5 {
    fn level(&self) -> Level {
        Level::L5
    }

    fn planned(&self, case: &Case, _: Modality) -> bool {
        case.levels().contains(&Level::L5)
    }

    fn selected_by_case(&self) -> bool {
        true
    }

    fn failures(&self) -> &'static [FailureKind] {
        &[FailureKind::Tokens, FailureKind::StepLogits, FailureKind::NonFinite, FailureKind::VocabSize, FailureKind::Refused]
    }

    fn greedy(&self) -> bool {
        true
    }

    fn regenerates_alone(&self) -> bool {
        true
    }

    fn measured(&self, o: &Outcome) -> Option<String> {
        render::measured(o)
    }
}
