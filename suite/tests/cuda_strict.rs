//! A CUDA trial never runs quietly on the CPU: asked for and unavailable, it fails with ONNX Runtime's own message;
//! not asked for, it skips and says why.

use mobius_conformance::paths::workspace_root;
use mobius_conformance::run::runtime::{Provider, provider_for};
use mobius_conformance::run::sessions;
use mobius_conformance::vocab::Device;
use mobius_conformance::vocab::Ep;

#[test]
fn cuda_requested_but_unavailable_fails_with_the_runtime_message() {
    let model = workspace_root().join("fixtures/qwen3-tiny/onnx/default-f32/model.onnx");
    // This process's ONNX Runtime is the CPU build (no run context configured another), which has no CUDA provider:
    // registration must fail loudly instead of falling back to the CPU.
    sessions::decoder(&model, Provider::Cpu).expect("the CPU session loads");
    let e = match sessions::decoder(&model, Provider::Cuda { id: 0 }) {
        Ok(d) => panic!("a CUDA session was created on a machine without CUDA (provider {})", d.provider),
        Err(e) => e.to_string(),
    };
    // e.g. "...model.onnx: registering the CUDA execution provider: CUDA execution provider is not enabled in this build."
    assert!(e.contains("registering the CUDA execution provider: "), "{e}");
    assert!(e.contains("model.onnx"), "the message names the model: {e}");
}

#[test]
fn variants_map_to_providers_and_never_run_cuda_on_the_cpu() {
    assert_eq!(provider_for(Ep::Cpu, Device::Cpu), Ok(Provider::Cpu));
    assert_eq!(provider_for(Ep::Default, Device::Cpu), Ok(Provider::Cpu));
    assert_eq!(provider_for(Ep::Default, Device::Cuda { id: 1 }), Ok(Provider::Cuda { id: 1 }));
    assert_eq!(provider_for(Ep::Cuda, Device::Cuda { id: 0 }), Ok(Provider::Cuda { id: 0 }));
    assert_eq!(provider_for(Ep::Cpu, Device::Cuda { id: 0 }), Ok(Provider::Cpu), "cpu builds stay on the CPU EP");
    let skip = provider_for(Ep::Cuda, Device::Cpu).unwrap_err();
    assert!(skip.contains("MOBIUS_TEST_DEVICE=cuda"), "{skip}");
    assert_eq!(Device::parse("cuda:2"), Some(Device::Cuda { id: 2 }));
    assert_eq!(Device::parse("CPU"), Some(Device::Cpu));
    assert_eq!(Device::parse("tpu"), None);
}
