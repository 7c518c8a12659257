//! A bench report as text (pure): the terminal table ([`table`]), Markdown ([`markdown`], the
//! comparison teams paste into docs), CSV ([`csv`], one row per model and level) and JSON
//! ([`json`], everything; the input of `--baseline`). The terminal and Markdown say the same in
//! their own style: the answer ([`answer`]), the level table's columns, chosen once for both
//! ([`columns`]), the server's view ([`server_view`]), the frontier, energy, GPU cost, server
//! cache and what served the run ([`efficiency`]), and the notes under the table ([`notes`]),
//! with the comparison with a baseline ([`gate`]), the cross-checks ([`crosscheck`]), what
//! answered ([`served`]) and a session workload's sessions ([`session`]).

pub mod answer;
pub mod columns;
pub mod crosscheck;
pub mod csv;
pub mod efficiency;
pub mod gate;
pub mod markdown;
pub mod notes;
pub mod served;
pub mod server_view;
pub mod session;
pub mod table;

use crate::bench::report::{LoadMode, Report};
use crate::bench::stats::{Load, Summary};

/// Which text a block is written for: the terminal, or Markdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Plain lines, indented items.
    Terminal,
    /// Markdown: `- ` items, bold headings, escaped cells.
    Markdown,
}

impl Style {
    /// What starts an item of a list: two spaces, or `- `.
    pub fn bullet(self) -> &'static str {
        match self {
            Style::Terminal => "  ",
            Style::Markdown => "- ",
        }
    }

    /// What surrounds a heading in a line: nothing, or `**`.
    pub fn strong(self) -> &'static str {
        match self {
            Style::Terminal => "",
            Style::Markdown => "**",
        }
    }
}

/// A statistic of a summary written by `fmt`, or `-` without one.
pub(crate) fn opt(
    s: &Option<Summary>,
    f: impl Fn(&Summary) -> f64,
    fmt: impl Fn(f64) -> String,
) -> String {
    s.as_ref().map_or_else(|| "-".to_owned(), |s| fmt(f(s)))
}

pub(crate) fn pct(v: f64) -> String {
    crate::units::fmt_pct(v)
}

/// A level's load in words: `4 concurrent streams`, `1 concurrent stream`, `2/s`.
pub(crate) fn load_words(load: Load) -> String {
    match load {
        Load::Concurrency(1) => "1 concurrent stream".to_owned(),
        Load::Concurrency(n) => format!("{n} concurrent streams"),
        Load::Rate(_) => load.to_string(),
    }
}

/// A level's load in words as `mode` loads it: a session workload's sessions (`4 concurrent
/// sessions`, `2 sessions/s`), else [`load_words`]'s.
pub(crate) fn load_words_in(mode: &LoadMode, load: Load) -> String {
    if mode.sessions.is_some() {
        crate::bench::session::load_words(load)
    } else {
        load_words(load)
    }
}

/// How load was generated, in words: `closed loop`, `open loop, poisson arrivals`.
pub fn loop_words(mode: &LoadMode) -> String {
    if mode.kind.is_open() {
        format!(
            "open loop, {} arrivals",
            mode.arrival.as_deref().unwrap_or("poisson")
        )
    } else {
        "closed loop".to_owned()
    }
}

/// The JSON report (pretty-printed).
pub fn json(r: &Report) -> String {
    serde_json::to_string_pretty(r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

#[cfg(test)]
mod tests;
