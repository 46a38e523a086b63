"""A GGUF checkpoint to a float32 Hugging Face folder, for the real tier (real.py): transformers' GGUF loader
dequantizes the weights; the tokenizer comes from the GGUF too (Gemma's rebuilt as the byte-fallback BPE it really
is, see gemma_tokenizer); then the folder is checked end to end (check_hf).
"""
from __future__ import annotations

import json
import os

from .common import log


def gguf_tokens(gguf_path):
    from gguf import GGUFReader

    r = GGUFReader(gguf_path)

    def arr(k):
        f = r.fields[k]
        return [f.parts[i] for i in f.data]

    toks = [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.tokens")]
    scores = [float(p[0]) for p in arr("tokenizer.ggml.scores")]
    types = [int(p[0]) for p in arr("tokenizer.ggml.token_type")]
    return toks, scores, types


def gemma_tokenizer(gguf_path, out_dir):
    """Gemma's tokenizer from the GGUF. transformers converts it into a Unigram model that splits words into
    fragments; the real one is a byte-fallback BPE: the GGUF's tokens as vocabulary, merges derived as
    transformers' SentencePieceExtractor derives them (every pair (a, b) whose concatenation is a normal token,
    ordered by that token's score, descending, then by the pair's ids), `<bos>` prepended, spaces as `▁`."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors

    toks, scores, types = gguf_tokens(gguf_path)
    vocab = {t: i for i, t in enumerate(toks)}
    if len(vocab) != len(toks):
        raise SystemExit(f"{gguf_path}: duplicate tokens in tokenizer.ggml.tokens")
    merges = []
    for piece, pid in vocab.items():
        if types[pid] != 1 or len(piece) < 2:  # 1: a normal token
            continue
        for i in range(1, len(piece)):
            a, b = piece[:i], piece[i:]
            if a in vocab and b in vocab:
                merges.append((-scores[pid], vocab[a], vocab[b], a, b))
    merges.sort(key=lambda m: m[:3])
    bpe = models.BPE(vocab=vocab, merges=[(m[3], m[4]) for m in merges], unk_token="<unk>", fuse_unk=True,
                     byte_fallback=True, dropout=None)
    tk = Tokenizer(bpe)
    tk.normalizer = normalizers.Replace(" ", "▁")
    tk.pre_tokenizer = None
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tk.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                      special_tokens=[("<bos>", 2)])
    specials = [t for t, ty in zip(toks, types) if ty == 3]  # 3: control tokens
    from tokenizers import AddedToken

    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tk.save(os.path.join(out_dir, "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
           "pad_token": "<pad>", "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
           "clean_up_tokenization_spaces": False, "model_max_length": 32768}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2, sort_keys=True)
        fh.write("\n")
    return len(merges)


def dequantize(name, model, gguf_path, out_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    d, f = os.path.dirname(gguf_path), os.path.basename(gguf_path)
    m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    n = sum(p.numel() for p in m.parameters())
    log(f"      {name}: {type(m).__name__} ({m.config.model_type}), {n:,} parameters, vocabulary {m.config.vocab_size}")
    m.save_pretrained(out_dir)
    if model["tokenizer"] == "gemma":
        merges = gemma_tokenizer(gguf_path, out_dir)
        log(f"      {name}: byte-fallback BPE tokenizer, {merges:,} merges derived from the GGUF's scores")
    else:
        tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
        tok.save_pretrained(out_dir)
    check_hf(name, model, out_dir)


def check_hf(name, model, hf_dir):
    """The tokenizer gives the known ids, special tokens sit where the model expects them, text round-trips, and
    the fp32 model continues a known prompt as the original does."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
    for text, ids in model["token_checks"]:
        got = tok(text).input_ids
        if got != ids:
            raise SystemExit(f"{name}: tokenizer gives {got} for {text!r}, the model's real tokenization is {ids}")
        log(f"      {name}: tokenizer {text!r} -> {got} (as expected)")
    for t, i in model["special_ids"].items():
        if tok.convert_tokens_to_ids(t) != i:
            raise SystemExit(f"{name}: special token {t} has id {tok.convert_tokens_to_ids(t)}, expected {i}")
    sample = "def main(args):\n    return 42  # ünïcödé 😀 Ελληνικά 日本語\n\tTabs  and  spaces."
    back = tok.decode(tok(sample, add_special_tokens=False).input_ids)
    if back != sample:
        raise SystemExit(f"{name}: tokenizer round trip changed {sample!r} into {back!r}")
    m = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, local_files_only=True).eval()
    prompt, want = model["continuation"]
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False)
    text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    if not text.strip().startswith(want):
        raise SystemExit(f"{name}: the dequantized model continues {prompt!r} with {text!r}, expected {want!r}...")
    # The model's own greedy tokens are its tokenization of the text they spell: re-encoding prompt + continuation
    # must give them back (a Unigram or a wrong merge order segments it otherwise).
    full = out[0].tolist()
    again = tok(prompt + text).input_ids
    if again != full:
        raise SystemExit(f"{name}: {prompt + text!r} re-encodes to {again}, the model generated {full}")
    log(f"      {name}: {prompt!r} -> {text!r}; ids {full} re-encode exactly")
