//! The trial plan: every trial of every case, one per case x modality x ep x dtype x level, and per accuracy task
//! for the gates, as each level's own plan rule says (`level::Kind`). One matrix for the cases that load and for
//! the ones that do not: a broken case's guess goes through it too, so it plans every trial it would have had, each
//! failing, and a filter aimed at them finds the failure. The checks that hold a case's fields against its levels
//! (which levels `level:` may select, which failures an xfail entry's levels give, that each entry names a trial)
//! are made here, where the levels are known; a case that fails one plans its trials failing, as a broken case.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::accuracy::resolve::{ResolvedTask, TaskKind};

use crate::error::Error;
use crate::level::{self, Kind};
use crate::outcome::FailureKind;
use crate::plan::case::Case;
use crate::plan::corpus;
use crate::plan::suite::{BrokenCase, Suite, TrialKind, TrialSpec};
use crate::vocab::{Dtype, Ep, Level, Modality, TrialId};

/// All trials, sorted by name. Names start with the case's name, or `<task folder>/<case>` where two cases in
/// different task folders share a name.
pub fn plan(suite: &Suite) -> Vec<TrialSpec> {
    let mut out = Vec::new();
    let loaded = suite.load_cases();
    let subject = |c: &std::result::Result<Arc<Case>, BrokenCase>| match c {
        Ok(case) => (case.task_dir.clone(), case.name.clone()),
        Err(b) => (corpus::task_dir_of(&b.file), b.name.clone()),
    };
    let subjects: Vec<(String, String)> = loaded.iter().map(subject).collect();
    let prefixes = corpus::trial_prefixes(subjects.iter().map(|(d, n)| (d.as_str(), n.as_str())));
    // Every loaded case's trials first: an xfail entry names a trial of its case file, whichever of the file's cases
    // plans it (a later prompt's case has no gate or distribution trial; the file's first case runs them once).
    // Each loaded case with its trials, or the case that did not load; each with its trials' name prefix.
    let planned: Vec<(String, Planned)> = loaded
        .into_iter()
        .map(|c| {
            let prefix = prefixes[&subject(&c)].clone();
            let planned = c.map(|case| {
                let trials = matrix(suite, &case, &prefix);
                (case, trials)
            });
            (prefix, planned)
        })
        .collect();
    let mut of_file: BTreeMap<String, Vec<Target>> = BTreeMap::new();
    for (case, trials) in planned.iter().filter_map(|(_, p)| p.as_ref().ok()) {
        of_file.entry(case.file.clone()).or_default().extend(trials.iter().filter_map(target));
    }
    for (prefix, c) in planned {
        let prefix = &prefix;
        let broken = match c {
            Ok((case, trials)) => match check_selected(&case).and_then(|()| check_xfail(&case, &of_file[&case.file])) {
                Ok(()) => {
                    out.extend(trials);
                    continue;
                }
                Err(error) => BrokenCase { name: case.name.clone(), file: case.file.clone(), error, guess: Some(case) },
            },
            Err(b) => b,
        };
        // The trials it would have had fail too, so a filter aimed at them still finds the failure.
        let expected = broken.guess.as_ref().map_or_else(Vec::new, |g| matrix(suite, g, prefix).into_iter().map(|t| t.id).collect());
        let own = TrialId::Case { case: prefix.clone() };
        for id in expected.into_iter().chain([own]) {
            out.push(TrialSpec::new(id, TrialKind::Broken(broken.clone())));
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    collisions(out)
}

/// A loaded case and its trials, or the case that did not load.
type Planned = std::result::Result<(Arc<Case>, Vec<TrialSpec>), BrokenCase>;

/// What an xfail entry can name of a trial: its modality (text for a gate's, which runs its task as text), ep,
/// dtype and level.
type Target = (Modality, Ep, Dtype, Level);

fn target(t: &TrialSpec) -> Option<Target> {
    match &t.kind {
        TrialKind::Conformance { modality, variant, level, .. } => Some((*modality, variant.ep, variant.dtype, *level)),
        TrialKind::Accuracy { variant, level, .. } => Some((Modality::Text, variant.ep, variant.dtype, *level)),
        TrialKind::Broken(_) => None,
    }
}

/// Every trial the levels plan for `case`: its accuracy tasks' gate trials, then each modality's trials.
fn matrix(suite: &Suite, case: &Arc<Case>, prefix: &str) -> Vec<TrialSpec> {
    let mut out = Vec::new();
    for entry in &case.spec.accuracy {
        let task = ResolvedTask::new(&suite.root, entry.file(), entry.source(&suite.root, case.spec.external_paths));
        for variant in case.variants(&suite.root) {
            for kind in level::ALL.iter().filter(|k| k.planned_for_task(task.kind == TaskKind::Media)) {
                let (ep, dtype, level) = (variant.ep, variant.dtype, kind.level());
                let id = TrialId::Accuracy { task: task.name.clone(), case: prefix.to_string(), ep, dtype, level };
                let kind = TrialKind::Accuracy { case: case.clone(), task: Box::new(task.clone()), variant: variant.clone(), level };
                out.push(TrialSpec::new(id, kind));
            }
        }
    }
    for modality in case.modalities() {
        for variant in case.variants(&suite.root) {
            for kind in level::ALL.iter().filter(|k| k.planned(case, modality)) {
                let (ep, dtype, level) = (variant.ep, variant.dtype, kind.level());
                let id = TrialId::Conformance { case: prefix.to_string(), modality, ep, dtype, level };
                out.push(TrialSpec::new(id, TrialKind::Conformance { case: case.clone(), modality, variant: variant.clone(), level }));
            }
        }
    }
    out
}

/// The names of the levels whose `pick` holds, for messages (`L4 or genai`).
fn names(pick: impl Fn(&dyn Kind) -> bool, join: &str) -> String {
    level::ALL.iter().filter(|k| pick(**k)).map(|k| k.level().name()).collect::<Vec<_>>().join(join)
}

/// `level:` selects only the levels a case file selects (mobius' L4 and L5; the others follow from the case).
fn check_selected(case: &Case) -> Result<(), Error> {
    match case.levels().iter().find(|&&l| !level::of(l).selected_by_case()) {
        Some(l) => Err(Error::new(format!(
            "{}: field `level`: `{l}` is not a level a case file selects; expected {} (joined by `+`, as in \"L4+L5\"); \
             the other levels follow from the case's modalities, `accuracy` tasks and `distribution` block",
            case.file,
            names(|k| k.selected_by_case(), " or ")
        ))),
        None => Ok(()),
    }
}

/// Every xfail entry expects a failure its levels give, states a prompt position only where they have one, and
/// names at least one of `targets`, the trials its case file plans: an entry that names none (a dtype the matrix
/// lacks, a level no modality has) would expect nothing, silently.
fn check_xfail(case: &Case, targets: &[Target]) -> Result<(), Error> {
    let entries = &case.spec.xfail;
    for (i, x) in entries.iter().enumerate() {
        let at = crate::judge::xfail::field(entries.len(), i);
        if let Some(e) = &x.expect {
            let kind = e.failure;
            if let Some(l) = x.levels.iter().find(|&&l| !level::of(l).failures().contains(&kind)) {
                return Err(Error::new(format!(
                    "{}: field {at}.failure` is `{kind}`, which only a {} trial gives, but `levels` lists {l}; give each level \
                     its own xfail entry",
                    case.file,
                    names(|k| k.failures().contains(&kind), " or ")
                )));
            }
            // A module an entry may state: of a level that localizes a failure an entry may state (not an encoder's).
            let states_module =
                |k: &dyn Kind| k.localizes() && k.failures().iter().any(|f| matches!(f, FailureKind::Logits | FailureKind::NonFinite));
            if let Some(l) = x.levels.iter().find(|&&l| e.first_module.is_some() && !states_module(level::of(l))) {
                return Err(Error::new(format!(
                    "{}: field {at}.expect.first_module` is given, but only {}'s failures are localized to a module and \
                     `levels` lists {l}",
                    case.file,
                    names(states_module, " or ")
                )));
            }
            if let Some(l) = x.levels.iter().find(|&&l| e.first_position.is_some() && !level::of(l).states_position()) {
                return Err(Error::new(format!(
                    "{}: field {at}.expect.first_position` is given, but only {}'s `logits` failure has a prompt position \
                     and `levels` lists {l} (genai judges the last position)",
                    case.file,
                    names(|k| k.states_position(), " or ")
                )));
            }
        }
        if !targets.iter().any(|&(modality, ep, dtype, level)| x.applies(modality, ep, dtype, level)) {
            let list = |v: Vec<String>| if v.is_empty() { "any".to_string() } else { v.join(", ") };
            return Err(Error::new(format!(
                "{}: field `xfail[{i}]` names no trial of this case (levels {}, eps {}, dtypes {}, modalities {}): an \
                 expected failure must expect something; fix the entry or remove it",
                case.file,
                list(x.levels.iter().map(ToString::to_string).collect()),
                list(x.eps.iter().map(ToString::to_string).collect()),
                list(x.dtypes.iter().map(ToString::to_string).collect()),
                list(x.modalities.iter().map(ToString::to_string).collect())
            )));
        }
    }
    Ok(())
}

/// Trials of one name from one case file are one trial (a broken case plans its names once per guess); from two
/// files (`t.p2.yaml` beside a two-prompt `t.yaml`, whose second prompt is `t.p2`) they would share a name and a
/// golden: each becomes a failing trial naming both files, never a silent merge.
fn collisions(sorted: Vec<TrialSpec>) -> Vec<TrialSpec> {
    let mut out: Vec<TrialSpec> = Vec::with_capacity(sorted.len());
    for spec in sorted {
        match out.last_mut() {
            Some(last) if last.name == spec.name => {
                let (a, b) = (last.kind.case_file(), spec.kind.case_file());
                if a != b {
                    let error = Error::new(format!(
                        "{b}: its trial {} is also planned by {a}; trial names and goldens would collide (a case named \
                         `<case>.p<k>` collides with the per-prompt split of a case with several prompts): rename one",
                        spec.name
                    ));
                    let (name, file) = (spec.id.case().to_string(), b.to_string());
                    last.kind = TrialKind::Broken(BrokenCase { name, file, error, guess: None });
                }
            }
            _ => out.push(spec),
        }
    }
    out
}

/// The trials a case file's text plans when it does not load (a test's view of [`plan`]'s guess).
pub fn guessed(suite: &Suite, name: &str, text: Option<&str>) -> Vec<TrialId> {
    let file = ["cases/", name, ".yaml"].concat();
    let guess = Arc::new(crate::plan::discovery::guess(name, &file, "", text));
    let mut ids: Vec<TrialId> = matrix(suite, &guess, name).into_iter().map(|t| t.id).collect();
    ids.sort_by_key(ToString::to_string);
    ids.dedup();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suite() -> Suite {
        Suite::open(std::path::Path::new("/nonexistent-suite-root"))
    }

    #[test]
    fn a_broken_case_plans_what_its_text_says_or_everything() {
        let text = "model_id: x\nlevel: L4\nmatrix:\n  eps: [cpu]\n  dtypes: [f32, int4]\nbogus: 1\naccuracy: [cases/tasks/t.yaml]\n";
        let names = |ids: Vec<TrialId>| ids.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(
            names(guessed(&suite(), "x", Some(text))),
            [
                "t/x/cpu/f32/accuracy",
                "t/x/cpu/int4/accuracy",
                "x/text/cpu/f32/L4",
                "x/text/cpu/f32/genai",
                "x/text/cpu/int4/L4",
                "x/text/cpu/int4/genai"
            ]
        );
        let all = names(guessed(&suite(), "x", Some("model_id: [unclosed")));
        assert_eq!(all.len(), 3 * 4 * (3 + 4 + 4 + 5), "every ep, dtype, modality and level (genai included): {all:?}");
        assert!(all.contains(&"x/image+audio/cuda/bf16/audio_encoder".to_string()));
        // An accuracy entry that is a map names its task in `task`: a broken case still plans that trial.
        let text =
            "model_id: x\nlevel: L4\nmatrix: {eps: [cpu], dtypes: [f32]}\naccuracy: [{task: cases/tasks/k.yaml, limit: 3}]\nbogus: 1\n";
        assert!(names(guessed(&suite(), "x", Some(text))).contains(&"k/x/cpu/f32/accuracy".to_string()));
    }
}
