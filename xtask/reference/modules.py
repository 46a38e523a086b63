"""The reference's module outputs along a decoder's path, for the localize level (`level/localize/` of the suite).

    python -m reference.modules JOBS.json      (run by `cargo xtask regen-goldens`)

JOBS.json: {"jobs": [{"case": "...", "reference": "/abs/hf", "tokenizer": "/abs/tok", "prompt": "...",
                      "dequantize": "/abs/model.onnx" (optional: int4 kernel parity, as goldens.py),
                      "round_to": "float16" | "bfloat16" (optional: a half-precision variant's reference),
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
transformers, torch, dequantized_from / dequantized_weights / dequantized_sha256 for a kernel-parity job,
weights_rounded_to for a `round_to` job.

A `round_to` job rounds every parameter of the model (its weights, not its buffers: RoPE's inverse frequencies, a
scale computed in the forward pass) to that dtype and back to float32 before it records: the reference of a package
that stores its weights in that dtype, as the int4 golden's is the package's dequantized weights. Its modules then
differ from the package's by the package's half-precision arithmetic alone, not by the weights' rounding, which
reaches about one half-precision ulp at the first norm and hides a 1% weight error behind it. The suite stores it
as a difference from the float32 golden (`level/localize/golden.rs`).

A multimodal job (`modality` image, audio or image+audio, with `images` / `audio` and `processor`, as goldens.py
takes them; Gemma-4's) is processed as goldens.py processes it and records, in the order they run, each tower
its media go through at two rows inside the media (`[module, role, "vision" | "audio", [rows]]`: a third and two
thirds into the tower's valid patches or frames, or into the projector's output rows): the tower's own weighted
children (the patch embedder, the subsampling convolutions, the output projection), each layer's weighted children
and the residual stream its norms read, then its projector into the text model (`model.embed_vision`,
`model.embed_audio`); then the text model's as a text decoder's. Every weighted direct child of a text model is
kept (Gemma-4's per-layer-input embedding, projection and norm beside `embed_tokens`). Its float64 run keeps float64
where the model casts to float32 inside (Gemma-4's audio attention calls `.float()`): `Tensor.float` is float64
for that run.

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
from .hf_run import encode_prompt  # noqa: E402

MODULES_FORMAT = "modules-raw-v1"
REQUIRED = ("case", "reference", "tokenizer", "prompt", "out")


def _at(t, frames=None):
    """A hidden state at the last prompt position ([1, S, ...] or [S, ...]), or at rows `frames` (an encoder's
    [1, T, ...] or [T, ...]: those rows, one after another), as float64."""
    if frames is not None:
        rows = t[0, frames] if t.dim() >= 3 else t[frames]
        return rows.detach().to(torch.float64).reshape(-1).clone()
    if t.dim() >= 3:
        return t[0, -1].detach().to(torch.float64).reshape(-1).clone()
    return t[-1].detach().to(torch.float64).reshape(-1).clone()


def _weighted(module):
    return any(True for _ in module.parameters())


def _is_norm(module):
    return "norm" in type(module).__name__.lower()


class Stack:
    """A stack of layers recorded: its `layers`, the weighted modules around them (`around`: each kept as its output,
    and a norm's input too), the part its entries are marked with, and how its rows are chosen (None: the last
    prompt position; a function of a tensor: the rows kept)."""

    def __init__(self, layers, around, part, rows=None):
        self.layers, self.around, self.part, self.rows = layers, around, part, rows


def stacks(model, valid=None):
    """The stacks of layers recorded, in the order they run. A text decoder: `model` of a causal LM, `model.language_model`
    of a multimodal one, with a multimodal model's towers before it (`valid`: each part's valid-row mask, for the
    rows kept); Whisper: its encoder, then its decoder."""
    whisper = getattr(getattr(model, "model", None), "encoder", None)
    if whisper is not None and hasattr(whisper, "layers") and hasattr(model.model, "decoder"):
        enc, dec = model.model.encoder, model.model.decoder
        # Whisper keeps the set its goldens were first made with: its embedding and final norms around the layers.
        return [Stack(enc.layers, [enc.layer_norm], "encoder"), Stack(dec.layers, [dec.embed_tokens, dec.layer_norm], "decoder")]
    base = next((m for m in model.modules() if hasattr(m, "layers") and hasattr(m, "embed_tokens")), None)
    if base is None:
        raise ReferenceError(f"{type(model).__name__} has no module with `layers` and `embed_tokens`: not a decoder the rule knows")
    out = []
    inner = getattr(model, "model", None)
    for tower, projector, part in (("vision_tower", "embed_vision", "vision"), ("audio_tower", "embed_audio", "audio")):
        t = getattr(inner, tower, None)
        if t is None:
            continue
        holder = t if hasattr(t, "layers") else getattr(t, "encoder", None)
        if holder is None or not hasattr(holder, "layers"):
            raise ReferenceError(f"{tower} ({type(t).__name__}) has no `layers`, nor `encoder.layers`: not a tower the rule knows")
        kids = list(t.children()) + (list(holder.children()) if holder is not t else [])
        around = [c for c in kids if c is not holder and c is not holder.layers and _weighted(c)]
        proj = getattr(inner, projector, None)
        around += [proj] if proj is not None else []
        out.append(Stack(holder.layers, around, part, rows=_rows_of((valid or {}).get(part), part)))
    around = [c for n, c in base.named_children() if n != "layers" and _weighted(c)]
    return out + [Stack(base.layers, around, "decoder")]


def _rows_of(valid, part):
    """The rows kept of a tower's tensor: a third and two thirds into its valid rows (`valid`, a bool vector over
    the tower's token axis), or into its own rows where it has another number of them (a pooled or projected
    output, padding already dropped)."""
    def rows(t):
        n = t.shape[1] if t.dim() >= 3 else t.shape[0]
        if valid is not None and n == valid.shape[0]:
            idx = valid.nonzero()[:, 0].tolist()
        else:
            idx = list(range(n))
        if not idx:
            raise ReferenceError(f"a {part} tensor of shape {tuple(t.shape)} has no valid rows")
        return sorted({idx[len(idx) // 3], idx[2 * len(idx) // 3]})
    return rows


def record(model, inputs, frames=None, valid=None):
    """[(module, role, part, rows, values)] of one forward pass, in the order the hooks fired: a decoder's at the last
    position (rows None), Whisper's encoder's at `frames`, a tower's at the rows its stack chooses."""
    names = {m: n for n, m in model.named_modules()}
    entries = []

    def at_of(stack, t):
        if stack.part == "encoder":
            return frames
        return stack.rows(t) if stack.rows is not None else None

    def out_hook(name, stack):
        def h(_mod, _args, out):
            t = out[0] if isinstance(out, tuple) else out
            t = getattr(out, "last_hidden_state", t)
            rows = at_of(stack, t)
            entries.append((name, "output", stack.part, rows, _at(t, rows)))
        return h

    def in_hook(name, stack):
        def h(_mod, args, kwargs):
            t = args[0] if args else kwargs.get("hidden_states")
            rows = at_of(stack, t)
            v = _at(t, rows)
            prev = entries[-1][4] if entries else None
            if prev is None or prev.shape != v.shape or not torch.equal(prev, v):
                entries.append((name, "input", stack.part, rows, v))
        return h

    hooks = []
    for stack in stacks(model, valid):
        if stack.part == "encoder" and frames is None:
            raise ReferenceError("an encoder is recorded at stored frames: none were given")
        keep = [m for m in stack.around]
        for layer in stack.layers:
            # A child with no weights (an activation, a rotary table) is the exporter's to inline: not a module kept.
            keep += [c for c in layer.children() if _weighted(c)]
        for m in keep:
            if _is_norm(m):
                hooks.append(m.register_forward_pre_hook(in_hook(names[m], stack), with_kwargs=True))
            hooks.append(m.register_forward_hook(out_hook(names[m], stack)))
    try:
        with torch.inference_mode():
            model(**inputs)
    finally:
        for h in hooks:
            h.remove()
    # A module a layer calls twice (none of the supported models does) would record twice: refuse, never guess.
    seen = set()
    for name, role, *_ in entries:
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
    if job.get("modality", "text") != "text":
        return run_media_job(job)
    missing = [k for k in REQUIRED if k not in job]
    if missing:
        raise ReferenceError(f"missing keys {missing}")
    tok = AutoTokenizer.from_pretrained(job["tokenizer"], local_files_only=True)
    ids = encode_prompt(tok, job)
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


def run_media_job(job):
    """A multimodal job: the case's prompt with its media, processed as goldens.py processes them."""
    from .goldens import MODALITIES, local_dir, media_paths, modality_of
    from .hf_run import load_audio, load_image, mm_encode

    missing = [k for k in ("case", "reference", "prompt", "out") if k not in job]
    if missing:
        raise ReferenceError(f"missing keys {missing}")
    if job.get("dequantize") is not None:
        raise ReferenceError("dequantize is only supported for text and speech-to-text jobs")
    modality = modality_of(job)
    need_images, need_audio = MODALITIES[modality]
    ref = local_dir(job, "reference")
    proc_dir = local_dir(job, "processor") if job.get("processor") is not None else ref
    processor = transformers.AutoProcessor.from_pretrained(proc_dir, local_files_only=True)
    images = [load_image(p) for p in media_paths(job, "images", need_images)]
    sr = getattr(getattr(processor, "feature_extractor", None), "sampling_rate", None)
    audio_paths = media_paths(job, "audio", need_audio)
    if audio_paths and sr is None:
        raise ReferenceError(f"the processor in {proc_dir} has no audio feature extractor")
    inputs = mm_encode(processor, job["prompt"], images, [load_audio(p, sr) for p in audio_paths])
    model = AutoModelForCausalLM.from_pretrained(ref, dtype=torch.float32, local_files_only=True).to("cpu").float().eval()
    # The rows of each tower that hold media: patches with a position (padding patches have -1), and the audio
    # frames the tower's own mask keeps after subsampling.
    valid = {}
    if "image_position_ids" in inputs:
        valid["vision"] = inputs["image_position_ids"][0, :, 0] >= 0
    if "input_features" in inputs:
        with torch.inference_mode():
            o = model.model.get_audio_features(inputs["input_features"], inputs["input_features_mask"], return_dict=True)
        valid["audio"] = o.attention_mask[0].to(torch.bool)
    metadata = {
        "format": MODULES_FORMAT,
        "case": str(job["case"]),
        "prompt": job["prompt"],
        "modality": modality,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    return write(job, model, inputs, inputs["input_ids"], metadata, valid=valid, float64_inside=True)


def round_weights(model, job):
    """Rounds the model's parameters to the job's `round_to` dtype and back to float32, in place; returns its name."""
    name = job["round_to"]
    if name not in ("float16", "bfloat16"):
        raise ReferenceError(f"round_to={name!r}: expected float16 or bfloat16")
    if job.get("dequantize") is not None:
        raise ReferenceError("round_to and dequantize are two references: a job takes one")
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(getattr(torch, name)).to(torch.float32))
    return name


def write(job, model, inputs, ids, metadata, frames=None, valid=None, float64_inside=False):
    """Records the modules in float32 and float64 and writes the raw golden. `float64_inside`: the float64 run keeps
    float64 where the model's code casts to float32 (`Tensor.float`), as Gemma-4's audio attention does."""
    if job.get("round_to") is not None:
        metadata["weights_rounded_to"] = round_weights(model, job)
    f32 = record(model, inputs, frames, valid)
    model.double()
    cast = {k: (v.double() if v.is_floating_point() else v) for k, v in inputs.items()}
    to_f32 = torch.Tensor.float
    if float64_inside:
        torch.Tensor.float = lambda self, *a, **k: self.to(torch.float64)
    try:
        f64 = record(model, cast, frames, valid)
    finally:
        torch.Tensor.float = to_f32
    if [(n, r, rows) for n, r, _, rows, _ in f32] != [(n, r, rows) for n, r, _, rows, _ in f64]:
        raise ReferenceError("the float64 run recorded other modules (or rows) than the float32 run")
    tensors = {"input_ids": ids[0].to(torch.int64).numpy(), "noise": np.zeros(len(f32), dtype=np.float64)}
    for k, ((name, role, _, _, v32), (*_, v64)) in enumerate(zip(f32, f64)):
        tensors[f"values.{k:03}"] = np.ascontiguousarray(v32.to(torch.float32).numpy())
        tensors["noise"][k] = float((v32.to(torch.float32).to(torch.float64) - v64).abs().max())

    def listed(n, r, p, rows):
        # [module, role]; "encoder" third for Whisper's encoder (at the metadata's frames); a tower's part and rows.
        if p == "encoder":
            return [n, r, p]
        return [n, r] if rows is None else [n, r, p, rows]

    metadata["entries"] = json.dumps([listed(n, r, p, rows) for n, r, p, rows, _ in f32])
    save_safetensors(tensors, metadata, job["out"])
    size = sum(v.nbytes for v in tensors.values())
    return (f"{job['case']}: {len(f32)} modules at position {ids.shape[1] - 1}, noise max {tensors['noise'].max():.3g}, "
            f"{size} bytes -> {job['out']}")


def main(argv):
    run_jobs(argv, run_job)


if __name__ == "__main__":
    main(sys.argv)
