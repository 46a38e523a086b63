//! `cargo xtask <task>`: the project's automation, in plain Rust (matklad's cargo-xtask).
//!
//! The reference side (Hugging Face transformers, the mobius builder) is Python and lives only here: xtask keeps a
//! venv from the pinned `xtask/reference/requirements.txt` and drives the scripts beside it. `cargo test` never
//! needs it.

mod ci;
mod regen;
mod venv;

use std::process::ExitCode;

const HELP: &str = "\
cargo xtask <task> [options]

Tasks:
  fixtures [--only NAME ...]
      Rebuild the tiny fixtures under fixtures/ (tokenizer, seeded Hugging Face models, ONNX packages built
      with the mobius builder in the `default` and `cpu` flavours). Offline and deterministic.

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

  venv
      Create or update the reference venv (target/reference-venv, or MOBIUS_REFERENCE_VENV) and print its path.

Run the suite itself with `cargo test -p harness --test conformance`.
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((task, rest)) = args.split_first() else {
        print!("{HELP}");
        return ExitCode::SUCCESS;
    };
    let result = match task.as_str() {
        "fixtures" => regen::fixtures(rest),
        "regen-goldens" => regen::regen_goldens(rest),
        "ci" => ci::ci(rest),
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
