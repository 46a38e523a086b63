//! The distribution level's goldens (`<case>.dist.safetensors`): planned here, made by `xtask/reference/dist.py`
//! (the fp32 reference's top-k log-probabilities over the case's corpus, the per-dtype floors measured on the
//! reference itself, and each local package's full-vocabulary KL as the check of k), read back through the suite's
//! own loader, and written like every golden: atomically, UNCHANGED within noise, held back without `--force`.

use std::path::{Path, PathBuf};

use mobius_conformance::level::dist::golden::DistGolden;
use mobius_conformance::paths::relative;
use mobius_conformance::plan::case::{Case, Location};
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::vocab::{Dtype, Ep, Level};

use super::compare;
use super::job::{Job, Planned, Reference, Scope};
use super::ledger::{Kind, Ledger};

/// The distribution level's job.
pub struct DistGoldens;

impl Job for DistGoldens {
    type Unit = DistJob;
    const LEVELS: &'static [Level] = &[Level::Dist];
    const REFERENCE: Reference = Reference { module: "dist", jobs_file: "dist.json" };

    fn plan(&self, scope: &Scope, case: &Case) -> Vec<Result<Planned<DistJob>, String>> {
        Planned::each(plan(scope.suite, case, scope.raw_dir))
    }

    fn case<'u>(&self, job: &'u DistJob) -> &'u Case {
        &job.case
    }

    fn raw<'u>(&self, job: &'u DistJob) -> &'u Path {
        &job.raw
    }

    fn what(&self, suite: &Suite, job: &DistJob) -> String {
        relative(&suite.root, &job.out)
    }

    fn write(&self, suite: &Suite, job: &DistJob, ledger: &mut Ledger) -> Result<Vec<String>, String> {
        if let Some(from) = ledger.from_raw.as_ref().filter(|_| !job.raw.is_file()) {
            // Raw outputs kept before the case had a distribution golden: nothing to make it from here.
            return Ok(vec![format!(
                "SKIPPED    {} (--from-raw {} holds no raw output for it)",
                relative(&suite.root, &job.out),
                from.display()
            )]);
        }
        write(suite, job, ledger)
    }
}

/// What the counts at the end of a run call a distribution golden.
const DIST: Kind = Kind { order: 6, name: "dist top-k log-probabilities" };

/// One case's distribution golden to make.
pub struct DistJob {
    case: Case,
    raw: PathBuf,
    out: PathBuf,
}

/// The reference job for a case with a `distribution:` block, or `None` when it has none. Its floors are the dtypes
/// of the case's matrix; its full-vocabulary check covers every local package ONNX Runtime's CPU EP runs (not bf16).
fn plan(suite: &Suite, case: &Case, work: &Path) -> Result<Option<(serde_json::Value, DistJob)>, String> {
    let Some(spec) = &case.spec.distribution else { return Ok(None) };
    let root = &suite.root;
    let reference = case.reference_dir(root).ok_or_else(|| "field `distribution` needs `reference` weights".to_string())?;
    let tokenizer = case
        .tokenizer_location(root)
        .ok_or_else(|| "field `distribution` needs a tokenizer".to_string())?
        .resolve("tokenizer.json", crate::hub()?)
        .map_err(|e| e.to_string())?;
    let corpus = root.join(spec.corpus());
    if !case.spec.external_paths {
        for (field, p) in [("reference", &reference), ("tokenizer", &tokenizer), ("distribution.corpus", &corpus)] {
            mobius_conformance::paths::confine(root, p, &format!("{}: field `{field}`", case.file), mobius_conformance::paths::CASE_HINT)
                .map_err(|e| e.to_string())?;
        }
    }
    let variants = case.variants(root);
    let mut floors: Vec<Dtype> = variants.iter().map(|v| v.dtype).collect();
    floors.sort();
    floors.dedup();
    let packages: serde_json::Map<String, serde_json::Value> = variants
        .iter()
        .filter(|v| v.dtype != Dtype::Bf16 && v.ep != Ep::Cuda)
        .filter_map(|v| match &v.package {
            Some(Location::Local(p)) if p.join("genai_config.json").is_file() => {
                Some((format!("{}/{}", v.ep, v.dtype), serde_json::json!(p)))
            }
            _ => None,
        })
        .collect();
    let raw = work.join(format!("{}.dist.safetensors", case.name));
    let mut job = serde_json::json!({
        "case": case.name,
        "reference": reference,
        "tokenizer": tokenizer,
        "corpus": corpus,
        "k": spec.k,
        "floors": floors.iter().map(|d| d.name()).collect::<Vec<_>>(),
        "packages": packages,
        "out": raw,
    });
    if case.is_speech_to_text() && !case.spec.external_paths {
        // The reference reads each utterance's clip: inside the root, as the trial reads it.
        let text = std::fs::read_to_string(&corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
        for u in mobius_conformance::level::dist::corpus::speech_corpus(spec.corpus(), &text).map_err(|e| e.to_string())? {
            let what = format!("{}: utterance `{}`: field `audio`", spec.corpus(), u.name);
            mobius_conformance::paths::confine(root, &root.join(&u.audio), &what, mobius_conformance::paths::CASE_HINT)
                .map_err(|e| e.to_string())?;
        }
    }
    // Which weights the int4 floor quantizes: those of the first local int4 package (its structure, not its values).
    let int4_package = variants.iter().find(|v| v.dtype == Dtype::Int4).and_then(|v| match &v.package {
        Some(Location::Local(p)) => Some(p.clone()),
        _ => None,
    });
    if case.is_speech_to_text() {
        // Utterances, each its clip through the encoder (paths relative to the root); the int4 floor quantizes what
        // the int4 package's encoder and decoder quantized.
        let g = &case.spec.generation;
        job["speech"] = true.into();
        job["root"] = serde_json::json!(root);
        job["int4_package"] = serde_json::json!(int4_package);
        job["language"] = serde_json::json!(g.lang);
        job["task"] = serde_json::json!(g.task.map(mobius_conformance::plan::case::SpeechTask::name));
    } else {
        let int4_model = int4_package.and_then(|p| mobius_conformance::feed::package::package_model(&p).ok());
        job["n_ctx"] = spec.n_ctx().into();
        job["int4_model"] = serde_json::json!(int4_model);
    }
    Ok(Some((job, DistJob { case: case.clone(), raw, out: suite.dist_golden_path(case) })))
}

/// Reads the reference's file back through the suite's loader (every check a trial makes), then writes it in place
/// of the stored golden: UNCHANGED when only log-probabilities moved, each by under twice 1e-5 (two float32 runs of
/// the reference on other CPUs), SKIPPED when it differs more without --force.
fn write(suite: &Suite, job: &DistJob, ledger: &mut Ledger) -> Result<Vec<String>, String> {
    let root = &suite.root;
    let shown = relative(root, &job.out);
    let bytes = std::fs::read(&job.raw).map_err(|e| format!("{}: {e}", job.raw.display()))?;
    let g = DistGolden::parse(&job.raw.display().to_string(), &bytes).map_err(|e| e.to_string())?;
    let segments = match g.n_ctx() {
        Some(n_ctx) => format!("{} chunks of {n_ctx}", g.chunks()),
        None => format!("{} utterances", g.chunks()),
    };
    let mut lines = vec![format!(
        "dist       {}: {segments}, {} scored positions, top {} + tail; floors {}",
        job.case.name,
        g.positions(),
        g.k,
        g.floors.iter().map(|(d, f)| format!("{d} {:.3e}", f.mean_kld)).collect::<Vec<_>>().join(", ")
    )];
    for (variant, c) in &g.check {
        lines.push(if c.non_finite {
            format!("check      {variant}: the package's logits are not finite")
        } else {
            format!(
                "check      {variant}: full-vocabulary KL {:.4e}, top-{} + tail {:.4e} ({:.2}% of it)",
                c.mean_kld,
                g.k,
                c.mean_kld_partition,
                100.0 * c.captured
            )
        });
    }
    let diff = std::fs::read(&job.out).ok().map(|old| compare::safetensors(&old, &bytes, Some(1e-5)));
    let line = ledger.write_one(DIST, &job.out, &shown, &bytes, diff.into())?;
    lines.push(line);
    Ok(lines)
}
