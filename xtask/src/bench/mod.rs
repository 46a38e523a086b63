//! `cargo xtask bench`: what the suite costs, side by side with the tools people use today, in one run.
//!
//! Every figure is a median over repeats (with min and max), measured in this process or in the reference venv's
//! Python (`xtask/reference/bench.py`) on the same packages and the same machine, and reported as a ratio against
//! its peer. Nothing here is a test: speed is measured and compared, never asserted in `cargo test`. A section whose
//! trials fail, or whose work is not what it says (a copy of the cases that lost a file, no trial run), prints why
//! and no figure, and the bench exits non-zero.

mod decode;
mod gate;
mod loops;
mod options;
mod overhead;
mod prefill;
mod python;
mod real;
mod report;
mod scaling;
mod speech;
mod stats;

use mobius_conformance::paths::workspace_root;
use serde_json::{Map, Value, json};

use options::{Options, parse};

// What the CUDA bench (`gpu.rs`) measures with.
pub use loops::{package_in, peak_rss_mb, prompt_ids_in, suite_decode, suite_prefill, synthetic};
pub use stats::Stats;

/// A run's output so far: the table's lines, the report's entries, the sections that report no figure, and the two
/// headline ratios a section computes itself.
#[derive(Default)]
struct Bench {
    table: Vec<String>,
    report: Map<String, Value>,
    failures: Vec<String>,
    gate_vs: Option<f64>,
    overhead: Option<f64>,
}

impl Bench {
    /// Runs the sections `o` selects, each adding its table and its report entry.
    fn sections(&mut self, o: &Options, cores: usize) -> Result<(), String> {
        let (table, failures) = (&mut self.table, &mut self.failures);
        // Decode throughput: the suite's loop vs onnxruntime-genai vs a plain Python onnxruntime loop.
        if o.runs("decode") {
            self.report.insert("decode".into(), Value::Array(decode::decode_section(o, table)?));
        }
        if o.runs("prefill") {
            self.report.insert("prefill".into(), Value::Array(prefill::prefill_section(o, table)?));
        }
        if o.runs("gate") {
            let (gate, vs) = gate::gate_section(o, table)?;
            self.gate_vs = vs;
            self.report.insert("gate".into(), gate);
        }
        // Suite overhead, and scaling with the number of cases: the trials of `--root` (this repository by default).
        let source = o.root.clone().unwrap_or_else(workspace_root);
        if o.runs("overhead") {
            let (v, r) = overhead::overhead_section(&source, table, failures);
            self.overhead = r;
            self.report.insert("overhead".into(), v);
        }
        if o.runs("scaling") {
            self.report.insert("scaling".into(), Value::Array(scaling::scaling_section(&source, cores, table, failures)?));
        }
        if o.runs("real") {
            self.report.insert("real".into(), Value::Array(real::real_section(o, table)?));
        }
        if o.runs("gate-real") {
            self.report.insert("gate_real".into(), Value::Array(gate::gate_real(&reference_setup::real::link(), table)?));
        }
        // Speech-to-text: Whisper's real-time factor through the suite vs Hugging Face's generate().
        if o.runs("speech") {
            let (clips, genai) = speech::speech_section(o, table, failures)?;
            self.report.insert("speech".into(), Value::Array(clips));
            self.report.insert("speech_genai".into(), Value::Array(genai));
        }
        Ok(())
    }
}

pub fn bench(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    // The sections make sessions of their own before any trial runs: the environment's runtime settings (threads,
    // session cap, the device's build) are fixed first, from the run context read here once.
    mobius_conformance::run::runtime::configure(&mobius_conformance::context::RunContext::from_env().map_err(|e| e.to_string())?);
    let mut b = Bench::default();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    b.report.insert("machine".into(), json!({ "cores": cores, "intra_op_threads": 1 }));
    eprintln!("bench: {} repeats, {} tokens, {cores} cores; reference tools from the xtask venv", o.repeats, o.tokens);
    b.sections(&o, cores)?;
    report::footer(&mut b.table, &mut b.report);
    report::headlines(&mut b.report);
    b.report.insert("gate_vs_lmeval".into(), json!(b.gate_vs));
    b.report.insert("overhead_ratio".into(), json!(b.overhead));
    report::write(&b.table, b.report, o.json.as_deref())?;
    if !b.failures.is_empty() {
        return Err(format!("bench: these sections report no figure: {}", b.failures.join("; ")));
    }
    Ok(())
}
