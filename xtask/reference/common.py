"""What every reference module shares: the environment preamble, logging, hashing, torch's deterministic set-up, the
safetensors writer, the raw format's version and the one EOS rule.

Import it before torch or transformers (`from . import common` first): the preamble sets the environment they read
when they load (offline, no progress bars, one OpenMP thread unless the caller chose).
"""
from __future__ import annotations

import hashlib
import json
import os

for _key, _value in (("HF_HUB_OFFLINE", "1"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1"), ("TRANSFORMERS_OFFLINE", "1"),
                     ("HF_DATASETS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"), ("OMP_NUM_THREADS", "1"),
                     ("CUBLAS_WORKSPACE_CONFIG", ":4096:8"), ("TRANSFORMERS_VERBOSITY", "error")):
    os.environ.setdefault(_key, _value)

# The version of the raw reference outputs goldens.py hands to xtask/src/regen.rs (safetensors metadata `format`),
# which refuses any other: bump both together when a tensor or metadata field changes meaning.
RAW_FORMAT = "golden-raw-v1"


class ReferenceError(Exception):
    """A job the reference cannot run as asked; the message names the field or file."""


def log(msg):
    print(msg, flush=True)


def sha256_file(path, chunk=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def portable_env():
    """The environment for a subprocess that must write the same bytes on any x86-64 machine: numpy and torch on
    their baseline kernels. numpy dispatches float32 sin/cos to SIMD code chosen for the CPU (AVX2, AVX-512), and
    each gives other last bits: mobius computes its RoPE tables that way, so its packages would differ from machine
    to machine. With every dispatched feature disabled numpy runs its baseline code, and ATEN_CPU_CAPABILITY=default
    does the same for torch."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__
    except ImportError:  # numpy 1.x
        from numpy.core._multiarray_umath import __cpu_dispatch__
    return dict(os.environ, ATEN_CPU_CAPABILITY="default", NPY_DISABLE_CPU_FEATURES=" ".join(__cpu_dispatch__))


def deterministic_torch(threads=1):
    """One intra-op thread (or `threads`), one inter-op thread, deterministic kernels, seed 0."""
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # only settable once, before any parallel work
        pass
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)


def save_safetensors(tensors, metadata, path):
    """safetensors.numpy.save, with the JSON header re-serialised with sorted keys: safetensors keeps
    __metadata__ in a hash map, so its key order (and the file bytes) would change run to run."""
    from safetensors.numpy import save as st_save

    raw = st_save(tensors, metadata=metadata)
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    h = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    h += b" " * (-len(h) % 8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(len(h).to_bytes(8, "little") + h + data)


def _ids(value, what):
    if isinstance(value, bool) or value is None:
        raise ReferenceError(f"{what} is {value!r}, expected a token id or a list of them")
    if isinstance(value, int):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(e, int) and not isinstance(e, bool) and e >= 0 for e in value):
        raise ReferenceError(f"{what} is {value!r}, expected a token id or a list of them")
    return list(value)


def eos_ids(case_eos, genai_config):
    """The EOS ids a stream stops at, the rule the suite's runner follows (suite/src/trial.rs `eos_ids`): the case's
    `generation.eos_token_id`, else the package's genai_config.json `model.eos_token_id` (an id or a list), else none
    (the stream runs to its token budget). `genai_config`: the file's path, or None when the case has no local
    package."""
    if case_eos is not None:
        return _ids(case_eos, "the case's generation.eos_token_id")
    if genai_config is None:
        return []
    try:
        with open(genai_config) as fh:
            cfg = json.load(fh)
    except (OSError, json.JSONDecodeError) as e:
        raise ReferenceError(f"{genai_config}: {e}")
    model = cfg.get("model") if isinstance(cfg, dict) else None
    if not isinstance(model, dict) or model.get("eos_token_id") is None:
        return []
    return _ids(model["eos_token_id"], f"{genai_config}: field `model.eos_token_id`")


def run_jobs(argv, run_job):
    """`python -m reference.<module> JOBS.json`: every job of the file's `jobs` list through `run_job` (which returns
    the job's one line, or raises ReferenceError naming what is wrong), torch deterministic, each line timed; exits
    non-zero naming how many failed."""
    import time

    if len(argv) != 2:
        raise SystemExit(f"usage: {argv[0]} JOBS.json")
    with open(argv[1]) as fh:
        spec = json.load(fh)
    jobs = spec.get("jobs") if isinstance(spec, dict) else None
    if not isinstance(jobs, list):
        raise SystemExit(f"{argv[1]}: expected an object with a 'jobs' list")
    import transformers

    deterministic_torch()
    transformers.logging.set_verbosity_error()
    failed = 0
    for i, job in enumerate(jobs):
        name = job.get("case", f"#{i}") if isinstance(job, dict) else f"#{i}"
        t0 = time.time()
        try:
            if not isinstance(job, dict):
                raise ReferenceError("job is not an object")
            line = run_job(job)
            print(f"{line} ({time.time() - t0:.1f}s)", flush=True)
        except ReferenceError as e:
            failed += 1
            print(f"{name}: ERROR {e}", flush=True)
    if failed:
        raise SystemExit(f"{failed} of {len(jobs)} jobs failed")
