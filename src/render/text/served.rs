//! What answered a bench run, as text (pure): one line per level whose answers came from another
//! model or whose usage was audited, and the CSV columns. The models' names carry the mark of
//! another model's answers everywhere ([`crate::bench::served::answered_by`]).

use super::Style;
use crate::bench::report::Report;
use crate::bench::stats::LevelStats;
use crate::render::shown::Shown;
use std::fmt::Write as _;

/// The CSV columns added when a level of the report says what answered.
pub const CSV_HEADER: [&str; 5] = [
    "served_models",
    "model_mismatch",
    "usage_audited",
    "usage_mismatch_share",
    "usage_ratio_p50",
];

/// The CSV columns of a report: [`CSV_HEADER`] when a level of it says what answered
/// ([`any`]), else none.
pub fn csv_header(r: &Report) -> Vec<String> {
    if any(r) {
        CSV_HEADER.map(str::to_owned).to_vec()
    } else {
        Vec::new()
    }
}

/// A level's cells under [`csv_header`] (none when the report has no such column, blank when
/// the level says nothing).
pub fn csv_cells(r: &Report, l: &LevelStats) -> Vec<String> {
    let num = |v: Option<f64>| v.map(|v| format!("{v}")).unwrap_or_default();
    if !any(r) {
        return Vec::new();
    }
    match &l.answered {
        None => vec![String::new(); CSV_HEADER.len()],
        Some(a) => vec![
            a.served_models
                .iter()
                .map(|(m, n)| format!("{m}={n}"))
                .collect::<Vec<_>>()
                .join(";"),
            a.model_mismatch.to_string(),
            a.usage_audited.to_string(),
            num(a.usage_mismatch_share),
            num(a.usage_ratio_p50),
        ],
    }
}

/// True when any level of the report says what answered.
pub fn any(r: &Report) -> bool {
    r.models
        .iter()
        .any(|m| m.levels.iter().any(|l| l.answered.is_some()))
}

/// The report's "What answered" section (terminal or Markdown): each level answered by another
/// model, or whose usage was off; empty when every answer came from the model asked for and
/// stated what it streamed.
pub fn render(shown: &Shown<'_>, style: Style) -> String {
    let mut lines = Vec::new();
    let bullet = style.bullet();
    for (m, name) in shown.report.models.iter().zip(&shown.names) {
        for l in &m.levels {
            let Some(a) = &l.answered else { continue };
            let mut parts = Vec::new();
            if a.model_mismatch > 0 {
                let by: Vec<String> = a
                    .mismatched_by
                    .iter()
                    .map(|(n, k)| format!("{n} ({k})"))
                    .collect();
                parts.push(format!(
                    "{} of {} requests answered by another model: {}",
                    a.model_mismatch,
                    l.requests,
                    by.join(", ")
                ));
            }
            if a.usage_mismatch > 0 {
                parts.push(format!(
                    "usage off what was streamed on {} of {} audited requests (stated/streamed p50 {})",
                    a.usage_mismatch,
                    a.usage_audited,
                    a.usage_ratio_p50
                        .map_or_else(|| "-".to_owned(), |x| format!("{x:.2}")),
                ));
            }
            if !parts.is_empty() {
                lines.push(format!(
                    "{bullet}{name} @ {}: {}",
                    l.key.label(),
                    parts.join("; ")
                ));
            }
        }
    }
    if lines.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nWhat answered (model_mismatch, usage_mismatch: docs/measurement.md):"
    );
    for l in lines {
        let _ = writeln!(out, "{l}");
    }
    out
}
