//! The component levels: a media encoder's features against the reference's, and that they reach the decoder.

use super::{Prepared, Trial};
use crate::error::{Error, Result};
use crate::feed::inputs::Inputs;
use crate::level::encoder::judge::{self, ComponentOutputs, Judged, ReferenceFeatures};
use crate::level::encoder::render;
use crate::outcome::Outcome;
use crate::run::decoder::Decoder;
use crate::run::generate;
use crate::run::pipeline::Pipeline;

impl Trial<'_> {
    pub(super) fn run_component(&self, p: &Prepared, decoder: &Decoder, pipeline: &Pipeline) -> Result<Outcome> {
        // The stored inputs must be the ones the goldens were made from, as L4 and L5 check: a changed image is a
        // stale golden, never an encoder that computes the wrong features.
        if p.paths.prefill.is_file() {
            self.prefill_golden(&p.paths.prefill, p.prompt, &p.inputs)?;
        }
        if p.paths.generation.is_file() {
            self.generation_golden(&p.paths.generation, p.prompt, &p.inputs)?;
        }
        let golden_file = &p.golden_file;
        let bytes = std::fs::read(&p.golden_path).map_err(|e| Error::new(format!("{golden_file}: {e}")))?;
        let features = Inputs::from_safetensors(golden_file, &bytes)?;
        let encoder = crate::level::encoder::of(self.level).ok_or_else(|| Error::new(format!("{}: not an encoder level", self.level)))?;
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
            message: render::message(self.name, &r, golden_file, &self.regenerate()),
            max_abs_diff: Some(r.comparison.max_abs),
            // An encoder's measured failure is never expected; only the runtime's refusal to load it can be
            // (`Outcome::from_error`).
            failure: None,
            judgement: Some(std::sync::Arc::new(Judged { report: r, numbers: d })),
            ..Outcome::new(crate::outcome::Status::Pass, "")
        })
    }
}
