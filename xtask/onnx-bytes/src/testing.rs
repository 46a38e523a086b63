//! A tiny protobuf writer and the models the tests patch, built byte by byte.

use std::path::PathBuf;

use crate::model::Model;
use crate::proto::*;
use crate::wire::encode_varint;

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
pub(crate) fn model() -> Vec<u8> {
    let w = [len(TENSOR_NAME, b"w"), int(TENSOR_DIMS, 2), int(TENSOR_DATA_TYPE, 1), len(TENSOR_RAW_DATA, &f32_bytes(&[1.0, 2.0]))].concat();
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

pub(crate) fn load(tag: &str) -> (PathBuf, Model) {
    let dir = std::env::temp_dir().join(format!("mobius-onnx-bytes-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("m.onnx"), model()).unwrap();
    std::fs::write(dir.join("m.data"), [vec![0xAA; 8], f32_bytes(&[4.0, 5.0, 6.0])].concat()).unwrap();
    let m = Model::read(&dir.join("m.onnx")).unwrap();
    (dir, m)
}

/// A float16 `h` [3], a uint8 `q` [2] and a MatMul node to rename.
pub(crate) fn half_model(tag: &str) -> (PathBuf, Model) {
    let halves: Vec<u8> = [1.0f32, 2.0, 0.1].iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect();
    let h = [len(TENSOR_NAME, b"h"), int(TENSOR_DIMS, 3), int(TENSOR_DATA_TYPE, 10), len(TENSOR_RAW_DATA, &halves)].concat();
    let q = [len(TENSOR_NAME, b"q"), int(TENSOR_DIMS, 2), int(TENSOR_DATA_TYPE, 2), len(TENSOR_RAW_DATA, &[0x12, 0xf0])].concat();
    let mm = [len(NODE_INPUT, b"x"), len(NODE_INPUT, b"h"), len(NODE_OUTPUT, b"y"), len(NODE_NAME, b"mm"), len(NODE_OP_TYPE, b"MatMul")]
        .concat();
    let graph = [len(GRAPH_NODE, &mm), len(GRAPH_INITIALIZER, &h), len(GRAPH_INITIALIZER, &q)].concat();
    let dir = std::env::temp_dir().join(format!("mobius-onnx-bytes-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("h.onnx"), [int(1, 10), len(MODEL_GRAPH, &graph)].concat()).unwrap();
    let m = Model::read(&dir.join("h.onnx")).unwrap();
    (dir, m)
}
