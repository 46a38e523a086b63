//! How case files become trial subjects, for mobius' own test data as much as for ours: one subject per prompt,
//! names that stay unique across task folders, and the decisions a case's own fields make before anything runs
//! (its task type, sampling, media inputs nobody stored).

use std::collections::BTreeMap;
use std::path::Path;

use crate::plan::case::Case;
use crate::plan::task_type;
use crate::vocab::Level;

/// One case per prompt. The first keeps the case's name (mobius names its goldens for the case, made from its first
/// prompt); prompt `k` (from 2) becomes `<case>.p<k>`, with goldens of that stem, so every prompt is judged on its own.
/// A speech-to-text case's prompt is its clip: one case per clip, named the same way.
pub fn per_prompt(case: Case) -> Vec<Case> {
    let speech = case.is_speech_to_text() && case.spec.inputs.prompts.is_empty();
    let prompts = if speech { case.spec.inputs.audio.clone() } else { case.spec.inputs.prompts.clone() };
    if prompts.len() <= 1 {
        return vec![case];
    }
    prompts
        .into_iter()
        .enumerate()
        .map(|(i, prompt)| {
            let mut c = case.clone();
            if i > 0 {
                c.name = format!("{}.p{}", case.name, i + 1);
                // The accuracy gate and the distribution level are the model's, not a prompt's: the first case runs
                // them once.
                c.spec.accuracy.clear();
                c.spec.distribution = None;
            }
            match speech {
                true => c.spec.inputs.audio = vec![prompt],
                false => c.spec.inputs.prompts = vec![prompt],
            }
            c
        })
        .collect()
}

/// The first part of each subject's trial names: its name, or `<task folder>/<name>` where two subjects in different
/// task folders share a name (mobius has `causal-lm/gemma-4-12b` and `vision-language/gemma-4-12b`), so that no
/// two trials share a name and `--exact` picks one. Keyed by (task folder, name).
pub fn trial_prefixes<'a>(subjects: impl IntoIterator<Item = (&'a str, &'a str)>) -> BTreeMap<(String, String), String> {
    let subjects: Vec<(&str, &str)> = subjects.into_iter().collect();
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, name) in &subjects {
        *count.entry(name).or_default() += 1;
    }
    subjects
        .iter()
        .map(|&(dir, name)| {
            let prefix = if count[name] > 1 && !dir.is_empty() { format!("{dir}/{name}") } else { name.to_string() };
            ((dir.to_string(), name.to_string()), prefix)
        })
        .collect()
}

/// The task folder of a case file shown as `cases/<folder>/<name>.yaml`.
pub fn task_dir_of(file: &str) -> String {
    let p = Path::new(file.strip_prefix("cases/").unwrap_or(file));
    p.parent().map(|d| d.to_string_lossy().replace('\\', "/")).unwrap_or_default()
}

/// Why `level` of this case does not run, decided from the case alone: a task type the suite does not judge, or a
/// sampled generation where the level judges a greedy stream (`greedy`: no golden to match). `None`: it runs.
pub fn level_skip(case: &Case, level: Level, greedy: bool) -> Option<String> {
    if let Some(why) = task_type::skip_reason(&case.spec.task_type) {
        return Some(format!("{}: {why}", case.file));
    }
    if case.spec.generation.do_sample == Some(true) && greedy {
        return Some(format!(
            "{}: field `generation.do_sample` is true: a sampled stream has no golden to match token by token, so {level} \
             does not run; L4 (the prefill logits, which sampling does not touch) still runs",
            case.file
        ));
    }
    None
}

/// The skip (or, under CI, failure) message for a media trial whose processed inputs are not stored: what they are,
/// and the command that makes them.
pub fn missing_inputs(case: &Case, shown: &str) -> String {
    let make = if case.spec.reference.is_some() {
        format!("make them with `cargo xtask regen-goldens --case {} --force`", case.name)
    } else {
        format!(
            "the case names no `reference` (Hugging Face folder of {}), so nothing here can run its processor: add \
             `reference:` to {} and run `cargo xtask regen-goldens --case {} --force` (the processor runs once; the \
             goldens are then remade from that reference too)",
            case.spec.model_id, case.file, case.name
        )
    };
    format!(
        "no stored processor inputs at {shown}: a media trial feeds the Hugging Face processor's output (chat template, \
         expanded media tokens, pixels, mel features) and mobius ships none; {make}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colliding_names_get_their_task_folder() {
        let p = trial_prefixes([("causal-lm", "gemma-4-12b"), ("vision-language", "gemma-4-12b"), ("causal-lm", "qwen3")]);
        assert_eq!(p[&("causal-lm".into(), "gemma-4-12b".into())], "causal-lm/gemma-4-12b");
        assert_eq!(p[&("vision-language".into(), "gemma-4-12b".into())], "vision-language/gemma-4-12b");
        assert_eq!(p[&("causal-lm".into(), "qwen3".into())], "qwen3");
        assert_eq!(task_dir_of("cases/causal-lm/x.yaml"), "causal-lm");
        assert_eq!(task_dir_of("cases/x.yaml"), "");
    }
}
