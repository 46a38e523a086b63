//! The chat-template renderer against transformers 5.14.1, byte for byte: every tokenizer x conversation of
//! `fixtures/chat/corpus.json` as `xtask/reference/chat_corpus.py` recorded it (`tests/data/chat/corpus.json`; made
//! again by `cargo xtask reference-data --only chat-templates`). A rendering must be the same text; a failure must be of the
//! same class (a TemplateError, which lm-eval retries without the system message; transformers' ValueError; another
//! Python error). A tokenizer whose template uses a construct the suite does not render must be refused, naming it.

use std::path::{Path, PathBuf};

use mobius_conformance::feed::chat_template::{ChatTemplate, Civil, Render, RenderError};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn read<T: serde::de::DeserializeOwned>(rel: &str) -> T {
    let p = root().join(rel);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

/// The first character where two texts part, and both from a few characters before it.
fn first_difference(want: &str, got: &str) -> String {
    let at = want.chars().zip(got.chars()).take_while(|(a, b)| a == b).count();
    let from = at.saturating_sub(20);
    let part = |s: &str| s.chars().skip(from).take(60).collect::<String>();
    format!("first difference at character {at}:\n  transformers: {:?}\n  the suite:    {:?}", part(want), part(got))
}

#[test]
fn the_renderer_gives_transformers_text_byte_for_byte_over_the_corpus() {
    let spec: Value = read("fixtures/chat/corpus.json");
    let golden: Value = read("tests/data/chat/corpus.json");
    // The messages as written, their keys in order (Python's dicts keep it; `serde_json::Value` sorts them).
    let ordered: minijinja::Value = read("fixtures/chat/corpus.json");
    let messages = |i: usize| -> String {
        let conv = ordered.get_attr("conversations").unwrap().get_item(&minijinja::Value::from(i)).unwrap();
        serde_json::to_string(&conv.get_attr("messages").unwrap()).unwrap()
    };
    let now = spec["now"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect::<Vec<_>>();
    let now = Civil { year: now[0] as i32, month: now[1], day: now[2], hour: now[3], minute: now[4], second: now[5] };
    let results = golden["results"].as_array().unwrap();
    let (mut compared, mut rendered, mut absent, mut refused_as_stated) = (0, 0, Vec::new(), 0);
    let mut failures = Vec::new();
    for t in spec["tokenizers"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let dir = root().join(t["tokenizer"].as_str().unwrap());
        if !dir.is_dir() {
            // The real tier's tokenizers live under the cache (`cargo xtask real`; CI builds it).
            assert!(t["tokenizer"].as_str().unwrap().starts_with("target/real/"), "{name}: {} is missing", dir.display());
            absent.push(name.to_string());
            continue;
        }
        let template = match t.get("template").and_then(Value::as_str) {
            Some(file) => ChatTemplate::from_file(&dir, &root().join(file)),
            None => ChatTemplate::load(&dir, None),
        };
        for (i, conv) in spec["conversations"].as_array().unwrap().iter().enumerate() {
            let cname = conv["name"].as_str().unwrap();
            let want = results.iter().find(|r| r["tokenizer"] == name && r["conversation"] == cname).unwrap_or_else(|| {
                panic!("tests/data/chat/corpus.json has no {name} x {cname}: cargo xtask reference-data --only chat-templates")
            });
            let how = Render {
                add_generation_prompt: conv["add_generation_prompt"].as_bool().unwrap(),
                continue_final_message: conv["continue_final_message"].as_bool().unwrap(),
                extra: conv.get("extra").and_then(Value::as_object).cloned().unwrap_or_default(),
                now: Some(now),
            };
            let got = match &template {
                Ok(t) => t.render(&messages(i), &how),
                Err(e) => Err(RenderError::Refused(e.to_string())),
            };
            compared += 1;
            let at = format!("{name} x {cname}");
            if let Some(construct) = t.get("suite_refuses").and_then(Value::as_str) {
                match &got {
                    Err(RenderError::Unsupported(m)) if m.contains(construct) && m.contains(t["template"].as_str().unwrap()) => {
                        refused_as_stated += 1
                    }
                    Err(e) if want.get("error").is_some() && !matches!(e, RenderError::Unsupported(_)) => {}
                    other => failures.push(format!("{at}: expected a refusal naming {construct:?} and the template, got {other:?}")),
                }
                continue;
            }
            match (want.get("rendered").and_then(Value::as_str), want["error"].as_str(), &got) {
                (Some(w), _, Ok(g)) if w == g => rendered += 1,
                (Some(w), _, Ok(g)) => failures.push(format!("{at}: {}", first_difference(w, g))),
                (Some(_), _, Err(e)) => failures.push(format!("{at}: transformers renders it, the suite fails: {e:?}")),
                (None, Some(class), Err(e)) => {
                    let same = matches!(
                        (class, e),
                        ("template", RenderError::Template(_)) | ("refused", RenderError::Refused(_)) | ("python", RenderError::Python(_))
                    );
                    if !same {
                        failures.push(format!("{at}: transformers raises {class} ({}), the suite {e:?}", want["message"]));
                    }
                }
                (None, _, Ok(g)) => failures.push(format!("{at}: transformers raises ({}), the suite renders {g:?}", want["message"])),
                (None, None, Err(_)) => failures.push(format!("{at}: the golden has neither `rendered` nor `error`")),
            }
        }
    }
    assert!(failures.is_empty(), "{} of {compared} renderings differ from transformers':\n{}", failures.len(), failures.join("\n"));
    // The fixtures' own are always here; the real tier's are where it is built (CI builds it).
    assert!(rendered >= 75 && refused_as_stated >= 16, "only {rendered} renderings compared ({refused_as_stated} refusals)");
    println!(
        "{compared} renderings compared, {rendered} byte for byte, the rest the same failure; {} tokenizers not built here: {absent:?}",
        absent.len()
    );
}

#[test]
fn a_chat_case_is_fed_its_template_s_ids_and_a_tokenizer_without_one_is_named() {
    use mobius_conformance::feed::tokenizer::TextTokenizer;
    use mobius_conformance::plan::case::Case;
    let case = |chat: bool| {
        let text = format!(
            "model_id: m\nmodel_type: llama\nrevision: r\ntask_type: text-generation\ndtype: float32\nlevel: L4\n\
             inputs:\n  chat: {chat}\n  prompts: [\"Hello there\"]\nmatrix: {{ eps: [default], dtypes: [f32], package: p }}\n"
        );
        Case::parse("cases/causal-lm/x.yaml", "causal-lm", "x", &text).unwrap()
    };
    // The multimodal fixture's tokenizer has a chat template: the ids are its rendering's, no special token added.
    let tok = TextTokenizer::load(&root().join("fixtures/gemma4-mm-tiny/hf/tokenizer.json")).unwrap();
    let template = ChatTemplate::load(&root().join("fixtures/gemma4-mm-tiny/hf"), None).unwrap();
    let how = Render { add_generation_prompt: true, ..Render::default() };
    let rendered = template.render(r#"[{"role": "user", "content": "Hello there"}]"#, &how).unwrap();
    let ids = case(true).prompt_ids(&tok, "Hello there").unwrap();
    assert_eq!(ids, tok.encode_plain(&rendered).unwrap());
    assert_ne!(ids, case(false).prompt_ids(&tok, "Hello there").unwrap(), "chat: false feeds the raw prompt");
    // The fixture tokenizer has none: the case's field and the tokenizer's folder are named.
    let plain = TextTokenizer::load(&root().join("fixtures/tokenizer/tokenizer.json")).unwrap();
    let e = case(true).prompt_ids(&plain, "Hello there").unwrap_err().to_string();
    assert!(e.contains("cases/causal-lm/x.yaml: field `inputs.chat`") && e.contains("has no chat template"), "{e}");
}
