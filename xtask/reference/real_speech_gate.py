"""The speech gate's data set, in lmms-eval's `librispeech_test_clean` schema: the suite's sentences spoken by
espeak-ng in two voices and the bundled LibriSpeech clip, as one Parquet file laid out as the Hugging Face hub cache
holds the dataset.
"""
from __future__ import annotations

import os

from .common import log
from .real_speech import CLIP_RATE, spoken

HERE = os.path.dirname(os.path.abspath(__file__))

# The speech gate's data set: what lmms-eval's `librispeech_test_clean` task reads (dataset_path
# lmms-lab-audio/librispeech, dataset_name and test_split librispeech_test_clean), with rows the suite owns. Each
# sentence of `sentences` (written for the suite, one a line, the reference transcript `gt`) is spoken in each of
# `voices` (espeak-ng voice, words a minute): en-us at 160 is the clips' voice a little faster; `en` (British
# English) with the variant m3 at 140 differs in accent, timbre and pace. Whisper tiny.en transcribes both about
# equally well; the female variants it understood worse. (espeak-ng 1.51 ignores a variant after `en-gb`, hence
# `en`.) The bundled LibriSpeech clip adds one real recording with its LibriSpeech transcript. The file sits where
# the hub cache would keep the dataset's `librispeech_test_clean` folder (`<config>/<split>-00000-of-00001.parquet`,
# as the hub repository names its shards), under a fixed revision that refs/main names.
SPEECH_GATE = dict(
    sentences="fixtures/real/speech-gate/sentences.txt",
    voices=[("en-us", 160), ("en+m3", 140)],
    librispeech=("652-129742-0006", "fixtures/media/652-129742-0006.flac",
                 "CAULIFLOWER MAYONNAISE TAKE COLD BOILED CAULIFLOWER BREAK INTO BRANCHES ADDING SALT PEPPER AND "
                 "VINEGAR TO SEASON"),
    repo="datasets--lmms-lab-audio--librispeech",
    revision="speech-gate",
    config="librispeech_test_clean",
    split="librispeech_test_clean",
    # lmms-eval's prompt for the task (utils.librispeech_doc_to_text), carried in the hub files' `prompt` column
    prompt="Please recognize the speech and only output the recognized content:",
    task="asr_en",
)


def gate_sentences():
    """SPEECH_GATE's sentences: one a line, plain ASCII, none empty or repeated."""
    path = os.path.join(HERE, "..", "..", SPEECH_GATE["sentences"])
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        lines = raw.decode("ascii").split("\n")
    except UnicodeDecodeError as e:
        raise SystemExit(f"{SPEECH_GATE['sentences']}: not plain ASCII ({e})")
    if lines and lines[-1] == "":
        lines.pop()
    for n, line in enumerate(lines, 1):
        if line.strip() != line or not line:
            raise SystemExit(f"{SPEECH_GATE['sentences']}:{n}: empty, or spaces around the sentence")
    if len(set(lines)) != len(lines):
        raise SystemExit(f"{SPEECH_GATE['sentences']}: a sentence is repeated")
    return lines


def gate_rows(tmp_dir):
    """The speech gate's rows, sorted by `id`: each sentence in each voice (FLAC at CLIP_RATE), and the bundled
    LibriSpeech clip's own FLAC bytes."""
    import io

    import soundfile as sf

    rows = []
    for n, text in enumerate(gate_sentences(), 1):
        for voice, wpm in SPEECH_GATE["voices"]:
            pcm = spoken(["espeak-ng", "-v", voice, "-s", str(wpm)], text, os.path.join(tmp_dir, "gate.wav"))
            buf = io.BytesIO()
            sf.write(buf, pcm, CLIP_RATE, subtype="PCM_16", format="FLAC")
            rid = f"{n:03d}-{voice}-{wpm}"
            rows.append(dict(id=rid, flac=buf.getvalue(), seconds=len(pcm) / CLIP_RATE, gt=text,
                             source=f"espeak-ng {voice} {wpm} wpm"))
    rid, rel, gt = SPEECH_GATE["librispeech"]
    path = os.path.join(HERE, "..", "..", rel)
    info = sf.info(path)
    if info.samplerate != CLIP_RATE or info.channels != 1:
        raise SystemExit(f"{rel}: {info.samplerate} Hz, {info.channels} channels; the speech gate wants "
                         f"{CLIP_RATE} Hz mono")
    with open(path, "rb") as fh:
        rows.append(dict(id=rid, flac=fh.read(), seconds=info.frames / CLIP_RATE, gt=gt, source="librispeech"))
    return sorted(rows, key=lambda r: r["id"])


def speech_gate(out_dir):
    """The speech gate's Parquet file, written by `datasets` as `push_to_hub` writes the hub's files (the
    `huggingface` schema metadata, the Audio feature as {bytes, path}, its own per-column compression), with no
    time or host in it; and refs/main naming its revision, as the hub cache keeps it."""
    import datasets
    import pyarrow as pa

    g = SPEECH_GATE
    rows = gate_rows(out_dir)
    features = datasets.Features({
        "audio": datasets.Audio(sampling_rate=CLIP_RATE),
        "prompt": datasets.Value("string"),
        "gt": datasets.Value("string"),
        "source": datasets.Value("string"),
        "task": datasets.Value("string"),
        "id": datasets.Value("string"),
    })
    # Built as Arrow, not through Features.encode_example: the bytes are already FLAC, and encoding would need
    # torchcodec for nothing.
    table = pa.table({
        "audio": pa.array([{"bytes": r["flac"], "path": r["id"] + ".flac"} for r in rows],
                          type=features["audio"].pa_type),
        "prompt": pa.array([g["prompt"]] * len(rows), pa.string()),
        "gt": pa.array([r["gt"] for r in rows], pa.string()),
        "source": pa.array([r["source"] for r in rows], pa.string()),
        "task": pa.array([g["task"]] * len(rows), pa.string()),
        "id": pa.array([r["id"] for r in rows], pa.string()),
    })
    datasets.disable_progress_bars()
    ds = datasets.Dataset(table, info=datasets.DatasetInfo(features=features))
    folder = os.path.join(out_dir, "snapshots", g["revision"], g["config"])
    os.makedirs(folder)
    ds.to_parquet(os.path.join(folder, f"{g['split']}-00000-of-00001.parquet"))
    os.makedirs(os.path.join(out_dir, "refs"))
    with open(os.path.join(out_dir, "refs", "main"), "w") as fh:
        fh.write(g["revision"])
    seconds = sum(r["seconds"] for r in rows)
    log(f"      {len(rows)} rows, {seconds:.1f} s of audio ({seconds / 60:.1f} min)")
