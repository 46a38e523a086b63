//! The distribution level: the package's next-token distributions over the case's teacher-forced corpus against the
//! fp32 reference's, for every dtype alike, in llama.cpp's `--kl-divergence` terms.

pub mod corpus;
pub mod golden;
pub mod judge;
pub mod render;
pub mod stats;

use std::path::Path;

use self::golden::{DistGolden, Segments};
use self::judge::{DistReport, DistTolerance};
use self::stats::Position;
use super::{Kind, Separation};
use crate::error::{Error, Result};
use crate::feed::audio::Audio;
use crate::feed::inputs::Inputs;
use crate::judge::finite::{self, ExpectedVocab};
use crate::level::speech::{SpeechFeed, speech_inputs};
use crate::level::trial::{Ends, Trial};
use crate::outcome::{Failure, FailureKind, Outcome, Status};
use crate::paths;
use crate::plan::case::{Case, Distribution};
use crate::run::decoder::Decoder;
use crate::run::generate;
use crate::run::pipeline::Pipeline;
use crate::run::runtime::Provider;
use crate::vocab::{Level, Modality};

pub struct Dist;

impl Kind for Dist {
    fn level(&self) -> Level {
        Level::Dist
    }

    /// Once per case with a `distribution:` block: on its text trials, or for a speech-to-text case (whose one
    /// modality is audio) on its audio trials. A case split per prompt runs it on its first prompt only.
    fn planned(&self, case: &Case, modality: Modality) -> bool {
        let here = if case.is_speech_to_text() { Modality::Audio } else { Modality::Text };
        case.spec.distribution.is_some() && modality == here
    }

    fn failures(&self) -> &'static [FailureKind] {
        &[FailureKind::Distribution, FailureKind::NonFinite, FailureKind::VocabSize, FailureKind::Refused]
    }

    fn regenerates_alone(&self) -> bool {
        true
    }

    fn measured(&self, o: &Outcome) -> Option<String> {
        render::measured(o)
    }

    fn score(&self, o: &Outcome) -> Option<f64> {
        judge::of(o).map(DistReport::score)
    }

    fn separation(&self) -> Option<Separation> {
        Some(Separation {
            title: "dist separation (dist score: its larger KL statistic over its limit, <= 1 passes)",
            key: "dist_separation",
        })
    }

    fn mutant_column(&self) -> Option<&'static str> {
        Some("dist (score, verdict)")
    }

    fn run(&self, t: &Trial) -> Result<Outcome> {
        run_dist(t)
    }
}

fn run_dist(t: &Trial) -> Result<Outcome> {
    let (provider, package) = match t.placement() {
        Ok(p) => p,
        Err(skip) => return Ok(skip),
    };
    let Some(spec) = t.case.spec.distribution.as_ref() else {
        return Err(Error::new(format!("{}: the dist level needs a `distribution:` block", t.case.file)));
    };
    let golden_path = t.suite.dist_golden_path(t.case);
    paths::confine(&t.suite.root, &golden_path, "golden", paths::SUITE_HINT)?;
    if !golden_path.is_file() {
        return Ok(t.missing(&golden_path));
    }
    let golden_file = t.rel(&golden_path);
    let golden = DistGolden::load(&golden_path, &golden_file)?;
    let tokenizer = t.tokenizer(&package)?;
    let speech = match t.case.is_speech_to_text() {
        true => Some((SpeechFeed::new(t, "the distribution level")?, t.eos_ids(&package)?)),
        false => None,
    };
    let clips = check_corpus(t, spec, &golden, &golden_file, &tokenizer, speech.as_ref().map(|(f, e)| (f, e.as_slice())))?;
    let dtype = t.variant.dtype;
    let Some(floor) = golden.floor(dtype) else {
        return Err(t.stale(format!(
            "{golden_file} has no floor for {dtype} (it has {}): the case's matrix gained a dtype since it was made",
            golden.floors.keys().cloned().collect::<Vec<_>>().join(", ")
        )));
    };
    let policy = t.suite.policy.as_ref().map_err(Clone::clone)?;
    let tol = DistTolerance::of(policy, dtype)?;

    let decoder = match t.decoder(&package, provider)? {
        Ok(d) => d,
        Err(skip) => return Ok(skip),
    };
    let scored = Scored { golden: &golden, golden_file: &golden_file, package: &package, provider, decoder: &decoder };
    let positions = match scored.measure(t, speech.as_ref().map(|(f, _)| f), &clips)? {
        Ok(p) => p,
        Err(o) => return Ok(o),
    };
    // Checked once the package's logits are: a package that gives NaN fails as such whatever its floor.
    if floor.non_finite {
        return Err(Error::new(format!(
            "{golden_file}: the reference run as {} gives NaN or infinite logits, so {dtype} has no floor to judge a package \
             by; its finite logits cannot be judged at this level",
            floor.against
        )));
    }
    let check = golden.check.get(&format!("{}/{}", t.variant.ep, dtype)).cloned();
    // The loader reads a series for every finite floor: one missing is a golden this suite did not write.
    let floor_kld = golden
        .floor_series
        .get(dtype.name())
        .ok_or_else(|| Error::new(format!("{golden_file}: no tensor `floor_kld.{dtype}` for its {dtype} floor")))?;
    let r = judge::judge(&positions, floor, floor_kld, tol, golden.k, check);
    let message = crate::level::dist::render::message(t.name, &r, &golden_file, &t.regenerate());
    let failure = (!r.pass).then(|| Box::new(Failure { max_abs_diff: Some(r.stats.kld.value), ..Failure::of(FailureKind::Distribution) }));
    Ok(Outcome {
        status: if r.pass { Status::Pass } else { Status::Fail },
        message,
        max_abs_diff: Some(r.stats.kld.value),
        failure,
        judgement: Some(std::sync::Arc::new(r)),
        ..Outcome::new(Status::Pass, "")
    })
}

/// What the package is judged by, once placed: the golden, its file, the package and its session.
struct Scored<'a> {
    golden: &'a DistGolden,
    golden_file: &'a str,
    package: &'a Path,
    provider: Provider,
    decoder: &'a Decoder,
}

impl Scored<'_> {
    /// Every scored position of the corpus measured on the package's logits, segment by segment (a speech segment's
    /// clip through the encoder first); or the outcome that ends the trial first (logits of another vocabulary, or
    /// not finite, named by their place).
    fn measure(&self, t: &Trial, speech: Option<&SpeechFeed>, clips: &[Audio]) -> Result<Ends<Vec<Position>>> {
        let (golden, golden_file, package, provider, decoder) = (self.golden, self.golden_file, self.package, self.provider, self.decoder);
        let expected = ExpectedVocab {
            golden: None,
            config: t.package_vocab(package)?,
            largest_id: golden.tokens.iter().chain(&golden.top_ids).copied().max(),
        };
        // Text: one pipeline for every chunk. Speech: each utterance's own, its clip through the encoder.
        let text = match speech {
            None => Some(Pipeline::build(package, decoder, provider, &Inputs::from_token_ids(golden.chunk(0)), "")?),
            Some(_) => None,
        };
        let first = golden.first;
        let mut positions = Vec::with_capacity(golden.positions());
        for c in 0..golden.chunks() {
            let chunk = golden.chunk(c);
            let segment = golden.segment_name(c);
            let own;
            let pipeline = match (&text, speech) {
                (Some(p), _) => p,
                (None, Some(feed)) => {
                    let what = format!("{golden_file}: {segment}");
                    let clip = clips.get(c).ok_or_else(|| Error::new(format!("{what}: no clip read for it")))?;
                    let inputs = speech_inputs(&feed.mel, &feed.prefix, &clip.samples, clip.rate, &what)?;
                    own = Pipeline::build(package, decoder, provider, &inputs, &what)?;
                    &own
                }
                (None, None) => unreachable!("a text pipeline or a speech feed"),
            };
            let per = golden.per_chunk(c);
            // The logits of positions first .. len-1; the last one predicts past the segment and is not scored.
            let out = generate::prefill_rows(decoder, pipeline, chunk, per + 1)?;
            let place = |r: usize| format!("{golden_file}: {segment}, position {}", first + r);
            // Every row of one run has the run's vocabulary: checked once.
            if let Some(v) = expected.check(out.vocab) {
                return Ok(Err(t.vocab_size(&place(0), v, golden_file, golden_file, package)));
            }
            for r in 0..per {
                let row = out.row(r);
                let at = positions.len();
                // The step a NaN is reported at is the scored position's index over the whole corpus.
                if let Some(nf) = finite::row(row, at) {
                    return Ok(Err(t.non_finite(&place(r), nf)));
                }
                positions.push(stats::measure(golden, at, row, chunk[first + r + 1]));
            }
        }
        Ok(Ok(positions))
    }
}

/// The golden was made from this corpus, cut as the case says and tokenized as the package's tokenizer does now
/// (for speech, from these clips, after this prefix and up to this end of text): anything else is a stale golden,
/// with the command that remakes it. Returns a speech corpus's clips, decoded.
fn check_corpus(
    t: &Trial,
    spec: &Distribution,
    golden: &DistGolden,
    golden_file: &str,
    tokenizer: &crate::feed::tokenizer::TextTokenizer,
    speech: Option<(&SpeechFeed, &[i64])>,
) -> Result<Vec<Audio>> {
    if spec.k != golden.k {
        return Err(t.stale(format!("{golden_file} has k {}, the case asks for {} ({})", golden.k, spec.k, t.case.file)));
    }
    let field = format!("{}: field `distribution.corpus`", t.case.file);
    let path = t.suite.root.join(spec.corpus());
    if !t.case.spec.external_paths {
        paths::confine(&t.suite.root, &path, &field, paths::CASE_HINT)?;
    }
    let bytes = std::fs::read(&path).map_err(|e| Error::new(format!("{field}: {}: {e}", spec.corpus())))?;
    let text = std::str::from_utf8(&bytes).map_err(|e| Error::new(format!("{}: {e}", spec.corpus())))?;
    // Read whole first, so a malformed line or a missing clip is named as such, not as a stale golden.
    let utterances = match speech {
        Some(_) => {
            let mut read = Vec::new();
            for u in corpus::speech_corpus(spec.corpus(), text)? {
                let what = format!("{}: utterance `{}`: field `audio`", spec.corpus(), u.name);
                let clip = t.suite.root.join(&u.audio);
                if !t.case.spec.external_paths {
                    paths::confine(&t.suite.root, &clip, &what, paths::CASE_HINT)?;
                }
                let audio = std::fs::read(&clip).map_err(|e| Error::new(format!("{what}: {}: {e}", u.audio)))?;
                read.push((u, what, audio));
            }
            read
        }
        None => Vec::new(),
    };
    let documents = match speech {
        None => Some(corpus::corpus_text(spec.corpus(), text)?),
        Some(_) => None,
    };
    let sha = crate::digest::sha256_hex(&bytes);
    if sha != golden.corpus_sha256 {
        return Err(t.stale(format!("{golden_file} was made from another {} (sha256 {sha} now)", spec.corpus())));
    }
    let (ids, clips) = match (speech, &golden.segments) {
        (None, Segments::Chunks { n_ctx }) => {
            if spec.n_ctx() != *n_ctx {
                return Err(t.stale(format!("{golden_file} has n_ctx {n_ctx}, the case asks for {} ({})", spec.n_ctx(), t.case.file)));
            }
            let ids = tokenizer.encode_plain(documents.as_deref().unwrap_or_default())?;
            (corpus::chunk_ids(&ids, spec.n_ctx(), tokenizer.bos()?), Vec::new())
        }
        (Some((feed, eos)), Segments::Utterances { names, audio_sha256 }) => {
            let end = *eos.first().ok_or_else(|| {
                Error::new(format!(
                    "{}: the distribution level ends each transcript with the end of text, and neither the case's \
                     `generation.eos_token_id` nor genai_config.json names one",
                    t.case.file
                ))
            })?;
            let listed: Vec<&str> = utterances.iter().map(|(u, _, _)| u.name.as_str()).collect();
            if listed != names.iter().map(String::as_str).collect::<Vec<_>>() {
                return Err(t.stale(format!("{golden_file} holds utterances {names:?}, {} lists {listed:?}", spec.corpus())));
            }
            let (mut ids, mut clips) = (Vec::new(), Vec::new());
            for ((u, what, audio), want) in utterances.iter().zip(audio_sha256) {
                if crate::digest::sha256_hex(audio) != *want {
                    return Err(t.stale(format!(
                        "{golden_file} was made from another {} (sha256 {})",
                        u.audio,
                        crate::digest::sha256_hex(audio)
                    )));
                }
                clips.push(crate::feed::audio::decode(audio, what)?);
                ids.extend(&feed.prefix);
                ids.extend(tokenizer.encode_plain(&corpus::transcript(&u.text))?);
                ids.push(end);
            }
            (ids, clips)
        }
        (None, Segments::Utterances { .. }) | (Some(_), Segments::Chunks { .. }) => {
            return Err(t.stale(format!(
                "{golden_file} holds {}, but {} is {} case",
                if golden.n_ctx().is_some() { "text chunks" } else { "utterances" },
                t.case.file,
                if speech.is_some() { "a speech-to-text" } else { "a text" }
            )));
        }
    };
    if ids != golden.tokens {
        let at = ids.iter().zip(&golden.tokens).position(|(a, b)| a != b).unwrap_or(ids.len().min(golden.tokens.len()));
        return Err(t.stale(format!(
            "{golden_file}'s segments differ from {} tokenized by {} from token {at} on ({} tokens now, {} in the golden)",
            spec.corpus(),
            tokenizer.path.display(),
            ids.len(),
            golden.tokens.len()
        )));
    }
    Ok(clips)
}
