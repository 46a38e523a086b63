//! No trial vanishes without a word: every case file is found (any spelling of `.yaml`, any folder), a case that
//! does not load fails the trials a filter would aim at, and a root that holds no suite stops the run.

mod common;

use common::{Scratch, write};
use mobius_conformance::outcome::Status;
use mobius_conformance::plan::suite::{Suite, TrialKind};

const CASE: &str = "model_id: m\nmodel_type: q\nrevision: r\ntask_type: text-generation\ndtype: float32\nlevel: L4+L5\n\
                    skip_reason: not today\nmatrix:\n  eps: [cpu]\n  dtypes: [f32]\n";

fn names(root: &std::path::Path) -> Vec<String> {
    mobius_conformance::trial::matrix::plan(&Suite::open(root)).into_iter().map(|t| t.name).collect()
}

#[test]
fn upper_case_extensions_and_cases_under_tasks_are_found() {
    let s = Scratch::new("disc-found");
    write(&s.0.join("cases/causal-lm/upper.YAML"), CASE);
    write(&s.0.join("cases/causal-lm/short.Yml"), CASE);
    write(&s.0.join("cases/tasks/misplaced.yaml"), CASE);
    write(&s.0.join("cases/tasks/arith.yaml"), "test: fixtures/tasks/arith/test.jsonl\noutput_type: multiple_choice\n");
    let n = names(&s.0);
    for want in ["upper/text/cpu/f32/L4", "short/text/cpu/f32/L5", "misplaced/text/cpu/f32/L4"] {
        assert!(n.contains(&want.to_string()), "{want} missing from {n:?}");
    }
    assert!(!n.iter().any(|t| t.starts_with("arith/")), "a task file is not a case: {n:?}");
}

#[test]
fn a_case_that_does_not_load_fails_the_trials_a_filter_aims_at() {
    let s = Scratch::new("disc-broken");
    // Readable but invalid: its own eps, dtypes and levels are planned, each failing.
    write(&s.0.join("cases/causal-lm/typo.yaml"), &format!("{CASE}bogus_field: 1\n"));
    // Not YAML at all: every combination is planned, so any filter on the case's name finds it.
    write(&s.0.join("cases/causal-lm/garbage.yaml"), "model_id: [unclosed\n");
    let suite = Suite::open(&s.0);
    let plan = mobius_conformance::trial::matrix::plan(&suite);
    let failing = |name: &str| {
        let spec = plan.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("no trial {name}"));
        assert!(matches!(spec.kind, TrialKind::Broken(_)), "{name}");
        let o = mobius_conformance::trial::run(&suite, spec, &mobius_conformance::context::RunContext::local());
        assert_eq!(o.status, Status::Fail, "{name}");
        o.message
    };
    for name in ["typo/text/cpu/f32/L4", "typo/text/cpu/f32/L5", "typo/case"] {
        let m = failing(name);
        assert!(m.contains("cases/causal-lm/typo.yaml") && m.contains("bogus_field"), "{m}");
    }
    assert!(!plan.iter().any(|t| t.name.starts_with("typo/text/default/")), "only what the file says");
    for name in ["garbage/text/cpu/f32/L4", "garbage/text/default/f16/L5", "garbage/image/cuda/bf16/vision_encoder", "garbage/case"] {
        assert!(failing(name).contains("cases/causal-lm/garbage.yaml"));
    }
    // The filter docs/running.md gives and the nightly workflow's both find them.
    for filter in ["typo/text/cpu", "/cpu/"] {
        assert!(plan.iter().any(|t| t.name.contains(filter) && t.name.starts_with("typo/")), "{filter}");
    }
}

#[test]
fn two_cases_with_one_name_in_one_folder_are_both_broken() {
    let s = Scratch::new("disc-twins");
    write(&s.0.join("cases/a/twin.yaml"), CASE);
    write(&s.0.join("cases/a/twin.YAML"), CASE);
    let loaded = Suite::open(&s.0).load_cases();
    assert_eq!(loaded.len(), 2);
    for c in loaded {
        let b = c.expect_err("a name used twice in one folder is an error");
        assert!(b.error.to_string().contains("also used by"), "{}", b.error);
    }
    // In two task folders, the names stay apart: the folder prefixes each trial.
    let s = Scratch::new("disc-twins-apart");
    write(&s.0.join("cases/a/twin.yaml"), CASE);
    write(&s.0.join("cases/b/twin.yaml"), CASE);
    let suite = Suite::open(&s.0);
    assert!(suite.load_cases().iter().all(Result::is_ok));
    let names: Vec<String> = mobius_conformance::trial::matrix::plan(&suite).into_iter().map(|t| t.name).collect();
    assert!(names.iter().any(|n| n.starts_with("a/twin/")) && names.iter().any(|n| n.starts_with("b/twin/")), "{names:?}");
    let unique: std::collections::BTreeSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "trial names are unique");
}

#[cfg(unix)]
#[test]
fn symlink_loops_and_links_out_of_the_root_are_named_not_followed() {
    let s = Scratch::new("disc-links");
    write(&s.0.join("cases/causal-lm/ok.yaml"), CASE);
    std::os::unix::fs::symlink(s.0.join("cases"), s.0.join("cases/causal-lm/loop")).unwrap();
    let outside = Scratch::new("disc-links-outside");
    write(&outside.0.join("secret.yaml"), "password: hunter2\n");
    std::os::unix::fs::symlink(outside.0.join("secret.yaml"), s.0.join("cases/causal-lm/leak.yaml")).unwrap();
    std::os::unix::fs::symlink(&outside.0, s.0.join("cases/elsewhere")).unwrap();
    let suite = Suite::open(&s.0);
    let loaded = suite.load_cases();
    assert_eq!(loaded.iter().filter(|c| c.is_ok()).count(), 1, "ok.yaml once, the loop walked once");
    let broken: Vec<_> = loaded.iter().filter_map(|c| c.as_ref().err()).collect();
    assert_eq!(broken.len(), 2, "{broken:?}");
    for b in broken {
        let e = b.error.to_string();
        assert!(e.contains("outside the suite root") && !e.contains("hunter2"), "{e}");
    }
}

#[test]
fn a_root_that_is_not_a_suite_is_an_error_not_zero_trials() {
    let missing = std::env::temp_dir().join(format!("mobius-disc-missing-{}", std::process::id()));
    let e = Suite::open(&missing).check("MOBIUS_SUITE_ROOT=x").unwrap_err().to_string();
    assert!(e.contains("MOBIUS_SUITE_ROOT=x") && e.contains("not a folder"), "{e}");
    let s = Scratch::new("disc-nocases");
    let e = Suite::open(&s.0).check("--root r").unwrap_err().to_string();
    assert!(e.contains("--root r") && e.contains("no `cases/`"), "{e}");
    write(&s.0.join("cases/tolerances.yaml"), "L4: {}\n");
    assert!(Suite::open(&s.0).check("--root r").unwrap_err().to_string().contains("no case file"));
    write(&s.0.join("cases/x.yaml"), CASE);
    Suite::open(&s.0).check("--root r").unwrap();
}

#[test]
fn a_required_model_missing_from_the_cache_fails_instead_of_skipping() {
    let s = Scratch::new("disc-required");
    let hub = CASE.replace("skip_reason: not today\n", "") + "  package: \"hf://acme/absent-model@main/cpu\"\n";
    write(&s.0.join("cases/x/optional.yaml"), &hub);
    write(&s.0.join("cases/x/needed.yaml"), &(hub.clone() + "required: true\n"));
    write(&s.0.join("goldens/x/optional.json"), "{}");
    let suite = Suite::open(&s.0);
    let mut ctx = mobius_conformance::context::RunContext::local();
    let run = |ctx: &mobius_conformance::context::RunContext, name: &str| {
        let spec = mobius_conformance::trial::matrix::plan(&suite).into_iter().find(|t| t.name == name).unwrap();
        mobius_conformance::trial::run(&suite, &spec, ctx)
    };
    let o = run(&ctx, "optional/text/cpu/f32/L4");
    assert_eq!(o.status, Status::Skip, "{}", o.message);
    let o = run(&ctx, "needed/text/cpu/f32/L4");
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains("model absent") && o.message.contains("`required: true`"), "{}", o.message);
    ctx.require_models = true;
    let o = run(&ctx, "optional/text/cpu/f32/L4");
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains("MOBIUS_REQUIRE_MODELS"), "{}", o.message);
}

#[cfg(unix)]
#[test]
fn a_fifo_named_like_a_case_is_named_not_read() {
    let s = Scratch::new("disc-fifo");
    write(&s.0.join("cases/causal-lm/ok.yaml"), CASE);
    let fifo = s.0.join("cases/causal-lm/pipe.yaml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|st| st.success()) {
        eprintln!("mkfifo is not available here; nothing to check");
        return;
    }
    // Reading it would block forever: it must be reported, not opened.
    let loaded = Suite::open(&s.0).load_cases();
    let broken: Vec<_> = loaded.iter().filter_map(|c| c.as_ref().err()).collect();
    assert_eq!(broken.len(), 1, "{broken:?}");
    let e = broken[0].error.to_string();
    assert!(e.contains("cases/causal-lm/pipe.yaml") && e.contains("not a regular file"), "{e}");
    // A tolerance table that is a FIFO is an error, not the built-in defaults.
    assert!(std::process::Command::new("mkfifo").arg(s.0.join("cases/tolerances.yaml")).status().unwrap().success());
    let e = Suite::open(&s.0).policy.expect_err("a FIFO is no policy").to_string();
    assert!(e.contains("tolerance policy") && e.contains("not a regular file"), "{e}");
}

#[test]
fn a_panicking_trial_fails_alone_in_a_parallel_run() {
    use mobius_conformance::trial::guarded;
    let o = guarded("x/text/cpu/f32/L4", || panic!("index 7 out of range"));
    assert_eq!(o.status, Status::Fail);
    assert!(o.message.starts_with("x/text/cpu/f32/L4: the trial panicked: index 7 out of range"), "{}", o.message);
    let ok = guarded("y", || mobius_conformance::outcome::Outcome::skip("fine"));
    assert_eq!(ok.status, Status::Skip);
}

#[test]
fn a_case_named_like_another_cases_second_prompt_collides_loudly() {
    let s = Scratch::new("disc-p2");
    // `t` has two prompts: its second is planned as `t.p2`, the very name of the file beside it.
    write(&s.0.join("cases/x/t.yaml"), &format!("{CASE}inputs:\n  prompts: [\"one\", \"two\"]\n"));
    write(&s.0.join("cases/x/t.p2.yaml"), CASE);
    let suite = Suite::open(&s.0);
    let plan = mobius_conformance::trial::matrix::plan(&suite);
    let named: Vec<_> = plan.iter().filter(|t| t.name.ends_with("t.p2/text/cpu/f32/L4")).collect();
    assert_eq!(named.len(), 1, "one trial of that name: {:?}", plan.iter().map(|t| &t.name).collect::<Vec<_>>());
    let o = mobius_conformance::trial::run(&suite, named[0], &mobius_conformance::context::RunContext::local());
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(
        o.message.contains("cases/x/t.yaml") && o.message.contains("cases/x/t.p2.yaml") && o.message.contains("collide"),
        "{}",
        o.message
    );
    // The first prompt's trials are untouched.
    assert!(plan.iter().any(|t| t.name == "t/text/cpu/f32/L4" && !matches!(t.kind, TrialKind::Broken(_))));
}
