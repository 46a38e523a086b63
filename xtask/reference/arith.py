"""The accuracy gate's fixture: a tiny Qwen3 that has learned two-digit addition, its ONNX packages,
and two multiple-choice tasks (one it can solve, one control at chance).

    python -m reference.arith --out <repo>/fixtures [--retrain] [--no-eval]    (cargo xtask fixtures --only arith-tiny)
    python -m reference.arith --out <repo>/fixtures --derive-only              (cargo xtask fixtures --hf-only)

Writes under --out:

    arith-tiny/hf/                  Qwen3ForCausalLM (hidden 64, 2 layers, 4 heads / 2 KV heads, head_dim
                                    16, tied embeddings, vocab 18), fp32 safetensors + tokenizer. TRAINED:
                                    training is bit-identical only at a fixed thread count (1 here), so the
                                    weights are committed, but once only: inside onnx/default-f32 (below).
                                    hf/model.safetensors is derived (git-ignored): derive_weights rebuilds it
                                    byte for byte from that package's initializers and checks its sha256
                                    against fixtures/MANIFEST.json (the rest of hf/ is committed).
    arith-tiny/onnx/default-f32/    mobius build --runtime ort-genai --ep default --dtype f32 (model.onnx,
                                    model.onnx.data, genai_config.json: no tokenizer files, they are hf/'s)
    arith-tiny/onnx/default-f16/    mobius build ... --dtype f16 (files as default-f32)
    arith-tiny/onnx/default-int4/   default-f32 quantized like the other fixtures' int4 packages (fixtures.py
                                    quantize_int4 / INT4: ORT MatMulNBitsQuantizer, 4 bits, block 32,
                                    symmetric, accuracy_level unset; MatMuls -> MatMulNBits, token-embedding
                                    Gathers read by nothing else -> GatherBlockQuantized: none here, the tied
                                    LM head reads the table too); files as default-f16
                                    (no package carries the tokenizer: it is that of hf/)
    arith-tiny/RECIPE.json          training recipe and result, sizes, and the reference's accuracy table (the
                                    packages' are for the suite's accuracy gate to measure)
    tasks/arith/{train,test}.jsonl          {"question": "12+34=", "choices": [...], "gold": i, "answer": "46"}
    tasks/arith-control/{train,test}.jsonl  same questions, choices unrelated to the sum, gold uniform at random

Default mode: the committed weights are kept (only the tokenizer is checked against a fresh build): a missing
hf/model.safetensors is first derived from onnx/default-f32 (derive_weights), one that is there must match
the sha256 in MANIFEST.json; then the ONNX packages, data and RECIPE.json are rebuilt from it, and the rebuilt
default-f32 package must derive the same bytes again. --retrain trains again (1 thread, 400 steps, 1.5-2
minutes on one core), replaces hf/ and records the new weights' sha256 in MANIFEST.json. --derive-only only
rebuilds hf/model.safetensors from the package and checks it (what `fixtures.py --hf-only` runs).

Tokenizer: character level (a BPE model with an 18-symbol vocabulary and no merges): ids 0..3 = <pad> <eos>
<bos> <unk>, then "0".."9", "+", "=", " ", "\\n". The post-processor prepends <bos> (id 2), like the other
fixtures' tokenizers; EOS is id 1. With no merges no token can cross the context/continuation boundary, so
encoding context and context+continuation separately (lm-eval) always agrees; eval() counts it anyway.

Prompts (lm-eval 0.4 multiple_choice): doc_to_text = question ("12+34="), target_delimiter " ", each choice is
a continuation (" 46"), fewshot_delimiter "\\n\\n", few-shot examples = the first n of train.jsonl
("q1= a1\\n\\nq2= a2\\n\\nq3= a3\\n\\n12+34="). Training text has the same shape:
"<bos>q= a\\n\\nq= a ... q= a<eos>", 1..4 examples per sequence, the sequence ending after each answer with
probability STOP (so after an answer <eos> has p=STOP, "\\n" p=1-STOP: no near-tie for greedy decoding).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import math
import os
import random
import shutil
import tempfile
import time

from .common import log, sha256_file

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from . import fixture_build, fixture_derive, loglik, text_fixture  # noqa: E402  (fixture_build: the mobius build and int4 recipe every fixture shares)
from .fixture_build import INT4, TOKENIZER_FILES, WEIGHTS_PACKAGE  # noqa: E402

NAME = "arith-tiny"
TASKS = {"arith": "arith", "control": "arith-control"}
SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]
PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3
CHARS = "0123456789+= \n"
VOCAB = len(SPECIAL_TOKENS) + len(CHARS)  # 18

TARGET_DELIMITER = " "
FEWSHOT_DELIMITER = "\n\n"
SHOTS = (0, 3)

# data
SPLIT_SEED = 1234
N_TEST = 300
N_FEWSHOT = 20
ITEM_SEED = 99
CONTROL_SEED = 7
NEAR_MISSES = (-11, -10, -2, -1, 1, 2, 10, 11)

# training
TRAIN = dict(seed=0, steps=400, batch=128, lr=3e-3, warmup=100, weight_decay=0.01, betas=(0.9, 0.98), clip=1.0,
             threads=1, max_examples=4, stop=0.7, long_fraction=0.5, attn="eager")

ONNX_DTYPES = {"default-f32": "f32", "default-f16": "f16"}
SIZE_BUDGET = 1_200_000


# --------------------------------------------------------------------------------------------
# tokenizer


def build_tokenizer(out_dir):
    from tokenizers import Tokenizer, decoders, models, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate([*SPECIAL_TOKENS, *CHARS])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.add_special_tokens(SPECIAL_TOKENS)
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", BOS_ID)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", unk_token="<unk>")
    os.makedirs(out_dir, exist_ok=True)
    fast.save_pretrained(out_dir)
    for f in os.listdir(out_dir):
        if f not in TOKENIZER_FILES:
            os.remove(os.path.join(out_dir, f))
    fixture_build.normalize_modes(out_dir)
    return check_tokenizer(out_dir)


def check_tokenizer(tok_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    assert len(tok) == VOCAB, len(tok)
    ids = tok("12+34= 46\n\n").input_ids
    want = [BOS_ID] + [len(SPECIAL_TOKENS) + CHARS.index(c) for c in "12+34= 46\n\n"]
    assert ids == want, (ids, want)
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (BOS_ID, EOS_ID, PAD_ID)
    assert tok.decode(ids, skip_special_tokens=True) == "12+34= 46\n\n"
    # tokenizer.json as the Rust `tokenizers` crate reads it (the Python package wraps the same code)
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    assert raw.encode("12+34= 46\n\n").ids == want
    assert raw.encode("12+34=", add_special_tokens=False).ids == want[1:7]
    assert raw.decode(want) == "12+34= 46\n\n"
    return tok


# --------------------------------------------------------------------------------------------
# data


def split():
    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    random.Random(SPLIT_SEED).shuffle(pairs)
    test, rest = pairs[:N_TEST], pairs[N_TEST:]
    return rest, rest[:N_FEWSHOT], test  # training pool (7800), few-shot items (from the pool), held-out test


def mcq(pairs, seed):
    """4 choices: the sum and 3 near misses (+-1, +-2, +-10, +-11), gold position uniform."""
    rng = random.Random(seed)
    items = []
    for a, b in pairs:
        s = a + b
        choices = [s] + [s + o for o in rng.sample(NEAR_MISSES, 3)]
        rng.shuffle(choices)
        items.append({"question": f"{a}+{b}=", "choices": [str(c) for c in choices],
                      "gold": choices.index(s), "answer": str(s)})
    return items


def control(pairs, seed):
    """Same questions; 4 distinct choices drawn uniformly from the sums' range (20..198) away from the sum
    (no value within 11 of it), and the gold index drawn uniformly: nothing in the item tells which."""
    rng = random.Random(seed)
    items = []
    for a, b in pairs:
        s = a + b
        choices = rng.sample([v for v in range(20, 199) if abs(v - s) > 11], 4)
        gold = rng.randrange(4)
        items.append({"question": f"{a}+{b}=", "choices": [str(c) for c in choices],
                      "gold": gold, "answer": str(choices[gold])})
    return items


def task_items():
    _, fewshot, test = split()
    return {
        "arith": {"train": mcq(fewshot, ITEM_SEED + 1), "test": mcq(test, ITEM_SEED)},
        "control": {"train": control(fewshot, CONTROL_SEED + 1), "test": control(test, CONTROL_SEED)},
    }


def write_jsonl(path, items):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        for it in items:
            fh.write(json.dumps(it) + "\n")
    os.chmod(path, 0o644)


def write_tasks(out_root, items):
    for key, name in TASKS.items():
        for split_name, its in items[key].items():
            write_jsonl(os.path.join(out_root, "tasks", name, f"{split_name}.jsonl"), its)


# --------------------------------------------------------------------------------------------
# model


def make_config():
    return transformers.Qwen3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=True,
        bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)


def encode_chars(text):
    return [len(SPECIAL_TOKENS) + CHARS.index(c) for c in text]


def training_sequence(rng, pool):
    """A training sequence and its labels (-100 = no loss).

    Two kinds, half each:
      A  <bos> q= a (\\n\\n q= a)* <eos>: after each answer the sequence ends with probability STOP (<eos>)
         or continues ("\\n\\n"), at most max_examples; this is what teaches what follows an answer.
      B  max_examples examples, the token after each answer is not trained: more few-shot positions for the
         sums without changing what A teaches about <eos>.
    Never trained: <bos> and the question digits (unpredictable)."""
    kind_b = rng.random() < TRAIN["long_fraction"]
    ids, labels = [BOS_ID], [-100]
    for n in range(1, TRAIN["max_examples"] + 1):
        a, b = pool[rng.randrange(len(pool))]
        for c in f"{a}+{b}=":
            ids.append(encode_chars(c)[0])
            labels.append(-100 if c.isdigit() else ids[-1])
        for c in f"{TARGET_DELIMITER}{a + b}":
            ids.append(encode_chars(c)[0])
            labels.append(ids[-1])
        last = n == TRAIN["max_examples"]
        if last or (not kind_b and rng.random() < TRAIN["stop"]):
            ids.append(EOS_ID)
            labels.append(-100 if kind_b else EOS_ID)
            return ids, labels
        for k, c in enumerate(FEWSHOT_DELIMITER):
            ids.append(encode_chars(c)[0])
            labels.append(-100 if kind_b and k == 0 else ids[-1])


def train(hf_dir, tok_dir):
    torch.set_num_threads(TRAIN["threads"])
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(TRAIN["seed"])
    cfg = make_config()
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=TRAIN["attn"]).float()
    pool, _, _ = split()
    rng = random.Random(TRAIN["seed"])
    opt = torch.optim.AdamW(model.parameters(), lr=TRAIN["lr"], betas=TRAIN["betas"],
                            weight_decay=TRAIN["weight_decay"])
    steps, warm = TRAIN["steps"], TRAIN["warmup"]
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    model.train()
    t0 = time.time()
    for step in range(steps):
        batch = [training_sequence(rng, pool) for _ in range(TRAIN["batch"])]
        L = max(len(i) for i, _ in batch)
        X = torch.tensor([i + [PAD_ID] * (L - len(i)) for i, _ in batch])
        Y = torch.tensor([y + [-100] * (L - len(y)) for _, y in batch])
        out = model(input_ids=X, labels=Y)  # right padding, causal: no mask needed
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), TRAIN["clip"])
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 50 == 0 or step == steps - 1:
            log(f"  step {step} loss {out.loss.item():.4f} t={time.time() - t0:.1f}s")
    train_s = time.time() - t0
    model.eval()
    # Save a config without the training-time attention choice: the reference loads the default.
    save = transformers.AutoModelForCausalLM.from_config(make_config()).float().eval()
    save.load_state_dict(model.state_dict())
    save.generation_config.eos_token_id = EOS_ID
    save.generation_config.bos_token_id = BOS_ID
    save.generation_config.pad_token_id = PAD_ID
    text_fixture.save_hf(save, "arith-tiny", hf_dir, tok_dir)
    return {"train_s": round(train_s, 1), "final_loss": round(out.loss.item(), 4)}


def weights_sha256(hf_dir):
    from safetensors.numpy import load_file

    sd = load_file(os.path.join(hf_dir, "model.safetensors"))
    h = hashlib.sha256()
    for k in sorted(sd):
        h.update(k.encode())
        h.update(np.ascontiguousarray(sd[k]).tobytes())
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# the derived hf/model.safetensors: the trained weights are committed once, in the f32 package

WEIGHTS = "hf/model.safetensors"
MANIFEST_KEY = f"{NAME}/{WEIGHTS}"  # fixtures/MANIFEST.json: sha256 and derived.files


def write_weights(pkg_dir, hf_dir, path):
    """The trained weights read back from the f32 package (weights.py, as every fixture's); returns their sha256."""
    from . import weights

    weights.write(pkg_dir, hf_dir, path)
    return sha256_file(path)


def recorded_sha256(out_root):
    sha = (fixture_derive.read_manifest(out_root) or {}).get("sha256", {}).get(MANIFEST_KEY)
    if not sha:
        raise SystemExit(f"{out_root}/MANIFEST.json records no sha256 for {MANIFEST_KEY}: run arith.py with the "
                         f"weights in place (or --retrain) to record it")
    return sha


def record_sha256(out_root, sha):
    """Record the weights' sha256 in MANIFEST.json (fixture_manifest.write_manifest keeps it) and list them as derived."""
    manifest = fixture_derive.read_manifest(out_root) or {}
    old = manifest.setdefault("sha256", {}).get(MANIFEST_KEY)
    if old == sha and MANIFEST_KEY in manifest.get("derived", {}).get("files", []):
        return
    if old and old != sha:
        log(f"  NOTE: {MANIFEST_KEY} changed (sha256 {old[:12]}.. -> {sha[:12]}..): regenerate the goldens and baselines")
    manifest["sha256"][MANIFEST_KEY] = sha
    files = manifest.setdefault("derived", {}).setdefault("files", [])
    if MANIFEST_KEY not in files:
        files.append(MANIFEST_KEY)
    with open(os.path.join(out_root, "MANIFEST.json"), "w") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
        fh.write("\n")
    log(f"  recorded {MANIFEST_KEY} sha256 {sha[:12]}.. in MANIFEST.json")


def derive_weights(out_root):
    """Rebuild the derived arith-tiny/hf/model.safetensors from the committed f32 package and check it
    against MANIFEST.json; only a matching file is put in place (fixtures.py --hf-only calls this)."""
    t0 = time.time()
    fix_dir = os.path.join(out_root, NAME)
    hf_dir, pkg = os.path.join(fix_dir, "hf"), os.path.join(fix_dir, WEIGHTS_PACKAGE)
    want = recorded_sha256(out_root)
    with tempfile.TemporaryDirectory(prefix="arith-weights-") as tmp:
        path = os.path.join(tmp, "model.safetensors")
        got = write_weights(pkg, hf_dir, path)
        if got != want:
            raise SystemExit(f"{MANIFEST_KEY} rebuilt from {pkg}: sha256 {got} != MANIFEST {want} (the package "
                             f"or the recorded hash changed without the other: rebuild with arith.py)")
        shutil.move(path, os.path.join(fix_dir, WEIGHTS))
    log(f"{NAME}: {WEIGHTS} rebuilt from {WEIGHTS_PACKAGE}, sha256 matches MANIFEST.json in {time.time() - t0:.1f}s")


def check_derivable(fix_dir):
    """The (re)built f32 package gives back hf/model.safetensors byte for byte."""
    with tempfile.TemporaryDirectory(prefix="arith-weights-") as tmp:
        got = write_weights(os.path.join(fix_dir, WEIGHTS_PACKAGE), os.path.join(fix_dir, "hf"),
                            os.path.join(tmp, "model.safetensors"))
    want = sha256_file(os.path.join(fix_dir, WEIGHTS))
    if got != want:
        raise SystemExit(f"{WEIGHTS_PACKAGE} does not give back {WEIGHTS} (sha256 {got} != {want}): "
                         f"derive_weights must learn mobius' new layout")
    log(f"  {WEIGHTS_PACKAGE} gives back {WEIGHTS} byte for byte")


# --------------------------------------------------------------------------------------------
# ONNX


def quantize_int4(src_dir, dst_dir):
    """fixture_build.quantize_int4 (the int4 recipe of every fixture: INT4, files PACKAGE_KEEP); returns the
    graph's op counts for RECIPE.json."""
    ops = fixture_build.quantize_int4(src_dir, dst_dir)
    log(f"  quantized int4: {ops}")
    return ops


def build_onnx(fix_dir):
    stage = os.path.join(fix_dir, ".stage-onnx")
    shutil.rmtree(stage, ignore_errors=True)
    os.makedirs(stage)
    shutil.copytree(os.path.join(fix_dir, "hf"), os.path.join(stage, "hf"))
    for flavour, dtype in ONNX_DTYPES.items():
        fixture_build.mobius_build(stage, "hf", f"onnx/{flavour}", "default", dtype=dtype)
    ops = quantize_int4(os.path.join(stage, "onnx", "default-f32"), os.path.join(stage, "onnx", "default-int4"))
    final = os.path.join(fix_dir, "onnx")
    shutil.rmtree(final, ignore_errors=True)
    os.rename(os.path.join(stage, "onnx"), final)
    shutil.rmtree(stage)
    return ops


# --------------------------------------------------------------------------------------------
# evaluation (lm-eval 0.4 multiple_choice semantics)


def fewshot_prefix(train_items, n):
    shots = train_items[:n]  # sampler first_n
    return "".join(it["question"] + TARGET_DELIMITER + it["choices"][it["gold"]] + FEWSHOT_DELIMITER for it in shots)


def build_requests(tok, items, prefix):
    """lm-eval's HFLM._encode_pair: context ids = encode(context) (tokenizer default: <bos> prepended),
    continuation ids = encode(context + continuation)[len(context ids):]. -> (requests, boundary mismatches)"""
    reqs, mismatches = [], 0
    for it in items:
        ctx = prefix + it["question"]
        c = tok(ctx).input_ids
        for ch in it["choices"]:
            whole = tok(ctx + TARGET_DELIMITER + ch).input_ids
            if whole[:len(c)] != c:
                mismatches += 1
            reqs.append({"context": c, "continuation": whole[len(c):]})
    return reqs, mismatches


def scores(items, ll):
    """acc / acc_norm as lm-eval's multiple_choice process_results (norm by len(choice string))."""
    ll = np.asarray(ll, np.float64).reshape(len(items), 4)
    gold = np.array([it["gold"] for it in items])
    lens = np.array([[float(len(c)) for c in it["choices"]] for it in items])
    pred, pred_norm = ll.argmax(1), (ll / lens).argmax(1)
    srt = np.sort(ll, 1)
    return {"acc": float((pred == gold).mean()), "acc_norm": float((pred_norm == gold).mean()),
            "pred": pred, "pred_norm": pred_norm, "margin": srt[:, -1] - srt[:, -2]}


def evaluate(fix_dir, items, tok):
    loglik.setup_torch()
    model = loglik.load_model(os.path.join(fix_dir, "hf"))
    # The reference only: the packages are the suite's to judge (its accuracy gate runs them through the runner).
    variants = ["hf"]
    table, flips, boundary = {}, {}, {}
    lls = {}
    t0 = time.time()
    for key, name in TASKS.items():
        for shots in SHOTS:
            cell = f"{name}/{shots}-shot"
            prefix = fewshot_prefix(items[key]["train"], shots)
            test = items[key]["test"]
            reqs, mism = build_requests(tok, test, prefix)
            boundary[cell] = {"requests": len(reqs), "mismatches": mism}
            res = {}
            for v in variants:
                ll, _, _ = loglik.loglikelihood(model, reqs)
                lls[(cell, v)] = ll
                res[v] = scores(test, ll)
            table[cell] = {v: {"acc": r["acc"], "acc_norm": r["acc_norm"]} for v, r in res.items()}
            base = res["hf"]
            table[cell]["hf"]["min_top2_margin"] = round(float(base["margin"].min()), 5)
            table[cell]["hf"]["items_margin_lt_0.1"] = int((base["margin"] < 0.1).sum())
            for v in variants[1:]:
                d = np.abs(lls[(cell, v)].astype(np.float64) - lls[(cell, "hf")].astype(np.float64))
                flips[f"{cell}/{v}"] = {
                    "acc": [int(i) for i in np.nonzero(res[v]["pred"] != base["pred"])[0]],
                    "acc_norm": [int(i) for i in np.nonzero(res[v]["pred_norm"] != base["pred_norm"])[0]],
                    "max_abs_dloglik": float(d.max())}
            log(f"  {cell}: " + ", ".join(f"{v} {r['acc']:.3f}/{r['acc_norm']:.3f}" for v, r in res.items())
                + f"  (boundary mismatches {mism})")
    log(f"  eval in {time.time() - t0:.1f}s")
    return {"table": table, "flips_vs_hf": flips, "boundary": boundary}


def generation_check(fix_dir, tok):
    """Greedy from '<bos>12+34=' style prompts (test questions): answer then <eos>?"""
    model = loglik.load_model(os.path.join(fix_dir, "hf"))
    _, _, test = split()
    gens = [{"ids": tok(f"{a}+{b}=").input_ids, "max_new_tokens": 8} for a, b in test[:20]]
    out, lens = loglik.generate(model, gens, [EOS_ID])
    ok = sum(tok.decode(out[i, :lens[i]].tolist(), skip_special_tokens=True) == f" {a + b}"
             and out[i, lens[i] - 1] == EOS_ID for i, (a, b) in enumerate(test[:20]))
    return {"prompts": len(gens), "answer_then_eos": int(ok),
            "example": {"prompt": f"{test[0][0]}+{test[0][1]}=", "ids": gens[0]["ids"],
                        "generated": out[0, :lens[0]].tolist()}}


# --------------------------------------------------------------------------------------------


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(p, f)) for p, _, fs in os.walk(d) for f in fs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="fixtures directory")
    ap.add_argument("--retrain", action="store_true", help="train the model again (replaces arith-tiny/hf)")
    ap.add_argument("--no-eval", action="store_true", help="skip the accuracy measurements (RECIPE.json keeps none)")
    ap.add_argument("--derive-only", action="store_true",
                    help=f"only rebuild the derived {WEIGHTS} from {WEIGHTS_PACKAGE} and check it against MANIFEST.json")
    args = ap.parse_args(argv)
    out = os.path.abspath(args.out)
    if args.derive_only:
        derive_weights(out)
        return
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    fix_dir = os.path.join(out, NAME)
    hf_dir = os.path.join(fix_dir, "hf")
    weights = os.path.join(fix_dir, WEIGHTS)
    t0 = time.time()
    recipe_path = os.path.join(fix_dir, "RECIPE.json")
    old = json.load(open(recipe_path)) if os.path.exists(recipe_path) else {}
    with tempfile.TemporaryDirectory(prefix="arith-tok-") as tok_dir:
        tok = build_tokenizer(tok_dir)
        committed = os.path.isfile(os.path.join(fix_dir, WEIGHTS_PACKAGE, "model.onnx"))
        if args.retrain or not (committed or os.path.isfile(weights)):
            log(f"{NAME}: training ({TRAIN['steps']} steps, {TRAIN['threads']} thread)")
            shutil.rmtree(hf_dir, ignore_errors=True)
            training = train(hf_dir, tok_dir)
            record_sha256(out, sha256_file(weights))
        else:
            if not os.path.isfile(weights):
                derive_weights(out)
            elif sha256_file(weights) != recorded_sha256(out):
                raise SystemExit(f"{weights} is not the weights MANIFEST.json records (a stale derived copy?): "
                                 f"delete it to rebuild it from {WEIGHTS_PACKAGE}, or --retrain")
            log(f"{NAME}: keeping the committed weights ({WEIGHTS_PACKAGE}, derived {weights})")
            for f in TOKENIZER_FILES:
                if open(os.path.join(tok_dir, f), "rb").read() != open(os.path.join(hf_dir, f), "rb").read():
                    raise SystemExit(f"{hf_dir}/{f} differs from a fresh tokenizer build")
            training = old.get("training_result", {})
    training["weights_sha256"] = weights_sha256(hf_dir)
    items = task_items()
    write_tasks(out, items)
    ops = build_onnx(fix_dir)
    check_derivable(fix_dir)
    sizes = {d: dir_bytes(os.path.join(fix_dir, d)) for d in ["hf", *(f"onnx/{v}" for v in
                                                                      sorted(os.listdir(os.path.join(fix_dir, "onnx"))))]}
    recipe = {
        "generator": "xtask/reference/arith.py",
        "packages": {p: importlib.metadata.version(p)
                     for p in ("torch", "transformers", "tokenizers", "mobius-onnx", "onnx", "onnxruntime")},
        "tokenizer": {"kind": "character level (BPE, no merges)", "vocab": [*SPECIAL_TOKENS, *CHARS],
                      "bos_id": BOS_ID, "eos_id": EOS_ID, "pad_id": PAD_ID, "unk_id": UNK_ID,
                      "post_processor": "<bos> $A"},
        "model": make_config().to_diff_dict() | {"model_type": "qwen3"},
        "training": {**TRAIN, "betas": list(TRAIN["betas"]),
                     "text": "<bos>q= a(\\n\\nq= a)*<eos>, a,b in 10..99 minus the 300 test pairs; loss on all but "
                             "<bos> and question digits; examples per sequence: stop after each answer with p=stop, "
                             "at most max_examples"},
        "training_result": training,
        "int4": {**INT4, "ops": ops},
        "prompt": {"doc_to_text": "question", "target_delimiter": TARGET_DELIMITER,
                   "fewshot_delimiter": FEWSHOT_DELIMITER, "fewshot_sampler": "first_n", "fewshot_split": "train"},
        "data": {"split_seed": SPLIT_SEED, "n_test": N_TEST, "n_fewshot": N_FEWSHOT, "item_seed": ITEM_SEED,
                 "control_seed": CONTROL_SEED, "near_misses": list(NEAR_MISSES)},
        "bytes": sizes | {"total": sum(sizes.values())},
    }
    if not args.no_eval:
        tok = check_tokenizer(hf_dir)
        recipe["eval"] = evaluate(fix_dir, items, tok)
        recipe["generation"] = generation_check(fix_dir, tok)
        log(f"  generation: {recipe['generation']}")
    with open(recipe_path, "w") as fh:
        json.dump(recipe, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.chmod(recipe_path, 0o644)
    total = dir_bytes(fix_dir)
    log(f"{NAME}: {total} bytes {sizes}; done in {time.time() - t0:.1f}s")
    if total > SIZE_BUDGET:
        log(f"WARNING: {fix_dir} is {total} bytes > {SIZE_BUDGET}")


if __name__ == "__main__":
    main()
