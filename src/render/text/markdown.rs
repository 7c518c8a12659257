//! The report as Markdown (pure), the comparison teams paste into docs: the run in a sentence,
//! the answer, the level table (times in ms), the server's view and the notes.

use super::{Style, answer, columns, efficiency, loop_words, notes, server_view};
use crate::render::shown::Shown;
use std::fmt::Write as _;

/// The Markdown output: the run in a sentence, the answer, the level table (times in ms;
/// [`columns`] says which columns), the server's view, then the notes (the regressions among
/// them).
pub fn render(shown: &Shown<'_>) -> String {
    let r = shown.report;
    let mut out = String::new();
    let per_level = match (r.mode.requests_per_level, r.mode.duration_per_level_s) {
        (Some(n), _) => format!("{n} requests per level"),
        (None, Some(d)) => format!("{d} s per level"),
        _ => String::new(),
    };
    let _ = writeln!(
        out,
        "### tokenprobe bench: {} ({}), prompt `{}`\n\n{}, {per_level}, warm-up {}; started {}.{}\n",
        r.target,
        r.api,
        r.prompt,
        loop_words(&r.mode),
        r.mode.warmup,
        r.started_at,
        if r.slo.is_empty() {
            String::new()
        } else {
            format!(" Goodput SLOs: {}.", r.slo.join(", "))
        }
    );
    out.push_str(&answer::render(shown, Style::Markdown));
    let cols = columns::columns(r, Style::Markdown);
    let headers: Vec<&str> = cols.iter().map(|c| c.header).collect();
    let _ = writeln!(out, "| {} |", headers.join(" | "));
    let aligns: Vec<&str> = (0..cols.len())
        .map(|i| if i == 0 { "---" } else { "---:" })
        .collect();
    let _ = writeln!(out, "|{}|", aligns.join("|"));
    for m in &r.models {
        for (i, l) in m.levels.iter().enumerate() {
            let cells: Vec<String> = cols
                .iter()
                .map(|c| c.cell(m, i, l).replace('|', "\\|"))
                .collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
    }
    out.push_str(&server_view::render(r, Style::Markdown));
    out.push_str(&efficiency::render(shown, Style::Markdown));
    out.push_str(&notes::render(shown, Style::Markdown));
    out
}
