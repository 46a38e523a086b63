"""lm-evaluation-harness itself on the suite's corner cases and on lm-eval's own task files: the answers the suite's
gate tests compare with (`cargo xtask reference-data --only lmeval-corners`, `--only lmeval-taskfiles`). The task
YAMLs beside them are the arith tasks as lm-eval runs them (`cargo xtask bench`'s lm-eval peer).
"""
