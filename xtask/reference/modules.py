"""The reference's module outputs along a decoder's path, for the localize level (`level/localize/` of the suite).

    python -m reference.modules JOBS.json      (run by `cargo xtask regen-goldens`)

JOBS.json: {"jobs": [{"case": "...", "reference": "/abs/hf", "tokenizer": "/abs/tok", "prompt": "...",
                      "dequantize": "/abs/model.onnx" (optional: int4 kernel parity, as goldens.py),
                      "out": "/abs/raw.safetensors"}]}

The prompt is tokenized as goldens.py does (default special tokens) and run once through the float32 model with a
hook on each module along the path, then once more with the model and its inputs in float64. Kept, at the last
prompt position, in the order the modules run:

    model.embed_tokens                       output
    model.layers.<i>.<child>                 output, for each direct child of the decoder layer that has weights
                                             (its norms, the attention block before its residual add, the MLP)
    model.layers.<i>.<norm>  (role input)    the input of a norm child, where it is not the output just recorded:
                                             the residual stream (after layer i-1, or after the attention's add)
    model.norm  (role input, output)         the last layer's output, and the final norm's

Written (safetensors, common.save_safetensors):

    values.<k>   float32 [n_k]   entry k's float32 values (k zero-padded to 3 digits)
    noise        float64 [M]     entry k's max |float32 - float64| over its values: the reference's own noise
    input_ids    int64   [S]

metadata: format (MODULES_FORMAT), case, prompt, entries (JSON list of [module, role], or [module, role, "encoder"]
for an encoder-decoder's encoder module), frames (Whisper: the encoder frames its modules are kept at, JSON),
transformers, torch, dequantized_from / dequantized_weights / dequantized_sha256 for a kernel-parity job.

Whisper (`task_type: speech-to-text`, one clip in `audio`): the clip's log-mel features and the forced prefix as
speech.py makes them; its encoder's modules (each layer's weighted children, the residual stream its norms read, the
final layer_norm) at two frames inside the clip's speech, their rows one after another, then its decoder's as a text
decoder's at the prefix's last position.
"""
from __future__ import annotations

import json
import sys

from .common import ReferenceError, run_jobs, save_safetensors

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from .dequantize import dequantize_into  # noqa: E402

MODULES_FORMAT = "modules-raw-v1"
REQUIRED = ("case", "reference", "tokenizer", "prompt", "out")


def _at(t, frames=None):
    """A hidden state at the last prompt position ([1, S, ...] or [S, ...]), or at `frames` (an encoder's [1, T, H]:
    those rows, one after another), as float64."""
    if frames is not None:
        return t[0, frames].detach().to(torch.float64).reshape(-1).clone()
    if t.dim() >= 3:
        return t[0, -1].detach().to(torch.float64).reshape(-1).clone()
    return t[-1].detach().to(torch.float64).reshape(-1).clone()


def _is_norm(module):
    return "norm" in type(module).__name__.lower()


def stacks(model):
    """The stacks of layers recorded, in the order they run: (stack, part, frames or None). A text decoder: `model`
    of a causal LM, `model.language_model` of a multimodal one; Whisper: its encoder, then its decoder."""
    whisper = getattr(getattr(model, "model", None), "encoder", None)
    if whisper is not None and hasattr(whisper, "layers") and hasattr(model.model, "decoder"):
        return [(model.model.encoder, "encoder"), (model.model.decoder, "decoder")]
    base = next((m for m in model.modules() if hasattr(m, "layers") and hasattr(m, "embed_tokens")), None)
    if base is None:
        raise ReferenceError(f"{type(model).__name__} has no module with `layers` and `embed_tokens`: not a decoder the rule knows")
    return [(base, "decoder")]


def record(model, inputs, frames=None):
    """[(module, role, part, values)] of one forward pass, in the order the hooks fired: a decoder's at the last
    position, an encoder's at `frames`."""
    names = {m: n for n, m in model.named_modules()}
    entries = []

    def out_hook(name, part, at):
        def h(_mod, _args, out):
            t = out[0] if isinstance(out, tuple) else out
            entries.append((name, "output", part, _at(t, at)))
        return h

    def in_hook(name, part, at):
        def h(_mod, args, kwargs):
            t = args[0] if args else kwargs.get("hidden_states")
            v = _at(t, at)
            prev = entries[-1][3] if entries else None
            if prev is None or prev.shape != v.shape or not torch.equal(prev, v):
                entries.append((name, "input", part, v))
        return h

    hooks = []
    for base, part in stacks(model):
        at = frames if part == "encoder" else None
        if part == "encoder" and at is None:
            raise ReferenceError("an encoder is recorded at stored frames: none were given")
        if hasattr(base, "embed_tokens"):
            hooks.append(base.embed_tokens.register_forward_hook(out_hook(names[base.embed_tokens], part, at)))
        for layer in base.layers:
            # A child with no weights (an activation, a rotary table) is the exporter's to inline: not a module kept.
            for child in (c for c in layer.children() if any(True for _ in c.parameters())):
                if _is_norm(child):
                    hooks.append(child.register_forward_pre_hook(in_hook(names[child], part, at), with_kwargs=True))
                hooks.append(child.register_forward_hook(out_hook(names[child], part, at)))
        norm = getattr(base, "norm", None) or getattr(base, "layer_norm", None)
        if norm is not None:
            hooks.append(norm.register_forward_pre_hook(in_hook(names[norm], part, at), with_kwargs=True))
            hooks.append(norm.register_forward_hook(out_hook(names[norm], part, at)))
    try:
        with torch.inference_mode():
            model(**inputs)
    finally:
        for h in hooks:
            h.remove()
    # A module a layer calls twice (none of the supported models does) would record twice: refuse, never guess.
    seen = set()
    for name, role, _, _ in entries:
        if (name, role) in seen:
            raise ReferenceError(f"{name} ({role}) ran twice in one forward pass")
        seen.add((name, role))
    return entries


def speech_inputs(job):
    """Whisper: the clip's log-mel features and the forced prefix as speech.py makes them, and the model (its int4
    package's weights dequantized into it for a kernel-parity job)."""
    from .hf_run import load_audio
    from .speech import dequantize, forced_prefix

    audio = job.get("audio") or []
    if len(audio) != 1:
        raise ReferenceError(f"a speech-to-text job needs exactly one clip, got {len(audio)}")
    fe = transformers.WhisperFeatureExtractor.from_pretrained(job["reference"], local_files_only=True)
    wave = load_audio(audio[0], fe.sampling_rate)
    feats = fe(wave, sampling_rate=fe.sampling_rate, return_tensors="pt").input_features.to(torch.float32)
    model = transformers.WhisperForConditionalGeneration.from_pretrained(job["reference"], dtype=torch.float32, local_files_only=True)
    model = model.to("cpu").float().eval()
    deq = dequantize(model, job["dequantize"]) if job.get("dequantize") else None
    ids = torch.tensor([forced_prefix(model.generation_config, job.get("language"), job.get("task"))])
    # The encoder at two frames inside the clip's speech (a third and two thirds in; a mel frame is a hop, a state
    # frame two): enough for a bug of the whole tower, within 1 MiB per real case (Whisper base: 44 modules x 512).
    n = max(1, min(feats.shape[-1] // 2, -(-len(wave) // (2 * fe.hop_length))))
    frames = sorted({n // 3, 2 * n // 3})
    return model, {"input_features": feats, "decoder_input_ids": ids}, ids, deq, frames


def run_job(job):
    if job.get("task_type") == "speech-to-text":
        return run_speech_job(job)
    missing = [k for k in REQUIRED if k not in job]
    if missing:
        raise ReferenceError(f"missing keys {missing}")
    tok = AutoTokenizer.from_pretrained(job["tokenizer"], local_files_only=True)
    enc = tok(job["prompt"], return_tensors="pt")
    ids = enc["input_ids"]
    if ids.shape[0] != 1 or ids.shape[1] == 0:
        raise ReferenceError(f"bad tokenization shape {tuple(ids.shape)}")
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    model = AutoModelForCausalLM.from_pretrained(job["reference"], dtype=torch.float32, local_files_only=True)
    model = model.to("cpu").float().eval()
    metadata = {
        "format": MODULES_FORMAT,
        "case": str(job["case"]),
        "prompt": job["prompt"],
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    if job.get("dequantize") is not None:
        n, sha = dequantize_into(model, job["dequantize"])
        metadata.update(dequantized_from=job["dequantize"], dequantized_weights=str(n), dequantized_sha256=sha)
    return write(job, model, inputs, ids, metadata)


def run_speech_job(job):
    missing = [k for k in ("case", "reference", "audio", "out") if k not in job]
    if missing:
        raise ReferenceError(f"missing keys {missing}")
    model, inputs, ids, deq, frames = speech_inputs(job)
    metadata = {
        "format": MODULES_FORMAT,
        "case": str(job["case"]),
        "prompt": json.dumps(ids[0].tolist()),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    if deq is not None:
        metadata.update(dequantized_from=job["dequantize"], dequantized_weights=str(deq[0]), dequantized_sha256=deq[1])
    metadata["frames"] = json.dumps(frames)
    return write(job, model, inputs, ids, metadata, frames)


def write(job, model, inputs, ids, metadata, frames=None):
    """Records the modules in float32 and float64 and writes the raw golden."""
    f32 = record(model, inputs, frames)
    model.double()
    f64 = record(model, {k: (v.double() if v.is_floating_point() else v) for k, v in inputs.items()}, frames)
    if [(n, r) for n, r, _, _ in f32] != [(n, r) for n, r, _, _ in f64]:
        raise ReferenceError("the float64 run recorded other modules than the float32 run")
    tensors = {"input_ids": ids[0].to(torch.int64).numpy(), "noise": np.zeros(len(f32), dtype=np.float64)}
    for k, ((name, role, _, v32), (_, _, _, v64)) in enumerate(zip(f32, f64)):
        tensors[f"values.{k:03}"] = np.ascontiguousarray(v32.to(torch.float32).numpy())
        tensors["noise"][k] = float((v32.to(torch.float32).to(torch.float64) - v64).abs().max())
    # [module, role], and "encoder" third for a module of an encoder-decoder's encoder (its own graph).
    metadata["entries"] = json.dumps([[n, r] + ([p] if p == "encoder" else []) for n, r, p, _ in f32])
    save_safetensors(tensors, metadata, job["out"])
    size = sum(v.nbytes for v in tensors.values())
    return (f"{job['case']}: {len(f32)} modules at position {ids.shape[1] - 1}, noise max {tensors['noise'].max():.3g}, "
            f"{size} bytes -> {job['out']}")


def main(argv):
    run_jobs(argv, run_job)


if __name__ == "__main__":
    main(sys.argv)
