"""The multimodal gate's reference: HF transformers fp32 on CPU, greedy `generate()` on every item of an lmms-eval task.

    python -m reference.lmms_run JOBS.json      (run by `cargo xtask regen-goldens`)

The suite builds the items (lmms-eval's hooks, reimplemented in Rust) and hands over only what the model is fed:
each item's question and its media's bytes. JOBS.json:

    {"jobs": [{"reference": "/abs/hf", "model": "whisper" | "multimodal", "out": "/abs/raw.safetensors",
               "media": "/abs/media.safetensors",      # uint8 tensor "<doc>" = the item's file bytes
               "items": [{"doc": 0, "question": "..."}],
               "max_new_tokens": N, "eos": [ids] | null,
               "language": "en" | null, "task": "transcribe" | null,       # multilingual Whisper
               "protocol": {"prompt": ..., "system_prompt": ..., "media": ..., ...}}]}

Each job writes `out` with, per item, `tokens.<doc>` int64 [T] (the generated ids after the prompt, to the budget or
EOS; no stop string is applied here: the suite cuts and keeps both) and `margin.<doc>` float32 [1] (the smallest
top-1 minus top-2 raw logit gap over the generated steps); for multimodal models also `<doc>.<name>`, the processor's
tensors the package is fed (pixel_values as uint8, exactly f32(u8) * f32(1/255)); metadata {"format": FORMAT, ...}.

Whisper's features come from its WhisperFeatureExtractor on the decoded samples (16 kHz, no resampling), its prompt is
the decoder prefix generate() forces; a chat model gets one user turn (the image, then the question) through the
processor's chat template with the generation prompt, after an optional system turn.
"""
from __future__ import annotations

import io
import json
import os
import sys

import numpy as np
import torch
import transformers

from .common import ReferenceError, deterministic_torch
from .goldens import onnx_inputs
from .hf_run import NEUTRAL, mm_encode

FORMAT = "lmms-run-v1"


def margin_of(logits):
    """Smallest top-1 minus top-2 gap over the steps' raw logits."""
    best = None
    for row in logits:
        top = torch.topk(row[0].float(), 2).values
        gap = float(top[0] - top[1])
        best = gap if best is None else min(best, gap)
    return np.array([np.nan if best is None else best], dtype=np.float32)


def image_of(data, rule):
    from PIL import Image

    im = Image.open(io.BytesIO(data))
    im.load()
    im = im.convert("RGB")  # lmms-eval's doc_to_visual: doc["image"].convert("RGB")
    if rule in (None, "as_given"):
        return im
    buf = io.BytesIO()
    if rule == "png":
        im.save(buf, format="PNG")
    elif isinstance(rule, dict) and "jpeg" in rule:
        im.save(buf, format="JPEG", quality=int(rule["jpeg"]["quality"]))
    else:
        raise ReferenceError(f"unknown media rule {rule!r}")
    buf.seek(0)
    return Image.open(buf).convert("RGB")


def run_whisper(job, media, out):
    import soundfile as sf

    ref = job["reference"]
    fe = transformers.WhisperFeatureExtractor.from_pretrained(ref, local_files_only=True)
    model = transformers.WhisperForConditionalGeneration.from_pretrained(ref, dtype=torch.float32, local_files_only=True)
    model = model.to("cpu").float().eval()
    gc = model.generation_config
    kw = dict(language=job.get("language"), task=job.get("task")) if getattr(gc, "is_multilingual", False) else {}
    for it in job["items"]:
        doc = it["doc"]
        wave, sr = sf.read(io.BytesIO(media[str(doc)].tobytes()), dtype="float32")
        if wave.ndim != 1:
            wave = wave.mean(axis=1).astype(np.float32)
        if sr != fe.sampling_rate:
            raise ReferenceError(f"document {doc}: sampled at {sr} Hz, the feature extractor wants {fe.sampling_rate} Hz")
        feats = fe(wave, sampling_rate=fe.sampling_rate, return_tensors="pt").input_features.to(torch.float32)
        with torch.inference_mode():
            g = model.generate(feats, max_new_tokens=job["max_new_tokens"], do_sample=False, num_beams=1,
                               output_logits=True, return_dict_in_generate=True, **kw)
        seq = g.sequences[0].tolist()
        start = int(gc.decoder_start_token_id)
        # generate() returns the forced prefix with the transcript on some versions and not on others.
        if seq and seq[0] == start:
            prefix_len = len(seq) - len(g.logits)
            seq = seq[max(prefix_len, 0):]
        out[f"tokens.{doc}"] = np.array(seq, dtype=np.int64)
        out[f"margin.{doc}"] = margin_of(g.logits)


def run_multimodal(job, media, out):
    ref = job["reference"]
    processor = transformers.AutoProcessor.from_pretrained(ref, local_files_only=True)
    model = transformers.AutoModelForImageTextToText.from_pretrained(ref, dtype=torch.float32, local_files_only=True)
    model = model.to("cpu").float().eval()
    proto = job["protocol"]
    eos = job.get("eos") or None
    pad = processor.tokenizer.pad_token_id
    for it in job["items"]:
        doc = it["doc"]
        im = image_of(media[str(doc)].tobytes(), proto.get("media"))
        if proto.get("system_prompt"):
            conv = [{"role": "system", "content": [{"type": "text", "text": proto["system_prompt"]}]},
                    {"role": "user", "content": [{"type": "image", "image": im}, {"type": "text", "text": it["question"]}]}]
            enc = dict(processor.apply_chat_template(conv, add_generation_prompt=True, tokenize=True,
                                                     return_dict=True, return_tensors="pt"))
        else:
            enc = mm_encode(processor, it["question"], images=[im])
        with torch.inference_mode():
            g = model.generate(**enc, max_new_tokens=job["max_new_tokens"], eos_token_id=eos, pad_token_id=pad,
                               output_logits=True, return_dict_in_generate=True, use_cache=True, **NEUTRAL)
        S = enc["input_ids"].shape[1]
        out[f"tokens.{doc}"] = g.sequences[0, S:].to(torch.int64).numpy()
        out[f"margin.{doc}"] = margin_of(g.logits)
        for name, v in onnx_inputs(enc).items():
            out[f"{doc}.{name}"] = v


def run_job(job):
    from safetensors.numpy import load_file, save_file

    deterministic_torch()
    media = load_file(job["media"])
    out = {}
    if job["model"] == "whisper":
        run_whisper(job, media, out)
    elif job["model"] == "multimodal":
        run_multimodal(job, media, out)
    else:
        raise ReferenceError(f"unknown model kind {job['model']!r}")
    meta = {"generator": "xtask/reference/lmms_run.py", "format": FORMAT, "torch": torch.__version__,
            "transformers": transformers.__version__, "reference": job["reference"], "items": str(len(job["items"]))}
    os.makedirs(os.path.dirname(os.path.abspath(job["out"])), exist_ok=True)
    tmp = job["out"] + ".tmp"
    save_file(out, tmp, metadata=meta)
    os.replace(tmp, job["out"])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit("usage: python -m reference.lmms_run JOBS.json")
    with open(argv[0]) as fh:
        spec = json.load(fh)
    for job in spec["jobs"]:
        run_job(job)


if __name__ == "__main__":
    main()
