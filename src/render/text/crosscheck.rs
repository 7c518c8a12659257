//! A bench run's cross-checks as text (pure): one line per level, the findings, and the CSV
//! columns.

use super::Style;
use crate::bench::report::Report;
use crate::bench::stats::CrossCheck;
use std::fmt::Write as _;

/// The CSV columns added when a report has cross-checks.
pub const CSV_HEADER: [&str; 5] = [
    "cross_check_requests",
    "cross_check_stream_e2e_p50_s",
    "cross_check_non_stream_e2e_p50_s",
    "cross_check_difference_s",
    "cross_check_ratio",
];

/// A level's cells under [`CSV_HEADER`] (empty without a cross-check).
pub fn csv_cells(c: Option<&CrossCheck>) -> [String; 5] {
    let num = |v: Option<f64>| v.map(|v| format!("{v}")).unwrap_or_default();
    match c {
        None => Default::default(),
        Some(c) => [
            c.requests.to_string(),
            num(c.stream_e2e_p50_s),
            num(c.non_stream_e2e_p50_s),
            num(c.difference_s),
            num(c.ratio),
        ],
    }
}

/// True when any level of the report has a cross-check.
pub fn any(r: &Report) -> bool {
    r.models
        .iter()
        .any(|m| m.levels.iter().any(|l| l.cross_check.is_some()))
}

/// The report's cross-check section (plain text or Markdown): one line per level, then the
/// findings; empty without cross-checks.
pub fn render(r: &Report, style: Style) -> String {
    let mut out = String::new();
    if !any(r) {
        return out;
    }
    let bullet = style.bullet();
    let s = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), crate::units::fmt_secs);
    let _ = writeln!(
        out,
        "\nCross-check (E2E p50, streaming vs non-streaming requests of the same workload):"
    );
    let mut findings = Vec::new();
    for m in &r.models {
        for l in &m.levels {
            let Some(c) = &l.cross_check else { continue };
            let _ = writeln!(
                out,
                "{bullet}{} @ {}: stream {} vs non-stream {} (difference {}, ratio {}; {}/{} non-stream ok at {} workers)",
                m.model,
                l.key.label(),
                s(c.stream_e2e_p50_s),
                s(c.non_stream_e2e_p50_s),
                c.difference_s
                    .map_or_else(|| "-".to_owned(), |d| format!("{:+.1} ms", d * 1e3)),
                c.ratio
                    .map_or_else(|| "-".to_owned(), |x| format!("{x:.3}")),
                c.successes,
                c.requests,
                c.concurrency,
            );
            findings.extend(c.finding.clone());
        }
    }
    for f in findings {
        let _ = writeln!(out, "{bullet}FINDING {f}");
    }
    out
}
