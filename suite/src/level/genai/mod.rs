//! The genai level: the package as onnxruntime-genai runs it (its `genai_config.json`, model, tokenizer, processor
//! and greedy generator): tokens against the L5 golden, prefill logits against the L4 golden.

pub mod judge;
pub mod render;

use super::Kind;
use crate::outcome::{FailureKind, Outcome};
use crate::plan::case::Case;
use crate::vocab::{Level, Modality};

pub struct Genai;

impl Kind for Genai {
    fn level(&self) -> Level {
        Level::Genai
    }

    /// Every modality of every case: a package is right only if its own runtime runs it right.
    fn planned(&self, _: &Case, _: Modality) -> bool {
        true
    }

    fn failures(&self) -> &'static [FailureKind] {
        &[
            FailureKind::Logits,
            FailureKind::Tokens,
            FailureKind::Prompt,
            FailureKind::NonFinite,
            FailureKind::VocabSize,
            FailureKind::Refused,
        ]
    }

    fn greedy(&self) -> bool {
        true
    }

    fn measured(&self, o: &Outcome) -> Option<String> {
        render::measured(o)
    }
}
