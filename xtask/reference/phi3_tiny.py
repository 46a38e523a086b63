"""A tiny seeded Phi-3 for the tests of `cargo xtask new-case` and of int4 goldens for a Hugging Face
checkpoint that fuses projections (Phi-3's qkv_proj and gate_up_proj; mobius splits qkv_proj into q/k/v).

    python -m reference.phi3_tiny OUT_DIR      (run by xtask/tests/new_case.rs)

Writes OUT_DIR/hf (config, weights, the fixtures' shared tokenizer), OUT_DIR/onnx/default-f32 (mobius build)
and OUT_DIR/onnx/default-int4 (ONNX Runtime's quantizer, as fixtures.py quantizes the bundled fixtures).
Offline, deterministic, seconds. Not a bundled fixture: nothing here is committed.
"""
import os
import sys

from . import common  # noqa: F401  (the environment preamble, before torch)

import torch  # noqa: E402
import transformers  # noqa: E402

from . import fixture_build, fixture_models, text_fixture  # noqa: E402

SEED = 1
INIT_STD = 0.2


def main(out):
    out = os.path.abspath(out)
    hf = os.path.join(out, "hf")
    cfg = transformers.Phi3Config(
        num_hidden_layers=2, tie_word_embeddings=False, vocab_size=fixture_models.VOCAB, hidden_size=64,
        intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        original_max_position_embeddings=256, bos_token_id=fixture_models.BOS_ID, eos_token_id=fixture_models.EOS_ID,
        pad_token_id=fixture_models.PAD_ID)
    torch.manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    fixture_models.draw_weights(model, SEED, INIT_STD)
    fused = [n for n, _ in model.named_parameters() if n.endswith(("qkv_proj.weight", "gate_up_proj.weight"))]
    if not fused:
        raise SystemExit("this transformers' Phi-3 has no fused projections: the test would prove nothing")
    tokenizer = os.path.join(os.path.dirname(os.path.abspath(text_fixture.__file__)), "..", "..", "fixtures", "tokenizer")
    text_fixture.save_hf(model, "phi3-tiny", hf, tokenizer)
    fixture_build.mobius_build(out, "hf", os.path.join("onnx", "default-f32"), "default")
    fixture_build.quantize_int4(os.path.join(out, "onnx", "default-f32"), os.path.join(out, "onnx", "default-int4"))
    print(f"phi3-tiny in {out}: fused HF parameters {fused}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} OUT_DIR")
    main(sys.argv[1])
