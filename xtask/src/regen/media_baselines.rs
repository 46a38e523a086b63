//! The multimodal gate's baselines: `goldens/baselines/<task>/<case>.json` for an lmms-eval task, and for image
//! tasks the reference processor's tensors beside it (`<case>.inputs.safetensors`).
//!
//! The items are built here with the suite's own reimplementation of the task's hooks (the code the gate runs);
//! only each item's question and media bytes go to Python (`xtask/reference/lmms_run.py`), which returns the
//! generated ids and margins. The texts, the stop-list cuts and the scores are derived here, with the suite's
//! scorers, and written atomically.

use std::path::{Path, PathBuf};

use mobius_conformance::accuracy::lmms::{Media, MediaItem, MediaTask, Medium};
use mobius_conformance::accuracy::media_gate::{self, MediaBaseline, MediaBaselineItem, Output};
use mobius_conformance::accuracy::protocol::Protocol;
use mobius_conformance::accuracy::resolve::{ResolvedTask, Source, TaskKind, task_name};
use mobius_conformance::feed::tokenizer::TextTokenizer;
use mobius_conformance::judge::golden::Hex;
use mobius_conformance::paths::relative;
use mobius_conformance::plan::case::{Case, SpeechTask};
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::vocab::Level;

use super::baselines::BASELINE;
use super::job::{Job, Planned, Reference, Scope};
use super::ledger::{Ledger, Standing, check_format, provenance};

/// The format of lmms_run.py's raw outputs this xtask reads.
pub const FORMAT: &str = "lmms-run-v1";

pub struct MediaJob {
    case: Case,
    task: MediaTask,
    items: Vec<MediaItem>,
    protocol: Protocol,
    raw: PathBuf,
    out: PathBuf,
}

/// The multimodal accuracy gate's baselines' job.
pub struct MediaBaselines;

impl Job for MediaBaselines {
    type Unit = MediaJob;
    const LEVELS: &'static [Level] = &[];
    const REFERENCE: Reference = Reference { module: "lmms_run", jobs_file: "lmms_run.json" };

    fn plan(&self, scope: &Scope, case: &Case) -> Vec<Result<Planned<MediaJob>, String>> {
        Planned::each(plan(scope.suite, case, scope.raw_dir))
    }

    fn case<'u>(&self, job: &'u MediaJob) -> &'u Case {
        &job.case
    }

    fn raw<'u>(&self, job: &'u MediaJob) -> &'u Path {
        &job.raw
    }

    fn what(&self, suite: &Suite, job: &MediaJob) -> String {
        relative(&suite.root, &job.out)
    }

    fn write(&self, suite: &Suite, job: &MediaJob, ledger: &mut Ledger) -> Result<Vec<String>, String> {
        let (baseline, inputs, line) = derive(suite, job)?;
        let mut lines = vec![line];
        lines.extend(write(suite, job, &baseline, inputs.as_deref(), ledger)?);
        Ok(lines)
    }
}

/// The jobs for a case's lmms-eval tasks, with the JSON lmms_run.py reads for each (media written under `work`).
fn plan(suite: &Suite, case: &Case, work: &Path) -> Result<Vec<(serde_json::Value, MediaJob)>, String> {
    let root = &suite.root;
    let mut out = Vec::new();
    for entry in &case.spec.accuracy {
        // A dataset without a `data` folder is looked up in the hub cache the environment names.
        let source = Source { hub_cache: Some(crate::hub()?.cache.clone()), ..entry.source(root, case.spec.external_paths) };
        let resolved = ResolvedTask::new(root, entry.file(), source);
        let (file, source) = (resolved.file.as_str(), &resolved.source);
        // The rule the trials follow, so regen writes the baseline the gate will read.
        if resolved.kind != TaskKind::Media {
            continue;
        }
        let reference = case.reference_dir(root).ok_or_else(|| format!("{}: an accuracy case needs `reference` weights", case.file))?;
        let protocol =
            source.overrides.protocol.clone().ok_or_else(|| format!("{}: accuracy task `{file}` needs a `protocol`", case.file))?;
        let task = MediaTask::load(root, file, source.data.as_deref(), source.hub_cache.as_deref(), source.overrides.limit)
            .map_err(|e| e.to_string())?;
        protocol
            .validate(&format!("{}: accuracy `{file}` field `protocol`", case.file), task.family.medium() == Medium::Audio)
            .map_err(|e| e.to_string())?;
        let items = task.items().map_err(|e| e.to_string())?;
        let name = resolved.name.clone();
        let media_path = work.join(format!("media.{name}.{}.safetensors", case.name));
        let raw = work.join(format!("lmms.{name}.{}.safetensors", case.name));
        write_media(&items, &media_path)?;
        let g = &case.spec.generation;
        let spec = serde_json::json!({
            "reference": reference, "out": raw, "media": media_path,
            "model": if task.family.medium() == Medium::Audio { "whisper" } else { "multimodal" },
            "items": items.iter().map(|it| serde_json::json!({"doc": it.doc, "question": it.question})).collect::<Vec<_>>(),
            "max_new_tokens": task.max_new_tokens,
            "eos": g.eos_token_id.map(|e| vec![e]),
            "language": g.lang, "task": g.task.map(SpeechTask::name),
            "protocol": protocol,
        });
        let out_path = suite.baseline_path(&name, &case.name);
        out.push((spec, MediaJob { case: case.clone(), task, items, protocol, raw, out: out_path }));
    }
    Ok(out)
}

/// Each item's media as the file bytes lmms_run.py decodes (`<doc>`: uint8).
fn write_media(items: &[MediaItem], path: &Path) -> Result<(), String> {
    let mut bufs: Vec<(String, Vec<u8>)> = Vec::with_capacity(items.len());
    for it in items {
        let bytes = match &it.media {
            Media::File(b) => b.clone(),
            Media::Samples { .. } => {
                return Err(format!("document {}: decoded audio arrays are not sent to the reference yet; store the file's bytes", it.doc));
            }
        };
        bufs.push((it.doc.to_string(), bytes));
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = bufs
        .iter()
        .map(|(k, b)| {
            Ok((k.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::U8, vec![b.len()], b).map_err(|e| e.to_string())?))
        })
        .collect::<Result<_, String>>()?;
    let bytes = safetensors::serialize(views, None).map_err(|e| e.to_string())?;
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// The baseline (and for image tasks the inputs file) from the reference's raw outputs; and the report line.
fn derive(suite: &Suite, job: &MediaJob) -> Result<(MediaBaseline, Option<Vec<u8>>, String), String> {
    let bytes = std::fs::read(&job.raw).map_err(|e| format!("{}: {e}", job.raw.display()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| format!("{}: {e}", job.raw.display()))?;
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| format!("{}: {e}", job.raw.display()))?;
    let meta = meta.metadata().clone().unwrap_or_default();
    check_format(&job.raw, meta.get("format").map(String::as_str), FORMAT, "xtask/reference/lmms_run.py")?;
    let root = &suite.root;
    let tok =
        job.case.tokenizer_location(root).ok_or("no tokenizer")?.resolve("tokenizer.json", crate::hub()?).map_err(|e| e.to_string())?;
    let tokenizer = TextTokenizer::load(&tok).map_err(|e| e.to_string())?;
    let eos: Vec<i64> = job.case.spec.generation.eos_token_id.into_iter().collect();
    let mut items = Vec::with_capacity(job.items.len());
    let mut outputs = Vec::with_capacity(job.items.len());
    let mut inputs: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for it in &job.items {
        let t =
            st.tensor(&format!("tokens.{}", it.doc)).map_err(|e| format!("{}: tokens of document {}: {e}", job.raw.display(), it.doc))?;
        let tokens: Vec<i64> = t.data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
        let m =
            st.tensor(&format!("margin.{}", it.doc)).map_err(|e| format!("{}: margin of document {}: {e}", job.raw.display(), it.doc))?;
        let margin = m.data().get(..4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).filter(|x| x.is_finite());
        let text_ids: Vec<i64> = tokens.iter().copied().filter(|t| !eos.contains(t)).collect();
        let full = tokenizer.decode(&text_ids);
        outputs.push(Output { full: full.clone(), margin });
        items.push(MediaBaselineItem { full, tokens, margin: margin.map(Hex) });
        if job.task.family.medium() == Medium::Image {
            let prefix = format!("{}.", it.doc);
            for (name, view) in st.tensors() {
                if name.starts_with(&prefix) {
                    inputs.push((name.clone(), view.dtype(), view.shape().to_vec(), view.data().to_vec()));
                }
            }
        }
    }
    let until = job.protocol.stops(&job.task.until).to_vec();
    let scores = media_gate::scores(&job.task, &job.items, &outputs, &job.protocol, true);
    let score = job.task.family.scorer().aggregate(&job.task.metric, &scores);
    let name = task_name(&job.task.file);
    let baseline = MediaBaseline {
        task: name.clone(),
        model: job.case.name.clone(),
        metric: job.task.metric.clone(),
        n: items.len(),
        score,
        protocol: job.protocol.clone(),
        until: until.clone(),
        max_new_tokens: job.task.max_new_tokens,
        requests_hash: media_gate::requests_hash(&job.items, &job.protocol, &until, job.task.max_new_tokens),
        items,
        provenance: provenance(root, &job.case, &meta),
    };
    let inputs_bytes = if inputs.is_empty() {
        None
    } else {
        inputs.sort_by(|a, b| a.0.cmp(&b.0));
        let views: Vec<(String, safetensors::tensor::TensorView)> = inputs
            .iter()
            .map(|(n, d, s, b)| Ok((n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b).map_err(|e| e.to_string())?)))
            .collect::<Result<_, String>>()?;
        let raw = safetensors::serialize(views, None).map_err(|e| e.to_string())?;
        let mut z = snap::write::FrameEncoder::new(Vec::new());
        std::io::Write::write_all(&mut z, &raw).map_err(|e| e.to_string())?;
        Some(z.into_inner().map_err(|e| e.to_string())?)
    };
    let line = format!("accuracy   {name} on {} (reference): {} {score:.4} over {} items", job.case.name, job.task.metric, baseline.n);
    Ok((baseline, inputs_bytes, line))
}

/// Writes the baseline (and its inputs) like a golden: SAVED, UNCHANGED, or SKIPPED when it differs without --force.
fn write(
    suite: &Suite,
    job: &MediaJob,
    baseline: &MediaBaseline,
    inputs: Option<&[u8]>,
    ledger: &mut Ledger,
) -> Result<Vec<String>, String> {
    let mut lines = Vec::new();
    let mut files = vec![(job.out.clone(), baseline.to_json())];
    if let Some(b) = inputs {
        files.push((media_inputs_path(&job.out), b.to_vec()));
    }
    for (path, bytes) in files {
        let shown = relative(&suite.root, &path);
        let standing = match std::fs::read(&path).ok() {
            None => Standing::New,
            Some(old) if old == bytes => Standing::Same,
            Some(old) => match margins_only(&old, baseline).filter(|_| path == job.out) {
                Some(most) => Standing::Noise(format!("noise only: the outputs are equal, margins moved by at most {most:.1e}")),
                None => Standing::Changed(None),
            },
        };
        lines.push(ledger.write_one(BASELINE, &path, &shown, &bytes, standing)?);
    }
    Ok(lines)
}

/// The largest move of an item's margin when `old` (a baseline file) and `new` differ in their margins alone, by
/// no more than kernel noise on a logit gap (1e-4: another CPU's f32 reductions): then the kept file stays.
fn margins_only(old: &[u8], new: &MediaBaseline) -> Option<f64> {
    let old: MediaBaseline = serde_json::from_slice(old).ok()?;
    let strip = |b: &MediaBaseline| {
        let mut b = b.clone();
        b.items.iter_mut().for_each(|i| i.margin = None);
        b
    };
    if strip(&old) != strip(new) {
        return None;
    }
    let mut most = 0.0f64;
    for (a, b) in old.items.iter().zip(&new.items) {
        match (a.margin.map(|h| h.0), b.margin.map(|h| h.0)) {
            (Some(x), Some(y)) => most = most.max((x - y).abs()),
            (None, None) => {}
            _ => return None,
        }
    }
    (most <= 1e-4).then_some(most)
}

/// `<case>.inputs.safetensors.sz` beside `<case>.json` (Snappy-framed: drawn images compress well).
pub fn media_inputs_path(baseline: &Path) -> PathBuf {
    mobius_conformance::accuracy::media_gate::inputs_path(baseline)
}
