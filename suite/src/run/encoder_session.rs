//! A package's sessions other than its decoder (embedding, vision, audio or speech encoder): run once per input,
//! every input checked against what the model declares before ONNX Runtime sees it, outputs handed back whole; an
//! encoder's output kept on the host as [`Features`].

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ort::session::{Session, SessionInputValue};
use ort::value::{DynValue, Outlet, TensorElementType};

use crate::error::{Error, Result, bail};
use crate::run::runtime::{self, Provider, ort_err};
use crate::run::timing::timed;

/// An encoder's output, kept on the host: fed to the embedding session or the decoder, compared with the
/// reference's.
#[derive(Debug, Clone, PartialEq)]
pub struct Features {
    pub shape: Vec<i64>,
    pub data: Vec<f32>,
}

impl Features {
    /// An encoder output as f32 (a half-precision build's, widened exactly).
    pub fn from_value(v: &DynValue, what: &str) -> Result<Features> {
        let err = |e: ort::Error| Error::new(format!("{what}: {e}"));
        if let Ok((shape, data)) = v.try_extract_tensor::<half::f16>() {
            return Ok(Features { shape: shape.to_vec(), data: data.iter().map(|x| x.to_f32()).collect() });
        }
        if let Ok((shape, data)) = v.try_extract_tensor::<half::bf16>() {
            return Ok(Features { shape: shape.to_vec(), data: data.iter().map(|x| x.to_f32()).collect() });
        }
        let (shape, data) = v.try_extract_tensor::<f32>().map_err(err)?;
        Ok(Features { shape: shape.to_vec(), data: data.to_vec() })
    }

    /// The same shape, all zeros: the features of media that carry no information.
    pub fn zeroed(&self) -> Features {
        Features { shape: self.shape.clone(), data: vec![0.0; self.data.len()] }
    }
}

/// A session input or output as the model declares it (-1 for a dynamic dimension).
#[derive(Debug, Clone, PartialEq)]
pub struct Port {
    pub name: String,
    pub ty: Option<TensorElementType>,
    pub shape: Vec<i64>,
}

/// A non-decoder session: run once per input, outputs handed back whole.
pub struct Encoder {
    session: Mutex<Session>,
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
    pub model: PathBuf,
    pub provider: Provider,
}

impl Encoder {
    /// A new session of `model` (shared ones come from [`crate::run::sessions::encoder`]).
    pub(super) fn load(model: &Path, provider: Provider) -> Result<Encoder> {
        Encoder::with_session(runtime::create_session(model, provider)?, model, provider)
    }

    /// A session of an in-memory copy of `model` with `values` added to its outputs (`level::localize`; the package
    /// is never written).
    pub fn exposing(model: &Path, bytes: &[u8], provider: Provider, values: &[&str]) -> Result<Encoder> {
        Encoder::with_session(crate::run::decoder::exposed::exposed_session(model, bytes, values, provider)?, model, provider)
    }

    fn with_session(session: Session, model: &Path, provider: Provider) -> Result<Encoder> {
        let ports = |outlets: &[Outlet]| -> Vec<Port> {
            outlets
                .iter()
                .map(|o| Port {
                    name: o.name().to_string(),
                    ty: o.dtype().tensor_type(),
                    shape: o.dtype().tensor_shape().map(|s| s.to_vec()).unwrap_or_default(),
                })
                .collect()
        };
        let (inputs, outputs) = (ports(session.inputs()), ports(session.outputs()));
        Ok(Encoder { session: Mutex::new(session), inputs, outputs, model: model.to_path_buf(), provider })
    }

    pub fn input(&self, name: &str) -> Result<&Port> {
        self.inputs.iter().find(|p| p.name == name).ok_or_else(|| {
            let have: Vec<&str> = self.inputs.iter().map(|p| p.name.as_str()).collect();
            Error::new(format!("{}: no input `{name}` (inputs: {})", self.model.display(), have.join(", ")))
        })
    }

    /// Runs with `feeds` (checked against the declared inputs: every input fed, element types equal, static
    /// dimensions equal) and returns the named outputs.
    pub fn run(&self, feeds: Vec<(String, SessionInputValue<'_>)>, outputs: &[&str]) -> Result<Vec<DynValue>> {
        let model = self.model.display();
        for port in &self.inputs {
            let Some((_, v)) = feeds.iter().find(|(n, _)| *n == port.name) else {
                bail!("{model}: input `{}` was not fed", port.name);
            };
            let (ty, shape) = (v.dtype().tensor_type(), v.dtype().tensor_shape().map(|s| s.to_vec()).unwrap_or_default());
            let dims_ok = shape.len() == port.shape.len() && shape.iter().zip(&port.shape).all(|(&g, &w)| w < 0 || g == w);
            if ty != port.ty || !dims_ok {
                bail!("{model}: input `{}` is {ty:?} {shape:?}, but the model declares {:?} {:?}", port.name, port.ty, port.shape);
            }
        }
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = timed(|| session.run(feeds)).map_err(ort_err(format!("{model}: run on {}", self.provider)))?;
        outputs.iter().map(|&n| out.remove(n).ok_or_else(|| Error::new(format!("{model}: no output `{n}`")))).collect()
    }
}
