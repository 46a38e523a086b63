//! `include:` in lm-eval's and lmms-eval's task files: a file names another, whose keys it takes wherever it has none
//! of its own. One reader for both formats; each format lists its keys once ([`Included::inherit`]).

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::error::{Error, Result, bail};

/// A task file's keys, as far as `include:` goes.
pub trait Included: DeserializeOwned {
    /// This file's `include:`, taken out.
    fn take_include(&mut self) -> Option<String>;
    /// Every key this file lacks, taken from the file it includes.
    fn inherit(&mut self, parent: Self);
}

/// Fills each listed key the child lacks from the parent: `inherit!(child, parent; key, ...)`.
macro_rules! inherit {
    ($child:ident, $parent:ident; $($f:ident),*) => { $( if $child.$f.is_none() { $child.$f = $parent.$f; } )* };
}
pub(crate) use inherit;

/// Reads a task file with its `include:` chain (the included file first, this file's keys over it); a chain that
/// loops, or runs past 16 files, is refused.
pub fn load_chain<C: Included>(path: &Path, shown: &str) -> Result<C> {
    let mut seen = Vec::new();
    chain(path, shown, &mut seen)
}

/// The files [`load_chain`] reads for `path`, in order, the file itself first: where the loader would refuse the
/// chain (a file that does not read, a loop), the list ends there.
pub fn chain_files<C: Included>(path: &Path) -> Vec<PathBuf> {
    let mut seen = Vec::new();
    let _ = chain::<C>(path, "", &mut seen);
    seen
}

/// The most files one chain reads, the task file included.
const MAX_CHAIN: usize = 16;

fn chain<C: Included>(path: &Path, shown: &str, seen: &mut Vec<PathBuf>) -> Result<C> {
    if seen.contains(&path.to_path_buf()) {
        bail!("{shown}: `include:` loops back to {}", path.display());
    }
    if seen.len() >= MAX_CHAIN {
        bail!("{shown}: the `include:` chain runs past {MAX_CHAIN} files (at {})", path.display());
    }
    seen.push(path.to_path_buf());
    let text = std::fs::read_to_string(path).map_err(|e| Error::new(format!("{shown}: {e}")))?;
    let mut c: C = serde_saphyr::from_str(&text).map_err(|e| Error::new(format!("{shown}: {e}")))?;
    if let Some(inc) = c.take_include() {
        let inc_path = path.parent().unwrap_or(Path::new(".")).join(&inc);
        let parent = chain(&inc_path, &format!("{shown}: include `{inc}`"), seen)?;
        c.inherit(parent);
    }
    Ok(c)
}
