//! The multimodal accuracy gate: lmms-eval's own task files (unchanged copies of 0.7.3's, tests/data/lmms), read
//! with their hooks reimplemented; the pinned protocol; and the judge on crafted outputs: the stop-string trap, the
//! paired tests in each metric's direction, and a task too small to decide its gate.

mod common;

use std::path::PathBuf;

use common::{Scratch, write};
use mobius_conformance::accuracy::lmms::{Direction, Family, Media, MediaItem, MediaTask};
use mobius_conformance::accuracy::media_gate::{self, Output};
use mobius_conformance::accuracy::policy::GatePolicy;
use mobius_conformance::accuracy::protocol::{MediaRule, PromptFormat, Protocol};
use mobius_conformance::outcome::Status;
use mobius_conformance::paths::workspace_root;
use sha2::{Digest, Sha256};

fn lmms() -> PathBuf {
    workspace_root().join("tests/data/lmms")
}

fn load(task: &str, dataset: &str) -> MediaTask {
    let root = workspace_root();
    let data = lmms().join(format!("hub/datasets--{}/snapshots/fixture", dataset.replace('/', "--")));
    MediaTask::load(&root, &format!("tests/data/lmms/lmms_eval_tasks/{task}"), Some(&data), None, None)
        .unwrap_or_else(|e| panic!("{task}: {e}"))
}

#[test]
fn the_task_files_are_lmms_evals_own_byte_for_byte() {
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(lmms().join("taskfiles.json")).unwrap()).unwrap();
    assert_eq!(manifest["lmms_eval"], "0.7.3");
    let files = manifest["files"].as_object().unwrap();
    assert_eq!(files.len(), 5);
    for (rel, f) in files {
        let bytes = std::fs::read(lmms().join("lmms_eval_tasks").join(rel)).unwrap();
        let got: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(got, f["sha256"].as_str().unwrap(), "{rel} is not the wheel's {}", f["wheel_path"]);
    }
}

#[test]
fn each_task_reads_its_family_metric_budget_and_lmms_evals_default_stop() {
    let o = load("ocrbench/ocrbench.yaml", "echo840/OCRBench");
    assert_eq!(
        (o.family, o.metric.as_str(), o.max_new_tokens, o.direction),
        (Family::OcrBench, "ocrbench_accuracy", 128, Direction::HigherIsBetter)
    );
    // No `until` in the task: lmms-eval stops at its fewshot_delimiter, the trap.
    assert_eq!(o.until, vec!["\n\n".to_string()]);
    let items = o.items().unwrap();
    assert_eq!(items.len(), 4);
    assert_eq!(items[0].answers, vec!["HARBOR".to_string()]);
    assert_eq!(items[2].kind, "HME100k");
    // The stop-trap variant includes it unchanged and sets a stop of its own: that, and nothing else, differs.
    let root = workspace_root();
    let data = lmms().join("hub/datasets--echo840--OCRBench/snapshots/fixture");
    let t = MediaTask::load(&root, "tests/data/lmms/stop_trap/ocrbench_stop_trap.yaml", Some(&data), None, None).unwrap();
    assert_eq!((t.name.as_str(), t.until.clone()), ("ocrbench_stop_trap", vec!["  ".to_string()]));
    assert_eq!((t.family, t.metric.as_str(), t.max_new_tokens, t.docs.len()), (o.family, o.metric.as_str(), 128, 4));
    assert!(
        matches!(&items[0].media, Media::File(b) if b.starts_with(b"\x89PNG")),
        "the image's PNG bytes, decoded from the Parquet column"
    );
    // docvqa_val.yaml holds only its metric and split: the rest comes through `include:`.
    let d = load("docvqa/docvqa_val.yaml", "lmms-lab-encoder/DocVQA");
    assert_eq!((d.family, d.metric.as_str(), d.max_new_tokens), (Family::DocVqa, "anls", 32));
    assert_eq!(d.post_prompt, "\nAnswer the question using a single word or phrase.");
    let di = d.items().unwrap();
    assert_eq!(di[0].question, "What is the amount for Ink?\nAnswer the question using a single word or phrase.");
    let c = load("chartqa/chartqa.yaml", "lmms-lab-encoder/ChartQA");
    assert_eq!(c.metrics, vec!["relaxed_overall", "relaxed_human_split", "relaxed_augmented_split"]);
    assert_eq!(c.max_new_tokens, 16);
    assert_eq!(
        c.items().unwrap().iter().map(|i| i.kind.as_str()).collect::<Vec<_>>(),
        vec!["human_test", "augmented_test", "augmented_test"]
    );
}

#[test]
fn an_unknown_hook_or_metric_is_refused_by_name() {
    let s = Scratch::new("lmms-refuse");
    let data = lmms().join("hub/datasets--echo840--OCRBench/snapshots/fixture");
    let original = std::fs::read_to_string(lmms().join("lmms_eval_tasks/ocrbench/ocrbench.yaml")).unwrap();
    let cases = [
        ("utils.ocrbench_process_results", "utils.my_own_scorer", "field `process_results` is Python (`!function utils.my_own_scorer`"),
        ("metric: ocrbench_accuracy", "metric: bleu", "metric `bleu` in `metric_list` is not one the ocrbench scorer gives"),
        ("dataset_path: echo840/OCRBench", "dataset_path: someone/OCRBench", "of dataset `someone/OCRBench`"),
        ("  do_sample: false", "  do_sample: true", "field `generation_kwargs.do_sample` is true"),
    ];
    for (from, to, want) in cases {
        write(&s.0.join("t.yaml"), &original.replace(from, to));
        let e = MediaTask::load(&s.0, "t.yaml", Some(&data), None, None).unwrap_err().to_string();
        assert!(e.contains("t.yaml") && e.contains(want), "{from} -> {to}: {e}");
    }
}

fn protocol() -> Protocol {
    Protocol {
        prompt: PromptFormat::ChatTemplate,
        system_prompt: None,
        media: MediaRule::AsGiven,
        answer_after: None,
        ignore_stop_strings: false,
        reasoning_tags: mobius_conformance::accuracy::protocol::lmms_eval_reasoning_tags(),
    }
}

fn task(family: Family, metric: &str, direction: Direction) -> MediaTask {
    MediaTask {
        name: "t".into(),
        file: "t.yaml".into(),
        family,
        metric: metric.into(),
        metrics: vec![metric.into()],
        direction,
        max_new_tokens: 64,
        until: vec!["\n\n".into()],
        pre_prompt: String::new(),
        post_prompt: String::new(),
        docs: Vec::new(),
    }
}

fn item(doc: usize, answer: &str, kind: &str) -> MediaItem {
    MediaItem { doc, question: "q".into(), answers: vec![answer.into()], kind: kind.into(), media: Media::File(vec![doc as u8]) }
}

fn out(s: &str) -> Output {
    Output { full: s.into(), margin: Some(1.0) }
}

fn policy(max: f64) -> GatePolicy {
    GatePolicy { max_delta_points: max, ..GatePolicy::default() }
}

#[test]
fn an_answer_in_the_second_paragraph_falls_into_the_stop_trap_and_the_report_gives_the_score_both_ways() {
    let t = task(Family::OcrBench, "ocrbench_accuracy", Direction::HigherIsBetter);
    let items: Vec<MediaItem> = (0..4).map(|i| item(i, "HARBOR", "IIIT5K")).collect();
    // A two-paragraph model: the word comes after the blank line in two of four items, on both sides.
    let outs = vec![out("The image shows a word.\n\nIt reads HARBOR."), out("HARBOR"), out("A sign.\n\nHARBOR"), out("no idea")];
    let r = media_gate::judge(&t, &items, &outs, &outs, &protocol(), &policy(100.0)).unwrap();
    assert!(r.pass, "{:?}", r.reasons);
    assert_eq!(r.stop.cuts.len(), 4, "docs 0 and 2, each side");
    assert!(r.stop.cuts.iter().all(|c| c.stop == "\n\n" && c.score_cut == 0.0 && c.score_full == 1.0));
    assert_eq!((r.stop.reference_cut, r.stop.reference_full), (25.0, 75.0));
    assert_eq!((r.stop.got_cut, r.stop.got_full), (25.0, 75.0));
    assert_eq!(r.raw_counts, Some((1, 1, 4)));
    let text = mobius_conformance::level::gate::render::media_message("t/x", &t, &protocol(), &r, true, "b.json", "regen");
    assert!(text.contains("STOP-STRING TRAP: the stop list changed 4 item score(s)"), "{text}");
    assert!(text.contains("reference 25.00, package 25.00; with the whole outputs: reference 75.00, package 75.00"), "{text}");
    assert!(text.contains("raw counts: reference 1/4, package 1/4; lmms-eval's score divides by 1000: 0.0010 vs 0.0010"), "{text}");
    assert!(text.contains("plumbing only: the model's weights are random"), "{text}");
    // The same outputs under a protocol that ignores the stop list: nothing is cut, the whole answers count.
    let p = Protocol { ignore_stop_strings: true, ..protocol() };
    let r = media_gate::judge(&t, &items, &outs, &outs, &p, &policy(100.0)).unwrap();
    assert!(r.stop.cuts.is_empty());
    assert_eq!(r.reference, 75.0);
}

#[test]
fn a_cut_that_only_the_package_takes_is_a_loss_the_gate_names() {
    let t = task(Family::OcrBench, "ocrbench_accuracy", Direction::HigherIsBetter);
    let items: Vec<MediaItem> = (0..8).map(|i| item(i, "42", "IIIT5K")).collect();
    let reference: Vec<Output> = (0..8).map(|_| out("42")).collect();
    let got: Vec<Output> = (0..8).map(|_| out("Let me see.\n\n42")).collect();
    let r = media_gate::judge(&t, &items, &reference, &got, &protocol(), &policy(100.0)).unwrap();
    assert!(!r.pass);
    assert_eq!((r.worse, r.better), (8, 0));
    assert!(r.reasons.iter().any(|x| x.to_string().contains("lean one way: 8 worse, 0 better")), "{:?}", r.reasons);
    assert_eq!(r.stop.cuts.iter().filter(|c| !c.reference).count(), 8);
    assert_eq!((r.stop.got_cut, r.stop.got_full), (0.0, 100.0));
    assert_eq!(r.flips.len(), 8);
}

#[test]
fn wer_is_lower_is_better_in_wer_points_with_an_exact_paired_test_on_word_edits() {
    let t = task(Family::LibriSpeech, "wer", Direction::LowerIsBetter);
    let refs = ["the cat sat on the mat", "a quick brown fox", "seven bells rang at noon", "she sells sea shells"];
    let items: Vec<MediaItem> = refs.iter().enumerate().map(|(i, r)| item(i, r, "asr_en")).collect();
    let reference: Vec<Output> = refs.iter().map(|r| out(r)).collect();
    // One substitution in each: 4 edits over 19 words, all one way.
    let got = vec![out("the cat sat on the hat"), out("a quick brown box"), out("seven bells rang at moon"), out("she sells sea bells")];
    let r = media_gate::judge(&t, &items, &reference, &got, &protocol(), &policy(100.0)).unwrap();
    assert_eq!(r.reference, 0.0);
    assert!((r.got - 400.0 / 19.0).abs() < 1e-9, "{}", r.got);
    assert!(r.delta_points > 0.0, "more WER is a positive delta");
    assert_eq!((r.worse, r.better), (4, 0), "more edits are worse");
    // Four one-way changes: p = 2 / 2^4, not significant; what the test can detect here takes six.
    assert!((r.p_value - 0.125).abs() < 1e-12, "{}", r.p_value);
    assert!(r.test.contains("exact"), "{}", r.test);
    assert!(r.min_detectable_points.is_infinite() || r.min_detectable_points >= 100.0, "four items cannot reach six one-way moves");
    // The same outputs, the other way round, are a gain.
    let r = media_gate::judge(&t, &items, &got, &reference, &protocol(), &policy(100.0)).unwrap();
    assert_eq!((r.worse, r.better), (0, 4));
}

#[test]
fn a_task_too_small_for_its_gate_warns_and_is_refused_under_ci() {
    let t = task(Family::DocVqa, "anls", Direction::HigherIsBetter);
    let items: Vec<MediaItem> = (0..3).map(|i| item(i, "30", "")).collect();
    let outs: Vec<Output> = (0..3).map(|_| out("30")).collect();
    let r = media_gate::judge(&t, &items, &outs, &outs, &protocol(), &policy(1.0)).unwrap();
    assert!(r.pass && r.too_small);
    assert!(
        r.reasons[0]
            .to_string()
            .starts_with("WARNING: the task is too small to decide +-1.00 points: one item moves anls by up to 33.33 points"),
        "{:?}",
        r.reasons
    );
    let strict = GatePolicy { refuse_small: true, ..policy(1.0) };
    let r = media_gate::judge(&t, &items, &outs, &outs, &protocol(), &strict).unwrap();
    assert!(!r.pass && r.reasons[0].to_string().contains("refused (CI)"), "{:?}", r.reasons);
}

#[test]
fn graded_changes_in_both_directions_are_noise_and_one_way_changes_are_a_loss() {
    let t = task(Family::DocVqa, "anls", Direction::HigherIsBetter);
    let items: Vec<MediaItem> = (0..300).map(|i| item(i, "harbor", "")).collect();
    let reference: Vec<Output> = (0..300).map(|_| out("harbor")).collect();
    // Near-tie flips both ways: 10 items lose a letter (ANLS 5/6), 10 others gain back elsewhere.
    let mut mixed = reference.clone();
    let mut reference_mixed = reference.clone();
    for i in 0..10 {
        mixed[i] = out("harbo");
        reference_mixed[100 + i] = out("harbo");
    }
    let r = media_gate::judge(&t, &items, &reference_mixed, &mixed, &protocol(), &policy(1.0)).unwrap();
    assert!(r.pass, "{:?}", r.reasons);
    assert_eq!((r.worse, r.better), (10, 10));
    // The same 10 losses alone: 0.56 points net (inside +-1), but all one way.
    let r = media_gate::judge(&t, &items, &reference, &mixed, &protocol(), &policy(1.0)).unwrap();
    assert!(r.delta_points.abs() < 1.0, "{}", r.delta_points);
    assert!(!r.pass, "{:?}", r.reasons);
    assert!(r.p_value < 0.01, "{}", r.p_value);
    let i = r.interval.expect("a bootstrap interval");
    assert!(i.upper < 0.0, "the package is worse: {i:?}");
}

#[test]
fn the_protocol_answer_marker_and_the_requests_hash_pin_what_was_asked() {
    let t = task(Family::ChartQa, "relaxed_overall", Direction::HigherIsBetter);
    let items = vec![item(0, "36", "human_test")];
    let think = Protocol { answer_after: Some("<channel|>".into()), ..protocol() };
    let outs = vec![out("thinking about 12<channel|>36")];
    let r = media_gate::judge(&t, &items, &outs, &outs, &think, &policy(100.0)).unwrap();
    assert_eq!(r.reference, 100.0);
    let r = media_gate::judge(&t, &items, &outs, &outs, &protocol(), &policy(100.0)).unwrap();
    assert_eq!(r.reference, 0.0, "without the marker the whole output is the answer");
    let h = |p: &Protocol, items: &[MediaItem]| media_gate::requests_hash(items, p, &t.until, 16);
    assert_ne!(h(&protocol(), &items), h(&think, &items));
    let other = vec![MediaItem { media: Media::File(vec![9]), ..items[0].clone() }];
    assert_ne!(h(&protocol(), &items), h(&protocol(), &other), "another image is another request");
}

/// The trap on a real model's words: mobius' own golden for Gemma-4 E2B-it (vision, "Describe this image in
/// detail."; Hugging Face's greedy output) holds "\n\n" after its first sentence. An OCRBench-shaped item whose
/// answer sits in the second paragraph scores 0 under lmms-eval's default stop and 1 on the whole output, on both
/// sides; the gate names the item and the stop and gives the task's score both ways, while an item answered in the
/// first paragraph is untouched.
#[test]
fn gemma4_e2bs_own_two_paragraph_answer_falls_into_lmms_evals_default_stop() {
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(workspace_root().join("tests/data/mobius-compat/golden/vision-language/gemma-4-e2b-it_generation.json"))
            .unwrap(),
    )
    .unwrap();
    let text = golden["generated_text"].as_str().unwrap();
    assert!(text.starts_with("This is a photograph of a **raccoon** in a snowy outdoor setting.\n\nHere's a detailed description:"));
    let t = task(Family::OcrBench, "ocrbench_accuracy", Direction::HigherIsBetter);
    // lmms-eval's task file gives no `until`: the default stop is what the task reads.
    assert_eq!(load("ocrbench/ocrbench.yaml", "echo840/OCRBench").until, t.until);
    let items = vec![item(0, "raccoon", "Scene Text-centric VQA"), item(1, "detailed description", "Scene Text-centric VQA")];
    let outs = vec![out(text), out(text)];
    let r = media_gate::judge(&t, &items, &outs, &outs, &protocol(), &policy(100.0)).unwrap();
    let cut: Vec<(usize, bool)> = r.stop.cuts.iter().map(|c| (c.doc, c.reference)).collect();
    assert_eq!(cut, vec![(1, true), (1, false)]);
    assert_eq!((r.stop.reference_cut, r.stop.reference_full, r.stop.got_cut, r.stop.got_full), (50.0, 100.0, 50.0, 100.0));
    let report =
        mobius_conformance::level::gate::render::media_message("ocrbench/gemma-4-e2b", &t, &protocol(), &r, false, "b.json", "regen");
    assert!(report.contains("doc 1 (reference): cut at \"\\n\\n\": score 0 cut, 1 whole"), "{report}");
}

/// The case built to fall into the trap, run whole: gemma4-mm-tiny through its package on OCRBench with a stop its
/// greedy stream crosses before the fourth item's answer. The item scores 0 cut and 1 whole on both sides, the
/// verdict names it and the stop and gives the task's score both ways; under lmms-eval's own OCRBench (default stop
/// "\n\n", which the stream never emits) the same item counts, and no stop changes a score.
#[test]
fn the_stop_trap_case_cuts_its_fourth_answer_and_the_verdict_gives_the_score_both_ways() {
    let root = workspace_root();
    let trap = common::run(&root, "ocrbench_stop_trap/gemma4-mm-tiny/default/f32/accuracy");
    assert_eq!(trap.status, Status::Pass, "{}", trap.message);
    let m = &trap.message;
    assert!(m.contains("STOP-STRING TRAP: the stop list changed 2 item score(s); ocrbench_accuracy with the cut outputs: reference 0.00, package 0.00; with the whole outputs: reference 25.00, package 25.00"), "{m}");
    assert!(m.contains("doc 3 (reference): cut at \"  \": score 0 cut, 1 whole"), "{m}");
    assert!(m.contains("doc 3 (package): cut at \"  \": score 0 cut, 1 whole"), "{m}");
    assert!(m.contains("plumbing only"), "{m}");
    let plain = common::run(&root, "ocrbench/gemma4-mm-tiny/default/f32/accuracy");
    assert_eq!(plain.status, Status::Pass, "{}", plain.message);
    assert!(plain.message.contains("stop strings changed no item's score"), "{}", plain.message);
    assert!(plain.message.contains("raw counts: reference 1/4, package 1/4"), "{}", plain.message);
}

/// The same task through onnxruntime-genai's own processor and generator: genai's Gemma-4 processor wraps each
/// image in "\n\n" where Hugging Face's adds none (the genai level's known prompt difference), so every prompt
/// differs, and the verdict says so; the fixture's stream (the same text for any prompt) still answers as the
/// reference does, and the stop trap shows through genai too.
#[test]
fn the_multimodal_gate_runs_through_genai_as_a_trial_of_its_own() {
    let root = workspace_root();
    let o = common::run(&root, "ocrbench_stop_trap/gemma4-mm-tiny/default/f32/accuracy_genai");
    assert_eq!(o.status, Status::Pass, "{}", o.message);
    let m = &o.message;
    assert!(m.contains("genai's processor built another prompt than the reference processor's for 4 of 4 items"), "{m}");
    assert!(m.contains("doc 3 (package): cut at \"  \": score 0 cut, 1 whole"), "{m}");
    assert!(m.contains("0 worse, 0 better"), "{m}");
}

/// A plumbing-only task (random weights) is held item for item: an output other than the reference's fails it,
/// even when both score 0 and the net rule and the paired test (too few items) cannot fail.
#[test]
fn a_plumbing_only_task_fails_on_any_output_other_than_the_references() {
    let t = task(Family::OcrBench, "ocrbench_accuracy", Direction::HigherIsBetter);
    let items: Vec<MediaItem> = (0..3).map(|i| item(i, "HARBOR", "IIIT5K")).collect();
    let reference = vec![out("HARBOR"), out("no"), out("no")];
    let got = vec![out("HARBOR"), out("other garbage"), out("no")];
    let mut r = media_gate::judge(&t, &items, &reference, &got, &protocol(), &policy(100.0)).unwrap();
    assert!(r.pass && r.flips.is_empty(), "no score changed: {:?}", r.reasons);
    media_gate::hold_outputs(&mut r, &items, &reference, &got);
    assert!(!r.pass);
    assert!(
        r.reasons.iter().any(|m| m.to_string().contains("plumbing only: 1 of 3 outputs differ from the reference's (docs 1)")),
        "{:?}",
        r.reasons
    );
    let mut same = media_gate::judge(&t, &items, &reference, &reference, &protocol(), &policy(100.0)).unwrap();
    media_gate::hold_outputs(&mut same, &items, &reference, &reference);
    assert!(same.pass, "{:?}", same.reasons);
}

/// A speech task whose references hold no words scores 0/0: nothing was measured, and the gate fails rather than
/// pass on NaN (every comparison with NaN is false).
#[test]
fn a_corpus_wer_over_no_words_fails() {
    let t = task(Family::LibriSpeech, "wer", Direction::LowerIsBetter);
    let items: Vec<MediaItem> = (0..2).map(|i| item(i, "", "asr_en")).collect();
    let outs = vec![out(" hello"), out(" world")];
    let r = media_gate::judge(&t, &items, &outs, &outs, &protocol(), &policy(1.0)).unwrap();
    assert!(!r.pass);
    assert!(
        r.reasons.iter().map(ToString::to_string).any(|m| m.contains("wer is not a number") && m.contains("nothing was scored")),
        "{:?}",
        r.reasons
    );
}

/// A document with an empty answer list cannot be scored (the scorers read its first answer): it is refused,
/// naming the task file and the document, before any model runs.
#[test]
fn an_item_without_answers_is_refused_by_document() {
    let mut t = task(Family::ChartQa, "relaxed_overall", Direction::HigherIsBetter);
    let doc = |answer: serde_json::Value| -> mobius_conformance::accuracy::doc::Doc {
        [
            ("question".to_string(), serde_json::json!("How many?")),
            ("answer".to_string(), answer),
            ("type".to_string(), serde_json::json!("human_test")),
            ("image".to_string(), serde_json::json!({ "bytes": null, "path": null })),
        ]
        .into_iter()
        .collect()
    };
    t.docs = vec![doc(serde_json::json!([]))];
    let e = t.items().unwrap_err().to_string();
    assert!(e.contains("t.yaml: document 0") && e.contains("an item needs at least one answer"), "{e}");
    // With an answer the same document gets past that check, to its image (which it does not hold).
    t.docs = vec![doc(serde_json::json!("36"))];
    let e = t.items().unwrap_err().to_string();
    assert!(!e.contains("answer") && e.contains("field `image`"), "{e}");
}

/// Which gate a task runs in: lmms-eval's files by their content, and any file whose case pins a protocol, so a
/// broken lmms-eval file (here: its `include:` missing) still reaches the multimodal loader and fails there by name.
#[test]
fn a_pinned_protocol_sends_a_task_to_the_multimodal_gate_even_when_its_file_is_broken() {
    use mobius_conformance::accuracy::resolve::{Overrides, Source, TaskKind};
    let root = workspace_root();
    let plain = Source::default();
    let pinned = Source { overrides: Overrides { protocol: Some(protocol()), ..Overrides::default() }, ..Source::default() };
    assert_eq!(TaskKind::of(&root, "tests/data/lmms/lmms_eval_tasks/ocrbench/ocrbench.yaml", &plain), TaskKind::Media);
    assert_eq!(TaskKind::of(&root, "cases/tasks/arith.yaml", &plain), TaskKind::Text);
    let s = Scratch::new("broken-lmms");
    write(&s.0.join("t.yaml"), "include: _missing_template_yaml\ntask: broken\n");
    assert_eq!(TaskKind::of(&s.0, "t.yaml", &plain), TaskKind::Text, "unreadable as lmms-eval's without a protocol");
    assert_eq!(TaskKind::of(&s.0, "t.yaml", &pinned), TaskKind::Media);
    let e = MediaTask::load(&s.0, "t.yaml", None, None, None).unwrap_err().to_string();
    assert!(e.contains("t.yaml") && e.contains("_missing_template_yaml"), "{e}");
}
