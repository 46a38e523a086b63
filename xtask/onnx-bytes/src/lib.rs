//! Where things lie in an ONNX file, read straight from protobuf's wire format, so that a mutant is a same-length
//! byte patch of the exported files and never a re-serialisation that could change anything else.
//!
//! The reader walks ModelProto -> GraphProto -> NodeProto / TensorProto / AttributeProto and keeps, for each thing a
//! patch may touch, its byte range: an initializer's data (`raw_data`, packed `float_data`, or a range of an external
//! data file named by `external_data`; float32, float16, uint8 and int64), an attribute's varint or fixed32, a node's
//! `input` fields and its `op_type`. Subgraphs (If, Loop) and model-local functions are not read: no mutant needs
//! them. [`recipes`] holds the bugs themselves, shared by `cargo xtask mutants` and the suite's tests.

pub mod recipes;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

// Field numbers from onnx.proto (ONNX 1.x).
const MODEL_GRAPH: u32 = 7;
const GRAPH_NODE: u32 = 1;
const GRAPH_INITIALIZER: u32 = 5;
const GRAPH_INPUT: u32 = 11;
const GRAPH_OUTPUT: u32 = 12;
const VALUE_INFO_NAME: u32 = 1;
const NODE_INPUT: u32 = 1;
const NODE_OUTPUT: u32 = 2;
const NODE_NAME: u32 = 3;
const NODE_OP_TYPE: u32 = 4;
const NODE_ATTRIBUTE: u32 = 5;
const ATTR_NAME: u32 = 1;
const ATTR_F: u32 = 2;
const ATTR_I: u32 = 3;
const ATTR_T: u32 = 5;
const TENSOR_DIMS: u32 = 1;
const TENSOR_DATA_TYPE: u32 = 2;
const TENSOR_FLOAT_DATA: u32 = 4;
const TENSOR_NAME: u32 = 8;
const TENSOR_RAW_DATA: u32 = 9;
const TENSOR_EXTERNAL_DATA: u32 = 13;
const TENSOR_DATA_LOCATION: u32 = 14;
const ENTRY_KEY: u32 = 1;
const ENTRY_VALUE: u32 = 2;

/// TensorProto.DataType values the mutants read.
pub const FLOAT: i32 = 1;
pub const UINT8: i32 = 2;
pub const INT64: i32 = 7;
pub const FLOAT16: i32 = 10;

/// One field of a message: its number, its value, and where it lies (tag included) in the buffer.
#[derive(Debug, Clone, PartialEq)]
struct Field {
    number: u32,
    value: Value,
    span: Range<usize>,
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    /// The decoded varint and the range of its bytes.
    Varint(u64, Range<usize>),
    Fixed64(Range<usize>),
    Fixed32(Range<usize>),
    /// The payload of a length-delimited field (a string, bytes, a sub-message or a packed repeated field).
    Len(Range<usize>),
}

/// Reads a varint at `*at`, advancing it.
fn varint(buf: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at).ok_or_else(|| format!("varint runs past the end at byte {at}"))?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(format!("varint longer than 10 bytes ending at byte {at}"))
}

/// The fields of the message that fills `buf[range]`, in order, with absolute positions.
fn fields(buf: &[u8], range: Range<usize>) -> Result<Vec<Field>, String> {
    let mut out = Vec::new();
    let mut at = range.start;
    while at < range.end {
        let start = at;
        let tag = varint(buf, &mut at)?;
        let number = u32::try_from(tag >> 3).map_err(|_| format!("field number {} at byte {start} is out of range", tag >> 3))?;
        let fixed = |at: &mut usize, n: usize| -> Result<Range<usize>, String> {
            let r = *at..*at + n;
            *at += n;
            if r.end > range.end { Err(format!("field {number} at byte {start} runs past its message")) } else { Ok(r) }
        };
        let value = match tag & 7 {
            0 => {
                let s = at;
                let v = varint(buf, &mut at)?;
                Value::Varint(v, s..at)
            }
            1 => Value::Fixed64(fixed(&mut at, 8)?),
            2 => {
                let n = usize::try_from(varint(buf, &mut at)?).map_err(|_| format!("length of field {number} at byte {start}"))?;
                Value::Len(fixed(&mut at, n)?)
            }
            5 => Value::Fixed32(fixed(&mut at, 4)?),
            w => return Err(format!("field {number} at byte {start} has wire type {w}, which ONNX does not use")),
        };
        out.push(Field { number, value, span: start..at });
    }
    Ok(out)
}

fn text(buf: &[u8], f: &Field) -> Result<String, String> {
    match &f.value {
        Value::Len(r) => {
            String::from_utf8(buf[r.clone()].to_vec()).map_err(|_| format!("field {} at byte {} is not UTF-8", f.number, f.span.start))
        }
        _ => Err(format!("field {} at byte {} should be a string", f.number, f.span.start)),
    }
}

fn sub(f: &Field) -> Result<Range<usize>, String> {
    match &f.value {
        Value::Len(r) => Ok(r.clone()),
        _ => Err(format!("field {} at byte {} should be a message", f.number, f.span.start)),
    }
}

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

    fn parse(buf: &[u8], range: Range<usize>) -> Result<Tensor, String> {
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

fn le4(buf: &[u8], r: &Range<usize>) -> [u8; 4] {
    let mut b = [0; 4];
    b.copy_from_slice(&buf[r.start..r.start + 4]);
    b
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
        let mut seen = std::collections::BTreeSet::new();
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

/// One ONNX model and its external data files, in memory, to be patched and written elsewhere.
pub struct Model {
    /// Where it was read from, for messages.
    pub path: PathBuf,
    pub bytes: Vec<u8>,
    pub graph: Graph,
    /// External data files by location, as the model names them.
    pub data: BTreeMap<String, Vec<u8>>,
}

impl Model {
    pub fn read(path: &Path) -> Result<Model, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let graph = Graph::parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut data = BTreeMap::new();
        for t in &graph.initializers {
            if let Data::External { location, .. } = &t.data
                && !data.contains_key(location)
            {
                let plain = Path::new(location).components().all(|c| matches!(c, std::path::Component::Normal(_)));
                if !plain {
                    return Err(format!(
                        "{}: tensor `{}`: external data location {location:?} is not a plain relative path",
                        path.display(),
                        t.name
                    ));
                }
                let file = dir.join(location);
                let bytes =
                    std::fs::read(&file).map_err(|e| format!("{}: tensor `{}`: {}: {e}", path.display(), t.name, file.display()))?;
                data.insert(location.clone(), bytes);
            }
        }
        Ok(Model { path: path.to_path_buf(), bytes, graph, data })
    }

    /// Writes the model file and its external data files into `dir`, under their own names.
    pub fn write(&self, dir: &Path) -> Result<(), String> {
        let name = self.path.file_name().ok_or_else(|| format!("{}: no file name", self.path.display()))?;
        let write = |p: PathBuf, b: &[u8]| std::fs::write(&p, b).map_err(|e| format!("{}: {e}", p.display()));
        write(dir.join(name), &self.bytes)?;
        for (location, bytes) in &self.data {
            write(dir.join(location), bytes)?;
        }
        Ok(())
    }

    fn err(&self, what: impl std::fmt::Display) -> String {
        format!("{}: {what}", self.path.display())
    }

    /// The tensor behind a value name (an initializer or a Constant's value).
    pub fn tensor(&self, value: &str) -> Result<Tensor, String> {
        self.graph.constant(value).cloned().ok_or_else(|| self.err(format!("no initializer or Constant named `{value}`")))
    }

    /// Where a tensor's bytes lie: which buffer (None: the model file) and the range in it.
    fn locate(&self, t: &Tensor) -> Result<(Option<String>, Range<usize>), String> {
        let width = match t.data_type {
            FLOAT => 4,
            INT64 => 8,
            FLOAT16 => 2,
            UINT8 => 1,
            other => {
                return Err(self
                    .err(format!("tensor `{}` has data type {other}; the mutants patch only float32, float16, uint8 and int64", t.name)));
            }
        };
        let want = t.elements() * width;
        let (buffer, range, len) = match &t.data {
            Data::Inline(r) => (None, r.clone(), self.bytes.len()),
            Data::External { location, offset, length } => {
                let len = self.data.get(location).map(Vec::len).ok_or_else(|| {
                    self.err(format!("tensor `{}`: external data file `{location}` was not read (only initializers' are)", t.name))
                })?;
                let end = offset.checked_add(length.unwrap_or(want)).unwrap_or(usize::MAX);
                (Some(location.clone()), *offset..end, len)
            }
            Data::Unpatchable(why) => return Err(self.err(format!("tensor `{}` is stored as {why}", t.name))),
        };
        if range.len() != want || range.end > len {
            return Err(self.err(format!(
                "tensor `{}` {:?}: its data is bytes {range:?} of {}, expected {want} bytes within {len}",
                t.name,
                t.dims,
                buffer.as_deref().unwrap_or("the model file")
            )));
        }
        Ok((buffer, range))
    }

    fn bytes_of(&self, t: &Tensor) -> Result<&[u8], String> {
        let (buffer, range) = self.locate(t)?;
        let buf = match buffer {
            None => &self.bytes,
            Some(b) => self.data.get(&b).ok_or_else(|| self.err(format!("tensor `{}`: `{b}` not read", t.name)))?,
        };
        Ok(&buf[range])
    }

    fn bytes_of_mut(&mut self, t: &Tensor) -> Result<&mut [u8], String> {
        let (buffer, range) = self.locate(t)?;
        let missing = self.err(format!("tensor `{}`: `{}` not read", t.name, buffer.as_deref().unwrap_or("")));
        let buf = match buffer {
            None => &mut self.bytes,
            Some(b) => self.data.get_mut(&b).ok_or(missing)?,
        };
        Ok(&mut buf[range])
    }

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

    fn node(&self, node: &str) -> Result<&Node, String> {
        self.graph.nodes.iter().find(|n| n.label() == node).ok_or_else(|| self.err(format!("no node named `{node}`")))
    }

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

    fn reparse(&mut self) -> Result<(), String> {
        self.graph = Graph::parse(&self.bytes).map_err(|e| self.err(e))?;
        Ok(())
    }
}

pub fn encode_varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A tiny protobuf writer, only to build test models byte by byte.
    fn tag(number: u32, wire: u8) -> Vec<u8> {
        encode_varint((u64::from(number) << 3) | u64::from(wire))
    }
    fn len(number: u32, payload: &[u8]) -> Vec<u8> {
        [tag(number, 2), encode_varint(payload.len() as u64), payload.to_vec()].concat()
    }
    fn int(number: u32, v: u64) -> Vec<u8> {
        [tag(number, 0), encode_varint(v)].concat()
    }
    fn fixed32(number: u32, v: [u8; 4]) -> Vec<u8> {
        [tag(number, 5), v.to_vec()].concat()
    }
    fn entry(k: &str, v: &str) -> Vec<u8> {
        len(TENSOR_EXTERNAL_DATA, &[len(ENTRY_KEY, k.as_bytes()), len(ENTRY_VALUE, v.as_bytes())].concat())
    }
    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// A model with: an inline f32 initializer `w` [2], an external one `e` [3] at offset 8 of `m.data`, a packed
    /// float_data scalar `s`, an int64 initializer `k`; a Where node with three inputs and a GQA node with an int
    /// attribute; a Constant whose value is an f32 tensor.
    fn model() -> Vec<u8> {
        let w =
            [len(TENSOR_NAME, b"w"), int(TENSOR_DIMS, 2), int(TENSOR_DATA_TYPE, 1), len(TENSOR_RAW_DATA, &f32_bytes(&[1.0, 2.0]))].concat();
        let e = [
            len(TENSOR_NAME, b"e"),
            len(TENSOR_DIMS, &encode_varint(3)),
            int(TENSOR_DATA_TYPE, 1),
            entry("location", "m.data"),
            entry("offset", "8"),
            entry("length", "12"),
            int(TENSOR_DATA_LOCATION, 1),
        ]
        .concat();
        let s = [len(TENSOR_NAME, b"s"), int(TENSOR_DATA_TYPE, 1), len(TENSOR_FLOAT_DATA, &f32_bytes(&[3.0]))].concat();
        let k = [len(TENSOR_NAME, b"k"), int(TENSOR_DATA_TYPE, 7), len(TENSOR_RAW_DATA, &8i64.to_le_bytes())].concat();
        let attr_i = [len(ATTR_NAME, b"local_window_size"), int(ATTR_I, 8), int(20, 2)].concat();
        let attr_f = [len(ATTR_NAME, b"alpha"), fixed32(ATTR_F, 0.5f32.to_le_bytes())].concat();
        let where_node = [
            len(NODE_INPUT, b"cond"),
            len(NODE_INPUT, b"zero"),
            len(NODE_INPUT, b"minus_big"),
            len(NODE_OUTPUT, b"y"),
            len(NODE_NAME, b"where"),
            len(NODE_OP_TYPE, b"Where"),
        ]
        .concat();
        let gqa = [
            len(NODE_INPUT, b"y"),
            len(NODE_OUTPUT, b"z"),
            len(NODE_OP_TYPE, b"GroupQueryAttention"),
            len(NODE_ATTRIBUTE, &attr_i),
            len(NODE_ATTRIBUTE, &attr_f),
        ]
        .concat();
        let c_value = [len(TENSOR_NAME, b""), int(TENSOR_DATA_TYPE, 1), len(TENSOR_RAW_DATA, &f32_bytes(&[7.0]))].concat();
        let constant = [
            len(NODE_OUTPUT, b"c"),
            len(NODE_OP_TYPE, b"Constant"),
            len(NODE_ATTRIBUTE, &[len(ATTR_NAME, b"value"), len(ATTR_T, &c_value)].concat()),
        ]
        .concat();
        let vf = [
            len(NODE_OUTPUT, b"vf"),
            len(NODE_OP_TYPE, b"Constant"),
            len(NODE_ATTRIBUTE, &[len(ATTR_NAME, b"value_float"), fixed32(ATTR_F, (-1e9f32).to_le_bytes())].concat()),
        ]
        .concat();
        let shape = [len(NODE_INPUT, b"mask"), len(NODE_OUTPUT, b"mask_shape"), len(NODE_OP_TYPE, b"Shape")].concat();
        let not = [len(NODE_INPUT, b"mask"), len(NODE_OUTPUT, b"cond"), len(NODE_OP_TYPE, b"Not")].concat();
        let graph = [
            len(GRAPH_NODE, &not),
            len(GRAPH_NODE, &shape),
            len(GRAPH_NODE, &where_node),
            len(GRAPH_NODE, &gqa),
            len(GRAPH_NODE, &constant),
            len(GRAPH_NODE, &vf),
            len(GRAPH_INITIALIZER, &w),
            len(GRAPH_INITIALIZER, &e),
            len(GRAPH_INITIALIZER, &s),
            len(GRAPH_INITIALIZER, &k),
            len(GRAPH_INPUT, &len(VALUE_INFO_NAME, b"mask")),
            len(GRAPH_OUTPUT, &len(VALUE_INFO_NAME, b"z")),
        ]
        .concat();
        [int(1, 10), len(2, b"test"), len(MODEL_GRAPH, &graph), len(8, &[len(1, b""), int(2, 21)].concat())].concat()
    }

    fn load(tag: &str) -> (PathBuf, Model) {
        let dir = std::env::temp_dir().join(format!("mobius-onnx-bytes-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("m.onnx"), model()).unwrap();
        std::fs::write(dir.join("m.data"), [vec![0xAA; 8], f32_bytes(&[4.0, 5.0, 6.0])].concat()).unwrap();
        let m = Model::read(&dir.join("m.onnx")).unwrap();
        (dir, m)
    }

    /// A float16 `h` [3], a uint8 `q` [2] and a MatMul node to rename.
    fn half_model(tag: &str) -> (PathBuf, Model) {
        let halves: Vec<u8> = [1.0f32, 2.0, 0.1].iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect();
        let h = [len(TENSOR_NAME, b"h"), int(TENSOR_DIMS, 3), int(TENSOR_DATA_TYPE, 10), len(TENSOR_RAW_DATA, &halves)].concat();
        let q = [len(TENSOR_NAME, b"q"), int(TENSOR_DIMS, 2), int(TENSOR_DATA_TYPE, 2), len(TENSOR_RAW_DATA, &[0x12, 0xf0])].concat();
        let mm =
            [len(NODE_INPUT, b"x"), len(NODE_INPUT, b"h"), len(NODE_OUTPUT, b"y"), len(NODE_NAME, b"mm"), len(NODE_OP_TYPE, b"MatMul")]
                .concat();
        let graph = [len(GRAPH_NODE, &mm), len(GRAPH_INITIALIZER, &h), len(GRAPH_INITIALIZER, &q)].concat();
        let dir = std::env::temp_dir().join(format!("mobius-onnx-bytes-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("h.onnx"), [int(1, 10), len(MODEL_GRAPH, &graph)].concat()).unwrap();
        let m = Model::read(&dir.join("h.onnx")).unwrap();
        (dir, m)
    }

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
    fn varints_round_trip() {
        for v in [0u64, 1, 127, 128, 300, 16_383, 16_384, u64::MAX] {
            let b = encode_varint(v);
            let mut at = 0;
            assert_eq!((varint(&b, &mut at).unwrap(), at), (v, b.len()));
        }
        assert!(varint(&[0x80, 0x80], &mut 0).is_err(), "truncated");
        assert!(varint(&[0xff; 11], &mut 0).is_err(), "too long");
    }

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
