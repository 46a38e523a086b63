//! A TensorProto: its name, shape and data type, and where its elements lie (inline in the model file, in a range of
//! an external data file, or out of a same-length patch's reach).

use std::collections::BTreeMap;
use std::ops::Range;

use crate::proto::{
    ENTRY_KEY, ENTRY_VALUE, TENSOR_DATA_LOCATION, TENSOR_DATA_TYPE, TENSOR_DIMS, TENSOR_EXTERNAL_DATA, TENSOR_FLOAT_DATA, TENSOR_NAME,
    TENSOR_RAW_DATA,
};
use crate::wire::{Value, fields, text, varint};

/// Where a tensor's elements are.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    /// Little-endian elements inside the model file (`raw_data`, or a packed `float_data`).
    Inline(Range<usize>),
    /// A range of an external data file, relative to the model's folder.
    External { location: String, offset: usize, length: Option<usize> },
    /// Stored some way a same-length patch cannot reach (varint-packed `int64_data`, strings, none at all).
    Unpatchable(&'static str),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub dims: Vec<i64>,
    pub data_type: i32,
    pub data: Data,
}

impl Tensor {
    pub fn elements(&self) -> usize {
        self.dims.iter().map(|&d| usize::try_from(d).unwrap_or(0)).product()
    }

    pub(crate) fn parse(buf: &[u8], range: Range<usize>) -> Result<Tensor, String> {
        let (mut name, mut dims, mut data_type) = (String::new(), Vec::new(), 0);
        let (mut inline, mut floats, mut external, mut extern_flag) = (None, Vec::new(), BTreeMap::new(), false);
        for f in fields(buf, range)? {
            match (f.number, &f.value) {
                (TENSOR_NAME, _) => name = text(buf, &f)?,
                (TENSOR_DIMS, Value::Varint(v, _)) => dims.push(*v as i64),
                (TENSOR_DIMS, Value::Len(r)) => {
                    let mut at = r.start;
                    while at < r.end {
                        dims.push(varint(buf, &mut at)? as i64);
                    }
                }
                (TENSOR_DATA_TYPE, Value::Varint(v, _)) => data_type = *v as i32,
                (TENSOR_RAW_DATA, Value::Len(r)) => inline = Some(r.clone()),
                (TENSOR_FLOAT_DATA, Value::Len(r)) => inline = Some(r.clone()),
                (TENSOR_FLOAT_DATA, Value::Fixed32(r)) => floats.push(r.clone()),
                (TENSOR_EXTERNAL_DATA, Value::Len(r)) => {
                    let (mut k, mut v) = (String::new(), String::new());
                    for e in fields(buf, r.clone())? {
                        match e.number {
                            ENTRY_KEY => k = text(buf, &e)?,
                            ENTRY_VALUE => v = text(buf, &e)?,
                            _ => {}
                        }
                    }
                    external.insert(k, v);
                }
                (TENSOR_DATA_LOCATION, Value::Varint(1, _)) => extern_flag = true,
                _ => {}
            }
        }
        // One unpacked float_data element is four contiguous bytes; several are not (each has its own tag).
        if inline.is_none() && floats.len() == 1 {
            inline = floats.pop();
        }
        let number = |key: &str| -> Result<Option<usize>, String> {
            external.get(key).map(|v| v.parse::<usize>().map_err(|_| format!("tensor `{name}`: external_data {key} is {v:?}"))).transpose()
        };
        let data = if extern_flag || !external.is_empty() {
            let location = external.get("location").cloned().ok_or_else(|| format!("tensor `{name}`: external data without a location"))?;
            Data::External { location, offset: number("offset")?.unwrap_or(0), length: number("length")? }
        } else if let Some(r) = inline {
            Data::Inline(r)
        } else if floats.len() > 1 {
            Data::Unpatchable("unpacked float_data")
        } else {
            Data::Unpatchable("no raw_data, packed float_data or external data")
        };
        Ok(Tensor { name, dims, data_type, data })
    }
}
