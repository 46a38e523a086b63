//! The numbers both accuracy gates decide by, and the one place they are resolved: a task's own thresholds, else a
//! case's, else the defaults (+-1 point net, the paired test at 0.05).

use serde::{Deserialize, Serialize};

use crate::error::{Result, bail};

/// The numbers the gate decides by, printed with every verdict. Defaults: +-1 point net, McNemar at 0.05.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatePolicy {
    /// |accuracy(package) - accuracy(reference)| in points (0-100) may not exceed this.
    #[serde(default = "one_point")]
    pub max_delta_points: f64,
    /// The paired test on the flips (McNemar's exact test, two-sided): the gate fails when the items lost and the
    /// items gained are this unlikely to come from a package no worse and no better than the reference.
    #[serde(default = "five_percent")]
    pub flip_alpha: f64,
    /// Optional: at most this many items (in points of the task) may change correctness at all, whichever way.
    /// Flips that cancel exactly are no evidence of a shift for any paired test, but many of them can be a bug.
    #[serde(default)]
    pub max_flipped_points: Option<f64>,
    /// A task too small to decide `max_delta_points` (one item moves accuracy more than that) fails instead of
    /// warning. The trial sets it under `CI`.
    #[serde(default)]
    pub refuse_small: bool,
}

/// The thresholds a task file or a case's accuracy entry states; each may be absent.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Thresholds {
    pub max_delta_points: Option<f64>,
    pub flip_alpha: Option<f64>,
    pub max_flipped_points: Option<f64>,
}

fn one_point() -> f64 {
    1.0
}

fn five_percent() -> f64 {
    0.05
}

impl Default for GatePolicy {
    fn default() -> GatePolicy {
        GatePolicy { max_delta_points: one_point(), flip_alpha: five_percent(), max_flipped_points: None, refuse_small: false }
    }
}

impl GatePolicy {
    /// The gate's thresholds for a task: those stated, else the defaults. `ci` makes a task too small to decide
    /// them fail.
    pub fn for_task(stated: Thresholds, ci: bool) -> GatePolicy {
        let d = GatePolicy::default();
        GatePolicy {
            max_delta_points: stated.max_delta_points.unwrap_or(d.max_delta_points),
            flip_alpha: stated.flip_alpha.unwrap_or(d.flip_alpha),
            max_flipped_points: stated.max_flipped_points,
            refuse_small: ci,
        }
    }

    /// Errors name `what` (the file and field the numbers come from).
    pub fn validate(&self, what: &str) -> Result<()> {
        if !(self.max_delta_points.is_finite() && self.max_delta_points >= 0.0) {
            bail!("{what}: field `max_delta_points` is {}, expected a number >= 0", self.max_delta_points);
        }
        if !(self.flip_alpha > 0.0 && self.flip_alpha < 1.0) {
            bail!("{what}: field `flip_alpha` is {}, expected a probability in (0, 1)", self.flip_alpha);
        }
        if let Some(m) = self.max_flipped_points
            && !(m.is_finite() && m >= 0.0)
        {
            bail!("{what}: field `max_flipped_points` is {m}, expected a number >= 0");
        }
        Ok(())
    }
}
