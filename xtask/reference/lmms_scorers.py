"""What lmms-eval 0.7.3's own scorers answer on crafted inputs; writes tests/data/lmms/scorers.json for the suite's
tests (suite/tests/lmms_scorers.rs), and the Unicode classes the Rust port of Python's `unicodedata` and `re` reads
(suite/src/accuracy/scorers/unicode_classes.txt). `cargo xtask reference-data --only lmms-scorers` runs it, from
the repository root, in a scratch venv holding lmms-eval 0.7.3 without its dependencies and the few its scorers
import (xtask/reference/lmms-eval.lock, hash-checked).

It also scores the predictions the committed baselines hold (goldens/baselines/: gemma4-mm-tiny's image tasks, and
the real Whisper speech gate, whose targets it reads from the data set `cargo xtask real` builds), so the suite's
verdicts on them are checked against lmms-eval's on the same predictions.

The functions judged are lmms-eval's own, imported from its files: ocrbench_process_results and
ocrbench_aggregate_accuracy (tasks/ocrbench/utils.py), the `anls` metric and `mean` (api/metrics.py) behind
docvqa_val's default process_results (which strips the prediction first), chartqa_process_results
(tasks/chartqa/utils.py), librispeech_wer, remove_sp and compute_wer's pieces (tasks/librispeech/utils.py,
tasks/asr_wer_utils.py) and Whisper's EnglishTextNormalizer and BasicTextNormalizer. Only the package `__init__`s
(which import lmms-eval's whole runtime: torch, datasets) and the metric registry's decorators are bypassed.
Seeded: reruns give the same files.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import importlib.util
import io
import json
import os
import random
import sys
import tempfile
import types
import unicodedata
from typing import Callable, NamedTuple, Optional

VERSION = "0.7.3"


def load_lmms():
    spec = importlib.util.find_spec("lmms_eval")
    if spec is None or spec.origin is None:
        sys.exit("lmms_eval is not installed here (pip install lmms-eval==0.7.3 --no-deps)")
    root = os.path.dirname(spec.origin)
    for name in ["lmms_eval", "lmms_eval.api", "lmms_eval.tasks", "lmms_eval.tasks._task_utils",
                 "lmms_eval.tasks.librispeech", "lmms_eval.tasks.librispeech.whisper_normalizer",
                 "lmms_eval.tasks.ocrbench", "lmms_eval.tasks.chartqa"]:
        m = types.ModuleType(name)
        m.__path__ = [os.path.join(root, *name.split(".")[1:])]
        sys.modules[name] = m
    reg = types.ModuleType("lmms_eval.api.registry")
    reg.register_metric = lambda **kw: (lambda f: f)
    reg.register_aggregation = lambda name: (lambda f: f)
    sys.modules["lmms_eval.api.registry"] = reg
    mods = types.SimpleNamespace(
        root=root,
        metrics=importlib.import_module("lmms_eval.api.metrics"),
        ocrbench=importlib.import_module("lmms_eval.tasks.ocrbench.utils"),
        chartqa=importlib.import_module("lmms_eval.tasks.chartqa.utils"),
        libri=importlib.import_module("lmms_eval.tasks.librispeech.utils"),
        asr=importlib.import_module("lmms_eval.tasks.asr_wer_utils"),
    )
    from importlib.metadata import version
    assert version("lmms_eval") == VERSION, version("lmms_eval")
    return mods


# ---------------------------------------------------------------------------------------------------- OCRBench
OCR_TYPES = ["Regular Text Recognition", "Irregular Text Recognition", "Artistic Text Recognition",
             "Handwriting Recognition", "Digit String Recognition", "Non-Semantic Text Recognition",
             "Scene Text-centric VQA", "Doc-oriented VQA", "Key Information Extraction",
             "Handwritten Mathematical Expression Recognition"]

OCR_CASES = [
    ("The sign says STOP.", ["stop"], "IIIT5K"),
    ("stop", ["STOP"], "IIIT5K"),
    ("  Stop  ", ["stop"], "SVT"),
    ("sto p", ["stop"], "SVT"),
    ("The answer is\nNew York", ["new york"], "IC13_857"),
    ("New\nYork", ["new york"], "IC13_857"),
    ("New\r\nYork", ["new york"], "IC15_1811"),
    ("New\tYork", ["new york"], "IC15_1811"),
    ("new  york", ["new york"], "IC15_1811"),
    ("ＳＴＯＰ", ["stop"], "IIIT5K"),
    ("stop", ["ＳＴＯＰ"], "IIIT5K"),
    ("price：１２３", ["123"], "docVQA"),
    ("a\u3000b", ["a b"], "textVQA"),
    ("ﬁve", ["five"], "textVQA"),
    ("Straße", ["strasse"], "textVQA"),
    ("STRASSE", ["straße"], "textVQA"),
    ("İstanbul", ["istanbul"], "textVQA"),
    ("ΟΔΟΣ", ["οδος"], "textVQA"),
    ("ΟΔΟΣ", ["οδοσ"], "textVQA"),
    ("cat", ["dog", "cat"], "ST-VQA"),
    ("cat", ["dog", "bird"], "ST-VQA"),
    ("anything", [""], "ST-VQA"),
    ("anything", ["   "], "ST-VQA"),
    ("", ["a"], "ST-VQA"),
    ("", [""], "ST-VQA"),
    ("12", ["123"], "ESTVQA"),
    ("1234", ["123"], "ESTVQA"),
    ("\\frac{a}{b}", ["\\frac { a } { b }"], "HME100k"),
    ("\\frac{A}{b}", ["\\frac { a } { b }"], "HME100k"),
    ("x ^ { 2 }\n+ 1", ["x^{2}+1"], "HME100k"),
    ("x^{2}\t+1", ["x^{2}+1"], "HME100k"),
    ("x\u3000^{2}+1", ["x^{2}+1"], "HME100k"),
    ("ｘ^{2}+1", ["x^{2}+1"], "HME100k"),
    ("  a + b  ", ["a+b", "b+a"], "HME100k"),
    ("c", ["a+b", "b+a"], "HME100k"),
    ("anything", ["  "], "HME100k"),
    ("Total: $1,000.00", ["$1,000.00"], "FUNSD"),
    ("Total: $1000.00", ["$1,000.00"], "FUNSD"),
    ("DATE 12/03/2021", ["12/03/2021"], "SROIE"),
    ("date: 12 / 03 / 2021", ["12/03/2021"], "SROIE"),
    ("Café", ["cafe"], "POIE"),
    ("Café", ["café"], "POIE"),
    ("Cafe\u0301", ["café"], "POIE"),
    ("hme100k answer", ["answer"], "hme100k"),
    ("The word is\n\nhello\n", ["hello"], "WordArt"),
    ("HELLO WORLD", ["hello world", "hello"], "WordArt"),
    ("hello_world", ["hello world"], "WordArt"),
    ("ǅemal", ["ǆemal"], "WordArt"),
    ("I", ["i"], "COCO-Text"),
    ("\u00a0word\u00a0", ["word"], "COCO-Text"),
    ("word\x1c", ["word"], "COCO-Text"),
]


def ocrbench(m):
    items = []
    for i, (pred, answers, dataset) in enumerate(OCR_CASES):
        doc = {"answer": answers if len(answers) != 1 or i % 2 else answers[0], "dataset": dataset,
               "question_type": OCR_TYPES[i % len(OCR_TYPES)]}
        r = m.ocrbench.ocrbench_process_results(doc, [pred])["ocrbench_accuracy"]
        items.append({"prediction": pred, "answers": answers, "dataset": dataset, "question_type": doc["question_type"],
                      "correct": bool(r["score"])})
    # The aggregate: a module-level tally, never reset by lmms-eval itself; reset here before each call.
    aggregates = []
    for take in [len(items), 10, 1]:
        for k in m.ocrbench.OCRBench_score:
            m.ocrbench.OCRBench_score[k] = 0
        results = [{"question_type": it["question_type"], "score": int(it["correct"])} for it in items[:take]]
        with tempfile.TemporaryDirectory() as d, contextlib.chdir(d), contextlib.redirect_stdout(io.StringIO()):
            score = m.ocrbench.ocrbench_aggregate_accuracy(results, None)
        aggregates.append({"items": take, "correct": sum(r["score"] for r in results), "score": score})
    return {"items": items, "aggregates": aggregates}


# ---------------------------------------------------------------------------------------------------- ANLS
ANLS_CASES = [
    ("Paris", ["paris"]),
    ("paris", ["Paris", "London"]),
    ("Pari", ["paris"]),
    ("Par", ["paris"]),
    ("abcde", ["abcd"]),
    ("ab", ["abcd"]),
    ("a", ["ab"]),
    ("ab", ["abxy"]),
    ("abc", ["abxyz"]),
    ("abcd", ["abcdefgh"]),
    ("abc", ["abcdefg"]),
    ("xyz", ["abc"]),
    ("", ["abc"]),
    ("abc", [""]),
    ("", [""]),
    ("   ", [""]),
    ("  a  ", ["a"]),
    ("New   York\n City", ["new york city"]),
    ("new york city", ["  New\tYork  City  "]),
    ("new york", ["new  york"]),
    ("new york", ["newyork"]),
    ("1,000", ["1000"]),
    ("$1000", ["1000", "$1,000"]),
    ("10 %", ["10%"]),
    ("Straße", ["strasse"]),
    ("STRASSE", ["straße"]),
    ("ß", ["ss"]),
    ("İ", ["i"]),
    ("İ", [""]),
    ("ﬁ", ["fi"]),
    ("café", ["cafe"]),
    ("cafe\u0301", ["café"]),
    ("東京", ["東京都"]),
    ("東", ["東京都"]),
    ("ΟΔΟΣ", ["οδος"]),
    ("ΟΔΟΣ", ["οδοσ"]),
    ("wrong", ["right", "wrung", "wring"]),
    ("colour", ["color", "colours"]),
    ("the quick brown fox", ["the quick brown fax", "quick"]),
    ("2021-03-12", ["12/03/2021", "2021/03/12"]),
    ("a\u00a0b", ["a b"]),
    ("a\x1cb", ["a b"]),
    ("a\u200bb", ["a b"]),
    ("a_b", ["a b"]),
    ("AbCdE", ["abcde"]),
    ("abcdefghij", ["abcdefghiz", "zbcdefghij"]),
    ("abcdefghij", ["abcdexxxxx"]),
    ("abcdefghij", ["abcdxxxxxx"]),
    ("😀 smile", ["😀smile"]),
]


def anls(m):
    items = []
    for pred, answers in ANLS_CASES:
        stripped = pred.strip()  # docvqa_val has no process_results: lmms-eval's default one strips the generation
        score = m.metrics.anls(answers, [stripped])["anls"]
        raw = m.metrics.anls(answers, [pred])["anls"]
        items.append({"prediction": pred, "answers": answers, "anls": score, "anls_unstripped": raw})
    return {"items": items, "mean": m.metrics.mean([it["anls"] for it in items])}


# ---------------------------------------------------------------------------------------------------- ChartQA
RELAXED_CASES = [
    ("12", "12"), ("12.0", "12"), ("12.5", "12"), ("12.6", "12"), ("12.61", "12"), ("11.4", "12"), ("11.39", "12"),
    ("-12", "12"), ("-12", "-12"), ("-12.6", "-12"), ("-12.7", "-12"),
    ("50%", "0.5"), ("0.5", "50%"), ("50%", "50"), ("50", "50%"), ("52%", "50%"), ("53%", "50%"), ("5%%", "0.05"),
    ("50 %", "0.5"), ("50% ", "0.5"), ("%", "0.5"),
    ("1,000", "1000"), ("1000", "1,000"), ("1,000", "1,000"), ("1_000", "1000"), ("1__000", "1000"), ("_1000", "1000"),
    ("0", "0"), ("0.0", "0"), ("0", "0.0"), ("0.01", "0"), ("0%", "0"), ("0", "0%"),
    ("12.", "12"), ("12.", "12."), (".5", "0.5"), ("5e1", "50"), ("5E1", "50"), ("1e-3", "0.001"),
    (" 12 ", "12"), ("12\n", "12"), ("\u00a012", "12"), ("\x1c12", "12"), ("１２", "12"), ("١٢", "12"),
    ("inf", "inf"), ("Infinity", "inf"), ("nan", "nan"), ("NaN", "nan"), ("12", "nan"), ("-inf", "-inf"),
    ("Yes", "yes"), ("YES", "Yes"), ("no", "yes"), ("Paris", "paris "), ("", ""), ("", "0"),
    ("12 apples", "12"), ("twelve", "12"), ("0x10", "16"), ("+12", "12"), ("1/2", "0.5"),
    ("Straße", "STRASSE"), ("ΟΔΟΣ", "οδος"),
    ("2019", "2018"), ("2019", "2020"), ("1e308", "1e308"), ("1e309", "1e309"),
]
CHART_TYPES = ["human_test", "augmented_test"]


def relaxed(m):
    items = []
    for i, (pred, target) in enumerate(RELAXED_CASES):
        kind = CHART_TYPES[i % 2]
        r = m.chartqa.chartqa_process_results({"type": kind, "answer": target}, [pred])
        items.append({"prediction": pred, "target": target, "type": kind, "scores": r})
    return {"items": items}


# ---------------------------------------------------------------------------------------------------- Normalizers
NORMALIZER_STRINGS = [
    # numbers, ordinals, plurals
    "twenty five", "twenty-five", "one hundred and twenty three", "two thousand and nineteen", "nineteen ninety nine",
    "one oh one", "oh oh seven", "double oh seven", "triple five", "double nine", "double trouble",
    "one", "ones", "the one and only", "one two three four", "one million two hundred thousand",
    "first", "second", "third", "fourth", "fifth", "ninth", "nineth", "twelfth", "twentieth", "twenty first",
    "twenty second place", "one hundredth", "the thousandth time", "millions", "hundreds of people", "the 1960s",
    "1st", "2nd", "3rd", "4th", "21st century", "1 st", "22 nd", "3 rd", "5 th", "7 s", "the 1990 s",
    "sixes and sevens", "twenties", "the nineties", "eighty eighth", "a hundred", "a thousand dollars",
    "zero", "zeroth", "oh", "zero point five", "point five", "three point one four", "one point five million",
    "two and a half", "two and a half million", "and a half", "a cup and a half", "five and a half dollars",
    "minus five", "negative ten degrees", "plus two", "positive", "minus", "minus one point five",
    # currencies and percents
    "$20 million", "$20", "$ 20", "20 dollars", "twenty dollars", "twenty dollars and fifty cents",
    "$2 and 7 cents", "$2.07", "$0.50", "$0.5", "£5.99", "€10", "ten euros", "one pound", "three pounds fifty",
    "fifty cents", "cent", "five cents", "$1", "$1s", "ten percent", "10%", "10 %", "ten per cent",
    "per cent", "a per diem", "100 percent sure", "the 5% rule", "¢50", "$", "£", "a dollar", "dollars",
    "$1,000,000", "1,000", "1,000,000 people", "10,5", "1,2,3", "3.14", "3.14.15", "192.168.0.1",
    "1.", "1..2", "version 2.0", "2.50", "2.0", "007", "0", "00", "0 point 5",
    # years, times, fractions
    "in 1999", "the year two thousand", "nineteen eighty-four", "1/2", "one half", "three quarters", "1½", "¼ cup",
    "10:30", "ten thirty", "5pm", "3am", "a4", "mp3", "covid19", "19th-century", "2x4", "x2",
    "³", "H₂O", "km²", "5km", "5 km", "100m", "No. 5", "no. 5", "#1", "No.1", "abc123def",
    "one hundred two", "one hundred twelve", "three hundred million", "ten million and one",
    "eleven hundred", "twenty twenty", "two zero two one", "four score and seven years ago", "a million billion",
    "a decillion", "one decillion", "nine hundred ninety nine decillion nine hundred ninety nine", "twelve thousandths",
    "1 million", "1.5 million", "0.5 million", "2.25 thousand", "one point two five thousand", "5 hundred",
    "3 thousandths", "two hundredths", "1.5 hundredth",
    # British spellings
    "colour", "The Colour of Honour", "organise", "organisation", "centre", "theatre", "travelling", "analyse",
    "grey", "programme", "aluminium", "defence", "licence", "catalogue", "favourites", "neighbour's",
    # contractions and titles
    "won't", "can't", "don't", "it's", "it's been", "he'd been", "she'd gone", "they've", "I'm", "we're",
    "you'll", "let's go", "ain't", "y'all", "wanna", "gotta", "gonna", "i'ma", "imma", "woulda", "ma'am",
    "Mr. Smith", "mr smith", "Mrs. Jones", "St. Louis", "Dr. Who", "Prof. X", "Capt. Hook", "Gen. Lee", "Jr.",
    "Sr", "Lt. Dan", "Col. Mustard", "Rev. King", "Hon. member", "Esq.", "asst", "assoc", "Sen.", "Rep. Gov.",
    "isn't it", "he 's", "she ' s here", "rock 'n' roll", "o'clock", "'tis", "the '90s", "James' book",
    "mr²", "mrs\u0301", "mr_smith", "mr-smith", "mr.smith",
    # fillers, brackets, symbols
    "hmm I see", "um, uh, well", "mm hmm", "mmm", "mhm", "uh-huh", "umm", "hmmm", "[laughter] yes", "<unk> word",
    "(inaudible) okay", "a (b) c", "(unclosed", "[unclosed", "a [b] c (d) e <f> g", "<|en|> hello", "((a))",
    "hello... world", "wait—what?", "a - b", "a-b", "e-mail", "well-known", "rock & roll", "AT&T", "50/50",
    "a * b", "@user", "#hashtag", "email@example.com", "http://example.com", "c++", "c#", "f(x) = y",
    "“quoted”", "‘single’", "«guillemets»", "a…b", "I ♥ NY", "©2020", "™", "°C", "25°C", "±5",
    # accents and scripts
    "café", "naïve", "résumé", "Zoë", "São Paulo", "Ångström", "œuvre", "Æsir", "straße", "ẞ", "Łódź", "þorn", "ðe",
    "ﬁne", "ﬂower", "Ｈｅｌｌｏ", "ｔｗｅｎｔｙ", "１２３", "١٢٣", "٣ million", "Привет мир", "ΟΔΟΣ", "日本語",
    "中文 字", "한국어", "עברית", "नमस्ते", "İstanbul", "ǅ", "e\u0301", "\u0301", "a\u20dd", "ｶﾀｶﾅ",
    # whitespace
    "  leading and trailing  ", "tab\tseparated", "line\nbreak", "multiple   spaces", "\u00a0nbsp\u00a0",
    "a\u2028b", "a\x1cb", "a\x1fb", "a\u200bb", "", " ", "\n",
    # LibriSpeech-like transcripts
    "HE HOPED THERE WOULD BE STEW FOR DINNER TURNIPS AND CARROTS AND BRUISED POTATOES",
    "STUFF IT INTO YOU HIS BELLY COUNSELLED HIM",
    "AFTER EARLY NIGHTFALL THE YELLOW LAMPS WOULD LIGHT UP HERE AND THERE THE SQUALID QUARTER OF THE BROTHELS",
    "He hoped there would be stew for dinner, turnips and carrots and bruised potatoes.",
    "Mr. Quilter is the apostle of the middle classes, and we are glad to welcome his gospel.",
    "In 1862 the 12th regiment marched 25 miles on the 4th of July.",
    "It cost $3.50, or £2 and 5 pence.",
]


def fuzz_strings(n):
    """Seeded word salads over the number normalizer's vocabulary: every branch of process_words meets its
    neighbours."""
    r = random.Random(7)
    vocab = ["zero", "oh", "one", "two", "five", "nine", "ten", "eleven", "nineteen", "twenty", "forty", "ninety",
             "hundred", "thousand", "million", "billion", "hundredth", "thousands", "millionth", "first", "third",
             "fifth", "twelfth", "sixes", "twenties", "fortieth", "and", "a", "half", "point", "double", "triple",
             "minus", "plus", "negative", "dollars", "dollar", "cents", "cent", "pounds", "euro", "per", "percent",
             "1", "2", "7", "10", "12", "100", "1000", "0", "3.5", "0.25", "2.0", "05", "1,000", "$5", "£3", "€2",
             "-4", "+6", "¢9", "5%", "10th", "2nd", "1s", "the", "apples", "st", "mr", "colour", "won't", "it's",
             ".", ",", "...", "'", "(x)", "[y]"]
    out = []
    for _ in range(n):
        out.append(" ".join(r.choice(vocab) for _ in range(r.randint(1, 7))))
    return out


def normalizers(m):
    eng = m.libri.english_normalizer
    basic = m.libri.basic_normalizer
    rows = []
    for s in NORMALIZER_STRINGS + fuzz_strings(160):
        rows.append({"text": s, "english": eng(s), "basic": basic(s), "words": wer_words(m, s)})
    return rows


# ---------------------------------------------------------------------------------------------------- WER
def wer_words(m, text):
    """The words compute_wer scores for one English text, from lmms-eval's own pieces in its own order:
    librispeech_wer's remove_sp, then compute_wer's _normalize (English, then basic) and its tokenizer."""
    t = m.libri.remove_sp(text, "en")
    t = m.asr._normalize(t, "en", yue_languages={"yue"}, english_languages={"en"}, chinese_languages={"zh"},
                         yue_converter=None, english_normalizer=m.libri.english_normalizer,
                         chinese_normalizer=m.libri.chinese_normalizer, basic_normalizer=m.libri.basic_normalizer)
    tok = m.asr.EvaluationTokenizer(tokenizer_type="none", lowercase=True, punctuation_removal=True,
                                    character_tokenization=False)
    return tok.tokenize(t).split()


WER_CORPORA = {
    "exact": [("HELLO WORLD", "hello world."), ("GOOD MORNING MISTER SMITH", "Good morning, Mr. Smith!")],
    "edits": [
        ("HE HOPED THERE WOULD BE STEW FOR DINNER TURNIPS AND CARROTS AND BRUISED POTATOES",
         "He hoped there would be stew for dinner, turnips and carrots and potatoes."),
        ("STUFF IT INTO YOU HIS BELLY COUNSELLED HIM", "Stuff it in to you, his belly counseled him."),
        ("THE TWENTY FIRST OF MAY", "The 21st of May"),
        ("IT COST TWENTY FIVE DOLLARS", "It cost $25."),
        ("I DON'T KNOW", "I do not know"),
        ("COLOUR", "color"),
    ],
    "empty_hypotheses": [("ONE TWO THREE", ""), ("FOUR FIVE", "<|en|>"), ("SIX", "six seven eight")],
    "tags": [("THE CAT SAT ON THE MAT", "<|en|> The cat sat on the mat. <|endoftext|>"),
             ("A B C", "a (laughs) b [noise] c"), ("UH HUH", "uh huh"), ("HMM OKAY", "okay")],
    "numbers": [("NINETEEN EIGHTY FOUR", "1984"), ("TWO POINT FIVE PERCENT", "2.5%"),
                ("THE NINETEEN NINETIES", "the 1990s"), ("ONE HUNDRED AND ONE", "101"),
                ("A THOUSAND AND ONE NIGHTS", "1001 nights")],
}


def wer(m):
    out = {}
    for name, pairs in WER_CORPORA.items():
        results = [{"gt": ref, "pred": hyp, "task": "asr_en"} for ref, hyp in pairs]
        with contextlib.redirect_stdout(io.StringIO()):
            score = m.libri.librispeech_wer(results, None)
        utts = []
        for ref, hyp in pairs:
            rw, hw = wer_words(m, ref), wer_words(m, hyp)
            utts.append({"reference": ref, "hypothesis": hyp, "reference_words": rw, "hypothesis_words": hw,
                         "edits": m.asr.ed.eval(rw, hw), "words": len(rw)})
        mine = 100 * sum(u["edits"] for u in utts) / sum(u["words"] for u in utts)
        assert abs(mine - score) < 1e-12, (name, mine, score)
        out[name] = {"utterances": utts, "wer": score}
    return out


# ---------------------------------------------------------------------------------------------------- The families
def score_ocrbench(m, doc, pred):
    return float(m.ocrbench.ocrbench_process_results(doc, [pred])["ocrbench_accuracy"]["score"])


def score_docvqa(m, doc, pred):
    # docvqa_val has no process_results: lmms-eval's default one strips the generation before the metric sees it.
    return m.metrics.anls(doc["answers"], [pred.strip()])["anls"]


def score_chartqa(m, doc, pred):
    return m.chartqa.chartqa_process_results(doc, [pred])["relaxed_overall"]


class Family(NamedTuple):
    """One lmms-eval task family the suite scores, as this script checks it: the sections of scorers.json its
    crafted cases fill (name -> the function that fills it), and lmms-eval's score of one committed prediction on
    one document (None where the baselines are checked apart: the speech gate's corpus WER)."""
    sections: dict
    score: Optional[Callable]


# The table, by dataset, in the order scorers.json holds the sections. A new family adds its cases, its section
# function and one line here.
FAMILIES = {
    "echo840/OCRBench": Family({"ocrbench": ocrbench}, score_ocrbench),
    "lmms-lab-encoder/DocVQA": Family({"anls": anls}, score_docvqa),
    "lmms-lab-encoder/ChartQA": Family({"relaxed": relaxed}, score_chartqa),
    "lmms-lab-audio/librispeech": Family({"normalizers": normalizers, "wer": wer}, None),
}


# ---------------------------------------------------------------------------------------------------- Predictions
# The predictions the committed baselines hold (the reference's own outputs), scored by lmms-eval's functions as its
# generation would hand them over: cut at the first stop string of the task's list (`text.split(term)[0]`).
IMAGE_BASELINES = [("ocrbench", "echo840/OCRBench"), ("ocrbench_stop_trap", "echo840/OCRBench"),
                   ("docvqa_val", "lmms-lab-encoder/DocVQA"), ("chartqa", "lmms-lab-encoder/ChartQA")]
SPEECH_BASELINES = ["whisper-tiny-en", "whisper-base"]
SPEECH_DATA = ("target/real/datasets/datasets--lmms-lab-audio--librispeech/snapshots/speech-gate/"
               "librispeech_test_clean/librispeech_test_clean-00000-of-00001.parquet")


def cut(text, until):
    for term in until:
        if term:
            text = text.split(term)[0]
    return text


def predictions(m):
    out = {}
    with open("tests/data/lmms/datasets.json") as f:
        sets = json.load(f)["datasets"]
    for task, dataset in IMAGE_BASELINES:
        with open(f"goldens/baselines/{task}/gemma4-mm-tiny.json") as f:
            b = json.load(f)
        docs = [it["doc"] for it in sets[dataset]["items"]]
        assert len(docs) == len(b["items"]), (task, len(docs), len(b["items"]))
        items = []
        for doc, it in zip(docs, b["items"]):
            for whole in (False, True):
                pred = it["full"] if whole else cut(it["full"], b["until"])
                score = FAMILIES[dataset].score(m, doc, pred)
                items.append({"whole": whole, "prediction": pred, "score": score})
        out[f"{task}/gemma4-mm-tiny"] = {"until": b["until"], "items": items}
    if not os.path.exists(SPEECH_DATA):
        sys.exit(f"{SPEECH_DATA} is missing: `cargo xtask real` builds it")
    import pyarrow.parquet as pq
    gts = pq.read_table(SPEECH_DATA, columns=["gt"]).column("gt").to_pylist()
    for model in SPEECH_BASELINES:
        with open(f"goldens/baselines/librispeech_test_clean/{model}.json") as f:
            b = json.load(f)
        assert len(gts) == len(b["items"]), (model, len(gts), len(b["items"]))
        hyps = [cut(it["full"], b["until"]) for it in b["items"]]
        results = [{"gt": g, "pred": h, "task": "asr_en"} for g, h in zip(gts, hyps)]
        with contextlib.redirect_stdout(io.StringIO()):
            score = m.libri.librispeech_wer(results, None)
        edits = [m.asr.ed.eval(wer_words(m, g), wer_words(m, h)) for g, h in zip(gts, hyps)]
        out[f"librispeech_test_clean/{model}"] = {"until": b["until"], "targets": gts, "edits": edits, "wer": score}
    return out


# ---------------------------------------------------------------------------------------------------- Unicode
def unicode_classes(path):
    """Python's own view of every code point, in runs: n = Mn, m = other marks, s = symbols, p = punctuation,
    d = decimal digits (str.isdecimal, re's \\d), w = other alphanumerics (str.isalnum: re's \\w with `_`)."""
    def cls(c):
        cat = unicodedata.category(c)
        if cat == "Mn":
            return "n"
        if cat[0] in "MSP":
            return {"M": "m", "S": "s", "P": "p"}[cat[0]]
        if c.isdecimal():
            return "d"
        if c.isalnum():
            return "w"
        return None
    runs = []
    for cp in range(0x110000):
        k = cls(chr(cp))
        if runs and runs[-1][2] == k and runs[-1][1] == cp - 1:
            runs[-1][1] = cp
        elif k is not None:
            runs.append([cp, cp, k])
    for a, b, k in runs:
        if k == "d":  # a digit's value is its offset from its run's start, modulo 10
            for cp in range(a, b + 1):
                assert unicodedata.decimal(chr(cp)) == (cp - a) % 10, hex(cp)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"# Python {sys.version.split()[0]} unicodedata {unicodedata.unidata_version}: first last class "
                "(n Mn, m Mc/Me, s S*, p P*, d Nd, w other L*/N*), written by xtask/reference/lmms_scorers.py\n")
        for a, b, k in runs:
            f.write(f"{a:x} {b:x} {k}\n")
    return len(runs)


def unassigned_runs(path):
    """The code points Python's unicodedata does not assign (category Cn), in runs: what the suite's Python string
    rules keep as they are, where Rust's newer Unicode maps, decomposes or classes them."""
    runs = []
    for cp in range(0x110000):
        if unicodedata.category(chr(cp)) == "Cn":
            if runs and runs[-1][1] == cp - 1:
                runs[-1][1] = cp
            else:
                runs.append([cp, cp])
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"# Python {sys.version.split()[0]} unicodedata {unicodedata.unidata_version}: first last of each run "
                "of unassigned code points (Cn), written by xtask/reference/lmms_scorers.py\n")
        for a, b in runs:
            f.write(f"{a:x} {b:x}\n")
    return len(runs)


def unicode_sweep():
    """Python's own str.lower, str.upper, NFKD and NFKC of every code point (surrogates aside), each as the sha256
    of the lines `<hex code point> <hex code points of the result>` for the code points it changes: what the suite's
    tests sweep its own rules against (tests/data/lmms/scorers.json, `unicode`)."""
    import hashlib
    funcs = {"lower": str.lower, "upper": str.upper,
             "nfkd": lambda c: unicodedata.normalize("NFKD", c), "nfkc": lambda c: unicodedata.normalize("NFKC", c)}
    out = {"python": sys.version.split()[0], "unicodedata": unicodedata.unidata_version}
    for name, f in funcs.items():
        h, n = hashlib.sha256(), 0
        for cp in range(0x110000):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            c = chr(cp)
            r = f(c)
            if r != c:
                h.update(f"{cp:x} {' '.join(f'{ord(x):x}' for x in r)}\n".encode())
                n += 1
        out[name] = {"changed": n, "sha256": h.hexdigest()}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/lmms/scorers.json")
    ap.add_argument("--classes", default="suite/src/accuracy/scorers/unicode_classes.txt")
    ap.add_argument("--unassigned", default="suite/src/accuracy/scorers/unicode_unassigned.txt")
    args = ap.parse_args()
    m = load_lmms()
    spelling = os.path.join(m.root, "tasks/librispeech/whisper_normalizer/english.json")
    data = {
        "lmms_eval": VERSION,
        "python": sys.version.split()[0],
        "unidata_version": unicodedata.unidata_version,
        "english_json_sha256": hashlib.sha256(open(spelling, "rb").read()).hexdigest(),
    }
    for family in FAMILIES.values():
        for section, fill in family.sections.items():
            data[section] = fill(m)
    data["predictions"] = predictions(m)
    runs = unicode_classes(args.classes)
    unassigned_runs(args.unassigned)
    data["unicode"] = unicode_sweep()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=0)
        f.write("\n")
    n = {k: len(v["items"]) for k, v in data.items() if isinstance(v, dict) and "items" in v}
    print(f"{args.out}: {n}, normalizers {len(data['normalizers'])}, wer corpora {len(data['wer'])}; "
          f"{args.classes}: {runs} runs", file=sys.stderr)


if __name__ == "__main__":
    main()
