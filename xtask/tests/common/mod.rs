//! Helpers shared by xtask's integration tests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mobius_conformance::judge::golden::{GenerationGolden, PrefillGolden};
use mobius_conformance::paths::workspace_root;

/// The raw outputs that would give exactly the committed goldens: full prefill logits, and per step the golden's
/// top-10 over a floor that none of them reaches.
pub fn raw_from_goldens(case: &str, out: &Path) {
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
    // Every prompt position in brief, as the reference writes it.
    let (s, k) = (pre.positions.len(), pre.positions.first().map_or(0, |p| p.ids.len()));
    let pos_ids: Vec<u8> = pre.positions.iter().flat_map(|p| p.ids.iter().flat_map(|x| x.to_le_bytes())).collect();
    let pos_logits: Vec<u8> = pre.positions.iter().flat_map(|p| p.logits.iter().flat_map(|x| (x.0 as f32).to_le_bytes())).collect();
    let lse: Vec<u8> = pre.positions.iter().flat_map(|p| p.logsumexp.0.to_le_bytes()).collect();
    let noise: Vec<u8> = pre.positions.iter().flat_map(|p| p.noise.map_or(0.0, |n| n.0).to_le_bytes()).collect();
    use safetensors::Dtype::{F32, F64, I64};
    use safetensors::tensor::TensorView;
    let mut views = vec![
        ("input_ids", TensorView::new(I64, vec![pre.input_ids.len()], &ids).unwrap()),
        ("generated_tokens", TensorView::new(I64, vec![generation.generated_tokens.len()], &toks).unwrap()),
        ("prefill_logits", TensorView::new(F32, vec![v], &pl).unwrap()),
        ("step_logits", TensorView::new(F32, vec![generation.steps.len(), v], &sl).unwrap()),
    ];
    if s > 0 {
        views.push(("position_top_ids", TensorView::new(I64, vec![s, k], &pos_ids).unwrap()));
        views.push(("position_top_logits", TensorView::new(F32, vec![s, k], &pos_logits).unwrap()));
        views.push(("position_logsumexp", TensorView::new(F64, vec![s], &lse).unwrap()));
        if pre.positions.iter().all(|p| p.noise.is_some()) {
            views.push(("position_noise", TensorView::new(F64, vec![s], &noise).unwrap()));
        }
    }
    let p = pre.provenance.unwrap();
    let meta: HashMap<String, String> = [
        ("format", "golden-raw-v1".to_string()),
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

/// The reference venv's python, or `None` (saying so) when there is none; under `CI`, where `.ci/run` builds the
/// venv first, its absence is a failure. `runs` says what needs it, for the message.
pub fn venv_python(runs: &str) -> Option<PathBuf> {
    let venv = std::env::var_os("MOBIUS_REFERENCE_VENV").map_or_else(|| workspace_root().join("target/reference-venv"), PathBuf::from);
    let python = venv.join("bin/python");
    if python.is_file() {
        return Some(python);
    }
    assert!(std::env::var_os("CI").is_none(), "under CI the reference venv must exist ({}): .ci/run builds it", venv.display());
    eprintln!("SKIPPED: no reference venv (set MOBIUS_REFERENCE_VENV or run `cargo xtask venv`): {runs}");
    None
}
