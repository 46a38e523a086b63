//! genai's own multimodal processor: a prompt with media placeholders and the media files in, its `input_ids` and
//! the greedy run on what it made out.

use std::ffi::{CString, c_char};
use std::path::PathBuf;

use super::api::{Api, ELEMENT_I32, ELEMENT_I64, OgaStringArray, OgaTensor, Owned, cstring};
use super::{Inside, Model};
use crate::error::{Result, bail};

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
        // SAFETY: as in `Model::greedy`: live owned objects, C strings alive across the calls, out-pointers to locals.
        unsafe {
            let mut processor = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_processor };
            api.call("creating the multimodal processor", || (api.create_processor)(self.model.ptr, &mut processor.ptr))?;
            let strings = |list: &[CString]| -> Result<Owned<OgaStringArray>> {
                let ptrs: Vec<*const c_char> = list.iter().map(|c| c.as_ptr()).collect();
                let mut a = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_strings };
                api.call("listing media files", || (api.create_strings)(ptrs.as_ptr(), ptrs.len(), &mut a.ptr))?;
                Ok(a)
            };
            let mut images = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_images };
            if !image_paths.is_empty() {
                let paths = strings(&image_paths)?;
                api.call("loading the images", || (api.load_images)(paths.ptr, &mut images.ptr))?;
            }
            let mut audios = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_audios };
            if !audio_paths.is_empty() {
                let paths = strings(&audio_paths)?;
                api.call("loading the audio", || (api.load_audios)(paths.ptr, &mut audios.ptr))?;
            }
            let mut named = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_named };
            api.call("processing the prompt", || (api.process)(processor.ptr, prompt.as_ptr(), images.ptr, audios.ptr, &mut named.ptr))?;
            let mut ids_t = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_tensor };
            api.call("reading the processor's input_ids", || (api.named_get)(named.ptr, c"input_ids".as_ptr(), &mut ids_t.ptr))?;
            let processor_ids = int_tensor(api, ids_t.ptr)?;
            let mut params = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_generator_params };
            api.call("creating generator params", || (api.create_generator_params)(self.model.ptr, &mut params.ptr))?;
            let max_length = (processor_ids.len() + max_new) as f64;
            api.call("setting max_length", || (api.params_set_search_number)(params.ptr, c"max_length".as_ptr(), max_length))?;
            api.call("setting greedy search", || (api.params_set_search_bool)(params.ptr, c"do_sample".as_ptr(), false))?;
            let mut generator = Owned { ptr: std::ptr::null_mut(), destroy: api.destroy_generator };
            api.call("creating the generator", || (api.create_generator)(self.model.ptr, params.ptr, &mut generator.ptr))?;
            api.call("setting the processor's inputs", || (api.set_inputs)(generator.ptr, named.ptr))?;
            while !(api.is_done)(generator.ptr) {
                api.call("generating the next token", || (api.generate_next_token)(generator.ptr))?;
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
        api.call("reading a tensor's type", || (api.tensor_type)(t, &mut ty))?;
        let mut rank = 0usize;
        api.call("reading a tensor's rank", || (api.tensor_rank)(t, &mut rank))?;
        let mut shape = vec![0i64; rank];
        api.call("reading a tensor's shape", || (api.tensor_shape)(t, shape.as_mut_ptr(), rank))?;
        let count = shape.iter().product::<i64>().max(0) as usize;
        let mut data = std::ptr::null_mut();
        api.call("reading a tensor's data", || (api.tensor_data)(t, &mut data))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_blocks_collapse_to_their_placeholder() {
        // <bos> <turn> user \n <|image> <|image|> x3 <image|> text
        assert_eq!(placeholder_ids(&[2, 11, 97, 4, 6, 6, 6, 5, 300]), [2, 11, 97, 6, 300]);
        assert_eq!(placeholder_ids(&[2, 4, 6, 6, 5, 8, 10, 10, 9, 1]), [2, 6, 10, 1]);
        assert_eq!(placeholder_ids(&[2, 11, 97]), [2, 11, 97]);
    }
}
