"""What lm-evaluation-harness itself does in the corners the gate must agree with it on; writes the answers for
the suite's tests (tests/data/lmeval/corners.json). Run once, offline, from the repository root:

    cargo xtask reference-data --only lmeval-corners
    (python -m reference.lmeval.corners [--limit 12] [--out tests/data/lmeval/corners.json])

Needs the reference venv (lm-eval 0.4.13) and fixtures/arith-tiny/hf/model.safetensors (derived first by the task). Each task of tests/data/lmeval/tasks runs through `lm_eval.simple_evaluate` on the `hf` model with
--log_samples; per document the JSON keeps lm-eval's context and continuations, the token ids its own
`_encode_pair` / `tok_encode` give them, its log-likelihoods, raw and filtered generations and per-item metrics.
It also records Python's `str.isspace` set (what `str.rstrip` and `str.strip` remove).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys

from .. import common  # noqa: F401  (the environment preamble, before torch)

import lm_eval  # noqa: E402
import torch  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def collect(lm, samples, output_type):
    docs = []
    for s in sorted(samples, key=lambda s: s["doc_id"]):
        args = list(s["arguments"])  # in memory: one (context, continuation or gen_kwargs) tuple per request
        ctx = args[0][0]
        d = {"doc_id": s["doc_id"], "context": ctx, "target": s["target"]}
        if output_type == "multiple_choice":
            conts = [a[1] for a in args]
            d["continuations"] = conts
            pairs = [lm._encode_pair(ctx, c) for c in conts]
            d["context_ids"] = pairs[0][0]
            d["continuation_ids"] = [p[1] for p in pairs]
            d["logliks"] = [float(r[0][0]) for r in s["resps"]]
            d["acc"] = s.get("acc")
            d["acc_norm"] = s.get("acc_norm")
        else:
            d["context_ids"] = lm.tok_encode(ctx)
            d["generation"] = s["resps"][0][0]
            d["filtered"] = s["filtered_resps"][0]
            d["exact_match"] = s.get("exact_match")
        docs.append(d)
    return docs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=12)
    ap.add_argument("--model", default="fixtures/arith-tiny/hf")
    ap.add_argument("--tasks", default="tests/data/lmeval/tasks")
    ap.add_argument("--out", default="tests/data/lmeval/corners.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    lm = HFLM(pretrained=args.model, dtype="float32", device="cpu", batch_size=1)
    tm = TaskManager(include_path=os.path.abspath(args.tasks))
    out = {"generator": "xtask/reference/lmeval/corners.py", "lm_eval": lm_eval.__version__,
           "model": args.model, "limit": args.limit,
           "python_whitespace": [c for c in range(0x110000) if chr(c).isspace()],
           "prefix_token": lm.tokenizer.decode(lm.prefix_token_id), "tasks": {}}
    for path in sorted(glob.glob(os.path.join(args.tasks, "*.yaml"))):
        name = os.path.splitext(os.path.basename(path))[0]
        import yaml
        cfg = yaml.safe_load(open(path))
        res = lm_eval.simple_evaluate(model=lm, tasks=[cfg["task"]], task_manager=tm, limit=args.limit,
                                      log_samples=True, random_seed=0, numpy_random_seed=0, torch_random_seed=0,
                                      fewshot_random_seed=0)
        task = cfg["task"]
        results = {k.split(",")[0]: v for k, v in res["results"][task].items() if not k.endswith("stderr") and "," in k}
        out["tasks"][name] = {"task": task, "file": os.path.relpath(path), "results": results,
                              "docs": collect(lm, res["samples"][task], cfg["output_type"])}
        print(name, results, file=sys.stderr, flush=True)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1, ensure_ascii=True)
        fh.write("\n")


if __name__ == "__main__":
    main()
