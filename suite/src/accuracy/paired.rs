//! Paired statistics for graded per-item metrics: ANLS in [0, 1] per item, relaxed accuracy 0 or 1 per item, and WER,
//! where each utterance contributes its word edits over a fixed total of reference words. The counterpart of
//! McNemar's test in [`crate::accuracy::gate`], which sees only right or wrong.
//!
//! Every function takes the per-item differences oriented so that a positive one is better for the package: `got -
//! reference` when higher is better, `reference - got` when lower is better ([`differences`] builds them).
//!
//! - [`sign_flip`]: the exact sign-flip (permutation) test, two-sided, on the sum of the differences. Under "the
//!   package is no better and no worse", each nonzero difference is as likely to carry either sign; the p-value is
//!   the chance of a sum at least as far from 0 as the one observed. Zeros drop out. Integer differences (word edits,
//!   0/1 items) get the exact distribution by dynamic programming over sums; for 0/1 items it is McNemar's exact
//!   test. Real differences (ANLS) are enumerated exactly up to [`MAX_ENUMERATED`] nonzero items, else drawn
//!   [`DRAWS`] times from a fixed seed, so a verdict never changes between runs.
//! - [`bootstrap_mean`]: a paired bootstrap 95% interval for the mean difference, to report beside the test; the
//!   test decides.
//! - [`min_detectable`]: the smallest net change of the task's metric the test can call significant. `unit[i]` is
//!   the most item `i` can move the metric, in points: 100/n for an ANLS or accuracy item, 100 x words_i / words
//!   for a WER utterance. Any k nonzero differences all one way give p = 2/2^k whatever their sizes, so the test
//!   needs k = [`min_significant_flips`] of them (6 at 0.05), as McNemar does; the minimum detectable difference is
//!   the sum of the k smallest units, the net change of k items each moving all the way. Items that move only part
//!   of their unit (ANLS) can be significant at a smaller net change: this is the figure for whole-item moves, the
//!   same definition the binary gate reports.
//! - [`too_small`]: one item can move the metric by more than the allowed delta, so the net rule cannot be honoured.

use std::fmt;

use crate::accuracy::gate::min_significant_flips;
use crate::error::{Result, bail};

/// The seed of every random draw here: a verdict must not change between runs.
pub const SEED: u64 = 0x6d6f_6269_7573_2d70;
/// Monte Carlo sign flips when the exact distribution is out of reach.
pub const DRAWS: usize = 100_000;
/// Bootstrap resamples for the interval of the mean difference.
pub const RESAMPLES: usize = 10_000;
/// Real-valued differences are enumerated exactly (2^20 sign patterns at most) up to this many nonzero items.
pub const MAX_ENUMERATED: usize = 20;
/// A permuted sum within this fraction of the summed magnitudes of the observed one counts as a tie: float sums of
/// the same values in another order differ in their last bits, and a tie must count as "at least as extreme".
pub const TIE_TOLERANCE: f64 = 1e-12;
/// The dynamic programme runs over sums up to this total magnitude, and this many item x sum steps.
const DP_MAX_TOTAL: usize = 1 << 22;
const DP_MAX_STEPS: usize = 1 << 27;

/// How a p-value was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Integer differences: the exact distribution of the sum by dynamic programming.
    ExactDp,
    /// Every sign pattern of the nonzero differences.
    ExactEnumeration,
    /// `draws` random sign patterns from `seed`; p = (1 + hits) / (1 + draws).
    MonteCarlo { seed: u64, draws: usize },
    /// A difference is NaN or infinite: no test can be run, and the p-value is 0 so that the gate fails.
    NotFinite { item: usize },
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Method::ExactDp => f.write_str("exact sign-flip test, two-sided (integer differences, exact distribution)"),
            Method::ExactEnumeration => f.write_str("exact sign-flip test, two-sided (every sign pattern)"),
            Method::MonteCarlo { seed, draws } => {
                write!(f, "sign-flip test, two-sided, Monte Carlo ({draws} draws, seed {seed:#x})")
            }
            Method::NotFinite { item } => write!(f, "no test: item {item}'s difference is not a finite number"),
        }
    }
}

/// The sign-flip test's result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SignFlip {
    /// Two-sided: the chance, were each difference's sign a coin toss, of a sum at least as far from 0. 1 when
    /// nothing changed.
    pub p_value: f64,
    pub method: Method,
    /// Items whose difference is not 0.
    pub nonzero: usize,
    /// Items the package does worse on (negative difference), and better on.
    pub worse: usize,
    pub better: usize,
    /// The sum of the differences: positive when the package is better overall.
    pub sum: f64,
}

/// A bootstrap percentile interval for the mean difference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub mean: f64,
    pub lower: f64,
    pub upper: f64,
    /// The coverage (0.95) and how it was drawn.
    pub level: f64,
    pub resamples: usize,
    pub seed: u64,
}

/// Per-item differences oriented so that a positive one is better: `got - reference` when higher is better,
/// `reference - got` otherwise. Errors name the item whose score is missing or not finite.
pub fn differences(reference: &[f64], got: &[f64], higher_is_better: bool) -> Result<Vec<f64>> {
    if reference.len() != got.len() {
        bail!("paired scores: the reference has {} items and the package {}", reference.len(), got.len());
    }
    let sign = if higher_is_better { 1.0 } else { -1.0 };
    let mut out = Vec::with_capacity(got.len());
    for (i, (r, g)) in reference.iter().zip(got).enumerate() {
        if !r.is_finite() || !g.is_finite() {
            bail!("paired scores: item {i} is not a finite number (reference {r}, package {g})");
        }
        out.push(sign * (g - r));
    }
    Ok(out)
}

/// The exact sign-flip test on oriented differences (see the module doc), two-sided.
pub fn sign_flip(diffs: &[f64]) -> SignFlip {
    sign_flip_with(diffs, MAX_ENUMERATED, SEED, DRAWS)
}

fn sign_flip_with(diffs: &[f64], max_enumerated: usize, seed: u64, draws: usize) -> SignFlip {
    let worse = diffs.iter().filter(|d| **d < 0.0).count();
    let better = diffs.iter().filter(|d| **d > 0.0).count();
    let sum: f64 = diffs.iter().sum();
    let base = SignFlip { p_value: 1.0, method: Method::ExactDp, nonzero: worse + better, worse, better, sum };
    if let Some(item) = diffs.iter().position(|d| !d.is_finite()) {
        return SignFlip { p_value: 0.0, method: Method::NotFinite { item }, ..base };
    }
    let magnitudes: Vec<f64> = diffs.iter().filter(|d| **d != 0.0).map(|d| d.abs()).collect();
    if let Some(p) = exact_dp(&magnitudes, sum) {
        return SignFlip { p_value: p, ..base };
    }
    if magnitudes.len() <= max_enumerated {
        return SignFlip { p_value: enumerate(&magnitudes, sum), method: Method::ExactEnumeration, ..base };
    }
    SignFlip { p_value: monte_carlo(&magnitudes, sum, seed, draws), method: Method::MonteCarlo { seed, draws }, ..base }
}

/// The exact two-sided p-value when every magnitude is an integer and the sums stay small; `None` otherwise.
///
/// `dist[k]` is the probability that the items given a plus sign sum to `k` (of `total`); the signed sum is then
/// `2k - total`, and the distribution is symmetric, so p = 2 P(sum >= |observed|).
fn exact_dp(magnitudes: &[f64], observed: f64) -> Option<f64> {
    if magnitudes.iter().any(|a| a.fract() != 0.0 || *a > DP_MAX_TOTAL as f64) {
        return None;
    }
    let steps: Vec<usize> = magnitudes.iter().map(|a| *a as usize).collect();
    let total: usize = steps.iter().sum();
    if total > DP_MAX_TOTAL || total.saturating_mul(steps.len()) > DP_MAX_STEPS {
        return None;
    }
    if observed == 0.0 {
        return Some(1.0);
    }
    let mut dist = vec![0.0f64; total + 1];
    dist[0] = 1.0;
    let mut reach = 0;
    for &a in &steps {
        reach += a;
        // Downwards, so that dist[k - a] is still the previous item's value.
        for k in (a..=reach).rev() {
            dist[k] = 0.5 * (dist[k] + dist[k - a]);
        }
        dist[..a].iter_mut().for_each(|x| *x *= 0.5);
    }
    // The observed sum is an integer of the same parity as `total`: k = (total + |observed|) / 2.
    let first = (total + observed.abs().round() as usize).div_ceil(2);
    // Smallest terms first.
    let tail: f64 = dist[first..].iter().rev().sum();
    Some((2.0 * tail).min(1.0))
}

/// Every sign pattern, split in two halves (2^10 x 2^10 sums at most) so that each sum adds two partial sums.
fn enumerate(magnitudes: &[f64], observed: f64) -> f64 {
    let threshold = threshold(magnitudes, observed);
    let (left, right) = magnitudes.split_at(magnitudes.len() / 2);
    let sums = |half: &[f64]| -> Vec<f64> {
        (0..1usize << half.len())
            .map(|mask| half.iter().enumerate().map(|(i, a)| if mask >> i & 1 == 1 { *a } else { -*a }).sum())
            .collect()
    };
    let (l, r) = (sums(left), sums(right));
    let hits: usize = l.iter().map(|x| r.iter().filter(|y| (x + *y).abs() >= threshold).count()).sum();
    hits as f64 / (l.len() * r.len()) as f64
}

/// `draws` sign patterns; the observed one counts once more, so p is never 0.
fn monte_carlo(magnitudes: &[f64], observed: f64, seed: u64, draws: usize) -> f64 {
    let threshold = threshold(magnitudes, observed);
    let mut rng = SplitMix64(seed);
    let mut hits = 0usize;
    for _ in 0..draws {
        let mut s = 0.0;
        for chunk in magnitudes.chunks(64) {
            let bits = rng.next();
            for (i, a) in chunk.iter().enumerate() {
                if bits >> i & 1 == 1 {
                    s += a;
                } else {
                    s -= a;
                }
            }
        }
        hits += usize::from(s.abs() >= threshold);
    }
    (1 + hits) as f64 / (1 + draws) as f64
}

/// The |sum| a permuted sum must reach to count, less the float noise of summing in another order.
fn threshold(magnitudes: &[f64], observed: f64) -> f64 {
    observed.abs() - TIE_TOLERANCE * magnitudes.iter().sum::<f64>()
}

/// The paired bootstrap: [`RESAMPLES`] resamples of the items with replacement from [`SEED`], and the 2.5% and
/// 97.5% order statistics of their means (the 250th smallest and the 250th largest). `None` for no items or a
/// difference that is not finite.
pub fn bootstrap_mean(diffs: &[f64]) -> Option<Interval> {
    bootstrap_with(diffs, RESAMPLES, SEED)
}

fn bootstrap_with(diffs: &[f64], resamples: usize, seed: u64) -> Option<Interval> {
    let n = diffs.len();
    if n == 0 || resamples == 0 || diffs.iter().any(|d| !d.is_finite()) {
        return None;
    }
    let mut rng = SplitMix64(seed);
    let mut means: Vec<f64> = (0..resamples).map(|_| (0..n).map(|_| diffs[rng.below(n)]).sum::<f64>() / n as f64).collect();
    means.sort_by(f64::total_cmp);
    let cut = (resamples as f64 * 0.025).floor() as usize;
    Some(Interval {
        mean: diffs.iter().sum::<f64>() / n as f64,
        lower: means[cut],
        upper: means[resamples - 1 - cut],
        level: 0.95,
        resamples,
        seed,
    })
}

/// The smallest net change, in the units of `unit`, that the sign-flip test calls significant at `alpha`: the sum
/// of the k smallest units, k = [`min_significant_flips`]`(alpha)` (see the module doc). Infinite when the task has
/// fewer than k items.
pub fn min_detectable(unit: &[f64], alpha: f64) -> f64 {
    let k = min_significant_flips(alpha);
    if k > unit.len() {
        return f64::INFINITY;
    }
    let mut sorted = unit.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[..k].iter().sum()
}

/// One item can move the metric by more than `max_delta_points`: the net rule cannot be honoured at this size.
pub fn too_small(unit: &[f64], max_delta_points: f64) -> bool {
    unit.iter().any(|u| *u > max_delta_points + 1e-9)
}

/// splitmix64 (Steele, Lea and Flood): small, fast and good enough for sign flips and resampling.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, n) by multiply-shift (Lemire); the bias, n / 2^64, is nothing at these sizes.
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accuracy::gate::mcnemar_exact;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * a.abs().max(b.abs())
    }

    #[test]
    fn small_cases_by_hand() {
        // +-1 +-2 +-3: sums 6 4 2 0 0 -2 -4 -6; |S| >= 6 in 2 of 8.
        let t = sign_flip(&[1.0, 2.0, 3.0]);
        assert_eq!((t.p_value, t.method, t.nonzero, t.worse, t.better, t.sum), (0.25, Method::ExactDp, 3, 0, 3, 6.0));
        // Six items one way: 2 / 2^6, McNemar's six flips at 0.05.
        assert_eq!(sign_flip(&[1.0; 6]).p_value, 0.03125);
        // +-3 +-1: |S| >= 2 always.
        assert_eq!(sign_flip(&[3.0, -1.0]).p_value, 1.0);
        assert_eq!(sign_flip(&[3.0, 1.0]).p_value, 0.5);
        // +-0.5 +-0.25 +-0.125: |S| in {0.875, 0.625, 0.375, 0.125}, each twice; |S| >= 0.625 in 4 of 8.
        let t = sign_flip(&[0.5, 0.25, -0.125]);
        assert_eq!((t.p_value, t.method, t.worse, t.better), (0.5, Method::ExactEnumeration, 1, 2));
    }

    #[test]
    fn scipy_permutation_test_agrees() {
        // scipy 1.17.1: scipy.stats.permutation_test((d,), lambda x, axis: np.sum(x, axis=axis),
        // permutation_type='samples', n_resamples=np.inf, alternative='two-sided').pvalue (every sign pattern).
        let anls = [0.5, -0.25, 0.8, 0.1, 0.0, 1.0 / 3.0, 0.6, -0.05, 0.9, 0.2, 0.45, -0.7];
        let t = sign_flip(&anls);
        assert_eq!((t.method, t.nonzero), (Method::ExactEnumeration, 11));
        assert!(close(t.p_value, 0.1005859375, 1e-12), "{}", t.p_value);
        let anls2 = [0.1, -0.2, 0.05, 0.3, -0.15, 0.25, 0.12, -0.04, 0.33, -0.5, 0.07, 0.2, 0.01, 0.18];
        assert!(close(sign_flip(&anls2).p_value, 0.410400390625, 1e-12));
        let wer = [2.0, 0.0, 1.0, 3.0, -1.0, 0.0, 4.0, 1.0, 0.0, 2.0, -2.0, 1.0, 5.0, 0.0, 1.0, 1.0];
        let t = sign_flip(&wer);
        assert_eq!((t.method, t.nonzero, t.worse, t.better), (Method::ExactDp, 12, 2, 10));
        assert!(close(t.p_value, 0.03125, 1e-12), "{}", t.p_value);
    }

    #[test]
    fn zero_one_items_are_mcnemar() {
        let mut checked = 0;
        for lost in 0..=60 {
            for gained in 0..=60 {
                // Ties (both right or both wrong) drop out.
                let mut d = vec![0.0; 7];
                d.extend(std::iter::repeat_n(-1.0, lost));
                d.extend(std::iter::repeat_n(1.0, gained));
                let t = sign_flip(&d);
                let m = mcnemar_exact(lost, gained);
                assert!(close(t.p_value, m, 1e-10), "lost {lost}, gained {gained}: {} vs McNemar {m}", t.p_value);
                assert_eq!((t.worse, t.better, t.method), (lost, gained, Method::ExactDp));
                checked += 1;
            }
        }
        for (lost, gained) in [(150, 120), (40, 260), (0, 300), (1, 299)] {
            let d: Vec<f64> = std::iter::repeat_n(-1.0, lost).chain(std::iter::repeat_n(1.0, gained)).collect();
            let (p, m) = (sign_flip(&d).p_value, mcnemar_exact(lost, gained));
            assert!(close(p, m, 1e-10), "lost {lost}, gained {gained}: {p} vs McNemar {m}");
            checked += 1;
        }
        assert_eq!(checked, 61 * 61 + 4);
    }

    #[test]
    fn swapping_sides_keeps_p() {
        let reference = [0.9, 0.4, 1.0, 0.0, 0.75, 0.6, 0.3, 0.95, 0.5, 0.2];
        let got = [0.8, 0.4, 0.7, 0.1, 0.5, 0.6, 0.0, 0.9, 0.25, 0.2];
        let ab = sign_flip(&differences(&reference, &got, true).expect("same length"));
        let ba = sign_flip(&differences(&got, &reference, true).expect("same length"));
        assert_eq!(ab.p_value, ba.p_value);
        assert_eq!((ab.worse, ab.better, ba.worse, ba.better), (6, 1, 1, 6));
        // Lower is better flips the orientation, not the p-value.
        let low = sign_flip(&differences(&reference, &got, false).expect("same length"));
        assert_eq!((low.p_value, low.worse, low.better), (ab.p_value, 1, 6));
        // The same with Monte Carlo draws.
        let a = sign_flip_with(&differences(&reference, &got, true).expect("same length"), 0, SEED, 20_000);
        let b = sign_flip_with(&differences(&got, &reference, true).expect("same length"), 0, SEED, 20_000);
        assert_eq!(a.p_value, b.p_value);
    }

    #[test]
    fn nothing_changed_is_p_one() {
        for t in [sign_flip(&[0.0; 40]), sign_flip(&[]), sign_flip_with(&[0.0; 40], 0, SEED, 1000)] {
            assert_eq!((t.p_value, t.nonzero, t.worse, t.better), (1.0, 0, 0, 0));
        }
        // Real differences that cancel exactly.
        assert_eq!(sign_flip(&[0.3, -0.1, -0.2]).p_value, 1.0);
        let i = bootstrap_mean(&[0.0; 30]).expect("30 items");
        assert_eq!((i.mean, i.lower, i.upper), (0.0, 0.0, 0.0));
    }

    #[test]
    fn dp_and_enumeration_agree_on_integers() {
        let mut rng = SplitMix64(7);
        for case in 0..200 {
            let m = 1 + case % 16;
            let d: Vec<f64> = (0..m).map(|_| rng.below(9) as f64 - 4.0).collect();
            let magnitudes: Vec<f64> = d.iter().filter(|x| **x != 0.0).map(|x| x.abs()).collect();
            let sum: f64 = d.iter().sum();
            let dp = exact_dp(&magnitudes, sum).expect("small integers");
            let en = enumerate(&magnitudes, sum);
            assert!(close(dp, en, 1e-12), "{d:?}: dp {dp}, enumeration {en}");
        }
    }

    #[test]
    fn monte_carlo_is_fixed_and_near_the_exact_value() {
        // 24 real differences: past MAX_ENUMERATED, so the default test draws.
        let d: Vec<f64> = (0..24).map(|i| ((i * 37 % 17) as f64 - 6.0) / 13.0).collect();
        let t = sign_flip(&d);
        assert_eq!(t.method, Method::MonteCarlo { seed: SEED, draws: DRAWS });
        assert_eq!(t.p_value, sign_flip(&d).p_value);
        // The exact value on the integer numerators (the scale drops out of the test).
        let numerators: Vec<f64> = d.iter().map(|x| (x * 13.0).round()).collect();
        let exact = sign_flip(&numerators);
        assert_eq!(exact.method, Method::ExactDp);
        let se = (exact.p_value * (1.0 - exact.p_value) / DRAWS as f64).sqrt();
        assert!((t.p_value - exact.p_value).abs() < 4.0 * se + 1e-5, "Monte Carlo {} vs exact {}", t.p_value, exact.p_value);
        assert!(exact.p_value > 0.01 && exact.p_value < 0.99, "{}", exact.p_value);
        // Another seed draws otherwise.
        assert_ne!(sign_flip_with(&d, MAX_ENUMERATED, SEED + 1, DRAWS).p_value, t.p_value);
    }

    #[test]
    fn ties_within_float_noise_count() {
        // The observed 0.1 + 0.2 + 0.3 is 0.6000000000000001 in floats, the enumeration's 0.1 + (0.2 + 0.3) is 0.6:
        // without the tolerance p would be 0. Likewise 0.1 + 0.2 - 0.3 is 5.6e-17, and 0.1 + (0.2 - 0.3) is 2.8e-17
        // (p would be 0.75).
        let t = sign_flip(&[0.1, 0.2, 0.3]);
        assert_eq!(t.p_value, 0.25);
        let t = sign_flip(&[0.1, 0.2, -0.3]);
        assert_eq!(t.p_value, 1.0);
    }

    #[test]
    fn not_finite_fails_and_names_the_item() {
        let t = sign_flip(&[1.0, f64::NAN, 0.5]);
        assert_eq!((t.p_value, t.method), (0.0, Method::NotFinite { item: 1 }));
        assert_eq!(t.method.to_string(), "no test: item 1's difference is not a finite number");
        let e = differences(&[0.5, 0.5], &[0.5, f64::INFINITY], true).expect_err("infinite");
        assert_eq!(e.message(), "paired scores: item 1 is not a finite number (reference 0.5, package inf)");
        let e = differences(&[0.5], &[], true).expect_err("lengths");
        assert_eq!(e.message(), "paired scores: the reference has 1 items and the package 0");
        assert!(bootstrap_mean(&[f64::NAN]).is_none());
        assert!(bootstrap_mean(&[]).is_none());
    }

    #[test]
    fn bootstrap_interval() {
        // 100 items: 30 better by 1, 10 worse by 1, the rest equal; mean 0.2, standard error 0.0632.
        let d: Vec<f64> = (0..100)
            .map(|i| {
                if i < 30 {
                    1.0
                } else if i < 40 {
                    -1.0
                } else {
                    0.0
                }
            })
            .collect();
        let i = bootstrap_mean(&d).expect("100 items");
        assert_eq!(i, bootstrap_mean(&d).expect("100 items"));
        assert_eq!((i.mean, i.resamples, i.seed, i.level), (0.2, RESAMPLES, SEED, 0.95));
        // The normal approximation gives 0.2 +- 1.96 x 0.0632 = [0.076, 0.324]; the percentiles fall on 1/100 steps.
        assert!((0.05..=0.10).contains(&i.lower) && (0.30..=0.35).contains(&i.upper), "{i:?}");
        let low = bootstrap_with(&d, 1000, SEED).expect("100 items");
        assert!(low.lower < low.mean && low.mean < low.upper);
    }

    #[test]
    fn minimum_detectable_difference() {
        assert_eq!(min_significant_flips(0.05), 6);
        // 300 items at 1/3 point each: six items, 2 points.
        let units = vec![100.0 / 300.0; 300];
        assert!(close(min_detectable(&units, 0.05), 2.0, 1e-12));
        assert!(!too_small(&units, 1.0));
        assert!(too_small(&units, 0.25));
        // WER: utterances of 10, 20, ..., 100 words (550 in all); the six shortest hold 210 words.
        let words: Vec<f64> = (1..=10).map(|w| 10.0 * w as f64).collect();
        let units: Vec<f64> = words.iter().rev().map(|w| 100.0 * w / 550.0).collect();
        assert!(close(min_detectable(&units, 0.05), 100.0 * 210.0 / 550.0, 1e-12));
        assert!(too_small(&units, 1.0));
        // At 0.01 it takes 8 (2/2^8 = 0.0078); five items cannot reach 0.05.
        assert!(close(min_detectable(&[1.0; 10], 0.01), 8.0, 1e-12));
        assert_eq!(min_detectable(&[1.0; 5], 0.05), f64::INFINITY);
        // k one-way moves of any sizes are significant; k - 1 are not.
        let six = sign_flip(&[0.01, 0.3, 1.0, 0.02, 0.5, 0.07]);
        let five = sign_flip(&[0.01, 0.3, 1.0, 0.02, 0.5]);
        assert!(six.p_value < 0.05 && five.p_value >= 0.05, "{} {}", six.p_value, five.p_value);
    }
}
