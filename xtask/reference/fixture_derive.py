"""The fixtures' derived (git-ignored) files: which they are, and how --hf-only gets them back from committed data
alone (derive_hf: no seed is drawn, no forward pass runs) and checks them against the sha256 MANIFEST.json records
(rebuild_hf) before putting them in place.
"""
from __future__ import annotations

import json
import os
import shutil
import time

from .common import log, sha256_file

from .fixture_build import TOKENIZER_FILES, WEIGHTS_PACKAGE, normalize_modes, read_back  # noqa: E402
from .fixture_models import MM_MODELS, MODELS, SPEECH_MODELS  # noqa: E402
from .weights import MM_RENAMES, WHISPER_RENAMES  # noqa: E402

# The derived (git-ignored) files of each seeded fixture: rebuilt by --hf-only and verified against
# the sha256 that MANIFEST.json records for them. The text fixtures' hf/ tokenizer files are copies of
# tokenizer/ (save_hf); the multimodal fixture's tokenizer is its own and stays committed.
DERIVED_WEIGHTS = ("hf/model.safetensors",)
DERIVED_TOKENIZER = tuple(f"hf/{f}" for f in TOKENIZER_FILES)
# Derived files of fixtures that another generator owns (rebuilt by that generator: arith.py --derive-only) and
# recorded in MANIFEST.json (write_manifest keeps the sha256 that generator recorded): arith.py's trained
# weights, rebuilt from the initializers of its committed default-f32 package.
ARITH_NAME = "arith-tiny"
FOREIGN_DERIVED = {ARITH_NAME: ("hf/model.safetensors",)}


def derived_files(name):
    """The derived (git-ignored) files of fixture `name`, relative to its directory."""
    if name in MODELS:
        return (*DERIVED_WEIGHTS, *DERIVED_TOKENIZER)
    if name in MM_MODELS or name in SPEECH_MODELS:
        return DERIVED_WEIGHTS
    return FOREIGN_DERIVED.get(name, ())


def read_manifest(out_root):
    path = os.path.join(out_root, "MANIFEST.json")
    if not os.path.isfile(path):
        return None
    with open(path) as fh:
        return json.load(fh)


def derive_hf(name, out_root, stage):
    """<name>/hf/ into `stage` from committed data alone: its committed files, the text fixtures' tokenizer files
    copied from tokenizer/, and model.safetensors read back from the committed f32 package. No seed is drawn and
    no forward pass runs, so every machine derives the same bytes."""
    final = os.path.join(out_root, name, "hf")
    derived = {os.path.relpath(f, "hf") for f in derived_files(name)}
    os.makedirs(stage)
    for f in sorted(os.listdir(final)) if os.path.isdir(final) else []:
        if f not in derived and os.path.isfile(os.path.join(final, f)):
            shutil.copyfile(os.path.join(final, f), os.path.join(stage, f))
    if name in MODELS:
        for f in TOKENIZER_FILES:
            shutil.copyfile(os.path.join(out_root, "tokenizer", f), os.path.join(stage, f))
    read_back(os.path.join(out_root, name), stage, os.path.join(stage, "model.safetensors"), renames(name))
    normalize_modes(stage)


def renames(name):
    """How fixture `name`'s f32 package names the tensors its HF model names otherwise (weights.py)."""
    return MM_RENAMES if name in MM_MODELS else WHISPER_RENAMES if name in SPEECH_MODELS else ()


def rebuild_hf(out_root, names):
    """--hf-only: rebuild <name>/hf/ of each of `names` (no design checks, no ONNX) into a stage
    directory, check every file against MANIFEST.json and only then put it in place."""
    manifest = read_manifest(out_root)
    if manifest is None:
        raise SystemExit(f"--hf-only verifies against {out_root}/MANIFEST.json, which is missing")
    for name in names:
        t0 = time.time()
        prefix = f"{name}/hf/"
        want = {k[len(prefix):]: v for k, v in manifest["sha256"].items() if k.startswith(prefix)}
        if not want:
            raise SystemExit(f"MANIFEST.json records no {prefix} files: build {name} in full first")
        stage = os.path.join(out_root, f".hf-{name}")
        shutil.rmtree(stage, ignore_errors=True)
        try:
            derive_hf(name, out_root, stage)
            got = {os.path.relpath(os.path.join(d, f), stage): sha256_file(os.path.join(d, f))
                   for d, _, fs in os.walk(stage) for f in fs}
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        bad = [f"{prefix}{f}: sha256 {got.get(f, 'missing')} != MANIFEST {want.get(f, 'not recorded')}"
               for f in sorted(set(want) | set(got)) if got.get(f) != want.get(f)]
        if bad:
            shutil.rmtree(stage, ignore_errors=True)
            weights = any(b.startswith(tuple(f"{name}/{w}" for w in DERIVED_WEIGHTS)) for b in bad)
            what = (f"the reference weights read back from {name}/{WEIGHTS_PACKAGE} are not the recorded ones" if weights
                    else "the reference directory no longer reproduces")
            raise SystemExit(
                f"{what}: {'; '.join(bad)}. The weights are a pure function of the committed package (weights.py); "
                f"a mismatch means the package, the committed hf/ files or MANIFEST.json changed without the others: "
                f"restore them (git checkout), or rebuild the fixture and its goldens")
        final = os.path.join(out_root, name, "hf")
        os.makedirs(os.path.dirname(final), exist_ok=True)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(stage, final)
        log(f"{name}: hf/ rebuilt, {len(got)} files match MANIFEST.json in {time.time() - t0:.1f}s")
