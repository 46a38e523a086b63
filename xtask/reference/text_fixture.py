"""The text fixtures (qwen3-tiny, llama-tiny, gemma3-tiny, gemma4-tiny), created in full: the seeded HF folder,
design-checked, and its packages: the f32 flavours, mobius' f16 and bf16 builds and the int4 quantizations, staged
and checked (check_derivable) before they replace the fixture.
"""
from __future__ import annotations

import os
import shutil

from .common import log, sha256_file

import torch  # noqa: E402

from .fixture_build import (TOKENIZER_FILES, check_derivable, mobius_build, normalize_modes,  # noqa: E402
                            quantize_int4)
from .fixture_models import EOS_ID, GEN_TOKENS, PAD_ID, PROMPTS, design_gate, make_model  # noqa: E402

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
# The fixtures whose tied LM head mobius builds as MatMul(Transpose(embedding)) and whose int4 packages fold
# it into its own f32 initializer before quantizing (fold_tied_head): the head becomes MatMulNBits and the
# embedding, then read by its Gather only, GatherBlockQuantized. Opt-in per model: arith.py's arith-tiny has
# the same graph but keeps its head and embedding f32 (quantizing its 18-token embedding was measured to cost
# 2 points of accuracy), so quantize_int4's default is not to fold.
INT4_FOLD_HEAD = ("qwen3-tiny",)


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
                    f"(drop '{ep}' from SHARED_EP in text_fixture.py) and point the cases back at {ep}-{dtype}")
            shutil.rmtree(os.path.join(stage, rel))
            log(f"  {ep}-{dtype} == {by}-{dtype} byte for byte (not stored)")
    check_derivable(name, stage)
    shutil.rmtree(final, ignore_errors=True)
    os.rename(stage, final)


# --------------------------------------------------------------------------------------------
# multimodal (gemma4-mm-tiny)
