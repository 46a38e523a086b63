"""What lm-evaluation-harness itself does in the corners the gate must agree with it on; writes the answers for
the suite's tests (tests/data/lmeval/corners.json). Run once, offline, from the repository root:

    cargo xtask reference-data --only lmeval-corners
    (python -m reference.lmeval.corners [--limit 12] [--out tests/data/lmeval/corners.json] [--crafted-only])

Needs the reference venv (lm-eval 0.4.13) and fixtures/arith-tiny/hf/model.safetensors (derived first by the task). Each task of tests/data/lmeval/tasks runs through `lm_eval.simple_evaluate` on the `hf` model with
--log_samples; per document the JSON keeps lm-eval's context and continuations, the token ids its own
`_encode_pair` / `tok_encode` give them, its log-likelihoods, raw and filtered generations and per-item metrics.
It also records Python's `str.isspace` set (what `str.rstrip` and `str.strip` remove).

Without a model it also writes tests/data/lmeval/corners-crafted.json (`--crafted-only` writes only that): lm-eval's
own `regex` filter (`lm_eval.filters.extraction.RegexFilter`) on crafted (pattern, text) pairs, the code points each
single-character pattern of Python's `re` matches (as ranges), and the index `acc_norm` chooses (its multiple_choice
`process_results`, asked once per possible gold) on crafted log-likelihoods with empty choices. From the same sweeps
it writes the suite's class tables, suite/src/accuracy/lmeval/python_re/tables.rs.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import sys
import types
import unicodedata

from .. import common  # noqa: F401  (the environment preamble, before torch)

import lm_eval  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def collect(lm, samples, output_type):
    docs = []
    for s in sorted(samples, key=lambda s: s["doc_id"]):
        args = list(s["arguments"])  # in memory: one (context, continuation or gen_kwargs) tuple per request
        ctx = args[0][0]
        d = {"doc_id": s["doc_id"], "context": ctx, "target": s["target"]}
        if output_type == "multiple_choice":
            conts = [a[1] for a in args]
            d["continuations"] = conts
            pairs = [lm._encode_pair(ctx, c) for c in conts]
            d["context_ids"] = pairs[0][0]
            d["continuation_ids"] = [p[1] for p in pairs]
            d["logliks"] = [float(r[0][0]) for r in s["resps"]]
            d["acc"] = s.get("acc")
            d["acc_norm"] = s.get("acc_norm")
        else:
            d["context_ids"] = lm.tok_encode(ctx)
            d["generation"] = s["resps"][0][0]
            d["filtered"] = s["filtered_resps"][0]
            d["exact_match"] = s.get("exact_match")
        docs.append(d)
    return docs


# Every code point Python's str.isspace accepts, in the text of a pair: Python's `\s` is this set.
PY_SPACES = [c for c in range(0x110000) if chr(c).isspace()]

# Single-character patterns whose whole match set the suite's translation must reproduce, code point by code point.
SWEEPS = [r"\s", r"\S", r"\d", r"\D", r"\w", r"\W", r".", r"(?s).", r"[\s\d]", r"[^\s\d]", r"[\w\-]", r"[^\W_]",
          r"(?i)i", r"(?i)k", r"(?i)s", r"(?i)K", r"(?i)a", r"(?i)[a-z]", r"(?i)[^a-z]", r"(?i)[h-l]", r"(?i)[k\w]",
          r"(?i)[i\d]", r"(?i)[^s\s]", r"(?i)[a-c\u3002]", r"(?i)\w", r"(?i)\W", r"(?i)\d", r"(?i)\s"]

# (pattern, text) pairs through lm-eval's regex filter. Every whitespace code point of Python follows and precedes
# a word in `(\S+)`; then digits, letters with combining marks, case-insensitivity, anchors and escapes.
PAIRS = [(r"(\S+)", "8\u001dse\u001d\u0010e")] + [(r"(\S+)", f"ab{chr(c)}cd") for c in PY_SPACES] + [
    (r"\s(\S+)\s", f"x{chr(a)}mid{chr(b)}y") for a, b in [(0x1c, 0x1f), (0x85, 0xa0), (0x2028, 0x3000), (0x180e, 0x200b)]
] + [
    (r"(\d+)", "total: \u0661\u0662\u0663 items"),            # Arabic-Indic digits
    (r"(\d+)", "\uff14\uff12 fullwidth"),                       # fullwidth digits
    (r"(\d+)", "devanagari \u0967\u0968 and 7"),
    (r"(\d+)", "superscript \u00b2\u00b3 then 5"),               # No, not decimal
    (r"(\d+)", "roman \u2167 and 9"),                            # Nl, not decimal
    (r"(\d+)", "kawi \U00011f50\U00011f51 then 4"),             # Nd only after Unicode 14
    (r"(\D+)", "\u0661x\u00b2y3"),
    (r"(\w+)", "cafe\u0301 au lait"),                            # e + combining acute: not \w in Python
    (r"(\w+)", "\u00e9t\u00e9 ok"),                              # precomposed
    (r"(\w+)", "\u0915\u093f\u0924\u093e\u092c"),               # Devanagari vowel signs (Mc)
    (r"(\w+)", "a\u203fb c"),                                    # undertie, Pc
    (r"(\w+)", "\u00bd half"),                                   # No: numeric, so \w in Python
    (r"(\w+)", "\u24b6\u24b7 circled"),                         # So, alphabetic in Unicode but not \w in Python
    (r"(\w+)", "x\u200dy zwj"),                                  # join control
    (r"(\W+)", "ab\u0301\u00bd!c"),
    (r"([\w']+)", "don't stop"),
    (r"([^\s\d]+)", "12ab\u001ccd"),
    (r"(?i)(yes|no)", "The answer: YES."),
    (r"(?i)answer is (\w+)", "ANSWER IS Kelvin"),
    (r"(?i)(k+)", "\u212a\u212ak"),                              # Kelvin sign folds to k in both
    (r"(?i)(i+)", "\u0130\u0131iI"),                             # dotted and dotless I: Python only
    (r"(?i)(s+)", "\u017fS"),                                     # long s
    (r"(?i)([a-z]+)", "\u0130stanbul"),
    (r"(?i)([^a-z]+)", "ab\u0131c12"),
    (r"(?i:ab)(c)", "ABc ABC"),
    (r"(?i)the answer is \(([a-e])\)", "The Answer Is (C)."),
    (r"(.*)$", "line one\n"),
    (r"(\w+)$", "end\n"),
    (r"^\s*([A-D])", "\u3000 B) text"),
    (r"(?m)^(\w+)$", "a b\nsecond\nthird"),
    (r"(.+)", "a\u2028b"),                                        # `.` stops at \n only
    (r"(.+)", "ab\ncd"),
    (r"(?s)(.+)", "ab\ncd"),
    (r"\A(\w)", "xyz"),
    (r"(\w)\Z", "xyz"),
    (r"(-?[$0-9.,]{2,})|(-?[0-9]+)", "It costs $1,234.50 total"),
    (r"#### (\-?[0-9\.\,]+)", "so #### -12.5"),
    (r"The answer is (\-?[0-9\.\,]*[0-9]+)", "The answer is \u0663\u0664 or 34"),
    (r"(\([A-Z]\))", "pick (B) now"),
    (r"([-0-9]+)", "x -12"),
    (r"\d+ ", " 12 3"),
    (r"(x)?(\d+)", " 12"),
    (r"(\d+)", " none"),
    (r"(a)|(b)", "b"),
    (r"(a)?(b)?", "c"),
    (r"[[]x]", "a[x]"),                                           # `[` inside a class is a character in Python
    (r"([a&&b]+)", "x&&ab"),
    (r"([a-c--b]+)", "x-a--c"),
    (r"([\x41-\x43]+)", "zABCD"),
    (r"(\u00e9+)", "\u00e9\u00e9e"),
    (r"(\U0001f600)", "smile \U0001f600"),
    (r"(\0)", "nul\x00"),
    (r"(\t)x", "a\tx"),
    (r"([\b]+)", "a\x08\x08b"),
    (r"(a{,2})", "aaa"),
    (r"(a{2})", "aaa"),
    (r"(a{)", "a{"),
    (r"(x{1,2)", "x{1,2"),
    (r"(a+?)", "aaa"),
    (r"(?:x(y))+", "xyxy"),
    (r"(?P<n>\d)", "n5"),
    (r"(a(?#comment)b)", "ab"),
    (r"([\]a]+)", "x]a]"),
    (r"([^\]]+)", "]]ab]"),
    (r"(\.)", "a.b"),
    (r"(\s*)", "  x"),
    (r"(\w+)", "under_score"),
    (r"(\w+)", "\u4e00\u4e8c\u4e09 han"),
    (r"(\W)", "\u02b0x"),                                        # Lm: a letter in Python
]


def ranges(codes):
    """Sorted code points as inclusive [first, last] runs."""
    out = []
    for c in codes:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def sweep(pattern):
    rx = re.compile(pattern)
    return ranges([c for c in range(0x110000) if not 0xD800 <= c < 0xE000 and rx.fullmatch(chr(c))])


class _McTask:
    """The attributes ConfigurableTask.process_results reads for a plain multiple_choice task with acc and
    acc_norm: its own method runs on this."""
    OUTPUT_TYPE = "multiple_choice"
    multiple_input = False
    multiple_target = False

    def __init__(self):
        self.config = types.SimpleNamespace(process_results=None)
        self._metric_fn_list = {"acc": None, "acc_norm": None}

    def doc_to_choice(self, doc):
        return doc["choices"]

    def doc_to_target(self, doc):
        return doc["gold"]


NAN, INF = float("nan"), float("inf")

# (choices, log-likelihoods): empty choices with negative, zero, NaN and -inf log-likelihoods, several of them,
# ties, a positive log-likelihood (x / 0 = inf), lengths in code points, not bytes.
MC_ITEMS = [
    (["", "ab"], [-0.1, -1.0]),
    (["", "ab"], [0.0, -1.0]),
    (["", "ab"], [-0.0, -1.0]),
    (["", "ab"], [NAN, -1.0]),
    (["ab", ""], [-1.0, NAN]),
    (["ab", ""], [-1.0, 0.0]),
    (["", ""], [-1.0, -2.0]),
    (["", ""], [-2.0, -1.0]),
    (["", ""], [0.0, 0.0]),
    (["", "", ""], [-3.0, 0.0, NAN]),
    (["", "a", ""], [-1.0, -5.0, 0.0]),
    (["a", "", "bb", ""], [-2.0, -0.5, -4.0, -0.25]),
    (["", "x"], [0.5, -1.0]),
    (["x", ""], [NAN, 0.5]),
    (["x", "", "y"], [-1.0, 0.5, INF]),
    (["x", "y"], [-INF, -INF]),
    (["", "x"], [-INF, -INF]),
    (["x", "yy"], [-1.0, -2.0]),
    (["xx", "y"], [-2.0, -1.0]),
    (["x", "y", "z"], [-1.0, -1.0, -1.0]),
    (["", "x", "y"], [-1.0, NAN, NAN]),
    (["\u00e9\u00e9", "ab", ""], [-2.0, -2.0, -3.0]),
    (["\u4e00", "ab"], [-1.0, -1.5]),
    ([" ", "a"], [-0.1, -0.2]),
    (["", " "], [-0.1, -0.2]),
    (["184", "", "182", "173", "194"], [-1.2, -0.8, -2.5, -3.1, -1.9]),
    (["109", "108", "", "107", "98"], [-0.9, -0.4, 0.0, -2.2, -3.3]),
    (["", "123", "112", "113", "115"], [-7.0, -0.3, -0.6, -0.3, -0.9]),
    (["157", "", "160", "159", "169"], [-0.6, NAN, -0.2, -0.1, -0.4]),
    (["103", "104", "", "116", "105"], [-1.5, -1.5, -0.0001, -1.5, -1.5]),
    (["", "", "81", "93", ""], [-1e-30, -1e30, -2.0, -1.0, -5e-324]),
    (["85", "", "76", "87", "98"], [-3e-8, -3e-8, -3e-8, -3e-8, -3e-8]),
]


def chosen_norm(task, choices, lls):
    """The index acc_norm chooses, read back from lm-eval's own verdict: the gold it calls right."""
    results = [(ll, False) for ll in lls]
    hits = [g for g in range(len(choices))
            if task.process_results({"choices": choices, "gold": g}, results)["acc_norm"] == 1.0]
    assert len(hits) == 1, (choices, lls, hits)
    acc = [g for g in range(len(choices)) if task.process_results({"choices": choices, "gold": g}, results)["acc"] == 1.0]
    return hits[0], acc[0]


def as_json_float(x):
    return "nan" if math.isnan(x) else ("inf" if x == INF else ("-inf" if x == -INF else x))


def crafted():
    """What lm-eval's regex filter and multiple_choice scoring give on crafted inputs."""
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.filters.extraction import RegexFilter

    pairs = []
    for pattern, text in PAIRS:
        out = RegexFilter(regex_pattern=pattern).apply([[text]], [None])[0][0]
        pairs.append({"pattern": pattern, "text": text, "filtered": out})
    task = _McTask()
    items = []
    with np.errstate(divide="ignore", invalid="ignore"):
        for choices, lls in MC_ITEMS:
            norm, acc = chosen_norm(types.SimpleNamespace(
                process_results=lambda doc, res: ConfigurableTask.process_results(task, doc, res)), choices, lls)
            items.append({"choices": choices, "logliks": [as_json_float(x) for x in lls], "acc": acc, "acc_norm": norm})
    return {"generator": "xtask/reference/lmeval/corners.py", "lm_eval": lm_eval.__version__,
            "python": sys.version.split()[0], "unicode": unicodedata.unidata_version,
            "regex_pairs": pairs, "sweeps": {p: sweep(p) for p in SWEEPS}, "acc_norm_items": items}


def write_tables(sweeps, path):
    """The suite's Python class tables, from the sweeps of `\\s`, `\\d` and `\\w`."""
    def table(name, doc, runs):
        rows = [f"    ({a:#x}, {b:#x})," for a, b in runs]
        return f"/// {doc}\npub const {name}: &[(u32, u32)] = &[\n" + "\n".join(rows) + "\n];\n"
    text = (f"//! Python {sys.version.split()[0]}'s `re` classes for str patterns (Unicode {unicodedata.unidata_version}),"
            " as inclusive code point runs.\n//! Generated by xtask/reference/lmeval/corners.py from its sweeps"
            " (tests/data/lmeval/corners-crafted.json); do not edit.\n\n"
            + table("SPACE", "`\\s`: `str.isspace`.", sweeps[r"\s"]) + "\n"
            + table("DIGIT", "`\\d`: `str.isdecimal` (general category Nd).", sweeps[r"\d"]) + "\n"
            + table("WORD", "`\\w`: `str.isalnum` (categories L and N) and `_`.", sweeps[r"\w"]))
    with open(path, "w") as fh:
        fh.write(text)


def write_crafted(out, tables):
    data = crafted()
    one = lambda v: json.dumps(v, ensure_ascii=True)  # noqa: E731  (one line per pair, sweep and item)
    parts = []
    for key, value in data.items():
        if isinstance(value, list):
            body = "[\n" + ",\n".join("  " + one(v) for v in value) + "\n ]"
        elif isinstance(value, dict):
            body = "{\n" + ",\n".join(f"  {one(k)}: {one(v)}" for k, v in value.items()) + "\n }"
        else:
            body = one(value)
        parts.append(f" {one(key)}: {body}")
    with open(out, "w") as fh:
        fh.write("{\n" + ",\n".join(parts) + "\n}\n")
    write_tables(data["sweeps"], tables)
    print(f"{out}: {len(data['regex_pairs'])} regex pairs, {len(data['sweeps'])} sweeps, "
          f"{len(data['acc_norm_items'])} acc_norm items", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=12)
    ap.add_argument("--model", default="fixtures/arith-tiny/hf")
    ap.add_argument("--tasks", default="tests/data/lmeval/tasks")
    ap.add_argument("--out", default="tests/data/lmeval/corners.json")
    ap.add_argument("--crafted-out", default="tests/data/lmeval/corners-crafted.json")
    ap.add_argument("--tables-out", default="suite/src/accuracy/lmeval/python_re/tables.rs")
    ap.add_argument("--crafted-only", action="store_true", help="only the model-free part")
    args = ap.parse_args()
    write_crafted(args.crafted_out, args.tables_out)
    if args.crafted_only:
        return
    torch.set_num_threads(1)
    lm = HFLM(pretrained=args.model, dtype="float32", device="cpu", batch_size=1)
    tm = TaskManager(include_path=os.path.abspath(args.tasks))
    out = {"generator": "xtask/reference/lmeval/corners.py", "lm_eval": lm_eval.__version__,
           "model": args.model, "limit": args.limit,
           "python_whitespace": [c for c in range(0x110000) if chr(c).isspace()],
           "prefix_token": lm.tokenizer.decode(lm.prefix_token_id), "tasks": {}}
    for path in sorted(glob.glob(os.path.join(args.tasks, "*.yaml"))):
        name = os.path.splitext(os.path.basename(path))[0]
        import yaml
        cfg = yaml.safe_load(open(path))
        res = lm_eval.simple_evaluate(model=lm, tasks=[cfg["task"]], task_manager=tm, limit=args.limit,
                                      log_samples=True, random_seed=0, numpy_random_seed=0, torch_random_seed=0,
                                      fewshot_random_seed=0)
        task = cfg["task"]
        results = {k.split(",")[0]: v for k, v in res["results"][task].items() if not k.endswith("stderr") and "," in k}
        out["tasks"][name] = {"task": task, "file": os.path.relpath(path), "results": results,
                              "docs": collect(lm, res["samples"][task], cfg["output_type"])}
        print(name, results, file=sys.stderr, flush=True)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1, ensure_ascii=True)
        fh.write("\n")


if __name__ == "__main__":
    main()
