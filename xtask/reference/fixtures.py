#!/usr/bin/env python3
"""Build the tiny, offline, deterministic fixtures of the conformance suite.

    python fixtures.py --out <repo>/fixtures [--only NAME ...]

NAME is one of: tokenizer, qwen3-tiny, llama-tiny, gemma3-tiny, gemma4-tiny,
qwen3-tiny/broken (the deliberately broken kv-swap export).

Layout written under --out:

    tokenizer/                      512-token byte-level BPE (ids 0..3 = <pad> <eos> <bos> <unk>)
    <model>/hf/                     seeded random-weight HF causal LM, fp32 safetensors + tokenizer
    <model>/onnx/default-f32/       mobius build --runtime ort-genai --ep default
    <model>/onnx/cpu-f32/           mobius build --runtime ort-genai --ep cpu (GroupQueryAttention)
    qwen3-tiny/broken/kv-swap-f32/  qwen3-tiny with layer 0's two K heads swapped, built like cpu-f32
    MANIFEST.json                   versions, recipe and sha256 of every file

Nothing is downloaded: the tokenizer trains on the Python standard library's own sources, the
models are random, and the ONNX packages come from the local mobius builder. Running it twice with
the same interpreter and pinned packages (requirements.txt) gives byte-identical files.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

VOCAB = 512
SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]  # ids 0..3, Gemma order
PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

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

# Per model: config factory, weight seed and scale. Every >=2-d parameter is replaced by
# randn * init_std, every 1-d parameter (norm weights) gets randn * NORM_STD added to its default,
# so that norm weights are not all-ones (a dropped norm weight must be visible). Seeds, init_std and
# the prompts in PROMPTS were chosen so that every golden's top1-top2 logit margin is >= MIN_MARGIN.
NORM_STD = 0.1
MIN_MARGIN = 0.1
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
        query_pre_attn_scalar=64,  # != head_dim, so a wrong attention scale is visible
        final_logit_softcapping=None,
        **COMMON,
    )


def _gemma4(tie):
    return transformers.Gemma4TextConfig(
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


# embed_std: std of the input embedding (the tied LM head of the Gemmas) when it differs from
# init_std; final_norm_scale: multiplies the final norm's effective scale (sets the logit scale).
MODEL_DEFAULTS = dict(tie=False, embed_std=None, final_norm_scale=1.0, head_perm=None)
MODELS = {
    "qwen3-tiny": dict(config=_qwen3, seed=0, init_std=0.1),
    "llama-tiny": dict(config=_llama, seed=0, init_std=0.1),
    "gemma3-tiny": dict(config=_gemma3, seed=0, init_std=0.1),
    "gemma4-tiny": dict(config=_gemma4, seed=0, init_std=0.1),
}

# The prompt each model's goldens are designed for (margins checked against these).
PROMPTS = {
    'qwen3-tiny': 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return',
    'llama-tiny': 'The quick brown fox jumps over the lazy dog. Meanwhile, the weather report for tomorrow says that',
    'gemma3-tiny': 'import os\nimport sys\n\n\ndef main(argv):\n    path = os.path.join(os.getcwd(), argv[1])\n    with open(path, encoding="utf-8") as f:\n        for line in f:\n',
    'gemma4-tiny': 'Question: What is the capital of France?\nAnswer: The capital of France is Paris, a city known for',
}

ONNX_FLAVOURS = {"default-f32": "default", "cpu-f32": "cpu"}
BROKEN = "qwen3-tiny/broken"


def log(msg):
    print(msg, flush=True)


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


def build_tokenizer(out_dir):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(tokenizer_corpus(), trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    for i, t in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(t) == i, (t, tok.token_to_id(t))
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", BOS_ID)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    os.makedirs(out_dir, exist_ok=True)
    fast.save_pretrained(out_dir)
    ids = fast("def f(x):\n    return x").input_ids
    assert ids[0] == BOS_ID, ids
    log(f"tokenizer: vocab {tok.get_vocab_size()}, sample ids {ids}")


# --------------------------------------------------------------------------------------------
# models


def make_model(name, **override):
    """The seeded random-weight model `name` (fp32, eval); `override` replaces MODELS[name] entries."""
    spec = {**MODEL_DEFAULTS, **MODELS[name], **override}
    seed, init_std = spec["seed"], spec["init_std"]
    cfg = spec["config"](spec["tie"])
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    g = torch.Generator().manual_seed(seed)
    embed = model.get_input_embeddings().weight
    final_norm = model.model.norm.weight
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() >= 2:
                std = spec["embed_std"] if p is embed and spec["embed_std"] else init_std
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


def mobius_build(hf_dir, out_dir, ep):
    cmd = [sys.executable, "-m", "mobius", "build", "--config", hf_dir, out_dir,
           "--runtime", "ort-genai", "--ep", ep]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:] + r.stderr[-4000:])
        raise SystemExit(f"mobius build failed ({r.returncode}): {' '.join(cmd)}")
    # Keep what a runtime needs: the graph, its external data, genai_config and tokenizer files.
    keep_prefix = ("model.onnx", "genai_config.json", *TOKENIZER_FILES)
    for f in sorted(os.listdir(out_dir)):
        if not f.startswith(keep_prefix):
            p = os.path.join(out_dir, f)
            log(f"  dropping {p}")
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    log(f"  built {out_dir} (--ep {ep}) in {time.time() - t0:.1f}s")


def build_model(name, out_root):
    tok_dir = os.path.join(out_root, "tokenizer")
    final = os.path.join(out_root, name)
    stage = os.path.join(out_root, f".stage-{name}")
    shutil.rmtree(stage, ignore_errors=True)
    hf_dir = os.path.join(stage, "hf")
    model = make_model(name)
    save_hf(model, name, hf_dir, tok_dir)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"{name}: {model.config.model_type}, {n_params} params")
    for flavour, ep in ONNX_FLAVOURS.items():
        mobius_build(hf_dir, os.path.join(stage, "onnx", flavour), ep)
    # Keep an existing broken/ subtree unless it is rebuilt too.
    old_broken = os.path.join(final, "broken")
    if os.path.isdir(old_broken):
        shutil.move(old_broken, os.path.join(stage, "broken"))
    shutil.rmtree(final, ignore_errors=True)
    os.rename(stage, final)


def build_broken(out_root):
    """qwen3-tiny's weights with layer 0's two K heads swapped (V untouched), built --ep cpu."""
    from safetensors.torch import load_file, save_file

    src = os.path.join(out_root, "qwen3-tiny", "hf")
    if not os.path.isdir(src):
        raise SystemExit(f"{BROKEN} needs {src}: build qwen3-tiny first")
    final = os.path.join(out_root, "qwen3-tiny", "broken", "kv-swap-f32")
    with tempfile.TemporaryDirectory(prefix="kv-swap-") as tmp:
        hf = os.path.join(tmp, "hf")
        shutil.copytree(src, hf)
        path = os.path.join(hf, "model.safetensors")
        sd = load_file(path)
        key = "model.layers.0.self_attn.k_proj.weight"
        w = sd[key]
        hd = COMMON["head_dim"]
        assert w.shape[0] == 2 * hd, w.shape  # two KV heads
        sd[key] = torch.cat([w[hd:], w[:hd]], dim=0).contiguous()
        save_file(sd, path, metadata={"format": "pt"})
        stage = os.path.join(tmp, "onnx")
        mobius_build(hf, stage, "cpu")
        shutil.rmtree(final, ignore_errors=True)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        shutil.copytree(stage, final)
    log(f"{BROKEN}: layer 0 k_proj heads swapped -> {final}")


# --------------------------------------------------------------------------------------------
# manifest


def write_manifest(out_root):
    files = {}
    for dirpath, dirnames, filenames in os.walk(out_root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in sorted(filenames):
            if f == "MANIFEST.json" and dirpath == out_root:
                continue
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                files[os.path.relpath(p, out_root)] = hashlib.sha256(fh.read()).hexdigest()
    import importlib.metadata as md

    manifest = {
        "generator": "xtask/reference/fixtures.py",
        "python": platform.python_version(),
        "packages": {p: md.version(p) for p in
                     ("torch", "transformers", "tokenizers", "mobius-onnx", "onnx", "safetensors")},
        "models": {n: {"seed": s["seed"], "init_std": s["init_std"], "norm_std": NORM_STD,
                       "model_type": s["config"](s.get("tie", False)).model_type, "prompt": PROMPTS[n]}
                   for n, s in MODELS.items()},
        "broken": {"qwen3-tiny/broken/kv-swap-f32":
                   "qwen3-tiny with model.layers.0.self_attn.k_proj rows of KV head 0 and 1 swapped; --ep cpu"},
        "sha256": files,
    }
    with open(os.path.join(out_root, "MANIFEST.json"), "w") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
        fh.write("\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="fixtures directory (created if missing)")
    names = ["tokenizer", *MODELS, BROKEN]
    ap.add_argument("--only", nargs="+", choices=names, metavar="NAME",
                    help=f"build only these ({', '.join(names)})")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    sel = args.only or names
    t0 = time.time()
    tok_dir = os.path.join(out, "tokenizer")
    if "tokenizer" in sel or not os.path.isfile(os.path.join(tok_dir, "tokenizer.json")):
        shutil.rmtree(tok_dir, ignore_errors=True)
        build_tokenizer(tok_dir)
    for name in MODELS:
        if name in sel:
            build_model(name, out)
    if BROKEN in sel:
        build_broken(out)
    write_manifest(out)
    log(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
