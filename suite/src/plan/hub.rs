//! Packages on the Hugging Face Hub: `hf://<org>/<repo>[@<revision>][/<subfolder>]`, resolved through the local
//! hub cache, found as Python's `huggingface_hub` finds it (see [`cache_dir`]), so both read and fill the same one.
//!
//! Resolution is offline by default: the suite reads what `hf download` (or an earlier run) left in the
//! cache. Downloading is allowed only when the suite is built with the `hub-download` feature, `MOBIUS_HF_DOWNLOAD=1`
//! is set and `HF_HUB_OFFLINE` is not `1`; then the subfolder's files are fetched into the same cache.

use std::fmt;
use std::path::{Path, PathBuf};

use hf_hub::{Cache, Repo, RepoType};

use crate::context::Hub;
use crate::error::{Error, Result, bail};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubRef {
    pub repo: String,
    pub revision: String,
    pub subfolder: String,
}

impl fmt::Display for HubRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "hf://{}@{}", self.repo, self.revision)?;
        if !self.subfolder.is_empty() {
            write!(f, "/{}", self.subfolder)?;
        }
        Ok(())
    }
}

impl HubRef {
    /// `None` when `s` is not an `hf://` reference; an error when it is one but malformed.
    pub fn parse(s: &str) -> Option<Result<HubRef>> {
        let rest = s.strip_prefix("hf://")?;
        let mut parts = rest.splitn(3, '/');
        let (Some(org), Some(repo_rev)) = (parts.next(), parts.next()) else {
            return Some(Err(Error::new(format!("{s:?}: expected hf://<org>/<repo>[@<revision>][/<subfolder>]"))));
        };
        let subfolder = parts.next().unwrap_or("").trim_end_matches('/').to_string();
        let (repo, revision) = repo_rev.split_once('@').unwrap_or((repo_rev, "main"));
        // Each part becomes a path in the cache: none may be absolute, climb, or hide a separator. The Hub's own
        // rule for ids (and git's for refs) goes further: no `..` or `--` inside, no `.` or `-` at either end.
        let name_ok = |n: &str| {
            !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                && !n.contains("..")
                && !n.contains("--")
                && !n.starts_with(['.', '-'])
                && !n.ends_with(['.', '-'])
        };
        let subfolder_ok =
            subfolder.is_empty() || subfolder.split('/').all(|p| !p.is_empty() && p != "." && p != ".." && !p.contains(['\\', ':', '\0']));
        if !name_ok(org) || !name_ok(repo) || !name_ok(revision) || !subfolder_ok {
            return Some(Err(Error::new(format!(
                "{s:?}: expected hf://<org>/<repo>[@<revision>][/<subfolder>] (names of letters, digits, `.`, `_`, `-`, without `..` or `--` and not starting or ending with `.` or `-`; a \
                 subfolder relative to the repository, without `..`, `//` or a leading `/`)"
            ))));
        }
        Some(Ok(HubRef { repo: format!("{org}/{repo}"), revision: revision.to_string(), subfolder }))
    }

    /// The local directory of the subfolder, if the cache holds `marker` in it (e.g. `genai_config.json`).
    pub fn resolve_in(&self, cache: &Cache, marker: &str) -> Result<PathBuf> {
        let file = if self.subfolder.is_empty() { marker.to_string() } else { format!("{}/{marker}", self.subfolder) };
        let repo = cache.repo(Repo::with_revision(self.repo.clone(), RepoType::Model, self.revision.clone()));
        // A branch or tag resolves through refs/<revision>; a full commit id names its snapshot folder directly.
        let found = repo.get(&file).or_else(|| {
            let is_commit = self.revision.len() == 40 && self.revision.bytes().all(|b| b.is_ascii_hexdigit());
            let p = repo.pointer_path(&self.revision).join(&file);
            (is_commit && p.exists()).then_some(p)
        });
        match found {
            Some(p) => Ok(p.parent().map(Path::to_path_buf).unwrap_or(p)),
            None => bail!(
                "{self} is not in the Hugging Face cache at {} (looked for {file}); fetch it with \
                 `hf download {} --revision {}{}`, or set HF_HUB_CACHE (or HF_HOME) to the cache that has it",
                cache.path().display(),
                self.repo,
                self.revision,
                if self.subfolder.is_empty() { String::new() } else { format!(" --include '{}/*'", self.subfolder) }
            ),
        }
    }

    /// Resolves against the run's hub cache, downloading first when the run allows it.
    pub fn resolve(&self, marker: &str, hub: &Hub) -> Result<PathBuf> {
        let cache = Cache::new(hub.cache.clone());
        match self.resolve_in(&cache, marker) {
            Err(e) if hub.download => {
                self.download(&cache).map_err(|d| Error::new(format!("{e}\n  downloading it failed: {d}")))?;
                self.resolve_in(&cache, marker)
            }
            other => other,
        }
    }

    #[cfg(feature = "hub-download")]
    fn download(&self, cache: &Cache) -> Result<()> {
        use hf_hub::api::sync::ApiBuilder;
        let err = |e: hf_hub::api::sync::ApiError| Error::new(format!("{self}: {e}"));
        let api = ApiBuilder::from_cache(cache.clone()).build().map_err(err)?;
        let repo = api.repo(Repo::with_revision(self.repo.clone(), RepoType::Model, self.revision.clone()));
        let prefix = if self.subfolder.is_empty() { String::new() } else { format!("{}/", self.subfolder) };
        for file in repo.info().map_err(err)?.siblings.iter().filter(|s| s.rfilename.starts_with(&prefix)) {
            repo.get(&file.rfilename).map_err(err)?;
        }
        Ok(())
    }

    #[cfg(not(feature = "hub-download"))]
    fn download(&self, _: &Cache) -> Result<()> {
        bail!("this build has no downloader: rebuild with `--features mobius-conformance/hub-download`")
    }
}
