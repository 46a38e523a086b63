//! The decoder with some of its graph's inner values as outputs, for `level::localize`: a session of an in-memory
//! copy of the package's model (`onnx_bytes::with_outputs`; its external data read where the package keeps it, the
//! package never written), run once over a prompt, each exposed value read at the last prompt position.

use std::path::Path;

use ort::session::SessionOutputs;
use ort::value::DynValue;

use crate::error::{Error, Result};
use crate::run::decoder::{Decoder, StepInput};
use crate::run::encoder_session::Features;
use crate::run::runtime::{self, Provider};

impl Decoder {
    /// A session of `model` (its file's `bytes`, as the caller read them) with `values` added to its outputs.
    pub fn exposing(model: &Path, bytes: &[u8], provider: Provider, values: &[&str]) -> Result<Decoder> {
        Decoder::with_session(exposed_session(model, bytes, values, provider)?, model, provider)
    }

    /// A prefill of `input` from an empty cache: each of `values` at the last prompt position, as float32, or why it
    /// cannot be read there (another element type, a shape without the prompt's positions). A value the decoder is
    /// fed (a multimodal decoder's `inputs_embeds`) is read from what it is fed.
    pub fn prefill_exposed(
        &self,
        input: StepInput,
        context: Option<&Features>,
        values: &[&str],
    ) -> Result<Vec<std::result::Result<Vec<f32>, String>>> {
        let positions = input.len();
        let names = &self.io.names;
        let fed: Vec<Option<std::result::Result<Vec<f32>, String>>> = values
            .iter()
            .map(|name| match &input {
                StepInput::Embeds { embeds, .. } if *name == names.inputs_embeds => Some(embeds),
                StepInput::Embeds { per_layer: Some(p), .. } if *name == names.per_layer_inputs => Some(p),
                _ => None,
            })
            .map(|v| v.map(|v| floats(v).and_then(|f| last_position(&f, positions))))
            .collect();
        let past = self.new_cache_with(context)?;
        let (read, _) = self.forward_outputs(input, &past, |outputs: &SessionOutputs<'_>| {
            Ok(values
                .iter()
                .zip(fed)
                .map(|(name, fed)| match (outputs.get(*name), fed) {
                    (_, Some(fed)) => fed,
                    (Some(v), None) => floats(v).and_then(|f| last_position(&f, positions)),
                    (None, None) => Err(format!("the session did not return `{name}`")),
                })
                .collect())
        })?;
        Ok(read)
    }
}

/// A session of an in-memory copy of `model` (its file's `bytes`) with `values` added to its outputs (those it is
/// fed are read from its inputs: an input is no node's output).
pub(crate) fn exposed_session(model: &Path, bytes: &[u8], values: &[&str], provider: Provider) -> Result<ort::session::Session> {
    let graph = onnx_bytes::Graph::parse(bytes).map_err(|e| Error::new(format!("{}: {e}", model.display())))?;
    let made: Vec<&str> = values.iter().copied().filter(|v| !graph.inputs.iter().any(|i| i == v)).collect();
    let edited = onnx_bytes::with_outputs(bytes, &made).map_err(|e| Error::new(format!("{}: exposing values: {e}", model.display())))?;
    let data = data_folder(model, &graph)?;
    runtime::create_session_of(model, Some((&edited, &data)), provider)
}

/// Where the model's external data files really are: ONNX Runtime reads an in-memory model's external data from a
/// folder it is told and refuses a path that leaves it, so a package whose data files are links (a scratch root's, a
/// cache's) is read from the folder they lead to, each file keeping its name there.
fn data_folder(model: &Path, graph: &onnx_bytes::Graph) -> Result<std::path::PathBuf> {
    let dir = model.parent().unwrap_or(Path::new("."));
    let mut folder: Option<std::path::PathBuf> = None;
    for t in &graph.initializers {
        let onnx_bytes::Data::External { location, .. } = &t.data else { continue };
        let real = std::fs::canonicalize(dir.join(location))
            .map_err(|e| Error::new(format!("{}: external data `{location}`: {e}", model.display())))?;
        let (Some(parent), true) = (real.parent(), real.file_name() == Path::new(location).file_name()) else {
            return Err(Error::new(format!("{}: external data `{location}` leads to {}, another name", model.display(), real.display())));
        };
        match &folder {
            Some(f) if f != parent => {
                return Err(Error::new(format!(
                    "{}: external data files lie in {} and {}",
                    model.display(),
                    f.display(),
                    parent.display()
                )));
            }
            _ => folder = Some(parent.to_path_buf()),
        }
    }
    Ok(folder.unwrap_or_else(|| dir.to_path_buf()))
}

/// A tensor's rows `rows`, one after another: of its `[1, rows, ...]` (an encoder's states, a tower's patches), or
/// of its `[rows, ...]` (a projector's output, padding dropped).
pub fn rows_at(v: &Features, rows: &[usize]) -> std::result::Result<Vec<f32>, String> {
    let dims: Vec<usize> = v.shape.iter().map(|&d| d.max(0) as usize).collect();
    let skip = match dims.as_slice() {
        [1, _, _, ..] => 1,
        [_, ..] => 0,
        [] => return Err("a scalar, not rows".into()),
    };
    let n = dims[skip];
    let row: usize = dims[skip + 1..].iter().product();
    let mut out = Vec::with_capacity(rows.len() * row);
    for &f in rows {
        if f >= n {
            return Err(format!("row {f} is past the value's {n} rows (shape {dims:?})"));
        }
        out.extend_from_slice(&v.data[f * row..(f + 1) * row]);
    }
    Ok(out)
}

/// A float tensor as float32 ([`Features::from_value`], the encoders' own reading; copied to the host first where it
/// is not there), or why it is not one.
pub fn floats(v: &DynValue) -> std::result::Result<Features, String> {
    let host = crate::run::crossing::to_host(v, "exposed value").map_err(|e| e.to_string())?;
    Features::from_value(&host, "").map_err(|_| format!("a value of type {:?}, not a float tensor", v.dtype()))
}

/// A tensor's last prompt position, flattened: `[1, positions, ...]` or `[positions, ...]`.
pub fn last_position(v: &Features, positions: usize) -> std::result::Result<Vec<f32>, String> {
    let dims: Vec<usize> = v.shape.iter().map(|&d| d.max(0) as usize).collect();
    let skip = match dims.as_slice() {
        [1, p, ..] if *p == positions => 2,
        [p, ..] if *p == positions => 1,
        _ => return Err(format!("shape {dims:?} has no axis of the prompt's {positions} positions where one is expected")),
    };
    let row: usize = dims[skip..].iter().product();
    Ok(v.data[(positions - 1) * row..positions * row].to_vec())
}
