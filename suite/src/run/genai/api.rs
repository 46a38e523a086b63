//! onnxruntime-genai's C API as the suite binds it: the opaque objects, the functions (their signatures transcribed
//! from `ort_genai_c.h` of the pinned release) resolved once from the loaded library, genai's errors turned into
//! the suite's, and the objects owned until dropped. A package genai refuses is a [`Refusal`], not an error.

use std::ffi::{CStr, CString, c_char, c_void};
use std::path::{Path, PathBuf};

use libloading::Library;

use super::version::{GENAI_VERSION, GenaiBuild};
use crate::error::{Error, Result};
use crate::run::last_call::{self, Call, Runtime};

#[repr(C)]
pub(super) struct OgaResult(c_void);
#[repr(C)]
pub(super) struct OgaConfig(c_void);
#[repr(C)]
pub(super) struct OgaModel(c_void);
#[repr(C)]
pub(super) struct OgaGeneratorParams(c_void);
#[repr(C)]
pub(super) struct OgaGenerator(c_void);
#[repr(C)]
pub(super) struct OgaTensor(c_void);
#[repr(C)]
pub(super) struct OgaMultiModalProcessor(c_void);
#[repr(C)]
pub(super) struct OgaStringArray(c_void);
#[repr(C)]
pub(super) struct OgaImages(c_void);
#[repr(C)]
pub(super) struct OgaAudios(c_void);
#[repr(C)]
pub(super) struct OgaNamedTensors(c_void);

pub(super) type Status = *mut OgaResult;

/// `OgaElementType_float32` in `ort_genai_c.h`.
pub(super) const ELEMENT_F32: i32 = 1;
/// `OgaElementType_int32` and `OgaElementType_int64`.
pub(super) const ELEMENT_I32: i32 = 6;
pub(super) const ELEMENT_I64: i32 = 7;

/// The C functions, resolved once.
pub(super) struct Api {
    pub(super) result_get_error: unsafe extern "C" fn(*const OgaResult) -> *const c_char,
    pub(super) destroy_result: unsafe extern "C" fn(Status),
    pub(super) create_config: unsafe extern "C" fn(*const c_char, *mut *mut OgaConfig) -> Status,
    pub(super) config_clear_providers: unsafe extern "C" fn(*mut OgaConfig) -> Status,
    pub(super) config_append_provider: unsafe extern "C" fn(*mut OgaConfig, *const c_char) -> Status,
    /// `OgaConfigSetProviderOption(config, provider, key, value)`: a provider option, passed to ONNX Runtime.
    pub(super) config_set_provider_option: unsafe extern "C" fn(*mut OgaConfig, *const c_char, *const c_char, *const c_char) -> Status,
    pub(super) destroy_config: unsafe extern "C" fn(*mut OgaConfig),
    pub(super) create_model_from_config: unsafe extern "C" fn(*const OgaConfig, *mut *mut OgaModel) -> Status,
    pub(super) destroy_model: unsafe extern "C" fn(*mut OgaModel),
    pub(super) create_generator_params: unsafe extern "C" fn(*const OgaModel, *mut *mut OgaGeneratorParams) -> Status,
    pub(super) params_set_search_number: unsafe extern "C" fn(*mut OgaGeneratorParams, *const c_char, f64) -> Status,
    pub(super) params_set_search_bool: unsafe extern "C" fn(*mut OgaGeneratorParams, *const c_char, bool) -> Status,
    pub(super) destroy_generator_params: unsafe extern "C" fn(*mut OgaGeneratorParams),
    pub(super) create_generator: unsafe extern "C" fn(*const OgaModel, *const OgaGeneratorParams, *mut *mut OgaGenerator) -> Status,
    pub(super) destroy_generator: unsafe extern "C" fn(*mut OgaGenerator),
    pub(super) append_tokens: unsafe extern "C" fn(*mut OgaGenerator, *const i32, usize) -> Status,
    pub(super) is_done: unsafe extern "C" fn(*mut OgaGenerator) -> bool,
    pub(super) generate_next_token: unsafe extern "C" fn(*mut OgaGenerator) -> Status,
    pub(super) get_logits: unsafe extern "C" fn(*mut OgaGenerator, *mut *mut OgaTensor) -> Status,
    pub(super) sequence_count: unsafe extern "C" fn(*const OgaGenerator, usize) -> usize,
    pub(super) sequence_data: unsafe extern "C" fn(*const OgaGenerator, usize) -> *const i32,
    pub(super) tensor_type: unsafe extern "C" fn(*mut OgaTensor, *mut i32) -> Status,
    pub(super) tensor_rank: unsafe extern "C" fn(*mut OgaTensor, *mut usize) -> Status,
    pub(super) tensor_shape: unsafe extern "C" fn(*mut OgaTensor, *mut i64, usize) -> Status,
    pub(super) tensor_data: unsafe extern "C" fn(*mut OgaTensor, *mut *mut c_void) -> Status,
    pub(super) destroy_tensor: unsafe extern "C" fn(*mut OgaTensor),
    pub(super) create_processor: unsafe extern "C" fn(*const OgaModel, *mut *mut OgaMultiModalProcessor) -> Status,
    pub(super) destroy_processor: unsafe extern "C" fn(*mut OgaMultiModalProcessor),
    pub(super) create_strings: unsafe extern "C" fn(*const *const c_char, usize, *mut *mut OgaStringArray) -> Status,
    pub(super) destroy_strings: unsafe extern "C" fn(*mut OgaStringArray),
    pub(super) load_images: unsafe extern "C" fn(*const OgaStringArray, *mut *mut OgaImages) -> Status,
    pub(super) destroy_images: unsafe extern "C" fn(*mut OgaImages),
    pub(super) load_audios: unsafe extern "C" fn(*const OgaStringArray, *mut *mut OgaAudios) -> Status,
    pub(super) destroy_audios: unsafe extern "C" fn(*mut OgaAudios),
    pub(super) process: unsafe extern "C" fn(
        *const OgaMultiModalProcessor,
        *const c_char,
        *const OgaImages,
        *const OgaAudios,
        *mut *mut OgaNamedTensors,
    ) -> Status,
    pub(super) named_get: unsafe extern "C" fn(*mut OgaNamedTensors, *const c_char, *mut *mut OgaTensor) -> Status,
    pub(super) destroy_named: unsafe extern "C" fn(*mut OgaNamedTensors),
    pub(super) set_inputs: unsafe extern "C" fn(*mut OgaGenerator, *const OgaNamedTensors) -> Status,
    /// Keeps the library loaded for the life of the process (the function pointers point into it).
    _lib: Library,
    pub(super) path: PathBuf,
    /// The wheel it came from: the CPU build, or the CUDA one.
    pub(super) build: GenaiBuild,
}

impl Api {
    /// Resolves every function from `lib`, the library at `path`, which the `Api` then keeps loaded.
    pub(super) fn bind(lib: Library, path: &Path, build: GenaiBuild) -> Result<Api> {
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
            config_set_provider_option: sym!(b"OgaConfigSetProviderOption\0"),
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
            path: path.to_path_buf(),
            build,
            _lib: lib,
        })
    }

    /// `f`, one call into genai that `what` describes (noted as the thread's current call, [`last_call`], while it
    /// runs), and its result checked.
    pub(super) fn call(&self, what: &'static str, f: impl FnOnce() -> Status) -> Result<()> {
        let r = last_call::during(Call { runtime: Runtime::Genai, what, on: "" }, f);
        self.check(r, what)
    }

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
pub(super) struct Owned<T> {
    pub(super) ptr: *mut T,
    pub(super) destroy: unsafe extern "C" fn(*mut T),
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: `ptr` came from the matching genai constructor and is destroyed once.
            let destroy = || unsafe { (self.destroy)(self.ptr) };
            last_call::during(Call { runtime: Runtime::Genai, what: "destroying an object", on: std::any::type_name::<T>() }, destroy)
        }
    }
}

pub(super) fn cstring(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(format!("{what} contains a NUL byte: {s:?}")))
}

/// onnxruntime-genai's refusal of a package: its config or model did not load. `message` is genai's own error, with
/// the step it failed at.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub message: String,
}
