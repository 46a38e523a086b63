//! Scores of the accuracy gate, as lm-eval 0.4 computes them: log-likelihoods from logits (log-softmax in f32),
//! `acc` and `acc_norm` per item, ties to the first choice, and the standard error of the mean.

/// log-softmax of `logits` at `id`, in f32 with the max subtracted first.
pub fn log_prob(logits: &[f32], id: usize) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits.iter().map(|&x| (x - max).exp()).sum();
    logits[id] - max - sum.ln()
}

/// The sum of the continuation's log-probabilities, and whether every token was the greedy choice. `rows[i]` are
/// the logits that predict `continuation[i]`.
pub fn continuation_loglik<'a>(rows: impl IntoIterator<Item = &'a [f32]>, continuation: &[i64]) -> (f64, bool) {
    let mut total = 0.0f32;
    let mut greedy = true;
    for (row, &id) in rows.into_iter().zip(continuation) {
        total += log_prob(row, id as usize);
        greedy &= mobius_numeric::argmax(row) == id as usize;
    }
    (total as f64, greedy)
}

/// lm-eval's `np.argmax`: the first of equal maxima; a NaN wins over every number (numpy's rule), the first NaN.
pub fn first_argmax(v: &[f64]) -> usize {
    if let Some(i) = v.iter().position(|x| x.is_nan()) {
        return i;
    }
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// One multiple-choice item's answers: by raw log-likelihood (`acc`) and normalised by the choice's length in
/// characters without the delimiter (`acc_norm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Picks {
    pub acc: usize,
    pub acc_norm: usize,
}

pub fn pick(logliks: &[f64], choices: &[String]) -> Picks {
    Picks { acc: first_argmax(logliks), acc_norm: first_argmax(&normalized(logliks, choices)) }
}

/// `acc_norm`'s scores: each log-likelihood divided by its choice's length in characters (code points, Python's
/// `len`). An empty choice (scored as the target delimiter alone) divides by 0 in float64, as lm-eval's numpy
/// does: -inf for a negative log-likelihood (never chosen unless every score is -inf), NaN for 0 or NaN, +inf for a
/// positive one; [`first_argmax`] then takes the first NaN, else the first maximum.
pub fn normalized(logliks: &[f64], choices: &[String]) -> Vec<f64> {
    logliks.iter().zip(choices).map(|(l, c)| l / c.chars().count() as f64).collect()
}

/// How sure an answer was: the chosen score minus the best other one (0 for a tie).
pub fn margin(scores: &[f64], chosen: usize) -> f64 {
    let other = scores.iter().enumerate().filter(|(i, _)| *i != chosen).map(|(_, &s)| s).fold(f64::NEG_INFINITY, f64::max);
    if other.is_finite() { scores[chosen] - other } else { f64::INFINITY }
}

/// Mean and its standard error (lm-eval's `mean_stderr`: sample standard deviation over sqrt(n)).
pub fn mean_stderr(correct: &[bool]) -> (f64, f64) {
    let n = correct.len() as f64;
    if n == 0.0 {
        return (0.0, 0.0);
    }
    let mean = correct.iter().filter(|&&c| c).count() as f64 / n;
    if n < 2.0 {
        return (mean, 0.0);
    }
    let var = correct.iter().map(|&c| (c as u8 as f64 - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

/// What one item scored: per-choice log-likelihoods, or the generated answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Scored {
    Choices(Vec<f64>),
    Answer(String),
}
