//! The accuracy gate: lm-eval 0.4's scoring and tokenization rules on crafted items, and the gate on the trained
//! fixture, where a deliberately broken copy must fail with its delta and the items that flipped.

mod common;

use std::path::{Path, PathBuf};

use common::{Scratch, copy_tree, run, write};
use mobius_conformance::accuracy::answer;
use mobius_conformance::accuracy::gate::{self, Baseline, BaselineItem};
use mobius_conformance::accuracy::policy::GatePolicy;
use mobius_conformance::accuracy::scoring::{self, Scored};
use mobius_conformance::accuracy::task::spec::Metric;
use mobius_conformance::accuracy::task::{self, Item, ItemKind, Task};
use mobius_conformance::feed::tokenizer::TextTokenizer;
use mobius_conformance::judge::golden::{Hex, Provenance};
use mobius_conformance::level::gate::judged::TextJudged;
use mobius_conformance::outcome::Status;
use mobius_conformance::paths::workspace_root;
use onnx_bytes::Model;

fn tokenizer() -> std::sync::Arc<TextTokenizer> {
    TextTokenizer::load(&workspace_root().join("fixtures/tokenizer")).unwrap()
}

#[test]
fn acc_and_acc_norm_disagree_where_lm_eval_does() {
    // A short choice with the higher raw log-likelihood, a long one with the higher per-character one.
    let choices = vec!["no".to_string(), "absolutely not".to_string()];
    let picks = scoring::pick(&[-3.0, -7.0], &choices);
    assert_eq!((picks.acc, picks.acc_norm), (0, 1), "acc takes the raw sum, acc_norm divides by 2 and 14 characters");
    // Ties go to the first choice, as numpy's argmax does.
    assert_eq!(scoring::pick(&[-1.0, -1.0, -2.0], &["a".into(), "b".into(), "c".into()]).acc, 0);
    // The length is counted in characters, not bytes, and without the target delimiter.
    let picks = scoring::pick(&[-2.0, -3.0], &["é".to_string(), "abc".to_string()]);
    assert_eq!(picks.acc_norm, 1, "-2/1 < -3/3");
}

#[test]
fn log_softmax_and_standard_error() {
    let logits = [1.0f32, 2.0, 3.0];
    let lp = scoring::log_prob(&logits, 2);
    let want = 3.0 - (1.0f64.exp() + 2.0f64.exp() + 3.0f64.exp()).ln();
    assert!((lp as f64 - want).abs() < 1e-6, "{lp} vs {want}");
    let (ll, greedy) = scoring::continuation_loglik([&logits[..], &logits[..]], &[2, 0]);
    assert!(!greedy, "the second token is not the argmax");
    assert!((ll - (lp as f64 + scoring::log_prob(&logits, 0) as f64)).abs() < 1e-6);
    // lm-eval's mean_stderr: sample standard deviation / sqrt(n).
    let (mean, se) = scoring::mean_stderr(&[true, true, false, false]);
    assert_eq!(mean, 0.5);
    assert!((se - (1.0f64 / 3.0).sqrt() / 2.0).abs() < 1e-12, "{se}");
}

#[test]
fn trailing_whitespace_of_the_context_moves_to_the_continuation() {
    let tok = tokenizer();
    for (ctx, moved) in [("Answer: ", " "), ("Answer:\n", "\n")] {
        let pair = task::encode_pair(&tok, ctx, "Paris").unwrap();
        assert_eq!(pair.context_text, "Answer:");
        assert_eq!(pair.continuation_text, format!("{moved}Paris"));
        let whole = tok.encode(&format!("Answer:{moved}Paris")).unwrap();
        assert_eq!(pair.context, tok.encode("Answer:").unwrap(), "the context is tokenized alone, with BOS");
        assert_eq!(pair.continuation, whole[pair.context.len()..], "the continuation is the whole string's tail");
        assert!(!pair.boundary_merge);
    }
}

#[test]
fn a_token_merging_across_the_boundary_is_counted() {
    let tok = tokenizer();
    // This BPE has a token for "print"'s tail "nt" after "pri" that differs from "pri" alone: the whole string's
    // tokens do not start with the context's.
    let pair = task::encode_pair(&tok, "pri", "nt").unwrap();
    assert!(pair.boundary_merge, "{pair:?}");
    let whole = tok.encode("print").unwrap();
    assert_eq!(pair.continuation, whole[pair.context.len()..], "lm-eval still takes the whole string's tail");
    assert!(!task::encode_pair(&tok, "import", " os").unwrap().boundary_merge);

    // Through a task: the merging item is flagged, the clean one is not.
    let s = Scratch::new("gate-merge");
    write(
        &s.0.join("data.jsonl"),
        "{\"q\": \"pri\", \"c\": [\"nt\", \"ze\"], \"g\": 0}\n{\"q\": \"import\", \"c\": [\"os\", \"sys\"], \"g\": 1}\n",
    );
    write(
        &s.0.join("t.yaml"),
        "test: data.jsonl\noutput_type: multiple_choice\ndoc_to_text: \"{{q}}\"\ndoc_to_choice: c\ndoc_to_target: g\ntarget_delimiter: \"\"\nmetric: acc\n",
    );
    let t = Task::load(&s.0, "t.yaml").unwrap();
    let items = t.items(&tok).unwrap();
    let merges: Vec<bool> = items.iter().map(|i| matches!(i.kind, ItemKind::MultipleChoice { boundary_merge: true, .. })).collect();
    assert_eq!(merges, [true, false]);
}

#[test]
fn fewshot_context_follows_first_n_and_the_delimiters() {
    let s = Scratch::new("gate-fewshot");
    write(
        &s.0.join("train.jsonl"),
        "{\"q\": \"1+1=\", \"c\": [\"2\", \"3\"], \"g\": 0}\n{\"q\": \"2+2=\", \"c\": [\"5\", \"4\"], \"g\": 1}\n{\"q\": \"9+9=\", \"c\": [\"18\", \"19\"], \"g\": 0}\n",
    );
    write(&s.0.join("test.jsonl"), "{\"q\": \"3+3=\", \"c\": [\"6\", \"7\"], \"g\": 0}\n");
    write(
        &s.0.join("t.yaml"),
        "test: test.jsonl\nfewshot: train.jsonl\nnum_fewshot: 2\noutput_type: multiple_choice\ndoc_to_text: \"{{q}}\"\ndoc_to_choice: c\ndoc_to_target: g\nmetric: acc_norm\n",
    );
    let t = Task::load(&s.0, "t.yaml").unwrap();
    assert_eq!(t.fewshot_prefix(None).unwrap(), "1+1= 2\n\n2+2= 4\n\n");
    let items = t.items(&tokenizer()).unwrap();
    assert_eq!(items[0].context, "1+1= 2\n\n2+2= 4\n\n3+3=");
    // Unknown fields and metric/output mismatches are errors naming the file.
    write(&s.0.join("bad.yaml"), "test: test.jsonl\noutput_type: multiple_choice\ndoc_to_text: q\ndoc_to_target: g\nmetric: exact_match\n");
    let e = Task::load(&s.0, "bad.yaml").unwrap_err().to_string();
    assert!(e.contains("bad.yaml") && e.contains("exact_match"), "{e}");
    write(&s.0.join("typo.yaml"), "test: test.jsonl\noutput_type: multiple_choice\ndoc_to_txt: q\ndoc_to_target: g\nmetric: acc\n");
    let e = Task::load(&s.0, "typo.yaml").unwrap_err().to_string();
    assert!(e.contains("typo.yaml") && e.contains("doc_to_txt"), "{e}");
}

#[test]
fn generate_until_cuts_at_the_stop_string_and_extracts_the_answer() {
    assert_eq!(answer::cut_at_stop(" 46\n12+3", &["\n".into()]), " 46");
    assert_eq!(answer::extract_answer(Some(r"(\d+)"), " 46"), "46");
    assert_eq!(answer::extract_answer(Some(r"(\d+)"), " none"), "[invalid]");
}

fn provenance() -> Provenance {
    Provenance {
        reference: "x".into(),
        transformers: "t".into(),
        torch: "t".into(),
        dtype: "float32".into(),
        device: "cpu".into(),
        weights: None,
    }
}

/// A two-choice item answered by choice 0 (`acc`): crafted, no tokenizer or session.
fn item(doc: usize) -> Item {
    Item {
        doc,
        context: String::new(),
        kind: ItemKind::MultipleChoice {
            choices: vec!["a".into(), "b".into()],
            gold: 0,
            context_ids: vec![],
            continuations: vec![],
            boundary_merge: false,
        },
    }
}

/// A baseline over crafted reference log-likelihoods.
fn baseline(items: &[Item], reference: &[[f64; 2]]) -> Baseline {
    Baseline {
        task: "t".into(),
        model: "m".into(),
        metric: "acc".into(),
        num_fewshot: 0,
        n: reference.len(),
        accuracy: 0.0,
        stderr: 0.0,
        acc: None,
        acc_norm: None,
        boundary_merges: 0,
        requests_hash: gate::requests_hash(items),
        items: reference.iter().map(|r| BaselineItem { logliks: r.iter().map(|&x| Hex(x)).collect(), answer: None }).collect(),
        provenance: provenance(),
    }
}

const RIGHT: [f64; 2] = [-1.0, -2.0];
const WRONG: [f64; 2] = [-2.0, -1.0];

/// `n` items: the reference right on `ref_right` of them; the package loses `lost` of those and gains `gained` of
/// the others.
fn paired(n: usize, ref_right: usize, lost: usize, gained: usize) -> (Vec<Item>, Baseline, Vec<Scored>) {
    let items: Vec<Item> = (0..n).map(item).collect();
    let reference: Vec<[f64; 2]> = (0..n).map(|i| if i < ref_right { RIGHT } else { WRONG }).collect();
    let got = (0..n)
        .map(|i| {
            let right = if i < ref_right { i >= lost } else { i - ref_right < gained };
            Scored::Choices(if right { RIGHT } else { WRONG }.to_vec())
        })
        .collect();
    let b = baseline(&items, &reference);
    (items, b, got)
}

#[test]
fn the_gate_reports_delta_flips_and_margins() {
    let items: Vec<Item> = (0..8).map(item).collect();
    let reference = [[-1.0, -2.0], [-1.0, -1.5], [-3.0, -1.0], [-1.0, -4.0]];
    let b = baseline(&items, &[reference, reference].concat());
    // Items 1 and 5 flip from right to wrong (near ties in the reference: margin 0.5).
    let got: Vec<Scored> =
        [[-1.0, -2.0], [-1.6, -1.5], [-3.0, -1.0], [-1.0, -4.0]].repeat(2).iter().map(|r| Scored::Choices(r.to_vec())).collect();
    let policy = GatePolicy { max_delta_points: 20.0, ..GatePolicy::default() };
    let r = gate::judge(&items, &got, &b, Metric::Acc, &policy).unwrap();
    assert_eq!((r.reference, r.got), (0.75, 0.5));
    assert!(!r.pass && (r.delta_points + 25.0).abs() < 1e-9 && !r.too_small, "{r:?}");
    assert_eq!((r.lost, r.gained, r.flips.len()), (2, 0, 2));
    let f = &r.flips[0];
    assert_eq!((f.doc, f.reference.as_str(), f.got.as_str(), f.reference_correct, f.got_correct), (1, "0", "1", true, false));
    assert_eq!(f.reference_margin, Some(0.5));
    assert!((f.got_margin.unwrap() - 0.1).abs() < 1e-12, "both margins, for the report: {f:?}");
    let text = mobius_conformance::level::gate::render::text_message("t/m/cpu/f32/accuracy", Metric::Acc, &r, "b.json", "regen");
    for want in ["delta -25.00 points", "doc 1", "margin 0.5000", "McNemar exact p = 0.5000", "2 lost", "net delta -25.00 points exceeds"] {
        assert!(text.contains(want), "{want:?} in\n{text}");
    }
    // Within the allowed delta it passes, and still lists the flip.
    let r = gate::judge(&items, &got, &b, Metric::Acc, &GatePolicy { max_delta_points: 30.0, ..policy }).unwrap();
    assert!(r.pass && r.flips.len() == 2, "{r:?}");
}

#[test]
fn mcnemar_exact_matches_the_binomial_test() {
    // Two-sided exact binomial test at 1/2 (scipy.stats.binomtest gives the same numbers).
    assert_eq!(gate::mcnemar_exact(0, 0), 1.0);
    assert_eq!(gate::mcnemar_exact(7, 7), 1.0);
    assert!((gate::mcnemar_exact(6, 0) - 0.03125).abs() < 1e-15);
    assert!((gate::mcnemar_exact(2, 10) - 0.03857421875).abs() < 1e-12);
    assert!((gate::mcnemar_exact(40, 20) - 0.01348929373119186).abs() < 1e-12);
    assert!(gate::mcnemar_exact(3000, 2000) < 1e-40, "no underflow to NaN past 1074 flips");
    assert_eq!(gate::min_significant_flips(0.05), 6);
    assert_eq!(gate::min_significant_flips(0.01), 8);
}

#[test]
fn significant_flips_fail_even_when_they_cancel_out_within_a_point() {
    // 2,000 items: the package loses 40 the reference got right and gains 20 others. Net -1.00 point passes the
    // +-1 rule; the flips lean 2:1 one way, which chance explains with p = 0.0135.
    let (items, b, got) = paired(2000, 1500, 40, 20);
    let r = gate::judge(&items, &got, &b, Metric::Acc, &GatePolicy::default()).unwrap();
    assert!((r.delta_points + 1.0).abs() < 1e-9, "{}", r.delta_points);
    assert_eq!((r.lost, r.gained), (40, 20));
    assert!((r.flip_p_value - 0.01348929373119186).abs() < 1e-12, "{}", r.flip_p_value);
    assert!(!r.pass, "{:?}", r.reasons);
    assert_eq!(r.reasons.len(), 1, "only the flip test fails: {:?}", r.reasons);
    let text = mobius_conformance::level::gate::render::text_message("t/m/cpu/int4/accuracy", Metric::Acc, &r, "b.json", "regen");
    assert!(text.contains("FAIL") && text.contains("the flips lean one way: 40 lost, 20 gained, McNemar exact p = 0.0135"), "{text}");
    eprintln!("{text}");
    // The same net delta from flips that go one way only is caught by both rules; balanced flips by neither,
    // unless `max_flipped_points` bounds them.
    let (items, b, got) = paired(2000, 1500, 30, 30);
    let r = gate::judge(&items, &got, &b, Metric::Acc, &GatePolicy::default()).unwrap();
    assert!(r.pass && r.flip_p_value == 1.0, "{:?}", r.reasons);
    let r = gate::judge(&items, &got, &b, Metric::Acc, &GatePolicy { max_flipped_points: Some(2.0), ..GatePolicy::default() }).unwrap();
    assert!(!r.pass && r.reasons[0].to_string().contains("60 items changed correctness (3.00 points)"), "{:?}", r.reasons);
}

#[test]
fn a_task_too_small_for_its_gate_warns_and_ci_refuses_it() {
    // 30 items: one flip is 3.33 points, more than +-1. The net rule cannot be honoured; the flip test decides.
    let (items, b, got) = paired(30, 20, 1, 0);
    let r = gate::judge(&items, &got, &b, Metric::Acc, &GatePolicy::default()).unwrap();
    assert!(r.too_small && r.pass, "{:?}", r.reasons);
    assert!((r.points_per_item - 100.0 / 30.0).abs() < 1e-12);
    assert!((r.min_detectable_points - 20.0).abs() < 1e-9, "6 one-way flips of 30: {}", r.min_detectable_points);
    assert!(
        r.reasons[0].to_string().starts_with("WARNING: the task is too small to decide +-1.00 points")
            && r.reasons[0].to_string().contains("100 items"),
        "{:?}",
        r.reasons
    );
    let text = mobius_conformance::level::gate::render::text_message("t", Metric::Acc, &r, "b.json", "regen");
    assert!(text.contains("minimum detectable delta: 20.00 points (6 one-way flips at n=30); one item = 3.33 points"), "{text}");
    let r = gate::judge(&items, &got, &b, Metric::Acc, &GatePolicy { refuse_small: true, ..GatePolicy::default() }).unwrap();
    assert!(!r.pass && r.reasons[0].to_string().contains("refused (CI)"), "{:?}", r.reasons);
    // Six one-way flips are significant even there.
    let (items, b, got) = paired(30, 20, 6, 0);
    let r = gate::judge(&items, &got, &b, Metric::Acc, &GatePolicy::default()).unwrap();
    assert!(!r.pass && r.flip_p_value < 0.05, "{:?}", r.reasons);
    // 150 items (the arith tasks): decidable, and the flip test sees one-way shifts from 4 points.
    let (items, b, got) = paired(150, 140, 0, 0);
    let r = gate::judge(&items, &got, &b, Metric::Acc, &GatePolicy::default()).unwrap();
    assert!(!r.too_small && r.pass && (r.min_detectable_points - 4.0).abs() < 1e-9, "{r:?}");
    // Thresholds are checked where they are read.
    let e = GatePolicy { flip_alpha: 1.5, ..GatePolicy::default() }.validate("t.yaml").unwrap_err().to_string();
    assert!(e.contains("t.yaml") && e.contains("flip_alpha"), "{e}");
}

/// The trained fixture's case, in a scratch root, with every variant pointed at `package` when given.
fn arith_root(tag: &str, package: Option<&Path>) -> Scratch {
    let repo = workspace_root();
    let s = Scratch::new(tag);
    let mut text = std::fs::read_to_string(repo.join("cases/accuracy/arith-tiny.yaml")).unwrap();
    text = text.replace("\"fixtures/", &format!("\"{}/fixtures/", repo.display()));
    if let Some(p) = package {
        text = text.replace(&format!("{}/fixtures/arith-tiny/onnx/{{ep}}-{{dtype}}", repo.display()), &p.display().to_string());
    }
    write(&s.0.join("cases/accuracy/arith-tiny.yaml"), &format!("{text}external_paths: true\n"));
    std::fs::copy(repo.join("cases/tolerances.yaml"), s.0.join("cases/tolerances.yaml")).unwrap();
    copy_tree(&repo.join("goldens/baselines"), &s.0.join("goldens/baselines"));
    copy_tree(&repo.join("cases/tasks"), &s.0.join("cases/tasks"));
    copy_tree(&repo.join("fixtures/tasks"), &s.0.join("fixtures/tasks"));
    s
}

/// The trained model with its layer-1 MLP down projection scaled by 0.5: a plausible export bug (a wrong scale).
fn broken_arith(dir: &Path) -> PathBuf {
    let out = dir.join("broken-f32");
    copy_tree(&workspace_root().join("fixtures/arith-tiny/onnx/default-f32"), &out);
    let mut m = Model::read(&out.join("model.onnx")).unwrap();
    let name = m.graph.initializers.iter().find(|t| t.name.contains("layers.1.mlp.down_proj")).expect("down_proj").name.clone();
    let w: Vec<f32> = m.f32s(&name).unwrap().iter().map(|x| x * 0.5).collect();
    m.set_f32s(&name, &w).unwrap();
    m.write(&out).unwrap();
    out
}

#[test]
fn the_gate_passes_the_trained_fixture_and_fails_a_broken_copy() {
    let clean = arith_root("gate-clean", None);
    let o = run(&clean.0, "arith/arith-tiny/default/f32/accuracy");
    assert_eq!(o.status, Status::Pass, "{}", o.message);
    assert!(o.message.contains("acc 97.33%") && o.message.contains("reference 97.33%"), "{}", o.message);

    let work = Scratch::new("gate-broken-pkg");
    let pkg = broken_arith(&work.0);
    let broken = arith_root("gate-broken", Some(&pkg));
    let o = run(&broken.0, "arith/arith-tiny/default/f32/accuracy");
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains("delta -") && o.message.contains("item(s) flipped") && o.message.contains("doc "), "{}", o.message);
    let Some(a) = o.judgement.as_ref().and_then(|j| j.downcast::<TextJudged>()).map(|j| &j.numbers) else {
        panic!("no accuracy judgement: {o:?}")
    };
    assert!(a.delta_points < -1.0 && !a.flips.is_empty(), "more than a point: {}", o.message);
    assert_eq!(o.max_abs_diff, a.max_loglik_diff, "max |diff| is the log-likelihoods', not the accuracy points");
    eprintln!("{}", o.message);
}

/// The gate checks the vocabulary before it scores: a package whose logits are not the vocabulary its own config
/// states (here 20 against the logits' 18) is `vocab_size`, at the first document, not an accuracy change.
#[test]
fn the_gate_refuses_logits_of_another_vocabulary_than_the_package_states() {
    let work = Scratch::new("gate-vocab-pkg");
    let pkg = work.0.join("vocab-f32");
    copy_tree(&workspace_root().join("fixtures/arith-tiny/onnx/default-f32"), &pkg);
    let cfg = pkg.join("genai_config.json");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("\"vocab_size\": 18"), "{text}");
    std::fs::write(&cfg, text.replace("\"vocab_size\": 18", "\"vocab_size\": 20")).unwrap();
    let s = arith_root("gate-vocab", Some(&pkg));
    let o = run(&s.0, "arith/arith-tiny/default/f32/accuracy");
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains("vocab_size: expected 20, got 18") && o.message.contains("document 0"), "{}", o.message);
    assert_eq!(o.failure.expect("a measured failure").kind.name(), "vocab_size");
}

#[test]
fn a_baseline_from_other_requests_is_stale_and_a_missing_one_says_how_to_make_it() {
    let s = arith_root("gate-stale", None);
    // One document's question edited: the requests no longer hash to the baseline's.
    let data = s.0.join("fixtures/tasks/arith/test.jsonl");
    let text = std::fs::read_to_string(&data).unwrap();
    std::fs::write(&data, text.replacen("\"question\": \"", "\"question\": \"1", 1)).unwrap();
    let o = run(&s.0, "arith/arith-tiny/default/f32/accuracy");
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains("baseline is stale") && o.message.contains("goldens/baselines/arith/arith-tiny.json"), "{}", o.message);
    assert!(o.message.contains("cargo xtask regen-goldens --case arith-tiny"), "{}", o.message);

    std::fs::remove_file(s.0.join("goldens/baselines/arith-control/arith-tiny.json")).unwrap();
    let o = run(&s.0, "arith-control/arith-tiny/default/f32/accuracy");
    assert_eq!(o.status, Status::Skip, "{}", o.message);
    assert!(o.message.contains("no golden at goldens/baselines/arith-control/arith-tiny.json"), "{}", o.message);
    let under_ci = common::run_in(&s.0, "arith-control/arith-tiny/default/f32/accuracy", &common::ci());
    assert_eq!(under_ci.status, Status::Fail, "{}", under_ci.message);
    assert!(under_ci.message.contains("CI is set"), "{}", under_ci.message);
    assert!(o.message.contains("cargo xtask regen-goldens --case arith-tiny"), "{}", o.message);
}

/// The gate's cached scoring (the context once, each distinct run of continuation tokens once from its cache, the
/// items shared out to two sessions) against lm-eval's own requests (context + continuation in one pass per choice):
/// every log-likelihood within the L4 f32 policy's per-logit tolerance times 2 (a log-probability is a logit minus a
/// logsumexp) per continuation token, the same picks, and the two-worker run equal to the one-worker run bit for bit.
#[test]
fn cached_scoring_agrees_with_lm_evals_uncached_requests() {
    use mobius_conformance::accuracy::eval::{self, Strategy};
    use mobius_conformance::feed::package::{GenaiConfig, package_model};
    use mobius_conformance::run::decoder::Decoder;
    use mobius_conformance::run::runtime::Provider;
    use mobius_conformance::run::sessions;
    let root = workspace_root();
    let package = root.join("fixtures/arith-tiny/onnx/default-f32");
    let model = package_model(&package).unwrap();
    let decoders = [sessions::decoder(&model, Provider::Cpu).unwrap(), sessions::decoder_replica(&model, Provider::Cpu).unwrap()];
    let cfg = GenaiConfig::load(&package).unwrap();
    let tok = TextTokenizer::load(&root.join("fixtures/arith-tiny/hf")).unwrap();
    let atol = mobius_conformance::judge::tolerance::Tolerance::builtin(
        mobius_conformance::judge::tolerance::Logits::Prefill,
        mobius_conformance::vocab::Dtype::F32,
    )
    .atol;
    let mut compared = 0;
    for file in ["cases/tasks/arith.yaml", "cases/tasks/arith-3shot.yaml"] {
        let loaded = task::load_items(&root, file, &tok, false).unwrap();
        let (task, items) = (&loaded.0, &loaded.1);
        let score =
            |d: &[std::sync::Arc<Decoder>], s| eval::score(d, task, items, &tok, &cfg.eos_token_ids, cfg.vocab_size, s).unwrap().scored;
        let (cached, one, uncached) =
            (score(&decoders, Strategy::Cached), score(&decoders[..1], Strategy::Cached), score(&decoders[..1], Strategy::Uncached));
        assert_eq!(cached, one, "{file}: two workers score exactly as one");
        for ((c, u), item) in cached.iter().zip(&uncached).zip(items) {
            let (Scored::Choices(c), Scored::Choices(u), ItemKind::MultipleChoice { continuations, choices, .. }) = (c, u, &item.kind)
            else {
                panic!("{file}: multiple-choice items only")
            };
            for ((a, b), cont) in c.iter().zip(u).zip(continuations) {
                let bound = 2.0 * atol * cont.len() as f64;
                assert!((a - b).abs() <= bound, "{file} doc {}: cached {a} uncached {b} (bound {bound})", item.doc);
                compared += 1;
            }
            assert_eq!(scoring::pick(&c[..], choices), scoring::pick(&u[..], choices), "{file} doc {}", item.doc);
        }
    }
    assert!(compared > 1000, "{compared} log-likelihoods compared");
}
