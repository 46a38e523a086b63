//! `cargo xtask new-case`: a new model to its first green trials in one command. It writes the case YAML (checked by
//! the suite's own parser before it is saved), runs the reference for it (`regen-goldens`), says how close to a tie
//! the golden sits and what to do when it is too close, then runs the case's trials.

use std::path::{Path, PathBuf};

use mobius_conformance::context::RunContext;
use mobius_conformance::outcome::Status;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::case::Case;
use mobius_conformance::plan::hub::HubRef;
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::trial;
use mobius_conformance::vocab::{Dtype, Ep};

use crate::regen::{self, ledger::Margin};

/// What the case file says; paths as they will be written (relative to the root, or absolute when outside it).
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub name: String,
    pub task: String,
    pub model_id: String,
    pub model_type: String,
    pub prompt: String,
    pub max_new_tokens: u32,
    pub reference: String,
    pub tokenizer: Option<String>,
    pub package: String,
    pub eps: Vec<Ep>,
    pub dtypes: Vec<Dtype>,
    /// A path leaves the suite root: the case must say so.
    pub external_paths: bool,
}

/// A YAML double-quoted scalar: JSON's string syntax is a subset of it.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// The case file's text.
pub fn yaml(s: &Spec) -> String {
    let mut y = String::from("# Written by `cargo xtask new-case`; edit freely (docs/cases.md lists every field).\n");
    y += &format!("model_id: {}\nmodel_type: {}\nrevision: \"local\"\n", quoted(&s.model_id), quoted(&s.model_type));
    y += "task_type: \"text-generation\"\ndtype: \"float32\"\nlevel: \"L4+L5\"\n\n";
    y += &format!("inputs:\n  prompts:\n    - {}\n\n", quoted(&s.prompt));
    y += &format!("generation:\n  max_new_tokens: {}\n  do_sample: false\n\n", s.max_new_tokens);
    y += &format!("reference: {}\n", quoted(&s.reference));
    if let Some(t) = &s.tokenizer {
        y += &format!("tokenizer: {}\n", quoted(t));
    }
    if s.external_paths {
        y += "external_paths: true\n";
    }
    let list = |names: Vec<&str>| names.join(", ");
    y += &format!(
        "matrix:\n  eps: [{}]\n  dtypes: [{}]\n  package: {}\n",
        list(s.eps.iter().map(|e| e.name()).collect()),
        list(s.dtypes.iter().map(|d| d.name()).collect()),
        quoted(&s.package)
    );
    y
}

/// `path` as the case names it: relative to `root` when inside it (with `/`), else absolute.
fn shown(root: &Path, path: &Path) -> (String, bool) {
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    match abs.strip_prefix(&root) {
        Ok(rel) => (rel.to_string_lossy().replace('\\', "/"), false),
        Err(_) => (abs.to_string_lossy().replace('\\', "/"), true),
    }
}

/// A case name from a folder: its own name, or its parent's for a generic one (`fixtures/phi3-tiny/hf`).
pub fn default_name(hf: &Path) -> String {
    let abs = std::fs::canonicalize(hf).unwrap_or_else(|_| hf.to_path_buf());
    let mut parts = abs.iter().rev().map(|p| p.to_string_lossy().into_owned());
    let first = parts.next().unwrap_or_default();
    let raw = if ["hf", "model", "reference", "torch"].contains(&first.as_str()) { parts.next().unwrap_or(first) } else { first };
    let name: String =
        raw.to_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' { c } else { '-' }).collect();
    name.trim_matches('-').to_string()
}

/// `<ep>-<dtype>` from a package folder's name (`default-int4`, `cpu-f32`), the mobius builder's layout.
pub fn variant_from_folder(package: &str) -> Option<(Ep, Dtype)> {
    let last = package.trim_end_matches('/').rsplit('/').next()?;
    let (ep, dtype) = last.split_once('-')?;
    Some((Ep::parse(ep)?, Dtype::parse(dtype)?))
}

struct Args {
    hf: PathBuf,
    /// A package to judge (`None`: build them, one per variant of `eps` x `dtypes`, into `packages`).
    package: Option<String>,
    eps: Vec<Ep>,
    dtypes: Vec<Dtype>,
    /// Where built packages go (default `<root>/target/cases/<name>/onnx`).
    packages: Option<PathBuf>,
    prompt: String,
    name: Option<String>,
    task: String,
    tokenizer: Option<PathBuf>,
    max_new_tokens: u32,
    root: PathBuf,
    run: bool,
    force: bool,
    /// A degenerate golden stream is an error, not a warning.
    strict: bool,
    /// The user said that the case may read files outside the suite root.
    external_paths: bool,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let (mut hf, mut package, mut prompt, mut name, mut task) = (None, None, None, None, "causal-lm".to_string());
    let (mut ep, mut dtype, mut tokenizer, mut max_new_tokens) = (None, None, None, 16u32);
    let (mut eps, mut dtypes, mut packages) = (Vec::new(), Vec::new(), None);
    let mut root = std::env::var_os("MOBIUS_SUITE_ROOT").map_or_else(workspace_root, PathBuf::from);
    let (mut run, mut force, mut external_paths, mut strict) = (true, false, false, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("new-case: {a} needs a value"));
        match a.as_str() {
            "--hf" => hf = Some(PathBuf::from(value()?)),
            "--package" => package = Some(value()?),
            "--prompt" => prompt = Some(value()?),
            "--name" => name = Some(value()?),
            "--task" => task = value()?,
            "--ep" => {
                let v = value()?;
                ep = Some(Ep::parse(&v).ok_or_else(|| format!("--ep {v:?}: expected default, cpu or cuda"))?);
            }
            "--dtype" => {
                let v = value()?;
                dtype = Some(Dtype::parse(&v).ok_or_else(|| format!("--dtype {v:?}: expected f32, f16, bf16 or int4"))?);
            }
            "--eps" => {
                for v in value()?.split(',') {
                    eps.push(Ep::parse(v.trim()).ok_or_else(|| format!("--eps: {v:?}: expected default, cpu or cuda"))?);
                }
            }
            "--dtypes" => {
                for v in value()?.split(',') {
                    dtypes.push(Dtype::parse(v.trim()).ok_or_else(|| format!("--dtypes: {v:?}: expected f32, f16, bf16 or int4"))?);
                }
            }
            "--packages" => packages = Some(PathBuf::from(value()?)),
            "--tokenizer" => tokenizer = Some(PathBuf::from(value()?)),
            "--max-new-tokens" => {
                let v = value()?;
                max_new_tokens =
                    v.parse().ok().filter(|n| *n > 0).ok_or_else(|| format!("--max-new-tokens {v:?}: expected a positive integer"))?;
            }
            "--root" => root = PathBuf::from(value()?),
            "--no-run" => run = false,
            "--force" => force = true,
            "--strict" => strict = true,
            "--external-paths" => external_paths = true,
            other => return Err(format!("new-case: unknown option `{other}` (cargo xtask new-case --help)")),
        }
    }
    fn need<T>(v: Option<T>, flag: &str) -> Result<T, String> {
        v.ok_or_else(|| format!("new-case: {flag} is required (cargo xtask new-case --help)"))
    }
    if package.is_some() && (!eps.is_empty() || !dtypes.is_empty() || packages.is_some()) {
        return Err("new-case: --package judges one package; --eps/--dtypes/--packages build them instead: pass one or the other".into());
    }
    eps.extend(ep);
    dtypes.extend(dtype);
    eps.dedup();
    dtypes.dedup();
    Ok(Args {
        hf: need(hf, "--hf HF_DIR")?,
        package,
        eps,
        dtypes,
        packages,
        prompt: need(prompt, "--prompt TEXT")?,
        name,
        task,
        tokenizer,
        max_new_tokens,
        root,
        run,
        force,
        strict,
        external_paths,
    })
}

/// `--task`: a folder under `cases/`, one or more plain names joined by `/` (no absolute path, no `.` or `..`), so
/// the case file and its goldens stay inside the suite root.
pub fn check_task(task: &str) -> Result<(), String> {
    if task.is_empty() || !task.split('/').all(mobius_conformance::paths::is_plain_name) || task.split('/').any(|p| p == ".") {
        return Err(format!(
            "--task {task:?}: expected a folder under cases/ (names joined by `/`, no absolute path, no `.` or `..`): the \
             case file and its goldens stay inside the suite root"
        ));
    }
    Ok(())
}

/// `--name`: one plain file name (no folder, no `..`, not hidden), the case's name in trial names and golden paths.
pub fn check_name(name: &str) -> Result<(), String> {
    if !mobius_conformance::paths::is_plain_name(name) || name.starts_with('.') {
        return Err(format!("case name {name:?}: expected a plain name (no `/`, no `..`, not starting with `.`): pass --name NAME"));
    }
    Ok(())
}

/// Reads the inputs and decides every field; nothing is written.
fn plan(a: &Args) -> Result<Spec, String> {
    let config = a.hf.join("config.json");
    let text = std::fs::read_to_string(&config).map_err(|e| format!("--hf {}: no Hugging Face config.json ({e})", a.hf.display()))?;
    let cfg: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", config.display()))?;
    let model_type = cfg["model_type"].as_str().ok_or_else(|| format!("{}: no `model_type`", config.display()))?.to_string();
    let name = a.name.clone().unwrap_or_else(|| default_name(&a.hf));
    check_name(&name)?;
    check_task(&a.task)?;
    // Each local path the case will name, and whether it leaves the root (then only with --external-paths).
    let mut outside = Vec::new();
    let (reference, ext) = shown(&a.root, &a.hf);
    if ext {
        outside.push(format!("--hf {reference}"));
    }
    let Some(package_arg) = a.package.as_deref() else {
        return Err("new-case: no package: pass --package PACKAGE, or --eps/--dtypes to build them".into());
    };
    let (package, variant) = match HubRef::parse(package_arg) {
        Some(r) => {
            let r = r.map_err(|e| format!("--package: {e}"))?;
            (package_arg.to_string(), variant_from_folder(&r.subfolder))
        }
        // Built here: a folder of `<ep>-<dtype>` packages, named by the template.
        None if package_arg.ends_with("/{ep}-{dtype}") => {
            let dir = Path::new(package_arg.trim_end_matches("/{ep}-{dtype}"));
            let (s, ext) = shown(&a.root, dir);
            if ext {
                outside.push(format!("--packages {s}"));
            }
            (format!("{s}/{{ep}}-{{dtype}}"), None)
        }
        None => {
            let p = Path::new(package_arg);
            if !p.join("genai_config.json").is_file() {
                return Err(format!("--package {}: no genai_config.json (expected an ONNX Runtime GenAI package folder)", p.display()));
            }
            let (s, ext) = shown(&a.root, p);
            if ext {
                outside.push(format!("--package {s}"));
            }
            let v = variant_from_folder(&s);
            (s, v)
        }
    };
    let eps = if a.eps.is_empty() { vec![variant.map_or(Ep::Default, |v| v.0)] } else { a.eps.clone() };
    let dtypes = if a.dtypes.is_empty() { vec![variant.map_or(Dtype::F32, |v| v.1)] } else { a.dtypes.clone() };
    let tokenizer = match &a.tokenizer {
        Some(t) => Some(t.clone()),
        None if a.hf.join("tokenizer.json").is_file() => None,
        None if !package.starts_with("hf://") && Path::new(package_arg).join("tokenizer.json").is_file() => {
            Some(PathBuf::from(package_arg))
        }
        None => return Err(format!("no tokenizer.json in {} or the package: pass --tokenizer DIR", a.hf.display())),
    };
    let tokenizer = tokenizer.map(|t| {
        let (s, ext) = shown(&a.root, &t);
        if ext {
            outside.push(format!("--tokenizer {s}"));
        }
        s
    });
    if !outside.is_empty() && !a.external_paths {
        return Err(format!(
            "{} is outside the suite root {}: a case reads only inside its root unless it says otherwise; pass \
             --external-paths to write `external_paths: true` into the case, or move the files under the root",
            outside.join(", "),
            a.root.display()
        ));
    }
    let external = !outside.is_empty();
    let model_id =
        cfg["_name_or_path"].as_str().filter(|s| !s.is_empty() && !s.starts_with('/')).map_or_else(|| name.clone(), str::to_string);
    Ok(Spec {
        name,
        task: a.task.clone(),
        model_id,
        model_type,
        prompt: a.prompt.clone(),
        max_new_tokens: a.max_new_tokens,
        reference,
        tokenizer,
        package,
        eps,
        dtypes,
        external_paths: external,
    })
}

/// Writes the case file after the suite's parser accepted it; returns its path.
pub fn write_case(root: &Path, spec: &Spec, force: bool) -> Result<PathBuf, String> {
    check_name(&spec.name)?;
    check_task(&spec.task)?;
    let path = root.join("cases").join(&spec.task).join(format!("{}.yaml", spec.name));
    let file = mobius_conformance::paths::relative(root, &path);
    // By its text the path stays inside; through a symlinked `cases/` or task folder it must too.
    mobius_conformance::paths::confine(root, &path, "the case file", mobius_conformance::paths::SUITE_HINT).map_err(|e| e.to_string())?;
    if path.exists() && !force {
        return Err(format!("{file} exists: pass --force to overwrite it, or --name NAME for another case"));
    }
    let text = yaml(spec);
    Case::parse(&file, &spec.task, &spec.name, &text).map_err(|e| format!("the case written would not load: {e}\n{text}"))?;
    std::fs::create_dir_all(path.parent().unwrap()).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// What to do about a golden near a tie, for a person who just added the model.
pub fn advice(m: &Margin) -> Option<String> {
    let (loosest, dtype) = m.near_tie.filter(|_| m.near_a_tie())?;
    let at = if m.step == 0 { "the prompt's last position".to_string() } else { format!("generated step {}", m.step) };
    Some(format!(
        "The reference's top two tokens at {at} are only {:.4} apart, under the near-tie margin {loosest} of {dtype}: \
         there an honest kernel difference can flip the token, and the trial will call it AMBIGUOUS instead of judging it.\n\
         What to do, best first:\n\
         - a prompt the model is sure about (--prompt): a trained model is confident on ordinary text and code;\n\
         - fewer tokens (--max-new-tokens {}) so the stream ends before that step{};\n\
         - for a random-weight test model: another seed, or sharpen it (scale the LM head or the final norm up) until \
         every margin is above {loosest}, as xtask/reference/fixtures.py does for the bundled fixtures (MIN_MARGIN).\n\
         Then rerun with --force.",
        m.min,
        m.step.max(1),
        if m.step == 0 { " (not possible here: the tie is in the prompt's own prediction)" } else { "" }
    ))
}

/// Why a golden stream cannot catch a decode bug, if it cannot: one token repeated all along (a model that never
/// varies its answer) or, after the first, two in turn over six steps or more (a loop), or most steps' margins under the near-tie line
/// (where every flip is excused). The text says
/// how to sharpen a random-weight test model.
pub fn degenerate(m: &Margin) -> Option<String> {
    let distinct = |t: &[i64]| {
        let mut d = t.to_vec();
        d.sort_unstable();
        d.dedup();
        d
    };
    // After its first token (which the prompt decides), a stream that turns over two tokens only is a loop.
    let tail = distinct(m.tokens.get(1..).unwrap_or_default());
    let why = if m.tokens.len() >= 2 && distinct(&m.tokens).len() == 1 {
        format!("the reference generates token {} at every one of its {} steps", m.tokens[0], m.tokens.len())
    } else if m.tokens.len() >= 6 && tail.len() == 2 {
        format!("from its second step on, the reference's {} steps use only tokens {} and {}", m.tokens.len(), tail[0], tail[1])
    } else {
        let (loosest, dtype) = m.near_tie?;
        let under = m.each.iter().filter(|&&x| x < loosest).count();
        if 2 * under <= m.each.len() {
            return None;
        }
        format!("{under} of its {} margins are under the near-tie margin {loosest} of {dtype}, where every flip is excused", m.each.len())
    };
    Some(format!(
        "DEGENERATE {}: {why}; such a stream cannot catch a decode bug. A random-weight model: initialise it with a larger \
         std (e.g. initializer_range 0.2 in config.json), scale its LM head or final norm up until every margin clears the \
         near-tie line (xtask/reference/fixtures.py does this for the bundled fixtures: MIN_MARGIN), or use a trained \
         checkpoint; then rerun with --force",
        m.what
    ))
}

pub fn new_case(args: &[String]) -> Result<(), String> {
    let mut a = parse(args)?;
    if a.package.is_none() {
        // Every variant asked for, built from the Hugging Face folder with the reference venv's mobius.
        let name = a.name.clone().unwrap_or_else(|| default_name(&a.hf));
        check_name(&name)?;
        let out = a.packages.clone().unwrap_or_else(|| a.root.join("target/cases").join(&name).join("onnx"));
        let eps = if a.eps.is_empty() { vec![Ep::Default] } else { a.eps.clone() };
        let dtypes = if a.dtypes.is_empty() { vec![Dtype::F32] } else { a.dtypes.clone() };
        let variants: Vec<String> = eps.iter().flat_map(|e| dtypes.iter().map(move |d| format!("{}-{}", e.name(), d.name()))).collect();
        let t0 = std::time::Instant::now();
        regen::build_packages(&a.hf, &out, &variants)?;
        println!("BUILT      {} packages in {:.1}s into {}", variants.len(), t0.elapsed().as_secs_f64(), out.display());
        (a.eps, a.dtypes) = (eps, dtypes);
        a.package = Some(format!("{}/{{ep}}-{{dtype}}", out.to_string_lossy().trim_end_matches('/')));
    }
    let spec = plan(&a)?;
    let path = write_case(&a.root, &spec, a.force)?;
    println!("WROTE      {}", mobius_conformance::paths::relative(&a.root, &path));
    let margins = regen::regen_case(&a.root, &spec.name, a.force)?;
    let degenerate: Vec<String> = margins.iter().filter_map(degenerate).collect();
    for d in &degenerate {
        println!("\n{d}");
    }
    if a.strict && !degenerate.is_empty() {
        return Err(format!(
            "new-case --strict: {} degenerate golden stream(s), above; the case file and its goldens stay written (rerun \
             with a sharper model and --force, or delete them)",
            degenerate.len()
        ));
    }
    for m in &margins {
        println!("\nsmallest reference margin of {}: {:.4} at step {} of {}", m.what, m.min, m.step, m.steps);
        match (advice(m), m.near_tie) {
            (Some(text), _) => println!("{text}"),
            (None, Some((loosest, dtype))) => {
                println!(
                    "above the near-tie margin {loosest} of {dtype} (the loosest this golden judges): a flip will be judged, not excused"
                )
            }
            (None, None) => println!("(no variant of the case is judged against this golden)"),
        }
    }
    if !a.run {
        return Ok(());
    }
    let suite = Suite::open(&a.root);
    let prefix = format!("{}/", spec.name);
    let plan: Vec<_> = mobius_conformance::trial::matrix::plan(&suite).into_iter().filter(|t| t.name.starts_with(&prefix)).collect();
    let ctx = RunContext::from_env().map_err(|e| e.to_string())?;
    println!();
    let rows = trial::run_parallel(&suite, &plan, &ctx, 2, |f| println!("{:<10} {} ({:.2}s)", f.outcome.status.name(), f.name, f.seconds));
    for r in rows.iter().filter(|r| r.outcome.status != Status::Pass) {
        println!("\n{}", r.outcome.message.trim_end());
    }
    println!("\n{}: {}", spec.name, mobius_conformance::report::summary::tally(&rows));
    if rows.iter().any(|r| r.outcome.is_fail()) {
        Err(format!("{} trial(s) of the new case failed", rows.iter().filter(|r| r.outcome.is_fail()).count()))
    } else {
        let env = if suite.root_option().is_empty() { String::new() } else { format!("MOBIUS_SUITE_ROOT={} ", a.root.display()) };
        println!("run them again with `{env}cargo test -p harness --test conformance -- {prefix}`");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        Spec {
            name: "phi3-mini".into(),
            task: "causal-lm".into(),
            model_id: "acme/phi3 \"mini\"".into(),
            model_type: "phi3".into(),
            prompt: "def f(x):\n    return x  # 'quoted' : colon".into(),
            max_new_tokens: 8,
            reference: "models/phi3/hf".into(),
            tokenizer: None,
            package: "hf://acme/phi3-onnx@main/cpu-int4".into(),
            eps: vec![Ep::Cpu],
            dtypes: vec![Dtype::Int4],
            external_paths: false,
        }
    }

    #[test]
    fn the_yaml_loads_through_the_suites_parser_with_every_field_as_given() {
        let s = spec();
        let case = Case::parse("cases/causal-lm/phi3-mini.yaml", "causal-lm", "phi3-mini", &yaml(&s)).unwrap();
        assert_eq!(case.prompt(), Some(s.prompt.as_str()));
        assert_eq!((case.spec.model_id.as_str(), case.max_new_tokens()), ("acme/phi3 \"mini\"", 8));
        let root = Path::new("/nonexistent-root");
        let v = case.variants(root);
        assert_eq!(v.len(), 1);
        assert_eq!((v[0].ep, v[0].dtype), (Ep::Cpu, Dtype::Int4));
        assert_eq!(case.reference_dir(root), Some(root.join("models/phi3/hf")));
    }

    #[test]
    fn a_path_outside_the_root_is_written_absolute_and_flagged() {
        let tmp = std::env::temp_dir().join(format!("mobius-new-case-{}", std::process::id()));
        let (root, outside) = (tmp.join("root"), tmp.join("elsewhere/phi3-tiny/hf"));
        std::fs::create_dir_all(root.join("models/x")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        assert_eq!(shown(&root, &root.join("models/x")), ("models/x".to_string(), false));
        let (p, external) = shown(&root, &outside);
        assert!(external && p.starts_with('/') && p.ends_with("elsewhere/phi3-tiny/hf"), "{p}");
        assert_eq!(default_name(&outside), "phi3-tiny");
        let s = Spec { reference: p, external_paths: true, package: "models/x".into(), ..spec() };
        let written = write_case(&root, &s, false).unwrap();
        assert!(std::fs::read_to_string(&written).unwrap().contains("external_paths: true"));
        assert!(write_case(&root, &s, false).unwrap_err().contains("exists: pass --force"));
        let _ = std::fs::remove_dir_all(&tmp);
    }

    fn args(root: &Path, hf: &Path, package: &Path) -> Args {
        Args {
            hf: hf.to_path_buf(),
            package: Some(package.to_string_lossy().into_owned()),
            eps: Vec::new(),
            dtypes: Vec::new(),
            packages: None,
            prompt: "p".into(),
            name: None,
            task: "causal-lm".into(),
            tokenizer: None,
            max_new_tokens: 4,
            root: root.to_path_buf(),
            run: false,
            force: false,
            strict: false,
            external_paths: false,
        }
    }

    /// A suite root with a model and a package inside, and another model and package outside it.
    fn layout(tag: &str) -> (PathBuf, PathBuf) {
        let tmp = std::env::temp_dir().join(format!("mobius-new-case-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        for d in ["root/models/m/hf", "root/models/m/onnx/cpu-int4", "out/m/hf", "out/m/onnx/cpu-int4"] {
            std::fs::create_dir_all(tmp.join(d)).unwrap();
        }
        for hf in ["root/models/m/hf", "out/m/hf"] {
            std::fs::write(tmp.join(hf).join("config.json"), r#"{"model_type": "phi3"}"#).unwrap();
            std::fs::write(tmp.join(hf).join("tokenizer.json"), "{}").unwrap();
        }
        for p in ["root/models/m/onnx/cpu-int4", "out/m/onnx/cpu-int4"] {
            std::fs::write(tmp.join(p).join("genai_config.json"), "{}").unwrap();
        }
        (tmp.clone(), tmp.join("root"))
    }

    /// Every file under `dir`.
    fn files(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() { out.extend(files(&p)) } else { out.push(p) }
        }
        out.sort();
        out
    }

    #[test]
    fn a_task_or_name_that_leaves_the_root_is_refused_and_nothing_is_written() {
        let (tmp, root) = layout("confine");
        let before = files(&tmp);
        let (hf, pkg) = (root.join("models/m/hf"), root.join("models/m/onnx/cpu-int4"));
        let abs_task = tmp.join("elsewhere").to_string_lossy().into_owned();
        for task in [abs_task.as_str(), "../..", "..", "a/../../b", "causal-lm/..", "./x", "", "a//b", "a\\..\\b"] {
            let e = plan(&Args { task: task.into(), ..args(&root, &hf, &pkg) }).unwrap_err();
            assert!(e.contains("--task") && e.contains("inside the suite root"), "{task:?}: {e}");
        }
        for name in ["../x", "/abs", "..", ".hidden", "a/b", "a\\b", ""] {
            let e = plan(&Args { name: Some(name.into()), ..args(&root, &hf, &pkg) }).unwrap_err();
            assert!(e.contains("case name") && e.contains("--name"), "{name:?}: {e}");
        }
        // write_case checks again, whoever calls it.
        let s = Spec { task: "../..".into(), ..spec() };
        assert!(write_case(&root, &s, true).unwrap_err().contains("--task"));
        let s = Spec { name: "../../x".into(), ..spec() };
        assert!(write_case(&root, &s, true).unwrap_err().contains("case name"));
        // A task folder that is a symlink out of the root.
        std::fs::create_dir_all(root.join("cases")).unwrap();
        std::os::unix::fs::symlink(tmp.join("out"), root.join("cases/linked")).unwrap();
        let s = Spec { task: "linked".into(), ..spec() };
        let e = write_case(&root, &s, true).unwrap_err();
        assert!(e.contains("outside the suite root"), "{e}");
        std::fs::remove_file(root.join("cases/linked")).unwrap();
        assert_eq!(files(&tmp), before, "a refused new-case wrote something");
        // Inside the root, a nested task is fine.
        let s = plan(&Args { task: "causal-lm/small".into(), ..args(&root, &hf, &pkg) }).unwrap();
        assert_eq!((s.reference.as_str(), s.external_paths), ("models/m/hf", false));
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn a_package_outside_the_root_needs_external_paths_said_explicitly() {
        let (tmp, root) = layout("external");
        let (hf, pkg, out_pkg) = (root.join("models/m/hf"), root.join("models/m/onnx/cpu-int4"), tmp.join("out/m/onnx/cpu-int4"));
        let e = plan(&args(&root, &hf, &out_pkg)).unwrap_err();
        assert!(e.contains("--package") && e.contains("outside the suite root") && e.contains("--external-paths"), "{e}");
        let e = plan(&args(&root, &tmp.join("out/m/hf"), &pkg)).unwrap_err();
        assert!(e.contains("--hf") && e.contains("--external-paths"), "{e}");
        let s = plan(&Args { external_paths: true, ..args(&root, &hf, &out_pkg) }).unwrap();
        assert!(s.external_paths && s.package.starts_with('/'), "{s:?}");
        assert!(yaml(&s).contains("external_paths: true"));
        let s = plan(&args(&root, &hf, &pkg)).unwrap();
        assert!(!s.external_paths && !yaml(&s).contains("external_paths"), "{s:?}");
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn variants_come_from_the_builders_folder_names() {
        assert_eq!(variant_from_folder("fixtures/x/onnx/cpu-int4"), Some((Ep::Cpu, Dtype::Int4)));
        assert_eq!(variant_from_folder("default-f32/"), Some((Ep::Default, Dtype::F32)));
        assert_eq!(variant_from_folder("onnx/model"), None);
    }

    #[test]
    fn a_golden_near_a_tie_gets_advice_and_a_clear_one_none() {
        let m = Margin {
            what: "x".into(),
            min: 0.004,
            step: 5,
            steps: 16,
            near_tie: Some((0.01, Dtype::F32)),
            each: vec![0.5; 17],
            tokens: (0..16).collect(),
        };
        let text = advice(&m).unwrap();
        assert!(text.contains("generated step 5") && text.contains("--max-new-tokens 5") && text.contains("--prompt"), "{text}");
        assert!(advice(&Margin { min: 0.5, ..m }).is_none());
    }

    #[test]
    fn a_stream_of_one_token_or_of_near_ties_is_degenerate_and_says_how_to_sharpen_it() {
        let m = Margin {
            what: "tiny (text, f32 golden)".into(),
            min: 0.3,
            step: 2,
            steps: 4,
            near_tie: Some((0.01, Dtype::F32)),
            each: vec![0.4, 0.3, 0.5, 0.6, 0.7],
            tokens: vec![5, 9, 5, 7],
        };
        assert_eq!(degenerate(&m), None, "varied tokens, clear margins");
        let one = degenerate(&Margin { tokens: vec![5; 4], ..m.clone() }).unwrap();
        assert!(one.contains("generates token 5 at every one of its 4 steps") && one.contains("initializer_range"), "{one}");
        let a_loop = degenerate(&Margin { tokens: vec![132, 99, 342, 99, 342, 99, 342, 99], ..m.clone() }).unwrap();
        assert!(a_loop.contains("8 steps use only tokens 99 and 342"), "{a_loop}");
        assert_eq!(degenerate(&Margin { tokens: vec![1, 2, 1, 2], ..m.clone() }), None, "too short to call a loop");
        assert_eq!(degenerate(&Margin { tokens: vec![1, 2, 3, 2, 3, 4, 2, 3], ..m.clone() }), None, "three after the first");
        let ties = degenerate(&Margin { each: vec![0.001, 0.002, 0.5, 0.003, 0.7], ..m.clone() }).unwrap();
        assert!(ties.contains("3 of its 5 margins are under the near-tie margin 0.01"), "{ties}");
        assert_eq!(degenerate(&Margin { each: vec![0.001, 0.002, 0.5, 0.6, 0.7], ..m }), None, "two of five is not most");
    }
}
