"""A package's text decoder run by a plain Python ONNX Runtime loop on the CPU EP: the names from its
genai_config.json (input_ids, attention_mask, position_ids when the graph has it, past/present per layer as the graph
declares them), present fed back as past, greedy with the EOS ids masked (the one EOS rule, common.eos_ids).
bench.py times its loop against the suite's; dist.py takes its logits for the full-vocabulary check.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

from .common import eos_ids

import numpy as np  # noqa: E402

_NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
       "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_}


class OrtDecoder:
    """One package's decoder in an ONNX Runtime session on the CPU EP, `threads` intra-op threads."""

    def __init__(self, package: Path, threads: int):
        import onnxruntime as ort

        self.cfg = json.loads((package / "genai_config.json").read_text())
        dec = self.cfg["model"]["decoder"]
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        self.session = ort.InferenceSession(str(package / dec["filename"]), so, providers=["CPUExecutionProvider"])
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        names_in, names_out = dec.get("inputs", {}), dec.get("outputs", {})
        self.ids_name = names_in.get("input_ids", "input_ids")
        self.mask_name = names_in.get("attention_mask", "attention_mask")
        self.pos_name = names_in.get("position_ids", "position_ids")
        self.logits_name = names_out.get("logits", "logits")
        if self.ids_name not in self.inputs:
            raise SystemExit(f"{package}: the decoder has no `{self.ids_name}` input (an embeddings-fed decoder?)")
        # past -> present pairs: every graph input matching the past pattern, present with the same layer index
        # (Gemma-4 has caches only for its non-shared layers, each with its own head_dim).
        self.past = {}  # past name -> (present name, dtype, kv_heads, head_dim)
        for kind in ("key", "value"):
            pin = names_in.get(f"past_{kind}_names", f"past_key_values.%d.{kind}")
            pout = names_out.get(f"present_{kind}_names", f"present.%d.{kind}")
            rx = re.compile("^" + re.escape(pin).replace("%d", r"(\d+)") + "$")
            for name, info in self.inputs.items():
                m = rx.match(name)
                if m:
                    heads, head_dim = info.shape[1], info.shape[3]
                    if not isinstance(heads, int):
                        heads = dec["num_key_value_heads"]
                    if not isinstance(head_dim, int):
                        head_dim = dec["head_size"]
                    self.past[name] = (pout % int(m.group(1)), _NP[info.type], heads, head_dim)
        self.outputs = [self.logits_name] + [p[0] for p in self.past.values()]
        self.eos = eos_ids(None, package / "genai_config.json")

    def feed(self, cur: np.ndarray, start: int, past: dict) -> dict:
        """The decoder's inputs for the ids `cur` [1, n] at positions start.. after a cache `past`."""
        total = start + cur.shape[1]
        feed = {self.ids_name: cur.astype(_NP[self.inputs[self.ids_name].type])}
        if self.mask_name in self.inputs:
            feed[self.mask_name] = np.ones((1, total), _NP[self.inputs[self.mask_name].type])
        if self.pos_name in self.inputs:
            feed[self.pos_name] = np.arange(start, total, dtype=_NP[self.inputs[self.pos_name].type])[None]
        feed.update(past)
        return feed

    def empty_past(self) -> dict:
        return {n: np.zeros((1, h, 0, d), dt) for n, (_, dt, h, d) in self.past.items()}

    def prefill(self, ids: list[int]):
        """Every output of one run over `ids` from an empty cache."""
        return self.session.run(None, self.feed(np.array([ids], np.int64), 0, self.empty_past()))

    def logits(self, ids) -> np.ndarray:
        """The logits at every position of `ids` (one run from an empty cache), [len(ids), vocab]."""
        feed = self.feed(np.asarray(ids, np.int64)[None], 0, self.empty_past())
        return self.session.run([self.logits_name], feed)[0][0]

    def greedy(self, prompt: list[int], tokens: int):
        """(new ids, steps whose raw argmax was EOS, seconds on the prompt). Leaves in self.run_ends the moment
        each session run returned (perf_counter seconds), and in self.run_seconds the time inside the runs."""
        past = self.empty_past()
        cur, start, out, masked, t_prefill = np.array([prompt], np.int64), 0, [], [], 0.0
        self.run_ends = ends = []
        self.run_seconds = 0.0
        t0 = time.perf_counter()
        for step in range(tokens):
            feed = self.feed(cur, start, past)
            before = time.perf_counter()
            res = self.session.run(self.outputs, feed)
            ends.append(time.perf_counter())
            self.run_seconds += ends[-1] - before
            if step == 0:
                t_prefill = time.perf_counter() - t0
            for (name, (present, _, _, _)), value in zip(self.past.items(), res[1:]):
                past[name] = value
            logits = res[0][0, -1].astype(np.float32)
            nxt = int(logits.argmax())
            if nxt in self.eos:
                masked.append(step)
                logits[self.eos] = -np.inf
                nxt = int(logits.argmax())
            out.append(nxt)
            start += cur.shape[1]
            cur = np.array([[nxt]], np.int64)
        return out, masked, t_prefill
