//! The encoder levels: a media encoder's features against the reference's, and that they reach the decoder. One
//! module for both towers, told apart by [`Encoder`].

pub mod judge;
pub mod render;

use self::judge::{ComponentOutputs, Judged, ReferenceFeatures};
use super::Kind;
use crate::error::{Error, Result};
use crate::feed::inputs::Inputs;
use crate::judge::tolerance::Logits;
use crate::level::trial::{Prepared, Trial};
use crate::outcome::{Failure, FailureKind, Outcome};
use crate::plan::case::Case;
use crate::run::decoder::Decoder;
use crate::run::generate;
use crate::run::pipeline::Pipeline;
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

    /// A failing encoder is localized along its tower (and the model after it).
    fn localizes(&self) -> bool {
        true
    }

    fn run(&self, t: &Trial) -> Result<Outcome> {
        match t.open(|g| g.features.clone(), Logits::Prefill)? {
            Ok(o) => run_component(self, t, &o.p, &o.decoder, &o.pipeline),
            Err(end) => Ok(end),
        }
    }
}

fn run_component(encoder: &Encoder, t: &Trial, p: &Prepared, decoder: &Decoder, pipeline: &Pipeline) -> Result<Outcome> {
    // The stored inputs must be the ones the goldens were made from, as L4 and L5 check: a changed image is a
    // stale golden, never an encoder that computes the wrong features.
    if p.paths.prefill.is_file() {
        t.prefill_golden(&p.paths.prefill, p.prompt, &p.inputs)?;
    }
    if p.paths.generation.is_file() {
        t.generation_golden(&p.paths.generation, p.prompt, &p.inputs)?;
    }
    let golden_file = &p.golden_file;
    let bytes = std::fs::read(&p.golden_path).map_err(|e| Error::new(format!("{golden_file}: {e}")))?;
    let features = Inputs::from_safetensors(golden_file, &bytes)?;
    let tensor = encoder.features;
    let want = ReferenceFeatures::read(&features, tensor, golden_file)?;
    let prefill = |pl: &Pipeline| generate::prefill(decoder, pl, p.inputs.input_ids());
    let run = pipeline.component_outputs(encoder.media, encoder.component, prefill)?;
    let got = ComponentOutputs { shape: &run.shape, features: &run.features, with: &run.with, zeroed: &run.zeroed };
    let r = judge::judge(encoder.component, encoder.features, &got, &want, &p.tol);
    let kept = want.kept(&run.shape, &run.features).unwrap_or_default();
    let d = judge::numbers(r.component, &kept, want.values, r.cols, r.tolerance.atol, r.moved);
    Ok(Outcome {
        status: r.verdict.into(),
        message: render::message(t.name, &r, golden_file, &t.regenerate()),
        max_abs_diff: Some(r.comparison.max_abs),
        // An encoder's measured failure is never expected (no xfail entry states `features`); only the runtime's
        // refusal to load it can be (`Outcome::from_error`).
        failure: (r.verdict == crate::judge::verdict::Verdict::Fail)
            .then(|| Box::new(Failure { max_abs_diff: Some(r.comparison.max_abs), ..Failure::of(FailureKind::Features) })),
        judgement: Some(std::sync::Arc::new(Judged { report: r, numbers: d })),
        ..Outcome::new(crate::outcome::Status::Pass, "")
    })
}
