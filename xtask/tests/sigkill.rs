//! `regen-goldens` killed with SIGKILL at any moment leaves every golden either old or new: never truncated, never
//! missing. The run is real except for Python: it re-derives the goldens from the reference's raw outputs
//! (`--from-raw`), which this test rebuilds from the committed goldens, so it needs no torch.

#![cfg(unix)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mobius_conformance::bootstrap::workspace_root;
use mobius_conformance::golden::{GenerationGolden, PrefillGolden};

const CASES: [&str; 2] = ["qwen3-tiny", "llama-tiny"];

/// The raw outputs that would give exactly the committed goldens: full prefill logits, and per step the golden's
/// top-10 over a floor that none of them reaches.
fn raw_from_goldens(case: &str, out: &Path) {
    let dir = workspace_root().join("goldens/causal-lm");
    let pre = PrefillGolden::load(&dir.join(format!("{case}.json"))).unwrap();
    let generation = GenerationGolden::load(&dir.join(format!("{case}_generation.json"))).unwrap();
    let logits = pre.full_logits(&dir.join(format!("{case}.json"))).unwrap().unwrap();
    let v = logits.len();
    let mut steps = Vec::with_capacity(generation.steps.len() * v);
    for s in &generation.steps {
        let mut row = vec![-1.0e4f32; v];
        for (&id, l) in s.ids.iter().zip(&s.logits) {
            row[id as usize] = l.0 as f32;
        }
        steps.extend(row);
    }
    let ids: Vec<u8> = pre.input_ids.iter().flat_map(|x| x.to_le_bytes()).collect();
    let toks: Vec<u8> = generation.generated_tokens.iter().flat_map(|x| x.to_le_bytes()).collect();
    let pl: Vec<u8> = logits.iter().flat_map(|x| x.to_le_bytes()).collect();
    let sl: Vec<u8> = steps.iter().flat_map(|x| x.to_le_bytes()).collect();
    use safetensors::Dtype::{F32, I64};
    use safetensors::tensor::TensorView;
    let views = vec![
        ("input_ids", TensorView::new(I64, vec![pre.input_ids.len()], &ids).unwrap()),
        ("generated_tokens", TensorView::new(I64, vec![generation.generated_tokens.len()], &toks).unwrap()),
        ("prefill_logits", TensorView::new(F32, vec![v], &pl).unwrap()),
        ("step_logits", TensorView::new(F32, vec![generation.steps.len(), v], &sl).unwrap()),
    ];
    let p = pre.provenance.unwrap();
    let meta: HashMap<String, String> = [
        ("generated_text", generation.generated_text.unwrap()),
        ("transformers", p.transformers),
        ("torch", p.torch),
        ("prompt", generation.prompt),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    std::fs::write(out.join(format!("{case}.text.safetensors")), safetensors::serialize(views, Some(meta)).unwrap()).unwrap();
}

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn regen(root: &Path, raw: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xtask"));
    c.args(["regen-goldens", "--force", "--allow-ci", "--root"]).arg(root).arg("--from-raw").arg(raw);
    c.stdout(Stdio::null()).stderr(Stdio::null());
    c
}

#[test]
fn sigkill_at_any_moment_leaves_each_golden_old_or_new() {
    let repo = workspace_root();
    let s = Scratch(std::env::temp_dir().join(format!("mobius-sigkill-{}", std::process::id())));
    let (root, raw) = (s.0.join("suite"), s.0.join("raw"));
    std::fs::create_dir_all(root.join("cases/causal-lm")).unwrap();
    std::fs::create_dir_all(root.join("goldens/causal-lm")).unwrap();
    std::fs::create_dir_all(&raw).unwrap();
    // The same relative paths as the repository's cases (goldens record the reference's path).
    std::os::unix::fs::symlink(repo.join("fixtures"), root.join("fixtures")).unwrap();
    let mut goldens = Vec::new();
    for case in CASES {
        // The f32 goldens only: the int4 kernel-parity ones come from another reference run.
        let text = std::fs::read_to_string(repo.join(format!("cases/causal-lm/{case}.yaml"))).unwrap().replace(", int4]", "]");
        std::fs::write(root.join(format!("cases/causal-lm/{case}.yaml")), text).unwrap();
        raw_from_goldens(case, &raw);
        for f in [format!("{case}.json"), format!("{case}_generation.json")] {
            let new = std::fs::read(repo.join("goldens/causal-lm").join(&f)).unwrap();
            let mut old = new.clone();
            old.extend_from_slice(b" \n"); // a different, still valid, earlier golden
            goldens.push((root.join("goldens/causal-lm").join(&f), old, new));
        }
    }
    let reset = || goldens.iter().for_each(|(p, old, _)| std::fs::write(p, old).unwrap());

    // A full run turns every old golden into the new one (and so proves the raw outputs reproduce them).
    reset();
    let t0 = Instant::now();
    assert!(regen(&root, &raw).status().unwrap().success());
    let full = t0.elapsed();
    for (p, _, new) in &goldens {
        assert!(std::fs::read(p).unwrap() == *new, "{} was not regenerated byte for byte from the raw outputs", p.display());
    }

    let (mut saw_old, mut saw_new, mut x) = (0, 0, 0x9e3779b97f4a7c15u64);
    for round in 0..40 {
        reset();
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let delay = Duration::from_micros((x >> 33) % (full.as_micros() as u64 + 1));
        let mut child = regen(&root, &raw).spawn().unwrap();
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        for (p, old, new) in &goldens {
            let now =
                std::fs::read(p).unwrap_or_else(|e| panic!("round {round} (killed after {delay:?}): {} is missing: {e}", p.display()));
            assert!(now == *old || now == *new, "round {round} (killed after {delay:?}): {} is torn ({} bytes)", p.display(), now.len());
            if now == *new { saw_new += 1 } else { saw_old += 1 }
        }
    }
    eprintln!("40 kills within a {full:?} run: {saw_old} goldens found old, {saw_new} new, none torn or missing");
    // The kills landed before, during and after the writes.
    assert!(saw_old > 0 && saw_new > 0, "old {saw_old}, new {saw_new}: the kills never fell inside the run (full run {full:?})");
}
