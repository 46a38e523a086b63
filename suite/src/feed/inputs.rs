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
        match self.get("input_ids").map(|t| &t.data) {
            Some(TensorData::I64(v)) => v,
            _ => &[],
        }
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
            h.update(t.data.bytes());
            h.update([0]);
        }
        format!("sha256:{}", crate::digest::hex(h))
    }
}

impl TensorData {
    fn safetensors_dtype(&self) -> safetensors::Dtype {
        match self {
            TensorData::I64(_) => safetensors::Dtype::I64,
            TensorData::F32(_) => safetensors::Dtype::F32,
            TensorData::U8(_) => safetensors::Dtype::U8,
            TensorData::Bool(_) => safetensors::Dtype::BOOL,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        match self {
            TensorData::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::U8(v) => v.clone(),
            TensorData::Bool(v) => v.iter().map(|&b| b as u8).collect(),
        }
    }

    pub fn from_safetensors(dtype: safetensors::Dtype, b: &[u8]) -> Option<TensorData> {
        Some(match dtype {
            safetensors::Dtype::I64 => TensorData::I64(b.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()),
            safetensors::Dtype::F32 => TensorData::F32(b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()),
            safetensors::Dtype::U8 => TensorData::U8(b.to_vec()),
            safetensors::Dtype::BOOL => TensorData::Bool(b.iter().map(|&x| x != 0).collect()),
            _ => return None,
        })
    }
}

impl Inputs {
    pub fn get(&self, name: &str) -> Option<&NamedTensor> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Reads tensors from safetensors bytes (int64, float32, uint8 and bool); `file` names the source in errors.
    pub fn from_safetensors(file: &str, bytes: &[u8]) -> crate::Result<Inputs> {
        let st = safetensors::SafeTensors::deserialize(bytes).map_err(|e| crate::Error::new(format!("{file}: {e}")))?;
        let mut names: Vec<&str> = st.names().into_iter().collect();
        names.sort();
        let tensors = names
            .into_iter()
            .map(|name| {
                let t = st.tensor(name).map_err(|e| crate::Error::new(format!("{file}: tensor `{name}`: {e}")))?;
                let data = TensorData::from_safetensors(t.dtype(), t.data()).ok_or_else(|| {
                    crate::Error::new(format!("{file}: tensor `{name}` is {:?}; expected I64, F32, U8 or BOOL", t.dtype()))
                })?;
                Ok(NamedTensor { name: name.to_string(), shape: t.shape().iter().map(|&d| d as i64).collect(), data })
            })
            .collect::<crate::Result<Vec<_>>>()?;
        Ok(Inputs { tensors })
    }

    pub fn to_safetensors(&self) -> crate::Result<Vec<u8>> {
        let bytes: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = self
            .tensors
            .iter()
            .map(|t| (t.name.clone(), t.data.safetensors_dtype(), t.shape.iter().map(|&d| d as usize).collect(), t.data.bytes()))
            .collect();
        let views = bytes
            .iter()
            .map(|(n, d, s, b)| safetensors::tensor::TensorView::new(*d, s.clone(), b).map(|v| (n.clone(), v)))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| crate::Error::new(e.to_string()))?;
        safetensors::serialize(views, None).map_err(|e| crate::Error::new(e.to_string()))
    }
}
