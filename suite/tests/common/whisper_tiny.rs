//! The tiny Whisper fixture's default-f32 package, decoded by the suite's own runtime: its decoder, the encoder
//! states of its stored clip, and its generation config's suppressed tokens.

use std::path::{Path, PathBuf};

use mobius_conformance::feed::inputs::Inputs;
use mobius_conformance::feed::package::GenaiConfig;
use mobius_conformance::paths::workspace_root;
use mobius_conformance::run::decoder::Decoder;
use mobius_conformance::run::encoder_session::Features;
use mobius_conformance::run::generate::Suppress;
use mobius_conformance::run::pipeline::encoder_decoder;
use mobius_conformance::run::runtime::Provider;
use mobius_conformance::run::sessions;

pub const SOT: i64 = 513;
pub const NOTIMESTAMPS: i64 = 515;
/// The forced prefix: start of transcript, no timestamps.
pub const PROMPT: [i64; 2] = [SOT, NOTIMESTAMPS];
/// The tokens a test decodes.
pub const BUDGET: usize = 16;

pub fn package() -> PathBuf {
    workspace_root().join("fixtures/whisper-tiny/onnx/default-f32")
}

pub fn decoder(pkg: &Path) -> std::sync::Arc<Decoder> {
    sessions::decoder(&pkg.join("decoder/model.onnx"), Provider::Cpu).unwrap()
}

/// The encoder states of the fixture's stored clip, from the package's own encoder.
pub fn states(pkg: &Path) -> Features {
    let file = workspace_root().join("goldens/speech-to-text/whisper-tiny.inputs.safetensors");
    let inputs = Inputs::from_safetensors("whisper-tiny.inputs.safetensors", &std::fs::read(file).unwrap()).unwrap();
    let cfg = GenaiConfig::load(pkg).unwrap();
    encoder_decoder::encode(pkg, &cfg, &decoder(pkg), Provider::Cpu, &inputs, "inputs").unwrap()
}

/// The fixture's generation config: 512 is end of text and banned at the first step; 0-3, 513 and 514 always.
pub fn suppress() -> Suppress {
    Suppress { always: vec![0, 1, 2, 3, 513, 514], at_begin: vec![512] }
}
