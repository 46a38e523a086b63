//! The numbers onnx.proto gives the fields this crate reads, and the TensorProto.DataType values a patch handles.

// Field numbers from onnx.proto (ONNX 1.x).
pub(crate) const MODEL_GRAPH: u32 = 7;
pub(crate) const GRAPH_NODE: u32 = 1;
pub(crate) const GRAPH_INITIALIZER: u32 = 5;
pub(crate) const GRAPH_INPUT: u32 = 11;
pub(crate) const GRAPH_OUTPUT: u32 = 12;
pub(crate) const VALUE_INFO_NAME: u32 = 1;
pub(crate) const NODE_INPUT: u32 = 1;
pub(crate) const NODE_OUTPUT: u32 = 2;
pub(crate) const NODE_NAME: u32 = 3;
pub(crate) const NODE_OP_TYPE: u32 = 4;
pub(crate) const NODE_ATTRIBUTE: u32 = 5;
pub(crate) const ATTR_NAME: u32 = 1;
pub(crate) const ATTR_F: u32 = 2;
pub(crate) const ATTR_I: u32 = 3;
pub(crate) const ATTR_T: u32 = 5;
pub(crate) const TENSOR_DIMS: u32 = 1;
pub(crate) const TENSOR_DATA_TYPE: u32 = 2;
pub(crate) const TENSOR_FLOAT_DATA: u32 = 4;
pub(crate) const TENSOR_NAME: u32 = 8;
pub(crate) const TENSOR_RAW_DATA: u32 = 9;
pub(crate) const TENSOR_EXTERNAL_DATA: u32 = 13;
pub(crate) const TENSOR_DATA_LOCATION: u32 = 14;
pub(crate) const ENTRY_KEY: u32 = 1;
pub(crate) const ENTRY_VALUE: u32 = 2;

/// TensorProto.DataType values the mutants read.
pub const FLOAT: i32 = 1;
pub const UINT8: i32 = 2;
pub const INT64: i32 = 7;
pub const FLOAT16: i32 = 10;
