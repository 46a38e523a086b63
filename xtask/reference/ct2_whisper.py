"""A CTranslate2 Whisper checkpoint (faster-whisper's `model.bin`) back to a float32 Hugging Face folder, for the
real tier (real.py).

CTranslate2 stores a `WhisperSpec` as one binary file: a version, the spec's name and revision, then named tensors
(float16 here) and aliases. Its layout differs from transformers' in three ways, all undone here:
- each self-attention fuses Q, K and V into one `linear_0` (and cross-attention K and V into `linear_1`): split
  along the output rows;
- K's projection has no bias in Whisper, and CTranslate2 pads the fused bias with zeros there: those rows must be
  exactly zero (checked) and are dropped;
- layer norms are `gamma`/`beta`, the positional tables `position_encodings/encodings`.
Every tensor of the file is used exactly once (checked), so a new field in another revision fails the conversion
instead of being dropped. float16 to float32 is exact. Every weight must be finite and of the shape the model's sizes
(read from the embedding, conv1, the first FFN and the positional tables) imply, and a file the layout cannot describe
is refused naming the file, the byte offset and the tensor or alias: never a traceback.
"""
from __future__ import annotations

import json
import math
import os
import re
import struct

import numpy as np

from .common import log

# CTranslate2's binary format: the versions and spec this reader was written for.
BINARY_VERSION = 6
SPEC, SPEC_REVISION = "WhisperSpec", 3
DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


def read_model_bin(path):
    """{name: np.ndarray} (aliases resolved) of a CTranslate2 model.bin. Any file this layout cannot describe ends in
    one SystemExit naming the file, the byte offset and the tensor or alias being read, never a Python traceback."""
    size = os.path.getsize(path)
    at, what = 0, "the header"  # where the field being read starts, and what it belongs to (for errors)

    def fail(msg):
        raise SystemExit(f"{path}: {what} at byte {at}: {msg}")

    def u(fmt, fh, field):
        nonlocal at
        at, n = fh.tell(), struct.calcsize("<" + fmt)
        b = fh.read(n)
        if len(b) != n:
            fail(f"truncated: the {field} needs {n} bytes, {len(b)} are left")
        return struct.unpack("<" + fmt, b)

    def string(fh, field):
        (n,) = u("H", fh, f"{field}'s length")
        b = fh.read(n)
        if len(b) != n:
            fail(f"truncated: the {field} is {n} bytes, {len(b)} are left")
        if n == 0 or b[-1] != 0 or 0 in b[:-1]:
            fail(f"the {field} {b!r} is not one NUL-terminated string")
        try:
            s = b[:-1].decode("utf-8")
        except UnicodeDecodeError as e:
            fail(f"the {field} {b[:-1]!r} is not UTF-8 ({e.reason} at its byte {e.start})")
        if not s:
            fail(f"the {field} is empty")
        return s

    def count(fh, field, least):
        (n,) = u("I", fh, field)
        left = size - fh.tell()
        if n * least > left:
            fail(f"the {field} is {n}, but each takes at least {least} bytes and only {left} bytes follow")
        return n

    tensors = {}
    with open(path, "rb") as fh:
        (version,) = u("I", fh, "binary version")
        spec = string(fh, "spec name")
        (revision,) = u("I", fh, "spec revision")
        if (version, spec, revision) != (BINARY_VERSION, SPEC, SPEC_REVISION):
            raise SystemExit(f"{path}: CTranslate2 binary version {version}, spec {spec} revision {revision}; this "
                             f"converter reads version {BINARY_VERSION}, {SPEC} revision {SPEC_REVISION}")
        what = "the tensor count"
        # A tensor is at least a 1-character name (2 + 2 bytes), a rank, a dtype and a byte count.
        for i in range(count(fh, "tensor count", 10)):
            what = f"tensor #{i}"
            name = string(fh, "name")
            what = f"tensor {name}"
            if name in tensors:
                fail("a second tensor of this name")
            (rank,) = u("B", fh, "rank")
            shape = u(f"{rank}I", fh, f"shape ({rank} dimensions)")
            (dtype,) = u("B", fh, "dtype")
            if dtype not in DTYPES:
                fail(f"CTranslate2 dtype {dtype}, not one of {sorted(DTYPES)}")
            (nbytes,) = u("I", fh, "byte count")
            item = np.dtype(DTYPES[dtype]).itemsize
            if nbytes % item:
                fail(f"{nbytes} bytes is not a whole number of {np.dtype(DTYPES[dtype]).name} values ({item} bytes each)")
            if nbytes // item != math.prod(shape):
                fail(f"{nbytes // item} values for shape {list(shape)} ({math.prod(shape)} values)")
            if nbytes > size - fh.tell():
                fail(f"truncated: the data is {nbytes} bytes, {size - fh.tell()} are left")
            tensors[name] = np.frombuffer(fh.read(nbytes), dtype=DTYPES[dtype]).reshape(shape)
        what = "the alias count"
        for i in range(count(fh, "alias count", 8)):  # two 1-character names
            what = f"alias #{i}"
            alias = string(fh, "alias name")
            what = f"alias {alias}"
            target = string(fh, "target name")
            if alias in tensors:
                fail("the name is already a tensor's or an earlier alias's")
            if target not in tensors:
                fail(f"its target {target} is no tensor of the file")
            tensors[alias] = tensors[target]
        at, what = fh.tell(), "the end of the aliases"
        if fh.read(1):
            fail(f"{size - at} bytes after the aliases")
    return tensors


class Weights:
    """The checkpoint's tensors, each to be taken exactly once; `where` names the file in errors. Every weight taken
    is float, finite and of the shape the caller states; every option a one-value integer."""

    def __init__(self, tensors, where):
        self.tensors, self.where, self.taken = tensors, where, set()

    def fail(self, name, msg):
        raise SystemExit(f"{self.where}: tensor {name}: {msg}")

    def take(self, name):
        if name not in self.tensors:
            raise SystemExit(f"{self.where}: no tensor {name}")
        self.taken.add(name)
        return self.tensors[name]

    def shape(self, name, rank):
        """The shape of a tensor that sets the model's sizes (not taking it): of this rank, no dimension zero."""
        if name not in self.tensors:
            raise SystemExit(f"{self.where}: no tensor {name}")
        shape = self.tensors[name].shape
        if len(shape) != rank or 0 in shape:
            self.fail(name, f"shape {list(shape)}, expected {rank} non-zero dimensions")
        return shape

    def f32(self, name, shape):
        a = self.take(name)
        if a.dtype.kind != "f":
            self.fail(name, f"{a.dtype.name}, expected a float16 or float32 weight (a quantized checkpoint?)")
        if a.shape != tuple(shape):
            self.fail(name, f"shape {list(a.shape)}, the model's sizes imply {list(shape)}")
        a = np.ascontiguousarray(a.astype(np.float32))
        if not np.isfinite(a).all():
            bad = ~np.isfinite(a)
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            self.fail(name, f"{int(bad.sum())} non-finite values (the first, at {list(first)}, is {a[first]})")
        return a

    def scalar(self, name):
        a = self.take(name)
        if a.dtype.kind not in "iu" or a.size != 1:
            self.fail(name, f"{a.dtype.name} of shape {list(a.shape)}, expected one integer")
        return int(a.reshape(-1)[0])

    def left(self):
        return sorted(set(self.tensors) - self.taken)


def layers(tensors, side, where):
    """How many `{side}/layer_<i>/` there are: i must run 0, 1, ... without a gap."""
    seen = {m.group(1) for k in tensors if (m := re.match(rf"{side}/layer_(\d+)/", k))}
    if seen != {str(i) for i in range(len(seen))}:
        got = [f"layer_{i}" for i in sorted(seen, key=lambda i: (len(i), i))]
        raise SystemExit(f"{where}: the {side} layers are {got}, expected layer_0 to layer_{len(seen) - 1}")
    return len(seen)


def sizes(w, n_enc, n_dec):
    """The model's sizes, from the tensors that set them (each then checked where taken): d_model, vocabulary,
    mel bins, FFN width, source and target positions."""
    for side, n in (("encoder", n_enc), ("decoder", n_dec)):
        if n == 0:
            raise SystemExit(f"{w.where}: no {side}/layer_0/ tensors: a Whisper {side} has layers")
    vocab, d = w.shape("decoder/embeddings/weight", 2)
    return dict(d=d, vocab=vocab, mels=w.shape("encoder/conv1/weight", 3)[1],
                ffn=w.shape("encoder/layer_0/ffn/linear_0/weight", 2)[0],
                source=w.shape("encoder/position_encodings/encodings", 2)[0],
                target=w.shape("decoder/position_encodings/encodings", 2)[0])


def state_dict(w, n_enc, n_dec, z):
    sd, d = {}, z["d"]

    def linear(hf, ct, rows, cols):
        cols = cols if isinstance(cols, tuple) else (cols,)
        sd[f"{hf}.weight"], sd[f"{hf}.bias"] = w.f32(f"{ct}/weight", (rows, *cols)), w.f32(f"{ct}/bias", (rows,))

    def norm(hf, ct):
        sd[f"{hf}.weight"], sd[f"{hf}.bias"] = w.f32(f"{ct}/gamma", (d,)), w.f32(f"{ct}/beta", (d,))

    def fused(hf, ct, names):
        n = len(names)
        weights = np.split(w.f32(f"{ct}/weight", (n * d, d)), n)
        biases = np.split(w.f32(f"{ct}/bias", (n * d,)), n)
        for name, wt, b in zip(names, weights, biases):
            sd[f"{hf}.{name}.weight"] = np.ascontiguousarray(wt)
            if name == "k_proj":
                if np.any(b != 0):
                    raise SystemExit(f"{w.where}: {ct}/bias: the K rows are not zero (max |b| {np.abs(b).max()}); Whisper's "
                                     f"K projection has no bias")
            else:
                sd[f"{hf}.{name}.bias"] = np.ascontiguousarray(b)

    linear("model.encoder.conv1", "encoder/conv1", d, (z["mels"], 3))
    linear("model.encoder.conv2", "encoder/conv2", d, (d, 3))
    sd["model.encoder.embed_positions.weight"] = w.f32("encoder/position_encodings/encodings", (z["source"], d))
    def self_attention_and_ffn(hf, ct):
        norm(f"{hf}.self_attn_layer_norm", f"{ct}/self_attention/layer_norm")
        fused(f"{hf}.self_attn", f"{ct}/self_attention/linear_0", ["q_proj", "k_proj", "v_proj"])
        linear(f"{hf}.self_attn.out_proj", f"{ct}/self_attention/linear_1", d, d)
        norm(f"{hf}.final_layer_norm", f"{ct}/ffn/layer_norm")
        linear(f"{hf}.fc1", f"{ct}/ffn/linear_0", z["ffn"], d)
        linear(f"{hf}.fc2", f"{ct}/ffn/linear_1", d, z["ffn"])

    for i in range(n_enc):
        self_attention_and_ffn(f"model.encoder.layers.{i}", f"encoder/layer_{i}")
    norm("model.encoder.layer_norm", "encoder/layer_norm")
    sd["model.decoder.embed_tokens.weight"] = w.f32("decoder/embeddings/weight", (z["vocab"], d))
    sd["model.decoder.embed_positions.weight"] = w.f32("decoder/position_encodings/encodings", (z["target"], d))
    for i in range(n_dec):
        hf, ct = f"model.decoder.layers.{i}", f"decoder/layer_{i}"
        self_attention_and_ffn(hf, ct)
        # Cross-attention: Q from the decoder, K and V (fused) from the encoder's states.
        norm(f"{hf}.encoder_attn_layer_norm", f"{ct}/attention/layer_norm")
        linear(f"{hf}.encoder_attn.q_proj", f"{ct}/attention/linear_0", d, d)
        fused(f"{hf}.encoder_attn", f"{ct}/attention/linear_1", ["k_proj", "v_proj"])
        linear(f"{hf}.encoder_attn.out_proj", f"{ct}/attention/linear_2", d, d)
    norm("model.decoder.layer_norm", "decoder/layer_norm")
    return sd


def placed(tensors, where):
    """The checkpoint's tensors as transformers names them, every one placed, finite and of the shape the model's
    sizes imply, and the decoder's options checked (`where` names the file in errors): (state dict, (encoder,
    decoder) layers, (encoder, decoder) heads)."""
    w = Weights(tensors, where)
    n_enc, n_dec = layers(tensors, "encoder", where), layers(tensors, "decoder", where)
    z = sizes(w, n_enc, n_dec)
    heads = (w.scalar("encoder/num_heads"), w.scalar("decoder/num_heads"))
    for side, n in zip(("encoder", "decoder"), heads):
        if n <= 0 or z["d"] % n:
            raise SystemExit(f"{where}: {side}/num_heads is {n}, which does not divide d_model {z['d']}")
    sd = state_dict(w, n_enc, n_dec, z)
    # The decoder's options, as Whisper has them (CTranslate2 ActivationType 3 is GELU), and its tied output head.
    for flag, want in (("activation", 3), ("alibi", 0), ("pre_norm", 1), ("scale_embeddings", 0),
                       ("start_from_zero_embedding", 0)):
        if (got := w.scalar(f"decoder/{flag}")) != want:
            raise SystemExit(f"{where}: decoder/{flag} is {got}, Whisper's is {want}")
    # Both finite (f32 checks), so equality is NaN-safe.
    if not np.array_equal(w.f32("decoder/projection/weight", (z["vocab"], z["d"])),
                          sd["model.decoder.embed_tokens.weight"]):
        raise SystemExit(f"{where}: decoder/projection/weight is not the token embedding (Whisper ties them)")
    w.take("decoder/alignment_heads"), w.take("decoder/alignment_layer")  # for timestamps; not a weight
    if w.left():
        raise SystemExit(f"{where}: tensors this converter does not place: {w.left()}")
    return sd, (n_enc, n_dec), heads


def convert(ct2_dir, out_dir):
    """ct2_dir (model.bin, config.json, tokenizer.json) -> out_dir, a WhisperForConditionalGeneration folder."""
    import torch
    from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration

    tensors = read_model_bin(os.path.join(ct2_dir, "model.bin"))
    sd, (n_enc, n_dec), (heads_enc, heads_dec) = placed(tensors, f"{ct2_dir}/model.bin")
    vocab, d_model = tensors["decoder/embeddings/weight"].shape
    mels = tensors["encoder/conv1/weight"].shape[1]
    ffn = tensors["encoder/layer_0/ffn/linear_0/weight"].shape[0]
    with open(os.path.join(ct2_dir, "config.json")) as fh:
        ct2_config = json.load(fh)
    with open(os.path.join(ct2_dir, "tokenizer.json")) as fh:
        added = {t["content"]: t["id"] for t in json.load(fh)["added_tokens"]}
    eot, sot, no_ts = added["<|endoftext|>"], added["<|startoftranscript|>"], added["<|notimestamps|>"]
    multilingual = vocab >= 51865  # English-only Whisper has 51,864 ids
    cfg = WhisperConfig(
        vocab_size=int(vocab), num_mel_bins=int(mels), d_model=int(d_model), encoder_layers=n_enc, decoder_layers=n_dec,
        encoder_attention_heads=heads_enc, decoder_attention_heads=heads_dec, encoder_ffn_dim=int(ffn),
        decoder_ffn_dim=int(ffn), max_source_positions=int(tensors["encoder/position_encodings/encodings"].shape[0]),
        max_target_positions=int(tensors["decoder/position_encodings/encodings"].shape[0]), bos_token_id=eot,
        eos_token_id=eot, pad_token_id=eot, decoder_start_token_id=sot, suppress_tokens=ct2_config["suppress_ids"],
        begin_suppress_tokens=ct2_config["suppress_ids_begin"], tie_word_embeddings=True)
    model = WhisperForConditionalGeneration(cfg)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=False)
    missing = [m for m in missing if not m.endswith("k_proj.bias") and m != "proj_out.weight"]
    if missing or unexpected:
        raise SystemExit(f"{ct2_dir}: the converted weights leave {missing} unset and {unexpected} unused")
    model.tie_weights()
    if model.proj_out.weight.data_ptr() != model.model.decoder.embed_tokens.weight.data_ptr():
        raise SystemExit(f"{ct2_dir}: the output head is not tied to the token embedding")
    gc = GenerationConfig(
        decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot,
        suppress_tokens=ct2_config["suppress_ids"], begin_suppress_tokens=ct2_config["suppress_ids_begin"],
        no_timestamps_token_id=no_ts, is_multilingual=multilingual, max_length=448,
        alignment_heads=ct2_config["alignment_heads"])
    if multilingual:
        by_id = {i: t for t, i in added.items()}
        gc.lang_to_id = {by_id[i]: i for i in ct2_config["lang_ids"]}
        gc.task_to_id = {"transcribe": added["<|transcribe|>"], "translate": added["<|translate|>"]}
    model.generation_config = gc
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    with open(os.path.join(ct2_dir, "tokenizer.json"), "rb") as src, open(os.path.join(out_dir, "tokenizer.json"), "wb") as dst:
        dst.write(src.read())
    write_json(os.path.join(out_dir, "preprocessor_config.json"), {
        "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": int(mels), "sampling_rate": 16000,
        "hop_length": 160, "chunk_length": 30, "n_fft": 400, "n_samples": 480000, "nb_max_frames": 3000,
        "padding_side": "right", "padding_value": 0.0, "return_attention_mask": False, "processor_class": "WhisperProcessor"})
    write_json(os.path.join(out_dir, "tokenizer_config.json"), {
        "tokenizer_class": "WhisperTokenizer", "model_max_length": 1024, "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "errors": "replace",
        "add_prefix_space": False})
    n = sum(p.numel() for p in model.parameters())
    log(f"      Whisper {n_enc}+{n_dec} layers, d_model {d_model}, vocabulary {vocab}, {mels} mel bins, "
        f"{'multilingual' if multilingual else 'English-only'}: {n:,} parameters")


def write_json(path, doc):
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
        fh.write("\n")


def check_transcript(name, hf_dir, clip, want, language=None):
    """The converted model's generate() transcribes the clip as the original does (its text begins with `want`)."""
    import torch
    import transformers

    from .hf_run import load_audio

    fe = transformers.WhisperFeatureExtractor.from_pretrained(hf_dir, local_files_only=True)
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
    m = transformers.WhisperForConditionalGeneration.from_pretrained(hf_dir, dtype=torch.float32, local_files_only=True)
    feats = fe(load_audio(clip, fe.sampling_rate), sampling_rate=fe.sampling_rate, return_tensors="pt").input_features
    kw = dict(language=language, task="transcribe") if language else {}
    with torch.inference_mode():
        out = m.eval().generate(feats, max_new_tokens=64, do_sample=False, num_beams=1, **kw)
    text = tok.decode(out[0], skip_special_tokens=True).strip()
    if not text.startswith(want):
        raise SystemExit(f"{name}: the converted model transcribes {os.path.basename(clip)} as {text!r}, expected {want!r}...")
    log(f"      {name}: {os.path.basename(clip)} -> {text!r}")
