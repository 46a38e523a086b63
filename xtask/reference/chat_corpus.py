"""The chat-template corpus as transformers renders it: every tokenizer x conversation of `fixtures/chat/corpus.json`,
through `tokenizer.apply_chat_template(..., tokenize=False)`, written to `tests/data/chat/corpus.json`, which the suite's
renderer (`suite/src/feed/chat_template.rs`) must give byte for byte (`suite/tests/chat_template.rs`).

    python -m reference.chat_corpus [ROOT]      (run by `cargo xtask reference-data --only chat-templates`, in the root)

corpus.json: {"now": [Y, M, D, h, m, s] (the clock strftime_now reads), "tokenizers": [{"name", "tokenizer": a
tokenizer folder relative to ROOT, "template": a .jinja file passed as `chat_template=` (optional), "suite_refuses":
the construct the suite refuses to render (optional)}], "conversations": [{"name", "messages",
"add_generation_prompt", "continue_final_message", "extra": more template variables (optional)}]}.

Each result: {"tokenizer", "conversation", and "rendered": the text, or "error": "template" (a
jinja2.exceptions.TemplateError: lm-eval retries without the system message), "refused" (transformers' ValueError),
"python" (another exception the template raised, e.g. TypeError), with "message"}. A tokenizer folder that is not
there (the real tier not built) is an error: the corpus covers every tokenizer it names.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import sys

from . import common  # noqa: F401  (the environment preamble)
from .common import ReferenceError

import jinja2  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from transformers.utils import chat_template_utils  # noqa: E402


def frozen_clock(now):
    """transformers' `strftime_now` reads `datetime.now()` from chat_template_utils' globals: a fixed clock there."""

    class Frozen(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(*now)

    chat_template_utils.datetime = Frozen


def render(tok, template, conv):
    kwargs = dict(tokenize=False, add_generation_prompt=conv["add_generation_prompt"],
                  continue_final_message=conv["continue_final_message"], **conv.get("extra", {}))
    if template is not None:
        kwargs["chat_template"] = template
    try:
        return {"rendered": tok.apply_chat_template(conv["messages"], **kwargs)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": "template", "message": f"{type(e).__name__}: {e}"}
    except ValueError as e:
        return {"error": "refused", "message": str(e)}
    except Exception as e:  # noqa: BLE001  (the template's own Python error: recorded, as lm-eval would see it raised)
        return {"error": "python", "message": f"{type(e).__name__}: {e}"}


def main(argv):
    if len(argv) > 1:
        raise SystemExit("usage: python -m reference.chat_corpus [ROOT]")
    root = argv[0] if argv else os.getcwd()
    spec = json.load(open(os.path.join(root, "fixtures/chat/corpus.json"), encoding="utf-8"))
    frozen_clock(spec["now"])
    out = []
    for t in spec["tokenizers"]:
        folder = os.path.join(root, t["tokenizer"])
        if not os.path.isdir(folder):
            raise ReferenceError(f"fixtures/chat/corpus.json: tokenizer {t['name']!r}: {t['tokenizer']} is not a folder "
                                 "(the real tier's: cargo xtask real)")
        tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        template = None
        if t.get("template"):
            with open(os.path.join(root, t["template"]), encoding="utf-8") as fh:
                template = fh.read()
        for conv in spec["conversations"]:
            out.append({"tokenizer": t["name"], "conversation": conv["name"], **render(tok, template, conv)})
    dest = os.path.join(root, "tests/data/chat/corpus.json")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    body = {"transformers": transformers.__version__, "jinja2": jinja2.__version__, "results": out}
    tmp = dest + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(body, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    os.replace(tmp, dest)
    errors = sum("error" in r for r in out)
    print(f"{len(out)} renderings ({len(spec['tokenizers'])} tokenizers x {len(spec['conversations'])} conversations, "
          f"{errors} errors) -> tests/data/chat/corpus.json", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
