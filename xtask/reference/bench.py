#!/usr/bin/env python3
"""The reference side of `cargo xtask bench`: what the tools people use today cost on the same packages.

Run with the reference venv's python. Every subcommand prints exactly ONE JSON object on stdout (anything the
libraries print, at the C level too, goes to stderr). Times are seconds; every timed figure is
{"median": x, "min": x, "max": x} over --repeats runs, after one untimed warm-up run.

decode: greedy decoding throughput, EOS off (always --tokens new tokens)
    bench.py decode --package DIR --prompt-ids 2,5,9 [--tokens 128] [--repeats 5]
                    [--engines genai,genai-package,ort] [--threads 1]
  genai: onnxruntime_genai `og.Model(og.Config(DIR))` (intra-op threads set to --threads by a config overlay),
         greedy (do_sample False, top_k 1), max_length = min_length = prompt + tokens (min_length masks EOS).
         Timed: append_tokens (prefill) and the generate_next_token loop; Generator set-up is not.
  genai-package: the same with the package's own session options (no overlay: ONNX Runtime's default intra-op
         threads, one per physical core), as a user running the package gets.
  ort:   a plain Python onnxruntime loop over the package's decoder (ort_decoder.py): names from genai_config.json
         (input_ids, attention_mask, position_ids when the graph has it, past/present per layer as the graph declares
         them), present fed back as past, numpy argmax of the last logits with the EOS ids (genai_config
         eos_token_id, common.eos_ids) masked like genai's min_length does. Timed: all model runs (prefill
         included) and the argmaxes.
  One engine:
    {"subcommand": "decode", "engine": "genai"|"genai-package"|"ort", "package": str, "prompt_len": int, "tokens": int,
     "repeats": int, "threads": int,
     "seconds": stats,          # prompt + all new tokens, per run
     "prefill_seconds": stats,  # the part of it spent on the prompt (append_tokens / first session run)
     "tokens_per_s": stats,     # tokens / seconds, per run
     "ids": [int, ...],         # the new tokens (identical in every run, else an error)
     "eos_masked_steps": [int, ...]}   # ort only: steps whose raw argmax was an EOS id (masked away);
                                       # a loop that does not mask EOS diverges from the first of them on
  Several engines: {"subcommand": "decode", "package": str, "prompt_len": int, "tokens": int,
                   "genai": <one-engine object>, "genai_package": <...>, "ort": <...> (those asked for),
                   "same_ids": bool|null, "first_difference": int|null}   # genai vs ort, when both ran

prefill: Python onnxruntime prefill latency per prompt length
    bench.py prefill --package DIR [--lengths 16,64,256,512] [--repeats 5] [--threads 1]
  Prompt of length L: [bos] + [4 + (7 * i) % (vocab - 4) for i < L - 1] (deterministic); empty past; timed is
  one session run (all outputs fetched).
    {"subcommand": "prefill", "package": str, "threads": int, "repeats": int,
     "lengths": [{"length": int, "seconds": stats, "tokens_per_s": stats, "first_id": int}
                 | {"length": int, "error": str}, ...]}
  (a length past the package's RoPE table - mobius sizes it by max_position_embeddings, 256 for most tiny
  fixtures - fails in ORT and is reported as an error entry, the other lengths still run)

decode-serve: the same engines, one run per request, so a caller can interleave its own loop with them
    bench.py decode-serve --package DIR --prompt-ids 2,5,9 [--tokens 128] [--engines ...] [--threads 1]
  Prints {"ready": true, "ids": {engine: [int, ...]}, "eos_masked_steps": {"ort": [int, ...]}} once the engines
  are loaded and warm; then reads engine names from stdin, one per line, and prints {"engine": str, "seconds": x,
  "steps": [x, ...], "inside_seconds": x | null} for one run of each: its whole time, each decode step's seconds
  from one model run's end to the next, and (the ort engine) its time inside session.run (an empty line or end of
  input stops it).

speech-serve: Hugging Face transformers' Whisper generate() on stored log-mel features, one run per request
    bench.py speech-serve --hf DIR --inputs FILE[,FILE...] --max-new-tokens N [--language en --task transcribe]
                          [--threads 1]
  Loads WhisperForConditionalGeneration (float32, CPU, torch intra-op threads --threads) once. Each FILE is a
  golden inputs file: `input_features` [1, mels, frames] (the features the suite's encoder is fed; extracting them
  is not timed on either side) and `input_ids`, the forced prefix the suite decodes from. Timed: one
  generate(input_features, max_new_tokens=N, do_sample=False, num_beams=1[, language=, task=]) call, encoder and
  greedy decoding with the KV cache and the generation config's suppression. generate() forces its prefix itself
  (the one speech.py stored as input_ids, after checking that generate() agrees with it); --language and --task
  are for a multilingual model, which needs both.
  Prints {"ready": true, "clips": [{"inputs": FILE, "ids": [int, ...]}, ...]} once every clip has run once
  (warm-up; ids are the tokens after the prefix as generate() returns them: without the EOS that ended the
  transcript, which the suite's stream keeps); then reads clip indices
  (into --inputs) from stdin, one per line, and prints {"clip": int, "seconds": x} for one run of each (an empty
  line or end of input stops it).

lmeval: lm-eval 0.4.13 in process (model hf, dtype float32, device cpu)
    bench.py lmeval --tasks arith[,arith-control] --include-path DIR --pretrained HF_DIR [--batch-size 1]
                    [--repeats 1] [--threads 1] [--num-fewshot N] [--limit N] [--per-item]
  Run it from the repository root (the task YAMLs name their data relative to it). The model is loaded once
  (HFLM, timed apart as load_seconds); each repeat is one `lm_eval.simple_evaluate`
  over the tasks, with a TaskManager on --include-path only (include_defaults False: no index of the ~thousands
  of built-in tasks), offline.
    {"subcommand": "lmeval", "pretrained": str, "tasks": [str], "include_path": str, "batch_size": int,
     "threads": int, "repeats": int, "num_fewshot": int|null, "limit": int|null,
     "load_seconds": float, "seconds": stats, "items": int, "items_per_s": stats,
     "requests": int|null,                  # loglikelihood requests (items x choices); null without --per-item
     "results": {task: {metric: value}},    # lm-eval's results, e.g. "acc,none", "acc_stderr,none"
     "n_samples": {task: int},
     "per_item": {task: [{"doc_id": int, "target": int|str, "pred": int, "loglik": [float, ...]}]}}
                                           # only with --per-item (multiple_choice tasks)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

if not __package__:
    # xtask's bench runs this file by its path: its siblings are then the package `reference`, as under `python -m`.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "reference"

import numpy as np  # noqa: E402

from .ort_decoder import OrtDecoder  # noqa: E402

# stdout carries the one JSON object; everything else (Python and C++ libraries) writes to stderr.
_STDOUT = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr


def emit(obj) -> None:
    _STDOUT.write(json.dumps(obj) + "\n")
    _STDOUT.flush()


def stats(values) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.replace(" ", "").split(",") if x]


# ---------------------------------------------------------------------------------------------------------------
# decode


def step_seconds(run_ends: list[float]) -> list[float]:
    """Each decode step's seconds, from one run's end to the next (the prompt's run is the first end): the loop's
    own work on a step's output and the next run, as the Rust loops measure theirs (runtime::take_run_ends)."""
    return [b - a for a, b in zip(run_ends, run_ends[1:])]


class OrtEngine:
    """The plain Python onnxruntime loop. run() -> (seconds, prefill seconds); the tokens are checked each run."""

    def __init__(self, args, prompt):
        self.dec, self.prompt, self.tokens = OrtDecoder(Path(args.package), args.threads), prompt, args.tokens
        self.ids, self.masked, _ = self.dec.greedy(prompt, args.tokens)  # warm-up

    def run(self):
        t0 = time.perf_counter()
        ids, _, prefill = self.dec.greedy(self.prompt, self.tokens)
        seconds = time.perf_counter() - t0
        if ids != self.ids:
            raise SystemExit("ort: the greedy tokens changed between runs")
        return seconds, prefill, step_seconds(self.dec.run_ends), self.dec.run_seconds


class GenaiEngine:
    """onnxruntime-genai's Generator: --threads intra-op threads, or the package's own session options."""

    def __init__(self, args, prompt, package_settings=False):
        import onnxruntime_genai as og

        self.og = og
        config = og.Config(args.package)
        if not package_settings:
            overlay = {"model": {"decoder": {"session_options": {"intra_op_num_threads": args.threads,
                                                                  "inter_op_num_threads": 1}}}}
            config.overlay(json.dumps(overlay))
        self.model = og.Model(config)
        self.prompt, self.length = prompt, len(prompt) + args.tokens
        self.tokens = np.array([prompt], np.int32)
        self.ids, self.masked = None, None
        self.ids, _, _, _ = self._generate()  # warm-up
        if len(self.ids) != args.tokens:
            raise SystemExit(f"genai generated {len(self.ids)} tokens, not {args.tokens}")

    def _generate(self):
        og = self.og
        params = og.GeneratorParams(self.model)
        params.set_search_options(do_sample=False, top_k=1, max_length=self.length, min_length=self.length)
        gen = og.Generator(self.model, params)
        t0 = time.perf_counter()
        gen.append_tokens(self.tokens)
        t1 = time.perf_counter()
        ends = [t1]
        while not gen.is_done():
            gen.generate_next_token()
            ends.append(time.perf_counter())
        t2 = time.perf_counter()
        ids = [int(x) for x in gen.get_sequence(0)][len(self.prompt):]
        if self.ids is not None and ids != self.ids:
            raise SystemExit("genai: the greedy tokens changed between runs")
        return ids, t2 - t0, t1 - t0, step_seconds(ends)

    def run(self):
        _, seconds, prefill, steps = self._generate()
        return seconds, prefill, steps, None


ENGINES = {"genai": GenaiEngine, "genai-package": lambda a, p: GenaiEngine(a, p, package_settings=True),
           "ort": OrtEngine}


def engines_of(args, prompt) -> dict:
    names = [e for e in args.engines.split(",") if e]
    unknown = sorted(set(names) - set(ENGINES))
    if unknown or not names:
        raise SystemExit(f"--engines: unknown {unknown}; expected a list of {', '.join(ENGINES)}")
    return {name: ENGINES[name](args, prompt) for name in names}


def prompt_of(args) -> list[int]:
    prompt = int_list(args.prompt_ids)
    if not prompt:
        raise SystemExit("--prompt-ids is empty")
    return prompt


def decode(args):
    prompt = prompt_of(args)
    out = {}
    for name, engine in engines_of(args, prompt).items():
        runs = [engine.run() for _ in range(args.repeats)]
        secs, pre = [r[0] for r in runs], [r[1] for r in runs]
        obj = {"subcommand": "decode", "engine": name, "package": args.package, "prompt_len": len(prompt),
               "tokens": args.tokens, "repeats": args.repeats, "threads": args.threads,
               "seconds": stats(secs), "prefill_seconds": stats(pre),
               "tokens_per_s": stats([args.tokens / s for s in secs]), "ids": engine.ids}
        if engine.masked is not None:
            obj["eos_masked_steps"] = engine.masked
        out[name.replace("-", "_")] = obj
    if len(out) == 1:
        return next(iter(out.values()))
    same, diff = None, None
    if "genai" in out and "ort" in out:
        a, b = out["genai"]["ids"], out["ort"]["ids"]
        same, diff = a == b, next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    return {"subcommand": "decode", "package": args.package, "prompt_len": len(prompt), "tokens": args.tokens,
            **out, "same_ids": same, "first_difference": diff}


def decode_serve(args) -> None:
    """Loads and warms the engines, prints {"ready": ..., "ids": {engine: ids}, "eos_masked_steps": ...}, then
    for each engine name read from stdin runs it once and prints {"engine": name, "seconds": s, "steps": [...]}; an
    empty line or end of input ends it. The caller times its own loop between these runs, so both sides see the
    same machine."""
    engines = engines_of(args, prompt_of(args))
    emit({"ready": True, "ids": {n: e.ids for n, e in engines.items()},
          "eos_masked_steps": {n: e.masked for n, e in engines.items() if e.masked is not None}})
    for line in sys.stdin:
        name = line.strip()
        if not name:
            break
        if name not in engines:
            raise SystemExit(f"decode-serve: no engine `{name}` (loaded: {', '.join(engines)})")
        seconds, _, steps, inside = engines[name].run()
        emit({"engine": name, "seconds": seconds, "steps": steps, "inside_seconds": inside})


# ---------------------------------------------------------------------------------------------------------------
# prefill


def prefill(args):
    dec = OrtDecoder(Path(args.package), args.threads)
    model = dec.cfg["model"]
    vocab, bos = int(model["vocab_size"]), int(model.get("bos_token_id", 2))
    rows = []
    for length in int_list(args.lengths):
        ids = [bos] + [4 + (7 * i) % (vocab - 4) for i in range(length - 1)]
        try:
            first = int(dec.prefill(ids)[0][0, -1].argmax())  # warm-up
            secs = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                dec.prefill(ids)
                secs.append(time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 - ORT raises its own types; report and go on
            rows.append({"length": length, "error": str(e).strip().splitlines()[0][:500]})
            continue
        rows.append({"length": length, "seconds": stats(secs), "tokens_per_s": stats([length / s for s in secs]),
                     "first_id": first})
    return {"subcommand": "prefill", "package": args.package, "threads": args.threads, "repeats": args.repeats,
            "lengths": rows}


# ---------------------------------------------------------------------------------------------------------------
# speech


class WhisperGenerate:
    """generate() of one Whisper model on stored features. run(i) -> seconds; the tokens are checked each run."""

    def __init__(self, args):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        import transformers
        from safetensors.torch import load_file

        torch.set_num_threads(args.threads)
        # generate() warns on every call (max_length beside max_new_tokens, Whisper's own suppression processors)
        # and loading draws a progress bar: at each repeat and model that would bury the bench's output.
        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        self.torch = torch
        self.model = transformers.WhisperForConditionalGeneration.from_pretrained(
            args.hf, dtype=torch.float32, local_files_only=True).eval()
        multilingual = getattr(self.model.generation_config, "is_multilingual", False)
        if multilingual and (args.language is None or args.task is None):
            raise SystemExit(f"{args.hf}: a multilingual Whisper needs --language and --task (else generate() "
                             "detects or skips them and decodes another stream)")
        self.kw = dict(language=args.language, task=args.task) if multilingual else {}
        self.max_new = args.max_new_tokens
        self.files = [f for f in args.inputs.split(",") if f]
        self.clips = []  # (input_features, forced prefix)
        for f in self.files:
            t = load_file(f)
            if "input_features" not in t or "input_ids" not in t:
                raise SystemExit(f"{f}: expected tensors `input_features` and `input_ids`, found {sorted(t)}")
            self.clips.append((t["input_features"].to(torch.float32), [int(x) for x in t["input_ids"][0]]))
        self.ids = None
        self.ids = [self._generate(i)[0] for i in range(len(self.clips))]  # warm-up

    def _generate(self, i):
        features, prefix = self.clips[i]
        with self.torch.inference_mode():
            t0 = time.perf_counter()
            out = self.model.generate(features, max_new_tokens=self.max_new, do_sample=False, num_beams=1, **self.kw)
            seconds = time.perf_counter() - t0
        ids = [int(x) for x in out[0]]
        # transformers 5 returns the new tokens only; older versions put the forced prefix first.
        ids = ids[len(prefix):] if ids[:len(prefix)] == prefix else ids
        if self.ids is not None and ids != self.ids[i]:
            raise SystemExit(f"{self.files[i]}: generate()'s tokens changed between runs")
        return ids, seconds

    def run(self, i):
        return self._generate(i)[1]


def speech_serve(args) -> None:
    """Loads the model and runs every clip once, prints {"ready": ..., "clips": [...]}, then for each clip index read
    from stdin runs it once and prints {"clip": i, "seconds": s}; an empty line or end of input ends it. The
    caller times the suite's own run between these, so both sides see the same machine."""
    w = WhisperGenerate(args)
    emit({"ready": True, "clips": [{"inputs": f, "ids": ids} for f, ids in zip(w.files, w.ids)]})
    for line in sys.stdin:
        text = line.strip()
        if not text:
            break
        if not text.isdigit() or int(text) >= len(w.clips):
            raise SystemExit(f"speech-serve: no clip `{text}` (clips 0 to {len(w.clips) - 1})")
        emit({"clip": int(text), "seconds": w.run(int(text))})


# ---------------------------------------------------------------------------------------------------------------
# lmeval


def lmeval(args):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    torch.set_num_threads(args.threads)
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    tasks = [t for t in args.tasks.split(",") if t]
    t0 = time.perf_counter()
    lm = HFLM(pretrained=args.pretrained, dtype="float32", device="cpu", batch_size=args.batch_size)
    load = time.perf_counter() - t0
    manager = TaskManager(include_path=args.include_path, include_defaults=False)
    secs, res = [], None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        res = lm_eval.simple_evaluate(model=lm, tasks=tasks, task_manager=manager, num_fewshot=args.num_fewshot,
                                      limit=args.limit, batch_size=args.batch_size, device="cpu",
                                      log_samples=args.per_item, bootstrap_iters=0, random_seed=0,
                                      numpy_random_seed=1234, torch_random_seed=1234, fewshot_random_seed=1234)
        secs.append(time.perf_counter() - t0)
    n_samples = {t: int(v.get("effective", v.get("original", 0))) for t, v in res.get("n-samples", {}).items()}
    items = sum(n_samples.values())
    results = {t: {k: v for k, v in m.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
               for t, m in res["results"].items()}
    out = {"subcommand": "lmeval", "pretrained": args.pretrained, "tasks": tasks, "include_path": args.include_path,
           "batch_size": args.batch_size, "threads": args.threads, "repeats": args.repeats,
           "num_fewshot": args.num_fewshot, "limit": args.limit, "load_seconds": load, "seconds": stats(secs),
           "items": items, "items_per_s": stats([items / s for s in secs]), "requests": 0,
           "results": results, "n_samples": n_samples}
    requests = 0
    per_item = {}
    for task, samples in (res.get("samples") or {}).items():
        rows = []
        for s in samples:
            requests += len(s.get("resps", []))
            logliks = [float(r[0][0]) if isinstance(r[0], (list, tuple)) else float(r[0]) for r in s["resps"]]
            rows.append({"doc_id": int(s["doc_id"]), "target": s["target"], "pred": int(np.argmax(logliks)),
                         "loglik": logliks})
        per_item[task] = rows
    if args.per_item:
        out["requests"] = requests
        out["per_item"] = per_item
    else:
        out["requests"] = None  # only counted with --per-item (the samples are not kept otherwise)
    return out


# ---------------------------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("decode")
    d.add_argument("--package", required=True)
    d.add_argument("--prompt-ids", required=True)
    d.add_argument("--tokens", type=int, default=128)
    d.add_argument("--repeats", type=int, default=5)
    d.add_argument("--engines", default="genai,ort")
    d.add_argument("--threads", type=int, default=1)
    ds = sub.add_parser("decode-serve")
    for flag, kw in [("--package", dict(required=True)), ("--prompt-ids", dict(required=True)),
                     ("--tokens", dict(type=int, default=128)), ("--engines", dict(default="genai,ort")),
                     ("--threads", dict(type=int, default=1))]:
        ds.add_argument(flag, **kw)
    sp = sub.add_parser("speech-serve")
    sp.add_argument("--hf", required=True)
    sp.add_argument("--inputs", required=True)
    sp.add_argument("--max-new-tokens", type=int, required=True)
    sp.add_argument("--language", default=None)
    sp.add_argument("--task", default=None, choices=["transcribe", "translate"])
    sp.add_argument("--threads", type=int, default=1)
    p = sub.add_parser("prefill")
    p.add_argument("--package", required=True)
    p.add_argument("--lengths", default="16,64,256,512")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    e = sub.add_parser("lmeval")
    e.add_argument("--tasks", required=True)
    e.add_argument("--include-path", required=True)
    e.add_argument("--pretrained", required=True)
    e.add_argument("--batch-size", type=int, default=1)
    e.add_argument("--repeats", type=int, default=1)
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--num-fewshot", type=int, default=None)
    e.add_argument("--limit", type=int, default=None)
    e.add_argument("--per-item", action="store_true")
    args = ap.parse_args()
    if getattr(args, "repeats", 1) < 1:
        raise SystemExit("--repeats must be at least 1")
    if args.cmd == "decode-serve":
        decode_serve(args)
        return
    if args.cmd == "speech-serve":
        speech_serve(args)
        return
    emit({"decode": decode, "prefill": prefill, "lmeval": lmeval}[args.cmd](args))


if __name__ == "__main__":
    main()
