//! Drafted greedy decoding (`run::drafted`, the speech gate's fast path) gives the package's own greedy tokens,
//! whatever the draft: on the tiny Whisper fixture, against the step-by-step loop, with a right draft, a wrong one
//! (substituted, inserted, dropped tokens), garbage and none; and a cut-back KV cache continues as one never grown.

mod common;

use mobius_conformance::run::decoder::{Decoder, StepInput};
use mobius_conformance::run::drafted::greedy_drafted;
use mobius_conformance::run::encoder_session::Features;
use mobius_conformance::run::generate::{self, Generated, Suppress};
use mobius_conformance::run::pipeline::Pipeline;

use common::whisper_tiny::{BUDGET, NOTIMESTAMPS, PROMPT, SOT, decoder, package, states, suppress};

/// The fixture's decoder and the encoder states of its stored clip.
fn fixture() -> (std::sync::Arc<Decoder>, Features) {
    let pkg = package();
    (decoder(&pkg), states(&pkg))
}

/// The step-by-step loop's run to the budget, stopping after `eos`.
fn stepwise(d: &Decoder, pipeline: &Pipeline, eos: &[i64]) -> Generated {
    generate::greedy_with(d, pipeline, &PROMPT, BUDGET, eos, None, &[], &suppress()).unwrap()
}

/// Same tokens and steps as the step-by-step run, each step's top logits within float noise of its.
fn assert_same_run(what: &str, got: &Generated, want: &Generated) {
    assert_eq!(got.tokens, want.tokens, "{what}: tokens");
    assert_eq!(got.chosen(), want.chosen(), "{what}: choices");
    for (i, (g, w)) in got.steps.iter().zip(&want.steps).enumerate() {
        assert_eq!(g.top.ids, w.top.ids, "{what}: step {i}'s top ids");
        let diff = g.top.logits.iter().zip(&w.top.logits).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(diff < 1e-4, "{what}: step {i}'s top logits differ by {diff}");
        assert!(g.non_finite.is_none());
    }
    let diff = got.prefill_logits.iter().zip(&want.prefill_logits).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert_eq!(got.prefill_logits.len(), want.prefill_logits.len(), "{what}: the prefill's logits are the whole row");
    assert!(diff < 1e-4, "{what}: prefill logits differ by {diff}");
}

#[test]
fn any_draft_gives_the_step_by_step_greedy_tokens_and_a_right_one_takes_one_call() {
    let (d, s) = fixture();
    let pipeline = Pipeline::EncoderDecoder(s.clone());
    let want = stepwise(&d, &pipeline, &[]);
    assert_eq!(want.steps.len(), BUDGET);
    let right = want.tokens.clone();
    let run = |draft: &[i64]| greedy_drafted(&d, &pipeline, &PROMPT, BUDGET, &[], &suppress(), draft).unwrap();

    let exact = run(&right);
    assert_same_run("the run's own tokens as the draft", &exact.generated, &want);
    assert_eq!(exact.calls, 1, "a draft the package agrees with is checked in one call");

    let none = run(&[]);
    assert_same_run("no draft", &none.generated, &want);
    assert_eq!(none.calls, BUDGET, "no draft: one call a token");

    let mut substituted = right.clone();
    substituted[3] = 100 + (substituted[3] + 1) % 300;
    substituted[9] = 100 + (substituted[9] + 7) % 300;
    let mut inserted = right.clone();
    inserted.insert(5, 7);
    let mut dropped = right.clone();
    dropped.remove(6);
    let garbage: Vec<i64> = (0..40).map(|i| 4 + (i * 37) % 500).collect();
    for (what, draft) in [("substituted", substituted), ("inserted", inserted), ("dropped", dropped), ("garbage", garbage)] {
        let r = run(&draft);
        assert_same_run(what, &r.generated, &want);
        assert!(r.calls > 1 && r.calls <= BUDGET, "{what}: {} calls", r.calls);
    }

    // A draft that goes on past where the budget ends, and one that ends early: the budget and the draft's end hold.
    let longer: Vec<i64> = right.iter().chain(&right).copied().collect();
    assert_same_run("longer than the budget", &run(&longer).generated, &want);
    let shorter = run(&right[..8]);
    assert_same_run("shorter than the run", &shorter.generated, &want);
    assert!(shorter.calls <= 1 + BUDGET - 8, "{} calls", shorter.calls);
}

#[test]
fn the_run_stops_after_eos_as_the_step_by_step_loop_does() {
    let (d, s) = fixture();
    let pipeline = Pipeline::EncoderDecoder(s.clone());
    let full = stepwise(&d, &pipeline, &[]);
    // Take the token chosen at step 4 as the end of text: both loops stop after it (kept), on any draft.
    let eos = [full.tokens[4]];
    let first = full.tokens.iter().position(|t| *t == eos[0]).unwrap();
    let want = stepwise(&d, &pipeline, &eos);
    assert_eq!(want.tokens.len(), first + 1);
    for draft in [&full.tokens[..], &[], &full.tokens[..2]] {
        let r = greedy_drafted(&d, &pipeline, &PROMPT, BUDGET, &eos, &suppress(), draft).unwrap();
        assert_same_run("with an end of text", &r.generated, &want);
    }
}

#[test]
fn a_cache_cut_back_continues_as_one_grown_to_that_length() {
    let (d, s) = fixture();
    let tokens = [SOT, NOTIMESTAMPS, 40, 41, 42, 43, 44];
    let empty = d.new_cache_with(Some(&s)).unwrap();
    let (_, long) = d.forward(StepInput::Ids(tokens.to_vec()), &empty, 1).unwrap();
    let cut = d.truncate(&long, 4).unwrap();
    assert_eq!(cut.len, 4);
    let (_, short) = d.forward(StepInput::Ids(tokens[..4].to_vec()), &empty, 1).unwrap();
    let (a, _) = d.forward(StepInput::Ids(vec![99]), &cut, 1).unwrap();
    let (b, _) = d.forward(StepInput::Ids(vec![99]), &short, 1).unwrap();
    let diff = a.logits.iter().zip(&b.logits).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    assert!(diff < 1e-5, "the cut cache and the short one give logits {diff} apart");
    // Cutting past its length is refused, naming the model.
    let e = d.truncate(&long, 8).err().unwrap().to_string();
    assert!(e.contains("decoder/model.onnx") && e.contains("7-position") && e.contains("8 positions"), "{e}");
}

#[test]
fn a_pipeline_without_the_encoder_states_is_refused_and_a_non_finite_step_ends_the_run() {
    let pkg = package();
    let d = decoder(&pkg);
    let s = states(&pkg);
    let e = greedy_drafted(&d, &Pipeline::Text, &PROMPT, 4, &[], &Suppress::default(), &[]).err().unwrap().to_string();
    assert!(e.contains("encoder_hidden_states"), "a decoder that needs encoder states says so: {e}");
    // A decoder whose weights are all NaN: the first step is not finite, and the run ends there (the gate reports it).
    let scratch = common::Scratch::new("drafted-nan");
    common::copy_tree(&pkg, &scratch.0);
    let data = scratch.0.join("decoder/model.onnx.data");
    let n = std::fs::metadata(&data).unwrap().len() as usize;
    std::fs::write(&data, f32::NAN.to_le_bytes().repeat(n / 4)).unwrap();
    let nan = decoder(&scratch.0);
    let r = greedy_drafted(&nan, &Pipeline::EncoderDecoder(s), &PROMPT, 8, &[], &suppress(), &[40, 41, 42]).unwrap();
    assert_eq!(r.generated.steps.len(), 1);
    assert!(r.generated.steps[0].non_finite.is_some());
}
