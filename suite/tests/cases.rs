//! Case files: strict parsing, expansion into trials, and mobius' files loading unchanged.

mod common;

use std::path::Path;

use mobius_conformance::judge::golden::{GenerationGolden, PrefillGolden};
use mobius_conformance::judge::tolerance::{Logits, Policy};
use mobius_conformance::outcome::Status;
use mobius_conformance::plan::case::Case;
use mobius_conformance::plan::suite::{Suite, TrialKind};
use mobius_conformance::trial;
use mobius_conformance::vocab::{Dtype, Ep, Level, Modality};

const CASE: &str = r#"
model_id: "mobius-conformance/qwen3-tiny"
model_type: "qwen3"
revision: "fixture"
task_type: "text-generation"
dtype: "float32"
level: "L4+L5"
inputs:
  prompts:
    - "def main():"
generation:
  max_new_tokens: 8
  do_sample: false
reference: "fixtures/qwen3-tiny/hf"
matrix:
  eps: [default, cpu]
  dtypes: [f32, f16]
  package: "fixtures/qwen3-tiny/onnx/{ep}-{dtype}"
  packages:
    "cpu/f16": "elsewhere/cpu-half"
"#;

fn parse(text: &str) -> Result<Case, String> {
    Case::parse("cases/causal-lm/x.yaml", "causal-lm", "x", text).map_err(|e| e.to_string())
}

#[test]
fn expands_the_matrix_with_templates_and_overrides() {
    let case = parse(CASE).unwrap();
    assert_eq!(case.levels(), &[Level::L4, Level::L5]);
    assert_eq!(case.modalities(), vec![Modality::Text]);
    let v = case.variants(Path::new("/repo"));
    let got: Vec<(Ep, Dtype, String)> = v.iter().map(|v| (v.ep, v.dtype, v.package.as_ref().unwrap().to_string())).collect();
    assert_eq!(
        got,
        vec![
            (Ep::Default, Dtype::F32, "/repo/fixtures/qwen3-tiny/onnx/default-f32".into()),
            (Ep::Default, Dtype::F16, "/repo/fixtures/qwen3-tiny/onnx/default-f16".into()),
            (Ep::Cpu, Dtype::F32, "/repo/fixtures/qwen3-tiny/onnx/cpu-f32".into()),
            (Ep::Cpu, Dtype::F16, "/repo/elsewhere/cpu-half".into()),
        ]
    );
}

#[test]
fn plans_sorted_hierarchical_trial_names() {
    let dir = tempdir("plan");
    write(&dir.join("cases/causal-lm/b-model.yaml"), CASE);
    write(
        &dir.join("cases/causal-lm/a-model.yaml"),
        &CASE.replace("[f32, f16]", "[f32]").replace("  packages:\n    \"cpu/f16\": \"elsewhere/cpu-half\"\n", ""),
    );
    let names: Vec<String> = mobius_conformance::trial::matrix::plan(&Suite::open(&dir)).into_iter().map(|t| t.name).collect();
    assert_eq!(names.len(), 6 + 12, "L4, L5 and genai per variant");
    assert_eq!(
        &names[..6],
        [
            "a-model/text/cpu/f32/L4",
            "a-model/text/cpu/f32/L5",
            "a-model/text/cpu/f32/genai",
            "a-model/text/default/f32/L4",
            "a-model/text/default/f32/L5",
            "a-model/text/default/f32/genai"
        ]
    );
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
}

#[test]
fn unknown_field_names_file_and_field() {
    let e = parse(&CASE.replace("revision:", "revison:")).unwrap_err();
    assert!(e.contains("cases/causal-lm/x.yaml") && e.contains("revison"), "{e}");
    let e = parse(&CASE.replace("  max_new_tokens: 8", "  max_new_tokens: 8\n  temperature: 0.7")).unwrap_err();
    assert!(e.contains("temperature"), "{e}");
    // Whisper's task token is one of two words; another is refused naming the value and the file.
    let task = |t: &str| CASE.replace("  do_sample: false", &format!("  do_sample: false\n  lang: en\n  task: {t}"));
    assert_eq!(parse(&task("translate")).unwrap().spec.generation.task, Some(mobius_conformance::plan::case::SpeechTask::Translate));
    let e = parse(&task("transcribe_all")).unwrap_err();
    assert!(e.contains("cases/causal-lm/x.yaml") && e.contains("transcribe_all"), "{e}");
    let e = parse(&CASE.replace("  eps: [default, cpu]", "  eps: [default, cpu]\n  ep: cuda")).unwrap_err();
    assert!(e.contains("`ep`") || e.contains("ep"), "{e}");
    // An accuracy entry's overrides refuse a misspelt one too, and take the right ones.
    let with = |entry: &str| CASE.replace("matrix:", &format!("accuracy:\n  - task: cases/tasks/arith.yaml\n{entry}\nmatrix:"));
    let e = parse(&with("    num_fewshots: 3")).unwrap_err();
    assert!(e.contains("cases/causal-lm/x.yaml") && e.contains("num_fewshots"), "{e}");
    let c = parse(&with("    num_fewshot: 3\n    max_delta_points: 2.0")).unwrap();
    let source = c.spec.accuracy[0].source(Path::new("/root"), false);
    assert_eq!((source.overrides.num_fewshot, source.overrides.max_delta_points), (Some(3), Some(2.0)));
}

#[test]
fn wrong_values_name_the_field() {
    for (from, to, needle) in [
        ("dtype: \"float32\"", "dtype: \"float8\"", "float8"),
        ("level: \"L4+L5\"", "level: \"L6\"", "L6"),
        ("eps: [default, cpu]", "eps: [default, tpu]", "tpu"),
        ("max_new_tokens: 8", "max_new_tokens: many", "max_new_tokens"),
        ("\"cpu/f16\"", "\"cpu/f64\"", "matrix.packages"),
    ] {
        let e = parse(&CASE.replace(from, to)).unwrap_err();
        assert!(e.contains("cases/causal-lm/x.yaml") && e.contains(needle), "{to}: {e}");
    }
    let e = parse(&CASE.replace("task_type: \"text-generation\"", "task_type: \"text-to-speech\"")).unwrap_err();
    assert!(e.contains("task_type") && e.contains("text-to-speech") && e.contains("feature-extraction"), "{e}");
    let e = parse("model_id: [unclosed").unwrap_err();
    assert!(e.contains("cases/causal-lm/x.yaml"), "{e}");
}

#[test]
fn a_broken_case_is_its_own_failing_trial() {
    let dir = tempdir("broken");
    write(&dir.join("cases/causal-lm/good.yaml"), CASE);
    write(&dir.join("cases/causal-lm/bad.yaml"), "model_id: x\nbogus: 1\n");
    let plan = mobius_conformance::trial::matrix::plan(&Suite::open(&dir));
    let bad: Vec<_> = plan.iter().filter(|t| matches!(t.kind, TrialKind::Broken(_))).collect();
    // `bad/case`, and the trials it might have had (its file names no matrix or level: all of them), so a filter
    // aimed at its real trials still finds the failure.
    assert!(bad.iter().any(|t| t.name == "bad/case"));
    assert!(bad.iter().all(|t| t.name.starts_with("bad/")), "{:?}", bad.iter().map(|t| &t.name).collect::<Vec<_>>());
    assert!(bad.iter().any(|t| t.name == "bad/text/cpu/f32/L4"));
    assert_eq!(plan.len() - bad.len(), 12, "the good case still expands");
}

#[test]
fn mobius_cases_and_tolerances_load_unchanged() {
    let compat = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/mobius-compat");
    if !compat.is_dir() {
        panic!("{} is missing: a copy of mobius' sample data (cases, goldens, tolerances) is committed here", compat.display());
    }
    let suite = Suite::open(&compat);
    let cases = suite.load_cases();
    assert!(cases.len() >= 9, "found {} case files", cases.len());
    for c in &cases {
        if let Err(b) = c {
            panic!("{}: {}", b.file, b.error);
        }
    }
    let policy = suite.policy.as_ref().expect("default_tolerances.yaml loads");
    assert!(policy.source.starts_with("default_tolerances.yaml"), "{}", policy.source);
    let t = policy.resolve(Logits::Prefill, Dtype::F16, None, None);
    assert_eq!(t.near_tie_margin, 0.1);
    let vl = cases.iter().flatten().find(|c| c.name == "gemma-4-e2b-it").unwrap();
    assert_eq!(vl.modalities(), vec![Modality::Image]);
    // Their goldens load too, and every trial skips, naming what is missing (they name no ONNX package).
    let plan = mobius_conformance::trial::matrix::plan(&suite);
    assert!(plan.len() >= 18, "{} trials", plan.len());
    for spec in &plan {
        let TrialKind::Conformance { case, level, modality, variant } = &spec.kind else { panic!("{} did not load", spec.name) };
        let paths = suite.golden_paths(case, *modality, variant.dtype);
        match level {
            Level::L4 if paths.prefill.is_file() => drop(PrefillGolden::load(&paths.prefill).unwrap_or_else(|e| panic!("{e}"))),
            Level::L5 if paths.generation.is_file() => drop(GenerationGolden::load(&paths.generation).unwrap_or_else(|e| panic!("{e}"))),
            _ => {}
        }
        let o = trial::run(&suite, spec, &mobius_conformance::context::RunContext::local());
        assert_eq!(o.status, Status::Skip, "{}: {}", spec.name, o.message);
        let why = if mobius_conformance::plan::task_type::skip_reason(&case.spec.task_type).is_some() {
            "task_type `"
        } else {
            "names no package"
        };
        assert!(o.message.contains(why), "{}: {}", spec.name, o.message);
    }
}

#[test]
fn policy_rejects_unknown_fields_and_applies_overrides() {
    let e = Policy::parse("tol.yaml", "L4:\n  f32: { atol: 1.0, slack: 2 }\n").unwrap_err().to_string();
    assert!(e.contains("tol.yaml") && e.contains("slack"), "{e}");
    let e = Policy::parse("tol.yaml", "L4:\n  f64: { atol: 1.0 }\n").unwrap_err().to_string();
    assert!(e.contains("L4.f64"), "{e}");
    let e = Policy::parse("tol.yaml", "L4:\n  f32: { atol: -1.0 }\n").unwrap_err().to_string();
    assert!(e.contains("atol"), "{e}");
    let p = Policy::parse("tol.yaml", "L5:\n  f32: { min_token_match_ratio: 0.5 }\n").unwrap();
    assert_eq!(p.resolve(Logits::Stream, Dtype::F32, None, None).min_token_match_ratio, 0.5);
    assert_eq!(p.resolve(Logits::Stream, Dtype::F32, None, Some(0.75)).min_token_match_ratio, 0.75);
    let case = parse(&format!("{CASE}tolerance:\n  atol: 0.5\n")).unwrap();
    assert_eq!(p.resolve(Logits::Prefill, Dtype::F32, case.spec.tolerance.as_ref(), None).atol, 0.5);
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("mobius-cases-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[test]
fn paths_stay_inside_the_suite_unless_marked_external() {
    for (field, bad) in [("matrix.package", "package: \"/etc/x/{ep}-{dtype}\""), ("matrix.package", "package: \"fixtures/../../x/{ep}\"")] {
        let e = parse(&CASE.replace("package: \"fixtures/qwen3-tiny/onnx/{ep}-{dtype}\"", bad)).unwrap_err();
        assert!(e.contains(field) && e.contains("leaves the suite root") && e.contains("external_paths"), "{e}");
    }
    let e = parse(&CASE.replace("reference: \"fixtures/qwen3-tiny/hf\"", "reference: \"../elsewhere/hf\"")).unwrap_err();
    assert!(e.contains("`reference`"), "{e}");
    assert!(parse(&CASE.replace("package: \"fixtures/qwen3-tiny/onnx/{ep}-{dtype}\"", "package: \"fixtures/a/../b/{ep}\"")).is_ok());
    let external =
        CASE.replace("package: \"fixtures/qwen3-tiny/onnx/{ep}-{dtype}\"", "package: \"/opt/models/{ep}\"") + "external_paths: true\n";
    assert!(parse(&external).is_ok());
    assert!(parse(&CASE.replace("package: \"fixtures/qwen3-tiny/onnx/{ep}-{dtype}\"", "package: \"hf://acme/m@main/{ep}\"")).is_ok());
}

/// A case's `tolerance:` may loosen the policy at most tenfold, the noise policy's multiples included: they bound L4
/// at the last position and at every prompt position.
#[test]
fn a_case_cannot_switch_the_noise_policy_off() {
    use mobius_conformance::judge::tolerance::{Tolerance, check_loosening};
    let base = Tolerance::builtin(Logits::Prefill, Dtype::F32);
    assert_eq!(check_loosening(&base, &Tolerance { noise_multiple_max: base.noise_multiple_max * 10.0, ..base }), Ok(()));
    for (field, loose) in [
        ("noise_multiple_p50", Tolerance { noise_multiple_p50: 1e9, ..base }),
        ("noise_multiple_max", Tolerance { noise_multiple_max: 1e9, ..base }),
        ("noise_dtype_scale", Tolerance { noise_dtype_scale: 8192.0, ..base }),
    ] {
        let e = check_loosening(&base, &loose).unwrap_err().to_string();
        assert!(e.contains(&format!("field `tolerance.{field}`")) && e.contains("looser than 10x"), "{e}");
    }
}

#[test]
fn an_xfail_entry_that_names_no_trial_or_a_failure_its_level_never_gives_fails_its_case() {
    let base = "model_id: x\nmodel_type: qwen3\nrevision: r\ntask_type: text-generation\ndtype: float32\nlevel: L4+L5\n\
                matrix: {eps: [cpu], dtypes: [f32]}\n";
    let entry = |e: &str, expect: &str| format!("{base}xfail: {{ {e}, reason: known, expect: {expect} }}\n");
    let logits = "{ failure: logits, max_abs_diff: [0.1, 1.0] }";
    let s = common::Scratch::new("xfail-targets");
    // The case's plan: (its own `x/case` trial's error, if it is broken; whether its L4 trial is planned to fail).
    let plan = |text: &str| {
        common::write(&s.0.join("cases/t/x.yaml"), text);
        let plan = trial::matrix::plan(&Suite::open(&s.0));
        let error = plan.iter().find_map(|t| match (&t.kind, t.name.as_str()) {
            (TrialKind::Broken(b), "x/case") => Some(b.error.to_string()),
            _ => None,
        });
        let l4_broken = plan.iter().any(|t| t.name == "x/text/cpu/f32/L4" && matches!(t.kind, TrialKind::Broken(_)));
        (error, l4_broken)
    };
    assert_eq!(plan(&entry("levels: [L4], dtypes: [f32]", logits)), (None, false), "names the f32 L4 trial");
    for bad in ["levels: [L4], dtypes: [int4]", "levels: [L4], eps: [default]", "levels: [L4], modalities: [image]"] {
        let (e, l4_broken) = plan(&entry(bad, logits));
        let e = e.unwrap_or_else(|| panic!("{bad}: the case plans"));
        assert!(e.contains("cases/t/x.yaml") && e.contains("field `xfail[0]`") && e.contains("names no trial"), "{bad}: {e}");
        assert!(l4_broken, "{bad}: the trials it would have had fail too");
    }
    // An entry names a trial of its case file, whichever of the file's cases plans it: with two prompts the second
    // case (`x.p2`) has no distribution trial (the first runs it once), and its entry naming `dist` is still right.
    let two = base.replace("level: L4+L5\n", "level: L4+L5\ninputs: { prompts: [one, two] }\ndistribution: { n_ctx: 256, k: 32 }\n");
    common::write(
        &s.0.join("cases/t/x.yaml"),
        &format!("{two}xfail: {{ levels: [dist], reason: known, expect: {{ failure: distribution }} }}\n"),
    );
    let planned = trial::matrix::plan(&Suite::open(&s.0));
    let broken: Vec<&str> = planned.iter().filter(|t| matches!(t.kind, TrialKind::Broken(_))).map(|t| t.name.as_str()).collect();
    assert!(broken.is_empty(), "an entry naming the first case's dist trial breaks no case: {broken:?}");
    assert!(planned.iter().any(|t| t.name == "x/text/cpu/f32/dist") && planned.iter().any(|t| t.name == "x.p2/text/cpu/f32/L4"));
    assert!(!planned.iter().any(|t| t.name == "x.p2/text/cpu/f32/dist"), "the second prompt's case plans no dist trial");
    // The failure is one its levels give: L5 gives no `logits`, and only L4 states a prompt position.
    let (e, _) = plan(&entry("levels: [L4, L5]", logits));
    let e = e.expect("L5 gives no logits failure");
    assert!(e.contains("only a L4 or genai trial gives") && e.contains("lists L5"), "{e}");
    let (e, _) = plan(&entry("levels: [genai]", "{ failure: logits, max_abs_diff: [1, 2], first_position: 3 }"));
    let e = e.expect("genai states no prompt position");
    assert!(e.contains("first_position` is given, but only L4") && e.contains("lists genai"), "{e}");
    // `level:` selects the levels a case file selects.
    let (e, _) = plan(&base.replace("level: L4+L5", "level: L4+dist"));
    let e = e.expect("dist is not selected by `level:`");
    assert!(e.contains("field `level`: `dist` is not a level a case file selects") && e.contains("L4 or L5"), "{e}");
}

#[test]
fn a_count_that_is_not_a_whole_number_in_range_names_the_field_and_the_range() {
    let base = "model_id: x\nmodel_type: qwen3\nrevision: r\ntask_type: text-generation\ndtype: float32\nlevel: L4\n";
    for (field, value) in [("num_fewshot", "18446744073709551616"), ("num_fewshot", "\"two\""), ("limit", "-1"), ("num_fewshot", "2.5")] {
        let text = format!("{base}accuracy:\n  - task: cases/tasks/t.yaml\n    {field}: {value}\n");
        let e = Case::parse("cases/t/x.yaml", "t", "x", &text).unwrap_err().to_string();
        assert!(
            e.contains("cases/t/x.yaml") && e.contains(&format!("field `{field}`")) && e.contains("whole number from 0 to"),
            "{value}: {e}"
        );
    }
    let text = format!("{base}accuracy:\n  - task: cases/tasks/t.yaml\n    num_fewshot: 3\n    limit: 10\n");
    Case::parse("cases/t/x.yaml", "t", "x", &text).expect("counts in range load");
}
