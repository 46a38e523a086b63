"""A fixture's HF weights read back from its committed f32 package, byte for byte: the derivation is a pure function
of committed data, so it gives the same model.safetensors on every machine, thread count and CPU path.

The seeded recipe (fixture_models.make_model) draws torch.randn, whose float32 path is vectorised: its AVX2 and AVX-512
kernels give other bits than the scalar one (ATEN_CPU_CAPABILITY=default), and a forward pass would add the CPU's
summation order. So the recipe only *creates* a fixture (`cargo xtask fixtures`, which writes the packages, the
goldens' inputs and MANIFEST.json together); deriving one again never runs it. MANIFEST.json's sha256 of the
weights, recorded from the seeded model when it was created, proves that the package gives them back unchanged.

mobius stores every Linear weight transposed (`<name>_t`, [in, out]) and every other parameter unchanged, under its
HF name with a prefix per component; the multimodal package splits the model into four graphs and renames a few
modules (MM_RENAMES), and Whisper's into two (WHISPER_RENAMES). A tied LM head is not saved (save_pretrained drops it), computed buffers (RoPE caches, the audio
tower's relative position table) have no parameter, and int64 initializers are shapes. Every parameter must be found
exactly once with its shape, and no other float initializer may be left over: a weight mobius renamed fails loudly
here instead of being left at a random value.
"""
from __future__ import annotations

import os

import numpy as np

# HF name prefix -> package initializer prefix, most specific first (gemma4-mm-tiny's four graphs).
MM_RENAMES = (
    ("model.language_model.embed_tokens_per_layer.", "embedding.embed_tokens_per_layer."),
    ("model.language_model.embed_tokens.", "embedding.embed_tokens."),
    ("model.language_model.per_layer_model_projection.", "embedding.per_layer_model_projection."),
    ("model.language_model.per_layer_projection_norm.", "embedding.per_layer_projection_norm."),
    ("model.language_model.", "decoder.model."),
    ("lm_head.", "decoder.lm_head."),
    ("model.vision_tower.patch_embedder.", "vision_encoder.encoder.patch_embedder."),
    ("model.vision_tower.", "vision_encoder."),
    ("model.embed_vision.embedding_projection.", "vision_encoder.projector."),
    ("model.audio_tower.subsample_conv_projection.layer0.conv.", "audio_encoder.encoder.subsample_conv_projection.conv0."),
    ("model.audio_tower.subsample_conv_projection.layer0.norm.", "audio_encoder.encoder.subsample_conv_projection.norm0."),
    ("model.audio_tower.subsample_conv_projection.layer1.conv.", "audio_encoder.encoder.subsample_conv_projection.conv1."),
    ("model.audio_tower.subsample_conv_projection.layer1.norm.", "audio_encoder.encoder.subsample_conv_projection.norm1."),
    ("model.audio_tower.", "audio_encoder.encoder."),
    ("model.embed_audio.embedding_projection.", "audio_encoder.projector."),
)
# Whisper's two graphs (encoder/, decoder/) drop the `model.` prefix; the head lives under the decoder.
WHISPER_RENAMES = (
    ("model.encoder.", "encoder."),
    ("model.decoder.", "decoder."),
    ("proj_out.", "decoder.proj_out."),
)
# Float initializers that are computed, not parameters.
COMPUTED = (".rotary_emb", ".cos_cache", ".sin_cache", ".self_attn.pos_embed")


def _graphs(pkg_dir):
    """Every model.onnx under pkg_dir (external data beside each)."""
    import onnx

    out = []
    for d, _, files in sorted(os.walk(pkg_dir)):
        if "model.onnx" in files:
            out.append(onnx.load(os.path.join(d, "model.onnx")).graph)
    if not out:
        raise SystemExit(f"{pkg_dir}: no model.onnx to read the weights from")
    return out


def _candidates(key, renames):
    """The initializer names a parameter may have in the package."""
    bases = [new + key[len(old):] for old, new in renames if key.startswith(old)][:1] or [key]
    out = []
    for b in bases:
        out += [b, f"{b}_t"]
        if b.endswith(".linear.weight"):  # Gemma-4's ClippableLinear: mobius drops the inner `.linear`
            out += [b[: -len(".linear.weight")] + ".weight_t", b[: -len(".linear.weight")] + ".weight"]
    return out


def package_state_dict(pkg_dir, hf_dir, renames=()):
    """The state dict save_pretrained writes for hf_dir's model, from the initializers of pkg_dir."""
    import torch
    import transformers
    from onnx import TensorProto, numpy_helper

    cfg = transformers.AutoConfig.from_pretrained(hf_dir)
    auto = transformers.AutoModelForSpeechSeq2Seq if cfg.is_encoder_decoder else transformers.AutoModelForCausalLM
    with torch.device("meta"):
        ref = auto.from_config(cfg)
    want = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    tied = getattr(cfg, "tie_word_embeddings", False) or getattr(text, "tie_word_embeddings", False)
    if tied:
        want.pop("lm_head.weight", None)
    inits = {}
    for g in _graphs(pkg_dir):
        for t in g.initializer:
            if t.name.startswith(("const_", "v_")):  # each graph's own folded constants
                continue
            if t.name in inits:
                raise SystemExit(f"{pkg_dir}: initializer {t.name} is in two of its graphs")
            inits[t.name] = t
    sd, used, missing = {}, set(), []
    for key, shape in want.items():
        hit = next((c for c in _candidates(key, renames) if c in inits), None)
        if hit is None:
            missing.append(key)
            continue
        if hit in used:
            raise SystemExit(f"{pkg_dir}: initializer {hit} would give two parameters ({key} and an earlier one)")
        a = numpy_helper.to_array(inits[hit])
        if hit.endswith("_t"):
            a = a.T
        if a.dtype != np.float32 or a.shape != shape:
            raise SystemExit(f"{pkg_dir}: initializer {hit} ({a.dtype}, {list(a.shape)}) does not give {key} "
                             f"(float32, {list(shape)})")
        # np.array, not np.ascontiguousarray: the latter turns a 0-d bound into shape [1].
        sd[key] = np.array(a, order="C", copy=True)
        used.add(hit)
    # A tied head that mobius stores as its own (transposed) copy must be the embedding's, bit for bit.
    embed = next((k for k in sd if k.endswith("embed_tokens.weight")), None)
    for head in _candidates("lm_head.weight", renames) if tied else ():
        if head in inits and embed is not None:
            a = numpy_helper.to_array(inits[head])
            if not np.array_equal(a.T if head.endswith("_t") else a, sd[embed]):
                raise SystemExit(f"{pkg_dir}: the tied head {head} is not the embedding {embed}")
            used.add(head)
    left = sorted(n for n, t in inits.items() if n not in used and t.data_type == TensorProto.FLOAT
                  and not any(c in n for c in COMPUTED))
    if missing or left:
        raise SystemExit(f"{pkg_dir}: cannot read the HF weights back: parameters without an initializer "
                         f"{missing[:8]}{' ...' if len(missing) > 8 else ''}, float initializers without a parameter "
                         f"{left[:8]}{' ...' if len(left) > 8 else ''}")
    return sd


def write(pkg_dir, hf_dir, path, renames=()):
    """package_state_dict saved as transformers' save_pretrained saves it (safetensors, metadata format=pt)."""
    from safetensors.numpy import save_file

    save_file(package_state_dict(pkg_dir, hf_dir, renames), path, metadata={"format": "pt"})
    os.chmod(path, 0o644)
