"""The CTranslate2 Whisper reader on a tiny hand-written model.bin (run by ct2_whisper.rs): the fused Q/K/V split
back in order, the zero K bias dropped, and each way a checkpoint can differ from Whisper refused naming the file;
then hostile files (issue 46), each refused with one error naming the file and the tensor or field."""
import os, struct, sys, numpy as np
from reference import ct2_whisper as c

def string(s):
    b = (s if isinstance(s, bytes) else s.encode()) + b"\0"
    return struct.pack("<H", len(b)) + b

def write(path, tensors, revision=3, aliases=(), count=None, names={}, nbytes={}):
    """`count`, `names` (raw bytes for a tensor's name) and `nbytes` (a tensor's byte count, its data cut to it) write
    a file that lies about itself."""
    out = struct.pack("<I", 6) + string("WhisperSpec") + struct.pack("<I", revision)
    out += struct.pack("<I", len(tensors) if count is None else count)
    for name, a in tensors.items():
        code = {np.dtype("float16"): 4, np.dtype("float32"): 0, np.dtype("int8"): 1, np.dtype("int16"): 2}[a.dtype]
        out += string(names.get(name, name)) + struct.pack("<B", a.ndim) + struct.pack(f"<{a.ndim}I", *a.shape)
        n = nbytes.get(name, a.nbytes)
        out += struct.pack("<B", code) + struct.pack("<I", n) + a.tobytes()[:n]
    out += struct.pack("<I", len(aliases)) + b"".join(string(a) + string(t) for a, t in aliases)
    with open(path, "wb") as fh:
        fh.write(out)

rng = np.random.default_rng(0)
d, ffn, vocab = 4, 8, 6
def h(*shape): return rng.standard_normal(shape).astype(np.float16)
t = {"encoder/num_heads": np.array(2, np.int16), "decoder/num_heads": np.array(2, np.int16),
     "encoder/conv1/weight": h(d, 2, 3), "encoder/conv1/bias": h(d), "encoder/conv2/weight": h(d, d, 3), "encoder/conv2/bias": h(d),
     "encoder/position_encodings/encodings": h(5, d), "encoder/layer_norm/gamma": h(d), "encoder/layer_norm/beta": h(d),
     "decoder/embeddings/weight": h(vocab, d), "decoder/position_encodings/encodings": h(7, d),
     "decoder/layer_norm/gamma": h(d), "decoder/layer_norm/beta": h(d),
     "decoder/activation": np.array(3, np.int8), "decoder/alibi": np.array(0, np.int8), "decoder/pre_norm": np.array(1, np.int8),
     "decoder/scale_embeddings": np.array(0, np.int8), "decoder/start_from_zero_embedding": np.array(0, np.int8),
     "decoder/alignment_heads": np.array(1, np.int16), "decoder/alignment_layer": np.array(-1, np.int16)}
def norm(p): t[p + "/gamma"], t[p + "/beta"] = h(d), h(d)
def lin(p, o, i): t[p + "/weight"], t[p + "/bias"] = h(o, i), h(o)
for side in ("encoder", "decoder"):
    p = f"{side}/layer_0"
    norm(p + "/self_attention/layer_norm"); lin(p + "/self_attention/linear_0", 3 * d, d); lin(p + "/self_attention/linear_1", d, d)
    t[p + "/self_attention/linear_0/bias"][d:2 * d] = 0
    norm(p + "/ffn/layer_norm"); lin(p + "/ffn/linear_0", ffn, d); lin(p + "/ffn/linear_1", d, ffn)
p = "decoder/layer_0/attention"
norm(p + "/layer_norm"); lin(p + "/linear_0", d, d); lin(p + "/linear_1", 2 * d, d); lin(p + "/linear_2", d, d)
t[p + "/linear_1/bias"][:d] = 0
dirname = sys.argv[1]  # a scratch folder for the file

def convert(tensors, **kw):
    path = os.path.join(dirname, "model.bin")
    write(path, tensors, **kw)
    return c.placed(c.read_model_bin(path), path)[0]

tied = [("decoder/projection/weight", "decoder/embeddings/weight")]
sd = convert(t, aliases=tied)
q, k, v = np.split(t["decoder/layer_0/self_attention/linear_0/weight"].astype(np.float32), 3)
assert np.array_equal(sd["model.decoder.layers.0.self_attn.k_proj.weight"], k)
assert "model.decoder.layers.0.self_attn.k_proj.bias" not in sd and "model.decoder.layers.0.self_attn.v_proj.bias" in sd
assert np.array_equal(sd["model.decoder.layers.0.encoder_attn.v_proj.weight"], np.split(t[p + "/linear_1/weight"].astype(np.float32), 2)[1])
print("converted")
for edit, kw, said in [
    ({}, {"revision": 2, "aliases": tied}, "spec WhisperSpec revision 2; this converter reads version 6, WhisperSpec revision 3"),
    ({"encoder/layer_0/self_attention/linear_0/bias": np.ones(3 * d, np.float16)}, {"aliases": tied},
     "encoder/layer_0/self_attention/linear_0/bias: the K rows are not zero"),
    ({"decoder/layer_norm/beta": None}, {"aliases": tied}, "model.bin: no tensor decoder/layer_norm/beta"),
    ({"decoder/alibi": np.array(1, np.int8)}, {"aliases": tied}, "decoder/alibi is 1, Whisper's is 0"),
    ({"decoder/projection/weight": h(vocab, d)}, {}, "decoder/projection/weight is not the token embedding"),
    ({"decoder/extra": h(2)}, {"aliases": tied}, "tensors this converter does not place: ['decoder/extra']"),
]:
    try:
        convert({k: v for k, v in {**t, **edit}.items() if v is not None}, **kw)
    except SystemExit as e:
        assert said in str(e) and "model.bin" in str(e), (said, str(e))
        print("refused:", e)
    else:
        raise AssertionError(f"converted despite: {said}")

# Hostile files: each ends in one SystemExit naming the file and the tensor or field, never a traceback or a pass.
qkv, fc2 = "encoder/layer_0/self_attention/linear_0", "encoder/layer_0/ffn/linear_1/weight"
def nan_at(name, at, value):
    a = t[name].copy(); a[at] = value
    return a
for edit, kw, said in [
    ({}, {"aliases": tied, "nbytes": {"encoder/conv1/bias": 7}},
     ("tensor encoder/conv1/bias at byte ", ": 7 bytes is not a whole number of float16 values")),
    ({}, {"aliases": tied, "names": {"encoder/conv1/bias": b"encoder/\xffconv1/bias"}},
     ("tensor #3 at byte ", ": the name b'encoder/\\xffconv1/bias' is not UTF-8")),
    ({}, {"aliases": [("decoder/projection/weight", "decoder/embedding/weight")]},
     ("alias decoder/projection/weight at byte ", ": its target decoder/embedding/weight is no tensor of the file")),
    ({qkv + "/weight": h(3 * d + 1, d), qkv + "/bias": np.zeros(3 * d + 1, np.float16)}, {"aliases": tied},
     f"tensor {qkv}/weight: shape [13, 4], the model's sizes imply [12, 4]"),
    ({"decoder/activation": np.zeros(0, np.int8)}, {"aliases": tied},
     "tensor decoder/activation: int8 of shape [0], expected one integer"),
    ({}, {"aliases": tied, "count": 4_000_000_000}, "the tensor count at byte 22: the tensor count is 4000000000"),
    ({"decoder/embeddings/weight": nan_at("decoder/embeddings/weight", (2, 1), np.nan)}, {"aliases": tied},
     "tensor decoder/embeddings/weight: 1 non-finite values (the first, at [2, 1], is nan)"),
    ({"encoder/conv1/weight": nan_at("encoder/conv1/weight", (0, 1, 2), np.inf)}, {"aliases": tied},
     "tensor encoder/conv1/weight: 1 non-finite values (the first, at [0, 1, 2], is inf)"),
    ({fc2: h(d, ffn + 2)}, {"aliases": tied}, f"tensor {fc2}: shape [4, 10], the model's sizes imply [4, 8]"),
]:
    try:
        convert({k: v for k, v in {**t, **edit}.items() if v is not None}, **kw)
    except SystemExit as e:
        said = (said,) if isinstance(said, str) else said
        assert all(s in str(e) for s in said) and str(e).startswith(os.path.join(dirname, "model.bin") + ": "), (said, str(e))
        print("refused:", e)
    else:
        raise AssertionError(f"converted despite: {said}")
