"""Builds the ONNX Runtime GenAI packages of a Hugging Face folder, one per variant, as the bundled fixtures' are
built: `mobius build --runtime ort-genai --ep <ep> [--dtype <dtype>]` for f32, f16 and bf16, and for int4 the
project's recipe (fixture_build.quantize_int4: ONNX Runtime's MatMulNBitsQuantizer over the same ep's f32 build).

    python -m reference.package_build HF_DIR OUT_DIR EP-DTYPE [EP-DTYPE ...]      (run by `cargo xtask new-case`)

Writes OUT_DIR/<ep>-<dtype> for each (an int4 variant also writes, or reuses, OUT_DIR/<ep>-f32, its source), and
prints one line per package with its time. mobius' `cpu` flavour is `--ep cpu`.
"""
import os
import sys
import time

from . import common  # noqa: F401  (the environment preamble)

from . import fixture_build  # noqa: E402

EPS = ("default", "cpu", "cuda")
DTYPES = ("f32", "f16", "bf16", "int4")


def build(hf, out, ep, dtype):
    """One package: OUT/<ep>-<dtype>. mobius runs in the folder both paths share, with relative paths (it names the
    graph after --config)."""
    target = os.path.join(out, f"{ep}-{dtype}")
    if dtype == "int4":
        source = os.path.join(out, f"{ep}-f32")
        if not os.path.isfile(os.path.join(source, "model.onnx")):
            build(hf, out, ep, "f32")
        t0 = time.time()
        fixture_build.quantize_int4(source, target)
        print(f"BUILT      {target} (int4 of {ep}-f32) in {time.time() - t0:.1f}s", flush=True)
        return
    root = os.path.commonpath([hf, out])
    t0 = time.time()
    fixture_build.mobius_build(root, os.path.relpath(hf, root), os.path.relpath(target, root), ep,
                               dtype=None if dtype == "f32" else dtype)
    print(f"BUILT      {target} (mobius --ep {ep}{'' if dtype == 'f32' else ' --dtype ' + dtype}) in "
          f"{time.time() - t0:.1f}s", flush=True)


def main(argv):
    if len(argv) < 3:
        raise SystemExit(f"usage: python -m reference.package_build HF_DIR OUT_DIR EP-DTYPE [EP-DTYPE ...]")
    hf, out = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    if not os.path.isfile(os.path.join(hf, "config.json")):
        raise SystemExit(f"{hf}: no config.json: not a Hugging Face model folder")
    variants = []
    for v in argv[2:]:
        ep, _, dtype = v.partition("-")
        if ep not in EPS or dtype not in DTYPES:
            raise SystemExit(f"variant {v!r}: expected <ep>-<dtype>, ep one of {EPS}, dtype one of {DTYPES}")
        variants.append((ep, dtype))
    os.makedirs(out, exist_ok=True)
    # f32 first: an int4 variant is quantized from its ep's f32 build.
    for ep, dtype in sorted(variants, key=lambda v: v[1] == "int4"):
        build(hf, out, ep, dtype)


if __name__ == "__main__":
    main(sys.argv[1:])
