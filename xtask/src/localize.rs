//! `cargo xtask localize <trial>`: the localize level on one planned trial's variant, on demand, passing or not:
//! every module along the model against the reference's, in the model's order, and the first one out of noise.

use mobius_conformance::paths::workspace_root;
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::trial;

pub fn localize(args: &[String]) -> Result<(), String> {
    let (root, names) = match args {
        [flag, root, rest @ ..] if flag == "--root" => (std::path::PathBuf::from(root), rest),
        rest => (std::env::var_os("MOBIUS_SUITE_ROOT").map_or_else(workspace_root, Into::into), rest),
    };
    if names.is_empty() {
        return Err("localize: name a trial, e.g. `cargo xtask localize gemma3-270m/text/cpu/f32/L4`".into());
    }
    let suite = Suite::open(&root);
    let plan = trial::matrix::plan(&suite);
    let ctx = crate::context()?;
    let mut not_localized = 0;
    for name in names {
        let Some(spec) = plan.iter().find(|t| t.name == *name) else {
            let like: Vec<&str> =
                plan.iter().map(|t| t.name.as_str()).filter(|n| n.contains(name.split('/').next().unwrap_or(name))).take(8).collect();
            return Err(format!("localize: no planned trial is named `{name}`; trials of that case: {}", like.join(", ")));
        };
        let t0 = std::time::Instant::now();
        let outcome = trial::localize(&suite, spec, ctx);
        println!("{}", outcome.message.trim_end());
        println!("({:.1}s)\n", t0.elapsed().as_secs_f64());
        // A module out of noise is the table's news, not the task's error; no table at all (a skip, an error) is.
        not_localized += usize::from(outcome.judgement.is_none());
    }
    match not_localized {
        0 => Ok(()),
        n => Err(format!("{n} of {} trials were not localized (above: why)", names.len())),
    }
}
