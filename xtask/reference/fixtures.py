"""Build the tiny, offline, deterministic fixtures of the conformance suite.

    python -m reference.fixtures --out <repo>/fixtures [--only NAME ...] [--recalibrate-clamps]
    python -m reference.fixtures --out <repo>/fixtures --hf-only [--only MODEL ...] [--threads N]

(run by `cargo xtask fixtures`, which also runs arith.py for arith-tiny). NAME is one of: tokenizer, qwen3-tiny,
llama-tiny, gemma3-tiny, gemma4-tiny, gemma4-mm-tiny (multimodal).

--hf-only derives only the HF reference directories (<model>/hf/: no design checks, no mobius builds, no
quantization) and verifies every file against MANIFEST.json. The weights (<model>/hf/model.safetensors) and the
text fixtures' copies of the shared tokenizer (<model>/hf/tokenizer*.json) are derived, not committed (.gitignore),
and this is how a checkout gets them back. The weights are read back from the committed onnx/default-f32 package
(weights.py), never re-seeded: torch.randn's float32 bits depend on the CPU path (AVX2/AVX-512 against
ATEN_CPU_CAPABILITY=default), so only a derivation from committed bytes gives every machine the same file. It fails
if they do not match byte for byte (MANIFEST.json is left alone). arith.py's one derived file,
arith-tiny/hf/model.safetensors (the trained weights, committed inside arith-tiny/onnx/default-f32), is derived the
same way by arith.py itself (`--derive-only`; `cargo xtask fixtures --hf-only` runs both).

A full build (no --hf-only) creates a fixture: it seeds the model, builds its packages and checks that the f32
package gives the seeded weights back byte for byte (check_derivable), so that every later derivation can.

Layout written under --out:

    tokenizer/                      512-token byte-level BPE (ids 0..3 = <pad> <eos> <bos> <unk>)
    <model>/hf/                     seeded random-weight HF causal LM, fp32 safetensors + tokenizer (a copy of
                                    tokenizer/); model.safetensors and the tokenizer files are derived:
                                    git-ignored, sha256 in MANIFEST.json
    <model>/onnx/default-f32/       mobius build --runtime ort-genai --ep default
    <model>/onnx/cpu-f32/           mobius build --runtime ort-genai --ep cpu (GroupQueryAttention)
    <model>/onnx/default-f16/       the --ep default build with --dtype f16; mobius-onnx 0.1.0 builds --ep cpu
                                    byte-identically (checked at every build), so it is also the cpu-f16
                                    package (MANIFEST.json "aliases")
    <model>/onnx/default-bf16/      ... with --dtype bf16, likewise cpu-bf16 (ONNX Runtime's CPU EP cannot run
                                    them: no bf16 MatMul kernel; they are for GPU EPs and load-failure checks)
    <model>/onnx/{default,cpu}-int4/
                                    <model>/onnx/{ep}-f32 with every MatMul that has a constant weight made
                                    MatMulNBits and every token-embedding Gather made GatherBlockQuantized by
                                    ONNX Runtime's MatMulNBitsQuantizer (INT4 below); the RoPE cos/sin Gathers
                                    stay f32
                                    (every package holds model.onnx, model.onnx.data and genai_config.json
                                    only: no copy of the tokenizer files, which are those of tokenizer/)
    gemma4-mm-tiny/hf/              seeded Gemma4ForConditionalGeneration (text like gemma4-tiny + 2-layer
                                    vision and audio encoders with calibrated clamps) + Gemma4Processor
    gemma4-mm-tiny/onnx/default-f32/
                                    mobius ort-genai packages: decoder/ embedding/ vision_encoder/
                                    audio_encoder/ + genai_config.json (model.type gemma4), processor
                                    files and a copy of hf/'s tokenizer.json and tokenizer_config.json:
                                    a package onnxruntime-genai runs (complete_mm_package)
    media/                          the real jpeg and flac the multimodal fixture is designed on (input,
                                    committed; never written by this script)
    MANIFEST.json                   versions, recipe and sha256 of every file (the derived files too, and
                                    arith.py's derived arith-tiny/hf/model.safetensors)

Nothing is downloaded: the tokenizer trains on the Python standard library's own sources, the
models are random, the media are committed, and the ONNX packages come from the local mobius
builder. Running it twice with the same interpreter and pinned packages (requirements.txt) gives
byte-identical files.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import sysconfig
import tempfile
import time

from .common import log, sha256_file

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from . import hf_run, whisper_fixture  # noqa: E402
from .fixture_build import (INT4, TOKENIZER_FILES, WEIGHTS_PACKAGE, check_derivable, mobius_build,  # noqa: E402
                            mobius_source, normalize_modes, quantize_int4, read_back)
from .weights import MM_RENAMES, WHISPER_RENAMES  # noqa: E402

VOCAB = 512
SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]  # ids 0..3, Gemma order
PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
    bos_token_id=BOS_ID,
    eos_token_id=EOS_ID,
    pad_token_id=PAD_ID,
)

# How the weights are made (make_model): every >=2-d parameter is randn * init_std (embed_std for the
# input embedding when set), every 1-d parameter (norm weights) gets randn * NORM_STD added to its
# default so that no norm weight is inert, and Gemma-4's per-layer output scalars get values in
# [0.75, 1.25). The rest of the recipe exists for the goldens: seeds, scales and prompts were searched
# so that the top1-top2 logit margin of the prefill and of all 16 greedy steps is >= MIN_MARGIN
# (far from f16 noise), no EOS is generated, and tokens do not collapse into one repeated id.
#  - final_norm_scale multiplies the final norm's effective scale, i.e. all logits (argmax unchanged).
#  - tie: the Qwen3 and Gemma-3 fixtures tie the LM head to the embedding (as their small real models
#    do). A tied random Gemma mostly predicts its input token again (embedding x sqrt(hidden) in the
#    residual); a small embed_std keeps that to short runs.
#  - head_perm=(a, rest): Gemma-4 is untied, its LM head is rest * randn + a * (the embedding rows in a
#    seeded random order). With the logit softcap of 3 a plain random head only gives near-ties (the
#    cap squeezes the top logits together); this gives every step a clear winner, no repetition, and
#    raw top logits of ~2.7 that the cap still bends by ~0.5.
NORM_STD = 0.1
MIN_MARGIN = 0.1
MIN_CLAMP_MOVE = 5e-3  # each Gemma-4 clamp, switched off alone, must move its tower's features this much
GEN_TOKENS = 16


def _qwen3(tie):
    return transformers.Qwen3Config(num_hidden_layers=2, tie_word_embeddings=tie, **COMMON)


def _llama(tie):
    return transformers.LlamaConfig(num_hidden_layers=2, tie_word_embeddings=tie, **COMMON)


def _gemma3(tie):
    return transformers.Gemma3TextConfig(
        tie_word_embeddings=tie,
        num_hidden_layers=2,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"],
        # == head_dim (as in Gemma-3 1B..12B): mobius-onnx 0.1.0 ignores query_pre_attn_scalar and
        # always scales by head_dim**-0.5, so any other value makes every gemma3 package wrong.
        query_pre_attn_scalar=16,
        final_logit_softcapping=None,
        **COMMON,
    )


def _gemma4_text_kwargs(tie):
    return dict(
        tie_word_embeddings=tie,
        num_hidden_layers=4,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        sliding_window=8,
        global_head_dim=32,  # dual head dims: 16 on sliding layers, 32 on full layers
        num_kv_shared_layers=2,  # layers 2, 3 reuse the K/V of layers 0, 1
        hidden_size_per_layer_input=16,
        vocab_size_per_layer_input=VOCAB,
        final_logit_softcapping=3.0,  # small enough that tanh really bends the logits
        **COMMON,
    )


def _gemma4(tie):
    return transformers.Gemma4TextConfig(**_gemma4_text_kwargs(tie))


MODEL_DEFAULTS = dict(tie=False, embed_std=None, final_norm_scale=1.0, head_perm=None)
MODELS = {
    "qwen3-tiny": dict(config=_qwen3, tie=True, seed=36, init_std=0.2),
    "llama-tiny": dict(config=_llama, seed=33, init_std=0.2),
    "gemma3-tiny": dict(config=_gemma3, tie=True, seed=66, init_std=0.1, embed_std=0.03, final_norm_scale=7.0),
    "gemma4-tiny": dict(config=_gemma4, seed=24, init_std=0.1, embed_std=0.3, final_norm_scale=0.35,
                        head_perm=(0.5, 0.5)),
}

# The prompt each model's goldens are designed for (margins checked against these).
PROMPTS = {
    'qwen3-tiny': 'Question: What is the capital of France?\nAnswer: The capital of France is Paris, a city known for',
    'llama-tiny': 'class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        self.items.append(item)\n\n    def pop(self):\n',
    'gemma3-tiny': 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return',
    'gemma4-tiny': 'import os\nimport sys\n\n\ndef main(argv):\n    path = os.path.join(os.getcwd(), argv[1])\n    with open(path, encoding="utf-8") as f:\n        for line in f:\n',
}

# --- the multimodal fixture (gemma4-mm-tiny): the text model above plus 2-layer vision and audio
# encoders, a real Gemma4Processor and the real media in <out>/media/.
MM_NAME = "gemma4-mm-tiny"
MEDIA_DIR = "media"
MEDIA = {"image": "pipeline-cat-chonk.jpeg", "audio": "652-129742-0006.flac"}  # 960x686 RGB; 9.1 s, 16 kHz
# Tokenizer ids 0..12 are Gemma-4's specials, so that the processor's media tokens land on the ids of
# the config (boi 4, eoi 5, image 6, video 7, boa 8, eoa 9, audio 10).
MM_SPECIAL_TOKENS = [*SPECIAL_TOKENS, "<|image>", "<image|>", "<|image|>", "<|video|>",
                     "<|audio>", "<audio|>", "<|audio|>", "<|turn>", "<turn|>"]
MM_EXTRA_SPECIAL_TOKENS = {
    "image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>", "video_token": "<|video|>",
    "audio_token": "<|audio|>", "boa_token": "<|audio>", "eoa_token": "<audio|>",
    "sot_token": "<|turn>", "eot_token": "<turn|>"}
MM_TOKEN_IDS = dict(boi_token_id=4, eoi_token_id=5, image_token_id=6, video_token_id=7,
                    boa_token_id=8, eoa_token_index=9, audio_token_id=10)
# Gemma-4 style turns; the processor expands <|image|> / <|audio|> into boi + n soft tokens + eoi.
MM_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{{ '<|turn>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<|image|>' }}"
    "{%- elif item['type'] == 'audio' -%}{{ '<|audio|>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{ '<turn|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|turn>model\\n' }}{%- endif -%}")
# 70 is the smallest soft-token budget Gemma4ImageProcessor allows: the jpeg is resized to 432x336
# (27x21 patches of 16 px, pooled 3x3 into 63 soft tokens) and padded to 630 patches.
MM_IMAGE_SOFT_TOKENS = 70
# The image+audio prompt is ~320 tokens; mobius sizes the text RoPE table by max_position_embeddings.
MM_MAX_POSITIONS = 512
# Clamp calibration: each ClippableLinear gets input/output bounds at these percentiles of what it
# sees on the real media, in forward order with all upstream clamps already on (so every clamp clips
# ~5% of its elements at one or both ends; see calibrate_clamps).
CLIP_PERCENTILES = (5.0, 95.0)
# The calibrated bounds are committed (<out>/gemma4-mm-tiny/clamps.json) and read when the fixture is built (a
# derivation reads them, with every other weight, from the committed package): a forward
# pass sums floats in an order that depends on the CPU's kernels (thread count, AVX-512 or not), so bounds taken from
# one would make the weights, and their sha256 in MANIFEST.json, depend on the machine. Calibrating again is an
# explicit step (--recalibrate-clamps), followed by a rebuild of the fixture and its goldens.
CLAMPS_FILE = "clamps.json"
CLAMPS_FORMAT = "clamp-bounds-v1"
CLAMP_FIELDS = ("input_min", "input_max", "output_min", "output_max")
# Design prompts: modality -> (media, text).
MM_PROMPTS = {
    "image": (["image"], "Describe this image."),
    "audio": (["audio"], "Transcribe this audio."),
    "image+audio": (["image", "audio"], "What do you see and hear?"),
}


# The text model is gemma4-tiny's with a narrower MLP (64 instead of 128) and the encoders are small
# (hidden 16), so that the fixture (HF weights + two packages, ~4.7 MB) and the media stay under 5 MB.
MM_TEXT = dict(intermediate_size=64)
MM_VISION = dict(
    hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
    num_key_value_heads=2, head_dim=8, patch_size=16, pooling_kernel_size=3,
    # >= the longest patch row a 70-soft-token image can have (210 patches)
    position_embedding_size=256,
    use_clipped_linears=True,  # default False for vision: the clamps would not exist
)
MM_AUDIO = dict(
    hidden_size=16, num_hidden_layers=2,
    num_attention_heads=8,  # mobius-onnx 0.1.0 hard-codes 8 audio attention heads (head_dim 2 here)
    subsampling_conv_channels=[128, 4],  # mobius needs the first one at 128
    output_proj_dims=16,
    use_clipped_linears=True,
)


def _gemma4_mm(tie):
    text = transformers.Gemma4TextConfig(
        **{**_gemma4_text_kwargs(tie), "max_position_embeddings": MM_MAX_POSITIONS, **MM_TEXT})
    vision = transformers.Gemma4VisionConfig(**MM_VISION)
    audio = transformers.Gemma4AudioConfig(**MM_AUDIO)
    return transformers.Gemma4Config(text_config=text, vision_config=vision, audio_config=audio,
                                     tie_word_embeddings=tie, mm_tokens_per_image=MM_IMAGE_SOFT_TOKENS,
                                     **MM_TOKEN_IDS)


# Untied with head_perm like gemma4-tiny: a tied random Gemma-4 under the logit softcap of 3 either
# repeats its input token or has near-ties (margins < 0.04 over a seed / scale grid). The multimodal
# context needs a stronger input embedding (0.8) than the text fixture to keep margins wide.
# audio_std: wider weights for some audio-tower linears so that every clamp matters: q_proj / k_proj
# (otherwise the attention is nearly uniform and the clamps on q and k move the features by 0.003)
# and the FFNs' ffw_layer_1 (whose output clamp feeds silu: near silu's flat minimum clipping the
# low side changes next to nothing unless the pre-activations reach well below -1.3).
MM_MODELS = {
    MM_NAME: dict(config=_gemma4_mm, seed=1, init_std=0.1, embed_std=0.8, final_norm_scale=0.2,
                  head_perm=(0.5, 0.5), audio_std={"q_proj": 0.6, "k_proj": 0.6, "ffw_layer_1": 0.3}),
}

ONNX_FLAVOURS = {"default-f32": "default", "cpu-f32": "cpu"}
# Variants of each text fixture's f32 packages, per flavour ({ep}-{dtype}):
#  - MOBIUS_DTYPES: built by mobius from hf/ with --dtype (weights cast at save time);
#  - INT4: {ep}-f32 weight-only quantized by ONNX Runtime's own quantizer. Symmetric (the default zero
#    point 8, no zero_points input) at block 32 with accuracy_level unset (0: the CPU kernel dequantizes
#    to f32 and runs an f32 GEMM, so the package equals the f32 graph with dequantized weights to ~5e-7;
#    level 4 quantizes activations to int8 and adds up to 0.3 of logit error). Asymmetric was measured
#    too: no better overall (prefill error vs HF f32 2.78 / 3.07 / 1.40 / 0.44 against symmetric's
#    2.35 / 4.03 / 1.72 / 0.47 for qwen3 / llama / gemma3 / gemma4) and its dequantized references
#    come closer to ties (smallest top1-top2 margin 0.0067 vs 0.0162). The token-embedding Gathers are
#    quantized too (GatherBlockQuantized, int4 blocks of 32 along the hidden axis, symmetric: scale and
#    signed int4, no zero points), see int4_gather_exclusions for which: only tables of shape
#    [vocab_size, d] (the embeddings, gemma4's per-layer one included) whose every consumer is a Gather;
#    never the RoPE cos/sin caches (position tables, not embeddings; quantizing them was measured to
#    cost accuracy), and not a table that also feeds something else. qwen3's tied LM head is
#    MatMul(Transpose(embedding)): its int4 packages first fold the Transpose into an f32 initializer
#    lm_head.weight_t = embedding^T (INT4_FOLD_HEAD, fold_tied_head), so the head is MatMulNBits and the
#    embedding, then read by its Gather only, GatherBlockQuantized (the two int4 copies replace the f32
#    table). goldens.py's "dequantize" job field rebuilds the exact dequantized weights (MatMulNBits and
#    GatherBlockQuantized) in the HF model for the kernel-parity reference, untying a head and embedding
#    that dequantize differently.
MOBIUS_DTYPES = ("f16", "bf16")
# mobius-onnx 0.1.0 builds --dtype f16 / bf16 byte-identically for --ep cpu and --ep default (below f32 it
# uses no GroupQueryAttention): only {default}-{dtype} is stored, and it also serves as {cpu}-{dtype}.
# build_model still builds the cpu one and fails if it ever differs (then both must be stored again).
SHARED_EP = {"cpu": "default"}
# The derived (git-ignored) files of each seeded fixture: rebuilt by --hf-only and verified against
# the sha256 that MANIFEST.json records for them. The text fixtures' hf/ tokenizer files are copies of
# tokenizer/ (save_hf); the multimodal fixture's tokenizer is its own and stays committed.
DERIVED_WEIGHTS = ("hf/model.safetensors",)
DERIVED_TOKENIZER = tuple(f"hf/{f}" for f in TOKENIZER_FILES)
# Derived files of fixtures that another generator owns (rebuilt by that generator: arith.py --derive-only) and
# recorded in MANIFEST.json (write_manifest keeps the sha256 that generator recorded): arith.py's trained
# weights, rebuilt from the initializers of its committed default-f32 package.
ARITH_NAME = "arith-tiny"
FOREIGN_DERIVED = {ARITH_NAME: ("hf/model.safetensors",)}
# The encoder-decoder fixtures (speech-to-text), designed and built by whisper_fixture.py; their hf/ weights are
# derived as every seeded fixture's are. Their tokenizer files (the shared BPE plus Whisper's special tokens) are
# committed: they are not copies of tokenizer/.
SPEECH_MODELS = ("whisper-tiny",)


def derived_files(name):
    """The derived (git-ignored) files of fixture `name`, relative to its directory."""
    if name in MODELS:
        return (*DERIVED_WEIGHTS, *DERIVED_TOKENIZER)
    if name in MM_MODELS or name in SPEECH_MODELS:
        return DERIVED_WEIGHTS
    return FOREIGN_DERIVED.get(name, ())
# The fixtures whose tied LM head mobius builds as MatMul(Transpose(embedding)) and whose int4 packages fold
# it into its own f32 initializer before quantizing (fold_tied_head): the head becomes MatMulNBits and the
# embedding, then read by its Gather only, GatherBlockQuantized. Opt-in per model: arith.py's arith-tiny has
# the same graph but keeps its head and embedding f32 (quantizing its 18-token embedding was measured to cost
# 2 points of accuracy), so quantize_int4's default is not to fold.
INT4_FOLD_HEAD = ("qwen3-tiny",)
# The multimodal fixture ships the default flavour only: with its goldens (the processor pads pixel_values to 630
# patches; the audio clip is ~900 mel frames) a second 1.75 MB package would break the 15 MB budget for all
# fixtures and goldens. Its cpu build matched HF to 1.3e-6 when measured.
MM_FLAVOURS = {"default-f32": "default"}

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


# --------------------------------------------------------------------------------------------
# tokenizer


def tokenizer_corpus():
    stdlib = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))[:60]
    lic = os.path.join(stdlib, "LICENSE.txt")
    if os.path.exists(lic):
        files.append(lic)
    if len(files) < 20:
        raise SystemExit(f"too few stdlib sources under {stdlib} to train the tokenizer")
    return files


def build_tokenizer(out_dir, special_tokens=SPECIAL_TOKENS, extra_special_tokens=None):
    """The fixtures' byte-level BPE; `special_tokens` take ids 0.. in order (the text tokenizer has
    Gemma's <pad> <eos> <bos> <unk>; the multimodal one adds Gemma-4's media and turn markers)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(tokenizer_corpus(), trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    for i, t in enumerate(special_tokens):
        assert tok.token_to_id(t) == i, (t, tok.token_to_id(t))
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", BOS_ID)]
    )
    extra = {"extra_special_tokens": extra_special_tokens} if extra_special_tokens else {}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>", **extra
    )
    os.makedirs(out_dir, exist_ok=True)
    fast.save_pretrained(out_dir)
    normalize_modes(out_dir)
    ids = fast("def f(x):\n    return x").input_ids
    assert ids[0] == BOS_ID, ids
    log(f"tokenizer: vocab {tok.get_vocab_size()}, sample ids {ids}")
    return fast


# --------------------------------------------------------------------------------------------
# models


def make_model(name, **override):
    """The seeded random-weight model `name` (fp32, eval); `override` replaces MODELS[name] entries."""
    spec = {**MODEL_DEFAULTS, **{**MODELS, **MM_MODELS}[name], **override}
    seed, init_std = spec["seed"], spec["init_std"]
    cfg = spec["config"](spec["tie"])
    torch.manual_seed(seed)
    # (gemma4 multimodal configs give Gemma4ForConditionalGeneration: vision and audio towers'
    # parameters get the same recipe, in named_parameters order.)
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    g = torch.Generator().manual_seed(seed)
    embed = model.get_input_embeddings().weight
    final_norm = getattr(model.model, "language_model", model.model).norm.weight
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() >= 2:
                std = spec["embed_std"] if p is embed and spec["embed_std"] else init_std
                for part, part_std in (spec.get("audio_std") or {}).items():
                    if ".audio_tower." in n and n.endswith(f".{part}.linear.weight"):
                        std = part_std
                p.copy_(torch.randn(p.shape, generator=g) * std)
            else:
                # norm weights: Gemma-3 style norms store w for a (1 + w) scale (default 0), the others
                # store the scale itself (default 1). Perturb around the default either way.
                zero_centred = bool((p == 0).all())
                p.add_(torch.randn(p.shape, generator=g) * NORM_STD)
                if p is final_norm and spec["final_norm_scale"] != 1.0:
                    k = spec["final_norm_scale"]
                    p.copy_((1 + p) * k - 1 if zero_centred else p * k)
        # Gemma-4 scales each layer's output by a stored scalar (a persistent buffer, 1.0 when
        # fresh): give each layer its own value so that ignoring it is visible.
        for _, m in model.named_modules():
            if isinstance(getattr(m, "layer_scalar", None), torch.Tensor):
                m.layer_scalar.copy_(0.75 + 0.5 * torch.rand(m.layer_scalar.shape, generator=g))
        if spec["head_perm"]:
            # An untied LM head that leans on a fixed random permutation of the embedding rows:
            # next-token logits get a clear winner (wide top1-top2 margins, even under a small
            # logit softcap) without the tied-head habit of repeating the input token.
            assert not spec["tie"]
            a, rest = spec["head_perm"]
            perm = torch.randperm(VOCAB, generator=g)
            model.lm_head.weight.mul_(rest).add_(a * embed[perm])
    return model


def save_hf(model, name, hf_dir, tokenizer_dir):
    os.makedirs(hf_dir, exist_ok=True)
    model.save_pretrained(hf_dir, safe_serialization=True)
    for f in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(tokenizer_dir, f), os.path.join(hf_dir, f))
    keep = {"config.json", "generation_config.json", "model.safetensors", *TOKENIZER_FILES}
    extra = sorted(set(os.listdir(hf_dir)) - keep)
    if extra:
        raise SystemExit(f"{name}: unexpected files from save_pretrained: {extra}")
    normalize_modes(hf_dir)


def design_gate(label, what, logits, tokens):
    """The goldens' design rule, shared by the text and multimodal checks: log the run, then refuse a
    golden that stops at EOS or whose smallest top1-top2 margin (over [steps, vocab] logits) is a near-tie."""
    top2 = logits.topk(2, dim=-1).values
    margins = top2[:, 0] - top2[:, 1]
    log(f"  design check {label}: {what}, min top1-top2 margin {float(margins.min()):.4f} "
        f"(step {int(margins.argmin())}), |logit| <= {float(logits.abs().max()):.2f}, "
        f"{len(set(tokens))} distinct of {len(tokens)} tokens {tokens}")
    if len(tokens) < GEN_TOKENS or EOS_ID in tokens:
        raise SystemExit(f"{label}: generation hit EOS: {tokens}")
    if float(margins.min()) < MIN_MARGIN:
        raise SystemExit(f"{label}: golden margin {float(margins.min()):.4f} < {MIN_MARGIN}")
    return margins


def check_design(name, model, tok_dir):
    """Greedy HF run on PROMPTS[name]: the goldens must be far from ties and not stop at EOS."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    ids = tok(PROMPTS[name], return_tensors="pt").input_ids
    with torch.inference_mode():
        out = model.generate(ids, do_sample=False, num_beams=1, max_new_tokens=GEN_TOKENS,
                             output_logits=True, return_dict_in_generate=True,
                             eos_token_id=EOS_ID, pad_token_id=PAD_ID)
    logits = torch.stack([lg[0] for lg in out.logits])  # step 0 = prefill's last position
    tokens = out.sequences[0, ids.shape[1]:].tolist()
    design_gate(name, f"prompt {ids.shape[1]} tokens", logits, tokens)


def build_hf(name, hf_dir, tok_dir):
    """The seeded HF reference directory of text fixture `name`, design-checked (its creation)."""
    model = make_model(name)
    save_hf(model, name, hf_dir, tok_dir)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"{name}: {model.config.model_type}, {n_params} params")
    check_design(name, model, tok_dir)


def same_tree(a, b):
    """Relative paths whose bytes differ between directories a and b (or that only one has)."""
    def files(root):
        return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}

    fa, fb = files(a), files(b)
    diff = sorted(fa ^ fb)
    for f in sorted(fa & fb):
        if sha256_file(os.path.join(a, f)) != sha256_file(os.path.join(b, f)):
            diff.append(f)
    return diff


def build_model(name, out_root):
    tok_dir = os.path.join(out_root, "tokenizer")
    final = os.path.join(out_root, name)
    stage = os.path.join(out_root, f".stage-{name}")
    shutil.rmtree(stage, ignore_errors=True)
    build_hf(name, os.path.join(stage, "hf"), tok_dir)
    for flavour, ep in ONNX_FLAVOURS.items():
        mobius_build(stage, "hf", f"onnx/{flavour}", ep)
        if ep not in SHARED_EP:
            for dtype in MOBIUS_DTYPES:
                mobius_build(stage, "hf", f"onnx/{ep}-{dtype}", ep, dtype=dtype)
        quantize_int4(os.path.join(stage, "onnx", flavour), os.path.join(stage, "onnx", f"{ep}-int4"),
                      fold_head=name in INT4_FOLD_HEAD)
    # The dtype builds of a SHARED_EP flavour: built (to check), compared, not stored.
    for ep, by in SHARED_EP.items():
        for dtype in MOBIUS_DTYPES:
            rel = f"onnx/.check-{ep}-{dtype}"
            mobius_build(stage, "hf", rel, ep, dtype=dtype)
            stored = os.path.join(stage, "onnx", f"{by}-{dtype}")
            diff = same_tree(os.path.join(stage, rel), stored)
            if diff:
                raise SystemExit(
                    f"{name}: mobius --ep {ep} --dtype {dtype} no longer builds the same bytes as --ep {by} "
                    f"(differs: {diff}): {ep}-{dtype} cannot be served by {by}-{dtype} any more; store both "
                    f"(drop '{ep}' from SHARED_EP in fixtures.py) and point the cases back at {ep}-{dtype}")
            shutil.rmtree(os.path.join(stage, rel))
            log(f"  {ep}-{dtype} == {by}-{dtype} byte for byte (not stored)")
    check_derivable(name, stage)
    shutil.rmtree(final, ignore_errors=True)
    os.rename(stage, final)


# --------------------------------------------------------------------------------------------
# multimodal (gemma4-mm-tiny)


def media_path(out_root, kind):
    p = os.path.join(out_root, MEDIA_DIR, MEDIA[kind])
    if not os.path.isfile(p):
        raise SystemExit(f"{MM_NAME} needs the real {kind} {p} (committed under fixtures/{MEDIA_DIR}/; "
                         f"nothing is downloaded)")
    return p


def make_processor(tokenizer):
    """The real Gemma4Processor around `tokenizer`. Save it before its first call: calling it turns on
    padding in the tokenizer backend, which save_pretrained then writes into tokenizer.json, and the
    processor reloaded from that passes max_length=None to the audio feature extractor (which then
    refuses to truncate)."""
    from transformers import Gemma4AudioFeatureExtractor, Gemma4ImageProcessor, Gemma4Processor, Gemma4VideoProcessor

    return Gemma4Processor(
        feature_extractor=Gemma4AudioFeatureExtractor(),  # 128 mel bins, 16 kHz, 20 ms / 10 ms (defaults)
        image_processor=Gemma4ImageProcessor(max_soft_tokens=MM_IMAGE_SOFT_TOKENS),
        video_processor=Gemma4VideoProcessor(max_soft_tokens=MM_IMAGE_SOFT_TOKENS),
        tokenizer=tokenizer,
        chat_template=MM_CHAT_TEMPLATE,
        image_seq_length=MM_IMAGE_SOFT_TOKENS,
    )


def mm_encode(processor, out_root, modality):
    """The processor's inputs for MM_PROMPTS[modality] on the real media (as goldens.py builds them)."""
    kinds, text = MM_PROMPTS[modality]
    images = [hf_run.load_image(media_path(out_root, "image"))] if "image" in kinds else []
    sr = processor.feature_extractor.sampling_rate
    audio = [hf_run.load_audio(media_path(out_root, "audio"), sr)] if "audio" in kinds else []
    return hf_run.mm_encode(processor, text, images, audio)


def clippable_linears(model):
    from transformers.models.gemma4.modeling_gemma4 import Gemma4ClippableLinear

    clips = {n: m for n, m in model.named_modules() if isinstance(m, Gemma4ClippableLinear)}
    if not clips or not all(m.use_clipped_linears for m in clips.values()):
        raise SystemExit("expected Gemma4ClippableLinear layers with use_clipped_linears in both towers")
    return clips


def encoder_features(model, enc):
    """(image features, audio features) of HF for a processed prompt (both present in `enc`)."""
    with torch.no_grad():
        img = model.model.get_image_features(enc["pixel_values"], enc["image_position_ids"]).pooler_output
        o = model.model.get_audio_features(enc["input_features"], enc["input_features_mask"])
    return img, o.pooler_output[o.attention_mask]


def calibrate_clamps(model, enc):
    """Give every ClippableLinear finite input/output bounds at CLIP_PERCENTILES of what it sees on
    `enc` (image+audio), in forward order: each clamp is calibrated with every upstream clamp already
    on (calibrating all of them from one unclamped pass leaves some clipping nothing). Vision
    padding patches do not count."""
    clips = clippable_linears(model)
    valid = ~(enc["image_position_ids"][0] == -1).all(-1)
    qs = list(CLIP_PERCENTILES)
    done = {}

    def pct(n, x, side):
        if ".vision_tower." in n:
            x = x[:, valid]
        x = x.detach().double().reshape(-1).numpy()
        # Leave out the point masses an upstream clamp leaves at the extremes (e.g. the audio FFN's
        # silu(clamped ffw_layer_1) has ~5% of its values at its maximum): otherwise the percentile
        # lands on them and this clamp clips nothing.
        inner = x[(x > x.min()) & (x < x.max())]
        lo, hi = np.percentile(inner, qs)
        if side == "input":
            # Input clamps clip the top only (their lower bound is the smallest value seen): in the
            # audio FFN (clamp -> silu -> clamp) a two-sided input clamp after the monotone part of
            # silu makes the upstream output clamp redundant; this way the output clamp keeps the
            # low side (where silu is not monotone) and both Clip nodes matter.
            lo = x.min()
        return float(lo), float(hi)

    def pre(n):
        def hook(mod, args):
            if n not in done:
                lo, hi = pct(n, args[0], "input")
                mod.input_min.fill_(lo)
                mod.input_max.fill_(hi)
                done[n] = 1
        return hook

    def post(n):
        def hook(mod, args, output):
            if done[n] == 1:  # the first call ran with +-inf output bounds
                lo, hi = pct(n, output, "output")
                mod.output_min.fill_(lo)
                mod.output_max.fill_(hi)
                done[n] = 2
                return torch.clamp(output, mod.output_min, mod.output_max)
        return hook

    hooks = [h for n, m in clips.items() for h in (m.register_forward_pre_hook(pre(n)), m.register_forward_hook(post(n)))]
    try:
        encoder_features(model, enc)
    finally:
        for h in hooks:
            h.remove()
    if sorted(done) != sorted(clips) or set(done.values()) != {2}:
        raise SystemExit(f"clamp calibration reached {len(done)} of {len(clips)} clippable linears")
    for m in clips.values():
        bounds = [float(getattr(m, k)) for k in ("input_min", "input_max", "output_min", "output_max")]
        assert all(np.isfinite(bounds)) and bounds[0] < bounds[1] and bounds[2] < bounds[3], bounds
    return clips


def clamp_bounds(clips):
    """{module name: {field: float}} of every ClippableLinear's four bounds (float32 values, as float)."""
    return {n: {k: float(getattr(m, k)) for k in CLAMP_FIELDS} for n, m in sorted(clips.items())}


def write_clamps(path, clips):
    """The calibrated bounds as committed data: hex floats (exact for every float32), sorted, one file."""
    doc = {"format": CLAMPS_FORMAT,
           "how": "calibrate_clamps in xtask/reference/fixtures.py (`cargo xtask fixtures --only gemma4-mm-tiny "
                  "--recalibrate-clamps`): CLIP_PERCENTILES of what each ClippableLinear sees on the image+audio "
                  "design prompt, in forward order",
           "percentiles": list(CLIP_PERCENTILES),
           "bounds": {n: {k: v.hex() for k, v in b.items()} for n, b in clamp_bounds(clips).items()}}
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def load_clamps(model, path):
    """Set every ClippableLinear's bounds from the committed `path` (write_clamps' format): no forward pass decides
    a weight. Every module of the model must be there, and nothing else."""
    clips = clippable_linears(model)
    if not os.path.isfile(path):
        raise SystemExit(f"{path}: missing; the clamp bounds are committed data (recreate them with "
                         f"`cargo xtask fixtures --only {MM_NAME} --recalibrate-clamps`)")
    with open(path) as fh:
        try:
            doc = json.load(fh)
        except json.JSONDecodeError as e:
            raise SystemExit(f"{path}: not JSON: {e}")
    if not isinstance(doc, dict) or doc.get("format") != CLAMPS_FORMAT:
        raise SystemExit(f"{path}: field `format` is {doc.get('format') if isinstance(doc, dict) else doc!r}, "
                         f"expected {CLAMPS_FORMAT!r}")
    bounds = doc.get("bounds")
    if not isinstance(bounds, dict):
        raise SystemExit(f"{path}: field `bounds` is missing or not an object")
    if sorted(bounds) != sorted(clips):
        extra, missing = sorted(set(bounds) - set(clips)), sorted(set(clips) - set(bounds))
        raise SystemExit(f"{path}: field `bounds` does not name the model's clippable linears (not in the model: "
                         f"{extra}; missing: {missing})")
    with torch.no_grad():
        for n, m in clips.items():
            b = bounds[n]
            if not isinstance(b, dict) or sorted(b) != sorted(CLAMP_FIELDS):
                raise SystemExit(f"{path}: field `bounds.{n}` must hold exactly {list(CLAMP_FIELDS)}")
            for k in CLAMP_FIELDS:
                try:
                    v = float.fromhex(b[k]) if isinstance(b[k], str) else None
                except ValueError:
                    v = None
                if v is None or not np.isfinite(v) or float(np.float32(v)) != v:
                    raise SystemExit(f"{path}: field `bounds.{n}.{k}` is {b[k]!r}, expected a finite float32 "
                                     f"as a hex float")
                getattr(m, k).fill_(v)
            if not (float(m.input_min) < float(m.input_max) and float(m.output_min) < float(m.output_max)):
                raise SystemExit(f"{path}: field `bounds.{n}`: each min must be under its max")
    return clips


def check_clamps_bite(model, enc, clips):
    """Every clamp matters: switching any one of them off (the input or the output clamp of one
    ClippableLinear, i.e. one Clip node of the ONNX encoders) moves its tower's features."""
    base = encoder_features(model, enc)
    moves = {}
    for n, m in clips.items():
        for side in ("input", "output"):
            lo, hi = getattr(m, f"{side}_min"), getattr(m, f"{side}_max")
            saved = lo.clone(), hi.clone()
            lo.fill_(-float("inf"))
            hi.fill_(float("inf"))
            try:
                alt = encoder_features(model, enc)
            finally:
                lo.copy_(saved[0])
                hi.copy_(saved[1])
            tower = 0 if ".vision_tower." in n else 1
            moves[f"{n}.{side}"] = float((alt[tower] - base[tower]).abs().max())
    weakest = min(moves, key=moves.get)
    log(f"  clamps: {len(moves)} in {len(clips)} clippable linears ({sum('.vision_tower.' in n for n in clips)} "
        f"vision); switching one off moves its tower's features by {min(moves.values()):.3g} ({weakest}) "
        f".. {max(moves.values()):.3g}")
    if moves[weakest] < MIN_CLAMP_MOVE:
        raise SystemExit(f"clamp {weakest} barely bites: {moves[weakest]:.3g} < {MIN_CLAMP_MOVE}")
    return moves


def check_design_mm(name, hf_dir, out_root):
    """HF greedy runs of the saved fixture (model + processor) on the three design prompts: every
    golden far from ties, no EOS or other special token, no collapse into one repeated token."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(hf_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    worst = None
    for modality in MM_PROMPTS:
        enc = mm_encode(processor, out_root, modality)
        prefill, generated, steps = hf_run.greedy(model, enc, GEN_TOKENS, [EOS_ID], PAD_ID)
        tokens = generated.tolist()
        ids = enc["input_ids"][0].tolist()
        margins = design_gate(f"{name} {modality}", f"prompt {len(ids)} tokens ({ids.count(MM_TOKEN_IDS['image_token_id'])} "
                              f"image, {ids.count(MM_TOKEN_IDS['audio_token_id'])} audio)", steps, tokens)
        if len(set(tokens)) < GEN_TOKENS // 2:
            raise SystemExit(f"{name} {modality}: tokens collapse: {tokens}")
        # A generated media placeholder (or turn marker) would be fed back as input: HF embeds an
        # image / audio placeholder without features as <pad>, mobius' embedding model as zeros.
        special = [t for t in tokens if t < len(MM_SPECIAL_TOKENS)]
        if special:
            raise SystemExit(f"{name} {modality}: generates special tokens {special}: {tokens}")
        worst = min(worst or 1e9, float(margins.min()))
    return worst


def build_mm_hf(name, hf_dir, out_root, clamps, recalibrate=False):
    """The seeded HF reference directory of the multimodal fixture (model + processor), its clamp bounds read from
    the committed `clamps` file, clamp- and design-checked (its creation); recalibrate: calibrate them on the media
    instead and write them to `clamps`."""
    os.makedirs(hf_dir)
    with tempfile.TemporaryDirectory(prefix="mm-tokenizer-") as tmp:
        tokenizer = build_tokenizer(tmp, MM_SPECIAL_TOKENS, MM_EXTRA_SPECIAL_TOKENS)
    make_processor(tokenizer).save_pretrained(hf_dir)
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(hf_dir)
    model = make_model(name)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"{name}: {model.config.model_type}, {n_params} params")
    if recalibrate:
        enc = mm_encode(processor, out_root, "image+audio")
        clips = calibrate_clamps(model, enc)
        write_clamps(clamps, clips)
        log(f"  clamps: recalibrated, written to {clamps}")
    else:
        clips = load_clamps(model, clamps)
    check_clamps_bite(model, mm_encode(processor, out_root, "image+audio"), clips)
    model.save_pretrained(hf_dir, safe_serialization=True)
    keep = {"config.json", "generation_config.json", "model.safetensors", *TOKENIZER_FILES,
            "processor_config.json", "chat_template.jinja"}
    if set(os.listdir(hf_dir)) != keep:
        raise SystemExit(f"{name}: unexpected files from save_pretrained: {sorted(os.listdir(hf_dir))}")
    normalize_modes(hf_dir)
    check_design_mm(name, hf_dir, out_root)


def build_mm_model(name, out_root, recalibrate=False):
    final = os.path.join(out_root, name)
    stage = os.path.join(out_root, f".stage-{name}")
    shutil.rmtree(stage, ignore_errors=True)
    os.makedirs(stage)
    hf_dir = os.path.join(stage, "hf")
    clamps = os.path.join(stage, CLAMPS_FILE)
    if not recalibrate:
        shutil.copyfile(os.path.join(final, CLAMPS_FILE), clamps)
    build_mm_hf(name, hf_dir, out_root, clamps, recalibrate=recalibrate)
    with tempfile.TemporaryDirectory(prefix="mm-mobius-") as tmp:
        mobius_source(hf_dir, os.path.join(tmp, "hf"))  # see MOBIUS_WORKAROUNDS
        for flavour, ep in MM_FLAVOURS.items():
            mobius_build(tmp, "hf", f"onnx/{flavour}", ep, keep_all=True)
            complete_mm_package(hf_dir, os.path.join(tmp, "onnx", flavour))  # see MOBIUS_WORKAROUNDS
        shutil.move(os.path.join(tmp, "onnx"), os.path.join(stage, "onnx"))
    check_derivable(name, stage, renames(name))
    shutil.rmtree(final, ignore_errors=True)
    os.rename(stage, final)


# The files of hf/ a multimodal package must carry for onnxruntime-genai's tokenizer and processor.
MM_GENAI_FILES = ("tokenizer.json", "tokenizer_config.json")


def complete_mm_package(hf_dir, pkg_dir):
    """The multimodal package as a user runs it in onnxruntime-genai (MOBIUS_WORKAROUNDS): model.type
    gemma4 (mobius writes its text decoder's gemma4_text) and the tokenizer files genai's processor opens."""
    path = os.path.join(pkg_dir, "genai_config.json")
    with open(path) as fh:
        text = fh.read()
    old, new = '"type": "gemma4_text"', '"type": "gemma4"'
    if text.count(old) != 1:
        raise SystemExit(f"{path}: expected one {old} from mobius-onnx 0.1.0, found {text.count(old)}")
    with open(path, "w") as fh:
        fh.write(text.replace(old, new))
    for f in MM_GENAI_FILES:
        shutil.copyfile(os.path.join(hf_dir, f), os.path.join(pkg_dir, f))
    normalize_modes(pkg_dir)


# --------------------------------------------------------------------------------------------
# manifest and the derived HF weights


def read_manifest(out_root):
    path = os.path.join(out_root, "MANIFEST.json")
    if not os.path.isfile(path):
        return None
    with open(path) as fh:
        return json.load(fh)


def aliases():
    """Packages that are not stored because another one has the same bytes (SHARED_EP)."""
    return {f"{m}/onnx/{ep}-{dt}": f"{m}/onnx/{by}-{dt}"
            for m in MODELS for ep, by in SHARED_EP.items() for dt in MOBIUS_DTYPES}


def derive_hf(name, out_root, stage):
    """<name>/hf/ into `stage` from committed data alone: its committed files, the text fixtures' tokenizer files
    copied from tokenizer/, and model.safetensors read back from the committed f32 package. No seed is drawn and
    no forward pass runs, so every machine derives the same bytes."""
    final = os.path.join(out_root, name, "hf")
    derived = {os.path.relpath(f, "hf") for f in derived_files(name)}
    os.makedirs(stage)
    for f in sorted(os.listdir(final)) if os.path.isdir(final) else []:
        if f not in derived and os.path.isfile(os.path.join(final, f)):
            shutil.copyfile(os.path.join(final, f), os.path.join(stage, f))
    if name in MODELS:
        for f in TOKENIZER_FILES:
            shutil.copyfile(os.path.join(out_root, "tokenizer", f), os.path.join(stage, f))
    read_back(os.path.join(out_root, name), stage, os.path.join(stage, "model.safetensors"), renames(name))
    normalize_modes(stage)


def renames(name):
    """How fixture `name`'s f32 package names the tensors its HF model names otherwise (weights.py)."""
    return MM_RENAMES if name in MM_MODELS else WHISPER_RENAMES if name in SPEECH_MODELS else ()


def rebuild_hf(out_root, names):
    """--hf-only: rebuild <name>/hf/ of each of `names` (no design checks, no ONNX) into a stage
    directory, check every file against MANIFEST.json and only then put it in place."""
    manifest = read_manifest(out_root)
    if manifest is None:
        raise SystemExit(f"--hf-only verifies against {out_root}/MANIFEST.json, which is missing")
    for name in names:
        t0 = time.time()
        prefix = f"{name}/hf/"
        want = {k[len(prefix):]: v for k, v in manifest["sha256"].items() if k.startswith(prefix)}
        if not want:
            raise SystemExit(f"MANIFEST.json records no {prefix} files: build {name} in full first")
        stage = os.path.join(out_root, f".hf-{name}")
        shutil.rmtree(stage, ignore_errors=True)
        try:
            derive_hf(name, out_root, stage)
            got = {os.path.relpath(os.path.join(d, f), stage): sha256_file(os.path.join(d, f))
                   for d, _, fs in os.walk(stage) for f in fs}
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        bad = [f"{prefix}{f}: sha256 {got.get(f, 'missing')} != MANIFEST {want.get(f, 'not recorded')}"
               for f in sorted(set(want) | set(got)) if got.get(f) != want.get(f)]
        if bad:
            shutil.rmtree(stage, ignore_errors=True)
            weights = any(b.startswith(tuple(f"{name}/{w}" for w in DERIVED_WEIGHTS)) for b in bad)
            what = (f"the reference weights read back from {name}/{WEIGHTS_PACKAGE} are not the recorded ones" if weights
                    else "the reference directory no longer reproduces")
            raise SystemExit(
                f"{what}: {'; '.join(bad)}. The weights are a pure function of the committed package (weights.py); "
                f"a mismatch means the package, the committed hf/ files or MANIFEST.json changed without the others: "
                f"restore them (git checkout), or rebuild the fixture and its goldens")
        final = os.path.join(out_root, name, "hf")
        os.makedirs(os.path.dirname(final), exist_ok=True)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(stage, final)
        log(f"{name}: hf/ rebuilt, {len(got)} files match MANIFEST.json in {time.time() - t0:.1f}s")


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
        "models": {**{n: {**{k: v for k, v in {**MODEL_DEFAULTS, **s}.items() if k != "config"},
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
                   **{n: whisper_fixture.manifest_entry() for n in SPEECH_MODELS}},
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="fixtures directory (created if missing)")
    names = ["tokenizer", *MODELS, *MM_MODELS, *SPEECH_MODELS]
    ap.add_argument("--only", nargs="+", choices=names, metavar="NAME", help=f"build only these ({', '.join(names)})")
    ap.add_argument("--hf-only", action="store_true",
                    help="rebuild only the models' hf/ directories (the derived weights and tokenizer copies) "
                         "and verify them against MANIFEST.json")
    ap.add_argument("--recalibrate-clamps", action="store_true",
                    help=f"calibrate {MM_NAME}'s clamp bounds on the media again (forward passes: the values depend on "
                         f"the CPU) and commit them ({MM_NAME}/{CLAMPS_FILE}); a full build only, then regenerate the "
                         f"goldens")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (default 1); a derivation gives the same bytes with any number")
    args = ap.parse_args(argv)
    if args.threads < 1:
        raise SystemExit(f"--threads {args.threads}: expected 1 or more")
    if args.recalibrate_clamps and (args.hf_only or MM_NAME not in (args.only or [MM_NAME])):
        raise SystemExit(f"--recalibrate-clamps rebuilds {MM_NAME} in full: not with --hf-only, and --only must name it")
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    sel = set(args.only or names)
    t0 = time.time()
    tok_dir = os.path.join(out, "tokenizer")
    if args.hf_only:
        if "tokenizer" in sel and args.only:
            raise SystemExit("--hf-only rebuilds model hf/ directories only (not the tokenizer)")
        if not os.path.isfile(os.path.join(tok_dir, "tokenizer.json")):
            raise SystemExit(f"--hf-only needs the committed {tok_dir}")
        rebuild_hf(out, [n for n in (*MODELS, *MM_MODELS, *SPEECH_MODELS) if n in sel])
        log(f"done in {time.time() - t0:.1f}s")
        return
    if "tokenizer" in sel or not os.path.isfile(os.path.join(tok_dir, "tokenizer.json")):
        shutil.rmtree(tok_dir, ignore_errors=True)
        build_tokenizer(tok_dir)
    for name in MODELS:
        if name in sel:
            build_model(name, out)
    for name in MM_MODELS:
        if name in sel:
            build_mm_model(name, out, recalibrate=args.recalibrate_clamps)
    for name in SPEECH_MODELS:
        if name in sel:
            whisper_fixture.build(name, out)
    # The models not rebuilt keep their recorded weights: get back any that this checkout lacks
    # (derived, not committed) so that MANIFEST.json still records them.
    lacking = [n for n in (*MODELS, *MM_MODELS, *SPEECH_MODELS) if n not in sel and os.path.isdir(os.path.join(out, n, "onnx"))
               and not all(os.path.isfile(os.path.join(out, n, w)) for w in derived_files(n))]
    if lacking:
        rebuild_hf(out, lacking)
    write_manifest(out)
    log(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
