//! A tensor's elements, read and overwritten in place: float32, float16 (as float32), uint8 and int64 tensors, and
//! float scalars wherever a graph keeps them. The count never changes, so neither does any byte around them.

use crate::graph::Attr;
use crate::model::Model;
use crate::proto::{FLOAT, FLOAT16, INT64, UINT8};

impl Model {
    pub fn f32s(&self, value: &str) -> Result<Vec<f32>, String> {
        let t = self.tensor(value)?;
        if t.data_type != FLOAT {
            return Err(self.err(format!("tensor `{value}` has data type {}, expected float32 ({FLOAT})", t.data_type)));
        }
        Ok(self.bytes_of(&t)?.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// Overwrites a float32 tensor's elements, in place; the count must not change.
    pub fn set_f32s(&mut self, value: &str, values: &[f32]) -> Result<(), String> {
        let t = self.tensor(value)?;
        if t.data_type != FLOAT || t.elements() != values.len() {
            return Err(self.err(format!(
                "tensor `{value}` {:?} (type {}) cannot take {} float32 values",
                t.dims,
                t.data_type,
                values.len()
            )));
        }
        for (dst, v) in self.bytes_of_mut(&t)?.chunks_exact_mut(4).zip(values) {
            dst.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }

    /// A float32 or float16 tensor's elements, as float32.
    pub fn floats(&self, value: &str) -> Result<Vec<f32>, String> {
        let t = self.tensor(value)?;
        match t.data_type {
            FLOAT16 => Ok(self.bytes_of(&t)?.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect()),
            _ => self.f32s(value),
        }
    }

    /// Overwrites a float32 or float16 tensor's elements in place (float16 rounds to nearest, ties to even).
    pub fn set_floats(&mut self, value: &str, values: &[f32]) -> Result<(), String> {
        let t = self.tensor(value)?;
        if t.data_type != FLOAT16 {
            return self.set_f32s(value, values);
        }
        if t.elements() != values.len() {
            return Err(self.err(format!("tensor `{value}` {:?} cannot take {} float16 values", t.dims, values.len())));
        }
        for (dst, v) in self.bytes_of_mut(&t)?.chunks_exact_mut(2).zip(values) {
            dst.copy_from_slice(&half::f16::from_f32(*v).to_le_bytes());
        }
        Ok(())
    }

    /// A uint8 tensor's bytes (MatMulNBits' packed 4-bit weights).
    pub fn u8s(&self, value: &str) -> Result<Vec<u8>, String> {
        let t = self.tensor(value)?;
        if t.data_type != UINT8 {
            return Err(self.err(format!("tensor `{value}` has data type {}, expected uint8 ({UINT8})", t.data_type)));
        }
        Ok(self.bytes_of(&t)?.to_vec())
    }

    pub fn set_u8s(&mut self, value: &str, values: &[u8]) -> Result<(), String> {
        let t = self.tensor(value)?;
        if t.data_type != UINT8 || t.elements() != values.len() {
            return Err(self.err(format!(
                "tensor `{value}` {:?} (type {}) cannot take {} uint8 values",
                t.dims,
                t.data_type,
                values.len()
            )));
        }
        self.bytes_of_mut(&t)?.copy_from_slice(values);
        Ok(())
    }

    pub fn i64s(&self, value: &str) -> Result<Vec<i64>, String> {
        let t = self.tensor(value)?;
        if t.data_type != INT64 {
            return Err(self.err(format!("tensor `{value}` has data type {}, expected int64 ({INT64})", t.data_type)));
        }
        Ok(self.bytes_of(&t)?.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or_default())).collect())
    }

    pub fn set_i64s(&mut self, value: &str, values: &[i64]) -> Result<(), String> {
        let t = self.tensor(value)?;
        if t.data_type != INT64 || t.elements() != values.len() {
            return Err(self.err(format!(
                "tensor `{value}` {:?} (type {}) cannot take {} int64 values",
                t.dims,
                t.data_type,
                values.len()
            )));
        }
        for (dst, v) in self.bytes_of_mut(&t)?.chunks_exact_mut(8).zip(values) {
            dst.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }

    /// A float scalar's value: a one-element float32 initializer or Constant `value`, or a Constant's `value_float`.
    pub fn scalar_f32(&self, value: &str) -> Option<f32> {
        if let Some(t) = self.graph.constant(value) {
            return (t.data_type == FLOAT && t.elements() == 1).then(|| self.f32s(value).ok()?.first().copied()).flatten();
        }
        match self.graph.producer(value).filter(|n| n.op_type == "Constant")?.attribute("value_float") {
            Some(Attr::Float(v, _)) => Some(*v),
            _ => None,
        }
    }

    /// Overwrites a float scalar (as [`Model::scalar_f32`] finds it) in place.
    pub fn set_scalar_f32(&mut self, value: &str, v: f32) -> Result<(), String> {
        if self.graph.constant(value).is_some() {
            return self.set_f32s(value, &[v]);
        }
        let float = self.graph.producer(value).filter(|n| n.op_type == "Constant").and_then(|n| match n.attribute("value_float") {
            Some(Attr::Float(_, r)) => Some(r.clone()),
            _ => None,
        });
        let range = float.ok_or_else(|| self.err(format!("`{value}` is no float scalar initializer or Constant")))?;
        self.bytes[range].copy_from_slice(&v.to_le_bytes());
        self.reparse()
    }
}

#[cfg(test)]
mod tests {
    use crate::model::Model;
    use crate::testing::{half_model, load};

    #[test]
    fn patches_float16_and_uint8_tensors_and_renames_an_operator_in_place() {
        let (dir, mut m) = half_model("half");
        let size = m.bytes.len();
        assert_eq!(m.floats("h").unwrap(), [1.0, 2.0, half::f16::from_f32(0.1).to_f32()]);
        // x1.01 rounds to the nearest float16: 1.01 -> 1.0097656, 2.02 -> 2.0195312.
        let scaled: Vec<f32> = m.floats("h").unwrap().iter().map(|v| v * 1.01).collect();
        m.set_floats("h", &scaled).unwrap();
        let got = m.floats("h").unwrap();
        assert_eq!(got[..2], [1.0097656, 2.0195312]);
        assert!(m.set_floats("h", &[1.0]).unwrap_err().contains("cannot take 1 float16 values"));
        assert_eq!(m.u8s("q").unwrap(), [0x12, 0xf0]);
        m.set_u8s("q", &[0x21, 0x0f]).unwrap();
        assert_eq!(m.u8s("q").unwrap(), [0x21, 0x0f]);
        assert!(m.u8s("h").unwrap_err().contains("expected uint8"));
        assert_eq!(m.set_op_type("mm", "MatMux").unwrap(), "MatMul");
        assert_eq!(m.graph.nodes[0].op_type, "MatMux");
        let e = m.set_op_type("mm", "Gemm").unwrap_err();
        assert!(e.contains("h.onnx") && e.contains("changes its length"), "{e}");
        assert_eq!(m.bytes.len(), size, "every patch keeps the file's length");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn patches_tensors_in_place_inline_packed_external_and_constant() {
        let (dir, mut m) = load("tensors");
        let size = (m.bytes.len(), m.data["m.data"].len());
        assert_eq!(m.f32s("w").unwrap(), [1.0, 2.0]);
        assert_eq!(m.f32s("e").unwrap(), [4.0, 5.0, 6.0]);
        assert_eq!(m.f32s("s").unwrap(), [3.0]);
        assert_eq!(m.f32s("c").unwrap(), [7.0]);
        assert_eq!(m.i64s("k").unwrap(), [8]);
        m.set_f32s("w", &[-1.0, -2.0]).unwrap();
        m.set_f32s("e", &[0.0; 3]).unwrap();
        m.set_f32s("s", &[1e6]).unwrap();
        m.set_f32s("c", &[f32::MAX]).unwrap();
        m.set_i64s("k", &[9]).unwrap();
        assert_eq!((m.bytes.len(), m.data["m.data"].len()), size, "same length");
        assert_eq!(&m.data["m.data"][..8], &[0xAA; 8], "bytes before the offset untouched");
        let out = dir.join("out");
        std::fs::create_dir_all(&out).unwrap();
        m.write(&out).unwrap();
        let back = Model::read(&out.join("m.onnx")).unwrap();
        assert_eq!(back.f32s("w").unwrap(), [-1.0, -2.0]);
        assert_eq!(back.f32s("e").unwrap(), [0.0; 3]);
        assert_eq!(back.f32s("s").unwrap(), [1e6]);
        assert_eq!(back.f32s("c").unwrap(), [f32::MAX]);
        assert_eq!(back.i64s("k").unwrap(), [9]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn errors_name_the_file_and_the_tensor() {
        let (dir, mut m) = load("errors");
        let e = m.set_f32s("w", &[1.0]).unwrap_err();
        assert!(e.contains("m.onnx") && e.contains("`w`") && e.contains("cannot take 1"), "{e}");
        let e = m.f32s("k").unwrap_err();
        assert!(e.contains("`k`") && e.contains("expected float32"), "{e}");
        let e = m.f32s("nope").unwrap_err();
        assert!(e.contains("m.onnx") && e.contains("`nope`"), "{e}");
        m.data.get_mut("m.data").unwrap().truncate(10);
        let e = m.f32s("e").unwrap_err();
        assert!(e.contains("`e`") && e.contains("m.data"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn float_scalars_are_initializers_constant_values_or_value_floats() {
        let (dir, mut m) = load("scalars");
        assert_eq!((m.scalar_f32("s"), m.scalar_f32("c"), m.scalar_f32("vf")), (Some(3.0), Some(7.0), Some(-1e9)));
        assert_eq!((m.scalar_f32("w"), m.scalar_f32("k"), m.scalar_f32("y")), (None, None, None), "two values; int64; computed");
        let size = m.bytes.len();
        m.set_scalar_f32("vf", 0.0).unwrap();
        m.set_scalar_f32("s", 2.0).unwrap();
        assert_eq!((m.scalar_f32("vf"), m.scalar_f32("s"), m.bytes.len()), (Some(0.0), Some(2.0), size));
        assert!(m.set_scalar_f32("y", 1.0).unwrap_err().contains("`y`"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
