//! What crosses between the host and the device a decoder session computes on, in one place. A host value a session
//! is handed goes to the device through [`bind_host`] (or [`to_device`], once, when it stays there for several
//! calls); the session's outputs are bound to its device ([`device_memory`]), so the KV cache and the logits stay
//! where they were computed; and what the suite reads comes back through [`last_rows`] (only the rows a verdict
//! needs) or [`to_host`] (a whole value, where the verdict needs all of it).
//!
//! On the CPU the device is the host: nothing is copied and every value is read in place, but the calls are the
//! same. So [`recorded`] lists the crossings a run makes as a device run would make them, on any provider, and a test
//! on the CPU checks what a GPU run moves per call (`suite/tests/crossings.rs`).

use std::cell::RefCell;
use std::sync::Mutex;

use ort::memory::{AllocationDevice, AllocatorType, MemoryInfo, MemoryType};
use ort::session::{IoBinding, Session};
use ort::value::{DynTensorValueType, DynValue, Tensor, TensorElementType, Value, ValueTypeMarker};

use crate::run::runtime::{self, Provider};

/// Which way a value crosses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    ToDevice,
    ToHost,
}

/// One value's crossing: its name (the session's input or output, or what the suite calls it) and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crossing {
    pub way: Way,
    pub name: String,
    pub bytes: usize,
}

/// A value where the host reads it: the value itself, or a host copy of (part of) it.
pub enum OnHost<'v> {
    There(&'v DynValue),
    Copied(DynValue),
}

impl std::ops::Deref for OnHost<'_> {
    type Target = DynValue;
    fn deref(&self) -> &DynValue {
        match self {
            OnHost::There(v) => v,
            OnHost::Copied(v) => v,
        }
    }
}

thread_local! {
    /// The crossings of the innermost [`recorded`] call on this thread (a session runs on its caller's thread).
    static LOG: RefCell<Option<Vec<Crossing>>> = const { RefCell::new(None) };
}

/// Runs `f` and returns, with its result, every crossing it made, in order, as a device run makes them.
pub fn recorded<R>(f: impl FnOnce() -> R) -> (R, Vec<Crossing>) {
    /// Puts the outer recording back however `f` ends (a panic included).
    struct Restore(Option<Option<Vec<Crossing>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(outer) = self.0.take() {
                LOG.with(|l| l.replace(outer));
            }
        }
    }
    let mut restore = Restore(Some(LOG.with(|l| l.replace(Some(Vec::new())))));
    let r = f();
    let outer = restore.0.take().expect("restored once");
    let mine = LOG.with(|l| l.replace(outer)).unwrap_or_default();
    LOG.with(|l| {
        if let Some(outer) = l.borrow_mut().as_mut() {
            outer.extend(mine.iter().cloned());
        }
    });
    (r, mine)
}

fn note(way: Way, name: &str, bytes: usize) {
    if bytes == 0 {
        return;
    }
    LOG.with(|l| {
        if let Some(log) = l.borrow_mut().as_mut() {
            log.push(Crossing { way, name: name.to_string(), bytes });
        }
    });
}

/// The memory a provider's session computes in: where its outputs are bound and its cache is kept.
pub fn device_memory(provider: Provider) -> Result<MemoryInfo<'static>, ort::Error> {
    match provider {
        Provider::Cpu => host_memory(),
        Provider::Cuda { id } => MemoryInfo::new(AllocationDevice::CUDA, id, AllocatorType::Device, MemoryType::Default),
    }
}

/// The host's memory.
pub fn host_memory() -> Result<MemoryInfo<'static>, ort::Error> {
    MemoryInfo::new(AllocationDevice::CPU, 0, AllocatorType::Device, MemoryType::Default)
}

/// Whether `v` lives where the host reads it; a value that is no tensor counts as the host's.
fn on_host_already(v: &DynValue) -> bool {
    v.view().downcast::<DynTensorValueType>().map_or(true, |t| t.memory_info().is_cpu_accessible())
}

fn bytes(v: &DynValue) -> usize {
    v.view().downcast::<DynTensorValueType>().ok().and_then(|t| t.size()).unwrap_or(0)
}

/// Binds the host value `value` as the input `name`: ONNX Runtime copies it to the session's device now, when it is
/// bound (so a value written after binding is never seen there).
pub fn bind_host<T: ValueTypeMarker + ?Sized>(binding: &mut IoBinding, name: &str, value: &Value<T>) -> Result<(), ort::Error> {
    note(Way::ToDevice, name, bytes(&value.view().into_dyn()));
    binding.bind_input(name, value)
}

/// `value` (a host value) where `memory` is, for a value bound to several calls: copied there once (on the CPU, the
/// value itself).
pub fn to_device(value: DynValue, memory: &MemoryInfo<'_>, name: &str) -> Result<DynValue, ort::Error> {
    note(Way::ToDevice, name, bytes(&value));
    if memory.is_cpu_accessible() {
        return Ok(value);
    }
    let tensor = value.view().downcast::<DynTensorValueType>()?;
    Ok(tensor.to(memory.allocation_device(), memory.device_id())?.into_dyn())
}

/// The whole of `v` where the host reads it: itself when it is in host memory, else one copy of it.
pub fn to_host<'v>(v: &'v DynValue, name: &str) -> Result<OnHost<'v>, ort::Error> {
    note(Way::ToHost, name, bytes(v));
    if on_host_already(v) {
        return Ok(OnHost::There(v));
    }
    let tensor = v.view().downcast::<DynTensorValueType>()?;
    Ok(OnHost::Copied(tensor.to(AllocationDevice::CPU, 0)?.into_dyn()))
}

/// The last `rows` rows of a `[1, t, width]` tensor where the host reads them, and how many rows the result has: the
/// tensor itself (`t` rows; its last rows are read in place) when it is in host memory, else a `[1, rows, width]` copy
/// of only those rows, made by one copy from the device.
pub fn last_rows<'v>(v: &'v DynValue, name: &str, rows: usize) -> Result<(OnHost<'v>, usize), ort::Error> {
    let tensor = v.view().downcast::<DynTensorValueType>()?;
    let &[1, t, width] = &tensor.shape()[..] else {
        return Err(ort::Error::new(format!("`{name}` has shape {:?}, expected [1, positions, width]", tensor.shape().to_vec())));
    };
    let rows = rows.min(t.max(0) as usize);
    let elem = tensor.data_type().byte_size(1).unwrap_or(0);
    note(Way::ToHost, name, rows * width.max(0) as usize * elem);
    if tensor.memory_info().is_cpu_accessible() {
        return Ok((OnHost::There(v), t as usize));
    }
    Ok((OnHost::Copied(copy_last_rows(v, rows)?), rows))
}

/// A host copy of the last `rows` rows of the float tensor `v` (`[1, t, width]`, on any device): ONNX Runtime gathers
/// those rows where `v` lives ([`gather_model`], a session of its own on `v`'s device) and copies only them to the
/// host. [`last_rows`] makes it for a device's tensor; on a host tensor it runs the same way, which is how a test on
/// the CPU checks it. (Not a view of the rows copied with `ort`'s `Tensor::to`: `ort` 2.0.0-rc.15 deadlocks copying
/// a tensor made over borrowed memory, in `IoBinding::bind_input`'s clone inside its own copy session's lock.)
pub fn copy_last_rows(v: &DynValue, rows: usize) -> Result<DynValue, ort::Error> {
    let tensor = v.view().downcast::<DynTensorValueType>()?;
    let &[1, t, _] = &tensor.shape()[..] else {
        return Err(ort::Error::new(format!("shape {:?}, expected [1, positions, width]", tensor.shape().to_vec())));
    };
    if rows > t.max(0) as usize {
        return Err(ort::Error::new(format!("{rows} rows asked of a tensor of {t}")));
    }
    let element = match tensor.data_type() {
        TensorElementType::Float32 => 1u8,
        TensorElementType::Float16 => 10,
        TensorElementType::Bfloat16 => 16,
        other => return Err(ort::Error::new(format!("a tensor of {other:?}; only float rows are copied"))),
    };
    let memory = tensor.memory_info();
    let provider = if memory.is_cpu_accessible() { Provider::Cpu } else { Provider::Cuda { id: memory.device_id() } };
    static GATHERS: Mutex<Vec<((Provider, u8), Session)>> = Mutex::new(Vec::new());
    let mut sessions = GATHERS.lock().unwrap_or_else(|p| p.into_inner());
    let at = match sessions.iter().position(|(k, _)| *k == (provider, element)) {
        Some(i) => i,
        None => {
            let session = runtime::own_session(&gather_model(element), provider).map_err(ort::Error::new)?;
            sessions.push(((provider, element), session));
            sessions.len() - 1
        }
    };
    let session = &mut sessions[at].1;
    let which = Tensor::<i64>::from_array(([rows], (t - rows as i64..t).collect::<Vec<i64>>()))?;
    let mut binding = session.create_binding()?;
    binding.bind_input("x", v)?;
    binding.bind_input("i", &which)?;
    binding.bind_output_to_device("y", &host_memory()?)?;
    let mut out = session.run_binding(&binding)?;
    out.remove("y").ok_or_else(|| ort::Error::new("the row gather returned no `y`"))
}

/// `y = Gather(x, i, axis = 1)`, `x` and `y` of the float type `element` (ONNX's code: 1 float32, 10 float16, 16
/// bfloat16) and `i` int64, shapes unstated, opset 13: onnx.proto's ModelProto written out field by field, as
/// `runtime::PROBE` is.
#[rustfmt::skip]
fn gather_model(element: u8) -> Vec<u8> {
    let value = |name: u8, ty: u8| [0x0a, 1, name, 0x12, 4, 0x0a, 2, 0x08, ty];
    let mut graph = vec![
        0x0a, 30, // node:
            0x0a, 1, b'x', 0x0a, 1, b'i', // input: "x", "i"
            0x12, 1, b'y', // output: "y"
            0x22, 6, b'G', b'a', b't', b'h', b'e', b'r', // op_type: "Gather"
            0x2a, 11, 0x0a, 4, b'a', b'x', b'i', b's', 0x18, 1, 0xa0, 0x01, 2, // attribute: axis, i: 1, type: INT
    ];
    graph.extend([0x5a, 9]); // input: x
    graph.extend(value(b'x', element));
    graph.extend([0x5a, 9]); // input: i
    graph.extend(value(b'i', 7));
    graph.extend([0x62, 9]); // output: y
    graph.extend(value(b'y', element));
    let mut model = vec![0x08, 8, 0x3a, graph.len() as u8]; // ir_version: 8, graph:
    model.extend(graph);
    model.extend([0x42, 2, 0x10, 13]); // opset_import: { version: 13 }
    model
}
