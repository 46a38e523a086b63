//! A copy of a model with more of its values as graph outputs: what `level::localize` runs to read a module's
//! output where the package computes it. The copy is the same ModelProto with each named value appended to the
//! main graph's `output` list as a ValueInfoProto that carries only its name (ONNX Runtime infers its type and shape
//! from the node that makes it); every other byte of the file is kept as it was. The package on disk is never written.

use crate::graph::Graph;
use crate::proto::{GRAPH_OUTPUT, MODEL_GRAPH, VALUE_INFO_NAME};
use crate::wire::{Value, encode_varint, fields};

/// `model` (a serialized ModelProto) with `values` added to its graph's outputs, in order. A value the graph does
/// not compute (no node outputs it) is an error naming it; one that is an output already is not added again.
pub fn with_outputs(model: &[u8], values: &[&str]) -> Result<Vec<u8>, String> {
    let graph = Graph::parse(model)?;
    let mut extra = Vec::new();
    for v in values {
        if graph.producer(v).is_none() {
            return Err(format!("no node of the graph outputs `{v}`"));
        }
        if graph.outputs.iter().any(|o| o == v) {
            continue;
        }
        let info = field(VALUE_INFO_NAME, v.as_bytes());
        extra.extend(field(GRAPH_OUTPUT, &info));
    }
    let mut out = Vec::with_capacity(model.len() + extra.len() + 16);
    for f in fields(model, 0..model.len())? {
        match (&f.value, f.number) {
            (Value::Len(r), MODEL_GRAPH) => {
                let body = [&model[r.clone()], extra.as_slice()].concat();
                out.extend(field(MODEL_GRAPH, &body));
            }
            _ => out.extend_from_slice(&model[f.span.clone()]),
        }
    }
    Ok(out)
}

/// A length-delimited field: its tag, length and payload.
fn field(number: u32, payload: &[u8]) -> Vec<u8> {
    [encode_varint((u64::from(number) << 3) | 2), encode_varint(payload.len() as u64), payload.to_vec()].concat()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::model;

    #[test]
    fn adds_the_named_values_as_outputs_and_keeps_the_rest() {
        let before = model();
        let after = with_outputs(&before, &["y", "z", "cond"]).unwrap();
        let (g0, g1) = (Graph::parse(&before).unwrap(), Graph::parse(&after).unwrap());
        assert_eq!(g1.outputs, ["z", "y", "cond"], "z was an output already; y and cond are appended");
        // Spans move with the graph's length prefix; what the nodes say does not.
        let said = |g: &Graph| {
            g.nodes.iter().map(|n| (n.name.clone(), n.op_type.clone(), n.inputs.clone(), n.outputs.clone())).collect::<Vec<_>>()
        };
        assert_eq!((said(&g1), g1.initializers.len(), &g1.inputs), (said(&g0), g0.initializers.len(), &g0.inputs));
        assert_eq!(with_outputs(&before, &[]).unwrap(), before, "nothing to add: the same bytes");
    }

    #[test]
    fn a_value_nothing_computes_is_named() {
        let e = with_outputs(&model(), &["y", "no_such_value"]).unwrap_err();
        assert!(e.contains("`no_such_value`"), "{e}");
    }
}
