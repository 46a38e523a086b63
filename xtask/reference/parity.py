#!/usr/bin/env python3
"""Report-only check: HF transformers (fp32, CPU) vs the fixtures' ONNX packages on ONNX Runtime CPU.

    python parity.py --fixtures <repo>/fixtures [--only NAME ...] [--io]

For every model and ONNX flavour: prefill + greedy decode with the KV cache in ONNX Runtime
(intra_op_num_threads=1), compared with HF's prefill logits and generate() step logits on the
designed prompt (fixtures.PROMPTS). Also runs "bite" checks: how far HF logits move when a feature is switched off (softcap, sliding window,
Gemma-4 layer scalars), i.e. that the fixtures exercise those features.

The multimodal fixture (gemma4-mm-tiny) runs its three design prompts (fixtures.MM_PROMPTS, the real
jpeg / flac through the processor as goldens.py does) through the package's four sessions
(vision_encoder, audio_encoder, embedding, decoder; located via genai_config.json): encoder features,
prefill and 16 cached greedy steps against HF, plus ablations: the logits moved by zeroing the image
or audio features (the media reach the decoder) and the encoder features moved by bypassing each
ClippableLinear Clip node (the clamps bite). --io adds every session's I/O.
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


# --------------------------------------------------------------------------------------------
# multimodal (gemma4-mm-tiny): HF Gemma4ForConditionalGeneration vs the 4-session package


def ort_session(model, threads=1):
    so = ort.SessionOptions()
    so.log_severity_level = 3  # a bypassed Clip leaves unused initializers: ORT warns about each
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


class MMPackage:
    """The four sessions of a mobius ort-genai multimodal package, located through genai_config.json."""

    def __init__(self, pkg_dir):
        self.dir = pkg_dir
        with open(os.path.join(pkg_dir, "genai_config.json")) as fh:
            self.genai = json.load(fh)
        m = self.genai["model"]
        self.files = {"vision_encoder": m["vision"]["filename"], "audio_encoder": m["speech"]["filename"],
                      "embedding": m["embedding"]["filename"], "decoder": m["decoder"]["filename"]}
        self.hidden = m["decoder"]["hidden_size"]
        self.sess = {k: ort_session(os.path.join(pkg_dir, f)) for k, f in self.files.items()}
        dec = self.sess["decoder"]
        self.dec_in = {i.name: i for i in dec.get_inputs()}
        self.dec_out = [o.name for o in dec.get_outputs()]

    def image_features(self, pixel_u8, positions, sess=None):
        pv = pixel_u8.astype(np.float32) * np.float32(1 / 255)  # == the processor's pixel_values, bit for bit
        return (sess or self.sess["vision_encoder"]).run(
            ["image_features"], {"pixel_values": pv, "pixel_position_ids": positions})[0]

    def audio_features(self, features, mask, sess=None):
        return (sess or self.sess["audio_encoder"]).run(
            ["audio_features"], {"input_features": features, "input_features_mask": mask})[0]

    def greedy(self, ids, img, aud, n=N):
        """embedding + decoder prefill and n-1 cached decode steps: (prefill logits [S, V], tokens, steps [n, V])."""
        empty = np.zeros((0, self.hidden), np.float32)
        past = {k: np.zeros((1, i.shape[1], 0, i.shape[3]), dtype=NP_DT[i.type])
                for k, i in self.dec_in.items() if k.startswith("past_key_values")}

        def run(tok, pos0, total, i_f, a_f):
            e, pli = self.sess["embedding"].run(["inputs_embeds", "per_layer_inputs"],
                                                {"input_ids": tok, "image_features": i_f, "audio_features": a_f})
            feed = {"inputs_embeds": e, "per_layer_inputs": pli, "attention_mask": np.ones((1, total), np.int64),
                    "position_ids": np.arange(pos0, pos0 + tok.shape[1], dtype=np.int64)[None], **past}
            feed = {k: v for k, v in feed.items() if k in self.dec_in}
            r = dict(zip(self.dec_out, self.sess["decoder"].run(self.dec_out, feed)))
            for k in past:
                past[k] = r[k.replace("past_key_values", "present")]
            return r["logits"][0].astype(np.float32)

        S = ids.shape[1]
        prefill = run(ids, 0, S, img if img is not None else empty, aud if aud is not None else empty)
        steps, tokens = [prefill[-1]], []
        nxt = int(prefill[-1].argmax())
        for t in range(n):
            tokens.append(nxt)
            if t == n - 1:
                break
            lg = run(np.array([[nxt]], np.int64), S + t, S + t + 1, empty, empty)
            steps.append(lg[-1])
            nxt = int(lg[-1].argmax())
        return prefill, tokens, np.stack(steps)

    def io(self):
        return {k: io_summary(os.path.join(self.dir, f)) for k, f in self.files.items()}


def without_clip(path, clip_name):
    """The ONNX model at `path` (external data loaded) with Clip node `clip_name` bypassed, as bytes."""
    m = onnx.load(path)
    for node in m.graph.node:
        if node.name == clip_name:
            node.op_type, node.domain = "Identity", ""
            del node.input[1:]
            del node.attribute[:]
            return m.SerializeToString()
    raise KeyError(clip_name)


def clamp_clips(path):
    """Names of the Clip nodes that implement Gemma-4's ClippableLinear clamps (bounds from the
    *.input_min/max, *.output_min/max initializers), in graph order."""
    m = onnx.load(path, load_external_data=False)
    return [n.name for n in m.graph.node
            if n.op_type == "Clip" and len(n.input) > 1 and n.input[1].endswith(("input_min", "output_min"))]


def clip_bites(pkg, kind, args):
    """max |feature change| when each clamp Clip node of the `kind` encoder is bypassed."""
    path = os.path.join(pkg.dir, pkg.files[kind])
    fn = pkg.image_features if kind == "vision_encoder" else pkg.audio_features
    base = fn(*args)
    moves = {}
    for name in clamp_clips(path):
        alt = fn(*args, sess=ort_session(without_clip(path, name)))
        moves[name] = float(np.abs(alt - base).max())
    weakest = min(moves, key=moves.get)
    return {"clamp_clips": len(moves), "min_move": round(moves[weakest], 4), "weakest": weakest,
            "max_move": round(max(moves.values()), 4), "median_move": round(float(np.median(list(moves.values()))), 4)}


def maxabs(a, b):
    if a.shape != b.shape:
        return f"shape {list(a.shape)} vs {list(b.shape)}"
    return float(np.abs(a - b).max())


def mm_parity(name, root, flavours, io=False, bites_too=True):
    from transformers import AutoProcessor

    G = F._goldens()
    hf_dir = os.path.join(root, name, "hf")
    processor = AutoProcessor.from_pretrained(hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    pkgs = {f: MMPackage(os.path.join(root, name, "onnx", f)) for f in flavours
            if os.path.isfile(os.path.join(root, name, "onnx", f, "genai_config.json"))}
    report = {}
    for modality, (_, text) in F.MM_PROMPTS.items():
        enc = F.mm_encode(processor, root, modality)
        prefill, generated, steps = G.greedy(model, enc, N, [], F.PAD_ID)
        t = G.mm_tensors(model, enc)
        hf_steps = steps.numpy()
        hf_tokens = generated.tolist()
        m = margins(hf_steps)
        r = {"prompt": text, "prompt_len": int(enc["input_ids"].shape[1]), "hf_tokens": hf_tokens,
             "min_margin": round(float(m.min()), 4), "argmin_step": int(m.argmin()),
             "logits_absmax": round(float(np.abs(hf_steps).max()), 3)}
        if bites_too:
            with torch.inference_mode():
                base = model(**enc).logits[0, -1]
                tc = model.config.get_text_config()
                cap, tc.final_logit_softcapping = tc.final_logit_softcapping, None
                try:
                    r["hf_no_final_softcap"] = round(float((model(**enc).logits[0, -1] - base).abs().max()), 4)
                finally:
                    tc.final_logit_softcapping = cap
        ids = t["input.input_ids"]
        for flavour, pkg in pkgs.items():
            img = aud = None
            o = {}
            if "image_features" in t:
                img = pkg.image_features(t["input.pixel_values"], t["input.pixel_position_ids"])
                o["image_features_maxabs"] = maxabs(img, t["image_features"])
            if "audio_features" in t:
                aud = pkg.audio_features(t["input.input_features"], t["input.input_features_mask"])
                o["audio_features_maxabs"] = maxabs(aud, t["audio_features"])
            o_prefill, o_tokens, o_steps = pkg.greedy(ids, img, aud)
            same = next((i for i in range(N) if o_tokens[i] != hf_tokens[i]), N)
            o.update(prefill_last_maxabs=float(np.abs(o_prefill[-1] - prefill.numpy()).max()),
                     decode_steps_maxabs=float(np.abs(o_steps[:same] - hf_steps[:same]).max()) if same else None,
                     tokens_equal=o_tokens == hf_tokens,
                     first_divergence=None if o_tokens == hf_tokens else same)
            # ablations: does each medium reach the decoder? (ONNX, last prompt position + free-running tokens)
            for kind, feats in (("image", img), ("audio", aud)):
                if feats is None:
                    continue
                z = np.zeros_like(feats)
                a_prefill, a_tokens, _ = pkg.greedy(ids, z if kind == "image" else img, z if kind == "audio" else aud)
                o[f"zero_{kind}_features"] = {
                    "last_logits_maxabs": round(float(np.abs(a_prefill[-1] - o_prefill[-1]).max()), 4),
                    "tokens_changed": sum(a != b for a, b in zip(a_tokens, o_tokens))}
            if bites_too and flavour == "default-f32" and modality == "image+audio":
                o["clip_removed_vision"] = clip_bites(
                    pkg, "vision_encoder", (t["input.pixel_values"], t["input.pixel_position_ids"]))
                o["clip_removed_audio"] = clip_bites(
                    pkg, "audio_encoder", (t["input.input_features"], t["input.input_features_mask"]))
            r[flavour] = o
        report[modality] = r
        print(json.dumps({f"{name} {modality}": r}), flush=True)
    if io:
        for flavour, pkg in pkgs.items():
            report[f"io/{flavour}"] = pkg.io()
            print(json.dumps({f"{name} io {flavour}": report[f"io/{flavour}"]}), flush=True)
    return report


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--only", nargs="+", choices=[*F.MODELS, *F.MM_MODELS])
    ap.add_argument("--io", action="store_true", help="print decoder I/O names, dtypes, shapes")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    root = os.path.abspath(args.fixtures)
    report = {}
    for name in args.only or [*F.MODELS, *F.MM_MODELS]:
        if name in F.MM_MODELS:
            report[name] = mm_parity(name, root, list(F.ONNX_FLAVOURS), io=args.io)
            continue
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
