//! mobius-conformance: golden/parity conformance for ONNX exports of language and multimodal models.
//!
//! Data flows one way, and the source is grouped by stage: [`plan`] (what to run: cases, their discovery, where
//! packages are) -> [`feed`] (inputs, tokenizers, package configs) -> [`run`] (ONNX Runtime and onnxruntime-genai
//! sessions, prefill and greedy generation) -> [`judge`] (goldens, tolerances, verdicts, expected failures) and
//! [`accuracy`] (the lm-eval style gate) -> [`report`]; [`trial`] strings them together for one
//! `<case>/<modality>/<ep>/<dtype>/<level>` trial. Each module is also re-exported at the crate root
//! (`mobius_conformance::verdict`), the paths callers use.

pub mod error;
pub mod report;
pub mod trial;

/// What to run: case files, the trial plan, mobius' corpus, package locations and the paths a case may name.
pub mod plan {
    pub mod case;
    pub mod corpus;
    pub mod discovery;
    pub mod hub;
    pub mod paths;
    pub mod task_type;
}

/// What a package is fed: processed inputs, the tokenizer, the package's own configuration.
pub mod feed {
    pub mod inputs;
    pub mod package;
    pub mod tokenizer;
}

/// Running a package: the ONNX Runtime library and its sessions, prefill and greedy decoding, media encoders, and
/// onnxruntime-genai.
pub mod run {
    pub mod bootstrap;
    pub mod genai;
    pub mod generate;
    pub mod pipeline;
    pub mod runtime;
    pub mod sessions;
}

/// Judging outputs: the goldens, the tolerance policy, the verdicts and the expected failures.
pub mod judge {
    pub mod genai_level;
    pub mod golden;
    pub mod hexfloat;
    pub mod logits;
    pub mod tolerance;
    pub mod verdict;
    pub mod xfail;
}

/// The accuracy gate: lm-eval task files, scoring, and the gate against the reference baseline.
pub mod accuracy {
    pub mod eval;
    pub mod gate;
    pub mod lmeval;
    pub mod scoring;
    pub mod task;
}

pub use accuracy::{eval, gate, lmeval, scoring, task};
pub use error::{Error, Result};
pub use feed::{inputs, package, tokenizer};
pub use judge::{genai_level, golden, hexfloat, logits, tolerance, verdict, xfail};
pub use plan::{case, corpus, discovery, hub, paths, task_type};
pub use report::snapshot;
pub use run::{bootstrap, genai, generate, pipeline, runtime, sessions};
