"""lmms-eval's own task files and small vision datasets in their real schemas, for the suite's lmms tests (writes
under tests/data/lmms/). Run once, offline, from the repository root:

    python -m reference.lmms_data [--wheel lmms_eval-0.7.3-py3-none-any.whl] [--processor fixtures/gemma4-mm-tiny/hf]

Task files: with `--wheel` (from `pip download lmms-eval==0.7.3 --no-deps`), the listed files are copied byte for
byte out of the wheel into tests/data/lmms/lmms_eval_tasks/<folder>/ and tests/data/lmms/taskfiles.json records each
one's path in the wheel and its sha256, with the wheel's own. Without it, the committed copies are checked against
that record. The tasks' utils.py are not copied: the suite implements what they do.

Datasets: every image is drawn here with PIL (fixed sizes, Pillow's bundled font, no randomness) and stored as PNG
bytes in the `datasets` `Image` feature (struct<bytes, path>), one Parquet file per split, laid out as the dataset's
repository sits in the Hugging Face hub cache: tests/data/lmms/hub/datasets--<org>--<name>/snapshots/fixture/. The
columns are the ones lmms-eval's upload scripts (upload_ocrbench.py, upload_chartqa.py) and the hub datasets
declare; the tasks' utils.py read `image`, `question`, `answer(s)`, `dataset`, `question_type`, `type`.

tests/data/lmms/datasets.json lists each split's file, schema and items, and what the fixture's Gemma-4 processor
makes of each image (soft tokens, tensor shapes and bytes), so a change of drawing or processor shows in `git diff`.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import zipfile

from . import common  # noqa: F401  (the environment preamble, before torch)

import datasets  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from PIL import Image, ImageDraw, ImageFont  # noqa: E402

OUT = "tests/data/lmms"
LMMS_EVAL = "0.7.3"
# (folder, file): the task files the suite reads, as lmms-eval ships them (lmms_eval/tasks/<folder>/<file>).
TASK_FILES = [
    ("ocrbench", "ocrbench.yaml"),
    ("docvqa", "docvqa_val.yaml"),
    ("docvqa", "_default_template_docvqa_yaml"),
    ("chartqa", "chartqa.yaml"),
    ("librispeech", "librispeech_test_clean.yaml"),  # includes nothing
]

IMAGE = datasets.Image()
STRINGS = datasets.Sequence(datasets.Value("string"))
S = datasets.Value("string")


def font(size):
    """Pillow's bundled font (Aileron) at `size` pixels: the same glyphs on every machine with this Pillow."""
    return ImageFont.load_default(size=size)


def png(im):
    buf = io.BytesIO()
    im.save(buf, format="PNG", optimize=False, compress_level=9)
    return buf.getvalue()


def canvas(w, h):
    im = Image.new("RGB", (w, h), "white")
    return im, ImageDraw.Draw(im)


def centered(d, box, text, f, fill="black"):
    x0, y0, x1, y1 = box
    l, t, r, b = d.textbbox((0, 0), text, font=f)
    d.text((x0 + (x1 - x0 - (r - l)) // 2 - l, y0 + (y1 - y0 - (b - t)) // 2 - t), text, font=f, fill=fill)


# --- OCRBench ---------------------------------------------------------------------------------------------------

def word_image(word="HARBOR"):
    im, d = canvas(160, 96)
    d.rectangle((6, 20, 153, 75), outline=(40, 40, 40), width=2)
    centered(d, (6, 20, 153, 75), word, font(30))
    return im


def sign_image():
    """A street sign with a route number: a scene-text question's answer is the number on it."""
    im, d = canvas(160, 96)
    d.rectangle((0, 70, 159, 95), fill=(120, 120, 120))
    d.rounded_rectangle((30, 8, 130, 62), radius=8, fill=(20, 90, 40), outline="white", width=3)
    centered(d, (30, 8, 130, 30), "ROUTE", font(14), fill="white")
    centered(d, (30, 28, 130, 62), "42", font(26), fill="white")
    return im


def formula_image():
    """x^2+3x as typeset text: the exponent smaller and raised."""
    im, d = canvas(160, 96)
    big, small = font(32), font(18)
    x = 22
    d.text((x, 30), "x", font=big, fill="black")
    x += int(d.textlength("x", font=big)) + 1
    d.text((x, 22), "2", font=small, fill="black")
    x += int(d.textlength("2", font=small)) + 4
    d.text((x, 30), "+3x", font=big, fill="black")
    return im


def ocrbench():
    rows = [
        {"dataset": "IIIT5K", "question": "what is written in the image?", "question_type": "Regular Text Recognition",
         "answer": ["HARBOR"], "image": word_image()},
        {"dataset": "textVQA", "question": "what is the route number on the sign?",
         "question_type": "Scene Text-centric VQA", "answer": ["42", "route 42"], "image": sign_image()},
        {"dataset": "HME100k",
         "question": "Please write out the expression of the formula in the image using LaTeX format.",
         "question_type": "Handwritten Mathematical Expression Recognition", "answer": ["x ^ { 2 } + 3 x"],
         "image": formula_image()},
        # The stop-string trap's item (tests/data/lmms/stop_trap/ocrbench_stop_trap.yaml): the fixture's greedy
        # stream (random weights: the same text for every prompt) holds "that" only after its first double space,
        # the stop that task file sets, so that stop cuts the answer off as "\n\n" cut Gemma-4's second paragraph.
        {"dataset": "IIIT5K", "question": "what is written in the image?", "question_type": "Regular Text Recognition",
         "answer": ["that"], "image": word_image("THAT")},
    ]
    features = datasets.Features({"dataset": S, "question": S, "question_type": S, "answer": STRINGS, "image": IMAGE})
    return rows, features


# --- DocVQA -----------------------------------------------------------------------------------------------------

TABLE = [("Item", "Amount"), ("Paper", "12"), ("Ink", "30"), ("Toner", "57")]


def table_image():
    """A two-column table ruled with lines, header row bold-ish (drawn twice, one pixel apart)."""
    im, d = canvas(192, 128)
    f = font(15)
    left, top, right, row_h, split = 12, 12, 180, 26, 100
    bottom = top + row_h * len(TABLE)
    d.rectangle((left, top, right, bottom), outline="black", width=2)
    d.line((split, top, split, bottom), fill="black", width=1)
    for i, (a, b) in enumerate(TABLE):
        y = top + i * row_h
        if i:
            d.line((left, y, right, y), fill="black", width=2 if i == 1 else 1)
        for dx in ((0, 1) if i == 0 else (0,)):
            d.text((left + 8 + dx, y + 5), a, font=f, fill="black")
            d.text((split + 8 + dx, y + 5), b, font=f, fill="black")
    return im


def docvqa():
    im = table_image()
    common_fields = {"question_types": ["table/list"], "image": im, "docId": 90001, "ucsf_document_id": "fxtr0001",
                     "ucsf_document_page_no": "1", "data_split": "val"}
    rows = [
        {"questionId": "900011", "question": "What is the amount for Ink?", **common_fields, "answers": ["30"]},
        {"questionId": "900012", "question": "Which item has an amount of 57?", **common_fields,
         "answers": ["Toner", "toner"]},
    ]
    # Column order as the hub dataset declares it.
    order = ["questionId", "question", "question_types", "image", "docId", "ucsf_document_id", "ucsf_document_page_no",
             "answers", "data_split"]
    rows = [{k: r[k] for k in order} for r in rows]
    features = datasets.Features({"questionId": S, "question": S, "question_types": STRINGS, "image": IMAGE,
                                  "docId": datasets.Value("int64"), "ucsf_document_id": S, "ucsf_document_page_no": S,
                                  "answers": STRINGS, "data_split": S})
    return rows, features


# --- ChartQA ----------------------------------------------------------------------------------------------------

def bar_chart(title, xlabel, ylabel, bars, unit):
    """A vertical bar chart: bars scaled to the largest value, each labelled with its value above and its category
    below, an axis label on each axis."""
    im, d = canvas(224, 144)
    small, tiny = font(11), font(10)
    centered(d, (0, 2, 224, 16), title, small)
    x0, y0, x1, y1 = 34, 24, 214, 118  # plot area
    d.line((x0, y0, x0, y1), fill="black", width=1)
    d.line((x0, y1, x1, y1), fill="black", width=1)
    top = max(v for _, v in bars)
    slot = (x1 - x0) // len(bars)
    for i, (name, v) in enumerate(bars):
        h = round((y1 - y0 - 16) * v / top)
        bx = x0 + i * slot + slot // 4
        d.rectangle((bx, y1 - h, bx + slot // 2, y1 - 1), fill=(52, 101, 164))
        centered(d, (bx - 10, y1 - h - 13, bx + slot // 2 + 10, y1 - h - 1), f"{v}{unit}", tiny)
        centered(d, (bx - 10, y1 + 2, bx + slot // 2 + 10, y1 + 14), name, tiny)
    centered(d, (x0, 130, x1, 143), xlabel, tiny)
    side = Image.new("RGB", (90, 14), "white")
    centered(ImageDraw.Draw(side), (0, 0, 90, 14), ylabel, tiny)
    im.paste(side.rotate(90, expand=True), (4, y0 + (y1 - y0 - 90) // 2))
    return im


def chartqa():
    sales = bar_chart("Sales by year", "Year", "Units sold", [("2019", 24), ("2020", 36), ("2021", 18)], "")
    votes = bar_chart("Share of votes", "Party", "Share (%)", [("A", 45), ("B", 30), ("C", 25)], "%")
    rows = [
        {"type": "human_test", "question": "How many units were sold in 2020?", "answer": "36", "image": sales},
        {"type": "augmented_test", "question": "What is the difference in units sold between 2020 and 2021?",
         "answer": "18", "image": sales},
        {"type": "augmented_test", "question": "What share of the votes did party B get?", "answer": "30%",
         "image": votes},
    ]
    features = datasets.Features({"type": S, "question": S, "answer": S, "image": IMAGE})
    return rows, features


# (dataset_path, dataset_name or None, split, layout relative to the snapshot, the task's doc_to_text with its
# default lmms_eval_specific_kwargs, builder)
DATASETS = [
    ("echo840/OCRBench", None, "test", "data/test-00000-of-00001.parquet", lambda d: d["question"].strip(), ocrbench),
    ("lmms-lab-encoder/DocVQA", "DocVQA", "validation", "DocVQA/validation-00000-of-00001.parquet",
     lambda d: d["question"] + "\nAnswer the question using a single word or phrase.", docvqa),
    ("lmms-lab-encoder/ChartQA", None, "test", "data/test-00000-of-00001.parquet",
     lambda d: d["question"] + "\nAnswer the question with a single word.", chartqa),
]


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def encode(rows, features):
    """Rows with PIL images as the `Image` feature stores them: {bytes: PNG, path: None}."""
    out = []
    for r in rows:
        out.append({k: ({"bytes": png(v), "path": None} if isinstance(v, Image.Image) else v) for k, v in r.items()})
    return datasets.Dataset.from_list(out, features=features)


def measure(processor, image_bytes, prompt):
    """What the Gemma-4 processor makes of one item: its image tensors (shape, dtype, bytes) and the image tokens
    of the prompt it lays out."""
    im = Image.open(io.BytesIO(image_bytes)).convert("RGB")
    ip = processor.image_processor(images=[im], return_tensors="pt")
    tensors = {k: {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch."),
                   "bytes": v.numel() * v.element_size()} for k, v in ip.items()}
    soft = int(ip["num_soft_tokens_per_image"][0])
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = processor(text=text, images=[im], return_tensors="pt")["input_ids"][0].tolist()
    image_tokens = sum(1 for t in ids if t == processor.image_token_id)
    valid = int((ip["image_position_ids"][0][:, 0] >= 0).sum())
    return {"soft_tokens": soft, "image_tokens_in_prompt": image_tokens, "prompt_tokens": len(ids),
            "valid_patches": valid, "tensors": tensors}


def task_files(wheel):
    """Copies the task files out of the wheel (or, with none, checks the committed copies) and returns the record."""
    record_path = os.path.join(OUT, "taskfiles.json")
    if wheel is None:
        with open(record_path) as fh:
            record = json.load(fh)
        for rel, f in record["files"].items():
            with open(os.path.join(OUT, "lmms_eval_tasks", rel), "rb") as fh:
                if sha256(fh.read()) != f["sha256"]:
                    raise SystemExit(f"{OUT}/lmms_eval_tasks/{rel} differs from {record_path} `files.{rel}.sha256`")
        return record
    with open(wheel, "rb") as fh:
        wheel_sha = sha256(fh.read())
    files = {}
    with zipfile.ZipFile(wheel) as z:
        for folder, name in TASK_FILES:
            inner = f"lmms_eval/tasks/{folder}/{name}"
            data = z.read(inner)
            dest = os.path.join(OUT, "lmms_eval_tasks", folder, name)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as fh:
                fh.write(data)
            files[f"{folder}/{name}"] = {"wheel_path": inner, "sha256": sha256(data)}
    record = {"generator": "xtask/reference/lmms_data.py", "lmms_eval": LMMS_EVAL, "wheel": os.path.basename(wheel),
              "wheel_sha256": wheel_sha, "files": files}
    with open(record_path, "w") as fh:
        json.dump(record, fh, indent=1, ensure_ascii=True)
        fh.write("\n")
    return record


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheel", help="lmms_eval-0.7.3-py3-none-any.whl to copy the task files from")
    ap.add_argument("--processor", default="fixtures/gemma4-mm-tiny/hf")
    args = ap.parse_args()
    datasets.disable_progress_bars()
    task_files(args.wheel)
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(args.processor)
    manifest = {"generator": "xtask/reference/lmms_data.py", "processor": args.processor, "datasets": {}}
    for path, name, split, layout, doc_to_text, build in DATASETS:
        rows, features = build()
        ds = encode(rows, features)
        dest = os.path.join(OUT, "hub", "datasets--" + path.replace("/", "--"), "snapshots", "fixture", layout)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        ds.to_parquet(dest)
        schema = pq.read_schema(dest)
        images = ds.with_format("arrow")["image"].to_pylist()
        items = []
        for doc, image in zip(ds.remove_columns("image"), images):
            prompt = doc_to_text(doc)
            size = list(Image.open(io.BytesIO(image["bytes"])).size)
            items.append({"doc": doc, "prompt": prompt,
                          "image": {"sha256": sha256(image["bytes"]), "png_bytes": len(image["bytes"]), "size": size},
                          "processor": measure(processor, image["bytes"], prompt)})
        with open(dest, "rb") as fh:
            file_sha = sha256(fh.read())
        manifest["datasets"][path] = {
            "dataset_name": name, "split": split, "file": os.path.relpath(dest, OUT),
            "file_bytes": os.path.getsize(dest), "file_sha256": file_sha,
            "schema": {f.name: str(f.type) for f in schema}, "items": items}
        print(path, split, len(items), "items", os.path.getsize(dest), "bytes", flush=True)
    with open(os.path.join(OUT, "datasets.json"), "w") as fh:
        json.dump(manifest, fh, indent=1, ensure_ascii=True)
        fh.write("\n")


if __name__ == "__main__":
    main()
