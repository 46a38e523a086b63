//! Where each trial sits in the case x modality x EP x dtype x level matrix: one row per case and modality (and per
//! case's accuracy tasks), one column per EP/dtype, one mark per level. Read from the trial names, which are the
//! suite's public interface: `<case>/<modality>/<ep>/<dtype>/<level>`, `<task>/<case>/<ep>/<dtype>/accuracy`, and
//! `<case>/case` for a case that does not load.

use crate::outcome::{Finished, Status};

/// A trial's place in the matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coords {
    pub row: String,
    /// `<ep>/<dtype>`, or `case` for a case that does not load.
    pub column: String,
    /// The short level label shown in the cell: `L4`, `L5`, `vision`, `audio`, a task name, or `case`.
    pub level: String,
}

pub fn coords(name: &str) -> Coords {
    use crate::vocab::TrialId;
    let (row, column, level) = match TrialId::parse(name) {
        Some(TrialId::Accuracy { task, case, ep, dtype, level }) => {
            let label = if level.short().is_empty() { task } else { format!("{task} ({})", level.short()) };
            (format!("{case} · accuracy"), format!("{ep}/{dtype}"), label)
        }
        Some(TrialId::Conformance { case, modality, ep, dtype, level }) => {
            (format!("{case} · {modality}"), format!("{ep}/{dtype}"), level.short().to_string())
        }
        Some(TrialId::Case { case }) => (case, "case".into(), "case".into()),
        None => (name.to_string(), String::new(), String::new()),
    };
    Coords { row, column, level }
}

/// One mark per status, the same in the Markdown summary and the HTML report.
pub fn mark(s: Status) -> &'static str {
    match s {
        Status::Pass => "✅",
        Status::Ambiguous => "🟡",
        Status::Accepted => "🔵",
        Status::ExpectedFailure => "⚪",
        Status::Skip => "➖",
        Status::Fail => "❌",
    }
}

pub const LEGEND: &str =
    "✅ pass · 🟡 ambiguous (near-tie, counts as a pass) · 🔵 accepted snapshot · ⚪ expected failure · ➖ skipped · ❌ FAIL";

/// One entry of a cell: the level, its status, and the trial's index in the rows given to [`build`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub level: String,
    pub status: Status,
    pub index: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub label: String,
    /// One cell per column, in [`Matrix::columns`] order; each holds its levels in name order.
    pub cells: Vec<Vec<Entry>>,
}

impl Row {
    /// The worst status in the row: failures sort first.
    pub fn worst(&self) -> Option<Status> {
        self.cells.iter().flatten().map(|e| e.status).max()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matrix {
    pub columns: Vec<String>,
    pub rows: Vec<Row>,
}

/// Sort key of a column: EPs and dtypes in the order people read them, unknown ones last.
fn column_rank(c: &str) -> (usize, usize, String) {
    let (ep, dtype) = c.split_once('/').unwrap_or((c, ""));
    let ep_rank = ["default", "cpu", "cuda"].iter().position(|e| *e == ep).unwrap_or(9);
    let dt_rank = ["f32", "f16", "bf16", "int4"].iter().position(|d| *d == dtype).unwrap_or(9);
    (ep_rank, dt_rank, c.to_string())
}

fn level_rank(l: &str) -> (usize, String) {
    (["case", "L4", "L5", "vision", "audio"].iter().position(|x| *x == l).unwrap_or(9), l.to_string())
}

pub fn build(trials: &[Finished]) -> Matrix {
    let all: Vec<Coords> = trials.iter().map(|t| coords(&t.name)).collect();
    let mut columns: Vec<String> = all.iter().map(|c| c.column.clone()).collect();
    columns.sort_by_key(|c| column_rank(c));
    columns.dedup();
    let mut labels: Vec<String> = all.iter().map(|c| c.row.clone()).collect();
    labels.sort();
    labels.dedup();
    let rows = labels
        .into_iter()
        .map(|label| {
            let cells = columns
                .iter()
                .map(|col| {
                    let mut cell: Vec<Entry> = all
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| c.row == label && &c.column == col)
                        .map(|(index, c)| Entry { level: c.level.clone(), status: trials[index].outcome.status, index })
                        .collect();
                    cell.sort_by_key(|e| level_rank(&e.level));
                    cell
                })
                .collect();
            Row { label, cells }
        })
        .collect();
    Matrix { columns, rows }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;

    fn done(name: &str, status: Status) -> Finished {
        let outcome = Outcome { status, ..Outcome::skip("") };
        Finished { name: name.into(), outcome, seconds: 0.0 }
    }

    #[test]
    fn rows_are_case_and_modality_columns_are_ep_dtype_cells_hold_levels() {
        let rows = [
            done("q/text/default/f32/L5", Status::Fail),
            done("q/text/default/f32/L4", Status::Pass),
            done("q/text/cpu/f32/L4", Status::Skip),
            done("q/text/default/int4/L4", Status::Pass),
            done("q/image/default/f32/vision_encoder", Status::Pass),
            done("arith/q/default/f32/accuracy", Status::Ambiguous),
            done("b/case", Status::Fail),
        ];
        let m = build(&rows);
        assert_eq!(m.columns, ["default/f32", "default/int4", "cpu/f32", "case"]);
        let labels: Vec<&str> = m.rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["b", "q · accuracy", "q · image", "q · text"]);
        let text = &m.rows[3];
        let cell: Vec<(&str, Status, usize)> = text.cells[0].iter().map(|e| (e.level.as_str(), e.status, e.index)).collect();
        assert_eq!(cell, [("L4", Status::Pass, 1), ("L5", Status::Fail, 0)]);
        assert_eq!(text.worst(), Some(Status::Fail));
        assert_eq!(m.rows[2].cells[0][0].level, "vision");
        assert_eq!(m.rows[1].cells[0][0].level, "arith");
        assert!(m.rows[0].cells[3].len() == 1 && m.rows[0].cells[0].is_empty());
    }
}
