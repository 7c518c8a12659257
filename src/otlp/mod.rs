//! The OTLP metrics export of `serve` and `bench`: the OpenTelemetry GenAI client metrics (and
//! tokenprobe's own) over OTLP/HTTP with protobuf bodies, switched on and configured by the
//! standard `OTEL_*` variables.
//!
//! - [`proto`]: the OTLP messages sent (prost, the official schema's field numbers).
//! - [`aggregate`]: probe results folded into cumulative histograms per job (pure).
//! - [`bench`]: a bench level's samples into the same instruments, as the level ends.
//! - [`serve`]: the instruments as one of `serve`'s result sinks, each job's probe results into
//!   them as they finish.
//! - [`exporter`]: the periodic POST (I/O); `serve` runs it on the web runtime, never the
//!   probes'.
//!
//! This file reads the variables ([`OtlpConfig::from_env`], pure: the environment is passed in).

pub mod aggregate;
pub mod bench;
pub mod exporter;
pub mod proto;
pub mod serve;

pub use aggregate::{Instruments, JobAttrs, JobRecorder};

use hyper::header::{HeaderName, HeaderValue};
use std::time::Duration;

/// Why the `OTEL_*` variables cannot be used (the process does not start).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OtlpError {
    /// A variable's value is not usable; the message never quotes a header's value.
    #[error("{var}: {reason}")]
    Var {
        /// The variable.
        var: &'static str,
        /// Why.
        reason: String,
    },
}

/// Where and how to export.
#[derive(Debug, Clone)]
pub struct OtlpConfig {
    /// The metrics endpoint (`.../v1/metrics`).
    pub endpoint: String,
    /// Headers sent with every export (values marked sensitive).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Time between exports.
    pub interval: Duration,
    /// Each export's time limit.
    pub timeout: Duration,
    /// The resource's attributes (`service.name` and `OTEL_RESOURCE_ATTRIBUTES`).
    pub resource: Vec<proto::KeyValue>,
}

/// `k=v,k2=v2` with percent-encoded values (the W3C Baggage form the OTLP variables use).
fn pairs(var: &'static str, v: &str) -> Result<Vec<(String, String)>, OtlpError> {
    let mut out = Vec::new();
    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((k, val)) = item.split_once('=') else {
            return Err(OtlpError::Var {
                var,
                reason: "each entry is KEY=VALUE, entries separated by commas".into(),
            });
        };
        let val = percent_encoding::percent_decode_str(val.trim())
            .decode_utf8()
            .map_err(|_| OtlpError::Var {
                var,
                reason: format!("the value of {} is not UTF-8 once decoded", k.trim()),
            })?;
        out.push((k.trim().to_owned(), val.into_owned()));
    }
    Ok(out)
}

/// Milliseconds from a variable, within `lo..=hi`.
fn millis(
    get: &impl Fn(&str) -> Option<String>,
    vars: &[&'static str],
    default: Duration,
    (lo, hi): (Duration, Duration),
) -> Result<Duration, OtlpError> {
    for var in vars {
        if let Some(v) = get(var).filter(|v| !v.trim().is_empty()) {
            let d = v
                .trim()
                .parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| OtlpError::Var {
                    var,
                    reason: format!("{v:?} is not a number of milliseconds"),
                })?;
            if d < lo || d > hi {
                return Err(OtlpError::Var {
                    var,
                    reason: format!(
                        "{} ms: between {} and {} ms",
                        d.as_millis(),
                        lo.as_millis(),
                        hi.as_millis()
                    ),
                });
            }
            return Ok(d);
        }
    }
    Ok(default)
}

impl OtlpConfig {
    /// The export the variables ask for: `None` unless `OTEL_METRICS_EXPORTER` names `otlp`
    /// (and `OTEL_SDK_DISABLED` is not `true`). The endpoint is `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`
    /// as given, else `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/metrics`, else
    /// `http://localhost:4318/v1/metrics`; the protocol must be `http/protobuf`; headers from
    /// `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_EXPORTER_OTLP_METRICS_HEADERS` (the latter wins);
    /// the timeout from `OTEL_EXPORTER_OTLP[_METRICS]_TIMEOUT` (10 s); the interval from
    /// `OTEL_METRIC_EXPORT_INTERVAL` (60 s); the resource from `OTEL_RESOURCE_ATTRIBUTES` and
    /// `OTEL_SERVICE_NAME` (`service.name` is `tokenprobe` unless they say otherwise).
    ///
    /// # Errors
    /// [`OtlpError::Var`] naming the variable that cannot be used.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, OtlpError> {
        if get("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let asked = get("OTEL_METRICS_EXPORTER")
            .is_some_and(|v| v.split(',').any(|e| e.trim().eq_ignore_ascii_case("otlp")));
        if !asked {
            return Ok(None);
        }
        for var in [
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(p) = get(var).filter(|p| !p.trim().is_empty()) {
                if p.trim() != "http/protobuf" {
                    return Err(OtlpError::Var {
                        var,
                        reason: format!(
                            "{:?}: tokenprobe exports OTLP over http/protobuf only",
                            p.trim()
                        ),
                    });
                }
                break;
            }
        }
        let endpoint = match (
            get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").filter(|v| !v.trim().is_empty()),
            get("OTEL_EXPORTER_OTLP_ENDPOINT").filter(|v| !v.trim().is_empty()),
        ) {
            (Some(e), _) => (e.trim().to_owned(), "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
            (None, Some(base)) => (
                format!("{}/v1/metrics", base.trim().trim_end_matches('/')),
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (None, None) => (
                "http://localhost:4318/v1/metrics".to_owned(),
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
        };
        match url::Url::parse(&endpoint.0) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            _ => {
                return Err(OtlpError::Var {
                    var: endpoint.1,
                    reason: format!(
                        "{}: not an http:// or https:// URL",
                        crate::redact::redact_url(&endpoint.0)
                    ),
                });
            }
        }
        let mut headers: Vec<(HeaderName, HeaderValue)> = Vec::new();
        for var in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
        ] {
            for (k, v) in pairs(var, &get(var).unwrap_or_default())? {
                let (name, value) = crate::transport::sensitive_header(&k, &v)
                    .map_err(|reason| OtlpError::Var { var, reason })?;
                headers.retain(|(n, _)| *n != name);
                headers.push((name, value));
            }
        }
        let timeout = millis(
            &get,
            &[
                "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
                "OTEL_EXPORTER_OTLP_TIMEOUT",
            ],
            Duration::from_secs(10),
            (Duration::from_millis(100), Duration::from_secs(300)),
        )?;
        let interval = millis(
            &get,
            &["OTEL_METRIC_EXPORT_INTERVAL"],
            Duration::from_secs(60),
            (Duration::from_millis(100), Duration::from_secs(86_400)),
        )?;
        let mut attrs = pairs(
            "OTEL_RESOURCE_ATTRIBUTES",
            &get("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default(),
        )?;
        if let Some(name) = get("OTEL_SERVICE_NAME").filter(|n| !n.trim().is_empty()) {
            attrs.retain(|(k, _)| k != "service.name");
            attrs.push(("service.name".into(), name.trim().to_owned()));
        }
        if !attrs.iter().any(|(k, _)| k == "service.name") {
            attrs.push(("service.name".into(), "tokenprobe".into()));
        }
        attrs.push((
            "service.version".into(),
            env!("CARGO_PKG_VERSION").to_owned(),
        ));
        let resource = attrs.iter().map(|(k, v)| proto::kv(k, v)).collect();
        Ok(Some(OtlpConfig {
            endpoint: endpoint.0,
            headers,
            interval,
            timeout,
            resource,
        }))
    }
}

#[cfg(test)]
mod tests;
