//! The accuracy gate's levels: a benchmark task's accuracy on the package against the reference's baseline, with
//! paired statistics (`accuracy`), and a media task's items through onnxruntime-genai's own processor and generator
//! (`accuracy_genai`).

pub mod judged;
pub mod render;

use super::Kind;
use crate::outcome::{FailureKind, Outcome};
use crate::vocab::Level;

/// A gate level: one trial per accuracy task of a case, on every variant.
pub struct Gate {
    level: Level,
    /// Only media (lmms-eval) tasks have it.
    media_only: bool,
}

pub static ACCURACY: Gate = Gate { level: Level::Accuracy, media_only: false };
pub static ACCURACY_GENAI: Gate = Gate { level: Level::AccuracyGenai, media_only: true };

impl Kind for Gate {
    fn level(&self) -> Level {
        self.level
    }

    fn planned_for_task(&self, media: bool) -> bool {
        media || !self.media_only
    }

    fn failures(&self) -> &'static [FailureKind] {
        &[FailureKind::Accuracy, FailureKind::NonFinite, FailureKind::Refused]
    }

    fn measured(&self, o: &Outcome) -> Option<String> {
        render::measured(o)
    }
}
