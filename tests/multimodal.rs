//! The multimodal package flow on the tiny Gemma-4 fixture: genai_config.json -> vision / audio encoders ->
//! embedding (with per-layer inputs) -> decoder on `inputs_embeds`, with the KV cache as for text. Media here are
//! seeded synthetic tensors; the goldens-backed trials use the real processor's inputs.

use std::path::PathBuf;

use mobius_conformance::bootstrap::workspace_root;
use mobius_conformance::generate::{self, Embedder, Front};
use mobius_conformance::logits::compare;
use mobius_conformance::package::GenaiConfig;
use mobius_conformance::runtime::{self, Provider, TokenInput};

const BOS: i64 = 2;
const BOI: i64 = 4;
const EOI: i64 = 5;
const IMAGE: i64 = 6;
const BOA: i64 = 8;
const EOA: i64 = 9;
const AUDIO: i64 = 10;

fn package() -> PathBuf {
    workspace_root().join("fixtures/gemma4-mm-tiny/onnx/default-f32")
}

/// A tiny deterministic generator: the same media every run.
fn lcg(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn rows(v: &ort::value::DynValue) -> i64 {
    v.dtype().tensor_shape().unwrap()[0]
}

struct Run {
    last: Vec<f32>,
    tokens: Vec<i64>,
}

fn run(zero_image: bool, zero_audio: bool) -> Run {
    let pkg = package();
    let cfg = GenaiConfig::load(&pkg).unwrap();
    let (vision_c, speech_c, embed_c) = (cfg.vision.unwrap(), cfg.speech.unwrap(), cfg.embedding.unwrap());
    let vision = runtime::encoder(&pkg.join(&vision_c.file), Provider::Cpu).unwrap();
    let audio = runtime::encoder(&pkg.join(&speech_c.file), Provider::Cpu).unwrap();
    let embedding = runtime::encoder(&pkg.join(&embed_c.file), Provider::Cpu).unwrap();
    let decoder = runtime::decoder(&pkg.join(cfg.decoder_file.unwrap()), Provider::Cpu).unwrap();
    assert_eq!(decoder.io.token_input, TokenInput::Embeds { per_layer: true });

    // A 6x6 grid of 16-pixel patches (x, y order) and 48 mel frames.
    let pixels: Vec<u8> = lcg(36 * 768, 1).iter().map(|v| ((v + 1.0) * 127.5) as u8).collect();
    let positions: Vec<i64> = (0..6).flat_map(|y| (0..6).flat_map(move |x| [x, y])).collect();
    let image = generate::encode_image(&vision, &vision_c, (&[1, 36, 768], &pixels), (&[1, 36, 2], &positions)).unwrap();
    let mel = lcg(48 * 128, 2);
    let audio_f = generate::encode_audio(&audio, &speech_c, (&[1, 48, 128], &mel), (&[1, 48], &[true; 48])).unwrap();
    let (n_img, n_aud) = (rows(&image), rows(&audio_f));
    let hidden = image.dtype().tensor_shape().unwrap()[1];
    let zeroed = |v: ort::value::DynValue, zero: bool| {
        if !zero {
            return v;
        }
        let (shape, data) = v.try_extract_tensor::<f32>().unwrap();
        ort::value::Tensor::<f32>::from_array((shape.to_vec(), vec![0.0; data.len()])).unwrap().into_dyn()
    };
    let mut ids = vec![BOS, 300, 301, BOI];
    ids.extend(std::iter::repeat_n(IMAGE, n_img as usize));
    ids.extend([EOI, 302, BOA]);
    ids.extend(std::iter::repeat_n(AUDIO, n_aud as usize));
    ids.extend([EOA, 303, 304, 305]);
    let embedder = Embedder {
        session: embedding,
        component: embed_c,
        image_features: Some(zeroed(image, zero_image)),
        audio_features: Some(zeroed(audio_f, zero_audio)),
        hidden,
    };
    let front = Front::Embedding(&embedder);
    let g = generate::greedy(&decoder, &front, &ids, 8, &[], None).unwrap();
    let last = generate::prefill(&decoder, &front, &ids).unwrap();
    assert_eq!(last, g.prefill_logits, "prefill and the first generation step agree");
    Run { last, tokens: g.tokens }
}

#[test]
fn image_and_audio_reach_the_decoder() {
    let both = run(false, false);
    assert_eq!(both.tokens.len(), 8);
    assert_eq!(run(false, false).tokens, both.tokens, "repeatable");
    let no_audio = run(false, true);
    let no_image = run(true, false);
    let moved = |other: &Run| compare(&other.last, &both.last, 0.0, 0.0).max_abs;
    assert!(moved(&no_audio) > 1e-2, "zeroing the audio features moved logits by only {}", moved(&no_audio));
    assert!(moved(&no_image) > 1e-2, "zeroing the image features moved logits by only {}", moved(&no_image));
}

#[test]
fn encoders_check_what_they_are_fed() {
    let pkg = package();
    let cfg = GenaiConfig::load(&pkg).unwrap();
    let vision_c = cfg.vision.unwrap();
    let vision = runtime::encoder(&pkg.join(&vision_c.file), Provider::Cpu).unwrap();
    // 700 values per patch instead of 768: named, with both shapes, before ONNX Runtime sees it.
    let e = generate::encode_image(&vision, &vision_c, (&[1, 36, 700], &vec![0u8; 36 * 700]), (&[1, 36, 2], &[0i64; 72])).unwrap_err();
    let e = e.to_string();
    assert!(e.contains("vision_encoder/model.onnx") && e.contains("pixel_values") && e.contains("700") && e.contains("768"), "{e}");
}
