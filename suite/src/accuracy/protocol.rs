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
    /// The reasoning blocks removed before scoring, as `[start, end]` pairs, the way lmms-eval 0.7.3 removes them
    /// (`api/reasoning.py`, `strip_reasoning_tags`): its command line's default, `<think>`...`</think>` and
    /// `<analysis>`...`</analysis>`, unless the case states others; `[]` removes none.
    #[serde(default = "lmms_eval_reasoning_tags", skip_serializing_if = "is_lmms_eval_default")]
    pub reasoning_tags: Vec<[String; 2]>,
}

/// lmms-eval 0.7.3's `--reasoning_tags` default: `[["<think>", "</think>"], ["<analysis>", "</analysis>"]]`.
pub fn lmms_eval_reasoning_tags() -> Vec<[String; 2]> {
    [["<think>", "</think>"], ["<analysis>", "</analysis>"]].map(|p| p.map(str::to_string)).to_vec()
}

fn is_lmms_eval_default(tags: &Vec<[String; 2]>) -> bool {
    *tags == lmms_eval_reasoning_tags()
}

/// lmms-eval 0.7.3's `strip_reasoning_tags`: for each pair in order, every `start`...`end` block removed (the first
/// start, then the first end at or after it; a start with no end after it stops that pair), then, where the end tag
/// remains without its start (a chat template that opened the block in the prompt), only what follows the last end
/// tag kept; the result stripped (Python's `str.strip()`). Case-sensitive, as lmms-eval is.
pub fn strip_reasoning(text: &str, pairs: &[[String; 2]]) -> String {
    let mut result = text.to_string();
    for [start_tag, end_tag] in pairs {
        while result.contains(start_tag.as_str()) && result.contains(end_tag.as_str()) {
            let start = result.find(start_tag.as_str()).expect("contained");
            let Some(end) = result[start..].find(end_tag.as_str()).map(|e| start + e) else { break };
            result = format!("{}{}", &result[..start], &result[end + end_tag.len()..]);
        }
        if result.contains(end_tag.as_str())
            && !result.contains(start_tag.as_str())
            && let Some((_, after)) = result.rsplit_once(end_tag.as_str())
        {
            result = after.to_string();
        }
    }
    crate::feed::python_str::py_strip(&result).to_string()
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
        // An empty tag is in every string: lmms-eval's loop would never end on it.
        if let Some(i) = self.reasoning_tags.iter().position(|[a, b]| a.is_empty() || b.is_empty()) {
            bail!("{what}: field `reasoning_tags[{i}]` has an empty tag; give both tags, or `reasoning_tags: []` to remove none");
        }
        Ok(())
    }

    /// The stop list a generation runs under: the task's (lmms-eval's default included), or none.
    pub fn stops<'a>(&self, task_until: &'a [String]) -> &'a [String] {
        if self.ignore_stop_strings { &[] } else { task_until }
    }

    /// What a task's scorer is handed for an output cut at its stop list: its reasoning blocks removed as lmms-eval's
    /// command line removes them, the answer after `answer_after`, stripped as lmms-eval's
    /// `ConfigurableTask.process_results` strips every generation.
    pub fn scored(&self, output: &str) -> String {
        let reasoned = strip_reasoning(output, &self.reasoning_tags);
        crate::feed::python_str::py_strip(self.answer(&reasoned)).to_string()
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
            reasoning_tags: lmms_eval_reasoning_tags(),
        }
    }

    /// lmms-eval 0.7.3's own `strip_reasoning_tags` with its command line's default pairs, on each input (its answers
    /// recorded from the 0.7.3 wheel).
    #[test]
    fn reasoning_blocks_go_as_lmms_eval_removes_them() {
        let cases = [
            ("<think>a</think> Paris", "Paris"),
            ("Paris", "Paris"),
            ("x<think>a</think>y<think>b</think>z", "xyz"),
            ("<think>unclosed Paris", "<think>unclosed Paris"),
            ("reasoning</think>\nParis ", "Paris"),
            ("<THINK>a</THINK>Paris", "<THINK>a</THINK>Paris"),
            ("<analysis>q</analysis><think>t</think> 42\n", "42"),
            ("a</think>b</think>c", "c"),
            ("</think>x<think>y", "</think>x<think>y"),
            ("<think>a<think>b</think>c</think>d", "d"),
            (" \t<think>é</think>\u{a0}Ré\u{2028}", "Ré"),
        ];
        for (input, want) in cases {
            assert_eq!(strip_reasoning(input, &lmms_eval_reasoning_tags()), want, "{input:?}");
        }
        // The default is lmms-eval's, kept out of a written protocol; `[]` removes none; an empty tag is refused.
        let mut off = p();
        assert_eq!(off.scored(" <think>t</think> Paris\n"), "Paris");
        assert!(!serde_json::to_string(&off).unwrap().contains("reasoning_tags"));
        off.reasoning_tags = vec![];
        assert_eq!(off.scored(" <think>t</think> Paris\n"), "<think>t</think> Paris");
        off.reasoning_tags = vec![["<think>".into(), String::new()]];
        assert!(off.validate("case.yaml", false).unwrap_err().to_string().contains("`reasoning_tags[0]` has an empty tag"));
        let parsed: Protocol = serde_saphyr::from_str("{ prompt: chat_template, reasoning_tags: [] }").unwrap();
        assert!(parsed.reasoning_tags.is_empty());
        let parsed: Protocol = serde_saphyr::from_str("{ prompt: chat_template }").unwrap();
        assert_eq!(parsed.reasoning_tags, lmms_eval_reasoning_tags());
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
