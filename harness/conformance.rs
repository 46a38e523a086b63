//! `cargo test -p harness --test conformance`: the conformance suite over `cases/`.

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let root = harness::suite_root();
    if let Err(e) = harness::check(&args, &root) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
    let trials = harness::trials(&root);
    libtest_mimic::run(&args, trials).exit();
}
