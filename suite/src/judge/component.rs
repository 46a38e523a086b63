//! The component levels' judge: a media encoder's features against the reference's, element-wise under the dtype's
//! L4 tolerance, and whether they reach the decoder (zeroing them must move the prompt's last logits). Pure: the run
//! stage's outputs and the reference's features in, a judgement out.

use crate::judge::tolerance::Tolerance;
use crate::judge::verdict::Verdict;
use crate::numeric::{Comparison, compare};
use crate::vocab::Level;

/// What the run stage measured for one encoder.
pub struct ComponentOutputs<'a> {
    pub shape: &'a [i64],
    pub features: &'a [f32],
    /// The prompt's last logits with the features, and with them zeroed.
    pub with: &'a [f32],
    pub zeroed: &'a [f32],
}

/// The judgement, with every number its report prints.
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentReport {
    pub verdict: Verdict,
    /// `vision_encoder` or `audio_encoder`.
    pub component: &'static str,
    /// The features' tensor: `image_features` or `audio_features`.
    pub tensor: &'static str,
    pub got_shape: Vec<i64>,
    pub want_shape: Vec<i64>,
    pub comparison: Comparison,
    /// Feature columns (the last dimension), for `[row, column]` positions.
    pub cols: usize,
    /// How far zeroing the features moved the prompt's last logits, and the least that shows they arrive.
    pub moved: f64,
    pub floor: f64,
    pub reasons: Vec<String>,
    pub tolerance: Tolerance,
}

pub fn judge(level: Level, got: &ComponentOutputs, want_shape: &[i64], want: &[f32], tol: &Tolerance) -> ComponentReport {
    let (component, tensor) = level.features();
    let mut reasons = Vec::new();
    let same_shape = got.shape == want_shape;
    if !same_shape {
        reasons.push(format!("{component}: `{tensor}` has shape {:?}, the reference's is {want_shape:?}", got.shape));
    }
    let c = compare(got.features, want, tol.atol, tol.rtol);
    let cols = (*want_shape.last().unwrap_or(&1)).max(1) as usize;
    if let Some(i) = c.worst_violation_at.filter(|_| same_shape) {
        reasons.push(format!(
            "{component}: {} of {} values of `{tensor}` outside atol+rtol*|ref|; worst at [{}, {}]: expected {:.6}, got {:.6}",
            c.violations,
            want.len(),
            i / cols,
            i % cols,
            want[i],
            got.features[i]
        ));
    }
    let moved = compare(got.with, got.zeroed, 0.0, 0.0).max_abs;
    let floor = (100.0 * tol.atol).max(1e-3);
    if moved <= floor {
        reasons.push(format!(
            "{component}: zeroing `{tensor}` moved the last logits by only {moved:.3e} (<= {floor:.1e}): the media never reach the decoder"
        ));
    }
    let verdict = if reasons.is_empty() { Verdict::Pass } else { Verdict::Fail };
    ComponentReport {
        verdict,
        component,
        tensor,
        got_shape: got.shape.to_vec(),
        want_shape: want_shape.to_vec(),
        comparison: c,
        cols,
        moved,
        floor,
        reasons,
        tolerance: *tol,
    }
}
