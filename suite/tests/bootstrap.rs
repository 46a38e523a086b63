//! The ONNX Runtime bootstrap installs only what its lock file vets, and the CUDA flavour preloads the NVIDIA
//! libraries of its wheels. Nothing here installs the CUDA wheels (1.6 GB) or needs a GPU.

use std::fs;
use std::path::{Path, PathBuf};

use mobius_conformance::context::Places;
use mobius_conformance::run::bootstrap::{CUDA_LIBRARIES, Flavor, install_locked, locate, preload_cuda_libraries};

/// `(name, version, sha256 hashes)` of every requirement in a lock, continuation lines joined.
fn requirements(lock: &str) -> Vec<(String, String, Vec<String>)> {
    let joined = lock.lines().filter(|l| !l.trim_start().starts_with('#')).collect::<Vec<_>>().join("\n").replace("\\\n", " ");
    joined
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut words = line.split_whitespace();
            let pin = words.next().unwrap();
            let (name, version) = pin.split_once("==").unwrap_or_else(|| panic!("not pinned with ==: {line}"));
            let hashes: Vec<String> =
                words.map(|w| w.strip_prefix("--hash=sha256:").unwrap_or_else(|| panic!("{name}: unexpected `{w}`")).to_string()).collect();
            (name.to_string(), version.to_string(), hashes)
        })
        .collect()
}

#[test]
fn locks_pin_the_version_and_hash_every_wheel() {
    for (flavor, min_wheels) in [(Flavor::Cpu, 20), (Flavor::Gpu, 10)] {
        let reqs = requirements(flavor.lock());
        assert_eq!(reqs[0].0, flavor.package(), "the runtime comes first (install errors name it)");
        assert_eq!(reqs[0].1, "1.31.1");
        assert!(reqs[0].2.len() >= min_wheels, "{}: {} hashes", flavor.package(), reqs[0].2.len());
        for (name, version, hashes) in &reqs {
            assert!(!version.is_empty() && !version.contains('*'), "{name}=={version}");
            assert!(!hashes.is_empty(), "{name}: no hash");
            for h in hashes {
                assert!(h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()), "{name}: bad sha256 {h}");
            }
            let mut unique = hashes.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), hashes.len(), "{name}: a hash twice");
        }
    }
}

/// With `--no-deps` the GPU lock must name every wheel the CUDA provider needs: onnxruntime-gpu's `cuda` and `cudnn`
/// extras and what those require in turn, at majors that satisfy them and match the libraries preloaded.
#[test]
fn the_gpu_lock_holds_every_nvidia_wheel_the_cuda_provider_needs() {
    let reqs = requirements(Flavor::Gpu.lock());
    let version =
        |name: &str| reqs.iter().find(|r| r.0 == name).map(|r| r.1.clone()).unwrap_or_else(|| panic!("{name} is not in the GPU lock"));
    // (wheel, major its onnxruntime-gpu requirement or dependent allows, the library of CUDA_LIBRARIES it ships)
    let wheels = [
        ("nvidia-cuda-runtime", "13", "libcudart.so.13"),
        ("nvidia-cuda-nvrtc", "13", "libnvrtc.so.13"),
        ("nvidia-cufft", "12", "libcufft.so.12"),
        ("nvidia-curand", "10", "libcurand.so.10"),
        ("nvidia-cudnn-cu13", "9", "libcudnn.so.9"),
        ("nvidia-cublas", "13", "libcublas.so.13"),
        ("nvidia-nvjitlink", "13", "libnvJitLink.so.13"),
    ];
    for (wheel, major, lib) in wheels {
        let v = version(wheel);
        assert_eq!(v.split('.').next(), Some(major), "{wheel}=={v}: expected {major}.x");
        assert!(CUDA_LIBRARIES.contains(&lib), "{lib} (from {wheel}) is not preloaded");
    }
    assert_eq!(reqs.len(), wheels.len() + 1, "unexpected wheels in the GPU lock: {:?}", reqs.iter().map(|r| &r.0).collect::<Vec<_>>());
    let at = |lib: &str| CUDA_LIBRARIES.iter().position(|l| *l == lib).unwrap();
    assert!(at("libcublasLt.so.13") < at("libcublas.so.13"), "cuBLAS needs cuBLASLt loaded first");
    assert!(at("libnvJitLink.so.13") < at("libcufft.so.12"));
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
    let e = install_locked(&lock, &dest, &Places::default()).unwrap_err().to_string();
    assert!(e.contains("--require-hashes") && e.to_lowercase().contains("hash"), "{e}");
    assert!(!dest.exists(), "nothing half-installed is left behind");
}

/// A fresh site-packages-like tree: `<root>/onnxruntime/capi/libonnxruntime.so.1.31.1` (a stand-in file).
fn fake_tree(tag: &str) -> (PathBuf, PathBuf) {
    let root = std::env::temp_dir().join(format!("mobius-preload-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    let capi = root.join("onnxruntime/capi");
    fs::create_dir_all(&capi).unwrap();
    let lib = capi.join("libonnxruntime.so.1.31.1");
    fs::write(&lib, b"stand-in").unwrap();
    (root, lib)
}

fn put(root: &Path, rel: &str, bytes: &[u8]) -> PathBuf {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn no_nvidia_libraries_means_nothing_preloaded_and_no_error() {
    let (root, lib) = fake_tree("none");
    assert_eq!(preload_cuda_libraries(&lib, &Places::default()).unwrap(), Vec::<PathBuf>::new(), "no nvidia/ folder");
    // A folder with only files the preload does not take: interposers, cuDNN's sub-libraries, static archives.
    put(&root, "nvidia/cu13/lib/libnvblas.so.13", b"not a library");
    put(&root, "nvidia/cu13/lib/libcudart_static.a", b"not a library");
    put(&root, "nvidia/cudnn/lib/libcudnn_ops.so.9", b"not a library");
    fs::create_dir_all(root.join("nvidia/cu13/include")).unwrap();
    assert_eq!(preload_cuda_libraries(&lib, &Places::default()).unwrap(), Vec::<PathBuf>::new());
    fs::remove_dir_all(&root).unwrap();
}

/// Decided: a library that is there but does not load is an error naming it (not skipped), since ONNX Runtime would
/// otherwise fail later with a message that names neither the file nor the reason.
#[test]
fn a_library_that_does_not_load_is_an_error_naming_the_file() {
    let (root, lib) = fake_tree("bogus");
    let bogus = put(&root, "nvidia/cu13/lib/libcublas.so.13", b"this is not an ELF file");
    let e = preload_cuda_libraries(&lib, &Places::default()).unwrap_err().to_string();
    assert!(e.contains(&bogus.display().to_string()), "{e}");
    assert!(e.contains("CUDA execution provider"), "{e}");
    fs::remove_dir_all(&root).unwrap();
}

/// Real shared libraries (copies of the CPU wheel's tiny `libonnxruntime_providers_shared.so` under NVIDIA names) load
/// from every `nvidia/*/lib`, in `CUDA_LIBRARIES` order, also when the ONNX Runtime path is a symlink to the tree.
#[test]
fn libraries_load_in_order_from_every_nvidia_lib_folder() {
    let ort = locate(Flavor::Cpu, &Places::default()).expect("the CPU runtime");
    let Ok(shared) = fs::read(ort.with_file_name("libonnxruntime_providers_shared.so")) else {
        eprintln!("skipped: no libonnxruntime_providers_shared.so beside {} to stand in for a CUDA library", ort.display());
        return;
    };
    let (root, lib) = fake_tree("real");
    let cudnn = put(&root, "nvidia/cudnn/lib/libcudnn.so.9", &shared);
    let cudart = put(&root, "nvidia/cu13/lib/libcudart.so.13", &shared);
    assert_eq!(preload_cuda_libraries(&lib, &Places::default()).unwrap(), vec![cudart.clone(), cudnn.clone()]);

    // ORT_DYLIB_PATH may name a link to the library: the tree is found beside the file it points to.
    #[cfg(unix)]
    {
        let elsewhere = std::env::temp_dir().join(format!("mobius-preload-link-{}", std::process::id()));
        let _ = fs::remove_dir_all(&elsewhere);
        fs::create_dir_all(&elsewhere).unwrap();
        let link = elsewhere.join("libonnxruntime.so");
        std::os::unix::fs::symlink(&lib, &link).unwrap();
        assert_eq!(preload_cuda_libraries(&link, &Places::default()).unwrap().len(), 2);
        fs::remove_dir_all(&elsewhere).unwrap();
    }
    fs::remove_dir_all(&root).unwrap();
}
