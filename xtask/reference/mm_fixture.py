"""The multimodal fixture (gemma4-mm-tiny), created in full: its own tokenizer and a real Gemma4Processor, the seeded
model with its committed clamp bounds (mm_clamps.py), design checks on the real media, and the onnxruntime-genai
package mobius builds, completed as a user's must be (complete_mm_package).
"""
from __future__ import annotations

import os
import shutil
import tempfile

from .common import log

import torch  # noqa: E402
import transformers  # noqa: E402

from . import hf_run  # noqa: E402
from .fixture_build import TOKENIZER_FILES, check_derivable, mobius_build, mobius_source, normalize_modes  # noqa: E402
from .fixture_derive import renames  # noqa: E402
from .fixture_models import (EOS_ID, GEN_TOKENS, MM_IMAGE_SOFT_TOKENS, MM_NAME, MM_TOKEN_IDS, PAD_ID,  # noqa: E402
                             SPECIAL_TOKENS, design_gate, make_model)
from .fixture_tokenizer import build_tokenizer  # noqa: E402
from .mm_clamps import CLAMPS_FILE, calibrate_clamps, check_clamps_bite, load_clamps, write_clamps  # noqa: E402

MEDIA_DIR = "media"
MEDIA = {"image": "pipeline-cat-chonk.jpeg", "audio": "652-129742-0006.flac"}  # 960x686 RGB; 9.1 s, 16 kHz
# Tokenizer ids 0..12 are Gemma-4's specials, so that the processor's media tokens land on the ids of
# the config (boi 4, eoi 5, image 6, video 7, boa 8, eoa 9, audio 10).
MM_SPECIAL_TOKENS = [*SPECIAL_TOKENS, "<|image>", "<image|>", "<|image|>", "<|video|>",
                     "<|audio>", "<audio|>", "<|audio|>", "<|turn>", "<turn|>"]
MM_EXTRA_SPECIAL_TOKENS = {
    "image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>", "video_token": "<|video|>",
    "audio_token": "<|audio|>", "boa_token": "<|audio>", "eoa_token": "<audio|>",
    "sot_token": "<|turn>", "eot_token": "<turn|>"}
# Gemma-4 style turns; the processor expands <|image|> / <|audio|> into boi + n soft tokens + eoi.
MM_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{{ '<|turn>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<|image|>' }}"
    "{%- elif item['type'] == 'audio' -%}{{ '<|audio|>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{ '<turn|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|turn>model\\n' }}{%- endif -%}")
# Design prompts: modality -> (media, text).
MM_PROMPTS = {
    "image": (["image"], "Describe this image."),
    "audio": (["audio"], "Transcribe this audio."),
    "image+audio": (["image", "audio"], "What do you see and hear?"),
}
# The multimodal fixture ships the default flavour only: with its goldens (the processor pads pixel_values to 630
# patches; the audio clip is ~900 mel frames) a second 1.75 MB package would break the 15 MB budget for all
# fixtures and goldens. Its cpu build matched HF to 1.3e-6 when measured.
MM_FLAVOURS = {"default-f32": "default"}


def media_path(out_root, kind):
    p = os.path.join(out_root, MEDIA_DIR, MEDIA[kind])
    if not os.path.isfile(p):
        raise SystemExit(f"{MM_NAME} needs the real {kind} {p} (committed under fixtures/{MEDIA_DIR}/; "
                         f"nothing is downloaded)")
    return p


def make_processor(tokenizer):
    """The real Gemma4Processor around `tokenizer`. Save it before its first call: calling it turns on
    padding in the tokenizer backend, which save_pretrained then writes into tokenizer.json, and the
    processor reloaded from that passes max_length=None to the audio feature extractor (which then
    refuses to truncate)."""
    from transformers import Gemma4AudioFeatureExtractor, Gemma4ImageProcessor, Gemma4Processor, Gemma4VideoProcessor

    return Gemma4Processor(
        feature_extractor=Gemma4AudioFeatureExtractor(),  # 128 mel bins, 16 kHz, 20 ms / 10 ms (defaults)
        image_processor=Gemma4ImageProcessor(max_soft_tokens=MM_IMAGE_SOFT_TOKENS),
        video_processor=Gemma4VideoProcessor(max_soft_tokens=MM_IMAGE_SOFT_TOKENS),
        tokenizer=tokenizer,
        chat_template=MM_CHAT_TEMPLATE,
        image_seq_length=MM_IMAGE_SOFT_TOKENS,
    )


def mm_encode(processor, out_root, modality):
    """The processor's inputs for MM_PROMPTS[modality] on the real media (as goldens.py builds them)."""
    kinds, text = MM_PROMPTS[modality]
    images = [hf_run.load_image(media_path(out_root, "image"))] if "image" in kinds else []
    sr = processor.feature_extractor.sampling_rate
    audio = [hf_run.load_audio(media_path(out_root, "audio"), sr)] if "audio" in kinds else []
    return hf_run.mm_encode(processor, text, images, audio)



def check_design_mm(name, hf_dir, out_root):
    """HF greedy runs of the saved fixture (model + processor) on the three design prompts: every
    golden far from ties, no EOS or other special token, no collapse into one repeated token."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(hf_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    worst = None
    for modality in MM_PROMPTS:
        enc = mm_encode(processor, out_root, modality)
        prefill, generated, steps = hf_run.greedy(model, enc, GEN_TOKENS, [EOS_ID], PAD_ID)
        tokens = generated.tolist()
        ids = enc["input_ids"][0].tolist()
        margins = design_gate(f"{name} {modality}", f"prompt {len(ids)} tokens ({ids.count(MM_TOKEN_IDS['image_token_id'])} "
                              f"image, {ids.count(MM_TOKEN_IDS['audio_token_id'])} audio)", steps, tokens)
        if len(set(tokens)) < GEN_TOKENS // 2:
            raise SystemExit(f"{name} {modality}: tokens collapse: {tokens}")
        # A generated media placeholder (or turn marker) would be fed back as input: HF embeds an
        # image / audio placeholder without features as <pad>, mobius' embedding model as zeros.
        special = [t for t in tokens if t < len(MM_SPECIAL_TOKENS)]
        if special:
            raise SystemExit(f"{name} {modality}: generates special tokens {special}: {tokens}")
        worst = min(worst or 1e9, float(margins.min()))
    return worst


def build_mm_hf(name, hf_dir, out_root, clamps, recalibrate=False):
    """The seeded HF reference directory of the multimodal fixture (model + processor), its clamp bounds read from
    the committed `clamps` file, clamp- and design-checked (its creation); recalibrate: calibrate them on the media
    instead and write them to `clamps`."""
    os.makedirs(hf_dir)
    with tempfile.TemporaryDirectory(prefix="mm-tokenizer-") as tmp:
        tokenizer = build_tokenizer(tmp, MM_SPECIAL_TOKENS, MM_EXTRA_SPECIAL_TOKENS)
    make_processor(tokenizer).save_pretrained(hf_dir)
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(hf_dir)
    model = make_model(name)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"{name}: {model.config.model_type}, {n_params} params")
    if recalibrate:
        enc = mm_encode(processor, out_root, "image+audio")
        clips = calibrate_clamps(model, enc)
        write_clamps(clamps, clips)
        log(f"  clamps: recalibrated, written to {clamps}")
    else:
        clips = load_clamps(model, clamps)
    check_clamps_bite(model, mm_encode(processor, out_root, "image+audio"), clips)
    model.save_pretrained(hf_dir, safe_serialization=True)
    keep = {"config.json", "generation_config.json", "model.safetensors", *TOKENIZER_FILES,
            "processor_config.json", "chat_template.jinja"}
    if set(os.listdir(hf_dir)) != keep:
        raise SystemExit(f"{name}: unexpected files from save_pretrained: {sorted(os.listdir(hf_dir))}")
    normalize_modes(hf_dir)
    check_design_mm(name, hf_dir, out_root)


def build_mm_model(name, out_root, recalibrate=False):
    final = os.path.join(out_root, name)
    stage = os.path.join(out_root, f".stage-{name}")
    shutil.rmtree(stage, ignore_errors=True)
    os.makedirs(stage)
    hf_dir = os.path.join(stage, "hf")
    clamps = os.path.join(stage, CLAMPS_FILE)
    if not recalibrate:
        shutil.copyfile(os.path.join(final, CLAMPS_FILE), clamps)
    build_mm_hf(name, hf_dir, out_root, clamps, recalibrate=recalibrate)
    with tempfile.TemporaryDirectory(prefix="mm-mobius-") as tmp:
        mobius_source(hf_dir, os.path.join(tmp, "hf"))  # see MOBIUS_WORKAROUNDS
        for flavour, ep in MM_FLAVOURS.items():
            mobius_build(tmp, "hf", f"onnx/{flavour}", ep, keep_all=True)
            complete_mm_package(hf_dir, os.path.join(tmp, "onnx", flavour))  # see MOBIUS_WORKAROUNDS
        shutil.move(os.path.join(tmp, "onnx"), os.path.join(stage, "onnx"))
    check_derivable(name, stage, renames(name))
    shutil.rmtree(final, ignore_errors=True)
    os.rename(stage, final)


# The files of hf/ a multimodal package must carry for onnxruntime-genai's tokenizer and processor.
MM_GENAI_FILES = ("tokenizer.json", "tokenizer_config.json")


def complete_mm_package(hf_dir, pkg_dir):
    """The multimodal package as a user runs it in onnxruntime-genai (MOBIUS_WORKAROUNDS): model.type
    gemma4 (mobius writes its text decoder's gemma4_text) and the tokenizer files genai's processor opens."""
    path = os.path.join(pkg_dir, "genai_config.json")
    with open(path) as fh:
        text = fh.read()
    old, new = '"type": "gemma4_text"', '"type": "gemma4"'
    if text.count(old) != 1:
        raise SystemExit(f"{path}: expected one {old} from mobius-onnx 0.1.0, found {text.count(old)}")
    with open(path, "w") as fh:
        fh.write(text.replace(old, new))
    for f in MM_GENAI_FILES:
        shutil.copyfile(os.path.join(hf_dir, f), os.path.join(pkg_dir, f))
    normalize_modes(pkg_dir)
