//! Where ONNX Runtime ran each node: read from its own profiler, so that a CUDA trial some of whose compute quietly
//! fell back to the CPU execution provider is seen (`cargo xtask gpu-check`). While profiling is on ([`start`]),
//! every session made gets a profile of its own; when the sessions are gone ([`crate::run::sessions::clear`]),
//! ONNX Runtime has written them, and [`fallbacks`] reads each one against the provider its session asked for.
//!
//! ONNX Runtime places some nodes on the CPU on purpose: shape arithmetic on int64 and bool (`GetCpuPreferredNodes`).
//! A node whose outputs are all integers or booleans is such a node. One with a floating-point output on another
//! provider than its session's is compute that left the device: a fallback.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::run::runtime::Provider;

/// A session made while profiling was on: its model, its provider, and the prefix its profile file starts with.
#[derive(Debug, Clone, PartialEq)]
pub struct Profiled {
    pub model: PathBuf,
    pub provider: Provider,
    pub prefix: PathBuf,
}

struct State {
    dir: Option<PathBuf>,
    sessions: Vec<Profiled>,
}

static STATE: Mutex<State> = Mutex::new(State { dir: None, sessions: Vec::new() });

/// From now on, every session made writes its profile into `dir`; `None` stops it (the sessions made so far keep
/// theirs).
pub fn start(dir: Option<PathBuf>) {
    STATE.lock().unwrap_or_else(|p| p.into_inner()).dir = dir;
}

/// The profile prefix of a session about to be made of `model` on `provider`, while profiling is on.
pub(crate) fn register(model: &Path, provider: Provider) -> Option<PathBuf> {
    let mut s = STATE.lock().unwrap_or_else(|p| p.into_inner());
    let prefix = s.dir.as_ref()?.join(format!("session-{:05}", s.sessions.len()));
    s.sessions.push(Profiled { model: model.to_path_buf(), provider, prefix: prefix.clone() });
    Some(prefix)
}

/// Every session profiled so far.
pub fn profiled() -> Vec<Profiled> {
    STATE.lock().unwrap_or_else(|p| p.into_inner()).sessions.clone()
}

/// A node that ran on another provider than its session's with a floating-point output.
#[derive(Debug, Clone, PartialEq)]
pub struct Fallback {
    /// The node's name in the graph.
    pub node: String,
    pub op: String,
    /// The provider it ran on.
    pub ran_on: String,
    /// Its outputs' element types and shapes, as the profiler records them (`float [1, 7, 64]`).
    pub outputs: Vec<String>,
}

/// A profiled session's fallbacks.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub session: Profiled,
    /// How many node runs its profile holds.
    pub node_runs: usize,
    pub fallbacks: Vec<Fallback>,
}

/// Every session profiled so far on a provider other than the CPU's, with its fallbacks (each node once). A session
/// whose profile is missing or unreadable is an error naming it: a check that could not look must not pass.
pub fn fallbacks() -> Result<Vec<Placement>> {
    let sessions = STATE.lock().unwrap_or_else(|p| p.into_inner()).sessions.clone();
    sessions.into_iter().filter(|s| s.provider != Provider::Cpu).map(|s| read(&s, &provider_name(s.provider))).collect()
}

/// ONNX Runtime's name for a provider, as its profiler writes it.
pub fn provider_name(p: Provider) -> String {
    match p {
        Provider::Cpu => "CPUExecutionProvider".into(),
        Provider::Cuda { .. } => "CUDAExecutionProvider".into(),
    }
}

/// `session`'s profile read against the provider it should have run on (`on`).
pub fn read(session: &Profiled, on: &str) -> Result<Placement> {
    let file = profile_file(&session.prefix)?;
    let text = std::fs::read_to_string(&file).map_err(|e| Error::new(format!("{}: {e}", file.display())))?;
    if text.trim().is_empty() {
        return Err(Error::new(format!("{}: ONNX Runtime has not written it yet (is the session still alive?)", file.display())));
    }
    let (node_runs, fallbacks) = off_provider(&text, on).map_err(|e| Error::new(format!("{}: {e}", file.display())))?;
    Ok(Placement { session: session.clone(), node_runs, fallbacks })
}

/// The one file ONNX Runtime wrote for `prefix` (`<prefix>_<date>_<time>.json`).
fn profile_file(prefix: &Path) -> Result<PathBuf> {
    let dir = prefix.parent().unwrap_or(Path::new("."));
    let stem = prefix.file_name().map(|s| format!("{}_", s.to_string_lossy())).unwrap_or_default();
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::new(format!("{}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&stem) && n.to_string_lossy().ends_with(".json")))
        .collect();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(Error::new(format!("{}: ONNX Runtime wrote no profile", prefix.display()))),
        many => Err(Error::new(format!("{}: {} profiles", prefix.display(), many.len()))),
    }
}

/// Of a profile (ONNX Runtime's JSON: an array of events; a node's kernel run is a `Node` event whose `args` give its
/// `op_name`, `provider` and `output_type_shape`), how many node runs it holds and the nodes that ran off `on` with a
/// floating-point output, each once.
pub fn off_provider(profile: &str, on: &str) -> std::result::Result<(usize, Vec<Fallback>), String> {
    let events: Vec<serde_json::Value> = serde_json::from_str(profile).map_err(|e| format!("not a profile: {e}"))?;
    let mut runs = 0;
    let mut out: Vec<Fallback> = Vec::new();
    for e in events.iter().filter(|e| e["cat"] == "Node") {
        let Some(node) = e["name"].as_str().and_then(|n| n.strip_suffix("_kernel_time")) else { continue };
        runs += 1;
        let args = &e["args"];
        let ran_on = args["provider"].as_str().unwrap_or_default();
        if ran_on == on || out.iter().any(|f| f.node == node) {
            continue;
        }
        let outputs: Vec<(String, String)> = args["output_type_shape"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| o.as_object())
            .flat_map(|o| o.iter().map(|(ty, shape)| (ty.clone(), shape.to_string())))
            .collect();
        if outputs.iter().any(|(ty, _)| matches!(ty.as_str(), "float" | "float16" | "bfloat16" | "double")) {
            out.push(Fallback {
                node: node.to_string(),
                op: args["op_name"].as_str().unwrap_or_default().to_string(),
                ran_on: ran_on.to_string(),
                outputs: outputs.into_iter().map(|(ty, shape)| format!("{ty} {shape}")).collect(),
            });
        }
    }
    Ok((runs, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_floating_point_work_off_the_device_is_a_fallback() {
        let profile = r#"[
            {"cat": "Session", "name": "model_run", "args": {}},
            {"cat": "Node", "name": "Shape_node_1_kernel_time", "args": {"op_name": "Shape", "provider": "CPUExecutionProvider",
             "output_type_shape": [{"int64": [1]}]}},
            {"cat": "Node", "name": "mask/Cast_node_2_kernel_time", "args": {"op_name": "Cast", "provider": "CPUExecutionProvider",
             "output_type_shape": [{"bool": [1, 3]}]}},
            {"cat": "Node", "name": "layers.0/MatMul_node_3_kernel_time", "args": {"op_name": "MatMul", "provider": "CUDAExecutionProvider",
             "output_type_shape": [{"float": [1, 3, 64]}]}},
            {"cat": "Node", "name": "layers.0/Attention_node_4_kernel_time", "args": {"op_name": "Attention", "provider": "CPUExecutionProvider",
             "output_type_shape": [{"float16": [1, 3, 64]}, {"float16": [1, 2, 3, 16]}]}},
            {"cat": "Node", "name": "layers.0/Attention_node_4_kernel_time", "args": {"op_name": "Attention", "provider": "CPUExecutionProvider",
             "output_type_shape": [{"float16": [1, 1, 64]}]}},
            {"cat": "Node", "name": "layers.0/Attention_node_4_fence_before", "args": {}}
        ]"#;
        let (runs, f) = off_provider(profile, "CUDAExecutionProvider").unwrap();
        assert_eq!(runs, 5);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].node.as_str(), f[0].op.as_str(), f[0].ran_on.as_str()),
            ("layers.0/Attention_node_4", "Attention", "CPUExecutionProvider")
        );
        assert_eq!(f[0].outputs, ["float16 [1,3,64]", "float16 [1,2,3,16]"]);
        // On the CPU's own sessions nothing is off its provider.
        assert_eq!(off_provider(profile, "CPUExecutionProvider").unwrap().1.len(), 1, "the MatMul ran on CUDA");
        assert!(off_provider("{}", "CUDAExecutionProvider").unwrap_err().contains("not a profile"));
    }
}
