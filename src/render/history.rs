//! `bench history`'s outputs (pure): the stored runs as a table, one model's trend as a table with
//! a sparkline per figure, both as JSON, and the trend's self-contained page (charts drawn by
//! [`super::chart`]).

use super::chart::{self, Chart, Marker, Point as ChartPoint, Series, XAxis};
use crate::history::StoredRun;
use crate::history::trend::{Point, Trend};
use crate::units::{fmt_secs, trim_float};
use html_escape::encode_quoted_attribute as esc;
use serde::Serialize;
use std::fmt::Write as _;

/// `bench history --format json`: the store, its matching runs, and the trend when asked.
#[derive(Debug, Serialize)]
pub struct HistoryDoc<'a> {
    /// The store's file.
    pub store: String,
    /// The runs, newest first.
    pub runs: &'a [StoredRun],
    /// The model's trend (`--model`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trend: Option<&'a Trend>,
}

/// The document as pretty JSON, with a final newline.
pub fn json(doc: &HistoryDoc<'_>) -> String {
    let mut s = serde_json::to_string_pretty(doc).unwrap_or_else(|_| "{}".into());
    s.push('\n');
    s
}

fn table(header: &[&str]) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_header(header);
    t
}

/// The runs, newest first: id, start, target, prompt, models, load, levels, baseline.
pub fn runs_text(runs: &[StoredRun]) -> String {
    if runs.is_empty() {
        return "no stored run matches\n".into();
    }
    let mut t = table(&[
        "run", "started", "target", "prompt", "models", "load", "levels", "baseline",
    ]);
    for r in runs {
        let mut baseline = match (&r.baseline, r.regressions) {
            (Some(b), Some(0)) => format!("{b}: no regression"),
            (Some(b), Some(n)) => format!("{b}: {n} regressed"),
            (Some(b), None) => b.clone(),
            (None, _) => String::new(),
        };
        if !r.changed.is_empty() {
            // Beside the regressions: what served the two runs is not the same.
            let _ = write!(baseline, "; changed: {}", r.changed.join("; "));
        }
        let mut load = if r.open_loop { "open" } else { "closed" }.to_owned();
        if r.interrupted {
            load.push_str(", interrupted");
        }
        t.add_row(vec![
            r.id.to_string(),
            r.started_at.clone(),
            r.target.clone(),
            r.prompt.clone(),
            r.models.join(", "),
            load,
            r.levels.join(" "),
            baseline,
        ]);
    }
    format!("{t}\n")
}

/// `▁▂▃▅▇` of the values (a gap where a run has none): how a figure moved, run after run, on a
/// scale from 0 (from the least value when some is negative), so noise stays flat and a
/// regression stands out.
pub fn sparkline(values: &[Option<f64>]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let finite = || values.iter().flatten().filter(|v| v.is_finite());
    let lo = finite().copied().fold(0.0, f64::min);
    let hi = finite().copied().fold(f64::NEG_INFINITY, f64::max);
    values
        .iter()
        .map(|v| match v {
            Some(v) if v.is_finite() => {
                if hi > lo {
                    let i = ((v - lo) / (hi - lo) * 7.0).round() as usize;
                    BARS[i.min(7)]
                } else {
                    BARS[3]
                }
            }
            _ => ' ',
        })
        .collect()
}

fn change(c: Option<f64>) -> String {
    c.map_or_else(String::new, |c| format!("{:+.1}%", c * 100.0))
}

fn cell(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

/// The trend's title line.
fn title(t: &Trend) -> String {
    match &t.level {
        Some(l) => format!(
            "Trend of {} at level {l}, {} runs, oldest first",
            t.model,
            t.points.len()
        ),
        None => format!("Trend of {}: no stored run has a level", t.model),
    }
}

/// The trend: one row per run with each figure and its change, then one sparkline per figure.
pub fn trend_text(t: &Trend) -> String {
    let mut out = format!("\n{}\n", title(t));
    if t.points.is_empty() {
        out.push_str("no stored run of this model matches\n");
        return out;
    }
    let capacity = t.points.iter().any(|p| p.capacity.is_some());
    let mut header = vec![
        "run", "started", "TTFT p95", "Δ", "TPOT p50", "Δ", "tokens/s", "Δ", "errors",
    ];
    if capacity {
        header.extend(["capacity", "Δ"]);
    }
    let mut table = table(&header);
    for p in &t.points {
        let mut started = p.started_at.clone();
        if p.interrupted {
            started.push_str(" (interrupted)");
        }
        if p.client_bound {
            started.push_str(" (client-bound)");
        }
        if !p.has_level {
            started.push_str(" (no such level)");
        }
        let mut row = vec![
            p.run.to_string(),
            started,
            cell(p.ttft_p95_s, fmt_secs),
            change(p.change.ttft_p95),
            cell(p.tpot_p50_s, fmt_secs),
            change(p.change.tpot_p50),
            cell(p.output_tokens_per_s, |v| format!("{v:.1}")),
            change(p.change.output_tokens_per_s),
            cell(p.error_rate, |v| format!("{:.1}%", v * 100.0)),
        ];
        if capacity {
            row.extend([cell(p.capacity, trim_float), change(p.change.capacity)]);
        }
        table.add_row(row);
    }
    for i in 2..header.len() {
        if let Some(c) = table.column_mut(i) {
            c.set_cell_alignment(comfy_table::CellAlignment::Right);
        }
    }
    let _ = writeln!(out, "{table}");
    for p in t.points.iter().filter(|p| !p.changed.is_empty()) {
        let _ = writeln!(
            out,
            "run {}: what served it changed: {}",
            p.run,
            p.changed.join("; ")
        );
    }
    let line = |name: &str, f: fn(&Point) -> Option<f64>| {
        let v: Vec<Option<f64>> = t.points.iter().map(f).collect();
        format!("{name:<10} {}\n", sparkline(&v))
    };
    out.push_str(&line("TTFT p95", |p| p.ttft_p95_s));
    out.push_str(&line("TPOT p50", |p| p.tpot_p50_s));
    out.push_str(&line("tokens/s", |p| p.output_tokens_per_s));
    if capacity {
        out.push_str(&line("capacity", |p| p.capacity));
    }
    out
}

/// A figure of a trend's point.
type Figure = fn(&Point) -> Option<f64>;

/// One chart of the trend: `figures` (name, value of a point) against the runs.
fn chart(t: &Trend, y_label: &str, figures: &[(&str, Figure)]) -> Chart {
    let labels: Vec<String> = t.points.iter().map(|p| format!("#{}", p.run)).collect();
    let series = figures
        .iter()
        .enumerate()
        .map(|(i, (name, f))| Series {
            name: (*name).to_owned(),
            color: chart::color(i).to_owned(),
            marker: Marker::Circle,
            line: true,
            dashed: false,
            radius: 3.5,
            points: t
                .points
                .iter()
                .enumerate()
                .filter_map(|(x, p)| {
                    f(p).map(|y| ChartPoint {
                        x: x as f64,
                        y,
                        title: format!("run {} ({}): {}", p.run, p.started_at, trim_float(y)),
                        tag: String::new(),
                    })
                })
                .collect(),
        })
        .collect();
    Chart {
        x: XAxis::Levels(labels),
        x_label: "run (oldest first)".into(),
        y_label: y_label.into(),
        series,
        hlines: Vec::new(),
        rings: Vec::new(),
        ring_label: String::new(),
    }
}

/// The trend's page: its title, the charts (TTFT p95 and TPOT p50 in ms; tokens/s; capacity when
/// some run searched it), and the table, every number with its `data-k` pointer into the trend's
/// JSON, which the page embeds.
pub fn page(t: &Trend, store: &str) -> String {
    let json = serde_json::to_string(t).unwrap_or_else(|_| "{}".into());
    let title = format!("tokenprobe: {}", title(t));
    let mut o = String::with_capacity(32 * 1024);
    let _ = write!(
        o,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:"><meta name="viewport" content="width=device-width,initial-scale=1"><title>{}</title><style>{}</style></head><body><h1>{}</h1><p>From the run store {}.</p><div class="plots">"#,
        esc(&title),
        super::html::STYLE,
        esc(&title),
        esc(store)
    );
    let mut charts = vec![
        (
            "latency",
            "TTFT p95 and TPOT p50 (ms)",
            chart(
                t,
                "ms",
                &[
                    ("TTFT p95", |p| p.ttft_p95_s.map(|v| v * 1e3)),
                    ("TPOT p50", |p| p.tpot_p50_s.map(|v| v * 1e3)),
                ],
            ),
        ),
        (
            "throughput",
            "Aggregate output tokens/s",
            chart(t, "tokens/s", &[("tokens/s", |p| p.output_tokens_per_s)]),
        ),
    ];
    if t.points.iter().any(|p| p.capacity.is_some()) {
        charts.push((
            "capacity",
            "Capacity within the SLOs",
            chart(t, "load", &[("capacity", |p| p.capacity)]),
        ));
    }
    for (id, caption, c) in charts {
        let _ = write!(
            o,
            r#"<figure class="plot" id="{id}"><figcaption>{}</figcaption>{}{}</figure>"#,
            esc(caption),
            c.svg(),
            c.legend()
        );
    }
    o.push_str(r#"</div><table id="trend"><thead><tr><th>run</th><th>started</th><th>TTFT p95 (ms)</th><th>TPOT p50 (ms)</th><th>tokens/s</th><th>error rate</th><th>capacity</th></tr></thead><tbody>"#);
    for (i, p) in t.points.iter().enumerate() {
        let num = |key: &str, v: Option<f64>, scale: f64| match v {
            Some(v) => format!(
                r#"<td data-k="/points/{i}/{key}" data-v="{v}">{}</td>"#,
                super::html::num(v * scale)
            ),
            None => "<td>-</td>".into(),
        };
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td>{}{}{}{}{}</tr>",
            p.run,
            esc(&p.started_at),
            num("ttft_p95_s", p.ttft_p95_s, 1e3),
            num("tpot_p50_s", p.tpot_p50_s, 1e3),
            num("output_tokens_per_s", p.output_tokens_per_s, 1.0),
            num("error_rate", p.error_rate, 1.0),
            num("capacity", p.capacity, 1.0),
        );
    }
    let _ = write!(
        o,
        r#"</tbody></table><script type="application/json" id="trend-data">{}</script></body></html>"#,
        json.replace('<', "\\u003c")
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::trend::Change;

    fn point(run: i64, ttft: Option<f64>) -> Point {
        Point {
            run,
            started_at: format!("2026-12-0{run}T00:00:00Z"),
            version: "0.1.0".into(),
            interrupted: false,
            has_level: ttft.is_some(),
            requests: ttft.map(|_| 10),
            ttft_p95_s: ttft,
            tpot_p50_s: ttft.map(|t| t / 10.0),
            output_tokens_per_s: ttft.map(|t| 1.0 / t),
            error_rate: ttft.map(|_| 0.0),
            client_bound: false,
            capacity: None,
            change: Change::default(),
            changed: Vec::new(),
        }
    }

    #[test]
    fn the_listing_says_what_changed_beside_the_regressions() {
        let run = StoredRun {
            id: 2,
            started_at: "2026-10-02T00:00:00Z".into(),
            version: "0.1.0".into(),
            run_id: None,
            target: "t".into(),
            prompt: "p".into(),
            open_loop: false,
            models: vec!["alpha".into()],
            levels: vec!["1".into(), "4".into()],
            interrupted: false,
            baseline: Some("run 1".into()),
            regressions: Some(1),
            command: None,
            changed: vec!["vLLM 0.10.1 → 0.11.0".into(), "GPUs 8 → 4".into()],
        };
        let text = runs_text(&[run]);
        assert!(
            text.contains("run 1: 1 regressed; changed: vLLM 0.10.1 → 0.11.0; GPUs 8 → 4"),
            "{text}"
        );
    }

    #[test]
    fn a_sparkline_scales_to_its_range_and_leaves_gaps() {
        assert_eq!(sparkline(&[Some(1.0), Some(2.0), None, Some(8.0)]), "▂▃ █");
        assert_eq!(sparkline(&[Some(5.0), Some(5.0)]), "██");
        assert_eq!(sparkline(&[Some(0.0), Some(0.0)]), "▄▄");
        assert_eq!(sparkline(&[Some(-1.0), Some(1.0)]), "▁█");
        assert_eq!(sparkline(&[]), "");
    }

    #[test]
    fn the_trend_shows_each_run_its_change_and_a_page_whose_numbers_point_into_it() {
        let mut t = Trend {
            model: "m".into(),
            level: Some("4".into()),
            points: vec![point(1, Some(0.1)), point(2, None), point(3, Some(0.25))],
        };
        t.points[2].change.ttft_p95 = Some(1.5);
        t.points[2].changed = vec!["vLLM 0.10.1 → 0.11.0".into(), "GPUs 8 → 4".into()];
        let text = trend_text(&t);
        assert!(
            text.contains("run 3: what served it changed: vLLM 0.10.1 → 0.11.0; GPUs 8 → 4"),
            "{text}"
        );
        assert!(
            text.contains("Trend of m at level 4, 3 runs, oldest first"),
            "{text}"
        );
        assert!(
            text.contains("250.0 ms") && text.contains("+150.0%"),
            "{text}"
        );
        assert!(text.contains("(no such level)"), "{text}");
        assert!(text.contains("TTFT p95   ▄ █"), "{text}");
        assert!(!text.contains("capacity"), "no run searched it: {text}");
        let page = page(&t, "/tmp/runs.sqlite3");
        assert!(
            page.contains(r#"data-k="/points/2/ttft_p95_s" data-v="0.25">250</td>"#),
            "{page}"
        );
        assert!(page.contains(r#"id="trend-data">{"model":"m""#));
        assert!(page.contains("<svg"));
    }
}
