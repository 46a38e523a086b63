//! One ONNX model in memory with its external data files: read, written elsewhere, and where a tensor's bytes lie
//! in them. The patches themselves are in `tensor_patch` (a tensor's elements) and `node_patch` (a node's fields).

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::graph::{Graph, Node};
use crate::proto::{FLOAT, FLOAT16, INT64, UINT8};
use crate::tensor::{Data, Tensor};

/// One ONNX model and its external data files, in memory, to be patched and written elsewhere.
pub struct Model {
    /// Where it was read from, for messages.
    pub path: PathBuf,
    pub bytes: Vec<u8>,
    pub graph: Graph,
    /// External data files by location, as the model names them.
    pub data: BTreeMap<String, Vec<u8>>,
}

impl Model {
    pub fn read(path: &Path) -> Result<Model, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let graph = Graph::parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut data = BTreeMap::new();
        for t in &graph.initializers {
            if let Data::External { location, .. } = &t.data
                && !data.contains_key(location)
            {
                let plain = Path::new(location).components().all(|c| matches!(c, std::path::Component::Normal(_)));
                if !plain {
                    return Err(format!(
                        "{}: tensor `{}`: external data location {location:?} is not a plain relative path",
                        path.display(),
                        t.name
                    ));
                }
                let file = dir.join(location);
                let bytes =
                    std::fs::read(&file).map_err(|e| format!("{}: tensor `{}`: {}: {e}", path.display(), t.name, file.display()))?;
                data.insert(location.clone(), bytes);
            }
        }
        Ok(Model { path: path.to_path_buf(), bytes, graph, data })
    }

    /// Writes the model file and its external data files into `dir`, under their own names.
    pub fn write(&self, dir: &Path) -> Result<(), String> {
        let name = self.path.file_name().ok_or_else(|| format!("{}: no file name", self.path.display()))?;
        let write = |p: PathBuf, b: &[u8]| std::fs::write(&p, b).map_err(|e| format!("{}: {e}", p.display()));
        write(dir.join(name), &self.bytes)?;
        for (location, bytes) in &self.data {
            write(dir.join(location), bytes)?;
        }
        Ok(())
    }

    pub(crate) fn err(&self, what: impl std::fmt::Display) -> String {
        format!("{}: {what}", self.path.display())
    }

    /// The tensor behind a value name (an initializer or a Constant's value).
    pub fn tensor(&self, value: &str) -> Result<Tensor, String> {
        self.graph.constant(value).cloned().ok_or_else(|| self.err(format!("no initializer or Constant named `{value}`")))
    }

    /// Where a tensor's bytes lie: which buffer (None: the model file) and the range in it.
    pub(crate) fn locate(&self, t: &Tensor) -> Result<(Option<String>, Range<usize>), String> {
        let width = match t.data_type {
            FLOAT => 4,
            INT64 => 8,
            FLOAT16 => 2,
            UINT8 => 1,
            other => {
                return Err(self
                    .err(format!("tensor `{}` has data type {other}; the mutants patch only float32, float16, uint8 and int64", t.name)));
            }
        };
        let want = t.elements() * width;
        let (buffer, range, len) = match &t.data {
            Data::Inline(r) => (None, r.clone(), self.bytes.len()),
            Data::External { location, offset, length } => {
                let len = self.data.get(location).map(Vec::len).ok_or_else(|| {
                    self.err(format!("tensor `{}`: external data file `{location}` was not read (only initializers' are)", t.name))
                })?;
                let end = offset.checked_add(length.unwrap_or(want)).unwrap_or(usize::MAX);
                (Some(location.clone()), *offset..end, len)
            }
            Data::Unpatchable(why) => return Err(self.err(format!("tensor `{}` is stored as {why}", t.name))),
        };
        if range.len() != want || range.end > len {
            return Err(self.err(format!(
                "tensor `{}` {:?}: its data is bytes {range:?} of {}, expected {want} bytes within {len}",
                t.name,
                t.dims,
                buffer.as_deref().unwrap_or("the model file")
            )));
        }
        Ok((buffer, range))
    }

    pub(crate) fn bytes_of(&self, t: &Tensor) -> Result<&[u8], String> {
        let (buffer, range) = self.locate(t)?;
        let buf = match buffer {
            None => &self.bytes,
            Some(b) => self.data.get(&b).ok_or_else(|| self.err(format!("tensor `{}`: `{b}` not read", t.name)))?,
        };
        Ok(&buf[range])
    }

    pub(crate) fn bytes_of_mut(&mut self, t: &Tensor) -> Result<&mut [u8], String> {
        let (buffer, range) = self.locate(t)?;
        let missing = self.err(format!("tensor `{}`: `{}` not read", t.name, buffer.as_deref().unwrap_or("")));
        let buf = match buffer {
            None => &mut self.bytes,
            Some(b) => self.data.get_mut(&b).ok_or(missing)?,
        };
        Ok(&mut buf[range])
    }

    pub(crate) fn node(&self, node: &str) -> Result<&Node, String> {
        self.graph.nodes.iter().find(|n| n.label() == node).ok_or_else(|| self.err(format!("no node named `{node}`")))
    }

    pub(crate) fn reparse(&mut self) -> Result<(), String> {
        self.graph = Graph::parse(&self.bytes).map_err(|e| self.err(e))?;
        Ok(())
    }
}
