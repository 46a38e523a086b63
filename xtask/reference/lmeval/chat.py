"""lm-evaluation-harness 0.4.13's chat requests: its own task files (arc_easy 0-shot, mmlu_abstract_algebra 2-shot)
on the small local data of taskfiles.py, run with `--apply_chat_template` (as is, with `--fewshot_as_multiturn`, and
with a `--system_instruction`) on SmolLM2-135M-Instruct (the real tier's folder, its chat template): lm-eval's
context and continuations per document and the token ids of its own `_encode_pair`, which the suite's requests must
equal (tests/data/lmeval/chat.json; suite/tests/lmeval_tasks.rs). Run from the repository root, after `cargo xtask
real`:

    cargo xtask reference-data --only lmeval-chat
"""
from __future__ import annotations

import json
import sys

from .. import common  # noqa: F401  (the environment preamble, before torch)

import lm_eval  # noqa: E402
import torch  # noqa: E402
from lm_eval.api.task import ConfigurableTask  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from .taskfiles import local_download  # noqa: E402

MODEL = "target/real/smollm2-135m/hf"
TASKS = {"arc_easy": 0, "mmlu_abstract_algebra": 2}
SYSTEM = "Answer with the letter or the words of the right choice."
MODES = {
    "chat": dict(apply_chat_template=True, fewshot_as_multiturn=False),
    "multiturn": dict(apply_chat_template=True, fewshot_as_multiturn=True),
    "system": dict(apply_chat_template=True, fewshot_as_multiturn=True, system_instruction=SYSTEM),
}


def main():
    ConfigurableTask.download = local_download
    torch.set_num_threads(1)
    lm = HFLM(pretrained=MODEL, dtype="float32", device="cpu", batch_size=1)
    tm = TaskManager()
    out = {"generator": "xtask/reference/lmeval/chat.py", "lm_eval": lm_eval.__version__, "model": MODEL,
           "system_instruction": SYSTEM, "runs": []}
    for mode, kwargs in MODES.items():
        for task, shots in TASKS.items():
            if kwargs.get("fewshot_as_multiturn") and shots == 0 and "system_instruction" not in kwargs:
                continue
            res = lm_eval.simple_evaluate(model=lm, tasks=[task], task_manager=tm, num_fewshot=shots, log_samples=True,
                                          random_seed=0, numpy_random_seed=0, torch_random_seed=0,
                                          fewshot_random_seed=0, limit=4, **kwargs)
            docs = []
            for s in sorted(res["samples"][task], key=lambda s: s["doc_id"]):
                ctx = s["arguments"][0][0]
                conts = [a[1] for a in s["arguments"]]
                pairs = [lm._encode_pair(ctx, c) for c in conts]
                docs.append({"doc_id": s["doc_id"], "context": ctx, "continuations": conts,
                             "context_ids": pairs[0][0], "continuation_ids": [p[1] for p in pairs]})
            out["runs"].append({"mode": mode, "task": task, "num_fewshot": shots, **{k: v for k, v in kwargs.items()},
                                "docs": docs})
            print(mode, task, len(docs), file=sys.stderr, flush=True)
    with open("tests/data/lmeval/chat.json", "w") as fh:
        json.dump(out, fh, indent=1, ensure_ascii=True)
        fh.write("\n")


if __name__ == "__main__":
    main()
