//! mobius-conformance: golden/parity conformance for ONNX exports of language and multimodal models.
//!
//! Data flows one way: [`case`] -> [`inputs`] -> [`runtime`] / [`generate`] / [`eval`] -> [`verdict`] / [`gate`] ->
//! [`report`]; [`trial`] strings them together for one `<case>/<modality>/<ep>/<dtype>/<level>` trial.

pub mod bootstrap;
pub mod case;
pub mod corpus;
pub mod discovery;
pub mod error;
pub mod eval;
pub mod gate;
pub mod genai;
pub mod genai_level;
pub mod generate;
pub mod golden;
pub mod hexfloat;
pub mod hub;
pub mod inputs;
pub mod lmeval;
pub mod logits;
pub mod package;
pub mod paths;
pub mod pipeline;
pub mod report;
pub mod runtime;
pub mod scoring;
pub mod sessions;
pub mod snapshot;
pub mod task;
pub mod task_type;
pub mod tokenizer;
pub mod tolerance;
pub mod trial;
pub mod verdict;
pub mod xfail;

pub use error::{Error, Result};
