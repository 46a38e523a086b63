//! What the suite does with each of mobius' `task_type`s: run it, or say why not.
//!
//! The suite's levels judge a decoder-only language model: the prompt's next-token logits (L4), the greedy
//! tokens with the KV cache (L5), and the package as onnxruntime-genai runs it. A model of another kind (an encoder, a
//! classifier, an encoder-decoder, a drafter that needs its target's hidden states) would be judged as something it
//! is not, so its trials skip and name the task type. A task type outside mobius' schema is an error in the case.

/// How the suite treats a task type. `speech-to-text` runs through the encoder-decoder pipeline: log-mel features
/// into the package's encoder, its states into the decoder at every step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// A decoder-only language model (with media, through the package's embedding session): every level runs.
    Runs,
    /// Not a decoder-only language model: its trials skip with this reason.
    Unsupported(&'static str),
}

/// Every task type mobius' `cases/schema.json` (commit 78437cd) allows, with the suite's decision.
pub const TASK_TYPES: &[(&str, Support)] = &[
    ("text-generation", Support::Runs),
    ("image-text-to-text", Support::Runs),
    ("speech-language", Support::Runs),
    ("audio-ctc", Support::Unsupported(CTC)),
    ("ctc-asr", Support::Unsupported(CTC)),
    ("audio-feature-extraction", Support::Unsupported(ENCODER)),
    ("feature-extraction", Support::Unsupported(ENCODER)),
    ("image-classification", Support::Unsupported(CLASSIFIER)),
    ("object-detection", Support::Unsupported(DENSE)),
    ("image-segmentation", Support::Unsupported(DENSE)),
    ("depth-estimation", Support::Unsupported(DENSE)),
    ("image-to-image", Support::Unsupported(DENSE)),
    ("seq2seq", Support::Unsupported(SEQ2SEQ)),
    // Whisper-style encoder + decoder packages: the encoder-decoder pipeline (`run::pipeline::encoder_decoder`).
    ("speech-to-text", Support::Runs),
    ("image-to-text", Support::Unsupported(SEQ2SEQ)),
    ("audio-to-audio", Support::Unsupported(AUDIO_OUT)),
    ("codec", Support::Unsupported(AUDIO_OUT)),
    ("dflash-draft", Support::Unsupported(DRAFTER)),
    ("qwen35-mtp", Support::Unsupported(DRAFTER)),
    ("gemma4-assistant", Support::Unsupported(DRAFTER)),
    (
        "phi4mm-multimodal",
        Support::Unsupported(
            "Phi-4-multimodal's package switches LoRA adapters per modality and its processor's inputs are not the \
             Gemma-4 layout the suite's media pipeline feeds (pixel_values + pixel_position_ids, input_features + mask)",
        ),
    ),
    (
        "fun-asr-speech-language",
        Support::Unsupported("Fun-ASR's audio adaptor and CTC decoder sit outside the genai decoder package the suite drives"),
    ),
];

const CTC: &str = "a CTC speech recognizer: its output is per-frame character logits, not a decoder's next-token logits";
const ENCODER: &str = "an encoder: its output is hidden states, not next-token logits, and it generates nothing";
const CLASSIFIER: &str = "a classifier: its output is class logits over labels, not next-token logits, and it generates nothing";
const DENSE: &str = "a dense vision model (boxes, masks, depth or pixels): it has no next-token logits and generates no tokens";
const SEQ2SEQ: &str = "an encoder-decoder model: the suite drives decoder-only packages, and its decoder needs the \
                       encoder's cross-attention states";
const AUDIO_OUT: &str = "it produces audio codes, not text tokens";
const DRAFTER: &str = "a speculative-decoding drafter: it runs on its target model's hidden states and shared KV cache \
                       (mobius replays them from `*_inputs.npz`), which the suite does not feed";

/// The decision for `task_type`, or `None` when mobius' schema does not know it.
pub fn support(task_type: &str) -> Option<Support> {
    TASK_TYPES.iter().find(|(t, _)| *t == task_type).map(|(_, s)| *s)
}

/// Why a case of this task type does not run here (`None` when it runs, or is unknown: case loading refuses those).
pub fn skip_reason(task_type: &str) -> Option<String> {
    match support(task_type)? {
        Support::Runs => None,
        Support::Unsupported(why) => Some(format!(
            "task_type `{task_type}` is not run by this suite: {why}; its trials would judge it as a decoder-only \
             language model, which it is not"
        )),
    }
}

/// The list for messages: `text-generation, image-text-to-text, ...`.
pub fn known() -> String {
    TASK_TYPES.iter().map(|(t, _)| *t).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schema_task_type_has_one_decision() {
        let mut names: Vec<&str> = TASK_TYPES.iter().map(|(t, _)| *t).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), TASK_TYPES.len());
        assert_eq!(names.len(), 22, "mobius' schema lists 22 task types");
        assert_eq!(skip_reason("text-generation"), None);
        let why = skip_reason("feature-extraction").unwrap();
        assert!(why.contains("`feature-extraction`") && why.contains("encoder"), "{why}");
        assert_eq!(support("text-to-speech"), None);
    }
}
