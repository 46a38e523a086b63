//! The encoder-decoder (speech-to-text) flow on the tiny Whisper fixture: the stored log-mel features -> the
//! package's encoder -> its decoder, which reads the encoder states at every step (bound once per stream) and keeps
//! its self-attention cache warm. And each way that flow can be fed wrong fails naming what is wrong.

mod common;

use std::path::{Path, PathBuf};

use mobius_conformance::feed::inputs::{Inputs, NamedTensor, TensorData};
use mobius_conformance::feed::package::GenaiConfig;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::run::decoder::Decoder;
use mobius_conformance::run::encoder_session::Features;
use mobius_conformance::run::generate::{self, Suppress};
use mobius_conformance::run::pipeline::{Pipeline, encoder_decoder};
use mobius_conformance::run::runtime::Provider;
use mobius_conformance::run::sessions;
use mobius_numeric::{TopK, scan_row};

const SOT: i64 = 513;
const NOTIMESTAMPS: i64 = 515;

fn package() -> PathBuf {
    workspace_root().join("fixtures/whisper-tiny/onnx/default-f32")
}

fn stored_inputs() -> Inputs {
    let file = workspace_root().join("goldens/speech-to-text/whisper-tiny.inputs.safetensors");
    Inputs::from_safetensors("whisper-tiny.inputs.safetensors", &std::fs::read(file).unwrap()).unwrap()
}

fn decoder(pkg: &Path) -> std::sync::Arc<Decoder> {
    sessions::decoder(&pkg.join("decoder/model.onnx"), Provider::Cpu).unwrap()
}

fn states(pkg: &Path, inputs: &Inputs) -> Features {
    let cfg = GenaiConfig::load(pkg).unwrap();
    encoder_decoder::encode(pkg, &cfg, &decoder(pkg), Provider::Cpu, inputs, "inputs").unwrap()
}

#[test]
fn the_decoder_names_come_from_the_package_and_the_audio_reaches_it() {
    let pkg = package();
    let d = decoder(&pkg);
    // mobius maps Whisper's ids as `decoder_input_ids`: found through genai_config.json, not hard-coded.
    assert_eq!(d.io.names.input_ids, "decoder_input_ids");
    assert_eq!(d.io.context.as_ref().map(|c| c.name.as_str()), Some("encoder_hidden_states"));
    let inputs = stored_inputs();
    let s = states(&pkg, &inputs);
    assert_eq!(s.shape, [1, 200, 32], "4 s of audio: 400 frames, 200 encoder positions");
    let prompt = [SOT, NOTIMESTAMPS];
    let with = generate::prefill(&d, &Pipeline::EncoderDecoder(s.clone()), &prompt).unwrap();
    let zeroed = generate::prefill(&d, &Pipeline::EncoderDecoder(s.zeroed()), &prompt).unwrap();
    let moved = with.iter().zip(&zeroed).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(moved > 1.0, "zeroing the encoder states must move the logits: max |diff| {moved}");
}

#[test]
fn the_warm_cache_gives_what_a_fresh_prefill_of_the_whole_stream_gives() {
    let pkg = package();
    let d = decoder(&pkg);
    let s = states(&pkg, &stored_inputs());
    let pipeline = Pipeline::EncoderDecoder(s);
    let prompt = [SOT, NOTIMESTAMPS];
    // Every step watches the whole vocabulary: its logits, as the cached decode computed them.
    let all: Vec<i64> = (0..516).collect();
    let watch = vec![all.as_slice(); 6];
    let g = generate::greedy(&d, &pipeline, &prompt, 6, &[], None, &watch).unwrap();
    assert_eq!(g.steps.len(), 6);
    // Each step's logits, from the cache, against a prefill of the prompt and every token fed before it.
    let mut seq = prompt.to_vec();
    for (i, step) in g.steps.iter().enumerate() {
        if i > 0 {
            seq.push(g.tokens[i - 1]);
        }
        let fresh = generate::prefill(&d, &pipeline, &seq).unwrap();
        let diff = fresh.iter().zip(&step.watched).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(diff < 1e-4, "step {i}: cached and fresh logits differ by {diff}");
        assert_eq!(Suppress::default().choose(&fresh, i, None) as i64, step.chosen, "step {i}");
    }
}

#[test]
fn suppression_skips_the_banned_ids_and_only_at_the_first_step_the_begin_ones() {
    let logits = [0.0, 5.0, 4.0, 3.0, f32::NAN];
    let s = Suppress { always: vec![1], at_begin: vec![2] };
    assert_eq!(s.choose(&logits, 0, None), 3, "1 always banned, 2 at the first step");
    assert_eq!(s.choose(&logits, 1, None), 2);
    assert_eq!(Suppress::default().choose(&logits, 0, None), 1, "nothing banned: the plain argmax");
    let everything = Suppress { always: vec![0, 1, 2, 3, 4], at_begin: vec![] };
    assert_eq!(everything.choose(&logits, 0, None), 0, "nothing allowed: the first id, as a NaN row's argmax");
    // A finite row's top-k decides the choice, and a top-k that is all banned falls back to the whole row.
    let finite = [0.0, 5.0, 4.0, 3.0, 1.0];
    let top = TopK::of(&finite, 2);
    assert_eq!(s.choose(&finite, 0, Some(&top)), 3, "both of the top two banned: the whole row decides");
    assert_eq!(s.choose(&finite, 1, Some(&top)), 2);
    assert_eq!(Suppress::default().choose(&finite, 0, Some(&top)), 1);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]
    /// The decode loop's choice from one pass's top-k is the whole row's, for any row (ties, NaN, infinities),
    /// any banned ids and either step.
    #[test]
    fn the_choice_from_the_top_k_is_the_whole_rows(
        row in proptest::collection::vec(
            proptest::prop_oneof![8 => proptest::strategy::Strategy::prop_map(-3i8..3, f32::from), 1 => proptest::prelude::Just(f32::NAN),
                1 => proptest::prelude::Just(f32::INFINITY), 1 => proptest::prelude::Just(f32::NEG_INFINITY)],
            0..300,
        ),
        always in proptest::collection::vec(0i64..300, 0..12),
        at_begin in proptest::collection::vec(0i64..300, 0..12),
        step in 0usize..2,
        k in 1usize..12,
    ) {
        let s = Suppress { always, at_begin };
        let (top, non_finite) = scan_row(&row, k);
        proptest::prop_assert_eq!(s.choose(&row, step, non_finite.is_none().then_some(&top)), s.choose(&row, step, None));
    }
}

#[test]
fn a_decoder_fed_wrong_says_what_it_needs() {
    let pkg = package();
    let d = decoder(&pkg);
    // No encoder states for a decoder that reads them.
    let e = generate::prefill(&d, &Pipeline::Text, &[SOT]).unwrap_err().to_string();
    assert!(e.contains("takes `encoder_hidden_states`, its encoder's states, and none were given"), "{e}");
    let e = generate::greedy(&d, &Pipeline::Text, &[SOT], 2, &[], None, &[]).unwrap_err().to_string();
    assert!(e.contains("none were given"), "{e}");
    // States of another width than the decoder's.
    let narrow = Features { shape: vec![1, 200, 16], data: vec![0.0; 200 * 16] };
    let e = generate::prefill(&d, &Pipeline::EncoderDecoder(narrow.clone()), &[SOT]).unwrap_err().to_string();
    assert!(e.contains("the encoder's states are [1, 200, 16], but input `encoder_hidden_states` is declared"), "{e}");
    // States for a decoder-only model.
    let text = sessions::decoder(&workspace_root().join("fixtures/qwen3-tiny/onnx/cpu-f32/model.onnx"), Provider::Cpu).unwrap();
    let e = generate::prefill(&text, &Pipeline::EncoderDecoder(narrow), &[2]).unwrap_err().to_string();
    assert!(e.contains("encoder states were given, but the decoder takes no `encoder_hidden_states`"), "{e}");
}

#[test]
fn a_package_without_its_encoder_or_with_wrong_features_fails_naming_them() {
    let dir = common::Scratch::new("speech-no-encoder");
    let pkg = dir.0.join("pkg");
    common::copy_tree(&package(), &pkg);
    let d = decoder(&pkg);
    let inputs = stored_inputs();
    // Features of the wrong rank, and of the wrong type, name the stored file and tensor.
    let mut bad = inputs.clone();
    let t = bad.tensors.iter_mut().find(|t| t.name == "input_features").unwrap();
    t.shape = vec![80, 400];
    let e = Pipeline::build(&pkg, &d, Provider::Cpu, &bad, "x.inputs.safetensors").err().unwrap().to_string();
    assert!(e.contains("x.inputs.safetensors: tensor `input_features` has shape [80, 400]; expected [1, mel bins, frames]"), "{e}");
    let mut ints = inputs.clone();
    ints.tensors.retain(|t| t.name != "input_features");
    ints.tensors.push(NamedTensor { name: "input_features".into(), shape: vec![1, 1, 1], data: TensorData::I64(vec![0]) });
    let e = Pipeline::build(&pkg, &d, Provider::Cpu, &ints, "x.inputs.safetensors").err().unwrap().to_string();
    assert!(e.contains("tensor `input_features` must be float32"), "{e}");
    let mut none = inputs.clone();
    none.tensors.retain(|t| t.name != "input_features");
    let e = Pipeline::build(&pkg, &d, Provider::Cpu, &none, "x.inputs.safetensors").err().unwrap().to_string();
    assert!(e.contains("x.inputs.safetensors: no tensor `input_features`"), "{e}");
    // The encoder gone: genai_config.json names none (mobius writes no `model.encoder`) and encoder/ is not there.
    std::fs::remove_dir_all(pkg.join("encoder")).unwrap();
    let e = Pipeline::build(&pkg, &d, Provider::Cpu, &inputs, "x.inputs.safetensors").err().unwrap().to_string();
    assert!(e.contains("names no `model.encoder` and there is no encoder/model.onnx"), "{e}");
    // No genai_config.json at all: the decoder's cross-attention input cannot be fed.
    std::fs::remove_file(pkg.join("genai_config.json")).unwrap();
    let e = sessions::decoder(&pkg.join("decoder/model.onnx"), Provider::Cpu)
        .and_then(|d| Pipeline::build(&pkg, &d, Provider::Cpu, &inputs, "x.inputs.safetensors"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("the decoder reads encoder states, but the package has no genai_config.json naming its encoder"), "{e}");
}

#[test]
fn a_model_file_onnx_runtime_will_not_load_is_the_packages_refusal_and_a_missing_one_is_not() {
    use mobius_conformance::outcome::FailureKind;
    use mobius_conformance::outcome::Outcome;
    let dir = common::Scratch::new("speech-refused");
    let pkg = dir.0.join("pkg");
    common::copy_tree(&package(), &pkg);
    let d = decoder(&pkg);
    // The file is there and ONNX Runtime will not load it: the package's failure, which an xfail may expect by message.
    std::fs::write(pkg.join("encoder/model.onnx"), b"not an ONNX model").unwrap();
    let e = Pipeline::build(&pkg, &d, Provider::Cpu, &stored_inputs(), "x.inputs.safetensors").err().unwrap();
    assert!(e.is_refusal() && e.to_string().contains("encoder/model.onnx: loading the model"), "{e}");
    let o = Outcome::from_error("t", &e);
    let f = o.failure.as_deref().expect("a refusal is a failure with its kind");
    assert_eq!((f.kind, f.refusal.as_deref()), (FailureKind::Refused, Some(e.message())));
    // A file that is not there is the set-up's error, never the package's verdict.
    let e = sessions::encoder(&pkg.join("encoder/absent.onnx"), Provider::Cpu).err().unwrap();
    assert!(!e.is_refusal() && e.to_string().contains("absent.onnx: no such model file"), "{e}");
    assert!(Outcome::from_error("t", &e).failure.is_none());
}

#[test]
fn a_case_of_several_clips_is_one_case_per_clip_with_its_own_int4_goldens() {
    use mobius_conformance::plan::case::SpeechTask;
    use mobius_conformance::plan::suite::Suite;
    use mobius_conformance::vocab::{Dtype, Modality};
    let suite = Suite::open(&workspace_root());
    let cases: Vec<_> = suite.load_cases().into_iter().flatten().filter(|c| c.name.starts_with("whisper-base")).collect();
    let clips: Vec<(&str, &str)> = cases.iter().map(|c| (c.name.as_str(), c.spec.inputs.audio[0].as_str())).collect();
    assert_eq!(
        clips,
        [
            ("whisper-base", "fixtures/media/652-129742-0006.flac"),
            ("whisper-base.p2", "target/real/audio/long.flac"),
            ("whisper-base.p3", "target/real/audio/short.flac")
        ]
    );
    for c in &cases {
        assert_eq!(c.spec.inputs.audio.len(), 1, "{}", c.name);
        assert_eq!((c.spec.generation.lang.as_deref(), c.spec.generation.task), (Some("en"), Some(SpeechTask::Transcribe)));
        // int4 is judged against its own (dequantized) reference: logits and encoder features; the stored inputs are
        // the float32 reference's, the same features for every dtype.
        let (f32, int4) = (suite.golden_paths(c, Modality::Audio, Dtype::F32), suite.golden_paths(c, Modality::Audio, Dtype::Int4));
        assert_eq!(int4.inputs, f32.inputs);
        assert!(int4.features.ends_with(format!("{}.int4.features.safetensors", c.name)), "{}", int4.features.display());
        assert!(int4.prefill.ends_with(format!("{}.int4.json", c.name)) && f32.features != int4.features);
    }
}
