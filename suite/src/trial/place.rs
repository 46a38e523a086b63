//! Where a trial runs and what it reads: the execution provider, the package (confined to the suite root), the
//! decoder session, the tokenizer; or why it skips (or fails, when the run requires what is missing).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Trial;
use crate::error::Result;
use crate::feed::integrity::{self, Manifest};
use crate::feed::tokenizer::TextTokenizer;
use crate::outcome::Outcome;
use crate::paths;
use crate::plan::case::Location;
use crate::plan::corpus;
use crate::report;
use crate::run::decoder::Decoder;
use crate::run::runtime::{self, Provider};
use crate::run::sessions;
use crate::vocab::Dtype;

impl Trial<'_> {
    /// Where the variant runs and its package directory, or why the trial skips.
    // A skip is this function's ordinary answer, given once per trial: boxing it buys nothing.
    #[allow(clippy::result_large_err)]
    pub(super) fn placement(&self) -> std::result::Result<(Provider, PathBuf), Outcome> {
        let spec = &self.case.spec;
        if let Some(why) = corpus::level_skip(self.case, self.level, crate::level::of(self.level).greedy()) {
            return Err(Outcome::skip(why));
        }
        if let Some(r) = spec.skip_reason.as_deref().filter(|r| !r.trim().is_empty()) {
            return Err(Outcome::skip(format!("skip_reason: {r}")));
        }
        if self.ctx.ci
            && let Some(r) = spec.ci_skip_reason.as_deref().filter(|r| !r.trim().is_empty())
        {
            return Err(Outcome::skip(format!("ci_skip_reason (CI is set): {r}")));
        }
        let provider = runtime::provider_for(self.variant.ep, self.ctx.device).map_err(Outcome::skip)?;
        let Some(location) = &self.variant.package else {
            return Err(Outcome::skip(format!(
                "{} names no package for {}/{} of {}: add `matrix.package` (a folder, or hf://org/repo[@rev][/subfolder] \
                 for an export in the Hugging Face cache) to run it",
                self.case.file, self.variant.ep, self.variant.dtype, spec.model_id
            )));
        };
        let package = match location {
            // A model that is not downloaded is absent, not broken: say what is missing and how to get it. Unless
            // it is required (the case's `required`, or MOBIUS_REQUIRE_MODELS): then a gate on it must not go green.
            Location::Hub(_) => location.resolve("genai_config.json").map_err(|e| match self.required() {
                Some(why) => Outcome::fail(format!("{}: model absent, and {why}: {e}", self.name)),
                None => Outcome::skip(format!("model absent: {e}")),
            })?,
            Location::Local(p) => {
                if !spec.external_paths {
                    self.confine_package(p).map_err(|e| Outcome::fail(format!("{}: {e}", self.name)))?;
                }
                p.clone()
            }
        };
        if let Some(build) = spec.build_command.as_deref()
            && !package.exists()
        {
            let msg = format!("package {} is not built; build it with `{build}`", self.rel(&package));
            return Err(if self.ctx.ci {
                Outcome::fail(format!("{}: {msg} (CI is set: the real tier must run)", self.name))
            } else {
                Outcome::skip(msg)
            });
        }
        if let Some(manifest) = spec.manifest.as_deref() {
            self.check_manifest(manifest, &package)?;
        }
        Ok((provider, package))
    }

    /// The package's files against the builder's manifest, before ONNX Runtime reads any of them.
    #[allow(clippy::result_large_err)]
    fn check_manifest(&self, manifest: &str, package: &Path) -> std::result::Result<(), Outcome> {
        let fail = |e: crate::error::Error| Outcome::fail(format!("{}: {}: field `manifest`: {e}", self.name, self.case.file));
        let m = Manifest::load(&self.suite.root, manifest).map_err(fail)?;
        match integrity::check(&m, package).map_err(fail)? {
            Ok(_) => Ok(()),
            Err(bad) => {
                Err(Outcome::fail(report::integrity(self.name, &self.rel(package), &m.file, &bad, self.case.spec.build_command.as_deref())))
            }
        }
    }

    /// Why a missing model fails this trial instead of skipping it, if it does.
    pub(super) fn required(&self) -> Option<String> {
        if self.case.spec.required {
            Some(format!("{} sets `required: true`", self.case.file))
        } else if self.ctx.require_models {
            Some("models are required in this run (MOBIUS_REQUIRE_MODELS=1 or `xtask ci --require`)".to_string())
        } else {
            None
        }
    }

    /// A local package and the files its genai_config.json names stay inside the suite root, symlinks resolved.
    pub(super) fn confine_package(&self, package: &Path) -> Result<()> {
        let what = format!("{}: field `matrix.package` ({}/{})", self.case.file, self.variant.ep, self.variant.dtype);
        let root = &self.suite.root;
        paths::confine(root, package, &what, paths::CASE_HINT)?;
        if !package.is_dir() {
            return Ok(());
        }
        let config = package.join("genai_config.json");
        paths::confine(root, &config, &what, paths::CASE_HINT)?;
        let cfg = crate::feed::package::GenaiConfig::load_if_present(package)?;
        let named = cfg.as_ref().map(|c| c.files()).unwrap_or_default();
        for file in named.into_iter().chain(["model.onnx"]) {
            let model = package.join(file);
            paths::confine(root, &model, &format!("{what}: model `{file}`"), paths::CASE_HINT)?;
            let data = package.join(format!("{file}.data"));
            paths::confine(root, &data, &format!("{what}: external data of `{file}`"), paths::CASE_HINT)?;
        }
        Ok(())
    }

    /// The package's decoder session, or a skip naming the node when the CPU EP cannot run a half-precision build.
    pub(super) fn decoder(&self, package: &Path, provider: Provider) -> Result<std::result::Result<Arc<Decoder>, Outcome>> {
        let model = crate::feed::package::package_model(package)
            .map_err(|e| e.context(format!("{}: package for {}/{}", self.case.file, self.variant.ep, self.variant.dtype)))?;
        match sessions::decoder(&model, provider) {
            Ok(d) => Ok(Ok(d)),
            // A half-precision build the CPU EP has no kernels for (bf16 MatMul, ...) cannot run here: say which
            // node, and where it runs. A float32 or int4 build missing a kernel is a broken package: it fails.
            Err(e) if matches!(self.variant.dtype, Dtype::F16 | Dtype::Bf16) && provider == Provider::Cpu => {
                let Some(why) = runtime::cpu_cannot_run(&e, self.variant.dtype == Dtype::Bf16) else { return Err(e) };
                Ok(Err(Outcome::skip(format!(
                    "ONNX Runtime's CPU execution provider cannot run this {} build: {why}; run it with MOBIUS_TEST_DEVICE=cuda",
                    self.variant.dtype
                ))))
            }
            Err(e) => Err(e),
        }
    }

    /// A missing golden or baseline: a skip here, a failure under CI (pre-merge gating must never pass a case whose
    /// golden was forgotten).
    pub(super) fn missing(&self, path: &Path) -> Outcome {
        let msg = format!("no golden at {}; make it with `{}`", self.rel(path), self.regenerate());
        if self.ctx.ci { Outcome::fail(format!("{}: {msg} and commit it (CI is set)", self.name)) } else { Outcome::skip(msg) }
    }

    /// The case's tokenizer: `tokenizer`, else `reference`, else the package's own.
    pub(super) fn tokenizer(&self, package: &Path) -> Result<Arc<TextTokenizer>> {
        let location = self.case.tokenizer_location(&self.suite.root);
        if let Some(Location::Local(p)) = &location
            && !self.case.spec.external_paths
        {
            let what = format!("{}: field `tokenizer` (or `reference`)", self.case.file);
            paths::confine(&self.suite.root, p, &what, paths::CASE_HINT)?;
            paths::confine(&self.suite.root, &p.join("tokenizer.json"), &what, paths::CASE_HINT)?;
        }
        let (tok_dir, field) = match location {
            Some(l) => (
                l.resolve("tokenizer.json").map_err(|e| e.context(format!("{}: field `tokenizer`", self.case.file)))?,
                "field `tokenizer` (or `reference`)",
            ),
            None => (package.to_path_buf(), "the package's tokenizer"),
        };
        TextTokenizer::load(&tok_dir).map_err(|e| e.context(format!("{}: {field}", self.case.file)))
    }
}
