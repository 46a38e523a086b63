#!/usr/bin/env python3
"""Raw HF transformers reference outputs for the conformance suite's goldens.

    python goldens.py JOBS.json

JOBS.json:

    {"jobs": [{"case": "qwen3-tiny",
               "reference": "/abs/fixtures/qwen3-tiny/hf",     # local HF model directory
               "tokenizer": "/abs/fixtures/qwen3-tiny/hf",     # local tokenizer directory
               "prompt": "...", "max_new_tokens": 16,
               "eos_token_id": null,                           # int, list of ints, or null (= model's)
               "out": "/abs/out/qwen3-tiny.safetensors"}]}

Per job: fp32 on CPU, one thread, deterministic. The prompt is tokenized with the default special
tokens (BOS prepended), the model runs one prefill forward and a greedy `generate` that stops at EOS
like HF does. Written as safetensors (safetensors.numpy) to `out` (parent dirs created):

    input_ids         int64   [S]
    prefill_logits    float32 [V]     last prompt position of a plain forward pass
    generated_tokens  int64   [N]     N <= max_new_tokens (fewer when EOS was generated; EOS included)
    step_logits       float32 [N, V]  raw logits that chose each generated token (step 0 = prefill)

metadata (str -> str): case, prompt, generated_text, eos_token_id (JSON), transformers, torch.
A Rust program derives the golden JSON from these files.
"""
from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.numpy import save as st_save  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

REQUIRED = ("case", "reference", "tokenizer", "prompt", "max_new_tokens", "out")

# Greedy decoding with every logits processor a model's generation_config could switch on set to its
# neutral value, so that the argmax of the raw step logits is the generated token (checked per step).
# Sampling-only knobs (temperature, top_k, top_p, ...) do nothing with do_sample=False.
NEUTRAL = dict(
    do_sample=False,
    num_beams=1,
    repetition_penalty=1.0,
    encoder_repetition_penalty=1.0,
    no_repeat_ngram_size=0,
    bad_words_ids=None,
    sequence_bias=None,
    min_length=0,
    min_new_tokens=None,
    forced_bos_token_id=None,
    forced_eos_token_id=None,
    suppress_tokens=None,
    begin_suppress_tokens=None,
    exponential_decay_length_penalty=None,
    renormalize_logits=False,
    remove_invalid_values=False,
    guidance_scale=None,
    watermarking_config=None,
    stop_strings=None,
)


class JobError(Exception):
    pass


def save_safetensors(tensors, metadata, path):
    """safetensors.numpy.save, with the JSON header re-serialised with sorted keys: safetensors keeps
    __metadata__ in a hash map, so its key order (and the file bytes) would change run to run."""
    raw = st_save(tensors, metadata=metadata)
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    h = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as fh:
        fh.write(len(h).to_bytes(8, "little") + h + data)


def local_dir(job, key):
    path = job[key]
    if not isinstance(path, str) or not os.path.isdir(path):
        raise JobError(
            f"{key}={path!r} is not a local directory; only local reference directories are supported "
            f"for now (Hugging Face Hub ids are not)"
        )
    return path


def eos_ids(job, model):
    eos = job.get("eos_token_id")
    if eos is None:
        eos = model.generation_config.eos_token_id
        if eos is None:
            eos = model.config.eos_token_id
    if eos is None:
        return []
    if isinstance(eos, int):
        return [eos]
    if isinstance(eos, list) and all(isinstance(e, int) for e in eos):
        return list(eos)
    raise JobError(f"eos_token_id must be an int, a list of ints or null, got {eos!r}")


def run_job(job):
    missing = [k for k in REQUIRED if k not in job]
    if missing:
        raise JobError(f"missing keys {missing}")
    ref = local_dir(job, "reference")
    tok_dir = local_dir(job, "tokenizer")
    n_new = job["max_new_tokens"]
    if not isinstance(n_new, int) or n_new < 1:
        raise JobError(f"max_new_tokens must be a positive int, got {n_new!r}")

    tok = AutoTokenizer.from_pretrained(tok_dir, local_files_only=True)
    enc = tok(job["prompt"], return_tensors="pt")  # default add_special_tokens: BOS is prepended
    input_ids = enc["input_ids"]
    if input_ids.shape[0] != 1 or input_ids.shape[1] == 0:
        raise JobError(f"bad tokenization shape {tuple(input_ids.shape)}")

    model = AutoModelForCausalLM.from_pretrained(ref, dtype=torch.float32, local_files_only=True)
    model = model.to("cpu").float().eval()
    eos = eos_ids(job, model)
    pad = model.generation_config.pad_token_id
    if pad is None:
        pad = tok.pad_token_id
    if pad is None:
        pad = eos[0] if eos else 0
    if isinstance(pad, list):
        pad = pad[0]

    attention_mask = torch.ones_like(input_ids)
    with torch.inference_mode():
        prefill = model(input_ids=input_ids, attention_mask=attention_mask).logits[0, -1].float()
        out = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=n_new,
            eos_token_id=eos or None,
            pad_token_id=pad,
            output_logits=True,
            return_dict_in_generate=True,
            use_cache=True,
            **NEUTRAL,
        )
    S = input_ids.shape[1]
    generated = out.sequences[0, S:]
    step_logits = torch.stack([lg[0].float() for lg in out.logits])  # [N, V]
    N = generated.shape[0]
    if step_logits.shape[0] != N:
        raise JobError(f"{step_logits.shape[0]} step logits for {N} generated tokens")
    argmax = step_logits.argmax(-1)
    bad = (argmax != generated).nonzero().flatten().tolist()
    if bad:
        raise JobError(f"argmax(step logits) != generated token at steps {bad}: a logits processor interfered")
    if eos and any(int(t) in eos for t in generated[:-1]):
        raise JobError("generation continued past EOS")
    if not torch.allclose(prefill, step_logits[0], rtol=0, atol=1e-4):
        diff = float((prefill - step_logits[0]).abs().max())
        raise JobError(f"prefill forward and generate's first step disagree by {diff:.3g}")

    V = step_logits.shape[1]
    if prefill.shape[0] != V:
        raise JobError(f"prefill logits have {prefill.shape[0]} entries, step logits {V}")
    tensors = {
        "input_ids": input_ids[0].to(torch.int64).numpy(),
        "prefill_logits": np.ascontiguousarray(prefill.numpy(), dtype=np.float32),
        "generated_tokens": generated.to(torch.int64).numpy(),
        "step_logits": np.ascontiguousarray(step_logits.numpy(), dtype=np.float32),
    }
    metadata = {
        "case": str(job["case"]),
        "prompt": job["prompt"],
        "generated_text": tok.decode(generated.tolist(), skip_special_tokens=True),
        "eos_token_id": json.dumps(eos),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    out_path = job["out"]
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    save_safetensors(tensors, metadata, out_path)

    top2 = torch.topk(torch.cat([prefill[None], step_logits]), 2, dim=-1).values
    min_margin = float((top2[:, 0] - top2[:, 1]).min())
    stopped = "eos" if eos and int(generated[-1]) in eos else "length"
    return (f"{job['case']}: S={S} N={N} V={V} stop={stopped} min_top1_top2_margin={min_margin:.4f} "
            f"tokens={generated.tolist()} -> {out_path}")


def main(argv):
    if len(argv) != 2:
        raise SystemExit(f"usage: {argv[0]} JOBS.json")
    with open(argv[1]) as fh:
        spec = json.load(fh)
    jobs = spec.get("jobs") if isinstance(spec, dict) else None
    if not isinstance(jobs, list):
        raise SystemExit(f"{argv[1]}: expected an object with a 'jobs' list")

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()

    failed = 0
    for i, job in enumerate(jobs):
        name = job.get("case", f"#{i}") if isinstance(job, dict) else f"#{i}"
        t0 = time.time()
        try:
            if not isinstance(job, dict):
                raise JobError("job is not an object")
            line = run_job(job)
            print(f"{line} ({time.time() - t0:.1f}s)", flush=True)
        except JobError as e:
            failed += 1
            print(f"{name}: ERROR {e}", flush=True)
    if failed:
        raise SystemExit(f"{failed} of {len(jobs)} jobs failed")


if __name__ == "__main__":
    main(sys.argv)
