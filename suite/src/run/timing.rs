//! What this process spends inside ONNX Runtime: its run calls and its session loads, summed over threads, and on
//! request the moment each run call on a thread returned. The bench keeps the engine's time apart from the suite's
//! own this way.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use super::last_call::{self, Call, Runtime};

/// An ONNX Runtime run call, as [`last_call`] notes it.
const RUN_CALL: Call = Call { runtime: Runtime::OnnxRuntime, what: "a run call", on: "" };

/// Time spent inside ONNX Runtime's run calls by this process, all sessions and threads together (nanoseconds).
static RUN_NANOS: AtomicU64 = AtomicU64::new(0);

/// Seconds this process has spent inside ONNX Runtime's run calls so far (summed over threads): what the suite
/// costs beyond it is its own overhead.
pub fn run_seconds() -> f64 {
    RUN_NANOS.load(Relaxed) as f64 * 1e-9
}

/// Time spent inside ONNX Runtime making sessions (reading and optimising the graph), nanoseconds: the engine's
/// time too, which the bench keeps apart from its run calls and from the suite's own.
static LOAD_NANOS: AtomicU64 = AtomicU64::new(0);

/// Seconds this process has spent inside ONNX Runtime making sessions so far (summed over threads).
pub fn load_seconds() -> f64 {
    LOAD_NANOS.load(Relaxed) as f64 * 1e-9
}

thread_local! {
    /// When this thread records them ([`record_run_ends`]), the moment each of its run calls returned.
    static RUN_ENDS: RefCell<Option<Vec<Instant>>> = const { RefCell::new(None) };
}

/// Starts recording, on this thread, the moment each ONNX Runtime run call returns (dropping any earlier record).
/// A decode loop makes one run a step, so the gaps between the ends are its steps, each with the loop's own work on
/// the step's output: the bench times every loop, Python's too, that way.
pub fn record_run_ends() {
    RUN_ENDS.with(|r| *r.borrow_mut() = Some(Vec::new()));
}

/// What [`record_run_ends`] recorded on this thread since, and stops recording.
pub fn take_run_ends() -> Vec<Instant> {
    RUN_ENDS.with(|r| r.borrow_mut().take()).unwrap_or_default()
}

/// `run`, one ONNX Runtime run call, counted in [`run_seconds`] and recorded when this thread records.
pub(super) fn timed<T>(run: impl FnOnce() -> T) -> T {
    let t0 = Instant::now();
    let out = last_call::during(RUN_CALL, run);
    let end = Instant::now();
    RUN_NANOS.fetch_add((end - t0).as_nanos() as u64, Relaxed);
    RUN_ENDS.with(|r| {
        if let Some(ends) = r.borrow_mut().as_mut() {
            ends.push(end);
        }
    });
    out
}

/// `load`, ONNX Runtime making a session, counted in [`load_seconds`].
/// `on` names the model (a static string: what a crash handler may write).
pub(super) fn timed_load<T>(on: &'static str, load: impl FnOnce() -> T) -> T {
    let t0 = Instant::now();
    let out = last_call::during(Call { runtime: Runtime::OnnxRuntime, what: "loading a session", on }, load);
    LOAD_NANOS.fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ends_are_recorded_per_thread_only_while_asked_for() {
        timed(|| ());
        assert!(take_run_ends().is_empty(), "nothing is recorded unless asked");
        record_run_ends();
        let before = Instant::now();
        timed(|| ());
        std::thread::spawn(|| timed(|| ())).join().unwrap();
        timed(|| ());
        let ends = take_run_ends();
        assert_eq!(ends.len(), 2, "this thread's two runs, not the other thread's");
        assert!(before <= ends[0] && ends[0] <= ends[1]);
        timed(|| ());
        assert!(take_run_ends().is_empty(), "taking the record stops it");
    }
}
