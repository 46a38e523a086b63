"""The reference side of the conformance suite: Hugging Face transformers, the mobius builder and ONNX Runtime's
quantizer, driven by `cargo xtask` as `python -m reference.<module>` (xtask puts `xtask/` on PYTHONPATH).

Nothing here is run by hand: every entry point is a `cargo xtask` task (`cargo xtask` lists them). `common` holds
what every module shares (the environment preamble, hashing, logging, the EOS rule).
"""
