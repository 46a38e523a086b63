"""MANIFEST.json of the seeded fixtures: the versions and recipes they were built with, the exporter bugs kept as
built and the workarounds used, the package aliases, the derived files, and the sha256 of every file.
"""
from __future__ import annotations

import json
import os
import platform

from .common import log, sha256_file

from . import whisper_fixture  # noqa: E402
from .fixture_build import INT4  # noqa: E402
from .fixture_derive import FOREIGN_DERIVED, derived_files, read_manifest  # noqa: E402
from .fixture_models import (MM_AUDIO, MM_IMAGE_SOFT_TOKENS, MM_MAX_POSITIONS, MM_MODELS, MM_NAME,  # noqa: E402
                             MM_TEXT, MM_VISION, MODEL_DEFAULTS, MODELS, NORM_STD, PROMPTS, SPEECH_MODELS)
from .mm_clamps import CLAMPS_FILE, CLIP_PERCENTILES  # noqa: E402
from .mm_fixture import MEDIA, MEDIA_DIR, MM_PROMPTS, MM_SPECIAL_TOKENS  # noqa: E402
from .text_fixture import INT4_FOLD_HEAD, MOBIUS_DTYPES, ONNX_FLAVOURS, SHARED_EP  # noqa: E402

# Packages that mobius-onnx 0.1.0 builds wrongly (found comparing them with HF; kept as built: they are real
# exporter bugs that the suite should report, not hide, and its trials do).
KNOWN_ISSUES = {
    "gemma3-tiny/onnx/cpu-f32": (
        "mobius-onnx 0.1.0 --ep cpu (GroupQueryAttention) for gemma3_text: the full-attention layer "
        "rotates with the sliding layers' RoPE table (theta 1e4 instead of 1e6) and the sliding layer "
        "gets no local_window_size; logits differ from HF by ~9 from the first prompt positions on"),
}
KNOWN_ISSUES["gemma3-tiny/onnx/cpu-int4"] = "quantized from gemma3-tiny/onnx/cpu-f32: the same --ep cpu bug"
# How the dtype variants of the text fixtures are made (MANIFEST.json "variants").
VARIANTS = {
    "models": list(MODELS),
    "packages": {
        **{f"{ep}-{dt}": f"mobius build --runtime ort-genai --ep {ep} --dtype {dt}"
           for ep in ONNX_FLAVOURS.values() if ep not in SHARED_EP for dt in MOBIUS_DTYPES},
        **{f"{ep}-{dt}": f"not stored: {SHARED_EP[ep]}-{dt} (mobius build --ep {ep} --dtype {dt} gives the same "
                         f"bytes; checked at every build)"
           for ep in ONNX_FLAVOURS.values() if ep in SHARED_EP for dt in MOBIUS_DTYPES},
        **{f"{ep}-int4": f"{ep}-f32, MatMuls and token-embedding Gathers quantized by onnxruntime "
                         f"MatMulNBitsQuantizer" for ep in ONNX_FLAVOURS.values()},
    },
    "int4": {"quantizer": "onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer",
             **INT4, "nodes_to_exclude": "every Gather but those of token-embedding tables (int4_gather_exclusions: "
                                         "an initializer [vocab_size, d] whose consumers are all Gathers); the "
                                         "RoPE cos/sin caches stay float32",
             "fold_tied_head": {"models": list(INT4_FOLD_HEAD),
                                "how": "before quantizing, an LM head MatMul(x, Transpose(table)) with a constant "
                                       "table becomes MatMul(x, lm_head.weight_t), lm_head.weight_t = table^T "
                                       "(float32, a new initializer after the table; the Transpose is removed)"},
             "save": "save_model_to_file(use_external_data_format=True): model.onnx + model.onnx.data"},
    "notes": [
        "mobius-onnx 0.1.0 builds f16 and bf16 byte-identically for --ep default and --ep cpu (no "
        "GroupQueryAttention below f32): only default-{f16,bf16} are stored, and they serve as "
        "cpu-{f16,bf16} too (\"aliases\"); every build re-checks the identity",
        "every package (f32 included) holds model.onnx, model.onnx.data and genai_config.json only: no copy "
        "of the tokenizer files, which are those of tokenizer/ (each hf/ has a derived copy)",
        "the int4 packages of both flavours quantize the same f32 weights to the same values (only the "
        "graphs differ: --ep cpu fuses q/k/v into one MatMulNBits for llama)",
        "int4 embeddings: GatherBlockQuantized (int4, block 32 along the hidden axis, symmetric) for the token "
        "embedding tables (gemma4's per-layer one too) that only Gathers read; the RoPE cos/sin caches stay "
        "float32. qwen3's tied LM head, built by mobius as MatMul(Transpose(embedding)), is first folded into "
        f"its own float32 initializer lm_head.weight_t = embedding^T (fold_tied_head; {', '.join(INT4_FOLD_HEAD)}): "
        "the head becomes MatMulNBits and the embedding GatherBlockQuantized, no float32 table is left",
        "bf16 packages do not run on ONNX Runtime's CPU EP (1.31): qwen3/llama: no MatMul(13) kernel for "
        "bfloat16; gemma3/gemma4 (Attention with an attn_mask): the Attention-23 function body fails type "
        "inference (Add bound to bfloat16 and float)",
    ],
}
# Packages that mobius-onnx 0.1.0 cannot build from the HF directory as saved, and how fixtures.py
# builds them instead (the HF reference itself is unchanged).
MOBIUS_WORKAROUNDS = {
    f"{MM_NAME}/onnx": (
        "mobius-onnx 0.1.0 takes the LM head of Gemma4ForConditionalGeneration only from "
        "model.language_model.lm_head.weight (it only ever synthesizes a tied one); transformers saves "
        "an untied head as lm_head.weight, and mobius then fails ('decoder.lm_head.weight' without "
        "weights). The packages are built from a copy of hf/ whose model.safetensors has that one "
        "tensor renamed"),
    f"{MM_NAME}/onnx/genai": (
        "mobius-onnx 0.1.0 writes model.type gemma4_text (its text decoder's type) into the multimodal "
        "package's genai_config.json, and ships no tokenizer files: onnxruntime-genai 0.18.0 then refuses the "
        "package ('Decoder-only CPU embedding requires the dynamic-batching Engine.') and, with the type "
        "fixed, its processor fails to open tokenizer_config.json. Each package gets model.type gemma4 and a "
        "copy of hf/'s tokenizer.json and tokenizer_config.json (complete_mm_package), as a user's package must"),
    "whisper-tiny/onnx": (
        "mobius-onnx 0.1.0 maps WhisperForConditionalGeneration's proj_out.weight into its decoder only when the "
        "head is tied (preprocess_weights); the fixture's untied head then fails the build ('decoder.proj_out.weight' "
        "without weights). The package is built from a copy of hf/ with that one tensor renamed to "
        "model.decoder.proj_out.weight (whisper_fixture.build)"),
}


def aliases():
    """Packages that are not stored because another one has the same bytes (SHARED_EP)."""
    return {f"{m}/onnx/{ep}-{dt}": f"{m}/onnx/{by}-{dt}"
            for m in MODELS for ep, by in SHARED_EP.items() for dt in MOBIUS_DTYPES}


def model_records():
    """MANIFEST.json's "models": each seeded fixture's recipe (the text ones' design prompt, the multimodal one's
    towers, media prompts and clamp calibration, whisper_fixture's own entry)."""
    return {**{n: {**{k: v for k, v in {**MODEL_DEFAULTS, **s}.items() if k != "config"},
                   "norm_std": NORM_STD, "model_type": s["config"](s.get("tie", False)).model_type,
                   "design_prompt": PROMPTS[n]}
               for n, s in MODELS.items()},
            **{n: {**{k: v for k, v in {**MODEL_DEFAULTS, **s}.items() if k != "config"},
                   "norm_std": NORM_STD, "model_type": s["config"](s.get("tie", False)).model_type,
                   "design_prompts": {m: {"media": [f"{MEDIA_DIR}/{MEDIA[k]}" for k in kinds], "text": t}
                                      for m, (kinds, t) in MM_PROMPTS.items()},
                   "text_config": MM_TEXT, "vision_config": MM_VISION, "audio_config": MM_AUDIO,
                   "max_position_embeddings": MM_MAX_POSITIONS,
                   "image_max_soft_tokens": MM_IMAGE_SOFT_TOKENS,
                   "clamp_calibration": {
                       "percentiles": list(CLIP_PERCENTILES),
                       "on": "the image+audio design prompt, in forward order; input clamps clip "
                             "the top only (lower bound = smallest value seen)",
                       "bounds": f"{n}/{CLAMPS_FILE}: committed, read at every build (no forward pass "
                                 f"decides a weight); --recalibrate-clamps calibrates them again"}}
               for n, s in MM_MODELS.items()},
            **{n: whisper_fixture.manifest_entry() for n in SPEECH_MODELS}}


def write_manifest(out_root):
    # Only what this script builds (and the media it designs on): other generators own other
    # directories under fixtures/ (e.g. arith.py's arith-tiny/, with its own RECIPE.json).
    owned = {"tokenizer", MEDIA_DIR, *MODELS, *MM_MODELS, *SPEECH_MODELS}
    files = {}
    for dirpath, dirnames, filenames in os.walk(out_root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")
                             and (dirpath != out_root or d in owned))
        for f in sorted(filenames):
            if dirpath == out_root:
                continue
            p = os.path.join(dirpath, f)
            files[os.path.relpath(p, out_root)] = sha256_file(p)
    derived = [f"{m}/{w}" for m in (*MODELS, *MM_MODELS, *SPEECH_MODELS) if os.path.isdir(os.path.join(out_root, m))
               for w in derived_files(m)]
    missing = [f for f in derived if f not in files]
    if missing:
        raise SystemExit(f"MANIFEST.json must record the derived files, missing: {missing}")
    old = (read_manifest(out_root) or {}).get("sha256", {})
    # Another generator's derived files: the sha256 it recorded (arith.py writes it when it trains), else
    # (never recorded yet) that of the file here.
    for m, ws in FOREIGN_DERIVED.items():
        for w in ws:
            f, p = f"{m}/{w}", os.path.join(out_root, m, w)
            sha = old.get(f) or (sha256_file(p) if os.path.isfile(p) else None)
            if sha is None:
                log(f"  NOTE: {f} is neither recorded nor here: not in MANIFEST.json")
                continue
            files[f] = sha
            derived.append(f)
    for f in derived:
        if f in old and old[f] != files[f]:
            log(f"  NOTE: {f} changed (sha256 {old[f][:12]}.. -> {files[f][:12]}..): regenerate the goldens")
    import importlib.metadata as md

    manifest = {
        "generator": "xtask/reference/fixtures.py",
        "python": platform.python_version(),
        "packages": {p: md.version(p) for p in
                     ("torch", "transformers", "tokenizers", "mobius-onnx", "onnx", "safetensors",
                      "torchvision", "pillow", "soundfile", "onnxruntime")},
        "models": model_records(),
        "tokenizer_corpus": "first 60 *.py (sorted) + LICENSE.txt of the Python standard library",
        "mm_tokenizer": f"the same BPE with ids 0..{len(MM_SPECIAL_TOKENS) - 1} = {' '.join(MM_SPECIAL_TOKENS)}",
        "known_issues": KNOWN_ISSUES,
        "variants": VARIANTS,
        "mobius_workarounds": MOBIUS_WORKAROUNDS,
        "aliases": aliases(),
        "derived": {"files": derived,
                    "how": "git-ignored, not committed: `fixtures.py --out fixtures --hf-only` (cargo xtask "
                           "fixtures --hf-only) rebuilds them and checks them against the sha256 here: every "
                           "fixture's weights read back from the initializers of its committed onnx/default-f32 "
                           "package (weights.py; arith.py derive_weights for arith-tiny), never re-seeded, and the "
                           "text fixtures' tokenizer files as copies of tokenizer/"},
        "sha256": files,
    }
    with open(os.path.join(out_root, "MANIFEST.json"), "w") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
        fh.write("\n")
