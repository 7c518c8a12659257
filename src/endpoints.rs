//! The HTTP endpoints of `serve`: `/metrics` (the format the `Accept` header prefers of the
//! Prometheus protobuf format, which carries native histograms, OpenMetrics 1.0 and the
//! Prometheus 0.0.4 text format, the last by default; gzip when `Accept-Encoding` allows it), `/-/healthy`,
//! `/-/ready`, `POST /-/reload`, and `/` (links and the loaded jobs with their last result, without
//! secrets), as Prometheus exporters lay them out.
//!
//! `/metrics` is encoded once per scrape wave: an answer is reused for [`METRICS_CACHE_TTL`] by
//! every scrape asking for the same format and encoding, so 200 concurrent scrapers cost one
//! encode, not 200; and answers are spaced by [`METRICS_MIN_SPACING`], so a flood of scrapes
//! waits rather than taking the CPU.

use crate::config::Job;
use crate::daemon::Daemon;
use crate::metrics::{
    JobLabels, LastResult, OPENMETRICS_CONTENT_TYPE, PROTOBUF_CONTENT_TYPE, TEXT_CONTENT_TYPE,
};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A job as shown on `/` (no secrets: the key source is not shown).
#[derive(Debug, Clone)]
struct JobRow {
    /// The job's labels (to find its last result).
    labels: JobLabels,
    /// `target/model/prompt`.
    name: String,
    /// Protocol.
    api: String,
    /// Endpoint URL.
    url: String,
    /// Schedule, e.g. `every 15s`.
    schedule: String,
}

impl JobRow {
    /// The row for a job.
    fn of(job: &Job) -> Self {
        JobRow {
            labels: JobLabels::of(job),
            name: job.name(),
            api: job.target.api.to_string(),
            url: crate::redact::redact_url(&job.target.url()),
            schedule: job.schedule.to_string(),
        }
    }
}

/// How long an encoded `/metrics` answer is reused.
pub const METRICS_CACHE_TTL: Duration = Duration::from_millis(200);
/// The shortest time between two `/metrics` answers (at most 1,000 a second): a scrape flood
/// waits instead of taking the CPU the probes need. Prometheus servers scrape an exporter a few
/// times a minute each.
pub const METRICS_MIN_SPACING: Duration = Duration::from_millis(1);

/// An encoded exposition: when, for which config generation, the body.
type Cached = (Instant, u64, Bytes);

/// Shared state of the endpoints.
#[derive(Debug)]
struct App {
    daemon: Arc<Daemon>,
    /// Per (OpenMetrics?, gzip?): when encoded, and the body. The async lock makes the scrapes of
    /// one wave wait for a single encode instead of each encoding.
    /// Entries from before the last config (re)load ([`crate::metrics::Metrics::generation`])
    /// are not reused.
    cache: tokio::sync::Mutex<HashMap<(ExpositionFormat, bool), Cached>>,
    /// When the next `/metrics` answer may start ([`METRICS_MIN_SPACING`]).
    next_answer: tokio::sync::Mutex<tokio::time::Instant>,
}

/// The router with every endpoint.
pub fn router(daemon: Arc<Daemon>) -> Router {
    let app = Arc::new(App {
        daemon,
        cache: tokio::sync::Mutex::new(HashMap::new()),
        next_answer: tokio::sync::Mutex::new(tokio::time::Instant::now()),
    });
    Router::new()
        .route("/metrics", get(metrics))
        .route("/-/healthy", get(|| async { "Healthy\n" }))
        .route("/-/ready", get(|| async { "Ready\n" }))
        .route("/-/reload", post(reload))
        .route("/", get(index))
        .with_state(app)
}

async fn reload(State(app): State<Arc<App>>) -> Response {
    match app.daemon.reload().await {
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

/// An exposition format of `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpositionFormat {
    /// Length-delimited `io.prometheus.client.MetricFamily` messages (with native histograms).
    Protobuf,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
    /// The Prometheus 0.0.4 text format.
    Text,
}

impl ExpositionFormat {
    /// The answer's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            ExpositionFormat::Protobuf => PROTOBUF_CONTENT_TYPE,
            ExpositionFormat::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            ExpositionFormat::Text => TEXT_CONTENT_TYPE,
        }
    }
}

/// The format the `Accept` header prefers: of the media ranges naming one of the three formats
/// (the protobuf one only with `proto=io.prometheus.client.MetricFamily` and
/// `encoding=delimited`), the one with the highest q-value above 0, the first listed on a tie;
/// the 0.0.4 text format when none is named (`*/*`, no header).
pub fn negotiate(headers: &HeaderMap) -> ExpositionFormat {
    let mut best: Option<(f32, ExpositionFormat)> = None;
    let items = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','));
    for item in items {
        let mut parts = item.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let (mut q, mut proto, mut encoding) = (1.0_f32, "", "");
        for p in parts {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches('"');
            match k.trim().to_ascii_lowercase().as_str() {
                "q" => q = v.parse().unwrap_or(0.0),
                "proto" => proto = v,
                "encoding" => encoding = v,
                _ => {}
            }
        }
        let format = match media.as_str() {
            "application/vnd.google.protobuf"
                if proto == "io.prometheus.client.MetricFamily" && encoding == "delimited" =>
            {
                ExpositionFormat::Protobuf
            }
            "application/openmetrics-text" => ExpositionFormat::OpenMetrics,
            "text/plain" => ExpositionFormat::Text,
            _ => continue,
        };
        if q > 0.0 && best.is_none_or(|(b, _)| q > b) {
            best = Some((q, format));
        }
    }
    best.map_or(ExpositionFormat::Text, |(_, f)| f)
}

/// True when `Accept-Encoding` accepts gzip (`gzip` or `*`, with a q-value above 0).
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or("").to_ascii_lowercase();
            let q = parts
                .find_map(|p| {
                    p.strip_prefix("q=")
                        .and_then(|q| q.trim().parse::<f32>().ok())
                })
                .unwrap_or(1.0);
            (coding == "gzip" || coding == "x-gzip" || coding == "*") && q > 0.0
        })
}

fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 8),
        flate2::Compression::fast(),
    );
    e.write_all(body)?;
    e.finish()
}

/// The encoded body for (`format`, `gzipped`), from the cache when fresh.
async fn encoded(app: &App, format: ExpositionFormat, gzipped: bool) -> Result<Bytes, String> {
    let mut cache = app.cache.lock().await;
    let m = app.daemon.metrics();
    let generation = m.generation();
    if let Some((at, g, body)) = cache.get(&(format, gzipped))
        && at.elapsed() < METRICS_CACHE_TTL
        && *g == generation
    {
        return Ok(body.clone());
    }
    let failed = |e: &dyn std::fmt::Display| format!("encoding metrics failed: {e}");
    let plain = match format {
        ExpositionFormat::Protobuf => m.encode_protobuf().map_err(|e| failed(&e))?,
        ExpositionFormat::OpenMetrics => {
            m.encode_openmetrics().map_err(|e| failed(&e))?.into_bytes()
        }
        ExpositionFormat::Text => m.encode_text().map_err(|e| failed(&e))?.into_bytes(),
    };
    let body = if gzipped {
        Bytes::from(gzip(&plain).map_err(|e| format!("compressing metrics failed: {e}"))?)
    } else {
        Bytes::from(plain)
    };
    cache.insert(
        (format, gzipped),
        (Instant::now(), generation, body.clone()),
    );
    Ok(body)
}

async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    {
        let mut next = app.next_answer.lock().await;
        let now = tokio::time::Instant::now();
        if *next > now {
            tokio::time::sleep_until(*next).await;
        }
        *next = now.max(*next) + METRICS_MIN_SPACING;
    }
    let format = negotiate(&headers);
    let gzipped = accepts_gzip(&headers);
    let ct = format.content_type();
    match encoded(&app, format, gzipped).await {
        Ok(b) if gzipped => (
            [
                (header::CONTENT_TYPE, ct),
                (header::CONTENT_ENCODING, "gzip"),
                (header::VARY, "Accept, Accept-Encoding"),
            ],
            b,
        )
            .into_response(),
        Ok(b) => (
            [
                (header::CONTENT_TYPE, ct),
                (header::VARY, "Accept, Accept-Encoding"),
            ],
            b,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// How a job's last result reads on `/`.
fn last_cells(last: Option<&LastResult>) -> [String; 4] {
    let Some(l) = last else {
        return [
            "not yet".into(),
            String::new(),
            String::new(),
            String::new(),
        ];
    };
    let when = chrono::DateTime::<chrono::Utc>::from(l.at)
        .format("%Y-%m-%d %H:%M:%S UTC")
        .to_string();
    match l.error_type {
        None => [
            "success".into(),
            String::new(),
            l.ttft_s
                .map(|t| format!("{:.1} ms", t * 1000.0))
                .unwrap_or_default(),
            when,
        ],
        Some(e) => ["error".into(), e.as_str().into(), String::new(), when],
    }
}

async fn index(State(app): State<Arc<App>>) -> Html<String> {
    let d = &app.daemon;
    let jobs: Vec<JobRow> = d.jobs().iter().map(JobRow::of).collect();
    let mut h = String::from(
        "<!doctype html><html><head><title>tokenprobe</title></head><body>\n<h1>tokenprobe</h1>\n\
         <p><a href=\"/metrics\">Metrics</a> · <a href=\"/-/healthy\">Health</a> · <a href=\"/-/ready\">Ready</a> · reload: <code>POST /-/reload</code> or SIGHUP</p>\n",
    );
    let _ = write!(
        h,
        "<p>version {}</p>\n<h2>Jobs ({})</h2>\n<table border=\"1\" cellpadding=\"4\">\n\
         <tr><th>job</th><th>api</th><th>endpoint</th><th>schedule</th>\
         <th>last outcome</th><th>error_type</th><th>TTFT</th><th>when</th></tr>\n",
        env!("CARGO_PKG_VERSION"),
        jobs.len()
    );
    for j in &jobs {
        let last = d.metrics().last_result(&j.labels);
        let [outcome, error_type, ttft, when] = last_cells(last.as_ref());
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&j.name),
            escape(&j.api),
            escape(&j.url),
            escape(&j.schedule),
            escape(&outcome),
            escape(&error_type),
            escape(&ttft),
            escape(&when),
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
        let with = |accept: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, accept.parse().unwrap());
            negotiate(&h)
        };
        assert_eq!(negotiate(&HeaderMap::new()), ExpositionFormat::Text);
        assert_eq!(
            with("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
            ExpositionFormat::OpenMetrics
        );
        // Prometheus' classic header, and the one Prometheus 2.42 sends with
        // `--enable-feature=native-histograms` (captured from the Debian package's scrapes).
        assert_eq!(
            with(
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
            ),
            ExpositionFormat::OpenMetrics
        );
        assert_eq!(
            with(
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
            ),
            ExpositionFormat::Protobuf
        );
        // Protobuf only as delimited MetricFamily messages; the text format when asked first.
        assert_eq!(
            with(
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text,text/plain;q=0.5"
            ),
            ExpositionFormat::Text
        );
        assert_eq!(
            with("application/vnd.google.protobuf;encoding=delimited"),
            ExpositionFormat::Text
        );
        assert_eq!(
            with("text/plain;version=0.0.4, application/openmetrics-text; q=0.9"),
            ExpositionFormat::Text
        );
        assert_eq!(
            with("application/openmetrics-text;q=0, text/plain;q=0.1"),
            ExpositionFormat::Text
        );
        assert_eq!(with("*/*"), ExpositionFormat::Text);
        assert_eq!(
            with("Application/OpenMetrics-Text; Q=0.5"),
            ExpositionFormat::OpenMetrics
        );
    }

    #[test]
    fn gzip_negotiation() {
        let mut h = HeaderMap::new();
        assert!(!accepts_gzip(&h));
        h.insert(header::ACCEPT_ENCODING, "gzip".parse().unwrap());
        assert!(accepts_gzip(&h));
        h.insert(
            header::ACCEPT_ENCODING,
            "identity, gzip;q=0".parse().unwrap(),
        );
        assert!(!accepts_gzip(&h));
        h.insert(header::ACCEPT_ENCODING, "br, GZIP; q=0.5".parse().unwrap());
        assert!(accepts_gzip(&h));
        h.insert(header::ACCEPT_ENCODING, "identity".parse().unwrap());
        assert!(!accepts_gzip(&h));
    }

    #[test]
    fn last_result_cells() {
        assert_eq!(last_cells(None)[0], "not yet");
        let at = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let ok = LastResult {
            error_type: None,
            ttft_s: Some(0.2123),
            at,
        };
        assert_eq!(
            last_cells(Some(&ok)),
            [
                "success".to_owned(),
                String::new(),
                "212.3 ms".to_owned(),
                "2023-11-14 22:13:20 UTC".to_owned()
            ]
        );
        let bad = LastResult {
            error_type: Some(crate::outcome::ErrorType::RateLimited),
            ttft_s: None,
            at,
        };
        assert_eq!(last_cells(Some(&bad))[1], "rate_limited");
    }

    /// Issue 10 item 5: `/` is rendered from the daemon's loaded config (no cached rows in the
    /// daemon): it lists the jobs of the config running now, after a reload too, with their
    /// endpoint redacted.
    #[tokio::test]
    async fn the_index_lists_the_loaded_jobs_after_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        let config = |models: &str| {
            format!(
                "prompts:\n  - name: p\n    messages: [{{role: user, content: hi}}]\ntargets:\n  - name: a\n    base_url: http://u:pw-index-1@127.0.0.1:9/v1\n    models: [{models}]\n    interval: 1h\n"
            )
        };
        std::fs::write(&path, config("m1")).unwrap();
        let daemon = Daemon::start(&path, tokio::runtime::Handle::current(), None, None).unwrap();
        let app = Arc::new(App {
            daemon: daemon.clone(),
            cache: tokio::sync::Mutex::new(HashMap::new()),
            next_answer: tokio::sync::Mutex::new(tokio::time::Instant::now()),
        });
        let Html(page) = index(State(app.clone())).await;
        assert!(page.contains("<h2>Jobs (1)</h2>"), "{page}");
        assert!(page.contains("<td>a/m1/p</td>"), "{page}");
        assert!(!page.contains("pw-index-1"), "{page}");
        std::fs::write(&path, config("m1, m2")).unwrap();
        daemon.reload().await.unwrap();
        let Html(page) = index(State(app)).await;
        assert!(page.contains("<h2>Jobs (2)</h2>"), "{page}");
        assert!(page.contains("<td>a/m2/p</td>"), "{page}");
        daemon.shutdown(Duration::ZERO).await;
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(escape("<a&\"b\">"), "&lt;a&amp;&quot;b&quot;&gt;");
    }
}
