//! The suite's own loops, timed: its greedy decode, the thinnest Rust loop over the same session (its peer), and a
//! prefill; the fixtures and prompts they run, and the process's memory.

use std::path::{Path, PathBuf};
use std::time::Instant;

use mobius_conformance::feed::package::package_model;
use mobius_conformance::feed::tokenizer::TextTokenizer;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::run::decoder::{Decoder, StepInput};
use mobius_conformance::run::generate;
use mobius_conformance::run::pipeline::Pipeline;
use mobius_conformance::run::runtime::Provider;
use mobius_conformance::run::{sessions, timing};

use super::stats::Stats;

pub(super) const MODELS: [&str; 4] = ["qwen3-tiny", "llama-tiny", "gemma3-tiny", "gemma4-tiny"];
pub(super) const FLAVOURS: [&str; 2] = ["default", "cpu"];

pub fn package(model: &str, flavour: &str) -> PathBuf {
    package_in(&workspace_root(), model, flavour)
}

/// A fixture's f32 package of `flavour` in the suite root `root`.
pub fn package_in(root: &std::path::Path, model: &str, flavour: &str) -> PathBuf {
    root.join("fixtures").join(model).join("onnx").join(format!("{flavour}-f32"))
}

/// The case's prompt, as the suite tokenizes it.
pub fn prompt_ids() -> Result<Vec<i64>, String> {
    prompt_ids_in(&workspace_root())
}

/// The same, with the tokenizer of the suite root `root`.
pub fn prompt_ids_in(root: &std::path::Path) -> Result<Vec<i64>, String> {
    let tok = TextTokenizer::load(&root.join("fixtures/tokenizer")).map_err(|e| e.to_string())?;
    tok.encode("Question: What is the capital of France?\nAnswer: The capital of France is Paris, a city known for")
        .map_err(|e| e.to_string())
}

/// The suite's decode throughput (tokens/s), every repeat, and the tokens it chose.
pub struct SuiteDecode {
    pub rates: Vec<f64>,
    pub ids: Vec<i64>,
}

/// The suite's own greedy loop (`generate::greedy`, the one L5 trials run) on one package: `tokens` new tokens
/// after `prompt`, no EOS stop; the session is made and warmed first, as the suite shares it across trials.
pub struct DecodeLoop {
    decoder: std::sync::Arc<Decoder>,
    prompt: Vec<i64>,
    tokens: usize,
    pub ids: Vec<i64>,
}

impl DecodeLoop {
    pub fn new(package: &Path, prompt: &[i64], tokens: usize, provider: Provider) -> Result<DecodeLoop, String> {
        let model = package_model(package).map_err(|e| e.to_string())?;
        let decoder = sessions::decoder(&model, provider).map_err(|e| e.to_string())?;
        let mut l = DecodeLoop { decoder, prompt: prompt.to_vec(), tokens, ids: Vec::new() };
        l.ids = generate::greedy(&l.decoder, &Pipeline::Text, &l.prompt, tokens, &[], None, &[]).map_err(|e| e.to_string())?.chosen();
        Ok(l)
    }

    /// One timed run.
    pub fn run(&self) -> Result<LoopRun, String> {
        let (run, ids) = LoopRun::time(self.tokens, || {
            Ok(generate::greedy(&self.decoder, &Pipeline::Text, &self.prompt, self.tokens, &[], None, &[])
                .map_err(|e| e.to_string())?
                .chosen())
        })?;
        if ids != self.ids {
            return Err(format!("{}: the greedy tokens changed between runs", self.decoder.model.display()));
        }
        Ok(run)
    }
}

/// One timed run of a Rust decode loop.
pub struct LoopRun {
    /// Tokens per second of the whole loop.
    pub rate: f64,
    /// Tokens per second of its time inside ONNX Runtime's run calls.
    pub inside: f64,
    /// Each decode step's seconds, from one run call's end to the next: the loop's own work on a step's output and
    /// the next run (bench.py times its Python loops the same way).
    pub steps: Vec<f64>,
}

impl LoopRun {
    /// Times `greedy`, a loop making `tokens` tokens on this thread, and returns what it returned.
    fn time<T>(tokens: usize, greedy: impl FnOnce() -> Result<T, String>) -> Result<(LoopRun, T), String> {
        let (t0, r0) = (Instant::now(), timing::run_seconds());
        timing::record_run_ends();
        let out = greedy();
        let ends = timing::take_run_ends();
        let (wall, inside) = (t0.elapsed().as_secs_f64(), timing::run_seconds() - r0);
        Ok((LoopRun::of(tokens, wall, inside, &ends), out?))
    }

    fn of(tokens: usize, wall: f64, inside: f64, ends: &[Instant]) -> LoopRun {
        let steps = ends.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
        LoopRun { rate: tokens as f64 / wall, inside: tokens as f64 / inside, steps }
    }

    /// The loop's own time per token outside ONNX Runtime's run calls (ms): the part of it that is not ONNX Runtime's.
    pub(super) fn own_ms(&self) -> f64 {
        1e3 * (1.0 / self.rate - 1.0 / self.inside)
    }
}

/// Tokens per second at the median decode step: a figure a burst of the machine's noise during a few steps does not
/// move, where the whole run's rate takes every step as it came.
pub(super) fn step_rate(steps: &[f64]) -> f64 {
    if steps.is_empty() { f64::NAN } else { 1.0 / Stats::of(steps.to_vec()).median }
}

/// The thinnest Rust loop over the same session: one plain `run` a step (the prompt, then one token), the present
/// values fed back as the next step's past, the last row's argmax, nothing else (no IoBinding, no checks): the peer
/// the suite's own loop is held to.
pub struct OrtOnlyLoop {
    decoder: std::sync::Arc<Decoder>,
    prompt: Vec<i64>,
    tokens: usize,
}

impl OrtOnlyLoop {
    pub fn new(package: &Path, prompt: &[i64], tokens: usize, provider: Provider) -> Result<OrtOnlyLoop, String> {
        let model = package_model(package).map_err(|e| e.to_string())?;
        let decoder = sessions::decoder(&model, provider).map_err(|e| e.to_string())?;
        Ok(OrtOnlyLoop { decoder, prompt: prompt.to_vec(), tokens })
    }

    /// One timed run, and the tokens it chose.
    pub fn run(&self) -> Result<(LoopRun, Vec<i64>), String> {
        LoopRun::time(self.tokens, || self.greedy())
    }

    fn greedy(&self) -> Result<Vec<i64>, String> {
        let mut cache = self.decoder.new_cache().map_err(|e| e.to_string())?;
        let mut input = self.prompt.clone();
        let mut ids = Vec::with_capacity(self.tokens);
        for _ in 0..self.tokens {
            let out = self.decoder.step(StepInput::Ids(input), &mut cache).map_err(|e| e.to_string())?;
            let next = mobius_numeric::argmax(out.last()) as i64;
            ids.push(next);
            input = vec![next];
        }
        Ok(ids)
    }
}

pub fn suite_decode(package: &Path, prompt: &[i64], tokens: usize, repeats: usize, provider: Provider) -> Result<SuiteDecode, String> {
    let l = DecodeLoop::new(package, prompt, tokens, provider)?;
    let runs = (0..repeats).map(|_| l.run()).collect::<Result<Vec<_>, _>>()?;
    Ok(SuiteDecode { rates: runs.iter().map(|r| r.rate).collect(), ids: l.ids })
}

/// bench.py's synthetic prompt of `len` tokens: [bos] + [4 + (7 i) mod (vocab - 4)].
pub fn synthetic(len: usize, vocab: i64, bos: i64) -> Vec<i64> {
    std::iter::once(bos).chain((0..len as i64 - 1).map(|i| 4 + (7 * i) % (vocab - 4))).collect()
}

pub fn suite_prefill(package: &Path, ids: &[i64], repeats: usize, provider: Provider) -> Result<Stats, String> {
    let model = package_model(package).map_err(|e| e.to_string())?;
    let decoder = sessions::decoder(&model, provider).map_err(|e| e.to_string())?;
    let run = || -> Result<f64, String> {
        let empty = decoder.new_cache().map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        decoder.forward(StepInput::Ids(ids.to_vec()), &empty, 1).map_err(|e| e.to_string())?;
        Ok(t0.elapsed().as_secs_f64())
    };
    run()?;
    Ok(Stats::of((0..repeats).map(|_| run()).collect::<Result<_, _>>()?))
}

/// Peak resident memory of this process (VmHWM), in MB.
pub fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok()))
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Resident memory of this process now (VmRSS), in MB.
pub(super) fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok()))
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_s_steps_are_the_gaps_between_its_run_ends_and_its_step_rate_their_median() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + std::time::Duration::from_millis(ms);
        // Four run ends (the prompt's, then three steps of 10, 50 and 20 ms) over 0.2 s of wall, 0.1 s inside runs.
        let run = LoopRun::of(4, 0.2, 0.1, &[at(0), at(10), at(60), at(80)]);
        let steps: Vec<u64> = run.steps.iter().map(|s| (s * 1e3).round() as u64).collect();
        assert_eq!(steps, [10, 50, 20]);
        assert!((step_rate(&run.steps) - 50.0).abs() < 1e-6, "the median step is 20 ms: 50 tok/s");
        assert!((run.own_ms() - 25.0).abs() < 1e-9, "(0.2 - 0.1) s over 4 tokens");
        assert!(step_rate(&[]).is_nan(), "no steps, no figure");
    }
}
