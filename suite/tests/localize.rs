//! The localize level: the rule that finds each recorded module in every fixture's graphs (and the real tier's,
//! where built), a broken export localized to the module its bug sits in (the package never written), the strict
//! xfail's `first_module`, and a clean export within noise everywhere.

mod common;

use std::path::{Path, PathBuf};

use common::{Scratch, copy_tree, run, write};
use mobius_conformance::context::RunContext;
use mobius_conformance::level::localize::golden::ModuleGolden;
use mobius_conformance::level::localize::golden::Part;
use mobius_conformance::level::localize::judge::Localization;
use mobius_conformance::level::localize::place::{Index, Placed, Unplaced};
use mobius_conformance::outcome::Status;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::case::Location;
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::trial;
use onnx_bytes::Model;

const CASE: &str = "qwen3-tiny";

/// The graphs of a package that hold a part's modules, in the order they are searched: a multimodal package's text
/// model in its embedding session, then its decoder; its towers in their encoders.
fn graphs(package: &Path, part: Part) -> Vec<PathBuf> {
    let cfg = mobius_conformance::feed::package::GenaiConfig::load_if_present(package).unwrap();
    let file = |c: Option<mobius_conformance::feed::package::Component>| package.join(c.expect("a session for the part").file);
    match (part, cfg) {
        (Part::Vision, Some(c)) => vec![file(c.vision)],
        (Part::Audio, Some(c)) => vec![file(c.speech)],
        (Part::Decoder, Some(c)) if c.embedding.is_some() => vec![file(c.embedding), file(c.decoder)],
        _ => vec![mobius_conformance::feed::package::package_model(package).unwrap()],
    }
}

/// Every text and multimodal case's module golden (each modality) against every local package of its matrix that
/// is there: each recorded module found by the rule, none guessed; where several values leave a tower's module
/// (side values handed on beside its output), the localization's read settles it, which the clean multimodal test
/// checks. Returns how many (package, module) pairs it placed, and how many were left to the read.
fn place_everything(root: &Path) -> (usize, usize) {
    let suite = Suite::open(root);
    let (mut placed, mut several) = (0, 0);
    for case in suite.load_cases().into_iter().filter_map(Result::ok) {
        if case.is_speech_to_text() {
            continue;
        }
        for (v, modality) in case.variants(root).into_iter().flat_map(|v| case.modalities().into_iter().map(move |m| (v.clone(), m))) {
            let path = suite.golden_paths(&case, modality, v.dtype).modules;
            let (Ok(golden), Some(Location::Local(package))) = (ModuleGolden::load(&path), &v.package) else { continue };
            if !package.exists() {
                continue;
            }
            for part in [Part::Vision, Part::Audio, Part::Decoder] {
                let entries: Vec<_> = golden.entries.iter().filter(|e| e.part == part).collect();
                if entries.is_empty() {
                    continue;
                }
                let models = graphs(package, part);
                let parsed: Vec<onnx_bytes::Graph> =
                    models.iter().map(|m| onnx_bytes::Graph::parse(&std::fs::read(m).unwrap()).unwrap()).collect();
                let indexes: Vec<Index> = parsed.iter().map(Index::new).collect();
                for e in entries {
                    match indexes.iter().map(|ix| ix.place(e)).find(|p| *p != Placed::Unplaced(Unplaced::Absent)) {
                        Some(Placed::Value(_)) => placed += 1,
                        Some(Placed::Unplaced(Unplaced::Several(_))) if part != Part::Decoder => several += 1,
                        why => panic!("{}: {} ({}) is not placed in {models:?}: {why:?}", case.file, e.module, e.role.name()),
                    }
                }
            }
        }
    }
    (placed, several)
}

#[test]
fn every_recorded_module_is_placed_in_every_package_there_is() {
    let (placed, several) = place_everything(&workspace_root());
    // Six text fixtures' f32, f16 and int4 builds at 14 to 51 modules each, the multimodal fixture's four modalities
    // at 51 to 85, and the real tier's when built.
    assert!(placed > 500, "only {placed} modules placed: are the module goldens and fixtures there?");
    // The towers' attention blocks (a vision layer hands its rotary positions on, an audio layer its mask bias).
    assert!(several <= 8, "{several} modules left to the read");
}

/// qwen3-tiny's cpu f32 build with layer 1's MLP down projection scaled by 1.01, in a scratch folder.
fn broken_package() -> Scratch {
    let out = Scratch::new("localize-package");
    copy_tree(&workspace_root().join("fixtures/qwen3-tiny/onnx/cpu-f32"), &out.0);
    let mut m = Model::read(&out.0.join("model.onnx")).unwrap();
    let name = m.graph.initializers.iter().find(|t| t.name.contains("layers.1.mlp.down_proj")).expect("down_proj").name.clone();
    let w: Vec<f32> = m.f32s(&name).unwrap().iter().map(|v| v * 1.01).collect();
    m.set_f32s(&name, &w).unwrap();
    m.write(&out.0).unwrap();
    out
}

/// A suite root with the repository's qwen3-tiny case, its package `package` (all variants), its goldens, and
/// `extra` appended to the case file.
fn scratch(tag: &str, package: Option<&Path>, extra: &str) -> Scratch {
    let repo = workspace_root();
    let s = Scratch::new(&format!("localize-{tag}"));
    let mut text = std::fs::read_to_string(repo.join(format!("cases/causal-lm/{CASE}.yaml"))).unwrap();
    text = text.replace("\"fixtures/", &format!("\"{}/fixtures/", repo.display())) + "external_paths: true\n" + extra;
    if let Some(p) = package {
        let lines: Vec<String> = text.lines().filter(|l| !l.trim_start().starts_with("package:")).map(str::to_string).collect();
        let i = lines.iter().position(|l| l.trim_start().starts_with("matrix:")).unwrap();
        let mut lines = lines;
        lines.insert(i + 1, format!("  package: \"{}\"", p.display()));
        text = lines.join("\n") + "\n";
    }
    write(&s.0.join(format!("cases/causal-lm/{CASE}.yaml")), &text);
    let goldens =
        ["", ".int4"].map(|d| [format!("{CASE}{d}.json"), format!("{CASE}{d}_generation.json"), format!("{CASE}{d}.modules.safetensors")]);
    for name in goldens
        .into_iter()
        .flatten()
        .chain([format!("{CASE}.int4.logits.safetensors")])
        .filter(|n| repo.join("goldens/causal-lm").join(n).is_file())
    {
        std::fs::create_dir_all(s.0.join("goldens/causal-lm")).unwrap();
        std::fs::copy(repo.join("goldens/causal-lm").join(&name), s.0.join("goldens/causal-lm").join(&name)).unwrap();
    }
    std::fs::copy(repo.join("cases/tolerances.yaml"), s.0.join("cases/tolerances.yaml")).unwrap();
    s
}

fn localization(o: &mobius_conformance::outcome::Outcome) -> &Localization {
    o.diagnosis.as_ref().and_then(|d| d.downcast::<Localization>()).or_else(|| o.judgement.as_ref()?.downcast()).expect("a localization")
}

#[test]
fn a_failing_prefill_names_the_module_its_bug_sits_in_and_the_package_is_not_written() {
    let package = broken_package();
    let model: PathBuf = package.0.join("model.onnx");
    let before = std::fs::read(&model).unwrap();
    let s = scratch("broken", Some(&package.0), "");
    let o = run(&s.0, &format!("{CASE}/text/cpu/f32/L4"));
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    let f = o.failure.as_ref().unwrap();
    assert_eq!(f.first_module.as_deref(), Some("model.layers.1.mlp"), "{}", o.message);
    assert!(o.message.contains("first module out of noise: model.layers.1.mlp: max |diff|"), "{}", o.message);
    let l = localization(&o);
    let first = l.first.unwrap();
    assert!(l.rows[..first].iter().all(|r| !r.state.past(l.bound)), "every module before it within noise");
    assert_eq!(std::fs::read(&model).unwrap(), before, "the package's model file is never written");
    // The HTML report's numbers and plot, and the summary's module.
    let shown = o.diagnosis.as_ref().unwrap().shown();
    assert!(shown.plots.iter().any(|p| p.contains("<svg") && p.contains("first out: model.layers.1.mlp")), "{:?}", shown.plots);
    let json = mobius_conformance::report::json::summary(
        &[mobius_conformance::outcome::Finished { name: "t".into(), outcome: o, seconds: 0.0 }],
        0.0,
        mobius_conformance::vocab::Device::Cpu,
    );
    assert!(json.contains("\"first_module\": \"model.layers.1.mlp\""), "{json}");
}

#[test]
fn a_strict_xfail_holds_the_first_module() {
    let package = broken_package();
    let entry = |module: &str| {
        format!(
            "xfail:\n  - levels: [L4]\n    eps: [cpu]\n    dtypes: [f32]\n    reason: \"scaled on purpose\"\n    expect: {{ failure: logits, \
             max_abs_diff: [0, 100], first_module: \"{module}\" }}\n"
        )
    };
    let right = scratch("xfail-right", Some(&package.0), &entry("model.layers.1.mlp"));
    let o = run(&right.0, &format!("{CASE}/text/cpu/f32/L4"));
    assert_eq!(o.status, Status::ExpectedFailure, "{}", o.message);
    let wrong = scratch("xfail-wrong", Some(&package.0), &entry("model.layers.0.mlp"));
    let o = run(&wrong.0, &format!("{CASE}/text/cpu/f32/L4"));
    assert_eq!(o.status, Status::Fail, "{}", o.message);
    assert!(
        o.message.contains("the first module out of the reference's noise is model.layers.1.mlp, not the expected model.layers.0.mlp"),
        "{}",
        o.message
    );
    // Only a level that localizes may state one.
    let l5 = scratch(
        "xfail-l5",
        Some(&package.0),
        &entry("model.layers.1.mlp").replace("[L4]", "[L5]").replace("failure: logits, max_abs_diff: [0, 100]", "failure: non_finite"),
    );
    let o = run(&l5.0, &format!("{CASE}/text/cpu/f32/L4"));
    assert!(o.message.contains("first_module` is given, but only L4 or genai's failures are localized"), "{}", o.message);
}

#[test]
fn a_clean_export_is_within_noise_at_every_module() {
    let s = scratch("clean", None, "");
    let suite = Suite::open(&s.0);
    let plan = trial::matrix::plan(&suite);
    for name in ["cpu/f32", "default/f32", "default/int4", "cpu/int4"] {
        let spec = plan.iter().find(|t| t.name == format!("{CASE}/text/{name}/L4")).unwrap();
        let o = trial::localize(&suite, spec, &RunContext::local());
        assert_eq!(o.status, Status::Pass, "{}", o.message);
        let l = localization(&o);
        assert_eq!((l.first, l.unplaced().count()), (None, 0), "{}", o.message);
        assert!(o.message.contains("every module recorded is within the reference's noise"), "{}", o.message);
    }
}

#[test]
fn a_clean_multimodal_export_is_within_noise_at_every_module_of_every_part() {
    let root = workspace_root();
    let suite = Suite::open(&root);
    let plan = trial::matrix::plan(&suite);
    for (modality, parts) in [("text", 51), ("image", 68), ("audio", 68), ("image+audio", 85)] {
        let spec = plan.iter().find(|t| t.name == format!("gemma4-mm-tiny/{modality}/default/f32/L4")).unwrap();
        let o = trial::localize(&suite, spec, &RunContext::local());
        assert_eq!(o.status, Status::Pass, "{}", o.message);
        let l = localization(&o);
        assert_eq!((l.first, l.unplaced().count(), l.rows.len()), (None, 0, parts), "{}", o.message);
    }
    // The towers' modules are read from the vision and audio encoders, the text model's first from the embedding
    // session, where mobius names them otherwise.
    let spec = plan.iter().find(|t| t.name == "gemma4-mm-tiny/image+audio/default/f32/L4").unwrap();
    let message = trial::localize(&suite, spec, &RunContext::local()).message;
    for (module, value) in [
        ("model.vision_tower.encoder.layers.0.self_attn", "v_vision_encoder.encoder.layers.0.self_attn.o_proj."),
        ("model.vision_tower.patch_embedder", "val_2"),
        ("model.embed_audio", "v_audio_encoder.projector."),
        ("model.audio_tower.layers.0.self_attn", "v_audio_encoder.encoder.layers.0.self_attn.post."),
        ("model.language_model.embed_tokens", "v_embedding.embed_tokens."),
        ("model.language_model.layers.0.mlp", "v_decoder.model.layers.0.mlp."),
    ] {
        let line = message.lines().find(|l| l.split_whitespace().nth(1) == Some(module)).unwrap_or_else(|| panic!("{module}: {message}"));
        assert!(line.contains(value), "{module} read from {value}: {line}");
    }
}

#[test]
fn a_module_golden_from_another_prompt_is_stale() {
    let s = scratch("stale", None, "");
    let case = s.0.join(format!("cases/causal-lm/{CASE}.yaml"));
    let text = std::fs::read_to_string(&case).unwrap().replacen("    - \"", "    - \"# edited\\n", 1);
    std::fs::write(&case, text).unwrap();
    let suite = Suite::open(&s.0);
    let spec = trial::matrix::plan(&suite).into_iter().find(|t| t.name == format!("{CASE}/text/cpu/f32/L4")).unwrap();
    let o = trial::localize(&suite, &spec, &RunContext::local());
    assert_eq!(o.status, Status::Fail);
    assert!(o.message.contains("golden is stale") && o.message.contains(".modules.safetensors"), "{}", o.message);
}
