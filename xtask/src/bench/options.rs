//! The bench's command line: what to measure, how often, and where.

use std::path::PathBuf;

use mobius_conformance::plan::suite::Suite;

pub(super) struct Options {
    pub(super) json: Option<PathBuf>,
    pub(super) repeats: usize,
    pub(super) pairs: usize,
    pub(super) tokens: usize,
    pub(super) skip_python: bool,
    pub(super) only: Vec<String>,
    /// The suite root the overhead and scaling sections run (`--root`); this repository when `None`.
    pub(super) root: Option<PathBuf>,
}

impl Options {
    pub(super) fn runs(&self, section: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == section)
    }
}

/// The sections, in the order they run and print.
const SECTIONS: [&str; 8] = ["decode", "prefill", "gate", "overhead", "scaling", "real", "gate-real", "speech"];

pub(super) fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options { json: None, repeats: 5, pairs: 15, tokens: 128, skip_python: false, only: Vec::new(), root: None };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => o.json = Some(PathBuf::from(it.next().ok_or("--json needs a file")?)),
            "--repeats" => o.repeats = it.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0).ok_or("--repeats needs a count")?,
            "--tokens" => o.tokens = it.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0).ok_or("--tokens needs a count")?,
            "--pairs" => o.pairs = it.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0).ok_or("--pairs needs a count")?,
            "--skip-python" => o.skip_python = true,
            "--root" => {
                let dir = PathBuf::from(it.next().ok_or("--root needs a suite root")?);
                Suite::open(&dir).check("bench: --root").map_err(|e| e.to_string())?;
                o.root = Some(std::fs::canonicalize(&dir).map_err(|e| format!("bench: --root {}: {e}", dir.display()))?);
            }
            "--only" => {
                let list = it.next().ok_or("--only needs a list of sections")?;
                for section in list.split(',').filter(|s| !s.is_empty()) {
                    if !SECTIONS.contains(&section) {
                        return Err(format!("bench: --only: unknown section `{section}` (sections: {})", SECTIONS.join(", ")));
                    }
                    o.only.push(section.to_string());
                }
            }
            other => return Err(format!("bench: unknown option `{other}`")),
        }
    }
    Ok(o)
}
