//! The reviewer's HTML report, in a real browser: `cargo xtask ci` runs a scratch suite with one failing trial (the
//! llama-tiny fixture against a golden whose stream was edited at step 3), and headless Chromium renders its
//! `index.html`: the page must load without a console message and show the failing trial with its plots.
//!
//! Chromium is Debian's `chromium` package (`.ci/run` installs it). Without it the test says so and passes, except
//! under CI or with MOBIUS_REQUIRE_BROWSER=1, where a missing browser is a failure. MOBIUS_REPORT_SCREENSHOT=FILE.png
//! keeps a screenshot of the page.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn browser() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MOBIUS_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).flat_map(|d| ["chromium", "chromium-browser", "google-chrome"].map(|n| d.join(n))).find(|p| p.is_file())
}

/// Runs the browser headless on `page` with `args`, killed after a minute.
fn render(chromium: &Path, page: &Path, args: &[&str]) -> Output {
    let url = format!("file://{}", page.display());
    let child = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--enable-logging=stderr", "--v=0"])
        .args(args)
        .arg(&url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", chromium.display()));
    let id = child.id();
    let started = Instant::now();
    let watchdog = std::thread::spawn(move || {
        while started.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(200));
            if !Path::new(&format!("/proc/{id}")).exists() {
                return;
            }
        }
        let _ = Command::new("kill").arg("-9").arg(id.to_string()).status();
    });
    let out = child.wait_with_output().unwrap();
    let _ = watchdog.join();
    out
}

/// Every message the page wrote to its console (Chromium logs them to stderr as `INFO:CONSOLE`).
fn console_messages(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr).lines().filter(|l| l.contains(":CONSOLE")).map(str::to_string).collect()
}

/// A suite root with the llama-tiny case on default/f32 only, its L5 golden edited at step 3.
fn failing_suite(root: &Path) {
    let ws = workspace();
    let case = std::fs::read_to_string(ws.join("cases/causal-lm/llama-tiny.yaml")).unwrap();
    let fixtures = ws.join("fixtures").to_string_lossy().replace('\\', "/");
    let (head, _) = case.split_once("reference:").unwrap();
    let case = format!(
        "{head}external_paths: true\ntokenizer: \"{fixtures}/tokenizer\"\nmatrix:\n  eps: [default]\n  dtypes: [f32]\n  package: \"{fixtures}/llama-tiny/onnx/{{ep}}-{{dtype}}\"\n"
    );
    std::fs::create_dir_all(root.join("cases/causal-lm")).unwrap();
    std::fs::write(root.join("cases/causal-lm/llama-tiny.yaml"), case).unwrap();
    std::fs::create_dir_all(root.join("goldens/causal-lm")).unwrap();
    for f in std::fs::read_dir(ws.join("goldens/causal-lm")).unwrap().flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        if name.starts_with("llama-tiny.") && !name.contains("int4") || name.starts_with("llama-tiny_") {
            std::fs::copy(f.path(), root.join("goldens/causal-lm").join(&name)).unwrap();
        }
    }
    let stream = root.join("goldens/causal-lm/llama-tiny_generation.json");
    let mut g: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&stream).unwrap()).unwrap();
    let tokens = g["generated_tokens"].as_array_mut().unwrap();
    let t = tokens[3].as_i64().unwrap();
    tokens[3] = serde_json::json!(if t == 10 { 11 } else { 10 });
    std::fs::write(&stream, serde_json::to_string_pretty(&g).unwrap()).unwrap();
}

/// `cargo xtask ci` on the suite at `root` (on the CPU, not as CI): its report folder, how it ended, and its output.
fn ci(root: &Path) -> (PathBuf, Output, String) {
    let out_dir = root.join("report");
    let run = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["ci", "--out"])
        .arg(&out_dir)
        .arg("--root")
        .arg(root)
        .env_remove("CI")
        .env("MOBIUS_TEST_DEVICE", "cpu")
        .output()
        .unwrap();
    let log = format!("{}\n{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    (out_dir, run, log)
}

/// Chromium, or `None` (and the test's skip said) where none is installed and none is required.
fn browser_or_skip() -> Option<PathBuf> {
    let found = browser();
    if found.is_none() {
        let required = std::env::var_os("CI").is_some() || std::env::var_os("MOBIUS_REQUIRE_BROWSER").is_some_and(|v| v == "1");
        assert!(
            !required,
            "no Chromium on PATH (chromium, chromium-browser or google-chrome; or set MOBIUS_CHROMIUM): the report's browser test cannot run; `.ci/run` installs Debian's `chromium`"
        );
        eprintln!(
            "SKIPPED: no Chromium on PATH (install Debian's `chromium`, or set MOBIUS_CHROMIUM); the report's browser test did not run"
        );
    }
    found
}

/// A suite root with the llama-tiny case on default/f32 only, its package a copy with layer 1's MLP down projection
/// scaled by 1.01: its L4 trial fails and localizes itself.
fn broken_prefill_suite(root: &Path) {
    let ws = workspace();
    let package = root.join("package");
    std::fs::create_dir_all(&package).unwrap();
    for f in std::fs::read_dir(ws.join("fixtures/llama-tiny/onnx/default-f32")).unwrap().flatten() {
        std::fs::copy(f.path(), package.join(f.file_name())).unwrap();
    }
    let mut m = onnx_bytes::Model::read(&package.join("model.onnx")).unwrap();
    let name = m.graph.initializers.iter().find(|t| t.name.contains("layers.1.mlp.down_proj")).unwrap().name.clone();
    let w: Vec<f32> = m.f32s(&name).unwrap().iter().map(|v| v * 1.01).collect();
    m.set_f32s(&name, &w).unwrap();
    m.write(&package).unwrap();
    let case = std::fs::read_to_string(ws.join("cases/causal-lm/llama-tiny.yaml")).unwrap();
    let fixtures = ws.join("fixtures").to_string_lossy().replace('\\', "/");
    let (head, _) = case.split_once("reference:").unwrap();
    let case = format!(
        "{head}level: L4\nexternal_paths: true\ntokenizer: \"{fixtures}/tokenizer\"\nmatrix:\n  eps: [default]\n  dtypes: [f32]\n  package: \"{}\"\n",
        package.to_string_lossy().replace('\\', "/")
    )
    .replacen("level: \"L4+L5\"\n", "", 1);
    std::fs::create_dir_all(root.join("cases/causal-lm")).unwrap();
    std::fs::write(root.join("cases/causal-lm/llama-tiny.yaml"), case).unwrap();
    std::fs::create_dir_all(root.join("goldens/causal-lm")).unwrap();
    for name in ["llama-tiny.json", "llama-tiny.modules.safetensors"] {
        std::fs::copy(ws.join("goldens/causal-lm").join(name), root.join("goldens/causal-lm").join(name)).unwrap();
    }
}

#[test]
fn a_failing_prefill_shows_where_along_the_model_it_leaves_the_reference() {
    let Some(chromium) = browser_or_skip() else { return };
    let root = std::env::temp_dir().join(format!("mobius-report-localize-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    broken_prefill_suite(&root);
    let (out_dir, run, log) = ci(&root);
    assert!(!run.status.success(), "the scaled weight must fail L4:\n{log}");
    let failing = "llama-tiny/text/default/f32/L4";
    let json = std::fs::read_to_string(out_dir.join("summary.json")).unwrap();
    assert!(json.contains("\"first_module\": \"model.layers.1.mlp\""), "{json}");
    let junit = std::fs::read_to_string(out_dir.join("junit.xml")).unwrap();
    assert!(junit.contains("<property name=\"first_module\" value=\"model.layers.1.mlp\"/>"), "{junit}");
    let page = out_dir.join("index.html");
    let dom = render(&chromium, &page, &["--dump-dom"]);
    let html = String::from_utf8_lossy(&dom.stdout);
    assert!(console_messages(&dom.stderr).is_empty(), "the report wrote to the browser console");
    let section = html.find(&format!("data-status=\"FAIL\"><h3>{failing}")).unwrap_or_else(|| panic!("no failing trial section:\n{html}"));
    let body = &html[section..html[section..].find("</section>").unwrap() + section];
    assert!(body.contains("first module out of noise: model.layers.1.mlp"), "the message: {body}");
    assert!(body.contains("module by module along the model") && body.contains("first out: model.layers.1.mlp"), "the plot: {body}");
    let shot = std::env::var_os("MOBIUS_LOCALIZE_SCREENSHOT").map_or_else(|| root.join("localize.png"), PathBuf::from);
    let png = render(&chromium, &page, &[&format!("--screenshot={}", shot.display()), "--window-size=1280,1600", "--hide-scrollbars"]);
    let bytes = std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot ({e}): {}", String::from_utf8_lossy(&png.stderr)));
    assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 20_000, "a blank screenshot: {} bytes", bytes.len());
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_report_of_a_run_with_one_failure_renders_in_chromium_and_shows_it() {
    let Some(chromium) = browser_or_skip() else { return };
    let root = std::env::temp_dir().join(format!("mobius-report-browser-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    failing_suite(&root);
    let (out_dir, run, log) = ci(&root);
    assert!(!run.status.success(), "the edited golden must fail its trial:\n{log}");
    let failing = "llama-tiny/text/default/f32/L5";
    let summary = std::fs::read_to_string(out_dir.join("summary.md")).unwrap();
    // The edited L5 golden fails L5 and the genai level, which judges its tokens against it.
    assert!(summary.starts_with("## Conformance: ❌ FAIL: 2 failed · 1 passed (3 trials on cpu,"), "{summary}\n{log}");
    assert!(summary.contains(&format!("<summary>❌ {failing}: ")), "{summary}");
    let page = out_dir.join("index.html");

    let dom = render(&chromium, &page, &["--dump-dom"]);
    let html = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.status.success(), "chromium failed: {}", String::from_utf8_lossy(&dom.stderr));
    let console = console_messages(&dom.stderr);
    assert!(console.is_empty(), "the report wrote to the browser console:\n{}", console.join("\n"));
    let section = html.find(&format!("data-status=\"FAIL\"><h3>{failing}")).unwrap_or_else(|| panic!("no failing trial section:\n{html}"));
    let first_section = html.find("<section").unwrap();
    assert_eq!(first_section, html[..section].rfind("<section").unwrap(), "the failure is the first trial shown");
    let end = html[section..].find("</section>").unwrap() + section;
    let body = &html[section..end];
    assert!(body.contains("first divergence: step 3") && body.matches("<svg").count() >= 2, "the stream's plots: {body}");
    assert!(html.contains("id=\"failures\"") && html.contains("class=\"matrix\""), "{html}");

    // The console check can fail: the same page with a script that logs an error is caught.
    let noisy = root.join("noisy.html");
    std::fs::write(&noisy, std::fs::read_to_string(&page).unwrap().replace("</body>", "<script>console.error('broken')</script></body>"))
        .unwrap();
    let caught = console_messages(&render(&chromium, &noisy, &["--dump-dom"]).stderr);
    assert!(caught.iter().any(|l| l.contains("broken")), "a console error must be seen: {caught:?}");

    let shot = std::env::var_os("MOBIUS_REPORT_SCREENSHOT").map_or_else(|| root.join("report.png"), PathBuf::from);
    let png = render(&chromium, &page, &[&format!("--screenshot={}", shot.display()), "--window-size=1280,2200", "--hide-scrollbars"]);
    let bytes = std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot ({e}): {}", String::from_utf8_lossy(&png.stderr)));
    assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 20_000, "a blank screenshot: {} bytes", bytes.len());
    let _ = std::fs::remove_dir_all(&root);
}
