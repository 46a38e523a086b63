//! L4, prefill: the last prompt position's logits over the vocabulary, and every stored prompt position's logits,
//! against the reference.

pub mod judged;
pub mod render;

use super::{Kind, Separation};
use crate::outcome::{FailureKind, Outcome};
use crate::plan::case::Case;
use crate::vocab::{Level, Modality};

pub struct L4;

impl Kind for L4 {
    fn level(&self) -> Level {
        Level::L4
    }

    fn planned(&self, case: &Case, _: Modality) -> bool {
        case.levels().contains(&Level::L4)
    }

    fn selected_by_case(&self) -> bool {
        true
    }

    fn failures(&self) -> &'static [FailureKind] {
        &[FailureKind::Logits, FailureKind::NonFinite, FailureKind::VocabSize, FailureKind::Refused]
    }

    fn states_position(&self) -> bool {
        true
    }

    fn regenerates_alone(&self) -> bool {
        true
    }

    fn measured(&self, o: &Outcome) -> Option<String> {
        render::measured(o)
    }

    fn score(&self, o: &Outcome) -> Option<f64> {
        judged::of(o)?.report.noise.as_ref().map(|n| n.score)
    }

    fn separation(&self) -> Option<Separation> {
        Some(Separation { title: "separation (noise score: the tolerance policy's statistic, <= 1 passes)", key: "separation" })
    }

    fn locality(&self) -> u8 {
        1
    }
}
