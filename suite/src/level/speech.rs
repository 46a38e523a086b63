//! How a speech-to-text case's clips reach its package, for the levels that feed clips (the speech gate, the
//! distribution level): the features, the forced prefix, the suppressed ids.

use crate::error::{Error, Result};
use crate::feed::generation_config::{self, GenerationConfig};
use crate::feed::inputs::{Inputs, NamedTensor, TensorData};
use crate::level::trial::Trial;
use crate::plan::case::SpeechTask;
use crate::run::generate::Suppress;

/// How a speech-to-text case's clips reach its package: the suite's own Whisper feature extractor (the model's
/// preprocessor_config.json), the decoder prefix `generate()` forces, and the ids it suppresses. Shared by the
/// speech gate and the distribution level.
pub struct SpeechFeed {
    pub mel: crate::feed::log_mel::Config,
    pub prefix: Vec<i64>,
    pub suppress: Suppress,
}

impl SpeechFeed {
    /// `what` names who needs the model's files, for the error when one is missing.
    pub fn new(t: &Trial, what: &str) -> Result<SpeechFeed> {
        let dir = |name: &str| -> Result<std::path::PathBuf> {
            t.case
                .tokenizer_location(&t.suite.root)
                .ok_or_else(|| Error::new(format!("{}: {what} needs the model's {name} (`tokenizer` or `reference`)", t.case.file)))?
                .resolve(name, &t.ctx.hub)
        };
        let cfg_dir = dir("preprocessor_config.json")?;
        let mel = crate::feed::log_mel::Config::load(&cfg_dir.join("preprocessor_config.json"))?;
        let gen_dir = dir("generation_config.json")?;
        let speech = &t.case.spec.generation;
        let prefix = generation_config::whisper_prefix(&gen_dir, speech.lang.as_deref(), speech.task.map(SpeechTask::name))?;
        let c = GenerationConfig::load(&gen_dir, &format!("{} ({what})", t.case.file))?;
        Ok(SpeechFeed { mel, prefix, suppress: Suppress { always: c.suppress_tokens, at_begin: c.begin_suppress_tokens } })
    }
}

/// One clip's inputs: its log-mel `input_features` and the forced prefix as `input_ids`.
pub fn speech_inputs(mel: &crate::feed::log_mel::Config, prefix: &[i64], samples: &[f32], rate: u32, what: &str) -> Result<Inputs> {
    let features = mel.features(samples, rate, what)?;
    let ids = NamedTensor { name: "input_ids".into(), shape: vec![1, prefix.len() as i64], data: TensorData::I64(prefix.to_vec()) };
    Ok(Inputs { tensors: vec![features, ids] })
}
