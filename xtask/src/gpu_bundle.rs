//! `cargo xtask gpu-bundle --out DIR`: everything an air-gapped GPU runner needs to run `gpu-check`, built on this
//! machine, in parts small enough to carry one at a time. The runner this serves has no network and no Rust
//! toolchain, receives files in parts of at most 64 MiB, and has PyTorch with the CUDA 13 NVIDIA wheels (cuBLAS,
//! cuDNN 9, cuFFT, cuRAND, NVRTC, nvJitLink) but a CPU-only `onnxruntime`.
//!
//! The bundle, one gzip'd tar split into `bundle.tar.gz.part-NNN` files of at most `--part-mib` MiB (60 by default),
//! with `MANIFEST.sha256` (each part's sha256 and the whole archive's) and `run.sh`, holds:
//! - `bin/`: xtask (whose `gpu-check` and `ci` run the trials in-process) and the conformance harness, release builds
//!   (or the executables `--bin-dir` names);
//! - `ort/onnxruntime/`: ONNX Runtime 1.31.1 from the hash-locked wheel, `onnxruntime-gpu` (`--flavor gpu`, the
//!   default) or the CPU build (`--flavor cpu`); the NVIDIA libraries its CUDA provider loads are the runner's own
//!   (the `nvidia` package PyTorch installed), which `run.sh` checks file by file, or, with `--nvidia`, the lock's
//!   wheels (about 1.6 GB more);
//! - `target/onnxruntime-genai/`: the onnxruntime-genai wheel of the same flavour (`onnxruntime-genai-cuda` for
//!   `gpu`), installed from its lock, where the genai levels look for it;
//! - `suite/`: a suite root, the repository's `cases/`, `fixtures/`, `goldens/` and `tests/data/`, and with `--real`
//!   the real tier's built packages and data (`target/real`, without the reference weights the trials never read).
//!
//! `run.sh` checks every part against the manifest, unpacks once, points `ORT_DYLIB_PATH` at the bundled library and
//! runs `xtask gpu-check --root <suite>` on CUDA, or, with `MOBIUS_TEST_DEVICE=cpu`, `xtask ci` on the CPU (how the
//! bundle is tested on a machine without a GPU); its arguments go to that command.

use std::path::{Path, PathBuf};
use std::process::Command;

use mobius_conformance::digest::sha256_hex;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::run::bootstrap::{self, Flavor, ORT_VERSION};
use mobius_conformance::run::genai::library;

/// The most a part may hold: the runner takes files of at most 64 MiB, and a part's name and the manifest travel with it.
pub const MAX_PART_MIB: u64 = 60;

/// What the suite root of a bundle holds: the repository's folders the trials read.
const SUITE_FOLDERS: &[&str] = &["cases", "fixtures", "goldens", "tests/data"];

/// Of the ONNX Runtime wheel's package, what the suite never loads: the Python binding and the TensorRT provider.
fn not_loaded(name: &str) -> bool {
    name.starts_with("onnxruntime_pybind11_state") || name.starts_with("libonnxruntime_providers_tensorrt")
}

/// Of `target/real`, what the trials never read: the reference weights (regen's), the bench's own comparisons' files.
const REAL_LEFT_OUT: &[&str] = &["hf", "wheels", "ct2", "gguf"];

struct Options {
    out: PathBuf,
    flavor: Flavor,
    real: bool,
    nvidia: bool,
    bin_dir: Option<PathBuf>,
    part_mib: u64,
}

fn options(args: &[String]) -> Result<Options, String> {
    let mut o = Options { out: PathBuf::new(), flavor: Flavor::Gpu, real: false, nvidia: false, bin_dir: None, part_mib: MAX_PART_MIB };
    let mut out = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |what: &str| it.next().cloned().ok_or_else(|| format!("gpu-bundle: {a} needs {what}"));
        match a.as_str() {
            "--out" => out = Some(PathBuf::from(value("a directory")?)),
            "--flavor" => {
                o.flavor = match value("gpu or cpu")?.as_str() {
                    "gpu" => Flavor::Gpu,
                    "cpu" => Flavor::Cpu,
                    other => return Err(format!("gpu-bundle: --flavor {other:?}: expected gpu or cpu")),
                }
            }
            "--real" => o.real = true,
            "--nvidia" => o.nvidia = true,
            "--bin-dir" => o.bin_dir = Some(PathBuf::from(value("a directory")?)),
            "--part-mib" => {
                let v = value("a size in MiB")?;
                o.part_mib = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_PART_MIB).contains(n))
                    .ok_or_else(|| format!("gpu-bundle: --part-mib {v:?}: expected a whole number of MiB from 1 to {MAX_PART_MIB}"))?;
            }
            other => return Err(format!("gpu-bundle: unknown option `{other}`")),
        }
    }
    o.out = out.ok_or("gpu-bundle: --out DIR is required")?;
    if o.nvidia && o.flavor == Flavor::Cpu {
        return Err("gpu-bundle: --nvidia brings the CUDA libraries of --flavor gpu; the CPU build loads none".into());
    }
    Ok(o)
}

pub fn gpu_bundle(args: &[String]) -> Result<(), String> {
    let o = options(args)?;
    let repo = workspace_root();
    let staging = o.out.join(".staging");
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(staging.join("bin")).map_err(|e| format!("{}: {e}", staging.display()))?;
    for (name, exe) in binaries(o.bin_dir.as_deref())? {
        copy(&exe, &staging.join("bin").join(name))?;
    }
    let ort = runtime_tree(o.flavor, o.nvidia)?;
    copy_tree_filtered(&ort.join("onnxruntime"), &staging.join("ort/onnxruntime"), &|n| not_loaded(n))?;
    if o.nvidia {
        copy_tree(&ort.join("nvidia"), &staging.join("ort/nvidia"))?;
    }
    // onnxruntime-genai of the same flavour, where the bundled build folder's genai level looks for it (run.sh sets
    // CARGO_TARGET_DIR there): the runner cannot install it.
    let places = &crate::context()?.places;
    let genai = library::installed(library::build_for(o.flavor), places).map_err(|e| format!("gpu-bundle: {e}"))?;
    let name = genai.file_name().expect("an install folder has a name");
    copy_tree(&genai, &staging.join("target/onnxruntime-genai").join(name))?;
    for folder in SUITE_FOLDERS {
        copy_tree(&repo.join(folder), &staging.join("suite").join(folder))?;
    }
    if o.real {
        let real = repo.join("target/real");
        let entries =
            std::fs::read_dir(&real).map_err(|e| format!("{}: {e} (build the real tier first: cargo xtask real)", real.display()))?;
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !REAL_LEFT_OUT.contains(&name.as_str()) {
                copy_tree_filtered(&entry.path(), &staging.join("suite/target/real").join(&name), &|n| REAL_LEFT_OUT.contains(&n))?;
            }
        }
    }
    let library = format!("ort/onnxruntime/capi/libonnxruntime.so.{ORT_VERSION}");
    if !staging.join(&library).is_file() {
        return Err(format!("gpu-bundle: the runtime tree {} has no {library}", ort.display()));
    }
    let parts = pack(&staging, &o.out, o.part_mib)?;
    std::fs::remove_dir_all(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
    std::fs::write(o.out.join("run.sh"), run_script(&library, o.flavor)).map_err(|e| format!("run.sh: {e}"))?;
    set_executable(&o.out.join("run.sh"))?;
    let total: u64 = parts.iter().map(|(_, n)| n).sum();
    println!(
        "gpu-bundle: {} parts of at most {} MiB, {:.1} MiB in all, in {}; on the runner: carry every file of it, then `sh run.sh`",
        parts.len(),
        o.part_mib,
        total as f64 / (1 << 20) as f64,
        o.out.display()
    );
    Ok(())
}

/// The executables bundled, by the names run.sh calls them: `--bin-dir`'s (xtask required, conformance if there),
/// else release builds made here.
fn binaries(bin_dir: Option<&Path>) -> Result<Vec<(&'static str, PathBuf)>, String> {
    if let Some(dir) = bin_dir {
        let xtask = dir.join("xtask");
        if !xtask.is_file() {
            return Err(format!("gpu-bundle: --bin-dir {} holds no `xtask` executable", dir.display()));
        }
        let harness = dir.join("conformance");
        return Ok([("xtask", xtask)].into_iter().chain(harness.is_file().then_some(("conformance", harness))).collect());
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo).args(["build", "--release", "-p", "xtask"]).current_dir(workspace_root()).status();
    if !status.is_ok_and(|s| s.success()) {
        return Err("gpu-bundle: `cargo build --release -p xtask` failed".into());
    }
    let output = Command::new(&cargo)
        .args(["test", "--release", "-p", "harness", "--test", "conformance", "--no-run", "--message-format=json"])
        .current_dir(workspace_root())
        .output()
        .map_err(|e| format!("gpu-bundle: running cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!("gpu-bundle: building the conformance harness failed:\n{}", String::from_utf8_lossy(&output.stderr)));
    }
    let harness = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"]["name"] == "conformance")
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .ok_or("gpu-bundle: cargo named no conformance executable")?;
    // The build folder as the run context names it, the one the runtime's installs go to.
    let target = bootstrap::target_dir(&crate::context()?.places);
    Ok(vec![("xtask", target.join("release/xtask")), ("conformance", harness)])
}

/// The installed wheel tree of ONNX Runtime `flavor` (its `onnxruntime/` package, and `nvidia/` when asked for),
/// installed from the hash-locked requirement: for the GPU build without `--nvidia`, that package's own block of the
/// lock only (the runner brings the NVIDIA libraries).
fn runtime_tree(flavor: Flavor, nvidia: bool) -> Result<PathBuf, String> {
    let ctx = crate::context()?;
    let places = &ctx.places;
    let lock = match (flavor, nvidia) {
        (Flavor::Gpu, false) => requirement_block(flavor.lock(), flavor.package())?,
        _ => flavor.lock().to_string(),
    };
    let name = if nvidia || flavor == Flavor::Cpu { flavor.package().to_string() } else { format!("{}-only", flavor.package()) };
    let tree = bootstrap::target_dir(places).join("onnxruntime").join(format!("{name}-{ORT_VERSION}"));
    let has =
        |t: &Path| t.join(format!("onnxruntime/capi/libonnxruntime.so.{ORT_VERSION}")).is_file() && (!nvidia || t.join("nvidia").is_dir());
    bootstrap::install_once(&format!("{}=={ORT_VERSION}", flavor.package()), &lock, &tree, has, places).map_err(|e| e.to_string())?;
    Ok(tree)
}

/// A requirements lock's block for `package` alone: its `package==version \` line and the hash lines after it.
pub fn requirement_block(lock: &str, package: &str) -> Result<String, String> {
    let lines: Vec<&str> = lock.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with(&format!("{package}==")))
        .ok_or_else(|| format!("gpu-bundle: the lock pins no {package}"))?;
    let end = (start..lines.len()).find(|&i| !lines[i].trim_end().ends_with('\\')).unwrap_or(lines.len() - 1);
    Ok(lines[start..=end].join("\n") + "\n")
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    if let Some(p) = to.parent() {
        std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    std::fs::copy(from, to).map(|_| ()).map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    copy_tree_filtered(from, to, &|_| false)
}

/// `from` copied to `to`, links followed (a bundle holds files), leaving out the entries whose name `skip` picks.
fn copy_tree_filtered(from: &Path, to: &Path, skip: &dyn Fn(&str) -> bool) -> Result<(), String> {
    let meta = std::fs::metadata(from).map_err(|e| format!("{}: {e}", from.display()))?;
    if meta.is_file() {
        return copy(from, to);
    }
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    let mut entries: Vec<_> = std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))?.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name();
        if skip(&name.to_string_lossy()) {
            continue;
        }
        copy_tree_filtered(&e.path(), &to.join(&name), skip)?;
    }
    Ok(())
}

/// `staging` as one gzip'd tar, split into parts of at most `part_mib` MiB in `out`, with `MANIFEST.sha256`: each
/// part's sha256 (`sha256sum -c` reads it) and, on a comment line, the whole archive's. Returns the parts and sizes.
fn pack(staging: &Path, out: &Path, part_mib: u64) -> Result<Vec<(String, u64)>, String> {
    for old in std::fs::read_dir(out).map_err(|e| format!("{}: {e}", out.display()))?.filter_map(Result::ok) {
        if old.file_name().to_string_lossy().starts_with("bundle.tar.gz.part-") {
            std::fs::remove_file(old.path()).map_err(|e| format!("{}: {e}", old.path().display()))?;
        }
    }
    let archive = out.join(".bundle.tar.gz");
    let status = Command::new("tar")
        .args(["--sort=name", "--owner=0", "--group=0", "--numeric-owner", "-czf"])
        .arg(&archive)
        .arg("-C")
        .arg(staging)
        .arg(".")
        .status()
        .map_err(|e| format!("gpu-bundle: running tar: {e}"))?;
    if !status.success() {
        return Err(format!("gpu-bundle: tar failed ({status})"));
    }
    let bytes = std::fs::read(&archive).map_err(|e| format!("{}: {e}", archive.display()))?;
    std::fs::remove_file(&archive).map_err(|e| format!("{}: {e}", archive.display()))?;
    let size = (part_mib << 20) as usize;
    let mut manifest = format!("# whole archive: {}  bundle.tar.gz\n", sha256_hex(&bytes));
    let mut parts = Vec::new();
    for (i, chunk) in bytes.chunks(size).enumerate() {
        let name = format!("bundle.tar.gz.part-{i:03}");
        std::fs::write(out.join(&name), chunk).map_err(|e| format!("{name}: {e}"))?;
        manifest.push_str(&format!("{}  {name}\n", sha256_hex(chunk)));
        parts.push((name, chunk.len() as u64));
    }
    std::fs::write(out.join("MANIFEST.sha256"), manifest).map_err(|e| format!("MANIFEST.sha256: {e}"))?;
    Ok(parts)
}

#[cfg(unix)]
fn set_executable(p: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).map_err(|e| format!("{}: {e}", p.display()))
}

#[cfg(not(unix))]
fn set_executable(_: &Path) -> Result<(), String> {
    Ok(())
}

/// The NVIDIA libraries the CUDA provider loads (`bootstrap::CUDA_LIBRARIES`), as run.sh checks them in the runner's
/// own `nvidia` package.
fn run_script(library: &str, flavor: Flavor) -> String {
    let needed = bootstrap::CUDA_LIBRARIES.join(" ");
    let flavor = flavor.package();
    format!(
        r#"#!/bin/sh
# The mobius-conformance GPU bundle ({flavor} {ORT_VERSION}), written by `cargo xtask gpu-bundle`.
#   sh run.sh [ARGS...]      on CUDA: xtask gpu-check --root <suite> ARGS
#   MOBIUS_TEST_DEVICE=cpu sh run.sh [ARGS...]      on the CPU: xtask ci --root <suite> --out <report> ARGS
# Every part is checked against MANIFEST.sha256 first; the archive is unpacked once, into $MOBIUS_BUNDLE_DIR
# (default: ./unpacked), and again only when the parts change.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dest=${{MOBIUS_BUNDLE_DIR:-$here/unpacked}}
cd "$here"
missing=$(grep -v '^#' MANIFEST.sha256 | while read -r _ part; do [ -f "$part" ] || echo "$part"; done)
if [ -n "$missing" ]; then
  echo "run.sh: parts missing (carry every file of the bundle): $missing" >&2
  exit 2
fi
if ! grep -v '^#' MANIFEST.sha256 | sha256sum -c --quiet - >&2; then
  echo "run.sh: a part differs from MANIFEST.sha256 (above): carry it again" >&2
  exit 2
fi
whole=$(sed -n 's/^# whole archive: \([0-9a-f]*\).*/\1/p' MANIFEST.sha256)
if [ "$(cat "$dest/.bundle-sha256" 2>/dev/null || true)" != "$whole" ]; then
  rm -rf "$dest"
  mkdir -p "$dest"
  got=$(cat bundle.tar.gz.part-* | tee "$dest/.bundle.tar.gz" | sha256sum | cut -d' ' -f1)
  if [ "$got" != "$whole" ]; then
    echo "run.sh: the parts join to sha256 $got, not the manifest's $whole" >&2
    exit 2
  fi
  tar -xzf "$dest/.bundle.tar.gz" -C "$dest"
  rm -f "$dest/.bundle.tar.gz"
  echo "$whole" > "$dest/.bundle-sha256"
fi
export ORT_DYLIB_PATH="$dest/{library}"
# The bundle is the whole installation: its build folder holds onnxruntime-genai (bundled) and what a trial caches.
export CARGO_TARGET_DIR="$dest/target"
device=${{MOBIUS_TEST_DEVICE:-cuda}}
if [ "$device" = cpu ]; then
  exec "$dest/bin/xtask" ci --root "$dest/suite" --out "$dest/report" "$@"
fi
if [ ! -d "$dest/ort/nvidia" ]; then
  # The runner's own NVIDIA libraries (PyTorch's CUDA 13 wheels), where ONNX Runtime's loader looks for them.
  nvidia=$(${{PYTHON:-python3}} -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
  if [ -z "$nvidia" ]; then
    echo "run.sh: no NVIDIA libraries: this Python has no \`nvidia\` package; make the bundle with --nvidia" >&2
    exit 3
  fi
  for lib in {needed}; do
    if ! ls "$nvidia"/*/lib/"$lib" >/dev/null 2>&1; then
      echo "run.sh: $nvidia has no $lib, which ONNX Runtime {ORT_VERSION}'s CUDA provider loads; make the bundle with --nvidia" >&2
      exit 3
    fi
  done
  ln -sfn "$nvidia" "$dest/ort/nvidia"
fi
exec "$dest/bin/xtask" gpu-check --root "$dest/suite" "$@"
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_lock_s_own_block_is_its_requirement_and_hashes_only() {
        let block = requirement_block(Flavor::Gpu.lock(), "onnxruntime-gpu").unwrap();
        assert!(block.starts_with("onnxruntime-gpu==1.31.1 \\\n"), "{block}");
        assert!(block.lines().skip(1).all(|l| l.trim_start().starts_with("--hash=sha256:")), "{block}");
        assert!(!block.contains("nvidia"), "{block}");
        assert!(requirement_block(Flavor::Gpu.lock(), "torch").unwrap_err().contains("pins no torch"));
    }

    #[test]
    fn options_are_checked_naming_the_flag() {
        let args = |s: &[&str]| s.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        assert!(options(&args(&[])).err().unwrap().contains("--out DIR is required"));
        assert!(options(&args(&["--out", "x", "--part-mib", "64"])).err().unwrap().contains("from 1 to 60"));
        assert!(options(&args(&["--out", "x", "--flavor", "tpu"])).err().unwrap().contains("expected gpu or cpu"));
        assert!(options(&args(&["--out", "x", "--flavor", "cpu", "--nvidia"])).err().unwrap().contains("loads none"));
        let o = options(&args(&["--out", "x", "--flavor", "cpu", "--part-mib", "8", "--real"])).unwrap();
        assert_eq!((o.flavor, o.part_mib, o.real, o.nvidia), (Flavor::Cpu, 8, true, false));
    }
}
