//! The ONNX Runtime bootstrap installs only what its lock file vets.

use mobius_conformance::bootstrap::{Flavor, install_locked};

#[test]
fn locks_pin_the_version_and_hash_every_wheel() {
    for (flavor, min_wheels) in [(Flavor::Cpu, 20), (Flavor::Gpu, 10)] {
        let lock = flavor.lock();
        assert!(lock.contains(&format!("{}==1.31.1", flavor.package())), "{lock}");
        let hashes = lock.lines().filter(|l| l.trim_start().starts_with("--hash=sha256:")).count();
        assert!(hashes >= min_wheels, "{}: {hashes} hashes", flavor.package());
    }
}

#[test]
fn a_tampered_hash_is_refused() {
    let dest = std::env::temp_dir().join(format!("mobius-bootstrap-tampered-{}", std::process::id()));
    // Every real hash replaced: the wheel pip finds cannot match.
    let lock: String = Flavor::Cpu
        .lock()
        .lines()
        .map(|l| match l.split_once("--hash=sha256:") {
            Some((head, _)) => format!("{head}--hash=sha256:{}{}", "0".repeat(64), if l.ends_with('\\') { " \\" } else { "" }),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let e = install_locked(&lock, &dest).unwrap_err().to_string();
    assert!(e.contains("--require-hashes") && e.to_lowercase().contains("hash"), "{e}");
    assert!(!dest.exists(), "nothing half-installed is left behind");
}
