//! Nothing outside the suite root is read unless a case opts in with `external_paths: true`: not through a path's
//! text (absolute, `..`, an `hf://` id), not through a symlink inside the root, and nothing from a file outside it
//! is echoed in a message.

mod common;

use std::path::Path;

use common::{Scratch, copy_tree, run_all, write};
use mobius_conformance::accuracy::resolve::Source;
use mobius_conformance::accuracy::task::Task;
use mobius_conformance::judge::golden::PrefillGolden;
use mobius_conformance::outcome::Status;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::case::Case;
use mobius_conformance::plan::hub::HubRef;

/// A self-contained suite root (`common::qwen3_tiny_root`), with `extra` appended to the case.
fn suite(tag: &str, extra: &str) -> Scratch {
    common::qwen3_tiny_root(&format!("confine-{tag}"), |case| case + extra)
}

fn statuses(root: &Path) -> Vec<(String, Status, String)> {
    run_all(root).into_iter().map(|(n, o)| (n, o.status, o.message)).collect()
}

#[test]
fn the_self_contained_suite_passes() {
    let s = suite("clean", "");
    for (n, st, m) in statuses(&s.0) {
        assert_eq!(st, Status::Pass, "{n}: {m}");
    }
}

#[test]
fn hub_ids_cannot_name_absolute_or_climbing_paths() {
    let sha = "0123456789abcdef0123456789abcdef01234567";
    for bad in [
        format!("hf://org/repo@{sha}//etc/passwd"),
        format!("hf://org/repo@{sha}/a//b"),
        "hf://org/repo@../../x/cpu".to_string(),
        "hf://../repo@main/x".to_string(),
        "hf://org/repo@main/a/./b".to_string(),
        "hf://org/repo@main/C:\\x".to_string(),
    ] {
        assert!(HubRef::parse(&bad).unwrap().is_err(), "{bad} was accepted");
        let text = format!(
            "model_id: m\nmodel_type: q\nrevision: r\ntask_type: text-generation\ndtype: f32\nlevel: L4\ntokenizer: \"{}\"\n",
            bad.replace('\\', "\\\\")
        );
        let e = Case::parse("cases/t/x.yaml", "t", "x", &text).unwrap_err().to_string();
        assert!(e.contains("cases/t/x.yaml") && e.contains("field `tokenizer`"), "{e}");
    }
}

#[cfg(unix)]
#[test]
fn symlinks_out_of_the_root_are_refused_unless_the_case_opts_in() {
    use std::os::unix::fs::symlink;
    let outside = Scratch::new("confine-outside");
    copy_tree(&workspace_root().join("fixtures/qwen3-tiny/onnx/cpu-f32"), &outside.0.join("pkg"));
    copy_tree(&workspace_root().join("fixtures/tokenizer"), &outside.0.join("tok"));

    // The whole package folder, then one model file inside a real package folder.
    let s = suite("link-pkg", "");
    std::fs::remove_dir_all(s.0.join("pkg")).unwrap();
    symlink(outside.0.join("pkg"), s.0.join("pkg")).unwrap();
    for (n, st, m) in statuses(&s.0) {
        assert_eq!(st, Status::Fail, "{n}: {m}");
        assert!(m.contains("field `matrix.package`") && m.contains("outside the suite root"), "{m}");
    }
    let s = suite("link-model", "");
    std::fs::remove_file(s.0.join("pkg/model.onnx.data")).unwrap();
    symlink(outside.0.join("pkg/model.onnx.data"), s.0.join("pkg/model.onnx.data")).unwrap();
    for (n, st, m) in statuses(&s.0) {
        assert_eq!(st, Status::Fail, "{n}: {m}");
        assert!(m.contains("external data of `model.onnx`") && m.contains("outside the suite root"), "{m}");
    }
    // The tokenizer.
    let s = suite("link-tok", "");
    std::fs::remove_dir_all(s.0.join("tok")).unwrap();
    symlink(outside.0.join("tok"), s.0.join("tok")).unwrap();
    for (n, st, m) in statuses(&s.0) {
        assert_eq!(st, Status::Fail, "{n}: {m}");
        assert!(m.contains("field `tokenizer`") && m.contains("outside the suite root"), "{m}");
    }
    // Opted in, the same layout runs.
    let s = suite("link-opt-in", "external_paths: true\n");
    std::fs::remove_dir_all(s.0.join("pkg")).unwrap();
    symlink(outside.0.join("pkg"), s.0.join("pkg")).unwrap();
    for (n, st, m) in statuses(&s.0) {
        assert_eq!(st, Status::Pass, "{n}: {m}");
    }
    // Goldens never leave the root, opt-in or not.
    let s = suite("link-golden", "external_paths: true\n");
    let g = s.0.join("goldens/causal-lm/qwen3-tiny.json");
    std::fs::rename(&g, outside.0.join("g.json")).unwrap();
    symlink(outside.0.join("g.json"), &g).unwrap();
    let l4 = statuses(&s.0).into_iter().find(|(n, ..)| n.ends_with("/L4")).unwrap();
    assert_eq!(l4.1, Status::Fail, "{}", l4.2);
    assert!(l4.2.contains("golden") && l4.2.contains("outside the suite root"), "{}", l4.2);
}

#[test]
fn a_golden_sidecar_is_a_file_name_beside_the_golden() {
    let repo = workspace_root();
    let text = std::fs::read_to_string(repo.join("goldens/causal-lm/qwen3-tiny.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object_mut().unwrap().remove("last_logits");
    for bad in ["../../../../etc/passwd", "/etc/passwd", "sub/x.safetensors", ".."] {
        v["last_logits_file"] = bad.into();
        let e = PrefillGolden::parse("goldens/t/x.json", &v.to_string()).unwrap_err().to_string();
        assert!(e.contains("goldens/t/x.json") && e.contains("`last_logits_file`"), "{bad}: {e}");
    }
}

#[cfg(unix)]
#[test]
fn task_data_stays_inside_the_root_and_outside_content_is_never_echoed() {
    let s = Scratch::new("confine-task");
    let outside = Scratch::new("confine-task-outside");
    let secret = "the-secret-line: 12345";
    write(&outside.0.join("data.jsonl"), &format!("{secret}\n"));
    write(&outside.0.join("task.yaml"), &format!("{secret}\n  : ][\n"));
    let task = |test: &str| {
        format!("test: {test}\noutput_type: multiple_choice\ndoc_to_text: \"{{{{q}}}}\"\ndoc_to_choice: c\ndoc_to_target: g\nmetric: acc\n")
    };
    let data = outside.0.join("data.jsonl");
    write(&s.0.join("abs.yaml"), &task(&data.display().to_string()));
    write(&s.0.join("up.yaml"), &task("../x/data.jsonl"));
    std::os::unix::fs::symlink(&data, s.0.join("linked.jsonl")).unwrap();
    write(&s.0.join("link.yaml"), &task("linked.jsonl"));
    for file in ["abs.yaml", "up.yaml", "link.yaml"] {
        let e = Task::load(&s.0, file).unwrap_err().to_string();
        assert!(e.contains(file) && e.contains("field `test`") && e.contains("external_paths"), "{file}: {e}");
        assert!(!e.contains(secret), "{e}");
    }
    // Opted in, the data is read; its parse error names file and line, not the line's content.
    let e = Task::load_with(&s.0, "abs.yaml", &Source::with_external_paths(true)).unwrap_err().to_string();
    assert!(e.contains("field `test`") && e.contains("line 1") && !e.contains(secret), "{e}");
    write(&outside.0.join("data.jsonl"), "\"the-secret-string\"\n");
    let e = Task::load_with(&s.0, "abs.yaml", &Source::with_external_paths(true)).unwrap_err().to_string();
    assert!(e.contains("line 1") && !e.contains("secret"), "{e}");
    // A task file outside the root that does not parse: no snippet of it either.
    let e = Task::load_with(&s.0, &outside.0.join("task.yaml").display().to_string(), &Source::with_external_paths(true))
        .unwrap_err()
        .to_string();
    assert!(e.contains("task.yaml") && !e.contains("secret"), "{e}");
}
