//! Where things lie in an ONNX file, read straight from protobuf's wire format, so that a mutant is a same-length
//! byte patch of the exported files and never a re-serialisation that could change anything else.
//!
//! The reader (`wire`, under `graph` and `tensor`) walks ModelProto -> GraphProto -> NodeProto / TensorProto /
//! AttributeProto and keeps, for each thing a patch may touch, its byte range: an initializer's data (`raw_data`,
//! packed `float_data`, or a range of an external data file named by `external_data`; float32, float16, uint8 and
//! int64), an attribute's varint or fixed32, a node's `input` fields and its `op_type`. Subgraphs (If, Loop) and
//! model-local functions are not read: no mutant needs them. A [`Model`] holds the files in memory and writes them
//! back; `tensor_patch` and `node_patch` change them in place. [`recipes`] holds the bugs themselves, shared by
//! `cargo xtask mutants` and the suite's tests.
//!
//! Callers name the types at the crate's root (`onnx_bytes::Model`): how the crate is split into modules is its own
//! business.

mod expose;
mod graph;
mod model;
mod node_patch;
mod proto;
pub mod recipes;
mod tensor;
mod tensor_patch;
#[cfg(test)]
mod testing;
mod wire;

pub use expose::with_outputs;
pub use graph::{Attr, Attribute, Graph, Node};
pub use model::Model;
pub use proto::{FLOAT, FLOAT16, INT64, UINT8};
pub use tensor::{Data, Tensor};
pub use wire::encode_varint;
