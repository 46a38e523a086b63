//! A case's goldens, one set per stream (modality, and dtype: float32, or int4 for kernel parity): the L4 logits
//! and positions (with their full-logits sidecar), the L5 tokens and step logits, a media stream's processed inputs
//! and its encoder features. Made by `xtask/reference/goldens.py`, which only dumps raw outputs: this side tokenizes
//! the prompt itself and checks it matches, and derives the goldens with the suite's own codec.

use std::path::{Path, PathBuf};

use mobius_conformance::feed::inputs::{Inputs, NamedTensor, TensorData};
use mobius_conformance::feed::package::package_model;
use mobius_conformance::feed::tokenizer::TextTokenizer;
use mobius_conformance::judge::golden::{self, GoldenFiles, GoldenPaths, Provenance, ReferenceRun};
use mobius_conformance::judge::tolerance::Logits;
use mobius_conformance::paths::relative;
use mobius_conformance::plan::case::{Case, Location};
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::vocab::{Dtype, Level, Modality};

use super::compare::{self, Bounds};
use super::job::{Job, Planned, Reference, Scope, genai_config_at};
use super::ledger::{Kind, Ledger, Margin, provenance};
use super::raw::{RawRun, RawTensor, f32s, f64s, i64s, raw_tensor, read_positions, read_raw};

/// The case goldens' job.
pub struct CaseGoldens;

/// A case (in one modality) the reference will run, and what it must produce.
pub struct Stream {
    case: Case,
    modality: Modality,
    /// The dtype whose golden this is: float32 for the reference itself; int4 for its kernel-parity twin.
    dtype: Dtype,
    raw: PathBuf,
    /// The prompt as the case's tokenizer.json encodes it: text jobs must match the reference's ids exactly.
    /// Media jobs take their ids from the Hugging Face processor (chat template, expanded media tokens).
    ids: Option<Vec<i64>>,
    /// The case's levels whose goldens are written (those `--level` names).
    levels: Vec<Level>,
}

impl Job for CaseGoldens {
    type Unit = Stream;
    const LEVELS: &'static [Level] = &[Level::L4, Level::L5];
    const REFERENCE: Reference = Reference { module: "goldens", jobs_file: "jobs.json" };

    /// One reference golden per modality, plus an int4 kernel-parity one when the case has int4 builds: for text, and
    /// for an encoder-decoder (whose speech.py dequantizes both models).
    fn plan(&self, scope: &Scope, case: &Case) -> Vec<Result<Planned<Stream>, String>> {
        let int4 = case.variants(&scope.suite.root).iter().any(|v| v.dtype == Dtype::Int4);
        let parity = |m: Modality| m == Modality::Text || case.is_speech_to_text();
        let dtypes = |m: Modality| if int4 && parity(m) { vec![Dtype::F32, Dtype::Int4] } else { vec![Dtype::F32] };
        let levels: Vec<Level> = case.levels().iter().copied().filter(|l| scope.level.is_none_or(|w| w == *l)).collect();
        let streams = case.modalities().into_iter().flat_map(|m| dtypes(m).into_iter().map(move |d| (m, d)));
        streams.map(|(modality, dtype)| plan_stream(scope, case, modality, dtype, &levels)).collect()
    }

    fn case<'u>(&self, stream: &'u Stream) -> &'u Case {
        &stream.case
    }

    fn raw<'u>(&self, stream: &'u Stream) -> &'u Path {
        &stream.raw
    }

    fn what(&self, _: &Suite, stream: &Stream) -> String {
        stream.case.file.clone()
    }

    /// Derives the stream's goldens and writes them, all together or none.
    fn write(&self, suite: &Suite, stream: &Stream, ledger: &mut Ledger) -> Result<Vec<String>, String> {
        let back = read_back(suite, stream)?;
        let paths = suite.golden_paths(&stream.case, stream.modality, stream.dtype);
        let sidecar_name = paths.sidecar().file_name().unwrap().to_string_lossy().into_owned();
        let case = &stream.case;
        let files =
            golden::from_reference(&back.run, &case.spec.model_id, case.prompt().unwrap_or_default(), case.max_new_tokens(), &sidecar_name)
                .map_err(|e| e.to_string())?;
        let mut lines = margin(suite, stream, &back.run, ledger);
        let targets = targets(suite, stream, &back, &paths, &files)?;
        // The noise the reference measured for this stream, as its stored L4 golden records it (else as this run did).
        let bounds = Bounds::of_prefill(&std::fs::read(&paths.prefill).unwrap_or_else(|_| files.prefill.clone()));
        let compared = targets.into_iter().map(|(file, path, bytes)| {
            let standing = std::fs::read(&path).ok().map(|old| file.compare(&bounds, &old, &bytes)).into();
            (file.kind(), path, bytes, standing)
        });
        lines.extend(ledger.write_together(&suite.root, compared.collect())?);
        Ok(lines)
    }
}

/// The int4 package whose weights the kernel-parity reference runs with: the first local int4 variant of the case
/// (every build flavour quantizes the same float32 weights with the same quantizer, so they dequantize alike).
/// An encoder-decoder's is the package folder: both of its models are dequantized.
pub(super) fn int4_package(suite: &Suite, case: &Case) -> Option<Result<PathBuf, String>> {
    let v = case.variants(&suite.root).into_iter().find(|v| v.dtype == Dtype::Int4)?;
    Some(match &v.package {
        Some(Location::Local(p)) if case.is_speech_to_text() => Ok(p.clone()),
        Some(Location::Local(p)) => package_model(p).map_err(|e| e.to_string()),
        _ => Err(format!("the {}/{} variant names no local package to dequantize", v.ep, v.dtype)),
    })
}

/// The reference job for one modality of a case (and dtype: f32, or int4 for kernel parity), or the SKIPPED lines
/// saying why there is none.
fn plan_stream(scope: &Scope, case: &Case, modality: Modality, dtype: Dtype, levels: &[Level]) -> Result<Planned<Stream>, String> {
    let suite = scope.suite;
    let root = &suite.root;
    let paths = suite.golden_paths(case, modality, dtype);
    let skip = |why: &str| {
        let lines = case.levels().iter().map(|l| if *l == Level::L4 { &paths.prefill } else { &paths.generation });
        Ok(Planned::Skip(lines.map(|p| format!("SKIPPED    {} ({why})", relative(root, p))).collect()))
    };
    let hub = crate::hub()?;
    let tok = case.tokenizer_location(root).map(|l| l.resolve("tokenizer.json", hub));
    let (Some(reference), Some(prompt), Some(tok)) = (case.reference_dir(root), case.prompt(), tok) else {
        return skip("the case names no `reference` weights or no prompt: its goldens are not made here");
    };
    if !reference.is_dir() {
        return skip(&format!("reference {} is not a directory", reference.display()));
    }
    let tok = tok.map_err(|e| e.to_string())?;
    let ids = match modality {
        Modality::Text => Some(TextTokenizer::load(&tok).and_then(|t| case.prompt_ids(&t, prompt)).map_err(|e| e.to_string())?),
        _ => None,
    };
    let media =
        |files: &[String], wanted: bool| -> Vec<PathBuf> { if wanted { files.iter().map(|f| root.join(f)).collect() } else { vec![] } };
    let images = media(&case.spec.inputs.images, matches!(modality, Modality::Image | Modality::ImageAudio));
    let genai = genai_config_at(suite, case);
    let audio = media(&case.spec.inputs.audio, matches!(modality, Modality::Audio | Modality::ImageAudio));
    // What the reference reads stays inside the suite root, symlinks resolved, unless the case opts out.
    if !case.spec.external_paths {
        let local_tok = matches!(case.tokenizer_location(root), Some(Location::Local(_))).then_some(("tokenizer", &tok));
        let local_genai = genai.as_ref().filter(|(_, local)| *local).map(|(g, _)| ("matrix.package", g));
        let named = [("reference", &reference)].into_iter().chain(local_tok).chain(local_genai);
        let media = images.iter().map(|p| ("inputs.images", p)).chain(audio.iter().map(|p| ("inputs.audio", p)));
        for (field, p) in named.chain(media) {
            let what = format!("{}: field `{field}`", case.file);
            mobius_conformance::paths::confine(root, p, &what, mobius_conformance::paths::CASE_HINT).map_err(|e| e.to_string())?;
        }
    }
    let dequantize = match dtype.golden_suffix().and_then(|_| int4_package(suite, case)) {
        None => None,
        Some(Ok(model)) => Some(model),
        Some(Err(why)) => return skip(&why),
    };
    let suffix = dtype.golden_suffix().map(|s| format!(".{s}")).unwrap_or_default();
    let raw = scope.raw_dir.join(format!("{}.{}{suffix}.safetensors", case.name, modality.slug()));
    let mut spec = serde_json::json!({
        "case": case.name,
        "modality": modality.name(),
        "reference": reference,
        "tokenizer": tok,
        "processor": reference,
        "images": images,
        "audio": audio,
        "prompt": prompt,
        "chat": case.spec.inputs.chat,
        "max_new_tokens": case.max_new_tokens(),
        "eos_token_id": case.spec.generation.eos_token_id,
        "genai_config": genai.map(|(g, _)| g),
        "trust_remote_code": case.spec.trust_remote_code,
        "task_type": case.spec.task_type,
        // A multilingual Whisper's forced prefix: `<|lang|>` and the task token (speech.py refuses to guess them).
        "language": case.spec.generation.lang,
        "task": case.spec.generation.task,
        "out": raw,
    });
    if let Some(model) = &dequantize {
        spec["dequantize"] = serde_json::json!(model);
    }
    Ok(Planned::Make { spec, unit: Stream { case: case.clone(), modality, dtype, raw, ids, levels: levels.to_vec() } })
}

/// A stream's raw outputs read back: the reference's run, what the model was fed, and the encoder's features.
struct ReadBack {
    run: ReferenceRun,
    fed: Inputs,
    features: Inputs,
    /// Whether it was fed media (not token ids alone).
    media: bool,
}

fn read_back(suite: &Suite, stream: &Stream) -> Result<ReadBack, String> {
    let RawRun { tensors, meta } = read_raw(&stream.raw)?;
    let get = |name: &str, dtype: safetensors::Dtype| raw_tensor(&stream.raw, &tensors, name, dtype);
    use safetensors::Dtype::{F32, I64};
    let input_ids = i64s(get("input_ids", I64)?.1);
    if let Some(ids) = &stream.ids
        && input_ids != *ids
    {
        return Err(format!(
            "the reference tokenized the prompt to {input_ids:?} but tokenizer.json gives {ids:?}: the Rust and Python tokenizers disagree"
        ));
    }
    let (fed, features) = fed_and_features(&stream.raw, &tensors)?;
    let media = fed.tensors.iter().any(|t| t.name != "input_ids");
    let fed = if fed.tensors.is_empty() { Inputs::from_token_ids(&input_ids) } else { fed };
    if fed.input_ids() != input_ids {
        return Err(format!("{}: `input.input_ids` differs from `input_ids`", stream.raw.display()));
    }
    let prefill_logits = f32s(get("prefill_logits", F32)?.1);
    // Raw outputs from before the noise floor have no float64 prefill: their goldens are judged by atol/rtol.
    let prefill_logits_f64 = match tensors.contains_key("prefill_logits_f64") {
        true => Some(f64s(get("prefill_logits_f64", safetensors::Dtype::F64)?.1)),
        false => None,
    };
    let positions = read_positions(&stream.raw, &tensors, input_ids.len())?;
    let generated_tokens = i64s(get("generated_tokens", I64)?.1);
    let (step_shape, step_data) = get("step_logits", F32)?;
    let vocab = prefill_logits.len();
    if step_shape.len() != 2 || step_shape[1] != vocab || step_shape[0] != generated_tokens.len() {
        return Err(format!("step_logits has shape {step_shape:?}, expected [{}, {vocab}]", generated_tokens.len()));
    }
    let step_logits: Vec<Vec<f32>> = f32s(step_data).chunks(vocab).map(<[f32]>::to_vec).collect();
    let m = |k: &str| meta.get(k).cloned().unwrap_or_default();
    let root = &suite.root;
    let run = ReferenceRun {
        input_hash: fed.hash(),
        input_ids,
        prefill_logits,
        prefill_logits_f64,
        positions,
        generated_tokens,
        step_logits,
        generated_text: m("generated_text"),
        provenance: Provenance {
            weights: meta.get("dequantized_from").map(|m| format!("int4 weights of {} dequantized", relative(root, Path::new(m)))),
            ..provenance(root, &stream.case, &meta)
        },
    };
    if stream.dtype.golden_suffix().is_some() && run.provenance.weights.is_none() {
        return Err(format!("{}: the reference did not say it ran with dequantized {} weights", stream.raw.display(), stream.dtype));
    }
    Ok(ReadBack { run, fed, features, media })
}

/// What the model is fed, as the Hugging Face processor made it (media jobs; empty for text jobs), and the encoder's
/// state (with, for speech-to-text, which frames are stored and the reference's own noise); each sorted by name.
fn fed_and_features(raw: &Path, tensors: &std::collections::HashMap<String, RawTensor>) -> Result<(Inputs, Inputs), String> {
    let mut fed = Inputs { tensors: Vec::new() };
    let mut features = Inputs { tensors: Vec::new() };
    for (name, t) in tensors {
        let named = |n: &str| -> Result<NamedTensor, String> {
            let data = TensorData::from_safetensors(t.dtype, &t.data)
                .ok_or_else(|| format!("{}: tensor `{name}` has dtype {:?}", raw.display(), t.dtype))?;
            Ok(NamedTensor { name: n.to_string(), shape: t.shape.iter().map(|&d| d as i64).collect(), data })
        };
        if let Some(n) = name.strip_prefix("input.") {
            fed.tensors.push(named(n)?);
        } else if name == "image_features" || name == "audio_features" || name.starts_with("audio_features.") {
            features.tensors.push(named(name)?);
        }
    }
    fed.tensors.sort_by(|a, b| a.name.cmp(&b.name));
    features.tensors.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((fed, features))
}

/// The margin line of a stream's golden (and a WARNING when a dtype it judges would call a flip there a near tie);
/// the margin goes into the ledger.
fn margin(suite: &Suite, stream: &Stream, run: &ReferenceRun, ledger: &mut Ledger) -> Vec<String> {
    let mut lines = Vec::new();
    let each: Vec<f64> = run.step_logits.iter().map(|l| mobius_numeric::TopK::of(l, 2).margin()).collect();
    if let Some((step, min)) = each.iter().copied().enumerate().min_by(|a, b| a.1.total_cmp(&b.1)) {
        let what = format!("{} ({}, {} golden)", stream.case.name, stream.modality, stream.dtype);
        lines.push(format!(
            "margin     {what}: smallest reference top1-top2 margin over prefill and {} steps = {min:.4} (step {step})",
            run.step_logits.len()
        ));
        let near_tie = loosest_near_tie(suite, stream);
        if let Some((loosest, dtype)) = near_tie
            && min < loosest
        {
            lines.push(format!(
                "WARNING    {what}: that margin is under the near-tie margin {loosest} of {dtype}, which this golden also judges: \
                 an honest {dtype} flip there would only be AMBIGUOUS; pick a seed or prompt with larger margins"
            ));
        }
        ledger.margins.push(Margin { what, min, step, steps: run.step_logits.len(), near_tie, each, tokens: run.generated_tokens.clone() });
    }
    lines
}

/// The loosest near-tie margin (L4 or L5) among the dtypes this stream's golden judges, with that dtype.
fn loosest_near_tie(suite: &Suite, stream: &Stream) -> Option<(f64, Dtype)> {
    let policy = suite.policy.as_ref().ok()?;
    let (case, dtype) = (&stream.case, stream.dtype);
    let judged = case.variants(&suite.root).into_iter().map(|v| v.dtype).filter(|d| d.golden_suffix() == dtype.golden_suffix());
    judged
        .flat_map(|d| {
            [Logits::Prefill, Logits::Stream]
                .map(|l| (policy.resolve(l, d, case.spec.tolerance.as_ref(), case.spec.min_token_match_ratio).near_tie_margin, d))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// The files a stream writes, in order: its processed inputs (a media stream's float32 golden), its encoder features,
/// then the goldens of the levels asked for.
fn targets(
    suite: &Suite,
    stream: &Stream,
    back: &ReadBack,
    paths: &GoldenPaths,
    files: &GoldenFiles,
) -> Result<Vec<(File, PathBuf, Vec<u8>)>, String> {
    let root = &suite.root;
    let mut targets = Vec::new();
    if back.media && stream.dtype.golden_suffix().is_none() {
        // A multi-media stream keeps only what its single-media streams (written earlier in this run) do not hold.
        let mut own = Inputs { tensors: back.fed.tensors.clone() };
        for shared in &paths.shared_inputs {
            let bytes =
                std::fs::read(shared).map_err(|e| format!("{}: {e} (its single-media golden must exist first)", relative(root, shared)))?;
            let theirs = Inputs::from_safetensors(&relative(root, shared), &bytes).map_err(|e| e.to_string())?;
            own.tensors.retain(|t| !theirs.tensors.iter().any(|o| o == t));
        }
        targets.push((File::Inputs, paths.inputs.clone(), own.to_safetensors().map_err(|e| e.to_string())?));
    }
    // An int4 encoder is judged against its own kernel-parity reference's features, as its logits are.
    if !back.features.tensors.is_empty() {
        targets.push((File::Features, paths.features.clone(), back.features.to_safetensors().map_err(|e| e.to_string())?));
    }
    // The prefill golden is L4's, the stream golden L5's; the case's other levels are judged against these.
    if stream.levels.contains(&Level::L4) {
        targets.push((File::Prefill, paths.prefill.clone(), files.prefill.clone()));
        if let Some(s) = &files.sidecar {
            targets.push((File::Sidecar, paths.sidecar(), s.clone()));
        }
    }
    if stream.levels.contains(&Level::L5) {
        targets.push((File::Generation, paths.generation.clone(), files.generation.clone()));
    }
    Ok(targets)
}

/// A file of a stream's goldens.
#[derive(Debug, Clone, Copy)]
enum File {
    Prefill,
    Sidecar,
    Generation,
    Inputs,
    Features,
}

impl File {
    fn kind(self) -> Kind {
        let (order, name) = match self {
            File::Prefill => (0, "L4 logits and positions"),
            File::Sidecar => (1, "L4 full-logits sidecars"),
            File::Generation => (2, "L5 tokens and step logits"),
            File::Inputs => (3, "processed media inputs"),
            File::Features => (4, "encoder features"),
        };
        Kind { order, name }
    }

    /// A stored file against the regenerated one. The processed inputs are what the model is fed: compared exactly.
    /// Encoder features are judged by the stream's last-position noise, the one measure of the reference's float32
    /// error it has (an audio stream has none: exact).
    fn compare(self, bounds: &Bounds, old: &[u8], new: &[u8]) -> compare::Diff {
        match self {
            File::Prefill => compare::json(old, new, &|p| bounds.prefill(p)),
            File::Generation => compare::json(old, new, &|p| bounds.generation(p)),
            File::Sidecar | File::Features => compare::safetensors(old, new, bounds.last),
            File::Inputs => compare::safetensors(old, new, None),
        }
    }
}
