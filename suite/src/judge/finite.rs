//! The one judge of logits a verdict cannot reason about: a vocabulary of another size than the golden's (checked
//! first: out-of-range ids read as NaN), and NaN or infinite values, with the first position or step they appear at.
//! The run stage returns logits as they came; every level asks this module, and nothing else decides `non_finite`.

use mobius_numeric::{NonFiniteRow, PositionLogits, Step};

/// Where non-finite logits were first seen, and what was there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NonFinite {
    /// A whole logits row (a generation step, a prefill's last position, a scored continuation).
    Step { step: usize, count: usize, first_id: usize, value: f32 },
    /// A prompt position of L4's every-position check: its logsumexp or a watched logit is not a number.
    Position { position: usize, of: usize, logsumexp: f64 },
}

/// The package's logits rows are not the vocabulary they must be: `got` entries where `source` says `expected`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VocabMismatch {
    pub expected: usize,
    pub got: usize,
    pub source: VocabSource,
}

/// What states the vocabulary a package's logits must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VocabSource {
    /// The golden's own `vocab_size` (or its full logits' length).
    Golden,
    /// A lower bound: the largest id the golden watches (or a scored request reads), plus one.
    WatchedIds,
    /// The package's `genai_config.json` (`model.vocab_size`).
    PackageConfig,
}

/// The first non-finite value of a logits row, as `step`.
pub fn row(logits: &[f32], step: usize) -> Option<NonFinite> {
    NonFiniteRow::of(logits).map(|r| at_step(r, step))
}

fn at_step(r: NonFiniteRow, step: usize) -> NonFinite {
    NonFinite::Step { step, count: r.count, first_id: r.first_id, value: r.value }
}

/// A greedy stream: its prefill row (step 0), then each decode step's.
pub fn stream(prefill_logits: &[f32], steps: &[Step]) -> Option<NonFinite> {
    row(prefill_logits, 0).or_else(|| steps.iter().enumerate().skip(1).find_map(|(i, s)| s.non_finite.map(|r| at_step(r, i))))
}

/// The first prompt position whose logsumexp or watched logits are not finite (a NaN at one position reaches every
/// later one through attention, so the first is where it starts).
pub fn positions(positions: &[PositionLogits]) -> Option<NonFinite> {
    let p = positions.iter().position(|p| !p.logsumexp.is_finite() || p.watched.iter().any(|x| !x.is_finite()))?;
    Some(NonFinite::Position { position: p, of: positions.len(), logsumexp: positions[p].logsumexp })
}

/// What a package's logits rows must hold, from every source that states it; each is checked, in this order.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExpectedVocab {
    /// The golden's stated vocabulary.
    pub golden: Option<usize>,
    /// The package's own config.
    pub config: Option<usize>,
    /// The largest id the golden watches or a request reads.
    pub largest_id: Option<i64>,
}

impl ExpectedVocab {
    /// The first source the package's `got` entries per row disagree with.
    pub fn check(&self, got: usize) -> Option<VocabMismatch> {
        let exact = |e: Option<usize>, source| e.filter(|&e| e != got).map(|expected| VocabMismatch { expected, got, source });
        exact(self.golden, VocabSource::Golden).or_else(|| exact(self.config, VocabSource::PackageConfig)).or_else(|| {
            let need = usize::try_from(self.largest_id?).ok()? + 1;
            (got < need).then_some(VocabMismatch { expected: need, got, source: VocabSource::WatchedIds })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bad_value_and_position_are_named() {
        assert_eq!(row(&[1.0, 2.0], 0), None);
        let Some(NonFinite::Step { step, count, first_id, .. }) = row(&[1.0, f32::NAN, f32::INFINITY], 3) else { panic!() };
        assert_eq!((step, count, first_id), (3, 2, 1));
        let p = |lse: f64, w: f32| PositionLogits { watched: vec![w], logsumexp: lse };
        assert_eq!(
            positions(&[p(1.0, 0.0), p(f64::NAN, 0.0), p(f64::NAN, 0.0)]).map(|n| match n {
                NonFinite::Position { position, of, .. } => (position, of),
                NonFinite::Step { .. } => (99, 99),
            }),
            Some((1, 3))
        );
        assert!(positions(&[p(1.0, f32::NAN)]).is_some());
        assert_eq!(positions(&[p(1.0, 0.0)]), None);
    }

    #[test]
    fn a_vocabulary_of_another_size_is_told_apart() {
        let golden = |g| ExpectedVocab { golden: Some(g), ..Default::default() };
        let config = |c| ExpectedVocab { config: Some(c), ..Default::default() };
        let ids = |i| ExpectedVocab { largest_id: Some(i), ..Default::default() };
        assert_eq!(golden(512).check(512), None);
        assert_eq!(ExpectedVocab::default().check(500), None);
        assert_eq!(golden(512).check(500), Some(VocabMismatch { expected: 512, got: 500, source: VocabSource::Golden }));
        assert_eq!(config(512).check(500), Some(VocabMismatch { expected: 512, got: 500, source: VocabSource::PackageConfig }));
        assert_eq!(ids(505).check(500), Some(VocabMismatch { expected: 506, got: 500, source: VocabSource::WatchedIds }));
        assert_eq!(ids(499).check(500), None);
        // The golden is asked first, then the package's config, then the ids.
        let all = ExpectedVocab { golden: Some(512), config: Some(520), largest_id: Some(600) };
        assert_eq!(all.check(512).map(|v| v.source), Some(VocabSource::PackageConfig));
        assert_eq!(all.check(500).map(|v| v.source), Some(VocabSource::Golden));
    }
}
