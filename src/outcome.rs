//! Outcome vocabulary: error types, anomaly flags, and the pure rules that classify an HTTP error
//! response or an in-stream error (MEASUREMENT.md, "Outcome" and "Anomaly flags").

use crate::protocol::StreamError;
use serde::Serialize;
use std::time::{Duration, SystemTime};

/// Why a probe failed. Declaration order is MEASUREMENT.md's precedence: when several apply, the
/// smallest (first) wins, so `Ord` is the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    /// The configured or environment proxy failed, or answered instead of the target.
    Proxy,
    /// DNS failure, refused or reset before a response.
    Connect,
    /// TLS handshake or certificate failure.
    Tls,
    /// Connection set-up took longer than `timeouts.connect`.
    TimeoutConnect,
    /// No token-bearing event within `timeouts.first_token` of `t0`.
    TimeoutFirstToken,
    /// No bytes for `timeouts.idle` after the first token-bearing event.
    TimeoutIdle,
    /// `t0` to the end took longer than `timeouts.total`.
    TimeoutTotal,
    /// 401 or 403.
    Auth,
    /// 429 whose body says the quota or credit is exhausted.
    QuotaExceeded,
    /// Any other 429.
    RateLimited,
    /// 529, or an error whose type says overloaded.
    Overloaded,
    /// Any other 4xx, or an in-stream error with a 4xx code.
    BadRequest,
    /// 5xx, an HTML error page, or an in-stream error with a 5xx, non-numeric or absent code.
    ServerError,
    /// The stream ended without a proper end.
    Truncated,
    /// A proper end but no token-bearing event.
    EmptyResponse,
    /// The body is not a parsable stream of the protocol.
    Malformed,
    /// The configured content check failed.
    ValidationFailed,
}

impl ErrorType {
    /// Every error type, in precedence order (used to pre-create counter series at 0).
    pub const ALL: [ErrorType; 17] = [
        ErrorType::Proxy,
        ErrorType::Connect,
        ErrorType::Tls,
        ErrorType::TimeoutConnect,
        ErrorType::TimeoutFirstToken,
        ErrorType::TimeoutIdle,
        ErrorType::TimeoutTotal,
        ErrorType::Auth,
        ErrorType::QuotaExceeded,
        ErrorType::RateLimited,
        ErrorType::Overloaded,
        ErrorType::BadRequest,
        ErrorType::ServerError,
        ErrorType::Truncated,
        ErrorType::EmptyResponse,
        ErrorType::Malformed,
        ErrorType::ValidationFailed,
    ];

    /// The label value, e.g. `timeout_first_token`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::Proxy => "proxy",
            ErrorType::Connect => "connect",
            ErrorType::Tls => "tls",
            ErrorType::TimeoutConnect => "timeout_connect",
            ErrorType::TimeoutFirstToken => "timeout_first_token",
            ErrorType::TimeoutIdle => "timeout_idle",
            ErrorType::TimeoutTotal => "timeout_total",
            ErrorType::Auth => "auth",
            ErrorType::QuotaExceeded => "quota_exceeded",
            ErrorType::RateLimited => "rate_limited",
            ErrorType::Overloaded => "overloaded",
            ErrorType::BadRequest => "bad_request",
            ErrorType::ServerError => "server_error",
            ErrorType::Truncated => "truncated",
            ErrorType::EmptyResponse => "empty_response",
            ErrorType::Malformed => "malformed",
            ErrorType::ValidationFailed => "validation_failed",
        }
    }
}

impl std::fmt::Display for ErrorType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Anomalies recorded per probe; never errors by themselves (MEASUREMENT.md, "Anomaly flags").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Flag {
    /// A 2xx response without a `Content-Type` header.
    NoContentType,
    /// The last event was not terminated by a blank line before the connection ended.
    UnterminatedFinalEvent,
    /// The response had a `Content-Encoding` other than identity.
    CompressedStream,
    /// Two or more token-bearing events, all completed within 1 ms of each other.
    BurstDelivery,
}

impl Flag {
    /// Every flag (used to pre-create counter series at 0).
    pub const ALL: [Flag; 4] = [
        Flag::NoContentType,
        Flag::UnterminatedFinalEvent,
        Flag::CompressedStream,
        Flag::BurstDelivery,
    ];

    /// The label value, e.g. `burst_delivery`.
    pub fn as_str(self) -> &'static str {
        match self {
            Flag::NoContentType => "no_content_type",
            Flag::UnterminatedFinalEvent => "unterminated_final_event",
            Flag::CompressedStream => "compressed_stream",
            Flag::BurstDelivery => "burst_delivery",
        }
    }
}

/// Classifies an in-stream error (SSE `event: error`, a top-level `error` object, llama.cpp's
/// `error:` line): `overloaded` when the type says so, `bad_request` for a 4xx code, else
/// `server_error` (5xx, non-numeric or absent code).
pub fn classify_stream_error(e: &StreamError) -> ErrorType {
    if e.is_overloaded() {
        ErrorType::Overloaded
    } else if e.code.is_some_and(|c| (400..500).contains(&c)) {
        ErrorType::BadRequest
    } else {
        ErrorType::ServerError
    }
}

/// The longest wait honoured from a `Retry-After` header (one day): larger values are capped.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(86_400);

/// Words in a 429 body that mean the quota or credit is exhausted, not a transient limit.
const QUOTA_MARKERS: [&str; 6] = [
    "insufficient_quota",
    "quota_exceeded",
    "exceeded your current quota",
    "billing_hard_limit",
    "credit balance is too low",
    "insufficient_credits",
];

/// The response head facts that classification needs; header names are lower-case.
#[derive(Debug, Clone, Default)]
pub struct Head<'a> {
    /// HTTP status code.
    pub status: u16,
    /// Header (name, value) pairs, names lower-case.
    pub headers: Vec<(&'a str, &'a str)>,
}

impl Head<'_> {
    /// First value of a header (name given lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    }

    /// True when a proxy, not the target, produced this answer (`Proxy-Status`, `X-Squid-Error`).
    pub fn from_proxy(&self) -> bool {
        self.header("proxy-status").is_some() || self.header("x-squid-error").is_some()
    }

    /// The wait a 429/503 asks for: `retry-after-ms` preferred, else `Retry-After` as seconds or an
    /// HTTP date (relative to `now`). Capped at [`MAX_RETRY_AFTER`]; negative, NaN or unparsable
    /// values are ignored.
    pub fn retry_after(&self, now: SystemTime) -> Option<Duration> {
        let secs = |v: f64| {
            (v.is_finite() && v >= 0.0)
                .then(|| Duration::from_secs_f64(v.min(MAX_RETRY_AFTER.as_secs_f64())))
        };
        if let Some(d) = self
            .header("retry-after-ms")
            .and_then(|v| v.trim().parse::<f64>().ok())
            .and_then(|ms| secs(ms / 1000.0))
        {
            return Some(d);
        }
        let v = self.header("retry-after")?.trim();
        if let Ok(s) = v.parse::<f64>() {
            return secs(s);
        }
        let at = httpdate::parse_http_date(v).ok()?;
        Some(
            at.duration_since(now)
                .unwrap_or(Duration::ZERO)
                .min(MAX_RETRY_AFTER),
        )
    }
}

/// Classifies a non-2xx response (or a 2xx that is an HTML page / a proxy's answer) from its head
/// and the first part of its body. Returns `None` for a 2xx that should be read as a stream.
pub fn classify_response(head: &Head<'_>, body: &str) -> Option<ErrorType> {
    let s = head.status;
    let html = head
        .header("content-type")
        .is_some_and(|ct| ct.to_ascii_lowercase().contains("text/html"));
    if s == 407 || head.from_proxy() {
        return Some(ErrorType::Proxy);
    }
    if (200..300).contains(&s) {
        return html.then_some(ErrorType::ServerError);
    }
    let err = StreamError::from_payload(body);
    Some(match s {
        401 | 403 => ErrorType::Auth,
        429 => {
            let lower = body.to_ascii_lowercase();
            if QUOTA_MARKERS.iter().any(|m| lower.contains(m)) {
                ErrorType::QuotaExceeded
            } else {
                ErrorType::RateLimited
            }
        }
        529 => ErrorType::Overloaded,
        _ if err.is_overloaded() => ErrorType::Overloaded,
        400..=499 => ErrorType::BadRequest,
        // 5xx, and anything else that is neither 2xx nor 4xx (1xx/3xx are not followed: a probe
        // sends exactly one request).
        _ => ErrorType::ServerError,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(status: u16, headers: &[(&'static str, &'static str)]) -> Head<'static> {
        Head {
            status,
            headers: headers.to_vec(),
        }
    }

    #[test]
    fn precedence_is_declaration_order() {
        assert!(ErrorType::Proxy < ErrorType::Auth);
        assert!(ErrorType::ServerError < ErrorType::Truncated);
        assert!(ErrorType::Truncated < ErrorType::EmptyResponse);
        let mut sorted = ErrorType::ALL;
        sorted.sort();
        assert_eq!(sorted, ErrorType::ALL);
    }

    #[test]
    fn http_statuses() {
        assert_eq!(classify_response(&head(200, &[]), ""), None);
        assert_eq!(
            classify_response(&head(200, &[("content-type", "text/html")]), "<html>"),
            Some(ErrorType::ServerError)
        );
        assert_eq!(
            classify_response(&head(401, &[]), ""),
            Some(ErrorType::Auth)
        );
        assert_eq!(
            classify_response(&head(403, &[]), ""),
            Some(ErrorType::Auth)
        );
        assert_eq!(
            classify_response(&head(403, &[("x-squid-error", "ERR_ACCESS_DENIED 0")]), ""),
            Some(ErrorType::Proxy)
        );
        assert_eq!(
            classify_response(&head(407, &[]), ""),
            Some(ErrorType::Proxy)
        );
        assert_eq!(
            classify_response(
                &head(429, &[]),
                r#"{"error":{"code":"insufficient_quota"}}"#
            ),
            Some(ErrorType::QuotaExceeded)
        );
        assert_eq!(
            classify_response(&head(429, &[]), r#"{"error":{"type":"rate_limit_error"}}"#),
            Some(ErrorType::RateLimited)
        );
        assert_eq!(
            classify_response(&head(529, &[]), ""),
            Some(ErrorType::Overloaded)
        );
        assert_eq!(
            classify_response(&head(503, &[]), r#"{"error":{"type":"overloaded_error"}}"#),
            Some(ErrorType::Overloaded)
        );
        assert_eq!(
            classify_response(&head(404, &[]), ""),
            Some(ErrorType::BadRequest)
        );
        assert_eq!(
            classify_response(&head(502, &[]), "<html>"),
            Some(ErrorType::ServerError)
        );
        assert_eq!(
            classify_response(&head(302, &[]), ""),
            Some(ErrorType::ServerError)
        );
    }

    #[test]
    fn in_stream_errors() {
        let e = |code: Option<u16>, kind: Option<&str>| StreamError {
            code,
            kind: kind.map(str::to_owned),
            ..StreamError::default()
        };
        assert_eq!(
            classify_stream_error(&e(Some(400), None)),
            ErrorType::BadRequest
        );
        assert_eq!(
            classify_stream_error(&e(Some(500), None)),
            ErrorType::ServerError
        );
        assert_eq!(
            classify_stream_error(&e(None, None)),
            ErrorType::ServerError
        );
        assert_eq!(
            classify_stream_error(&e(None, Some("overloaded_error"))),
            ErrorType::Overloaded
        );
    }

    #[test]
    fn retry_after_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let h = head(429, &[("retry-after", "7"), ("retry-after-ms", "6500")]);
        assert_eq!(h.retry_after(now), Some(Duration::from_millis(6500)));
        let h = head(429, &[("retry-after", "7")]);
        assert_eq!(h.retry_after(now), Some(Duration::from_secs(7)));
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        let h = Head {
            status: 429,
            headers: vec![("retry-after", date.as_str())],
        };
        assert_eq!(h.retry_after(now), Some(Duration::from_secs(30)));
        assert_eq!(head(429, &[("retry-after", "soon")]).retry_after(now), None);
        assert_eq!(head(429, &[("retry-after", "-1")]).retry_after(now), None);
        assert_eq!(head(429, &[("retry-after", "NaN")]).retry_after(now), None);
        assert_eq!(
            head(429, &[("retry-after", "99999999999999999999")]).retry_after(now),
            Some(MAX_RETRY_AFTER)
        );
        assert_eq!(
            head(429, &[("retry-after-ms", "1.5e30")]).retry_after(now),
            Some(MAX_RETRY_AFTER)
        );
    }
}
