//! One speech-to-text run each side: the suite's runner on a clip, and Hugging Face's generate() served; and where
//! their tokens part.

use std::path::PathBuf;
use std::time::Instant;

use mobius_conformance::feed::generation_config::GenerationConfig;
use mobius_conformance::feed::package::{GenaiConfig, package_model};
use mobius_conformance::run::decoder::Decoder;
use mobius_conformance::run::generate::{self, Suppress};
use mobius_conformance::run::pipeline::Pipeline;
use mobius_conformance::run::runtime::Provider;
use mobius_conformance::run::{sessions, timing};

use super::models::{LoadedClip, SpeechModel};
use crate::bench::python::Served;

/// The suite's own speech-to-text run, as its L5 trial makes it: the package's encoder on the stored features
/// (`Pipeline::build`), then `greedy_with` from the stored prefix with generate()'s suppression, stopping after
/// EOS. Sessions are made before any run is timed, as the suite shares them across trials.
pub(super) struct SuiteSpeech {
    pub(super) package: PathBuf,
    pub(super) decoder: std::sync::Arc<Decoder>,
    pub(super) suppress: Suppress,
    pub(super) eos: Vec<i64>,
    pub(super) max_new: usize,
}

impl SuiteSpeech {
    pub(super) fn new(m: &SpeechModel) -> Result<SuiteSpeech, String> {
        let err = |e: mobius_conformance::error::Error| e.to_string();
        let decoder = sessions::decoder(&package_model(&m.package).map_err(err)?, Provider::Cpu).map_err(err)?;
        let g = GenerationConfig::load(&m.generation, &format!("{} (the bench's speech section)", m.file)).map_err(err)?;
        let eos = match m.eos {
            Some(e) => vec![e],
            None => GenaiConfig::load(&m.package).map_err(err)?.eos_token_ids,
        };
        let suppress = Suppress { always: g.suppress_tokens, at_begin: g.begin_suppress_tokens };
        Ok(SuiteSpeech { package: m.package.clone(), decoder, suppress, eos, max_new: m.max_new })
    }

    /// One run on a clip, timed whole (encoder and decoding): its seconds, the part of them inside ONNX Runtime's
    /// run calls, and the tokens chosen, EOS included.
    pub(super) fn run(&self, clip: &LoadedClip) -> Result<(f64, f64, Vec<i64>), String> {
        let err = |e: mobius_conformance::error::Error| e.to_string();
        let (t0, r0) = (Instant::now(), timing::run_seconds());
        let pipeline = Pipeline::build(&self.package, &self.decoder, Provider::Cpu, &clip.inputs, &clip.file).map_err(err)?;
        let prefix = clip.inputs.input_ids();
        let run =
            generate::greedy_with(&self.decoder, &pipeline, prefix, self.max_new, &self.eos, None, &[], &self.suppress).map_err(err)?;
        Ok((t0.elapsed().as_secs_f64(), timing::run_seconds() - r0, run.chosen()))
    }
}

/// `bench.py speech-serve`: Hugging Face's generate() on the model's clips, loaded, warm and run once per request.
pub(super) fn serve_whisper(m: &SpeechModel) -> Result<Served, String> {
    let inputs: Vec<String> = m.clips.iter().map(|c| c.inputs.to_string_lossy().into_owned()).collect();
    let mut args: Vec<String> = ["speech-serve", "--hf", &m.hf.to_string_lossy(), "--inputs", &inputs.join(",")].map(String::from).to_vec();
    args.extend(["--max-new-tokens".into(), m.max_new.to_string(), "--threads".into(), "1".into()]);
    if let Some(l) = &m.language {
        args.extend(["--language".into(), l.clone()]);
    }
    if let Some(t) = m.task {
        args.extend(["--task".into(), t.into()]);
    }
    Served::spawn(&args)
}

/// The first step where two token streams differ (the shorter one's end when one is the other's start).
pub(super) fn first_difference(a: &[i64], b: &[i64]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y).or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())))
}

/// Where the suite's stream and generate()'s first differ. generate() drops the EOS that ends a Whisper transcript,
/// which the suite's stream keeps (it stops after it, as the goldens hold it), so a suite stream ending in EOS is
/// compared without it.
pub(super) fn differs_from_generate(ours: &[i64], theirs: &[i64], eos: &[i64]) -> Option<usize> {
    let ours = match ours.split_last() {
        Some((last, rest)) if eos.contains(last) => rest,
        _ => ours,
    };
    first_difference(ours, theirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_difference_is_the_first_unequal_step_or_the_shorter_end() {
        assert_eq!(first_difference(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_difference(&[1, 2, 3], &[1, 9, 3]), Some(1));
        assert_eq!(first_difference(&[1, 2], &[1, 2, 3]), Some(2));
        assert_eq!(first_difference(&[], &[4]), Some(0));
    }

    #[test]
    fn generate_s_stream_is_the_suite_s_without_its_closing_eos() {
        let eos = [50256];
        assert_eq!(differs_from_generate(&[6756, 1364, 50256], &[6756, 1364], &eos), None);
        assert_eq!(differs_from_generate(&[6756, 1364], &[6756, 1364], &eos), None, "stopped by the length limit");
        assert_eq!(differs_from_generate(&[6756, 1364, 50256], &[6756, 1364, 50256], &eos), Some(2));
        assert_eq!(differs_from_generate(&[6756, 13, 50256], &[6756, 1364], &eos), Some(1));
    }
}
