//! The HTTP endpoints of `serve`: `/metrics` (OpenMetrics when the `Accept` header asks for it,
//! else the Prometheus 0.0.4 text format), `/-/healthy`, `/-/ready`, `POST /-/reload`, and `/`
//! (links and the loaded jobs, without secrets), as Prometheus exporters lay them out.

use crate::config::Job;
use crate::daemon::Daemon;
use crate::metrics::{OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use std::fmt::Write as _;
use std::sync::Arc;

/// A job as shown on `/` (no secrets: the key source is not shown).
#[derive(Debug, Clone)]
pub struct JobRow {
    /// `target/model/prompt`.
    pub name: String,
    /// Protocol.
    pub api: String,
    /// Endpoint URL.
    pub url: String,
    /// Schedule, e.g. `every 15s`.
    pub schedule: String,
}

impl JobRow {
    /// The row for a job.
    pub fn of(job: &Job) -> Self {
        JobRow {
            name: job.name(),
            api: job.target.api.to_string(),
            url: crate::redact::redact_url(&format!(
                "{}{}",
                job.target.base_url,
                job.target.api.path()
            )),
            schedule: job.schedule.to_string(),
        }
    }
}

/// The router with every endpoint.
pub fn router(daemon: Arc<Daemon>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/-/healthy", get(|| async { "Healthy\n" }))
        .route("/-/ready", get(|| async { "Ready\n" }))
        .route("/-/reload", post(reload))
        .route("/", get(index))
        .with_state(daemon)
}

async fn reload(State(d): State<Arc<Daemon>>) -> Response {
    match d.reload().await {
        Ok(a) => format!(
            "config reloaded: {} started, {} stopped, {} unchanged\n",
            a.started, a.stopped, a.kept
        )
        .into_response(),
        Err(e) => {
            // Say what failed without quoting the file (the log has the redacted details).
            let why = match &e {
                crate::daemon::DaemonError::Config(c) => c.summary(),
                other => other.to_string(),
            };
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reload refused, the previous config keeps running: {why}\n"),
            )
                .into_response()
        }
    }
}

/// True when the `Accept` header asks for OpenMetrics.
pub fn wants_openmetrics(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"))
}

async fn metrics(State(d): State<Arc<Daemon>>, headers: HeaderMap) -> Response {
    let (body, ct) = if wants_openmetrics(&headers) {
        (d.metrics().encode_openmetrics(), OPENMETRICS_CONTENT_TYPE)
    } else {
        (d.metrics().encode_text(), TEXT_CONTENT_TYPE)
    };
    match body {
        Ok(b) => ([(header::CONTENT_TYPE, ct)], b).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics failed: {e}\n"),
        )
            .into_response(),
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

async fn index(State(d): State<Arc<Daemon>>) -> Html<String> {
    let jobs = d.jobs();
    let mut h = String::from(
        "<!doctype html><html><head><title>tokenprobe</title></head><body>\n<h1>tokenprobe</h1>\n\
         <p><a href=\"/metrics\">Metrics</a> · <a href=\"/-/healthy\">Health</a> · <a href=\"/-/ready\">Ready</a> · reload: <code>POST /-/reload</code> or SIGHUP</p>\n",
    );
    let _ = write!(
        h,
        "<p>version {}</p>\n<h2>Jobs ({})</h2>\n<table border=\"1\" cellpadding=\"4\">\n\
         <tr><th>job</th><th>api</th><th>endpoint</th><th>schedule</th></tr>\n",
        env!("CARGO_PKG_VERSION"),
        jobs.len()
    );
    for j in &jobs {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&j.name),
            escape(&j.api),
            escape(&j.url),
            escape(&j.schedule)
        );
    }
    h.push_str("</table>\n</body></html>\n");
    Html(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation() {
        let mut h = HeaderMap::new();
        assert!(!wants_openmetrics(&h));
        h.insert(
            header::ACCEPT,
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
                .parse()
                .unwrap(),
        );
        assert!(wants_openmetrics(&h));
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(escape("<a&\"b\">"), "&lt;a&amp;&quot;b&quot;&gt;");
    }
}
