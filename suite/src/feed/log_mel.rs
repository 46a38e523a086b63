//! Whisper's log-mel features, as transformers' `WhisperFeatureExtractor` makes them with the defaults the Whisper
//! processor calls it with.
//!
//! The clip is padded with `padding_value` or cut to `chunk_length` x `sampling_rate` samples, framed by a periodic
//! Hann window of `n_fft` every `hop_length` samples (centred, reflect padding), turned into a power spectrum, the
//! last frame dropped, mapped through the Slaney mel filter bank (0 to 8 kHz, Slaney area norm), then log10 of
//! max(mel, 1e-10), floored at max - 8 and scaled as (x + 4) / 4.
//!
//! The precision is that of the extractor's numpy path (`_np_extract_fbank_features` over `audio_utils`): the
//! window, filter bank, STFT, power and log10 in f64; the spectrum rounded to complex64 between the FFT and the
//! power, as `spectrogram()` stores it; the power as hypot(re, im)^2; the log rounded to f32; the floor and the
//! scaling in f32. With torch installed, `__call__` takes its float32 torch path instead, which is at most ~2e-5
//! away from this one (tests/data/log_mel/expected.json records the measured distance per clip).

use std::path::Path;
use std::sync::Arc;

use rustfft::num_complex::Complex;
use rustfft::{Fft, FftPlanner};
use serde_json::Value;

use crate::error::{At, Error, Result, bail};
use crate::feed::inputs::{NamedTensor, TensorData};

/// The extractor's settings from a model's `preprocessor_config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Mel bins: 80, or 128 from Whisper large-v3 on.
    pub feature_size: usize,
    pub sampling_rate: u32,
    pub hop_length: usize,
    pub n_fft: usize,
    /// Seconds every clip is padded or cut to.
    pub chunk_length: usize,
    pub padding_value: f32,
    /// Where the settings came from, for messages.
    pub file: String,
}

impl Config {
    /// Reads `preprocessor_config.json`. Keys the extraction does not read are left alone (the file is the
    /// model's); the ones that would change it are checked (`dither` 0, right padding, a Whisper extractor).
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).at(path.display())?;
        Config::from_json(&text, &path.display().to_string())
    }

    /// [`Config::load`] on the file's text; `file` names it in errors.
    pub fn from_json(text: &str, file: &str) -> Result<Config> {
        let v: Value = serde_json::from_str(text).at(file)?;
        let Some(map) = v.as_object() else { bail!("{file}: expected a JSON object") };
        let uint = |key: &str, default: u64| -> Result<u64> {
            match map.get(key) {
                None => Ok(default),
                Some(x) => x
                    .as_u64()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| Error::new(format!("{file}: field `{key}` is {x}; expected a positive integer"))),
            }
        };
        if let Some(t) = map.get("feature_extractor_type").filter(|t| t.as_str() != Some("WhisperFeatureExtractor")) {
            bail!("{file}: field `feature_extractor_type` is {t}; only WhisperFeatureExtractor is implemented");
        }
        if let Some(d) = map.get("dither").filter(|d| d.as_f64() != Some(0.0)) {
            bail!("{file}: field `dither` is {d}; only 0.0 (no random noise) is implemented");
        }
        if let Some(p) = map.get("padding_side").filter(|p| p.as_str() != Some("right")) {
            bail!("{file}: field `padding_side` is {p}; Whisper pads on the right");
        }
        let padding_value = match map.get("padding_value") {
            None => 0.0,
            Some(x) => x.as_f64().ok_or_else(|| Error::new(format!("{file}: field `padding_value` is {x}; expected a number")))? as f32,
        };
        let cfg = Config {
            feature_size: uint("feature_size", 80)? as usize,
            sampling_rate: u32::try_from(uint("sampling_rate", 16000)?).at(format!("{file}: field `sampling_rate`"))?,
            hop_length: uint("hop_length", 160)? as usize,
            n_fft: uint("n_fft", 400)? as usize,
            chunk_length: uint("chunk_length", 30)? as usize,
            padding_value,
            file: file.to_string(),
        };
        if cfg.n_fft < 2 || cfg.n_samples() <= cfg.n_fft / 2 {
            bail!("{file}: `n_fft` {} and {} samples per chunk leave no frame to take", cfg.n_fft, cfg.n_samples());
        }
        if cfg.sampling_rate < 16000 {
            bail!("{file}: field `sampling_rate` is {}; the filter bank reaches 8000 Hz, which needs at least 16000 Hz", cfg.sampling_rate);
        }
        for (key, derived) in [("n_samples", cfg.n_samples()), ("nb_max_frames", cfg.frames())] {
            if let Some(x) = map.get(key).filter(|x| x.as_u64() != Some(derived as u64)) {
                bail!("{file}: field `{key}` is {x}; `chunk_length`, `sampling_rate` and `hop_length` give {derived}");
            }
        }
        Ok(cfg)
    }

    /// Samples per chunk: every clip is padded or cut to this many.
    pub fn n_samples(&self) -> usize {
        self.chunk_length * self.sampling_rate as usize
    }

    /// Frames per chunk (3000 at 30 s): the STFT's 1 + n_samples / hop, less the last one.
    pub fn frames(&self) -> usize {
        self.n_samples() / self.hop_length
    }

    /// `input_features` f32 [1, feature_size, frames] of a mono clip at `rate` Hz; `what` names the clip in errors.
    pub fn features(&self, samples: &[f32], rate: u32, what: &str) -> Result<NamedTensor> {
        let data = self.extract(samples, rate, what)?;
        Ok(NamedTensor {
            name: "input_features".into(),
            shape: vec![1, self.feature_size as i64, self.frames() as i64],
            data: TensorData::F32(data),
        })
    }

    /// The features as a flat [feature_size, frames] array, mel bin major.
    pub fn extract(&self, samples: &[f32], rate: u32, what: &str) -> Result<Vec<f32>> {
        if rate != self.sampling_rate {
            bail!(
                "{what}: sampled at {rate} Hz; the feature extractor ({}) wants {} Hz (clips are not resampled)",
                self.file,
                self.sampling_rate
            );
        }
        if let Some(i) = samples.iter().position(|x| !x.is_finite()) {
            bail!("{what}: sample {i} is {}; audio samples must be finite", samples[i]);
        }
        let n = self.n_samples();
        let mut wave = vec![self.padding_value; n];
        let kept = samples.len().min(n);
        wave[..kept].copy_from_slice(&samples[..kept]);
        let bins = self.n_fft / 2 + 1;
        let filters = mel_filter_bank(bins, self.feature_size, 0.0, 8000.0, self.sampling_rate);
        let frames = self.frames();
        let mut out = vec![0.0f32; self.feature_size * frames];
        // Frame by frame, so that one spectrum is read by every filter while it is in cache.
        Stft::new(self.n_fft).each_power(&wave, self.hop_length, frames, |t, spectrum| {
            for (m, filter) in filters.iter().enumerate() {
                let mut mel = 0.0f64;
                for (w, p) in filter.weights.iter().zip(&spectrum[filter.first..]) {
                    mel += w * p;
                }
                out[m * frames + t] = mel.max(1e-10).log10() as f32;
            }
        });
        let floor = out.iter().copied().fold(f32::NEG_INFINITY, f32::max) - 8.0;
        for x in &mut out {
            *x = (x.max(floor) + 4.0) / 4.0;
        }
        Ok(out)
    }
}

/// The centred STFT's power spectrum in f64, frame by frame.
struct Stft {
    n_fft: usize,
    window: Vec<f64>,
    fft: Arc<dyn Fft<f64>>,
}

impl Stft {
    fn new(n_fft: usize) -> Stft {
        Stft { n_fft, window: hann_periodic(n_fft), fft: FftPlanner::new().plan_fft_forward(n_fft) }
    }

    /// Calls `each(t, powers)` with the n_fft / 2 + 1 powers of each of the first `frames` frames of `wave`,
    /// reflect-padded by n_fft / 2 on both sides (numpy's `reflect`: the edge sample is not repeated).
    fn each_power(&self, wave: &[f32], hop: usize, frames: usize, mut each: impl FnMut(usize, &[f64])) {
        let half = self.n_fft / 2;
        let n = wave.len() as isize;
        let at = |i: isize| -> f64 {
            let j = if i < 0 {
                -i
            } else if i >= n {
                2 * (n - 1) - i
            } else {
                i
            };
            wave[j as usize] as f64
        };
        let mut buf = vec![Complex::new(0.0f64, 0.0); self.n_fft];
        let mut scratch = vec![Complex::new(0.0f64, 0.0); self.fft.get_inplace_scratch_len()];
        let mut power = vec![0.0f64; half + 1];
        for t in 0..frames {
            let start = (t * hop) as isize - half as isize;
            let inside = start >= 0 && start + self.n_fft as isize <= n;
            for (k, (c, w)) in buf.iter_mut().zip(&self.window).enumerate() {
                let x = if inside { wave[start as usize + k] as f64 } else { at(start + k as isize) };
                *c = Complex::new(x * w, 0.0);
            }
            self.fft.process_with_scratch(&mut buf, &mut scratch);
            // `spectrogram()` stores the f64 FFT in a complex64 array, then takes abs in f64 and squares it.
            for (p, c) in power.iter_mut().zip(&buf) {
                let h = (c.re as f32 as f64).hypot(c.im as f32 as f64);
                *p = h * h;
            }
            each(t, &power);
        }
    }
}

/// numpy's `hanning(n + 1)[:-1]`, term for term: 0.5 + 0.5 cos(pi k / n) for k = -n, -n + 2, ...
fn hann_periodic(n: usize) -> Vec<f64> {
    (0..n).map(|i| 0.5 + 0.5 * ((std::f64::consts::PI * (2 * i as i64 - n as i64) as f64) / n as f64).cos()).collect()
}

/// One triangular mel filter: its non-zero weights, from FFT bin `first` on.
#[derive(Debug, Clone, PartialEq)]
struct Filter {
    first: usize,
    weights: Vec<f64>,
}

/// transformers' `mel_filter_bank(bins, mels, fmin, fmax, rate, norm="slaney", mel_scale="slaney")`, as f64
/// triangles in Hz with Slaney's area norm, each kept as its non-zero span.
fn mel_filter_bank(bins: usize, mels: usize, fmin: f64, fmax: f64, rate: u32) -> Vec<Filter> {
    let (lo, hi) = (hertz_to_mel(fmin), hertz_to_mel(fmax));
    let centres: Vec<f64> = linspace(lo, hi, mels + 2).into_iter().map(mel_to_hertz).collect();
    let fft_freqs = linspace(0.0, (rate / 2) as f64, bins);
    (0..mels)
        .map(|m| {
            let enorm = 2.0 / (centres[m + 2] - centres[m]);
            let dense: Vec<f64> = fft_freqs
                .iter()
                .map(|&f| {
                    let down = -(centres[m] - f) / (centres[m + 1] - centres[m]);
                    let up = (centres[m + 2] - f) / (centres[m + 2] - centres[m + 1]);
                    0.0f64.max(down.min(up)) * enorm
                })
                .collect();
            let first = dense.iter().position(|&w| w != 0.0).unwrap_or(0);
            let last = dense.iter().rposition(|&w| w != 0.0).map_or(first, |l| l + 1);
            Filter { first, weights: dense[first..last].to_vec() }
        })
        .collect()
}

/// numpy's `linspace`: start + i * step, the last point exactly `stop`.
fn linspace(start: f64, stop: f64, num: usize) -> Vec<f64> {
    let step = (stop - start) / (num - 1) as f64;
    let mut v: Vec<f64> = (0..num).map(|i| i as f64 * step + start).collect();
    if let Some(last) = v.last_mut() {
        *last = stop;
    }
    v
}

const MIN_LOG_HERTZ: f64 = 1000.0;
const MIN_LOG_MEL: f64 = 15.0;

/// Slaney's mel scale: linear below 1 kHz, logarithmic above.
fn hertz_to_mel(f: f64) -> f64 {
    if f >= MIN_LOG_HERTZ { MIN_LOG_MEL + (f / MIN_LOG_HERTZ).ln() * (27.0 / 6.4f64.ln()) } else { 3.0 * f / 200.0 }
}

fn mel_to_hertz(m: f64) -> f64 {
    if m >= MIN_LOG_MEL { MIN_LOG_HERTZ * ((6.4f64.ln() / 27.0) * (m - MIN_LOG_MEL)).exp() } else { 200.0 * m / 3.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Config {
        Config::from_json(r#"{"feature_size": 4, "sampling_rate": 16000, "hop_length": 160, "n_fft": 400, "chunk_length": 1}"#, "p.json")
            .unwrap()
    }

    #[test]
    fn window_is_periodic_hann() {
        let w = hann_periodic(400);
        assert_eq!((w[0], w[200]), (0.0, 1.0));
        assert!((w[100] - 0.5).abs() < 1e-15 && (w[1] - w[399]).abs() < 1e-15);
    }

    #[test]
    fn filters_are_slaney_triangles() {
        let f = mel_filter_bank(201, 80, 0.0, 8000.0, 16000);
        assert_eq!(f.len(), 80);
        // Bin 0 (0 Hz) is the first filter's left foot; Slaney's norm gives every triangle an area of 1 in Hz,
        // which the 40 Hz bins sample closely once a filter spans a dozen of them.
        assert_eq!(f[0].first, 1);
        assert!(f.iter().all(|x| !x.weights.is_empty() && x.weights.iter().all(|&w| w > 0.0)));
        for x in f.iter().filter(|x| x.weights.len() >= 12) {
            let area = x.weights.iter().sum::<f64>() * 40.0;
            assert!((area - 1.0).abs() < 0.02, "{x:?}: area {area}");
        }
        assert!(f.iter().filter(|x| x.weights.len() >= 12).count() >= 5);
        assert!((mel_to_hertz(hertz_to_mel(3000.0)) - 3000.0).abs() < 1e-9);
    }

    #[test]
    fn silence_sits_on_the_floor() {
        let c = tiny();
        let out = c.extract(&[], 16000, "silence").unwrap();
        assert_eq!(out.len(), 4 * 100);
        assert!(out.iter().all(|&x| x == (-10.0f32 + 4.0) / 4.0), "{:?}", &out[..4]);
    }

    #[test]
    fn wrong_rate_and_bad_config_are_named() {
        let e = tiny().extract(&[0.0; 10], 44100, "clip.wav").unwrap_err();
        assert_eq!(e.message(), "clip.wav: sampled at 44100 Hz; the feature extractor (p.json) wants 16000 Hz (clips are not resampled)");
        let e = Config::from_json(r#"{"dither": 0.1}"#, "pre.json").unwrap_err();
        assert!(e.message().starts_with("pre.json: field `dither` is 0.1"), "{e}");
        let e = Config::from_json(r#"{"nb_max_frames": 1500}"#, "pre.json").unwrap_err();
        assert!(e.message().contains("`nb_max_frames` is 1500") && e.message().contains("give 3000"), "{e}");
        let e = Config::from_json(r#"{"feature_size": "80"}"#, "pre.json").unwrap_err();
        assert!(e.message().contains("`feature_size` is \"80\""), "{e}");
        let e = tiny().extract(&[f32::INFINITY], 16000, "row 2").unwrap_err();
        assert!(e.message().starts_with("row 2: sample 0 is inf"), "{e}");
    }

    #[test]
    fn long_clips_are_cut_and_short_ones_padded() {
        let c = tiny();
        let tone: Vec<f32> = (0..20000).map(|i| (i as f32 * 0.05).sin() * 0.5).collect();
        let full = c.extract(&tone, 16000, "tone").unwrap();
        assert_eq!(full, c.extract(&tone[..16000], 16000, "tone").unwrap(), "samples past the chunk do not count");
        let t = c.features(&tone[..8000], 16000, "tone").unwrap();
        assert_eq!((t.name.as_str(), t.shape.as_slice()), ("input_features", &[1i64, 4, 100][..]));
    }
}
