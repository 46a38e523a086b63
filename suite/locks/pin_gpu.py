"""Writes the NVIDIA part of onnxruntime-gpu-1.31.1.txt: each pin with the sha256 of every Linux wheel PyPI lists for it.

Usage: python3 pin_gpu.py  (reads PyPI's simple index, PEP 691 JSON; prints requirement lines)
"""
import json
import urllib.request

# onnxruntime-gpu 1.31.1 (built with CUDA 13.0) declares, in its wheel METADATA:
#   extra "cuda":  nvidia-cuda-nvrtc~=13.0, nvidia-cuda-runtime~=13.0, nvidia-cufft~=12.0, nvidia-curand~=10.0
#   extra "cudnn": nvidia-cudnn-cu13~=9.0
# and transitively nvidia-cudnn-cu13 -> nvidia-cublas, nvidia-cufft -> nvidia-nvjitlink (unpinned).
# CUDA components: the CUDA 13.0 Update 2 release (the toolkit the wheel was built with); cuDNN: the newest 9.x.
PINS = [
    ("nvidia-cuda-runtime", "13.0.96"),
    ("nvidia-cublas", "13.1.0.3"),
    ("nvidia-nvjitlink", "13.0.88"),
    ("nvidia-cuda-nvrtc", "13.0.88"),
    ("nvidia-curand", "10.4.0.35"),
    ("nvidia-cufft", "12.0.0.61"),
    ("nvidia-cudnn-cu13", "9.28.1.4"),
]

for name, version in PINS:
    req = urllib.request.Request(f"https://pypi.org/simple/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    files = json.load(urllib.request.urlopen(req))["files"]
    wheels = [f for f in files if f["filename"].endswith(".whl") and f["filename"].split("-")[1] == version and "linux" in f["filename"]]
    assert wheels, (name, version)
    lines = [f"{name}=={version}"] + [f"    --hash=sha256:{f['hashes']['sha256']}" for f in wheels]
    for f in wheels:
        print(f"# {f['filename']} ({f['size'] / 1e6:.0f} MB)")
    print(" \\\n".join(lines))
