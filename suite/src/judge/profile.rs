//! A series reduced for the reviewer's plots: each bucket's worst value, so a report of a 256k-vocabulary model stays
//! small and its worst element visible.

/// The most points a series keeps: longer ones are reduced to the maximum of each bucket, which keeps a report of
/// a 256k-vocabulary model small and its worst element visible.
pub const MAX_POINTS: usize = 512;

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

    /// The series as a plot's points.
    pub fn points(&self) -> Vec<Option<f64>> {
        self.values.iter().map(|&v| Some(v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_keeps_each_buckets_worst() {
        let p = Profile::of((0..1030).map(|i| if i == 700 { 9.0 } else { 0.5 }));
        assert_eq!((p.bucket, p.len, p.values.len()), (3, 1030, 344));
        assert_eq!(p.values[233], 9.0);
        assert_eq!(p.values.iter().filter(|&&v| v == 9.0).count(), 1);
        let nan = Profile::of([1.0, f64::NAN].into_iter());
        assert_eq!(nan.values, vec![1.0, f64::INFINITY]);
    }
}
