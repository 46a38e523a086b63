//! The accuracy level: the package's benchmark accuracy on one task against the reference's baseline.

use super::Trial;
use crate::accuracy::eval::{self, Unjudgeable};
use crate::accuracy::gate;
use crate::accuracy::policy::GatePolicy;
use crate::accuracy::resolve::{ResolvedTask, TaskKind};
use crate::error::{Error, Result};
use crate::level::gate::judged::{TextJudged, text_numbers};
use crate::outcome::{Failure, FailureKind, Outcome, Status};
use crate::paths;

impl Trial<'_> {
    /// The accuracy gate on one task: the package's benchmark accuracy against the reference's baseline.
    pub(super) fn run_accuracy(&self, task: &ResolvedTask) -> Result<Outcome> {
        let (provider, package) = match self.placement() {
            Ok(p) => p,
            Err(skip) => return Ok(skip),
        };
        let (task_file, task_name, source) = (task.file.as_str(), task.name.as_str(), &task.source);
        if task.kind == TaskKind::Media {
            return self.run_media_accuracy(provider, &package, task_file, task_name, source);
        }
        // (A task file that is not there is the loader's to name, after the baseline.)
        if source.overrides.plumbing_only && self.suite.root.join(task_file).is_file() {
            return Err(Error::new(format!(
                "{}: accuracy task `{task_file}`: field `plumbing_only` is for lmms-eval tasks (with a `protocol`)",
                self.case.file
            )));
        }
        let baseline_path = self.suite.baseline_path(task_name, &self.case.name);
        if !baseline_path.is_file() {
            return Ok(self.missing(&baseline_path));
        }
        let baseline_file = self.rel(&baseline_path);
        paths::confine(&self.suite.root, &baseline_path, "baseline", paths::SUITE_HINT)?;
        let baseline = gate::Baseline::load(&baseline_path, &baseline_file)?;
        let tokenizer = self.tokenizer(&package)?;
        let loaded = crate::accuracy::task::load_items_with(&self.suite.root, task_file, source, &tokenizer)
            .map_err(|e| e.context(&self.case.file))?;
        let (task, items) = (&loaded.0, &loaded.1);
        if baseline.requests_hash != gate::requests_hash(items) {
            return Err(Error::new(format!(
                "baseline is stale: {baseline_file} was made from other requests than {task_file} and {} give now \
                 (the task, its data or the tokenizer changed)\n  regenerate: {}",
                tokenizer.path.display(),
                self.regenerate()
            )));
        }
        let decoder = match self.decoder(&package, provider)? {
            Ok(d) => d,
            Err(skip) => return Ok(skip),
        };
        let eos = self.eos_ids(&package)?;
        // One session a core (up to four, or the run's `gate_sessions`), the items shared out; batch 1 all the same.
        let decoders = crate::run::workers::decoders(&decoder, items.len(), provider, self.ctx.gate_sessions)?;
        let scoring = eval::score(&decoders, task, items, &tokenizer, &eos, self.package_vocab(&package)?, eval::Strategy::Cached)
            .map_err(|e| e.context(task_file))?;
        drop(decoders);
        if let Some((doc, why)) = scoring.stopped {
            let place = format!("{task_file}: document {doc}");
            return Ok(match why {
                Unjudgeable::Vocab(v) => self.vocab_size(&place, v, &baseline_file, &format!("{task_file}'s requests"), &package),
                Unjudgeable::NonFinite(nf) => self.non_finite(&place, nf),
            });
        }
        let got = scoring.scored;
        let policy = GatePolicy::for_task(task.spec.thresholds(), self.ctx.ci);
        let r = gate::judge(items, &got, &baseline, task.spec.metric, &policy).map_err(|e| e.context(&baseline_file))?;
        let message = crate::level::gate::render::text_message(self.name, task.spec.metric, &r, &baseline_file, &self.regenerate());
        Ok(Outcome {
            status: if r.pass { Status::Pass } else { Status::Fail },
            message,
            // The largest log-likelihood difference; the change in accuracy is the detail's own number.
            max_abs_diff: r.max_loglik_diff,
            failure: (!r.pass).then(|| Box::new(Failure { max_abs_diff: r.max_loglik_diff, ..Failure::of(FailureKind::Accuracy) })),
            judgement: Some(std::sync::Arc::new(TextJudged { numbers: text_numbers(task.spec.metric.name(), &r), report: r })),
            ..Outcome::new(Status::Pass, "")
        })
    }
}
