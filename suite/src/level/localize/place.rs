//! The one rule that finds a recorded module in a package's graph. mobius names each value it makes after the
//! Hugging Face module that makes it (`v_model.layers.0.self_attn.o_proj.MatMul_57`) and each node after its module
//! path (`model/layers.0/self_attn/o_proj/MatMul_node_57`); a node a fusion made keeps its first output's name. So:
//!
//! - a node belongs to the module its first output names (`v_<module>.<Op>_<n>`), else the one its name's path
//!   names (`<a>/<b>/<Op>_node_<n>`), else the one whose weight it reads (initializers carry Hugging Face's parameter
//!   names: a fused final norm `node_SkipLayerNormalization_4` reading `encoder.layer_norm.weight`), else to none;
//! - a module's **output** is the one activation named under it (itself or a submodule; not a Constant's), or made
//!   by a node it owns by its weight alone, that leaves it: read by a node outside it, or a graph output;
//! - a norm's **input** is what it normalizes: a fused `Skip*LayerNormalization` of the norm computes it as its
//!   fourth output (input + skip, the residual stream); an unfused norm reads it as the one activation from outside
//!   (a value another node computes, not a Constant's, or a graph input; an initializer is neither).
//!
//! A path is looked for as the reference names it, then as mobius renames a multimodal model's parts ([`ALIASES`]:
//! Gemma-4's `model.language_model` is `decoder.model` in the decoder and `embedding` in the embedding session, its
//! `model.vision_tower.encoder` is `vision_encoder.encoder`, its projector `model.embed_vision` is `vision_encoder.projector`),
//! then without its first component (a package that drops the reference's outer wrapper: Whisper's `model.decoder`
//! is mobius' `decoder`). The first of these that names anything in the graph is the one placed.
//!
//! Where several values leave a module, two of them the operands of one fused `Skip*LayerNormalization`, its output
//! is that node's sum (the residual add fused into the next norm). Otherwise the several are reported
//! (`Unplaced::Several`), and the localization reads them all and keeps the one float tensor of the reference's size
//! at the module's rows (a mask or positions computed once and handed on to later layers is neither). Where that is
//! not exactly one value (a module ONNX Runtime's exporter fused away, a fused norm that does not output its sum), the
//! module is reported unplaced, by name and why, never guessed.

use std::collections::{BTreeMap, BTreeSet};

use onnx_bytes::{Graph, Node};

use super::golden::{Entry, Role};

/// Where a recorded module's tensor is in the package, or why it is not found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    Value(String),
    Unplaced(Unplaced),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unplaced {
    /// No value named under the module leaves it (or, for an input, none comes in).
    Absent,
    /// More than one does: which one carries the module's tensor is not the rule's to guess.
    Several(Vec<String>),
    /// Its fused norm does not output the residual sum it computes.
    NoSum { node: String },
}

/// How mobius names the parts of a multimodal model that Hugging Face nests otherwise: (the reference's path, the
/// package's), each rewriting that path and every path under it. One line per rename.
pub const ALIASES: &[(&str, &str)] = &[
    ("model.language_model", "decoder.model"),
    ("model.language_model", "embedding"),
    ("model.vision_tower.encoder", "vision_encoder.encoder"),
    ("model.vision_tower.patch_embedder", "vision_encoder.encoder.patch_embedder"),
    ("model.embed_vision", "vision_encoder.projector"),
    ("model.audio_tower", "audio_encoder.encoder"),
    ("model.embed_audio", "audio_encoder.projector"),
];

/// The paths `module` is looked for under, in order: its own, its [`ALIASES`], and without its first component.
pub fn candidates(module: &str) -> Vec<String> {
    let mut out = vec![module.to_string()];
    for (from, to) in ALIASES {
        if let Some(rest) = module.strip_prefix(from).filter(|r| r.is_empty() || r.starts_with('.')) {
            out.push(format!("{to}{rest}"));
        }
    }
    if let Some((_, rest)) = module.split_once('.') {
        out.push(rest.to_string());
    }
    out
}

/// The module a value's name says made it: `v_model.layers.0.mlp.Mul_68` -> `model.layers.0.mlp`.
pub fn value_module(value: &str) -> Option<&str> {
    value.strip_prefix("v_").and_then(|v| v.rsplit_once('.')).map(|(m, _)| m)
}

/// The module a node belongs to (see the module doc).
pub fn node_module(node: &Node) -> Option<String> {
    if let Some(m) = node.outputs.first().and_then(|o| value_module(o)) {
        return Some(m.to_string());
    }
    node.name.rsplit_once('/').map(|(path, _)| path.replace('/', "."))
}

/// A norm fused with the residual add before it (ONNX Runtime's contrib ops).
fn is_skip_norm(n: &Node) -> bool {
    n.op_type.ends_with("SkipSimplifiedLayerNormalization") || n.op_type.ends_with("SkipLayerNormalization")
}

/// Whether `module` is `parent` or one of its submodules.
fn inside(module: Option<&str>, parent: &str) -> bool {
    module.is_some_and(|m| m == parent || m.strip_prefix(parent).is_some_and(|rest| rest.starts_with('.')))
}

/// The graph as the rule reads it: each node's module, who reads each value, what is constant.
pub struct Index<'g> {
    graph: &'g Graph,
    modules: Vec<Option<String>>,
    /// Whether a node's module is known by the weight it reads alone (its outputs carry no module name).
    weight_owned: Vec<bool>,
    readers: BTreeMap<&'g str, Vec<usize>>,
    constant: BTreeSet<&'g str>,
    outputs: BTreeSet<&'g str>,
    /// What a node computes or the graph is fed: an activation (an initializer is neither).
    computed: BTreeSet<&'g str>,
}

impl<'g> Index<'g> {
    pub fn new(graph: &'g Graph) -> Index<'g> {
        let mut readers: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, n) in graph.nodes.iter().enumerate() {
            for input in n.inputs.iter().filter(|s| !s.is_empty()) {
                readers.entry(input.as_str()).or_default().push(i);
            }
        }
        let constant = graph
            .initializers
            .iter()
            .map(|t| t.name.as_str())
            .chain(graph.nodes.iter().filter(|n| n.op_type == "Constant").flat_map(|n| n.outputs.iter().map(String::as_str)))
            .collect();
        let weights: BTreeSet<&str> = graph.initializers.iter().map(|t| t.name.as_str()).collect();
        let by_weight = |n: &Node| {
            n.inputs
                .iter()
                .filter(|i| weights.contains(i.as_str()))
                .find_map(|i| i.strip_suffix(".weight").or_else(|| i.strip_suffix(".bias")).map(str::to_string))
        };
        let named: Vec<Option<String>> = graph.nodes.iter().map(node_module).collect();
        let weight_owned: Vec<bool> = graph.nodes.iter().zip(&named).map(|(n, m)| m.is_none() && by_weight(n).is_some()).collect();
        let modules = graph.nodes.iter().zip(named).map(|(n, m)| m.or_else(|| by_weight(n))).collect();
        Index {
            graph,
            modules,
            weight_owned,
            readers,
            constant,
            outputs: graph.outputs.iter().map(String::as_str).collect(),
            computed: graph
                .nodes
                .iter()
                .flat_map(|n| n.outputs.iter().map(String::as_str))
                .chain(graph.inputs.iter().map(String::as_str))
                .collect(),
        }
    }

    /// Where `entry`'s tensor is: under the first of its [`candidates`] paths that names anything here, else nowhere.
    pub fn place(&self, entry: &Entry) -> Placed {
        candidates(&entry.module)
            .iter()
            .map(|m| self.place_at(entry, m))
            .find(|p| *p != Placed::Unplaced(Unplaced::Absent))
            .unwrap_or(Placed::Unplaced(Unplaced::Absent))
    }

    fn place_at(&self, entry: &Entry, module: &str) -> Placed {
        let found = match entry.role {
            Role::Output => match self.output_of(module) {
                found if found.len() > 1 => match self.fused_sum(found) {
                    Ok(found) => found,
                    Err(u) => return Placed::Unplaced(u),
                },
                found => found,
            },
            Role::Input => match self.input_of(module) {
                Ok(found) => found,
                Err(u) => return Placed::Unplaced(u),
            },
        };
        match found.len() {
            0 => Placed::Unplaced(Unplaced::Absent),
            1 => Placed::Value(found.into_iter().next().expect("one")),
            _ => Placed::Unplaced(Unplaced::Several(found)),
        }
    }

    fn output_of(&self, module: &str) -> Vec<String> {
        let mut found = Vec::new();
        for (i, n) in self.graph.nodes.iter().enumerate() {
            let owned = self.weight_owned[i] && inside(self.modules[i].as_deref(), module);
            // A Constant's value is no activation, wherever it is read.
            let mine = |v: &&String| (owned || inside(value_module(v), module)) && !v.is_empty() && !self.constant.contains(v.as_str());
            for v in n.outputs.iter().filter(mine) {
                let read_outside = self.readers.get(v.as_str()).into_iter().flatten().any(|&r| !inside(self.modules[r].as_deref(), module));
                if (read_outside || self.outputs.contains(v.as_str())) && !found.contains(v) {
                    found.push(v.clone());
                }
            }
        }
        found
    }

    /// Of several values leaving a module: where two of them are the input and the skip of one fused
    /// `Skip*LayerNormalization`, the module's output is their sum, which that node computes as its fourth output (the
    /// residual add the exporter fused into the next norm); others that leave it beside them are what it hands on
    /// (positions, a padding mask).
    fn fused_sum(&self, found: Vec<String>) -> Result<Vec<String>, Unplaced> {
        let fused = self
            .graph
            .nodes
            .iter()
            .find(|n| is_skip_norm(n) && n.inputs.len() >= 2 && found.contains(&n.inputs[0]) && found.contains(&n.inputs[1]));
        match fused {
            None => Ok(found),
            Some(n) => match n.outputs.get(3).filter(|s| !s.is_empty()) {
                Some(sum) => Ok(vec![sum.clone()]),
                None => Err(Unplaced::NoSum { node: n.label().to_string() }),
            },
        }
    }

    fn input_of(&self, module: &str) -> Result<Vec<String>, Unplaced> {
        let own: Vec<&Node> =
            self.graph.nodes.iter().zip(&self.modules).filter(|(_, m)| inside(m.as_deref(), module)).map(|(n, _)| n).collect();
        if let Some(fused) = own.iter().find(|n| is_skip_norm(n)) {
            return match fused.outputs.get(3).filter(|s| !s.is_empty()) {
                Some(sum) => Ok(vec![sum.clone()]),
                None => Err(Unplaced::NoSum { node: fused.label().to_string() }),
            };
        }
        let made: BTreeSet<&str> = own.iter().flat_map(|n| n.outputs.iter().map(String::as_str)).collect();
        let mut found: Vec<String> = Vec::new();
        for v in own.iter().flat_map(|n| &n.inputs) {
            let activation = self.computed.contains(v.as_str()) && !self.constant.contains(v.as_str());
            if !activation || made.contains(v.as_str()) || found.contains(v) {
                continue;
            }
            found.push(v.clone());
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str]) -> Node {
        Node {
            name: name.into(),
            op_type: op.into(),
            op_type_span: 0..0,
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            input_spans: vec![],
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
            attributes: vec![],
        }
    }

    fn entry(module: &str, role: Role) -> Entry {
        Entry {
            module: module.into(),
            role,
            part: super::super::golden::Part::Decoder,
            rows: None,
            values: vec![],
            noise: 0.0,
            storage: 0.0,
        }
    }

    /// Gemma-3's layer as mobius writes it: an unfused input norm, attention, a norm fused with the residual add.
    fn graph() -> Graph {
        Graph {
            nodes: vec![
                node("model/embed_tokens/Gather_node_0", "Gather", &["w", "input_ids"], &["v_model.embed_tokens.Gather_0"]),
                node("model/embed_tokens/Mul_node_1", "Mul", &["v_model.embed_tokens.Gather_0", "c"], &["v_model.embed_tokens.Mul_1"]),
                node("model/layers.0/input_layernorm/Add_node_2", "Add", &["nw", "one"], &["v_model.layers.0.input_layernorm.Add_2"]),
                node(
                    "model/layers.0/input_layernorm/RMSNormalization_node_3",
                    "RMSNormalization",
                    &["v_model.embed_tokens.Mul_1", "v_model.layers.0.input_layernorm.Add_2"],
                    &["v_model.layers.0.input_layernorm.RMSNormalization_3"],
                ),
                node(
                    "model/layers.0/self_attn/q_proj/MatMul_node_4",
                    "MatMul",
                    &["v_model.layers.0.input_layernorm.RMSNormalization_3", "qw"],
                    &["v_model.layers.0.self_attn.q_proj.MatMul_4"],
                ),
                node(
                    "node_GroupQueryAttention_9",
                    "GroupQueryAttention",
                    &["v_model.layers.0.self_attn.q_proj.MatMul_4"],
                    &["v_model.layers.0.self_attn.Attention_5_0", "present.0.key", "present.0.value"],
                ),
                node(
                    "model/layers.0/self_attn/o_proj/MatMul_node_6",
                    "MatMul",
                    &["v_model.layers.0.self_attn.Attention_5_0", "ow"],
                    &["v_model.layers.0.self_attn.o_proj.MatMul_6"],
                ),
                node(
                    "node_Skip_7",
                    "SkipSimplifiedLayerNormalization",
                    &["v_model.embed_tokens.Mul_1", "v_model.layers.0.self_attn.o_proj.MatMul_6", "pw"],
                    &["v_model.layers.0.pre_feedforward_layernorm.RMSNormalization_7", "", "", "val_3"],
                ),
                node(
                    "lm_head/MatMul_node_8",
                    "MatMul",
                    &["v_model.layers.0.pre_feedforward_layernorm.RMSNormalization_7", "hw"],
                    &["logits"],
                ),
                node("node_Skip_10", "SkipSimplifiedLayerNormalization", &["val_3", "x", "nw"], &["v_model.norm.RMSNormalization_10"]),
            ],
            initializers: vec![],
            inputs: vec!["input_ids".into()],
            outputs: vec!["logits".into(), "present.0.key".into(), "present.0.value".into()],
        }
    }

    #[test]
    fn each_module_is_the_one_value_that_leaves_it() {
        let g = graph();
        let ix = Index::new(&g);
        let at = |m: &str, r: Role| ix.place(&entry(m, r));
        let v = |s: &str| Placed::Value(s.to_string());
        assert_eq!(at("model.embed_tokens", Role::Output), v("v_model.embed_tokens.Mul_1"));
        assert_eq!(at("model.layers.0.input_layernorm", Role::Output), v("v_model.layers.0.input_layernorm.RMSNormalization_3"));
        assert_eq!(at("model.layers.0.input_layernorm", Role::Input), v("v_model.embed_tokens.Mul_1"), "its weight's Add is its own");
        // A fused node belongs to the module of its first output; the attention's output is its o_proj's.
        assert_eq!(at("model.layers.0.self_attn", Role::Output), v("v_model.layers.0.self_attn.o_proj.MatMul_6"));
        assert_eq!(at("model.layers.0.pre_feedforward_layernorm", Role::Input), v("val_3"), "a fused norm's sum");
        assert_eq!(at("model.layers.0.mlp", Role::Output), Placed::Unplaced(Unplaced::Absent), "not in this graph");
        assert_eq!(at("model.norm", Role::Input), Placed::Unplaced(Unplaced::NoSum { node: "node_Skip_10".into() }));
    }

    #[test]
    fn two_values_leaving_a_module_are_not_guessed_between() {
        let mut g = graph();
        g.nodes.push(node("model/other/Neg_node_11", "Neg", &["v_model.embed_tokens.Gather_0"], &["v_model.other.Neg_11"]));
        let placed = Index::new(&g).place(&entry("model.embed_tokens", Role::Output));
        let both = vec!["v_model.embed_tokens.Gather_0".to_string(), "v_model.embed_tokens.Mul_1".to_string()];
        assert_eq!(placed, Placed::Unplaced(Unplaced::Several(both)));
    }

    #[test]
    fn a_module_whose_residual_add_is_fused_into_the_next_norm_outputs_the_norm_s_sum() {
        // Gemma-4's patch embedder: its projection and position embedding are added by the first layer's fused norm;
        // it also hands its positions on.
        let mut g = Graph {
            nodes: vec![
                node("pe/MatMul_node_0", "MatMul", &["pixels", "w"], &["v_pe.input_proj.MatMul_0"]),
                node("pe/Gather_node_1", "Gather", &["table", "positions"], &["v_pe.Gather_1"]),
                node(
                    "node_Skip_2",
                    "SkipSimplifiedLayerNormalization",
                    &["v_pe.input_proj.MatMul_0", "v_pe.Gather_1", "nw"],
                    &["v_layers.0.input_layernorm.RMSNormalization_2", "", "", "val_2"],
                ),
                node("pe/Cast_node_3", "Cast", &["positions"], &["v_pe.Cast_3"]),
                node("layers.0/attn/Mul_node_4", "Mul", &["v_layers.0.input_layernorm.RMSNormalization_2", "v_pe.Cast_3"], &["out"]),
            ],
            initializers: vec![],
            inputs: vec!["pixels".into(), "positions".into()],
            outputs: vec!["out".into()],
        };
        assert_eq!(Index::new(&g).place(&entry("pe", Role::Output)), Placed::Value("val_2".into()));
        g.nodes[2].outputs.truncate(1);
        assert_eq!(Index::new(&g).place(&entry("pe", Role::Output)), Placed::Unplaced(Unplaced::NoSum { node: "node_Skip_2".into() }));
        // Without the fused add, the several values are reported, for the localization's read to settle.
        g.nodes[2].op_type = "Add".into();
        assert!(matches!(Index::new(&g).place(&entry("pe", Role::Output)), Placed::Unplaced(Unplaced::Several(v)) if v.len() == 3));
    }

    #[test]
    fn a_package_without_the_reference_s_outer_wrapper_is_read_one_component_in() {
        let g = Graph {
            nodes: vec![
                node("decoder/embed_tokens/Gather_node_0", "Gather", &["w", "ids"], &["v_decoder.embed_tokens.Gather_0"]),
                node(
                    "decoder/layers.0/fc1/MatMul_node_1",
                    "MatMul",
                    &["v_decoder.embed_tokens.Gather_0", "w1"],
                    &["v_decoder.layers.0.fc1.MatMul_1"],
                ),
                node("decoder/layers.0/Gelu_node_2", "Gelu", &["v_decoder.layers.0.fc1.MatMul_1"], &["logits"]),
            ],
            initializers: vec![],
            inputs: vec!["ids".into()],
            outputs: vec!["logits".into()],
        };
        let ix = Index::new(&g);
        assert_eq!(ix.place(&entry("model.decoder.layers.0.fc1", Role::Output)), Placed::Value("v_decoder.layers.0.fc1.MatMul_1".into()));
        assert_eq!(ix.place(&entry("model.encoder.layers.0.fc1", Role::Output)), Placed::Unplaced(Unplaced::Absent));
    }

    #[test]
    fn a_multimodal_model_s_parts_are_read_under_mobius_names_for_them() {
        assert_eq!(
            candidates("model.language_model.layers.0.mlp"),
            ["model.language_model.layers.0.mlp", "decoder.model.layers.0.mlp", "embedding.layers.0.mlp", "language_model.layers.0.mlp"]
        );
        assert_eq!(candidates("model.embed_vision"), ["model.embed_vision", "vision_encoder.projector", "embed_vision"]);
        // A rename rewrites whole path components only: `model.embed_visionary` is not under `model.embed_vision`.
        assert_eq!(candidates("model.embed_visionary"), ["model.embed_visionary", "embed_visionary"]);
        let g = Graph {
            nodes: vec![node(
                "vision_encoder/encoder/layers.0/mlp/MatMul_node_1",
                "MatMul",
                &["pixel_values", "w1"],
                &["v_vision_encoder.encoder.layers.0.mlp.MatMul_1"],
            )],
            initializers: vec![],
            inputs: vec!["pixel_values".into()],
            outputs: vec!["v_vision_encoder.encoder.layers.0.mlp.MatMul_1".into()],
        };
        let placed = Index::new(&g).place(&entry("model.vision_tower.encoder.layers.0.mlp", Role::Output));
        assert_eq!(placed, Placed::Value("v_vision_encoder.encoder.layers.0.mlp.MatMul_1".into()));
    }

    #[test]
    fn modules_are_matched_by_whole_path_segments() {
        assert!(inside(Some("model.layers.1.mlp"), "model.layers.1"));
        assert!(!inside(Some("model.layers.10.mlp"), "model.layers.1"), "layers.10 is not inside layers.1");
        assert!(!inside(None, "model"));
        assert_eq!(value_module("v_model.layers.0.self_attn.Attention_55_0"), Some("model.layers.0.self_attn"));
        assert_eq!(value_module("val_3"), None);
        assert_eq!(node_module(&node("lm_head/MatMul_node_8", "MatMul", &[], &["logits"])).as_deref(), Some("lm_head"));
    }
}
