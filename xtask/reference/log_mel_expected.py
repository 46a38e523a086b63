"""What soundfile and transformers' WhisperFeatureExtractor make of a few clips; writes the expectations of the suite's
audio decoding and log-mel tests (suite/tests/log_mel.rs). Run once, offline, from the repository root:

    PYTHONPATH=xtask $HOME/.cache/mobius-conformance/reference-venv/bin/python -m reference.log_mel_expected

It first (re)writes the two synthetic clips under tests/data/log_mel/ from a fixed seed (a 16-bit mono sine plus
noise, a 16-bit stereo pair), then reads every clip with `soundfile.read(dtype="float32")`, averages channels in
float32 as datasets' decoder and lmms_run.py do, and runs the extractor of each case on the mono samples.

Each case keeps two extractions: `numpy`, the extractor's float64 STFT path (`_np_extract_fbank_features`, what
the suite implements), whose whole [mels, frames] float32 array is pinned by its sha256 and a selection of frames;
and `call`, what `WhisperFeatureExtractor.__call__` returns in this venv (its float32 torch path, since torch is
installed; the reference's Whisper runs are fed this one), on a smaller selection, with the largest difference
between the two paths over the whole array. Values are written as the shortest decimal that reads back to the same
float32.
"""
from __future__ import annotations

import hashlib
import json
import os

from . import common  # noqa: F401  (the environment preamble, before torch)

import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402
import transformers  # noqa: E402

OUT_DIR = "tests/data/log_mel"
OUT = f"{OUT_DIR}/expected.json"
CLIP = "fixtures/media/652-129742-0006.flac"
SINE = f"{OUT_DIR}/sine-noise.wav"
STEREO = f"{OUT_DIR}/stereo.wav"
CFG_80 = f"{OUT_DIR}/whisper-tiny-en.preprocessor_config.json"
CFG_128 = f"{OUT_DIR}/large-v3-style.preprocessor_config.json"
RATE = 16000
SEED = 20240


def write_clips():
    rng = np.random.RandomState(SEED)
    t = np.arange(RATE // 2) / RATE  # 0.5 s
    sine = 0.4 * np.sin(2 * np.pi * 440.0 * t) + 0.2 * np.sin(2 * np.pi * 3100.0 * t) + 0.05 * rng.randn(t.size)
    sf.write(SINE, np.clip(sine, -1, 1), RATE, subtype="PCM_16")
    t = np.arange(RATE * 3 // 10) / RATE  # 0.3 s
    left = 0.5 * np.sin(2 * np.pi * 300.0 * t) + 0.02 * rng.randn(t.size)
    right = 0.3 * np.sin(2 * np.pi * 1234.0 * t + 0.5) + 0.02 * rng.randn(t.size)
    sf.write(STEREO, np.clip(np.stack([left, right], axis=1), -1, 1), RATE, subtype="PCM_16")


class F32(str):
    """A float32 written as the shortest decimal that reads back to it: a bare JSON number."""


def f32(x):
    return F32(np.format_float_positional(np.float32(x), unique=True, trim="-"))


def sha(a):
    return hashlib.sha256(np.ascontiguousarray(a, dtype="<f4").tobytes()).hexdigest()


def read(path):
    wave, rate = sf.read(path, dtype="float32", always_2d=True)
    mono = wave[:, 0] if wave.shape[1] == 1 else wave.mean(axis=1).astype(np.float32)
    return wave, mono, rate


def case(name, audio, cfg_path, mono, frames, call_frames, source=None):
    with open(cfg_path) as fh:
        fe = transformers.WhisperFeatureExtractor(**json.load(fh))
    padded = np.zeros(fe.n_samples, dtype=np.float32) + np.float32(fe.padding_value)
    n = min(mono.size, fe.n_samples)
    padded[:n] = mono[:n]
    numpy_path = fe._np_extract_fbank_features(padded[None, :], "cpu")[0].astype(np.float32)
    called = fe(mono, sampling_rate=fe.sampling_rate, return_tensors="np").input_features[0].astype(np.float32)
    assert numpy_path.shape == called.shape, (numpy_path.shape, called.shape)
    return {
        "name": name,
        "audio": audio,
        "source": source,
        "config": cfg_path,
        "shape": list(numpy_path.shape),
        "numpy": {
            "sha256": sha(numpy_path),
            "frames": frames,
            "values": [[f32(v) for v in numpy_path[:, f]] for f in frames],
        },
        "call": {
            "max_abs_diff_to_numpy": float(np.abs(called.astype(np.float64) - numpy_path).max()),
            "frames": call_frames,
            "values": [[f32(v) for v in called[:, f]] for f in call_frames],
        },
    }


def audio_entry(path):
    wave, mono, rate = read(path)
    return {
        "file": path,
        "rate": int(rate),
        "channels": int(wave.shape[1]),
        "len": int(wave.shape[0]),
        "interleaved_sha256": sha(wave),
        "mono_sha256": sha(mono),
        "head": [f32(v) for v in mono[:8]],
        "peak": f32(np.abs(mono).max()),
    }, mono


def dump(value, indent=0):
    """JSON with the float32 strings of `f32` as bare numbers and one line per list of numbers."""
    pad = "  " * indent
    if isinstance(value, dict):
        items = [f'{pad}  {json.dumps(k)}: {dump(v, indent + 1).lstrip()}' for k, v in value.items()]
        return pad + "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and value and isinstance(value[0], (list, dict)):
        return pad + "[\n" + ",\n".join(dump(v, indent + 1) for v in value) + "\n" + pad + "]"
    if isinstance(value, list):
        return pad + "[" + ", ".join(v if isinstance(v, F32) else json.dumps(v) for v in value) + "]"
    if isinstance(value, F32):
        return pad + value
    return pad + json.dumps(value)


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    write_clips()
    clip, clip_mono = audio_entry(CLIP)
    sine, sine_mono = audio_entry(SINE)
    stereo, stereo_mono = audio_entry(STEREO)
    long_mono = np.tile(clip_mono, 4)  # 36.5 s: truncated to 30 s

    # Frames are chosen where the clip is (the first 912 frames of the LibriSpeech clip, 50 of the sine, 30 of the
    # stereo pair) and a few in the padding, whose floor is max - 8.
    cases = [
        case("librispeech", CLIP, CFG_80, clip_mono, list(range(0, 925, 50)) + [1000, 2000, 2999],
             list(range(0, 925, 100)) + [2999]),
        case("sine-noise", SINE, CFG_80, sine_mono, list(range(0, 55, 4)) + [100, 1500, 2999],
             list(range(0, 55, 8)) + [2999]),
        case("librispeech-128", CLIP, CFG_128, clip_mono, list(range(0, 1000, 100)) + [2999],
             list(range(0, 1000, 200)) + [2999]),
        case("stereo", STEREO, CFG_80, stereo_mono, list(range(0, 34, 4)) + [2999], list(range(0, 34, 8)) + [2999]),
        case("long", CLIP, CFG_80, long_mono, list(range(0, 3000, 300)) + [2999], list(range(0, 3000, 600)) + [2999],
             source="the clip's samples four times over (36.5 s), through the raw-array form"),
    ]
    doc = {
        "generated_by": "xtask/reference/log_mel_expected.py",
        "versions": {"transformers": transformers.__version__, "numpy": np.__version__,
                     "soundfile": sf.__version__, "libsndfile": sf.__libsndfile_version__},
        "audio": [clip, sine, stereo],
        "cases": cases,
    }
    with open(OUT, "w") as fh:
        fh.write(dump(doc) + "\n")
    for c in cases:
        print(f"{c['name']}: shape {c['shape']}, __call__ vs numpy path max |diff| {c['call']['max_abs_diff_to_numpy']:.3g}")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
