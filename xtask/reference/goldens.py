#!/usr/bin/env python3
"""Raw HF transformers reference outputs for the conformance suite's goldens.

    python goldens.py JOBS.json

JOBS.json:

    {"jobs": [{"case": "qwen3-tiny",
               "reference": "/abs/fixtures/qwen3-tiny/hf",     # local HF model directory
               "tokenizer": "/abs/fixtures/qwen3-tiny/hf",     # local tokenizer directory
               "prompt": "...", "max_new_tokens": 16,
               "eos_token_id": null,                           # int, list of ints, or null (= model's)
               "out": "/abs/out/qwen3-tiny.safetensors"}]}

Per job: fp32 on CPU, one thread, deterministic. The prompt is tokenized with the default special
tokens (BOS prepended), the model runs one prefill forward and a greedy `generate` that stops at EOS
like HF does. Written as safetensors (safetensors.numpy) to `out` (parent dirs created):

    input_ids           int64   [S]
    prefill_logits      float32 [V]     last prompt position of a plain forward pass
    prefill_logits_f64  float64 [V]     the same with the model and its float inputs in float64 (the
                                        reference's own fp32 noise is |prefill_logits - this|)
    position_top_ids    int64   [S, K]  every prompt position's top-K ids (K = 5), by logit, descending
    position_top_logits float32 [S, K]  their float32 logits
    position_logsumexp  float64 [S]     each position's logsumexp over the vocabulary (of the float32 logits)
    position_noise      float64 [S]     each position's max |float32 - float64| over the vocabulary (with the
                                        float64 run)
    generated_tokens  int64   [N]     N <= max_new_tokens (fewer when EOS was generated; EOS included)
    step_logits       float32 [N, V]  raw logits that chose each generated token (step 0 = prefill)

metadata (str -> str): case, prompt, generated_text, eos_token_id (JSON), transformers, torch.
A Rust program derives the golden JSON from these files.

Multimodal jobs (Gemma-4 style processors) add optional fields:

    "modality":  "text" (default) | "image" | "audio" | "image+audio"
    "images":    ["/abs/x.jpeg", ...]   # required for image modalities, forbidden otherwise
    "audio":     ["/abs/y.flac", ...]   # required for audio modalities, forbidden otherwise
    "processor": "/abs/dir"             # AutoProcessor directory; default: "reference"

The conversation is one user turn: the images, then the audio clips, then the text prompt; it is
rendered and processed by `processor.apply_chat_template(..., add_generation_prompt=True,
tokenize=True, return_dict=True)` (the processor's tokenizer is used; "tokenizer" is not read and
may be omitted). Images are read with Pillow (converted to RGB), audio with soundfile (float32;
mono, at the feature extractor's sampling rate, no resampling). Prefill and greedy decoding are
those of the text path, with every processor output passed to the model. Written in addition:

    input.input_ids            int64   [1, S]         (== input_ids[None])
    input.pixel_values         uint8   [1, P, 768]    the processor's float pixel_values are exactly
                                                      f32(u8) * f32(1/255) (checked; a division by 255
                                                      differs in the last bit for about half the values)
    input.pixel_position_ids   int64   [1, P, 2]      HF image_position_ids; padding patches (-1, -1)
    input.input_features       float32 [1, T, 128]
    input.input_features_mask  bool    [1, T]
    image_features             float32 [n_image_tokens, hidden]   get_image_features().pooler_output
    audio_features             float32 [n_audio_tokens, hidden]   pooled audio features, masked frames dropped

(`input.*` names are the ONNX input names; only those of the job's modality are written.)
Multimodal metadata also has `modality`. Text jobs are written exactly as before.

Kernel-parity reference for a weight-quantized package (optional field):

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
import json
import os
import re
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.numpy import save as st_save  # noqa: E402
from transformers import AutoModelForCausalLM, AutoProcessor, AutoTokenizer  # noqa: E402

REQUIRED = ("case", "reference", "tokenizer", "prompt", "max_new_tokens", "out")
REQUIRED_MM = ("case", "reference", "prompt", "max_new_tokens", "out")
MODALITIES = {"text": (False, False), "image": (True, False), "audio": (False, True),
              "image+audio": (True, True)}  # modality -> (needs images, needs audio)

# Greedy decoding with every logits processor a model's generation_config could switch on set to its
# neutral value, so that the argmax of the raw step logits is the generated token (checked per step).
# Sampling-only knobs (temperature, top_k, top_p, ...) do nothing with do_sample=False.
NEUTRAL = dict(
    do_sample=False,
    num_beams=1,
    repetition_penalty=1.0,
    encoder_repetition_penalty=1.0,
    no_repeat_ngram_size=0,
    bad_words_ids=None,
    sequence_bias=None,
    min_length=0,
    min_new_tokens=None,
    forced_bos_token_id=None,
    forced_eos_token_id=None,
    suppress_tokens=None,
    begin_suppress_tokens=None,
    exponential_decay_length_penalty=None,
    renormalize_logits=False,
    remove_invalid_values=False,
    guidance_scale=None,
    watermarking_config=None,
    stop_strings=None,
)


class JobError(Exception):
    pass


def save_safetensors(tensors, metadata, path):
    """safetensors.numpy.save, with the JSON header re-serialised with sorted keys: safetensors keeps
    __metadata__ in a hash map, so its key order (and the file bytes) would change run to run."""
    raw = st_save(tensors, metadata=metadata)
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    h = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as fh:
        fh.write(len(h).to_bytes(8, "little") + h + data)


def local_dir(job, key):
    path = job[key]
    if not isinstance(path, str) or not os.path.isdir(path):
        raise JobError(
            f"{key}={path!r} is not a local directory; only local reference directories are supported "
            f"for now (Hugging Face Hub ids are not)"
        )
    return path


def eos_ids(job, model):
    eos = job.get("eos_token_id")
    if eos is None:
        eos = model.generation_config.eos_token_id
        if eos is None:
            eos = model.config.eos_token_id
    if eos is None:
        return []
    if isinstance(eos, int):
        return [eos]
    if isinstance(eos, list) and all(isinstance(e, int) for e in eos):
        return list(eos)
    raise JobError(f"eos_token_id must be an int, a list of ints or null, got {eos!r}")


def modality_of(job):
    modality = job.get("modality", "text")
    if modality not in MODALITIES:
        raise JobError(f"modality must be one of {sorted(MODALITIES)}, got {modality!r}")
    return modality


def media_paths(job, key, needed):
    paths = job.get(key)
    if not needed:
        if paths:
            raise JobError(f"{key} given for modality {job.get('modality', 'text')!r}")
        return []
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise JobError(f"{key} must be a non-empty list of file paths for modality {job['modality']!r}, got {paths!r}")
    for p in paths:
        if not os.path.isfile(p):
            raise JobError(f"{key}: {p!r} is not a file")
    return paths


def load_image(path):
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB")


def load_audio(path, sampling_rate):
    import soundfile as sf

    wave, sr = sf.read(path, dtype="float32")
    if wave.ndim != 1:
        raise JobError(f"{path}: {wave.shape[1]} channels; only mono audio is supported")
    if sr != sampling_rate:
        raise JobError(f"{path}: sampled at {sr} Hz, the feature extractor wants {sampling_rate} Hz (no resampling)")
    return wave


def mm_encode(processor, prompt, images=(), audio=()):
    """One user turn (images, then audio clips, then the text prompt) through the processor's chat
    template, tokenized with add_generation_prompt. images: PIL images; audio: 1-d float32 arrays."""
    content = ([{"type": "image", "image": im} for im in images]
               + [{"type": "audio", "audio": w} for w in audio]
               + [{"type": "text", "text": prompt}])
    conversation = [{"role": "user", "content": content}]
    enc = processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=True,
                                        return_dict=True, return_tensors="pt")
    return dict(enc)


def greedy(model, inputs, n_new, eos, pad):
    """Prefill forward + greedy generate on `inputs` (the model's keyword inputs, batch 1):
    (prefill logits of every prompt position [S, V], generated tokens [N], step logits [N, V]), checked."""
    input_ids = inputs["input_ids"]
    with torch.inference_mode():
        prompt_logits = model(**inputs).logits[0].float()  # [S, V]
        prefill = prompt_logits[-1]
        out = model.generate(
            **inputs,
            max_new_tokens=n_new,
            eos_token_id=eos or None,
            pad_token_id=pad,
            output_logits=True,
            return_dict_in_generate=True,
            use_cache=True,
            **NEUTRAL,
        )
    S = input_ids.shape[1]
    generated = out.sequences[0, S:]
    step_logits = torch.stack([lg[0].float() for lg in out.logits])  # [N, V]
    N = generated.shape[0]
    if step_logits.shape[0] != N:
        raise JobError(f"{step_logits.shape[0]} step logits for {N} generated tokens")
    argmax = step_logits.argmax(-1)
    bad = (argmax != generated).nonzero().flatten().tolist()
    if bad:
        raise JobError(f"argmax(step logits) != generated token at steps {bad}: a logits processor interfered")
    if eos and any(int(t) in eos for t in generated[:-1]):
        raise JobError("generation continued past EOS")
    if not torch.allclose(prefill, step_logits[0], rtol=0, atol=1e-4):
        diff = float((prefill - step_logits[0]).abs().max())
        raise JobError(f"prefill forward and generate's first step disagree by {diff:.3g}")
    if prefill.shape[0] != step_logits.shape[1]:
        raise JobError(f"prefill logits have {prefill.shape[0]} entries, step logits {step_logits.shape[1]}")
    return prompt_logits, generated, step_logits


POSITION_TOP_K = 5


def position_summary(prompt_logits, prompt_logits_f64):
    """Every prompt position in brief (see the module doc): top-K, logsumexp, and the fp32-vs-fp64 noise."""
    k = min(POSITION_TOP_K, prompt_logits.shape[1])
    top = torch.topk(prompt_logits, k, dim=-1, sorted=True)
    out = {
        "position_top_ids": top.indices.to(torch.int64).numpy(),
        "position_top_logits": np.ascontiguousarray(top.values.numpy(), dtype=np.float32),
        "position_logsumexp": torch.logsumexp(prompt_logits.double(), dim=-1).numpy(),
    }
    if prompt_logits_f64 is not None:
        if prompt_logits_f64.shape != tuple(prompt_logits.shape):
            raise JobError(f"float64 prompt logits {prompt_logits_f64.shape} vs float32 {tuple(prompt_logits.shape)}")
        rows = [np.abs(prompt_logits[i:i + 64].double().numpy() - prompt_logits_f64[i:i + 64]).max(axis=-1)
                for i in range(0, prompt_logits.shape[0], 64)]
        out["position_noise"] = np.concatenate(rows).astype(np.float64)
    return out


# processor output -> ONNX input name (written as input.<name>)
ONNX_INPUT_NAMES = {
    "input_ids": "input_ids",
    "pixel_values": "pixel_values",
    "image_position_ids": "pixel_position_ids",
    "input_features": "input_features",
    "input_features_mask": "input_features_mask",
}


def pixels_to_uint8(pv):
    """The processor rescales uint8 pixels as f32(u8) * f32(1/255) (padding patches are 0): recover
    u8 and prove that this rebuilds pixel_values bit for bit."""
    if pv.dtype != torch.float32:
        raise JobError(f"pixel_values are {pv.dtype}, expected float32")
    u8 = torch.round(pv.double() * 255)
    if u8.min() < 0 or u8.max() > 255:
        raise JobError(f"pixel_values outside [0, 1]: {float(pv.min())}..{float(pv.max())}")
    u8 = u8.to(torch.uint8)
    back = torch.from_numpy(u8.numpy().astype(np.float32) * np.float32(1 / 255))
    if not torch.equal(back, pv):
        raise JobError(f"pixel_values are not exactly f32(u8) * f32(1/255) "
                       f"(max diff {float((back - pv).abs().max()):.3g})")
    return u8


def mm_tensors(model, enc):
    """The `input.*` tensors and the HF encoder features (image_features / audio_features) of one
    processed multimodal prompt, as numpy arrays."""
    cfg = model.config
    H = cfg.get_text_config().hidden_size
    ids = enc["input_ids"]
    out = {}
    for k, name in ONNX_INPUT_NAMES.items():
        if k not in enc:
            continue
        v = enc[k]
        if k == "pixel_values":
            v = pixels_to_uint8(v)
        elif k in ("input_ids", "image_position_ids"):
            v = v.to(torch.int64)
        elif k == "input_features":
            v = v.to(torch.float32)
        elif k == "input_features_mask":
            v = v.to(torch.bool)
        out["input." + name] = np.ascontiguousarray(v.numpy())
    with torch.inference_mode():
        if "pixel_values" in enc:
            img = model.model.get_image_features(enc["pixel_values"], enc["image_position_ids"],
                                                 return_dict=True).pooler_output.reshape(-1, H)
            n = int((ids == cfg.image_token_id).sum())
            if img.shape[0] != n:
                raise JobError(f"{img.shape[0]} image features for {n} image tokens")
            out["image_features"] = np.ascontiguousarray(img.float().numpy())
        if "input_features" in enc:
            o = model.model.get_audio_features(enc["input_features"], enc["input_features_mask"], return_dict=True)
            aud = o.pooler_output[o.attention_mask].reshape(-1, H)  # HF drops masked frames
            n = int((ids == cfg.audio_token_id).sum())
            if aud.shape[0] != n:
                raise JobError(f"{aud.shape[0]} audio features for {n} audio tokens")
            out["audio_features"] = np.ascontiguousarray(aud.float().numpy())
    return out


def int4_weights(onnx_path):
    """{ONNX weight name: (op, W float32)} for every MatMulNBits weight (op "MatMulNBits", W [N, K]) and
    every GatherBlockQuantized table (op "GatherBlockQuantized", W the table's shape) of the ONNX model at
    onnx_path, dequantized exactly as ONNX Runtime's CPU kernels do (see the module docstring)."""
    import onnx
    from onnx import numpy_helper

    if not isinstance(onnx_path, str) or not os.path.isfile(onnx_path):
        raise JobError(f"dequantize={onnx_path!r} is not an ONNX model file")
    m = onnx.load(onnx_path)  # external data resolves relative to the file
    inits = {t.name: t for t in m.graph.initializer}
    out = {}

    def put(name, op, W):
        if name in out:
            raise JobError(f"{onnx_path}: {name} is quantized twice")
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
            raise JobError(f"{onnx_path}: MatMulNBits {n.name}: only 4 bits without g_idx/bias are supported")
        for i in ins[1:4]:
            if i and i not in inits:
                raise JobError(f"{onnx_path}: MatMulNBits {n.name}: input {i!r} is not an initializer")
        kb = (K + bs - 1) // bs
        B = numpy_helper.to_array(inits[ins[1]]).reshape(N, kb, bs // 2)
        q = np.stack([B & 0x0F, B >> 4], -1).reshape(N, kb, bs).astype(np.float32)  # low nibble first
        sc = numpy_helper.to_array(inits[ins[2]])
        if sc.dtype != np.float32:
            raise JobError(f"{onnx_path}: MatMulNBits {n.name}: {sc.dtype} scales (only float32 is supported)")
        sc = sc.reshape(N, kb, 1)
        if ins[3]:
            zp = numpy_helper.to_array(inits[ins[3]])
            if zp.dtype != np.uint8:
                raise JobError(f"{onnx_path}: MatMulNBits {n.name}: {zp.dtype} zero points (only packed uint8)")
            zp = zp.reshape(N, (kb + 1) // 2)  # each row padded to whole bytes
            zp = np.stack([zp & 0x0F, zp >> 4], -1).reshape(N, -1)[:, :kb].astype(np.float32).reshape(N, kb, 1)
        else:
            zp = np.float32(8)
        W = ((q - zp) * sc).reshape(N, kb * bs)[:, :K]
        put(ins[1][:-3] if ins[1].endswith("_Q4") else ins[1], "MatMulNBits", W)
    if not out:
        raise JobError(f"{onnx_path}: no MatMulNBits or GatherBlockQuantized nodes")
    return out


def _nibbles(tensor, count, signed):
    """The first `count` 4-bit values of a packed tensor's bytes (low nibble first), as int32."""
    from onnx.external_data_helper import uses_external_data

    if uses_external_data(tensor) or not tensor.raw_data:
        raise JobError(f"{tensor.name}: packed 4-bit data without raw_data is not supported")
    b = np.frombuffer(tensor.raw_data, np.uint8)
    if b.size != (count + 1) // 2:
        raise JobError(f"{tensor.name}: {b.size} bytes for {count} 4-bit values")
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
            raise JobError(f"{onnx_path}: GatherBlockQuantized {n.name}: input {i!r} is not an initializer")
    data, scales = inits[ins[0]], numpy_helper.to_array(inits[ins[2]])
    shape = list(data.dims)
    rank = len(shape)
    gather_axis, quantize_axis = a.get("gather_axis", 0), a.get("quantize_axis", 1)
    bs, bits = a.get("block_size", 128), a.get("bits", 4)
    gather_axis, quantize_axis = gather_axis % rank, quantize_axis % rank
    if rank != 2 or gather_axis != 0 or quantize_axis != rank - 1:
        raise JobError(f"{onnx_path}: GatherBlockQuantized {n.name}: only 2-D tables gathered along axis 0 and "
                       f"quantized along the last axis are supported (shape {shape}, gather_axis {gather_axis}, "
                       f"quantize_axis {quantize_axis})")
    if scales.dtype != np.float32:
        raise JobError(f"{onnx_path}: GatherBlockQuantized {n.name}: {scales.dtype} scales (only float32 is supported)")
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
        raise JobError(f"{onnx_path}: GatherBlockQuantized {n.name}: data type {data.data_type} with bits={bits} "
                       f"(only int4, uint4 or uint8 with bits=4 are supported)")
    kb = (cols + bs - 1) // bs
    if list(scales.shape) != [rows, kb]:
        raise JobError(f"{onnx_path}: GatherBlockQuantized {n.name}: scales {list(scales.shape)} for data "
                       f"[{rows}, {cols}] in blocks of {bs}")
    if ins[3]:
        zt = inits[ins[3]]
        if zt.data_type == data.data_type and data.data_type in (TensorProto.INT4, TensorProto.UINT4):
            zp = _nibbles(zt, rows * kb, signed).reshape(rows, kb)
        elif zt.data_type == TensorProto.UINT8 and data.data_type == TensorProto.UINT8:
            zp = _nibbles(zt, rows * ((kb + 1) // 2) * 2, False).reshape(rows, -1)[:, :kb]  # rows padded to bytes
        else:
            raise JobError(f"{onnx_path}: GatherBlockQuantized {n.name}: zero points of type {zt.data_type}")
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
            raise JobError(f"quantized table {onnx_name!r} is not an HF embedding weight")
        return [onnx_name]
    if not onnx_name.endswith("_t"):
        raise JobError(f"quantized weight {onnx_name!r} is not a transposed (`_t`) Linear weight")
    base = onnx_name[:-2]
    m = re.fullmatch(r"(.+)__axis_(\d+)__concat", base)
    if not m:
        return [base]
    if m.group(2) != "0":
        raise JobError(f"quantized weight {onnx_name!r}: concatenation along axis {m.group(2)} is not supported")
    return m.group(1).split("__")


# int4 blockwise rounding moves a weight by at most half a step (absmax / 16 of its block); over a whole
# tensor that is ~5-10% in norm. A table stored pre-scaled (e.g. by Gemma's sqrt(hidden)) or a name mapped to
# the wrong parameter is far off.
MAX_DEQUANT_REL_ERROR = 0.3


def dequantize_into(model, onnx_path):
    """Replace the HF weights that the ONNX model quantized by their dequantized values (in place);
    returns (count, sha256 over names and bytes)."""
    weights = int4_weights(onnx_path)
    params = dict(model.named_parameters(remove_duplicate=False))
    new = {}
    pieces = {}  # fused HF name -> {part index: dequantized rows}, for parts the ONNX model keeps apart
    for name, (op, W) in sorted(weights.items()):
        parts = hf_names(name, op)
        fused = [None if hf in params else fused_part(hf, params) for hf in parts]
        for hf, f in zip(parts, fused):
            if hf not in params and f is None:
                raise JobError(f"{onnx_path}: quantized weight {name!r} names no HF parameter {hf!r}")
            if hf in new:
                raise JobError(f"{onnx_path}: HF parameter {hf} is quantized twice")
        if any(fused):
            targets = {f[0] for f in fused if f}
            if len(parts) == 1:
                target, index, _ = fused[0]
                if index in pieces.setdefault(target, {}):
                    raise JobError(f"{onnx_path}: part {parts[0]} of {target} is quantized twice")
                pieces[target][index] = W
                continue
            # Parts concatenated in the graph (`a__b__c__axis_0__concat_t`) onto one fused HF parameter: the
            # same rows in the same order, i.e. the fused parameter itself.
            if len(targets) != 1 or [f and f[1] for f in fused] != list(range(fused[0][2])):
                raise JobError(f"{onnx_path}: {name!r} concatenates {parts}, which are not the parts of one fused HF "
                               f"parameter in order")
            parts = [targets.pop()]
        rows = [params[hf].shape[0] for hf in parts]
        if any(params[hf].dim() != 2 or params[hf].shape[1] != W.shape[1] for hf in parts) or sum(rows) != W.shape[0]:
            raise JobError(f"{onnx_path}: {name} dequantizes to {W.shape}, HF "
                           f"{[(hf, tuple(params[hf].shape)) for hf in parts]}")
        for hf, part in zip(parts, np.split(W, np.cumsum(rows)[:-1], axis=0)):
            new[hf] = torch.from_numpy(np.ascontiguousarray(part))
    for target, got in sorted(pieces.items()):
        n = len(FUSED[target.rpartition(".")[0].rpartition(".")[2]])
        if sorted(got) != list(range(n)):
            raise JobError(f"{onnx_path}: fused HF parameter {target} has {n} parts, the ONNX model quantized "
                           f"parts {sorted(got)} of them")
        if target in new:
            raise JobError(f"{onnx_path}: HF parameter {target} is quantized twice")
        W = np.concatenate([got[i] for i in range(n)], axis=0)
        if tuple(W.shape) != tuple(params[target].shape):
            raise JobError(f"{onnx_path}: the parts of {target} dequantize to {W.shape}, HF has "
                           f"{tuple(params[target].shape)}")
        new[target] = torch.from_numpy(np.ascontiguousarray(W))
    for hf, W in new.items():
        ref = params[hf].detach().float()
        rel = float(torch.linalg.norm(W - ref) / torch.linalg.norm(ref).clamp_min(1e-30))
        if not rel < MAX_DEQUANT_REL_ERROR:
            raise JobError(f"{onnx_path}: {hf} dequantizes {rel:.3f} (relative) away from the HF weight: not the "
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
                raise JobError(f"tied embedding {tied}: cannot tell the LM head from the input embedding")
            head_w = new.get(head[0], embed.detach().clone())
            emb_ws = [new.get(k, embed.detach().clone()) for k in emb]
            if any(not torch.equal(w, emb_ws[0]) for w in emb_ws[1:]):
                raise JobError(f"{onnx_path}: the input embedding's names {emb} dequantize differently")
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


def float64_prefill(model, inputs):
    """Every prompt position's logits [S, V] of the same prefill with the model (and every float input) in float64:
    how far the float32 reference sits from it is the reference's own numerical noise, the unit the tolerance policy
    judges a package in. Converts the model in place (run it last)."""
    model.double()
    cast = {k: (v.double() if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in inputs.items()}
    with torch.inference_mode():
        out = model(**cast).logits[0]
    if out.dtype != torch.float64:
        raise JobError(f"the float64 run returned {out.dtype} logits")
    return out.numpy()


def pad_id(model, tok, eos):
    pad = model.generation_config.pad_token_id
    if pad is None:
        pad = tok.pad_token_id
    if pad is None:
        pad = eos[0] if eos else 0
    if isinstance(pad, list):
        pad = pad[0]
    return pad


def run_job(job):
    modality = modality_of(job)
    multimodal = modality != "text"
    missing = [k for k in (REQUIRED_MM if multimodal else REQUIRED) if k not in job]
    if missing:
        raise JobError(f"missing keys {missing}")
    ref = local_dir(job, "reference")
    n_new = job["max_new_tokens"]
    if not isinstance(n_new, int) or n_new < 1:
        raise JobError(f"max_new_tokens must be a positive int, got {n_new!r}")
    need_images, need_audio = MODALITIES[modality]
    dequantize = job.get("dequantize")
    if dequantize is not None and multimodal:
        raise JobError("dequantize is only supported for text jobs")
    image_paths = media_paths(job, "images", need_images)
    audio_paths = media_paths(job, "audio", need_audio)

    if multimodal:
        proc_dir = local_dir(job, "processor") if job.get("processor") is not None else ref
        processor = AutoProcessor.from_pretrained(proc_dir, local_files_only=True)
        tok = processor.tokenizer
        images = [load_image(p) for p in image_paths]
        sr = getattr(getattr(processor, "feature_extractor", None), "sampling_rate", None)
        if audio_paths and sr is None:
            raise JobError(f"the processor in {proc_dir} has no audio feature extractor")
        audio = [load_audio(p, sr) for p in audio_paths]
        inputs = mm_encode(processor, job["prompt"], images, audio)
    else:
        tok = AutoTokenizer.from_pretrained(local_dir(job, "tokenizer"), local_files_only=True)
        enc = tok(job["prompt"], return_tensors="pt")  # default add_special_tokens: BOS is prepended
        inputs = {"input_ids": enc["input_ids"]}
        inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    input_ids = inputs["input_ids"]
    if input_ids.shape[0] != 1 or input_ids.shape[1] == 0:
        raise JobError(f"bad tokenization shape {tuple(input_ids.shape)}")

    model = AutoModelForCausalLM.from_pretrained(ref, dtype=torch.float32, local_files_only=True)
    model = model.to("cpu").float().eval()
    if dequantize is not None:
        n_deq, deq_sha = dequantize_into(model, dequantize)
    eos = eos_ids(job, model)
    pad = pad_id(model, tok, eos)
    prompt_logits, generated, step_logits = greedy(model, inputs, n_new, eos, pad)
    prefill = prompt_logits[-1].clone()

    S, N, V = input_ids.shape[1], generated.shape[0], step_logits.shape[1]
    if multimodal:
        mm = mm_tensors(model, inputs)  # before the float64 run below converts the model
    try:
        prefill64 = float64_prefill(model, inputs)
    except RuntimeError as e:
        # Gemma-4's audio tower casts to float32 inside (RuntimeError: expected Float but found Double): such a
        # model has no float64 run, and its goldens no noise floor (judged by atol/rtol, as before).
        if not multimodal:
            raise
        print(f"{job['case']}: no float64 run ({str(e).splitlines()[0]}); golden without a noise floor", flush=True)
        prefill64 = None
    positions = position_summary(prompt_logits, prefill64)
    del prompt_logits
    prefill64 = None if prefill64 is None else np.ascontiguousarray(prefill64[-1])
    tensors = {
        "input_ids": input_ids[0].to(torch.int64).numpy(),
        "prefill_logits": np.ascontiguousarray(prefill.numpy(), dtype=np.float32),
        "generated_tokens": generated.to(torch.int64).numpy(),
        "step_logits": np.ascontiguousarray(step_logits.numpy(), dtype=np.float32),
    }
    metadata = {
        "case": str(job["case"]),
        "prompt": job["prompt"],
        "generated_text": tok.decode(generated.tolist(), skip_special_tokens=True),
        "eos_token_id": json.dumps(eos),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    extra = ""
    if dequantize is not None:
        metadata["dequantized_from"] = dequantize
        metadata["dequantized_weights"] = str(n_deq)
        metadata["dequantized_sha256"] = deq_sha
        extra = f" dequantized={n_deq}"
    if prefill64 is not None:
        tensors["prefill_logits_f64"] = np.ascontiguousarray(prefill64, dtype=np.float64)
    tensors.update(positions)
    if multimodal:
        tensors.update(mm)
        metadata["modality"] = modality
        extra = " " + " ".join(f"{k}={list(v.shape)}" for k, v in sorted(mm.items()) if not k.startswith("input."))
    out_path = job["out"]
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    save_safetensors(tensors, metadata, out_path)

    top2 = torch.topk(torch.cat([prefill[None], step_logits]), 2, dim=-1).values
    min_margin = float((top2[:, 0] - top2[:, 1]).min())
    stopped = "eos" if eos and int(generated[-1]) in eos else "length"
    if prefill64 is not None:
        noise = np.abs(prefill.numpy().astype(np.float64) - prefill64)
        extra += f" fp32-vs-fp64 max={noise.max():.3g} median={np.median(noise):.3g}"
    return (f"{job['case']}: S={S} N={N} V={V} stop={stopped} min_top1_top2_margin={min_margin:.4f}{extra} "
            f"tokens={generated.tolist()} -> {out_path}")


def main(argv):
    if len(argv) != 2:
        raise SystemExit(f"usage: {argv[0]} JOBS.json")
    with open(argv[1]) as fh:
        spec = json.load(fh)
    jobs = spec.get("jobs") if isinstance(spec, dict) else None
    if not isinstance(jobs, list):
        raise SystemExit(f"{argv[1]}: expected an object with a 'jobs' list")

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()

    failed = 0
    for i, job in enumerate(jobs):
        name = job.get("case", f"#{i}") if isinstance(job, dict) else f"#{i}"
        t0 = time.time()
        try:
            if not isinstance(job, dict):
                raise JobError("job is not an object")
            line = run_job(job)
            print(f"{line} ({time.time() - t0:.1f}s)", flush=True)
        except JobError as e:
            failed += 1
            print(f"{name}: ERROR {e}", flush=True)
    if failed:
        raise SystemExit(f"{failed} of {len(jobs)} jobs failed")


if __name__ == "__main__":
    main(sys.argv)
