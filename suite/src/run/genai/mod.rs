//! onnxruntime-genai, the runtime these packages ship for, bound through its C API and loaded at run time.
//!
//! The library is `onnxruntime_genai/libonnxruntime-genai.so` from the PyPI wheel `onnxruntime-genai==0.18.0`, found
//! the way ONNX Runtime is ([`crate::run::bootstrap`]): `GENAI_DYLIB_PATH`, else the cache under `target/`, else installed
//! there once with `pip --require-hashes` from `suite/locks/onnxruntime-genai-0.18.0.txt`, under a file lock and an
//! atomic rename. genai has no ONNX Runtime of its own: it binds to the one already loaded in the process (it looks
//! for `libonnxruntime.so.1` with `RTLD_NOLOAD` first), so the suite loads its pinned ONNX Runtime before genai.
//!
//! Only what a greedy run needs is bound: config (to choose the execution provider), model, generator params,
//! generator, append tokens, next token, logits, the sequence, errors and the destroyers. Every call that can fail
//! returns genai's own message.
//!
//! The library is found and loaded by `library` once [`version`] (the pin) accepts it, its functions bound and its
//! errors read by [`api`]; a [`Model`] here loads a package and runs the greedy generator; [`processor`] runs genai's
//! multimodal processor.

pub mod api;
pub mod library;
pub mod processor;
pub mod version;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result, bail};
use crate::run::runtime::{self, Provider};
use api::{Api, ELEMENT_F32, OgaConfig, OgaGenerator, OgaModel, Owned, Refusal, cstring};
use library::api;

/// Time spent inside onnxruntime-genai by this process (loading models, generating), all threads together.
static GENAI_NANOS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Seconds this process has spent inside onnxruntime-genai so far (summed over threads; its own ONNX Runtime
/// sessions included, which [`crate::run::timing::run_seconds`] does not count).
pub fn run_seconds() -> f64 {
    GENAI_NANOS.load(std::sync::atomic::Ordering::Relaxed) as f64 * 1e-9
}

/// Adds the time until it is dropped to [`GENAI_NANOS`].
struct Inside(std::time::Instant);

impl Inside {
    fn start() -> Inside {
        Inside(std::time::Instant::now())
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        GENAI_NANOS.fetch_add(self.0.elapsed().as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What a greedy genai run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The prompt's last-position logits, as genai computed them after appending the prompt.
    pub prefill_logits: Vec<f32>,
    /// The generated tokens (the prompt excluded), up to the length limit or to the EOS genai stopped at, included
    /// as the suite's own runner and the goldens include it.
    pub tokens: Vec<i64>,
    /// The library that ran.
    pub library: PathBuf,
}

/// A package loaded in onnxruntime-genai, ready to generate (kept warm across runs by a caller that times them).
pub struct Model {
    api: &'static Api,
    model: Owned<OgaModel>,
    _config: Owned<OgaConfig>,
}

impl Model {
    /// Loads `package` (a folder with `genai_config.json`) on `provider`. Errors carry genai's own message: a package
    /// genai refuses fails here.
    pub fn load(package: &Path, provider: Provider) -> Result<Model> {
        Model::open(package, provider)?.map_err(|r| Error::new(r.message))
    }

    /// [`Model::load`], telling genai's refusal of the package (its config or model) from a failure to reach genai
    /// at all (the library, a path it cannot take), which stays an error.
    pub fn open(package: &Path, provider: Provider) -> Result<std::result::Result<Model, Refusal>> {
        let api = api()?;
        // After the library is bound: installing and loading it is not genai's running time.
        let _t = Inside::start();
        let dir = cstring(&package.to_string_lossy(), "the package path")?;
        let refused = |e: Error| Refusal { message: e.to_string() };
        // SAFETY: out-pointers to locals, a CString alive across the calls; the objects are owned on return.
        let model = unsafe {
            || -> Result<Model> {
                let mut config = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_config };
                api.call("reading genai_config.json", || (api.create_config)(dir.as_ptr(), &mut config.ptr))?;
                api.call("choosing the execution provider", || (api.config_clear_providers)(config.ptr))?;
                if let Provider::Cuda { id } = provider {
                    api.call("choosing the CUDA execution provider", || (api.config_append_provider)(config.ptr, c"cuda".as_ptr()))?;
                    // As the suite's own sessions: the run's device, and TF32 off (ONNX Runtime's CUDA default is on).
                    let id = cstring(&id.to_string(), "the device id")?;
                    let option = |key: &std::ffi::CStr, value: &std::ffi::CStr, what: &'static str| {
                        api.call(what, || (api.config_set_provider_option)(config.ptr, c"cuda".as_ptr(), key.as_ptr(), value.as_ptr()))
                    };
                    option(c"device_id", &id, "setting the CUDA device")?;
                    option(c"use_tf32", c"0", "turning TF32 off")?;
                }
                let mut model = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_model };
                api.call("loading the model", || (api.create_model_from_config)(config.ptr, &mut model.ptr))?;
                Ok(Model { api, model, _config: config })
            }()
        };
        match (model, provider) {
            // A CUDA device that does not start is the machine's failure, not a package genai refuses.
            (Err(e), Provider::Cuda { id }) => match runtime::device_starts(id) {
                Err(why) => Err(Error::device(format!("{e}; CUDA device {id} does not run a one-node model either: {why}"))),
                Ok(()) => Ok(Err(refused(e))),
            },
            (model, _) => Ok(model.map_err(refused)),
        }
    }

    /// Appends `ids` and generates up to `max_new` tokens greedily.
    pub fn greedy(&self, ids: &[i64], max_new: usize) -> Result<Run> {
        let _t = Inside::start();
        let api = self.api;
        let ids32: Vec<i32> = ids
            .iter()
            .map(|&i| i32::try_from(i).map_err(|_| Error::new(format!("token id {i} does not fit genai's int32 ids"))))
            .collect::<Result<_>>()?;
        // SAFETY: every pointer passed is a live genai object owned by an `Owned` here or by `self`, a C string
        // literal, or an out-pointer to a local; objects are destroyed in reverse order of creation.
        unsafe {
            let mut params = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_generator_params };
            api.call("creating generator params", || (api.create_generator_params)(self.model.ptr, &mut params.ptr))?;
            let max_length = (ids.len() + max_new) as f64;
            api.call("setting max_length", || (api.params_set_search_number)(params.ptr, c"max_length".as_ptr(), max_length))?;
            api.call("setting greedy search", || (api.params_set_search_bool)(params.ptr, c"do_sample".as_ptr(), false))?;
            let mut generator = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_generator };
            api.call("creating the generator", || (api.create_generator)(self.model.ptr, params.ptr, &mut generator.ptr))?;
            api.call("running the prompt", || (api.append_tokens)(generator.ptr, ids32.as_ptr(), ids32.len()))?;
            let prefill_logits = logits(api, generator.ptr)?;
            // The token each step chooses is the argmax of the logits it reads (greedy, no processors): kept so that
            // the EOS genai stops at, which it does not store in the sequence, is still seen.
            let mut chosen = Vec::with_capacity(max_new);
            let mut step_logits = None;
            while !(api.is_done)(generator.ptr) {
                let l = match step_logits.take() {
                    None => logits(api, generator.ptr)?,
                    Some(l) => l,
                };
                chosen.push(mobius_numeric::argmax(&l) as i64);
                api.call("generating the next token", || (api.generate_next_token)(generator.ptr))?;
                if !(api.is_done)(generator.ptr) {
                    step_logits = Some(logits(api, generator.ptr)?);
                }
            }
            let n = (api.sequence_count)(generator.ptr, 0);
            let data = (api.sequence_data)(generator.ptr, 0);
            if data.is_null() || n < ids.len() {
                bail!("onnxruntime-genai returned a sequence of {n} tokens for a {}-token prompt", ids.len());
            }
            let mut tokens: Vec<i64> = std::slice::from_raw_parts(data, n)[ids.len()..].iter().map(|&t| t as i64).collect();
            if chosen.len() == tokens.len() + 1 && chosen[..tokens.len()] == tokens[..] {
                tokens.push(chosen[tokens.len()]);
            }
            Ok(Run { prefill_logits, tokens, library: api.path.clone() })
        }
    }
}

/// The generator's current last-position logits, copied out ([batch = 1, (1,) vocab] float32).
unsafe fn logits(api: &Api, generator: *mut OgaGenerator) -> Result<Vec<f32>> {
    // SAFETY: `generator` is live; the tensor is owned below and destroyed after its data is copied.
    unsafe {
        let mut t = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_tensor };
        api.call("reading the logits", || (api.get_logits)(generator, &mut t.ptr))?;
        let mut ty = 0i32;
        api.call("reading the logits' type", || (api.tensor_type)(t.ptr, &mut ty))?;
        if ty != ELEMENT_F32 {
            bail!("onnxruntime-genai returned logits of element type {ty}, expected float32 ({ELEMENT_F32})");
        }
        let mut rank = 0usize;
        api.call("reading the logits' rank", || (api.tensor_rank)(t.ptr, &mut rank))?;
        let mut shape = vec![0i64; rank];
        api.call("reading the logits' shape", || (api.tensor_shape)(t.ptr, shape.as_mut_ptr(), rank))?;
        let count: i64 = shape.iter().product();
        if shape.first().copied().unwrap_or(0) != 1 || count <= 0 {
            bail!("onnxruntime-genai returned logits of shape {shape:?}, expected [1, vocab] or [1, 1, vocab]");
        }
        let mut data = std::ptr::null_mut();
        api.call("reading the logits' data", || (api.tensor_data)(t.ptr, &mut data))?;
        if data.is_null() {
            bail!("onnxruntime-genai returned logits with no data");
        }
        let vocab = *shape.last().unwrap_or(&0) as usize;
        let all = std::slice::from_raw_parts(data as *const f32, count as usize);
        Ok(all[all.len() - vocab..].to_vec())
    }
}
