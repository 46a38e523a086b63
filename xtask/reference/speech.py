"""The speech-to-text reference job (Whisper): goldens.py's raw format for an encoder-decoder.

The clip goes through the model's own WhisperFeatureExtractor (its preprocessor_config.json: sample rate, n_mels,
padding to its window). The decoder's prompt is the prefix Hugging Face's `generate()` forces:
`decoder_start_token_id`, then for a multilingual model the job's `language` and `task` tokens, then
`<|notimestamps|>`. The greedy stream applies the generation config's `suppress_tokens` at every step and
`begin_suppress_tokens` at the first, as `generate()` does, and is checked to equal `generate()`'s tokens. The step
logits are kept raw (before suppression): what the package's decoder computes.

Written (beside goldens.py's common fields):

    input.input_ids        int64   [1, S]          the forced prefix (S positions: the L4 prompt)
    input.input_features   float32 [1, mels, T]    the log-mel features the encoder is fed
    audio_features         float32 [1, F', hidden] the encoder's last_hidden_state: every frame (F' = F), or, for
                                                   a state over STORED_BYTES, every k-th frame (the fewest k that
                                                   fit) so that a real model's golden stays small
    audio_features.frames  int64   [F']            which frames those are (only when some were left out)
    audio_features.shape   int64   [3]             the whole state's shape [1, F, hidden] (with .frames)
    audio_features.noise   float32 [3]             the reference's own noise there: p50, p99 and max of
                                                   |float32 - float64| over the stored frames (the values the
                                                   package's are judged at)

A multilingual model's job names its `language` (e.g. "en") and `task` ("transcribe" or "translate").
"""
from __future__ import annotations

import numpy as np
import torch
import transformers

from .common import ReferenceError
from .hf_run import load_audio


def forced_prefix(gc, language=None, task=None):
    """The decoder prefix `generate()` forces, from the generation config (and the job's language/task)."""
    prefix = [int(gc.decoder_start_token_id)]
    if getattr(gc, "is_multilingual", False):
        if language is None or task is None:
            raise ReferenceError("a multilingual Whisper case must state `language` and `task` (else generate() "
                                 "detects or skips them and the stream is another one)")
        lang = gc.lang_to_id.get(f"<|{language}|>") or gc.lang_to_id.get(language)
        if lang is None:
            raise ReferenceError(f"language {language!r} is not in the generation config's lang_to_id")
        prefix += [int(lang), int(gc.task_to_id[task])]
    if gc.no_timestamps_token_id is not None:
        prefix.append(int(gc.no_timestamps_token_id))
    return prefix


# The largest encoder state stored whole (bytes of float32); Whisper tiny's 1,500 x 384 frames are 2.3 MB, so a real
# model keeps every 9th frame (base: every 12th). A bug of the encoder moves every frame (a positional table, a
# convolution, a weight), so every k-th frame shows it.
STORED_BYTES = 256 << 10


def stored_frames(state):
    """The encoder state as stored: {tensor name: array}, every frame or every k-th."""
    frames = state.shape[1]
    k = 1
    while frames > 0 and -(-frames // k) * state.shape[2] * 4 > STORED_BYTES:
        k += 1
    if k == 1:
        return {"audio_features": np.ascontiguousarray(state)}
    keep = np.arange(0, frames, k, dtype=np.int64)
    return {"audio_features": np.ascontiguousarray(state[:, keep]), "audio_features.frames": keep,
            "audio_features.shape": np.array(state.shape, dtype=np.int64)}


def noise_stats(f32, f64):
    """p50, p99 and max of |f32 - f64| (nearest rank, as the suite's Noise::between)."""
    d = np.sort(np.abs(f32.astype(np.float64) - f64).reshape(-1))
    rank = lambda q: d[min(len(d) - 1, max(0, int(np.ceil(q * len(d))) - 1))]
    return np.array([rank(0.5), rank(0.99), d[-1]], dtype=np.float32)


def choose(logits, step, suppress, begin):
    x = logits.clone()
    x[suppress] = -float("inf")
    if step == 0:
        x[begin] = -float("inf")
    return int(torch.argmax(x))


def run(job, eos, n_new):
    ref = job["reference"]
    audio_paths = job.get("audio") or []
    if len(audio_paths) != 1:
        raise ReferenceError(f"a speech-to-text job needs exactly one clip, got {len(audio_paths)}")
    fe = transformers.WhisperFeatureExtractor.from_pretrained(ref, local_files_only=True)
    wave = load_audio(audio_paths[0], fe.sampling_rate)
    feats = fe(wave, sampling_rate=fe.sampling_rate, return_tensors="pt").input_features.to(torch.float32)
    model = transformers.WhisperForConditionalGeneration.from_pretrained(ref, dtype=torch.float32, local_files_only=True)
    model = model.to("cpu").float().eval()
    dequantized = dequantize(model, job["dequantize"]) if job.get("dequantize") else None
    gc = model.generation_config
    prefix = forced_prefix(gc, job.get("language"), job.get("task"))
    suppress, begin = list(gc.suppress_tokens or []), list(gc.begin_suppress_tokens or [])
    ids = torch.tensor([prefix])
    with torch.inference_mode():
        enc = model.model.encoder(feats).last_hidden_state
        seq, steps = list(prefix), []
        prompt_logits = None
        for step in range(n_new):
            out = model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([seq])).logits[0]
            if prompt_logits is None:
                prompt_logits = out.clone()
            row = out[-1]
            steps.append(row.clone())
            tok = choose(row, step, suppress, begin)
            seq.append(tok)
            if eos and tok in eos:
                break
        generated = seq[len(prefix):]
        kw = dict(language=job.get("language"), task=job.get("task")) if getattr(gc, "is_multilingual", False) else {}
        g = model.generate(feats, max_new_tokens=n_new, do_sample=False, num_beams=1, **kw)
        hf = g[0].tolist()
        hf = hf[len(prefix):] if hf[:len(prefix)] == prefix else hf
        # generate() drops the EOS that ends a Whisper transcript; the stream keeps it (the suite stops at it).
        ended = bool(generated) and eos and generated[-1] in eos
        if hf != generated and not (ended and hf == generated[:-1]):
            raise ReferenceError(f"the checked greedy stream {generated} is not generate()'s {hf} "
                                     f"(prefix {prefix}, suppress {suppress}, begin_suppress {begin})")
    step_logits = torch.stack(steps)
    state = enc.float().numpy()
    stored = stored_frames(state)
    frames = stored.get("audio_features.frames", np.arange(state.shape[1]))
    model.double()
    with torch.inference_mode():
        enc64 = model.model.encoder(feats.double()).last_hidden_state.numpy()
        prefill64 = model(input_features=feats.double(), decoder_input_ids=ids).logits[0].numpy()
    mm = {
        "input.input_ids": ids.to(torch.int64).numpy(),
        "input.input_features": np.ascontiguousarray(feats.numpy()),
        **stored,
        "audio_features.noise": noise_stats(state[:, frames], enc64[:, frames]),
    }
    return dict(input_ids=ids, prompt_logits=prompt_logits, generated=torch.tensor(generated, dtype=torch.int64),
                step_logits=step_logits, mm=mm, prefill64=prefill64, prefix=prefix, dequantized=dequantized)


def whisper_name(onnx_name):
    """The HF parameter of a mobius Whisper weight: `encoder.*`/`decoder.*` sit under `model.`, except the output
    head, which HF keeps at the top (`proj_out`)."""
    if onnx_name.startswith("decoder.proj_out."):
        return onnx_name[len("decoder."):]
    return f"model.{onnx_name}"


def dequantize(model, package):
    """The int4 package's weights, dequantized exactly, in place of the model's (kernel parity, as goldens.py's
    `dequantize` for text): both of its models. Returns (count, sha256 over both models' replaced weights)."""
    import hashlib
    import os

    from .dequantize import dequantize_into

    count, h = 0, hashlib.sha256()
    for part in ("encoder", "decoder"):
        path = os.path.join(package, part, "model.onnx")
        n, sha = dequantize_into(model, path, rename=whisper_name)
        count += n
        h.update(f"{part}:{sha}".encode())
    return count, h.hexdigest()
