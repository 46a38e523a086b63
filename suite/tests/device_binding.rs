//! What a GPU sees of a decode step's inputs, shown on the CPU. ONNX Runtime's IoBinding copies a host input to the
//! device that consumes it when it is bound, and aliases it on the CPU: a decode loop that writes a bound tensor in
//! place passes every CPU test and feeds a stale token on CUDA. `Generation::copy_host_inputs_at_bind` makes the
//! CPU copy at bind time as a device does; a greedy run under it must be the plain run, step for step.

use mobius_conformance::paths::workspace_root;
use mobius_conformance::run::decoder::{Decoder, StepInput};
use mobius_conformance::run::runtime::Provider;
use mobius_conformance::run::sessions;

const PROMPT: [i64; 4] = [2, 40, 41, 42];
const STEPS: usize = 12;

/// The greedy tokens and every step's last-position logits: the prompt's prefill, then one-token steps.
fn greedy(d: &Decoder, copied_at_bind: bool) -> (Vec<i64>, Vec<Vec<f32>>) {
    let mut g = d.start(PROMPT.len() + STEPS + 1).unwrap();
    if copied_at_bind {
        g.copy_host_inputs_at_bind();
    }
    let argmax = |l: &[f32]| l.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i as i64).unwrap();
    let mut logits = vec![d.advance(&mut g, StepInput::Ids(PROMPT.to_vec())).unwrap().to_vec()];
    let mut tokens = vec![argmax(&logits[0])];
    for _ in 0..STEPS {
        let l = d.advance_token(&mut g, *tokens.last().unwrap()).unwrap().to_vec();
        tokens.push(argmax(&l));
        logits.push(l);
    }
    (tokens, logits)
}

#[test]
fn decode_steps_feed_what_a_device_would_see() {
    // A cache that grows step by step and a shared past/present buffer (`cpu` builds), with and without position ids.
    for pkg in ["qwen3-tiny/onnx/default-f32", "qwen3-tiny/onnx/cpu-f32", "gemma3-tiny/onnx/default-f32", "llama-tiny/onnx/cpu-f32"] {
        let d = sessions::decoder(&workspace_root().join("fixtures").join(pkg).join("model.onnx"), Provider::Cpu).unwrap();
        let (want_tokens, want) = greedy(&d, false);
        let (tokens, got) = greedy(&d, true);
        for (step, (g, w)) in got.iter().zip(&want).enumerate() {
            let diff = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(
                diff <= 1e-5,
                "{pkg}: step {step}: logits differ by {diff:e} when the step's inputs are copied when bound, as on a \
                 GPU (tokens {tokens:?}, aliased {want_tokens:?}); a step's inputs must be bound after they are written"
            );
        }
        assert_eq!(tokens, want_tokens, "{pkg}");
    }
}
