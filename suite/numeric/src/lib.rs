//! Arithmetic over one logits vector (top-k, summaries, comparisons against a reference), and the brief forms of
//! logits the run stage keeps for the judges.

/// The k largest logits, largest first; equal logits keep the lower id first (as a stable argmax does).
#[derive(Debug, Clone, PartialEq)]
pub struct TopK {
    pub ids: Vec<i64>,
    pub logits: Vec<f32>,
}

impl TopK {
    pub fn of(logits: &[f32], k: usize) -> TopK {
        scan_row(logits, k).0
    }

    pub fn top1(&self) -> i64 {
        self.ids[0]
    }

    /// top1 - top2.
    pub fn margin(&self) -> f64 {
        match self.logits.as_slice() {
            [a, b, ..] => *a as f64 - *b as f64,
            _ => f64::INFINITY,
        }
    }
}

/// Index of the largest logit (first one on ties), ignoring NaN.
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &x) in logits.iter().enumerate() {
        if x > best_v {
            best = i;
            best_v = x;
        }
    }
    best
}

/// max, min, mean and population standard deviation (mobius' `logits_summary`), accumulated in f64.
pub fn summary(logits: &[f32]) -> [f64; 4] {
    let n = logits.len() as f64;
    let (mut max, mut min, mut sum) = (f64::NEG_INFINITY, f64::INFINITY, 0.0);
    for &x in logits {
        let x = x as f64;
        max = max.max(x);
        min = min.min(x);
        sum += x;
    }
    let mean = sum / n;
    let var = logits.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
    [max, min, mean, var.sqrt()]
}

/// Where two logits vectors differ most, and how alike they are overall.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub max_abs: f64,
    pub max_abs_at: usize,
    /// The largest |got - want| / |want| among elements whose |want| > 1e-6.
    pub max_rel: f64,
    /// Elements outside atol + rtol * |want|, and the worst of them by excess.
    pub violations: usize,
    pub worst_violation_at: Option<usize>,
    pub cosine: f64,
}

/// Compares `got` with the reference `want`, element-wise with `atol + rtol * |want|` (as `approx` does).
pub fn compare(got: &[f32], want: &[f32], atol: f64, rtol: f64) -> Comparison {
    let mut c = Comparison { max_abs: 0.0, max_abs_at: 0, max_rel: 0.0, violations: 0, worst_violation_at: None, cosine: 0.0 };
    let (mut dot, mut ng, mut nw) = (0.0f64, 0.0f64, 0.0f64);
    let mut worst_excess = f64::NEG_INFINITY;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g as f64, w as f64);
        let d = (g - w).abs();
        // A NaN difference is the worst difference there is.
        let d = if d.is_nan() { f64::INFINITY } else { d };
        if d > c.max_abs {
            c.max_abs = d;
            c.max_abs_at = i;
        }
        if w.abs() > 1e-6 {
            c.max_rel = c.max_rel.max(d / w.abs());
        }
        let bound = atol + rtol * w.abs();
        // NaN in either vector is never within tolerance (approx's comparison is false for NaN).
        if !approx::abs_diff_eq!(g, w, epsilon = bound) {
            let excess = d - bound;
            c.violations += 1;
            if excess > worst_excess || c.worst_violation_at.is_none() {
                worst_excess = excess;
                c.worst_violation_at = Some(i);
            }
        }
        dot += g * w;
        ng += g * g;
        nw += w * w;
    }
    c.cosine = if ng > 0.0 && nw > 0.0 { dot / (ng.sqrt() * nw.sqrt()) } else { 0.0 };
    if !c.cosine.is_finite() {
        c.cosine = 0.0;
    }
    c
}

/// max, median and 99th percentile (nearest rank) of non-negative values; NaN counts as +inf.
pub fn spread(d: &[f64]) -> [f64; 3] {
    if d.is_empty() {
        return [0.0; 3];
    }
    let mut v: Vec<f64> = d.iter().map(|&x| if x.is_nan() { f64::INFINITY } else { x }).collect();
    v.sort_unstable_by(f64::total_cmp);
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    [v[v.len() - 1], rank(0.5), rank(0.99)]
}

/// log(sum(exp(x))) in float64, stable (the maximum taken out first); NaN when a value is NaN or infinite.
pub fn logsumexp(values: impl Iterator<Item = f32> + Clone) -> f64 {
    let max = values.clone().fold(f32::NEG_INFINITY, |m, x| if x.is_nan() || m.is_nan() { f32::NAN } else { m.max(x) });
    if !max.is_finite() {
        return f64::NAN;
    }
    let m = max as f64;
    let mut sum = 0.0f64;
    for x in values {
        if !x.is_finite() {
            return f64::NAN;
        }
        sum += (x as f64 - m).exp();
    }
    m + sum.ln()
}

/// How many of `want`'s ids are among `got`'s.
pub fn overlap(got: &[i64], want: &[i64]) -> usize {
    want.iter().filter(|id| got.contains(id)).count()
}

// What a run keeps of its logits for the judges, in brief: produced by `run/`, judged by `judge/`, so neither
// imports the other.

/// One prompt position's logits in brief, as a verdict over every position needs them.
#[derive(Debug, Clone, PartialEq)]
pub struct PositionLogits {
    /// The logits at the ids watched at this position (NaN for an id outside the vocabulary).
    pub watched: Vec<f32>,
    /// log(sum(exp(logits))) over the vocabulary, in float64 (NaN when a logit is not finite).
    pub logsumexp: f64,
}

/// One generation step as the package saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The package's own greedy choice at this step.
    pub chosen: i64,
    pub top: TopK,
    /// The package's logits at the ids the caller watches at this step (the reference's stored top-k), in order:
    /// what a per-step verdict needs, without keeping whole vocabulary-sized vectors.
    pub watched: Vec<f32>,
    /// The step's logits row held NaN or infinity (what the row was, in brief; `judge::finite` decides).
    pub non_finite: Option<NonFiniteRow>,
}

/// The non-finite values of one logits row, in brief: how many, and the first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NonFiniteRow {
    pub count: usize,
    pub first_id: usize,
    pub value: f32,
}

impl NonFiniteRow {
    pub fn of(logits: &[f32]) -> Option<NonFiniteRow> {
        scan_row(logits, 0).1
    }
}

/// Ids a [`scan_row`] chunk spans: a chunk whose every logit is finite and none above the current top-k's least
/// is passed over in one branch-free test.
const SCAN_CHUNK: usize = 64;

/// One pass over a logits row: its top `k` ([`TopK::of`]) and its non-finite values ([`NonFiniteRow::of`]). A
/// decode step's arithmetic over a 262,144-id vocabulary, done as three passes (argmax, top-k, finiteness), cost
/// up to 4% of the step; this is one, and most of its chunks are a single test.
pub fn scan_row(logits: &[f32], k: usize) -> (TopK, Option<NonFiniteRow>) {
    let k = k.min(logits.len());
    let mut idx: Vec<usize> = Vec::with_capacity(k + 1);
    // What a new id must beat once the top is full: its least logit (+inf when k is 0, so nothing enters).
    let mut floor = if k == 0 { f32::INFINITY } else { f32::NEG_INFINITY };
    let mut non_finite: Option<NonFiniteRow> = None;
    for (c, chunk) in logits.chunks(SCAN_CHUNK).enumerate() {
        if idx.len() == k && chunk.iter().fold(true, |quiet, &x| quiet & (x.is_finite() & (x <= floor))) {
            continue;
        }
        for (j, &x) in chunk.iter().enumerate() {
            let i = c * SCAN_CHUNK + j;
            if !x.is_finite() {
                match &mut non_finite {
                    Some(r) => r.count += 1,
                    None => non_finite = Some(NonFiniteRow { count: 1, first_id: i, value: x }),
                }
                // NaN never enters the top-k: it is reported by the finiteness check instead.
                if x.is_nan() {
                    continue;
                }
            }
            if idx.len() == k && x <= floor {
                continue;
            }
            let pos = idx.partition_point(|&j| logits[j] >= x);
            idx.insert(pos, i);
            idx.truncate(k);
            if idx.len() == k {
                floor = logits[idx[k - 1]];
            }
        }
    }
    (TopK { ids: idx.iter().map(|&i| i as i64).collect(), logits: idx.iter().map(|&i| logits[i]).collect() }, non_finite)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The three passes [`scan_row`] replaced, kept here as its reference.
    fn passes(logits: &[f32], k: usize) -> (Vec<usize>, Option<NonFiniteRow>) {
        let mut ids: Vec<usize> = (0..logits.len()).filter(|&i| !logits[i].is_nan()).collect();
        ids.sort_by(|&a, &b| logits[b].partial_cmp(&logits[a]).unwrap().then(a.cmp(&b)));
        ids.truncate(k);
        let first = logits.iter().position(|x| !x.is_finite());
        let row = first.map(|i| NonFiniteRow { count: logits.iter().filter(|x| !x.is_finite()).count(), first_id: i, value: logits[i] });
        (ids, row)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]
        /// One pass gives the sorted top-k and the finiteness summary, over rows that span several chunks, with ties,
        /// NaN and infinities anywhere.
        #[test]
        fn one_pass_is_the_three_it_replaced(
            row in proptest::collection::vec(
                proptest::prop_oneof![8 => proptest::strategy::Strategy::prop_map(-40i16..40, |x| f32::from(x) / 4.0), 1 => proptest::prelude::Just(f32::NAN),
                    1 => proptest::prelude::Just(f32::INFINITY), 1 => proptest::prelude::Just(f32::NEG_INFINITY)],
                0..700,
            ),
            k in 0usize..14,
        ) {
            let (top, non_finite) = scan_row(&row, k);
            let (ids, want) = passes(&row, k);
            proptest::prop_assert_eq!(top.ids, ids.iter().map(|&i| i as i64).collect::<Vec<_>>());
            proptest::prop_assert_eq!(top.logits.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), ids.iter().map(|&i| row[i].to_bits()).collect::<Vec<_>>());
            proptest::prop_assert_eq!(non_finite.map(|r| (r.count, r.first_id, r.value.to_bits())), want.map(|r| (r.count, r.first_id, r.value.to_bits())));
        }
    }

    #[test]
    fn topk_orders_and_breaks_ties_by_id() {
        let t = TopK::of(&[1.0, 3.0, 3.0, f32::NAN, 2.0], 3);
        assert_eq!(t.ids, vec![1, 2, 4]);
        assert_eq!(t.margin(), 0.0);
        assert_eq!(argmax(&[1.0, 3.0, 3.0]), 1);
    }

    #[test]
    fn logsumexp_is_stable_and_nan_when_a_logit_is_not_finite() {
        let lse = |v: &[f32]| logsumexp(v.iter().copied());
        assert!((lse(&[0.0, 0.0]) - 2f64.ln()).abs() < 1e-12);
        // Far past exp's range, still exact: 1000 + ln(1 + e^-1).
        assert!((lse(&[1000.0, 999.0]) - (1000.0 + (1.0 + (-1f64).exp()).ln())).abs() < 1e-9);
        assert!(lse(&[1.0, f32::NAN]).is_nan() && lse(&[1.0, f32::INFINITY]).is_nan() && lse(&[f32::NEG_INFINITY]).is_nan());
        assert!(lse(&[]).is_nan());
    }

    #[test]
    fn spread_is_max_median_p99() {
        let d: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(spread(&d), [200.0, 100.0, 198.0]);
        assert_eq!(spread(&[f64::NAN, 1.0]), [f64::INFINITY, 1.0, f64::INFINITY]);
        assert_eq!(spread(&[]), [0.0; 3]);
    }

    #[test]
    fn compare_finds_worst_element() {
        let c = compare(&[1.0, 2.5, 3.0], &[1.0, 2.0, 3.0], 0.1, 0.0);
        assert_eq!((c.max_abs_at, c.violations, c.worst_violation_at), (1, 1, Some(1)));
        assert!((c.max_abs - 0.5).abs() < 1e-12);
    }
}
