//! The distribution level's golden (`<case>.dist.safetensors`, written by `xtask/reference/dist.py`): per scored
//! position, the reference's top-k log-probabilities and the log of the mass outside them (a tail bucket), the
//! log-probability of the corpus's own next token; the per-dtype floors measured on the reference itself; what regen
//! measured of each package variant. Read and checked here, tensor by tensor.

use std::collections::{BTreeMap, HashMap};
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

    /// Reads and checks a golden: its format, every tensor's dtype and shape, ids and log-probabilities in range, each
    /// position's top k and tail a partition ([`check_partition`]).
    pub fn parse(file: &str, bytes: &[u8]) -> Result<DistGolden> {
        let meta = crate::judge::golden::safetensors_metadata(file, bytes, FORMAT)?;
        let field = |name: &str| meta.get(name).ok_or_else(|| Error::new(format!("{file}: metadata field `{name}` is missing")));
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
        let (segments, tokens, bounds) = match speech {
            true => utterances(&st, file, first, &meta)?,
            false => chunks(&st, file, first, number("n_ctx")?)?,
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
        check_partition(file, k, &top_ids, &top_logprobs, &tail_logprob)?;
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

/// How far a position's top-k and tail probabilities may sum from 1: the log-probabilities are stored in f32, so
/// their sum is 1 to about 1e-6; a golden this suite did not write can be anything.
const PARTITION_SLACK: f64 = 1e-3;

/// Each position's top k and tail are a partition of the vocabulary as `dist.py` writes it: k distinct ids, in
/// descending order of probability (the first is the reference's top token), and probabilities that sum to 1. Any
/// other golden would be judged without a word: a KL over more or less than all the mass, an id counted twice, a
/// "same top" against another token.
fn check_partition(file: &str, k: usize, ids: &[i64], logprobs: &[f32], tail: &[f32]) -> Result<()> {
    for (i, ((ids, lp), &tail)) in ids.chunks_exact(k).zip(logprobs.chunks_exact(k)).zip(tail).enumerate() {
        if let Some(j) = lp.windows(2).position(|w| w[0] < w[1]) {
            bail!(
                "{file}: tensor `top_logprobs` position {i}: entries {j} and {} are {} and {}, expected descending order",
                j + 1,
                lp[j],
                lp[j + 1]
            );
        }
        let mut sorted = ids.to_vec();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            bail!("{file}: tensor `top_ids` position {i} holds id {} twice, expected {k} distinct ids", w[0]);
        }
        let sum: f64 = lp.iter().map(|&x| (x as f64).exp()).sum::<f64>() + (tail as f64).exp();
        if (sum - 1.0).abs() > PARTITION_SLACK {
            bail!("{file}: position {i}: the top {k} and the tail probabilities sum to {sum}, expected 1 (within {PARTITION_SLACK})");
        }
    }
    Ok(())
}

/// A corpus's segments as the golden stores them: how it is cut, its tokens one segment after another, and each
/// segment's (start, length) in them.
type Cut = (Segments, Vec<i64>, Vec<(usize, usize)>);

/// A speech golden's utterances: `tokens` flat, `lengths` per utterance (each its prefix and at least one more), and
/// the utterances' names and clips' sha256 in the metadata.
fn utterances(st: &safetensors::SafeTensors, file: &str, first: usize, meta: &HashMap<String, String>) -> Result<Cut> {
    let field = |name: &str| meta.get(name).ok_or_else(|| Error::new(format!("{file}: metadata field `{name}` is missing")));
    let tok = st.tensor("tokens").at(format!("{file}: tensor `tokens`"))?;
    let t = match tok.shape() {
        [t] if *t > 0 => *t,
        s => bail!("{file}: tensor `tokens` has shape {s:?}, expected [tokens] (the utterances one after another)"),
    };
    let tokens = i32s(tensor(st, file, "tokens", safetensors::Dtype::I32, &[t])?);
    let lt = st.tensor("lengths").at(format!("{file}: tensor `lengths`"))?;
    let s = match lt.shape() {
        [s] if *s > 0 => *s,
        s => bail!("{file}: tensor `lengths` has shape {s:?}, expected [utterances]"),
    };
    let lengths = i32s(tensor(st, file, "lengths", safetensors::Dtype::I32, &[s])?);
    let mut bounds = Vec::with_capacity(s);
    let mut start = 0usize;
    for (i, &l) in lengths.iter().enumerate() {
        if l < first as i64 + 2 {
            bail!("{file}: tensor `lengths` entry {i} is {l}: an utterance has its prefix ({} ids) and at least one more", first + 1);
        }
        bounds.push((start, l as usize));
        start += l as usize;
    }
    if start != t {
        bail!("{file}: tensor `lengths` sums to {start}, but `tokens` has {t}");
    }
    let list = |name: &str| -> Result<Vec<String>> {
        let v: Vec<String> = serde_json::from_str(field(name)?).map_err(|e| Error::new(format!("{file}: metadata field `{name}`: {e}")))?;
        if v.len() != s {
            bail!("{file}: metadata field `{name}` has {} entries for {s} utterances", v.len());
        }
        Ok(v)
    };
    Ok((Segments::Utterances { names: list("names")?, audio_sha256: list("audio_sha256")? }, tokens, bounds))
}

/// A text golden's chunks of `n_ctx` tokens, the second half of each scored.
fn chunks(st: &safetensors::SafeTensors, file: &str, first: usize, n_ctx: usize) -> Result<Cut> {
    let tok = st.tensor("tokens").at(format!("{file}: tensor `tokens`"))?;
    if n_ctx < 8 || first != n_ctx / 2 {
        bail!("{file}: metadata n_ctx={n_ctx}, first={first}: expected first = n_ctx / 2, n_ctx >= 8");
    }
    let chunks = match tok.shape() {
        [c, n] if *n == n_ctx && *c > 0 => *c,
        s => bail!("{file}: tensor `tokens` has shape {s:?}, expected [chunks, {n_ctx}]"),
    };
    let tokens = i32s(tensor(st, file, "tokens", safetensors::Dtype::I32, &[chunks, n_ctx])?);
    Ok((Segments::Chunks { n_ctx }, tokens, (0..chunks).map(|c| (c * n_ctx, n_ctx)).collect()))
}
