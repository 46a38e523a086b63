//! The multimodal accuracy gate on one lmms-eval task x variant: every item's media and question through the
//! package's own pipeline (Whisper's encoder-decoder for audio, the encoders and the decoder for images), greedy to
//! the task's token budget, judged against the reference's outputs under the same pinned protocol.

use std::path::Path;
use std::sync::Arc;

use crate::accuracy::lmms::{Media, MediaItem, MediaTask, Medium};
use crate::accuracy::media_gate::{self, MediaBaseline, Output};
use crate::accuracy::policy::GatePolicy;
use crate::accuracy::protocol::{MediaRule, Protocol};
use crate::accuracy::resolve::Source;
use crate::context::SpeechDecode;
use crate::error::{Error, Result, bail};
use crate::feed::inputs::{Inputs, NamedTensor};
use crate::feed::tokenizer::TextTokenizer;
use crate::level::gate::judged::{MediaJudged, media_numbers};
use crate::level::speech::{SpeechFeed, speech_inputs};
use crate::level::trial::{Ends, Trial};
use crate::outcome::{Failure, FailureKind};
use crate::outcome::{Outcome, Status};
use crate::paths;
use crate::run::decoder::Decoder;
use crate::run::drafted;
use crate::run::generate::{self, Suppress};
use crate::run::pipeline::Pipeline;
use crate::run::runtime::Provider;
use crate::vocab::Level;

/// A task and its items, loaded once per process (every variant's trial reads the same documents).
type Loaded = Arc<(MediaTask, Vec<MediaItem>)>;

fn load(root: &Path, file: &str, source: &Source) -> Result<Loaded> {
    type Cache = std::sync::Mutex<std::collections::HashMap<(std::path::PathBuf, String), Loaded>>;
    static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
    let key = (root.join(file), format!("{source:?}"));
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(hit.clone());
    }
    // As the text gate's loader does: the task file inside the root (unless the case opts out), and a regular file.
    paths::check_case_path(root, file, source.external_paths, file)?;
    paths::regular_file(&root.join(file), file)?;
    if let Some(data) = &source.data {
        let rel = data.strip_prefix(root).unwrap_or(data);
        paths::check_case_path(root, &rel.to_string_lossy(), source.external_paths, &format!("{file}: the case's `data` for it"))?;
    }
    let task = MediaTask::load(root, file, source.data.as_deref(), source.hub_cache.as_deref(), source.overrides.limit)?;
    let items = task.items()?;
    let loaded = Arc::new((task, items));
    cache.lock().unwrap_or_else(|p| p.into_inner()).insert(key, loaded.clone());
    Ok(loaded)
}

/// The multimodal gate on one task, on the package `run_accuracy` placed.
pub(super) fn run_media_accuracy(
    t: &Trial,
    provider: Provider,
    package: &Path,
    task_file: &str,
    task_name: &str,
    source: &Source,
) -> Result<Outcome> {
    let what = format!("{}: accuracy task `{task_file}`", t.case.file);
    let protocol = source
        .overrides
        .protocol
        .clone()
        .ok_or_else(|| Error::new(format!("{what}: an lmms-eval task needs a `protocol` (prompt, media, stops, answer)")))?;
    // As for the text gate: a baseline not made yet is a missing golden (a skip outside CI), before the task loads.
    let baseline_path = t.suite.baseline_path(task_name, &t.case.name);
    if !baseline_path.is_file() {
        return Ok(t.missing(&baseline_path));
    }
    let loaded = load(&t.suite.root, task_file, source).map_err(|e| e.context(&t.case.file))?;
    let (task, items) = (&loaded.0, &loaded.1);
    protocol.validate(&format!("{what}: field `protocol`"), task.family.medium() == Medium::Audio)?;
    let baseline_file = t.rel(&baseline_path);
    paths::confine(&t.suite.root, &baseline_path, "baseline", paths::SUITE_HINT)?;
    let baseline = MediaBaseline::load(&baseline_path, &baseline_file)?;
    if baseline.protocol != protocol {
        return Err(Error::new(format!(
            "{what}: the case's protocol is not the one {baseline_file} was made under, so the reference and the \
             package would run differently; refused\n  case:     {}\n  baseline: {}\n  regenerate (after fixing the \
             case): {}",
            serde_json::to_string(&protocol).unwrap_or_default(),
            serde_json::to_string(&baseline.protocol).unwrap_or_default(),
            t.regenerate()
        )));
    }
    let until = protocol.stops(&task.until).to_vec();
    if baseline.requests_hash != media_gate::requests_hash(items, &protocol, &until, task.max_new_tokens) {
        return Err(Error::new(format!(
            "baseline is stale: {baseline_file} was made from other items, media or protocol than {task_file} and \
             the case give now\n  regenerate: {}",
            t.regenerate()
        )));
    }
    let tokenizer = t.tokenizer(package)?;
    let eos = t.eos_ids(package)?;
    let feed = Feed::new(t, task, &baseline_path)?;
    let run = Items { task, items, feed: &feed, eos: &eos, tokenizer: &tokenizer, task_file, package, provider };
    let (got, genai_prompts) = match t.level {
        Level::AccuracyGenai => match run.through_genai(t, &protocol)? {
            Ok((got, differ)) => (got, Some(differ)),
            Err(o) => return Ok(o),
        },
        _ => match run.through_the_suite(t, &baseline)? {
            Ok(got) => (got, None),
            Err(o) => return Ok(o),
        },
    };
    let reference: Vec<Output> = baseline.items.iter().map(|b| Output { full: b.full.clone(), margin: b.margin.map(|h| h.0) }).collect();
    let policy = GatePolicy::for_task(source.overrides.thresholds(), t.ctx.ci);
    policy.validate(&what)?;
    let mut r = media_gate::judge(task, items, &reference, &got, &protocol, &policy).map_err(|e| e.context(&baseline_file))?;
    if source.overrides.plumbing_only {
        media_gate::hold_outputs(&mut r, items, &reference, &got);
    }
    let mut message = crate::level::gate::render::media_message(
        t.name,
        task,
        &protocol,
        &r,
        source.overrides.plumbing_only,
        &baseline_file,
        &t.regenerate(),
    );
    if let Some(differ) = &genai_prompts {
        message.push_str(&crate::level::gate::render::genai_prompts(differ, items.len()));
    }
    Ok(Outcome {
        status: if r.pass { Status::Pass } else { Status::Fail },
        message,
        failure: (!r.pass).then(|| Box::new(Failure::of(FailureKind::Accuracy))),
        judgement: Some(std::sync::Arc::new(MediaJudged { numbers: media_numbers(&r, items), report: r })),
        ..Outcome::new(Status::Pass, "")
    })
}

/// A task's items and what runs them through the package.
struct Items<'a> {
    task: &'a MediaTask,
    items: &'a [MediaItem],
    feed: &'a Feed,
    eos: &'a [i64],
    tokenizer: &'a TextTokenizer,
    task_file: &'a str,
    package: &'a Path,
    provider: Provider,
}

impl Items<'_> {
    /// An item's place, for errors.
    fn doc(&self, it: &MediaItem) -> String {
        format!("{}: document {}", self.task_file, it.doc)
    }

    /// Every item through onnxruntime-genai's own processor and generator, with the documents whose processor prompt
    /// differs from the reference processor's; or why the trial ends first (genai refused the package, or has no
    /// build for the device).
    fn through_genai(&self, t: &Trial, protocol: &Protocol) -> Result<Ends<(Vec<Output>, Vec<usize>)>> {
        let (package, provider) = (self.package, self.provider);
        if let Some(why) = crate::run::genai::library::cpu_build_on_cuda(provider)? {
            return Ok(Err(Outcome::skip(why)));
        }
        let model = match crate::run::genai::Model::open(package, provider)? {
            Ok(m) => m,
            Err(refusal) => return Ok(Err(t.genai_refused(package, provider, refusal))),
        };
        let scratch = Scratch::new(t.name)?;
        let (mut got, mut differ) = (Vec::with_capacity(self.items.len()), Vec::new());
        for it in self.items {
            let (o, same) = genai_output(self.feed, &model, &scratch, protocol, it, self.task.max_new_tokens, self.eos, self.tokenizer)
                .map_err(|e| e.context(self.doc(it)))?;
            if !same {
                differ.push(it.doc);
            }
            got.push(o);
        }
        Ok(Ok((got, differ)))
    }

    /// Every item through the suite's own pipeline, shared out over one session a core; or the outcome that ends the
    /// trial first (a skip, or an item whose logits are not finite).
    fn through_the_suite(&self, t: &Trial, baseline: &MediaBaseline) -> Result<Ends<Vec<Output>>> {
        let (package, provider, items) = (self.package, self.provider, self.items);
        let decoder = match t.decoder(package, provider)? {
            Ok(d) => d,
            Err(skip) => return Ok(Err(skip)),
        };
        // One session a core, the items shared out, each run batch 1 as before (the encoder's session is shared).
        let decoders = crate::run::workers::decoders(&decoder, items.len(), provider, t.ctx.gate_sessions)?;
        // Speech items are checked against the reference's transcript (`run::drafted`) unless the run asks for
        // one step at a time; the baseline's items are the task's, in order (its requests hash says so).
        let drafted = self.feed.medium == Medium::Audio && t.ctx.speech_decode == SpeechDecode::Drafted;
        let work: Vec<(&MediaItem, Option<&[i64]>)> =
            items.iter().enumerate().map(|(i, it)| (it, baseline.items.get(i).filter(|_| drafted).map(|b| &b.tokens[..]))).collect();
        let outputs = crate::run::workers::share_out(
            &decoders,
            &work,
            |decoder, &(it, draft)| {
                media_output(self.feed, decoder, package, provider, it, draft, self.task.max_new_tokens, self.eos, self.tokenizer)
                    .map_err(|e| e.context(self.doc(it)))
            },
            |r| !matches!(r, Ok(Ok(_))),
        );
        drop(decoders);
        let mut got = Vec::with_capacity(items.len());
        for (it, output) in items.iter().zip(outputs) {
            let Some(output) = output else { bail!("{}: not run (a worker stopped early)", self.doc(it)) };
            match output? {
                Ok(o) => got.push(o),
                // NaN logits are a verdict of their own (one a strict xfail may state), as at L4 and L5.
                Err(step) => {
                    let failure = Failure { first_step: Some(step), ..Failure::of(FailureKind::NonFinite) };
                    let message = crate::level::gate::render::media_non_finite(t.name, &self.doc(it), step);
                    return Ok(Err(Outcome { failure: Some(Box::new(failure)), ..Outcome::fail(message) }));
                }
            }
        }
        Ok(Ok(got))
    }
}

/// One item through the package: its inputs, greedy to the budget (stops are applied when judging, so the
/// output past them is kept), the text decoded as the reference's is; or the first step whose logits are not
/// all finite. With a `draft`, the greedy tokens are checked against it many a forward call (`run::drafted`).
#[allow(clippy::too_many_arguments)]
fn media_output(
    feed: &Feed,
    decoder: &Decoder,
    package: &Path,
    provider: Provider,
    item: &MediaItem,
    draft: Option<&[i64]>,
    max_new_tokens: usize,
    eos: &[i64],
    tokenizer: &TextTokenizer,
) -> Result<std::result::Result<Output, usize>> {
    let what = format!("document {}", item.doc);
    let inputs = feed.inputs(item, &what)?;
    let pipeline = Pipeline::build(package, decoder, provider, &inputs, &what)?;
    let prompt = inputs.input_ids();
    let g = match draft {
        Some(draft) => drafted::greedy_drafted(decoder, &pipeline, prompt, max_new_tokens, eos, &feed.suppress, draft)?.generated,
        None => generate::greedy_with(decoder, &pipeline, prompt, max_new_tokens, eos, None, &[], &feed.suppress)?,
    };
    if let Some(nf) = g.steps.iter().position(|s| s.non_finite.is_some()) {
        return Ok(Err(nf));
    }
    Ok(Ok(output_of(&g.chosen(), &g.steps.iter().map(|s| s.top.logits.clone()).collect::<Vec<_>>(), eos, tokenizer)))
}

/// One item through onnxruntime-genai: the reference's prompt (its media blocks back to their placeholders)
/// and the item's media, as files, through genai's own processor, then its greedy generator to the budget.
/// Also whether genai's processor built the reference processor's ids.
#[allow(clippy::too_many_arguments)]
fn genai_output(
    feed: &Feed,
    model: &crate::run::genai::Model,
    scratch: &Scratch,
    protocol: &Protocol,
    item: &MediaItem,
    max_new_tokens: usize,
    eos: &[i64],
    tokenizer: &TextTokenizer,
) -> Result<(Output, bool)> {
    let what = format!("document {}", item.doc);
    let inputs = feed.inputs(item, &what)?;
    let reference_ids = match feed.medium {
        Medium::Image => inputs.input_ids().to_vec(),
        Medium::Audio => feed.prefix.clone(),
    };
    let prompt = tokenizer.decode_raw(&crate::run::genai::processor::placeholder_ids(&reference_ids));
    let file = scratch.media(item, feed.medium, protocol.media, &what)?;
    let (images, audio) = match feed.medium {
        Medium::Image => (vec![file], vec![]),
        Medium::Audio => (vec![], vec![file]),
    };
    let run = model.greedy_media(&prompt, &images, &audio, max_new_tokens)?;
    let same = match feed.medium {
        Medium::Image => run.processor_ids == reference_ids,
        // Whisper's processor makes features, not ids: the decoder prefix is the prompt itself.
        Medium::Audio => true,
    };
    Ok((output_of(&run.tokens, &[], eos, tokenizer), same))
}

/// A folder for the files genai's processor reads (it takes media by path), removed when the trial ends.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(trial: &str) -> Result<Scratch> {
        let tag: String = trial.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        // The name folds `/` and `.` into `-`; the count keeps two trials whose names fold alike apart.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("mobius-genai-media-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| Error::new(format!("{}: {e}", dir.display())))?;
        Ok(Scratch(dir))
    }

    /// The item's medium as a file genai can load: the dataset's bytes as given (the `png` rule over PNG bytes is
    /// the same pixels), or decoded audio as a float WAV. A rule that needs re-encoding is refused: the suite has
    /// no image encoder, and another encoder than the reference's would be another protocol.
    fn media(&self, item: &MediaItem, medium: Medium, rule: MediaRule, what: &str) -> Result<std::path::PathBuf> {
        let path = |ext: &str| self.0.join(format!("{}.{ext}", item.doc));
        let (p, bytes) = match (&item.media, medium) {
            (Media::File(b), Medium::Image) => {
                let png = b.starts_with(b"\x89PNG");
                match rule {
                    MediaRule::AsGiven => (path(if png { "png" } else { "jpg" }), b.clone()),
                    MediaRule::Png if png => (path("png"), b.clone()),
                    other => bail!(
                        "{what}: the protocol's media rule {other:?} re-encodes the image, which the genai engine cannot do \
                         as the reference's processor did; state `media: as_given` (or `png` over PNG data)"
                    ),
                }
            }
            (Media::File(b), Medium::Audio) => (path(if b.starts_with(b"RIFF") { "wav" } else { "flac" }), b.clone()),
            (Media::Samples { samples, rate }, _) => (path("wav"), float_wav(samples, *rate, what)?),
        };
        std::fs::write(&p, bytes).map_err(|e| Error::new(format!("{}: {e}", p.display())))?;
        Ok(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Mono 32-bit float WAV bytes of `samples` at `rate`.
fn float_wav(samples: &[f32], rate: u32, what: &str) -> Result<Vec<u8>> {
    let spec = hound::WavSpec { channels: 1, sample_rate: rate, bits_per_sample: 32, sample_format: hound::SampleFormat::Float };
    let mut out = std::io::Cursor::new(Vec::new());
    let fail = |e: hound::Error| Error::new(format!("{what}: writing its audio as WAV: {e}"));
    let mut w = hound::WavWriter::new(&mut out, spec).map_err(fail)?;
    for &s in samples {
        w.write_sample(s).map_err(fail)?;
    }
    w.finalize().map_err(fail)?;
    Ok(out.into_inner())
}

/// Stored tensors named `<doc>.<name>`, grouped by document under their own names.
fn by_document(all: Inputs) -> std::collections::BTreeMap<usize, Vec<NamedTensor>> {
    let mut out: std::collections::BTreeMap<usize, Vec<NamedTensor>> = Default::default();
    for t in all.tensors {
        if let Some((doc, name)) = t.name.split_once('.').and_then(|(d, n)| Some((d.parse::<usize>().ok()?, n.to_string()))) {
            out.entry(doc).or_default().push(NamedTensor { name, ..t });
        }
    }
    out
}

/// The text of a generation (EOS dropped, special tokens skipped, as the reference's `batch_decode` does) and its
/// smallest top-1 minus top-2 gap.
pub fn output_of(tokens: &[i64], tops: &[Vec<f32>], eos: &[i64], tokenizer: &TextTokenizer) -> Output {
    let text_ids: Vec<i64> = tokens.iter().copied().filter(|t| !eos.contains(t)).collect();
    let margin =
        tops.iter().filter(|t| t.len() >= 2).map(|t| (t[0] - t[1]) as f64).fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
    Output { full: tokenizer.decode(&text_ids), margin }
}

/// How an item's inputs are made for this case: audio through the suite's own Whisper feature extractor and the
/// decoder prefix `generate()` forces; images as the reference's processor made them (stored beside the baseline).
struct Feed {
    medium: Medium,
    mel: Option<crate::feed::log_mel::Config>,
    prefix: Vec<i64>,
    suppress: Suppress,
    /// The stored processor tensors by document, read once: (the file as shown, `<doc>` -> its tensors).
    images: Option<(String, std::collections::BTreeMap<usize, Vec<NamedTensor>>)>,
}

impl Feed {
    fn new(t: &Trial, task: &MediaTask, baseline: &Path) -> Result<Feed> {
        let root = &t.suite.root;
        match task.family.medium() {
            Medium::Audio => {
                let speech = SpeechFeed::new(t, "the multimodal gate")?;
                Ok(Feed { medium: Medium::Audio, mel: Some(speech.mel), prefix: speech.prefix, suppress: speech.suppress, images: None })
            }
            Medium::Image => {
                let p = media_gate::inputs_path(baseline);
                let shown = t.rel(&p);
                if !p.is_file() {
                    bail!("{shown} is missing: the reference processor's inputs for the task's images; regenerate: {}", t.regenerate());
                }
                paths::confine(root, &p, "baseline inputs", paths::SUITE_HINT)?;
                let packed = std::fs::read(&p).map_err(|e| Error::new(format!("{shown}: {e}")))?;
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut snap::read::FrameDecoder::new(&packed[..]), &mut bytes)
                    .map_err(|e| Error::new(format!("{shown}: not a Snappy-framed file: {e}")))?;
                Ok(Feed {
                    medium: Medium::Image,
                    mel: None,
                    prefix: Vec::new(),
                    suppress: Suppress::default(),
                    images: Some((shown.clone(), by_document(Inputs::from_safetensors(&shown, &bytes)?))),
                })
            }
        }
    }

    fn inputs(&self, item: &MediaItem, what: &str) -> Result<Inputs> {
        match self.medium {
            Medium::Audio => {
                let mel = self.mel.as_ref().expect("audio feeds carry a mel config");
                let (samples, rate) = match &item.media {
                    Media::File(b) => {
                        let a = crate::feed::audio::decode(b, what)?;
                        (a.samples, a.rate)
                    }
                    Media::Samples { samples, rate } => (samples.clone(), *rate),
                };
                speech_inputs(mel, &self.prefix, &samples, rate, what)
            }
            Medium::Image => {
                let (shown, docs) = self.images.as_ref().expect("image feeds carry stored inputs");
                match docs.get(&item.doc) {
                    Some(tensors) => Ok(Inputs { tensors: tensors.clone() }),
                    None => bail!("{shown}: no tensors for {what} (`{}.*`)", item.doc),
                }
            }
        }
    }
}
