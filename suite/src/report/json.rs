//! `summary.json`: every trial's verdict and numbers, for tools.

use crate::outcome::Finished;
use crate::vocab::Device;

/// What `summary.json` says while a run of `n` trials is under way (and after it, if it was killed).
pub fn incomplete(n: usize) -> String {
    let v = serde_json::json!({ "complete": false, "total": n, "finished": 0, "failed": 0, "trials": [] });
    serde_json::to_string_pretty(&v).unwrap() + "\n"
}

/// Every trial's verdict, numbers and message.
pub fn summary(rows: &[Finished], wall: f64, device: Device) -> String {
    let trials: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "name": r.name,
                "verdict": r.outcome.status.name(),
                "max_abs_diff": r.outcome.max_abs_diff,
                "first_divergence": r.outcome.first_divergence,
                "first_module": r.outcome.failure.as_ref().and_then(|f| f.first_module.as_deref()),
                "accuracy_delta_points": r.outcome.judgement.as_ref().and_then(|j| j.accuracy_delta_points()),
                "regenerate": r.outcome.regenerate,
                "seconds": r.seconds,
                "message": r.outcome.message,
            })
        })
        .collect();
    let failed = rows.iter().filter(|r| r.outcome.is_fail()).count();
    serde_json::to_string_pretty(&serde_json::json!({
        "complete": true,
        "device": device.to_string(),
        "wall_seconds": wall,
        "total": rows.len(),
        "failed": failed,
        "trials": trials,
    }))
    .unwrap()
        + "\n"
}
