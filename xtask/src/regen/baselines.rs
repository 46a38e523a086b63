//! The accuracy gate's baselines: `goldens/baselines/<task>/<case>.json`, made from the Hugging Face reference.
//!
//! The requests are built here, with the suite's own lm-eval rules (the same code the gate runs), and only their
//! token ids go to Python (`xtask/reference/loglik.py`), which returns per-request log-likelihoods and greedy
//! generations. The baseline is derived and written here, atomically.

use std::path::{Path, PathBuf};

use mobius_conformance::accuracy::answer::{cut_at_stop, extract_answer};
use mobius_conformance::accuracy::gate::{self, Baseline, BaselineItem};
use mobius_conformance::accuracy::resolve::{ResolvedTask, Source, TaskKind, task_name};
use mobius_conformance::accuracy::scoring::{self, Scored};
use mobius_conformance::accuracy::task::spec::{Metric, OutputType};
use mobius_conformance::accuracy::task::{Item, ItemKind, Task};
use mobius_conformance::feed::tokenizer::TextTokenizer;
use mobius_conformance::judge::golden::Hex;
use mobius_conformance::paths::relative;
use mobius_conformance::plan::case::Case;
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::vocab::{Dtype, Level, Modality};

use super::compare;
use super::job::{Job, Planned, Reference, Scope, genai_config};
use super::ledger::{Kind, Ledger, check_format, provenance};

/// The format of loglik.py's raw outputs this xtask reads (their metadata `format`).
pub const LOGLIK_FORMAT: &str = "loglik-v1";

/// What the counts at the end of a run call a baseline, of a text task or a multimodal one.
pub const BASELINE: Kind = Kind { order: 5, name: "accuracy baselines" };

/// The text accuracy gate's baselines' job.
pub struct TextBaselines;

impl Job for TextBaselines {
    type Unit = BaselineJob;
    const LEVELS: &'static [Level] = &[];
    const REFERENCE: Reference = Reference { module: "loglik", jobs_file: "loglik.json" };

    fn plan(&self, scope: &Scope, case: &Case) -> Vec<Result<Planned<BaselineJob>, String>> {
        Planned::each(plan(scope.suite, case, scope.raw_dir))
    }

    fn case<'u>(&self, job: &'u BaselineJob) -> &'u Case {
        &job.case
    }

    fn raw<'u>(&self, job: &'u BaselineJob) -> &'u Path {
        &job.raw
    }

    fn what(&self, suite: &Suite, job: &BaselineJob) -> String {
        relative(&suite.root, &job.out)
    }

    fn write(&self, suite: &Suite, job: &BaselineJob, ledger: &mut Ledger) -> Result<Vec<String>, String> {
        let (_, bytes, line) = derive(suite, job)?;
        Ok(vec![line, write(suite, job, &bytes, ledger)?])
    }
}

/// One task of one case, with the requests sent to the reference.
pub struct BaselineJob {
    case: Case,
    task: Task,
    items: Vec<Item>,
    raw: PathBuf,
    out: PathBuf,
}

/// The jobs for a case's `accuracy` tasks, and the reference requests (JSON) for each.
fn plan(suite: &Suite, case: &Case, work: &Path) -> Result<Vec<(serde_json::Value, BaselineJob)>, String> {
    let root = &suite.root;
    let mut out = Vec::new();
    for entry in &case.spec.accuracy {
        // A dataset without a `data` folder is looked up in the hub cache the environment names.
        let source = Source { hub_cache: Some(crate::hub()?.cache.clone()), ..entry.source(root, case.spec.external_paths) };
        let resolved = ResolvedTask::new(root, entry.file(), source);
        let file = resolved.file.as_str();
        if resolved.kind == TaskKind::Media {
            continue; // an lmms-eval task: media_baselines
        }
        let reference = case.reference_dir(root).ok_or_else(|| format!("{}: an accuracy case needs `reference` weights", case.file))?;
        let tok = case
            .tokenizer_location(root)
            .ok_or_else(|| format!("{}: an accuracy case needs a tokenizer (`tokenizer` or `reference`)", case.file))?
            .resolve("tokenizer.json", crate::hub()?)
            .map_err(|e| e.to_string())?;
        let tokenizer = TextTokenizer::load(&tok).map_err(|e| e.to_string())?;
        let task = Task::load_with(root, file, &resolved.source).map_err(|e| e.to_string())?;
        let items = task.requests(&tokenizer, &resolved.source).map_err(|e| e.to_string())?;
        let name = resolved.name.clone();
        let raw = work.join(format!("baseline.{name}.{}.safetensors", case.name));
        let mut requests = Vec::new();
        let mut generate = Vec::new();
        for it in &items {
            match &it.kind {
                ItemKind::MultipleChoice { context_ids, continuations, .. } => {
                    for c in continuations {
                        requests.push(serde_json::json!({ "context": context_ids, "continuation": c }));
                    }
                }
                ItemKind::Generate { context_ids, .. } => {
                    let max = task.spec.generation_kwargs.as_ref().map_or(256, |k| k.max_gen_toks);
                    generate.push(serde_json::json!({ "ids": context_ids, "max_new_tokens": max }));
                }
            }
        }
        let spec = serde_json::json!({
            "reference": reference, "out": raw, "requests": requests, "generate": generate,
            "eos_token_id": case.spec.generation.eos_token_id, "genai_config": genai_config(suite, case),
        });
        let out_path = suite.baseline_path(&name, &case.name);
        out.push((spec, BaselineJob { case: case.clone(), task, items, raw, out: out_path }));
    }
    Ok(out)
}

/// Derives the baseline from the reference's raw outputs; returns it and the report lines.
fn derive(suite: &Suite, job: &BaselineJob) -> Result<(Baseline, Vec<u8>, String), String> {
    let bytes = std::fs::read(&job.raw).map_err(|e| format!("{}: {e}", job.raw.display()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| format!("{}: {e}", job.raw.display()))?;
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| format!("{}: {e}", job.raw.display()))?;
    let meta = meta.metadata().clone().unwrap_or_default();
    check_format(&job.raw, meta.get("format").map(String::as_str), LOGLIK_FORMAT, "xtask/reference/loglik.py")?;
    let tensor = |name: &str| st.tensor(name).map_err(|e| format!("{}: tensor `{name}`: {e}", job.raw.display()));
    let spec = &job.task.spec;
    let root = &suite.root;
    let hub = crate::hub()?;
    let tok = job.case.tokenizer_location(root).and_then(|l| l.resolve("tokenizer.json", hub).ok()).unwrap_or_default();
    let tokenizer = TextTokenizer::load(&tok).map_err(|e| e.to_string())?;
    let mut scored = Vec::with_capacity(job.items.len());
    let mut items = Vec::with_capacity(job.items.len());
    match spec.output_type {
        OutputType::MultipleChoice => {
            let ll: Vec<f32> = tensor("loglik")?.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
            let mut next = 0;
            for it in &job.items {
                let ItemKind::MultipleChoice { continuations, .. } = &it.kind else { unreachable!("multiple-choice task") };
                let l: Vec<f64> = ll
                    .get(next..next + continuations.len())
                    .ok_or("fewer log-likelihoods than requests")?
                    .iter()
                    .map(|&x| x as f64)
                    .collect();
                next += continuations.len();
                items.push(BaselineItem { logliks: l.iter().map(|&x| Hex(x)).collect(), answer: None });
                scored.push(Scored::Choices(l));
            }
            if next != ll.len() {
                return Err(format!("{}: {} log-likelihoods for {next} requests", job.raw.display(), ll.len()));
            }
        }
        OutputType::GenerateUntil => {
            let g = tensor("generated")?;
            let width = g.shape().get(1).copied().unwrap_or(0);
            let ids: Vec<i64> = g.data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
            let lens: Vec<i64> =
                tensor("generated_len")?.data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
            let until = spec.generation_kwargs.as_ref().map(|k| k.until.clone()).unwrap_or_default();
            for (i, _) in job.items.iter().enumerate() {
                let n = *lens.get(i).ok_or("fewer generations than items")? as usize;
                let row = &ids[i * width..i * width + n];
                let text = tokenizer.decode(row);
                let answer = extract_answer(spec.answer_regex.as_deref(), cut_at_stop(&text, &until));
                items.push(BaselineItem { logliks: Vec::new(), answer: Some(answer.clone()) });
                scored.push(Scored::Answer(answer));
            }
        }
    }
    let correct =
        |metric: Metric| -> Vec<bool> { job.items.iter().zip(&scored).map(|(it, s)| gate::judge_item(it, s, metric).0).collect() };
    let (accuracy, stderr) = scoring::mean_stderr(&correct(spec.metric));
    let mc = spec.output_type == OutputType::MultipleChoice;
    let (acc, acc_norm) = if mc {
        (Some(scoring::mean_stderr(&correct(Metric::Acc)).0), Some(scoring::mean_stderr(&correct(Metric::AccNorm)).0))
    } else {
        (None, None)
    };
    let boundary_merges = job.items.iter().filter(|it| matches!(it.kind, ItemKind::MultipleChoice { boundary_merge: true, .. })).count();
    let name = task_name(&job.task.file);
    let baseline = Baseline {
        task: name.clone(),
        model: job.case.name.clone(),
        metric: spec.metric.name().into(),
        num_fewshot: spec.num_fewshot,
        n: items.len(),
        accuracy,
        stderr,
        acc,
        acc_norm,
        boundary_merges,
        requests_hash: gate::requests_hash(&job.items),
        items,
        provenance: provenance(root, &job.case, &meta),
    };
    let line = format!(
        "accuracy   {name} on {} (reference): {} {:.2}% +- {:.2} over {} items{}; {boundary_merges} boundary merge(s)",
        job.case.name,
        spec.metric.name(),
        100.0 * accuracy,
        100.0 * stderr,
        baseline.n,
        match (acc, acc_norm) {
            (Some(a), Some(n)) => format!(" (acc {:.2}%, acc_norm {:.2}%)", 100.0 * a, 100.0 * n),
            _ => String::new(),
        }
    );
    let json = baseline.to_json();
    Ok((baseline, json, line))
}

/// Writes (or not) the baseline like a golden: SAVED, UNCHANGED (also when only log-likelihoods moved, each by less
/// than the reference's noise), or SKIPPED when it differs without `force`.
fn write(suite: &Suite, job: &BaselineJob, bytes: &[u8], ledger: &mut Ledger) -> Result<String, String> {
    let shown = relative(&suite.root, &job.out);
    let diff = std::fs::read(&job.out).ok().map(|old| {
        let noise = loglik_noise(suite, &job.case);
        compare::json(&old, bytes, &|p| loglik_bound(&job.items, noise, p))
    });
    ledger.write_one(BASELINE, &job.out, &shown, bytes, diff.into())
}

/// The reference's per-token noise for this case's model: the largest its text golden measured (none without one).
fn loglik_noise(suite: &Suite, case: &Case) -> Option<f64> {
    let paths = suite.golden_paths(case, Modality::Text, Dtype::F32);
    compare::Bounds::of_prefill(&std::fs::read(&paths.prefill).ok()?).steps()
}

/// The noise of `items[i].logliks[j]`: each continuation token's log-softmax is a logit less the logsumexp, each
/// off by up to the noise, so one run of a choice of n tokens sits within 2 n noise of the float64 value. The
/// accuracy, the answers and the hashes are exact.
fn loglik_bound(items: &[Item], noise: Option<f64>, path: &[compare::Seg]) -> Option<f64> {
    use compare::Seg::{Index, Key};
    let [Key("items"), Index(i), Key("logliks"), Index(j)] = path else { return None };
    let ItemKind::MultipleChoice { continuations, .. } = &items.get(*i)?.kind else { return None };
    Some(2.0 * continuations.get(*j)?.len() as f64 * noise?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use compare::Seg::{Index, Key};

    fn item(conts: Vec<Vec<i64>>) -> Item {
        Item {
            doc: 0,
            context: String::new(),
            kind: ItemKind::MultipleChoice {
                choices: conts.iter().map(|_| "x".to_string()).collect(),
                gold: 0,
                context_ids: vec![2],
                continuations: conts,
                boundary_merge: false,
            },
        }
    }

    #[test]
    fn a_loglik_may_move_by_twice_its_tokens_times_the_noise_and_nothing_else_moves() {
        let items = vec![item(vec![vec![5], vec![6, 7, 8]])];
        assert_eq!(loglik_bound(&items, Some(1e-6), &[Key("items"), Index(0), Key("logliks"), Index(1)]), Some(6e-6));
        assert_eq!(loglik_bound(&items, Some(1e-6), &[Key("accuracy")]), None);
        assert_eq!(loglik_bound(&items, None, &[Key("items"), Index(0), Key("logliks"), Index(0)]), None);
        let h = mobius_conformance::judge::hexfloat::format_f64;
        let doc = |a: f64, b: f64, acc: f64| {
            serde_json::to_vec(&serde_json::json!({"accuracy": acc, "requests_hash": "ab", "items": [{"logliks": [h(a), h(b)]}]})).unwrap()
        };
        let old = doc(-1.0, -2.0, 1.0);
        let cmp = |new: &[u8]| compare::json(&old, new, &|p| loglik_bound(&items, Some(1e-6), p));
        // Twice that: the stored run and the new one each sit within it.
        assert!(matches!(cmp(&doc(-1.0 + 3.5e-6, -2.0 + 1.1e-5, 1.0)), compare::Diff::NoiseOnly { .. }));
        assert!(matches!(cmp(&doc(-1.0 + 4.5e-6, -2.0, 1.0)), compare::Diff::Changed { at, .. } if at == "items[0].logliks[0]"));
        assert!(matches!(cmp(&doc(-1.0, -2.0, 0.5)), compare::Diff::Changed { at, .. } if at == "accuracy"));
    }
}
