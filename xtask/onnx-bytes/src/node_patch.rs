//! A node's fields changed in place: an int attribute at the same varint length, its operator under a name of the
//! same length, two of its inputs exchanged.

use crate::graph::Attr;
use crate::model::Model;
use crate::wire::encode_varint;

impl Model {
    /// Sets an int attribute of a node in place. The new value must encode to as many varint bytes as the old one.
    /// Returns the old value.
    pub fn set_int_attribute(&mut self, node: &str, attribute: &str, value: i64) -> Result<i64, String> {
        let n = self.node(node)?;
        let Some(Attr::Int(old, range)) = n.attribute(attribute).cloned() else {
            return Err(self.err(format!("node `{node}` ({}) has no int attribute `{attribute}`", n.op_type)));
        };
        let encoded = encode_varint(value as u64);
        if encoded.len() != range.len() {
            return Err(self.err(format!(
                "node `{node}`: `{attribute}` {old} -> {value} changes its varint from {} to {} bytes; only same-length patches are made",
                range.len(),
                encoded.len()
            )));
        }
        self.bytes[range].copy_from_slice(&encoded);
        self.reparse()?;
        Ok(old)
    }

    /// Renames a node's operator in place; the new name must have as many bytes as the old one.
    pub fn set_op_type(&mut self, node: &str, op_type: &str) -> Result<String, String> {
        let n = self.node(node)?;
        let (old, range) = (n.op_type.clone(), n.op_type_span.clone());
        if op_type.len() != range.len() {
            return Err(
                self.err(format!("node `{node}`: op_type {old} -> {op_type} changes its length; only same-length patches are made"))
            );
        }
        self.bytes[range].copy_from_slice(op_type.as_bytes());
        self.reparse()?;
        Ok(old)
    }

    /// Swaps two inputs of a node by exchanging their `input` fields in place: the node keeps its length, so nothing
    /// around it moves.
    pub fn swap_inputs(&mut self, node: &str, a: usize, b: usize) -> Result<(), String> {
        let n = self.node(node)?;
        let (a, b) = (a.min(b), a.max(b));
        let (Some(ra), Some(rb)) = (n.input_spans.get(a).cloned(), n.input_spans.get(b).cloned()) else {
            return Err(self.err(format!("node `{node}` has {} inputs; cannot swap inputs {a} and {b}", n.inputs.len())));
        };
        if a == b {
            return Ok(());
        }
        // [A][between][B] -> [B][between][A]: the same bytes, so the same length.
        let region = ra.start..rb.end;
        let mut swapped = Vec::with_capacity(region.len());
        swapped.extend_from_slice(&self.bytes[rb.clone()]);
        swapped.extend_from_slice(&self.bytes[ra.end..rb.start]);
        swapped.extend_from_slice(&self.bytes[ra]);
        self.bytes[region].copy_from_slice(&swapped);
        self.reparse()
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::Attr;
    use crate::testing::load;

    #[test]
    fn patches_an_int_attribute_only_at_the_same_varint_length() {
        let (dir, mut m) = load("attr");
        let size = m.bytes.len();
        assert_eq!(m.set_int_attribute("z", "local_window_size", 9).unwrap(), 8);
        assert!(matches!(m.graph.nodes[3].attribute("local_window_size"), Some(Attr::Int(9, _))));
        let e = m.set_int_attribute("z", "local_window_size", 200).unwrap_err();
        assert!(e.contains("from 1 to 2 bytes"), "{e}");
        assert!(m.set_int_attribute("z", "alpha", 1).unwrap_err().contains("no int attribute"));
        assert!(m.set_int_attribute("nobody", "x", 1).unwrap_err().contains("no node named `nobody`"));
        assert_eq!(m.bytes.len(), size);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn swaps_node_inputs_in_place() {
        let (dir, mut m) = load("swap");
        let size = m.bytes.len();
        m.swap_inputs("where", 2, 1).unwrap();
        assert_eq!(m.graph.nodes[2].inputs, ["cond", "minus_big", "zero"]);
        m.swap_inputs("where", 0, 2).unwrap();
        assert_eq!(m.graph.nodes[2].inputs, ["zero", "minus_big", "cond"], "non-adjacent inputs keep the one between");
        assert_eq!(m.bytes.len(), size);
        assert!(m.swap_inputs("where", 1, 3).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
