//! The pinned protocol of a multimodal gate task: how the question and its media reach the model, where the
//! generation stops and what of it is the answer. A case states it; the reference's baseline records the one it
//! ran under, and a package is only ever judged under the same one (a mismatch refuses the trial), because a
//! protocol difference moves scores with nothing wrong in the model (lmms-eval's `"\n\n"` stop cost a two-paragraph
//! model 9 OCRBench points).

use serde::{Deserialize, Serialize};

use crate::error::{Result, bail};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Protocol {
    /// How the question reaches the model.
    pub prompt: PromptFormat,
    /// A system turn before the question (chat templates only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// How an image reaches the processor: the dataset's bytes as given, re-encoded as PNG, or as JPEG at a quality.
    #[serde(default)]
    pub media: MediaRule,
    /// The answer is the text after the last occurrence of this marker (a thinking channel's end), else all of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_after: Option<String>,
    /// Generate to the token budget and score the whole output, past lmms-eval's stop list.
    #[serde(default)]
    pub ignore_stop_strings: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptFormat {
    /// The tokenizer's chat template: one user turn holding the media, then the question; the generation prompt.
    ChatTemplate,
    /// No text: Whisper's decoder prefix as `generate()` forces it (start, language and task when multilingual,
    /// no timestamps). lmms-eval's question is not fed.
    WhisperPrefix,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaRule {
    #[default]
    AsGiven,
    Png,
    Jpeg {
        quality: u8,
    },
}

impl Protocol {
    /// Errors name `what` (the case file and its field).
    pub fn validate(&self, what: &str, audio: bool) -> Result<()> {
        if let MediaRule::Jpeg { quality } = self.media
            && !(1..=100).contains(&quality)
        {
            bail!("{what}: field `media.jpeg.quality` is {quality}, expected 1 to 100");
        }
        if audio && self.media != MediaRule::AsGiven {
            bail!("{what}: field `media` is {:?}; audio reaches the model as the dataset gives it (`as_given`)", self.media);
        }
        if audio && self.prompt != PromptFormat::WhisperPrefix {
            bail!("{what}: field `prompt` is `chat_template` for an audio task run by an encoder-decoder; use `whisper_prefix`");
        }
        if self.system_prompt.is_some() && self.prompt == PromptFormat::WhisperPrefix {
            bail!("{what}: field `system_prompt` has no place in `whisper_prefix` (Whisper reads no text)");
        }
        if self.answer_after.as_deref() == Some("") {
            bail!("{what}: field `answer_after` is empty");
        }
        Ok(())
    }

    /// The stop list a generation runs under: the task's (lmms-eval's default included), or none.
    pub fn stops<'a>(&self, task_until: &'a [String]) -> &'a [String] {
        if self.ignore_stop_strings { &[] } else { task_until }
    }

    /// The answer in an output: after the last `answer_after` marker when stated and present.
    pub fn answer<'a>(&self, output: &'a str) -> &'a str {
        match self.answer_after.as_deref().and_then(|m| output.rfind(m).map(|i| i + m.len())) {
            Some(at) => &output[at..],
            None => output,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accuracy::answer::cut_at_stop;

    fn p() -> Protocol {
        Protocol {
            prompt: PromptFormat::ChatTemplate,
            system_prompt: None,
            media: MediaRule::AsGiven,
            answer_after: None,
            ignore_stop_strings: false,
        }
    }

    #[test]
    fn the_cut_is_at_the_first_stop_of_any_and_empty_stops_never_cut() {
        let until = vec!["\n\n".to_string(), "END".to_string(), String::new()];
        assert_eq!(cut_at_stop("a\nb\n\nc END", &until), "a\nb");
        assert_eq!(cut_at_stop("aENDb\n\n", &until), "a");
        assert_eq!(cut_at_stop("nothing", &until), "nothing");
        assert_eq!(p().stops(&until).len(), 3);
        assert!(Protocol { ignore_stop_strings: true, ..p() }.stops(&until).is_empty());
    }

    #[test]
    fn the_answer_follows_the_last_marker() {
        let q = Protocol { answer_after: Some("<channel|>".into()), ..p() };
        assert_eq!(q.answer("think<channel|>x<channel|>42"), "42");
        assert_eq!(q.answer("42"), "42");
        assert_eq!(p().answer("a<channel|>b"), "a<channel|>b");
    }

    #[test]
    fn a_protocol_that_cannot_hold_is_refused_by_field() {
        let audio = Protocol { prompt: PromptFormat::WhisperPrefix, ..p() };
        assert!(audio.validate("c.yaml", true).is_ok());
        let e = Protocol { media: MediaRule::Png, ..audio.clone() }.validate("c.yaml", true).unwrap_err().to_string();
        assert!(e.contains("c.yaml: field `media`"), "{e}");
        assert!(p().validate("c.yaml", true).unwrap_err().to_string().contains("`prompt`"));
        let e = Protocol { media: MediaRule::Jpeg { quality: 0 }, ..p() }.validate("c.yaml", false).unwrap_err().to_string();
        assert!(e.contains("quality"), "{e}");
        assert!(Protocol { system_prompt: Some("s".into()), ..audio }.validate("c.yaml", true).is_err());
    }
}
