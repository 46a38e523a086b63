"""The int4 dequantizer: an ONNX package's quantized weights back into the Hugging Face model, exactly as ONNX
Runtime's CPU kernels compute them, for the kernel-parity reference (goldens.py's `dequantize` job field).

"dequantize": "/abs/fixtures/qwen3-tiny/onnx/default-int4/model.onnx"

The HF model is loaded as usual, then every weight that the ONNX model feeds to a com.microsoft
MatMulNBits node (4 bits, no g_idx, no bias) is replaced by its exact dequantized value, computed as
ONNX Runtime's CPU kernel does in f32: W[n, k] = (q[n, k] - zp[n, k // block]) * scale[n, k // block]
(zp = 8 when the node has no zero_points input; packed low nibble first). MatMulNBits computes
A @ W^T with W in [N, K] = HF's [out, in] Linear layout. The quantized initializer `<name>_Q4` of the
ONNX weight `<hf name>_t` (mobius stores Linear weights transposed as `<hf name>_t`) names the HF
parameter; `<a>__<b>__<c>__axis_0__concat_t` (mobius' fused q/k/v projection in --ep cpu builds)
is split back into a, b, c by their output sizes. A Hugging Face checkpoint that fuses projections
(FUSED; Phi-3's qkv_proj and gate_up_proj) while the ONNX model keeps them apart gets its fused
parameter back by concatenating the parts' dequantized rows in order (q, k, v; gate, up); a graph that
concatenates exactly those parts maps onto the fused parameter whole. Every table that a com.microsoft GatherBlockQuantized
node gathers from (gather_axis 0, quantize_axis the last one: token embeddings [vocab, d]) is replaced
likewise, as ONNX Runtime's CPU kernel computes it: T[v, d] = f32(q[v, d] - zp[v, d // block]) *
scale[v, d // block] (int4 data: signed nibbles, zp 0 when absent; uint4: zp 0 when absent; uint8 with
bits=4: zp 8 when absent; packed low nibble first); the quantized initializer `<name>_Q4` of the ONNX
table `<name>` names the HF parameter `<name>` directly (the raw table: a scaled embedding, e.g. Gemma's
sqrt(hidden), multiplies after the Gather in both the graph and HF). A tied input embedding / LM head
pair whose two sides dequantize to different values (one quantized and not the other, or both by
different kernels) is untied first: the LM head gets its own parameter with the head's dequantized value and
the input embedding keeps the table's; it stays tied when they come out bit for bit equal. (A tied head that
fixtures.py folded out of MatMul(Transpose(table)) into `lm_head.weight_t` names the HF `lm_head.weight`,
i.e. the head side of the pair; MatMulNBits and GatherBlockQuantized quantize the same [vocab, hidden] rows in
the same blocks of 32 and so far come out equal, but nothing here assumes it.) Every replaced
parameter must stay within int4 rounding of its HF value (relative error < 0.3), which catches a table
stored pre-scaled or a name that maps to the wrong parameter. Then the job runs exactly like a text job (the same prefill + greedy, same tensors),
so ONNX Runtime running the quantized package must match it to f32 precision: it isolates the
kernels from the quantization error. Metadata adds `dequantized_from` (the field's value as given),
`dequantized_weights` (how many HF parameters were replaced, as a decimal string) and
`dequantized_sha256` (sha256 over the replaced parameters' names and f32 little-endian bytes, in name
order: equal for two packages quantized from the same weights). Text jobs only.
"""
from __future__ import annotations

import hashlib
import os
import re

from .common import ReferenceError

import numpy as np  # noqa: E402
import torch  # noqa: E402


def int4_weights(onnx_path):
    """{ONNX weight name: (op, W float32)} for every MatMulNBits weight (op "MatMulNBits", W [N, K]) and
    every GatherBlockQuantized table (op "GatherBlockQuantized", W the table's shape) of the ONNX model at
    onnx_path, dequantized exactly as ONNX Runtime's CPU kernels do (see the module docstring)."""
    import onnx
    from onnx import numpy_helper

    if not isinstance(onnx_path, str) or not os.path.isfile(onnx_path):
        raise ReferenceError(f"dequantize={onnx_path!r} is not an ONNX model file")
    m = onnx.load(onnx_path)  # external data resolves relative to the file
    inits = {t.name: t for t in m.graph.initializer}
    out = {}

    def put(name, op, W):
        if name in out:
            raise ReferenceError(f"{onnx_path}: {name} is quantized twice")
        out[name] = (op, np.ascontiguousarray(W, dtype=np.float32))

    for n in m.graph.node:
        if n.op_type == "GatherBlockQuantized":
            put(*gather_block_quantized_table(onnx_path, n, inits))
            continue
        if n.op_type != "MatMulNBits":
            continue
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        K, N, bs, bits = a["K"], a["N"], a["block_size"], a.get("bits", 4)
        ins = list(n.input) + [""] * (6 - len(n.input))  # A, B, scales, zero_points, g_idx, bias
        if bits != 4 or ins[4] or ins[5]:
            raise ReferenceError(f"{onnx_path}: MatMulNBits {n.name}: only 4 bits without g_idx/bias are supported")
        for i in ins[1:4]:
            if i and i not in inits:
                raise ReferenceError(f"{onnx_path}: MatMulNBits {n.name}: input {i!r} is not an initializer")
        kb = (K + bs - 1) // bs
        B = numpy_helper.to_array(inits[ins[1]]).reshape(N, kb, bs // 2)
        q = np.stack([B & 0x0F, B >> 4], -1).reshape(N, kb, bs).astype(np.float32)  # low nibble first
        sc = numpy_helper.to_array(inits[ins[2]])
        if sc.dtype != np.float32:
            raise ReferenceError(f"{onnx_path}: MatMulNBits {n.name}: {sc.dtype} scales (only float32 is supported)")
        sc = sc.reshape(N, kb, 1)
        if ins[3]:
            zp = numpy_helper.to_array(inits[ins[3]])
            if zp.dtype != np.uint8:
                raise ReferenceError(f"{onnx_path}: MatMulNBits {n.name}: {zp.dtype} zero points (only packed uint8)")
            zp = zp.reshape(N, (kb + 1) // 2)  # each row padded to whole bytes
            zp = np.stack([zp & 0x0F, zp >> 4], -1).reshape(N, -1)[:, :kb].astype(np.float32).reshape(N, kb, 1)
        else:
            zp = np.float32(8)
        W = ((q - zp) * sc).reshape(N, kb * bs)[:, :K]
        put(ins[1][:-3] if ins[1].endswith("_Q4") else ins[1], "MatMulNBits", W)
    if not out:
        raise ReferenceError(f"{onnx_path}: no MatMulNBits or GatherBlockQuantized nodes")
    return out


def _nibbles(tensor, count, signed):
    """The first `count` 4-bit values of a packed tensor's bytes (low nibble first), as int32."""
    from onnx.external_data_helper import uses_external_data

    if uses_external_data(tensor) or not tensor.raw_data:
        raise ReferenceError(f"{tensor.name}: packed 4-bit data without raw_data is not supported")
    b = np.frombuffer(tensor.raw_data, np.uint8)
    if b.size != (count + 1) // 2:
        raise ReferenceError(f"{tensor.name}: {b.size} bytes for {count} 4-bit values")
    v = np.stack([b & 0x0F, b >> 4], -1).reshape(-1)[:count].astype(np.int32)
    return np.where(v >= 8, v - 16, v) if signed else v


def gather_block_quantized_table(onnx_path, n, inits):
    """(table name, "GatherBlockQuantized", T float32) for one com.microsoft GatherBlockQuantized node:
    its whole data tensor dequantized as the CPU kernel does (module docstring)."""
    import onnx
    from onnx import TensorProto, numpy_helper

    a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
    ins = list(n.input) + [""] * (4 - len(n.input))  # data, indices, scales, zero_points
    for i in (ins[0], ins[2], ins[3]):
        if i and i not in inits:
            raise ReferenceError(f"{onnx_path}: GatherBlockQuantized {n.name}: input {i!r} is not an initializer")
    data, scales = inits[ins[0]], numpy_helper.to_array(inits[ins[2]])
    shape = list(data.dims)
    rank = len(shape)
    gather_axis, quantize_axis = a.get("gather_axis", 0), a.get("quantize_axis", 1)
    bs, bits = a.get("block_size", 128), a.get("bits", 4)
    gather_axis, quantize_axis = gather_axis % rank, quantize_axis % rank
    if rank != 2 or gather_axis != 0 or quantize_axis != rank - 1:
        raise ReferenceError(f"{onnx_path}: GatherBlockQuantized {n.name}: only 2-D tables gathered along axis 0 and "
                       f"quantized along the last axis are supported (shape {shape}, gather_axis {gather_axis}, "
                       f"quantize_axis {quantize_axis})")
    if scales.dtype != np.float32:
        raise ReferenceError(f"{onnx_path}: GatherBlockQuantized {n.name}: {scales.dtype} scales (only float32 is supported)")
    if data.data_type in (TensorProto.INT4, TensorProto.UINT4):
        signed = data.data_type == TensorProto.INT4
        rows, cols = shape
        q = _nibbles(data, rows * cols, signed).reshape(rows, cols)
        zp_default = 0
    elif data.data_type == TensorProto.UINT8 and bits == 4:
        signed = False
        rows, cols = shape[0], shape[1] * 2
        q = _nibbles(data, rows * cols, False).reshape(rows, cols)
        zp_default = 8
    else:
        raise ReferenceError(f"{onnx_path}: GatherBlockQuantized {n.name}: data type {data.data_type} with bits={bits} "
                       f"(only int4, uint4 or uint8 with bits=4 are supported)")
    kb = (cols + bs - 1) // bs
    if list(scales.shape) != [rows, kb]:
        raise ReferenceError(f"{onnx_path}: GatherBlockQuantized {n.name}: scales {list(scales.shape)} for data "
                       f"[{rows}, {cols}] in blocks of {bs}")
    if ins[3]:
        zt = inits[ins[3]]
        if zt.data_type == data.data_type and data.data_type in (TensorProto.INT4, TensorProto.UINT4):
            zp = _nibbles(zt, rows * kb, signed).reshape(rows, kb)
        elif zt.data_type == TensorProto.UINT8 and data.data_type == TensorProto.UINT8:
            zp = _nibbles(zt, rows * ((kb + 1) // 2) * 2, False).reshape(rows, -1)[:, :kb]  # rows padded to bytes
        else:
            raise ReferenceError(f"{onnx_path}: GatherBlockQuantized {n.name}: zero points of type {zt.data_type}")
    else:
        zp = np.full((rows, kb), zp_default, np.int32)
    col_block = np.arange(cols) // bs
    # the kernel: static_cast<float>(data_val - zp_val) * scale_val, in float32
    T = (q - zp[:, col_block]).astype(np.float32) * scales[:, col_block]
    name = ins[0][:-3] if ins[0].endswith("_Q4") else ins[0]
    return name, "GatherBlockQuantized", T


# Hugging Face checkpoints that fuse projections an exporter may keep apart: the HF parameter
# `<module>.<fused>.weight` holds the rows of `<module>.<part>.weight` for each part, in this order
# (Phi-3: qkv_proj = [q; k; v], gate_up_proj = [gate; up]; mobius splits qkv_proj, keeps gate_up_proj).
FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def fused_part(hf, params):
    """(fused HF name, index, part count) when the HF parameter `hf` does not exist but is one part of a
    fused one that does (FUSED), else None."""
    module, _, leaf = hf.rpartition(".")
    parent, _, proj = module.rpartition(".")
    for fused, parts in FUSED.items():
        name = f"{parent}.{fused}.{leaf}" if parent else f"{fused}.{leaf}"
        if proj in parts and name in params:
            return name, parts.index(proj), len(parts)
    return None


def hf_names(onnx_name, op="MatMulNBits"):
    """The HF parameters behind a quantized ONNX weight, in row order. MatMulNBits (transposed Linear
    weights): `<hf>.weight_t` is one; `<hf1>__<hf2>__...__axis_0__concat_t` (mobius --ep cpu fuses q/k/v
    projections into one MatMul) is their concatenation along the output dimension.
    GatherBlockQuantized (embedding tables, stored as HF stores them): `<hf>.weight` is `<hf>.weight`."""
    if op == "GatherBlockQuantized":
        if onnx_name.endswith("_t") or "__" in onnx_name:
            raise ReferenceError(f"quantized table {onnx_name!r} is not an HF embedding weight")
        return [onnx_name]
    if not onnx_name.endswith("_t"):
        raise ReferenceError(f"quantized weight {onnx_name!r} is not a transposed (`_t`) Linear weight")
    base = onnx_name[:-2]
    m = re.fullmatch(r"(.+)__axis_(\d+)__concat", base)
    if not m:
        return [base]
    if m.group(2) != "0":
        raise ReferenceError(f"quantized weight {onnx_name!r}: concatenation along axis {m.group(2)} is not supported")
    return m.group(1).split("__")


# int4 blockwise rounding moves a weight by at most half a step (absmax / 16 of its block); over a whole
# tensor that is ~5-10% in norm. A table stored pre-scaled (e.g. by Gemma's sqrt(hidden)) or a name mapped to
# the wrong parameter is far off.
MAX_DEQUANT_REL_ERROR = 0.3


def dequantize_into(model, onnx_path, rename=None):
    """Replace the HF weights that the ONNX model quantized by their dequantized values (in place);
    returns (count, sha256 over names and bytes). rename: the HF name of an ONNX weight's name where the
    package names them otherwise (Whisper's `decoder.layers...` is HF's `model.decoder.layers...`)."""
    weights = int4_weights(onnx_path)
    params = dict(model.named_parameters(remove_duplicate=False))
    new = {}
    pieces = {}  # fused HF name -> {part index: dequantized rows}, for parts the ONNX model keeps apart
    for name, (op, W) in sorted(weights.items()):
        parts = [rename(p) if rename else p for p in hf_names(name, op)]
        fused = [None if hf in params else fused_part(hf, params) for hf in parts]
        for hf, f in zip(parts, fused):
            if hf not in params and f is None:
                raise ReferenceError(f"{onnx_path}: quantized weight {name!r} names no HF parameter {hf!r}")
            if hf in new:
                raise ReferenceError(f"{onnx_path}: HF parameter {hf} is quantized twice")
        if any(fused):
            targets = {f[0] for f in fused if f}
            if len(parts) == 1:
                target, index, _ = fused[0]
                if index in pieces.setdefault(target, {}):
                    raise ReferenceError(f"{onnx_path}: part {parts[0]} of {target} is quantized twice")
                pieces[target][index] = W
                continue
            # Parts concatenated in the graph (`a__b__c__axis_0__concat_t`) onto one fused HF parameter: the
            # same rows in the same order, i.e. the fused parameter itself.
            if len(targets) != 1 or [f and f[1] for f in fused] != list(range(fused[0][2])):
                raise ReferenceError(f"{onnx_path}: {name!r} concatenates {parts}, which are not the parts of one fused HF "
                               f"parameter in order")
            parts = [targets.pop()]
        rows = [params[hf].shape[0] for hf in parts]
        if any(params[hf].dim() != 2 or params[hf].shape[1] != W.shape[1] for hf in parts) or sum(rows) != W.shape[0]:
            raise ReferenceError(f"{onnx_path}: {name} dequantizes to {W.shape}, HF "
                           f"{[(hf, tuple(params[hf].shape)) for hf in parts]}")
        for hf, part in zip(parts, np.split(W, np.cumsum(rows)[:-1], axis=0)):
            new[hf] = torch.from_numpy(np.ascontiguousarray(part))
    for target, got in sorted(pieces.items()):
        n = len(FUSED[target.rpartition(".")[0].rpartition(".")[2]])
        if sorted(got) != list(range(n)):
            raise ReferenceError(f"{onnx_path}: fused HF parameter {target} has {n} parts, the ONNX model quantized "
                           f"parts {sorted(got)} of them")
        if target in new:
            raise ReferenceError(f"{onnx_path}: HF parameter {target} is quantized twice")
        W = np.concatenate([got[i] for i in range(n)], axis=0)
        if tuple(W.shape) != tuple(params[target].shape):
            raise ReferenceError(f"{onnx_path}: the parts of {target} dequantize to {W.shape}, HF has "
                           f"{tuple(params[target].shape)}")
        new[target] = torch.from_numpy(np.ascontiguousarray(W))
    for hf, W in new.items():
        ref = params[hf].detach().float()
        rel = float(torch.linalg.norm(W - ref) / torch.linalg.norm(ref).clamp_min(1e-30))
        if not rel < MAX_DEQUANT_REL_ERROR:
            raise ReferenceError(f"{onnx_path}: {hf} dequantizes {rel:.3f} (relative) away from the HF weight: not the "
                           f"same tensor (pre-scaled, or mapped to the wrong parameter?)")
    embed = model.get_input_embeddings().weight
    out_emb = model.get_output_embeddings()
    with torch.no_grad():
        tied = [k for k, p in params.items() if p is embed] if out_emb is not None and out_emb.weight is embed else []
        if any(k in new for k in tied):
            # One tensor under two HF names (input embedding, LM head). Each side takes the dequantized value
            # of its own ONNX node, or keeps the f32 one when that side is not quantized.
            modules = dict(model.named_modules(remove_duplicate=False))
            head = [k for k in tied if modules.get(k.rsplit(".", 1)[0]) is out_emb]
            emb = [k for k in tied if k not in head]
            if len(head) != 1 or not emb:
                raise ReferenceError(f"tied embedding {tied}: cannot tell the LM head from the input embedding")
            head_w = new.get(head[0], embed.detach().clone())
            emb_ws = [new.get(k, embed.detach().clone()) for k in emb]
            if any(not torch.equal(w, emb_ws[0]) for w in emb_ws[1:]):
                raise ReferenceError(f"{onnx_path}: the input embedding's names {emb} dequantize differently")
            if not torch.equal(head_w, emb_ws[0]):
                # The two sides differ (one quantized and not the other, or by different kernels): untie.
                out_emb.weight = torch.nn.Parameter(head_w.clone(), requires_grad=False)
                model.config.tie_word_embeddings = False
                if hasattr(model.config, "get_text_config"):
                    model.config.get_text_config().tie_word_embeddings = False
            embed.copy_(emb_ws[0])  # bit for bit equal sides: the pair stays tied
        for hf, W in new.items():
            if hf not in tied:
                params[hf].copy_(W)
    h = hashlib.sha256()
    for hf in sorted(new):
        h.update(hf.encode() + b"\0" + new[hf].numpy().astype("<f4").tobytes())
    return len(new), h.hexdigest()
