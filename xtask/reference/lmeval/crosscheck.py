#!/usr/bin/env python3
"""Cross-check loglik.py against lm-evaluation-harness on the arith tasks (report only).

    python xtask/reference/lmeval/crosscheck.py [--work DIR] [--batch-sizes 1 8] [--shots 0 3]

Run from the repository root with the reference venv (lm-eval 0.4.13 installed). For every batch size and
shot count: `lm_eval --model hf` (fp32, CPU) on the tasks in this folder with --log_samples, timed; then the
same requests built by arith.build_requests (lm-eval's tokenization) through `loglik.py REQUESTS.json` as the
gate's baseline would call it; then per request the difference of the log-likelihoods and of is_greedy, and
lm-eval's acc / acc_norm against arith.scores on loglik.py's numbers. Prints one JSON report.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.dirname(HERE)
sys.path.insert(0, REF)
import arith as A  # noqa: E402

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
RATE = re.compile(r"Running loglikelihood requests: 100%\|[^|]*\| (\d+)/\d+ \[([0-9:]+)<[^,]*, +([0-9.]+)it/s\]")


def run_lmeval(hf, tasks, shots, bs, out):
    cmd = [os.path.join(os.path.dirname(sys.executable), "lm_eval"), "--model", "hf",
           "--model_args", f"pretrained={hf},dtype=float32", "--tasks", ",".join(tasks),
           "--include_path", HERE, "--device", "cpu", "--batch_size", str(bs), "--num_fewshot", str(shots),
           "--log_samples", "--output_path", out, "--seed", "0"]
    t0 = time.time()
    r = subprocess.run(cmd, env={**ENV, "HF_DATASETS_CACHE": os.path.join(out, "hf-datasets")},
                       capture_output=True, text=True)
    wall = time.time() - t0
    if r.returncode:
        sys.stderr.write(r.stderr[-3000:])
        raise SystemExit(f"lm_eval failed: {' '.join(cmd)}")
    m = RATE.findall(r.stderr)
    results = json.load(open(sorted(glob.glob(os.path.join(out, "*", "results_*.json")))[-1]))
    samples = {}
    for t in tasks:
        f = sorted(glob.glob(os.path.join(out, "*", f"samples_{t}_*.jsonl")))[-1]
        samples[t] = sorted((json.loads(l) for l in open(f)), key=lambda s: s["doc_id"])
    return {"wall_s": round(wall, 1), "requests": int(m[-1][0]) if m else None,
            "requests_per_s": float(m[-1][2]) if m else None}, results, samples


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixtures", default="fixtures")
    ap.add_argument("--work", default=None)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--shots", type=int, nargs="+", default=[0, 3])
    args = ap.parse_args()
    import numpy as np
    from safetensors.numpy import load_file

    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="lmeval-crosscheck-"))
    os.makedirs(work, exist_ok=True)
    hf = os.path.abspath(os.path.join(args.fixtures, A.NAME, "hf"))
    tok = A.check_tokenizer(hf)
    items = {k: {s: [json.loads(l) for l in open(os.path.join(args.fixtures, "tasks", n, f"{s}.jsonl"))]
                 for s in ("train", "test")} for k, n in A.TASKS.items()}
    tasks = list(A.TASKS.values())
    report = {"work": work, "runs": {}}
    for shots in args.shots:
        # loglik.py on the requests lm-eval makes
        jobs, reqs = [], {}
        for key, name in A.TASKS.items():
            reqs[name], _ = A.build_requests(tok, items[key]["test"], A.fewshot_prefix(items[key]["train"], shots))
            jobs.append({"reference": hf, "out": os.path.join(work, f"loglik-{name}-{shots}shot.safetensors"),
                         "requests": reqs[name]})
        spec = os.path.join(work, f"requests-{shots}shot.json")
        json.dump({"jobs": jobs}, open(spec, "w"))
        t0 = time.time()
        subprocess.run([sys.executable, os.path.join(REF, "loglik.py"), spec], env=ENV, check=True,
                       capture_output=True)
        ours_wall = time.time() - t0
        ours = {j["out"]: load_file(j["out"]) for j in jobs}
        for bs in args.batch_sizes:
            out = os.path.join(work, f"lmeval-bs{bs}-{shots}shot")
            timing, results, samples = run_lmeval(hf, tasks, shots, bs, out)
            run = {"lm_eval": timing, "loglik_py_wall_s": round(ours_wall, 1), "tasks": {}}
            for (key, name), job in zip(A.TASKS.items(), jobs):
                o = ours[job["out"]]
                lm_ll = np.array([float(r[0][0]) for s in samples[name] for r in s["resps"]])
                lm_gr = np.array([r[0][1] == "True" for s in samples[name] for r in s["resps"]])
                ctxs = [s["arguments"]["gen_args_0"]["arg_0"] for s in samples[name]]
                want = [A.fewshot_prefix(items[key]["train"], shots) + it["question"] for it in items[key]["test"]]
                sc = A.scores(items[key]["test"], o["loglik"])
                res = results["results"][name]
                run["tasks"][name] = {
                    "n_requests": int(len(lm_ll)),
                    "contexts_equal": ctxs == want,
                    "max_abs_dloglik": float(np.abs(lm_ll - o["loglik"].astype(np.float64)).max()),
                    "bitwise_equal": int((lm_ll.astype(np.float32) == o["loglik"]).sum()),
                    "is_greedy_equal": int((lm_gr == o["is_greedy"].astype(bool)).sum()),
                    "lm_eval": {"acc": res["acc,none"], "acc_norm": res["acc_norm,none"]},
                    "loglik_py": {"acc": sc["acc"], "acc_norm": sc["acc_norm"]},
                }
            report["runs"][f"bs{bs}/{shots}-shot"] = run
            print(json.dumps({f"bs{bs}/{shots}-shot": run}), flush=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
