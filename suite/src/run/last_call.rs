//! The runtime call a thread is in, kept where a crash can still read it: each call into ONNX Runtime or
//! onnxruntime-genai that may crash the process (loading a session or a model, a run call, a generation step,
//! destroying an object) runs inside [`during`], which notes the call on its thread and for the process. A process
//! that asks for it ([`note_crashes`], the harness's trial worker) has a handler for the signals a crash raises
//! (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) that writes the call to its standard output as one [`CRASH_TAG`] line
//! and then dies of the same signal; the process that runs the worker reads that line as data.
//!
//! The handler only reads atomics and thread-locals of plain values and calls `write(2)`, `sigaction(2)` and
//! `raise(3)`, which are async-signal-safe. A crash on a runtime's own thread (an intra-op worker) has no call of
//! its own; the handler then writes the call the process began last, which a trial run alone makes exact.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

/// The runtime a call is into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    OnnxRuntime,
    Genai,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Runtime::OnnxRuntime => "onnxruntime",
            Runtime::Genai => "onnxruntime-genai",
        }
    }

    fn from_name(name: &str) -> Option<Runtime> {
        [Runtime::OnnxRuntime, Runtime::Genai].into_iter().find(|r| r.name() == name)
    }
}

/// One call into a runtime: which, what it does (`loading the model`), and on what (`OgaModel`, a model file's
/// name), each a static string so that a signal handler may write them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    pub runtime: Runtime,
    pub what: &'static str,
    pub on: &'static str,
}

/// The tag that starts the line a crash handler writes: `\x1e` (a record separator no text of the suite holds),
/// then the tag.
pub const CRASH_TAG: &str = "\u{1e}mobius-conformance crashed";

thread_local! {
    /// The call this thread is in.
    static CURRENT: Cell<Option<Call>> = const { Cell::new(None) };
}

/// The call the process began last, on any thread: its runtime (1 + index, 0 none) and its two strings, as
/// (pointer, length) words. Written only by [`during`]; read only by the handler.
static LAST: [AtomicUsize; 5] = [const { AtomicUsize::new(0) }; 5];

/// `f`, with `call` noted as this thread's and the process's current call; the earlier one is restored after.
pub fn during<T>(call: Call, f: impl FnOnce() -> T) -> T {
    let outer = CURRENT.with(|c| c.replace(Some(call)));
    LAST[1].store(call.what.as_ptr() as usize, Relaxed);
    LAST[2].store(call.what.len(), Relaxed);
    LAST[3].store(call.on.as_ptr() as usize, Relaxed);
    LAST[4].store(call.on.len(), Relaxed);
    LAST[0].store(1 + call.runtime as usize, Relaxed);
    let out = f();
    CURRENT.with(|c| c.set(outer));
    out
}

/// What a crash handler wrote: the signal and the call it fell in (`None`: no runtime call had begun).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Noted {
    pub signal: i32,
    /// The call, and whether the crashing thread made it (false: a runtime's own thread crashed during it).
    pub call: Option<(NotedCall, bool)>,
}

/// A [`Call`] as read back from a crash line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotedCall {
    pub runtime: &'static str,
    pub what: String,
    pub on: String,
}

impl Noted {
    /// Reads the line a handler wrote (without its newline), or `None` when `line` is not one.
    pub fn read(line: &str) -> Option<Noted> {
        let rest = line.strip_prefix(CRASH_TAG)?.strip_prefix('\t')?;
        let fields: Vec<&str> = rest.split('\t').collect();
        let signal = fields.first()?.parse().ok()?;
        let call = match fields.as_slice() {
            [_, own, runtime, what, on] => {
                let runtime = Runtime::from_name(runtime)?.name();
                Some((NotedCall { runtime, what: what.to_string(), on: on.to_string() }, *own == "own"))
            }
            _ => None,
        };
        Some(Noted { signal, call })
    }
}

/// How a process that ran trials ended, when it did not end well: what [`crate::report::crashed`] words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crash {
    /// The signal that killed it (`None`: it exited with `code` instead, or nobody knows how it ended).
    pub signal: Option<i32>,
    pub code: Option<i32>,
    /// The call its crash handler noted, and whether the crashing thread made it.
    pub call: Option<(NotedCall, bool)>,
    /// The last lines it wrote on its standard error, oldest first.
    pub last_words: Vec<String>,
}

/// The signals a crash raises.
const SIGNALS: [libc::c_int; 5] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGABRT];

/// The handlers that were there before [`note_crashes`] (Rust's own stack-overflow handler for SIGSEGV and SIGBUS).
static BEFORE: OnceLock<Vec<(libc::c_int, libc::sigaction)>> = OnceLock::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Installs the crash handler for this process (once; later calls do nothing).
pub fn note_crashes() {
    if INSTALLED.swap(true, Relaxed) {
        return;
    }
    let mut before = Vec::new();
    for sig in SIGNALS {
        // SAFETY: a zeroed sigaction is a valid value; the handler is an `extern "C"` fn of the SA_SIGINFO shape,
        // and the old action is written into a local.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_crash as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, &action, &mut old) == 0 {
                before.push((sig, old));
            }
        }
    }
    let _ = BEFORE.set(before);
}

/// Copies `parts` into `buf` from `at`, as far as it goes; returns the new end.
fn put(buf: &mut [u8], mut at: usize, parts: &[&[u8]]) -> usize {
    for p in parts {
        for &b in *p {
            if at < buf.len() {
                buf[at] = b;
                at += 1;
            }
        }
    }
    at
}

/// A signal number in decimal, without allocating.
fn decimal(mut n: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 || i == 0 {
            return &buf[i..];
        }
    }
}

extern "C" fn on_crash(sig: libc::c_int, info: *mut libc::siginfo_t, _context: *mut libc::c_void) {
    let mut line = [0u8; 1024];
    let mut digits = [0u8; 10];
    let mut at = put(&mut line, 0, &[b"\n", CRASH_TAG.as_bytes(), b"\t", decimal(sig as u32, &mut digits)]);
    let own = CURRENT.try_with(Cell::get).ok().flatten();
    let call = match own {
        Some(c) => Some((c.runtime.name().as_bytes(), c.what.as_bytes(), c.on.as_bytes(), &b"own"[..])),
        None => {
            let word = |i: usize| LAST[i].load(Relaxed);
            match word(0) {
                0 => None,
                r => {
                    let runtime = if r == 1 { Runtime::OnnxRuntime } else { Runtime::Genai };
                    // SAFETY: the words were stored from `&'static str`s by `during`, lengths after pointers.
                    let (what, on) = unsafe {
                        (
                            std::slice::from_raw_parts(word(1) as *const u8, word(2)),
                            std::slice::from_raw_parts(word(3) as *const u8, word(4)),
                        )
                    };
                    Some((runtime.name().as_bytes(), what, on, &b"runtime"[..]))
                }
            }
        }
    };
    if let Some((runtime, what, on, whose)) = call {
        at = put(&mut line, at, &[b"\t", whose, b"\t", runtime, b"\t", what, b"\t", on]);
    }
    at = put(&mut line, at, &[b"\n"]);
    // SAFETY: write(2), sigaction(2) and raise(3) are async-signal-safe; `line[..at]` is initialised.
    unsafe {
        libc::write(1, line.as_ptr().cast(), at);
        // The handler that was there before takes the signal again: a fault re-executed, a raised signal raised
        // again (blocked until this handler returns).
        let before = BEFORE.get().and_then(|b| b.iter().find(|(s, _)| *s == sig).map(|(_, a)| *a));
        match before {
            Some(old) => libc::sigaction(sig, &old, std::ptr::null_mut()),
            None => libc::signal(sig, libc::SIG_DFL) as libc::c_int,
        };
        if info.is_null() || (*info).si_code <= 0 || sig == libc::SIGABRT {
            libc::raise(sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_line_reads_back_and_other_lines_do_not() {
        let line = format!("{CRASH_TAG}\t11\town\tonnxruntime-genai\tloading the model\tgenai_config.json");
        let noted = Noted::read(&line).unwrap();
        assert_eq!(noted.signal, 11);
        let (call, own) = noted.call.unwrap();
        assert_eq!(
            (call.runtime, call.what.as_str(), call.on.as_str(), own),
            ("onnxruntime-genai", "loading the model", "genai_config.json", true)
        );
        assert_eq!(Noted::read(&format!("{CRASH_TAG}\t6")), Some(Noted { signal: 6, call: None }));
        assert_eq!(Noted::read("test a ... ok"), None);
        assert_eq!(Noted::read(&format!("{CRASH_TAG}\tsix")), None);
    }

    #[test]
    fn a_call_is_noted_while_it_runs_and_the_outer_one_comes_back() {
        let outer = Call { runtime: Runtime::Genai, what: "loading the model", on: "" };
        let inner = Call { runtime: Runtime::OnnxRuntime, what: "a run call", on: "model.onnx" };
        during(outer, || {
            during(inner, || assert_eq!(CURRENT.with(Cell::get), Some(inner)));
            assert_eq!(CURRENT.with(Cell::get), Some(outer));
        });
        assert_eq!(CURRENT.with(Cell::get), None);
        let mut buf = [0u8; 10];
        assert_eq!((decimal(0, &mut buf), decimal(11, &mut [0; 10])), (&b"0"[..], &b"11"[..]));
    }
}
