"""Raw HF transformers reference outputs for the conformance suite's goldens.

    python -m reference.goldens JOBS.json      (run by `cargo xtask regen-goldens`)

JOBS.json:

    {"jobs": [{"case": "qwen3-tiny",
               "reference": "/abs/fixtures/qwen3-tiny/hf",     # local HF model directory
               "tokenizer": "/abs/fixtures/qwen3-tiny/hf",     # local tokenizer directory
               "prompt": "...", "max_new_tokens": 16,
               "eos_token_id": null,                           # the case's: int, list of ints, or null
               "genai_config": "/abs/.../genai_config.json",   # the case's package's, or null
               "out": "/abs/out/qwen3-tiny.safetensors"}]}

The stream stops at the EOS ids of common.eos_ids (the case's, else the package's genai_config.json's, else
none), the rule the suite's runner follows.

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

metadata (str -> str): format (common.RAW_FORMAT, which xtask/src/regen.rs checks), case, prompt, generated_text,
eos_token_id (JSON), transformers, torch. A Rust program derives the golden JSON from these files.

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

Kernel-parity reference for a weight-quantized package (optional field, text jobs only):

    "dequantize": "/abs/fixtures/qwen3-tiny/onnx/default-int4/model.onnx"

The HF model is loaded as usual, then every weight the ONNX model quantized is replaced by its exact dequantized
value (dequantize.py says how), and the job runs exactly like a text job. A speech-to-text job names the int4
package folder instead, and both of its models (encoder/, decoder/) are dequantized (speech.dequantize). Metadata adds `dequantized_from` (the
field's value as given), `dequantized_weights` (how many HF parameters were replaced, as a decimal string) and
`dequantized_sha256` (sha256 over the replaced parameters' names and f32 little-endian bytes, in name order).
"""
from __future__ import annotations

import json
import os
import sys

from .common import RAW_FORMAT, ReferenceError, eos_ids, run_jobs, save_safetensors

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoProcessor, AutoTokenizer  # noqa: E402

from .dequantize import dequantize_into  # noqa: E402
from .hf_run import encode_prompt, greedy, load_audio, load_image, mm_encode  # noqa: E402

REQUIRED = ("case", "reference", "tokenizer", "prompt", "max_new_tokens", "out")
REQUIRED_MM = ("case", "reference", "prompt", "max_new_tokens", "out")
MODALITIES = {"text": (False, False), "image": (True, False), "audio": (False, True),
              "image+audio": (True, True)}  # modality -> (needs images, needs audio)


def local_dir(job, key):
    path = job[key]
    if not isinstance(path, str) or not os.path.isdir(path):
        raise ReferenceError(
            f"{key}={path!r} is not a local directory; only local reference directories are supported "
            f"for now (Hugging Face Hub ids are not)"
        )
    return path


def modality_of(job):
    modality = job.get("modality", "text")
    if modality not in MODALITIES:
        raise ReferenceError(f"modality must be one of {sorted(MODALITIES)}, got {modality!r}")
    return modality


def media_paths(job, key, needed):
    paths = job.get(key)
    if not needed:
        if paths:
            raise ReferenceError(f"{key} given for modality {job.get('modality', 'text')!r}")
        return []
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise ReferenceError(f"{key} must be a non-empty list of file paths for modality {job['modality']!r}, got {paths!r}")
    for p in paths:
        if not os.path.isfile(p):
            raise ReferenceError(f"{key}: {p!r} is not a file")
    return paths


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
            raise ReferenceError(f"float64 prompt logits {prompt_logits_f64.shape} vs float32 {tuple(prompt_logits.shape)}")
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
        raise ReferenceError(f"pixel_values are {pv.dtype}, expected float32")
    u8 = torch.round(pv.double() * 255)
    if u8.min() < 0 or u8.max() > 255:
        raise ReferenceError(f"pixel_values outside [0, 1]: {float(pv.min())}..{float(pv.max())}")
    u8 = u8.to(torch.uint8)
    back = torch.from_numpy(u8.numpy().astype(np.float32) * np.float32(1 / 255))
    if not torch.equal(back, pv):
        raise ReferenceError(f"pixel_values are not exactly f32(u8) * f32(1/255) "
                       f"(max diff {float((back - pv).abs().max()):.3g})")
    return u8



def onnx_inputs(enc):
    """The processor's tensors the package reads, by their ONNX input names, in the dtypes it takes (pixels as the
    uint8 they were, ids as int64, audio features float32, their mask bool)."""
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
        out[name] = np.ascontiguousarray(v.numpy())
    return out

def mm_tensors(model, enc):
    """The `input.*` tensors and the HF encoder features (image_features / audio_features) of one
    processed multimodal prompt, as numpy arrays."""
    cfg = model.config
    H = cfg.get_text_config().hidden_size
    ids = enc["input_ids"]
    out = {"input." + name: v for name, v in onnx_inputs(enc).items()}
    with torch.inference_mode():
        if "pixel_values" in enc:
            img = model.model.get_image_features(enc["pixel_values"], enc["image_position_ids"],
                                                 return_dict=True).pooler_output.reshape(-1, H)
            n = int((ids == cfg.image_token_id).sum())
            if img.shape[0] != n:
                raise ReferenceError(f"{img.shape[0]} image features for {n} image tokens")
            out["image_features"] = np.ascontiguousarray(img.float().numpy())
        if "input_features" in enc:
            o = model.model.get_audio_features(enc["input_features"], enc["input_features_mask"], return_dict=True)
            aud = o.pooler_output[o.attention_mask].reshape(-1, H)  # HF drops masked frames
            n = int((ids == cfg.audio_token_id).sum())
            if aud.shape[0] != n:
                raise ReferenceError(f"{aud.shape[0]} audio features for {n} audio tokens")
            out["audio_features"] = np.ascontiguousarray(aud.float().numpy())
    return out


def float64_prefill(model, inputs):
    """Every prompt position's logits [S, V] of the same prefill with the model (and every float input) in float64:
    how far the float32 reference sits from it is the reference's own numerical noise, the unit the tolerance policy
    judges a package in. Converts the model in place (run it last)."""
    model.double()
    cast = {k: (v.double() if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in inputs.items()}
    with torch.inference_mode():
        out = model(**cast).logits[0]
    if out.dtype != torch.float64:
        raise ReferenceError(f"the float64 run returned {out.dtype} logits")
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


def base_metadata(job, tok, generated, eos):
    """The metadata every raw output carries (see the module doc)."""
    return {
        "format": RAW_FORMAT,
        "case": str(job["case"]),
        "prompt": job["prompt"],
        "generated_text": tok.decode(generated.tolist(), skip_special_tokens=True),
        "eos_token_id": json.dumps(eos),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }


def run_speech_job(job):
    """A speech-to-text (Whisper) job: speech.py makes the stream, written in the common raw format."""
    from . import speech

    for k in REQUIRED_MM:
        if k not in job:
            raise ReferenceError(f"missing key {k!r}")
    n_new = job["max_new_tokens"]
    eos = eos_ids(job.get("eos_token_id"), job.get("genai_config"))
    tok = AutoTokenizer.from_pretrained(local_dir(job, "reference"), local_files_only=True)
    r = speech.run(job, eos, n_new)
    prompt_logits, generated, step_logits = r["prompt_logits"], r["generated"], r["step_logits"]
    positions = position_summary(prompt_logits, r["prefill64"])
    prefill = prompt_logits[-1].clone()
    tensors = {
        "input_ids": r["input_ids"][0].numpy(),
        "prefill_logits": np.ascontiguousarray(prefill.numpy(), dtype=np.float32),
        "prefill_logits_f64": np.ascontiguousarray(r["prefill64"][-1], dtype=np.float64),
        "generated_tokens": generated.numpy(),
        "step_logits": np.ascontiguousarray(step_logits.numpy(), dtype=np.float32),
        **positions,
        **r["mm"],
    }
    metadata = {**base_metadata(job, tok, generated, eos), "modality": "audio", "forced_prefix": json.dumps(r["prefix"])}
    if r["dequantized"] is not None:
        metadata["dequantized_from"] = job["dequantize"]
        metadata["dequantized_weights"], metadata["dequantized_sha256"] = str(r["dequantized"][0]), r["dequantized"][1]
    save_safetensors(tensors, metadata, job["out"])
    noise = np.abs(prefill.numpy().astype(np.float64) - r["prefill64"][-1])
    return (f"{job['case']}: prefix={r['prefix']} N={len(generated)} features={list(r['mm']['input.input_features'].shape)} "
            f"encoder={list(r['mm']['audio_features'].shape)} fp32-vs-fp64 max={noise.max():.3g} "
            f"tokens={generated.tolist()} -> {job['out']}")


def run_job(job):
    if job.get("task_type") == "speech-to-text":
        return run_speech_job(job)
    modality = modality_of(job)
    multimodal = modality != "text"
    missing = [k for k in (REQUIRED_MM if multimodal else REQUIRED) if k not in job]
    if missing:
        raise ReferenceError(f"missing keys {missing}")
    ref = local_dir(job, "reference")
    n_new = job["max_new_tokens"]
    if not isinstance(n_new, int) or n_new < 1:
        raise ReferenceError(f"max_new_tokens must be a positive int, got {n_new!r}")
    need_images, need_audio = MODALITIES[modality]
    dequantize = job.get("dequantize")
    if dequantize is not None and multimodal:
        raise ReferenceError("dequantize is only supported for text jobs")
    image_paths = media_paths(job, "images", need_images)
    audio_paths = media_paths(job, "audio", need_audio)

    if multimodal:
        proc_dir = local_dir(job, "processor") if job.get("processor") is not None else ref
        processor = AutoProcessor.from_pretrained(proc_dir, local_files_only=True)
        tok = processor.tokenizer
        images = [load_image(p) for p in image_paths]
        sr = getattr(getattr(processor, "feature_extractor", None), "sampling_rate", None)
        if audio_paths and sr is None:
            raise ReferenceError(f"the processor in {proc_dir} has no audio feature extractor")
        audio = [load_audio(p, sr) for p in audio_paths]
        inputs = mm_encode(processor, job["prompt"], images, audio)
    else:
        tok = AutoTokenizer.from_pretrained(local_dir(job, "tokenizer"), local_files_only=True)
        inputs = {"input_ids": encode_prompt(tok, job)}  # BOS prepended as the tokenizer does; `chat`: the template's
        inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    input_ids = inputs["input_ids"]
    if input_ids.shape[0] != 1 or input_ids.shape[1] == 0:
        raise ReferenceError(f"bad tokenization shape {tuple(input_ids.shape)}")

    model = AutoModelForCausalLM.from_pretrained(ref, dtype=torch.float32, local_files_only=True)
    model = model.to("cpu").float().eval()
    if dequantize is not None:
        n_deq, deq_sha = dequantize_into(model, dequantize)
    eos = eos_ids(job.get("eos_token_id"), job.get("genai_config"))
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
    metadata = base_metadata(job, tok, generated, eos)
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
    run_jobs(argv, run_job)


if __name__ == "__main__":
    main(sys.argv)
