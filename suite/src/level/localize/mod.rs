//! Localize: where along the model a package leaves the reference. The reference's output of each module along the
//! model's path at the last prompt position (`golden`), found in the package's graph by one rule (`place`), read
//! from a copy of the graph that outputs them, run once over the case's first prompt, and compared module by module
//! in the model's order against the reference's own noise (`judge`). The first module out of noise (or not finite)
//! is the verdict's news (`render`).
//!
//! It is never planned on its own, so a passing run pays nothing: a failing trial of a level that localizes
//! (`Kind::localizes`: L4) runs it after its verdict, and its failure then names the module, which a strict xfail
//! may state (`first_module`). `cargo xtask localize <trial>` runs it on demand, on a passing trial too.

pub mod golden;
pub mod judge;
pub mod place;
pub mod render;

use std::sync::Arc;

use self::golden::{ModuleGolden, Part};
use self::judge::{Got, Localization};
use self::place::{Index, Placed};
use super::Kind;
use crate::error::{Error, Result};
use crate::feed::package::GenaiConfig;
use crate::judge::tolerance::Logits;
use crate::level::trial::{Ends, Opened, Trial};
use crate::outcome::{Failure, FailureKind, Outcome, Status};
use crate::run::decoder::Decoder;
use crate::run::encoders;
use crate::vocab::Level;

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
    // Each part's modules placed in its own graph and read from its exposed copy: the decoder's over the prompt
    // (after the package's own encoder, for an encoder-decoder), an encoder's at the golden's frames.
    let (mut got, mut values): (Vec<Option<Got>>, Vec<Option<String>>) =
        (vec![None; golden.entries.len()], vec![None; golden.entries.len()]);
    for part in [Part::Encoder, Part::Decoder] {
        let at: Vec<usize> = (0..golden.entries.len()).filter(|&k| golden.entries[k].part == part).collect();
        if at.is_empty() {
            continue;
        }
        let encoder = match part {
            Part::Decoder => None,
            Part::Encoder => Some(encoders::encoder_component(&GenaiConfig::load(&p.package)?)),
        };
        let model = encoder.as_ref().map_or_else(|| decoder.model.clone(), |c| p.package.join(&c.file));
        let bytes = std::fs::read(&model).map_err(|e| Error::new(format!("{}: {e}", model.display())))?;
        let graph = onnx_bytes::Graph::parse(&bytes).map_err(|e| Error::new(format!("{}: {e}", model.display())))?;
        let index = Index::new(&graph);
        let placed: Vec<(usize, Placed)> = at.iter().map(|&k| (k, index.place(&golden.entries[k]))).collect();
        let mut names: Vec<&str> = Vec::new();
        for (_, p) in &placed {
            if let Placed::Value(v) = p
                && !names.contains(&v.as_str())
            {
                names.push(v);
            }
        }
        // The file read once: placed from its graph, then exposed from the same bytes.
        let read = match &encoder {
            None => Decoder::exposing(&model, &bytes, p.provider, &names)?.prefill_exposed(
                pipeline.input(p.inputs.input_ids(), true)?,
                pipeline.context(),
                &names,
            )?,
            Some(c) => {
                let file = t.rel(&p.paths.inputs);
                encoders::speech_values(&p.package, c, &bytes, p.provider, &p.inputs, &file, &names, &golden.frames)?
            }
        };
        for (k, placed) in &placed {
            (got[*k], values[*k]) = match placed {
                Placed::Value(v) => {
                    let i = names.iter().position(|n| n == v).expect("exposed");
                    let g = match &read[i] {
                        Ok(values) => Got::Values(values.clone()),
                        Err(why) => Got::Unreadable(why.clone()),
                    };
                    (Some(g), Some(v.clone()))
                }
                Placed::Unplaced(u) => (Some(Got::Unplaced(u.clone())), None),
            };
        }
    }
    let got = got.into_iter().map(|g| g.expect("every entry is of a part")).collect();
    Ok(Ok(judge::judge(&golden.entries, got, values, &p.tol, &t.case.spec.localize.known)))
}
