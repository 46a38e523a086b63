//! The corners where the gate once differed from lm-evaluation-harness 0.4.13. Every expectation comes from
//! lm-eval itself: `xtask/reference/lmeval/corners.py` ran its `hf` model on the arith fixture over the corner tasks
//! of tests/data/lmeval/tasks and kept contexts, the token ids of its own `_encode_pair`, log-likelihoods,
//! generations and per-item metrics in tests/data/lmeval/corners.json; without a model, it ran lm-eval's `regex`
//! filter and multiple_choice `process_results` on crafted inputs (tests/data/lmeval/corners-crafted.json).

mod common;

use common::{Scratch, write};
use mobius_conformance::accuracy::answer::extract_answer;
use mobius_conformance::accuracy::gate;
use mobius_conformance::accuracy::lmeval::python_re;
use mobius_conformance::accuracy::resolve::Source;
use mobius_conformance::accuracy::scoring::{self, Scored};
use mobius_conformance::accuracy::task::spec::Metric;
use mobius_conformance::accuracy::task::{self, Item, ItemKind, Task};
use mobius_conformance::feed::python_str::py_is_space;
use mobius_conformance::feed::tokenizer::TextTokenizer;
use mobius_conformance::paths::workspace_root;
use serde_json::Value;

fn corners() -> Value {
    let text = std::fs::read_to_string(workspace_root().join("tests/data/lmeval/corners.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn docs<'a>(c: &'a Value, task: &str) -> &'a [Value] {
    c["tasks"][task]["docs"].as_array().unwrap_or_else(|| panic!("no task {task} in corners.json"))
}

fn ids(v: &Value) -> Vec<i64> {
    v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()
}

/// The suite's own task for a corner: `body` over `data` (a JSONL file of the repository), first `limit` docs.
fn suite_task(s: &Scratch, name: &str, data: &str, body: &str, limit: u64) -> (Task, Vec<Item>) {
    let data = workspace_root().join(data);
    write(&s.0.join(format!("{name}.yaml")), &format!("test: {}\nlimit: {limit}\n{body}", data.display()));
    // The data is the repository's, outside the scratch root: read by opt-in, as a case would with `external_paths`.
    let task = Task::load_with(&s.0, &format!("{name}.yaml"), &Source::with_external_paths(true)).unwrap();
    let tok = TextTokenizer::load(&workspace_root().join("fixtures/arith-tiny/hf")).unwrap();
    let items = task.items(&tok).unwrap();
    (task, items)
}

const MC: &str = "output_type: multiple_choice\ndoc_to_choice: choices\ndoc_to_target: gold\nmetric: acc\n";

/// Contexts, token ids and both metrics per item equal lm-eval's, judged on lm-eval's own log-likelihoods.
fn check_multiple_choice(corner: &str, items: &[Item]) -> (usize, usize) {
    let c = corners();
    let want = docs(&c, corner);
    assert_eq!(items.len(), want.len(), "{corner}: documents");
    let (mut acc, mut acc_norm) = (0, 0);
    for (it, w) in items.iter().zip(want) {
        let ItemKind::MultipleChoice { context_ids, continuations, .. } = &it.kind else { panic!("{corner}: not multiple choice") };
        let doc = it.doc;
        let lm_ctx = w["context"].as_str().unwrap();
        assert_eq!(it.context, lm_ctx.trim_end_matches(py_is_space), "{corner} doc {doc}: context");
        assert_eq!(context_ids, &ids(&w["context_ids"]), "{corner} doc {doc}: context token ids");
        let lm_conts: Vec<Vec<i64>> = w["continuation_ids"].as_array().unwrap().iter().map(ids).collect();
        assert_eq!(continuations, &lm_conts, "{corner} doc {doc}: continuation token ids");
        let ll: Vec<f64> = w["logliks"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        let scored = Scored::Choices(ll);
        for (metric, key, count) in [(Metric::Acc, "acc", &mut acc), (Metric::AccNorm, "acc_norm", &mut acc_norm)] {
            let (right, _) = gate::judge_item(it, &scored, metric);
            assert_eq!(right as u8 as f64, w[key].as_f64().unwrap(), "{corner} doc {doc}: {key}");
            *count += right as usize;
        }
    }
    (acc, acc_norm)
}

#[test]
fn generate_until_without_a_regex_compares_the_raw_generation() {
    let c = corners();
    let s = Scratch::new("corner-gen-raw");
    let body = "output_type: generate_until\ndoc_to_text: question\ndoc_to_target: answer\ngeneration_kwargs:\n  until: [\"\\n\"]\n  max_gen_toks: 6\nmetric: exact_match\n";
    let (_, items) = suite_task(&s, "gen-raw", "fixtures/tasks/arith/test.jsonl", body, 12);
    let mut right = 0;
    for (it, w) in items.iter().zip(docs(&c, "gen-raw")) {
        let ItemKind::Generate { context_ids, .. } = &it.kind else { panic!("not generate_until") };
        assert_eq!(context_ids, &ids(&w["context_ids"]), "doc {}", it.doc);
        let answer = extract_answer(None, w["generation"].as_str().unwrap());
        assert_eq!(answer, w["filtered"].as_str().unwrap(), "doc {}: the raw generation, not stripped", it.doc);
        let (ok, _) = gate::judge_item(it, &Scored::Answer(answer), Metric::ExactMatch);
        assert_eq!(ok as u8 as f64, w["exact_match"].as_f64().unwrap(), "doc {}", it.doc);
        right += ok as usize;
    }
    assert_eq!(right, 0, "lm-eval: exact_match 0.00 (\" 35\" is not \"35\")");
    assert_eq!(c["tasks"]["gen-raw"]["results"]["exact_match"].as_f64(), Some(0.0));
}

#[test]
fn a_regex_match_is_stripped() {
    let c = corners();
    let mut right = 0;
    for w in docs(&c, "gen-regex-ws") {
        let answer = extract_answer(Some("(.+)"), w["generation"].as_str().unwrap());
        assert_eq!(answer, w["filtered"].as_str().unwrap());
        let ok = answer == w["target"].as_str().unwrap();
        assert_eq!(ok as u8 as f64, w["exact_match"].as_f64().unwrap());
        right += ok as usize;
    }
    let n = docs(&c, "gen-regex-ws").len();
    let want = c["tasks"]["gen-regex-ws"]["results"]["exact_match"].as_f64().unwrap();
    assert!((right as f64 / n as f64 - want).abs() < 1e-12, "{right}/{n} vs lm-eval {want}");
    // findall's first element: the whole match without groups, the first non-empty group with several.
    assert_eq!(extract_answer(Some(r"\d+ "), " 12 3"), "12");
    assert_eq!(extract_answer(Some(r"(x)?(\d+)"), " 12"), "12");
    assert_eq!(extract_answer(Some(r"(\d+)"), " none"), "[invalid]");
}

#[test]
fn a_bare_field_name_is_the_field_value() {
    let s = Scratch::new("corner-bare");
    let (_, items) = suite_task(&s, "bare", "fixtures/tasks/arith/test.jsonl", &format!("doc_to_text: question\n{MC}"), 12);
    assert_eq!(items[0].context, "22+13=", "the field's value, not the word `question`");
    let (acc, acc_norm) = check_multiple_choice("bare-field", &items);
    assert_eq!((acc, acc_norm), (12, 12));
}

#[test]
fn a_context_starting_with_the_bos_text_gets_no_second_bos() {
    let c = corners();
    assert_eq!(c["prefix_token"], "<bos>");
    let s = Scratch::new("corner-bos");
    let (_, items) = suite_task(&s, "bos", "fixtures/tasks/arith/test.jsonl", &format!("doc_to_text: \"<bos>{{{{question}}}}\"\n{MC}"), 12);
    let ItemKind::MultipleChoice { context_ids, .. } = &items[0].kind else { panic!() };
    assert_eq!(context_ids.iter().filter(|&&t| t == 2).count(), 1, "one BOS: {context_ids:?}");
    check_multiple_choice("bos", &items);
}

#[test]
fn an_empty_choice_is_never_chosen_under_acc_norm() {
    let c = corners();
    let s = Scratch::new("corner-empty");
    let (_, items) =
        suite_task(&s, "empty", "tests/data/lmeval/data/empty-choice.jsonl", &format!("doc_to_text: \"{{{{question}}}}\"\n{MC}"), 12);
    let (acc, acc_norm) = check_multiple_choice("empty-choice", &items);
    let res = &c["tasks"]["empty-choice"]["results"];
    assert!((acc as f64 / 12.0 - res["acc"].as_f64().unwrap()).abs() < 1e-12, "acc {acc}/12");
    assert!((acc_norm as f64 / 12.0 - res["acc_norm"].as_f64().unwrap()).abs() < 1e-12, "acc_norm {acc_norm}/12");
    assert_eq!((acc, acc_norm), (1, 12), "the empty choice wins on raw log-likelihood, never after dividing by 0");
    // The division itself: -inf for a negative log-likelihood, NaN for 0, which numpy's argmax takes first.
    let choices = ["".to_string(), "ab".to_string()];
    assert_eq!(mobius_conformance::accuracy::scoring::pick(&[-0.1, -1.0], &choices).acc_norm, 1);
    assert_eq!(mobius_conformance::accuracy::scoring::pick(&[0.0, -1.0], &choices).acc_norm, 0, "0/0 is NaN; np.argmax returns it");
}

#[test]
fn trailing_whitespace_is_pythons_including_the_information_separators() {
    let c = corners();
    let python: Vec<u32> = c["python_whitespace"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    let ours: Vec<u32> = (0..0x110000u32).filter(|&u| char::from_u32(u).is_some_and(py_is_space)).collect();
    assert_eq!(ours, python, "Python's str.isspace set, code point by code point");
    assert!((0x1c..=0x1f).all(|u| python.contains(&u)));
    let s = Scratch::new("corner-sep");
    let (_, items) =
        suite_task(&s, "sep", "tests/data/lmeval/data/separators.jsonl", &format!("doc_to_text: \"{{{{question}}}}\"\n{MC}"), 12);
    check_multiple_choice("separators", &items);
}

#[test]
fn fewshot_from_the_test_split_leaves_out_the_scored_document() {
    let s = Scratch::new("corner-self");
    let data = "tests/data/lmeval/data/self-shot.jsonl";
    let body = format!("fewshot: {}\nnum_fewshot: 2\ndoc_to_text: \"{{{{question}}}}\"\n{MC}", workspace_root().join(data).display());
    let (_, items) = suite_task(&s, "self", data, &body, 12);
    assert_eq!(items[1].context, "22+13= 35\n\n17+91= 108\n\n90+94=", "doc 1 is not its own example");
    assert!(!items[6].context.contains("90+94= 184"), "doc 6 equals doc 1: every copy is left out");
    check_multiple_choice("self-shot", &items);
}

/// The model-free corners: lm-eval's own regex filter and multiple_choice scoring on crafted inputs
/// (tests/data/lmeval/corners-crafted.json, written by the same script).
fn crafted() -> Value {
    let text = std::fs::read_to_string(workspace_root().join("tests/data/lmeval/corners-crafted.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn python_classes_are_pythons_code_point_by_code_point() {
    let c = crafted();
    assert_eq!((c["python"].as_str(), c["unicode"].as_str()), (Some("3.11.7"), Some("14.0.0")), "the tables' Python");
    // Every scalar value once, in order: a single-character pattern's matches are its set.
    let all: String = (0..0x110000u32).filter_map(char::from_u32).collect();
    let sweeps = c["sweeps"].as_object().unwrap();
    assert!(sweeps.len() >= 28, "{} sweeps", sweeps.len());
    for (pattern, want) in sweeps {
        let rx = python_re::compile(pattern).unwrap_or_else(|e| panic!("{e}"));
        let mut runs: Vec<[u32; 2]> = Vec::new();
        for m in rx.find_iter(&all) {
            let ch = m.as_str().chars().next().unwrap() as u32;
            assert_eq!(m.as_str().chars().count(), 1, "{pattern}: one character per match");
            match runs.last_mut() {
                Some(r) if r[1] + 1 == ch => r[1] = ch,
                _ => runs.push([ch, ch]),
            }
        }
        let want: Vec<[u32; 2]> =
            want.as_array().unwrap().iter().map(|r| [r[0].as_u64().unwrap() as u32, r[1].as_u64().unwrap() as u32]).collect();
        assert_eq!(runs, want, "{pattern}: Python's set (as runs), code point by code point");
    }
}

#[test]
fn the_regex_filter_answers_as_lm_evals_item_for_item() {
    let c = crafted();
    let pairs = c["regex_pairs"].as_array().unwrap();
    assert!(pairs.len() >= 60, "{} pairs", pairs.len());
    for p in pairs {
        let (pattern, text) = (p["pattern"].as_str().unwrap(), p["text"].as_str().unwrap());
        assert!(python_re::translate(pattern).is_ok(), "{pattern:?} is refused: {:?}", python_re::translate(pattern));
        let got = extract_answer(Some(pattern), text);
        assert_eq!(got, p["filtered"].as_str().unwrap(), "pattern {pattern:?} on {text:?}");
    }
    // The case that found it: U+001D ends `\S+` in Python, not in Rust's own `\S`.
    assert_eq!(extract_answer(Some(r"(\S+)"), "8\u{1d}se\u{1d}\u{10}e"), "8");
    let spaces: Vec<u64> = c["regex_pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["pattern"] == r"(\S+)")
        .filter_map(|p| {
            let t: Vec<char> = p["text"].as_str().unwrap().chars().collect();
            (t.len() == 5).then(|| t[2] as u64)
        })
        .collect();
    let python: Vec<u64> = corners()["python_whitespace"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    assert_eq!(spaces, python, "every Python whitespace code point is crossed");
}

#[test]
fn a_pattern_rust_cannot_match_as_python_is_refused_by_name() {
    let cases = [
        ("((?<=The answer is )(.*)(?=.))", "lookbehind"),
        ("(?=(female|male))", "lookahead"),
        (r"\b(True|False)\b", "word boundary"),
        (r"(a)\1", "backreference"),
        ("(?P<x>a)(?P=x)", "backreference"),
        ("(?>ab)", "atomic group"),
        ("a*+", "possessive"),
        ("(?(1)a|b)", "conditional"),
        ("(?x) a", "verbose"),
        (r"(?a)\w", "ASCII flag"),
        (r"\N{DIGIT ONE}", "named character"),
        ("(?i)caf\u{e9}", "non-ASCII letter"),
        ("(?i)[\u{e0}-\u{e9}]", "non-ASCII letter"),
        ("(a$)", "inside a capturing group"),
        ("a$\\n", "followed by more pattern"),
        (r"(?:a$|b)\s", "followed by more pattern"),
        ("(?:a$)+", "repeated group"),
        ("a(?i)b", "global flags"),
        ("*a", "nothing to repeat"),
        ("a**", "nothing to repeat"),
        (r"\p{L}", "unknown escape"),
        ("[a", "unterminated"),
        ("[z-a]", "bad character range"),
    ];
    for (pattern, feature) in cases {
        let e = python_re::translate(pattern).expect_err(pattern);
        assert!(e.feature.contains(feature), "{pattern:?}: {e}");
    }
    // A task file names itself, the field and the feature.
    let s = Scratch::new("corner-refused");
    let body = "output_type: generate_until\ndoc_to_text: question\ndoc_to_target: answer\ngeneration_kwargs:\n  until: [\"\\n\"]\nmetric: exact_match\nanswer_regex: \"(?<=is )(\\\\d+)\"\n";
    write(&s.0.join("r.yaml"), &format!("test: {}\n{body}", workspace_root().join("fixtures/tasks/arith/test.jsonl").display()));
    let e = Task::load_with(&s.0, "r.yaml", &Source::with_external_paths(true)).unwrap_err().to_string();
    assert!(e.contains("r.yaml") && e.contains("answer_regex") && e.contains("lookbehind"), "{e}");
    // `$` where nothing follows, Python's final-newline rule included.
    assert_eq!(extract_answer(Some(r"(\w+)$"), "end\n"), "end");
    assert_eq!(extract_answer(Some(r"(\w+)$"), "end\n\n"), "[invalid]");
}

/// `nan`, `inf` and `-inf` as the script writes them; numbers as they are.
fn float(v: &Value) -> f64 {
    match v.as_str() {
        Some("nan") => f64::NAN,
        Some("inf") => f64::INFINITY,
        Some("-inf") => f64::NEG_INFINITY,
        Some(s) => panic!("log-likelihood {s:?}"),
        None => v.as_f64().unwrap(),
    }
}

#[test]
fn acc_norm_chooses_as_lm_evals_process_results_with_empty_choices() {
    let c = crafted();
    let items = c["acc_norm_items"].as_array().unwrap();
    assert!(items.len() >= 30, "{} items", items.len());
    let mut empties = 0;
    for (i, it) in items.iter().enumerate() {
        let choices: Vec<String> = it["choices"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect();
        let ll: Vec<f64> = it["logliks"].as_array().unwrap().iter().map(float).collect();
        let picks = scoring::pick(&ll, &choices);
        let want = (it["acc"].as_u64().unwrap() as usize, it["acc_norm"].as_u64().unwrap() as usize);
        assert_eq!((picks.acc, picks.acc_norm), want, "item {i}: choices {choices:?}, log-likelihoods {ll:?}");
        empties += choices.iter().any(String::is_empty) as usize;
    }
    assert!(empties >= 20, "{empties} items with an empty choice");
    // Upstream of the division: an empty choice is scored as the delimiter alone; with no delimiter its
    // continuation has no tokens, which lm-eval's `_loglikelihood_tokens` asserts against, and the suite refuses.
    let tok = TextTokenizer::load(&workspace_root().join("fixtures/arith-tiny/hf")).unwrap();
    assert!(!task::encode_pair(&tok, "22+13=", " ").unwrap().continuation.is_empty());
    assert!(task::encode_pair(&tok, "22+13=", "").is_err());
}
