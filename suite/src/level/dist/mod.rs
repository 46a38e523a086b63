//! The distribution level: the package's next-token distributions over the case's teacher-forced corpus against the
//! fp32 reference's, for every dtype alike, in llama.cpp's `--kl-divergence` terms.

pub mod corpus;
pub mod golden;
pub mod judge;
pub mod render;
pub mod stats;

use self::judge::DistReport;
use super::{Kind, Separation};
use crate::outcome::{FailureKind, Outcome};
use crate::plan::case::Case;
use crate::vocab::{Level, Modality};

pub struct Dist;

impl Kind for Dist {
    fn level(&self) -> Level {
        Level::Dist
    }

    /// Once per case with a `distribution:` block: on its text trials, or for a speech-to-text case (whose one
    /// modality is audio) on its audio trials. A case split per prompt runs it on its first prompt only.
    fn planned(&self, case: &Case, modality: Modality) -> bool {
        let here = if case.is_speech_to_text() { Modality::Audio } else { Modality::Text };
        case.spec.distribution.is_some() && modality == here
    }

    fn failures(&self) -> &'static [FailureKind] {
        &[FailureKind::Distribution, FailureKind::NonFinite, FailureKind::VocabSize, FailureKind::Refused]
    }

    fn regenerates_alone(&self) -> bool {
        true
    }

    fn measured(&self, o: &Outcome) -> Option<String> {
        render::measured(o)
    }

    fn score(&self, o: &Outcome) -> Option<f64> {
        judge::of(o).map(DistReport::score)
    }

    fn separation(&self) -> Option<Separation> {
        Some(Separation {
            title: "dist separation (dist score: its larger KL statistic over its limit, <= 1 passes)",
            key: "dist_separation",
        })
    }

    fn mutant_column(&self) -> Option<&'static str> {
        Some("dist (score, verdict)")
    }
}
