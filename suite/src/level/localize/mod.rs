//! Localize: where along the model a package leaves the reference. The reference's output of each module along the
//! model's path at the last prompt position (`golden`), found in the package's graph by one rule (`place`), read
//! from a copy of the graph that outputs them, run once over the case's first prompt, and compared module by module
//! in the model's order against the reference's own noise (`judge`). The first module out of noise (or not finite)
//! is the verdict's news (`render`).
//!
//! It is never planned on its own, so a passing run pays nothing: a failing trial of a level that localizes
//! (`Kind::localizes`: L4, genai, the encoder levels) runs it after its verdict, and its failure then names the module, which a strict xfail
//! may state (`first_module`). `cargo xtask localize <trial>` runs it on demand, on a passing trial too.

pub mod golden;
pub mod judge;
pub mod place;
pub mod render;

use std::path::Path;
use std::sync::Arc;

use self::golden::{ModuleGolden, Part};
use self::judge::{Got, Localization};
use self::place::{Index, Placed};
use super::Kind;
use crate::error::{Error, Result};
use crate::feed::package::{Component, GenaiConfig};
use crate::judge::tolerance::Logits;
use crate::level::trial::{Ends, Opened, Prepared, Trial};
use crate::outcome::{Failure, FailureKind, Outcome, Status};
use crate::run::decoder::{Decoder, exposed};
use crate::run::encoders;
use crate::run::pipeline::Pipeline;
use crate::run::pipeline::multimodal::Embedder;
use crate::vocab::{Level, Modality};

pub struct Localize;

impl Kind for Localize {
    fn level(&self) -> Level {
        Level::Localize
    }

    /// None an xfail entry may name: it is never planned, its findings are the failing level's (`first_module`).
    fn failures(&self) -> &'static [FailureKind] {
        &[]
    }

    fn regenerates_alone(&self) -> bool {
        true
    }

    fn run(&self, t: &Trial) -> Result<Outcome> {
        Ok(match localize(t)? {
            Ok(l) => outcome(t, l),
            Err(o) => o,
        })
    }
}

/// The outcome of a localize trial: failed when a module is out of noise, its failure naming it.
fn outcome(t: &Trial, l: Localization) -> Outcome {
    let failure = failure(&l).map(Box::new);
    Outcome {
        status: if failure.is_some() { Status::Fail } else { Status::Pass },
        message: render::table(t.name, &l),
        failure,
        judgement: Some(Arc::new(l)),
        ..Outcome::new(Status::Pass, "")
    }
}

/// What a localization names as a failure: its first module, `non_finite` when that one is not finite.
pub fn failure(l: &Localization) -> Option<Failure> {
    let first = l.first?;
    let kind = match l.rows[first].state {
        judge::State::NonFinite { .. } => FailureKind::NonFinite,
        _ => FailureKind::Logits,
    };
    Some(Failure { first_module: Some(l.rows[first].module.clone()), ..Failure::of(kind) })
}

/// Runs after a failing trial of a level that localizes (`t` is that trial): the failure gains its first module
/// and the outcome the localization, shown beside the level's own judgement; what stopped the localization (no
/// module golden, a module the package does not output) is a line of the message, never a change of verdict.
pub fn after_failure(t: &Trial, mut failed: Outcome) -> Outcome {
    let here = Trial { level: Level::Localize, ..*t };
    let line = match localize(&here) {
        Ok(Ok(l)) => {
            if let Some(f) = failed.failure.as_mut() {
                f.first_module = l.first_module().map(str::to_string);
            }
            let line = render::headline(&l);
            failed.diagnosis = Some(Arc::new(l));
            line
        }
        Ok(Err(o)) => render::not_localized(&o.message),
        Err(e) => render::not_localized(e.message()),
    };
    failed.message = format!("{}\n{line}", failed.message.trim_end());
    failed
}

/// A graph of the package that holds recorded modules.
enum Source<'a> {
    Decoder,
    /// A multimodal package's embedding session, fed the prompt and its media features.
    Embedding(&'a Embedder),
    /// An encoder-decoder's encoder, on the stored features.
    Speech(Component),
    /// A multimodal package's vision or audio encoder, on the stored media inputs.
    Media(Modality, Component),
}

/// What an exposed session gave back: the decoder's values at the last prompt position, or whole tensors.
enum Read {
    Last(Vec<std::result::Result<Vec<f32>, String>>),
    Whole(Vec<encoders::Exposed>),
}

impl Read {
    /// Value `at`, at `rows` of its tensor (`None`: the last of the prompt's `positions`).
    fn pick(&self, at: usize, rows: Option<&[usize]>, positions: usize) -> std::result::Result<Vec<f32>, String> {
        match (self, rows) {
            (Read::Last(read), None) => read[at].clone(),
            (Read::Last(_), Some(_)) => Err("the decoder's values are read at the last prompt position, not at rows".into()),
            (Read::Whole(read), rows) => {
                let v = read[at].as_ref().map_err(Clone::clone)?;
                match rows {
                    Some(rows) => exposed::rows_at(v, rows),
                    None => exposed::last_position(v, positions),
                }
            }
        }
    }
}

/// The values a placement reads: the one placed, or each of several that leave a module.
fn candidates(p: &Placed) -> Vec<&String> {
    match p {
        Placed::Value(v) => vec![v],
        Placed::Unplaced(place::Unplaced::Several(vs)) => vs.iter().collect(),
        Placed::Unplaced(_) => vec![],
    }
}

/// `names` read from an exposed copy of `source`'s graph (`model`, its file's `bytes`) over trial `t`'s inputs.
fn read(source: &Source, t: &Trial, p: &Prepared, pipeline: &Pipeline, model: &Path, bytes: &[u8], names: &[&str]) -> Result<Read> {
    let (ids, file) = (p.inputs.input_ids(), t.rel(&p.paths.inputs));
    Ok(match source {
        Source::Decoder => Read::Last(Decoder::exposing(model, bytes, p.provider, names)?.prefill_exposed(
            pipeline.input(ids, true)?,
            pipeline.context(),
            names,
        )?),
        Source::Embedding(e) => Read::Whole(e.values(bytes, ids, names)?),
        Source::Speech(c) => Read::Whole(encoders::speech_values(&p.package, c, bytes, p.provider, &p.inputs, &file, names)?),
        Source::Media(m, c) => Read::Whole(encoders::media_values(&p.package, c, bytes, p.provider, *m, &p.inputs, &file, names)?),
    })
}

/// The package's session for a medium, from its genai_config.json (`role`: `vision`, `speech`).
fn media_component(c: Option<Component>, package: &Path, role: &str) -> Result<Component> {
    c.ok_or_else(|| Error::new(format!("{}/genai_config.json: no `model.{role}` session", package.display())))
}

/// The localization of trial `t`'s variant over its case's first prompt, or the outcome that ends it first (a skip,
/// a missing golden).
pub fn localize(t: &Trial) -> Result<Ends<Localization>> {
    if !t.case.is_first_prompt() {
        return Ok(Err(Outcome::skip(format!(
            "{}: localization is recorded for the case file's first prompt (or clip) only: localize its first case's trial",
            t.case.name
        ))));
    }
    let Opened { p, decoder, pipeline } = match t.open(|g| g.modules.clone(), Logits::Prefill)? {
        Ok(o) => o,
        Err(o) => return Ok(Err(o)),
    };
    let golden = ModuleGolden::load(&p.golden_path)?;
    if golden.input_ids != p.inputs.input_ids() {
        return Err(t.stale(format!(
            "{} was made from the ids {:?} ({:?}), but the case's prompt {:?} gives {:?} ({})",
            p.golden_file,
            golden.input_ids,
            golden.prompt,
            p.prompt,
            p.inputs.input_ids(),
            t.case.file
        )));
    }
    // Each part's modules placed in its own graph and read from its exposed copy, the file read once: the decoder's
    // over the prompt (after the package's own encoders, and for a multimodal package its embedding session first),
    // an encoder's or a tower's at its entries' rows.
    let n = golden.entries.len();
    let (mut got, mut values): (Vec<Option<Got>>, Vec<Option<String>>) = (vec![None; n], vec![None; n]);
    let config = || GenaiConfig::load(&p.package);
    for part in [Part::Vision, Part::Audio, Part::Encoder, Part::Decoder] {
        let mut left: Vec<usize> = (0..n).filter(|&k| golden.entries[k].part == part).collect();
        if left.is_empty() {
            continue;
        }
        let sources = match (part, &pipeline) {
            (Part::Decoder, Pipeline::Multimodal(e)) => vec![Source::Embedding(e), Source::Decoder],
            (Part::Decoder, _) => vec![Source::Decoder],
            (Part::Encoder, _) => vec![Source::Speech(encoders::encoder_component(&config()?))],
            (Part::Vision, _) => vec![Source::Media(Modality::Image, media_component(config()?.vision, &p.package, "vision")?)],
            (Part::Audio, _) => vec![Source::Media(Modality::Audio, media_component(config()?.speech, &p.package, "speech")?)],
        };
        let last = sources.len() - 1;
        for (i, source) in sources.iter().enumerate() {
            let model = match source {
                Source::Decoder => decoder.model.clone(),
                Source::Embedding(e) => e.session.model.clone(),
                Source::Speech(c) | Source::Media(_, c) => p.package.join(&c.file),
            };
            let bytes = std::fs::read(&model).map_err(|e| Error::new(format!("{}: {e}", model.display())))?;
            let graph = onnx_bytes::Graph::parse(&bytes).map_err(|e| Error::new(format!("{}: {e}", model.display())))?;
            let index = Index::new(&graph);
            // A module absent here is looked for in the part's next graph (a multimodal decoder's embedding first).
            let (placed, absent): (Vec<_>, Vec<_>) = left
                .iter()
                .map(|&k| (k, index.place(&golden.entries[k])))
                .partition(|(_, placed)| i == last || *placed != Placed::Unplaced(place::Unplaced::Absent));
            left = absent.into_iter().map(|(k, _)| k).collect();
            // Every value placed, and each of the several that leave a module where the graph alone cannot tell.
            let mut owned: Vec<String> = Vec::new();
            for v in placed.iter().flat_map(|(_, p)| candidates(p)) {
                if !owned.contains(v) {
                    owned.push(v.clone());
                }
            }
            let names: Vec<&str> = owned.iter().map(String::as_str).collect();
            let read = match names.is_empty() {
                true => Read::Whole(Vec::new()),
                false => read(source, t, &p, &pipeline, &model, &bytes, &names)?,
            };
            for (k, placed) in placed {
                let entry = &golden.entries[k];
                let pick = |v: &str| {
                    read.pick(names.iter().position(|n| *n == v).expect("exposed"), entry.rows.as_deref(), p.inputs.input_ids().len())
                };
                (got[k], values[k]) = match placed {
                    Placed::Value(v) => (Some(pick(&v).map_or_else(Got::Unreadable, Got::Values)), Some(v)),
                    // Of several values leaving it, the one float tensor of the reference's size there is its output.
                    Placed::Unplaced(place::Unplaced::Several(vs)) => {
                        let fits: Vec<(&String, Vec<f32>)> =
                            vs.iter().filter_map(|v| pick(v).ok().filter(|x| x.len() == entry.values.len()).map(|x| (v, x))).collect();
                        match <[_; 1]>::try_from(fits) {
                            Ok([(v, x)]) => (Some(Got::Values(x)), Some(v.clone())),
                            Err(_) => (Some(Got::Unplaced(place::Unplaced::Several(vs))), None),
                        }
                    }
                    Placed::Unplaced(u) => (Some(Got::Unplaced(u)), None),
                };
            }
        }
    }
    let got = got.into_iter().map(|g| g.expect("every entry is of a part")).collect();
    Ok(Ok(judge::judge(&golden.entries, got, values, &p.tol, &t.case.spec.localize.known)))
}
