//! Goldens: what the Hugging Face reference computed, in mobius' JSON layout plus what a precise verdict needs.
//!
//! `goldens/<task>/<case>.json` (L4, prefill) and `<case>_generation.json` (L5). Floats are C99 hex floats.
//! `cargo xtask regen-goldens` is the only writer, and it writes atomically (temp file + rename).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{At, Error, Result, bail};
use crate::judge::hexfloat;
use mobius_numeric::TopK;

/// Above this vocabulary size the full last-position logits go to a safetensors sidecar instead of the JSON.
pub const INLINE_LOGITS_MAX: usize = 4096;

/// A float stored as a hex string.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hex(pub f64);

impl Serialize for Hex {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&hexfloat::format_f64(self.0))
    }
}

impl<'de> Deserialize<'de> for Hex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        hexfloat::parse_f64(&s).map(Hex).map_err(serde::de::Error::custom)
    }
}

fn hexes(v: &[f32]) -> Vec<Hex> {
    v.iter().map(|&x| Hex(x as f64)).collect()
}

/// Where the golden came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    pub reference: String,
    pub transformers: String,
    pub torch: String,
    pub dtype: String,
    pub device: String,
    /// Set when the reference ran with other weights than `reference`'s own: for int4 kernel-parity goldens,
    /// the int4 package whose weights were dequantized into it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<String>,
}

/// One package of the reference whose version made a golden other than the one the suite pins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferenceChange {
    pub package: &'static str,
    pub made: String,
    pub pinned: String,
}

impl Provenance {
    /// How this golden's reference differs from the one the suite pins (`xtask/reference/requirements.lock`'s
    /// transformers and torch; a torch build's local tag, `+cu132`, aside): empty when it is that one.
    pub fn reference_changes(&self) -> Vec<ReferenceChange> {
        let (transformers, torch) = reference_pins();
        let base = |v: &str| v.split('+').next().unwrap_or(v).to_string();
        let mut changes = Vec::new();
        if self.transformers != transformers {
            changes.push(ReferenceChange { package: "transformers", made: self.transformers.clone(), pinned: transformers });
        }
        if base(&self.torch) != base(&torch) {
            changes.push(ReferenceChange { package: "torch", made: self.torch.clone(), pinned: torch });
        }
        changes
    }
}

/// The transformers and torch versions the reference venv's lock pins.
pub fn reference_pins() -> (String, String) {
    const LOCK: &str = include_str!("../../../xtask/reference/requirements.lock");
    let pin = |name: &str| {
        LOCK.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}==")))
            .map(|v| v.trim_end_matches(['\\', ' ']).trim().to_string())
            .unwrap_or_default()
    };
    (pin("transformers"), pin("torch"))
}

/// How far the reference's own float32 run sits from the same model run in float64 on the same inputs: the statistics
/// of |f32 - f64| over the last-position logits. The tolerance policy judges a package in multiples of it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Noise {
    pub max: Hex,
    /// Median.
    pub p50: Hex,
    /// 99th percentile.
    pub p99: Hex,
}

impl Noise {
    /// The statistics of `|a - b|` (max, median, 99th percentile; nearest rank).
    pub fn between(a: &[f32], b: &[f64]) -> Noise {
        let d: Vec<f64> = a.iter().zip(b).map(|(&x, &y)| (x as f64 - y).abs()).collect();
        let [max, p50, p99] = mobius_numeric::spread(&d);
        Noise { max: Hex(max), p50: Hex(p50), p99: Hex(p99) }
    }
}

/// L4: the reference's prefill, last position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefillGolden {
    pub top1_id: i64,
    pub top2_id: i64,
    pub top10_ids: Vec<i64>,
    pub top10_logits: Vec<Hex>,
    /// max, min, mean, population std of the last-position logits.
    pub logits_summary: Vec<Hex>,
    pub input_ids: Vec<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab_size: Option<usize>,
    /// The full last-position logits, inline for small vocabularies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_logits: Option<Vec<Hex>>,
    /// Or a safetensors sidecar next to this file holding tensor `last_logits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_logits_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// The reference's float32 noise against float64 (goldens without it are judged by atol/rtol).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_noise: Option<Noise>,
    /// Every prompt position's logits, in brief: its top-k and its logsumexp (one entry per `input_ids`). L4 judges
    /// each, so a bug that starts at position 30 says so. mobius' goldens have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub positions: Vec<PositionTop>,
    /// mobius' multimodal goldens carry these; they are kept, not judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component_norms: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component_shapes: Option<serde_json::Value>,
}

/// How many of each prompt position's top logits a golden keeps (with the position's logsumexp, which stands for the
/// rest of the vocabulary): enough to see a bug that moves a position, small enough for a 262,144-token vocabulary
/// and a prompt of a thousand tokens.
pub const POSITION_TOP_K: usize = 5;

/// The reference's logits at one prompt position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PositionTop {
    pub ids: Vec<i64>,
    pub logits: Vec<Hex>,
    /// log(sum(exp(logits))) over the whole vocabulary, of the float32 logits (computed in float64).
    pub logsumexp: Hex,
    /// max |f32 - f64| over the vocabulary at this position: the reference's own noise there (goldens with a noise
    /// floor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<Hex>,
}

/// The reference's top-10 at one generation step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepTop {
    pub ids: Vec<i64>,
    pub logits: Vec<Hex>,
}

impl StepTop {
    /// The reference's own top1-top2 margin at this step (how close to a coin flip it was).
    pub fn margin(&self) -> Option<f64> {
        Some(self.logits.first()?.0 - self.logits.get(1)?.0)
    }

    pub fn logit_of(&self, id: i64) -> Option<f64> {
        self.ids.iter().position(|&i| i == id).map(|p| self.logits[p].0)
    }
}

/// L5: the reference's greedy generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerationGolden {
    pub model_id: String,
    pub prompt: String,
    pub generated_tokens: Vec<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<u32>,
    /// One entry per generated token: the reference's top-10 at that step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepTop>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
}

/// Paths of a case's goldens (for one modality, when the case has several).
#[derive(Debug, Clone)]
pub struct GoldenPaths {
    pub prefill: PathBuf,
    pub generation: PathBuf,
    /// Processed model inputs (token ids with expanded media tokens, pixel values, audio features), safetensors.
    pub inputs: PathBuf,
    /// The reference's encoder outputs (`image_features`, `audio_features`), safetensors.
    pub features: PathBuf,
    /// The reference's module outputs along the model (`level::localize`), safetensors.
    pub modules: PathBuf,
    /// Inputs files this one draws on: an image+audio stream's pixels and mel features are byte for byte those of
    /// the image-only and audio-only streams, so its own file holds only what differs (its token ids).
    pub shared_inputs: Vec<PathBuf>,
}

impl GoldenPaths {
    /// `stem` is the case name, or `<case>.<modality>` for a case that runs several modalities.
    pub fn new(goldens_dir: &Path, task_dir: &str, stem: &str) -> GoldenPaths {
        let dir = if task_dir.is_empty() { goldens_dir.to_path_buf() } else { goldens_dir.join(task_dir) };
        GoldenPaths {
            prefill: dir.join(format!("{stem}.json")),
            generation: dir.join(format!("{stem}_generation.json")),
            inputs: dir.join(format!("{stem}.inputs.safetensors")),
            features: dir.join(format!("{stem}.features.safetensors")),
            modules: dir.join(format!("{stem}.modules.safetensors")),
            shared_inputs: Vec::new(),
        }
    }

    /// The processed inputs: this stream's own file, completed by the tensors of `shared_inputs` it lacks. `root`
    /// shortens paths in messages.
    pub fn load_inputs(&self, show: impl Fn(&Path) -> String) -> Result<crate::feed::inputs::Inputs> {
        let read = |p: &Path| -> Result<crate::feed::inputs::Inputs> {
            let file = show(p);
            crate::feed::inputs::Inputs::from_safetensors(&file, &fs::read(p).map_err(|e| Error::new(format!("{file}: {e}")))?)
        };
        let mut inputs = read(&self.inputs)?;
        for shared in &self.shared_inputs {
            for t in read(shared)?.tensors {
                if !inputs.tensors.iter().any(|o| o.name == t.name) {
                    inputs.tensors.push(t);
                }
            }
        }
        inputs.tensors.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(inputs)
    }

    pub fn sidecar(&self) -> PathBuf {
        self.prefill.with_extension("logits.safetensors")
    }
}

impl PrefillGolden {
    pub fn load(path: &Path) -> Result<PrefillGolden> {
        PrefillGolden::parse(&path.display().to_string(), &fs::read_to_string(path).at(path.display())?)
    }

    /// Parses and checks a golden's text; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<PrefillGolden> {
        let g: PrefillGolden = serde_json::from_str(text).map_err(|e| Error::new(format!("{file}: {e}")))?;
        g.validate().map_err(|e| e.context(file))?;
        Ok(g)
    }

    fn validate(&self) -> Result<()> {
        // A NaN compares false with every tolerance: one among the numbers a verdict reads would switch its check off.
        finite("top10_logits", &self.top10_logits)?;
        finite("logits_summary", &self.logits_summary)?;
        if let Some(l) = &self.last_logits {
            finite("last_logits", l)?;
        }
        if self.top10_ids.is_empty() {
            bail!("field `top10_ids` is empty: an L4 golden needs the reference's top-10");
        }
        if let Some(i) = self.top10_ids.iter().position(|&id| id < 0 || self.vocab_size.is_some_and(|v| id as u64 >= v as u64)) {
            bail!("field `top10_ids[{i}]` is {}, not a token id of the vocabulary", self.top10_ids[i]);
        }
        if let Some(i) = self.top10_logits.windows(2).position(|w| w[0].0 < w[1].0) {
            bail!("field `top10_logits` is not in descending order at entries {i} and {}", i + 1);
        }
        if let Some(f) = &self.last_logits_file
            && !crate::paths::is_plain_name(f)
        {
            bail!("field `last_logits_file` is {f:?}; expected a file name beside the golden (no folder)");
        }
        if self.top10_ids.len() != self.top10_logits.len() {
            bail!("field `top10_logits` has {} entries but `top10_ids` has {}", self.top10_logits.len(), self.top10_ids.len());
        }
        if self.top10_ids.first() != Some(&self.top1_id) {
            bail!("field `top1_id` is {} but `top10_ids` starts with {:?}", self.top1_id, self.top10_ids.first());
        }
        if self.logits_summary.len() != 4 {
            bail!("field `logits_summary` has {} entries, expected 4 (max, min, mean, std)", self.logits_summary.len());
        }
        if let (Some(v), Some(l)) = (self.vocab_size, &self.last_logits)
            && l.len() != v
        {
            bail!("field `last_logits` has {} entries but `vocab_size` is {v}", l.len());
        }
        if !self.positions.is_empty() && self.positions.len() != self.input_ids.len() {
            bail!(
                "field `positions` has {} entries but `input_ids` has {}: one per prompt position",
                self.positions.len(),
                self.input_ids.len()
            );
        }
        for (i, p) in self.positions.iter().enumerate() {
            if p.ids.is_empty() || p.ids.len() != p.logits.len() {
                bail!("field `positions[{i}]` needs as many `logits` as `ids` (got {} and {})", p.logits.len(), p.ids.len());
            }
            if let Some(k) = p.ids.iter().position(|&id| id < 0 || self.vocab_size.is_some_and(|v| id as u64 >= v as u64)) {
                bail!("field `positions[{i}].ids[{k}]` is {}, not a token id of the vocabulary", p.ids[k]);
            }
            finite(&format!("positions[{i}].logits"), &p.logits)?;
            finite(&format!("positions[{i}].logsumexp"), &[p.logsumexp])?;
            if let Some(n) = p.noise {
                finite(&format!("positions[{i}].noise"), &[n])?;
            }
        }
        Ok(())
    }

    /// The reference's full last-position logits, if this golden has them (mobius' goldens do not).
    pub fn full_logits(&self, golden_path: &Path) -> Result<Option<Vec<f32>>> {
        if let Some(v) = &self.last_logits {
            return Ok(Some(v.iter().map(|h| h.0 as f32).collect()));
        }
        let Some(file) = &self.last_logits_file else { return Ok(None) };
        if !crate::paths::is_plain_name(file) {
            bail!("{}: field `last_logits_file` is {file:?}; expected a file name beside the golden (no folder)", golden_path.display());
        }
        let dir = golden_path.parent().unwrap_or(Path::new("."));
        let path = dir.join(file);
        crate::paths::confine(dir, &path, &format!("{}: field `last_logits_file`", golden_path.display()), crate::paths::SUITE_HINT)?;
        let bytes = fs::read(&path).at(path.display())?;
        let st = safetensors::SafeTensors::deserialize(&bytes).at(path.display())?;
        let t = st.tensor("last_logits").at(format!("{}: tensor `last_logits`", path.display()))?;
        if t.dtype() != safetensors::Dtype::F32 {
            bail!("{}: tensor `last_logits` is {:?}, expected F32", path.display(), t.dtype());
        }
        let v: Vec<f32> = t.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            bail!("{}: tensor `last_logits` is not finite at id {i} ({})", path.display(), v[i]);
        }
        if let Some(n) = self.vocab_size
            && n != v.len()
        {
            bail!("{}: tensor `last_logits` has {} entries but the golden's `vocab_size` is {n}", path.display(), v.len());
        }
        Ok(Some(v))
    }

    /// The reference's top1-top2 margin at the last position.
    pub fn margin(&self) -> Option<f64> {
        Some(self.top10_logits.first()?.0 - self.top10_logits.get(1)?.0)
    }
}

impl GenerationGolden {
    pub fn load(path: &Path) -> Result<GenerationGolden> {
        GenerationGolden::parse(&path.display().to_string(), &fs::read_to_string(path).at(path.display())?)
    }

    /// Parses and checks a golden's text; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<GenerationGolden> {
        let g: GenerationGolden = serde_json::from_str(text).map_err(|e| Error::new(format!("{file}: {e}")))?;
        // The reference keeps the EOS it stopped at, so even an immediate stop is one token: an empty stream is a
        // golden that would pass any package.
        if g.generated_tokens.is_empty() {
            bail!("{file}: field `generated_tokens` is empty; an L5 golden holds at least one token (regenerate it)");
        }
        if let Some(i) = g.generated_tokens.iter().position(|&t| t < 0) {
            bail!("{file}: field `generated_tokens[{i}]` is {}, not a token id", g.generated_tokens[i]);
        }
        if let Some(m) = g.max_new_tokens
            && !(1..=crate::vocab::MAX_NEW_TOKENS).contains(&m)
        {
            bail!("{file}: field `max_new_tokens` is {m}, expected 1..={}", crate::vocab::MAX_NEW_TOKENS);
        }
        if let Some(m) = g.max_new_tokens
            && g.generated_tokens.len() > m as usize
        {
            bail!("{file}: field `generated_tokens` has {} tokens, more than its `max_new_tokens` {m}", g.generated_tokens.len());
        }
        if !g.steps.is_empty() && g.steps.len() != g.generated_tokens.len() {
            bail!("{file}: field `steps` has {} entries but `generated_tokens` has {}", g.steps.len(), g.generated_tokens.len());
        }
        for (i, s) in g.steps.iter().enumerate() {
            if s.ids.len() != s.logits.len() || s.ids.is_empty() {
                bail!("{file}: field `steps[{i}]` needs as many `logits` as `ids` (got {} and {})", s.logits.len(), s.ids.len());
            }
            finite(&format!("steps[{i}].logits"), &s.logits).map_err(|e| e.context(file))?;
        }
        Ok(g)
    }
}

/// Errs naming `field[i]` when a stored number is NaN or infinite.
fn finite(field: &str, v: &[Hex]) -> Result<()> {
    match v.iter().position(|h| !h.0.is_finite()) {
        Some(i) => bail!("field `{field}[{i}]` is {}; a golden holds finite numbers only", v[i].0),
        None => Ok(()),
    }
}

/// What the reference run produced, before it becomes goldens.
#[derive(Debug, Clone)]
pub struct ReferenceRun {
    pub input_ids: Vec<i64>,
    pub input_hash: String,
    pub prefill_logits: Vec<f32>,
    /// The same prefill by the reference in float64, when it was run (for the noise floor).
    pub prefill_logits_f64: Option<Vec<f64>>,
    /// Every prompt position's top-k and logsumexp (and noise, with a float64 run), when the reference wrote them.
    pub positions: Vec<PositionTop>,
    pub generated_tokens: Vec<i64>,
    /// Last-position logits at each generation step (step 0 is the prefill).
    pub step_logits: Vec<Vec<f32>>,
    pub generated_text: String,
    pub provenance: Provenance,
}

/// The files `regen-goldens` writes for one case.
#[derive(Debug, Clone, PartialEq)]
pub struct GoldenFiles {
    pub prefill: Vec<u8>,
    pub generation: Vec<u8>,
    /// Present when the vocabulary is too large to inline.
    pub sidecar: Option<Vec<u8>>,
}

/// Derives both goldens from a reference run.
pub fn from_reference(run: &ReferenceRun, model_id: &str, prompt: &str, max_new_tokens: u32, sidecar_name: &str) -> Result<GoldenFiles> {
    let last = &run.prefill_logits;
    if last.is_empty() {
        bail!("the reference returned empty prefill logits");
    }
    if let Some(i) = last.iter().position(|x| !x.is_finite()) {
        bail!("the reference's prefill logits are not finite at id {i} ({})", last[i]);
    }
    let top = TopK::of(last, 10);
    let summary = mobius_numeric::summary(last);
    let inline = last.len() <= INLINE_LOGITS_MAX;
    let prefill = PrefillGolden {
        top1_id: top.ids[0],
        top2_id: *top.ids.get(1).unwrap_or(&top.ids[0]),
        top10_ids: top.ids.clone(),
        top10_logits: hexes(&top.logits),
        logits_summary: summary.iter().map(|&x| Hex(x)).collect(),
        input_ids: run.input_ids.clone(),
        input_hash: Some(run.input_hash.clone()),
        vocab_size: Some(last.len()),
        last_logits: inline.then(|| hexes(last)),
        last_logits_file: (!inline).then(|| sidecar_name.to_string()),
        provenance: Some(run.provenance.clone()),
        reference_noise: match &run.prefill_logits_f64 {
            Some(x) if x.len() == last.len() => Some(Noise::between(last, x)),
            Some(x) => bail!("the reference's float64 prefill has {} logits, its float32 one {}", x.len(), last.len()),
            None => None,
        },
        positions: match run.positions.len() {
            0 => Vec::new(),
            n if n == run.input_ids.len() => run.positions.clone(),
            n => bail!("the reference summarised {n} prompt positions for {} input ids", run.input_ids.len()),
        },
        component_norms: None,
        component_shapes: None,
    };
    let steps = run
        .step_logits
        .iter()
        .map(|l| {
            let t = TopK::of(l, 10);
            StepTop { ids: t.ids, logits: hexes(&t.logits) }
        })
        .collect();
    let generation = GenerationGolden {
        model_id: model_id.to_string(),
        prompt: prompt.to_string(),
        generated_tokens: run.generated_tokens.clone(),
        generated_text: Some(run.generated_text.clone()),
        input_hash: Some(run.input_hash.clone()),
        max_new_tokens: Some(max_new_tokens),
        steps,
        provenance: Some(run.provenance.clone()),
    };
    let sidecar = if inline {
        None
    } else {
        let bytes: Vec<u8> = last.iter().flat_map(|x| x.to_le_bytes()).collect();
        let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![last.len()], &bytes)
            .map_err(|e| Error::new(format!("sidecar: {e}")))?;
        Some(safetensors::serialize([("last_logits", view)], None).map_err(|e| Error::new(format!("sidecar: {e}")))?)
    };
    Ok(GoldenFiles { prefill: to_json(&prefill)?, generation: to_json(&generation)?, sidecar })
}

fn to_json<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    let mut out = serde_json::to_vec_pretty(v).map_err(|e| Error::new(e.to_string()))?;
    out.push(b'\n');
    Ok(out)
}

/// A safetensors golden's metadata, its `format` checked against `format` (`file` names it in errors): what the
/// safetensors goldens of the levels read first.
pub fn safetensors_metadata(file: &str, bytes: &[u8], format: &str) -> Result<std::collections::HashMap<String, String>> {
    let (_, meta) = safetensors::SafeTensors::read_metadata(bytes).at(file)?;
    let meta = meta.metadata().clone().unwrap_or_default();
    match meta.get("format") {
        None => bail!("{file}: metadata field `format` is missing"),
        Some(f) if f != format => bail!("{file}: metadata `format` is {f:?}, expected {format:?} (regenerate the golden)"),
        Some(_) => Ok(meta),
    }
}

/// Writes `bytes` to `path` so that a reader (or a crash) sees the old file or the new one, never a torn one:
/// a temp file in the same directory, flushed to disk, then renamed over the target.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).at(dir.display())?;
    let tmp = temp_path(path);
    let result = (|| -> std::io::Result<()> {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.at(path.display())
}

/// The temp file [`write_atomic`] writes beside `path` before renaming it into place.
fn temp_path(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("golden");
    dir.join(format!(".{name}.tmp.{}", std::process::id()))
}

/// Writes several files so that they change together or not at all: every new file is written to a temp file
/// beside its target and flushed first; only when all of them are on disk are they renamed into place. A write
/// that fails (a full disk, a read-only folder) leaves every target as it was, and no temp file behind.
pub fn write_all_atomic(files: &[(PathBuf, Vec<u8>)]) -> Result<()> {
    let mut written: Vec<PathBuf> = Vec::new();
    let staged = files.iter().try_for_each(|(path, bytes)| {
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir).at(dir.display())?;
        let tmp = temp_path(path);
        written.push(tmp.clone());
        (|| -> std::io::Result<()> {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()
        })()
        .at(path.display())
    });
    if let Err(e) = staged {
        for tmp in &written {
            let _ = fs::remove_file(tmp);
        }
        return Err(e);
    }
    for ((path, _), tmp) in files.iter().zip(&written) {
        fs::rename(tmp, path).at(path.display())?;
    }
    let dirs: std::collections::BTreeSet<&Path> = files.iter().filter_map(|(p, _)| p.parent()).collect();
    for d in dirs {
        if let Ok(d) = fs::File::open(d) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Removes the temp files a killed writer left under `dir` (`.<name>.tmp.<pid>` whose process is gone) and returns
/// them. A live writer's temp file is left alone; where a process cannot be looked up (no `/proc`), none is removed.
pub fn remove_stale_temps(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if !Path::new("/proc/self").exists() {
        return out;
    }
    let Ok(rd) = fs::read_dir(dir) else { return out };
    for e in rd.flatten() {
        let p = e.path();
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if is_dir {
            out.extend(remove_stale_temps(&p));
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name.strip_prefix('.').and_then(|n| n.rsplit_once(".tmp.")).and_then(|(_, pid)| pid.parse::<u32>().ok());
        if let Some(pid) = pid
            && !Path::new("/proc").join(pid.to_string()).exists()
            && fs::remove_file(&p).is_ok()
        {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod provenance_tests {
    use super::*;

    #[test]
    fn a_golden_s_reference_is_compared_with_the_pinned_one() {
        let (transformers, torch) = reference_pins();
        assert!(!transformers.is_empty() && !torch.is_empty() && !transformers.contains('\\'), "{transformers} {torch}");
        let p = |t: &str, o: &str| Provenance {
            reference: "r".into(),
            transformers: t.into(),
            torch: o.into(),
            dtype: "float32".into(),
            device: "cpu".into(),
            weights: None,
        };
        assert_eq!(p(&transformers, &format!("{torch}+cu132")).reference_changes(), [], "a local build tag is the same torch");
        let e = p("4.0.0", &torch).reference_changes();
        assert_eq!(e, [ReferenceChange { package: "transformers", made: "4.0.0".into(), pinned: transformers }]);
    }
}
