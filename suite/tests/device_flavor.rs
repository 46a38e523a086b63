//! The device setting chooses the ONNX Runtime build, whichever trial starts first: with `MOBIUS_TEST_DEVICE=cuda`
//! a run loads the CUDA build even when a `cpu`-flavour trial makes the first session.
//!
//! No GPU is needed: each order of trials runs in a child process (the build is loaded once per process) whose
//! `target/` has two ONNX Runtime trees, the CPU one and a stand-in for the CUDA one (both the CPU library, so every
//! session can be made); the child reports which file it loaded.

use std::path::{Path, PathBuf};
use std::process::Command;

use mobius_conformance::plan::suite::Suite;
use mobius_conformance::run::bootstrap::{self, Flavor, ORT_VERSION};
use mobius_conformance::run::runtime::{self};
use mobius_conformance::vocab::Device;

const ORDER: &str = "MOBIUS_FLAVOR_TEST_ORDER";

#[test]
fn each_device_maps_to_its_build() {
    assert_eq!(runtime::flavor_for(Device::Cpu), Flavor::Cpu);
    assert_eq!(runtime::flavor_for(Device::Cuda { id: 0 }), Flavor::Gpu);
    assert_eq!(runtime::flavor_for(Device::Cuda { id: 3 }), Flavor::Gpu);
}

fn tree(target: &Path, flavor: Flavor) -> PathBuf {
    target.join("onnxruntime").join(format!("{}-{ORT_VERSION}", flavor.package()))
}

/// Runs the trials of one order in a child process with `MOBIUS_TEST_DEVICE=cuda`; returns the library it loaded.
fn loaded_in_child(target: &Path, order: &str) -> PathBuf {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_runs_trials_in_the_given_order", "--include-ignored", "--nocapture", "--test-threads", "1"])
        .env(ORDER, order)
        .env("MOBIUS_TEST_DEVICE", "cuda")
        .env("CARGO_TARGET_DIR", target)
        .env_remove("ORT_DYLIB_PATH")
        .env_remove("MOBIUS_TEST_EP")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child ({order}) failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // libtest prints `test <name> ... ` on the same line, before the child's own output.
    let line = stdout
        .lines()
        .find_map(|l| l.find("LOADED ").map(|i| l[i + "LOADED ".len()..].trim()))
        .unwrap_or_else(|| panic!("child printed no LOADED line:\n{stdout}"));
    PathBuf::from(line)
}

#[test]
fn the_device_chooses_the_build_whatever_trial_starts_first() {
    let places = mobius_conformance::context::Places::default();
    let real = bootstrap::locate(Flavor::Cpu, &places).expect("the CPU build of ONNX Runtime");
    struct Removed(PathBuf);
    impl Drop for Removed {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let target = bootstrap::target_dir(&places).join(format!("flavor-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&target);
    let _cleanup = Removed(target.clone());
    for flavor in [Flavor::Cpu, Flavor::Gpu] {
        let capi = tree(&target, flavor).join("onnxruntime/capi");
        std::fs::create_dir_all(&capi).unwrap();
        let lib = capi.join(real.file_name().unwrap());
        if std::fs::hard_link(&real, &lib).is_err() {
            std::fs::copy(&real, &lib).unwrap();
        }
        // The stamp that makes a CUDA tree count as installed from today's lock.
        std::fs::write(tree(&target, flavor).join(".mobius-lock.txt"), flavor.lock()).unwrap();
    }
    let gpu_tree = tree(&target, Flavor::Gpu);
    for order in ["cpu-first", "default-first", "shuffled-1", "shuffled-2", "shuffled-3"] {
        let lib = loaded_in_child(&target, order);
        assert!(lib.starts_with(&gpu_tree), "{order}: MOBIUS_TEST_DEVICE=cuda loaded {}, not the CUDA build", lib.display());
    }
}

/// The child: qwen3-tiny's trials in the order `MOBIUS_FLAVOR_TEST_ORDER` names, on the device the environment names.
#[test]
#[ignore = "run by the_device_chooses_the_build_whatever_trial_starts_first, in a child process"]
fn child_runs_trials_in_the_given_order() {
    let order = std::env::var(ORDER).expect("run by the parent test");
    let suite = Suite::open(&mobius_conformance::paths::workspace_root());
    let mut plan: Vec<_> = mobius_conformance::trial::matrix::plan(&suite)
        .into_iter()
        .filter(|t| t.name.starts_with("qwen3-tiny/text/") && t.name.contains("/f32/"))
        .collect();
    match order.as_str() {
        "cpu-first" => plan.sort_by_key(|t| !t.name.contains("/cpu/")),
        "default-first" => plan.sort_by_key(|t| !t.name.contains("/default/")),
        seeded => {
            // A fixed shuffle per seed (no RNG crate needed): sort by a hash of (seed, name).
            use std::hash::{Hash, Hasher};
            plan.sort_by_key(|t| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (seeded, &t.name).hash(&mut h);
                h.finish()
            });
        }
    }
    // The parent's settings: the device, and the build folder whose two trees stand in for the builds.
    let ctx = mobius_conformance::context::RunContext::from_env().unwrap();
    assert_eq!(ctx.device, Device::Cuda { id: 0 });
    for spec in plan.iter().take(2) {
        // The outcome does not matter here (CUDA trials fail on this CPU library); the library loaded does.
        let _ = mobius_conformance::trial::run(&suite, spec, &ctx);
    }
    println!("LOADED {}", runtime::loaded_library().expect("a session was made").display());
}
