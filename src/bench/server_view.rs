//! The bench's side of server metrics: the plan (endpoints, custom families, the Prometheus
//! source, finding thresholds), the collector around each level, the client-vs-server
//! comparisons added to a level's `server` block, and the server block's renderings (the
//! compact terminal/Markdown table and the CSV columns). Scraping and folding are
//! [`crate::servermetrics`]'s.

use super::BenchError;
use super::findings::Thresholds;
use super::progress::Progress;
use super::report::ModelReport;
use super::stats::{LevelKey, LevelStats};
use crate::servermetrics::Endpoint;
use crate::servermetrics::level::{ServerLevel, SignalStats};
use crate::servermetrics::promql::{self, Query, Window};
use crate::servermetrics::scrape::Collector;
use crate::servermetrics::signals::{Custom, with_custom};
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
    /// Per level run: (model index, its load, its window), for the Prometheus queries.
    windows: Vec<(usize, LevelKey, Window)>,
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
                stats.key,
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
        for &(mi, key, w) in &self.windows {
            let (got, sent, failed, first) =
                promql::query_level(&mut client, &p.url, &p.queries, w, Duration::from_secs(10))
                    .await;
            // By load, not by position: a search or a knee's added levels sort the levels by load.
            let level = models
                .get_mut(mi)
                .and_then(|m| m.levels.iter_mut().find(|l| l.key.same(&key)));
            let Some(l) = level else {
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
