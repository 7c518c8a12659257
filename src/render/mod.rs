//! The rendering half of `bench` (pure, apart from writing the files it is given): a judged
//! [`Report`], [`shown`] once with what every output reads, becomes the terminal table,
//! Markdown, CSV and JSON ([`text`]), the self-contained HTML page ([`html`]) and the SVG plot
//! ([`plot`]), both drawn by the one chart engine ([`chart`]); [`history`] renders the run
//! store's listings and trends. Nothing here measures or judges: it reads the typed report
//! [`crate::bench`] made, and numbers are written by [`crate::units`].

pub mod chart;
pub mod history;
pub mod html;
pub mod plot;
pub mod shown;
pub mod text;

use crate::bench::BenchError;
use crate::bench::criteria::Criteria;
use crate::bench::report::Report;
use shown::Shown;
use std::path::{Path, PathBuf};

/// An output file's format, by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// The JSON report (what `bench report`, `--baseline` and merges read).
    Json,
    /// One row per model and level.
    Csv,
    /// The Markdown table.
    Markdown,
    /// The self-contained HTML page ([`html`]).
    Html,
}

impl FileFormat {
    /// The format a path's extension names (`.json`, `.csv`, `.md`/`.markdown`, `.html`/`.htm`).
    pub fn of(p: &Path) -> Option<FileFormat> {
        match p
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("json") => Some(FileFormat::Json),
            Some("csv") => Some(FileFormat::Csv),
            Some("md" | "markdown") => Some(FileFormat::Markdown),
            Some("html" | "htm") => Some(FileFormat::Html),
            _ => None,
        }
    }
}

/// Where a run's report goes: files by format, and the SVG plot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outputs {
    /// Report files and their formats.
    pub files: Vec<(PathBuf, FileFormat)>,
    /// The SVG plot's path.
    pub plot: Option<PathBuf>,
}

impl Outputs {
    /// The report files (format by extension) and the plot, checked before anything runs: a
    /// known extension, an existing directory.
    ///
    /// # Errors
    /// [`BenchError::Usage`] naming the file.
    pub fn check(files: &[PathBuf], plot: Option<&Path>) -> Result<Outputs, BenchError> {
        let mut out = Vec::new();
        for o in files {
            let Some(format) = FileFormat::of(o) else {
                return Err(BenchError::Usage(format!(
                    "--output {}: the extension must be .json, .csv, .md or .html",
                    o.display()
                )));
            };
            out.push((o.clone(), format));
        }
        if let Some(p) = plot
            && p.extension().and_then(|e| e.to_str()) != Some("svg")
        {
            return Err(BenchError::Usage(format!(
                "--plot {}: only .svg is supported (convert it with e.g. rsvg-convert for a PNG)",
                p.display()
            )));
        }
        for o in files.iter().map(PathBuf::as_path).chain(plot) {
            let dir = o
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if !dir.is_dir() {
                return Err(BenchError::Usage(format!(
                    "{}: the directory {} does not exist",
                    o.display(),
                    dir.display()
                )));
            }
        }
        Ok(Outputs {
            files: out,
            plot: plot.map(Path::to_path_buf),
        })
    }
}

fn write(path: &Path, text: &str) -> Result<(), BenchError> {
    std::fs::write(path, text).map_err(|e| BenchError::Output {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// Writes the report files and the plot (its limit and SLO lines from `criteria`).
///
/// # Errors
/// [`BenchError::Output`] when a file cannot be written.
pub fn write_outputs(
    shown: &Shown<'_>,
    outputs: &Outputs,
    criteria: &Criteria,
) -> Result<(), BenchError> {
    let report = shown.report;
    for (o, format) in &outputs.files {
        let failed = |e: String| BenchError::Output {
            path: o.clone(),
            reason: e,
        };
        let text = match format {
            FileFormat::Json => text::json(report),
            FileFormat::Csv => text::csv::render(report).map_err(|e| failed(e.to_string()))?,
            FileFormat::Markdown => text::markdown::render(shown),
            FileFormat::Html => html::page(shown).map_err(|e| failed(e.to_string()))?,
        };
        write(o, &text)?;
    }
    if let Some(p) = &outputs.plot {
        let lines = plot::ref_lines(criteria);
        let svg = plot::render_svg(shown, &lines).map_err(|e| BenchError::Output {
            path: p.clone(),
            reason: e.to_string(),
        })?;
        write(p, &svg)?;
    }
    Ok(())
}

/// Prints a judged run's table, writes its files and plot, and for a run stopped by a signal
/// says on stderr what it kept, where, and what it left out (its exit is
/// [`crate::bench::run_exit`]'s).
///
/// # Errors
/// [`BenchError::Output`] when a file cannot be written.
pub fn deliver(report: &Report, outputs: &Outputs, criteria: &Criteria) -> Result<(), BenchError> {
    let shown = Shown::of(report);
    crate::output::print_stdout(&text::table::render(&shown));
    let written = write_outputs(&shown, outputs, criteria);
    say_stopped(&shown, &outputs.files);
    written
}

/// For a stopped run, its stderr line: what it kept (the levels finished and the one kept
/// partial), where, and what it left out.
fn say_stopped(shown: &Shown<'_>, outputs: &[(PathBuf, FileFormat)]) {
    let report = shown.report;
    let Some(i) = &report.interrupted else {
        return;
    };
    let finished = report
        .models
        .iter()
        .flat_map(|m| &m.levels)
        .filter(|l| !l.partial)
        .count();
    let partial: Vec<String> = shown
        .models()
        .flat_map(|(m, name)| {
            m.levels.iter().filter(|l| l.partial).map(move |l| {
                format!(
                    "{name} @ {}, {} request(s) finished",
                    l.key.label(),
                    l.requests
                )
            })
        })
        .collect();
    let partial = if partial.is_empty() {
        String::new()
    } else {
        format!(" and the partial level ({})", partial.join("; "))
    };
    let left = i.level_left_out.as_ref().map_or_else(String::new, |l| {
        format!("; the level running ({l}) is left out")
    });
    let files: Vec<String> = outputs
        .iter()
        .map(|(p, _)| p.display().to_string())
        .collect();
    let written = if files.is_empty() {
        String::new()
    } else {
        format!(", written to {}", files.join(", "))
    };
    crate::output::print_stderr_line(&format!(
        "tokenprobe bench: stopped by {}: {finished} finished level(s){partial} reported{written}{left}",
        i.signal
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_formats_by_extension() {
        assert_eq!(FileFormat::of(Path::new("r.json")), Some(FileFormat::Json));
        assert_eq!(FileFormat::of(Path::new("r.CSV")), Some(FileFormat::Csv));
        assert_eq!(
            FileFormat::of(Path::new("r.md")),
            Some(FileFormat::Markdown)
        );
        assert_eq!(FileFormat::of(Path::new("r.HTML")), Some(FileFormat::Html));
        assert_eq!(FileFormat::of(Path::new("r.txt")), None);
    }
}
