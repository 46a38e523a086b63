"""The fixtures' tokenizer: a byte-level BPE of VOCAB tokens trained on the Python standard library's own sources
(nothing is downloaded), its special tokens on the first ids. The text fixtures share one (tokenizer/); the
multimodal fixture trains its own with Gemma-4's media and turn markers.
"""
from __future__ import annotations

import glob
import os
import sysconfig

from .common import log

from .fixture_build import normalize_modes  # noqa: E402
from .fixture_models import BOS_ID, SPECIAL_TOKENS, VOCAB  # noqa: E402


def tokenizer_corpus():
    stdlib = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))[:60]
    lic = os.path.join(stdlib, "LICENSE.txt")
    if os.path.exists(lic):
        files.append(lic)
    if len(files) < 20:
        raise SystemExit(f"too few stdlib sources under {stdlib} to train the tokenizer")
    return files


def build_tokenizer(out_dir, special_tokens=SPECIAL_TOKENS, extra_special_tokens=None):
    """The fixtures' byte-level BPE; `special_tokens` take ids 0.. in order (the text tokenizer has
    Gemma's <pad> <eos> <bos> <unk>; the multimodal one adds Gemma-4's media and turn markers)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(tokenizer_corpus(), trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    for i, t in enumerate(special_tokens):
        assert tok.token_to_id(t) == i, (t, tok.token_to_id(t))
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", BOS_ID)]
    )
    extra = {"extra_special_tokens": extra_special_tokens} if extra_special_tokens else {}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>", **extra
    )
    os.makedirs(out_dir, exist_ok=True)
    fast.save_pretrained(out_dir)
    normalize_modes(out_dir)
    ids = fast("def f(x):\n    return x").input_ids
    assert ids[0] == BOS_ID, ids
    log(f"tokenizer: vocab {tok.get_vocab_size()}, sample ids {ids}")
    return fast
