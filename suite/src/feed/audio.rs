//! Audio as Hugging Face datasets store it, decoded to mono f32 samples and a sample rate.
//!
//! An `Audio` feature in Parquet is a struct {bytes, path} whose bytes are a whole WAV or FLAC file; a few datasets
//! hold the decoded form {array, sampling_rate} instead, which [`from_array`] takes. The samples equal
//! `soundfile.read(..., dtype="float32")`, which the reference reads clips with: integer PCM is divided by
//! 2^(bits - 1) (i16 / 32768, i24 / 2^23, unsigned 8-bit re-centred on 128 and divided by 128), all exact in f32
//! up to 24 bits; 32-bit PCM is rounded to f32 first, as libsndfile does; float WAV passes as it is.
//!
//! Several channels are averaged into one, as datasets' decoder (`np.mean` over the channel axis) and the
//! reference (`wave.mean(axis=1)`) do: summed in f32 in channel order, then divided by the channel count in f32.
//! Resampling is not done: a clip at another rate than the feature extractor's is an error there. A clip with no
//! samples is refused (Whisper would hear 30 s of silence and transcribe something for it).

use std::io::Cursor;

use crate::error::{At, Error, Result, bail};

/// Mono samples in [-1, 1] and the rate they were recorded at.
#[derive(Debug, Clone, PartialEq)]
pub struct Audio {
    pub samples: Vec<f32>,
    pub rate: u32,
}

/// Every channel as decoded, interleaved (frame by frame), before they are averaged.
#[derive(Debug, Clone, PartialEq)]
pub struct Channels {
    pub interleaved: Vec<f32>,
    pub channels: usize,
    pub rate: u32,
}

impl Channels {
    /// One channel: the average of all, as datasets and the reference compute it.
    pub fn mono(&self) -> Audio {
        let samples = if self.channels == 1 {
            self.interleaved.clone()
        } else {
            let n = self.channels as f32;
            self.interleaved.chunks_exact(self.channels).map(|frame| frame.iter().fold(0.0f32, |s, &x| s + x) / n).collect()
        };
        Audio { samples, rate: self.rate }
    }
}

/// Decodes a WAV or FLAC file held in memory (an `Audio` feature's `bytes`) into mono samples; `what` names it in
/// errors (a file, or a dataset row and column).
pub fn decode(bytes: &[u8], what: &str) -> Result<Audio> {
    Ok(decode_channels(bytes, what)?.mono())
}

/// [`decode`] before the channels are averaged.
pub fn decode_channels(bytes: &[u8], what: &str) -> Result<Channels> {
    let decoded = match bytes.get(..4) {
        Some(b"RIFF") => wav(bytes, what)?,
        Some(b"fLaC") => flac(bytes, what)?,
        _ => {
            let head: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
            bail!("{what}: not a WAV (RIFF) or FLAC (fLaC) file (first bytes {}; {} bytes)", head.join(" "), bytes.len())
        }
    };
    if decoded.rate == 0 || decoded.channels == 0 {
        bail!("{what}: the file declares {} channel(s) at {} Hz", decoded.channels, decoded.rate);
    }
    if decoded.interleaved.len() % decoded.channels != 0 {
        bail!("{what}: {} samples do not divide into {} channels (a truncated file?)", decoded.interleaved.len(), decoded.channels);
    }
    if decoded.interleaved.is_empty() {
        bail!("{what}: the file holds no samples (a 0-second clip); Whisper would hear 30 s of silence");
    }
    Ok(decoded)
}

/// The decoded form of an `Audio` feature, {array, sampling_rate}: checked (a positive rate, finite samples) and
/// taken as mono.
pub fn from_array(array: &[f32], sampling_rate: i64, what: &str) -> Result<Audio> {
    let rate = u32::try_from(sampling_rate).ok().filter(|&r| r > 0);
    let Some(rate) = rate else { bail!("{what}: field `sampling_rate` is {sampling_rate}; expected a positive rate in Hz") };
    if array.is_empty() {
        bail!("{what}: field `array` holds no samples (a 0-second clip); Whisper would hear 30 s of silence");
    }
    if let Some(i) = array.iter().position(|x| !x.is_finite()) {
        bail!("{what}: field `array` holds {} at sample {i}; audio samples must be finite", array[i]);
    }
    Ok(Audio { samples: array.to_vec(), rate })
}

fn wav(bytes: &[u8], what: &str) -> Result<Channels> {
    let mut reader = hound::WavReader::new(Cursor::new(bytes)).at(format!("{what} (WAV)"))?;
    let spec = reader.spec();
    let interleaved: Vec<f32> = match (spec.sample_format, spec.bits_per_sample) {
        (hound::SampleFormat::Float, 32) => reader.samples::<f32>().collect::<std::result::Result<_, _>>().at(format!("{what} (WAV)"))?,
        (hound::SampleFormat::Int, bits @ 1..=32) => {
            let scale = pcm_scale(bits as u32);
            reader
                .samples::<i32>()
                .map(|s| s.map(|s| s as f32 * scale))
                .collect::<std::result::Result<_, _>>()
                .at(format!("{what} (WAV)"))?
        }
        (format, bits) => bail!("{what}: WAV of {bits}-bit {format:?} samples; 8 to 32-bit PCM and 32-bit float are decoded"),
    };
    Ok(Channels { interleaved, channels: spec.channels as usize, rate: spec.sample_rate })
}

fn flac(bytes: &[u8], what: &str) -> Result<Channels> {
    let mut reader = claxon::FlacReader::new(Cursor::new(bytes)).at(format!("{what} (FLAC)"))?;
    let info = reader.streaminfo();
    if !(1..=32).contains(&info.bits_per_sample) {
        return Err(Error::new(format!("{what}: FLAC of {}-bit samples", info.bits_per_sample)));
    }
    let scale = pcm_scale(info.bits_per_sample);
    let interleaved =
        reader.samples().map(|s| s.map(|s| s as f32 * scale)).collect::<std::result::Result<Vec<f32>, _>>().at(format!("{what} (FLAC)"))?;
    if let Some(total) = info.samples
        && total * info.channels as u64 != interleaved.len() as u64
    {
        bail!(
            "{what}: FLAC declares {total} samples per channel and holds {} (a truncated file?)",
            interleaved.len() / info.channels.max(1) as usize
        );
    }
    Ok(Channels { interleaved, channels: info.channels as usize, rate: info.sample_rate })
}

/// 1 / 2^(bits - 1), libsndfile's normalisation of integer PCM: exact, a power of two.
fn pcm_scale(bits: u32) -> f32 {
    (2.0f64).powi(1 - bits as i32) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wav_bytes(spec: hound::WavSpec, write: impl FnOnce(&mut hound::WavWriter<&mut Cursor<Vec<u8>>>)) -> Vec<u8> {
        let mut cur = Cursor::new(Vec::new());
        {
            let mut w = hound::WavWriter::new(&mut cur, spec).unwrap();
            write(&mut w);
            w.finalize().unwrap();
        }
        cur.into_inner()
    }

    #[test]
    fn integer_pcm_scales_as_libsndfile() {
        let spec = |bits| hound::WavSpec { channels: 1, sample_rate: 8000, bits_per_sample: bits, sample_format: hound::SampleFormat::Int };
        let b16 = wav_bytes(spec(16), |w| [i16::MIN, -1, 0, 1, i16::MAX].iter().for_each(|&s| w.write_sample(s).unwrap()));
        assert_eq!(decode(&b16, "a.wav").unwrap().samples, [-1.0, -1.0 / 32768.0, 0.0, 1.0 / 32768.0, 32767.0 / 32768.0]);
        let b24 = wav_bytes(spec(24), |w| [-(1 << 23), 1, (1 << 23) - 1].iter().for_each(|&s| w.write_sample(s).unwrap()));
        assert_eq!(decode(&b24, "a.wav").unwrap().samples, [-1.0, 1.0 / 8388608.0, 8388607.0 / 8388608.0]);
        let b8 = wav_bytes(spec(8), |w| [-128i8, 0, 127].iter().for_each(|&s| w.write_sample(s).unwrap()));
        assert_eq!(decode(&b8, "a.wav").unwrap().samples, [-1.0, 0.0, 127.0 / 128.0]);
        let b32 = wav_bytes(spec(32), |w| w.write_sample(i32::MAX).unwrap());
        assert_eq!(decode(&b32, "a.wav").unwrap().samples, [1.0], "2^31 - 1 rounds to 2^31 in f32 first");
    }

    #[test]
    fn channels_average_in_f32() {
        let spec = hound::WavSpec { channels: 3, sample_rate: 16000, bits_per_sample: 32, sample_format: hound::SampleFormat::Float };
        let b = wav_bytes(spec, |w| [0.1f32, 0.2, 0.4, 1.0, -1.0, 0.5].iter().for_each(|&s| w.write_sample(s).unwrap()));
        let c = decode_channels(&b, "a.wav").unwrap();
        assert_eq!((c.channels, c.rate, c.interleaved.len()), (3, 16000, 6));
        assert_eq!(c.mono().samples, [(0.1f32 + 0.2 + 0.4) / 3.0, 0.5 / 3.0]);
    }

    #[test]
    fn errors_name_the_input() {
        let e = decode(b"ID3\x04 mp3 bytes", "row 3, column audio").unwrap_err();
        assert!(e.message().starts_with("row 3, column audio: not a WAV") && e.message().contains("49 44 33 04"), "{e}");
        let e = decode(b"RIFF\0\0", "clip.wav").unwrap_err();
        assert!(e.message().starts_with("clip.wav (WAV): "), "{e}");
        let e = decode(b"fLaC\0\0", "clip.flac").unwrap_err();
        assert!(e.message().starts_with("clip.flac (FLAC): "), "{e}");
        let e = from_array(&[0.0, f32::NAN], 16000, "row 1").unwrap_err();
        assert!(e.message().contains("`array` holds NaN at sample 1"), "{e}");
        let e = from_array(&[0.0], 0, "row 1").unwrap_err();
        assert!(e.message().contains("`sampling_rate` is 0"), "{e}");
        assert_eq!(from_array(&[0.25], 22050, "row 1").unwrap(), Audio { samples: vec![0.25], rate: 22050 });
    }
}
