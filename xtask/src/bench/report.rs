//! The bench's output: the table as printed, and the JSON report with its headline figures.

use std::path::Path;

use mobius_conformance::paths::workspace_root;
use mobius_conformance::run::sessions;
use serde_json::{Map, Value, json};

use super::loops::peak_rss_mb;

/// The table's closing lines (the process's peak memory, the sessions made) and their report entries.
pub(super) fn footer(table: &mut Vec<String>, report: &mut Map<String, Value>) {
    let rss = peak_rss_mb();
    table.push(format!("peak resident memory of the suite process: {rss:.0} MB"));
    report.insert("peak_rss_mb".into(), json!(rss));
    if let Some((c, cap)) = sessions::session_counts() {
        table.push(format!(
            "sessions: {} made, {} dropped to stay under the cap of {cap} (MOBIUS_MAX_SESSIONS), at most {} alive at once",
            c.made, c.dropped, c.peak_alive
        ));
        report.insert("sessions".into(), json!({ "made": c.made, "dropped": c.dropped, "peak_alive": c.peak_alive, "cap": cap }));
    }
}

/// The headline figures: the worst fixture's median ratio, as the targets read.
pub(super) fn headlines(report: &mut Map<String, Value>) {
    let worst = |report: &Map<String, Value>, section: &str, key: &str, per: &str| -> Value {
        let v: Vec<f64> = report
            .get(section)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|d| d[key]["median"].as_f64().or(d[key].as_f64())).filter(|x| x.is_finite()).collect())
            .unwrap_or_default();
        if v.is_empty() { Value::Null } else { json!({ "min": v.iter().copied().fold(f64::INFINITY, f64::min), "per": per }) }
    };
    for (key, section, per) in [
        ("decode_vs_genai", "decode", "fixture and flavour (median over pairs)"),
        ("decode_ceiling_vs_genai", "decode", "fixture and flavour (median over pairs)"),
        ("decode_vs_python_ort", "decode", "fixture and flavour (median over pairs)"),
        ("prefill_vs_python_ort", "prefill", "fixture, flavour and length"),
        ("speech_hf_vs_suite", "speech", "model and clip (median over repeats)"),
    ] {
        let v = worst(report, section, key, per);
        report.insert(key.into(), v);
    }
}

/// Prints the table and writes the report where `--json` asks.
pub(super) fn write(table: &[String], report: Map<String, Value>, json_path: Option<&Path>) -> Result<(), String> {
    println!("{}", table.join("\n"));
    if let Some(path) = json_path {
        let text = serde_json::to_string_pretty(&Value::Object(report)).unwrap();
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
        println!("\nwrote {}", path.display());
    }
    Ok(())
}

/// A path as the table shows it: relative to the repository where it is inside it.
pub(super) fn shown(p: &Path) -> String {
    p.strip_prefix(workspace_root()).unwrap_or(p).display().to_string()
}
