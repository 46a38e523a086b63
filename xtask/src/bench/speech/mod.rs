//! Speech-to-text: Whisper's real-time factor through the suite against Hugging Face's generate().

mod flac;
mod models;
mod runs;

use std::path::Path;

use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::run::runtime::Provider;
use serde_json::{Value, json};

use super::options::Options;
use super::python::{Served, settle};
use super::report::shown;
use super::stats::{Stats, finite_stats, ratio};
use models::{LoadedClip, SPEECH_CASES, SpeechModel, speech_models};
use runs::{SuiteSpeech, differs_from_generate, serve_whisper};

/// `repeats` pairs of runs on one clip, each run timed alone and the order alternating within pairs: seconds of
/// [the suite, the suite inside ONNX Runtime's run calls, HF] (HF NaN without Python). Every suite run must choose
/// `ids` again.
fn speech_pairs(
    suite: &SuiteSpeech,
    clip: &LoadedClip,
    ids: &[i64],
    mut hf: Option<&mut Served>,
    index: usize,
    repeats: usize,
) -> Result<Vec<[f64; 3]>, String> {
    let ours = |pair: &mut [f64; 3]| -> Result<(), String> {
        settle();
        let again;
        (pair[0], pair[1], again) = suite.run(clip)?;
        if again != ids {
            return Err(format!("{}: the suite's greedy tokens changed between runs", clip.file));
        }
        Ok(())
    };
    let mut pairs = Vec::with_capacity(repeats);
    for r in 0..repeats {
        let mut pair = [f64::NAN; 3];
        if r % 2 == 0 {
            ours(&mut pair)?;
        }
        if let Some(served) = hf.as_deref_mut() {
            settle();
            pair[2] = served.seconds(&index.to_string())?;
        }
        if r % 2 == 1 {
            ours(&mut pair)?;
        }
        pairs.push(pair);
    }
    Ok(pairs)
}

/// onnxruntime-genai on the package, through the suite's binding (the genai level's). mobius' Whisper packages are
/// refused today; the section prints genai's own message where its figure would be, rather than leave a silent gap.
fn genai_speech(package: &Path) -> (String, Value) {
    let p = shown(package);
    match mobius_conformance::run::genai::Model::open(package, Provider::Cpu) {
        Ok(Err(r)) => {
            (format!("onnxruntime-genai refuses {p}: {}: no genai figure", r.message), json!({ "package": p, "refused": r.message }))
        }
        Ok(Ok(_)) => (format!("onnxruntime-genai loads {p} now: add it to the speech section"), json!({ "package": p, "refused": null })),
        Err(e) => (format!("onnxruntime-genai could not be run on {p}: {e}"), json!({ "package": p, "error": e.to_string() })),
    }
}

/// The tokens generate() chose on each clip (EOS included), from `speech-serve`'s ready line.
fn served_ids(served: &Served, clips: usize) -> Result<Vec<Vec<i64>>, String> {
    (0..clips)
        .map(|i| {
            let ids = served.ready["clips"][i]["ids"].as_array().and_then(|a| a.iter().map(Value::as_i64).collect());
            ids.ok_or_else(|| format!("{}: no ids for clip {i} in {}", served.what, served.ready))
        })
        .collect()
}

/// One model's clips measured: a table row and a report entry per clip. Clips whose tokens differ between the suite
/// and generate() get no figure and are pushed to `failures`.
fn speech_model(o: &Options, m: &SpeechModel, rows: &mut Vec<String>, failures: &mut Vec<String>) -> Result<Vec<Value>, String> {
    let suite = SuiteSpeech::new(m)?;
    let clips: Vec<LoadedClip> = m.clips.iter().map(|c| LoadedClip::load(m, c)).collect::<Result<_, _>>()?;
    let mut hf = if o.skip_python { None } else { Some(serve_whisper(m)?) };
    let hf_ids = hf.as_ref().map(|h| served_ids(h, clips.len())).transpose()?;
    let mut out = Vec::new();
    for (i, clip) in clips.iter().enumerate() {
        let (_, _, ids) = suite.run(clip)?; // warm-up: the tokens every timed run must repeat
        let label = format!("{} {}", clip.case, clip.audio);
        let entry = |figures: Value| {
            let mut e = json!({ "case": clip.case, "clip": clip.audio, "package": shown(&m.package), "audio_seconds": clip.audio_seconds,
                                "tokens": ids.len(), "repeats": o.repeats });
            if let (Some(e), Value::Object(figures)) = (e.as_object_mut(), figures) {
                e.extend(figures);
            }
            e
        };
        let theirs = hf_ids.as_ref().map(|all| &all[i]);
        if let Some((step, theirs)) = theirs.and_then(|t| Some((differs_from_generate(&ids, t, &suite.eos)?, t.len()))) {
            let why = format!("the suite's tokens differ from generate()'s from step {step} ({} vs {theirs} tokens)", ids.len());
            rows.push(format!("| {label} | {:.2} | - | {why}: no figure | - | - | - |", clip.audio_seconds));
            failures.push(format!("speech {label}: {why}"));
            out.push(entry(json!({ "same_tokens": false, "first_difference": step })));
            continue;
        }
        let pairs = speech_pairs(&suite, clip, &ids, hf.as_mut(), i, o.repeats)?;
        let rtf = |k: usize| finite_stats(pairs.iter().map(|p| p[k] / clip.audio_seconds));
        let vs = finite_stats(pairs.iter().map(|p| ratio(p[2], p[0])));
        let cell = |s: Option<Stats>, digits: usize| {
            s.map_or("-".into(), |s| format!("{:.digits$} ({:.digits$}-{:.digits$})", s.median, s.min, s.max))
        };
        rows.push(format!(
            "| {label} | {:.2} | {} | {} | {} | {} | {} |",
            clip.audio_seconds,
            ids.len(),
            cell(rtf(0), 4),
            cell(rtf(1), 4),
            cell(rtf(2), 4),
            cell(vs, 2)
        ));
        let j = |s: Option<Stats>| s.map(|s| s.json());
        out.push(entry(
            json!({ "same_tokens": hf.as_ref().map(|_| true), "suite_rtf": j(rtf(0)), "suite_inside_ort_runs_rtf": j(rtf(1)), "hf_rtf": j(rtf(2)), "speech_hf_vs_suite": j(vs) }),
        ));
    }
    Ok(out)
}

/// Speech-to-text's real-time factor (processing seconds / audio seconds; lower is faster) of Whisper, encoder and
/// greedy decoding with the self-attention KV cache on one intra-op thread: the suite's runner against Hugging Face
/// transformers' generate() (torch, one thread), both from the same stored log-mel features and prefix, in
/// interleaved pairs per clip; the ratio is taken within each pair. A model not built, or without goldens, is
/// skipped naming what to run; onnxruntime-genai's refusal of the packages is printed with its message.
pub(super) fn speech_section(o: &Options, table: &mut Vec<String>, failures: &mut Vec<String>) -> Result<(Vec<Value>, Vec<Value>), String> {
    let models = speech_models(&Suite::open(&workspace_root()))?;
    let mut notes: Vec<String> = SPEECH_CASES
        .iter()
        .filter(|f| !models.iter().any(|m| m.file == **f))
        .map(|f| format!("speech: {f}: no such case: skipped"))
        .collect();
    let (mut rows, mut clips, mut genai) = (Vec::new(), Vec::new(), Vec::new());
    for m in &models {
        if let Some(why) = m.missing(o.skip_python)? {
            notes.push(format!("speech: {}: {why}: skipped", m.file));
            continue;
        }
        let (line, verdict) = genai_speech(&m.package);
        notes.push(format!("speech: {line}"));
        genai.push(verdict);
        clips.extend(speech_model(o, m, &mut rows, failures)?);
    }
    table.push(String::new());
    if !rows.is_empty() {
        table.push(format!(
            "| speech-to-text RTF (s / audio s; 1 thread, {} repeats) | audio s | tokens | suite | suite, ORT runs only | HF transformers generate() | HF / suite |",
            o.repeats
        ));
        table.push("|---|---|---|---|---|---|---|".into());
        table.append(&mut rows);
    }
    table.append(&mut notes);
    Ok((clips, genai))
}
