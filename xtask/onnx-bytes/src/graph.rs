//! The main graph of a ModelProto as a patch sees it: its nodes (with their attributes, inputs and where those lie),
//! initializers, inputs and outputs, and the walks a recipe needs (what produces or reads a value, whether a value is
//! computed from an input's contents).

use std::collections::BTreeSet;
use std::ops::Range;

use crate::proto::{
    ATTR_F, ATTR_I, ATTR_NAME, ATTR_T, GRAPH_INITIALIZER, GRAPH_INPUT, GRAPH_NODE, GRAPH_OUTPUT, MODEL_GRAPH, NODE_ATTRIBUTE, NODE_INPUT,
    NODE_NAME, NODE_OP_TYPE, NODE_OUTPUT, VALUE_INFO_NAME,
};
use crate::tensor::Tensor;
use crate::wire::{Value, fields, le4, sub, text};

#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    /// An `i` attribute and the range of its varint.
    Int(i64, Range<usize>),
    /// An `f` attribute and the range of its four bytes.
    Float(f32, Range<usize>),
    /// A `t` attribute (a Constant's `value`).
    Tensor(Tensor),
    Other,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Attribute {
    pub name: String,
    pub value: Attr,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub op_type: String,
    /// Where the `op_type` string's bytes lie.
    pub op_type_span: Range<usize>,
    pub inputs: Vec<String>,
    /// Where each `input` field lies, tag included.
    pub input_spans: Vec<Range<usize>>,
    pub outputs: Vec<String>,
    pub attributes: Vec<Attribute>,
}

impl Node {
    fn parse(buf: &[u8], range: Range<usize>) -> Result<Node, String> {
        let mut n = Node {
            name: String::new(),
            op_type: String::new(),
            op_type_span: 0..0,
            inputs: Vec::new(),
            input_spans: Vec::new(),
            outputs: Vec::new(),
            attributes: Vec::new(),
        };
        for f in fields(buf, range)? {
            match f.number {
                NODE_INPUT => {
                    n.inputs.push(text(buf, &f)?);
                    n.input_spans.push(f.span.clone());
                }
                NODE_OUTPUT => n.outputs.push(text(buf, &f)?),
                NODE_NAME => n.name = text(buf, &f)?,
                NODE_OP_TYPE => {
                    n.op_type = text(buf, &f)?;
                    if let Value::Len(r) = &f.value {
                        n.op_type_span = r.clone();
                    }
                }
                NODE_ATTRIBUTE => n.attributes.push(Attribute::parse(buf, sub(&f)?)?),
                _ => {}
            }
        }
        Ok(n)
    }

    pub fn attribute(&self, name: &str) -> Option<&Attr> {
        self.attributes.iter().find(|a| a.name == name).map(|a| &a.value)
    }

    /// The node's name, or its first output when it has none, for messages.
    pub fn label(&self) -> &str {
        if self.name.is_empty() { self.outputs.first().map_or("?", String::as_str) } else { &self.name }
    }
}

impl Attribute {
    fn parse(buf: &[u8], range: Range<usize>) -> Result<Attribute, String> {
        let (mut name, mut value) = (String::new(), Attr::Other);
        for f in fields(buf, range)? {
            match (f.number, &f.value) {
                (ATTR_NAME, _) => name = text(buf, &f)?,
                (ATTR_I, Value::Varint(v, r)) => value = Attr::Int(*v as i64, r.clone()),
                (ATTR_F, Value::Fixed32(r)) => value = Attr::Float(f32::from_le_bytes(le4(buf, r)), r.clone()),
                (ATTR_T, Value::Len(r)) => value = Attr::Tensor(Tensor::parse(buf, r.clone())?),
                _ => {}
            }
        }
        Ok(Attribute { name, value })
    }
}

/// The main graph of a model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub initializers: Vec<Tensor>,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

impl Graph {
    /// Reads the main graph of a serialized ModelProto.
    pub fn parse(model: &[u8]) -> Result<Graph, String> {
        let graph = fields(model, 0..model.len())?
            .into_iter()
            .find(|f| f.number == MODEL_GRAPH)
            .ok_or_else(|| "no graph (ModelProto field 7)".to_string())
            .and_then(|f| sub(&f))?;
        let mut g = Graph::default();
        let name = |r: Range<usize>| -> Result<String, String> {
            fields(model, r)?.iter().find(|f| f.number == VALUE_INFO_NAME).map_or(Ok(String::new()), |f| text(model, f))
        };
        for f in fields(model, graph)? {
            match f.number {
                GRAPH_NODE => g.nodes.push(Node::parse(model, sub(&f)?)?),
                GRAPH_INITIALIZER => g.initializers.push(Tensor::parse(model, sub(&f)?)?),
                GRAPH_INPUT => g.inputs.push(name(sub(&f)?)?),
                GRAPH_OUTPUT => g.outputs.push(name(sub(&f)?)?),
                _ => {}
            }
        }
        Ok(g)
    }

    /// The tensor behind a value name: an initializer, or the `value` of the Constant node that outputs it.
    pub fn constant(&self, value: &str) -> Option<&Tensor> {
        self.initializers.iter().find(|t| t.name == value).or_else(|| {
            self.producer(value).filter(|n| n.op_type == "Constant").and_then(|n| match n.attribute("value") {
                Some(Attr::Tensor(t)) => Some(t),
                _ => None,
            })
        })
    }

    pub fn producer(&self, value: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.outputs.iter().any(|o| o == value))
    }

    pub fn consumers<'a>(&'a self, value: &'a str) -> impl Iterator<Item = &'a Node> + 'a {
        self.nodes.iter().filter(move |n| n.inputs.iter().any(|i| i == value))
    }

    /// Whether `value` is computed from the *contents* of graph input `input` (paths through Shape, which reads only
    /// the shape, do not count).
    pub fn reads_values_of(&self, value: &str, input: &str) -> bool {
        let mut todo = vec![value.to_string()];
        let mut seen = BTreeSet::new();
        while let Some(v) = todo.pop() {
            if v == input {
                return true;
            }
            if !seen.insert(v.clone()) {
                continue;
            }
            if let Some(n) = self.producer(&v).filter(|n| n.op_type != "Shape" && n.op_type != "Size") {
                todo.extend(n.inputs.iter().filter(|i| !i.is_empty()).cloned());
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Data;
    use crate::testing::model;

    #[test]
    fn reads_graph_nodes_initializers_and_io() {
        let g = Graph::parse(&model()).unwrap();
        assert_eq!(g.inputs, ["mask"]);
        assert_eq!(g.outputs, ["z"]);
        assert_eq!(
            g.nodes.iter().map(|n| n.op_type.as_str()).collect::<Vec<_>>(),
            ["Not", "Shape", "Where", "GroupQueryAttention", "Constant", "Constant"]
        );
        let w = &g.nodes[2];
        assert_eq!((w.label(), w.inputs.as_slice()), ("where", ["cond", "zero", "minus_big"].map(String::from).as_slice()));
        let gqa = &g.nodes[3];
        assert_eq!(gqa.label(), "z", "a node without a name is known by its first output");
        assert!(matches!(gqa.attribute("local_window_size"), Some(Attr::Int(8, r)) if r.len() == 1));
        assert!(matches!(gqa.attribute("alpha"), Some(Attr::Float(v, _)) if *v == 0.5));
        let e = g.constant("e").unwrap();
        assert_eq!((e.dims.as_slice(), &e.data), (&[3][..], &Data::External { location: "m.data".into(), offset: 8, length: Some(12) }));
        assert!(matches!(g.constant("c").map(|t| &t.data), Some(Data::Inline(_))), "a Constant's value tensor");
        assert!(g.reads_values_of("cond", "mask"));
        assert!(!g.reads_values_of("mask_shape", "mask"), "Shape reads no values");
        assert!(!g.reads_values_of("zero", "mask"));
    }

    #[test]
    fn malformed_bytes_are_errors_not_panics() {
        let good = model();
        for cut in [1, 2, 5, 17, good.len() / 2, good.len() - 1] {
            let _ = Graph::parse(&good[..cut]);
        }
        assert!(Graph::parse(&[0x3a, 0x05, 0x0a]).is_err(), "graph field longer than the file");
        assert!(Graph::parse(&[0x0b]).is_err(), "wire type 3 (groups) is not ONNX");
        assert!(Graph::parse(&[]).unwrap_err().contains("no graph"));
    }
}
