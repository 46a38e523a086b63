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
    audio_features         float32 [1, F, hidden]  the encoder's last_hidden_state
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
        if hf != generated:
            raise ReferenceError(f"the checked greedy stream {generated} is not generate()'s {hf} "
                                     f"(prefix {prefix}, suppress {suppress}, begin_suppress {begin})")
    step_logits = torch.stack(steps)
    mm = {
        "input.input_ids": ids.to(torch.int64).numpy(),
        "input.input_features": np.ascontiguousarray(feats.numpy()),
        "audio_features": np.ascontiguousarray(enc.float().numpy()),
    }
    model.double()
    with torch.inference_mode():
        prefill64 = model(input_features=feats.double(), decoder_input_ids=ids).logits[0].numpy()
    return dict(input_ids=ids, prompt_logits=prompt_logits, generated=torch.tensor(generated, dtype=torch.int64),
                step_logits=step_logits, mm=mm, prefill64=prefill64, prefix=prefix)
