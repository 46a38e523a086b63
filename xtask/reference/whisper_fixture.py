"""The tiny seeded Whisper fixture (speech-to-text), built by fixtures.py (`cargo xtask fixtures --only whisper-tiny`)
with the build steps of fixture_build.py.

    whisper-tiny/hf/                seeded WhisperForConditionalGeneration (d_model 32, 2+2 layers), fp32, with
                                    the shared BPE of tokenizer/ plus Whisper's special tokens (ids 512..515),
                                    a 4-second WhisperFeatureExtractor (400 frames -> 200 encoder positions) and
                                    the generation_config.json whose forced prefix and suppressed ids the
                                    reference's and the suite's greedy decoding both apply
    whisper-tiny/onnx/default-f32/  mobius build --runtime ort-genai --ep default: encoder/ + decoder/ +
                                    genai_config.json

hf/model.safetensors is derived, as every seeded fixture's is: read back from onnx/default-f32 (weights.py,
WHISPER_RENAMES) and checked against MANIFEST.json, never re-seeded. The tokenizer files are committed.

MOBIUS_WORKAROUND: mobius-onnx 0.1.0 maps Whisper's `proj_out.weight` into its decoder only when the head is tied
(WhisperForConditionalGeneration.preprocess_weights); an untied head then fails its build ("'decoder.proj_out.weight'
without weights"). The package is built from a copy of hf/ with that tensor renamed to HEAD_FOR_MOBIUS.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

from .common import log, sha256_file

import torch  # noqa: E402
import transformers  # noqa: E402

from .fixture_build import check_derivable, mobius_build, mobius_source, normalize_modes  # noqa: E402
from .weights import WHISPER_RENAMES  # noqa: E402

NAME = "whisper-tiny"
SEED = 5
INIT_STD = 0.6
# The head is untied: 0.5 x the token table plus 3 x a permuted copy of it. A tied head at this size decodes one
# token over and over (tokens [221, 51 x 15], top-1/top-2 margin 0.020); this one gives 9 distinct tokens of 16, a
# smallest margin of 0.375, and the logits move by 31.6 when the encoder states are zeroed (a probe of 36 designs).
HEAD_SELF = 0.5
HEAD_PERM = 3.0
NORM_STD = 0.1
BASE_VOCAB = 512
SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|transcribe|>", "<|notimestamps|>"]  # ids 512..515
EOT, SOT, TRANSCRIBE, NOTS = range(BASE_VOCAB, BASE_VOCAB + 4)
VOCAB = BASE_VOCAB + len(SPECIALS)
CHUNK_SECONDS = 4
FRAMES = CHUNK_SECONDS * 100
# What greedy decoding never picks: the BPE's own specials and <|startoftranscript|> always, <|endoftext|> at the
# first generated step (Whisper's suppress_tokens / begin_suppress_tokens).
SUPPRESS = [0, 1, 2, 3, SOT, TRANSCRIBE]
BEGIN_SUPPRESS = [EOT]
HEAD_FOR_MOBIUS = "model.decoder.proj_out.weight"


def config():
    return transformers.WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=80, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_source_positions=FRAMES // 2, max_target_positions=64, bos_token_id=EOT, eos_token_id=EOT,
        pad_token_id=EOT, decoder_start_token_id=SOT, suppress_tokens=SUPPRESS, begin_suppress_tokens=BEGIN_SUPPRESS,
        tie_word_embeddings=False)


def make_model():
    torch.manual_seed(SEED)
    model = transformers.WhisperForConditionalGeneration(config()).float().eval()
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("embed_positions.weight") and "encoder" in n:
                continue  # the sinusoidal table HF computes: kept, as Whisper's checkpoints hold it
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * INIT_STD)
            else:
                p.add_(torch.randn(p.shape, generator=g) * NORM_STD)
        embed = model.model.decoder.embed_tokens.weight
        perm = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(SEED + 1))
        model.proj_out.weight.copy_(HEAD_SELF * embed + HEAD_PERM * embed[perm])
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=SOT, eos_token_id=EOT, pad_token_id=EOT, bos_token_id=EOT, suppress_tokens=SUPPRESS,
        begin_suppress_tokens=BEGIN_SUPPRESS, no_timestamps_token_id=NOTS, is_multilingual=False, max_length=64)
    return model


def write_tokenizer(tok_src, hf_dir):
    with open(os.path.join(tok_src, "tokenizer.json")) as fh:
        tj = json.load(fh)
    if len(tj["model"]["vocab"]) != BASE_VOCAB:
        raise SystemExit(f"{tok_src}/tokenizer.json: expected {BASE_VOCAB} tokens")
    for i, t in enumerate(SPECIALS):
        tj["added_tokens"].append({"id": BASE_VOCAB + i, "content": t, "single_word": False, "lstrip": False,
                                   "rstrip": False, "normalized": False, "special": True})
    tj["post_processor"] = None  # Whisper's decoder prefix is the forced ids, not a BOS the tokenizer adds
    with open(os.path.join(hf_dir, "tokenizer.json"), "w") as fh:
        json.dump(tj, fh, indent=1, sort_keys=True)
        fh.write("\n")
    with open(os.path.join(hf_dir, "tokenizer_config.json"), "w") as fh:
        json.dump({"backend": "tokenizers", "tokenizer_class": "TokenizersBackend", "bos_token": SPECIALS[0],
                   "eos_token": SPECIALS[0], "pad_token": SPECIALS[0], "unk_token": "<unk>",
                   "model_max_length": 64}, fh, indent=1, sort_keys=True)
        fh.write("\n")
    fe = transformers.WhisperFeatureExtractor(feature_size=80, sampling_rate=16000, hop_length=160,
                                              chunk_length=CHUNK_SECONDS, n_fft=400)
    fe.save_pretrained(hf_dir)


def manifest_entry():
    """What MANIFEST.json records of the design."""
    c = config()
    return {"model_type": c.model_type, "seed": SEED, "init_std": INIT_STD, "norm_std": NORM_STD,
            "head": f"untied: {HEAD_SELF} x embed_tokens + {HEAD_PERM} x embed_tokens[randperm(seed {SEED + 1})]",
            "d_model": c.d_model, "layers": [c.encoder_layers, c.decoder_layers], "vocab_size": c.vocab_size,
            "feature_window_s": CHUNK_SECONDS, "suppress_tokens": SUPPRESS, "begin_suppress_tokens": BEGIN_SUPPRESS}


def build(name, out_root):
    """Create fixture `name` under out_root: seeded hf/, then mobius' package from it (staged, then renamed)."""
    t0 = time.time()
    final = os.path.join(out_root, name)
    stage = os.path.join(out_root, f".stage-{name}")
    shutil.rmtree(stage, ignore_errors=True)
    hf_dir = os.path.join(stage, "hf")
    os.makedirs(hf_dir)
    model = make_model()
    model.save_pretrained(hf_dir, safe_serialization=True)
    write_tokenizer(os.path.join(out_root, "tokenizer"), hf_dir)
    normalize_modes(hf_dir)
    with tempfile.TemporaryDirectory(prefix="whisper-mobius-") as tmp:
        mobius_source(hf_dir, os.path.join(tmp, "hf"), "proj_out.weight", HEAD_FOR_MOBIUS)  # see MOBIUS_WORKAROUND
        mobius_build(tmp, "hf", "onnx/default-f32", "default", keep_all=True)
        pkg = os.path.join(tmp, "onnx", "default-f32")
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(hf_dir, f), os.path.join(pkg, f))
        normalize_modes(pkg)
        shutil.move(os.path.join(tmp, "onnx"), os.path.join(stage, "onnx"))
    check_derivable(name, stage, WHISPER_RENAMES)
    shutil.rmtree(final, ignore_errors=True)
    os.rename(stage, final)
    for d, _, fs in sorted(os.walk(final)):
        for f in sorted(fs):
            p = os.path.join(d, f)
            log(f"  {os.path.relpath(p, out_root)} {os.path.getsize(p)} {sha256_file(p)[:12]}")
    log(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, done in {time.time() - t0:.1f}s")
