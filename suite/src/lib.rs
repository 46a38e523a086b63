//! mobius-conformance: golden/parity conformance for ONNX exports of language and multimodal models.
//!
//! Data flows one way: case -> inputs -> runtime -> outputs -> judgement -> report. The source is grouped by stage,
//! each of a rank, and a stage imports only stages of a lower rank (`tests/tidy.rs` states the ranks and holds every
//! file to them). From the bottom: the leaves any stage may import ([`error`], [`digest`] (sha256 as the suite
//! spells it), [`vocab`] (dtypes, EPs, the levels' ids, modalities, trial ids), [`paths`] (the suite root's
//! confinement), [`context`] (the run's settings, read from the environment once by the faces), [`outcome`] (how a
//! trial ended, and the face every judgement shows the reports)); [`feed`] (inputs, tokenizers, package configs);
//! [`run`] (ONNX Runtime and onnxruntime-genai sessions, the pipelines, prefill and greedy decoding) beside [`judge`]
//! (the shared verdicts, goldens, tolerances, expected failures); [`accuracy`] (the lm-eval and lmms-eval gates);
//! [`report`] (the words); [`plan`] (the suite root, cases, package locations); [`level`] (one module per level,
//! listed in `level::ALL`); [`trial`] (the orchestrator: the trial plan, each trial run by its level and settled).
//! There are no flat re-exports: a path names its stage (`mobius_conformance::judge::verdict`).

pub mod context;
pub mod digest;
pub mod error;
pub mod outcome;
pub mod paths;
pub mod vocab;

pub mod level;
pub mod report;
pub mod trial;

/// What to run: the suite root, case files, the trial plan, mobius' corpus, package locations and the paths a case
/// may name.
pub mod plan {
    pub mod case;
    pub mod corpus;
    pub mod discovery;
    pub mod files;
    pub mod hub;
    pub mod suite;
    pub mod task_type;
}

/// What a package is fed: processed inputs, the tokenizer, the package's own configuration, and the package checked
/// against its builder's manifest.
pub mod feed {
    pub mod audio;
    pub mod chat_template;
    pub mod generation_config;
    pub mod inputs;
    pub mod integrity;
    pub mod log_mel;
    pub mod package;
    pub mod python_str;
    pub mod tokenizer;
}

/// Running a package: the ONNX Runtime library and its shared sessions, the decoder and its KV cache, the encoders,
/// one pipeline per family of package (text, multimodal, encoder-decoder), prefill and greedy decoding, and
/// onnxruntime-genai.
pub mod run {
    pub mod bootstrap;
    pub mod crossing;
    pub mod decoder;
    pub mod drafted;
    pub mod encoder_session;
    pub mod encoders;
    pub mod genai;
    pub mod generate;
    pub mod last_call;
    pub mod pipeline;
    pub mod placement;
    pub mod runtime;
    pub mod sessions;
    pub mod timing;
    pub mod workers;
}

/// Judging outputs: the goldens, the tolerance policy, the verdicts, the numbers behind them, and the expected
/// failures.
pub mod judge {
    pub mod finite;
    pub mod golden;
    pub mod hexfloat;
    pub mod prefill;
    pub mod profile;
    pub mod stream;
    pub mod tolerance;
    pub mod verdict;
    pub mod xfail;
}

/// The accuracy gate: lm-eval task files, scoring, and the gate against the reference baseline.
pub mod accuracy {
    pub mod answer;
    pub mod doc;
    pub mod eval;
    pub mod gate;
    pub mod include;
    pub mod lmeval;
    pub mod lmms;
    pub mod media_gate;
    pub mod paired;
    pub mod policy;
    pub mod protocol;
    pub mod resolve;
    pub mod scoring;
    pub mod task;
    /// lmms-eval's scorers for generated answers, as lmms-eval 0.7.3 computes them.
    pub mod scorers {
        pub mod anls;
        pub mod normalizer;
        pub mod ocrbench;
        pub mod relaxed;
        pub mod wer;
    }
}

pub use error::{Error, Result};
