//! The distribution level: the package's next-token distributions over the case's teacher-forced corpus against the
//! fp32 reference's (`judge::dist`), one prefill per chunk, every scored row reduced where ONNX Runtime left it.

use sha2::{Digest, Sha256};

use super::Trial;
use crate::error::{Error, Result};
use crate::feed::inputs::Inputs;
use crate::judge::detail::Detail;
use crate::judge::dist::{self, DistGolden};
use crate::judge::finite::{self, ExpectedVocab};
use crate::judge::xfail::{Failure, FailureKind};
use crate::outcome::{Judgement, Outcome, Status};
use crate::paths;
use crate::plan::case::Distribution;
use crate::run::pipeline::Pipeline;

impl Trial<'_> {
    pub(super) fn run_dist(&self) -> Result<Outcome> {
        let (provider, package) = match self.placement() {
            Ok(p) => p,
            Err(skip) => return Ok(skip),
        };
        let Some(spec) = self.case.spec.distribution.as_ref() else {
            return Err(Error::new(format!("{}: the dist level needs a `distribution:` block", self.case.file)));
        };
        let golden_path = self.suite.dist_golden_path(self.case);
        paths::confine(&self.suite.root, &golden_path, "golden", paths::SUITE_HINT)?;
        if !golden_path.is_file() {
            return Ok(self.missing(&golden_path));
        }
        let golden_file = self.rel(&golden_path);
        let golden = DistGolden::load(&golden_path, &golden_file)?;
        let tokenizer = self.tokenizer(&package)?;
        self.check_corpus(spec, &golden, &golden_file, &tokenizer)?;
        let dtype = self.variant.dtype;
        let Some(floor) = golden.floor(dtype) else {
            return Err(self.stale(format!(
                "{golden_file} has no floor for {dtype} (it has {}): the case's matrix gained a dtype since it was made",
                golden.floors.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        };
        let policy = self.suite.policy.as_ref().map_err(Clone::clone)?;
        let tol = policy.dist(dtype);

        let decoder = match self.decoder(&package, provider)? {
            Ok(d) => d,
            Err(skip) => return Ok(skip),
        };
        let expected = ExpectedVocab {
            golden: None,
            config: self.package_vocab(&package)?,
            largest_id: golden.tokens.iter().chain(&golden.top_ids).copied().max(),
        };
        let pipeline = Pipeline::build(&package, &decoder, provider, &Inputs::from_token_ids(golden.chunk(0)), "")?;
        let front = pipeline.front();
        let (first, per_chunk) = (golden.first, golden.per_chunk());
        let mut positions = Vec::with_capacity(golden.positions());
        for c in 0..golden.chunks() {
            let chunk = golden.chunk(c);
            let past = decoder.new_cache_with(front.context())?;
            // The logits of positions first .. n_ctx-1; the last one predicts past the chunk and is not scored.
            let (out, _) = decoder.forward(front.input(chunk, true)?, &past, golden.n_ctx - first)?;
            let place = |r: usize| format!("{golden_file}: chunk {c}, position {}", first + r);
            // Every row of one run has the run's vocabulary: checked once.
            if let Some(v) = expected.check(out.vocab) {
                return Ok(self.vocab_size(&place(0), v, &golden_file, &golden_file, &package));
            }
            for r in 0..per_chunk {
                let row = out.row(r);
                let at = c * per_chunk + r;
                // The step a NaN is reported at is the scored position's index over the whole corpus.
                if let Some(nf) = finite::row(row, at) {
                    return Ok(self.non_finite(&place(r), nf));
                }
                positions.push(dist::measure(&golden, at, row, chunk[first + r + 1]));
            }
        }
        // Checked once the package's logits are: a package that gives NaN fails as such whatever its floor.
        if floor.non_finite {
            return Err(Error::new(format!(
                "{golden_file}: the reference run as {} gives NaN or infinite logits, so {dtype} has no floor to judge a package \
                 by; its finite logits cannot be judged at this level",
                floor.against
            )));
        }
        let check = golden.check.get(&format!("{}/{}", self.variant.ep, dtype)).cloned();
        // The loader reads a series for every finite floor: one missing is a golden this suite did not write.
        let floor_kld = golden
            .floor_series
            .get(dtype.name())
            .ok_or_else(|| Error::new(format!("{golden_file}: no tensor `floor_kld.{dtype}` for its {dtype} floor")))?;
        let r = dist::judge(&positions, floor, floor_kld, tol, golden.k, check);
        let message = crate::report::dist::render(self.name, &r, &golden_file, &self.regenerate());
        let failure =
            (!r.pass).then(|| Box::new(Failure { max_abs_diff: Some(r.stats.kld.value), ..Failure::of(FailureKind::Distribution) }));
        Ok(Outcome {
            status: if r.pass { Status::Pass } else { Status::Fail },
            message,
            max_abs_diff: Some(r.stats.kld.value),
            detail: Some(Box::new(Detail::Dist(Box::new(r.clone())))),
            failure,
            judgement: Some(Judgement::Dist(Box::new(r))),
            ..Outcome::new(Status::Pass, "")
        })
    }

    /// The golden was made from this corpus, cut as the case says and tokenized as the package's tokenizer does now:
    /// anything else is a stale golden, with the command that remakes it.
    fn check_corpus(
        &self,
        spec: &Distribution,
        golden: &DistGolden,
        golden_file: &str,
        tokenizer: &crate::feed::tokenizer::TextTokenizer,
    ) -> Result<()> {
        if (spec.n_ctx, spec.k) != (golden.n_ctx, golden.k) {
            return Err(self.stale(format!(
                "{golden_file} has n_ctx {} and k {}, the case asks for {} and {} ({})",
                golden.n_ctx, golden.k, spec.n_ctx, spec.k, self.case.file
            )));
        }
        let path = self.suite.root.join(&spec.corpus);
        if !self.case.spec.external_paths {
            paths::confine(&self.suite.root, &path, &format!("{}: field `distribution.corpus`", self.case.file), paths::CASE_HINT)?;
        }
        let bytes = std::fs::read(&path)
            .map_err(|e| Error::new(format!("{}: field `distribution.corpus`: {}: {e}", self.case.file, spec.corpus)))?;
        let sha: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
        if sha != golden.corpus_sha256 {
            return Err(self.stale(format!("{golden_file} was made from another {} (sha256 {sha} now)", spec.corpus)));
        }
        let text = std::str::from_utf8(&bytes).map_err(|e| Error::new(format!("{}: {e}", spec.corpus)))?;
        let ids = tokenizer.encode_plain(&dist::corpus_text(&spec.corpus, text)?)?;
        let chunks = dist::chunk_ids(&ids, spec.n_ctx, tokenizer.bos()?);
        if chunks != golden.tokens {
            let at = chunks.iter().zip(&golden.tokens).position(|(a, b)| a != b).unwrap_or(chunks.len().min(golden.tokens.len()));
            return Err(self.stale(format!(
                "{golden_file}'s chunks differ from {} tokenized by {} from token {at} on ({} tokens now, {} in the golden)",
                spec.corpus,
                tokenizer.path.display(),
                chunks.len(),
                golden.tokens.len()
            )));
        }
        Ok(())
    }
}
