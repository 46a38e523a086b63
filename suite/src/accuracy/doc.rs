//! One document of a task's data: its fields as JSON values, whichever file (JSONL, JSON, Parquet) they came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{Error, Result, bail};

/// One document: its fields.
pub type Doc = BTreeMap<String, Value>;

/// Reads a JSONL file (relative to `root`): one JSON object per non-empty line; errors name the line.
pub fn read_jsonl(root: &Path, file: &str) -> Result<Vec<Doc>> {
    let path: PathBuf = root.join(file);
    crate::paths::regular_file(&path, file)?;
    let text = std::fs::read_to_string(&path).map_err(|e| Error::new(format!("{file}: {e}")))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| serde_json::from_str::<Doc>(l).map_err(|e| Error::new(format!("{file}:{}: {e}", n + 1))))
        .collect()
}

/// A field of `doc`, or an error naming it.
pub fn field<'d>(doc: &'d Doc, k: &str) -> Result<&'d Value> {
    doc.get(k).ok_or_else(|| Error::new(format!("field `{k}` is missing")))
}

/// A string field.
pub fn text(doc: &Doc, k: &str) -> Result<String> {
    field(doc, k)?.as_str().map(str::to_string).ok_or_else(|| Error::new(format!("field `{k}` is not a string")))
}

/// A field holding a string or a list of strings, as a list.
pub fn texts(doc: &Doc, k: &str) -> Result<Vec<String>> {
    match field(doc, k)? {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(a) => a
            .iter()
            .map(|x| x.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::new(format!("field `{k}` holds a non-string"))),
        v => bail!("field `{k}` is {v}, expected a string or a list of strings"),
    }
}
