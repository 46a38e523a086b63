"""Build the tiny, offline, deterministic fixtures of the conformance suite.

    python -m reference.fixtures --out <repo>/fixtures [--only NAME ...] [--recalibrate-clamps]
    python -m reference.fixtures --out <repo>/fixtures --hf-only [--only MODEL ...] [--threads N]

(run by `cargo xtask fixtures`, which also runs arith.py for arith-tiny). NAME is one of: tokenizer, qwen3-tiny,
llama-tiny, gemma3-tiny, gemma4-tiny, gemma4-mm-tiny (multimodal).

--hf-only derives only the HF reference directories (<model>/hf/: no design checks, no mobius builds, no
quantization) and verifies every file against MANIFEST.json. The weights (<model>/hf/model.safetensors) and the
text fixtures' copies of the shared tokenizer (<model>/hf/tokenizer*.json) are derived, not committed (.gitignore),
and this is how a checkout gets them back. The weights are read back from the committed onnx/default-f32 package
(weights.py), never re-seeded: torch.randn's float32 bits depend on the CPU path (AVX2/AVX-512 against
ATEN_CPU_CAPABILITY=default), so only a derivation from committed bytes gives every machine the same file. It fails
if they do not match byte for byte (MANIFEST.json is left alone). arith.py's one derived file,
arith-tiny/hf/model.safetensors (the trained weights, committed inside arith-tiny/onnx/default-f32), is derived the
same way by arith.py itself (`--derive-only`; `cargo xtask fixtures --hf-only` runs both).

A full build (no --hf-only) creates a fixture: it seeds the model, builds its packages and checks that the f32
package gives the seeded weights back byte for byte (check_derivable), so that every later derivation can.

Layout written under --out:

    tokenizer/                      512-token byte-level BPE (ids 0..3 = <pad> <eos> <bos> <unk>)
    <model>/hf/                     seeded random-weight HF causal LM, fp32 safetensors + tokenizer (a copy of
                                    tokenizer/); model.safetensors and the tokenizer files are derived:
                                    git-ignored, sha256 in MANIFEST.json
    <model>/onnx/default-f32/       mobius build --runtime ort-genai --ep default
    <model>/onnx/cpu-f32/           mobius build --runtime ort-genai --ep cpu (GroupQueryAttention)
    <model>/onnx/default-f16/       the --ep default build with --dtype f16; mobius-onnx 0.1.0 builds --ep cpu
                                    byte-identically (checked at every build), so it is also the cpu-f16
                                    package (MANIFEST.json "aliases")
    <model>/onnx/default-bf16/      ... with --dtype bf16, likewise cpu-bf16 (ONNX Runtime's CPU EP cannot run
                                    them: no bf16 MatMul kernel; they are for GPU EPs and load-failure checks)
    <model>/onnx/{default,cpu}-int4/
                                    <model>/onnx/{ep}-f32 with every MatMul that has a constant weight made
                                    MatMulNBits and every token-embedding Gather made GatherBlockQuantized by
                                    ONNX Runtime's MatMulNBitsQuantizer (INT4 below); the RoPE cos/sin Gathers
                                    stay f32
                                    (every package holds model.onnx, model.onnx.data and genai_config.json
                                    only: no copy of the tokenizer files, which are those of tokenizer/)
    gemma4-mm-tiny/hf/              seeded Gemma4ForConditionalGeneration (text like gemma4-tiny + 2-layer
                                    vision and audio encoders with calibrated clamps) + Gemma4Processor
    gemma4-mm-tiny/onnx/default-f32/
                                    mobius ort-genai packages: decoder/ embedding/ vision_encoder/
                                    audio_encoder/ + genai_config.json (model.type gemma4), processor
                                    files and a copy of hf/'s tokenizer.json and tokenizer_config.json:
                                    a package onnxruntime-genai runs (complete_mm_package)
    media/                          the real jpeg and flac the multimodal fixture is designed on (input,
                                    committed; never written by this script)
    MANIFEST.json                   versions, recipe and sha256 of every file (the derived files too, and
                                    arith.py's derived arith-tiny/hf/model.safetensors)

Nothing is downloaded: the tokenizer trains on the Python standard library's own sources, the
models are random, the media are committed, and the ONNX packages come from the local mobius
builder. Running it twice with the same interpreter and pinned packages (requirements.txt) gives
byte-identical files.
"""
from __future__ import annotations

import argparse
import os
import shutil
import time

from .common import log

import torch  # noqa: E402

from . import whisper_fixture  # noqa: E402
from .fixture_derive import derived_files, rebuild_hf  # noqa: E402
from .fixture_manifest import write_manifest  # noqa: E402
from .fixture_models import MM_MODELS, MM_NAME, MODELS, SPEECH_MODELS  # noqa: E402
from .fixture_tokenizer import build_tokenizer  # noqa: E402
from .mm_clamps import CLAMPS_FILE  # noqa: E402
from .mm_fixture import build_mm_model  # noqa: E402
from .text_fixture import build_model  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="fixtures directory (created if missing)")
    names = ["tokenizer", *MODELS, *MM_MODELS, *SPEECH_MODELS]
    ap.add_argument("--only", nargs="+", choices=names, metavar="NAME", help=f"build only these ({', '.join(names)})")
    ap.add_argument("--hf-only", action="store_true",
                    help="rebuild only the models' hf/ directories (the derived weights and tokenizer copies) "
                         "and verify them against MANIFEST.json")
    ap.add_argument("--recalibrate-clamps", action="store_true",
                    help=f"calibrate {MM_NAME}'s clamp bounds on the media again (forward passes: the values depend on "
                         f"the CPU) and commit them ({MM_NAME}/{CLAMPS_FILE}); a full build only, then regenerate the "
                         f"goldens")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (default 1); a derivation gives the same bytes with any number")
    args = ap.parse_args(argv)
    if args.threads < 1:
        raise SystemExit(f"--threads {args.threads}: expected 1 or more")
    if args.recalibrate_clamps and (args.hf_only or MM_NAME not in (args.only or [MM_NAME])):
        raise SystemExit(f"--recalibrate-clamps rebuilds {MM_NAME} in full: not with --hf-only, and --only must name it")
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    sel = set(args.only or names)
    t0 = time.time()
    tok_dir = os.path.join(out, "tokenizer")
    if args.hf_only:
        if "tokenizer" in sel and args.only:
            raise SystemExit("--hf-only rebuilds model hf/ directories only (not the tokenizer)")
        if not os.path.isfile(os.path.join(tok_dir, "tokenizer.json")):
            raise SystemExit(f"--hf-only needs the committed {tok_dir}")
        rebuild_hf(out, [n for n in (*MODELS, *MM_MODELS, *SPEECH_MODELS) if n in sel])
        log(f"done in {time.time() - t0:.1f}s")
        return
    if "tokenizer" in sel or not os.path.isfile(os.path.join(tok_dir, "tokenizer.json")):
        shutil.rmtree(tok_dir, ignore_errors=True)
        build_tokenizer(tok_dir)
    for name in MODELS:
        if name in sel:
            build_model(name, out)
    for name in MM_MODELS:
        if name in sel:
            build_mm_model(name, out, recalibrate=args.recalibrate_clamps)
    for name in SPEECH_MODELS:
        if name in sel:
            whisper_fixture.build(name, out)
    # The models not rebuilt keep their recorded weights: get back any that this checkout lacks
    # (derived, not committed) so that MANIFEST.json still records them.
    lacking = [n for n in (*MODELS, *MM_MODELS, *SPEECH_MODELS) if n not in sel and os.path.isdir(os.path.join(out, n, "onnx"))
               and not all(os.path.isfile(os.path.join(out, n, w)) for w in derived_files(n))]
    if lacking:
        rebuild_hf(out, lacking)
    write_manifest(out)
    log(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
