//! Where ONNX Runtime ran each node, from its own profiler (`run::placement`): a session profiled on the CPU ran
//! every node there, and the same profile read as a CUDA session's names its floating-point nodes as off the device
//! while ONNX Runtime's integer shape arithmetic, placed on the CPU on purpose, is not counted. The check gpu-check
//! makes, shown able to fail where no GPU is.

use mobius_conformance::paths::workspace_root;
use mobius_conformance::run::placement;
use mobius_conformance::run::runtime::Provider;
use mobius_conformance::run::sessions;

#[test]
fn a_profiled_session_says_where_each_node_ran_and_only_floating_point_work_counts() {
    let dir = std::env::temp_dir().join(format!("mobius-placement-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    placement::start(Some(dir.clone()));
    let model = workspace_root().join("fixtures/qwen3-tiny/onnx/default-f32/model.onnx");
    {
        let decoder = sessions::decoder(&model, Provider::Cpu).unwrap();
        let pipeline = mobius_conformance::run::pipeline::Pipeline::Text;
        mobius_conformance::run::generate::prefill(&decoder, &pipeline, &[1, 2, 3, 4]).unwrap();
    }
    placement::start(None);
    // The profile is ONNX Runtime's to write when the session ends.
    assert!(placement::fallbacks().is_ok_and(|p| p.is_empty()), "CPU sessions are not checked against a device");
    let s = placement::profiled().into_iter().find(|s| s.model == model).expect("the session was profiled");
    let alive = placement::read(&s, "CPUExecutionProvider").unwrap_err().to_string();
    assert!(alive.contains("has not written it yet"), "{alive}");
    assert!(sessions::clear() >= 1);
    let on_cpu = placement::read(&s, "CPUExecutionProvider").unwrap();
    assert!(on_cpu.node_runs > 20 && on_cpu.fallbacks.is_empty(), "{on_cpu:?}");
    // Read as if it had asked for CUDA: its float work is off the device; its int64 shape nodes are not.
    let planted = placement::read(&s, "CUDAExecutionProvider").unwrap();
    let ops: Vec<&str> = planted.fallbacks.iter().map(|f| f.op.as_str()).collect();
    assert!(ops.contains(&"MatMul") && ops.contains(&"Attention"), "{ops:?}");
    assert!(!ops.contains(&"Shape"), "shape arithmetic is ONNX Runtime's CPU placement on purpose: {ops:?}");
    assert!(planted.fallbacks.iter().all(|f| f.outputs.iter().any(|o| o.starts_with("float"))), "{:?}", planted.fallbacks);
    let _ = std::fs::remove_dir_all(&dir);
}
