//! The numbers behind a trial's verdict, kept as data for the reviewer's reports: each metric on its own, and the
//! series the plots draw. Built by pure functions from what the verdicts already computed (the outputs, the golden,
//! the verdict's report), so every series is tested with crafted numbers like the verdicts themselves.

use crate::accuracy::gate::{Flip, GateReport};
use crate::judge::golden::GenerationGolden;
use crate::judge::verdict::{DivergenceKind, GenerationReport, PrefillReport, StepLogits};
use crate::numeric::Step;
use crate::numeric::compare;

/// The most points a series keeps: longer ones are reduced to the maximum of each bucket, which keeps a report of
/// a 256k-vocabulary model small and its worst element visible.
pub const MAX_POINTS: usize = 512;

/// What one trial measured, by kind of trial.
#[derive(Debug, Clone, PartialEq)]
pub enum Detail {
    Prefill(Prefill),
    Generation(Generation),
    Component(Component),
    Accuracy(Accuracy),
    Media(Box<MediaGate>),
    /// The distribution level's statistics and its per-position KL.
    Dist(Box<crate::judge::dist::DistReport>),
}

/// A series reduced to at most [`MAX_POINTS`] points: `values[i]` is the maximum over elements
/// `i * bucket .. (i + 1) * bucket`.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub bucket: usize,
    pub len: usize,
    pub values: Vec<f64>,
}

impl Profile {
    /// Bucket maxima of `values` (NaN counts as infinite: the worst difference there is).
    pub fn of(values: impl ExactSizeIterator<Item = f64>) -> Profile {
        let len = values.len();
        let bucket = len.div_ceil(MAX_POINTS).max(1);
        let mut out = Vec::with_capacity(len.div_ceil(bucket));
        for (i, v) in values.enumerate() {
            let v = if v.is_nan() { f64::INFINITY } else { v };
            if i % bucket == 0 {
                out.push(v);
            } else if let Some(last) = out.last_mut() {
                *last = last.max(v);
            }
        }
        Profile { bucket, len, values: out }
    }
}

/// L4: the last prompt position's logits against the reference's.
#[derive(Debug, Clone, PartialEq)]
pub struct Prefill {
    /// Over the whole vocabulary, when the golden has the reference's full vector; else over its top-10.
    pub max_abs: Option<f64>,
    pub max_abs_at: Option<usize>,
    pub cosine: Option<f64>,
    pub violations: Option<usize>,
    pub top10_overlap: usize,
    pub reference_margin: Option<f64>,
    pub atol: f64,
    /// |package - reference| over the vocabulary ids at the last prompt position.
    pub vocab_profile: Option<Profile>,
    /// max |diff| per prompt position, at the golden's stored ids and the position's logsumexp (goldens that store
    /// every position).
    pub positions: Option<Profile>,
    /// Whether each position was bounded by the reference's own noise there (else by atol + rtol * |ref|).
    pub positions_by_noise: bool,
}

/// L5: one greedy stream against the reference's.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    pub matches: usize,
    pub total: usize,
    pub ratio: f64,
    pub first_divergence: Option<usize>,
    pub divergence: Option<&'static str>,
    pub near_tie_margin: f64,
    /// Whether `steps` come from the teacher-forced re-run (every step fed the reference's tokens, so every step is
    /// comparable) or from the free run (comparable up to the first divergence).
    pub teacher_forced: bool,
    pub steps: Vec<StepPoint>,
}

/// One generation step, as the reference and the package saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepPoint {
    /// The reference's top1 - top2 at this step.
    pub reference_margin: Option<f64>,
    pub package_margin: Option<f64>,
    /// max |package - reference| over the reference's top-10 ids that the package's top-10 also holds.
    pub max_abs: Option<f64>,
    /// The package chose the reference's token.
    pub agree: bool,
}

/// An encoder's features against the reference's.
#[derive(Debug, Clone, PartialEq)]
pub struct Component {
    pub component: &'static str,
    pub max_abs: f64,
    pub cosine: f64,
    /// How far zeroing the features moved the prompt's last logits.
    pub moved: f64,
    pub atol: f64,
    /// max |diff| per feature row (one row per media token).
    pub rows: Profile,
}

/// The accuracy gate on one task.
#[derive(Debug, Clone, PartialEq)]
pub struct Accuracy {
    pub metric: &'static str,
    pub reference: f64,
    pub got: f64,
    pub delta_points: f64,
    pub max_delta_points: f64,
    pub n: usize,
    pub max_loglik_diff: Option<f64>,
    pub flips: Vec<Flip>,
}

/// L4's numbers and the |diff| profile over the vocabulary.
pub fn prefill(r: &PrefillReport, got: &[f32], reference: Option<&[f32]>) -> Prefill {
    let vocab_profile =
        reference.filter(|w| w.len() == got.len()).map(|w| Profile::of(got.iter().zip(w).map(|(&g, &w)| (g as f64 - w as f64).abs())));
    Prefill {
        max_abs: r.comparison.as_ref().map(|c| c.max_abs).or(r.worst.map(|(_, w, g)| (g - w).abs())),
        max_abs_at: r.comparison.as_ref().map(|c| c.max_abs_at).or(r.worst.map(|w| w.0)),
        cosine: r.comparison.as_ref().map(|c| c.cosine),
        violations: r.comparison.as_ref().map(|c| c.violations),
        top10_overlap: r.top10_overlap,
        reference_margin: r.want_margin,
        atol: r.tolerance.atol,
        vocab_profile,
        positions: r.positions.as_ref().map(|p| Profile::of(p.per_position.iter().copied())),
        positions_by_noise: r.positions.as_ref().is_some_and(|p| p.by_noise),
    }
}

/// L5's numbers and the per-step series. `steps` are the teacher-forced run's when there is one (`forced`), else
/// the free run's. Each step's max |diff| is the one the verdict judged (`judged`, at the golden's stored ids) when
/// the golden stores per-step logits; for a golden without them, over the reference's top-10 ids the package's
/// top-10 also holds.
pub fn generation(
    r: &GenerationReport,
    golden: &GenerationGolden,
    steps: &[Step],
    forced: bool,
    judged: Option<&StepLogits>,
) -> Generation {
    let comparable = if forced { steps.len() } else { r.first_divergence.as_ref().map_or(steps.len(), |d| d.index + 1) };
    let points = (0..golden.generated_tokens.len().max(steps.len()))
        .map(|i| {
            let want = golden.steps.get(i);
            let got = steps.get(i).filter(|_| i < comparable);
            let judged_here = judged.map(|j| j.per_step.get(i).copied().filter(|d| d.is_finite()));
            let max_abs = if let Some(d) = judged_here {
                d
            } else {
                want.zip(got).and_then(|(w, g)| {
                    let shared: Vec<(f64, f64)> = w
                        .ids
                        .iter()
                        .zip(&w.logits)
                        .filter_map(|(id, wl)| g.top.ids.iter().position(|x| x == id).map(|p| (g.top.logits[p] as f64, wl.0)))
                        .collect();
                    (!shared.is_empty()).then(|| shared.iter().map(|(a, b)| (a - b).abs()).fold(0.0, f64::max))
                })
            };
            StepPoint {
                reference_margin: want.and_then(|w| w.margin()),
                package_margin: got.map(|g| g.top.margin()).filter(|m| m.is_finite()),
                max_abs,
                agree: steps.get(i).map(|s| s.chosen) == golden.generated_tokens.get(i).copied(),
            }
        })
        .collect();
    Generation {
        matches: r.matches,
        total: r.expected.len().max(r.got.len()),
        ratio: r.ratio,
        first_divergence: r.first_divergence.as_ref().map(|d| d.index),
        divergence: r.first_divergence.as_ref().map(|d| match d.kind {
            DivergenceKind::NearTieFlip => "near-tie flip",
            DivergenceKind::Real => "real",
            DivergenceKind::Unclassified => "unclassified",
        }),
        near_tie_margin: r.tolerance.near_tie_margin,
        teacher_forced: forced,
        steps: points,
    }
}

/// An encoder's numbers and its per-row |diff| (rows are the last dimension's runs of `cols` values).
pub fn component(component: &'static str, got: &[f32], want: &[f32], cols: usize, atol: f64, moved: f64) -> Component {
    let c = compare(got, want, 0.0, 0.0);
    let rows = Profile::of(
        got.chunks(cols.max(1))
            .zip(want.chunks(cols.max(1)))
            .map(|(g, w)| g.iter().zip(w).map(|(&a, &b)| (a as f64 - b as f64).abs()).fold(0.0, f64::max))
            .collect::<Vec<_>>()
            .into_iter(),
    );
    Component { component, max_abs: c.max_abs, cosine: c.cosine, moved, atol, rows }
}

/// The gate's numbers and its flipped items.
pub fn accuracy(metric: &'static str, r: &GateReport) -> Accuracy {
    Accuracy {
        metric,
        reference: r.reference,
        got: r.got,
        delta_points: r.delta_points,
        max_delta_points: r.policy.max_delta_points,
        n: r.n,
        max_loglik_diff: r.max_loglik_diff,
        flips: r.flips.clone(),
    }
}

/// The multimodal gate's numbers, and the items that changed with a thumbnail of their medium.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaGate {
    pub metric: String,
    pub lower_is_better: bool,
    pub reference: f64,
    pub got: f64,
    pub delta_points: f64,
    pub max_delta_points: f64,
    pub n: usize,
    pub worse: usize,
    pub better: usize,
    pub p_value: f64,
    /// How `p_value` was computed (McNemar, or the exact sign-flip test on graded scores or word edits).
    pub test: String,
    /// The smallest net change, in points, the paired test could call significant at this task's size.
    pub min_detectable_points: f64,
    /// One item moves the metric by more than the allowed delta: the net rule cannot decide.
    pub too_small: bool,
    /// The task's score with the stop list and without: (reference cut, reference whole, package cut, package whole).
    pub stop_scores: (f64, f64, f64, f64),
    /// Items whose score the stop list changed: (doc, reference side?, stop, score cut, score whole).
    pub cuts: Vec<(usize, bool, String, f64, f64)>,
    pub flips: Vec<MediaFlipDetail>,
}

/// One changed item (both outputs, scores and margins, as the judge found them) and what the model was shown.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaFlipDetail {
    pub flip: crate::accuracy::media_gate::MediaFlip,
    pub thumbnail: Thumbnail,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Thumbnail {
    /// An image file's bytes (PNG, JPEG), shown as they are when small enough.
    Image(Vec<u8>),
    /// A waveform: the peak |sample| over [`WAVE_POINTS`] equal spans.
    Wave(Vec<f32>),
    None,
}

/// The most changed items a report keeps, and the points of a waveform thumbnail.
pub const MAX_MEDIA_FLIPS: usize = 40;
pub const WAVE_POINTS: usize = 120;
const MAX_THUMBNAIL_BYTES: usize = 96 * 1024;

pub fn media_gate(r: &crate::accuracy::media_gate::MediaGateReport, items: &[crate::accuracy::lmms::MediaItem]) -> MediaGate {
    use crate::accuracy::lmms::{Direction, Media};
    let thumb = |doc: usize| -> Thumbnail {
        let Some(it) = items.iter().find(|i| i.doc == doc) else { return Thumbnail::None };
        let samples = match &it.media {
            Media::Samples { samples, .. } => Some(samples.clone()),
            Media::File(b) if b.starts_with(b"\x89PNG") || b.starts_with(&[0xff, 0xd8]) => {
                return if b.len() <= MAX_THUMBNAIL_BYTES { Thumbnail::Image(b.clone()) } else { Thumbnail::None };
            }
            Media::File(b) => crate::feed::audio::decode(b, "thumbnail").ok().map(|a| a.samples),
        };
        match samples {
            Some(s) if !s.is_empty() => {
                let span = s.len().div_ceil(WAVE_POINTS);
                Thumbnail::Wave(s.chunks(span).map(|c| c.iter().fold(0.0f32, |m, x| m.max(x.abs()))).collect())
            }
            _ => Thumbnail::None,
        }
    };
    MediaGate {
        metric: r.metric.clone(),
        lower_is_better: r.direction == Direction::LowerIsBetter,
        reference: r.reference,
        got: r.got,
        delta_points: r.delta_points,
        max_delta_points: r.policy.max_delta_points,
        n: r.n,
        worse: r.worse,
        better: r.better,
        p_value: r.p_value,
        test: r.test.clone(),
        min_detectable_points: r.min_detectable_points,
        too_small: r.too_small,
        stop_scores: (r.stop.reference_cut, r.stop.reference_full, r.stop.got_cut, r.stop.got_full),
        cuts: r.stop.cuts.iter().map(|c| (c.doc, c.reference, c.stop.clone(), c.score_cut, c.score_full)).collect(),
        flips: r.flips.iter().take(MAX_MEDIA_FLIPS).map(|f| MediaFlipDetail { flip: f.clone(), thumbnail: thumb(f.doc) }).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::golden::{Hex, StepTop};
    use crate::judge::tolerance::Tolerance;
    use crate::judge::verdict::judge_generation;
    use crate::numeric::TopK;

    #[test]
    fn profile_keeps_each_buckets_worst() {
        let p = Profile::of((0..1030).map(|i| if i == 700 { 9.0 } else { 0.5 }));
        assert_eq!((p.bucket, p.len, p.values.len()), (3, 1030, 344));
        assert_eq!(p.values[233], 9.0);
        assert_eq!(p.values.iter().filter(|&&v| v == 9.0).count(), 1);
        let nan = Profile::of([1.0, f64::NAN].into_iter());
        assert_eq!(nan.values, vec![1.0, f64::INFINITY]);
    }

    fn step(ids: &[i64], logits: &[f64]) -> StepTop {
        StepTop { ids: ids.to_vec(), logits: logits.iter().map(|&l| Hex(l)).collect() }
    }

    #[test]
    fn generation_series_compares_steps_up_to_the_divergence_of_a_free_run() {
        let golden = GenerationGolden {
            model_id: "m".into(),
            prompt: "p".into(),
            generated_tokens: vec![5, 6, 7],
            generated_text: None,
            input_hash: None,
            max_new_tokens: None,
            steps: vec![step(&[5, 1], &[3.0, 1.0]), step(&[6, 2], &[2.0, 1.5]), step(&[7, 3], &[4.0, 0.0])],
            provenance: None,
        };
        let pkg = |chosen: i64, ids: &[i64], logits: &[f32]| Step {
            chosen,
            top: TopK { ids: ids.to_vec(), logits: logits.to_vec() },
            watched: Vec::new(),
            non_finite: None,
        };
        let steps = vec![pkg(5, &[5, 1], &[3.25, 1.0]), pkg(2, &[2, 6], &[1.75, 1.7]), pkg(9, &[9, 7], &[1.0, 0.5])];
        let tol = Tolerance::builtin(crate::vocab::Level::L5, crate::vocab::Dtype::F32);
        let r = judge_generation(&[5, 2, 9], &golden, None, &tol);
        let g = generation(&r, &golden, &steps, false, None);
        assert_eq!((g.first_divergence, g.teacher_forced, g.steps.len()), (Some(1), false, 3));
        assert_eq!(g.steps[0].max_abs, Some(0.25));
        assert_eq!(g.steps[0].reference_margin, Some(2.0));
        assert!((g.steps[1].max_abs.unwrap() - 0.3).abs() < 1e-6, "{:?}", g.steps[1]);
        assert!(!g.steps[1].agree);
        // After the free run diverged the contexts differ: nothing to compare, but the reference margin stays.
        assert_eq!((g.steps[2].max_abs, g.steps[2].package_margin, g.steps[2].reference_margin), (None, None, Some(4.0)));
        let forced = generation(&r, &golden, &steps, true, None);
        assert_eq!(forced.steps[2].max_abs, Some(3.5));
        // With the verdict's own per-step judgement, the plot shows exactly the numbers it judged.
        let judged = StepLogits { per_step: vec![0.5, f64::NAN, 0.125], max_abs: 0.5, max_at: 0, first_out: None, steps_out: 0 };
        let plotted = generation(&r, &golden, &steps, true, Some(&judged));
        let series: Vec<Option<f64>> = plotted.steps.iter().map(|s| s.max_abs).collect();
        assert_eq!(series, [Some(0.5), None, Some(0.125)]);
    }

    #[test]
    fn component_rows_hold_each_rows_worst() {
        let c = component("vision_encoder", &[0.0, 1.0, 2.0, 3.5], &[0.0, 1.5, 2.0, 3.0], 2, 1e-4, 0.7);
        assert_eq!(c.rows.values, vec![0.5, 0.5]);
        assert_eq!((c.max_abs, c.moved), (0.5, 0.7));
    }
}
