"""lm-evaluation-harness's own task files (arc_easy, hellaswag, piqa, mmlu_abstract_algebra) on small local data,
as lm-eval runs them; writes what the suite's tests compare with (tests/data/lmeval/taskfiles.json). Run once,
offline, from the repository root:

    cargo xtask reference-data --only lmeval-taskfiles
    (python -m reference.lmeval.taskfiles [--model fixtures/qwen3-tiny/hf] [--out ...])

The task files are lm-eval's own, from its wheel (tests/data/lmeval/lm_eval_tasks holds byte-identical copies,
which this script checks). Only the download is replaced: each dataset is read from the Hugging Face hub cache
layout under tests/data/lmeval/hub (`datasets--<org>--<name>/snapshots/fixture/<config or data>/<split>-*.jsonl`),
written for the tests in the datasets' real schemas. Everything else - `include:`, Jinja templates,
`process_docs: !function utils.process_docs` (hellaswag), description, first_n few-shot - is lm-eval's code.
Per document: lm-eval's context and continuations, the token ids of its own `_encode_pair`, its log-likelihoods
(`hf`, float32, batch 1) and acc / acc_norm.
"""
from __future__ import annotations

import argparse
import filecmp
import glob
import json
import os
import sys

from .. import common  # noqa: F401  (the environment preamble, before torch)

import datasets  # noqa: E402
import lm_eval  # noqa: E402
import torch  # noqa: E402
from lm_eval.api.task import ConfigurableTask  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

HUB = "tests/data/lmeval/hub"
COPIES = "tests/data/lmeval/lm_eval_tasks"
TASKS = {"arc_easy": 0, "hellaswag": 0, "piqa": 0, "mmlu_abstract_algebra": 2}


def local_download(self, dataset_kwargs=None, **kwargs):
    repo = os.path.join(HUB, "datasets--" + self.config.dataset_path.replace("/", "--"), "snapshots", "fixture")
    sub = os.path.join(repo, self.config.dataset_name or "data")
    files = {}
    for f in sorted(glob.glob(os.path.join(sub, "*-*.jsonl"))):
        files.setdefault(os.path.basename(f).split("-")[0], []).append(f)
    self.dataset = datasets.DatasetDict({s: datasets.Dataset.from_list([json.loads(line) for p in fs for line in open(p)])
                                         for s, fs in files.items()})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="fixtures/qwen3-tiny/hf")
    ap.add_argument("--out", default="tests/data/lmeval/taskfiles.json")
    args = ap.parse_args()
    wheel = os.path.join(os.path.dirname(lm_eval.__file__), "tasks")
    for copy in glob.glob(os.path.join(COPIES, "**", "*"), recursive=True):
        if os.path.isfile(copy):
            orig = os.path.join(wheel, os.path.relpath(copy, COPIES))
            if not filecmp.cmp(copy, orig, shallow=False):
                raise SystemExit(f"{copy} differs from lm-eval's {orig}")
    ConfigurableTask.download = local_download
    torch.set_num_threads(1)
    lm = HFLM(pretrained=args.model, dtype="float32", device="cpu", batch_size=1)
    tm = TaskManager()
    out = {"generator": "xtask/reference/lmeval/taskfiles.py", "lm_eval": lm_eval.__version__, "model": args.model,
           "tasks": {}}
    for task, shots in TASKS.items():
        res = lm_eval.simple_evaluate(model=lm, tasks=[task], task_manager=tm, num_fewshot=shots, log_samples=True,
                                      random_seed=0, numpy_random_seed=0, torch_random_seed=0, fewshot_random_seed=0)
        docs = []
        for s in sorted(res["samples"][task], key=lambda s: s["doc_id"]):
            ctx = s["arguments"][0][0]
            conts = [a[1] for a in s["arguments"]]
            pairs = [lm._encode_pair(ctx, c) for c in conts]
            docs.append({"doc_id": s["doc_id"], "context": ctx, "continuations": conts, "target": s["target"],
                         "context_ids": pairs[0][0], "continuation_ids": [p[1] for p in pairs],
                         "logliks": [float(r[0][0]) for r in s["resps"]], "acc": s["acc"],
                         "acc_norm": s.get("acc_norm")})
        results = {k.split(",")[0]: v for k, v in res["results"][task].items() if "," in k and "stderr" not in k}
        out["tasks"][task] = {"num_fewshot": shots, "results": results, "docs": docs}
        print(task, results, file=sys.stderr, flush=True)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1, ensure_ascii=True)
        fh.write("\n")


if __name__ == "__main__":
    main()
