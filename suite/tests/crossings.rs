//! What crosses between the host and the device per call, checked on the CPU: `run::crossing` records every value a
//! decoder call hands the session from the host and every output it reads back, as a device run moves them (on the
//! CPU nothing moves, but the calls are the same). docs/running.md's device section states these lists; the KV cache
//! never appears in them, and a prefill reads one row, not its `[prompt, vocab]` block.

mod common;

use common::whisper_tiny;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::run::crossing::{Crossing, Way, recorded};
use mobius_conformance::run::decoder::{Decoder, StepInput};
use mobius_conformance::run::runtime::Provider;
use mobius_conformance::run::sessions;

const PROMPT: [i64; 5] = [2, 40, 41, 42, 43];

fn decoder(pkg: &str) -> std::sync::Arc<Decoder> {
    sessions::decoder(&workspace_root().join("fixtures").join(pkg).join("model.onnx"), Provider::Cpu).unwrap()
}

fn to_device(name: &str, bytes: usize) -> Crossing {
    Crossing { way: Way::ToDevice, name: name.into(), bytes }
}

fn to_host(name: &str, bytes: usize) -> Crossing {
    Crossing { way: Way::ToHost, name: name.into(), bytes }
}

/// The step inputs a call of `t` tokens after `past` positions binds from the host (int64 each), in the order
/// `Decoder::feeds` makes them.
fn step_inputs(d: &Decoder, t: usize, past: usize) -> Vec<Crossing> {
    let names = &d.io.names;
    let mut want = vec![to_device(&names.input_ids, 8 * t)];
    if d.io.has_attention_mask {
        want.push(to_device(&names.attention_mask, 8 * (past + t)));
    }
    if d.io.has_position_ids {
        want.push(to_device(&names.position_ids, 8 * t));
    }
    want
}

#[test]
fn a_generation_sends_its_inputs_and_reads_one_row_of_logits_per_call() {
    // A cache that grows step by step (position ids) and a shared past/present buffer (a `cpu` build).
    for pkg in ["qwen3-tiny/onnx/default-f32", "llama-tiny/onnx/cpu-f32"] {
        let d = decoder(pkg);
        let vocab = d.io.vocab.expect("the fixtures declare their vocabulary") as usize;
        let mut g = d.start(PROMPT.len() + 4).unwrap();
        // The prompt: its inputs go over, and of its [1, 5, vocab] logits only the last row comes back.
        let (first, moved) = recorded(|| d.advance(&mut g, StepInput::Ids(PROMPT.to_vec())).map(|l| l.len()));
        assert_eq!(first.unwrap(), vocab, "{pkg}");
        let mut want = step_inputs(&d, PROMPT.len(), 0);
        want.push(to_host("logits", 4 * vocab));
        assert_eq!(moved, want, "{pkg}: a generation's prompt");
        // A one-token step: its token, position and mask go over, its logits row comes back; the cache stays.
        for step in 0..3 {
            let (_, moved) = recorded(|| d.advance_token(&mut g, 7).unwrap().len());
            let names = &d.io.names;
            let mut want = vec![to_device(&names.input_ids, 8)];
            if d.io.has_position_ids {
                want.push(to_device(&names.position_ids, 8));
            }
            if d.io.has_attention_mask {
                want.push(to_device(&names.attention_mask, 8 * (PROMPT.len() + step + 1)));
            }
            want.push(to_host("logits", 4 * vocab));
            assert_eq!(moved, want, "{pkg}: one-token step {step}");
        }
    }
}

#[test]
fn a_prefill_check_reads_its_block_once_and_the_gate_reads_only_the_rows_it_scores() {
    let d = decoder("qwen3-tiny/onnx/default-f32");
    let vocab = d.io.vocab.unwrap() as usize;
    // L4's every-position check: the [1, 5, vocab] block comes back once, for the last row and the summaries.
    let watch: Vec<Vec<i64>> = PROMPT.iter().map(|&id| vec![id]).collect();
    let watch: Vec<&[i64]> = watch.iter().map(Vec::as_slice).collect();
    let (out, moved) = recorded(|| d.prefill_positions(StepInput::Ids(PROMPT.to_vec()), None, &watch).unwrap());
    assert_eq!(out.1.len(), PROMPT.len());
    let mut want = step_inputs(&d, PROMPT.len(), 0);
    want.push(to_host("logits", 4 * vocab * PROMPT.len()));
    assert_eq!(moved, want, "L4's prefill");

    // The gate's multiple-choice scoring (`accuracy::eval`): the context and its common tokens from an empty cache,
    // reading the rows that predict the continuations (3 of 5 here) ...
    let empty = d.new_cache().unwrap();
    let ((head, cache), moved) = recorded(|| d.forward(StepInput::Ids(PROMPT.to_vec()), &empty, 3).unwrap());
    assert_eq!(head.logits.len(), 3 * vocab);
    let mut want = step_inputs(&d, PROMPT.len(), 0);
    want.push(to_host("logits", 4 * vocab * 3));
    assert_eq!(moved, want, "the gate's context pass");
    // ... then each continuation's own tokens after that cache, which stays on the device.
    let (_, moved) = recorded(|| d.forward(StepInput::Ids(vec![9, 10]), &cache, 2).unwrap());
    let mut want = step_inputs(&d, 2, PROMPT.len());
    want.push(to_host("logits", 4 * vocab * 2));
    assert_eq!(moved, want, "a continuation after the shared cache");

    // Drafted decoding's rejected guess: the one call that takes the cache through the host (out and back).
    let (cut, moved) = recorded(|| d.truncate(&cache, 3).unwrap());
    assert_eq!(cut.len, 3);
    let layers = d.io.cache.len();
    assert_eq!(moved.len(), 4 * layers, "each layer's key and value, out and back: {moved:?}");
    assert!(moved.iter().all(|c| c.name == "past cache"), "{moved:?}");
}

#[test]
fn an_encoder_decoders_states_go_over_once_for_every_call_on_their_cache() {
    // Whisper's decoder reads its encoder's states at every call: they cross when the cache is made, never again.
    let pkg = whisper_tiny::package();
    let (d, states) = (whisper_tiny::decoder(&pkg), whisper_tiny::states(&pkg));
    let context = d.io.context.as_ref().expect("Whisper's decoder reads encoder states").name.clone();
    let (cache, moved) = recorded(|| d.new_cache_with(Some(&states)).unwrap());
    assert_eq!(moved, vec![to_device(&context, 4 * states.data.len())], "the states, once");
    let mut cache = cache;
    let vocab = d.io.vocab.expect("the fixture declares its vocabulary") as usize;
    for (i, ids) in [whisper_tiny::PROMPT.to_vec(), vec![40], vec![41]].into_iter().enumerate() {
        let (past, t) = (cache.len, ids.len());
        let (_, moved) = recorded(|| d.step(StepInput::Ids(ids), &mut cache).unwrap());
        let mut want = step_inputs(&d, t, past);
        want.push(to_host(&d.io.names.logits, 4 * vocab));
        assert_eq!(moved, want, "call {i}: its inputs and one row; neither the states nor the cache");
    }
}

#[test]
fn a_nested_recording_is_seen_by_the_outer_one_and_a_panic_restores_it() {
    let d = decoder("gemma3-tiny/onnx/default-f32");
    let empty = d.new_cache().unwrap();
    let ((_, inner), outer) = recorded(|| recorded(|| d.forward(StepInput::Ids(vec![3]), &empty, 1).unwrap()));
    assert!(!inner.is_empty());
    assert_eq!(inner, outer);
    // A recorded call that panics leaves the outer recording in place, still recording.
    let (_, outer) = recorded(|| {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| recorded(|| panic!("inside"))));
        d.forward(StepInput::Ids(vec![3]), &empty, 1).unwrap()
    });
    assert_eq!(outer, inner, "the outer recording survived the inner one's panic");
}

#[test]
fn the_rows_copied_off_a_device_are_the_last_rows() {
    // `copy_last_rows` is how a device's logits rows come to the host (ONNX Runtime gathers them where the tensor
    // lives, a one-node session on its device); on a host tensor it runs the same way, so it is checked here, for
    // each float type a decoder's logits may have.
    use mobius_conformance::run::crossing::copy_last_rows;
    use ort::value::Tensor;
    mobius_conformance::run::runtime::load().unwrap();
    let data: Vec<f32> = (0..12).map(|x| x as f32).collect();
    let v = Tensor::<f32>::from_array(([1i64, 4, 3], data.clone())).unwrap().into_dyn();
    let rows = copy_last_rows(&v, 2).unwrap();
    let (shape, got) = rows.try_extract_tensor::<f32>().unwrap();
    assert_eq!((shape.to_vec(), got.to_vec()), (vec![1, 2, 3], data[6..].to_vec()));
    let halves: Vec<half::f16> = data.iter().map(|&x| half::f16::from_f32(x)).collect();
    let v = Tensor::<half::f16>::from_array(([1i64, 4, 3], halves.clone())).unwrap().into_dyn();
    let rows = copy_last_rows(&v, 1).unwrap();
    assert_eq!(rows.try_extract_tensor::<half::f16>().unwrap().1, &halves[9..]);
    assert!(copy_last_rows(&v, 5).is_err(), "more rows than the tensor has");
    let brains: Vec<half::bf16> = data.iter().map(|&x| half::bf16::from_f32(x)).collect();
    let v = Tensor::<half::bf16>::from_array(([1i64, 4, 3], brains.clone())).unwrap().into_dyn();
    let rows = copy_last_rows(&v, 3).unwrap();
    assert_eq!(rows.try_extract_tensor::<half::bf16>().unwrap().1, &brains[3..]);
    let ids = Tensor::<i64>::from_array(([1i64, 2, 2], vec![1i64, 2, 3, 4])).unwrap().into_dyn();
    assert!(copy_last_rows(&ids, 1).is_err(), "only float rows");
}
