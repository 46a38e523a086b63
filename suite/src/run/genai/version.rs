//! The onnxruntime-genai release the suite is pinned to, and which release a library is, read from its wheel's
//! metadata: the suite calls through signatures transcribed from one release's header, so it runs no other.

use std::path::Path;

use crate::error::{Result, bail};

/// The onnxruntime-genai release the suite is pinned to.
pub const GENAI_VERSION: &str = "0.18.0";

/// Which build of the release: the CPU wheel (`onnxruntime-genai`) or the CUDA one (`onnxruntime-genai-cuda`), both
/// with the same C API in the same `onnxruntime_genai/libonnxruntime-genai.so`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GenaiBuild {
    Cpu,
    Cuda,
}

impl GenaiBuild {
    /// The wheel's name on PyPI.
    pub fn wheel(self) -> &'static str {
        match self {
            GenaiBuild::Cpu => "onnxruntime-genai",
            GenaiBuild::Cuda => "onnxruntime-genai-cuda",
        }
    }

    /// The requirement with the hash of every wheel PyPI publishes for it.
    pub fn lock(self) -> &'static str {
        match self {
            GenaiBuild::Cpu => include_str!("../../../locks/onnxruntime-genai-0.18.0.txt"),
            GenaiBuild::Cuda => include_str!("../../../locks/onnxruntime-genai-cuda-0.18.0.txt"),
        }
    }
}

/// The build and version of the onnxruntime-genai wheel a library came from: the `Name:` and `Version:` of the
/// `.dist-info/METADATA` beside its package folder (`site-packages/onnxruntime_genai/libonnxruntime-genai.so` and
/// `site-packages/onnxruntime_genai[_cuda]-<v>.dist-info/`). The library itself exports neither.
pub(super) fn wheel_version(library: &Path) -> Option<(GenaiBuild, String)> {
    let site = library.parent()?.parent()?;
    // The wheel's own dist-info, whose METADATA names one of the two builds; two of them (a leftover install, or both
    // builds in one folder) say nothing certain.
    let versions: Vec<(GenaiBuild, String)> = std::fs::read_dir(site)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("onnxruntime_genai") && n.ends_with(".dist-info")))
        .filter_map(|d| {
            let text = std::fs::read_to_string(d.join("METADATA")).ok()?;
            let field = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)).map(|v| v.trim().to_string());
            let name = field("Name:")?.replace('_', "-");
            let build = [GenaiBuild::Cpu, GenaiBuild::Cuda].into_iter().find(|b| name.eq_ignore_ascii_case(b.wheel()))?;
            Some((build, field("Version:")?))
        })
        .collect();
    match &versions[..] {
        [one] => Some(one.clone()),
        _ => None,
    }
}

/// The library must be the pinned release: the C API signatures below are transcribed from its header, and a call
/// through a changed signature is undefined behaviour, not an error.
pub(super) fn check_version(library: &Path, version: Option<&str>) -> Result<()> {
    match version {
        Some(v) if v == GENAI_VERSION => Ok(()),
        Some(v) => bail!(
            "{} is onnxruntime-genai {v}, but the suite binds the C API of {GENAI_VERSION} (its pin): install \
             onnxruntime-genai=={GENAI_VERSION}, or unset GENAI_DYLIB_PATH to use the pinned wheel",
            library.display()
        ),
        None => bail!(
            "{}: no single onnxruntime_genai-*.dist-info/METADATA beside its package folder says which onnxruntime-genai \
             release it is, and the suite binds the C API of {GENAI_VERSION} only: point GENAI_DYLIB_PATH at the \
             library inside an installed onnxruntime-genai=={GENAI_VERSION} wheel \
             (site-packages/onnxruntime_genai/libonnxruntime-genai.so), or unset it",
            library.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// A site-packages folder holding `onnxruntime_genai/libonnxruntime-genai.so` and, when given, the wheel's
    /// dist-info at `version`.
    fn site(tag: &str, version: Option<&str>) -> PathBuf {
        let root = std::env::temp_dir().join(format!("mobius-genai-version-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("onnxruntime_genai")).unwrap();
        std::fs::write(root.join("onnxruntime_genai/libonnxruntime-genai.so"), b"").unwrap();
        if let Some(v) = version {
            let info = root.join(format!("onnxruntime_genai-{v}.dist-info"));
            std::fs::create_dir_all(&info).unwrap();
            std::fs::write(info.join("METADATA"), format!("Metadata-Version: 2.1\nName: onnxruntime-genai\nVersion: {v}\n")).unwrap();
        }
        root.join("onnxruntime_genai/libonnxruntime-genai.so")
    }

    #[test]
    fn the_library_must_come_from_the_pinned_wheel() {
        let pinned = site("pinned", Some(GENAI_VERSION));
        assert_eq!(wheel_version(&pinned), Some((GenaiBuild::Cpu, GENAI_VERSION.to_string())));
        assert!(check_version(&pinned, wheel_version(&pinned).map(|v| v.1).as_deref()).is_ok());

        let other = site("other", Some("0.17.1"));
        let e = check_version(&other, wheel_version(&other).map(|v| v.1).as_deref()).unwrap_err().to_string();
        assert!(e.contains("is onnxruntime-genai 0.17.1") && e.contains(&format!("C API of {GENAI_VERSION}")), "{e}");

        let bare = site("bare", None);
        assert_eq!(wheel_version(&bare), None);
        // A leftover second install says nothing certain.
        let two = site("two", Some(GENAI_VERSION));
        let info = two.parent().unwrap().parent().unwrap().join("onnxruntime_genai-0.17.1.dist-info");
        std::fs::create_dir_all(&info).unwrap();
        std::fs::write(info.join("METADATA"), "Name: onnxruntime-genai\nVersion: 0.17.1\n").unwrap();
        assert_eq!(wheel_version(&two), None);
        // The CUDA build's wheel names itself so.
        let cuda = site("cuda", None);
        let info = cuda.parent().unwrap().parent().unwrap().join(format!("onnxruntime_genai_cuda-{GENAI_VERSION}.dist-info"));
        std::fs::create_dir_all(&info).unwrap();
        std::fs::write(info.join("METADATA"), format!("Name: onnxruntime-genai-cuda\nVersion: {GENAI_VERSION}\n")).unwrap();
        assert_eq!(wheel_version(&cuda), Some((GenaiBuild::Cuda, GENAI_VERSION.to_string())));
        let e = check_version(&bare, None).unwrap_err().to_string();
        assert!(e.contains("dist-info/METADATA") && e.contains("GENAI_DYLIB_PATH"), "{e}");
        for p in [pinned, other, bare, two, cuda] {
            let _ = std::fs::remove_dir_all(p.parent().unwrap().parent().unwrap());
        }
    }
}
