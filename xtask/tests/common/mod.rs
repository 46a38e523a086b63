//! Helpers shared by xtask's integration tests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;

use mobius_conformance::bootstrap::workspace_root;
use mobius_conformance::golden::{GenerationGolden, PrefillGolden};

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
