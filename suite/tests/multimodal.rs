//! The multimodal package flow on the tiny Gemma-4 fixture: genai_config.json -> vision / audio encoders ->
//! embedding (with per-layer inputs) -> decoder on `inputs_embeds`, with the KV cache as for text. Media here are
//! seeded synthetic tensors; the goldens-backed trials use the real processor's inputs.

mod common;

use std::path::PathBuf;

use mobius_conformance::feed::package::GenaiConfig;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::run::decoder::io::TokenInput;
use mobius_conformance::run::encoder_session::Features;
use mobius_conformance::run::encoders;
use mobius_conformance::run::generate;
use mobius_conformance::run::pipeline::Pipeline;
use mobius_conformance::run::pipeline::multimodal::Embedder;
use mobius_conformance::run::runtime::Provider;
use mobius_conformance::run::sessions;
use mobius_numeric::compare;

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

struct Run {
    last: Vec<f32>,
    tokens: Vec<i64>,
}

fn run(zero_image: bool, zero_audio: bool) -> Run {
    let pkg = package();
    let cfg = GenaiConfig::load(&pkg).unwrap();
    let (vision_c, speech_c, embed_c) = (cfg.vision.unwrap(), cfg.speech.unwrap(), cfg.embedding.unwrap());
    let vision = sessions::encoder(&pkg.join(&vision_c.file), Provider::Cpu).unwrap();
    let audio = sessions::encoder(&pkg.join(&speech_c.file), Provider::Cpu).unwrap();
    let embedding = sessions::encoder(&pkg.join(&embed_c.file), Provider::Cpu).unwrap();
    let decoder = sessions::decoder(&pkg.join(cfg.decoder_file.unwrap()), Provider::Cpu).unwrap();
    assert_eq!(decoder.io.token_input, TokenInput::Embeds { per_layer: true });

    // A 6x6 grid of 16-pixel patches (x, y order) and 48 mel frames.
    let pixels: Vec<u8> = lcg(36 * 768, 1).iter().map(|v| ((v + 1.0) * 127.5) as u8).collect();
    let positions: Vec<i64> = (0..6).flat_map(|y| (0..6).flat_map(move |x| [x, y])).collect();
    let image = encoders::encode_image(&vision, &vision_c, (&[1, 36, 768], &pixels), (&[1, 36, 2], &positions)).unwrap();
    let mel = lcg(48 * 128, 2);
    let audio_f = encoders::encode_audio(&audio, &speech_c, (&[1, 48, 128], &mel), (&[1, 48], &[true; 48])).unwrap();
    let (n_img, n_aud, hidden) = (image.shape[0], audio_f.shape[0], image.shape[1]);
    let zeroed = |f: Features, zero: bool| if zero { f.zeroed() } else { f };
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
    let pipeline = Pipeline::Multimodal(embedder);
    let g = generate::greedy(&decoder, &pipeline, &ids, 8, &[], None, &[]).unwrap();
    let last = generate::prefill(&decoder, &pipeline, &ids).unwrap();
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
    let vision = sessions::encoder(&pkg.join(&vision_c.file), Provider::Cpu).unwrap();
    // 700 values per patch instead of 768: named, with both shapes, before ONNX Runtime sees it.
    let e = encoders::encode_image(&vision, &vision_c, (&[1, 36, 700], &vec![0u8; 36 * 700]), (&[1, 36, 2], &[0i64; 72])).unwrap_err();
    let e = e.to_string();
    assert!(e.contains("vision_encoder/model.onnx") && e.contains("pixel_values") && e.contains("700") && e.contains("768"), "{e}");
}

mod component_trials {
    //! The component trials catch a broken encoder and name it.

    use super::common::{Scratch, copy_tree, run, write};
    use mobius_conformance::outcome::Status;
    use mobius_conformance::paths::workspace_root;

    const CASE: &str = "gemma4-mm-tiny";

    /// The multimodal case over a private copy of its package, with `encoder`'s last weight (the projector's
    /// `weight_t`, the tail of its external data: every external tensor of these encoders is float32) scaled by 1.01.
    fn scratch(tag: &str, encoder: Option<&str>) -> Scratch {
        let repo = workspace_root();
        let scratch = Scratch::new(&format!("mm-{tag}"));
        let root = scratch.0.clone();
        let pkg = root.join("pkg");
        copy_tree(&repo.join("fixtures/gemma4-mm-tiny/onnx/default-f32"), &pkg);
        if let Some(encoder) = encoder {
            let data = pkg.join(encoder).join("model.onnx.data");
            let mut bytes = std::fs::read(&data).unwrap();
            let n = bytes.len();
            for c in bytes[n - 4096..].chunks_exact_mut(4) {
                let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * 1.01;
                c.copy_from_slice(&v.to_le_bytes());
            }
            std::fs::write(&data, bytes).unwrap();
        }
        let text = std::fs::read_to_string(repo.join(format!("cases/image-text-to-text/{CASE}.yaml")))
            .unwrap()
            .replace("\"fixtures/gemma4-mm-tiny/hf\"", &format!("\"{}\"", repo.join("fixtures/gemma4-mm-tiny/hf").display()))
            .replace("\"fixtures/gemma4-mm-tiny/onnx/{ep}-{dtype}\"", "\"pkg\"");
        write(&root.join(format!("cases/image-text-to-text/{CASE}.yaml")), &(text + "external_paths: true\n"));
        copy_tree(&repo.join("goldens/image-text-to-text"), &root.join("goldens/image-text-to-text"));
        scratch
    }

    #[test]
    fn a_scaled_vision_weight_fails_the_vision_component_trial() {
        let s = scratch("vision", Some("vision_encoder"));
        let o = run(&s.0, &format!("{CASE}/image/default/f32/vision_encoder"));
        assert_eq!(o.status, Status::Fail, "{}", o.message);
        assert!(
            o.message.contains("vision_encoder: ") && o.message.contains("image_features") && o.message.contains("worst at ["),
            "{}",
            o.message
        );
        assert!(o.max_abs_diff.unwrap() > 1e-3, "{:?}", o.max_abs_diff);
        let untouched = run(&s.0, &format!("{CASE}/audio/default/f32/audio_encoder"));
        assert_eq!(untouched.status, Status::Pass, "{}", untouched.message);
    }

    #[test]
    fn a_scaled_audio_weight_fails_the_audio_component_trial() {
        let s = scratch("audio", Some("audio_encoder"));
        let o = run(&s.0, &format!("{CASE}/audio/default/f32/audio_encoder"));
        assert_eq!(o.status, Status::Fail, "{}", o.message);
        assert!(o.message.contains("audio_encoder: ") && o.message.contains("audio_features"), "{}", o.message);
        let both = run(&s.0, &format!("{CASE}/image+audio/default/f32/audio_encoder"));
        assert_eq!(both.status, Status::Fail, "{}", both.message);
        let untouched = run(&s.0, &format!("{CASE}/image/default/f32/vision_encoder"));
        assert_eq!(untouched.status, Status::Pass, "{}", untouched.message);
    }

    /// On this fixture the media streams share their 16 greedy tokens (the tiny decoder's margins, 0.6 to 1.4, outweigh
    /// the at most 0.5 that media move a logit), so tokens alone cannot say which media reached the decoder. L5's
    /// teacher-forced step logits can: the audio stream judged against the image stream's stored step logits fails
    /// from step 0, with every token kept.
    #[test]
    fn l5_tells_the_media_apart_by_their_step_logits() {
        let s = scratch("l5-media", None);
        let dir = s.0.join("goldens/image-text-to-text");
        let read = |name: &str| -> serde_json::Value { serde_json::from_str(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap() };
        let image = read(&format!("{CASE}.image_generation.json"));
        let mut audio = read(&format!("{CASE}.audio_generation.json"));
        assert_eq!(image["generated_tokens"], audio["generated_tokens"], "the fixture's media streams share their tokens");
        let own = run(&s.0, &format!("{CASE}/audio/default/f32/L5"));
        assert_eq!(own.status, Status::Pass, "{}", own.message);
        audio["steps"] = image["steps"].clone();
        write(&dir.join(format!("{CASE}.audio_generation.json")), &serde_json::to_string_pretty(&audio).unwrap());
        let o = run(&s.0, &format!("{CASE}/audio/default/f32/L5"));
        assert_eq!(o.status, Status::Fail, "{}", o.message);
        assert!(o.message.contains("decode-step logits leave tolerance from step 0 on"), "{}", o.message);
        assert!(o.message.contains("the greedy tokens still all agree"), "{}", o.message);
    }
}

/// Stored media whose tensors disagree are refused naming the stored file and both shapes, before ONNX Runtime
/// meets them (629 patches against 630 positions would fail deep inside the vision encoder).
#[test]
fn media_inputs_that_disagree_name_the_stored_file_and_both_shapes() {
    use mobius_conformance::feed::inputs::{Inputs, TensorData};
    let file = "goldens/image-text-to-text/gemma4-mm-tiny.image.inputs.safetensors";
    let mut inputs = Inputs::from_safetensors(file, &std::fs::read(workspace_root().join(file)).unwrap()).unwrap();
    let positions = inputs.tensors.iter_mut().find(|t| t.name == "pixel_position_ids").expect("stored positions");
    let TensorData::I64(v) = &mut positions.data else { panic!("int64 positions") };
    v.truncate(v.len() - 2);
    positions.shape[1] -= 1;
    let pkg = package();
    let cfg = GenaiConfig::load(&pkg).unwrap();
    let decoder = sessions::decoder(&pkg.join(cfg.decoder_file.unwrap()), Provider::Cpu).unwrap();
    let e = Pipeline::build(&pkg, &decoder, Provider::Cpu, &inputs, file).err().expect("refused").to_string();
    assert!(e.contains(file) && e.contains("`pixel_values`") && e.contains("`pixel_position_ids`"), "{e}");
}

/// The encoder trials check the stored inputs against the goldens as L4 and L5 do: a changed image is a stale
/// golden, not an encoder computing other features.
#[test]
fn an_encoder_trial_on_other_stored_media_says_the_golden_is_stale() {
    use mobius_conformance::feed::inputs::{Inputs, TensorData};
    let repo = workspace_root();
    let s = common::Scratch::new("mm-stale");
    let text = std::fs::read_to_string(repo.join("cases/image-text-to-text/gemma4-mm-tiny.yaml")).unwrap();
    let text = text.replace("\"fixtures/", &format!("\"{}/fixtures/", repo.display())) + "external_paths: true\n";
    common::write(&s.0.join("cases/image-text-to-text/gemma4-mm-tiny.yaml"), &text);
    common::copy_tree(&repo.join("goldens/image-text-to-text"), &s.0.join("goldens/image-text-to-text"));
    let file = s.0.join("goldens/image-text-to-text/gemma4-mm-tiny.image.inputs.safetensors");
    let mut inputs = Inputs::from_safetensors("inputs", &std::fs::read(&file).unwrap()).unwrap();
    let pixels = inputs.tensors.iter_mut().find(|t| t.name == "pixel_values").expect("stored pixels");
    let TensorData::U8(v) = &mut pixels.data else { panic!("uint8 pixels") };
    v[0] = v[0].wrapping_add(1);
    std::fs::write(&file, inputs.to_safetensors().unwrap()).unwrap();
    let o = common::run(&s.0, "gemma4-mm-tiny/image/default/f32/vision_encoder");
    assert_eq!(o.status, mobius_conformance::outcome::Status::Fail, "{}", o.message);
    assert!(o.message.contains("golden is stale") && o.message.contains("regen-goldens"), "{}", o.message);
}
