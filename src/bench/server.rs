//! The bench's side of server metrics: the plan (endpoints, custom families, the Prometheus
//! source, finding thresholds), the collector around each level, the client-vs-server
//! comparisons added to a level's `server` block, and the server block's renderings (the
//! compact terminal/Markdown table and the CSV columns). Scraping and folding are
//! [`crate::servermetrics`]'s.

use super::BenchError;
use super::findings::Thresholds;
use super::report::{ModelReport, Report};
use super::runner::Progress;
use super::stats::LevelStats;
use crate::servermetrics::Endpoint;
use crate::servermetrics::level::{ServerLevel, SignalStats};
use crate::servermetrics::promql::{self, Query, Window};
use crate::servermetrics::scrape::Collector;
use crate::servermetrics::signals::{Custom, with_custom};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A Prometheus server to query after the sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrometheusPlan {
    /// Its base URL (`http://prometheus:9090`).
    pub url: String,
    /// The queries (defaults merged with `--prometheus-query`).
    pub queries: Vec<Query>,
    /// How long to wait after the last level before querying (Prometheus must have scraped it).
    pub wait: Duration,
}

/// What the bench collects from the server side.
#[derive(Debug, Clone, Default)]
pub struct ServerPlan {
    /// For each model of the run (the plan's order): the metrics endpoints scraped around and
    /// during its levels (its target's `server_metrics`, then `--server-metrics`).
    pub endpoints: Vec<Vec<Endpoint>>,
    /// Families the config names.
    pub custom: Vec<Custom>,
    /// The Prometheus query source.
    pub prometheus: Option<PrometheusPlan>,
    /// Finding thresholds.
    pub thresholds: Thresholds,
}

/// The running server side of a bench.
pub struct ServerSide {
    /// One collector per distinct set of endpoints.
    collectors: Vec<Collector>,
    /// Each model's collector (an index into `collectors`), `None` when it has no endpoints.
    of_model: Vec<Option<usize>>,
    /// The collector of the model whose levels run now.
    active: Option<usize>,
    /// Its served name.
    model: String,
    prometheus: Option<PrometheusPlan>,
    /// Per level run: (model index, level index, its window), for the Prometheus queries.
    windows: Vec<(usize, usize, Window)>,
    level_start: Option<SystemTime>,
}

fn unix_s(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl ServerSide {
    /// Starts a collector for each distinct set of endpoints (models on one target share one).
    ///
    /// # Errors
    /// [`BenchError::Usage`] when its thread or client cannot start.
    pub fn start(plan: &ServerPlan) -> Result<ServerSide, BenchError> {
        let signals = with_custom(&plan.custom);
        let mut sets: Vec<&Vec<Endpoint>> = Vec::new();
        let mut collectors = Vec::new();
        let mut of_model = Vec::new();
        for endpoints in &plan.endpoints {
            if endpoints.is_empty() {
                of_model.push(None);
                continue;
            }
            let i = match sets.iter().position(|s| *s == endpoints) {
                Some(i) => i,
                None => {
                    let c = Collector::start(endpoints.clone(), signals.clone())
                        .map_err(BenchError::Usage)?;
                    collectors.push(c);
                    sets.push(endpoints);
                    sets.len() - 1
                }
            };
            of_model.push(Some(i));
        }
        Ok(ServerSide {
            collectors,
            of_model,
            active: None,
            model: String::new(),
            prometheus: plan.prometheus.clone(),
            windows: Vec::new(),
            level_start: None,
        })
    }

    /// The levels that follow are of model `model` (its index in the plan), served as `name`:
    /// they are scraped from its endpoints, and series of other models are left out where the
    /// server labels them.
    pub fn select(&mut self, model: usize, name: &str) {
        self.active = self.of_model.get(model).copied().flatten();
        name.clone_into(&mut self.model);
    }

    fn collector(&self) -> Option<&Collector> {
        self.collectors.get(self.active?)
    }

    /// Before a level (after its warm-up): the "before" scrape.
    pub async fn begin(&mut self) {
        if let Some(c) = self.collector() {
            c.begin_level(Some(&self.model)).await;
        }
        self.level_start = Some(SystemTime::now());
    }

    /// After a level of series `model`: the "after" scrape and the level's `server` block
    /// (`None` when nothing is scraped); a warning line on stderr when scrapes failed.
    pub async fn end(
        &mut self,
        model: usize,
        level: usize,
        stats: &LevelStats,
        label: &str,
        progress: &Progress,
    ) -> Option<ServerLevel> {
        let end = SystemTime::now();
        if let Some(start) = self.level_start.take() {
            self.windows.push((
                model,
                level,
                Window {
                    end_unix_s: unix_s(end),
                    duration_s: end.duration_since(start).map_or(0.0, |d| d.as_secs_f64()),
                },
            ));
        }
        let c = self.collector()?;
        let folded = c.end_level(stats.wall_s).await;
        let mut server = folded.server;
        if server.scrape_errors > 0 {
            progress.println(&format!(
                "  {label}: {} of {} metrics scrapes failed ({})",
                server.scrape_errors,
                server.scrapes,
                folded.errors.join("; ")
            ));
        }
        for note in &server.notes {
            progress.println(&format!("  {label}: server: {note}"));
        }
        if folded.during == 0 {
            // Gauges are read from the scrapes inside the level: there were none.
            let note = format!(
                "no server scrape inside level {}; lower --server-metrics-interval (or the endpoint's interval) below the level's {:.2} s",
                level + 1,
                stats.wall_s
            );
            progress.println(&format!("  {label}: {note}"));
            server.notes.push(note);
        }
        compare_with_client(&mut server, stats);
        Some(server)
    }

    /// After the sweep: the Prometheus queries of every level, merged into the levels' blocks
    /// (a scraped signal wins over a queried one).
    pub async fn finish(&mut self, models: &mut [ModelReport], progress: &Progress) {
        let Some(p) = &self.prometheus else {
            return;
        };
        if self.windows.is_empty() {
            return;
        }
        tokio::time::sleep(p.wait).await;
        let mut client = match crate::transport::Fetcher::new(
            crate::transport::TlsOptions::default(),
            Duration::from_secs(10),
        ) {
            Ok(c) => c,
            Err(e) => {
                progress.println(&format!("  prometheus: cannot build the client: {e}"));
                return;
            }
        };
        for &(mi, li, w) in &self.windows {
            let (got, sent, failed, first) =
                promql::query_level(&mut client, &p.url, &p.queries, w, Duration::from_secs(10))
                    .await;
            let Some(l) = models.get_mut(mi).and_then(|m| m.levels.get_mut(li)) else {
                continue;
            };
            if let Some(e) = first {
                progress.println(&format!(
                    "  prometheus: {failed} of {sent} queries failed (first: {e})"
                ));
            }
            let server = l.server.get_or_insert_with(ServerLevel::default);
            for (name, s) in got {
                // A query answer that is not a number (NaN, ±Inf) is no signal.
                match crate::servermetrics::level::finite(s) {
                    Some(s) => {
                        server.signals.entry(name).or_insert(s);
                    }
                    None => {
                        server.invalid_samples += 1;
                        server.notes.push(format!(
                            "left out the Prometheus answer for {name}: not a finite number"
                        ));
                    }
                }
            }
            server.scrapes += sent;
            server.scrape_errors += failed;
            let stats = l.clone();
            if let Some(server) = &mut l.server {
                compare_with_client(server, &stats);
            }
        }
    }
}

/// Adds the client-vs-server comparisons a level's numbers allow:
/// `client_server_ttft_gap_s` (client TTFT p50/p95 − the server's) and
/// `server_client_tokens_ratio` (server generation tokens/s ÷ the client's aggregate tokens/s).
pub fn compare_with_client(server: &mut ServerLevel, l: &LevelStats) {
    if let (Some(c), Some(s)) = (&l.ttft_s, server.signals.get("server_ttft_s")) {
        let gap = SignalStats {
            p50: s.p50.map(|v| c.p50 - v),
            p95: s.p95.map(|v| c.p95 - v),
            ..SignalStats::default()
        };
        if gap.p50.is_some() || gap.p95.is_some() {
            server
                .signals
                .insert("client_server_ttft_gap_s".into(), gap);
        }
    }
    if let Some(s) = server.mean("generation_tokens_per_s")
        && l.output_tokens_per_s > 0.0
    {
        server.signals.insert(
            "server_client_tokens_ratio".into(),
            SignalStats {
                mean: Some(s / l.output_tokens_per_s),
                ..SignalStats::default()
            },
        );
    }
}

fn cell(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".to_owned(), f)
}

fn pct0(v: f64) -> String {
    format!("{:.0}", v * 100.0)
}

fn secs(v: f64) -> String {
    super::criteria::fmt_secs(v)
}

const SERVER_HEADER: [&str; 11] = [
    "model",
    "load",
    "GPU % mean/max",
    "KV % max",
    "host CPU % mean/max",
    "host mem % max",
    "waiting mean/max",
    "running max",
    "server gen tok/s (client)",
    "TTFT p95 client/server",
    "scrapes (failed)",
];

fn server_row(m: &ModelReport, l: &LevelStats, s: &ServerLevel) -> [String; 11] {
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

/// The compact server block (GPU %, KV %, waiting, ...) and the findings: empty when no level
/// has server metrics and there are no findings.
pub fn render_server(r: &Report, md: bool) -> String {
    let mut out = String::new();
    let rows: Vec<[String; 11]> = r
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
        if md {
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
        let bullet = if md { "- " } else { "  " };
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
    use crate::bench::findings::Finding;
    use crate::bench::report::{render_csv, render_markdown, render_table, tests::synthetic};

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
            code: "queueing".into(),
            model: "alpha".into(),
            level: "4".into(),
            message: "m".into(),
            run: None,
        });
        r
    }

    #[test]
    fn the_server_block_renders_only_when_collected() {
        let plain = synthetic();
        assert_eq!(render_server(&plain, false), "");
        assert!(csv_header(&plain).is_empty());
        let r = with_server();
        let t = render_table(&r);
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
        let md = render_markdown(&r);
        assert!(
            md.contains("| alpha | 4 | 42/90 | - | 61/97 | 88 |"),
            "{md}"
        );
        assert!(md.contains("- [queueing] alpha @ 4: m"), "{md}");
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
        let csv = render_csv(&r).unwrap();
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
