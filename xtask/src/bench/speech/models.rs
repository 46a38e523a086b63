//! The speech section's models and clips, as their case files state them.

use std::path::{Path, PathBuf};

use mobius_conformance::feed::inputs::Inputs;
use mobius_conformance::plan::case::{Case, SpeechTask};
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::vocab::{Dtype, Ep, Modality};
use serde_json::Value;

use super::flac::flac_seconds;
use crate::bench::report::shown;

/// The speech-to-text cases the `speech` section measures: the committed fixture (always there, so the section
/// runs without the real tier) and the real tier's Whisper models, skipped until `cargo xtask real` builds them and
/// their goldens are made.
pub(super) const SPEECH_CASES: [&str; 3] =
    ["cases/speech-to-text/whisper-tiny.yaml", "cases/real/whisper-tiny-en.yaml", "cases/real/whisper-base.yaml"];

/// One Whisper model of the `speech` section, as its case file states it: the default-f32 package, the Hugging Face
/// folder, how greedy decoding is set, and one clip per case the suite splits the file into.
pub(super) struct SpeechModel {
    pub(super) file: String,
    pub(super) package: PathBuf,
    pub(super) hf: PathBuf,
    /// The folder of the `generation_config.json` whose suppression generate() applies: the case's tokenizer
    /// folder, as the L5 trial reads it, else the package.
    pub(super) generation: PathBuf,
    pub(super) build: Option<String>,
    pub(super) max_new: usize,
    pub(super) eos: Option<i64>,
    pub(super) language: Option<String>,
    pub(super) task: Option<&'static str>,
    pub(super) clips: Vec<SpeechClip>,
}

/// One clip: the per-clip case (`whisper-tiny-en`, `whisper-tiny-en.p2`, ...), its golden inputs (`input_features`,
/// and `input_ids`, the forced prefix) and its audio file.
pub(super) struct SpeechClip {
    pub(super) case: String,
    pub(super) inputs: PathBuf,
    pub(super) audio: PathBuf,
}

impl SpeechModel {
    pub(super) fn of(suite: &Suite, case: &Case) -> Result<SpeechModel, String> {
        let (root, file) = (&suite.root, &case.file);
        let package = case
            .variants(root)
            .into_iter()
            .find(|v| v.ep == Ep::Default && v.dtype == Dtype::F32)
            .and_then(|v| v.package)
            .ok_or_else(|| format!("{file}: its matrix names no default-f32 package"))?
            .resolve("genai_config.json", crate::hub()?)
            .map_err(|e| e.to_string())?;
        let hf = case.reference_dir(root).ok_or_else(|| format!("{file}: no `reference` (the Hugging Face folder generate() runs)"))?;
        let generation = match case.tokenizer_location(root) {
            Some(l) => l.resolve("generation_config.json", crate::hub()?).map_err(|e| e.to_string())?,
            None => package.clone(),
        };
        let g = &case.spec.generation;
        let task = g.task.map(SpeechTask::name);
        Ok(SpeechModel {
            file: file.clone(),
            package,
            hf,
            generation,
            build: case.spec.build_command.clone(),
            max_new: case.max_new_tokens() as usize,
            eos: g.eos_token_id,
            language: g.lang.clone(),
            task,
            clips: Vec::new(),
        })
    }

    /// Why the model cannot be measured yet, if it cannot: its package or weights are not built, or a clip's goldens
    /// are not made. The fixture's Hugging Face weights are derived from its package (as the gate's are), when the
    /// Python side is to run.
    pub(super) fn missing(&self, skip_python: bool) -> Result<Option<String>, String> {
        let build = self.build.as_deref().unwrap_or("cargo xtask fixtures");
        if !self.package.join("genai_config.json").is_file() {
            return Ok(Some(format!("{} is not built (`{build}`)", shown(&self.package))));
        }
        if !skip_python && !self.hf.join("model.safetensors").is_file() {
            match crate::regen::missing_derived(&self.hf)? {
                Some((_, name)) => crate::regen::fixtures(&["--hf-only".into(), "--only".into(), name])?,
                None => return Ok(Some(format!("{} has no model.safetensors (`{build}`)", shown(&self.hf)))),
            }
        }
        let absent: Vec<&SpeechClip> = self.clips.iter().filter(|c| !c.inputs.is_file()).collect();
        // One clip: its own case's name; several: the glob over the model's clips (`<case>`, `<case>.p2`, ...).
        let glob = match &absent[..] {
            [] => return Ok(None),
            [one] => one.case.clone(),
            _ => format!("{}*", self.clips[0].case),
        };
        let more = if absent.len() > 1 { format!(" and {} more", absent.len() - 1) } else { String::new() };
        Ok(Some(format!("{}{more} not made yet (`cargo xtask regen-goldens --case '{glob}'`)", shown(&absent[0].inputs))))
    }
}

/// The section's models, in [`SPEECH_CASES`]' order, each with its clips in the order the suite splits them.
pub(super) fn speech_models(suite: &Suite) -> Result<Vec<SpeechModel>, String> {
    let mut models: Vec<SpeechModel> = Vec::new();
    for loaded in suite.load_cases() {
        let case = match loaded {
            Ok(c) if SPEECH_CASES.contains(&c.file.as_str()) => c,
            Err(b) if SPEECH_CASES.contains(&b.file.as_str()) => return Err(b.error.to_string()),
            _ => continue,
        };
        let audio = case.spec.inputs.audio.first().ok_or_else(|| format!("{}: no `inputs.audio` clip", case.file))?;
        let modality = case.modalities().first().copied().unwrap_or(Modality::Audio);
        let clip = SpeechClip {
            case: case.name.clone(),
            inputs: suite.golden_paths(&case, modality, Dtype::F32).inputs,
            audio: suite.root.join(audio),
        };
        match models.iter_mut().find(|m| m.file == case.file) {
            Some(m) => m.clips.push(clip),
            None => models.push(SpeechModel { clips: vec![clip], ..SpeechModel::of(suite, &case)? }),
        }
    }
    models.sort_by_key(|m| SPEECH_CASES.iter().position(|f| *f == m.file));
    Ok(models)
}

/// A clip ready to run: its stored inputs, read once (feature extraction and reading are timed on neither side),
/// and the seconds of audio its features hold.
pub(super) struct LoadedClip {
    pub(super) case: String,
    pub(super) file: String,
    pub(super) audio: String,
    pub(super) inputs: Inputs,
    pub(super) audio_seconds: f64,
}

impl LoadedClip {
    pub(super) fn load(m: &SpeechModel, c: &SpeechClip) -> Result<LoadedClip, String> {
        let file = shown(&c.inputs);
        let bytes = std::fs::read(&c.inputs).map_err(|e| format!("{file}: {e}"))?;
        let inputs = Inputs::from_safetensors(&file, &bytes).map_err(|e| e.to_string())?;
        let frames = inputs
            .get("input_features")
            .and_then(|t| t.shape.last().copied())
            .ok_or_else(|| format!("{file}: no tensor `input_features` (the log-mel features)"))?;
        let window = frames as f64 * feature_hop_seconds(&m.hf)?;
        // Whisper hears at most its window (the fixture's is 4 s): audio past it is not processed, so not counted.
        let audio_seconds = flac_seconds(&c.audio)?.min(window);
        let audio = c.audio.file_name().map_or_else(|| shown(&c.audio), |n| n.to_string_lossy().into_owned());
        Ok(LoadedClip { case: c.case.clone(), file, audio, inputs, audio_seconds })
    }
}

/// Seconds per feature frame: `hop_length / sampling_rate` of the model's preprocessor_config.json.
fn feature_hop_seconds(hf: &Path) -> Result<f64, String> {
    let path = hf.join("preprocessor_config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    match (v["hop_length"].as_f64(), v["sampling_rate"].as_f64()) {
        (Some(hop), Some(rate)) if rate > 0.0 => Ok(hop / rate),
        _ => Err(format!("{}: no `hop_length` and `sampling_rate` (how long a feature frame is)", path.display())),
    }
}
