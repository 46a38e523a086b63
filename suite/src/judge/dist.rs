//! The distribution level (`dist`): how far a package's next-token distributions sit from the **fp32 reference**'s
//! over a teacher-forced corpus, for every dtype alike, in llama.cpp's `--kl-divergence` terms (mean KL divergence
//! with its uncertainty and its spread, Δp, "same top p", the perplexity ratio).
//!
//! The golden (`<case>.dist.safetensors`, written by `xtask/reference/dist.py`) keeps, per scored position, the
//! reference's top-k log-probabilities and the log of the mass outside them (a tail bucket), and the log-probability
//! of the corpus's own next token. KL is computed over that partition (the top k ids one by one, the rest as one
//! bin): by the log-sum inequality it is a lower bound of the full-vocabulary KL, and the golden records, per
//! variant at regen, how much of the full KL it captured.
//!
//! The verdict holds mean and p99 KL within multiples of a floor the golden measured on the reference itself for
//! the trial's dtype (the float64 model for f32; the model cast to f16 / bf16; the suite's own round-to-nearest
//! int4), never of anything read from the package, so a quantizer that is wrong in the same way as its own
//! dequantized weights still shows.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::{At, Error, Result, bail};
use crate::vocab::Dtype;

/// The golden's format, as `dist.py` writes it (`DIST_FORMAT`).
pub const FORMAT: &str = "dist-golden-v1";

/// A floor: the reference run another way, against the fp32 reference, summarised over the scored positions.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Floor {
    /// The reference run this way gave NaN or infinity (Gemma-3 cast to float16 overflows): no floor, nothing to
    /// judge a package of this dtype by.
    #[serde(default)]
    pub non_finite: bool,
    #[serde(default)]
    pub positions: usize,
    #[serde(default)]
    pub mean_kld: f64,
    #[serde(default)]
    pub p99_kld: f64,
    #[serde(default)]
    pub max_kld: f64,
    #[serde(default)]
    pub same_top: f64,
    /// What the reference was compared with (`float64`, `float16`, `round-to-nearest int4 (N tensors)`).
    pub against: String,
    /// The mean over the full vocabulary (the partition's is a lower bound of it).
    #[serde(default)]
    pub full_mean_kld: Option<f64>,
}

/// The full-vocabulary check regen made on one package variant.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Check {
    #[serde(default)]
    pub non_finite: bool,
    #[serde(default)]
    pub positions: usize,
    #[serde(default)]
    pub mean_kld: f64,
    #[serde(default)]
    pub mean_kld_partition: f64,
    /// The partition KL over the full KL (at most 1: the partition's is a lower bound).
    #[serde(default)]
    pub captured: f64,
}

/// The share of the full KL other k would have captured, on the variant with the largest KL.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct KSweep {
    pub variant: Option<String>,
    #[serde(default)]
    pub captured: BTreeMap<String, f64>,
}

/// How a golden's corpus is cut into segments, each prefilled on its own.
#[derive(Debug, Clone, PartialEq)]
pub enum Segments {
    /// Text: chunks of `n_ctx` tokens (llama.cpp's scheme), the second half of each scored.
    Chunks { n_ctx: usize },
    /// Speech: one segment per utterance (the decoder's forced prefix, the transcript, end of text), each after
    /// its clip went through the encoder; every transcript token and the end of text scored. Per utterance, its
    /// name and the sha256 of its clip as the reference heard it.
    Utterances { names: Vec<String>, audio_sha256: Vec<String> },
}

/// The reference's side of the distribution level.
#[derive(Debug, Clone)]
pub struct DistGolden {
    pub segments: Segments,
    pub k: usize,
    /// The first scored position of each segment (a chunk's n_ctx / 2; an utterance's last prefix position):
    /// positions `first .. len - 1` predict the next token.
    pub first: usize,
    /// The segments as fed, one after another.
    pub tokens: Vec<i64>,
    /// Each segment's (start, length) in `tokens`.
    pub bounds: Vec<(usize, usize)>,
    pub top_ids: Vec<i64>,
    pub top_logprobs: Vec<f32>,
    pub tail_logprob: Vec<f32>,
    pub target_logprob: Vec<f32>,
    pub corpus_sha256: String,
    pub floors: BTreeMap<String, Floor>,
    /// Per dtype, the floor's KL at every scored position (`floor_kld.<dtype>`).
    pub floor_series: BTreeMap<String, Vec<f32>>,
    pub check: BTreeMap<String, Check>,
    pub k_sweep: KSweep,
}

fn tensor<'a>(
    st: &'a safetensors::SafeTensors<'a>,
    file: &str,
    name: &str,
    dtype: safetensors::Dtype,
    shape: &[usize],
) -> Result<&'a [u8]> {
    let t = st.tensor(name).at(format!("{file}: tensor `{name}`"))?;
    if t.dtype() != dtype {
        bail!("{file}: tensor `{name}` is {:?}, expected {dtype:?}", t.dtype());
    }
    if t.shape() != shape {
        bail!("{file}: tensor `{name}` has shape {:?}, expected {shape:?}", t.shape());
    }
    Ok(t.data())
}

fn i32s(b: &[u8]) -> Vec<i64> {
    b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

impl DistGolden {
    pub fn load(path: &Path, file: &str) -> Result<DistGolden> {
        let bytes = std::fs::read(path).at(file)?;
        DistGolden::parse(file, &bytes)
    }

    /// Reads and checks a golden: its format, every tensor's dtype and shape, ids and log-probabilities in range.
    pub fn parse(file: &str, bytes: &[u8]) -> Result<DistGolden> {
        let (_, meta) = safetensors::SafeTensors::read_metadata(bytes).at(file)?;
        let meta = meta.metadata().clone().unwrap_or_default();
        let field = |name: &str| meta.get(name).ok_or_else(|| Error::new(format!("{file}: metadata field `{name}` is missing")));
        let format = field("format")?;
        if format != FORMAT {
            bail!("{file}: metadata `format` is {format:?}, expected {FORMAT:?} (regenerate the golden)");
        }
        let number = |name: &str| -> Result<usize> {
            field(name)?.parse().map_err(|_| Error::new(format!("{file}: metadata field `{name}` is not a whole number")))
        };
        let (k, first) = (number("k")?, number("first")?);
        if k == 0 {
            bail!("{file}: metadata k=0: expected k >= 1");
        }
        let speech = match meta.get("segments").map(String::as_str) {
            None | Some("chunks") => false,
            Some("utterances") => true,
            Some(o) => bail!("{file}: metadata `segments` is {o:?}, expected \"chunks\" or \"utterances\""),
        };
        let json = |name: &str| -> Result<serde_json::Value> {
            serde_json::from_str(field(name)?).map_err(|e| Error::new(format!("{file}: metadata field `{name}`: {e}")))
        };
        let floors: BTreeMap<String, Floor> =
            serde_json::from_value(json("floors")?).map_err(|e| Error::new(format!("{file}: metadata field `floors`: {e}")))?;
        let check: BTreeMap<String, Check> =
            serde_json::from_value(json("check")?).map_err(|e| Error::new(format!("{file}: metadata field `check`: {e}")))?;
        let k_sweep: KSweep =
            serde_json::from_value(json("k_sweep")?).map_err(|e| Error::new(format!("{file}: metadata field `k_sweep`: {e}")))?;
        let st = safetensors::SafeTensors::deserialize(bytes).at(file)?;
        let tok = st.tensor("tokens").at(format!("{file}: tensor `tokens`"))?;
        let (segments, tokens, bounds) = if speech {
            let t = match tok.shape() {
                [t] if *t > 0 => *t,
                s => bail!("{file}: tensor `tokens` has shape {s:?}, expected [tokens] (the utterances one after another)"),
            };
            let tokens = i32s(tensor(&st, file, "tokens", safetensors::Dtype::I32, &[t])?);
            let lt = st.tensor("lengths").at(format!("{file}: tensor `lengths`"))?;
            let s = match lt.shape() {
                [s] if *s > 0 => *s,
                s => bail!("{file}: tensor `lengths` has shape {s:?}, expected [utterances]"),
            };
            let lengths = i32s(tensor(&st, file, "lengths", safetensors::Dtype::I32, &[s])?);
            let mut bounds = Vec::with_capacity(s);
            let mut start = 0usize;
            for (i, &l) in lengths.iter().enumerate() {
                if l < first as i64 + 2 {
                    bail!(
                        "{file}: tensor `lengths` entry {i} is {l}: an utterance has its prefix ({} ids) and at least one more",
                        first + 1
                    );
                }
                bounds.push((start, l as usize));
                start += l as usize;
            }
            if start != t {
                bail!("{file}: tensor `lengths` sums to {start}, but `tokens` has {t}");
            }
            let list = |name: &str| -> Result<Vec<String>> {
                let v: Vec<String> =
                    serde_json::from_str(field(name)?).map_err(|e| Error::new(format!("{file}: metadata field `{name}`: {e}")))?;
                if v.len() != s {
                    bail!("{file}: metadata field `{name}` has {} entries for {s} utterances", v.len());
                }
                Ok(v)
            };
            (Segments::Utterances { names: list("names")?, audio_sha256: list("audio_sha256")? }, tokens, bounds)
        } else {
            let n_ctx = number("n_ctx")?;
            if n_ctx < 8 || first != n_ctx / 2 {
                bail!("{file}: metadata n_ctx={n_ctx}, first={first}: expected first = n_ctx / 2, n_ctx >= 8");
            }
            let chunks = match tok.shape() {
                [c, n] if *n == n_ctx && *c > 0 => *c,
                s => bail!("{file}: tensor `tokens` has shape {s:?}, expected [chunks, {n_ctx}]"),
            };
            let tokens = i32s(tensor(&st, file, "tokens", safetensors::Dtype::I32, &[chunks, n_ctx])?);
            (Segments::Chunks { n_ctx }, tokens, (0..chunks).map(|c| (c * n_ctx, n_ctx)).collect::<Vec<_>>())
        };
        let n: usize = bounds.iter().map(|&(_, l)| l - 1 - first).sum();
        let top_ids = i32s(tensor(&st, file, "top_ids", safetensors::Dtype::I32, &[n, k])?);
        let top_logprobs = f32s(tensor(&st, file, "top_logprobs", safetensors::Dtype::F32, &[n, k])?);
        let tail_logprob = f32s(tensor(&st, file, "tail_logprob", safetensors::Dtype::F32, &[n])?);
        let target_logprob = f32s(tensor(&st, file, "target_logprob", safetensors::Dtype::F32, &[n])?);
        if let Some(i) = tokens.iter().chain(&top_ids).position(|&t| t < 0) {
            bail!("{file}: a negative token id (entry {i} of `tokens` then `top_ids`)");
        }
        for (name, v) in [("top_logprobs", &top_logprobs), ("target_logprob", &target_logprob)] {
            if let Some(i) = v.iter().position(|x| !(x.is_finite() && *x <= 0.0)) {
                bail!("{file}: tensor `{name}` entry {i} is {}, expected a finite log-probability (<= 0)", v[i]);
            }
        }
        let mut floor_series = BTreeMap::new();
        for (dtype, _) in floors.iter().filter(|(_, f)| !f.non_finite) {
            let name = format!("floor_kld.{dtype}");
            let v = f32s(tensor(&st, file, &name, safetensors::Dtype::F32, &[n])?);
            if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                bail!("{file}: tensor `{name}` entry {i} is {}, expected a finite KL", v[i]);
            }
            floor_series.insert(dtype.clone(), v);
        }
        if let Some(i) = tail_logprob.iter().position(|x| x.is_nan() || *x > 0.0 || *x == f32::INFINITY) {
            bail!("{file}: tensor `tail_logprob` entry {i} is {}, expected a log-probability (<= 0, or -inf)", tail_logprob[i]);
        }
        Ok(DistGolden {
            segments,
            k,
            first,
            tokens,
            bounds,
            top_ids,
            top_logprobs,
            tail_logprob,
            target_logprob,
            corpus_sha256: field("corpus_sha256")?.clone(),
            floors,
            floor_series,
            check,
            k_sweep,
        })
    }

    /// How many segments (chunks or utterances).
    pub fn chunks(&self) -> usize {
        self.bounds.len()
    }

    pub fn chunk(&self, c: usize) -> &[i64] {
        let (start, len) = self.bounds[c];
        &self.tokens[start..start + len]
    }

    /// Scored positions in segment `c`.
    pub fn per_chunk(&self, c: usize) -> usize {
        self.bounds[c].1 - 1 - self.first
    }

    pub fn positions(&self) -> usize {
        (0..self.chunks()).map(|c| self.per_chunk(c)).sum()
    }

    /// The chunk length of a text golden.
    pub fn n_ctx(&self) -> Option<usize> {
        match self.segments {
            Segments::Chunks { n_ctx } => Some(n_ctx),
            Segments::Utterances { .. } => None,
        }
    }

    /// Segment `c` as a reader finds it: `chunk 3`, or `utterance 2 (s03-recipe)`.
    pub fn segment_name(&self, c: usize) -> String {
        match &self.segments {
            Segments::Chunks { .. } => format!("chunk {c}"),
            Segments::Utterances { names, .. } => format!("utterance {c} ({})", names[c]),
        }
    }

    /// The floor for `dtype` (int4 and f32 by their own names).
    pub fn floor(&self, dtype: Dtype) -> Option<&Floor> {
        self.floors.get(dtype.name())
    }
}

/// Chunks the corpus as the golden did (and llama.cpp does): the text's ids (no special tokens) cut into chunks of
/// `n_ctx`, the remainder dropped, each chunk's first id replaced by `bos` when the tokenizer has one.
pub fn chunk_ids(ids: &[i64], n_ctx: usize, bos: Option<i64>) -> Vec<i64> {
    let n = ids.len() / n_ctx;
    let mut out = ids[..n * n_ctx].to_vec();
    if let Some(b) = bos {
        for c in 0..n {
            out[c * n_ctx] = b;
        }
    }
    out
}

/// The corpus file's documents joined by a blank line (what `dist.py` tokenizes).
pub fn corpus_text(file: &str, text: &str) -> Result<String> {
    let mut docs = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        #[derive(Deserialize)]
        struct Doc {
            text: String,
        }
        let doc: Doc = serde_json::from_str(line).map_err(|e| Error::new(format!("{file}: line {}: {e}", i + 1)))?;
        if doc.text.is_empty() {
            bail!("{file}: line {}: field `text` is empty", i + 1);
        }
        docs.push(doc.text);
    }
    if docs.is_empty() {
        bail!("{file}: no document (one JSON object with a `text` a line)");
    }
    Ok(docs.join("\n\n"))
}

/// One utterance of a speech corpus: its name, its clip (a path relative to the suite root) and its transcript.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Utterance {
    pub name: String,
    pub audio: String,
    pub text: String,
}

/// A speech corpus: one `{"name", "audio", "text"}` object a line, names unique, none empty.
pub fn speech_corpus(file: &str, text: &str) -> Result<Vec<Utterance>> {
    let mut out: Vec<Utterance> = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let u: Utterance = serde_json::from_str(line).map_err(|e| Error::new(format!("{file}: line {}: {e}", i + 1)))?;
        for (field, v) in [("name", &u.name), ("audio", &u.audio), ("text", &u.text)] {
            if v.trim().is_empty() {
                bail!("{file}: line {}: field `{field}` is empty", i + 1);
            }
        }
        if out.iter().any(|o| o.name == u.name) {
            bail!("{file}: line {}: utterance `{}` is named twice", i + 1, u.name);
        }
        out.push(u);
    }
    if out.is_empty() {
        bail!("{file}: no utterance (one JSON object with `name`, `audio` and `text` a line)");
    }
    Ok(out)
}

/// A transcript as the decoder is forced through it: with the leading space Whisper writes before its first word
/// (what `dist.py` tokenizes too).
pub fn transcript(text: &str) -> String {
    format!(" {}", text.trim())
}

/// One scored position, measured on the package's logits row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Position {
    /// KL(reference || package) over the partition (top k + tail).
    pub kld: f64,
    /// The package's probability of the corpus's next token minus the reference's.
    pub delta_p: f64,
    /// ln of the package's and the reference's probability of that token.
    pub logq_target: f64,
    pub logp_target: f64,
    /// The package's argmax is the reference's.
    pub same_top: bool,
}

/// Measures position `i` of the golden on `row`, the package's logits there (NaN propagates: the caller checks
/// finiteness first). `target` is the corpus's next token.
pub fn measure(g: &DistGolden, i: usize, row: &[f32], target: i64) -> Position {
    let k = g.k;
    let ids = &g.top_ids[i * k..(i + 1) * k];
    let lp = &g.top_logprobs[i * k..(i + 1) * k];
    let mut sorted: Vec<usize> = ids.iter().map(|&t| t as usize).collect();
    sorted.sort_unstable();
    let (mut max, mut argmax) = (f32::NEG_INFINITY, 0usize);
    for (j, &x) in row.iter().enumerate() {
        if x > max {
            (max, argmax) = (x, j);
        }
    }
    let m = max as f64;
    // One pass: the sum over the whole row, and over the ids outside the top k (no cancellation against the top).
    let (mut all, mut rest, mut next) = (0.0f64, 0.0f64, 0usize);
    for (j, &x) in row.iter().enumerate() {
        let e = (x as f64 - m).exp();
        all += e;
        if next < sorted.len() && sorted[next] == j {
            while next < sorted.len() && sorted[next] == j {
                next += 1;
            }
        } else {
            rest += e;
        }
    }
    let lse = m + all.ln();
    let logq = |id: usize| row.get(id).map_or(f64::NAN, |&x| x as f64 - lse);
    let mut kld = 0.0;
    for (&id, &l) in ids.iter().zip(lp) {
        let l = l as f64;
        kld += l.exp() * (l - logq(id as usize));
    }
    let tail_p = g.tail_logprob[i] as f64;
    if tail_p > f64::NEG_INFINITY {
        let tail_q = m + rest.ln() - lse;
        kld += tail_p.exp() * (tail_p - tail_q);
    }
    let logq_target = logq(target as usize);
    let logp_target = g.target_logprob[i] as f64;
    Position {
        kld,
        delta_p: logq_target.exp() - logp_target.exp(),
        logq_target,
        logp_target,
        same_top: ids.first().is_some_and(|&t| t as usize == argmax),
    }
}

/// A value with llama.cpp's uncertainty (the standard error of the mean, or as it propagates).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub value: f64,
    pub uncertainty: f64,
}

/// llama.cpp's spread of a series: max, 99.9 / 99 / 95 / 90 / 75 %, median, 25 / 10 / 5 / 1 / 0.1 %, min.
#[derive(Debug, Clone, PartialEq)]
pub struct Spread {
    /// (percent, value), from the maximum (100) down to the minimum (0).
    pub points: Vec<(f64, f64)>,
}

const KLD_PERCENTS: [f64; 11] = [100.0, 99.9, 99.0, 95.0, 90.0, 50.0, 10.0, 5.0, 1.0, 0.1, 0.0];
const DP_PERCENTS: [f64; 13] = [100.0, 99.9, 99.0, 95.0, 90.0, 75.0, 50.0, 25.0, 10.0, 5.0, 1.0, 0.1, 0.0];

impl Spread {
    pub fn at(&self, percent: f64) -> Option<f64> {
        self.points.iter().find(|(p, _)| (p - percent).abs() < 1e-9).map(|&(_, v)| v)
    }
}

/// Linear interpolation between the two nearest ranks of sorted values (llama.cpp's and numpy's default).
pub fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let p = fraction.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let i = p.floor() as usize;
    let f = p - i as f64;
    let j = (i + 1).min(sorted.len() - 1);
    (1.0 - f) * sorted[i] + f * sorted[j]
}

fn spread(values: &[f64], percents: &[f64]) -> Spread {
    let mut s = values.to_vec();
    s.sort_by(f64::total_cmp);
    Spread { points: percents.iter().map(|&p| (p, percentile(&s, p / 100.0))).collect() }
}

fn mean_err(values: &[f64]) -> Estimate {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let sq = values.iter().map(|v| v * v).sum::<f64>() / n;
    let uncertainty = if n > 1.0 { ((sq - mean * mean).max(0.0) / (n - 1.0)).sqrt() } else { f64::NAN };
    Estimate { value: mean, uncertainty }
}

/// The perplexity statistics, printed (as llama.cpp does) only with at least [`MIN_PPL_POSITIONS`] positions.
#[derive(Debug, Clone, PartialEq)]
pub struct Perplexity {
    pub ppl_q: Estimate,
    pub ppl_base: Estimate,
    /// Correlation of ln q(token) and ln p(token) over the positions.
    pub cor: f64,
    pub ln_ratio: Estimate,
    pub ratio: Estimate,
    pub difference: Estimate,
}

pub const MIN_PPL_POSITIONS: usize = 100;

/// What the package's distributions measured, over every scored position.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub positions: usize,
    pub kld: Estimate,
    pub kld_spread: Spread,
    /// Δp in probability (printed in percent).
    pub delta_p: Estimate,
    pub delta_p_spread: Spread,
    pub rms_delta_p: Estimate,
    pub same_top: Estimate,
    pub perplexity: Option<Perplexity>,
}

impl Stats {
    pub fn of(positions: &[Position]) -> Stats {
        let n = positions.len();
        let kld: Vec<f64> = positions.iter().map(|p| p.kld).collect();
        let dp: Vec<f64> = positions.iter().map(|p| p.delta_p).collect();
        let dp2: Vec<f64> = dp.iter().map(|d| d * d).collect();
        let same = positions.iter().filter(|p| p.same_top).count() as f64 / n.max(1) as f64;
        let ms = mean_err(&dp2);
        let rms = ms.value.sqrt();
        Stats {
            positions: n,
            kld: mean_err(&kld),
            kld_spread: spread(&kld, &KLD_PERCENTS),
            delta_p: mean_err(&dp),
            delta_p_spread: spread(&dp, &DP_PERCENTS),
            rms_delta_p: Estimate { value: rms, uncertainty: if rms > 0.0 { ms.uncertainty / (2.0 * rms) } else { 0.0 } },
            same_top: Estimate { value: same, uncertainty: if n > 1 { (same * (1.0 - same) / (n - 1) as f64).sqrt() } else { f64::NAN } },
            perplexity: (n >= MIN_PPL_POSITIONS).then(|| perplexity(positions)),
        }
    }

    pub fn p99_kld(&self) -> f64 {
        self.kld_spread.at(99.0).unwrap_or(f64::NAN)
    }
}

fn perplexity(positions: &[Position]) -> Perplexity {
    let n = positions.len() as f64;
    let nlq: Vec<f64> = positions.iter().map(|p| -p.logq_target).collect();
    let nlp: Vec<f64> = positions.iter().map(|p| -p.logp_target).collect();
    let (q, p) = (mean_err(&nlq), mean_err(&nlp));
    let cov = nlq.iter().zip(&nlp).map(|(a, b)| a * b).sum::<f64>() / n - q.value * p.value;
    let var = |v: &[f64], m: f64| v.iter().map(|x| x * x).sum::<f64>() / n - m * m;
    let (vq, vp) = (var(&nlq, q.value), var(&nlp, p.value));
    let cor = cov / (vq * vp).sqrt();
    let ln: Vec<f64> = nlq.iter().zip(&nlp).map(|(a, b)| a - b).collect();
    let ln_ratio = mean_err(&ln);
    let (ppl_q, ppl_base) = (q.value.exp(), p.value.exp());
    let ratio = ln_ratio.value.exp();
    // llama.cpp's propagation: d(PPL) = PPL * d(ln PPL), with the covariance of the two means for the difference.
    let cov_means = cov / (n - 1.0);
    let diff_var = ppl_q * ppl_q * q.uncertainty.powi(2) + ppl_base * ppl_base * p.uncertainty.powi(2) - 2.0 * ppl_q * ppl_base * cov_means;
    Perplexity {
        ppl_q: Estimate { value: ppl_q, uncertainty: ppl_q * q.uncertainty },
        ppl_base: Estimate { value: ppl_base, uncertainty: ppl_base * p.uncertainty },
        cor,
        ln_ratio,
        ratio: Estimate { value: ratio, uncertainty: ratio * ln_ratio.uncertainty },
        difference: Estimate { value: ppl_q - ppl_base, uncertainty: diff_var.max(0.0).sqrt() },
    }
}

/// The gate's numbers for one dtype (`cases/tolerances.yaml`, `dist:`): mean and p99 KL at most these multiples
/// of the golden's floor for the dtype, plus an absolute allowance for a floor that is (near) zero.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistTolerance {
    pub kld_multiple_mean: f64,
    pub kld_multiple_p99: f64,
    pub kld_abs: f64,
    /// When set: the mean |package KL - floor KL| over the positions, paired, over the floor's mean KL, must stay
    /// under it. For int4, whose floor is the suite's own round-to-nearest quantization of the reference, this is
    /// how far the package's quantizer sits from an independent one: a 1% error in one weight is lost in int4's own
    /// mean KL, not in the pairing.
    #[serde(default)]
    pub max_deviation: Option<f64>,
}

impl DistTolerance {
    pub fn validate(&self) -> Result<()> {
        let deviation = ("max_deviation", self.max_deviation.unwrap_or(0.0));
        for (name, v) in [
            ("kld_multiple_mean", self.kld_multiple_mean),
            ("kld_multiple_p99", self.kld_multiple_p99),
            ("kld_abs", self.kld_abs),
            deviation,
        ] {
            if !(v.is_finite() && v >= 0.0) {
                bail!("`{name}` is {v}, expected a finite number >= 0");
            }
        }
        Ok(())
    }
}

/// The verdict on one trial, as data.
#[derive(Debug, Clone, PartialEq)]
pub struct DistReport {
    pub pass: bool,
    pub stats: Stats,
    pub floor: Floor,
    pub tolerance: DistTolerance,
    /// The limits the two statistics were held to.
    pub mean_limit: f64,
    pub p99_limit: f64,
    /// Each statistic over its limit (at most 1 passes; NaN counts as over).
    pub mean_score: f64,
    pub p99_score: f64,
    /// mean |package KL - floor KL| over the floor's mean KL, position by position, and over its limit when gated.
    pub deviation: f64,
    pub deviation_score: Option<f64>,
    pub k: usize,
    /// What regen measured of this variant: the share of the full KL that the top-k + tail partition captured.
    pub check: Option<Check>,
    /// The KL per scored position, in corpus order (the report's plots).
    pub kld: Vec<f64>,
    pub reasons: Vec<String>,
}

/// Judges the measured positions against the floor for the trial's dtype (`floor_kld`: the floor's KL at each).
pub fn judge(positions: &[Position], floor: &Floor, floor_kld: &[f32], tol: DistTolerance, k: usize, check: Option<Check>) -> DistReport {
    let stats = Stats::of(positions);
    let paired: f64 = positions.iter().zip(floor_kld).map(|(p, &f)| (p.kld - f as f64).abs()).sum::<f64>() / positions.len().max(1) as f64;
    let deviation = if floor.mean_kld > 0.0 { paired / floor.mean_kld } else { f64::INFINITY };
    let deviation_score = tol.max_deviation.map(|m| if deviation.is_nan() { f64::INFINITY } else { deviation / m });
    let mean_limit = tol.kld_multiple_mean * floor.mean_kld + tol.kld_abs;
    let p99_limit = tol.kld_multiple_p99 * floor.p99_kld + tol.kld_abs;
    let score = |v: f64, limit: f64| if v.is_nan() { f64::INFINITY } else { v / limit };
    let (mean_score, p99_score) = (score(stats.kld.value, mean_limit), score(stats.p99_kld(), p99_limit));
    let mut reasons = Vec::new();
    if mean_score > 1.0 {
        reasons.push(format!(
            "mean KLD {:.4e} is over its limit {mean_limit:.4e} ({}x the floor's {:.4e} + {:.1e}; {:.2}x the limit)",
            stats.kld.value, tol.kld_multiple_mean, floor.mean_kld, tol.kld_abs, mean_score
        ));
    }
    if p99_score > 1.0 {
        reasons.push(format!(
            "99.0% KLD {:.4e} is over its limit {p99_limit:.4e} ({}x the floor's {:.4e} + {:.1e}; {:.2}x the limit)",
            stats.p99_kld(),
            tol.kld_multiple_p99,
            floor.p99_kld,
            tol.kld_abs,
            p99_score
        ));
    }
    if let (Some(score), Some(limit)) = (deviation_score, tol.max_deviation)
        && score > 1.0
    {
        reasons.push(format!(
            "the per-position KL sits {deviation:.4e} (mean |package - floor| over the floor's mean) from the floor's ({}), over its \
             limit {limit:.1e}: this package's {} differs from the floor's",
            floor.against,
            if floor.against.contains("int4") { "quantization" } else { "numerics" }
        ));
    }
    DistReport {
        pass: reasons.is_empty(),
        deviation,
        deviation_score,
        kld: positions.iter().map(|p| p.kld).collect(),
        stats,
        floor: floor.clone(),
        tolerance: tol,
        mean_limit,
        p99_limit,
        mean_score,
        p99_score,
        k,
        check,
        reasons,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden(k: usize, rows: &[Vec<f32>], targets: &[i64]) -> DistGolden {
        let mut top_ids = Vec::new();
        let mut top_logprobs = Vec::new();
        let mut tail = Vec::new();
        let mut target_logprob = Vec::new();
        for (row, &t) in rows.iter().zip(targets) {
            let lse = crate::numeric::logsumexp(row.iter().copied());
            let mut order: Vec<usize> = (0..row.len()).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
            top_ids.extend(order[..k].iter().map(|&i| i as i64));
            top_logprobs.extend(order[..k].iter().map(|&i| (row[i] as f64 - lse) as f32));
            let rest: f64 = order[k..].iter().map(|&i| (row[i] as f64 - lse).exp()).sum();
            tail.push(if rest > 0.0 { rest.ln() as f32 } else { f32::NEG_INFINITY });
            target_logprob.push((row[t as usize] as f64 - lse) as f32);
        }
        DistGolden {
            segments: Segments::Chunks { n_ctx: 8 },
            k,
            first: 4,
            tokens: vec![0; 8],
            bounds: vec![(0, 8)],
            top_ids,
            top_logprobs,
            tail_logprob: tail,
            target_logprob,
            corpus_sha256: String::new(),
            floors: BTreeMap::new(),
            floor_series: BTreeMap::new(),
            check: BTreeMap::new(),
            k_sweep: KSweep::default(),
        }
    }

    fn full_kl(p: &[f32], q: &[f32]) -> f64 {
        let (lp, lq) = (crate::numeric::logsumexp(p.iter().copied()), crate::numeric::logsumexp(q.iter().copied()));
        p.iter().zip(q).map(|(&a, &b)| (a as f64 - lp).exp() * ((a as f64 - lp) - (b as f64 - lq))).sum()
    }

    #[test]
    fn the_same_distribution_has_no_divergence_and_the_partition_bounds_the_full_kl_from_below() {
        let p: Vec<f32> = (0..64).map(|i| ((i * 37 % 64) as f32 / 9.0).sin() * 3.0).collect();
        let q: Vec<f32> = p.iter().enumerate().map(|(i, &x)| x + ((i * 11 % 7) as f32 - 3.0) * 0.05).collect();
        let g = golden(8, std::slice::from_ref(&p), &[5]);
        let same = measure(&g, 0, &p, 5);
        assert!(same.kld.abs() < 1e-6, "{}", same.kld);
        assert!(same.same_top && same.delta_p.abs() < 1e-7);
        let moved = measure(&g, 0, &q, 5);
        let full = full_kl(&p, &q);
        assert!(moved.kld > 0.0 && moved.kld <= full + 1e-9, "partition {} full {full}", moved.kld);
        // With every id in the top k (no tail), the partition KL is the full KL.
        let whole = golden(64, std::slice::from_ref(&p), &[5]);
        assert!((measure(&whole, 0, &q, 5).kld - full).abs() < 1e-6);
    }

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0, 10.0];
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert_eq!(percentile(&v, 1.0), 10.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert!((percentile(&v, 0.99) - 9.76).abs() < 1e-12);
    }

    #[test]
    fn the_verdict_fails_over_either_limit_and_on_nan() {
        let floor = Floor {
            non_finite: false,
            positions: 4,
            mean_kld: 1e-3,
            p99_kld: 1e-2,
            max_kld: 2e-2,
            same_top: 1.0,
            against: "x".into(),
            full_mean_kld: None,
        };
        let tol = DistTolerance { kld_multiple_mean: 2.0, kld_multiple_p99: 2.0, kld_abs: 0.0, max_deviation: None };
        let at = |kld: f64| Position { kld, delta_p: 0.0, logq_target: -1.0, logp_target: -1.0, same_top: true };
        let f = [1e-3f32; 100];
        assert!(judge(&[at(1e-3), at(1e-3)], &floor, &f, tol, 8, None).pass);
        let r = judge(&[at(3e-3), at(3e-3)], &floor, &f, tol, 8, None);
        assert!(!r.pass && r.reasons[0].starts_with("mean KLD"), "{:?}", r.reasons);
        // A tail of large divergences fails the 99th percentile even where the mean holds.
        let loose_mean = DistTolerance { kld_multiple_mean: 100.0, ..tol };
        let r = judge(&[at(1e-4); 97].iter().copied().chain([at(0.05); 3]).collect::<Vec<_>>(), &floor, &f, loose_mean, 8, None);
        assert!(!r.pass && r.reasons.len() == 1 && r.reasons[0].starts_with("99.0% KLD"), "{:?}", r.reasons);
        assert!(!judge(&[at(f64::NAN)], &floor, &f, tol, 8, None).pass);
        // Paired: the same mean KL, moved position by position, passes the mean and fails the deviation.
        let gated = DistTolerance { max_deviation: Some(0.1), ..tol };
        let swapped = [at(0.5e-3), at(1.5e-3)];
        assert!(judge(&swapped, &floor, &f, tol, 8, None).pass);
        let r = judge(&swapped, &floor, &f, gated, 8, None);
        assert!(!r.pass && (r.deviation - 0.5).abs() < 1e-6, "{} {:?}", r.deviation, r.reasons);
    }

    #[test]
    fn statistics_follow_llama_cpp() {
        let pos: Vec<Position> = (0..200)
            .map(|i| Position {
                kld: i as f64 * 1e-3,
                delta_p: if i % 2 == 0 { 0.01 } else { -0.01 },
                logq_target: -1.0 - (i % 5) as f64 * 0.1,
                logp_target: -1.0 - (i % 5) as f64 * 0.1 + 0.01,
                same_top: i % 4 != 0,
            })
            .collect();
        let s = Stats::of(&pos);
        assert!((s.kld.value - 0.0995).abs() < 1e-12);
        assert_eq!(s.kld_spread.at(100.0), Some(0.199));
        assert!((s.same_top.value - 0.75).abs() < 1e-12);
        assert!((s.same_top.uncertainty - (0.75f64 * 0.25 / 199.0).sqrt()).abs() < 1e-12);
        assert!((s.rms_delta_p.value - 0.01).abs() < 1e-12 && s.delta_p.value.abs() < 1e-12);
        let ppl = s.perplexity.expect("200 positions");
        assert!((ppl.ln_ratio.value - 0.01).abs() < 1e-12 && (ppl.cor - 1.0).abs() < 1e-9);
        assert!(Stats::of(&pos[..99]).perplexity.is_none());
    }
}
