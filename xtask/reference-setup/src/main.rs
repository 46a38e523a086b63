//! `reference-setup [cargo xtask real's options]`: the real tier (the reference venv first), as `cargo xtask real`
//! builds it, from a binary that compiles in seconds (`.ci/run` runs it beside the workspace's build).

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match reference_setup::real::real(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
