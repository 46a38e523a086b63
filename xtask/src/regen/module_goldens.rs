//! The localize level's goldens (`<case>[.int4].modules.safetensors`): planned here for each text-only case with L4 (the
//! float32 reference, and the int4 kernel-parity reference where the case has int4 builds), made by
//! `xtask/reference/modules.py` (each module's output along the model at the last prompt position, with its own
//! float32-vs-float64 noise), read back through the suite's own loader, and written like every golden: atomically,
//! UNCHANGED within noise, held back without `--force`.

use std::path::{Path, PathBuf};

use mobius_conformance::feed::tokenizer::TextTokenizer;
use mobius_conformance::level::localize::golden::ModuleGolden;
use mobius_conformance::paths::relative;
use mobius_conformance::plan::case::{Case, Location};
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::vocab::{Dtype, Level, Modality};

use super::compare;
use super::job::{Job, Planned, Reference, Scope};
use super::ledger::{Kind, Ledger};

/// The localize level's job.
pub struct ModuleGoldens;

/// What the counts at the end of a run call a module golden.
const MODULES: Kind = Kind { order: 7, name: "localize module outputs" };

/// One module golden to make: a case's text stream in one dtype.
pub struct ModuleJob {
    case: Case,
    raw: PathBuf,
    out: PathBuf,
    /// The prompt as the case's tokenizer.json encodes it: the reference's ids must match.
    ids: Vec<i64>,
}

impl Job for ModuleGoldens {
    type Unit = ModuleJob;
    const LEVELS: &'static [Level] = &[Level::Localize];
    const REFERENCE: Reference = Reference { module: "modules", jobs_file: "modules.json" };

    fn plan(&self, scope: &Scope, case: &Case) -> Vec<Result<Planned<ModuleJob>, String>> {
        // Text decoders fed token ids, and Whisper's decoder after its encoder. A multimodal package's decoder takes
        // embeddings from its own session and names its modules without the reference's `language_model`: not yet.
        let speech = case.is_speech_to_text();
        // The case file's first prompt (or clip) only: its module golden is the model's, at most 1 MiB per real case.
        if !case.levels().contains(&Level::L4) || !(speech || case.modalities() == [Modality::Text]) || !case.is_first_prompt() {
            return vec![];
        }
        let int4 = case.variants(&scope.suite.root).iter().any(|v| v.dtype == Dtype::Int4);
        let dtypes = if int4 { vec![Dtype::F32, Dtype::Int4] } else { vec![Dtype::F32] };
        dtypes.into_iter().map(|d| plan(scope, case, d)).collect()
    }

    fn case<'u>(&self, job: &'u ModuleJob) -> &'u Case {
        &job.case
    }

    fn raw<'u>(&self, job: &'u ModuleJob) -> &'u Path {
        &job.raw
    }

    fn what(&self, suite: &Suite, job: &ModuleJob) -> String {
        relative(&suite.root, &job.out)
    }

    fn write(&self, suite: &Suite, job: &ModuleJob, ledger: &mut Ledger) -> Result<Vec<String>, String> {
        let shown = relative(&suite.root, &job.out);
        if ledger.from_raw.is_some() && !job.raw.is_file() {
            return Ok(vec![format!("SKIPPED    {shown} (--from-raw holds no raw output for it)")]);
        }
        let bytes = std::fs::read(&job.raw).map_err(|e| format!("{}: {e}", job.raw.display()))?;
        let g = ModuleGolden::parse(&job.raw.display().to_string(), &bytes).map_err(|e| e.to_string())?;
        if g.input_ids != job.ids {
            return Err(format!(
                "the reference tokenized the prompt to {:?} but tokenizer.json gives {:?}: the Rust and Python tokenizers disagree",
                g.input_ids, job.ids
            ));
        }
        let line = format!("modules    {}: {} modules, {} bytes", job.case.name, g.entries.len(), bytes.len());
        // Two float32 runs of the reference on other CPUs differ by about its noise: within 1e-5, UNCHANGED.
        let diff = std::fs::read(&job.out).ok().map(|old| compare::safetensors(&old, &bytes, Some(1e-5)));
        Ok(vec![line, ledger.write_one(MODULES, &job.out, &shown, &bytes, diff.into())?])
    }
}

fn plan(scope: &Scope, case: &Case, dtype: Dtype) -> Result<Planned<ModuleJob>, String> {
    let suite = scope.suite;
    let root = &suite.root;
    let modality = if case.is_speech_to_text() { Modality::Audio } else { Modality::Text };
    let out = suite.golden_paths(case, modality, dtype).modules;
    let skip = |why: &str| Ok(Planned::Skip(vec![format!("SKIPPED    {} ({why})", relative(root, &out))]));
    let (Some(reference), Some(prompt)) = (case.reference_dir(root), case.prompt()) else {
        return skip("the case names no `reference` weights or no prompt");
    };
    if !reference.is_dir() {
        return skip(&format!("reference {} is not a directory", reference.display()));
    }
    let tok = match case.tokenizer_location(root) {
        Some(l) => l.resolve("tokenizer.json", crate::hub()?).map_err(|e| e.to_string())?,
        None => return skip("the case names no tokenizer"),
    };
    if !case.spec.external_paths {
        let local_tok = matches!(case.tokenizer_location(root), Some(Location::Local(_))).then_some(("tokenizer", &tok));
        for (field, p) in [("reference", &reference)].into_iter().chain(local_tok) {
            let what = format!("{}: field `{field}`", case.file);
            mobius_conformance::paths::confine(root, p, &what, mobius_conformance::paths::CASE_HINT).map_err(|e| e.to_string())?;
        }
    }
    // Text: the prompt as tokenizer.json encodes it; speech: the forced prefix the stored inputs hold.
    let ids = match modality {
        Modality::Text => TextTokenizer::load(&tok).and_then(|t| t.encode(prompt)).map_err(|e| e.to_string())?,
        _ => {
            let paths = suite.golden_paths(case, modality, Dtype::F32);
            let inputs = paths.load_inputs(|p| relative(root, p)).map_err(|e| format!("{e} (make the case's goldens first)"))?;
            inputs.input_ids().to_vec()
        }
    };
    let dequantize = match dtype.golden_suffix().and_then(|_| super::case_goldens::int4_package(suite, case)) {
        None => None,
        Some(Ok(model)) => Some(model),
        Some(Err(why)) => return skip(&why),
    };
    let suffix = dtype.golden_suffix().map(|s| format!(".{s}")).unwrap_or_default();
    let raw = scope.raw_dir.join(format!("{}{suffix}.modules.safetensors", case.name));
    let audio: Vec<PathBuf> = case.spec.inputs.audio.iter().map(|a| root.join(a)).collect();
    if !case.spec.external_paths {
        for a in &audio {
            let what = format!("{}: field `inputs.audio`", case.file);
            mobius_conformance::paths::confine(root, a, &what, mobius_conformance::paths::CASE_HINT).map_err(|e| e.to_string())?;
        }
    }
    let g = &case.spec.generation;
    let spec = serde_json::json!({
        "case": case.name,
        "task_type": case.spec.task_type,
        "reference": reference,
        "tokenizer": tok,
        "prompt": prompt,
        "audio": audio,
        "language": g.lang,
        "task": g.task.map(mobius_conformance::plan::case::SpeechTask::name),
        "dequantize": dequantize,
        "out": raw,
    });
    Ok(Planned::Make { spec, unit: ModuleJob { case: case.clone(), raw, out, ids } })
}
