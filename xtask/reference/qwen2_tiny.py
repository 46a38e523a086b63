"""A tiny seeded Qwen2 (q/k/v projections with biases, an architecture no bundled fixture has) for the test of
`cargo xtask new-case --hf ... --eps ... --dtypes ...`, which builds its packages itself.

    python -m reference.qwen2_tiny OUT_DIR [--flat]      (run by xtask/tests/new_case.rs)

Writes OUT_DIR (config, weights, the fixtures' shared tokenizer). Weights drawn with std 0.2, so the greedy stream
varies and its margins clear the near-tie line; --flat draws them with transformers' default initialisation
(std 0.02), whose stream is one token repeated: the degenerate stream new-case warns about. Offline, deterministic,
seconds. Nothing here is committed.
"""
import os
import sys

from . import common  # noqa: F401  (the environment preamble, before torch)

import torch  # noqa: E402
import transformers  # noqa: E402

from . import fixture_models, text_fixture  # noqa: E402

SEED = 3
INIT_STD = 0.2


def main(out, flat):
    out = os.path.abspath(out)
    cfg = transformers.Qwen2Config(
        num_hidden_layers=2, tie_word_embeddings=False, vocab_size=fixture_models.VOCAB, hidden_size=64,
        intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=fixture_models.BOS_ID, eos_token_id=fixture_models.EOS_ID, pad_token_id=fixture_models.PAD_ID)
    torch.manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    biases = [n for n, _ in model.named_parameters() if n.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias"))]
    if len(biases) != 3 * cfg.num_hidden_layers:
        raise SystemExit(f"this transformers' Qwen2 has q/k/v biases {biases}: the test would prove less than it says")
    if not flat:
        fixture_models.draw_weights(model, SEED, INIT_STD)
    tokenizer = os.path.join(os.path.dirname(os.path.abspath(text_fixture.__file__)), "..", "..", "fixtures", "tokenizer")
    text_fixture.save_hf(model, "qwen2-tiny", out, tokenizer)
    print(f"qwen2-tiny in {out}: {'flat (default init)' if flat else f'std {INIT_STD}'}, biases {len(biases)}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--flat"]
    if len(args) != 1:
        raise SystemExit(f"usage: {sys.argv[0]} OUT_DIR [--flat]")
    main(args[0], "--flat" in sys.argv[1:])
