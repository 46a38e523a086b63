"""How a fixture is built, whoever designs it (fixtures.py, whisper_fixture.py, arith.py, phi3_tiny.py, real.py): the
mobius build of a Hugging Face folder into an ONNX Runtime GenAI package, the int4 recipe every fixture's int4
package follows, and the check that a new fixture's f32 package gives its seeded weights back byte for byte (so that
every later derivation, weights.py, can).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from .common import log, portable_env, sha256_file

import numpy as np  # noqa: E402

from . import weights  # noqa: E402

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# What an ONNX package stores (mobius_build drops the rest). No package stores a copy of the tokenizer files
# (TOKENIZER_FILES; mobius writes them into every package it builds): the text fixtures share tokenizer/ (the
# cases read it from there), the multimodal one has its own in hf/ (with the processor files).
PACKAGE_KEEP = ("model.onnx", "model.onnx.data", "genai_config.json")
# The int4 recipe (ONNX Runtime's MatMulNBitsQuantizer; text_fixture.py's variants say why these settings).
INT4 = dict(bits=4, block_size=32, is_symmetric=True, accuracy_level=None, op_types_to_quantize=["MatMul", "Gather"],
            quant_axes=[["MatMul", 0], ["Gather", 1]])
# The committed package the reference weights are read back from (weights.py), per fixture.
WEIGHTS_PACKAGE = "onnx/default-f32"


def normalize_modes(root):
    for dirpath, _, filenames in os.walk(root):
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o644)


def mobius_build(root, hf_rel, out_rel, ep, keep_all=False, dtype=None):
    """mobius build of root/hf_rel into root/out_rel. Runs inside `root` with relative paths: mobius
    names the ONNX graph after the --config path, so absolute paths would leak into model.onnx.
    keep_all: keep everything mobius writes (the multimodal package: sub-model folders and the
    processor files that genai_config.json names). dtype: mobius --dtype (None: its default, f32)."""
    cmd = [sys.executable, "-m", "mobius", "build", "--config", hf_rel, out_rel,
           "--runtime", "ort-genai", "--ep", ep]
    if dtype is not None:
        cmd += ["--dtype", dtype]
    t0 = time.time()
    # Baseline numpy/torch kernels: mobius' RoPE tables (numpy float32 cos/sin) are then the same on any machine.
    r = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=portable_env())
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:] + r.stderr[-4000:])
        raise SystemExit(f"mobius build failed ({r.returncode}) in {root}: {' '.join(cmd)}")
    out_dir = os.path.join(root, out_rel)
    # Keep what a runtime needs: the graph, its external data and genai_config (PACKAGE_KEEP; keep_all: also
    # the sub-model folders and processor files), never the tokenizer files (see PACKAGE_KEEP).
    for f in sorted(os.listdir(out_dir)):
        if f in TOKENIZER_FILES or (not keep_all and not f.startswith(PACKAGE_KEEP)):
            p = os.path.join(out_dir, f)
            log(f"  dropping {p}")
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    normalize_modes(out_dir)
    log(f"  built {out_rel} (--ep {ep}{f' --dtype {dtype}' if dtype else ''}) in {time.time() - t0:.1f}s")


def mobius_source(hf_dir, dst, head="lm_head.weight", to="model.language_model.lm_head.weight"):
    """A copy of hf_dir that mobius-onnx 0.1.0 can build: the untied LM head `head` renamed to `to`, where its
    weight loader looks for it (fixture_manifest.MOBIUS_WORKAROUNDS; by default the Gemma-4 multimodal one's)."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(hf_dir, dst)
    path = os.path.join(dst, "model.safetensors")
    sd = load_file(path)
    if head not in sd:
        raise SystemExit(f"expected an untied {head} in {hf_dir}/model.safetensors")
    sd[to] = sd.pop(head)
    save_file(sd, path, metadata={"format": "pt"})


def int4_gather_exclusions(graph, vocab_size):
    """Names of the Gather nodes of `graph` that INT4 must leave alone: every Gather but those that read a
    token-embedding table, i.e. an initializer of shape [vocab_size, d] (the input embedding; gemma4's
    per-layer embedding too) that nothing but Gathers reads. Left f32: the RoPE cos/sin caches
    ([max_positions, d/2]: quantizing them costs accuracy) and any table that also feeds another node (a
    tied LM head as MatMul(Transpose(table)): the f32 table would stay for it, and an int4 copy would only
    add bytes). Returns (excluded node names, quantized table names)."""
    inits = {t.name: t for t in graph.initializer}
    readers = {}
    for n in graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n.op_type)
    exclude, tables = [], []
    for n in graph.node:
        if n.op_type != "Gather":
            continue
        t = inits.get(n.input[0])
        embedding = (t is not None and len(t.dims) == 2 and t.dims[0] == vocab_size
                     and set(readers[n.input[0]]) == {"Gather"})
        if embedding:
            tables.append(n.input[0])
        else:
            if not n.name:
                raise SystemExit(f"an unnamed Gather ({n.input[0]}) cannot be excluded from int4 quantization")
            exclude.append(n.name)
    return exclude, tables


def fold_tied_head(model):
    """Fold a tied LM head MatMul(x, Transpose(table)) with a constant 2-D table into MatMul(x, <head>_t),
    <head>_t = table^T as a new float32 initializer (in place; returns the folded initializers' names).
    <head> is the MatMul's module path ("lm_head/MatMul_node_73" -> "lm_head.weight_t": mobius' name for an
    untied head, which goldens.py's dequantize maps to the HF parameter lm_head.weight). Only a Transpose
    with perm [1, 0] (or none) whose every reader is a MatMul taking it as its weight is folded; the table
    itself stays (for the embedding Gather: with nothing but Gathers reading it afterwards,
    int4_gather_exclusions lets INT4 quantize it too). The new initializer is inserted right after the
    table and the Transpose node is removed: the result is a deterministic function of the input graph."""
    from onnx import numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    outputs = {o.name for o in g.output}
    readers = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    folded = []
    for n in list(g.node):
        if n.op_type != "Transpose" or n.input[0] not in inits or len(inits[n.input[0]].dims) != 2:
            continue
        perm = [list(a.ints) for a in n.attribute if a.name == "perm"]
        if perm and perm[0] != [1, 0]:
            continue
        mms = readers.get(n.output[0], [])
        if (not mms or n.output[0] in outputs
                or any(m.op_type != "MatMul" or list(m.input).index(n.output[0]) != 1 or m.input[0] == n.output[0]
                       for m in mms)):
            continue
        heads = {m.name.rsplit("/", 1)[0] for m in mms}
        if len(heads) != 1 or not mms[0].name or "/" not in mms[0].name:
            raise SystemExit(f"tied head {n.name}: cannot name the folded weight from MatMuls {[m.name for m in mms]}")
        name = heads.pop().replace("/", ".") + ".weight_t"
        if name in inits:
            raise SystemExit(f"tied head {n.name}: initializer {name} exists already")
        table = inits[n.input[0]]
        w = numpy_helper.to_array(table)
        if w.dtype != np.float32:
            raise SystemExit(f"tied head {n.name}: table {table.name} is {w.dtype}, not float32")
        t = numpy_helper.from_array(np.ascontiguousarray(w.T), name)
        pos = list(g.initializer).index(table) + 1
        g.initializer.insert(pos, t)
        for m in mms:
            m.input[1] = name
        g.node.remove(n)
        inits[name] = t
        folded.append(name)
        log(f"  folded {n.name} ({table.name}^T, {list(table.dims)}) into initializer {name}")
    return folded


def quantize_int4(src_dir, dst_dir, quantize_gathers=True, fold_head=False, vocab_size=None, keep=PACKAGE_KEEP):
    """src_dir (an f32 package: model.onnx + model.onnx.data) -> dst_dir: the same package with the
    decoder's MatMuls made MatMulNBits and its token-embedding Gathers made GatherBlockQuantized (the rest
    of the Gathers: int4_gather_exclusions) by ONNX Runtime's MatMulNBitsQuantizer (INT4);
    quantize_gathers=False: MatMuls only. fold_head: first fold a tied LM head read as
    MatMul(Transpose(table)) into its own f32 initializer (fold_tied_head), so that the head becomes
    MatMulNBits and the table, then read by Gathers only, GatherBlockQuantized (text_fixture.INT4_FOLD_HEAD says for
    which fixtures). genai_config.json is copied unchanged (files: PACKAGE_KEEP); the
    external data stays in model.onnx.data. Returns the op counts of the result.
    One model of a package of several (an encoder-decoder's `encoder/`): vocab_size given (it is the package's
    genai_config.json's) and keep=("model.onnx", "model.onnx.data")."""
    import collections
    import logging

    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    t0 = time.time()
    shutil.rmtree(dst_dir, ignore_errors=True)
    os.makedirs(dst_dir)
    for f in keep:
        if f not in ("model.onnx", "model.onnx.data"):
            shutil.copyfile(os.path.join(src_dir, f), os.path.join(dst_dir, f))
    if vocab_size is None:
        with open(os.path.join(src_dir, "genai_config.json")) as fh:
            vocab_size = json.load(fh)["model"]["vocab_size"]
    if fold_head:
        # The whole model in memory (external data loaded relative to the file), folded, then quantized.
        src = onnx.load(os.path.join(src_dir, "model.onnx"))
        folded = fold_tied_head(src)
        if not folded:
            raise SystemExit(f"{src_dir}: fold_head asked for, but no MatMul(Transpose(table)) head to fold")
    else:
        src = onnx.load(os.path.join(src_dir, "model.onnx"), load_external_data=False)
        folded = []
    exclude, tables = int4_gather_exclusions(src.graph, vocab_size)
    kwargs = dict(INT4)
    if not quantize_gathers:
        kwargs["op_types_to_quantize"] = [o for o in INT4["op_types_to_quantize"] if o != "Gather"]
        tables = []
    kwargs["quant_axes"] = tuple(tuple(a) for a in INT4["quant_axes"])
    # The quantizer logs every node at INFO through the root logger.
    level = logging.getLogger().level
    logging.getLogger().setLevel(logging.WARNING)
    try:
        # Unfolded: a path (not a loaded model): the external data resolves relative to it.
        q = MatMulNBitsQuantizer(src if fold_head else os.path.join(src_dir, "model.onnx"),
                                 nodes_to_exclude=exclude, **kwargs)
        q.process()
        q.model.save_model_to_file(os.path.join(dst_dir, "model.onnx"), use_external_data_format=True)
    finally:
        logging.getLogger().setLevel(level)
    if sorted(os.listdir(dst_dir)) != sorted(keep):
        raise SystemExit(f"int4 package files {sorted(os.listdir(dst_dir))} != {sorted(keep)}")
    m = onnx.load(os.path.join(dst_dir, "model.onnx"), load_external_data=False)
    ops = collections.Counter(n.op_type for n in m.graph.node)
    inits = {t.name for t in m.graph.initializer}
    left = [n.name for n in m.graph.node if n.op_type == "MatMul" and n.input[1] in inits]
    if left or not ops["MatMulNBits"] or any(f in inits for f in folded):
        raise SystemExit(f"{dst_dir}: {ops['MatMulNBits']} MatMulNBits, MatMuls with constant weights left: {left}")
    gbq = sorted(n.input[0][:-len("_Q4")] for n in m.graph.node if n.op_type == "GatherBlockQuantized")
    if gbq != sorted(tables) or any(t in inits for t in tables):
        raise SystemExit(f"{dst_dir}: GatherBlockQuantized tables {gbq} != token-embedding tables {sorted(tables)} "
                         f"(or an f32 copy was left)")
    normalize_modes(dst_dir)
    log(f"  quantized {os.path.basename(src_dir)} -> {os.path.basename(dst_dir)}: {ops['MatMulNBits']} MatMulNBits, "
        f"{ops['MatMul']} MatMul left (no constant weight), {ops['GatherBlockQuantized']} GatherBlockQuantized "
        f"({', '.join(tables) or 'no table'}), {ops['Gather']} Gather left in {time.time() - t0:.1f}s")
    return {k: ops[k] for k in ("MatMul", "MatMulNBits", "Gather", "GatherBlockQuantized")}


def read_back(fix_dir, hf_dir, path, renames=()):
    """A fixture's weights read back from its committed f32 package under `fix_dir` (weights.py) into `path`; hf_dir
    holds the config that says which parameters there are, `renames` how mobius names the tensors HF names
    otherwise (weights.MM_RENAMES, weights.WHISPER_RENAMES)."""
    weights.write(os.path.join(fix_dir, WEIGHTS_PACKAGE), hf_dir, path, renames)


def check_derivable(name, fix_dir, renames=()):
    """At creation: the freshly built f32 package gives back the seeded weights byte for byte, so that every later
    derivation (fixture_derive.derive_hf) can read them from it."""
    with tempfile.TemporaryDirectory(prefix="weights-") as tmp:
        path = os.path.join(tmp, "model.safetensors")
        read_back(fix_dir, os.path.join(fix_dir, "hf"), path, renames)
        got, want = sha256_file(path), sha256_file(os.path.join(fix_dir, "hf", "model.safetensors"))
    if got != want:
        raise SystemExit(f"{name}: {WEIGHTS_PACKAGE} does not give back hf/model.safetensors (sha256 {got} != {want}): "
                         f"weights.py must learn mobius' new layout")
    log(f"  {name}: {WEIGHTS_PACKAGE} gives back hf/model.safetensors byte for byte")
