//! `cargo test -p harness --test conformance`: the conformance suite over `cases/`, each trial in the harness's
//! trial worker (`harness::worker`), so that a runtime crash costs its own trial.

fn main() {
    harness::main_with(std::env::args().collect())
}
