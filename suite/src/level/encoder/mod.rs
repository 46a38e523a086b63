//! The encoder levels: a media encoder's features against the reference's, and that they reach the decoder. One
//! module for both towers, told apart by [`Encoder`].

pub mod judge;
pub mod render;

use super::Kind;
use crate::outcome::{FailureKind, Outcome};
use crate::plan::case::Case;
use crate::vocab::{Level, Modality};

/// One media encoder: its level, the package's model role and the features tensor it makes.
pub struct Encoder {
    pub level: Level,
    /// The genai_config.json role of its model (`vision_encoder`, `audio_encoder`).
    pub component: &'static str,
    /// The features tensor it outputs, and the reference stores (`image_features`, `audio_features`).
    pub features: &'static str,
    /// The medium it encodes.
    pub media: Modality,
    /// The modalities whose trials go through it.
    modalities: &'static [Modality],
}

pub static VISION: Encoder = Encoder {
    level: Level::VisionEncoder,
    component: "vision_encoder",
    features: "image_features",
    media: Modality::Image,
    modalities: &[Modality::Image, Modality::ImageAudio],
};

pub static AUDIO: Encoder = Encoder {
    level: Level::AudioEncoder,
    component: "audio_encoder",
    features: "audio_features",
    media: Modality::Audio,
    modalities: &[Modality::Audio, Modality::ImageAudio],
};

/// The encoder of an encoder level.
pub fn of(level: Level) -> Option<&'static Encoder> {
    [&VISION, &AUDIO].into_iter().find(|e| e.level == level)
}

impl Kind for Encoder {
    fn level(&self) -> Level {
        self.level
    }

    fn planned(&self, _: &Case, modality: Modality) -> bool {
        self.modalities.contains(&modality)
    }

    // An encoder's measured failure is never expected; only the runtime's refusal to load it can be.
    fn failures(&self) -> &'static [FailureKind] {
        &[FailureKind::Refused]
    }

    fn measured(&self, o: &Outcome) -> Option<String> {
        render::measured(o)
    }

    fn locality(&self) -> u8 {
        0
    }
}
