//! A task's requests through the model's chat template, with lm-evaluation-harness 0.4.13's semantics
//! (`--apply_chat_template`, `--fewshot_as_multiturn`, `--system_instruction`; `ConfigurableTask.fewshot_context`,
//! `build_qa_turn`, `multiturn_to_singleturn`, `construct_requests` and `HFLM.apply_chat_template`):
//!
//! - the system message is `maybe_delimit(system_instruction, description, fewshot_delimiter)`, when not empty;
//! - each few-shot example is a user turn (`doc_to_text`, followed by `target_delimiter` when it has an answer) and an
//!   assistant turn (the answer, followed by `fewshot_delimiter`); the document is a last user turn;
//! - with `fewshot_as_multiturn` the turns are the conversation; without it, every turn after the system message is
//!   joined into one user message (each turn's text and its delimiter, the last one's delimiter dropped);
//! - the conversation is rendered with the generation prompt; a template that raises (a Jinja `TemplateError`) is
//!   rendered again without the system message, as lm-eval retries;
//! - a multiple-choice continuation is the bare choice (no `target_delimiter` under a chat template);
//! - the tokens follow lm-eval's `hf` model: no BOS where the rendered text already starts with it.

use super::Task;
use crate::accuracy::doc::Doc;
use crate::accuracy::lmeval;
use crate::error::{Error, Result};
use crate::feed::chat_template::{ChatTemplate, Render, RenderError, messages_json};
use crate::feed::python_str::py_is_space;

/// How a task is put through a chat template (lm-eval's command-line options).
#[derive(Debug, Clone)]
pub struct Chat {
    pub template: ChatTemplate,
    pub fewshot_as_multiturn: bool,
    pub system_instruction: Option<String>,
}

/// One turn as lm-eval's `Message`: its role, its content, and the delimiter its text is followed by.
struct Turn {
    role: &'static str,
    content: String,
    delimiter: String,
}

/// lm-eval's `maybe_delimit`: `prefix + delimiter + suffix`, without the delimiter where either side has
/// whitespace at the join; an empty side gives the other.
pub fn maybe_delimit(prefix: &str, suffix: &str, delimiter: &str) -> String {
    if prefix.is_empty() {
        return suffix.to_string();
    }
    if suffix.is_empty() {
        return prefix.to_string();
    }
    let spaced = prefix.chars().last().is_some_and(py_is_space) || suffix.chars().next().is_some_and(py_is_space);
    if spaced { format!("{prefix}{suffix}") } else { format!("{prefix}{delimiter}{suffix}") }
}

impl Task {
    /// The context of `doc` through the chat template (lm-eval's `fewshot_context` with a chat template).
    pub fn chat_context(&self, doc: &Doc, chat: &Chat) -> Result<String> {
        let s = &self.spec;
        let description = match s.description.contains("{{") {
            true => lmeval::fill_template(&s.description, doc).map_err(|e| e.context(format!("{}: field `description`", self.file)))?,
            false => s.description.clone(),
        };
        let mut turns = Vec::new();
        let system = maybe_delimit(chat.system_instruction.as_deref().unwrap_or_default(), &description, &s.fewshot_delimiter);
        if !system.is_empty() {
            turns.push(Turn { role: "system", content: system, delimiter: String::new() });
        }
        for (i, d) in self.fewshot_pool(Some(doc))?.into_iter().take(s.num_fewshot).enumerate() {
            let what = || format!("{}: few-shot document {i}", self.file);
            let answer = s.target_text(d).map_err(|e| e.context(what()))?;
            let has_answer = !answer.is_empty();
            let delimiter = if has_answer { s.target_delimiter.clone() } else { String::new() };
            turns.push(Turn { role: "user", content: s.text(d).map_err(|e| e.context(what()))?, delimiter });
            if has_answer {
                turns.push(Turn { role: "assistant", content: answer, delimiter: s.fewshot_delimiter.clone() });
            }
        }
        turns.push(Turn { role: "user", content: s.text(doc)?, delimiter: String::new() });
        let messages = if chat.fewshot_as_multiturn { turns } else { single_turn(turns) };
        let how = Render { add_generation_prompt: true, ..Render::default() };
        match chat.template.render(&json(&messages), &how) {
            Err(RenderError::Template(_)) => {
                let without: Vec<Turn> = messages.into_iter().filter(|t| t.role != "system").collect();
                chat.template.render(&json(&without), &how)
            }
            other => other,
        }
        .map_err(|e| Error::new(format!("{}: the chat template: {e}", self.file)))
    }
}

/// lm-eval's `multiturn_to_singleturn`: a leading system turn kept, every other turn joined into one user turn.
fn single_turn(mut turns: Vec<Turn>) -> Vec<Turn> {
    let system = (turns.first().is_some_and(|t| t.role == "system")).then(|| turns.remove(0));
    if let Some(last) = turns.last_mut() {
        last.delimiter.clear();
    }
    let text: String = turns.iter().map(|t| format!("{}{}", t.content, t.delimiter)).collect();
    system.into_iter().chain([Turn { role: "user", content: text, delimiter: String::new() }]).collect()
}

/// The turns as the JSON list transformers is handed.
fn json(turns: &[Turn]) -> String {
    messages_json(turns.iter().map(|t| (t.role, t.content.as_str())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maybe_delimit_skips_the_delimiter_at_whitespace() {
        assert_eq!(maybe_delimit("Be brief.", "Questions:\n\n", "\n\n"), "Be brief.\n\nQuestions:\n\n");
        assert_eq!(maybe_delimit("Be brief. ", "Q", "\n\n"), "Be brief. Q");
        assert_eq!(maybe_delimit("", "Q", "\n\n"), "Q");
        assert_eq!(maybe_delimit("P", "", "\n\n"), "P");
    }
}
