//! The reference side: `xtask/reference/bench.py` in the reference venv, run once or served (loaded and warm in a
//! child process, one run a request).

use std::path::Path;
use std::process::Command;

use mobius_conformance::paths::workspace_root;
use reference_setup::venv;
use serde_json::Value;

/// `bench.py` with `args`, run by the reference venv's Python from the repository root, offline, one OpenMP thread.
pub(super) fn bench_py<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Result<Command, String> {
    venv::ensure()?;
    let mut c = Command::new(venv::python());
    c.arg(workspace_root().join("xtask").join("reference").join("bench.py"))
        .args(args)
        .current_dir(workspace_root())
        .env("HF_HUB_OFFLINE", "1")
        .env("OMP_NUM_THREADS", "1");
    Ok(c)
}

/// Runs `bench.py` in the reference venv and parses the one JSON object it prints.
pub(super) fn python(args: &[String]) -> Result<Value, String> {
    let out = bench_py(args)?.output().map_err(|e| format!("running bench.py: {e}"))?;
    if !out.status.success() {
        return Err(format!("bench.py {} failed ({}):\n{}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr)));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("bench.py {}: {e}", args.join(" ")))
}

/// A `bench.py` server (`decode-serve`, `speech-serve`): the Python side loaded and warm in a child process, run
/// once per request line, so the caller can time its own runs between them.
pub(super) struct Served {
    pub(super) child: std::process::Child,
    pub(super) input: std::process::ChildStdin,
    pub(super) output: std::io::BufReader<std::process::ChildStdout>,
    /// `bench.py <subcommand>`, for messages.
    pub(super) what: String,
    pub(super) ready: Value,
}

pub(super) const ENGINES: [&str; 3] = ["genai", "genai-package", "ort"];

impl Served {
    /// `bench.py decode-serve` with every engine of [`ENGINES`] on `pkg`, `tokens` new tokens a run.
    pub(super) fn start(pkg: &Path, prompt: &str, tokens: usize) -> Result<Served, String> {
        let (pkg, tokens, engines) = (pkg.to_string_lossy(), tokens.to_string(), ENGINES.join(","));
        let args =
            ["decode-serve", "--package", &pkg, "--prompt-ids", prompt, "--tokens", &tokens, "--engines", &engines, "--threads", "1"];
        Served::spawn(&args.map(String::from))
    }

    /// `bench.py` with `args` (its subcommand first), once it has printed its ready line.
    pub(super) fn spawn(args: &[String]) -> Result<Served, String> {
        let what = format!("bench.py {}", args.first().map_or("", String::as_str));
        let mut child = bench_py(args)?
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .map_err(|e| format!("running {what}: {e}"))?;
        let input = child.stdin.take().expect("piped");
        let output = std::io::BufReader::new(child.stdout.take().expect("piped"));
        let mut s = Served { child, input, output, what, ready: Value::Null };
        s.ready = s.line()?;
        Ok(s)
    }

    fn line(&mut self) -> Result<Value, String> {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut self.output, &mut line).map_err(|e| format!("{}: {e}", self.what))?;
        if line.is_empty() {
            return Err(format!("{} stopped early (its error is above)", self.what));
        }
        serde_json::from_str(&line).map_err(|e| format!("{}: {e}: {line}", self.what))
    }

    /// The answer to one run, asked for by `request` (an engine's name, a clip's index), and its seconds.
    fn request(&mut self, request: &str) -> Result<(f64, Value), String> {
        use std::io::Write;
        writeln!(self.input, "{request}").and_then(|_| self.input.flush()).map_err(|e| format!("{}: {e}", self.what))?;
        let v = self.line()?;
        let seconds = v["seconds"].as_f64().ok_or_else(|| format!("{}: no seconds in {v}", self.what))?;
        Ok((seconds, v))
    }

    /// The seconds of one run, asked for by `request`.
    pub(super) fn seconds(&mut self, request: &str) -> Result<f64, String> {
        Ok(self.request(request)?.0)
    }

    /// One run of `engine`: its tokens per second, its decode steps' seconds (as [`LoopRun::steps`]) and, where the
    /// engine times its model runs (python ort), its own time per token outside them (ms).
    pub(super) fn run(&mut self, engine: &str, tokens: usize) -> Result<(f64, Vec<f64>, f64), String> {
        let (seconds, v) = self.request(engine)?;
        let steps = v["steps"].as_array().map(|a| a.iter().filter_map(Value::as_f64).collect::<Vec<_>>());
        let steps = steps.ok_or_else(|| format!("{}: no steps in {v}", self.what))?;
        let own = v["inside_seconds"].as_f64().map_or(f64::NAN, |inside| 1e3 * (seconds - inside) / tokens as f64);
        Ok((tokens as f64 / seconds, steps, own))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = writeln!(self.input);
        let _ = self.child.wait();
    }
}

/// A pause before each timed run: ONNX Runtime's intra-op pool (genai with the package's settings has one per
/// core) spins for a while after a run, and on a small machine that would be charged to whoever runs next.
pub(super) fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(30));
}
