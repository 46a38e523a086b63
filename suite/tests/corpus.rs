//! mobius' own test data in full (232 case files, 251 goldens, `../shared/mobius-compat/full/` beside the clone):
//! every case loads and plans, or is refused precisely; every trial runs to a skip with a precise reason (there are
//! no packages for these real checkpoints here); every golden parses or is refused precisely; nothing panics.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use mobius_conformance::judge::golden::{GenerationGolden, PrefillGolden};
use mobius_conformance::outcome::Status;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::suite::{Suite, TrialKind};
use mobius_conformance::trial;

/// The corpus, or why this run goes without it: under CI it must be there (the copy of shared/ sits beside the clone).
fn corpus() -> Option<PathBuf> {
    let dir = workspace_root().join("../shared/mobius-compat/full");
    if dir.join("cases").is_dir() {
        return Some(dir);
    }
    let why = format!(
        "mobius' full test data is not at {}: it is the shared/ folder beside the clone (shared/mobius-compat/full/)",
        dir.display()
    );
    if std::env::var_os("CI").is_some() {
        panic!("{why}; under CI it must be there");
    }
    eprintln!("SKIPPED: {why}");
    None
}

fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, ext, out);
        } else if p.extension().is_some_and(|e| e == ext) {
            out.push(p);
        }
    }
    out.sort();
}

/// The kind of reason a skip gives, for the tally.
fn reason_kind(message: &str) -> String {
    if let Some(rest) = message.split("task_type `").nth(1) {
        return format!("task type {}", rest.split('`').next().unwrap_or("?"));
    }
    for (needle, kind) in [
        ("skip_reason:", "the case's skip_reason"),
        ("ci_skip_reason", "the case's ci_skip_reason (CI)"),
        ("do_sample", "sampled generation"),
        ("names no package", "no package named"),
    ] {
        if message.contains(needle) {
            return kind.into();
        }
    }
    format!("other: {message}")
}

#[test]
fn the_full_mobius_corpus_loads_plans_and_skips_precisely() {
    let Some(root) = corpus() else { return };
    let suite = Suite::open(&root);
    let mut yaml = Vec::new();
    files(&root.join("cases"), "yaml", &mut yaml);

    // Cases: loaded or refused, each refusal naming its file.
    let loaded = suite.load_cases();
    let refused: Vec<_> = loaded.iter().filter_map(|c| c.as_ref().err()).collect();
    for b in &refused {
        let e = b.error.to_string();
        assert!(e.contains(&b.file) && e.contains("field"), "{}: a refusal must name the file and field: {e}", b.file);
    }
    let ok = loaded.len() - refused.len();
    assert_eq!(yaml.len(), 232, "mobius' corpus has 232 case files");
    assert!(ok >= yaml.len() - refused.len(), "every case file that loads is a subject");

    // mobius' tolerance file never loosens the suite's numbers; what it refused is named where verdicts print it.
    let policy = suite.policy.as_ref().expect("default_tolerances.yaml loads");
    for needle in ["default_tolerances.yaml", "L4.int4.near_tie_margin=1", "L5.int4.min_token_match_ratio=0.7"] {
        assert!(policy.source.contains(needle), "policy source should name {needle}: {}", policy.source);
    }
    let int4 = policy.resolve(mobius_conformance::judge::tolerance::Logits::Prefill, mobius_conformance::vocab::Dtype::Int4, None, None);
    assert_eq!(int4.near_tie_margin, 1e-3, "mobius' int4 margin of 1.0 must not loosen the suite's");

    // Trials: unique names, every one a skip with a precise reason, no panic.
    let plan = mobius_conformance::trial::matrix::plan(&suite);
    let names: BTreeSet<&str> = plan.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names.len(), plan.len(), "trial names must be unique");
    assert!(
        names.contains("causal-lm/gemma-4-12b/text/default/f32/L4") && names.contains("vision-language/gemma-4-12b/image/default/f32/L4")
    );
    let mut by_reason: BTreeMap<String, usize> = BTreeMap::new();
    let mut panics = Vec::new();
    let mut broken = 0;
    for spec in &plan {
        if let TrialKind::Broken(_) = spec.kind {
            broken += 1;
        }
        match catch_unwind(AssertUnwindSafe(|| trial::run(&suite, spec, &mobius_conformance::context::RunContext::local()))) {
            Err(_) => panics.push(spec.name.clone()),
            Ok(o) if matches!(spec.kind, TrialKind::Broken(_)) => assert_eq!(o.status, Status::Fail, "{}", spec.name),
            Ok(o) => {
                assert_eq!(o.status, Status::Skip, "{}: {}", spec.name, o.message);
                *by_reason.entry(reason_kind(&o.message)).or_default() += 1;
            }
        }
    }
    assert!(panics.is_empty(), "trials panicked: {panics:?}");
    assert_eq!(broken, refused.len());
    let other: Vec<_> = by_reason.keys().filter(|k| k.starts_with("other")).collect();
    assert!(other.is_empty(), "skips without a known precise reason: {other:?}");
    // Task types the suite does not judge are named; such cases are never run as decoder LMs.
    for spec in &plan {
        if let TrialKind::Conformance { case, .. } = &spec.kind
            && mobius_conformance::plan::task_type::skip_reason(&case.spec.task_type).is_some()
        {
            let o = trial::run(&suite, spec, &mobius_conformance::context::RunContext::local());
            assert!(o.message.contains(&format!("task_type `{}`", case.spec.task_type)), "{}: {}", spec.name, o.message);
        }
    }

    // speech-to-text runs (the encoder-decoder pipeline): its 11 trials (whisper-tiny, speecht5-asr and the two
    // seamless-m4t cases) plan as conformance trials and skip for their own reasons (no package named, a case's
    // skip_reason), never for their task type.
    let speech: Vec<(&str, String)> = plan
        .iter()
        .filter_map(|spec| match &spec.kind {
            TrialKind::Conformance { case, .. } if case.spec.task_type == "speech-to-text" => Some((
                spec.name.as_str(),
                reason_kind(&trial::run(&suite, spec, &mobius_conformance::context::RunContext::local()).message),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(speech.len(), 11, "{speech:?}");
    assert!(speech.iter().all(|(_, why)| why == "no package named" || why == "the case's skip_reason"), "{speech:?}");
    assert!(speech.iter().any(|(n, _)| *n == "whisper-tiny/audio/default/f32/L5"), "{speech:?}");

    // Goldens: every one parses, or is refused naming its file.
    let mut goldens = Vec::new();
    files(&root.join("golden"), "json", &mut goldens);
    let (mut prefill, mut generation, mut golden_refused) = (0, 0, Vec::new());
    for g in &goldens {
        let shown = g.strip_prefix(&root).unwrap().display().to_string();
        let text = std::fs::read_to_string(g).unwrap();
        let parsed = catch_unwind(|| {
            if shown.ends_with("_generation.json") {
                GenerationGolden::parse(&shown, &text).map(|_| true)
            } else {
                PrefillGolden::parse(&shown, &text).map(|_| false)
            }
        });
        match parsed {
            Err(_) => panics.push(shown),
            Ok(Ok(true)) => generation += 1,
            Ok(Ok(false)) => prefill += 1,
            Ok(Err(e)) => {
                let e = e.to_string();
                assert!(e.contains(&shown), "a refused golden must be named: {e}");
                golden_refused.push(e);
            }
        }
    }
    assert!(panics.is_empty(), "golden parsing panicked: {panics:?}");
    assert_eq!(goldens.len(), 251);
    assert_eq!(prefill + generation + golden_refused.len(), goldens.len());

    eprintln!(
        "mobius corpus: {} case files, {ok} subjects loaded, {} refused; {} trials: {by_reason:?}",
        yaml.len(),
        refused.len(),
        plan.len()
    );
    eprintln!("goldens: {} files, {prefill} prefill and {generation} generation parsed, {} refused:", goldens.len(), golden_refused.len());
    for e in &golden_refused {
        eprintln!("  {e}");
    }
}

mod common;

const TEXT_CASE: &str = "model_id: m\nmodel_type: qwen3\nrevision: r\ntask_type: text-generation\ndtype: float32\nlevel: L4+L5\n\
                         inputs:\n  prompts: [\"first\", \"second\", \"third\"]\ngeneration:\n  max_new_tokens: 4\n  do_sample: false\n";

#[test]
fn several_prompts_become_subjects_of_their_own() {
    let dir = common::Scratch::new("corpus-prompts");
    common::write(&dir.0.join("cases/causal-lm/x.yaml"), TEXT_CASE);
    let suite = Suite::open(&dir.0);
    let cases: Vec<_> = suite.load_cases().into_iter().map(|c| c.unwrap()).collect();
    let got: Vec<(&str, Option<&str>)> = cases.iter().map(|c| (c.name.as_str(), c.prompt())).collect();
    assert_eq!(got, [("x", Some("first")), ("x.p2", Some("second")), ("x.p3", Some("third"))]);
    let paths = suite.golden_paths(&cases[1], mobius_conformance::vocab::Modality::Text, mobius_conformance::vocab::Dtype::F32);
    assert!(paths.prefill.ends_with("goldens/causal-lm/x.p2.json"), "{}", paths.prefill.display());
    let names: Vec<String> = mobius_conformance::trial::matrix::plan(&suite).into_iter().map(|t| t.name).collect();
    for n in ["x/text/default/f32/L4", "x.p2/text/default/f32/L5", "x.p3/text/default/f32/L4"] {
        assert!(names.iter().any(|m| m == n), "{n} not in {names:?}");
    }
}

#[test]
fn a_sampled_case_keeps_l4_and_skips_l5_naming_the_field() {
    let dir = common::Scratch::new("corpus-sampled");
    common::write(&dir.0.join("cases/causal-lm/s.yaml"), &TEXT_CASE.replace("do_sample: false", "do_sample: true"));
    let l5 = common::run(&dir.0, "s/text/default/f32/L5");
    assert_eq!(l5.status, Status::Skip);
    assert!(l5.message.contains("cases/causal-lm/s.yaml") && l5.message.contains("generation.do_sample"), "{}", l5.message);
    // L4 is not touched by sampling: it goes on to its own reasons (here: no package).
    let l4 = common::run(&dir.0, "s/text/default/f32/L4");
    assert!(!l4.message.contains("do_sample") && l4.message.contains("names no package"), "{}", l4.message);
}

#[test]
fn a_media_case_without_stored_inputs_skips_naming_the_command() {
    let dir = common::Scratch::new("corpus-media");
    let compat = workspace_root().join("tests/data/mobius-compat");
    let case = std::fs::read_to_string(compat.join("cases/vision-language/gemma-4-e2b-it.yaml")).unwrap();
    let case = format!("{case}\nmatrix:\n  eps: [default]\n  dtypes: [f32]\n  package: \"pkg/{{ep}}-{{dtype}}\"\n");
    common::write(&dir.0.join("cases/vision-language/gemma-4-e2b-it.yaml"), &case);
    for g in ["gemma-4-e2b-it.json", "gemma-4-e2b-it_generation.json"] {
        let text = std::fs::read_to_string(compat.join("golden/vision-language").join(g)).unwrap();
        common::write(&dir.0.join("golden/vision-language").join(g), &text);
    }
    let o = common::run(&dir.0, "gemma-4-e2b-it/image/default/f32/L4");
    assert_eq!(o.status, Status::Skip, "{}", o.message);
    for needle in [
        "golden/vision-language/gemma-4-e2b-it.inputs.safetensors",
        "no stored processor inputs",
        "cargo xtask regen-goldens --case gemma-4-e2b-it",
        "reference",
    ] {
        assert!(o.message.contains(needle), "{needle}: {}", o.message);
    }
}
