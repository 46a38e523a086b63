//! Crash isolation: the trials run in a worker process, so that a runtime that crashes (a signal, an abort) costs
//! its own trial, not the run.
//!
//! The harness starts one worker, this same executable run with [`FLAG`], and hands it each trial by name; the
//! worker runs every trial it is given on a thread of its own, so its sessions stay warm for the trials that share
//! it, as they would in one process. When the worker dies, each trial it was running is run again alone, in a fresh
//! worker: one that crashes there fails with the signal, the runtime call it crashed in (the worker's crash handler,
//! `run::last_call`, writes it) and the worker's last lines on stderr; one that finishes reports its own verdict.
//! The next trials go to a fresh shared worker.
//!
//! The worker talks on its standard output, one line a message, each starting with `\x1e` (a record separator no
//! text of the suite holds): a verdict ([`REPLY`], the request's number, the status's name and the message as a JSON
//! string) or the crash handler's line. Every other line it prints passes through, and its stderr is copied through
//! as it comes.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use mobius_conformance::context::RunContext;
use mobius_conformance::outcome::{Outcome, Status};
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::run::last_call::{self, Crash, Noted};
use mobius_conformance::trial;

/// The first argument that makes this executable a worker, followed by the suite root.
pub const FLAG: &str = "--mobius-conformance-worker";

/// The tag of a verdict line.
const REPLY: &str = "\u{1e}mobius-conformance verdict";

/// How many of a worker's last stderr lines a crash shows.
const LAST_WORDS: usize = 20;

/// A worker's answer to one trial.
#[derive(Debug, Clone)]
pub enum Answer {
    Done(Status, String),
    /// The worker died before it answered.
    Died(Crash),
}

/// Serves trials on stdin until it closes, then exits (a worker's `main`).
pub fn serve(root: &Path) -> ! {
    last_call::note_crashes();
    let suite = Arc::new(Suite::open(root));
    let ctx = Arc::new(RunContext::from_env());
    let plan: Arc<HashMap<String, mobius_conformance::plan::suite::TrialSpec>> =
        Arc::new(trial::matrix::plan(&suite).into_iter().map(|s| (s.name.clone(), s)).collect());
    let mut running = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let Some((id, name)) = line.split_once('\t') else { continue };
        let (id, name, suite, ctx, plan) = (id.to_string(), name.to_string(), suite.clone(), ctx.clone(), plan.clone());
        let (id2, name2) = (id.clone(), name.clone());
        let spawned = std::thread::Builder::new().stack_size(8 << 20).spawn(move || {
            let outcome = match (plan.get(&name), ctx.as_ref()) {
                (None, _) => Outcome::fail(format!("{name}: no such trial in the worker's plan of {}", suite.root.display())),
                (_, Err(e)) => Outcome::fail(format!("{name}: {e}")),
                (Some(spec), Ok(ctx)) => trial::guarded(&name, || trial::run(&suite, spec, ctx)),
            };
            answer(&id, &outcome);
        });
        match spawned {
            Ok(t) => running.push(t),
            // Every request is answered: the harness waits for it.
            Err(e) => answer(&id2, &Outcome::fail(format!("{name2}: the worker could not start a thread for it: {e}"))),
        }
    }
    for t in running {
        let _ = t.join();
    }
    std::process::exit(0)
}

/// Writes request `id`'s verdict line.
fn answer(id: &str, outcome: &Outcome) {
    let message = serde_json::to_string(&outcome.message).unwrap_or_else(|_| "\"\"".into());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{REPLY}\t{id}\t{}\t{message}", outcome.status.name());
    let _ = out.flush();
}

/// What the harness keeps of one worker.
struct Worker {
    stdin: Mutex<Option<ChildStdin>>,
    state: Arc<Mutex<State>>,
    next: AtomicU64,
    reader: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Default)]
struct State {
    waiting: HashMap<u64, mpsc::Sender<Answer>>,
    /// How it ended, once it did.
    ended: Option<Crash>,
}

impl Worker {
    fn spawn(exe: &Path, root: &Path) -> Result<Worker, String> {
        let mut child = Command::new(exe)
            .arg(FLAG)
            .arg(root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting the trial worker {}: {e}", exe.display()))?;
        let stdin = child.stdin.take();
        let (stdout, stderr) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
        let state = Arc::new(Mutex::new(State::default()));
        let words = Arc::new(Mutex::new(VecDeque::new()));
        let copier = {
            let words = words.clone();
            std::thread::spawn(move || copy_stderr(stderr, &words))
        };
        let reader = {
            let state = state.clone();
            std::thread::spawn(move || read_stdout(stdout, child, copier, &words, &state))
        };
        Ok(Worker { stdin: Mutex::new(stdin), state, next: AtomicU64::new(0), reader: Mutex::new(Some(reader)) })
    }

    fn dead(&self) -> bool {
        lock(&self.state).ended.is_some()
    }

    /// Runs the trial `name` and waits for its verdict (or the worker's end).
    fn ask(&self, name: &str) -> Answer {
        let id = self.next.fetch_add(1, Relaxed);
        let (tx, rx) = mpsc::channel();
        {
            let mut state = lock(&self.state);
            if let Some(c) = &state.ended {
                return Answer::Died(c.clone());
            }
            state.waiting.insert(id, tx);
        }
        // A worker that died cannot be written to; its reader answers every waiting trial as it ends.
        if let Some(stdin) = lock(&self.stdin).as_mut() {
            let _ = writeln!(stdin, "{id}\t{name}").and_then(|()| stdin.flush());
        }
        rx.recv().unwrap_or_else(|_| Answer::Died(Crash { signal: None, code: None, call: None, last_words: Vec::new() }))
    }

    /// Closes its input and waits for it to end; how it ended, when that was not well.
    fn close(&self) -> Option<Crash> {
        // One that already died did so under trials, which reported it.
        let died_before = self.dead();
        lock(&self.stdin).take();
        if let Some(reader) = lock(&self.reader).take() {
            let _ = reader.join();
        }
        lock(&self.state).ended.clone().filter(|c| !died_before && (c.signal.is_some() || c.code != Some(0)))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Lines of `from`, as they come (invalid UTF-8 replaced).
fn lines(from: impl Read) -> impl Iterator<Item = String> {
    let mut r = BufReader::new(from);
    std::iter::from_fn(move || {
        let mut buf = Vec::new();
        match r.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => None,
            Ok(_) => {
                if buf.last() == Some(&b'\n') {
                    buf.pop();
                }
                Some(String::from_utf8_lossy(&buf).into_owned())
            }
        }
    })
}

/// Copies the worker's stderr to ours, keeping its last lines.
fn copy_stderr(stderr: impl Read, words: &Mutex<VecDeque<String>>) {
    for line in lines(stderr) {
        eprintln!("{line}");
        let mut w = lock(words);
        if w.len() == LAST_WORDS {
            w.pop_front();
        }
        w.push_back(line);
    }
}

/// Reads the worker's verdicts and its crash line until it ends, then answers every trial still waiting with how
/// it ended.
fn read_stdout(
    stdout: impl Read,
    mut child: Child,
    copier: std::thread::JoinHandle<()>,
    words: &Mutex<VecDeque<String>>,
    state: &Mutex<State>,
) {
    let mut noted: Option<Noted> = None;
    for line in lines(stdout) {
        if let Some(rest) = line.strip_prefix(REPLY).and_then(|r| r.strip_prefix('\t')) {
            let mut f = rest.splitn(3, '\t');
            let (id, status, message) = (f.next(), f.next(), f.next());
            let id = id.and_then(|i| i.parse::<u64>().ok());
            let status = status.and_then(Status::from_name);
            let message = message.and_then(|m| serde_json::from_str::<String>(m).ok());
            if let (Some(id), Some(status), Some(message)) = (id, status, message)
                && let Some(tx) = lock(state).waiting.remove(&id)
            {
                let _ = tx.send(Answer::Done(status, message));
            }
        } else if let Some(n) = Noted::read(&line) {
            noted = Some(n);
        } else {
            println!("{line}");
        }
    }
    let status = child.wait().ok();
    let _ = copier.join();
    let crash = Crash {
        signal: status.and_then(|s| s.signal()).or(noted.as_ref().map(|n| n.signal)),
        code: status.and_then(|s| s.code()),
        call: noted.and_then(|n| n.call),
        last_words: lock(words).iter().cloned().collect(),
    };
    let mut state = lock(state);
    for (_, tx) in state.waiting.drain() {
        let _ = tx.send(Answer::Died(crash.clone()));
    }
    state.ended = Some(crash);
}

/// The harness's workers: one shared, replaced when it dies, and one of its own for each trial run again alone.
pub struct Workers {
    exe: PathBuf,
    root: PathBuf,
    shared: Mutex<Option<Arc<Worker>>>,
}

/// How a trial ran in a worker.
pub enum Ran {
    /// Its verdict, and how the shared worker ended if the trial had to be run again alone.
    Done(Status, String, Option<Crash>),
    /// It crashed its worker alone too.
    Crashed(Crash),
}

impl Workers {
    /// Workers of this executable over the suite at `root`.
    pub fn new(root: &Path) -> Result<Workers, String> {
        let exe = std::env::current_exe().map_err(|e| format!("finding the harness's own executable to start a worker: {e}"))?;
        Ok(Workers { exe, root: root.to_path_buf(), shared: Mutex::new(None) })
    }

    fn shared(&self) -> Result<Arc<Worker>, String> {
        let mut shared = lock(&self.shared);
        if let Some(w) = shared.as_ref().filter(|w| !w.dead()) {
            return Ok(w.clone());
        }
        let w = Arc::new(Worker::spawn(&self.exe, &self.root)?);
        *shared = Some(w.clone());
        Ok(w)
    }

    /// Runs the trial `name` in the shared worker; if that worker dies first, again alone in a fresh one.
    pub fn run(&self, name: &str) -> Result<Ran, String> {
        let crash = match self.shared()?.ask(name) {
            Answer::Done(status, message) => return Ok(Ran::Done(status, message, None)),
            Answer::Died(c) => c,
        };
        let alone = Worker::spawn(&self.exe, &self.root)?;
        let answer = alone.ask(name);
        alone.close();
        Ok(match answer {
            Answer::Done(status, message) => Ran::Done(status, message, Some(crash)),
            Answer::Died(c) => Ran::Crashed(c),
        })
    }

    /// Ends the shared worker; how it ended, when that was not well (a crash at exit, after every verdict).
    pub fn close(&self) -> Option<Crash> {
        let shared = lock(&self.shared).take();
        shared.and_then(|w| w.close())
    }
}
