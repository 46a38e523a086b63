//! The distribution level on bad input: a golden that is corrupt, of the wrong shape or made from another corpus, and
//! a `distribution:` block out of range, each failing its own trial with a message naming the file and field; the
//! speech form (utterances through the encoder) on the tiny Whisper fixture, with a changed clip, a broken corpus line
//! and a block a speech case cannot have; and the committed goldens within their size budget.

mod common;

use std::path::Path;

use common::{Scratch, run_all};
use mobius_conformance::level::dist::golden::DistGolden;
use mobius_conformance::outcome::Status;
use mobius_conformance::paths::workspace_root;

const GOLDEN: &str = "goldens/causal-lm/qwen3-tiny.dist.safetensors";

/// A self-contained root (`common::qwen3_tiny_root`) with `edit` applied to the case text.
fn root(tag: &str, edit: impl Fn(String) -> String) -> Scratch {
    common::qwen3_tiny_root(&format!("dist-{tag}"), edit)
}

fn dist_outcome(root: &Path) -> mobius_conformance::outcome::Outcome {
    run_all(root).into_iter().find(|(n, _)| n.ends_with("/dist")).expect("a dist trial").1
}

#[test]
fn the_committed_golden_passes_and_says_what_it_measured() {
    let s = root("clean", |t| t);
    let o = dist_outcome(&s.0);
    assert_eq!(o.status, Status::Pass, "{}", o.message);
    for needle in ["Mean    KLD", "99.0%   KLD", "Same top p", "Mean PPL(Q)/PPL(base)", "RMS Δp", "floor (float64)", "top 16 ids"] {
        assert!(o.message.contains(needle), "{needle}: {}", o.message);
    }
}

#[test]
fn a_corrupt_golden_fails_its_trial_naming_the_file() {
    let s = root("corrupt", |t| t);
    let path = s.0.join(GOLDEN);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let o = dist_outcome(&s.0);
    assert_eq!(o.status, Status::Fail);
    assert!(o.message.contains("qwen3-tiny.dist.safetensors"), "{}", o.message);
}

#[test]
fn a_golden_of_the_wrong_shape_fails_naming_the_tensor() {
    let bytes = std::fs::read(workspace_root().join(GOLDEN)).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let mut tensors: Vec<(String, safetensors::tensor::TensorView)> =
        st.tensors().into_iter().filter(|(n, _)| n != "tail_logprob").collect();
    // One entry short.
    let tail = st.tensor("tail_logprob").unwrap();
    let short = &tail.data()[..tail.data().len() - 4];
    tensors.push((
        "tail_logprob".into(),
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![tail.shape()[0] - 1], short).unwrap(),
    ));
    let bad = safetensors::serialize(tensors, meta.metadata().clone()).unwrap();
    let e = DistGolden::parse("x.dist.safetensors", &bad).unwrap_err().to_string();
    assert!(e.contains("x.dist.safetensors") && e.contains("tail_logprob") && e.contains("shape"), "{e}");
    // And a log-probability that is not one.
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let lp = st.tensor("target_logprob").unwrap();
    let mut data = lp.data().to_vec();
    data[..4].copy_from_slice(&f32::NAN.to_le_bytes());
    let mut tensors: Vec<(String, safetensors::tensor::TensorView)> =
        st.tensors().into_iter().filter(|(n, _)| n != "target_logprob").collect();
    tensors.push((
        "target_logprob".into(),
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, lp.shape().to_vec(), &data).unwrap(),
    ));
    let bad = safetensors::serialize(tensors, meta.metadata().clone()).unwrap();
    let e = DistGolden::parse("x.dist.safetensors", &bad).unwrap_err().to_string();
    assert!(e.contains("target_logprob") && e.contains("entry 0"), "{e}");
}

#[test]
fn a_changed_corpus_makes_the_golden_stale() {
    let s = root("stale", |t| t);
    let corpus = s.0.join("fixtures/dist/corpus.jsonl");
    let text = std::fs::read_to_string(&corpus).unwrap().replacen("harbour", "harbor", 1);
    std::fs::write(&corpus, text).unwrap();
    let o = dist_outcome(&s.0);
    assert_eq!(o.status, Status::Fail);
    assert!(
        o.message.contains("golden is stale") && o.message.contains("fixtures/dist/corpus.jsonl") && o.message.contains("regen-goldens"),
        "{}",
        o.message
    );
}

#[test]
fn a_distribution_block_out_of_range_fails_naming_the_field() {
    for (block, field) in [("{ n_ctx: 7, k: 16 }", "distribution.n_ctx"), ("{ n_ctx: 128, k: 0 }", "distribution.k")] {
        let s = root("range", |t| t.replace("distribution: { n_ctx: 128, k: 16 }", &format!("distribution: {block}")));
        for (name, o) in run_all(&s.0) {
            assert_eq!(o.status, Status::Fail, "{name}");
            assert!(o.message.contains(field), "{name}: {}", o.message);
        }
    }
    // An unknown field in the block is an error too, as everywhere in a case.
    let s = root("unknown", |t| t.replace("distribution: { n_ctx: 128, k: 16 }", "distribution: { n_ctx: 128, top_k: 16 }"));
    let all = run_all(&s.0);
    assert!(all.iter().all(|(_, o)| o.status == Status::Fail && o.message.contains("top_k")), "{:?}", all.first().map(|a| &a.1.message));
}

/// Every committed distribution golden within the budget docs/levels.md states (256 KiB), and readable.
#[test]
fn committed_dist_goldens_are_within_their_size_budget() {
    let mut found = 0;
    for dir in ["goldens/causal-lm", "goldens/real", "goldens/speech-to-text"] {
        for e in std::fs::read_dir(workspace_root().join(dir)).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".dist.safetensors") {
                continue;
            }
            let len = e.metadata().unwrap().len();
            assert!(len <= 256 * 1024, "{dir}/{name}: {len} bytes, over the 256 KiB budget");
            DistGolden::load(&e.path(), &name).unwrap();
            found += 1;
        }
    }
    assert!(found >= 6, "the tiny and the real goldens, text and speech: {found}");
}

/// A self-contained root with the tiny Whisper case, its package, goldens, clips and speech corpus; `edit` rewrites
/// the case text.
fn speech_root(tag: &str, edit: impl Fn(String) -> String) -> Scratch {
    let repo = workspace_root();
    let s = Scratch::new(&format!("dist-speech-{tag}"));
    for dir in ["fixtures/whisper-tiny", "fixtures/dist", "fixtures/media", "goldens/speech-to-text"] {
        common::copy_tree(&repo.join(dir), &s.0.join(dir));
    }
    let case = std::fs::read_to_string(repo.join("cases/speech-to-text/whisper-tiny.yaml")).unwrap();
    common::write(&s.0.join("cases/speech-to-text/whisper-tiny.yaml"), &edit(case));
    s
}

const SPEECH_BLOCK: &str = "distribution: { corpus: fixtures/dist/speech-tiny.jsonl, k: 16 }";

#[test]
fn a_speech_case_runs_the_level_on_its_utterances() {
    let s = speech_root("clean", |t| t);
    let all = run_all(&s.0);
    // Once per case, on its one modality (audio), beside L4 and L5.
    let dist: Vec<_> = all.iter().filter(|(n, _)| n.ends_with("/dist")).collect();
    assert_eq!(dist.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["whisper-tiny/audio/default/f32/dist"]);
    let o = &dist[0].1;
    assert_eq!(o.status, Status::Pass, "{}", o.message);
    assert!(o.message.contains("Mean    KLD") && o.message.contains("top 16 ids"), "{}", o.message);
    let g = DistGolden::load(&s.0.join("goldens/speech-to-text/whisper-tiny.dist.safetensors"), "g").unwrap();
    assert_eq!((g.chunks(), g.n_ctx()), (4, None), "four utterances, no chunk length");
    assert_eq!(g.segment_name(1), "utterance 1 (t2-train)");
}

#[test]
fn another_clip_makes_the_speech_golden_stale_naming_it() {
    let s = speech_root("clip", |t| t);
    let dir = s.0.join("fixtures/dist/audio");
    std::fs::copy(dir.join("t3-tea.flac"), dir.join("t2-train.flac")).unwrap();
    let o = dist_outcome(&s.0);
    assert_eq!(o.status, Status::Fail);
    assert!(o.message.contains("golden is stale") && o.message.contains("fixtures/dist/audio/t2-train.flac"), "{}", o.message);
}

#[test]
fn a_broken_speech_corpus_fails_naming_the_file_and_line() {
    for (from, to, needle) in [
        (r#""name": "t2-train", "#, "", "line 2"),
        (r#""name": "t2-train""#, r#""name": "t1-corner""#, "named twice"),
        (r#""audio": "fixtures/dist/audio/t3-tea.flac""#, r#""audio": "fixtures/dist/audio/t3-tea.flac", "lang": "en""#, "lang"),
        (r#""audio": "fixtures/dist/audio/t4-door.flac""#, r#""audio": "fixtures/dist/audio/none.flac""#, "none.flac"),
    ] {
        let s = speech_root("corpus", |t| t);
        let corpus = s.0.join("fixtures/dist/speech-tiny.jsonl");
        let text = std::fs::read_to_string(&corpus).unwrap();
        assert!(text.contains(from), "{from}");
        std::fs::write(&corpus, text.replacen(from, to, 1)).unwrap();
        let o = dist_outcome(&s.0);
        assert_eq!(o.status, Status::Fail, "{needle}");
        assert!(o.message.contains("speech-tiny.jsonl") && o.message.contains(needle), "{needle}: {}", o.message);
    }
}

#[test]
fn a_speech_case_names_its_corpus_and_has_no_chunk_length() {
    for (block, field) in [
        ("distribution: { k: 16 }", "distribution.corpus"),
        ("distribution: { corpus: fixtures/dist/speech-tiny.jsonl, n_ctx: 64, k: 16 }", "distribution.n_ctx"),
    ] {
        let s = speech_root("block", |t| t.replace(SPEECH_BLOCK, block));
        let all = run_all(&s.0);
        assert!(!all.is_empty());
        for (name, o) in all {
            assert_eq!(o.status, Status::Fail, "{name}");
            assert!(o.message.contains(field), "{name}: {}", o.message);
        }
    }
}

#[test]
fn a_speech_golden_whose_lengths_do_not_add_up_is_refused() {
    let bytes = std::fs::read(workspace_root().join("goldens/speech-to-text/whisper-tiny.dist.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let lengths = st.tensor("lengths").unwrap();
    let mut data = lengths.data().to_vec();
    let first = i32::from_le_bytes(data[..4].try_into().unwrap());
    data[..4].copy_from_slice(&(first + 1).to_le_bytes());
    let mut tensors: Vec<(String, safetensors::tensor::TensorView)> = st.tensors().into_iter().filter(|(n, _)| n != "lengths").collect();
    tensors
        .push(("lengths".into(), safetensors::tensor::TensorView::new(safetensors::Dtype::I32, lengths.shape().to_vec(), &data).unwrap()));
    let bad = safetensors::serialize(tensors, meta.metadata().clone()).unwrap();
    let e = DistGolden::parse("x.dist.safetensors", &bad).unwrap_err().to_string();
    assert!(e.contains("x.dist.safetensors") && e.contains("lengths") && e.contains("sums to"), "{e}");
}
