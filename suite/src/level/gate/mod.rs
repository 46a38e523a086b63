//! The accuracy gate's levels: a benchmark task's accuracy on the package against the reference's baseline, with
//! paired statistics (`accuracy`), and a media task's items through onnxruntime-genai's own processor and generator
//! (`accuracy_genai`).

pub mod judged;
pub mod media_trial;
pub mod render;

use self::judged::{TextJudged, text_numbers};
use super::Kind;
use crate::accuracy::eval::{self, Unjudgeable};
use crate::accuracy::gate;
use crate::accuracy::policy::GatePolicy;
use crate::accuracy::resolve::{ResolvedTask, Source, TaskKind};
use crate::error::{Error, Result};
use crate::level::trial::Trial;
use crate::outcome::{Failure, FailureKind, Outcome, Status};
use crate::paths;
use crate::vocab::Level;

/// A gate level: one trial per accuracy task of a case, on every variant.
pub struct Gate {
    level: Level,
    /// Only media (lmms-eval) tasks have it.
    media_only: bool,
}

pub static ACCURACY: Gate = Gate { level: Level::Accuracy, media_only: false };
pub static ACCURACY_GENAI: Gate = Gate { level: Level::AccuracyGenai, media_only: true };

impl Kind for Gate {
    fn level(&self) -> Level {
        self.level
    }

    fn planned_for_task(&self, media: bool) -> bool {
        media || !self.media_only
    }

    fn failures(&self) -> &'static [FailureKind] {
        &[FailureKind::Accuracy, FailureKind::NonFinite, FailureKind::Refused]
    }

    fn measured(&self, o: &Outcome) -> Option<String> {
        render::measured(o)
    }

    fn run(&self, t: &Trial) -> Result<Outcome> {
        let task = t.task.ok_or_else(|| Error::new(format!("{}: a gate's trial is planned with its task", t.name)))?;
        run_accuracy(t, task)
    }
}

/// The accuracy gate on one task: the package's benchmark accuracy against the reference's baseline.
fn run_accuracy(t: &Trial, task: &ResolvedTask) -> Result<Outcome> {
    let (provider, package) = match t.placement() {
        Ok(p) => p,
        Err(skip) => return Ok(skip),
    };
    // Where a dataset without a `data` folder is looked up: this run's hub cache.
    let source = &Source { hub_cache: Some(t.ctx.hub.cache.clone()), ..task.source.clone() };
    let (task_file, task_name) = (task.file.as_str(), task.name.as_str());
    if task.kind == TaskKind::Media {
        return media_trial::run_media_accuracy(t, provider, &package, task_file, task_name, source);
    }
    // (A task file that is not there is the loader's to name, after the baseline.)
    if source.overrides.plumbing_only && t.suite.root.join(task_file).is_file() {
        return Err(Error::new(format!(
            "{}: accuracy task `{task_file}`: field `plumbing_only` is for lmms-eval tasks (with a `protocol`)",
            t.case.file
        )));
    }
    let baseline_path = t.suite.baseline_path(task_name, &t.case.name);
    if !baseline_path.is_file() {
        return Ok(t.missing(&baseline_path));
    }
    let baseline_file = t.rel(&baseline_path);
    paths::confine(&t.suite.root, &baseline_path, "baseline", paths::SUITE_HINT)?;
    let baseline = gate::Baseline::load(&baseline_path, &baseline_file)?;
    let tokenizer = t.tokenizer(&package)?;
    let loaded =
        crate::accuracy::task::load_items_with(&t.suite.root, task_file, source, &tokenizer).map_err(|e| e.context(&t.case.file))?;
    let (task, items) = (&loaded.0, &loaded.1);
    if baseline.requests_hash != gate::requests_hash(items) {
        return Err(Error::new(format!(
            "baseline is stale: {baseline_file} was made from other requests than {task_file} and {} give now \
             (the task, its data or the tokenizer changed)\n  regenerate: {}",
            tokenizer.path.display(),
            t.regenerate()
        )));
    }
    let decoder = match t.decoder(&package, provider)? {
        Ok(d) => d,
        Err(skip) => return Ok(skip),
    };
    let eos = t.eos_ids(&package)?;
    // One session a core (up to four, or the run's `gate_sessions`), the items shared out; batch 1 all the same.
    let decoders = crate::run::workers::decoders(&decoder, items.len(), provider, t.ctx.gate_sessions)?;
    let scoring = eval::score(&decoders, task, items, &tokenizer, &eos, t.package_vocab(&package)?, eval::Strategy::Cached)
        .map_err(|e| e.context(task_file))?;
    drop(decoders);
    if let Some((doc, why)) = scoring.stopped {
        let place = format!("{task_file}: document {doc}");
        return Ok(match why {
            Unjudgeable::Vocab(v) => t.vocab_size(&place, v, &baseline_file, &format!("{task_file}'s requests"), &package),
            Unjudgeable::NonFinite(nf) => t.non_finite(&place, nf),
        });
    }
    let got = scoring.scored;
    let policy = GatePolicy::for_task(task.spec.thresholds(), t.ctx.ci);
    let r = gate::judge(items, &got, &baseline, task.spec.metric, &policy).map_err(|e| e.context(&baseline_file))?;
    let message = crate::level::gate::render::text_message(t.name, task.spec.metric, &r, &baseline_file, &t.regenerate());
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
