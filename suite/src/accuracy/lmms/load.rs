//! A [`MediaTask`] read from its lmms-eval task file, checked against what the gate can follow, and its items as
//! the family's hooks give them.

use std::path::Path;

use serde_json::Value;

use super::config::{Config, load_config};
use super::families;
use super::{Direction, Family, HookKind, Media, MediaItem, MediaTask, Medium};
use crate::accuracy::doc::{self, Doc};
use crate::accuracy::lmeval;
use crate::accuracy::resolve::task_name;
use crate::error::{Error, Result, bail};

impl MediaTask {
    /// Reads `file` (an lmms-eval task file, relative to `root`) and its test split from `data_dir` (a folder laid
    /// out like the dataset's repository) or the Hugging Face hub cache `hub_cache`.
    pub fn load(root: &Path, file: &str, data_dir: Option<&Path>, hub_cache: Option<&Path>, limit: Option<usize>) -> Result<MediaTask> {
        let c = load_config(&root.join(file), file)?;
        let dataset = c.dataset_path.clone().ok_or_else(|| Error::new(format!("{file}: no `dataset_path`")))?;
        let name = c.task.clone().unwrap_or_else(|| task_name(file));
        refuse_unsupported(&c, file)?;
        let family = family(&c, &dataset, file)?;
        let (metric, metrics, direction) = metric(&c, family, file)?;
        let (max_new_tokens, until) = generation(&c, file)?;
        let default = c.lmms_eval_specific_kwargs.as_ref().and_then(|k| k.get("default"));
        if let Some(d) = default.filter(|d| !d.is_object()) {
            bail!("{file}: field `lmms_eval_specific_kwargs.default` is {d}, expected a map with `pre_prompt` and `post_prompt`");
        }
        // lmms-eval formats what the field holds into the prompt: anything but a string would read another prompt.
        let prompt = |k: &str| match default.and_then(|d| d.get(k)) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v) => Err(Error::new(format!("{file}: field `lmms_eval_specific_kwargs.default.{k}` is {v}, expected a string"))),
        };
        let (pre_prompt, post_prompt) = (prompt("pre_prompt")?, prompt("post_prompt")?);
        let split = c.test_split.clone().ok_or_else(|| Error::new(format!("{file}: no `test_split`")))?;
        let lc = lmeval::Config { dataset_path: Some(dataset.clone()), dataset_name: c.dataset_name.clone(), ..lmeval::Config::default() };
        let files = lmeval::split_files(root, data_dir, hub_cache, &lc, &split, file)?;
        let mut docs = lmeval::read_docs(&files, file)?;
        if let Some(n) = limit {
            docs.truncate(n);
        }
        if docs.is_empty() {
            bail!("{file}: split `{split}` has no documents");
        }
        Ok(MediaTask {
            name,
            file: file.to_string(),
            family,
            metric,
            metrics,
            direction,
            max_new_tokens,
            until,
            pre_prompt,
            post_prompt,
            docs,
        })
    }

    /// The items: each document's prompt text, media and answers, as the task's hooks give them.
    pub fn items(&self) -> Result<Vec<MediaItem>> {
        let items: Vec<MediaItem> = self
            .docs
            .iter()
            .enumerate()
            .map(|(i, d)| self.item(i, d).map_err(|e| e.context(format!("{}: document {i}", self.file))))
            .collect::<Result<_>>()?;
        self.family.scorer().check(&items).map_err(|e| e.context(&self.file))?;
        Ok(items)
    }

    fn item(&self, doc: usize, d: &Doc) -> Result<MediaItem> {
        let scorer = self.family.scorer();
        let question = scorer.question(d, &self.pre_prompt, &self.post_prompt)?;
        let answers = scorer.answers(d)?;
        let kind = scorer.kind(d)?;
        let medium = scorer.facts().medium.column();
        if answers.is_empty() {
            bail!("the answer field holds an empty list: an item needs at least one answer to be scored");
        }
        let media = media_bytes(doc::field(d, medium)?)
            .and_then(|m| of_medium(m, scorer.facts().medium))
            .map_err(|e| Error::new(format!("field `{medium}`: {e}")))?;
        Ok(MediaItem { doc, question, answers, kind, media })
    }
}

/// What the multimodal gate does not run: other output types, few-shot, filters, Python `process_docs`.
fn refuse_unsupported(c: &Config, file: &str) -> Result<()> {
    if let Some(o) = c.output_type.as_deref()
        && o != "generate_until"
    {
        bail!("{file}: field `output_type` is `{o}`; the multimodal gate runs generate_until");
    }
    if c.num_fewshot.unwrap_or(0) > 0 {
        bail!("{file}: field `num_fewshot` is {}; the multimodal gate runs 0-shot, as lmms-eval does", c.num_fewshot.unwrap_or(0));
    }
    if c.filter_list.is_some() {
        bail!("{file}: field `filter_list` is not supported for lmms-eval tasks (the answer is the generation itself)");
    }
    if let Some(t) = &c.process_docs {
        bail!("{file}: field `process_docs` is Python (`!function {}`), which the suite cannot run", t.0.as_str().unwrap_or("?"));
    }
    Ok(())
}

/// The task's family, from its hooks: every `!function` must be one the registry knows, all of one family, and
/// `doc_to_text` and `doc_to_target` the family's own.
fn family(c: &Config, dataset: &str, file: &str) -> Result<Family> {
    let mut family = None;
    let mut check = |field: &str, v: &Option<serde_saphyr::Tagged<Value>>, want: HookKind| -> Result<bool> {
        let Some(t) = v else { return Ok(false) };
        let is_function = t.1.as_deref().is_some_and(|tag| tag.contains("function"));
        // Another local tag (`!python utils.x`) is a hook the suite does not know, never a plain value to ignore;
        // YAML's own tags (`!!str`) only say what the value is.
        if let Some(tag) = t.1.as_deref().filter(|tag| !is_function && !tag.starts_with("tag:yaml.org,2002:")) {
            bail!(
                "{file}: field `{field}` is tagged `{tag}` ({}), which the suite cannot run; lmms-eval's hooks are \
                 `!function utils.*`",
                t.0
            );
        }
        if !is_function {
            return Ok(false);
        }
        // A tagged list or map names no function: shown as written, it matches none.
        let f = t.0.as_str().map_or_else(|| t.0.to_string(), str::to_string);
        match families::hook(dataset, &f) {
            Some((fam, kind)) if kind == want && family.is_none_or(|x| x == fam) => {
                family = Some(fam);
                Ok(true)
            }
            _ => bail!(
                "{file}: field `{field}` is Python (`!function {f}` of dataset `{dataset}`), which the suite cannot \
                 run; it knows lmms-eval's own hooks of: {}",
                families::known()
            ),
        }
    };
    check("doc_to_visual", &c.doc_to_visual, HookKind::DocToVisual)?;
    let text_hook = check("doc_to_text", &c.doc_to_text, HookKind::DocToText)?;
    let target_hook = check("doc_to_target", &c.doc_to_target, HookKind::DocToTarget)?;
    check("process_results", &c.process_results, HookKind::ProcessResults)?;
    for m in c.metric_list.iter().flatten() {
        if let Some(a) = &m.aggregation
            && !check("metric_list.aggregation", &Some(a.clone()), HookKind::Aggregation)?
            && a.0.as_str() != Some("mean")
        {
            // The gate aggregates as the family does (the mean, unless its hook says otherwise): any other named
            // aggregation would be scored as a mean without a word.
            bail!(
                "{file}: field `metric_list.aggregation` of metric `{}` is {}; the gate aggregates by `mean` or the family's own hook",
                m.metric.trim(),
                a.0
            );
        }
    }
    let family = family
        .ok_or_else(|| Error::new(format!("{file}: no `doc_to_visual` hook the suite knows: it cannot tell which media the task feeds")))?;
    let facts = family.scorer().facts();
    if !text_hook {
        bail!("{file}: field `doc_to_text` must be the task's own hook (utils.{}_doc_to_text)", facts.name);
    }
    let target_field = match (&c.doc_to_target, target_hook) {
        (_, true) => "gt".to_string(),
        (Some(t), false) => {
            t.0.as_str().map(str::to_string).ok_or_else(|| Error::new(format!("{file}: field `doc_to_target` is not a field name")))?
        }
        (None, false) => bail!("{file}: no `doc_to_target`"),
    };
    if target_field != facts.target {
        bail!("{file}: field `doc_to_target` is `{target_field}`; lmms-eval's {} scorer reads `{}`", facts.name, facts.target);
    }
    Ok(family)
}

/// The gated metric (the first of `metric_list`, else the family's first), every metric the task reports, and the
/// gated one's direction, which the file may state but not contradict.
fn metric(c: &Config, family: Family, file: &str) -> Result<(String, Vec<String>, Direction)> {
    let facts = family.scorer().facts();
    let listed: Vec<String> = c.metric_list.iter().flatten().map(|m| m.metric.trim().to_string()).collect();
    let known: Vec<&str> = facts.metrics.iter().map(|(m, _)| *m).collect();
    if let Some(m) = listed.iter().find(|m| !known.contains(&m.as_str())) {
        bail!("{file}: metric `{m}` in `metric_list` is not one the {} scorer gives ({})", facts.name, known.join(", "));
    }
    let metric = listed.first().cloned().unwrap_or_else(|| known[0].to_string());
    let direction = facts.metrics.iter().find(|(m, _)| *m == metric).map_or(Direction::HigherIsBetter, |(_, d)| *d);
    if let Some(hib) = c.metric_list.iter().flatten().find(|m| m.metric.trim() == metric).and_then(|m| m.higher_is_better)
        && hib != (direction == Direction::HigherIsBetter)
    {
        bail!("{file}: metric `{metric}` says higher_is_better: {hib}, which is not the scorer's direction");
    }
    let metrics = if listed.is_empty() { vec![metric.clone()] } else { listed };
    Ok((metric, metrics, direction))
}

/// The token budget and the stop list, from `generation_kwargs`; the gate decodes greedily, so sampling is refused.
fn generation(c: &Config, file: &str) -> Result<(usize, Vec<String>)> {
    let kw = c.generation_kwargs.clone().unwrap_or(Value::Null);
    let max_new_tokens = match kw.get("max_new_tokens") {
        None | Some(Value::Null) => 128,
        Some(v) => v.as_u64().filter(|&n| n > 0 && n <= crate::vocab::MAX_NEW_TOKENS as u64).ok_or_else(|| {
            Error::new(format!("{file}: field `generation_kwargs.max_new_tokens` is {v}, expected 1 to {}", crate::vocab::MAX_NEW_TOKENS))
        })? as usize,
    };
    for (k, ok) in [("do_sample", Value::Bool(false)), ("num_beams", Value::from(1))] {
        if let Some(v) = kw.get(k)
            && !(v == &ok || (k == "do_sample" && v == &Value::String("False".into())))
        {
            bail!("{file}: field `generation_kwargs.{k}` is {v}; the gate decodes greedily (do_sample false, num_beams 1)");
        }
    }
    match kw.get("temperature") {
        None | Some(Value::Null) => {}
        Some(t) if t.as_f64() == Some(0.0) => {}
        Some(t) => bail!("{file}: field `generation_kwargs.temperature` is {t}; the gate decodes greedily (temperature 0)"),
    }
    let delimiter = c.fewshot_delimiter.clone().unwrap_or_else(|| "\n\n".to_string());
    let until = match kw.get("until") {
        None => vec![delimiter],
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::new(format!("{file}: field `generation_kwargs.until` holds a non-string")))?,
        Some(v) => bail!("{file}: field `generation_kwargs.until` is {v}, expected a string or a list of strings"),
    };
    Ok((max_new_tokens, until))
}

/// A dataset's `Image` or `Audio` value as stored in Parquet: `{bytes, path}` (the file's bytes), or an audio
/// `{array, sampling_rate}`.
fn media_bytes(v: &Value) -> std::result::Result<Media, String> {
    let bytes = v.get("bytes").filter(|b| !b.is_null());
    if let Some(b) = bytes {
        return match b {
            // The Parquet reader gives binary columns as base64 text when they are not UTF-8.
            Value::String(s) => decode_binary(s).map(Media::File),
            Value::Array(a) => a
                .iter()
                .map(|x| x.as_u64().and_then(|x| u8::try_from(x).ok()))
                .collect::<Option<Vec<u8>>>()
                .map(Media::File)
                .ok_or("`bytes` is not a byte list".into()),
            other => Err(format!("`bytes` is {other}")),
        };
    }
    if let Some(a) = v.get("array").and_then(Value::as_array) {
        let r = v.get("sampling_rate").unwrap_or(&Value::Null);
        // A rate past 32 bits must not wrap onto another (2^32 + 16000 is not 16 kHz).
        let rate = r
            .as_u64()
            .and_then(|r| u32::try_from(r).ok())
            .filter(|&r| r > 0)
            .ok_or_else(|| format!("`sampling_rate` is {r}; expected a positive rate in Hz"))?;
        let samples = a.iter().map(|x| x.as_f64().map(|x| x as f32)).collect::<Option<Vec<f32>>>().ok_or("`array` holds a non-number")?;
        return Ok(Media::Samples { samples, rate });
    }
    Err("expected {bytes, path} or {array, sampling_rate}".into())
}

/// The medium the task feeds, as far as its first bytes tell: an image file for an image task (the suite feeds the
/// reference processor's tensors, so bytes that are no image would only surface as a stale baseline), a WAV or FLAC
/// file (what `feed::audio` decodes) or samples for an audio task; a clip with no samples is refused, as Whisper would
/// hear 30 s of silence.
fn of_medium(m: Media, medium: Medium) -> std::result::Result<Media, String> {
    let head =
        |b: &[u8]| format!("first bytes {}; {} bytes", b.iter().take(4).map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" "), b.len());
    match (&m, medium) {
        (Media::File(b), Medium::Image) => {
            let image =
                [&b"\x89PNG"[..], b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM", b"II*\0", b"MM\0*"].iter().any(|s| b.starts_with(s))
                    || (b.starts_with(b"RIFF") && b.get(8..12) == Some(b"WEBP"));
            if !image {
                return Err(format!("`bytes` is not an image (PNG, JPEG, GIF, WebP, BMP or TIFF): {}", head(b)));
            }
        }
        (Media::Samples { .. }, Medium::Image) => return Err("decoded audio ({array, sampling_rate}) where an image is expected".into()),
        (Media::File(b), Medium::Audio) => {
            if !(b.starts_with(b"RIFF") || b.starts_with(b"fLaC")) {
                return Err(format!("`bytes` is not a WAV (RIFF) or FLAC (fLaC) file: {}", head(b)));
            }
        }
        (Media::Samples { samples, .. }, Medium::Audio) => {
            if samples.is_empty() {
                return Err("`array` holds no samples (a 0-second clip)".into());
            }
        }
    }
    Ok(m)
}

/// The Parquet record reader's JSON of a binary value: base64 (standard alphabet, padded).
fn decode_binary(s: &str) -> std::result::Result<Vec<u8>, String> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        })
    }
    let t = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(t.len() * 3 / 4);
    for chunk in t.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c).ok_or_else(|| format!("`bytes` is not base64 (character {:?})", c as char))? << (18 - 6 * i);
        }
        let take = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return Err("`bytes` is truncated base64".into()),
        };
        out.extend_from_slice(&acc.to_be_bytes()[1..1 + take]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_of_the_parquet_reader_decodes() {
        assert_eq!(decode_binary("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_binary("aGVsbG8h").unwrap(), b"hello!");
        assert_eq!(decode_binary("aGk=").unwrap(), b"hi");
        assert!(decode_binary("a$").is_err());
    }
}
