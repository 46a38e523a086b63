//! lm-evaluation-harness's own task files, unchanged (tests/data/lmeval/lm_eval_tasks: arc_easy, hellaswag, piqa,
//! mmlu_abstract_algebra with its `include:`), over small local data in the datasets' real schemas, laid out as
//! the Hugging Face hub cache (tests/data/lmeval/hub). What lm-eval itself made of the same files and data -
//! contexts, the token ids of its `_encode_pair`, log-likelihoods of the qwen3-tiny fixture, acc and acc_norm - is
//! in tests/data/lmeval/taskfiles.json (`xtask/reference/lmeval/taskfiles.py`).

mod common;

use std::path::PathBuf;

use common::{Scratch, write};
use mobius_conformance::accuracy::gate;
use mobius_conformance::accuracy::lmeval;
use mobius_conformance::accuracy::resolve::{Overrides, Source};
use mobius_conformance::accuracy::scoring::Scored;
use mobius_conformance::accuracy::task::spec::Metric;
use mobius_conformance::accuracy::task::{Item, ItemKind, Task};
use mobius_conformance::feed::package::GenaiConfig;
use mobius_conformance::feed::package::package_model;
use mobius_conformance::feed::python_str::py_is_space;
use mobius_conformance::feed::tokenizer::TextTokenizer;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::run::runtime::Provider;
use mobius_conformance::run::sessions;
use serde_json::Value;

const TASKS: [(&str, &str, &str, usize); 4] = [
    ("arc_easy", "arc/arc_easy.yaml", "allenai/ai2_arc", 0),
    ("hellaswag", "hellaswag/hellaswag.yaml", "Rowan/hellaswag", 0),
    ("piqa", "piqa/piqa.yaml", "baber/piqa", 0),
    ("mmlu_abstract_algebra", "mmlu/default/mmlu_abstract_algebra.yaml", "cais/mmlu", 2),
];

fn expected() -> Value {
    serde_json::from_str(&std::fs::read_to_string(workspace_root().join("tests/data/lmeval/taskfiles.json")).unwrap()).unwrap()
}

fn hub() -> PathBuf {
    workspace_root().join("tests/data/lmeval/hub")
}

fn load(file: &str, dataset: &str, shots: usize) -> (Task, Vec<Item>) {
    let data = lmeval::hub_snapshot(&hub(), dataset).unwrap_or_else(|| panic!("{dataset} in the hub cache layout"));
    let source =
        Source { data: Some(data), overrides: Overrides { num_fewshot: Some(shots), ..Overrides::default() }, ..Source::default() };
    let task = Task::load_with(&workspace_root(), &format!("tests/data/lmeval/lm_eval_tasks/{file}"), &source).unwrap();
    let tok = TextTokenizer::load(&workspace_root().join("fixtures/tokenizer")).unwrap();
    let items = task.items(&tok).unwrap();
    (task, items)
}

fn ids(v: &Value) -> Vec<i64> {
    v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()
}

#[test]
fn lm_evals_task_files_make_lm_evals_requests() {
    let want = expected();
    for (name, file, dataset, shots) in TASKS {
        let (task, items) = load(file, dataset, shots);
        assert_eq!(task.name, name);
        let docs = want["tasks"][name]["docs"].as_array().unwrap();
        assert_eq!(items.len(), docs.len(), "{name}: documents");
        for (it, w) in items.iter().zip(docs) {
            let ItemKind::MultipleChoice { context_ids, continuations, .. } = &it.kind else { panic!("{name}: multiple choice") };
            let d = it.doc;
            assert_eq!(it.context, w["context"].as_str().unwrap().trim_end_matches(py_is_space), "{name} doc {d}: context");
            assert_eq!(context_ids, &ids(&w["context_ids"]), "{name} doc {d}: context ids");
            let conts: Vec<Vec<i64>> = w["continuation_ids"].as_array().unwrap().iter().map(ids).collect();
            assert_eq!(continuations, &conts, "{name} doc {d}: continuation ids");
            let scored = Scored::Choices(w["logliks"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect());
            for (metric, key) in [(Metric::Acc, "acc"), (Metric::AccNorm, "acc_norm")] {
                if let Some(v) = w[key].as_f64() {
                    assert_eq!(gate::judge_item(it, &scored, metric).0 as u8 as f64, v, "{name} doc {d}: {key}");
                }
            }
        }
    }
}

#[test]
fn their_log_likelihoods_through_onnx_runtime_match_lm_evals() {
    // The qwen3-tiny fixture's f32 package against lm-eval's `hf` run of the same weights (float32, batch 1).
    let package = workspace_root().join("fixtures/qwen3-tiny/onnx/default-f32");
    let decoder = sessions::decoder(&package_model(&package).unwrap(), Provider::Cpu).unwrap();
    let eos = GenaiConfig::load(&package).unwrap().eos_token_ids;
    let tok = TextTokenizer::load(&workspace_root().join("fixtures/tokenizer")).unwrap();
    let want = expected();
    let mut worst = 0.0f64;
    let mut n = 0;
    for (name, file, dataset, shots) in TASKS {
        let (task, items) = load(file, dataset, shots);
        let got = mobius_conformance::accuracy::eval::score(
            std::slice::from_ref(&decoder),
            &task,
            &items,
            &tok,
            &eos,
            None,
            mobius_conformance::accuracy::eval::Strategy::Cached,
        )
        .unwrap()
        .scored;
        for (g, w) in got.iter().zip(want["tasks"][name]["docs"].as_array().unwrap()) {
            let Scored::Choices(g) = g else { panic!() };
            for (a, b) in g.iter().zip(w["logliks"].as_array().unwrap()) {
                worst = worst.max((a - b.as_f64().unwrap()).abs());
                n += 1;
            }
        }
    }
    eprintln!("{n} log-likelihoods, max |ONNX Runtime - lm-eval| = {worst:.3e}");
    assert!(n == 69 && worst < 1e-4, "{n} log-likelihoods, max diff {worst:e}");
}

#[test]
fn python_and_what_the_gate_cannot_follow_is_refused_by_name() {
    let s = Scratch::new("lmeval-refuse");
    let root = &s.0;
    let body = "dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: d.jsonl\ntest_split: test\noutput_type: multiple_choice\ndoc_to_choice: c\ndoc_to_target: g\n";
    write(&root.join("d.jsonl"), "{\"q\": \"x\", \"c\": [\"a\", \"b\"], \"g\": 0}\n");
    let cases = [
        (
            "fn-text.yaml",
            format!("{body}doc_to_text: !function utils.doc_to_text\n"),
            "field `doc_to_text` is Python (`!function utils.doc_to_text`)",
        ),
        (
            "fn-docs.yaml",
            format!("{body}doc_to_text: q\nprocess_docs: !function utils.process_docs\n"),
            "field `process_docs` is Python (`!function utils.process_docs` of dataset `json`)",
        ),
        (
            "random.yaml",
            format!("{body}doc_to_text: q\nnum_fewshot: 2\n"),
            "sampler `default` draws examples with Python's random generator",
        ),
    ];
    for (file, text, want) in cases {
        write(&root.join(file), &text);
        let e = Task::load(root, file).unwrap_err().to_string();
        assert!(e.contains(file) && e.contains(want), "{file}: {e}");
    }
    // `dataset_path: json` with data_files, a Jinja expression and a field: the lm-eval twin of the suite's tasks.
    write(&root.join("ok.yaml"), &format!("{body}doc_to_text: \"Q: {{{{q | upper}}}}\"\n"));
    let t = Task::load(root, "ok.yaml").unwrap();
    assert_eq!(t.spec.text(&t.docs[0]).unwrap(), "Q: X");
    // A dataset missing from the cache says where it looked.
    let e = lmeval::split_files(
        root,
        Some(&root.join("nowhere")),
        None,
        &lmeval::Config { dataset_path: Some("o/n".into()), ..Default::default() },
        "test",
        "t.yaml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("no file for split `test` of `o/n`") && e.contains("nowhere"), "{e}");
}

#[test]
fn hellaswag_process_docs_is_lm_evals() {
    // lm-eval's utils.process_docs output for the fixture's documents: its contexts and choices above (the first
    // test) already agree; here the rules one by one: strip, " [title]" -> ". ", [brackets] dropped, double spaces
    // once, ctx_b capitalized (the rest lower-cased, as Python's str.capitalize does).
    let (_, items) = load("hellaswag/hellaswag.yaml", "Rowan/hellaswag", 0);
    assert_eq!(items[1].context, "Home and Garden: Planting seeds: How to plant seeds. Choose a pot. Fill it");
    assert_eq!(items[2].context, "Riding a bike: A girl climbs onto a bicycle. She");
    let ItemKind::MultipleChoice { choices, .. } = &items[1].kind else { panic!() };
    assert_eq!(choices[1], "with sand and leave it empty.");
}

#[test]
fn the_gate_baselines_of_the_task_files_equal_lm_evals_log_likelihoods() {
    // `cargo xtask regen-goldens --case qwen3-tiny-lmeval` sent the suite's own requests for the four task files
    // to Hugging Face transformers (xtask/reference/loglik.py); lm-eval sent its own. Same numbers, to 1e-6.
    let want = expected();
    let (mut n, mut worst) = (0, 0.0f64);
    for (name, ..) in TASKS {
        let file = format!("goldens/baselines/{name}/qwen3-tiny-lmeval.json");
        let b = gate::Baseline::load(&workspace_root().join(&file), &file).unwrap();
        let docs = want["tasks"][name]["docs"].as_array().unwrap();
        assert_eq!(b.items.len(), docs.len(), "{name}");
        let lm_acc = want["tasks"][name]["results"]["acc"].as_f64().unwrap();
        assert_eq!(b.acc, Some(lm_acc), "{name}: the reference's acc is lm-eval's");
        for (item, w) in b.items.iter().zip(docs) {
            for (ours, theirs) in item.logliks.iter().zip(w["logliks"].as_array().unwrap()) {
                worst = worst.max((ours.0 - theirs.as_f64().unwrap()).abs());
                n += 1;
            }
        }
    }
    eprintln!("{n} log-likelihoods, max |suite baseline - lm-eval| = {worst:.3e}");
    assert!(n == 69 && worst <= 1e-6, "{n} log-likelihoods, max diff {worst:e}");
}

#[test]
fn parquet_splits_read_as_their_jsonl_twins() {
    // pyarrow (snappy) copies of two splits: nested lists and structs come back as the JSONL documents.
    let root = workspace_root().join("tests/data/lmeval");
    for (parquet, jsonl) in [
        (
            "parquet/ARC-Easy/test-00000-of-00001.parquet",
            "hub/datasets--allenai--ai2_arc/snapshots/fixture/ARC-Easy/test-00000-of-00001.jsonl",
        ),
        (
            "parquet/hellaswag/validation-00000-of-00001.parquet",
            "hub/datasets--Rowan--hellaswag/snapshots/fixture/data/validation-00000-of-00001.jsonl",
        ),
    ] {
        let p = lmeval::read_docs(&[root.join(parquet)], "t").unwrap();
        let j = lmeval::read_docs(&[root.join(jsonl)], "t").unwrap();
        assert!(!p.is_empty() && p == j, "{parquet}");
    }
    // Found by split name in a data folder like any other format.
    let c = lmeval::Config { dataset_path: Some("allenai/ai2_arc".into()), dataset_name: Some("ARC-Easy".into()), ..Default::default() };
    let files = lmeval::split_files(&root, Some(&root.join("parquet")), None, &c, "test", "t").unwrap();
    assert_eq!(files, [root.join("parquet/ARC-Easy/test-00000-of-00001.parquet")]);
}

/// lm-eval 0.4.13 run with `--apply_chat_template` (alone, with `--fewshot_as_multiturn`, with a
/// `--system_instruction`) on arc_easy and mmlu_abstract_algebra (2-shot) with SmolLM2-135M-Instruct's tokenizer and
/// chat template: the suite builds the same context, continuations and token ids, document for document
/// (tests/data/lmeval/chat.json, `xtask/reference/lmeval/chat.py`). Needs the real tier's tokenizer (CI builds it).
#[test]
fn lm_evals_chat_requests_are_the_suites() {
    use mobius_conformance::accuracy::task::chat::Chat;
    use mobius_conformance::feed::chat_template::ChatTemplate;
    let want: Value =
        serde_json::from_str(&std::fs::read_to_string(workspace_root().join("tests/data/lmeval/chat.json")).unwrap()).unwrap();
    let model = workspace_root().join(want["model"].as_str().unwrap());
    if !model.is_dir() {
        eprintln!("{} is not built here (cargo xtask real): lm-eval's chat requests not compared", model.display());
        assert!(std::env::var_os("CI").is_none(), "CI builds the real tier: {} must be there", model.display());
        return;
    }
    let tok = TextTokenizer::load(&model.join("tokenizer.json")).unwrap();
    let template = ChatTemplate::load(&model, None).unwrap();
    let mut compared = 0;
    for run in want["runs"].as_array().unwrap() {
        let task_name = run["task"].as_str().unwrap();
        let (_, file, dataset, _) = TASKS.iter().find(|t| t.0 == task_name).unwrap();
        let (task, _) = load(file, dataset, run["num_fewshot"].as_u64().unwrap() as usize);
        let chat = Chat {
            template: template.clone(),
            fewshot_as_multiturn: run["fewshot_as_multiturn"].as_bool().unwrap(),
            system_instruction: run.get("system_instruction").and_then(Value::as_str).map(str::to_string),
        };
        let items = task.items_with(&tok, Some(&chat)).unwrap();
        for d in run["docs"].as_array().unwrap() {
            let at = format!("{} {task_name} doc {}", run["mode"], d["doc_id"]);
            let item = &items[d["doc_id"].as_u64().unwrap() as usize];
            let context = d["context"].as_str().unwrap();
            // The suite keeps the context after lm-eval's whitespace rule (its trailing whitespace moves on).
            assert_eq!(item.context, context.trim_end_matches(py_is_space), "{at}: context");
            let ItemKind::MultipleChoice { context_ids, continuations, .. } = &item.kind else { panic!("{at}: multiple choice") };
            assert_eq!(context_ids, &ids(&d["context_ids"]), "{at}: context ids");
            let want_conts: Vec<Vec<i64>> = d["continuation_ids"].as_array().unwrap().iter().map(ids).collect();
            assert_eq!(continuations, &want_conts, "{at}: continuation ids");
            compared += 1;
        }
    }
    assert_eq!(compared, 20, "documents compared");
}

#[test]
fn chat_options_without_the_template_are_refused_and_a_tokenizer_without_one_is_named() {
    let data = lmeval::hub_snapshot(&hub(), "allenai/ai2_arc").unwrap();
    let file = "tests/data/lmeval/lm_eval_tasks/arc/arc_easy.yaml";
    let with = |o: Overrides| Source { data: Some(data.clone()), overrides: o, ..Source::default() };
    let tok = TextTokenizer::load(&workspace_root().join("fixtures/tokenizer")).unwrap();
    let source = with(Overrides { system_instruction: Some("Be brief.".into()), ..Overrides::default() });
    let task = Task::load_with(&workspace_root(), file, &source).unwrap();
    let e = task.requests(&tok, &source).unwrap_err().to_string();
    assert!(e.contains("arc_easy.yaml") && e.contains("need `apply_chat_template: true`"), "{e}");
    // The fixture tokenizer has no chat template: the task and the tokenizer's folder are named.
    let source = with(Overrides { apply_chat_template: true, ..Overrides::default() });
    let e = task.requests(&tok, &source).unwrap_err().to_string();
    assert!(e.contains("arc_easy.yaml: `apply_chat_template`") && e.contains("has no chat template"), "{e}");
    // Without the options, the plain requests.
    assert_eq!(task.requests(&tok, &Source { data: Some(data), ..Source::default() }).unwrap(), task.items(&tok).unwrap());
}
