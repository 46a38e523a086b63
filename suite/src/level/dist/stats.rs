//! What a package's next-token distributions measure against the golden, position by position, and the
//! statistics over the corpus in llama.cpp's `--kl-divergence` terms (mean KL divergence with its uncertainty and
//! spread, Δp, "same top p", the perplexity ratio).

use super::golden::DistGolden;

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

/// Linear interpolation between the two nearest ranks of sorted values, as llama.cpp's `kl_divergence` computes it:
/// in float32 (its values and fraction are floats), the ends exact.
pub fn percentile(sorted: &[f32], fraction: f32) -> f32 {
    match sorted {
        [] => f32::NAN,
        [first, ..] if fraction <= 0.0 => *first,
        [.., last] if fraction >= 1.0 => *last,
        _ => {
            let mut p = fraction * (sorted.len() - 1) as f32;
            let i = p as usize;
            p -= i as f32;
            (1.0 - p) * sorted[i] + p * sorted[(i + 1).min(sorted.len() - 1)]
        }
    }
}

/// llama.cpp's median: the middle value, or the float32 mean of the two middle ones.
fn median(sorted: &[f32]) -> f32 {
    match sorted.len() {
        0 => f32::NAN,
        n if n % 2 == 0 => 0.5 * (sorted[n / 2] + sorted[n / 2 - 1]),
        n => sorted[n / 2],
    }
}

/// The spread of `values` as llama.cpp prints it: each value stored as float32 (its `kld_values` and
/// `p_diff_values`), sorted, read at `percents` (50: the median).
fn spread(values: &[f64], percents: &[f64]) -> Spread {
    let mut s: Vec<f32> = values.iter().map(|&v| v as f32).collect();
    s.sort_by(f32::total_cmp);
    let at = |p: f64| if p == 50.0 { median(&s) } else { percentile(&s, (p / 100.0) as f32) };
    Spread { points: percents.iter().map(|&p| (p, at(p) as f64)).collect() }
}

/// llama.cpp's `mean_and_uncertainty`: the mean, and the standard error of the mean only with more than 10 values
/// and a positive variance (0 otherwise); (0, 0) with none.
fn mean_err(values: &[f64]) -> Estimate {
    let n = values.len();
    if n < 1 {
        return Estimate { value: 0.0, uncertainty: 0.0 };
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let var = values.iter().map(|v| v * v).sum::<f64>() / n as f64 - mean * mean;
    let uncertainty = if var > 0.0 && n > 10 { (var / (n - 1) as f64).sqrt() } else { 0.0 };
    Estimate { value: mean, uncertainty }
}

/// llama.cpp's `covariance` of two series' means: 0 with fewer than 10 values.
fn covariance_of_means(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len();
    if n < 10 {
        return 0.0;
    }
    let n = n as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    (a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>() / n - ma * mb) / (n - 1.0)
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
            // llama.cpp: 0.5 / rms * its uncertainty, NaN when every Δp is 0.
            rms_delta_p: Estimate { value: rms, uncertainty: 0.5 / rms * ms.uncertainty },
            same_top: Estimate { value: same, uncertainty: if n > 1 { (same * (1.0 - same) / (n - 1) as f64).sqrt() } else { f64::NAN } },
            perplexity: (n >= MIN_PPL_POSITIONS).then(|| perplexity(positions)),
        }
    }

    pub fn p99_kld(&self) -> f64 {
        self.kld_spread.at(99.0).unwrap_or(f64::NAN)
    }
}

fn perplexity(positions: &[Position]) -> Perplexity {
    let nlq: Vec<f64> = positions.iter().map(|p| -p.logq_target).collect();
    let nlp: Vec<f64> = positions.iter().map(|p| -p.logp_target).collect();
    let (q, p) = (mean_err(&nlq), mean_err(&nlp));
    // llama.cpp's propagation: the covariance of the two means, d(PPL) = PPL * d(ln PPL).
    let cov = covariance_of_means(&nlq, &nlp);
    let ln_ratio = Estimate {
        value: q.value - p.value,
        uncertainty: (q.uncertainty * q.uncertainty + p.uncertainty * p.uncertainty - 2.0 * cov).sqrt(),
    };
    let (ppl_q, ppl_base) = (q.value.exp(), p.value.exp());
    let (unc_q, unc_base) = (ppl_q * q.uncertainty, ppl_base * p.uncertainty);
    let ratio = ln_ratio.value.exp();
    Perplexity {
        ppl_q: Estimate { value: ppl_q, uncertainty: unc_q },
        ppl_base: Estimate { value: ppl_base, uncertainty: unc_base },
        cor: cov / (q.uncertainty * p.uncertainty),
        ln_ratio,
        ratio: Estimate { value: ratio, uncertainty: ratio * ln_ratio.uncertainty },
        difference: Estimate {
            value: ppl_q - ppl_base,
            uncertainty: (unc_q * unc_q + unc_base * unc_base - 2.0 * ppl_q * ppl_base * cov).sqrt(),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::level::dist::golden::{KSweep, Segments};

    fn golden(k: usize, rows: &[Vec<f32>], targets: &[i64]) -> DistGolden {
        let mut top_ids = Vec::new();
        let mut top_logprobs = Vec::new();
        let mut tail = Vec::new();
        let mut target_logprob = Vec::new();
        for (row, &t) in rows.iter().zip(targets) {
            let lse = mobius_numeric::logsumexp(row.iter().copied());
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
        let (lp, lq) = (mobius_numeric::logsumexp(p.iter().copied()), mobius_numeric::logsumexp(q.iter().copied()));
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
    fn percentiles_interpolate_in_float32_like_llama_cpp() {
        let v = [1.0f32, 2.0, 3.0, 4.0, 10.0];
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert_eq!(percentile(&v, 1.0), 10.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        // llama.cpp's arithmetic: p = 0.99f * 4 in float32, then (1 - p) * v[3] + p * v[4] in float32.
        let p = 0.99f32 * 4.0 - 3.0;
        assert_eq!(percentile(&v, 0.99), (1.0 - p) * 4.0 + p * 10.0);
        assert_eq!((median(&v), median(&v[..4])), (3.0, 0.5 * (3.0 + 2.0)));
        // The float32 spread differs from float64 interpolation in the last bits (the issue measured up to 3.5e-5).
        let s = spread(&[0.1, 0.2, 0.30000001, 0.7], &[99.9, 50.0]);
        assert_eq!(s.at(99.9), Some(percentile(&[0.1f32, 0.2, 0.3, 0.7], 0.999) as f64));
        assert_eq!(s.at(50.0), Some((0.5f32 * (0.3f32 + 0.2f32)) as f64));
    }

    #[test]
    fn small_counts_and_zero_differences_are_llama_cpp_s_numbers() {
        let at = |n: usize, dp: f64| -> Vec<Position> {
            (0..n).map(|i| Position { kld: i as f64 * 1e-3, delta_p: dp, logq_target: -1.0, logp_target: -1.0, same_top: true }).collect()
        };
        // Ten or fewer values: llama.cpp's `count > 10` guard gives an uncertainty of 0, never a sample error or NaN.
        for n in [1, 2, 10] {
            let s = Stats::of(&at(n, 0.01));
            assert_eq!(s.kld.uncertainty, 0.0, "{n} positions");
        }
        assert!(Stats::of(&at(11, 0.01)).kld.uncertainty > 0.0);
        // Every Δp 0: its RMS is 0 and llama.cpp's uncertainty of it is 0.5 / 0 * 0: NaN.
        let s = Stats::of(&at(20, 0.0));
        assert_eq!(s.rms_delta_p.value, 0.0);
        assert!(s.rms_delta_p.uncertainty.is_nan());
        // No position: llama.cpp's (0, 0).
        assert_eq!(mean_err(&[]), Estimate { value: 0.0, uncertainty: 0.0 });
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
        assert_eq!(s.kld_spread.at(100.0), Some(0.199f32 as f64));
        assert!((s.same_top.value - 0.75).abs() < 1e-12);
        assert!((s.same_top.uncertainty - (0.75f64 * 0.25 / 199.0).sqrt()).abs() < 1e-12);
        assert!((s.rms_delta_p.value - 0.01).abs() < 1e-12 && s.delta_p.value.abs() < 1e-12);
        let ppl = s.perplexity.expect("200 positions");
        assert!((ppl.ln_ratio.value - 0.01).abs() < 1e-12 && (ppl.cor - 1.0).abs() < 1e-9);
        assert!(Stats::of(&pos[..99]).perplexity.is_none());
    }
}
