"""The real tier's spoken audio: the speech cases' clips (CLIPS) and the distribution level's speech corpus
(DIST_CORPUS), spoken by espeak-ng, resampled to CLIP_RATE, as 16-bit mono FLAC.
"""
from __future__ import annotations

import json
import os
import subprocess

from .common import log

HERE = os.path.dirname(os.path.abspath(__file__))

# The speech cases' own clips, written for the suite and spoken by espeak-ng (voice en-us, 150 words a minute):
# (file, text, seconds of silence before, after). `long` sits near Whisper's 30-second window; `short` is a few
# words with silence around them, where a model must neither hallucinate nor drop the words.
CLIPS = [
    ("long.flac",
     "This recording checks a speech recognizer on a long stretch of audio. The weather station on the hill reports "
     "a light wind from the west, clear skies in the morning, and a chance of rain after four in the afternoon. "
     "Trains to the city leave every twenty minutes from platform two. Please keep your ticket until the end of "
     "the journey, and remember to take all of your belongings with you when you leave the train.",
     0.5, 0.5),
    ("short.flac", "Turn left at the next corner.", 1.5, 2.0),
]
ESPEAK = ["espeak-ng", "-v", "en-us", "-s", "150"]
CLIP_RATE = 16_000


def espeak_version():
    try:
        r = subprocess.run(ESPEAK[:1] + ["--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"espeak-ng speaks the speech cases' clips and is not installed ({e}): "
                         f"`apt-get install espeak-ng` (.ci/run installs it)")
    return r.stdout.strip()


def spoken(espeak, text, wav, before=0.0, after=0.0):
    """`text` spoken by the `espeak` command (written to `wav`, then removed), resampled to CLIP_RATE, with
    `before` and `after` seconds of silence, as 16-bit samples."""
    import numpy as np
    import soundfile as sf
    from scipy.signal import resample_poly

    subprocess.run(espeak + ["-w", wav, text], check=True)
    wave, rate = sf.read(wav, dtype="float64")
    os.remove(wav)
    g = np.gcd(rate, CLIP_RATE)
    wave = resample_poly(wave, CLIP_RATE // g, rate // g)
    wave = np.concatenate([np.zeros(int(before * CLIP_RATE)), wave, np.zeros(int(after * CLIP_RATE))])
    return np.clip(np.round(wave * 32767), -32768, 32767).astype(np.int16)


def speak(out_dir):
    """CLIPS, spoken by espeak-ng, with their silences, resampled to CLIP_RATE, as 16-bit mono FLAC."""
    import soundfile as sf

    for file, text, before, after in CLIPS:
        pcm = spoken(ESPEAK, text, os.path.join(out_dir, file + ".wav"), before, after)
        sf.write(os.path.join(out_dir, file), pcm, CLIP_RATE, subtype="PCM_16", format="FLAC")
        log(f"      {file}: {len(pcm) / CLIP_RATE:.2f} s")


# The distribution level's speech corpus (fixtures/dist/speech.jsonl): paragraphs written for the suite, each
# spoken by espeak-ng as the speech cases' clips are, into the file its line names under DIST_AUDIO.
DIST_CORPUS = "fixtures/dist/speech.jsonl"
DIST_AUDIO = "dist-audio"


def dist_corpus():
    """DIST_CORPUS's utterances: (file name, text), each line's `audio` the file under target/real/DIST_AUDIO."""
    path = os.path.join(HERE, "..", "..", DIST_CORPUS)
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            u = json.loads(line)
            want = f"target/real/{DIST_AUDIO}/{u['name']}.flac"
            if u.get("audio") != want:
                raise SystemExit(f"{DIST_CORPUS}:{n}: `audio` is {u.get('audio')!r}; `cargo xtask real` speaks it "
                                 f"into {want!r}")
            out.append((f"{u['name']}.flac", u["text"]))
    return out


def speak_dist(out_dir):
    """DIST_CORPUS's paragraphs, spoken as the speech cases' clips are (a quarter second of silence each side)."""
    import soundfile as sf

    for file, text in dist_corpus():
        pcm = spoken(ESPEAK, text, os.path.join(out_dir, file + ".wav"), 0.25, 0.25)
        if len(pcm) > 29 * CLIP_RATE:
            raise SystemExit(f"{DIST_CORPUS}: {file} is {len(pcm) / CLIP_RATE:.1f} s spoken; Whisper hears 30 s")
        sf.write(os.path.join(out_dir, file), pcm, CLIP_RATE, subtype="PCM_16", format="FLAC")
    log(f"      {len(dist_corpus())} clips")
