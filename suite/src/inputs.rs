//! The exact inputs a trial feeds, and the hash that ties a golden to them.
//!
//! A golden records the hash of the inputs it was made from; a trial recomputes it from the case. A mismatch means
//! the golden is stale (made from another prompt or tokenizer), which is reported as such, never as a diff.

use sha2::{Digest, Sha256};

/// A named input tensor, as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedTensor {
    pub name: String,
    pub shape: Vec<i64>,
    pub data: TensorData,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    I64(Vec<i64>),
    F32(Vec<f32>),
    U8(Vec<u8>),
    Bool(Vec<bool>),
}

impl TensorData {
    fn dtype(&self) -> &'static str {
        match self {
            TensorData::I64(_) => "int64",
            TensorData::F32(_) => "float32",
            TensorData::U8(_) => "uint8",
            TensorData::Bool(_) => "bool",
        }
    }

    fn update(&self, h: &mut Sha256) {
        match self {
            TensorData::I64(v) => v.iter().for_each(|x| h.update(x.to_le_bytes())),
            TensorData::F32(v) => v.iter().for_each(|x| h.update(x.to_le_bytes())),
            TensorData::U8(v) => h.update(v),
            TensorData::Bool(v) => v.iter().for_each(|&x| h.update([x as u8])),
        }
    }
}

/// What goes into a prefill: token ids now; media tensors join them for multimodal cases.
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    pub tensors: Vec<NamedTensor>,
}

impl Inputs {
    pub fn from_token_ids(ids: &[i64]) -> Inputs {
        Inputs {
            tensors: vec![NamedTensor { name: "input_ids".into(), shape: vec![1, ids.len() as i64], data: TensorData::I64(ids.to_vec()) }],
        }
    }

    pub fn input_ids(&self) -> &[i64] {
        self.tensors
            .iter()
            .find_map(|t| match (&t.name[..], &t.data) {
                ("input_ids", TensorData::I64(v)) => Some(&v[..]),
                _ => None,
            })
            .unwrap_or(&[])
    }

    /// `sha256:<hex>` over every tensor in name order: name, dtype, shape (i64 LE) and data (LE), NUL-separated.
    pub fn hash(&self) -> String {
        let mut sorted: Vec<&NamedTensor> = self.tensors.iter().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        let mut h = Sha256::new();
        for t in sorted {
            h.update(t.name.as_bytes());
            h.update([0]);
            h.update(t.data.dtype().as_bytes());
            h.update([0]);
            for d in &t.shape {
                h.update(d.to_le_bytes());
            }
            h.update([0]);
            t.data.update(&mut h);
            h.update([0]);
        }
        let digest = h.finalize();
        let mut s = String::with_capacity(7 + 64);
        s.push_str("sha256:");
        for b in digest {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }
}
