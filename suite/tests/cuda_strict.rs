//! A CUDA trial never runs quietly on the CPU: asked for and unavailable, it fails with ONNX Runtime's own message,
//! as the device's failure (`device`), never the package's (`refused`); not asked for, it skips and says why.

use mobius_conformance::error::Error;
use mobius_conformance::level;
use mobius_conformance::outcome::{FailureKind, Outcome};
use mobius_conformance::paths::workspace_root;
use mobius_conformance::run::runtime::{self, Provider, provider_for};
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
        Err(e) => e,
    };
    assert!(e.is_device() && !e.is_refusal(), "a provider that will not register is the device's failure: {e:?}");
    let outcome = Outcome::from_error("qwen3-tiny/text/default/f32/L4", &e);
    assert_eq!(outcome.failure.as_ref().map(|f| f.kind), Some(FailureKind::Device), "{}", outcome.message);
    let e = e.to_string();
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

#[test]
fn the_device_probe_is_a_model_the_cpu_runs_and_cuda_here_does_not() {
    // The one-node model that tells a device that does not start from a package ONNX Runtime refuses.
    assert_eq!(runtime::probe(Provider::Cpu), Ok(()));
    let e = runtime::probe(Provider::Cuda { id: 0 }).expect_err("this process's ONNX Runtime has no CUDA provider");
    assert!(e.contains("registering the CUDA execution provider"), "{e}");
}

#[test]
fn no_level_lets_an_xfail_absorb_a_device_that_did_not_start() {
    for k in level::ALL {
        assert!(!k.failures().contains(&FailureKind::Device), "{}: a device failure is the machine's, never expected", k.level());
    }
    // A refusal stays the package's.
    let refused = Outcome::from_error("t", &Error::refused("invalid graph"));
    assert_eq!(refused.failure.map(|f| f.kind), Some(FailureKind::Refused));
    assert_eq!(Outcome::from_error("t", &Error::new("bad yaml")).failure, None);
}
