//! The server's view of a bench run as text (pure): the terminal or Markdown block beside the
//! client's figures and the CSV columns of each signal.

use super::Style;
use crate::bench::report::{ModelReport, Report};
use crate::bench::stats::LevelStats;
use crate::servermetrics::level::{ServerLevel, SignalStats};
use std::fmt::Write as _;

fn cell(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".to_owned(), f)
}

fn pct0(v: f64) -> String {
    format!("{:.0}", v * 100.0)
}

fn secs(v: f64) -> String {
    crate::units::fmt_secs(v)
}

const SERVER_HEADER: [&str; 13] = [
    "model",
    "load",
    "GPU % mean/max",
    "KV % max",
    "host CPU % mean/max",
    "host mem % max",
    "waiting mean/max",
    "running max",
    "server prefill tok/s",
    "prefix cache hits %",
    "server gen tok/s (client)",
    "TTFT p95 client/server",
    "scrapes (failed)",
];

fn server_row(m: &ModelReport, l: &LevelStats, s: &ServerLevel) -> [String; 13] {
    let get = |n: &str| s.signals.get(n);
    let pair = |n: &str, f: fn(f64) -> String| match get(n) {
        Some(x) => format!("{}/{}", cell(x.mean, f), cell(x.max, f)),
        None => "-".into(),
    };
    [
        m.model.clone(),
        l.key.label(),
        pair("gpu_utilization", pct0),
        cell(s.max("kv_cache_usage_ratio"), pct0),
        pair("cpu_utilization", pct0),
        cell(s.max("memory_used_ratio"), pct0),
        pair("requests_waiting", |v| format!("{v:.1}")),
        cell(s.max("requests_running"), |v| format!("{v:.0}")),
        cell(s.mean("prompt_tokens_per_s"), |v| format!("{v:.1}")),
        cell(s.mean("prompt_cache_hit_ratio"), |v| {
            crate::units::fmt_pct(v).trim_end_matches('%').to_owned()
        }),
        cell(s.mean("generation_tokens_per_s"), |v| {
            format!("{v:.1} ({:.1})", l.output_tokens_per_s)
        }),
        match (l.ttft_s.as_ref(), get("server_ttft_s").and_then(|x| x.p95)) {
            (Some(c), Some(v)) => format!("{}/{}", secs(c.p95), secs(v)),
            _ => "-".into(),
        },
        format!("{} ({})", s.scrapes, s.scrape_errors),
    ]
}

/// The compact server block (GPU %, KV %, waiting, prefill tokens/s, prefix-cache hits, ...) and
/// the findings: empty when no level has server metrics and there are no findings.
pub fn render(r: &Report, style: Style) -> String {
    let mut out = String::new();
    let rows: Vec<[String; 13]> = r
        .models
        .iter()
        .flat_map(|m| {
            m.levels
                .iter()
                .filter_map(move |l| l.server.as_ref().map(|s| server_row(m, l, s)))
        })
        .collect();
    if !rows.is_empty() {
        let _ = writeln!(out, "\nServer metrics:");
        if style == Style::Markdown {
            let _ = writeln!(out, "\n| {} |", SERVER_HEADER.join(" | "));
            let _ = writeln!(
                out,
                "|---|{}|",
                vec!["---:"; SERVER_HEADER.len() - 1].join("|")
            );
            for row in &rows {
                let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
                let _ = writeln!(out, "| {} |", cells.join(" | "));
            }
        } else {
            let mut t = comfy_table::Table::new();
            t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED)
                .set_header(SERVER_HEADER);
            for row in rows {
                t.add_row(row);
            }
            let _ = writeln!(out, "{t}");
        }
    }
    if !r.findings.is_empty() {
        let _ = writeln!(out, "\nFindings:");
        let bullet = style.bullet();
        for f in &r.findings {
            let run = f
                .run
                .as_ref()
                .map_or_else(String::new, |r| format!(" (run {r})"));
            let _ = writeln!(
                out,
                "{bullet}[{}] {} @ {}{run}: {}",
                f.code, f.model, f.level, f.message
            );
        }
    }
    out
}

/// The statistics of a signal that go to CSV, in column order.
const CSV_STATS: [&str; 5] = ["mean", "max", "p50", "p95", "count"];

/// The CSV columns of the server block: `server_scrapes`, `server_scrape_errors`, then
/// `server_<signal>_<stat>` for every statistic any level has. Empty when none has a block.
pub fn csv_header(r: &Report) -> Vec<String> {
    let mut cols: Vec<(String, &str)> = Vec::new();
    let mut any = false;
    for l in r.models.iter().flat_map(|m| &m.levels) {
        let Some(s) = &l.server else { continue };
        any = true;
        for (name, st) in &s.signals {
            for stat in CSV_STATS {
                if stat_of(st, stat).is_some() && !cols.iter().any(|(n, x)| n == name && *x == stat)
                {
                    cols.push((name.clone(), stat));
                }
            }
        }
    }
    if !any {
        return Vec::new();
    }
    cols.sort();
    let mut out = vec![
        "server_scrapes".to_owned(),
        "server_scrape_errors".to_owned(),
    ];
    out.extend(cols.into_iter().map(|(n, s)| format!("server_{n}_{s}")));
    out
}

fn stat_of(s: &SignalStats, stat: &str) -> Option<f64> {
    match stat {
        "mean" => s.mean,
        "max" => s.max,
        "p50" => s.p50,
        "p95" => s.p95,
        _ => s.count,
    }
}

/// One level's cells under [`csv_header`] (empty cells for what it lacks).
pub fn csv_cells(header: &[String], l: &LevelStats) -> Vec<String> {
    header
        .iter()
        .map(|h| {
            let Some(s) = &l.server else {
                return String::new();
            };
            match h.as_str() {
                "server_scrapes" => s.scrapes.to_string(),
                "server_scrape_errors" => s.scrape_errors.to_string(),
                _ => {
                    let rest = h.strip_prefix("server_").unwrap_or(h);
                    let found = CSV_STATS.iter().find_map(|stat| {
                        let name = rest.strip_suffix(&format!("_{stat}"))?;
                        stat_of(s.signals.get(name)?, stat)
                    });
                    found.map(|v| format!("{v}")).unwrap_or_default()
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::Finding;
    use crate::bench::report::tests::synthetic;
    use crate::bench::server_view::compare_with_client;
    use crate::render::shown::Shown;
    use crate::render::text::{csv, markdown, table};

    fn with_server() -> Report {
        let mut r = synthetic();
        let mut s = ServerLevel {
            scrapes: 12,
            scrape_errors: 1,
            ..ServerLevel::default()
        };
        let mm = |mean, max| SignalStats {
            mean: Some(mean),
            max: Some(max),
            ..SignalStats::default()
        };
        s.signals.insert("gpu_utilization".into(), mm(0.42, 0.9));
        s.signals.insert("requests_waiting".into(), mm(1.5, 3.0));
        s.signals.insert("cpu_utilization".into(), mm(0.61, 0.97));
        s.signals.insert("memory_used_ratio".into(), mm(0.5, 0.88));
        s.signals.insert(
            "prompt_tokens_per_s".into(),
            SignalStats {
                mean: Some(1234.5),
                ..SignalStats::default()
            },
        );
        s.signals
            .insert("prompt_cache_hit_ratio".into(), mm(0.69, 0.8));
        s.signals.insert(
            "generation_tokens_per_s".into(),
            SignalStats {
                mean: Some(250.0),
                ..SignalStats::default()
            },
        );
        s.signals.insert(
            "server_ttft_s".into(),
            SignalStats {
                p50: Some(0.05),
                p95: Some(0.08),
                count: Some(20.0),
                ..SignalStats::default()
            },
        );
        let l = &mut r.models[0].levels[1];
        compare_with_client(&mut s, l);
        l.server = Some(s);
        r.findings.push(Finding {
            code: crate::bench::report::FindingCode::Queueing,
            model: "alpha".into(),
            level: crate::bench::stats::Load::Concurrency(4),
            message: "m".into(),
            run: None,
        });
        r
    }

    #[test]
    fn the_server_block_renders_only_when_collected() {
        let plain = synthetic();
        assert_eq!(render(&plain, Style::Terminal), "");
        assert!(csv_header(&plain).is_empty());
        let mut r = with_server();
        let t = table::render(&Shown::of(&r));
        assert!(
            t.contains("Server metrics:") && t.contains("Findings:"),
            "{t}"
        );
        let row = t
            .lines()
            .find(|l| l.contains("42/90"))
            .expect("GPU % mean/max");
        assert!(row.contains("1.5/3.0") && row.contains("12 (1)"), "{row}");
        assert!(
            row.contains("61/97") && row.contains(" 88 "),
            "host CPU and memory: {row}"
        );
        // Issue 40: the prefill tokens/s and the prefix-cache hit share were in the JSON only.
        let (header, cells) = (
            t.lines().find(|l| l.contains("waiting mean/max")).unwrap(),
            row.split('┆').map(str::trim).collect::<Vec<_>>(),
        );
        assert!(
            header.contains("server prefill tok/s") && header.contains("prefix cache hits %"),
            "{header}"
        );
        assert_eq!(&cells[8..10], ["1234.5", "69.00"], "{row}");
        let md = markdown::render(&Shown::of(&r));
        assert!(
            md.contains("| alpha | 4 | 42/90 | - | 61/97 | 88 | 1.5/3.0 | - | 1234.5 | 69.00 |"),
            "{md}"
        );
        assert!(md.contains("- [queueing] alpha @ 4: m"), "{md}");
        // A combination of runs names the run a finding came from.
        r.findings[0].run = Some("#2".into());
        let t = table::render(&Shown::of(&r));
        assert!(t.contains("  [queueing] alpha @ 4 (run #2): m"), "{t}");
    }

    #[test]
    fn client_server_comparisons_and_csv_columns() {
        let r = with_server();
        let l = &r.models[0].levels[1];
        let s = l.server.as_ref().unwrap();
        let gap = &s.signals["client_server_ttft_gap_s"];
        let c = l.ttft_s.unwrap();
        assert!((gap.p95.unwrap() - (c.p95 - 0.08)).abs() < 1e-12);
        assert!((gap.p50.unwrap() - (c.p50 - 0.05)).abs() < 1e-12);
        assert!(
            (s.mean("server_client_tokens_ratio").unwrap() - 250.0 / l.output_tokens_per_s).abs()
                < 1e-12
        );
        let csv = csv::render(&r).unwrap();
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let i = header
            .iter()
            .position(|h| *h == "server_gpu_utilization_max")
            .expect("column");
        let j = header
            .iter()
            .position(|h| *h == "server_server_ttft_s_p95")
            .expect("column");
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert_eq!((rows[1][i], rows[1][j]), ("0.9", "0.08"));
        assert_eq!(
            (rows[0][i], rows[0][j]),
            ("", ""),
            "a level without a block has empty cells"
        );
        assert!(header.contains(&"server_scrapes"));
    }
}
