//! A hostile-input round on the newest surfaces (issue 46, item 6): lmms-eval task files with their `!function` hooks
//! and `include:` chains, media (a truncated FLAC, a JPEG that is not one, a 0-second clip, a clip over 30 s), the
//! distribution level's corpora and goldens (another k, NaN log-probabilities, more than all the mass), drafted
//! decoding with a hostile draft, and Parquet shards. Each test names what it tries; every one ends in an error naming
//! the file and the field, or in the right result: never a panic, a hang or a silent wrong answer, and one bad input
//! fails its own trial, not the run. Every hostile file is made here, in a temp folder.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::{Scratch, copy_tree, write};
use mobius_conformance::accuracy::lmms::{Media, MediaTask};
use mobius_conformance::feed::audio;
use mobius_conformance::feed::inputs::TensorData;
use mobius_conformance::feed::log_mel;
use mobius_conformance::level::dist::golden::DistGolden;
use mobius_conformance::outcome::Status;
use mobius_conformance::paths::workspace_root;

// ---------------------------------------------------------------------------------------------------------------
// Helpers.

fn lmms() -> PathBuf {
    workspace_root().join("tests/data/lmms")
}

fn ocrbench_yaml() -> String {
    std::fs::read_to_string(lmms().join("lmms_eval_tasks/ocrbench/ocrbench.yaml")).unwrap()
}

fn librispeech_yaml() -> String {
    std::fs::read_to_string(lmms().join("lmms_eval_tasks/librispeech/librispeech_test_clean.yaml")).unwrap()
}

fn ocrbench_data() -> PathBuf {
    lmms().join("hub/datasets--echo840--OCRBench/snapshots/fixture")
}

/// Loads `t.yaml` of `root` over `data` and makes its items: the error's text, or the items.
fn load_items(root: &Path, file: &str, data: &Path) -> Result<Vec<mobius_conformance::accuracy::lmms::MediaItem>, String> {
    let task = MediaTask::load(root, file, Some(data), None, None).map_err(|e| e.to_string())?;
    task.items().map_err(|e| e.to_string())
}

/// The loader's refusal of `file` (it must refuse).
fn refusal(root: &Path, file: &str, data: &Path) -> String {
    match load_items(root, file, data) {
        Ok(items) => panic!("{file} was accepted ({} items)", items.len()),
        Err(e) => e,
    }
}

fn assert_names(e: &str, needles: &[&str]) {
    for n in needles {
        assert!(e.contains(n), "expected {n:?} in: {e}");
    }
}

/// Standard base64, padded: how the Parquet reader's JSON gives binary values, which the loader decodes.
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = ((c[0] as u32) << 16) | ((*c.get(1).unwrap_or(&0) as u32) << 8) | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// An OCRBench task over one JSONL document whose `image` is `image` (a JSON value).
fn ocrbench_over(tag: &str, image: serde_json::Value) -> (Scratch, PathBuf) {
    let s = Scratch::new(&format!("hostile-{tag}"));
    write(&s.0.join("t.yaml"), &ocrbench_yaml());
    let doc = serde_json::json!({"question": "What is written?", "answer": ["HARBOR"], "dataset": "IIIT5K", "image": image});
    let data = s.0.join("data");
    write(&data.join("test.jsonl"), &format!("{doc}\n"));
    (s, data)
}

/// A LibriSpeech task over one JSONL document whose `audio` is `audio`.
fn librispeech_over(tag: &str, audio: serde_json::Value) -> (Scratch, PathBuf) {
    let s = Scratch::new(&format!("hostile-{tag}"));
    write(&s.0.join("t.yaml"), &librispeech_yaml());
    let doc = serde_json::json!({"gt": "the cat sat", "task": "asr_en", "audio": audio});
    let data = s.0.join("data");
    write(&data.join("librispeech_test_clean/librispeech_test_clean.jsonl"), &format!("{doc}\n"));
    (s, data)
}

fn wav(samples: &[i16], rate: u32) -> Vec<u8> {
    let spec = hound::WavSpec { channels: 1, sample_rate: rate, bits_per_sample: 16, sample_format: hound::SampleFormat::Int };
    let mut cur = std::io::Cursor::new(Vec::new());
    {
        let mut w = hound::WavWriter::new(&mut cur, spec).unwrap();
        samples.iter().for_each(|&x| w.write_sample(x).unwrap());
        w.finalize().unwrap();
    }
    cur.into_inner()
}

fn flac_clip() -> Vec<u8> {
    std::fs::read(workspace_root().join("fixtures/dist/audio/t1-corner.flac")).unwrap()
}

/// Where a FLAC file's metadata blocks end (its first frame starts).
fn flac_header_end(b: &[u8]) -> usize {
    let mut pos = 4;
    loop {
        let last = b[pos] & 0x80 != 0;
        let len = u32::from_be_bytes([0, b[pos + 1], b[pos + 2], b[pos + 3]]) as usize;
        pos += 4 + len;
        if last {
            return pos;
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// lmms-eval task files: `include:` chains.

#[test]
fn an_lmms_task_whose_include_chain_loops_is_refused_naming_both_files() {
    let s = Scratch::new("hostile-include-loop");
    write(&s.0.join("t.yaml"), "include: b.yaml\ntask: t\n");
    write(&s.0.join("b.yaml"), &format!("include: t.yaml\n{}", ocrbench_yaml()));
    let e = refusal(&s.0, "t.yaml", &ocrbench_data());
    assert_names(&e, &["t.yaml", "include `b.yaml`", "loops back", "include `t.yaml`"]);
}

#[test]
fn an_lmms_task_that_includes_itself_is_refused_naming_it() {
    let s = Scratch::new("hostile-include-self");
    write(&s.0.join("t.yaml"), &format!("include: t.yaml\n{}", ocrbench_yaml()));
    let e = refusal(&s.0, "t.yaml", &ocrbench_data());
    assert_names(&e, &["t.yaml", "include `t.yaml`", "loops back"]);
}

#[test]
fn an_include_chain_of_forty_files_is_refused_as_too_long_not_as_a_loop() {
    let s = Scratch::new("hostile-include-long");
    for i in 0..40 {
        write(&s.0.join(format!("c{i}.yaml")), &format!("include: c{}.yaml\n", i + 1));
    }
    write(&s.0.join("c40.yaml"), &ocrbench_yaml());
    let e = refusal(&s.0, "c0.yaml", &ocrbench_data());
    assert_names(&e, &["c0.yaml", "include `c1.yaml`", "16 files"]);
    assert!(!e.contains("loops"), "a chain without a loop is not called one: {e}");
    // Sixteen files in all still read.
    write(&s.0.join("c15.yaml"), &ocrbench_yaml());
    load_items(&s.0, "c0.yaml", &ocrbench_data()).unwrap();
}

#[test]
fn an_include_of_a_missing_file_is_refused_naming_the_include() {
    let s = Scratch::new("hostile-include-missing");
    write(&s.0.join("t.yaml"), &format!("include: nowhere/_template_yaml\n{}", ocrbench_yaml()));
    let e = refusal(&s.0, "t.yaml", &ocrbench_data());
    assert_names(&e, &["t.yaml", "include `nowhere/_template_yaml`"]);
}

#[test]
fn an_include_that_is_a_list_or_a_folder_is_refused_naming_the_field() {
    let s = Scratch::new("hostile-include-list");
    write(&s.0.join("t.yaml"), &format!("include: [a.yaml, b.yaml]\n{}", ocrbench_yaml()));
    let e = refusal(&s.0, "t.yaml", &ocrbench_data());
    assert_names(&e, &["t.yaml", "include"]);
    std::fs::create_dir_all(s.0.join("folder")).unwrap();
    write(&s.0.join("t.yaml"), &format!("include: folder\n{}", ocrbench_yaml()));
    let e = refusal(&s.0, "t.yaml", &ocrbench_data());
    assert_names(&e, &["t.yaml", "include `folder`"]);
}

#[test]
fn a_task_file_of_binary_garbage_or_nothing_is_refused_naming_it() {
    let s = Scratch::new("hostile-garbage-task");
    std::fs::write(s.0.join("t.yaml"), [0xffu8, 0xfe, 0x00, 0x12, b'{', b'[']).unwrap();
    let e = refusal(&s.0, "t.yaml", &ocrbench_data());
    assert_names(&e, &["t.yaml"]);
    std::fs::write(s.0.join("t.yaml"), "").unwrap();
    let e = refusal(&s.0, "t.yaml", &ocrbench_data());
    assert_names(&e, &["t.yaml"]);
    std::fs::write(s.0.join("t.yaml"), "- just\n- a list\n").unwrap();
    let e = refusal(&s.0, "t.yaml", &ocrbench_data());
    assert_names(&e, &["t.yaml"]);
}

// ---------------------------------------------------------------------------------------------------------------
// lmms-eval task files: hooks and fields.

/// The OCRBench task with `from` replaced by `to`, loaded over its fixture: the refusal.
fn ocrbench_edited(tag: &str, from: &str, to: &str) -> String {
    let s = Scratch::new(&format!("hostile-{tag}"));
    let text = ocrbench_yaml();
    assert!(text.contains(from), "{from}");
    write(&s.0.join("t.yaml"), &text.replace(from, to));
    refusal(&s.0, "t.yaml", &ocrbench_data())
}

#[test]
fn a_hook_of_another_family_under_this_dataset_is_refused_by_name() {
    let e = ocrbench_edited("hook-family", "utils.ocrbench_process_results", "utils.chartqa_process_results");
    assert_names(&e, &["t.yaml", "field `process_results`", "utils.chartqa_process_results", "echo840/OCRBench"]);
}

#[test]
fn a_hook_named_for_another_kind_of_hook_is_refused_by_name() {
    // doc_to_text's own function given as doc_to_visual.
    let e = ocrbench_edited("hook-kind", "!function utils.ocrbench_doc_to_visual", "!function utils.ocrbench_doc_to_text");
    assert_names(&e, &["t.yaml", "field `doc_to_visual`", "utils.ocrbench_doc_to_text"]);
}

#[test]
fn a_function_tag_on_a_list_is_refused_naming_the_field() {
    let e = ocrbench_edited("hook-list", "!function utils.ocrbench_doc_to_visual", "!function [utils.ocrbench_doc_to_visual]");
    assert_names(&e, &["t.yaml", "field `doc_to_visual`", "[\"utils.ocrbench_doc_to_visual\"]"]);
}

#[test]
fn a_hook_under_another_tag_is_refused_not_ignored() {
    let e = ocrbench_edited("hook-tag", "!function utils.ocrbench_process_results", "!python utils.my_scorer");
    assert_names(&e, &["t.yaml", "field `process_results`", "!python", "utils.my_scorer"]);
}

#[test]
fn an_aggregation_other_than_mean_or_the_familys_hook_is_refused_not_averaged() {
    let e = ocrbench_edited("aggregation", "!function utils.ocrbench_aggregate_accuracy", "median");
    assert_names(&e, &["t.yaml", "field `metric_list.aggregation`", "median"]);
}

#[test]
fn a_prompt_that_is_not_a_string_is_refused_naming_the_field() {
    let e = ocrbench_edited("prompt-number", "    post_prompt: \"\"\n  plm:", "    post_prompt: 42\n  plm:");
    assert_names(&e, &["t.yaml", "field `lmms_eval_specific_kwargs.default.post_prompt`", "42"]);
    let e = ocrbench_edited("prompt-default", "  default:\n    pre_prompt: \"\"\n    post_prompt: \"\"\n", "  default: [x]\n");
    assert_names(&e, &["t.yaml", "field `lmms_eval_specific_kwargs.default`"]);
}

#[test]
fn a_token_budget_that_is_not_a_positive_count_is_refused_naming_the_field() {
    for bad in ["-1", "0", "\"128\"", "1.5", "99999999999"] {
        let e = ocrbench_edited("budget", "max_new_tokens: 128", &format!("max_new_tokens: {bad}"));
        assert_names(&e, &["t.yaml", "field `generation_kwargs.max_new_tokens`"]);
    }
}

#[test]
fn a_stop_list_holding_a_number_is_refused_naming_the_field() {
    let e = ocrbench_edited("until", "  max_new_tokens: 128", "  until: [\"\\n\", 7]\n  max_new_tokens: 128");
    assert_names(&e, &["t.yaml", "field `generation_kwargs.until`"]);
    let e = ocrbench_edited("until-map", "  max_new_tokens: 128", "  until: {a: 1}\n  max_new_tokens: 128");
    assert_names(&e, &["t.yaml", "field `generation_kwargs.until`"]);
}

#[test]
fn a_temperature_given_as_text_is_refused_not_read_as_greedy() {
    let e = ocrbench_edited("temperature", "temperature: 0", "temperature: \"0.7\"");
    assert_names(&e, &["t.yaml", "field `generation_kwargs.temperature`", "0.7"]);
}

// ---------------------------------------------------------------------------------------------------------------
// Media.

#[test]
fn a_truncated_flac_is_refused_naming_the_clip() {
    let clip = flac_clip();
    for cut in [clip.len() / 2, clip.len() - 1, flac_header_end(&clip) + 7] {
        let e = audio::decode(&clip[..cut], "data/row 3/audio").unwrap_err().to_string();
        assert!(e.starts_with("data/row 3/audio"), "{cut}: {e}");
    }
    // Nothing but its header: it declares samples and holds none.
    let e = audio::decode(&clip[..flac_header_end(&clip)], "clip.flac").unwrap_err().to_string();
    assert_names(&e, &["clip.flac", "truncated"]);
    // The whole clip still decodes.
    assert!(!audio::decode(&clip, "clip.flac").unwrap().samples.is_empty());
}

#[test]
fn a_truncated_wav_is_refused_or_gives_the_samples_it_holds() {
    let samples: Vec<i16> = (0..1000).map(|i| (i * 7) as i16).collect();
    let whole = wav(&samples, 16000);
    // Cut inside the data: soundfile reads the samples that are there; never more, never other ones.
    for cut in [whole.len() - 1, whole.len() - 501, 60] {
        match audio::decode(&whole[..cut], "clip.wav") {
            Ok(a) => {
                let want: Vec<f32> = samples.iter().map(|&s| s as f32 / 32768.0).take(a.samples.len()).collect();
                assert_eq!(a.samples, want, "{cut}: the samples that are there");
                assert!(a.samples.len() < samples.len(), "{cut}");
            }
            Err(e) => assert!(e.to_string().starts_with("clip.wav"), "{cut}: {e}"),
        }
    }
    // Cut inside the header.
    let e = audio::decode(&whole[..20], "clip.wav").unwrap_err().to_string();
    assert!(e.starts_with("clip.wav"), "{e}");
}

#[test]
fn a_zero_second_clip_is_refused_naming_the_clip() {
    let e = audio::decode(&wav(&[], 16000), "rows/2/audio").unwrap_err().to_string();
    assert_names(&e, &["rows/2/audio", "no samples"]);
    let e = audio::from_array(&[], 16000, "rows/2").unwrap_err().to_string();
    assert_names(&e, &["rows/2", "field `array`", "no samples"]);
    // And in a task's data, as {array, sampling_rate}: refused at load, naming the document and field.
    let (s, data) = librispeech_over("zero-second", serde_json::json!({"array": [], "sampling_rate": 16000}));
    let e = refusal(&s.0, "t.yaml", &data);
    assert_names(&e, &["t.yaml", "document 0", "field `audio`", "no samples"]);
}

#[test]
fn a_wav_declaring_no_channels_or_no_rate_is_refused_naming_the_clip() {
    let mut b = wav(&[1, 2, 3, 4], 16000);
    // The fmt chunk's sample rate (bytes 24..28) set to 0.
    b[24..28].copy_from_slice(&0u32.to_le_bytes());
    let e = audio::decode(&b, "clip.wav").unwrap_err().to_string();
    assert!(e.starts_with("clip.wav"), "{e}");
    let mut b = wav(&[1, 2, 3, 4], 16000);
    b[22..24].copy_from_slice(&0u16.to_le_bytes());
    let e = audio::decode(&b, "clip.wav").unwrap_err().to_string();
    assert!(e.starts_with("clip.wav"), "{e}");
}

#[test]
fn a_clip_over_thirty_seconds_is_heard_as_its_first_thirty_as_whispers_extractor_hears_it() {
    let cfg = log_mel::Config::load(&workspace_root().join("tests/data/log_mel/whisper-tiny-en.preprocessor_config.json")).unwrap();
    let n = cfg.n_samples();
    let long: Vec<f32> = (0..n + 16000 * 5).map(|i| ((i as f32) * 0.013).sin() * 0.3).collect();
    let f = |s: &[f32]| match cfg.features(s, 16000, "clip").unwrap().data {
        TensorData::F32(v) => v,
        _ => unreachable!(),
    };
    let (whole, first) = (f(&long), f(&long[..n]));
    assert_eq!(whole.len(), first.len(), "one 30-second window");
    assert!(whole == first, "35 s are heard as their first 30 s (WhisperFeatureExtractor's truncation)");
}

#[test]
fn a_jpeg_that_is_not_one_is_refused_at_load_naming_the_document_and_field() {
    for bytes in [b"this is not a picture at all".to_vec(), b"{\"json\": true}".to_vec(), wav(&[1, 2], 16000)] {
        let (s, data) = ocrbench_over("not-jpeg", serde_json::json!({"bytes": base64(&bytes), "path": "page.jpg"}));
        let e = refusal(&s.0, "t.yaml", &data);
        assert_names(&e, &["t.yaml", "document 0", "field `image`", "not an image"]);
    }
    // A real JPEG's first bytes pass the loader (the suite feeds the reference processor's tensors, not the file).
    let (s, data) = ocrbench_over("jpeg", serde_json::json!({"bytes": base64(b"\xff\xd8\xff\xe0\0\x10JFIF\0"), "path": "page.jpg"}));
    let items = load_items(&s.0, "t.yaml", &data).unwrap();
    assert!(matches!(&items[0].media, Media::File(b) if b.starts_with(b"\xff\xd8\xff")));
}

#[test]
fn an_image_column_holding_decoded_audio_or_a_plain_string_is_refused() {
    let (s, data) = ocrbench_over("image-audio", serde_json::json!({"array": [0.0, 0.1], "sampling_rate": 16000}));
    let e = refusal(&s.0, "t.yaml", &data);
    assert_names(&e, &["t.yaml", "document 0", "field `image`"]);
    let (s, data) = ocrbench_over("image-string", serde_json::json!("page.png"));
    let e = refusal(&s.0, "t.yaml", &data);
    assert_names(&e, &["t.yaml", "document 0", "field `image`"]);
}

#[test]
fn an_audio_column_holding_an_image_is_refused_at_load_naming_the_field() {
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    let (s, data) = librispeech_over("audio-png", serde_json::json!({"bytes": base64(&png), "path": "a.flac"}));
    let e = refusal(&s.0, "t.yaml", &data);
    assert_names(&e, &["t.yaml", "document 0", "field `audio`", "not a WAV"]);
}

#[test]
fn a_sampling_rate_past_u32_is_refused_not_wrapped_to_16000() {
    // 2^32 + 16000 wrapped to 32 bits is 16000: it must not pass as a 16 kHz clip.
    let (s, data) = librispeech_over("rate-wrap", serde_json::json!({"array": [0.0, 0.1, 0.2], "sampling_rate": 4_294_983_296u64}));
    let e = refusal(&s.0, "t.yaml", &data);
    assert_names(&e, &["t.yaml", "document 0", "field `audio`", "4294983296"]);
    let (s, data) = librispeech_over("rate-zero", serde_json::json!({"array": [0.0, 0.1], "sampling_rate": 0}));
    let e = refusal(&s.0, "t.yaml", &data);
    assert_names(&e, &["t.yaml", "document 0", "field `audio`", "sampling_rate"]);
}

#[test]
fn an_audio_array_holding_text_is_refused_naming_the_field() {
    let (s, data) = librispeech_over("array-text", serde_json::json!({"array": [0.0, "loud"], "sampling_rate": 16000}));
    let e = refusal(&s.0, "t.yaml", &data);
    assert_names(&e, &["t.yaml", "document 0", "field `audio`", "`array`"]);
}

// ---------------------------------------------------------------------------------------------------------------
// Parquet shards.

/// The OCRBench task over a copy of its fixture shard that `damage` rewrites.
fn ocrbench_shard(tag: &str, damage: impl Fn(Vec<u8>) -> Vec<u8>) -> (Scratch, PathBuf) {
    let s = Scratch::new(&format!("hostile-parquet-{tag}"));
    write(&s.0.join("t.yaml"), &ocrbench_yaml());
    let data = s.0.join("data");
    let shard = "data/test-00000-of-00001.parquet";
    let bytes = std::fs::read(ocrbench_data().join(shard)).unwrap();
    std::fs::create_dir_all(data.join("data")).unwrap();
    std::fs::write(data.join(shard), damage(bytes)).unwrap();
    (s, data)
}

#[test]
fn a_truncated_parquet_shard_is_refused_naming_it() {
    for keep in [0.5, 0.99, 0.1] {
        let (s, data) = ocrbench_shard("truncated", |b| b[..(b.len() as f64 * keep) as usize].to_vec());
        let e = refusal(&s.0, "t.yaml", &data);
        assert_names(&e, &["t.yaml", "test-00000-of-00001.parquet"]);
    }
}

#[test]
fn an_empty_or_foreign_file_named_parquet_is_refused_naming_it() {
    for bytes in [Vec::new(), b"{\"question\": \"q\"}\n".to_vec(), b"PAR1".to_vec(), b"PAR1PAR1".to_vec()] {
        let (s, data) = ocrbench_shard("foreign", |_| bytes.clone());
        let e = refusal(&s.0, "t.yaml", &data);
        assert_names(&e, &["t.yaml", "test-00000-of-00001.parquet"]);
    }
}

/// Bytes of the shard flipped, one at a time (every one of its first and last 32, a stride of the rest, to stay
/// fast; every byte with four flips was swept once, 60,000 loads): the loader refuses naming the shard, or reads
/// documents; it never panics, hangs or aborts. Byte 12 ^ 0x10 made the parquet crate panic (`bit_util.rs`).
#[test]
fn a_parquet_shard_with_flipped_bytes_is_refused_or_read_never_a_panic() {
    let clean = std::fs::read(ocrbench_data().join("data/test-00000-of-00001.parquet")).unwrap();
    let s = Scratch::new("hostile-parquet-flip");
    write(&s.0.join("t.yaml"), &ocrbench_yaml());
    let data = s.0.join("data");
    std::fs::create_dir_all(data.join("data")).unwrap();
    let shard = data.join("data/test-00000-of-00001.parquet");
    let (mut refused, mut read) = (0, 0);
    let n = clean.len();
    let places: Vec<usize> = (0..32).chain((32..n - 32).step_by(97)).chain(n - 32..n).collect();
    for at in places {
        for flip in [0xffu8, 0x10] {
            let mut b = clean.clone();
            b[at] ^= flip;
            std::fs::write(&shard, &b).unwrap();
            let got = std::panic::catch_unwind(|| load_items(&s.0, "t.yaml", &data));
            match got {
                Err(_) => panic!("byte {at} ^ {flip:#x}: the loader panicked"),
                Ok(Err(e)) => {
                    assert!(e.contains("t.yaml"), "byte {at}: {e}");
                    refused += 1;
                }
                Ok(Ok(_)) => read += 1,
            }
        }
    }
    assert!(refused > 0 && refused + read > 100, "{refused} refused, {read} read");
    // The byte that made the reader panic: the shard's error, named.
    let mut b = clean.clone();
    b[12] ^= 0x10;
    std::fs::write(&shard, &b).unwrap();
    let e = refusal(&s.0, "t.yaml", &data);
    assert_names(&e, &["t.yaml", "test-00000-of-00001.parquet", "gave up"]);
}

// ---------------------------------------------------------------------------------------------------------------
// The distribution level: goldens.

const DIST_GOLDEN: &str = "goldens/causal-lm/qwen3-tiny.dist.safetensors";

/// The committed text golden with its tensors and metadata rewritten.
fn golden_with(edit_tensor: impl Fn(&str, &[usize], &mut Vec<u8>), edit_meta: impl Fn(&mut HashMap<String, String>)) -> Vec<u8> {
    let bytes = std::fs::read(workspace_root().join(DIST_GOLDEN)).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let mut meta = meta.metadata().clone().unwrap();
    edit_meta(&mut meta);
    let owned: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| {
            let mut data = v.data().to_vec();
            edit_tensor(&n, v.shape(), &mut data);
            (n, v.dtype(), v.shape().to_vec(), data)
        })
        .collect();
    let views = owned.iter().map(|(n, d, s, b)| (n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap()));
    safetensors::serialize(views, Some(meta)).unwrap()
}

/// The committed text golden with one tensor rewritten (its shape given).
fn with_tensor(name: &str, edit: impl Fn(&[usize], &mut Vec<u8>)) -> Vec<u8> {
    golden_with(
        |n, s, d| {
            if n == name {
                edit(s, d)
            }
        },
        |_| {},
    )
}

fn set_f32(data: &mut [u8], i: usize, x: f32) {
    data[4 * i..4 * i + 4].copy_from_slice(&x.to_le_bytes());
}

fn get_f32(data: &[u8], i: usize) -> f32 {
    f32::from_le_bytes(data[4 * i..4 * i + 4].try_into().unwrap())
}

fn golden_refusal(bytes: &[u8]) -> String {
    match DistGolden::parse("x.dist.safetensors", bytes) {
        Ok(g) => panic!("the golden was accepted ({} positions)", g.positions()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_committed_dist_golden_reads_through_the_rewriter_unchanged() {
    let g = DistGolden::parse("x.dist.safetensors", &golden_with(|_, _, _| {}, |_| {})).unwrap();
    assert_eq!(g.k, 16);
}

#[test]
fn a_dist_golden_whose_k_disagrees_with_its_tensors_is_refused_naming_the_tensor() {
    for k in ["8", "17", "0", "-3", "sixteen"] {
        let meta = |m: &mut HashMap<String, String>| {
            m.insert("k".into(), k.into());
        };
        let e = golden_refusal(&golden_with(|_, _, _| {}, meta));
        assert_names(&e, &["x.dist.safetensors"]);
        assert!(e.contains("top_ids") || e.contains("`k`") || e.contains("k=0"), "k {k}: {e}");
    }
}

#[test]
fn a_nan_top_log_prob_in_a_dist_golden_is_refused_naming_the_entry() {
    let e = golden_refusal(&with_tensor("top_logprobs", |_, d| set_f32(d, 5, f32::NAN)));
    assert_names(&e, &["x.dist.safetensors", "tensor `top_logprobs` entry 5", "NaN"]);
    let e = golden_refusal(&with_tensor("top_logprobs", |_, d| set_f32(d, 0, f32::NEG_INFINITY)));
    assert_names(&e, &["x.dist.safetensors", "tensor `top_logprobs` entry 0"]);
}

#[test]
fn a_tail_log_prob_above_zero_is_refused_naming_the_entry() {
    let e = golden_refusal(&with_tensor("tail_logprob", |_, d| set_f32(d, 3, 0.5)));
    assert_names(&e, &["x.dist.safetensors", "tensor `tail_logprob` entry 3", "0.5"]);
    let e = golden_refusal(&with_tensor("tail_logprob", |_, d| set_f32(d, 3, f32::NAN)));
    assert_names(&e, &["x.dist.safetensors", "tensor `tail_logprob` entry 3"]);
}

#[test]
fn a_dist_golden_whose_probabilities_sum_past_one_is_refused_naming_the_position() {
    // Position 2's top 16 each at probability 1/2: every entry a valid log-probability, the row 8 times the mass.
    let half = 0.5f32.ln();
    let e = golden_refusal(&with_tensor("top_logprobs", |s, d| (0..s[1]).for_each(|j| set_f32(d, 2 * s[1] + j, half))));
    assert_names(&e, &["x.dist.safetensors", "position 2", "sum"]);
    // And a row with most of its mass missing: the top at 1e-9 each, no tail.
    let e = golden_refusal(&golden_with(
        |n, s, d| match n {
            "top_logprobs" => (0..s[1]).for_each(|j| set_f32(d, 4 * s[1] + j, -20.0)),
            "tail_logprob" => set_f32(d, 4, f32::NEG_INFINITY),
            _ => {}
        },
        |_| {},
    ));
    assert_names(&e, &["x.dist.safetensors", "position 4", "sum"]);
}

#[test]
fn a_dist_golden_with_an_id_twice_in_one_top_k_is_refused_naming_the_position() {
    let e = golden_refusal(&with_tensor("top_ids", |s, d| {
        let first: [u8; 4] = d[4 * s[1]..4 * s[1] + 4].try_into().unwrap();
        d[4 * (s[1] + 3)..4 * (s[1] + 3) + 4].copy_from_slice(&first);
    }));
    assert_names(&e, &["x.dist.safetensors", "tensor `top_ids`", "position 1", "twice"]);
}

#[test]
fn a_dist_golden_whose_top_k_is_out_of_order_is_refused_naming_the_position() {
    // Position 0's first and last entries swapped: the first is no longer the reference's top token.
    let e = golden_refusal(&golden_with(
        |n, s, d| {
            if n == "top_logprobs" || n == "top_ids" {
                let (a, b) = (get_f32(d, 0).to_bits(), get_f32(d, s[1] - 1).to_bits());
                set_f32(d, 0, f32::from_bits(b));
                set_f32(d, s[1] - 1, f32::from_bits(a));
            }
        },
        |_| {},
    ));
    assert_names(&e, &["x.dist.safetensors", "tensor `top_logprobs`", "position 0", "descending"]);
}

// ---------------------------------------------------------------------------------------------------------------
// The distribution level: trials on hostile corpora and cases.

fn dist_outcome(root: &Path) -> mobius_conformance::outcome::Outcome {
    common::run(root, "qwen3-tiny/text/cpu/f32/dist")
}

#[test]
fn a_case_asking_another_k_than_its_golden_fails_as_stale_naming_both() {
    let s = common::qwen3_tiny_root("hostile-dist-k", |t| t.replace("k: 16 }", "k: 8 }"));
    let o = dist_outcome(&s.0);
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert_names(&o.message, &["qwen3-tiny.dist.safetensors has k 16", "asks for 8", "cases/causal-lm/qwen3-tiny.yaml", "regen-goldens"]);
}

#[test]
fn a_text_corpus_that_is_not_utf8_or_not_json_fails_its_trial_naming_the_file_and_line() {
    for (bytes, needle) in [
        (vec![b'{', 0xff, 0xfe, b'}', b'\n'], "utf-8"),
        (b"{\"text\": \"fine\"}\nnot json at all\n".to_vec(), "line 2"),
        (b"{\"text\": \"\"}\n".to_vec(), "field `text` is empty"),
        (b"{\"text\": 42}\n".to_vec(), "line 1"),
        (b"\n\n".to_vec(), "no document"),
    ] {
        let s = common::qwen3_tiny_root("hostile-dist-corpus", |t| t);
        std::fs::write(s.0.join("fixtures/dist/corpus.jsonl"), &bytes).unwrap();
        let o = dist_outcome(&s.0);
        assert_eq!(o.status, Status::Fail, "{needle}: {}", o.message);
        assert_names(&o.message, &["fixtures/dist/corpus.jsonl", needle]);
        assert!(!o.message.contains("stale"), "a broken corpus is named as such, not as a stale golden: {}", o.message);
    }
}

#[test]
fn a_speech_corpus_clip_that_is_a_folder_or_outside_the_root_fails_its_trial_naming_the_field() {
    for (to, needle) in [("fixtures/dist/audio", "fixtures/dist/audio"), ("../../../etc/hostname", "etc/hostname")] {
        let repo = workspace_root();
        let s = Scratch::new("hostile-dist-speech");
        for dir in ["fixtures/whisper-tiny", "fixtures/dist", "fixtures/media", "goldens/speech-to-text"] {
            copy_tree(&repo.join(dir), &s.0.join(dir));
        }
        std::fs::copy(repo.join("cases/speech-to-text/whisper-tiny.yaml"), {
            std::fs::create_dir_all(s.0.join("cases/speech-to-text")).unwrap();
            s.0.join("cases/speech-to-text/whisper-tiny.yaml")
        })
        .unwrap();
        let corpus = s.0.join("fixtures/dist/speech-tiny.jsonl");
        let text = std::fs::read_to_string(&corpus).unwrap().replacen("fixtures/dist/audio/t2-train.flac", to, 1);
        std::fs::write(&corpus, text).unwrap();
        let o = common::run(&s.0, "whisper-tiny/audio/default/f32/dist");
        assert_eq!(o.status, Status::Fail, "{to}: {}", o.message);
        assert_names(&o.message, &["speech-tiny.jsonl", "utterance `t2-train`", "field `audio`", needle]);
    }
}

/// The names of the trials the suite at `root` plans.
fn planned(root: &Path) -> Vec<String> {
    let suite = mobius_conformance::plan::suite::Suite::open(root);
    mobius_conformance::trial::matrix::plan(&suite).into_iter().map(|t| t.name).collect()
}

#[test]
fn a_hostile_dist_golden_fails_its_own_trial_and_the_cases_other_trials_pass() {
    let s = common::qwen3_tiny_root("hostile-dist-isolated", |t| t);
    let half = 0.5f32.ln();
    let bad = with_tensor("top_logprobs", |s, d| (0..s[1]).for_each(|j| set_f32(d, j, half)));
    std::fs::write(s.0.join(DIST_GOLDEN), bad).unwrap();
    let o = dist_outcome(&s.0);
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert_names(&o.message, &["qwen3-tiny.dist.safetensors", "position 0", "sum"]);
    for level in ["L4", "L5"] {
        let o = common::run(&s.0, &format!("qwen3-tiny/text/cpu/f32/{level}"));
        assert_eq!(o.status, Status::Pass, "{level}: {}", o.message);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// An lmms-eval task in a case: one hostile task fails its own trials, nothing else.

#[test]
fn a_hostile_lmms_task_in_a_case_fails_its_own_trials_and_the_rest_pass() {
    let s = common::qwen3_tiny_root("hostile-lmms-case", |t| {
        t + "accuracy:\n  - task: tasks/loop.yaml\n    data: tasks/data\n    protocol: { prompt: chat_template }\n"
    });
    write(&s.0.join("tasks/loop.yaml"), "include: _base_yaml\ntask: loop\n");
    write(&s.0.join("tasks/_base_yaml"), &format!("include: loop.yaml\n{}", ocrbench_yaml()));
    write(&s.0.join("goldens/baselines/loop/qwen3-tiny.json"), "{}");
    copy_tree(&ocrbench_data(), &s.0.join("tasks/data"));
    let names = planned(&s.0);
    let gate: Vec<&String> = names.iter().filter(|n| n.starts_with("loop/")).collect();
    assert!(!gate.is_empty(), "the task's trials are planned: {names:?}");
    for name in gate {
        let o = common::run(&s.0, name);
        assert_eq!(o.status, Status::Fail, "{name}: {}", o.message);
        assert_names(&o.message, &["tasks/loop.yaml", "loops back"]);
    }
    let o = common::run(&s.0, "qwen3-tiny/text/cpu/f32/L4");
    assert_eq!(o.status, Status::Pass, "the case's own trials still run: {}", o.message);
}

// ---------------------------------------------------------------------------------------------------------------
// Drafted decoding with a hostile draft.

mod drafted {

    use mobius_conformance::run::drafted::greedy_drafted;

    use mobius_conformance::run::generate::{self, Generated};
    use mobius_conformance::run::pipeline::Pipeline;

    use super::common::whisper_tiny::{BUDGET, PROMPT, decoder, package, states, suppress};

    /// The package's own greedy run, step by step, and a drafted run on `draft`: the same tokens whatever the draft.
    fn check(what: &str, make: impl Fn(&[i64]) -> Vec<i64>) -> usize {
        let pkg = package();
        let d = decoder(&pkg);
        let pipeline = Pipeline::EncoderDecoder(states(&pkg));
        let want: Generated = generate::greedy_with(&d, &pipeline, &PROMPT, BUDGET, &[], None, &[], &suppress()).unwrap();
        let draft = make(&want.tokens);
        let r = greedy_drafted(&d, &pipeline, &PROMPT, BUDGET, &[], &suppress(), &draft)
            .unwrap_or_else(|e| panic!("{what}: a hostile draft failed the run: {e}"));
        assert_eq!(r.generated.tokens, want.tokens, "{what}: the package's greedy tokens, whatever the draft");
        assert!(r.calls <= BUDGET, "{what}: {} calls", r.calls);
        r.calls
    }

    #[test]
    fn a_draft_of_ids_past_the_vocabulary_still_gives_the_packages_greedy_tokens() {
        check("ids past the vocabulary", |_| vec![1_000_000_000; 40]);
        // The right tokens, then one past the vocabulary: the right ones are still checked together.
        let calls = check("right, then an id past the vocabulary", |right| {
            let mut d = right[..8].to_vec();
            d.push(i64::MAX);
            d.extend_from_slice(&right[8..]);
            d
        });
        assert!(calls <= 3, "{calls} calls");
    }

    #[test]
    fn a_draft_of_negative_ids_still_gives_the_packages_greedy_tokens() {
        check("negative ids", |_| vec![-1; 40]);
        check("the most negative id", |right| {
            let mut d = right.to_vec();
            d[4] = i64::MIN;
            d
        });
    }

    #[test]
    fn a_draft_of_a_million_tokens_is_read_within_the_budget() {
        let t = std::time::Instant::now();
        check("a million garbage tokens", |_| (0..1_000_000).map(|i| 4 + (i * 37) % 500).collect());
        assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
    }

    #[test]
    fn a_draft_of_nothing_but_banned_or_end_of_text_ids_still_gives_the_packages_greedy_tokens() {
        check("banned ids", |_| vec![513; 40]);
        check("end of text", |_| vec![512; 40]);
    }
}
