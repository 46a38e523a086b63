//! An lm-eval task file read as the suite's [`TaskSpec`] and its documents: lm-eval's defaults filled in, a case's
//! overrides applied, and what the gate cannot follow refused by field.

use std::path::Path;

use serde_json::Value;

use super::spec::{Choices, GenerationKwargs, Metric, OutputType, Sampler, Target, TaskSpec, blank_line, scalar, space};
use crate::accuracy::doc::Doc;
use crate::accuracy::lmeval::{self, Config};
use crate::accuracy::resolve::Source;
use crate::error::{Error, Result, bail};

/// Reads `file` (an lm-eval task file, relative to `root`) with what the case says about it: its spec, its scored
/// documents and its few-shot pool.
pub fn read(root: &Path, file: &str, source: &Source) -> Result<(TaskSpec, Vec<Doc>, Vec<Doc>)> {
    if let Some(data) = &source.data {
        let what = format!("{file}: the case's `data` for it");
        let rel = data.strip_prefix(root).unwrap_or(data);
        crate::paths::check_case_path(root, &rel.to_string_lossy(), source.external_paths, &what)?;
    }
    let c = lmeval::load_config(&root.join(file), file)?;
    if c.use_prompt.is_some() {
        bail!("{file}: field `use_prompt` (promptsource) is not supported");
    }
    let text = lmeval::plain("doc_to_text", &c.doc_to_text, file)?;
    let choice = lmeval::plain("doc_to_choice", &c.doc_to_choice, file)?;
    let target = lmeval::plain("doc_to_target", &c.doc_to_target, file)?;
    let process = lmeval::process_docs(&c, file)?;
    let (output_type, metric) = output_and_metric(&c, file, source)?;
    let (num_fewshot, test_split, fewshot_split) = splits(&c, file, source)?;
    let (answer_regex, generation_kwargs) = match output_type {
        OutputType::MultipleChoice => (None, None),
        OutputType::GenerateUntil => (regex_filter(c.filter_list.as_ref(), file)?, Some(generation_kwargs(c.generation_kwargs.as_ref()))),
    };
    let doc_to_choice = match choice {
        None => None,
        Some(Value::Array(a)) => Some(Choices::List(a.iter().map(|v| scalar(v).unwrap_or_default()).collect())),
        Some(Value::Object(m)) => Some(Choices::List(m.values().map(|v| scalar(v).unwrap_or_default()).collect())),
        Some(v) => Some(Choices::Field(string(Some(v), "doc_to_choice", file)?)),
    };
    let doc_to_target = match target {
        Some(Value::Number(n)) if n.as_u64().is_some() => Target::Index(n.as_u64().unwrap_or_default()),
        v => Target::Field(string(v, "doc_to_target", file)?),
    };
    let dataset = c.dataset_path.clone().unwrap_or_else(|| "json".into());
    let spec = TaskSpec {
        task: c.task.clone(),
        test: format!("{dataset}:{test_split}"),
        fewshot: fewshot_split.as_ref().map(|s| format!("{dataset}:{s}")),
        output_type,
        doc_to_text: string(text, "doc_to_text", file)?,
        doc_to_choice,
        doc_to_target,
        description: c.description.clone().unwrap_or_default(),
        target_delimiter: c.target_delimiter.clone().unwrap_or_else(space),
        fewshot_delimiter: c.fewshot_delimiter.clone().unwrap_or_else(blank_line),
        num_fewshot,
        fewshot_sampler: Sampler::FirstN,
        metric,
        generation_kwargs,
        answer_regex,
        max_delta_points: source.overrides.max_delta_points,
        flip_alpha: source.overrides.flip_alpha,
        max_flipped_points: source.overrides.max_flipped_points,
        limit: source.overrides.limit,
    };
    spec.validate(file)?;
    let read = |split: &str| -> Result<Vec<Doc>> {
        let files = lmeval::split_files(root, source.data.as_deref(), source.hub_cache.as_deref(), &c, split, file)?;
        let docs = lmeval::read_docs(&files, file)?;
        match process {
            Some(f) => {
                docs.iter().enumerate().map(|(i, d)| f(d).map_err(|e| e.context(format!("{file}: split `{split}` document {i}")))).collect()
            }
            None => Ok(docs),
        }
    };
    let mut docs = read(&test_split)?;
    if let Some(n) = source.overrides.limit {
        docs.truncate(n);
    }
    let fewshot = match &fewshot_split {
        Some(s) if num_fewshot > 0 => read(s)?,
        _ => Vec::new(),
    };
    Ok((spec, docs, fewshot))
}

/// The output type, and the metric the gate holds: the case's, else the first of `metric_list` the output type
/// supports, else its first.
fn output_and_metric(c: &Config, file: &str, source: &Source) -> Result<(OutputType, Metric)> {
    let output_type = match c.output_type.as_deref().unwrap_or("generate_until") {
        "multiple_choice" => OutputType::MultipleChoice,
        "generate_until" => OutputType::GenerateUntil,
        o => bail!("{file}: field `output_type` is `{o}`; the gate runs multiple_choice and generate_until"),
    };
    let supported: &[&str] = if output_type == OutputType::MultipleChoice { &["acc", "acc_norm"] } else { &["exact_match"] };
    let metrics: Vec<String> = c.metric_list.iter().flatten().map(|m| m.metric.clone()).collect();
    let metric_name = match &source.overrides.metric {
        Some(m) => m.clone(),
        None => metrics.iter().find(|m| supported.contains(&m.as_str())).cloned().unwrap_or_else(|| supported[0].to_string()),
    };
    if !metrics.is_empty() && !metrics.contains(&metric_name) {
        bail!("{file}: metric `{metric_name}` is not in the task's `metric_list` ({})", metrics.join(", "));
    }
    let metric = match metric_name.as_str() {
        "acc" => Metric::Acc,
        "acc_norm" => Metric::AccNorm,
        "exact_match" => Metric::ExactMatch,
        m => bail!("{file}: metric `{m}` is not one the gate holds (acc, acc_norm, exact_match)"),
    };
    Ok((output_type, metric))
}

/// The shots (the case's, else the file's, else 0), the scored split and the few-shot split. Only `first_n`
/// few-shot sampling is followed: lm-eval's others draw with Python's random generator.
fn splits(c: &Config, file: &str, source: &Source) -> Result<(usize, String, Option<String>)> {
    let fs = c.fewshot_config.clone().unwrap_or_default();
    if fs.doc_to_text.is_some() || fs.doc_to_choice.is_some() || fs.doc_to_target.is_some() || fs.samples.is_some() {
        bail!("{file}: `fewshot_config` with its own doc_to_* or samples is not supported");
    }
    if fs.process_docs.is_some() {
        bail!("{file}: `fewshot_config.process_docs` is Python, which the suite cannot run");
    }
    let num_fewshot = source.overrides.num_fewshot.or(c.num_fewshot).unwrap_or(0);
    if num_fewshot > 0 && fs.sampler.as_deref() != Some("first_n") {
        bail!(
            "{file}: {num_fewshot}-shot with sampler `{}` draws examples with Python's random generator; the gate \
             runs `fewshot_config: {{sampler: first_n}}` or 0-shot",
            fs.sampler.as_deref().unwrap_or("default")
        );
    }
    let test_split = c
        .test_split
        .clone()
        .or(c.validation_split.clone())
        .ok_or_else(|| Error::new(format!("{file}: neither `test_split` nor `validation_split`")))?;
    let fewshot_split = fs.split.clone().or(c.fewshot_split.clone()).or(c.training_split.clone()).or(c.validation_split.clone());
    Ok((num_fewshot, test_split, fewshot_split))
}

/// generate_until's stop strings and budget: the file's `generation_kwargs`, else lm-eval's defaults.
fn generation_kwargs(kwargs: Option<&Value>) -> GenerationKwargs {
    match kwargs {
        Some(v) => {
            let until = match v.get("until") {
                Some(Value::String(s)) => vec![s.clone()],
                Some(Value::Array(a)) => a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect(),
                _ => Vec::new(),
            };
            GenerationKwargs { until, max_gen_toks: v.get("max_gen_toks").and_then(|x| x.as_u64()).map_or(256, |x| x as usize) }
        }
        None => GenerationKwargs { until: vec!["\n\n".into()], max_gen_toks: 256 },
    }
}

/// lm-eval's `filter_list` for generate_until, as far as the gate follows it: none, or one `regex` filter (with
/// `take_first`), whose pattern becomes the answer regex.
fn regex_filter(filters: Option<&Value>, file: &str) -> Result<Option<String>> {
    let Some(list) = filters.and_then(|f| f.as_array()) else { return Ok(None) };
    let first = list.first().and_then(|f| f.get("filter")).and_then(|f| f.as_array()).cloned().unwrap_or_default();
    let mut pattern = None;
    for step in &first {
        match step.get("function").and_then(|f| f.as_str()) {
            Some("regex") => pattern = step.get("regex_pattern").and_then(|p| p.as_str()).map(str::to_string),
            Some("take_first") => {}
            f => bail!("{file}: `filter_list` function {f:?} is not supported (regex, take_first)"),
        }
    }
    Ok(pattern)
}

/// A `doc_to_*` value the gate reads as a field name or a Jinja template.
fn string(v: Option<Value>, field: &str, file: &str) -> Result<String> {
    match v {
        Some(Value::String(s)) => Ok(s),
        None => bail!("{file}: no `{field}`"),
        Some(o) => bail!("{file}: field `{field}` is {o}; the gate takes a field name or a Jinja template here"),
    }
}
