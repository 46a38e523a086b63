//! lmms-eval 0.7.3's four scorers and Whisper's normalizers, judged against lmms-eval itself:
//! `xtask/reference/lmms_scorers.py` called its own functions (ocrbench_process_results and its aggregate,
//! the `anls` metric, chartqa_process_results, librispeech_wer and the normalizers) on crafted inputs and kept
//! the answers in tests/data/lmms/scorers.json, and scored the predictions the committed baselines hold (the
//! gemma4-mm-tiny image tasks, the real Whisper speech gate). Every string must match character for character.

use mobius_conformance::accuracy::scorers::{anls, normalizer, ocrbench, relaxed, wer};
use mobius_conformance::paths::workspace_root;
use serde_json::Value;

const REGENERATE: &str = "cargo xtask reference-data --only lmms-scorers (after `cargo xtask real`)";

fn data() -> Value {
    let path = workspace_root().join("tests/data/lmms/scorers.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap_or_else(|| panic!("not a list: {v}")).iter().map(|x| s(x).to_string()).collect()
}

fn list<'a>(v: &'a Value, what: &str) -> &'a [Value] {
    v.as_array().unwrap_or_else(|| panic!("scorers.json: `{what}` is not a list ({REGENERATE})"))
}

#[test]
fn the_data_is_lmms_eval_0_7_3s() {
    let d = data();
    assert_eq!(d["lmms_eval"], "0.7.3");
    // The spelling map the normalizer compiles in is the file lmms-eval ships.
    assert_eq!(d["english_json_sha256"], "fe59aa7a85cd73cd20a6cb99f0c573bfa5235f720baa570e53576af05167f0bb");
}

#[test]
fn ocrbench_items_and_aggregate() {
    let d = data();
    let items = list(&d["ocrbench"]["items"], "ocrbench.items");
    assert!(items.len() >= 40, "{} OCRBench items", items.len());
    let mut got = Vec::new();
    for (i, it) in items.iter().enumerate() {
        let c = ocrbench::item_correct(s(&it["prediction"]), &strings(&it["answers"]), s(&it["dataset"]));
        assert_eq!(c, it["correct"].as_bool().unwrap(), "OCRBench item {i}: {it}");
        got.push(c);
    }
    for a in list(&d["ocrbench"]["aggregates"], "ocrbench.aggregates") {
        let n = a["items"].as_u64().unwrap() as usize;
        let agg = ocrbench::aggregate(&got[..n]);
        assert_eq!(agg.correct as u64, a["correct"].as_u64().unwrap(), "OCRBench count over {n}");
        assert_eq!(agg.score, a["score"].as_f64().unwrap(), "OCRBench score over {n}");
        assert_eq!(agg.raw, agg.correct as f64 / n as f64);
    }
}

#[test]
fn anls_items_and_mean() {
    let d = data();
    let items = list(&d["anls"]["items"], "anls.items");
    assert!(items.len() >= 40, "{} ANLS items", items.len());
    let mut got = Vec::new();
    for (i, it) in items.iter().enumerate() {
        let (pred, answers) = (s(&it["prediction"]), strings(&it["answers"]));
        let v = anls::item(pred, &answers);
        assert_eq!(v, it["anls"].as_f64().unwrap(), "ANLS item {i}: {it}");
        assert_eq!(anls::anls(pred, &answers), it["anls_unstripped"].as_f64().unwrap(), "ANLS metric, unstripped, item {i}: {it}");
        got.push(v);
    }
    assert_eq!(anls::aggregate(&got), d["anls"]["mean"].as_f64().unwrap(), "ANLS mean");
    // The floor's edge is in the data: a score of exactly 0.5 is kept.
    assert!(got.contains(&0.5), "no item sits on the 0.5 floor");
}

#[test]
fn relaxed_accuracy_items_and_splits() {
    let d = data();
    let items = list(&d["relaxed"]["items"], "relaxed.items");
    assert!(items.len() >= 40, "{} ChartQA items", items.len());
    for (i, it) in items.iter().enumerate() {
        let v = relaxed::item(s(&it["prediction"]), s(&it["target"])) as u8 as f64;
        let scores = it["scores"].as_object().unwrap();
        let split = relaxed::split_metric(s(&it["type"]));
        let mut keys: Vec<&str> = scores.keys().map(String::as_str).collect();
        keys.sort();
        let mut want = vec![relaxed::OVERALL, split];
        want.sort();
        assert_eq!(keys, want, "ChartQA item {i}: metrics");
        for k in want {
            assert_eq!(v, scores[k].as_f64().unwrap(), "ChartQA item {i} `{k}`: {it}");
        }
    }
}

#[test]
fn normalizers_match_character_for_character() {
    let d = data();
    let rows = list(&d["normalizers"], "normalizers");
    assert!(rows.len() >= 150, "{} normalizer strings", rows.len());
    let english = normalizer::english::EnglishTextNormalizer::new();
    let mut failures = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let text = s(&r["text"]);
        let (e, b, w) = (english.normalize(text), normalizer::basic::basic_normalize(text), wer::normalize(text));
        if e != s(&r["english"]) {
            failures.push(format!("#{i} english {text:?}: expected {:?}, got {e:?}", s(&r["english"])));
        }
        if b != s(&r["basic"]) {
            failures.push(format!("#{i} basic {text:?}: expected {:?}, got {b:?}", s(&r["basic"])));
        }
        if w != strings(&r["words"]) {
            failures.push(format!("#{i} wer words {text:?}: expected {:?}, got {w:?}", strings(&r["words"])));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} strings differ from lmms-eval ({REGENERATE}):\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}

#[test]
fn corpus_wer_matches_librispeech_wer() {
    let d = data();
    let corpora = d["wer"].as_object().unwrap();
    assert!(corpora.len() >= 3);
    for (name, c) in corpora {
        let mut edits = Vec::new();
        for (i, u) in list(&c["utterances"], "wer.utterances").iter().enumerate() {
            let (r, h) = (s(&u["reference"]), s(&u["hypothesis"]));
            assert_eq!(wer::normalize(r), strings(&u["reference_words"]), "{name} #{i}: reference words");
            assert_eq!(wer::normalize(h), strings(&u["hypothesis_words"]), "{name} #{i}: hypothesis words");
            let e = wer::utterance(r, h);
            let want = wer::Edits { edits: u["edits"].as_u64().unwrap() as usize, words: u["words"].as_u64().unwrap() as usize };
            assert_eq!(e, want, "{name} #{i}: edits");
            edits.push(e);
        }
        let w = c["wer"].as_f64().unwrap();
        assert_eq!(wer::corpus(&edits), w, "{name}: librispeech_wer");
    }
}

/// The committed baselines' own predictions, scored through the gate's path (the task's hooks, its stop list, the
/// scorer) against what lmms-eval's functions gave on the same predictions (`predictions` in scorers.json): the
/// gemma4-mm-tiny image tasks item for item, cut and whole, and both real Whisper speech-gate baselines utterance
/// for utterance, with the corpus WER.
#[test]
fn the_baselines_predictions_score_as_lmms_eval_scores_them() {
    use mobius_conformance::accuracy::lmms::MediaTask;
    use mobius_conformance::accuracy::media_gate::{self, MediaBaseline, Output};
    let d = data();
    let p = d["predictions"].as_object().expect("scorers.json: `predictions`");
    let root = workspace_root();
    let tasks = [
        ("ocrbench", "lmms_eval_tasks/ocrbench/ocrbench.yaml", "echo840--OCRBench"),
        ("ocrbench_stop_trap", "stop_trap/ocrbench_stop_trap.yaml", "echo840--OCRBench"),
        ("docvqa_val", "lmms_eval_tasks/docvqa/docvqa_val.yaml", "lmms-lab-encoder--DocVQA"),
        ("chartqa", "lmms_eval_tasks/chartqa/chartqa.yaml", "lmms-lab-encoder--ChartQA"),
    ];
    let mut checked = 0;
    for (name, file, data) in tasks {
        let key = format!("{name}/gemma4-mm-tiny");
        let want = list(&p[&key]["items"], &key);
        let data = root.join(format!("tests/data/lmms/hub/datasets--{data}/snapshots/fixture"));
        let task = MediaTask::load(&root, &format!("tests/data/lmms/{file}"), Some(&data), None, None).unwrap();
        let items = task.items().unwrap();
        let path = root.join(format!("goldens/baselines/{name}/gemma4-mm-tiny.json"));
        let b = MediaBaseline::load(&path, &key).unwrap();
        assert_eq!(strings(&p[&key]["until"]), b.until, "{key}: scorers.json is older than the baseline ({REGENERATE})");
        let outs: Vec<Output> = b.items.iter().map(|i| Output { full: i.full.clone(), margin: None }).collect();
        let metric = task.metric.clone();
        for whole in [false, true] {
            let got = media_gate::scores(&task, &items, &outs, &b.protocol, !whole);
            let want: Vec<f64> =
                want.iter().filter(|w| w["whole"].as_bool() == Some(whole)).map(|w| w["score"].as_f64().unwrap()).collect();
            let got: Vec<f64> = got.iter().map(|s| s.values[&metric]).collect();
            assert_eq!(got, want, "{key} (whole: {whole}): the suite's {metric} per item against lmms-eval's");
            checked += got.len();
        }
    }
    for model in ["whisper-tiny-en", "whisper-base"] {
        let key = format!("librispeech_test_clean/{model}");
        let w = &p[&key];
        let path = root.join(format!("goldens/baselines/{key}.json"));
        let b = MediaBaseline::load(&path, &key).unwrap();
        let targets = strings(&w["targets"]);
        assert_eq!(targets.len(), b.items.len(), "{key}");
        let edits: Vec<wer::Edits> = targets.iter().zip(&b.items).map(|(t, i)| wer::utterance(t, &i.full)).collect();
        let want: Vec<u64> = list(&w["edits"], "edits").iter().map(|e| e.as_u64().unwrap()).collect();
        assert_eq!(edits.iter().map(|e| e.edits as u64).collect::<Vec<_>>(), want, "{key}: word edits per utterance");
        assert_eq!(wer::corpus(&edits), w["wer"].as_f64().unwrap(), "{key}: corpus WER");
        assert_eq!(wer::corpus(&edits), b.score, "{key}: the baseline's own score");
        checked += edits.len();
    }
    assert_eq!(checked, 2 * (4 + 4 + 2 + 3) + 2 * 237, "predictions cross-checked");
}

/// lmms-eval's `ConfigurableTask.process_results` strips every `generate_until` result before the task's own
/// function sees it, so ChartQA's relaxed accuracy scores a prediction that ends in a space, a newline or a tab as
/// the same prediction stripped (lmms-eval 0.7.3: 1 for each of these; the scorer alone, unstripped: 0).
#[test]
fn the_task_path_strips_the_prediction_as_lmms_eval_s_configurable_task_does() {
    use mobius_conformance::accuracy::lmms::{MediaItem, MediaTask};
    use mobius_conformance::accuracy::media_gate::{self, Output};
    use mobius_conformance::accuracy::protocol::{MediaRule, PromptFormat, Protocol};
    let root = workspace_root();
    let data = root.join("tests/data/lmms/hub/datasets--lmms-lab-encoder--ChartQA/snapshots/fixture");
    let task = MediaTask::load(&root, "tests/data/lmms/lmms_eval_tasks/chartqa/chartqa.yaml", Some(&data), None, None).unwrap();
    let base = task.items().unwrap().remove(0);
    let cases =
        [("50% ", "0.5", 1.0), ("Paris\n", "paris", 1.0), ("\tNo", "no", 1.0), ("\u{1f}12\u{85}", "12", 1.0), ("Paris\n", "London", 0.0)];
    let items: Vec<MediaItem> = cases.iter().map(|(_, a, _)| MediaItem { answers: vec![a.to_string()], ..base.clone() }).collect();
    let outs: Vec<Output> = cases.iter().map(|(p, _, _)| Output { full: p.to_string(), margin: None }).collect();
    let protocol = Protocol {
        prompt: PromptFormat::ChatTemplate,
        system_prompt: None,
        media: MediaRule::AsGiven,
        answer_after: None,
        ignore_stop_strings: true,
        reasoning_tags: mobius_conformance::accuracy::protocol::lmms_eval_reasoning_tags(),
    };
    let got = media_gate::scores(&task, &items, &outs, &protocol, false);
    for ((case, score), want) in cases.iter().zip(&got).map(|(c, s)| (c, s.values[&task.metric])).zip(cases.iter().map(|c| c.2)) {
        assert_eq!(score, want, "{case:?}");
    }
    // The scorer itself is lmms-eval's relaxed_correctness, which does not strip.
    assert!(!relaxed::item("50% ", "0.5") && relaxed::item("50%", "0.5"));
}

/// The scorers' string rules against CPython 3.11's own over every code point: `str.lower`, `str.upper` and NFKD and
/// NFKC, each as the sha256 of the lines `<code point> <result's code points>` for the code points it changes, which
/// `xtask/reference/lmms_scorers.py` wrote from Python (Unicode 14.0) into scorers.json. Rust's standard library and
/// the normalization crate are Unicode 16: the characters added since (U+A7DA, U+1C89, U+A7CB, the Garay and Kawi
/// letters and digits) are left alone, as Python leaves them.
#[test]
fn lower_upper_and_normalization_are_python_3_11_s_at_every_code_point() {
    use mobius_conformance::digest::sha256_hex;
    use mobius_conformance::feed::python_str::{py_lower, py_nfkc, py_nfkd, py_upper};
    let d = data();
    let u = &d["unicode"];
    assert_eq!((u["python"].as_str(), u["unicodedata"].as_str()), (Some("3.11.7"), Some("14.0.0")), "{REGENERATE}");
    type Rule = fn(&str) -> String;
    let rules: [(&str, Rule); 4] = [("lower", py_lower), ("upper", py_upper), ("nfkd", py_nfkd), ("nfkc", py_nfkc)];
    for (name, rule) in rules {
        let (mut lines, mut changed) = (String::new(), 0u64);
        for c in (0..0x110000u32).filter_map(char::from_u32) {
            let r = rule(c.encode_utf8(&mut [0; 4]));
            if r.chars().ne(std::iter::once(c)) {
                let cps: Vec<String> = r.chars().map(|x| format!("{:x}", x as u32)).collect();
                lines.push_str(&format!("{:x} {}\n", c as u32, cps.join(" ")));
                changed += 1;
            }
        }
        assert_eq!(changed, u[name]["changed"].as_u64().unwrap(), "{name}: code points changed");
        assert_eq!(sha256_hex(lines.as_bytes()), u[name]["sha256"].as_str().unwrap(), "{name}: the mapping differs from Python's");
    }
    // The cases, by name: case pairs and digits added after Unicode 14.0, and NFKD of characters added
    // after Unicode 9 (the crate the suite used before stopped there).
    assert_eq!(py_lower("\u{A7DA}\u{1C89}\u{A7CB}"), "\u{A7DA}\u{1C89}\u{A7CB}");
    assert_eq!(py_upper("\u{264}"), "\u{264}", "U+A7CB, its upper case, is Unicode 16's");
    assert_eq!(py_nfkd("\u{A7F2}\u{1F16C}"), "CMR");
    assert!(!mobius_conformance::feed::python_str::py_assigned('\u{11F50}'), "Kawi digit zero: Unicode 15");
    let english = mobius_conformance::accuracy::scorers::normalizer::english::EnglishTextNormalizer::new();
    assert_eq!(english.normalize("a \u{11F50},\u{11F51} b"), "a \u{11F50} \u{11F51} b", "Kawi digits are no digits to Python 3.11");
}
