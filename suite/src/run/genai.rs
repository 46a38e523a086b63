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

use std::ffi::{CStr, CString, c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::Library;

use crate::error::{Error, Result, bail};
use crate::run::bootstrap;
use crate::run::runtime::{self, Provider};

/// The onnxruntime-genai release the suite is pinned to.
pub const GENAI_VERSION: &str = "0.18.0";

/// The pinned requirement with the hash of every published wheel.
pub const LOCK: &str = include_str!("../../locks/onnxruntime-genai-0.18.0.txt");

#[repr(C)]
struct OgaResult(c_void);
#[repr(C)]
struct OgaConfig(c_void);
#[repr(C)]
struct OgaModel(c_void);
#[repr(C)]
struct OgaGeneratorParams(c_void);
#[repr(C)]
struct OgaGenerator(c_void);
#[repr(C)]
struct OgaTensor(c_void);
#[repr(C)]
struct OgaMultiModalProcessor(c_void);
#[repr(C)]
struct OgaStringArray(c_void);
#[repr(C)]
struct OgaImages(c_void);
#[repr(C)]
struct OgaAudios(c_void);
#[repr(C)]
struct OgaNamedTensors(c_void);

type Status = *mut OgaResult;

/// `OgaElementType_float32` in `ort_genai_c.h`.
const ELEMENT_F32: i32 = 1;
/// `OgaElementType_int32` and `OgaElementType_int64`.
const ELEMENT_I32: i32 = 6;
const ELEMENT_I64: i32 = 7;

/// The C functions, resolved once.
struct Api {
    result_get_error: unsafe extern "C" fn(*const OgaResult) -> *const c_char,
    destroy_result: unsafe extern "C" fn(Status),
    create_config: unsafe extern "C" fn(*const c_char, *mut *mut OgaConfig) -> Status,
    config_clear_providers: unsafe extern "C" fn(*mut OgaConfig) -> Status,
    config_append_provider: unsafe extern "C" fn(*mut OgaConfig, *const c_char) -> Status,
    destroy_config: unsafe extern "C" fn(*mut OgaConfig),
    create_model_from_config: unsafe extern "C" fn(*const OgaConfig, *mut *mut OgaModel) -> Status,
    destroy_model: unsafe extern "C" fn(*mut OgaModel),
    create_generator_params: unsafe extern "C" fn(*const OgaModel, *mut *mut OgaGeneratorParams) -> Status,
    params_set_search_number: unsafe extern "C" fn(*mut OgaGeneratorParams, *const c_char, f64) -> Status,
    params_set_search_bool: unsafe extern "C" fn(*mut OgaGeneratorParams, *const c_char, bool) -> Status,
    destroy_generator_params: unsafe extern "C" fn(*mut OgaGeneratorParams),
    create_generator: unsafe extern "C" fn(*const OgaModel, *const OgaGeneratorParams, *mut *mut OgaGenerator) -> Status,
    destroy_generator: unsafe extern "C" fn(*mut OgaGenerator),
    append_tokens: unsafe extern "C" fn(*mut OgaGenerator, *const i32, usize) -> Status,
    is_done: unsafe extern "C" fn(*mut OgaGenerator) -> bool,
    generate_next_token: unsafe extern "C" fn(*mut OgaGenerator) -> Status,
    get_logits: unsafe extern "C" fn(*mut OgaGenerator, *mut *mut OgaTensor) -> Status,
    sequence_count: unsafe extern "C" fn(*const OgaGenerator, usize) -> usize,
    sequence_data: unsafe extern "C" fn(*const OgaGenerator, usize) -> *const i32,
    tensor_type: unsafe extern "C" fn(*mut OgaTensor, *mut i32) -> Status,
    tensor_rank: unsafe extern "C" fn(*mut OgaTensor, *mut usize) -> Status,
    tensor_shape: unsafe extern "C" fn(*mut OgaTensor, *mut i64, usize) -> Status,
    tensor_data: unsafe extern "C" fn(*mut OgaTensor, *mut *mut c_void) -> Status,
    destroy_tensor: unsafe extern "C" fn(*mut OgaTensor),
    create_processor: unsafe extern "C" fn(*const OgaModel, *mut *mut OgaMultiModalProcessor) -> Status,
    destroy_processor: unsafe extern "C" fn(*mut OgaMultiModalProcessor),
    create_strings: unsafe extern "C" fn(*const *const c_char, usize, *mut *mut OgaStringArray) -> Status,
    destroy_strings: unsafe extern "C" fn(*mut OgaStringArray),
    load_images: unsafe extern "C" fn(*const OgaStringArray, *mut *mut OgaImages) -> Status,
    destroy_images: unsafe extern "C" fn(*mut OgaImages),
    load_audios: unsafe extern "C" fn(*const OgaStringArray, *mut *mut OgaAudios) -> Status,
    destroy_audios: unsafe extern "C" fn(*mut OgaAudios),
    process: unsafe extern "C" fn(
        *const OgaMultiModalProcessor,
        *const c_char,
        *const OgaImages,
        *const OgaAudios,
        *mut *mut OgaNamedTensors,
    ) -> Status,
    named_get: unsafe extern "C" fn(*mut OgaNamedTensors, *const c_char, *mut *mut OgaTensor) -> Status,
    destroy_named: unsafe extern "C" fn(*mut OgaNamedTensors),
    set_inputs: unsafe extern "C" fn(*mut OgaGenerator, *const OgaNamedTensors) -> Status,
    /// Keeps the library loaded for the life of the process (the function pointers point into it).
    _lib: Library,
    path: PathBuf,
}

static API: OnceLock<std::result::Result<Api, Error>> = OnceLock::new();

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

/// The prompt a processor is given, from the ids the Hugging Face processor made of it: every expanded media block
/// (`<begin> <soft> x n <end>`, a run of one repeated id between two others) back to its one placeholder (`<soft>`).
pub fn placeholder_ids(expanded: &[i64]) -> Vec<i64> {
    let mut out = Vec::with_capacity(expanded.len());
    let mut i = 0;
    while i < expanded.len() {
        let id = expanded[i];
        let run = expanded[i..].iter().take_while(|&&x| x == id).count();
        if run >= 2 && i > 0 && i + run < expanded.len() {
            // Drop the block's opening token (already pushed) and its closing one.
            out.pop();
            out.push(id);
            i += run + 1;
        } else {
            out.push(id);
            i += 1;
        }
    }
    out
}

/// Where the library is, installing the pinned wheel first if need be.
pub fn locate() -> Result<PathBuf> {
    let places = &runtime::settings().places;
    if let Some(p) = places.genai_library.clone() {
        if !p.is_file() {
            bail!("GENAI_DYLIB_PATH is {}, which is not a file; point it at libonnxruntime-genai.so or unset it", p.display());
        }
        return Ok(p);
    }
    let cache = bootstrap::target_dir(places).join("onnxruntime-genai").join(format!("onnxruntime-genai-{GENAI_VERSION}"));
    let found = |tree: &Path| Some(library_in(tree)).filter(|p| p.is_file());
    if let Some(lib) = found(&cache) {
        return Ok(lib);
    }
    bootstrap::install_once(&format!("onnxruntime-genai=={GENAI_VERSION}"), LOCK, &cache, |c| found(c).is_some(), places)?;
    found(&cache).ok_or_else(|| {
        Error::new(format!(
            "installed onnxruntime-genai=={GENAI_VERSION} into {} but found no {} in it",
            cache.display(),
            library_in(&cache).display()
        ))
    })
}

fn library_in(tree: &Path) -> PathBuf {
    let name = if cfg!(windows) {
        "onnxruntime-genai.dll"
    } else if cfg!(target_os = "macos") {
        "libonnxruntime-genai.dylib"
    } else {
        "libonnxruntime-genai.so"
    };
    tree.join("onnxruntime_genai").join(name)
}

/// The version of the onnxruntime-genai wheel a library came from: the `Version:` of the `.dist-info/METADATA` beside
/// its package folder (`site-packages/onnxruntime_genai/libonnxruntime-genai.so` and
/// `site-packages/onnxruntime_genai-<v>.dist-info/`). The library itself exports no version.
pub fn wheel_version(library: &Path) -> Option<String> {
    let site = library.parent()?.parent()?;
    // The wheel's own dist-info: `onnxruntime_genai-<version>.dist-info` whose METADATA names `onnxruntime-genai`
    // (not onnxruntime_genai_cuda's); two of them (a leftover install) say nothing certain.
    let versions: Vec<String> = std::fs::read_dir(site)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("onnxruntime_genai-") && n.ends_with(".dist-info"))
        })
        .filter_map(|d| {
            let text = std::fs::read_to_string(d.join("METADATA")).ok()?;
            let field = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)).map(|v| v.trim().to_string());
            let name = field("Name:")?.replace('_', "-");
            if name.eq_ignore_ascii_case("onnxruntime-genai") { field("Version:") } else { None }
        })
        .collect();
    match &versions[..] {
        [one] => Some(one.clone()),
        _ => None,
    }
}

/// The library must be the pinned release: the C API signatures below are transcribed from its header, and a call
/// through a changed signature is undefined behaviour, not an error.
fn check_version(library: &Path, version: Option<&str>) -> Result<()> {
    match version {
        Some(v) if v == GENAI_VERSION => Ok(()),
        Some(v) => bail!(
            "{} is onnxruntime-genai {v}, but the suite binds the C API of {GENAI_VERSION} (its pin): install \
             onnxruntime-genai=={GENAI_VERSION}, or unset GENAI_DYLIB_PATH to use the pinned wheel",
            library.display()
        ),
        None => bail!(
            "{}: no single onnxruntime_genai-*.dist-info/METADATA beside its package folder says which onnxruntime-genai \
             release it is, and the suite binds the C API of {GENAI_VERSION} only: point GENAI_DYLIB_PATH at the \
             library inside an installed onnxruntime-genai=={GENAI_VERSION} wheel \
             (site-packages/onnxruntime_genai/libonnxruntime-genai.so), or unset it",
            library.display()
        ),
    }
}

/// The bound API. ONNX Runtime is loaded first (the build the run's device chose), so genai binds to the suite's own.
fn api() -> Result<&'static Api> {
    runtime::load()?;
    API.get_or_init(|| {
        let path = locate()?;
        check_version(&path, wheel_version(&path).as_deref())?;
        // SAFETY: loading runs the library's initialisers; it is the hash-pinned onnxruntime-genai wheel's own
        // library (or the one GENAI_DYLIB_PATH names), whose C API the signatures below transcribe from
        // `ort_genai_c.h` of the same release.
        let lib =
            unsafe { Library::new(&path) }.map_err(|e| Error::new(format!("loading onnxruntime-genai from {}: {e}", path.display())))?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol's type is its C declaration in ort_genai_c.h.
                *unsafe { lib.get($name) }.map_err(|e| {
                    Error::new(format!(
                        "{}: no symbol {} ({e}); is it onnxruntime-genai {GENAI_VERSION}?",
                        path.display(),
                        String::from_utf8_lossy(&$name[..$name.len() - 1])
                    ))
                })?
            };
        }
        Ok(Api {
            result_get_error: sym!(b"OgaResultGetError\0"),
            destroy_result: sym!(b"OgaDestroyResult\0"),
            create_config: sym!(b"OgaCreateConfig\0"),
            config_clear_providers: sym!(b"OgaConfigClearProviders\0"),
            config_append_provider: sym!(b"OgaConfigAppendProvider\0"),
            destroy_config: sym!(b"OgaDestroyConfig\0"),
            create_model_from_config: sym!(b"OgaCreateModelFromConfig\0"),
            destroy_model: sym!(b"OgaDestroyModel\0"),
            create_generator_params: sym!(b"OgaCreateGeneratorParams\0"),
            params_set_search_number: sym!(b"OgaGeneratorParamsSetSearchNumber\0"),
            params_set_search_bool: sym!(b"OgaGeneratorParamsSetSearchBool\0"),
            destroy_generator_params: sym!(b"OgaDestroyGeneratorParams\0"),
            create_generator: sym!(b"OgaCreateGenerator\0"),
            destroy_generator: sym!(b"OgaDestroyGenerator\0"),
            append_tokens: sym!(b"OgaGenerator_AppendTokens\0"),
            is_done: sym!(b"OgaGenerator_IsDone\0"),
            generate_next_token: sym!(b"OgaGenerator_GenerateNextToken\0"),
            get_logits: sym!(b"OgaGenerator_GetLogits\0"),
            sequence_count: sym!(b"OgaGenerator_GetSequenceCount\0"),
            sequence_data: sym!(b"OgaGenerator_GetSequenceData\0"),
            tensor_type: sym!(b"OgaTensorGetType\0"),
            tensor_rank: sym!(b"OgaTensorGetShapeRank\0"),
            tensor_shape: sym!(b"OgaTensorGetShape\0"),
            tensor_data: sym!(b"OgaTensorGetData\0"),
            destroy_tensor: sym!(b"OgaDestroyTensor\0"),
            create_processor: sym!(b"OgaCreateMultiModalProcessor\0"),
            destroy_processor: sym!(b"OgaDestroyMultiModalProcessor\0"),
            create_strings: sym!(b"OgaCreateStringArrayFromStrings\0"),
            destroy_strings: sym!(b"OgaDestroyStringArray\0"),
            load_images: sym!(b"OgaLoadImages\0"),
            destroy_images: sym!(b"OgaDestroyImages\0"),
            load_audios: sym!(b"OgaLoadAudios\0"),
            destroy_audios: sym!(b"OgaDestroyAudios\0"),
            process: sym!(b"OgaProcessorProcessImagesAndAudios\0"),
            named_get: sym!(b"OgaNamedTensorsGet\0"),
            destroy_named: sym!(b"OgaDestroyNamedTensors\0"),
            set_inputs: sym!(b"OgaGenerator_SetInputs\0"),
            path: path.clone(),
            _lib: lib,
        })
    })
    .as_ref()
    .map_err(Clone::clone)
}

impl Api {
    /// `Ok` for a null result; genai's message otherwise (the result is freed).
    fn check(&self, r: Status, what: &str) -> Result<()> {
        if r.is_null() {
            return Ok(());
        }
        // SAFETY: `r` is a live OgaResult genai returned; its error string lives until OgaDestroyResult.
        let msg = unsafe {
            let p = (self.result_get_error)(r);
            let m = if p.is_null() { "(no message)".to_string() } else { CStr::from_ptr(p).to_string_lossy().into_owned() };
            (self.destroy_result)(r);
            m
        };
        Err(Error::new(format!("onnxruntime-genai {GENAI_VERSION} ({what}): {msg}")))
    }
}

/// Owns a genai object and destroys it on drop.
struct Owned<T> {
    ptr: *mut T,
    destroy: unsafe extern "C" fn(*mut T),
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: `ptr` came from the matching genai constructor and is destroyed once.
            unsafe { (self.destroy)(self.ptr) }
        }
    }
}

fn cstring(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(format!("{what} contains a NUL byte: {s:?}")))
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

/// onnxruntime-genai's refusal of a package: its config or model did not load. `message` is genai's own error, with
/// the step it failed at.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub message: String,
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
                api.check((api.create_config)(dir.as_ptr(), &mut config.ptr), "reading genai_config.json")?;
                api.check((api.config_clear_providers)(config.ptr), "choosing the execution provider")?;
                if let Provider::Cuda { .. } = provider {
                    api.check((api.config_append_provider)(config.ptr, c"cuda".as_ptr()), "choosing the CUDA execution provider")?;
                }
                let mut model = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_model };
                api.check((api.create_model_from_config)(config.ptr, &mut model.ptr), "loading the model")?;
                Ok(Model { api, model, _config: config })
            }()
        };
        Ok(model.map_err(refused))
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
            api.check((api.create_generator_params)(self.model.ptr, &mut params.ptr), "creating generator params")?;
            let max_length = (ids.len() + max_new) as f64;
            api.check((api.params_set_search_number)(params.ptr, c"max_length".as_ptr(), max_length), "setting max_length")?;
            api.check((api.params_set_search_bool)(params.ptr, c"do_sample".as_ptr(), false), "setting greedy search")?;
            let mut generator = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_generator };
            api.check((api.create_generator)(self.model.ptr, params.ptr, &mut generator.ptr), "creating the generator")?;
            api.check((api.append_tokens)(generator.ptr, ids32.as_ptr(), ids32.len()), "running the prompt")?;
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
                api.check((api.generate_next_token)(generator.ptr), "generating the next token")?;
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

/// What genai's own multimodal processor made of a prompt and its media, and the greedy run on it.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaRun {
    /// The `input_ids` genai's processor built (chat text with its media tokens expanded).
    pub processor_ids: Vec<i64>,
    /// The greedy tokens on those inputs (no prefill logits: genai runs the prompt inside its first step).
    pub tokens: Vec<i64>,
}

impl Model {
    /// Runs `prompt` (with one media placeholder per image and clip) through genai's multimodal processor with
    /// `images` and `audio`, then generates up to `max_new` tokens greedily from what it made.
    pub fn greedy_media(&self, prompt: &str, images: &[PathBuf], audio: &[PathBuf], max_new: usize) -> Result<MediaRun> {
        let _t = Inside::start();
        let api = self.api;
        let prompt = cstring(prompt, "the prompt")?;
        let paths =
            |files: &[PathBuf]| -> Result<Vec<CString>> { files.iter().map(|p| cstring(&p.to_string_lossy(), "a media path")).collect() };
        let (image_paths, audio_paths) = (paths(images)?, paths(audio)?);
        // SAFETY: as in `greedy`: live owned objects, C strings alive across the calls, out-pointers to locals.
        unsafe {
            let mut processor = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_processor };
            api.check((api.create_processor)(self.model.ptr, &mut processor.ptr), "creating the multimodal processor")?;
            let strings = |list: &[CString]| -> Result<Owned<OgaStringArray>> {
                let ptrs: Vec<*const c_char> = list.iter().map(|c| c.as_ptr()).collect();
                let mut a = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_strings };
                api.check((api.create_strings)(ptrs.as_ptr(), ptrs.len(), &mut a.ptr), "listing media files")?;
                Ok(a)
            };
            let mut images = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_images };
            if !image_paths.is_empty() {
                api.check((api.load_images)(strings(&image_paths)?.ptr, &mut images.ptr), "loading the images")?;
            }
            let mut audios = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_audios };
            if !audio_paths.is_empty() {
                api.check((api.load_audios)(strings(&audio_paths)?.ptr, &mut audios.ptr), "loading the audio")?;
            }
            let mut named = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_named };
            api.check((api.process)(processor.ptr, prompt.as_ptr(), images.ptr, audios.ptr, &mut named.ptr), "processing the prompt")?;
            let mut ids_t = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_tensor };
            api.check((api.named_get)(named.ptr, c"input_ids".as_ptr(), &mut ids_t.ptr), "reading the processor's input_ids")?;
            let processor_ids = int_tensor(api, ids_t.ptr)?;
            let mut params = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_generator_params };
            api.check((api.create_generator_params)(self.model.ptr, &mut params.ptr), "creating generator params")?;
            let max_length = (processor_ids.len() + max_new) as f64;
            api.check((api.params_set_search_number)(params.ptr, c"max_length".as_ptr(), max_length), "setting max_length")?;
            api.check((api.params_set_search_bool)(params.ptr, c"do_sample".as_ptr(), false), "setting greedy search")?;
            let mut generator = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_generator };
            api.check((api.create_generator)(self.model.ptr, params.ptr, &mut generator.ptr), "creating the generator")?;
            api.check((api.set_inputs)(generator.ptr, named.ptr), "setting the processor's inputs")?;
            while !(api.is_done)(generator.ptr) {
                api.check((api.generate_next_token)(generator.ptr), "generating the next token")?;
            }
            let n = (api.sequence_count)(generator.ptr, 0);
            let data = (api.sequence_data)(generator.ptr, 0);
            let start = processor_ids.len().min(n);
            let tokens =
                if data.is_null() { Vec::new() } else { std::slice::from_raw_parts(data, n)[start..].iter().map(|&t| t as i64).collect() };
            Ok(MediaRun { processor_ids, tokens })
        }
    }
}

/// An integer tensor's values (int32 or int64), flattened.
unsafe fn int_tensor(api: &Api, t: *mut OgaTensor) -> Result<Vec<i64>> {
    // SAFETY: `t` is live; its data is read within its shape.
    unsafe {
        let mut ty = 0i32;
        api.check((api.tensor_type)(t, &mut ty), "reading a tensor's type")?;
        let mut rank = 0usize;
        api.check((api.tensor_rank)(t, &mut rank), "reading a tensor's rank")?;
        let mut shape = vec![0i64; rank];
        api.check((api.tensor_shape)(t, shape.as_mut_ptr(), rank), "reading a tensor's shape")?;
        let count = shape.iter().product::<i64>().max(0) as usize;
        let mut data = std::ptr::null_mut();
        api.check((api.tensor_data)(t, &mut data), "reading a tensor's data")?;
        if data.is_null() && count > 0 {
            bail!("onnxruntime-genai returned a tensor with no data");
        }
        Ok(match ty {
            ELEMENT_I64 => std::slice::from_raw_parts(data as *const i64, count).to_vec(),
            ELEMENT_I32 => std::slice::from_raw_parts(data as *const i32, count).iter().map(|&v| v as i64).collect(),
            _ => bail!("onnxruntime-genai returned input_ids of element type {ty}, expected int32 or int64"),
        })
    }
}

/// The generator's current last-position logits, copied out ([batch = 1, (1,) vocab] float32).
unsafe fn logits(api: &Api, generator: *mut OgaGenerator) -> Result<Vec<f32>> {
    // SAFETY: `generator` is live; the tensor is owned below and destroyed after its data is copied.
    unsafe {
        let mut t = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_tensor };
        api.check((api.get_logits)(generator, &mut t.ptr), "reading the logits")?;
        let mut ty = 0i32;
        api.check((api.tensor_type)(t.ptr, &mut ty), "reading the logits' type")?;
        if ty != ELEMENT_F32 {
            bail!("onnxruntime-genai returned logits of element type {ty}, expected float32 ({ELEMENT_F32})");
        }
        let mut rank = 0usize;
        api.check((api.tensor_rank)(t.ptr, &mut rank), "reading the logits' rank")?;
        let mut shape = vec![0i64; rank];
        api.check((api.tensor_shape)(t.ptr, shape.as_mut_ptr(), rank), "reading the logits' shape")?;
        let count: i64 = shape.iter().product();
        if shape.first().copied().unwrap_or(0) != 1 || count <= 0 {
            bail!("onnxruntime-genai returned logits of shape {shape:?}, expected [1, vocab] or [1, 1, vocab]");
        }
        let mut data = std::ptr::null_mut();
        api.check((api.tensor_data)(t.ptr, &mut data), "reading the logits' data")?;
        if data.is_null() {
            bail!("onnxruntime-genai returned logits with no data");
        }
        let vocab = *shape.last().unwrap_or(&0) as usize;
        let all = std::slice::from_raw_parts(data as *const f32, count as usize);
        Ok(all[all.len() - vocab..].to_vec())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn media_blocks_collapse_to_their_placeholder() {
        // <bos> <turn> user \n <|image> <|image|> x3 <image|> text
        assert_eq!(placeholder_ids(&[2, 11, 97, 4, 6, 6, 6, 5, 300]), [2, 11, 97, 6, 300]);
        assert_eq!(placeholder_ids(&[2, 4, 6, 6, 5, 8, 10, 10, 9, 1]), [2, 6, 10, 1]);
        assert_eq!(placeholder_ids(&[2, 11, 97]), [2, 11, 97]);
    }

    use super::*;

    /// A site-packages folder holding `onnxruntime_genai/libonnxruntime-genai.so` and, when given, the wheel's
    /// dist-info at `version`.
    fn site(tag: &str, version: Option<&str>) -> PathBuf {
        let root = std::env::temp_dir().join(format!("mobius-genai-version-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("onnxruntime_genai")).unwrap();
        std::fs::write(root.join("onnxruntime_genai/libonnxruntime-genai.so"), b"").unwrap();
        if let Some(v) = version {
            let info = root.join(format!("onnxruntime_genai-{v}.dist-info"));
            std::fs::create_dir_all(&info).unwrap();
            std::fs::write(info.join("METADATA"), format!("Metadata-Version: 2.1\nName: onnxruntime-genai\nVersion: {v}\n")).unwrap();
        }
        root.join("onnxruntime_genai/libonnxruntime-genai.so")
    }

    #[test]
    fn the_library_must_come_from_the_pinned_wheel() {
        let pinned = site("pinned", Some(GENAI_VERSION));
        assert_eq!(wheel_version(&pinned).as_deref(), Some(GENAI_VERSION));
        assert!(check_version(&pinned, wheel_version(&pinned).as_deref()).is_ok());

        let other = site("other", Some("0.17.1"));
        let e = check_version(&other, wheel_version(&other).as_deref()).unwrap_err().to_string();
        assert!(e.contains("is onnxruntime-genai 0.17.1") && e.contains(&format!("C API of {GENAI_VERSION}")), "{e}");

        let bare = site("bare", None);
        assert_eq!(wheel_version(&bare), None);
        // A leftover second install says nothing certain.
        let two = site("two", Some(GENAI_VERSION));
        let info = two.parent().unwrap().parent().unwrap().join("onnxruntime_genai-0.17.1.dist-info");
        std::fs::create_dir_all(&info).unwrap();
        std::fs::write(info.join("METADATA"), "Name: onnxruntime-genai\nVersion: 0.17.1\n").unwrap();
        assert_eq!(wheel_version(&two), None);
        let e = check_version(&bare, None).unwrap_err().to_string();
        assert!(e.contains("dist-info/METADATA") && e.contains("GENAI_DYLIB_PATH"), "{e}");
        for p in [pinned, other, bare, two] {
            let _ = std::fs::remove_dir_all(p.parent().unwrap().parent().unwrap());
        }
    }
}
