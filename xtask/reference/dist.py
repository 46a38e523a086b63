"""The distribution level's reference (`cargo xtask regen-goldens`, the `dist` golden): the fp32 Hugging Face model's
next-token distributions over a teacher-forced corpus, kept as top-k log-probabilities plus a tail bucket.

    python -m reference.dist JOBS.json

JOBS.json:

    {"jobs": [{"case": "qwen3-tiny",
               "reference": "/abs/fixtures/qwen3-tiny/hf",        # local HF model directory
               "tokenizer": "/abs/fixtures/qwen3-tiny/hf",        # tokenizer.json's directory
               "corpus": "/abs/fixtures/dist/corpus.jsonl",       # one {"name", "text"} object a line
               "n_ctx": 128, "k": 16,
               "floors": ["f32", "f16", "int4"],                  # the dtypes the case's matrix has
               "packages": {"default/int4": "/abs/.../default-int4"},   # the full-vocabulary check, per variant
               "int4_model": "/abs/.../default-int4/model.onnx",       # which weights the int4 floor quantizes
               "out": "/abs/scratch/qwen3-tiny.dist.safetensors"}]}

The corpus is llama.cpp's `--kl-divergence` input, made the same way: the documents joined by a blank line,
tokenized once without special tokens, cut into chunks of n_ctx tokens (the remainder dropped), each chunk's first
token replaced by the tokenizer's BOS when it adds one (the first id of `tokenizer("")` with special tokens), and
the second half of each chunk scored: the logits at positions n_ctx/2 .. n_ctx-2 predict the token after them.

Written (safetensors, DIST_FORMAT), N scored positions:

    tokens          int32   [C, n_ctx]  the chunks as fed
    top_ids         int32   [N, k]      the reference's k most likely next tokens, most likely first
    top_logprobs    float32 [N, k]      their log-probabilities (log-softmax of the fp32 logits, in float64)
    tail_logprob    float32 [N]         log of the probability outside the top k (the tail bucket)
    target_logprob  float32 [N]         log-probability of the corpus's actual next token
    floor_kld.<d>   float32 [N]         per position, the floor's KL for dtype d (below), so a trial can pair its
                                        package with the floor position by position

A speech-to-text job (`"speech": true`, Whisper) reads a corpus of utterances instead, one {"name", "audio",
"text"} object a line (`audio` relative to the job's `root`); `n_ctx` is not given. Each utterance is one segment:
its clip through the model's WhisperFeatureExtractor and encoder, then the decoder prefix `generate()` forces, the
transcript (with the leading space Whisper writes before its first word, tokenized without special tokens) and the
generation config's end of text, teacher-forced; every transcript token and the end of text are scored (first = the
prefix's last position). Its `tokens` are the segments one after another, [T], with `lengths` int32 [S]; its
metadata has segments = "utterances", names and audio_sha256 (JSON lists, one per utterance) instead of n_ctx.
The int4 floor quantizes what the int4 package's encoder and decoder quantized (`int4_package`).

metadata: format, case, n_ctx, k, first, corpus_sha256, transformers, torch, and as JSON:
  floors: per dtype, KL(fp32 reference || the reference run another way) over the same top-k + tail partition a
          trial measures, per scored position summarised (mean, p99, max, same_top; full_mean_kld: the mean over
          the full vocabulary): f32 against the float64 model (the reference's own noise), f16 and bf16 with the
          model cast to that dtype, int4 with every
          Linear weight and the token table quantized by the suite's own round-to-nearest quantizer (symmetric,
          blocks of 32 along the input, zero point 8: ONNX Runtime's MatMulNBits default), independent of any
          package's quantizer.
  check:  per package variant, its full-vocabulary KL against the reference and the partition (top-k + tail) KL
          the suite computes, both over the same positions: the share of the full KL that k captures. `k_sweep`
          gives that share at other k for the variant with the largest KL.
"""
from __future__ import annotations

import copy
import hashlib
import json
import sys
import time
from pathlib import Path

from .common import ReferenceError, log, run_jobs, save_safetensors

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from .ort_decoder import OrtDecoder  # noqa: E402

DIST_FORMAT = "dist-golden-v1"
REQUIRED = ("case", "reference", "tokenizer", "corpus", "k", "out")
SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def json_lines(path: str):
    """[(line number, object)] of a JSON lines file (blank lines skipped), and the sha256 of the file."""
    raw = Path(path).read_bytes()
    out = []
    for i, line in enumerate(raw.decode("utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            out.append((i + 1, json.loads(line)))
        except json.JSONDecodeError as e:
            raise ReferenceError(f"{path}: line {i + 1}: {e}")
    return out, hashlib.sha256(raw).hexdigest()


def corpus_text(path: str) -> tuple[str, str]:
    """The documents joined by a blank line, and the sha256 of the file."""
    lines, sha = json_lines(path)
    docs = []
    for n, obj in lines:
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str) or not obj["text"]:
            raise ReferenceError(f"{path}: line {n}: expected an object with a non-empty `text`")
        docs.append(obj["text"])
    if not docs:
        raise ReferenceError(f"{path}: no document")
    return "\n\n".join(docs), sha


def chunks_of(tok, text: str, n_ctx: int) -> np.ndarray:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    prefix = tok("", add_special_tokens=True)["input_ids"]
    n = len(ids) // n_ctx
    if n == 0:
        raise ReferenceError(f"the corpus has {len(ids)} tokens, fewer than one chunk of n_ctx={n_ctx}")
    out = np.array(ids[: n * n_ctx], dtype=np.int64).reshape(n, n_ctx)
    if prefix:
        out[:, 0] = prefix[0]
    return out


def forward_logprobs(model, chunk: np.ndarray, first: int) -> torch.Tensor:
    """log-softmax (float64) of the model's logits at the scored positions of one chunk: [n_ctx-1-first, V]."""
    ids = torch.from_numpy(chunk)[None]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, first:-1]
    return torch.log_softmax(logits.to(torch.float64), dim=-1)


def kld_rows(p_log: torch.Tensor, q_log: torch.Tensor) -> np.ndarray:
    """KL(P || Q) per row, full vocabulary, in float64 (0 * log 0 = 0)."""
    p = p_log.exp()
    terms = torch.where(p > 0, p * (p_log - q_log), torch.zeros_like(p))
    return terms.sum(-1).numpy()


def partition_kld(p_log: torch.Tensor, q_log: torch.Tensor, k: int) -> np.ndarray:
    """KL over the partition {each of P's top k} + {the rest}: a lower bound of the full KL (log-sum inequality)."""
    top_p, top_i = p_log.topk(k, dim=-1)
    top_q = q_log.gather(-1, top_i)
    tail_p = torch.log1p(-top_p.exp().sum(-1).clamp(max=1.0 - 1e-16))
    tail_q = torch.log1p(-top_q.exp().sum(-1).clamp(max=1.0 - 1e-16))
    kl = (top_p.exp() * (top_p - top_q)).sum(-1) + tail_p.exp() * (tail_p - tail_q)
    return kl.numpy()


def summary(kld: np.ndarray, same_top: np.ndarray) -> dict:
    return {"positions": int(kld.size), "mean_kld": float(kld.mean()), "p99_kld": float(np.quantile(kld, 0.99)),
            "max_kld": float(kld.max()), "same_top": float(same_top.mean())}


def quantized_names(model, int4_model: str) -> list[str]:
    """The HF parameters an int4 package quantized (structure only: which weights, never their values): those that
    dequantize.py's mapping of its MatMulNBits and GatherBlockQuantized weights replaces."""
    from .dequantize import dequantize_into

    return changed_names(model, lambda probe: dequantize_into(probe, int4_model))


def rtn_int4_(model, names: list[str]) -> int:
    """Quantizes, in place, the named 2-D parameters by round-to-nearest int4 as ONNX Runtime's blockwise quantizer
    does for MatMulNBits' symmetric default: blocks of 32 along the input, q in 0..15 with zero point 8, scale =
    the block's largest-magnitude element / -8, halves rounded up. Returns how many tensors it changed."""
    def quantize(w: torch.Tensor) -> torch.Tensor:
        rows, cols = w.shape
        if cols % 32:
            raise ReferenceError(f"a quantized weight of {cols} columns is not in whole blocks of 32")
        blocks = w.reshape(rows, cols // 32, 32).to(torch.float32)
        # The block's extreme of larger magnitude, the minimum on a tie (as ONNX Runtime picks it).
        bmax, bmin = blocks.amax(-1, keepdim=True), blocks.amin(-1, keepdim=True)
        vmax = torch.where(bmax.abs() > bmin.abs(), bmax, bmin)
        scale = vmax / -8.0
        # Times the scale's reciprocal, then rounded half up after the zero point is added (floor(x + 8.5)), as ONNX
        # Runtime does: weights that came from another 4-bit format (the real tier's GGUF) sit exactly on halves,
        # where a division or round-half-even would land elsewhere (0 of Gemma-3 270M's weights differ this way).
        inv = torch.where(scale == 0, torch.zeros_like(scale), 1.0 / scale)
        q = torch.clamp(torch.floor(blocks * inv + 8.5), 0, 15)
        return ((q - 8) * scale).reshape(rows, cols).to(w.dtype)

    params = dict(model.named_parameters(remove_duplicate=False))
    done = set()
    with torch.no_grad():
        for name in names:
            w = params[name]
            if id(w) in done:
                continue
            done.add(id(w))
            w.copy_(quantize(w))
    return len(done)


def variant_model(model, dtype: str, int4_names):
    """The reference run another way, and how. `int4_names()` gives the parameters an int4 package quantized."""
    m = copy.deepcopy(model)
    if dtype == "f32":
        return m.double(), "float64"
    if dtype == "f16":
        return m.half(), "float16"
    if dtype == "bf16":
        return m.bfloat16(), "bfloat16"
    if dtype == "int4":
        names = int4_names()
        emb, head = m.get_input_embeddings(), m.get_output_embeddings()
        if head is not None and emb is not None and head.weight is emb.weight:
            # A tied pair the package quantized on one side only (a Gather table read through GatherBlockQuantized,
            # the head kept in f32): untied, as dequantize.py unties it, so only that side is quantized.
            tied = {n for n, p in m.named_parameters(remove_duplicate=False) if p is emb.weight}
            if tied & set(names) and not tied <= set(names):
                head.weight = torch.nn.Parameter(emb.weight.detach().clone())
        n = rtn_int4_(m, names)
        return m, f"round-to-nearest int4 ({n} tensors)"
    raise ReferenceError(f"floors: unknown dtype {dtype!r}, expected f32, f16, bf16 or int4")


def changed_names(model, replace) -> list[str]:
    """The parameters `replace(probe)` changes on a copy of the model (which weights, never their values)."""
    probe = copy.deepcopy(model)
    replace(probe)
    before = dict(model.named_parameters(remove_duplicate=False))
    return sorted(n for n, p in probe.named_parameters(remove_duplicate=False)
                  if n in before and not torch.equal(p.detach(), before[n].detach()))


def package_logprobs(package: str, chunk: np.ndarray, first: int) -> torch.Tensor:
    dec = _decoders.get(package)
    if dec is None:
        dec = _decoders[package] = OrtDecoder(Path(package), 1)
    logits = dec.logits(chunk)[first:-1]
    return torch.log_softmax(torch.from_numpy(logits.astype(np.float64)), dim=-1)


_decoders: dict = {}


class OrtWhisper:
    """An encoder-decoder package run by ONNX Runtime's CPU EP: its encoder on the features, its decoder prefilled
    on the segment's ids with an empty cache (the full-vocabulary check)."""

    def __init__(self, package: str):
        import onnxruntime as ort

        with open(Path(package) / "genai_config.json") as fh:
            cfg = json.load(fh)["model"]
        so = ort.SessionOptions()
        so.log_severity_level = 3
        enc = (cfg.get("encoder") or {}).get("filename", "encoder/model.onnx")
        self.encoder = ort.InferenceSession(str(Path(package) / enc), so, providers=["CPUExecutionProvider"])
        self.decoder = ort.InferenceSession(str(Path(package) / cfg["decoder"]["filename"]), so,
                                            providers=["CPUExecutionProvider"])
        names = cfg["decoder"].get("inputs", {})
        self.ids = names.get("decoder_input_ids") or names.get("input_ids") or "input_ids"
        self.states = names.get("encoder_hidden_states", "encoder_hidden_states")
        self.positions = names.get("position_ids", "position_ids")

    def logprobs(self, feats: torch.Tensor, ids: list[int], first: int) -> torch.Tensor:
        ein = self.encoder.get_inputs()[0]
        x = feats.numpy().astype(np.float16 if "float16" in ein.type else np.float32)
        states = self.encoder.run(None, {ein.name: x})[0]
        feed = {}
        for i in self.decoder.get_inputs():
            if i.name == self.ids:
                feed[i.name] = np.array([ids], np.int64)
            elif i.name == self.states:
                feed[i.name] = states.astype(np.float16 if "float16" in i.type else np.float32)
            elif i.name == self.positions:
                feed[i.name] = np.arange(len(ids), dtype=np.int64)[None]
            elif i.name == "attention_mask":
                feed[i.name] = np.ones((1, len(ids)), np.int64)
            else:  # a past key or value: empty
                feed[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float16 if "float16" in i.type else np.float32)
        logits = self.decoder.run(["logits"], feed)[0][0, first:-1]
        return torch.log_softmax(torch.from_numpy(logits.astype(np.float64)), dim=-1)


def speech_corpus(path: str, root: str) -> tuple[list[dict], str]:
    """The utterances ({"name", "audio", "text"} a line, `audio` relative to root), and the sha256 of the file."""
    lines, sha = json_lines(path)
    out = []
    for n, obj in lines:
        if not isinstance(obj, dict) or set(obj) != {"name", "audio", "text"} or \
                not all(isinstance(v, str) and v.strip() for v in obj.values()):
            raise ReferenceError(f"{path}: line {n}: expected an object with non-empty `name`, `audio` and `text`")
        if any(o["name"] == obj["name"] for o in out):
            raise ReferenceError(f"{path}: line {n}: utterance {obj['name']!r} is named twice")
        out.append(dict(obj, path=str(Path(root) / obj["audio"])))
    if not out:
        raise ReferenceError(f"{path}: no utterance")
    return out, sha


def text_segments(job: dict, k: int):
    """(segments [(ids, input)], first, reference model, forward(model, i), package forward(package, i), metadata,
    tensors, int4 names) of a text job."""
    n_ctx = job.get("n_ctx")
    if not (isinstance(n_ctx, int) and n_ctx >= 8 and n_ctx % 2 == 0):
        raise ReferenceError(f"n_ctx must be an even int >= 8, got {n_ctx!r}")
    text, corpus_sha = corpus_text(job["corpus"])
    tok = AutoTokenizer.from_pretrained(job["tokenizer"], local_files_only=True)
    chunks = chunks_of(tok, text, n_ctx)
    first = n_ctx // 2
    model = AutoModelForCausalLM.from_pretrained(job["reference"], dtype=torch.float32, local_files_only=True).eval()

    def int4_names():
        if job.get("int4_model") is None:
            raise ReferenceError("floors: int4 needs `int4_model`, the package whose quantized weights it names")
        return quantized_names(model, job["int4_model"])

    return dict(
        ids=list(chunks), first=first, model=model,
        forward=lambda m, i: forward_logprobs(m, chunks[i], first),
        package=lambda p, i: package_logprobs(p, chunks[i], first),
        int4_names=int4_names,
        metadata={"n_ctx": str(n_ctx), "corpus_sha256": corpus_sha},
        tensors={"tokens": chunks.astype(np.int32)},
        what=f"{chunks.shape[0]} chunks of {n_ctx}")


def speech_segments(job: dict, k: int):
    """A speech-to-text job's segments: one per utterance (see the module's docstring)."""
    from tokenizers import Tokenizer

    from . import speech
    from .hf_run import load_audio

    if "n_ctx" in job:
        raise ReferenceError("a speech job's segments are its utterances: no n_ctx")
    if "root" not in job:
        raise ReferenceError("a speech job needs `root`, the folder its corpus's audio paths are relative to")
    utterances, corpus_sha = speech_corpus(job["corpus"], job["root"])
    ref = job["reference"]
    fe = transformers.WhisperFeatureExtractor.from_pretrained(ref, local_files_only=True)
    model = transformers.WhisperForConditionalGeneration.from_pretrained(ref, dtype=torch.float32,
                                                                         local_files_only=True).eval()
    gc = model.generation_config
    prefix = speech.forced_prefix(gc, job.get("language"), job.get("task"))
    eos = gc.eos_token_id[0] if isinstance(gc.eos_token_id, list) else gc.eos_token_id
    if eos is None:
        raise ReferenceError("the generation config names no eos_token_id: nothing ends a transcript")
    tok_path = Path(job["tokenizer"])
    tok = Tokenizer.from_file(str(tok_path / "tokenizer.json" if tok_path.is_dir() else tok_path))
    ids, feats, shas = [], [], []
    for u in utterances:
        wave = load_audio(u["path"], fe.sampling_rate)
        feats.append(fe(wave, sampling_rate=fe.sampling_rate, return_tensors="pt").input_features.to(torch.float32))
        text = tok.encode(" " + u["text"].strip(), add_special_tokens=False).ids
        seg = list(prefix) + text + [int(eos)]
        if len(seg) > model.config.max_target_positions:
            raise ReferenceError(f"utterance {u['name']!r}: {len(seg)} decoder positions, more than the model's "
                                 f"{model.config.max_target_positions}")
        ids.append(seg)
        shas.append(hashlib.sha256(Path(u["path"]).read_bytes()).hexdigest())
    first = len(prefix) - 1

    def forward(m, i):
        dtype = next(m.parameters()).dtype
        with torch.no_grad():
            logits = m(input_features=feats[i].to(dtype), decoder_input_ids=torch.tensor([ids[i]])).logits[0, first:-1]
        return torch.log_softmax(logits.to(torch.float64), dim=-1)

    def package(p, i):
        run = _decoders.get(p)
        if run is None:
            run = _decoders[p] = OrtWhisper(p)
        return run.logprobs(feats[i], ids[i], first)

    def int4_names():
        if job.get("int4_package") is None:
            raise ReferenceError("floors: int4 needs `int4_package`, the package whose quantized weights it names")
        return changed_names(model, lambda probe: speech.dequantize(probe, job["int4_package"]))

    return dict(
        ids=ids, first=first, model=model, forward=forward, package=package, int4_names=int4_names,
        metadata={"segments": "utterances", "corpus_sha256": corpus_sha,
                  "names": json.dumps([u["name"] for u in utterances]), "audio_sha256": json.dumps(shas)},
        tensors={"tokens": np.array([t for seg in ids for t in seg], dtype=np.int32),
                 "lengths": np.array([len(seg) for seg in ids], dtype=np.int32)},
        what=f"{len(ids)} utterances")


def run_job(job: dict) -> str:
    missing = [k for k in REQUIRED if k not in job]
    if missing:
        raise ReferenceError(f"missing keys {missing}")
    k = job["k"]
    if not (isinstance(k, int) and k >= 1):
        raise ReferenceError(f"k must be a positive int, got {k!r}")
    seg = speech_segments(job, k) if job.get("speech") else text_segments(job, k)
    model, first, forward, n_seg = seg["model"], seg["first"], seg["forward"], len(seg["ids"])
    if k > model.config.get_text_config().vocab_size:
        raise ReferenceError(f"k={k} is larger than the vocabulary")

    top_ids, top_lp, tail_lp, target_lp, refs = [], [], [], [], []
    for i in range(n_seg):
        lp = forward(model, i)
        refs.append(lp)
        v, idx = lp.topk(k, dim=-1)
        top_ids.append(idx.numpy().astype(np.int32))
        top_lp.append(v.numpy().astype(np.float32))
        # The tail's mass as the logsumexp of everything outside the top k (no cancellation against 1).
        rest = lp.scatter(-1, idx, float("-inf"))
        tail_lp.append(torch.logsumexp(rest, dim=-1).numpy().astype(np.float32))
        targets = torch.tensor(np.asarray(seg["ids"][i])[first + 1:], dtype=torch.long)
        target_lp.append(lp.gather(-1, targets[:, None])[:, 0].numpy().astype(np.float32))

    floors, floor_series = {}, {}
    for dtype in job.get("floors", []):
        t0 = time.time()
        other, how = variant_model(model, dtype, seg["int4_names"])
        klds, full, same = [], [], []
        for i, ref in enumerate(refs):
            q = forward(other, i)
            # Measured as a trial measures a package (KL(reference || it) over the same top-k + tail partition),
            # with the reference run another way in the package's place: for f32 the float64 model, the
            # reference's own float32 noise.
            klds.append(partition_kld(ref, q, k))
            full.append(kld_rows(ref, q))
            same.append((q.argmax(-1) == ref.argmax(-1)).numpy())
        kl = np.concatenate(klds)
        if not np.isfinite(kl).all():
            # The reference itself does not survive the dtype (Gemma-3 in float16 overflows): no floor to judge by.
            floors[dtype] = {"non_finite": True, "against": how}
            log(f"{job['case']}: floor {dtype} ({how}): the reference's own logits are not finite")
            del other
            continue
        floors[dtype] = dict(summary(kl, np.concatenate(same)), against=how,
                             full_mean_kld=float(np.concatenate(full).mean()))
        floor_series[f"floor_kld.{dtype}"] = np.ascontiguousarray(kl.astype(np.float32))
        del other
        log(f"{job['case']}: floor {dtype} ({how}): mean KLD {floors[dtype]['mean_kld']:.3e} ({time.time() - t0:.1f}s)")

    check, sweeps = {}, {}
    for variant, package in sorted(job.get("packages", {}).items()):
        full, part, same, sweep = [], [], [], {s: [] for s in SWEEP if s <= refs[0].shape[-1]}
        finite = True
        try:
            for i, ref in enumerate(refs):
                q = seg["package"](package, i)
                if not torch.isfinite(q).all():
                    finite = False
                    break
                full.append(kld_rows(ref, q))
                part.append(partition_kld(ref, q, k))
                same.append((q.argmax(-1) == ref.argmax(-1)).numpy())
                for s in sweep:
                    sweep[s].append(partition_kld(ref, q, s))
        except Exception as e:  # noqa: BLE001 - a package ONNX Runtime refuses has no check; the trial says why
            log(f"{job['case']}: check {variant}: ONNX Runtime refused the package ({str(e).splitlines()[0][:200]})")
            continue
        if not finite:
            check[variant] = {"non_finite": True}
            log(f"{job['case']}: check {variant}: the package's logits are not finite")
            continue
        full, part = np.concatenate(full), np.concatenate(part)
        mean_full = float(full.mean())
        check[variant] = dict(summary(full, np.concatenate(same)), mean_kld_partition=float(part.mean()),
                              captured=float(part.mean() / mean_full) if mean_full > 0 else 1.0)
        sweeps[variant] = {str(s): float(np.concatenate(v).mean() / mean_full) if mean_full > 0 else 1.0
                           for s, v in sweep.items()}
        log(f"{job['case']}: check {variant}: full KLD {mean_full:.3e}, top-{k} + tail {part.mean():.3e} "
            f"({check[variant]['captured']:.4f} of it)")
    worst = max(sweeps, key=lambda v: check[v]["mean_kld"], default=None)

    tensors = {
        **seg["tensors"],
        "top_ids": np.ascontiguousarray(np.concatenate(top_ids)),
        "top_logprobs": np.ascontiguousarray(np.concatenate(top_lp)),
        "tail_logprob": np.ascontiguousarray(np.concatenate(tail_lp)),
        "target_logprob": np.ascontiguousarray(np.concatenate(target_lp)),
        **floor_series,
    }
    metadata = {
        "format": DIST_FORMAT, "case": job["case"], "k": str(k), "first": str(first), **seg["metadata"],
        "transformers": transformers.__version__, "torch": torch.__version__,
        "floors": json.dumps(floors, sort_keys=True), "check": json.dumps(check, sort_keys=True),
        "k_sweep": json.dumps({"variant": worst, "captured": sweeps.get(worst, {})}, sort_keys=True),
    }
    save_safetensors(tensors, metadata, job["out"])
    n = tensors["top_ids"].shape[0]
    return f"{job['case']}: {seg['what']}, {n} scored positions, k={k} -> {job['out']}"


def main(argv):
    run_jobs(argv, run_job)


if __name__ == "__main__":
    main(sys.argv)
