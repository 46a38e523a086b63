"""The seeded fixtures' models (fixtures.py builds them): their vocabulary, their configs (the text fixtures, the
multimodal one's text, vision and audio towers, and the list of speech fixtures that whisper_fixture.py designs),
the weight recipe (make_model), the prompts their goldens were designed on, and the design rule those goldens were
searched for (design_gate).
"""
from __future__ import annotations

from .common import log

import torch  # noqa: E402
import transformers  # noqa: E402

VOCAB = 512
SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]  # ids 0..3, Gemma order
PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
    bos_token_id=BOS_ID,
    eos_token_id=EOS_ID,
    pad_token_id=PAD_ID,
)

# How the weights are made (make_model): every >=2-d parameter is randn * init_std (embed_std for the
# input embedding when set), every 1-d parameter (norm weights) gets randn * NORM_STD added to its
# default so that no norm weight is inert, and Gemma-4's per-layer output scalars get values in
# [0.75, 1.25). The rest of the recipe exists for the goldens: seeds, scales and prompts were searched
# so that the top1-top2 logit margin of the prefill and of all 16 greedy steps is >= MIN_MARGIN
# (far from f16 noise), no EOS is generated, and tokens do not collapse into one repeated id.
#  - final_norm_scale multiplies the final norm's effective scale, i.e. all logits (argmax unchanged).
#  - tie: the Qwen3 and Gemma-3 fixtures tie the LM head to the embedding (as their small real models
#    do). A tied random Gemma mostly predicts its input token again (embedding x sqrt(hidden) in the
#    residual); a small embed_std keeps that to short runs.
#  - head_perm=(a, rest): Gemma-4 is untied, its LM head is rest * randn + a * (the embedding rows in a
#    seeded random order). With the logit softcap of 3 a plain random head only gives near-ties (the
#    cap squeezes the top logits together); this gives every step a clear winner, no repetition, and
#    raw top logits of ~2.7 that the cap still bends by ~0.5.
NORM_STD = 0.1
MIN_MARGIN = 0.1
GEN_TOKENS = 16


def _qwen3(tie):
    return transformers.Qwen3Config(num_hidden_layers=2, tie_word_embeddings=tie, **COMMON)


def _llama(tie):
    return transformers.LlamaConfig(num_hidden_layers=2, tie_word_embeddings=tie, **COMMON)


def _gemma3(tie):
    return transformers.Gemma3TextConfig(
        tie_word_embeddings=tie,
        num_hidden_layers=2,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"],
        # == head_dim (as in Gemma-3 1B..12B): mobius-onnx 0.1.0 ignores query_pre_attn_scalar and
        # always scales by head_dim**-0.5, so any other value makes every gemma3 package wrong.
        query_pre_attn_scalar=16,
        final_logit_softcapping=None,
        **COMMON,
    )


def _gemma4_text_kwargs(tie):
    return dict(
        tie_word_embeddings=tie,
        num_hidden_layers=4,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        sliding_window=8,
        global_head_dim=32,  # dual head dims: 16 on sliding layers, 32 on full layers
        num_kv_shared_layers=2,  # layers 2, 3 reuse the K/V of layers 0, 1
        hidden_size_per_layer_input=16,
        vocab_size_per_layer_input=VOCAB,
        final_logit_softcapping=3.0,  # small enough that tanh really bends the logits
        **COMMON,
    )


def _gemma4(tie):
    return transformers.Gemma4TextConfig(**_gemma4_text_kwargs(tie))


MODEL_DEFAULTS = dict(tie=False, embed_std=None, final_norm_scale=1.0, head_perm=None)
MODELS = {
    "qwen3-tiny": dict(config=_qwen3, tie=True, seed=36, init_std=0.2),
    "llama-tiny": dict(config=_llama, seed=33, init_std=0.2),
    "gemma3-tiny": dict(config=_gemma3, tie=True, seed=66, init_std=0.1, embed_std=0.03, final_norm_scale=7.0),
    "gemma4-tiny": dict(config=_gemma4, seed=24, init_std=0.1, embed_std=0.3, final_norm_scale=0.35,
                        head_perm=(0.5, 0.5)),
}

# The prompt each model's goldens are designed for (margins checked against these).
PROMPTS = {
    'qwen3-tiny': 'Question: What is the capital of France?\nAnswer: The capital of France is Paris, a city known for',
    'llama-tiny': 'class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        self.items.append(item)\n\n    def pop(self):\n',
    'gemma3-tiny': 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return',
    'gemma4-tiny': 'import os\nimport sys\n\n\ndef main(argv):\n    path = os.path.join(os.getcwd(), argv[1])\n    with open(path, encoding="utf-8") as f:\n        for line in f:\n',
}
# --- the multimodal fixture (gemma4-mm-tiny): the text model above plus 2-layer vision and audio
# encoders, a real Gemma4Processor and the real media in <out>/media/.
MM_NAME = "gemma4-mm-tiny"
# The config's media token ids; the multimodal tokenizer puts its media tokens on them (mm_fixture.MM_SPECIAL_TOKENS).
MM_TOKEN_IDS = dict(boi_token_id=4, eoi_token_id=5, image_token_id=6, video_token_id=7,
                    boa_token_id=8, eoa_token_index=9, audio_token_id=10)
# 70 is the smallest soft-token budget Gemma4ImageProcessor allows: the jpeg is resized to 432x336
# (27x21 patches of 16 px, pooled 3x3 into 63 soft tokens) and padded to 630 patches.
MM_IMAGE_SOFT_TOKENS = 70
# The image+audio prompt is ~320 tokens; mobius sizes the text RoPE table by max_position_embeddings.
MM_MAX_POSITIONS = 512


# The text model is gemma4-tiny's with a narrower MLP (64 instead of 128) and the encoders are small
# (hidden 16), so that the fixture (HF weights + two packages, ~4.7 MB) and the media stay under 5 MB.
MM_TEXT = dict(intermediate_size=64)
MM_VISION = dict(
    hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
    num_key_value_heads=2, head_dim=8, patch_size=16, pooling_kernel_size=3,
    # >= the longest patch row a 70-soft-token image can have (210 patches)
    position_embedding_size=256,
    use_clipped_linears=True,  # default False for vision: the clamps would not exist
)
MM_AUDIO = dict(
    hidden_size=16, num_hidden_layers=2,
    num_attention_heads=8,  # mobius-onnx 0.1.0 hard-codes 8 audio attention heads (head_dim 2 here)
    subsampling_conv_channels=[128, 4],  # mobius needs the first one at 128
    output_proj_dims=16,
    use_clipped_linears=True,
)


def _gemma4_mm(tie):
    text = transformers.Gemma4TextConfig(
        **{**_gemma4_text_kwargs(tie), "max_position_embeddings": MM_MAX_POSITIONS, **MM_TEXT})
    vision = transformers.Gemma4VisionConfig(**MM_VISION)
    audio = transformers.Gemma4AudioConfig(**MM_AUDIO)
    return transformers.Gemma4Config(text_config=text, vision_config=vision, audio_config=audio,
                                     tie_word_embeddings=tie, mm_tokens_per_image=MM_IMAGE_SOFT_TOKENS,
                                     **MM_TOKEN_IDS)


# Untied with head_perm like gemma4-tiny: a tied random Gemma-4 under the logit softcap of 3 either
# repeats its input token or has near-ties (margins < 0.04 over a seed / scale grid). The multimodal
# context needs a stronger input embedding (0.8) than the text fixture to keep margins wide.
# audio_std: wider weights for some audio-tower linears so that every clamp matters: q_proj / k_proj
# (otherwise the attention is nearly uniform and the clamps on q and k move the features by 0.003)
# and the FFNs' ffw_layer_1 (whose output clamp feeds silu: near silu's flat minimum clipping the
# low side changes next to nothing unless the pre-activations reach well below -1.3).
MM_MODELS = {
    MM_NAME: dict(config=_gemma4_mm, seed=1, init_std=0.1, embed_std=0.8, final_norm_scale=0.2,
                  head_perm=(0.5, 0.5), audio_std={"q_proj": 0.6, "k_proj": 0.6, "ffw_layer_1": 0.3}),
}

# The encoder-decoder fixtures (speech-to-text), designed and built by whisper_fixture.py; their hf/ weights are
# derived as every seeded fixture's are. Their tokenizer files (the shared BPE plus Whisper's special tokens) are
# committed: they are not copies of tokenizer/.
SPEECH_MODELS = ("whisper-tiny",)


def make_model(name, **override):
    """The seeded random-weight model `name` (fp32, eval); `override` replaces MODELS[name] entries."""
    spec = {**MODEL_DEFAULTS, **{**MODELS, **MM_MODELS}[name], **override}
    seed, init_std = spec["seed"], spec["init_std"]
    cfg = spec["config"](spec["tie"])
    torch.manual_seed(seed)
    # (gemma4 multimodal configs give Gemma4ForConditionalGeneration: vision and audio towers'
    # parameters get the same recipe, in named_parameters order.)
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    g = torch.Generator().manual_seed(seed)
    embed = model.get_input_embeddings().weight
    final_norm = getattr(model.model, "language_model", model.model).norm.weight
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() >= 2:
                std = spec["embed_std"] if p is embed and spec["embed_std"] else init_std
                for part, part_std in (spec.get("audio_std") or {}).items():
                    if ".audio_tower." in n and n.endswith(f".{part}.linear.weight"):
                        std = part_std
                p.copy_(torch.randn(p.shape, generator=g) * std)
            else:
                # norm weights: Gemma-3 style norms store w for a (1 + w) scale (default 0), the others
                # store the scale itself (default 1). Perturb around the default either way.
                zero_centred = bool((p == 0).all())
                p.add_(torch.randn(p.shape, generator=g) * NORM_STD)
                if p is final_norm and spec["final_norm_scale"] != 1.0:
                    k = spec["final_norm_scale"]
                    p.copy_((1 + p) * k - 1 if zero_centred else p * k)
        # Gemma-4 scales each layer's output by a stored scalar (a persistent buffer, 1.0 when
        # fresh): give each layer its own value so that ignoring it is visible.
        for _, m in model.named_modules():
            if isinstance(getattr(m, "layer_scalar", None), torch.Tensor):
                m.layer_scalar.copy_(0.75 + 0.5 * torch.rand(m.layer_scalar.shape, generator=g))
        if spec["head_perm"]:
            # An untied LM head that leans on a fixed random permutation of the embedding rows:
            # next-token logits get a clear winner (wide top1-top2 margins, even under a small
            # logit softcap) without the tied-head habit of repeating the input token.
            assert not spec["tie"]
            a, rest = spec["head_perm"]
            perm = torch.randperm(VOCAB, generator=g)
            model.lm_head.weight.mul_(rest).add_(a * embed[perm])
    return model


def design_gate(label, what, logits, tokens):
    """The goldens' design rule, shared by the text and multimodal checks: log the run, then refuse a
    golden that stops at EOS or whose smallest top1-top2 margin (over [steps, vocab] logits) is a near-tie."""
    top2 = logits.topk(2, dim=-1).values
    margins = top2[:, 0] - top2[:, 1]
    log(f"  design check {label}: {what}, min top1-top2 margin {float(margins.min()):.4f} "
        f"(step {int(margins.argmin())}), |logit| <= {float(logits.abs().max()):.2f}, "
        f"{len(set(tokens))} distinct of {len(tokens)} tokens {tokens}")
    if len(tokens) < GEN_TOKENS or EOS_ID in tokens:
        raise SystemExit(f"{label}: generation hit EOS: {tokens}")
    if float(margins.min()) < MIN_MARGIN:
        raise SystemExit(f"{label}: golden margin {float(margins.min()):.4f} < {MIN_MARGIN}")
    return margins


def draw_weights(model, seed, std):
    """Redraws a test model's weights in place, seeded: every matrix from N(0, std^2), every vector (norms, biases)
    moved by N(0, NORM_STD^2). A larger std than transformers' default (0.02) gives a greedy stream that varies, with
    margins clear of the near-tie line (phi3_tiny.py, qwen2_tiny.py)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * std)
            else:
                p.add_(torch.randn(p.shape, generator=g) * NORM_STD)
