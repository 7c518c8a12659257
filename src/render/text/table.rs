//! The report as the terminal's table (pure): the answer, one row per model and level (the knee
//! marked), the server's view and the notes.

use super::{Style, answer, columns, efficiency, notes, server_view};
use crate::render::shown::Shown;
use std::fmt::Write as _;

/// The terminal's output: the answer, the level table (one row per model and level, the knee
/// marked; [`columns`] says which columns), the server's view, then the notes (the regressions
/// among them).
pub fn render(shown: &Shown<'_>) -> String {
    let r = shown.report;
    let cols = columns::columns(r, Style::Terminal);
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_header(cols.iter().map(|c| c.header));
    for m in &r.models {
        for (i, l) in m.levels.iter().enumerate() {
            t.add_row(cols.iter().map(|c| c.cell(m, i, l)));
        }
    }
    for (i, _) in cols.iter().enumerate().filter(|(_, c)| c.figure) {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(comfy_table::CellAlignment::Right);
        }
    }
    let mut out = answer::render(shown, Style::Terminal);
    let _ = writeln!(out, "{t}");
    out.push_str(&server_view::render(r, Style::Terminal));
    out.push_str(&efficiency::render(shown, Style::Terminal));
    out.push_str(&notes::render(shown, Style::Terminal));
    out
}
