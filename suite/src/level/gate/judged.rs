//! The gates' judgements: the paired verdict's report (`accuracy::gate`, `accuracy::media_gate`) with the numbers and
//! the changed items (a thumbnail of each medium) the reviewer's reports show.

use crate::accuracy::gate::{Flip, GateReport};
use crate::accuracy::media_gate::MediaGateReport;

/// What the text gate decided, as the reports read it.
#[derive(Debug, Clone)]
pub struct TextJudged {
    pub report: GateReport,
    pub numbers: TextNumbers,
}

/// What the media gate decided, as the reports read it.
#[derive(Debug, Clone)]
pub struct MediaJudged {
    pub report: MediaGateReport,
    pub numbers: MediaNumbers,
}

/// The text gate on one task: its numbers and flipped items.
#[derive(Debug, Clone, PartialEq)]
pub struct TextNumbers {
    pub metric: &'static str,
    pub reference: f64,
    pub got: f64,
    pub delta_points: f64,
    pub max_delta_points: f64,
    pub n: usize,
    pub max_loglik_diff: Option<f64>,
    pub flips: Vec<Flip>,
}

/// The gate's numbers and its flipped items.
pub fn text_numbers(metric: &'static str, r: &GateReport) -> TextNumbers {
    TextNumbers {
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
pub struct MediaNumbers {
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

pub fn media_numbers(r: &MediaGateReport, items: &[crate::accuracy::lmms::MediaItem]) -> MediaNumbers {
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
    MediaNumbers {
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
