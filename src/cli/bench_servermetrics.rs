//! `tokenprobe bench`'s server-metrics flags (`--server-metrics`, `--prometheus`, the finding
//! thresholds) and their conversion, with each model's target's `server_metrics:`, into a validated
//! [`ServerPlan`].

use crate::bench::BenchError;
use crate::bench::findings::Thresholds;
use crate::bench::server_view::{PrometheusPlan, ServerPlan};
use crate::config::Target;
use crate::servermetrics::promql::{Query, merge_queries};
use crate::servermetrics::{DEFAULT_TIMEOUT, Endpoint};
use std::time::Duration;

/// The server-metrics flags of `tokenprobe bench`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServerArgs {
    /// Scrape this Prometheus/OpenMetrics endpoint around and during every level (repeatable; the target's key and auth header are sent when the endpoint is the target's host and port, as llama.cpp's /metrics wants). Adds to the target's server_metrics. MODEL=URL scrapes it for that model only (the model's name as in --models): each model behind one gateway with its own server.
    #[arg(long = "server-metrics", value_name = "[MODEL=]URL")]
    pub server_metrics: Vec<String>,
    /// Time between scrapes during a level, of --server-metrics and of the config's endpoints that set no interval (default 1s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub server_metrics_interval: Option<Duration>,
    /// Query this Prometheus server's API for the server signals of every level (after the sweep).
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// A PromQL query for one statistic of a signal, SIGNAL.STAT=PROMQL (STAT: mean, max, p50, p95; $__range is the level's duration); replaces the default of that statistic (repeatable).
    #[arg(long = "prometheus-query", value_name = "SIGNAL.STAT=PROMQL")]
    pub prometheus_queries: Vec<String>,
    /// Wait this long after the sweep before querying --prometheus (it must have scraped the last level).
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub prometheus_wait: Duration,
    /// A finding's threshold, NAME=VALUE, e.g. gpu_underutilized=20%, long_tail=2.5, client_server_ttft_gap=100ms (repeatable).
    #[arg(long = "finding-threshold", value_name = "NAME=VALUE")]
    pub finding_thresholds: Vec<String>,
}

fn http_url(flag: &str, u: &str) -> Result<(), BenchError> {
    match url::Url::parse(u) {
        Ok(x) if matches!(x.scheme(), "http" | "https") => Ok(()),
        _ => Err(BenchError::Usage(format!(
            "{flag} {}: not an http:// or https:// URL",
            crate::redact::redact_url(u)
        ))),
    }
}

/// A `--server-metrics` value: `URL` (every model's) or `MODEL=URL` (one model's), as
/// (model, URL). A value that starts as a URL is one whole, whatever `=` its query holds.
fn model_and_url(v: &str) -> (Option<&str>, &str) {
    let lower = v.trim_start().to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return (None, v);
    }
    match v.split_once('=') {
        Some((model, url)) if !model.trim().is_empty() => (Some(model.trim()), url),
        _ => (None, v),
    }
}

impl ServerArgs {
    /// The server plan: for each model (by the target it is sent to and its name, in `models`'
    /// order) its target's endpoints, then the flags' (`URL` for every model, `MODEL=URL` for the
    /// model of that name or `TARGET/MODEL`, each with that model's target's key and auth style);
    /// the Prometheus source and the thresholds.
    ///
    /// # Errors
    /// [`BenchError::Usage`] for a URL, interval, query or threshold that is not valid, or a
    /// `MODEL=` that names none of the models.
    pub fn plan(&self, models: &[(&Target, &str)]) -> Result<ServerPlan, BenchError> {
        let interval = self
            .server_metrics_interval
            .unwrap_or(crate::servermetrics::DEFAULT_INTERVAL);
        if interval < Duration::from_millis(50) || interval > Duration::from_secs(3600) {
            return Err(BenchError::Usage(
                "--server-metrics-interval must be between 50ms and 1h".into(),
            ));
        }
        let flagged: Vec<(Option<&str>, &str)> = self
            .server_metrics
            .iter()
            .map(|v| model_and_url(v))
            .collect();
        for (model, u) in &flagged {
            http_url("--server-metrics", u)?;
            if let Some(m) = model
                && !models
                    .iter()
                    .any(|(t, name)| name == m || format!("{}/{name}", t.name) == *m)
            {
                let names: Vec<&str> = models.iter().map(|(_, n)| *n).collect();
                return Err(BenchError::Usage(format!(
                    "--server-metrics {m}=...: no model {m:?} in this run (models: {})",
                    names.join(", ")
                )));
            }
        }
        let endpoints: Vec<Vec<Endpoint>> = models
            .iter()
            .map(|&(target, name)| {
                let mut endpoints = target.server_metrics.clone();
                // The flag's interval for the config's endpoints that set none.
                if self.server_metrics_interval.is_some() {
                    for e in endpoints.iter_mut().filter(|e| !e.interval_given) {
                        e.interval = interval;
                        e.timeout = e.timeout.min(interval);
                    }
                }
                let own = |m: &Option<&str>| {
                    m.is_none_or(|m| m == name || format!("{}/{name}", target.name) == m)
                };
                endpoints.extend(flagged.iter().filter(|(m, _)| own(m)).map(|&(_, u)| {
                    Endpoint {
                        url: u.to_owned(),
                        interval,
                        interval_given: true,
                        timeout: DEFAULT_TIMEOUT.min(interval),
                        // The target's key goes only where the target is.
                        auth: target
                            .api_key
                            .clone()
                            .filter(|_| crate::servermetrics::same_origin(u, &target.base_url))
                            .map(|k| (target.auth, k)),
                        families: Vec::new(),
                    }
                }));
                endpoints
            })
            .collect();
        let mut custom: Vec<_> = Vec::new();
        for f in endpoints.iter().flatten().flat_map(|e| e.families.iter()) {
            if !custom.contains(f) {
                custom.push(f.clone());
            }
        }
        let prometheus = match &self.prometheus {
            None if !self.prometheus_queries.is_empty() => {
                return Err(BenchError::Usage(
                    "--prometheus-query needs --prometheus URL".into(),
                ));
            }
            None => None,
            Some(u) => {
                http_url("--prometheus", u)?;
                let given = self
                    .prometheus_queries
                    .iter()
                    .map(|q| q.parse::<Query>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| BenchError::Usage(format!("--prometheus-query {e}")))?;
                Some(PrometheusPlan {
                    url: u.trim_end_matches('/').to_owned(),
                    queries: merge_queries(&given),
                    wait: self.prometheus_wait,
                })
            }
        };
        let mut thresholds = Thresholds::default();
        for t in &self.finding_thresholds {
            thresholds.set(t).map_err(BenchError::Usage)?;
        }
        Ok(ServerPlan {
            endpoints,
            custom,
            prometheus,
            thresholds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn target() -> Target {
        Config::parse(
            "prompts: [{name: p, messages: [{role: user, content: hi}]}]\n\
             targets:\n  - name: t\n    base_url: http://127.0.0.1:1/v1\n    models: [m]\n    api_key: k\n    auth: x-api-key\n    \
             server_metrics: [{url: 'http://127.0.0.1:2/metrics', interval: 2s}]\n",
        )
        .expect("config")
        .jobs[0]
            .target
            .as_ref()
            .clone()
    }

    fn err(a: ServerArgs) -> String {
        match a.plan(&[(&target(), "m")]) {
            Err(BenchError::Usage(m)) => m,
            other => panic!("accepted: {other:?}"),
        }
    }

    #[test]
    fn flags_add_endpoints_with_the_targets_key_and_set_thresholds() {
        let a = ServerArgs {
            // The target's host and port (its key goes there), and another host (it does not).
            server_metrics: vec![
                "http://127.0.0.1:1/metrics".into(),
                "http://127.0.0.1:9100/metrics".into(),
            ],
            server_metrics_interval: Some(Duration::from_millis(250)),
            prometheus: Some("http://prom:9090/".into()),
            prometheus_queries: vec!["requests_waiting.max=max(q)".into()],
            prometheus_wait: Duration::from_secs(1),
            finding_thresholds: vec!["memory_pressure=90%".into()],
        };
        let p = a.plan(&[(&target(), "m")]).expect("plan");
        assert_eq!(p.endpoints.len(), 1, "one model");
        let endpoints = &p.endpoints[0];
        assert_eq!(endpoints.len(), 3, "the config's, then the flag's");
        assert_eq!(
            endpoints[0].interval,
            Duration::from_secs(2),
            "the config's own"
        );
        let e = &endpoints[1];
        assert_eq!(
            (e.interval, e.timeout),
            (Duration::from_millis(250), Duration::from_millis(250))
        );
        assert!(matches!(
            e.auth,
            Some((crate::config::AuthStyle::XApiKey, _))
        ));
        assert!(
            endpoints[2].auth.is_none(),
            "not the target's origin: no key"
        );
        let prom = p.prometheus.expect("prometheus");
        assert_eq!(prom.url, "http://prom:9090");
        assert!(
            prom.queries
                .iter()
                .any(|q| q.signal == "requests_waiting" && q.stat == "max" && q.expr == "max(q)")
        );
        assert!((p.thresholds.memory_pressure - 0.9).abs() < 1e-12);
    }

    #[test]
    fn what_would_not_work_is_refused() {
        let base = || ServerArgs {
            server_metrics_interval: Some(Duration::from_secs(1)),
            prometheus_wait: Duration::from_secs(1),
            ..ServerArgs::default()
        };
        let m = err(ServerArgs {
            server_metrics: vec!["ftp://user:pw@x/metrics".into()],
            ..base()
        });
        assert!(m.contains("not an http") && !m.contains("pw"), "{m}");
        let m = err(ServerArgs {
            prometheus_queries: vec!["a.mean=1".into()],
            ..base()
        });
        assert!(m.contains("needs --prometheus"), "{m}");
        let m = err(ServerArgs {
            prometheus: Some("http://p".into()),
            prometheus_queries: vec!["a.median=1".into()],
            ..base()
        });
        assert!(m.contains("mean, max, p50 or p95"), "{m}");
        let m = err(ServerArgs {
            finding_thresholds: vec!["nope=1".into()],
            ..base()
        });
        assert!(m.contains("unknown"), "{m}");
        let m = err(ServerArgs {
            server_metrics_interval: Some(Duration::from_millis(10)),
            ..base()
        });
        assert!(m.contains("between 50ms and 1h"), "{m}");
    }

    /// `MODEL=URL` scrapes that model's server only; `URL` every model's; a URL whose query holds
    /// `=` stays whole; a `MODEL=` that is not in the run is refused.
    #[test]
    fn an_endpoint_may_belong_to_one_model() {
        let t = target();
        let a = ServerArgs {
            server_metrics: vec![
                "smollm2=http://127.0.0.1:8081/metrics".into(),
                "t/gemma3=http://127.0.0.1:8082/metrics".into(),
                "http://127.0.0.1:9100/metrics?x=1".into(),
            ],
            ..ServerArgs::default()
        };
        let p = a.plan(&[(&t, "smollm2"), (&t, "gemma3")]).expect("plan");
        let urls = |i: usize| -> Vec<&str> {
            p.endpoints[i]
                .iter()
                .map(|e| e.url.as_str())
                .filter(|u| !u.contains(":2/"))
                .collect()
        };
        assert_eq!(
            urls(0),
            [
                "http://127.0.0.1:8081/metrics",
                "http://127.0.0.1:9100/metrics?x=1"
            ]
        );
        assert_eq!(
            urls(1),
            [
                "http://127.0.0.1:8082/metrics",
                "http://127.0.0.1:9100/metrics?x=1"
            ]
        );
        let wrong = ServerArgs {
            server_metrics: vec!["llama=http://127.0.0.1:8081/metrics".into()],
            ..ServerArgs::default()
        };
        let e = match wrong.plan(&[(&t, "smollm2")]) {
            Err(BenchError::Usage(m)) => m,
            other => panic!("accepted: {other:?}"),
        };
        assert!(e.contains("no model \"llama\""), "{e}");
    }
}
