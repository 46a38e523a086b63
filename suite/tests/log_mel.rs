//! Audio decoding and Whisper's log-mel features against soundfile and transformers. Every expectation comes from
//! `xtask/reference/log_mel_expected.py`, which read the clips with `soundfile.read(dtype="float32")` and ran
//! `WhisperFeatureExtractor` 5.14 on them, into tests/data/log_mel/expected.json:
//!
//!   PYTHONPATH=xtask $HOME/.cache/mobius-conformance/reference-venv/bin/python -m reference.log_mel_expected
//!
//! Decoded samples must be bit-identical to soundfile's. Features must be bit-identical to the extractor's numpy
//! path (float64 STFT, what `feed::log_mel` implements): the sha256 of each whole [mels, frames] array, and every
//! stored value. They must also stay within `CALL_BOUND` of what `__call__` returns in the reference venv (its
//! float32 torch path) on the stored frames.

use mobius_conformance::feed::audio::{self, Audio};
use mobius_conformance::feed::inputs::TensorData;
use mobius_conformance::feed::log_mel::Config;
use mobius_conformance::paths::workspace_root;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Measured: at most 5.4e-6 on the stored frames; over whole arrays the reference's two paths (and so the suite and
/// `__call__`) differ by up to 1.6e-5 (`max_abs_diff_to_numpy` in the data).
const CALL_BOUND: f32 = 2.5e-5;

const DATA: &str = "tests/data/log_mel/expected.json";

fn expected() -> Value {
    let text = std::fs::read_to_string(workspace_root().join(DATA)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap_or_else(|| panic!("not a list: {v}")).iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn sha256(xs: &[f32]) -> String {
    let mut h = Sha256::new();
    for x in xs {
        h.update(x.to_le_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_file(rel: &str) -> Audio {
    let bytes = std::fs::read(workspace_root().join(rel)).unwrap();
    audio::decode(&bytes, rel).unwrap()
}

#[test]
fn decoded_samples_are_soundfiles_bit_for_bit() {
    let e = expected();
    let clips = e["audio"].as_array().unwrap();
    assert_eq!(clips.len(), 3);
    for a in clips {
        let file = a["file"].as_str().unwrap();
        let bytes = std::fs::read(workspace_root().join(file)).unwrap();
        let c = audio::decode_channels(&bytes, file).unwrap();
        assert_eq!(c.channels as u64, a["channels"].as_u64().unwrap(), "{file}: channels");
        assert_eq!(c.rate as u64, a["rate"].as_u64().unwrap(), "{file}: rate");
        assert_eq!((c.interleaved.len() / c.channels) as u64, a["len"].as_u64().unwrap(), "{file}: samples per channel");
        assert_eq!(sha256(&c.interleaved), a["interleaved_sha256"].as_str().unwrap(), "{file}: every channel's samples");
        let mono = c.mono();
        assert_eq!(mono.samples[..8], floats(&a["head"])[..], "{file}: first samples");
        assert_eq!(sha256(&mono.samples), a["mono_sha256"].as_str().unwrap(), "{file}: the channels' average");
        let peak = mono.samples.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        assert_eq!(peak, a["peak"].as_f64().unwrap() as f32, "{file}: peak");
    }
}

/// The largest |ours - theirs| over the stored frames of one extraction, and where it is.
fn max_diff(ours: &[f32], frames_total: usize, stored: &Value) -> (f32, usize, usize) {
    let frames: Vec<usize> = stored["frames"].as_array().unwrap().iter().map(|f| f.as_u64().unwrap() as usize).collect();
    let values = stored["values"].as_array().unwrap();
    assert_eq!(frames.len(), values.len());
    let mut worst = (0.0f32, 0, 0);
    for (&f, column) in frames.iter().zip(values) {
        for (m, theirs) in floats(column).into_iter().enumerate() {
            let d = (ours[m * frames_total + f] - theirs).abs();
            assert!(d.is_finite(), "mel {m}, frame {f}: {} vs {theirs}", ours[m * frames_total + f]);
            if d > worst.0 {
                worst = (d, m, f);
            }
        }
    }
    worst
}

#[test]
fn features_match_whisper_feature_extractor() {
    let e = expected();
    let cases = e["cases"].as_array().unwrap();
    let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["librispeech", "sine-noise", "librispeech-128", "stereo", "long"]);
    for c in cases {
        let name = c["name"].as_str().unwrap();
        let cfg = Config::load(&workspace_root().join(c["config"].as_str().unwrap())).unwrap();
        let clip = decode_file(c["audio"].as_str().unwrap());
        let clip = if name == "long" {
            let four: Vec<f32> = clip.samples.iter().copied().cycle().take(clip.samples.len() * 4).collect();
            audio::from_array(&four, clip.rate as i64, "four times the clip").unwrap()
        } else {
            clip
        };
        let t = cfg.features(&clip.samples, clip.rate, name).unwrap();
        let shape: Vec<i64> = c["shape"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect();
        assert_eq!(t.name, "input_features");
        assert_eq!(t.shape, [1, shape[0], shape[1]], "{name}: shape");
        let TensorData::F32(ours) = &t.data else { panic!("{name}: features are not f32") };
        let frames = shape[1] as usize;
        let numpy_sha = c["numpy"]["sha256"].as_str().unwrap();
        assert_eq!(sha256(ours), numpy_sha, "{name}: the whole array differs from the numpy path's; regenerate: see {DATA}");
        let (d, m, f) = max_diff(ours, frames, &c["numpy"]);
        assert_eq!(d, 0.0, "{name}: {d:e} from the numpy path at mel {m}, frame {f}");
        let (d, m, f) = max_diff(ours, frames, &c["call"]);
        assert!(d <= CALL_BOUND, "{name}: {d:e} > {CALL_BOUND:e} from __call__ at mel {m}, frame {f}");
    }
}

#[test]
fn a_clip_at_another_rate_is_refused_by_name() {
    let cfg_file = "tests/data/log_mel/whisper-tiny-en.preprocessor_config.json";
    let cfg = Config::load(&workspace_root().join(cfg_file)).unwrap();
    assert_eq!((cfg.feature_size, cfg.sampling_rate, cfg.n_samples(), cfg.frames()), (80, 16000, 480000, 3000));
    let e = cfg.features(&[0.0; 100], 22050, "rows/7/audio").unwrap_err();
    assert!(
        e.message().starts_with("rows/7/audio: sampled at 22050 Hz") && e.message().contains(cfg_file) && e.message().contains("16000 Hz"),
        "{e}"
    );
}
