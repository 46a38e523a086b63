"""Reference log-likelihoods (and greedy generations) from HF transformers, fp32, CPU, one thread.

    python -m reference.loglik REQUESTS.json [--batched] [--verify]      (run by `cargo xtask regen-goldens`)

The accuracy gate's baseline generation calls this with token ids it made itself (no tokenizer is
used here). REQUESTS.json:

    {"jobs": [{"reference": "/abs/hf/dir",                 # AutoModelForCausalLM directory
               "out": "/abs/out.safetensors",
               "requests": [{"context": [ids], "continuation": [ids]}, ...],
               "generate": [{"ids": [ids], "max_new_tokens": N}, ...],   # optional
               "eos_token_id": null,                   # the case's generation.eos_token_id (id, list or null)
               "genai_config": "/abs/.../genai_config.json"}]}   # the case's package's, or null

Each job writes one safetensors file `out` with

    loglik         float32 [R]  sum over the continuation tokens of log_softmax(logits) (float32) at
                                the positions that predict them
    is_greedy      uint8   [R]  1 when every continuation token is the argmax at its position
    generated      int64   [G, max(max_new_tokens)]  greedy tokens, padded with -1   (only with G > 0)
    generated_len  int64   [G]  tokens generated; includes the EOS token when generation stopped on it

and metadata {"generator": "xtask/reference/loglik.py", "torch": ..., "transformers": ...,
"format": "loglik-v1", "reference": the HF dir, "attn_implementation": ..., "requests": R,
"generate": G, "batched": "true"|"false", and with --verify "verify": JSON of the batch-1 comparison}.

Semantics are lm-evaluation-harness 0.4's `HFLM._loglikelihood_tokens` at batch size 1: the model
sees (context + continuation)[:-1] (no attention mask, no padding), log_softmax runs in float32 over
the whole [1, T, V] logits, the last len(continuation) positions are taken, `is_greedy` is
`(argmax == continuation).all()` and `loglik` is `float(gathered.sum())` of the float32 log-probs.
Differences from lm-eval: the caller passes ids (lm-eval's tokenization - BOS, moving a trailing
space of the context into the continuation, re-encoding context+continuation together - is the
caller's job), an empty context is an error (lm-eval substitutes its prefix token) and nothing is
truncated (a request longer than max_position_embeddings is an error).

Forwards: one batch-1 forward per distinct input (context + continuation)[:-1]; requests with the same
input (one-token continuations of one context, duplicates) share it, which is bitwise what each gives
alone. Sharing more is NOT exact on CPU, measured with torch 2.15 on the tiny fixtures (random requests,
4 continuations of 1-5 tokens per context): one right-padded batch per context (lm-eval's batch > 1)
changed 14 of 80 log-likelihoods by up to 3.8e-6, and one context forward reused through the KV cache
changed 38 of 80 by up to 1.2e-5 (GEMM results depend on the row count). `--batched` opts into the
padded batches anyway; `--verify` recomputes every request alone and reports the differences (and fails
on any without --batched, i.e. checks determinism). A tiny fixture's batch-1 forward takes ~3 ms.

Greedy generation: HF `generate` (do_sample=False, num_beams=1, KV cache) from `ids` as given
(include BOS yourself), stopping at the EOS ids of common.eos_ids (the case's, else the package's genai_config.json's,
else none: the rule goldens.py and the suite's runner follow) or after max_new_tokens.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import time

from .common import eos_ids

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.nn.functional import log_softmax  # noqa: E402
import transformers  # noqa: E402

FORMAT = "loglik-v1"
PAD = 0  # padding id for batched rows; never read (causal attention, right padding)


def setup_torch():
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # only settable once, before any parallel work
        pass


def load_model(reference):
    model = transformers.AutoModelForCausalLM.from_pretrained(reference, dtype=torch.float32)
    return model.eval()


def _score_rows(logprobs, rows):
    """logprobs [B, T, V] float32; rows: [(b, inplen, cont_ids)] -> [(loglik, is_greedy)]."""
    out = []
    for b, inplen, cont in rows:
        contlen = len(cont)
        lp = logprobs[b][inplen - contlen:inplen].unsqueeze(0)  # [1, contlen, V]
        cont_t = torch.tensor(cont, dtype=torch.long).unsqueeze(0)
        greedy = bool((lp.argmax(dim=-1) == cont_t).all())
        ll = torch.gather(lp, 2, cont_t.unsqueeze(-1)).squeeze(-1)  # [1, contlen]
        out.append((float(ll.sum()), greedy))
    return out


def _check(req, max_pos):
    ctx, cont = req["context"], req["continuation"]
    if not ctx:
        raise SystemExit("loglik.py: empty context (lm-eval would use its prefix token; pass it explicitly)")
    if not cont:
        raise SystemExit("loglik.py: empty continuation")
    if max_pos and len(ctx) + len(cont) - 1 > max_pos:
        raise SystemExit(f"loglik.py: request of {len(ctx) + len(cont) - 1} tokens > max_position_embeddings {max_pos}")


@torch.inference_mode()
def loglik_single(model, req):
    """One request, batch 1: lm-eval's path."""
    full = list(req["context"]) + list(req["continuation"])
    inp = torch.tensor(full[:-1], dtype=torch.long).unsqueeze(0)
    logprobs = log_softmax(model(inp).logits.float(), dim=-1)
    return _score_rows(logprobs, [(0, inp.shape[1], list(req["continuation"]))])[0]


@torch.inference_mode()
def loglik_group(model, reqs):
    """Requests in one forward: right-padded rows of (context + continuation)[:-1]. Rows that are all the
    same input (no padding) give bitwise the batch-1 result (one row is run and shared)."""
    seqs = [(list(r["context"]) + list(r["continuation"]))[:-1] for r in reqs]
    if all(s == seqs[0] for s in seqs):
        inp = torch.tensor([seqs[0]], dtype=torch.long)
        rows = [0] * len(seqs)
    else:
        T = max(map(len, seqs))
        inp = torch.full((len(seqs), T), PAD, dtype=torch.long)
        for i, s in enumerate(seqs):
            inp[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        rows = list(range(len(seqs)))
    logprobs = log_softmax(model(inp).logits.float(), dim=-1)
    return _score_rows(logprobs, [(b, len(s), list(r["continuation"])) for b, s, r in zip(rows, seqs, reqs)])


def loglikelihood(model, requests, batched=False, verify=False, log=None):
    """-> (loglik float32 [R], is_greedy uint8 [R], info dict).

    Default: one batch-1 forward per distinct input (context + continuation)[:-1] (requests with the same
    input, e.g. one-token continuations of one context, share it: bitwise what each alone gives).
    batched: one right-padded forward per context group; NOT bitwise equal to batch 1 (see the docstring)."""
    max_pos = getattr(model.config, "max_position_embeddings", None)
    for r in requests:
        _check(r, max_pos)
    key = (lambda r: tuple(r["context"])) if batched else (lambda r: tuple(r["context"]) + tuple(r["continuation"][:-1]))
    groups = collections.OrderedDict()
    for i, r in enumerate(requests):
        groups.setdefault(key(r), []).append(i)
    ll = np.zeros(len(requests), np.float32)
    gr = np.zeros(len(requests), np.uint8)
    t0 = time.time()
    for idx in groups.values():
        reqs = [requests[i] for i in idx]
        res = loglik_group(model, reqs)  # without `batched` every row of the group is the same input
        for i, (a, g) in zip(idx, res):
            ll[i], gr[i] = a, g
    info = {"forwards": len(groups), "batched": batched, "seconds": round(time.time() - t0, 3)}
    if verify:
        diff = np.zeros(len(requests))
        greedy_diff = 0
        for i, r in enumerate(requests):
            a, g = loglik_single(model, r)
            diff[i] = abs(float(np.float32(a)) - float(ll[i]))
            greedy_diff += int(g) != int(gr[i])
        info["verify"] = {"differ": int((diff > 0).sum()), "max_abs_diff": float(diff.max(initial=0.0)),
                          "is_greedy_differ": greedy_diff}
    if log:
        log(f"  {len(requests)} requests, {len(groups)} forwards, batched={batched}, {info['seconds']}s"
            + (f", vs batch 1: {info['verify']}" if verify else ""))
    return ll, gr, info


@torch.inference_mode()
def generate(model, gens, eos):
    """-> (generated int64 [G, max], generated_len int64 [G]); each stops at an id of `eos` (a list, maybe empty)."""
    width = max((g["max_new_tokens"] for g in gens), default=0)
    out = np.full((len(gens), width), -1, np.int64)
    lens = np.zeros(len(gens), np.int64)
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else (eos[0] if eos else 0)
    for i, g in enumerate(gens):
        ids = torch.tensor([g["ids"]], dtype=torch.long)
        seq = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=g["max_new_tokens"],
                             do_sample=False, num_beams=1, eos_token_id=eos or None, pad_token_id=pad,
                             top_k=None, top_p=None, temperature=None)
        new = seq[0, ids.shape[1]:].tolist()
        if eos and any(t in eos for t in new):  # generate pads after EOS in batches; batch 1 stops, but be safe
            new = new[:min(j for j, t in enumerate(new) if t in eos) + 1]
        out[i, :len(new)] = new
        lens[i] = len(new)
    return out, lens


def run_job(job, batched=False, verify=False, log=print):
    from safetensors.numpy import save_file

    setup_torch()
    model = load_model(job["reference"])
    log(f"{job['reference']} -> {job['out']}")
    ll, gr, info = loglikelihood(model, job.get("requests", []), batched=batched, verify=verify, log=log)
    if verify and (info["verify"]["differ"] or info["verify"]["is_greedy_differ"]) and not batched:
        raise SystemExit(f"loglik.py: results differ from a fresh batch-1 forward: {info['verify']}")
    tensors = {"loglik": ll, "is_greedy": gr}
    gens = job.get("generate") or []
    if gens:
        eos = eos_ids(job.get("eos_token_id"), job.get("genai_config"))
        tensors["generated"], tensors["generated_len"] = generate(model, gens, eos)
    meta = {"generator": "xtask/reference/loglik.py", "format": FORMAT, "torch": torch.__version__,
            "transformers": transformers.__version__, "reference": job["reference"],
            "attn_implementation": str(model.config._attn_implementation),
            "requests": str(len(ll)), "generate": str(len(gens)), "batched": str(batched).lower()}
    if verify:
        meta["verify"] = json.dumps(info["verify"])
    os.makedirs(os.path.dirname(os.path.abspath(job["out"])), exist_ok=True)
    save_file(tensors, job["out"], metadata=meta)
    return tensors, info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("requests", help="REQUESTS.json")
    ap.add_argument("--batched", action="store_true",
                    help="one padded forward per context group (faster, not bitwise equal to batch 1)")
    ap.add_argument("--verify", action="store_true",
                    help="recompute every request alone at batch 1 and report the difference (without --batched: "
                         "fail on any)")
    args = ap.parse_args(argv)
    torch.use_deterministic_algorithms(True)
    with open(args.requests) as fh:
        spec = json.load(fh)
    for job in spec["jobs"]:
        run_job(job, batched=args.batched, verify=args.verify)


if __name__ == "__main__":
    main()
