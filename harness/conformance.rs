//! `cargo test -p harness --test conformance`: the conformance suite over `cases/`.

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let trials = harness::trials(&harness::suite_root());
    libtest_mimic::run(&args, trials).exit();
}
