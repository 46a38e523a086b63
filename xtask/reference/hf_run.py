"""Running the Hugging Face reference: media as the processor reads them, one user turn through a processor's chat
template, and the checked greedy decode. Shared by goldens.py (the goldens) and mm_fixture.py (the design checks).
"""
from __future__ import annotations

from .common import ReferenceError

import torch  # noqa: E402


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


def load_image(path):
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB")


def load_audio(path, sampling_rate):
    import soundfile as sf

    wave, sr = sf.read(path, dtype="float32")
    if wave.ndim != 1:
        raise ReferenceError(f"{path}: {wave.shape[1]} channels; only mono audio is supported")
    if sr != sampling_rate:
        raise ReferenceError(f"{path}: sampled at {sr} Hz, the feature extractor wants {sampling_rate} Hz (no resampling)")
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
        raise ReferenceError(f"{step_logits.shape[0]} step logits for {N} generated tokens")
    argmax = step_logits.argmax(-1)
    bad = (argmax != generated).nonzero().flatten().tolist()
    if bad:
        raise ReferenceError(f"argmax(step logits) != generated token at steps {bad}: a logits processor interfered")
    if eos and any(int(t) in eos for t in generated[:-1]):
        raise ReferenceError("generation continued past EOS")
    if not torch.allclose(prefill, step_logits[0], rtol=0, atol=1e-4):
        diff = float((prefill - step_logits[0]).abs().max())
        raise ReferenceError(f"prefill forward and generate's first step disagree by {diff:.3g}")
    if prefill.shape[0] != step_logits.shape[1]:
        raise ReferenceError(f"prefill logits have {prefill.shape[0]} entries, step logits {step_logits.shape[1]}")
    return prompt_logits, generated, step_logits


def encode_prompt(tok, job):
    """A text job's prompt as ids ([1, S]): `tok(prompt)` (special tokens added: BOS where the tokenizer adds one), or
    with `chat`, one user turn through the tokenizer's chat template with the generation prompt, as
    `apply_chat_template(..., add_generation_prompt=True, tokenize=True)` encodes it (no special token added)."""
    if job.get("chat"):
        out = tok.apply_chat_template([{"role": "user", "content": job["prompt"]}], add_generation_prompt=True,
                                      tokenize=True, return_dict=True)
        return torch.tensor([out["input_ids"]], dtype=torch.int64)
    return tok(job["prompt"], return_tensors="pt")["input_ids"]
