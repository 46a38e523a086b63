"""How the real tier is built: each step in its own folder, skipped when its stamp (its recipe and the size, mtime and
sha256 of what it made) still holds, every output checked against the committed manifest (or recorded into it with
--record), and a heartbeat while a long step runs.
"""
from __future__ import annotations

import json
import os
import shutil
import threading
import time

from .common import log, sha256_file

# Bump to rebuild every cached step (a change of recipe that the step keys below do not already cover).
RECIPE = 1


class Heartbeat:
    """Prints `what ... Ns` every `every` seconds while a long step runs."""

    def __init__(self, what, every=15.0):
        self.what, self.every, self.t0 = what, every, time.time()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.wait(self.every):
            log(f"      ... {self.what}: {time.time() - self.t0:.0f}s")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def tree_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            if f == ".stamp.json":
                continue
            out.append(os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/"))
    return sorted(out)


class Build:
    def __init__(self, cache, manifest_path, record):
        self.cache, self.manifest_path, self.record = cache, manifest_path, record
        self.manifest, self.sizes = {}, {}
        if os.path.isfile(manifest_path):
            with open(manifest_path) as fh:
                doc = json.load(fh)
            self.manifest, self.sizes = doc.get("files", {}), doc.get("sizes", {})
        self.recorded, self.recorded_sizes = {}, {}
        self.steps_run = self.steps_skipped = 0

    # -- stamps -------------------------------------------------------------------------------

    def stamp_ok(self, out_dir, key):
        p = os.path.join(out_dir, ".stamp.json")
        if not os.path.isfile(p):
            return None
        try:
            with open(p) as fh:
                s = json.load(fh)
        except (OSError, ValueError):
            return None
        if s.get("key") != key:
            return None
        for rel, (size, mtime, sha) in s["files"].items():
            f = os.path.join(out_dir, rel)
            try:
                st = os.stat(f)
            except OSError:
                return None
            if st.st_size != size or st.st_mtime_ns != mtime:
                return None
        if sorted(s["files"]) != tree_files(out_dir):
            return None
        return {rel: (v[2], v[0]) for rel, v in s["files"].items()}

    def finish(self, out_dir, key, label):
        """Hash what a step made, check it against the manifest, and stamp it."""
        files = {}
        prefix = os.path.relpath(out_dir, self.cache).replace(os.sep, "/")
        for rel in tree_files(out_dir):
            f = os.path.join(out_dir, rel)
            st = os.stat(f)
            files[rel] = [st.st_size, st.st_mtime_ns, sha256_file(f)]
        self.check(prefix, {rel: (v[2], v[0]) for rel, v in files.items()}, label)
        with open(os.path.join(out_dir, ".stamp.json"), "w") as fh:
            json.dump({"key": key, "files": files}, fh, indent=1, sort_keys=True)
        return {rel: v[2] for rel, v in files.items()}

    def check(self, prefix, made, label):
        """made: {path: (sha256, size)} of what a step made, against the manifest's sha256 and size."""
        shas = {rel: sha for rel, (sha, _) in made.items()}
        for rel, (sha, size) in sorted(made.items()):
            name = f"{prefix}/{rel}"
            self.recorded[name], self.recorded_sizes[name] = sha, size
            if self.record:
                continue
            if self.sizes.get(name) not in (None, size):
                raise SystemExit(f"{label}: {name} has {size} bytes, {self.manifest_path} records {self.sizes[name]}")
            want = self.manifest.get(name)
            if want is None:
                raise SystemExit(f"{label}: {name} is not in {self.manifest_path}; the recipe changed? "
                                 f"Rebuild with `cargo xtask real --record` and commit the manifest")
            if want != sha:
                raise SystemExit(f"{label}: {name} has sha256 {sha}, {self.manifest_path} records {want}: this "
                                 f"build is not byte-identical to the recorded one (a different package version "
                                 f"or a non-deterministic step)")
        if not self.record:
            want = sorted(k[len(prefix) + 1:] for k in self.manifest if k.startswith(prefix + "/"))
            if want and want != sorted(shas):
                raise SystemExit(f"{label}: {prefix} holds {sorted(shas)}, the manifest records {want}")

    def step(self, label, out_dir, key, make):
        """Runs make(tmp_dir) unless out_dir's stamp matches key; returns out_dir's {file: sha256}."""
        key = json.dumps({"recipe": RECIPE, **key}, sort_keys=True)
        made = self.stamp_ok(out_dir, key)
        if made is not None:
            prefix = os.path.relpath(out_dir, self.cache).replace(os.sep, "/")
            self.check(prefix, made, label)
            self.steps_skipped += 1
            log(f"  [cached] {label}")
            return {rel: sha for rel, (sha, _) in made.items()}
        log(f"  [build]  {label}")
        t0 = time.time()
        shutil.rmtree(out_dir, ignore_errors=True)
        os.makedirs(out_dir)
        with Heartbeat(label):
            make(out_dir)
        shas = self.finish(out_dir, key, label)
        self.steps_run += 1
        log(f"           {label}: done in {time.time() - t0:.1f}s")
        return shas

    def record_manifest(self, rebuilt, versions):
        """--record: the manifest of what this run built, keeping the manifest's entries for the files it did not
        rebuild (`rebuilt(path)` says which it did)."""
        files = dict(sorted(self.recorded.items()))
        old, old_sizes = self.manifest, self.sizes  # as Build read them at the start
        keep = {k: v for k, v in old.items() if not rebuilt(k)}
        keep_sizes = {k: v for k, v in old_sizes.items() if k in keep}
        if set(keep) - set(keep_sizes):
            raise SystemExit(f"{self.manifest_path} records no size for files of models not rebuilt here "
                             f"({sorted({k.split('/')[0] for k in set(keep) - set(keep_sizes)})}): record the whole "
                             f"tier (`cargo xtask real --record`, without --only)")
        doc = {"about": "sha256 and size of every file `cargo xtask real` builds under the real tier's cache "
                        "(xtask/reference/real.py); each build checks its outputs against it, and each trial its "
                        "package's files (suite/src/feed/integrity.rs), before ONNX Runtime reads them",
               "root": "target/real",
               "versions": versions,
               "files": dict(sorted({**keep, **files}.items())),
               "sizes": dict(sorted({**keep_sizes, **self.recorded_sizes}.items()))}
        os.makedirs(os.path.dirname(self.manifest_path), exist_ok=True)
        with open(self.manifest_path, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
        log(f"recorded {len(files)} files in {self.manifest_path}")
