//! The localize level's goldens (`<case>[.<modality>][.<dtype>].modules.safetensors`): planned here for each case
//! with L4, for each of its modalities (the float32 reference; the int4 kernel-parity reference where the case has
//! int4 builds of a text or speech-to-text model; the reference with its weights rounded to float16 or bfloat16 where
//! the case has builds of that dtype, stored as its difference from the float32 golden), made by
//! `xtask/reference/modules.py` (each module's output along the model, a multimodal model's towers included, with
//! its own float32-vs-float64 noise), read back through the
//! suite's own loader, and written like every golden: atomically, UNCHANGED within noise, held back without `--force`.

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

/// One module golden to make: a case's stream in one modality and dtype.
pub struct ModuleJob {
    case: Case,
    modality: Modality,
    dtype: Dtype,
    raw: PathBuf,
    out: PathBuf,
    /// The float32 module golden: a half-precision one is stored as its difference from it.
    base: PathBuf,
    /// The prompt as the case's tokenizer.json encodes it: the reference's ids must match.
    ids: Vec<i64>,
}

impl Job for ModuleGoldens {
    type Unit = ModuleJob;
    const LEVELS: &'static [Level] = &[Level::Localize];
    const REFERENCE: Reference = Reference { module: "modules", jobs_file: "modules.json" };

    fn plan(&self, scope: &Scope, case: &Case) -> Vec<Result<Planned<ModuleJob>, String>> {
        // The case file's first prompt (or clip) only: its module golden is the model's, at most 1 MiB per real case.
        if !case.levels().contains(&Level::L4) || !case.is_first_prompt() {
            return vec![];
        }
        let dtypes: Vec<Dtype> = case.variants(&scope.suite.root).iter().map(|v| v.dtype).collect();
        // A speech-to-text case's one stream is its audio; a multimodal case has one per modality.
        let modalities = if case.is_speech_to_text() { vec![Modality::Audio] } else { case.modalities() };
        // int4 kernel parity dequantizes a text model or an encoder-decoder, as the case goldens do; a half-precision
        // variant's reference rounds the weights of any model. The float32 golden comes first: the half-precision
        // ones are stored as their difference from it.
        let wanted = |m: Modality, d: Dtype| match d {
            Dtype::F32 => true,
            Dtype::Int4 => dtypes.contains(&d) && (m == Modality::Text || case.is_speech_to_text()),
            Dtype::F16 | Dtype::Bf16 => dtypes.contains(&d),
        };
        let streams = modalities.into_iter().flat_map(|m| [Dtype::F32, Dtype::Int4, Dtype::F16, Dtype::Bf16].map(|d| (m, d)));
        streams.filter(|&(m, d)| wanted(m, d)).map(|(m, d)| plan(scope, case, m, d)).collect()
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
                "the reference fed the ids {:?} but {} gives {:?}: the reference and the suite disagree on the prompt",
                g.input_ids,
                if job.modality == Modality::Text { "tokenizer.json" } else { "the stored inputs" },
                job.ids
            ));
        }
        // Two float32 runs of the reference on other CPUs differ by about its noise: within 1e-5, UNCHANGED.
        let (bytes, diff) = match job.dtype.torch_half() {
            None => {
                let diff = std::fs::read(&job.out).ok().map(|old| compare::safetensors(&old, &bytes, Some(1e-5)));
                (bytes, diff)
            }
            Some(rounded_to) => half(job, &g, rounded_to)?,
        };
        let line = format!(
            "modules    {} ({}{}): {} modules, {} bytes",
            job.case.name,
            job.modality.name(),
            job.dtype.module_golden_suffix().map(|s| format!(", {s}")).unwrap_or_default(),
            g.entries.len(),
            bytes.len()
        );
        Ok(vec![line, ledger.write_one(MODULES, &job.out, &shown, &bytes, diff.into())?])
    }
}

/// A half-precision golden's bytes, stored over the float32 golden beside it as that stands on disk now, and how it
/// stands against the one stored: decoded, each value within 1e-5 plus a storage step of the one stored.
fn half(job: &ModuleJob, g: &ModuleGolden, rounded_to: &str) -> Result<(Vec<u8>, Option<compare::Diff>), String> {
    let base_file = job.base.display().to_string();
    let name = job.base.file_name().and_then(|n| n.to_str()).ok_or_else(|| format!("{base_file}: not a file name"))?;
    let base_bytes = std::fs::read(&job.base).map_err(|e| format!("{base_file}: {e} (the float32 module golden is made first)"))?;
    let base = ModuleGolden::parse(&base_file, &base_bytes).map_err(|e| e.to_string())?;
    let bytes = g.delta_bytes(&base, name, &base_bytes, rounded_to).map_err(|e| format!("{}: {e}", job.raw.display()))?;
    let Ok(old) = std::fs::read(&job.out) else { return Ok((bytes, None)) };
    if old == bytes {
        return Ok((bytes, Some(compare::Diff::Same)));
    }
    let shown = job.out.display().to_string();
    let decoded = |b: &[u8]| ModuleGolden::parse_delta(&shown, b, &base, &base_bytes);
    let diff = match (decoded(&old), decoded(&bytes)) {
        (Err(e), _) => compare::Diff::Changed { at: "the stored file".into(), why: e.to_string() },
        (_, Err(e)) => compare::Diff::Changed { at: "the new file".into(), why: e.to_string() },
        (Ok(a), Ok(b)) => moved(&a, &b),
    };
    Ok((bytes, Some(diff)))
}

/// How far `new`'s values moved from `old`'s (the same modules): within 1e-5 plus what each one's storage may have
/// moved them (half a step each), noise only.
fn moved(old: &ModuleGolden, new: &ModuleGolden) -> compare::Diff {
    let mut largest: Option<(f64, String, f64)> = None;
    for (a, b) in old.entries.iter().zip(&new.entries) {
        let (m, n) = a.values.iter().zip(&b.values).enumerate().fold((0f64, 0), |(m, at), (i, (x, y))| {
            let d = (*x as f64 - *y as f64).abs();
            if d > m { (d, i) } else { (m, at) }
        });
        let slack = 1e-5 + a.storage + b.storage;
        if m.is_nan() || m > slack {
            return compare::Diff::Changed { at: format!("{}[{n}]", a.module), why: format!("moved by {m:.3e}, past {slack:.3e}") };
        }
        if largest.as_ref().is_none_or(|(l, ..)| m > *l) {
            largest = Some((m, format!("{}[{n}]", a.module), slack));
        }
    }
    match largest {
        Some((max, at, noise)) if max > 0.0 => compare::Diff::NoiseOnly { max, at, noise },
        _ => compare::Diff::Same,
    }
}

fn plan(scope: &Scope, case: &Case, modality: Modality, dtype: Dtype) -> Result<Planned<ModuleJob>, String> {
    let suite = scope.suite;
    let root = &suite.root;
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
    // Text: the prompt as tokenizer.json encodes it; speech and media: the ids the stored inputs hold (the forced
    // prefix; the processor's chat template with its media tokens).
    let ids = match modality {
        Modality::Text => TextTokenizer::load(&tok).and_then(|t| case.prompt_ids(&t, prompt)).map_err(|e| e.to_string())?,
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
    let suffix = dtype.module_golden_suffix().map(|s| format!(".{s}")).unwrap_or_default();
    let base = suite.golden_paths(case, modality, Dtype::F32).modules;
    let raw = scope.raw_dir.join(format!("{}.{}{suffix}.modules.safetensors", case.name, modality.slug()));
    // The media this stream's model hears and sees: a speech-to-text case's clip, a multimodal stream's media.
    let speech = case.is_speech_to_text();
    let media =
        |files: &[String], wanted: bool| -> Vec<PathBuf> { if wanted { files.iter().map(|f| root.join(f)).collect() } else { vec![] } };
    let images = media(&case.spec.inputs.images, !speech && matches!(modality, Modality::Image | Modality::ImageAudio));
    let audio = media(&case.spec.inputs.audio, speech || matches!(modality, Modality::Audio | Modality::ImageAudio));
    if !case.spec.external_paths {
        let named = images.iter().map(|p| ("inputs.images", p)).chain(audio.iter().map(|p| ("inputs.audio", p)));
        for (field, p) in named {
            let what = format!("{}: field `{field}`", case.file);
            mobius_conformance::paths::confine(root, p, &what, mobius_conformance::paths::CASE_HINT).map_err(|e| e.to_string())?;
        }
    }
    let g = &case.spec.generation;
    let spec = serde_json::json!({
        "case": case.name,
        "task_type": case.spec.task_type,
        // A multimodal stream's: processed as the case goldens' reference processes it.
        "modality": if speech { "text" } else { modality.name() },
        "reference": reference,
        "processor": reference,
        "tokenizer": tok,
        "prompt": prompt,
        "chat": case.spec.inputs.chat,
        "images": images,
        "audio": audio,
        "language": g.lang,
        "task": g.task.map(mobius_conformance::plan::case::SpeechTask::name),
        "dequantize": dequantize,
        "round_to": dtype.torch_half(),
        "out": raw,
    });
    Ok(Planned::Make { spec, unit: ModuleJob { case: case.clone(), modality, dtype, raw, out, base, ids } })
}
