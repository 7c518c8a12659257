//! The periodic OTLP/HTTP export (I/O), on the runtime that spawns it (`serve`'s web runtime,
//! never the probes'): every interval, the instruments' cumulative points as one
//! `ExportMetricsServiceRequest`, POSTed as `application/x-protobuf` through a [`Fetcher`] (TLS
//! trust as a target's defaults, no proxy, a kept connection), bounded by the timeout.
//!
//! One export at a time: the queue holds none. While an export is slow or its receiver down, the
//! intervals it spans are dropped and counted (`dropped`), which loses no observation, since
//! every export carries the cumulative state; the probes record into the instruments under a
//! short lock and never wait for an export. A failed export (no answer, a status other than
//! 2xx) is counted and not retried: the next interval's carries the same and more. At stop, one
//! last export is tried, bounded by the timeout.

use super::proto::{
    ExportMetricsServiceRequest, InstrumentationScope, Resource, ResourceMetrics, ScopeMetrics,
};
use super::{Instruments, OtlpConfig};
use crate::transport::{Fetcher, TlsOptions, TransportError};
use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

/// What became of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportResult {
    /// Accepted (2xx).
    Sent,
    /// Refused or not answered in time.
    Failed,
    /// An interval skipped while an export was in flight.
    Dropped,
}

impl ExportResult {
    /// The `result` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ExportResult::Sent => "sent",
            ExportResult::Failed => "failed",
            ExportResult::Dropped => "dropped",
        }
    }
}

/// Told each export's result (the exporter's counters on `/metrics`).
pub type OnResult = Arc<dyn Fn(ExportResult) + Send + Sync>;

/// The largest answer read from a receiver.
const MAX_ANSWER: usize = 64 * 1024;

/// Now, in ns since the Unix epoch.
pub fn now_ns() -> u64 {
    unix_ns(SystemTime::now())
}

/// `at` in ns since the Unix epoch (0 before it).
pub fn unix_ns(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The request body of the instruments' points at `now_ns`: protobuf bytes.
pub fn body(cfg: &OtlpConfig, instruments: &Instruments, now_ns: u64) -> Vec<u8> {
    let req = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: cfg.resource.clone(),
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "tokenprobe".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                }),
                metrics: instruments.metrics(now_ns),
            }],
        }],
    };
    prost::Message::encode_to_vec(&req)
}

/// A running exporter.
#[derive(Debug)]
pub struct Exporter {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Exporter {
    /// Starts exporting `instruments` as `cfg` says, on the current runtime; `on_result` is told
    /// every export's result.
    ///
    /// # Errors
    /// [`TransportError`] when the client cannot be built.
    pub fn start(
        cfg: OtlpConfig,
        instruments: Arc<Instruments>,
        on_result: OnResult,
    ) -> Result<Self, TransportError> {
        let mut fetcher = Fetcher::new(TlsOptions::default(), cfg.timeout)?;
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let mut headers = cfg.headers.clone();
        headers.push((
            HeaderName::from_static("content-type"),
            HeaderValue::from_static("application/x-protobuf"),
        ));
        headers.push((
            HeaderName::from_static("user-agent"),
            HeaderValue::from_static(concat!("tokenprobe/", env!("CARGO_PKG_VERSION"))),
        ));
        // The endpoint as logs show it, redacted once.
        let shown = crate::redact::redact_url(&cfg.endpoint);
        let task = tokio::spawn(async move {
            let mut next = tokio::time::Instant::now() + cfg.interval;
            loop {
                tokio::select! {
                    () = stopped.cancelled() => break,
                    () = tokio::time::sleep_until(next) => {}
                }
                let began = tokio::time::Instant::now();
                let r = export(&mut fetcher, &cfg, &shown, &headers, &instruments).await;
                on_result(r);
                // The intervals this export spanned are skipped: each is counted as dropped.
                let mut skipped = 0;
                next += cfg.interval;
                while next <= tokio::time::Instant::now() {
                    next += cfg.interval;
                    skipped += 1;
                }
                for _ in 0..skipped {
                    on_result(ExportResult::Dropped);
                }
                if skipped > 0 {
                    tracing::warn!(
                        endpoint = %shown,
                        took_ms = began.elapsed().as_millis(),
                        skipped,
                        "an OTLP export took longer than the export interval: intervals skipped (each export carries the cumulative state, so no observation is lost)"
                    );
                }
            }
            // One last export of what the last probes recorded.
            let r = export(&mut fetcher, &cfg, &shown, &headers, &instruments).await;
            on_result(r);
        });
        Ok(Exporter { stop, task })
    }

    /// Stops the schedule and waits (bounded by the export timeout the task applies) for the
    /// last export; a task that outlives `limit` is abandoned.
    pub async fn shutdown(self, limit: Duration) {
        self.stop.cancel();
        let mut task = self.task;
        if tokio::time::timeout(limit, &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// One export: the body, one POST bounded by the timeout (`endpoint`: the URL as logs show it).
async fn export(
    fetcher: &mut Fetcher,
    cfg: &OtlpConfig,
    endpoint: &str,
    headers: &[(HeaderName, HeaderValue)],
    instruments: &Instruments,
) -> ExportResult {
    let body = Bytes::from(body(cfg, instruments, now_ns()));
    let answer = tokio::time::timeout(
        cfg.timeout,
        fetcher.post(&cfg.endpoint, headers, body, MAX_ANSWER),
    )
    .await;
    match answer {
        Ok(Ok(a)) if (200..300).contains(&a.status) => ExportResult::Sent,
        Ok(Ok(a)) => {
            tracing::warn!(endpoint = %endpoint, status = a.status, "the OTLP receiver refused an export");
            ExportResult::Failed
        }
        Ok(Err(e)) => {
            tracing::warn!(endpoint = %endpoint, error = %e, "an OTLP export failed");
            ExportResult::Failed
        }
        Err(_) => {
            tracing::warn!(endpoint = %endpoint, timeout_ms = cfg.timeout.as_millis(), "an OTLP export got no answer in time");
            ExportResult::Failed
        }
    }
}
