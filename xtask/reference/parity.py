#!/usr/bin/env python3
"""Report-only check: HF transformers (fp32, CPU) vs the fixtures' ONNX packages on ONNX Runtime CPU.

    python parity.py --fixtures <repo>/fixtures [--only NAME ...] [--io]

For every model and ONNX flavour: prefill + greedy decode with the KV cache in ONNX Runtime
(intra_op_num_threads=1), compared with HF's prefill logits and generate() step logits on the
designed prompt (fixtures.PROMPTS). Also runs the broken kv-swap package (it must diverge) and
"bite" checks: how far HF logits move when a feature is switched off (softcap, sliding window,
Gemma-4 layer scalars), i.e. that the fixtures exercise those features.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures as F  # noqa: E402

N = F.GEN_TOKENS
NP_DT = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64}


def io_summary(path):
    m = onnx.load(path, load_external_data=False)

    def sh(t):
        return [d.dim_param or d.dim_value for d in t.type.tensor_type.shape.dim]

    def dt(t):
        return onnx.TensorProto.DataType.Name(t.type.tensor_type.elem_type)

    ops = collections.Counter((n.domain + "::" if n.domain else "") + n.op_type for n in m.graph.node)
    return {
        "opset": [(o.domain, o.version) for o in m.opset_import],
        "inputs": [(i.name, dt(i), sh(i)) for i in m.graph.input],
        "outputs": [(o.name, dt(o), sh(o)) for o in m.graph.output],
        "ops": dict(sorted(ops.items())),
    }


def hf_reference(model, ids):
    with torch.inference_mode():
        prefill = model(torch.from_numpy(ids)).logits[0].float().numpy()  # [S, V]
        g = model.generate(torch.from_numpy(ids), max_new_tokens=N, do_sample=False, num_beams=1,
                           output_logits=True, return_dict_in_generate=True, pad_token_id=F.PAD_ID,
                           eos_token_id=None)
    tokens = g.sequences[0, ids.shape[1]:].tolist()
    steps = np.stack([lg[0].float().numpy() for lg in g.logits])  # [N, V]
    return prefill, tokens, steps


def ort_greedy(onnx_path, ids):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    ins = {i.name: i for i in sess.get_inputs()}
    outs = [o.name for o in sess.get_outputs()]
    past = {n: np.zeros((1, i.shape[1], 0, i.shape[3]), dtype=NP_DT[i.type])
            for n, i in ins.items() if n.startswith("past_key_values")}

    def run(tok, pos0, total):
        feed = {"input_ids": tok, "attention_mask": np.ones((1, total), np.int64),
                "position_ids": np.arange(pos0, pos0 + tok.shape[1], dtype=np.int64)[None]}
        feed.update(past)
        feed = {k: v for k, v in feed.items() if k in ins}
        res = dict(zip(outs, sess.run(outs, feed)))
        for n in past:
            past[n] = res[n.replace("past_key_values", "present")]
        return res["logits"][0].astype(np.float32)

    S = ids.shape[1]
    lg = run(ids, 0, S)
    prefill = lg
    steps, tokens = [lg[-1]], []
    nxt = int(lg[-1].argmax())
    for t in range(N):
        tokens.append(nxt)
        if t == N - 1:
            break
        lg = run(np.array([[nxt]], np.int64), S + t, S + t + 1)
        steps.append(lg[-1])
        nxt = int(lg[-1].argmax())
    return prefill, tokens, np.stack(steps)


def margins(steps):
    s = np.sort(steps, axis=-1)
    return s[:, -1] - s[:, -2]


def moved(model, ids, tokens, mutate):
    """(max |logit change|, #argmax changes) over prefill-last + teacher-forced decode positions
    when `mutate` is applied."""
    full = torch.tensor([ids[0].tolist() + tokens[:-1]])
    S = ids.shape[1]
    with torch.inference_mode():
        base = model(full).logits[0, S - 1:].float()
        undo = mutate(model)
        try:
            alt = model(full).logits[0, S - 1:].float()
        finally:
            undo()
    changed = int((alt.argmax(-1) != base.argmax(-1)).sum())
    return round(float((alt - base).abs().max()), 4), changed


def set_cfg(key, value):
    def mutate(model):
        old = getattr(model.config, key)
        setattr(model.config, key, value)
        for layer in getattr(model.model, "layers", []):
            attn = layer.self_attn
            if key == "sliding_window" and getattr(attn, "sliding_window", None) is not None:
                attn.sliding_window = value
        return lambda: (setattr(model.config, key, old), [
            setattr(layer.self_attn, "sliding_window", old) for layer in model.model.layers
            if key == "sliding_window" and getattr(layer.self_attn, "sliding_window", None) is not None])
    return mutate


def layer_scalars_to_one(model):
    saved = [(m, m.layer_scalar.clone()) for m in model.modules() if hasattr(m, "layer_scalar")]
    for m, _ in saved:
        m.layer_scalar.fill_(1.0)
    return lambda: [m.layer_scalar.copy_(v) for m, v in saved]


def per_layer_inputs_to_zero(model):
    mods = [model.model.embed_tokens_per_layer, model.model.per_layer_model_projection]
    saved = [(m.weight, m.weight.clone()) for m in mods]
    for w, _ in saved:
        w.zero_()
    return lambda: [w.copy_(v) for w, v in saved]


def bites(name, model, ids, tokens):
    out = {}
    cfg = model.config
    if getattr(cfg, "final_logit_softcapping", None):
        out["no_final_softcap"] = moved(model, ids, tokens, set_cfg("final_logit_softcapping", None))
    if getattr(cfg, "sliding_window", None) and "sliding_attention" in (getattr(cfg, "layer_types", None) or []):
        out["no_sliding_window"] = moved(model, ids, tokens, set_cfg("sliding_window", 4096))
    if any(hasattr(m, "layer_scalar") for m in model.modules()):
        out["layer_scalar=1"] = moved(model, ids, tokens, layer_scalars_to_one)
    if getattr(cfg, "hidden_size_per_layer_input", None):
        out["per_layer_inputs=0"] = moved(model, ids, tokens, per_layer_inputs_to_zero)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--only", nargs="+", choices=list(F.MODELS))
    ap.add_argument("--io", action="store_true", help="print decoder I/O names, dtypes, shapes")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    root = os.path.abspath(args.fixtures)
    report = {}
    for name in args.only or F.MODELS:
        hf_dir = os.path.join(root, name, "hf")
        tok = AutoTokenizer.from_pretrained(hf_dir)
        ids = tok(F.PROMPTS[name], return_tensors="np")["input_ids"].astype(np.int64)
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
        hf_prefill, hf_tokens, hf_steps = hf_reference(model, ids)
        m = margins(hf_steps)
        r = {"prompt_len": int(ids.shape[1]), "hf_tokens": hf_tokens,
             "min_margin": round(float(m.min()), 4), "argmin_step": int(m.argmin()),
             "eos_in_tokens": F.EOS_ID in hf_tokens, "bites": bites(name, model, ids, hf_tokens)}
        packages = {f: os.path.join(root, name, "onnx", f, "model.onnx") for f in F.ONNX_FLAVOURS}
        if name == "qwen3-tiny":
            packages["broken/kv-swap-f32"] = os.path.join(root, name, "broken", "kv-swap-f32", "model.onnx")
        for flavour, path in packages.items():
            if not os.path.isfile(path):
                r[flavour] = "missing"
                continue
            o_prefill, o_tokens, o_steps = ort_greedy(path, ids)
            k = min(len(o_tokens), len(hf_tokens))
            same = next((i for i in range(k) if o_tokens[i] != hf_tokens[i]), k)
            r[flavour] = {
                "prefill_last_maxabs": float(np.abs(o_prefill[-1] - hf_prefill[-1]).max()),
                "prefill_all_maxabs": float(np.abs(o_prefill - hf_prefill).max()),
                # steps are only comparable while the token streams agree
                "decode_steps_maxabs": float(np.abs(o_steps[:same] - hf_steps[:same]).max()) if same else None,
                "tokens_equal": o_tokens == hf_tokens,
                "first_divergence": None if o_tokens == hf_tokens else same,
            }
            if args.io:
                r[flavour]["io"] = io_summary(path)
        report[name] = r
        print(json.dumps({name: r}), flush=True)
    return report


if __name__ == "__main__":
    main()
