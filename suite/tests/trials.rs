//! Whole trials on the real fixtures: a broken export is caught and named, stale goldens and strict xfails (each
//! stating the failure it expects) are reported as such, and reviewed snapshots pass only while the output equals
//! them.
//!
//! Each test lays out its own suite root in a temp folder (cases, goldens) that points at the committed fixtures.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::{Scratch, copy_tree, run, write};
use mobius_conformance::outcome::{Outcome, Status};
use mobius_conformance::paths::workspace_root;
use onnx_bytes::Model;
use onnx_bytes::recipes::{rope_wrong_from, swap_past_kv};

const CASE: &str = "qwen3-tiny";

/// qwen3-tiny's cpu build with KV heads 0 and 1 of layer 0's K projection swapped, a bug class that shipped: made
/// once per process by a same-length patch of the exported weights, as `cargo xtask mutants` makes its mutants.
fn broken_package() -> &'static PathBuf {
    static DIR: OnceLock<Scratch> = OnceLock::new();
    &DIR.get_or_init(|| {
        patched_package("kv-swap", |m: &mut Model| {
            let name =
                m.graph.initializers.iter().find(|t| t.name.contains("layers.0.self_attn.k_proj")).expect("k_proj weight").name.clone();
            let cols = m.tensor(&name)?.dims[1] as usize;
            let head = 16;
            assert_eq!(cols, 2 * head, "[hidden, 2 kv heads x 16]");
            let mut w = m.f32s(&name)?;
            for row in w.chunks_exact_mut(cols) {
                let (h0, h1) = row.split_at_mut(head);
                h0.swap_with_slice(&mut h1[..head]);
            }
            m.set_f32s(&name, &w)
        })
    })
    .0
}

/// A same-length patch of a package's model.
type Patch = dyn Fn(&mut Model) -> Result<(), String>;

/// A copy of qwen3-tiny's cpu f32 build under `tag`, patched by `patch` (same-length byte patches, as the mutants).
/// The copy is removed when the returned folder is dropped.
fn patched_package(tag: &str, patch: impl Fn(&mut Model) -> Result<(), String>) -> Scratch {
    let out = Scratch::new(&format!("package-{tag}"));
    copy_tree(&workspace_root().join("fixtures/qwen3-tiny/onnx/cpu-f32"), &out.0);
    let mut m = Model::read(&out.0.join("model.onnx")).unwrap();
    patch(&mut m).unwrap();
    m.write(&out.0).unwrap();
    out
}

/// How many tokens the case's prompt has (its golden's input ids).
fn prompt_len() -> usize {
    let golden = workspace_root().join(format!("goldens/causal-lm/{CASE}.json"));
    mobius_conformance::judge::golden::PrefillGolden::load(&golden).unwrap().input_ids.len()
}

/// Points every variant of a case's text at `package`.
fn pointing_at(package: PathBuf) -> impl Fn(String) -> String {
    move |text: String| {
        let mut out: Vec<String> = text.lines().filter(|l| !l.trim_start().starts_with("package:")).map(str::to_string).collect();
        let i = out.iter().position(|l| l.trim_start().starts_with("matrix:")).expect("case has a matrix");
        out.insert(i + 1, format!("  package: \"{}\"", package.display()));
        out.join("\n") + "\n"
    }
}

/// A suite root holding the repository's qwen3-tiny case (edited by `edit`, paths made absolute) and its goldens.
fn scratch(tag: &str, edit: impl Fn(String) -> String) -> Scratch {
    let repo = workspace_root();
    let scratch = Scratch::new(&format!("trials-{tag}"));
    let root = scratch.0.clone();
    let text = std::fs::read_to_string(repo.join(format!("cases/causal-lm/{CASE}.yaml"))).unwrap();
    let text = text.replace("\"fixtures/", &format!("\"{}/fixtures/", repo.display())) + "external_paths: true\n";
    write(&root.join(format!("cases/causal-lm/{CASE}.yaml")), &edit(text));
    for suffix in [".json", "_generation.json"] {
        let name = format!("{CASE}{suffix}");
        write(&root.join("goldens/causal-lm").join(&name), &std::fs::read_to_string(repo.join("goldens/causal-lm").join(&name)).unwrap());
    }
    std::fs::copy(repo.join("cases/tolerances.yaml"), root.join("cases/tolerances.yaml")).unwrap();
    scratch
}

/// Points every variant at the broken export.
fn broken(text: String) -> String {
    pointing_at(broken_package().clone())(text)
}

#[test]
fn the_clean_fixture_passes() {
    let s = scratch("clean", |t| t);
    for level in ["L4", "L5"] {
        let o = run(&s.0, &format!("{CASE}/text/cpu/f32/{level}"));
        assert_eq!(o.status, Status::Pass, "{}", o.message);
    }
}

#[test]
fn a_broken_export_fails_both_levels_and_names_case_and_diff() {
    let s = scratch("broken", broken);
    let l4 = run(&s.0, &format!("{CASE}/text/cpu/f32/L4"));
    assert_eq!(l4.status, Status::Fail, "{}", l4.message);
    assert!(l4.message.contains(&format!("{CASE}/text/cpu/f32/L4")) && l4.message.contains("max |diff|"), "{}", l4.message);
    // Judged by the noise policy (the golden records the reference's fp32-vs-fp64 noise), and says where.
    assert!(l4.message.contains("noise policy allows") && l4.message.contains(" at id "), "{}", l4.message);
    // The golden is the pinned reference's on the case's inputs: the package changed. The message points at
    // localization (naming the scratch root, which is not the repository's) and offers no regeneration.
    let localize = format!("cargo xtask localize --root {} {CASE}/text/cpu/f32/L4", s.0.display());
    assert!(l4.message.contains("the package changed") && l4.message.contains(&localize), "{}", l4.message);
    assert!(!l4.message.contains("regen-goldens --case qwen3-tiny --level L4"), "{}", l4.message);
    // Layer 0's key heads swapped: position 0, which attends only to itself, is untouched, and the message says why.
    assert!(l4.message.contains("reading:  position 0 is within tolerance: it attends only to itself"), "{}", l4.message);
    assert!(l4.max_abs_diff.unwrap() > 1e-2, "{:?}", l4.max_abs_diff);
    // A golden another reference made: then regenerating is the step, and it names the root.
    let path = s.0.join(format!("goldens/causal-lm/{CASE}.json"));
    let mut g: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    g["provenance"]["transformers"] = "4.57.0".into();
    write(&path, &serde_json::to_string_pretty(&g).unwrap());
    let older = run(&s.0, &format!("{CASE}/text/cpu/f32/L4"));
    let regen = format!("cargo xtask regen-goldens --case qwen3-tiny --level L4 --force --root {}", s.0.display());
    assert!(older.message.contains("the reference changed (transformers 4.57.0 made this golden"), "{}", older.message);
    assert!(older.message.contains(&regen), "{}", older.message);
    let l5 = run(&s.0, &format!("{CASE}/text/cpu/f32/L5"));
    assert_eq!(l5.status, Status::Fail, "{}", l5.message);
    assert!(l5.message.contains("first") || l5.message.contains("step"), "{}", l5.message);
    assert!(l5.first_divergence.is_some());
    // genai with the prefill golden only: its maker, read from that golden, says what the failure calls for.
    std::fs::remove_file(s.0.join(format!("goldens/causal-lm/{CASE}_generation.json"))).unwrap();
    let genai = run(&s.0, &format!("{CASE}/text/cpu/f32/genai"));
    assert_eq!(genai.status, Status::Fail, "{}", genai.message);
    assert!(genai.message.contains("the reference changed (transformers 4.57.0 made this golden"), "{}", genai.message);
}

#[test]
fn a_golden_from_another_prompt_is_stale() {
    let s = scratch("stale", |t| t.replacen("    - \"", "    - \"# edited\\n", 1));
    for level in ["L4", "L5"] {
        let o = run(&s.0, &format!("{CASE}/text/cpu/f32/{level}"));
        assert_eq!(o.status, Status::Fail);
        assert!(o.message.contains("golden is stale") && o.message.contains("regen-goldens"), "{}", o.message);
    }
}

/// An xfail entry for qwen3-tiny's cpu f32 trials at `level`, expecting `expect`.
fn xfail(level: &'static str, expect: String) -> impl Fn(String) -> String {
    move |t: String| {
        t + &format!(
            "xfail:\n  levels: [{level}]\n  eps: [cpu]\n  dtypes: [f32]\n  reason: \"kv heads swapped on purpose\"\n  expect: {expect}\n"
        )
    }
}

#[test]
fn xfail_is_strict() {
    let s = scratch("xpass", xfail("L4", "{ failure: logits, max_abs_diff: [0.01, 100] }".into()));
    let o = run(&s.0, &format!("{CASE}/text/cpu/f32/L4"));
    assert_eq!(o.status, Status::Fail);
    assert!(o.message.contains("unexpectedly passed") && o.message.contains("remove the xfail"), "{}", o.message);
    assert!(o.message.contains("expected: { failure: logits"), "{}", o.message);
    let untouched = run(&s.0, &format!("{CASE}/text/default/f32/L4"));
    assert_eq!(untouched.status, Status::Pass, "the xfail names only the cpu ep");
}

/// The broken export's own L4 failure, measured once; an xfail around it is expected, one beside it is not.
#[test]
fn xfail_absorbs_only_the_failure_it_states() {
    let name = format!("{CASE}/text/cpu/f32/L4");
    let s = scratch("xfail-measure", broken);
    let measured = run(&s.0, &name);
    let failure = measured.failure.expect("a failed L4 verdict states its failure");
    let d = failure.max_abs_diff.expect("L4 measures a max |diff|");
    assert!(d > 1e-2, "{d}");

    let around = format!("{{ failure: logits, max_abs_diff: [{}, {}] }}", d * 0.95, d * 1.05);
    let s = scratch("xfail-match", |t| xfail("L4", around.clone())(broken(t)));
    let o = run(&s.0, &name);
    assert_eq!(o.status, Status::ExpectedFailure, "{}", o.message);
    assert!(o.message.contains("kv heads swapped on purpose") && o.message.contains("actual:"), "{}", o.message);

    // The same kind, a diff outside the range: another bug, not the one written down.
    let beside = format!("{{ failure: logits, max_abs_diff: [{}, {}] }}", d * 2.0, d * 3.0);
    let s = scratch("xfail-range", |t| xfail("L4", beside.clone())(broken(t)));
    let o = run(&s.0, &name);
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains("not the expected failure") && o.message.contains("outside the expected"), "{}", o.message);
    assert!(
        o.message.contains("expected: { failure: logits, max_abs_diff: [") && o.message.contains("actual:   { failure: logits"),
        "{}",
        o.message
    );

    // Another kind at L5: the stream diverges at a step, but the entry expects logits that leave tolerance later.
    let l5 = format!("{CASE}/text/cpu/f32/L5");
    let got = run(&scratch("xfail-l5-measure", broken).0, &l5).failure.expect("a failed L5 verdict states its failure");
    let wrong_step = got.first_step.expect("a diverging stream names its step") + 1;
    let s = scratch("xfail-l5", |t| xfail("L5", format!("{{ failure: tokens, first_step: {wrong_step} }}"))(broken(t)));
    let o = run(&s.0, &l5);
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains(&format!("not at the expected step {wrong_step}")), "{}", o.message);
}

/// A package ONNX Runtime cannot load, inside an xfail variant: its failure is the runtime's refusal, never the
/// logits failure the entry expects, so it fails printing what was expected and what came; an entry that states
/// the refusal by its message absorbs it.
#[test]
fn an_unloadable_package_is_only_the_refusal_an_entry_states() {
    let pkg = Scratch::new("xfail-unloadable-pkg");
    copy_tree(&workspace_root().join("fixtures/qwen3-tiny/onnx/cpu-f32"), &pkg.0);
    std::fs::write(pkg.0.join("model.onnx"), b"not an onnx model").unwrap();
    let point = |t: String| {
        let mut out: Vec<String> = t.lines().filter(|l| !l.trim_start().starts_with("package:")).map(str::to_string).collect();
        let i = out.iter().position(|l| l.trim_start().starts_with("matrix:")).expect("case has a matrix");
        out.insert(i + 1, format!("  package: \"{}\"", pkg.0.display()));
        out.join("\n") + "\n"
    };
    let s = scratch("xfail-unloadable", |t| xfail("L4", "{ failure: logits, max_abs_diff: [0, 100] }".into())(point(t)));
    let o = run(&s.0, &format!("{CASE}/text/cpu/f32/L4"));
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains("the failure is refused (the runtime refused the package), not logits"), "{}", o.message);
    assert!(o.message.contains("expected: { failure: logits") && o.message.contains("actual:   { failure: refused"), "{}", o.message);
    let refused = r#"{ failure: refused, message: "Protobuf parsing failed" }"#;
    let s = scratch("xfail-refused", |t| xfail("L4", refused.into())(point(t)));
    let o = run(&s.0, &format!("{CASE}/text/cpu/f32/L4"));
    assert_eq!(o.status, Status::ExpectedFailure, "{}", o.message);
    let other = r#"{ failure: refused, message: "No Op registered" }"#;
    let s = scratch("xfail-refused-other", |t| xfail("L4", other.into())(point(t)));
    let o = run(&s.0, &format!("{CASE}/text/cpu/f32/L4"));
    assert!(o.status == Status::Fail && o.message.contains(r#"does not contain the expected "No Op registered""#), "{}", o.message);
}

/// An xfail that does not say which failure it expects would absorb any: the case is refused, naming the field.
#[test]
fn a_bare_xfail_is_refused() {
    let bare = |t: String| t + "xfail:\n  levels: [L4]\n  eps: [cpu]\n  reason: \"kv heads swapped on purpose\"\n";
    let s = scratch("xfail-bare", bare);
    let o = run(&s.0, &format!("{CASE}/case"));
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(
        o.message.contains("cases/causal-lm/qwen3-tiny.yaml") && o.message.contains("field `xfail.expect` is missing"),
        "{}",
        o.message
    );
}

/// Edits the case's generation golden in place.
fn edit_generation_golden(root: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let path = root.join(format!("goldens/causal-lm/{CASE}_generation.json"));
    let mut g: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    f(&mut g);
    write(&path, &serde_json::to_string_pretty(&g).unwrap());
}

/// A golden whose stored step-`step` logit is 0.05 off what the package computes: numbers out, tokens kept.
fn step_logit_moved(step: usize) -> impl Fn(&Path) {
    use mobius_conformance::judge::hexfloat;
    move |root: &Path| {
        let path = root.join(format!("goldens/causal-lm/{CASE}_generation.json"));
        let mut g: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let cell = &mut g["steps"][step]["logits"][1];
        let x = hexfloat::parse_f64(cell.as_str().unwrap()).unwrap();
        *cell = serde_json::Value::String(hexfloat::format_f64(x + 0.05));
        write(&path, &serde_json::to_string_pretty(&g).unwrap());
    }
}

/// Commits a failing trial's stream as its reviewed snapshot, the way `cargo insta review` accepts one: the
/// `.snap.new` insta left, or under CI (insta writes nothing) the trial's own rendering.
fn accept(snap: &Path, failed: &Outcome) -> String {
    let pending = snap.with_extension("snap.new");
    let content = if pending.is_file() {
        let text = std::fs::read_to_string(&pending).unwrap();
        std::fs::remove_file(&pending).unwrap();
        text
    } else {
        format!(
            "---\nsource: suite/src/report/snapshot.rs\n---\n{}",
            failed.snapshot.clone().expect("a failing stream renders its snapshot")
        )
    };
    write(snap, &content);
    content
}

fn snapshot_file(root: &Path) -> PathBuf {
    root.join(format!("goldens/causal-lm/snapshots/{CASE}__text__cpu__f32__L5.snap"))
}

/// A token change is reviewable where the step logits do not fail: here a golden without per-step reference data
/// (mobius' own goldens have none), whose token at step 3 the package does not choose. With per-step data, a float32
/// flip past the near-tie line always moves the step logits out too (the package prefers another token by more
/// than the policy allows), so only a lower-precision dtype's wider noise leaves one to review.
#[test]
fn a_reviewed_snapshot_passes_while_equal_and_fails_when_changed() {
    let s = scratch("snap", |t| t);
    let mut steps = serde_json::Value::Null;
    edit_generation_golden(&s.0, |g| {
        g["generated_tokens"][3] = g["steps"][3]["ids"][9].clone();
        steps = g.as_object_mut().unwrap().remove("steps").unwrap();
    });
    let name = format!("{CASE}/text/cpu/f32/L5");
    // No snapshot yet: the diverging stream fails (and, outside CI, leaves a .snap.new to review).
    let first = run(&s.0, &name);
    assert_eq!(first.status, Status::Fail, "{}", first.message);
    assert!(first.message.contains("cargo insta review"), "{}", first.message);
    let snap = snapshot_file(&s.0);
    let content = accept(&snap, &first);
    let accepted = run(&s.0, &name);
    assert_eq!(accepted.status, Status::Accepted, "{}", accepted.message);

    write(&snap, &content.replace("token match:", "token match (edited):"));
    let changed = run(&s.0, &name);
    assert_eq!(changed.status, Status::Fail, "{}", changed.message);
    assert!(changed.message.contains("does not match") && changed.message.contains("(edited)"), "{}", changed.message);
    write(&snap, &content);

    // The per-step data back, with the numbers regressed at step 1: the reviewed snapshot may still equal the stream's
    // tokens, and the trial fails all the same, offering no review.
    edit_generation_golden(&s.0, |g| g["steps"] = steps);
    step_logit_moved(1)(&s.0);
    let regressed = run(&s.0, &name);
    assert_eq!(regressed.status, Status::Fail, "{}", regressed.message);
    assert!(regressed.message.contains("not reviewable") && regressed.message.contains("at step 1;"), "{}", regressed.message);
    assert!(regressed.message.contains("its tokens may equal the reviewed snapshot"), "{}", regressed.message);
    assert!(!regressed.message.contains("cargo insta review"), "{}", regressed.message);
    let _ = std::fs::remove_file(snap.with_extension("snap.new"));
}

/// A snapshot reviews tokens, never numbers: step logits out of the policy with every token kept fail with no
/// review offered; a snapshot accepted over that failure (as an older suite offered) does not turn it green.
#[test]
fn a_snapshot_never_absorbs_a_numbers_failure() {
    let s = scratch("snap-numbers", |t| t);
    step_logit_moved(5)(&s.0);
    let name = format!("{CASE}/text/cpu/f32/L5");
    let first = run(&s.0, &name);
    assert_eq!(first.status, Status::Fail, "{}", first.message);
    assert!(first.message.contains("not reviewable") && !first.message.contains("cargo insta review"), "{}", first.message);
    // Decode-only: the prompt's own logits (step 0) are within tolerance, so localization, which examines the prompt,
    // is not where the hint points.
    assert!(first.message.contains("the stream first fails at step 5, so the difference arises while decoding"), "{}", first.message);
    assert!(first.message.contains("the package changed") && !first.message.contains("where in the model"), "{}", first.message);
    let snap = snapshot_file(&s.0);
    assert!(!snap.with_extension("snap.new").exists(), "nothing is left to review");
    accept(&snap, &first);
    let again = run(&s.0, &name);
    assert_eq!(again.status, Status::Fail, "{}", again.message);
    assert!(again.message.contains("its tokens may equal the reviewed snapshot"), "{}", again.message);
    assert_eq!(again.failure.map(|f| f.kind.name()), Some("step_logits"));
}

/// A `.snap.new` an earlier failing run left beside a stream that passes again is reported as stale.
#[test]
fn a_pending_snapshot_beside_a_passing_stream_is_reported_stale() {
    let s = scratch("snap-stale", |t| t);
    let snap = snapshot_file(&s.0);
    write(&snap.with_extension("snap.new"), "---\nsource: x\n---\nleft over\n");
    let o = run(&s.0, &format!("{CASE}/text/cpu/f32/L5"));
    assert_eq!(o.status, Status::Pass, "{}", o.message);
    assert!(o.message.contains("stale:") && o.message.contains("cargo insta reject"), "{}", o.message);
}

/// L5 judges every decode step's logits, not only the tokens: a golden whose stored step-5 logit differs from what
/// the package computes (as a decode-only bug would make the package differ) fails at step 5, tokens all kept.
#[test]
fn l5_fails_at_the_first_step_whose_logits_leave_tolerance() {
    let s = scratch("step-logits", |t| t);
    step_logit_moved(5)(&s.0);

    let o = run(&s.0, &format!("{CASE}/text/cpu/f32/L5"));
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains("decode-step logits leave tolerance from step 5 on"), "{}", o.message);
    assert!(o.message.contains("the greedy tokens still all agree"), "{}", o.message);
    let f = o.failure.expect("a failed verdict states its failure");
    assert_eq!((f.kind.name(), f.first_step), ("step_logits", Some(5)));
    assert!((f.max_abs_diff.unwrap() - 0.05).abs() < 1e-3, "{:?}", f.max_abs_diff);
}

/// L4 judges every prompt position: a RoPE table wrong from position 30 on (inside the prompt) fails L4 "from
/// position 30", and positions 0 to 29 are exact.
#[test]
fn l4_names_the_prompt_position_where_a_late_bug_starts() {
    assert!(prompt_len() > 30, "the bug must start inside the prompt");
    let package = patched_package("rope-from-30", |m| rope_wrong_from(m, 30).map(drop));
    let s = scratch("rope-from-30", pointing_at(package.0.clone()));
    let o = run(&s.0, &format!("{CASE}/text/cpu/f32/L4"));
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains("prompt logits leave tolerance from position 30 on"), "{}", o.message);
    assert!(o.message.contains("reading:  positions 0 to 29 are within tolerance: what differs depends on the position"), "{}", o.message);
    assert!(o.message.contains(&format!("positions: {} judged", prompt_len())), "{}", o.message);
    let f = o.failure.expect("a failed verdict states its failure");
    assert_eq!((f.kind.name(), f.first_position), ("logits", Some(30)));
    let judged = o.judgement.as_ref().and_then(|j| j.downcast::<mobius_conformance::level::prefill::judged::Judged>());
    let Some(d) = judged.map(|j| &j.numbers) else { panic!("an L4 judgement") };
    let profile = d.positions.as_ref().expect("a per-position profile");
    assert_eq!(profile.len, prompt_len());
    assert!(profile.values[..30].iter().all(|&d| d < 1e-4), "{:?}", &profile.values[..30]);
    assert!(profile.values[30..].iter().all(|&d| d > 1e-3), "{:?}", &profile.values[30..]);
}

/// Decode-only bugs: the prefill is exact (L4 passes at every position), and L5 names the first decode step whose
/// logits leave tolerance, whether the greedy tokens hold (a RoPE table wrong from the first generated position on)
/// or not (layer 0 reading its cached keys and values swapped).
#[test]
fn a_decode_only_bug_passes_l4_and_fails_l5_at_the_step_it_starts() {
    let prompt = prompt_len();
    let rope_past_prompt = move |m: &mut Model| rope_wrong_from(m, prompt).map(drop);
    let kv_swapped = |m: &mut Model| swap_past_kv(m, 0).map(drop);
    let patches: [(&str, &Patch); 2] = [("rope-from-prompt", &rope_past_prompt), ("past-kv-swapped", &kv_swapped)];
    for (tag, patch) in patches {
        let package = patched_package(tag, patch);
        let s = scratch(tag, pointing_at(package.0.clone()));
        let l4 = run(&s.0, &format!("{CASE}/text/cpu/f32/L4"));
        assert_eq!(l4.status, Status::Pass, "{tag}: {}", l4.message);
        assert!(l4.message.contains(&format!("positions: {prompt} judged (0 out of tolerance)")), "{tag}: {}", l4.message);
        let l5 = run(&s.0, &format!("{CASE}/text/cpu/f32/L5"));
        assert_eq!(l5.status, Status::Fail, "{tag}: {}", l5.message);
        // Step 0 is the prefill's choice; the first step that reads the cache (or a position past the prompt) is 1.
        assert!(l5.message.contains("decode-step logits leave tolerance from step 1 on"), "{tag}: {}", l5.message);
        let f = l5.failure.expect("a failed verdict states its failure");
        match tag {
            "rope-from-prompt" => {
                assert!(l5.message.contains("the greedy tokens still all agree"), "{tag}: {}", l5.message);
                assert_eq!((f.kind.name(), f.first_step), ("step_logits", Some(1)));
            }
            _ => assert!(f.first_step.is_some_and(|s| s >= 1), "{tag}: {f:?}"),
        }
    }
}

/// NaN logits are the package's own failure (`non_finite`), and L4 names the first prompt position without a number.
/// Here the RoPE tables hold NaN from row 30 on; ONNX Runtime's attention scores every key before it masks the later
/// ones, and NaN survives the mask, so even position 0 computes no number (measured on this package).
#[test]
fn non_finite_logits_name_the_first_prompt_position() {
    let nan_from_30 = |m: &mut Model| {
        for name in ["model.rotary_emb.cos_cache", "model.rotary_emb.sin_cache"] {
            let cols = *m.tensor(name)?.dims.last().unwrap() as usize;
            let mut v = m.f32s(name)?;
            v[30 * cols..].iter_mut().for_each(|x| *x = f32::NAN);
            m.set_f32s(name, &v)?;
        }
        Ok(())
    };
    let package = patched_package("nan-from-30", nan_from_30);
    let s = scratch("nan-from-30", pointing_at(package.0.clone()));
    let o = run(&s.0, &format!("{CASE}/text/cpu/f32/L4"));
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    let at = format!("logits at prompt position 0 of {} contain non-finite values", prompt_len());
    assert!(o.message.contains(&at), "{}", o.message);
    assert_eq!(o.failure.expect("NaN logits are a measured failure").kind.name(), "non_finite");
}

/// A package whose logits are not the vocabulary its own config states (here the config says 520, the logits have
/// 512) is `vocab_size` at L4 and L5, named with both numbers, checked before finiteness; an xfail that expects
/// `non_finite` never absorbs it.
#[test]
fn a_vocabulary_that_differs_from_the_package_config_is_vocab_size_never_non_finite() {
    let pkg = Scratch::new("vocab-config-pkg");
    copy_tree(&workspace_root().join("fixtures/qwen3-tiny/onnx/cpu-f32"), &pkg.0);
    let cfg = pkg.0.join("genai_config.json");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("\"vocab_size\": 512"), "{text}");
    std::fs::write(&cfg, text.replace("\"vocab_size\": 512", "\"vocab_size\": 520")).unwrap();
    let s = scratch("vocab-config", pointing_at(pkg.0.clone()));
    for level in ["L4", "L5"] {
        let o = run(&s.0, &format!("{CASE}/text/cpu/f32/{level}"));
        assert_eq!(o.status, Status::Fail, "{level}: {}", o.message);
        assert!(o.message.contains("vocab_size: expected 520, got 512"), "{level}: {}", o.message);
        assert!(o.message.contains("genai_config.json states `model.vocab_size` 520"), "{level}: {}", o.message);
        // Regenerating goldens cannot fix a package that disagrees with its own config.
        assert!(o.message.contains("fix `model.vocab_size` there or rebuild") && !o.message.contains("regen-goldens"), "{}", o.message);
        assert_eq!(o.failure.expect("a measured failure").kind.name(), "vocab_size");
    }
    let expect_nan = |t: String| xfail("L4", "{ failure: non_finite }".into())(pointing_at(pkg.0.clone())(t));
    let s = scratch("vocab-config-xfail", expect_nan);
    let o = run(&s.0, &format!("{CASE}/text/cpu/f32/L4"));
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(o.message.contains("not the expected failure") && o.message.contains("vocab_size"), "{}", o.message);
}
