"""The multimodal fixture's clamps: every ClippableLinear of its vision and audio towers gets input and output bounds,
calibrated on the media once (calibrate_clamps, --recalibrate-clamps) and committed as data (write_clamps,
load_clamps), and each of them must change its tower's features (check_clamps_bite).
"""
from __future__ import annotations

import json
import os

from .common import log

import numpy as np  # noqa: E402
import torch  # noqa: E402

from .fixture_models import MM_NAME  # noqa: E402

MIN_CLAMP_MOVE = 5e-3  # each Gemma-4 clamp, switched off alone, must move its tower's features this much
# Clamp calibration: each ClippableLinear gets input/output bounds at these percentiles of what it
# sees on the real media, in forward order with all upstream clamps already on (so every clamp clips
# ~5% of its elements at one or both ends; see calibrate_clamps).
CLIP_PERCENTILES = (5.0, 95.0)
# The calibrated bounds are committed (<out>/gemma4-mm-tiny/clamps.json) and read when the fixture is built (a
# derivation reads them, with every other weight, from the committed package): a forward
# pass sums floats in an order that depends on the CPU's kernels (thread count, AVX-512 or not), so bounds taken from
# one would make the weights, and their sha256 in MANIFEST.json, depend on the machine. Calibrating again is an
# explicit step (--recalibrate-clamps), followed by a rebuild of the fixture and its goldens.
CLAMPS_FILE = "clamps.json"
CLAMPS_FORMAT = "clamp-bounds-v1"
CLAMP_FIELDS = ("input_min", "input_max", "output_min", "output_max")


def clippable_linears(model):
    from transformers.models.gemma4.modeling_gemma4 import Gemma4ClippableLinear

    clips = {n: m for n, m in model.named_modules() if isinstance(m, Gemma4ClippableLinear)}
    if not clips or not all(m.use_clipped_linears for m in clips.values()):
        raise SystemExit("expected Gemma4ClippableLinear layers with use_clipped_linears in both towers")
    return clips


def encoder_features(model, enc):
    """(image features, audio features) of HF for a processed prompt (both present in `enc`)."""
    with torch.no_grad():
        img = model.model.get_image_features(enc["pixel_values"], enc["image_position_ids"]).pooler_output
        o = model.model.get_audio_features(enc["input_features"], enc["input_features_mask"])
    return img, o.pooler_output[o.attention_mask]


def calibrate_clamps(model, enc):
    """Give every ClippableLinear finite input/output bounds at CLIP_PERCENTILES of what it sees on
    `enc` (image+audio), in forward order: each clamp is calibrated with every upstream clamp already
    on (calibrating all of them from one unclamped pass leaves some clipping nothing). Vision
    padding patches do not count."""
    clips = clippable_linears(model)
    valid = ~(enc["image_position_ids"][0] == -1).all(-1)
    qs = list(CLIP_PERCENTILES)
    done = {}

    def pct(n, x, side):
        if ".vision_tower." in n:
            x = x[:, valid]
        x = x.detach().double().reshape(-1).numpy()
        # Leave out the point masses an upstream clamp leaves at the extremes (e.g. the audio FFN's
        # silu(clamped ffw_layer_1) has ~5% of its values at its maximum): otherwise the percentile
        # lands on them and this clamp clips nothing.
        inner = x[(x > x.min()) & (x < x.max())]
        lo, hi = np.percentile(inner, qs)
        if side == "input":
            # Input clamps clip the top only (their lower bound is the smallest value seen): in the
            # audio FFN (clamp -> silu -> clamp) a two-sided input clamp after the monotone part of
            # silu makes the upstream output clamp redundant; this way the output clamp keeps the
            # low side (where silu is not monotone) and both Clip nodes matter.
            lo = x.min()
        return float(lo), float(hi)

    def pre(n):
        def hook(mod, args):
            if n not in done:
                lo, hi = pct(n, args[0], "input")
                mod.input_min.fill_(lo)
                mod.input_max.fill_(hi)
                done[n] = 1
        return hook

    def post(n):
        def hook(mod, args, output):
            if done[n] == 1:  # the first call ran with +-inf output bounds
                lo, hi = pct(n, output, "output")
                mod.output_min.fill_(lo)
                mod.output_max.fill_(hi)
                done[n] = 2
                return torch.clamp(output, mod.output_min, mod.output_max)
        return hook

    hooks = [h for n, m in clips.items() for h in (m.register_forward_pre_hook(pre(n)), m.register_forward_hook(post(n)))]
    try:
        encoder_features(model, enc)
    finally:
        for h in hooks:
            h.remove()
    if sorted(done) != sorted(clips) or set(done.values()) != {2}:
        raise SystemExit(f"clamp calibration reached {len(done)} of {len(clips)} clippable linears")
    for m in clips.values():
        bounds = [float(getattr(m, k)) for k in ("input_min", "input_max", "output_min", "output_max")]
        assert all(np.isfinite(bounds)) and bounds[0] < bounds[1] and bounds[2] < bounds[3], bounds
    return clips


def clamp_bounds(clips):
    """{module name: {field: float}} of every ClippableLinear's four bounds (float32 values, as float)."""
    return {n: {k: float(getattr(m, k)) for k in CLAMP_FIELDS} for n, m in sorted(clips.items())}


def write_clamps(path, clips):
    """The calibrated bounds as committed data: hex floats (exact for every float32), sorted, one file."""
    doc = {"format": CLAMPS_FORMAT,
           "how": "calibrate_clamps in xtask/reference/fixtures.py (`cargo xtask fixtures --only gemma4-mm-tiny "
                  "--recalibrate-clamps`): CLIP_PERCENTILES of what each ClippableLinear sees on the image+audio "
                  "design prompt, in forward order",
           "percentiles": list(CLIP_PERCENTILES),
           "bounds": {n: {k: v.hex() for k, v in b.items()} for n, b in clamp_bounds(clips).items()}}
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def load_clamps(model, path):
    """Set every ClippableLinear's bounds from the committed `path` (write_clamps' format): no forward pass decides
    a weight. Every module of the model must be there, and nothing else."""
    clips = clippable_linears(model)
    if not os.path.isfile(path):
        raise SystemExit(f"{path}: missing; the clamp bounds are committed data (recreate them with "
                         f"`cargo xtask fixtures --only {MM_NAME} --recalibrate-clamps`)")
    with open(path) as fh:
        try:
            doc = json.load(fh)
        except json.JSONDecodeError as e:
            raise SystemExit(f"{path}: not JSON: {e}")
    if not isinstance(doc, dict) or doc.get("format") != CLAMPS_FORMAT:
        raise SystemExit(f"{path}: field `format` is {doc.get('format') if isinstance(doc, dict) else doc!r}, "
                         f"expected {CLAMPS_FORMAT!r}")
    bounds = doc.get("bounds")
    if not isinstance(bounds, dict):
        raise SystemExit(f"{path}: field `bounds` is missing or not an object")
    if sorted(bounds) != sorted(clips):
        extra, missing = sorted(set(bounds) - set(clips)), sorted(set(clips) - set(bounds))
        raise SystemExit(f"{path}: field `bounds` does not name the model's clippable linears (not in the model: "
                         f"{extra}; missing: {missing})")
    with torch.no_grad():
        for n, m in clips.items():
            b = bounds[n]
            if not isinstance(b, dict) or sorted(b) != sorted(CLAMP_FIELDS):
                raise SystemExit(f"{path}: field `bounds.{n}` must hold exactly {list(CLAMP_FIELDS)}")
            for k in CLAMP_FIELDS:
                try:
                    v = float.fromhex(b[k]) if isinstance(b[k], str) else None
                except ValueError:
                    v = None
                if v is None or not np.isfinite(v) or float(np.float32(v)) != v:
                    raise SystemExit(f"{path}: field `bounds.{n}.{k}` is {b[k]!r}, expected a finite float32 "
                                     f"as a hex float")
                getattr(m, k).fill_(v)
            if not (float(m.input_min) < float(m.input_max) and float(m.output_min) < float(m.output_max)):
                raise SystemExit(f"{path}: field `bounds.{n}`: each min must be under its max")
    return clips


def check_clamps_bite(model, enc, clips):
    """Every clamp matters: switching any one of them off (the input or the output clamp of one
    ClippableLinear, i.e. one Clip node of the ONNX encoders) moves its tower's features."""
    base = encoder_features(model, enc)
    moves = {}
    for n, m in clips.items():
        for side in ("input", "output"):
            lo, hi = getattr(m, f"{side}_min"), getattr(m, f"{side}_max")
            saved = lo.clone(), hi.clone()
            lo.fill_(-float("inf"))
            hi.fill_(float("inf"))
            try:
                alt = encoder_features(model, enc)
            finally:
                lo.copy_(saved[0])
                hi.copy_(saved[1])
            tower = 0 if ".vision_tower." in n else 1
            moves[f"{n}.{side}"] = float((alt[tower] - base[tower]).abs().max())
    weakest = min(moves, key=moves.get)
    log(f"  clamps: {len(moves)} in {len(clips)} clippable linears ({sum('.vision_tower.' in n for n in clips)} "
        f"vision); switching one off moves its tower's features by {min(moves.values()):.3g} ({weakest}) "
        f".. {max(moves.values()):.3g}")
    if moves[weakest] < MIN_CLAMP_MOVE:
        raise SystemExit(f"clamp {weakest} barely bites: {moves[weakest]:.3g} < {MIN_CLAMP_MOVE}")
    return moves
