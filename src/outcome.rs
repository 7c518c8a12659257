//! Outcome vocabulary: error types, anomaly flags, and the rules that classify a failure from what
//! the server sent: an HTTP head and its body, a 2xx body that is not an event stream (ruling 1),
//! an error object (rulings 3 and 13). A failure before any response is the transport's to name
//! (`transport::classify_transport`). docs/measurement.md, "Success, and the one error type of a
//! failure", and "Anomaly flags". Everything here is synchronous and knows no HTTP library.

use crate::protocol::{StreamError, error_object};
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime};

/// Why a probe failed. Declaration order is docs/measurement.md's precedence: when several apply, the
/// smallest (first) wins, so `Ord` is the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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
    /// Another model answered than the one asked for (after the aliasing rule), on a target
    /// whose `model_mismatch: fail` makes that a failure (else it is the `model_mismatch` flag).
    ModelMismatch,
    /// The configured content check failed.
    ValidationFailed,
}

impl ErrorType {
    /// Every error type, in precedence order (used to pre-create counter series at 0).
    pub const ALL: [ErrorType; 18] = [
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
        ErrorType::ModelMismatch,
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
            ErrorType::ModelMismatch => "model_mismatch",
            ErrorType::ValidationFailed => "validation_failed",
        }
    }
}

impl std::fmt::Display for ErrorType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Anomalies recorded per probe; never errors by themselves (docs/measurement.md, "Anomaly flags").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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
    /// The server counted an input length off the requested one by more than 2% or 4 tokens
    /// (`workload::input_length_off`).
    InputLengthOff,
    /// Another probe of the same target was in flight during this one (`serve` with several jobs
    /// on one server): its TTFT may hold the wait behind the other's prefill.
    ConcurrentProbe,
    /// The first probe of its target after the target's `cold_after` without one (`serve`): a
    /// server that idled may answer it slower (a cold engine), not load.
    ColdStart,
    /// The answer named another model than the one asked for, after the aliasing every vendor
    /// does (`measure::answered::same_model`): a dated suffix, a provider prefix, the target's
    /// `model_aliases:`.
    ModelMismatch,
    /// The answer's usage is off what was streamed (or the prompt's known input length) by more
    /// than the target's tolerance (`measure::answered::beyond`): the server bills other tokens
    /// than it sent.
    UsageMismatch,
    /// A deterministic prompt's answer changed (`drift: true`): another hash than the last
    /// answer's.
    AnswerDrift,
}

impl Flag {
    /// Every flag (used to pre-create counter series at 0).
    pub const ALL: [Flag; 10] = [
        Flag::NoContentType,
        Flag::UnterminatedFinalEvent,
        Flag::CompressedStream,
        Flag::BurstDelivery,
        Flag::InputLengthOff,
        Flag::ConcurrentProbe,
        Flag::ColdStart,
        Flag::ModelMismatch,
        Flag::UsageMismatch,
        Flag::AnswerDrift,
    ];

    /// The label value, e.g. `burst_delivery`.
    pub fn as_str(self) -> &'static str {
        match self {
            Flag::NoContentType => "no_content_type",
            Flag::UnterminatedFinalEvent => "unterminated_final_event",
            Flag::CompressedStream => "compressed_stream",
            Flag::BurstDelivery => "burst_delivery",
            Flag::InputLengthOff => "input_length_off",
            Flag::ConcurrentProbe => "concurrent_probe",
            Flag::ColdStart => "cold_start",
            Flag::ModelMismatch => "model_mismatch",
            Flag::UsageMismatch => "usage_mismatch",
            Flag::AnswerDrift => "answer_drift",
        }
    }
}

/// Classifies an error object: an in-stream error (SSE `event: error`, a top-level `error` object,
/// llama.cpp's `error:` line) or a 2xx JSON error body (docs/measurement.md ruling 3). A numeric
/// code decides first; else the first known name in `error.type`, then `error.code`; else
/// `server_error`. A type that says overloaded wins over `bad_request` and `server_error`, which
/// come after `overloaded` in the order of error types.
pub fn classify_error_object(e: &StreamError) -> ErrorType {
    let kind = match (e.code, &e.tgi_type) {
        (Some(code), _) => by_status(code, e),
        (None, Some(tgi)) => by_tgi_type(tgi),
        (None, None) => e
            .names()
            .find_map(by_name)
            .unwrap_or(ErrorType::ServerError),
    };
    match kind {
        ErrorType::BadRequest | ErrorType::ServerError if e.is_overloaded() => {
            ErrorType::Overloaded
        }
        ErrorType::QuotaExceeded if e.short_window => ErrorType::RateLimited,
        k => k,
    }
}

/// The type a status code gives an error object (ruling 3).
fn by_status(code: u16, e: &StreamError) -> ErrorType {
    match code {
        401 | 403 => ErrorType::Auth,
        402 => ErrorType::QuotaExceeded, // ruling 19
        429 if spent_budget(e) => ErrorType::QuotaExceeded,
        429 => ErrorType::RateLimited,
        529 => ErrorType::Overloaded,
        400..=499 => ErrorType::BadRequest,
        _ => ErrorType::ServerError,
    }
}

/// Ruling 27: Text Generation Inference's `error_type` beside a string `error`.
fn by_tgi_type(name: &str) -> ErrorType {
    match name.trim().to_ascii_lowercase().as_str() {
        "validation" => ErrorType::BadRequest,
        "overloaded" => ErrorType::Overloaded,
        _ => ErrorType::ServerError,
    }
}

/// Ruling 3's table of known type and code names.
fn by_name(name: &str) -> Option<ErrorType> {
    let n = name.trim().to_ascii_lowercase();
    Some(match n.as_str() {
        "authentication_error" | "permission_error" | "invalid_api_key" => ErrorType::Auth,
        "insufficient_quota" | "quota_exceeded" => ErrorType::QuotaExceeded,
        "rate_limit_error" | "rate_limit_exceeded" | "rate_limited" => ErrorType::RateLimited,
        _ if n.contains("overloaded") || n.contains("capacity_exceeded") => ErrorType::Overloaded,
        _ if n.starts_with("invalid_request") => ErrorType::BadRequest,
        "not_found_error" | "context_length_exceeded" | "model_not_found" | "request_too_large" => {
            ErrorType::BadRequest
        }
        "api_error" | "server_error" | "internal_error" => ErrorType::ServerError,
        _ => return None,
    })
}

/// Ruling 13: a 429 means a spent budget (`quota_exceeded`) only when its names or message say a
/// quota, credit or billing limit is exhausted that does not come back within minutes, and nothing
/// in it says the quota is per second or per minute.
fn spent_budget(e: &StreamError) -> bool {
    if e.short_window {
        return false;
    }
    let text: Vec<String> = e
        .names()
        .chain(e.message.as_deref())
        .map(str::to_ascii_lowercase)
        .collect();
    let says = |words: &[&str]| text.iter().any(|t| words.iter().any(|w| t.contains(w)));
    if says(&SHORT_WINDOW_MARKERS) {
        return false;
    }
    e.long_window || says(&QUOTA_MARKERS)
}

/// The longest wait honoured from a `Retry-After` header (one day): larger values are capped.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(86_400);

/// Words in a 429's names or message that mean a quota, credit or billing budget is spent.
const QUOTA_MARKERS: [&str; 10] = [
    "insufficient_quota",
    "quota_exceeded",
    "exceeded your current quota",
    "billing",
    "credit balance is too low",
    "insufficient_credits",
    "daily",
    "per day",
    "monthly",
    "per month",
];

/// Words that say a quota is per second or per minute: a rate limit (ruling 13).
const SHORT_WINDOW_MARKERS: [&str; 6] = [
    "per minute",
    "perminute",
    "per second",
    "persecond",
    "per-minute",
    "per-second",
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
    /// HTTP date (relative to `now`), else LiteLLM's `llm_provider-retry-after` (the provider's
    /// `Retry-After` passed on by the gateway), read the same way. Capped at
    /// [`MAX_RETRY_AFTER`]; negative, NaN or unparsable values are ignored.
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
        let v = self
            .header("retry-after")
            .or_else(|| self.header("llm_provider-retry-after"))?
            .trim();
        if let Some(s) = decimal(v) {
            return Some(s.min(MAX_RETRY_AFTER));
        }
        // Ruling 16: a date is that date minus the wall clock at the head, clamped at 0.
        let at = httpdate::parse_http_date(v).ok()?;
        Some(
            at.duration_since(now)
                .unwrap_or(Duration::ZERO)
                .min(MAX_RETRY_AFTER),
        )
    }
}

/// Ruling 16: a non-negative decimal number as written (`7`, `1.5`, `0.493`), exactly (digits past
/// the nanosecond are dropped); anything else (a sign, an exponent, `inf`) is not one.
fn decimal(v: &str) -> Option<Duration> {
    let v = v.trim();
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    let digits = |s: &str| s.bytes().all(|c| c.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) || (v.contains('.') && frac.is_empty()) {
        return None;
    }
    let secs = int.parse::<u64>().unwrap_or(u64::MAX);
    let nanos = format!("{:0<9}", &frac[..frac.len().min(9)])
        .parse::<u32>()
        .ok()?;
    Some(Duration::new(secs, nanos))
}

/// Classifies a response from its head and (the first part of) its body: `None` for a 2xx, whose
/// body is read as a stream and judged from its bytes (ruling 1). A non-2xx head decides the type
/// whatever the body does (ruling 5); the body only tells a spent quota from a rate limit (a 429,
/// ruling 13) and an overloaded server from another failure. 3xx is `bad_request` (ruling 4).
pub fn classify_response(head: &Head<'_>, body: &str) -> Option<ErrorType> {
    classify_head(head, &StreamError::from_payload(body))
}

/// [`classify_response`] with the body already read as an error object.
pub fn classify_head(head: &Head<'_>, err: &StreamError) -> Option<ErrorType> {
    let s = head.status;
    if s == 407 || head.from_proxy() {
        return Some(ErrorType::Proxy);
    }
    if (200..300).contains(&s) {
        return None;
    }
    Some(match s {
        300..=399 => ErrorType::BadRequest,
        401 | 403 => ErrorType::Auth,
        402 => ErrorType::QuotaExceeded, // ruling 19
        429 if spent_budget(err) => ErrorType::QuotaExceeded,
        429 => ErrorType::RateLimited,
        529 => ErrorType::Overloaded,
        _ if err.is_overloaded() => ErrorType::Overloaded,
        400..=499 => ErrorType::BadRequest,
        // 5xx, and 1xx or unknown codes (a probe sends exactly one request).
        _ => ErrorType::ServerError,
    })
}

/// The SSE field names a line may start with (`name:` or the bare name), llama.cpp's `error`
/// included (docs/measurement.md, "In-stream errors").
const SSE_FIELDS: [&str; 5] = ["data", "event", "id", "retry", "error"];

/// Whether one line (without its line end) is blank, a comment or an SSE field line.
fn is_sse_line(line: &str) -> bool {
    let name = line.split(':').next().unwrap_or("");
    line.trim().is_empty()
        || line.starts_with(':')
        || (line.contains(':') && SSE_FIELDS.contains(&name))
        || SSE_FIELDS.contains(&line)
}

/// Ruling 15: whether a 2xx body is an event stream, judged from its first line that is neither
/// blank nor a comment: `Some(true)` when that line is an SSE field line, `Some(false)` when it is
/// not (the body is then judged whole at its end, whatever follows), `None` while the bytes so far
/// cannot tell. `ended`: the body has ended, so its last line is complete.
pub fn starts_as_event_stream(prefix: &[u8], ended: bool) -> Option<bool> {
    const BOM: &[u8] = b"\xEF\xBB\xBF";
    if !ended && !prefix.is_empty() && prefix.len() < BOM.len() && BOM.starts_with(prefix) {
        return None; // ruling 25: a byte-order mark still arriving
    }
    let prefix = prefix.strip_prefix(BOM).unwrap_or(prefix);
    let mut rest = prefix;
    loop {
        let (line, complete, next) = match memchr::memchr2(b'\n', b'\r', rest) {
            Some(i) => (&rest[..i], true, &rest[i + 1..]),
            None => (rest, ended, &rest[rest.len()..]),
        };
        let text = String::from_utf8_lossy(line);
        if complete && (text.trim().is_empty() || text.starts_with(':')) {
            if next.is_empty() {
                return ended.then_some(true);
            }
            rest = next;
            continue;
        }
        if text.starts_with(':') {
            return None; // a comment still arriving
        }
        if let Some((name, _)) = text.split_once(':') {
            return Some(SSE_FIELDS.contains(&name));
        }
        if complete {
            return Some(SSE_FIELDS.contains(&text.as_ref()));
        }
        // No colon yet: undecided while the line may still become a field's name.
        let may_be_a_name = SSE_FIELDS.iter().any(|f| f.starts_with(text.as_ref()));
        return (!may_be_a_name).then_some(false);
    }
}

/// Ruling 1: a 2xx body that yielded no event is an event stream only when every line is blank, a
/// comment or an SSE field (`data`, `event`, `id`, `retry`, and llama.cpp's `error`). Otherwise it
/// is judged whole (ruling 15: also when events would follow its first line): a JSON error object
/// by ruling 3 (the first JSON value of the body: a relay may glue `data: [DONE]` after it), an
/// HTML page `server_error`, anything else (a whole non-streamed answer, say) `malformed`. `None`
/// when it is an (empty) event stream.
pub fn judge_non_event_stream(body: &[u8]) -> Option<(ErrorType, String)> {
    let text = String::from_utf8_lossy(body);
    let text = text.trim_start_matches('\u{feff}');
    if text.split(['\n', '\r']).all(is_sse_line) {
        return None;
    }
    let trimmed = text.trim_start();
    let first_value = serde_json::Deserializer::from_str(trimmed)
        .into_iter::<serde_json::Value>()
        .next();
    if let Some(Ok(v)) = first_value
        && let Some(err) = error_object(&v)
    {
        return Some((
            classify_error_object(&err),
            format!(
                "HTTP 2xx with an error object instead of an event stream: {}",
                err.summary()
            ),
        ));
    }
    let lower = trimmed
        .get(..trimmed.len().min(1024))
        .unwrap_or("")
        .to_ascii_lowercase();
    if lower.starts_with("<!doctype html") || lower.starts_with("<html") || lower.contains("<html")
    {
        let title = html_title(trimmed).unwrap_or_default();
        return Some((
            ErrorType::ServerError,
            format!("HTTP 2xx with an HTML page instead of an event stream {title:?}"),
        ));
    }
    let what = if trimmed.starts_with('{') {
        "a JSON body (a whole answer? does the server support \"stream\": true?)"
    } else {
        "a body that is not an event stream"
    };
    Some((ErrorType::Malformed, format!("HTTP 2xx with {what}")))
}

/// A non-streamed 2xx body (`"stream": false`) judged before it is read as the protocol's answer,
/// with ruling 1's types: nothing but whitespace is `empty_response`, an HTML page
/// `server_error`, an event stream or anything else that cannot be JSON `malformed`. `None` when
/// it may be JSON: the protocol reads it (an error object by ruling 3; JSON without an answer is
/// `malformed`).
pub fn judge_non_answer(body: &str) -> Option<(ErrorType, String)> {
    let trimmed = body.trim_start_matches('\u{feff}').trim();
    if trimmed.is_empty() {
        return Some((
            ErrorType::EmptyResponse,
            "HTTP 2xx with an empty body instead of an answer".into(),
        ));
    }
    if trimmed.starts_with(['{', '[']) {
        return None;
    }
    let lower = trimmed
        .get(..trimmed.len().min(1024))
        .unwrap_or("")
        .to_ascii_lowercase();
    if lower.starts_with("<!doctype html") || lower.contains("<html") {
        let title = html_title(trimmed).unwrap_or_default();
        return Some((
            ErrorType::ServerError,
            format!("HTTP 2xx with an HTML page instead of an answer {title:?}"),
        ));
    }
    let what = if judge_non_event_stream(trimmed.as_bytes()).is_none()
        || ["data:", "event:"].iter().any(|p| lower.starts_with(p))
    {
        "an event stream instead of a whole answer (does the server ignore \"stream\": false?)"
    } else {
        "a body that is not JSON"
    };
    Some((ErrorType::Malformed, format!("HTTP 2xx with {what}")))
}

/// The `<title>` of an HTML page, if any.
pub(crate) fn html_title(s: &str) -> Option<String> {
    let lower = s.to_ascii_lowercase();
    let a = lower.find("<title>")? + 7;
    let b = lower[a..].find("</title>")? + a;
    s.get(a..b).map(|t| t.trim().to_owned())
}

/// `e: cause: cause` (no part repeated).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let c_s = c.to_string();
        if !s.contains(&c_s) {
            s.push_str(": ");
            s.push_str(&c_s);
        }
        src = c.source();
    }
    s
}

/// Words a server's refusal uses when a request's input does not fit the model's context
/// (lower case): OpenAI's code, vLLM's and SGLang's messages, llama.cpp's error type and
/// message, Anthropic's, TGI's validation.
const CONTEXT_OVERFLOW_MARKERS: [&str; 10] = [
    "context_length_exceeded",
    "exceed_context_size",
    "exceeds the available context size",
    "maximum context length",
    "context length",
    "context window",
    "maximum model length",
    "prompt is too long",
    "input is too long",
    "`inputs` tokens + `max_new_tokens` must be",
];

/// True when a failure says the request overflowed the model's context: a `bad_request` (or a
/// `server_error`, as older llama.cpp answered one) whose detail carries one of
/// [`CONTEXT_OVERFLOW_MARKERS`]. Such a failure is the workload's size, not the server's load
/// (bench counts a session that met one apart).
pub fn context_overflow(error_type: Option<ErrorType>, detail: Option<&str>) -> bool {
    let Some(ErrorType::BadRequest | ErrorType::ServerError) = error_type else {
        return false;
    };
    let Some(d) = detail else { return false };
    let d = d.to_ascii_lowercase();
    CONTEXT_OVERFLOW_MARKERS.iter().any(|m| d.contains(m))
}

#[cfg(test)]
mod tests {

    /// The refusals of a request too long for the model's context, as servers word them, and
    /// what is not one.
    #[test]
    fn a_context_overflow_is_told_by_its_words() {
        let bad = Some(ErrorType::BadRequest);
        for d in [
            "HTTP 400: This model's maximum context length is 4096 tokens. However, you requested 5000 tokens",
            "HTTP 400 (context_length_exceeded): too long",
            "HTTP 400: the request exceeds the available context size, try increasing it (exceed_context_size_error)",
            "HTTP 400: The input (5000 tokens) is longer than the model's context length (4096 tokens).",
            "HTTP 400: prompt is too long: 210000 tokens > 200000 maximum",
            "HTTP 422: Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096",
        ] {
            assert!(context_overflow(bad, Some(d)), "{d}");
        }
        assert!(context_overflow(
            Some(ErrorType::ServerError),
            Some("the request exceeds the available context size")
        ));
        assert!(!context_overflow(
            bad,
            Some("HTTP 400: unknown field 'tools'")
        ));
        assert!(!context_overflow(bad, None));
        assert!(!context_overflow(None, Some("maximum context length")));
        assert!(!context_overflow(
            Some(ErrorType::RateLimited),
            Some("too many tokens in the context window per minute")
        ));
    }
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
        // Ruling 1: a 2xx is judged from its bytes, whatever its Content-Type says.
        assert_eq!(
            classify_response(&head(200, &[("content-type", "text/html")]), "<html>"),
            None
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
        // Ruling 4: a redirect means a wrong base URL.
        for status in [301, 302, 307, 308] {
            assert_eq!(
                classify_response(&head(status, &[("location", "/v1/x/")]), ""),
                Some(ErrorType::BadRequest)
            );
        }
    }

    /// Ruling 13: a spent budget is `quota_exceeded`; a per-second or per-minute quota, or any
    /// body carrying a `RetryInfo`, is `rate_limited` whatever its message says.
    #[test]
    fn a_429_is_a_spent_budget_only_when_it_says_so() {
        let q = |body: &str| classify_response(&head(429, &[]), body);
        for spent in [
            r#"{"error":{"code":"insufficient_quota","message":"You exceeded your current quota"}}"#,
            r#"{"error":{"type":"insufficient_quota"}}"#,
            r#"{"error":{"message":"Your credit balance is too low"}}"#,
            r#"{"error":{"code":429,"message":"Daily request quota exhausted"}}"#,
            "monthly token budget exhausted",
        ] {
            assert_eq!(q(spent), Some(ErrorType::QuotaExceeded), "{spent}");
        }
        let google_per_minute = r#"{"error":{"code":429,"message":"Quota exceeded for quota metric 'Generate Content API requests' and limit 'GenerateContent request limit per minute'","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"27s"}]}}"#;
        let retry_info_only = r#"{"error":{"code":429,"message":"quota_exceeded","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1.5s"}]}}"#;
        for limited in [
            google_per_minute,
            retry_info_only,
            r#"{"error":{"type":"rate_limit_error","message":"rate limit of 50 requests per minute"}}"#,
            r#"{"error":{"message":"Too many requests"}}"#,
            "",
        ] {
            assert_eq!(q(limited), Some(ErrorType::RateLimited), "{limited}");
        }
        let e = StreamError::from_payload(google_per_minute);
        assert!(e.short_window);
        assert_eq!(e.retry_delay, Some(Duration::from_secs(27)));
        assert_eq!(e.status_text.as_deref(), Some("RESOURCE_EXHAUSTED"));
        assert_eq!(
            StreamError::from_payload(retry_info_only).retry_delay,
            Some(Duration::from_millis(1500))
        );
    }

    /// Ruling 3: numeric code first (digit strings count), then the type name, then the code name,
    /// the same for every protocol.
    #[test]
    fn error_objects() {
        let c = |json: &str| classify_error_object(&StreamError::from_payload(json));
        let table = [
            (
                r#"{"error":{"code":400,"message":"bad"}}"#,
                ErrorType::BadRequest,
            ),
            (r#"{"error":{"code":"429"}}"#, ErrorType::RateLimited),
            (
                r#"{"error":{"code":"429","type":"insufficient_quota"}}"#,
                ErrorType::QuotaExceeded,
            ),
            (r#"{"error":{"code":401}}"#, ErrorType::Auth),
            (r#"{"error":{"code":"403"}}"#, ErrorType::Auth),
            (r#"{"error":{"status":529}}"#, ErrorType::Overloaded),
            (r#"{"error":{"code":500}}"#, ErrorType::ServerError),
            (
                r#"{"error":{"code":503,"type":"overloaded_error"}}"#,
                ErrorType::Overloaded,
            ),
            (
                r#"{"code":404,"error":{"message":"no such model"}}"#,
                ErrorType::BadRequest,
            ),
            (r#"{"error":"boom","status":"502"}"#, ErrorType::ServerError),
            // No numeric code: the type name, then the code name.
            (
                r#"{"error":{"type":"invalid_request_error"}}"#,
                ErrorType::BadRequest,
            ),
            (
                r#"{"error":{"code":"context_length_exceeded"}}"#,
                ErrorType::BadRequest,
            ),
            (
                r#"{"error":{"type":"error","code":"model_not_found"}}"#,
                ErrorType::BadRequest,
            ),
            (
                r#"{"type":"error","error":{"type":"not_found_error"}}"#,
                ErrorType::BadRequest,
            ),
            (
                r#"{"error":{"type":"request_too_large"}}"#,
                ErrorType::BadRequest,
            ),
            (
                r#"{"error":{"type":"authentication_error"}}"#,
                ErrorType::Auth,
            ),
            (r#"{"error":{"type":"permission_error"}}"#, ErrorType::Auth),
            (r#"{"error":{"code":"invalid_api_key"}}"#, ErrorType::Auth),
            (
                r#"{"error":{"code":"insufficient_quota"}}"#,
                ErrorType::QuotaExceeded,
            ),
            (
                r#"{"error":{"type":"quota_exceeded"}}"#,
                ErrorType::QuotaExceeded,
            ),
            (
                r#"{"error":{"type":"rate_limit_error"}}"#,
                ErrorType::RateLimited,
            ),
            (
                r#"{"error":{"code":"rate_limit_exceeded"}}"#,
                ErrorType::RateLimited,
            ),
            (
                r#"{"error":{"type":"overloaded_error"}}"#,
                ErrorType::Overloaded,
            ),
            (
                r#"{"error":{"type":"engine_overloaded"}}"#,
                ErrorType::Overloaded,
            ),
            (r#"{"error":{"type":"api_error"}}"#, ErrorType::ServerError),
            (
                r#"{"error":{"type":"server_error"}}"#,
                ErrorType::ServerError,
            ),
            (
                r#"{"error":{"code":"internal_error"}}"#,
                ErrorType::ServerError,
            ),
            (
                r#"{"error":{"type":"billing_error"}}"#,
                ErrorType::ServerError,
            ),
            (
                r#"{"error":{"message":"no code at all"}}"#,
                ErrorType::ServerError,
            ),
            ("plain text", ErrorType::ServerError),
            // A per-minute quota is a rate limit even when named as a quota (ruling 13).
            (
                r#"{"error":{"type":"quota_exceeded","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"5s"}]}}"#,
                ErrorType::RateLimited,
            ),
        ];
        for (json, want) in table {
            assert_eq!(c(json), want, "{json}");
        }
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
        // Ruling 16: decimals as written; other spellings of a number are no wait.
        let d = |v: &str| {
            Head {
                status: 429,
                headers: vec![("retry-after", v)],
            }
            .retry_after(now)
        };
        assert_eq!(d("1.5"), Some(Duration::from_millis(1500)));
        assert_eq!(d("0.493"), Some(Duration::from_millis(493)));
        assert_eq!(d(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(d("0.0000000019"), Some(Duration::from_nanos(1)));
        for other in ["1e3", "+5", "inf", "1.", ".5", "1.5s", ""] {
            assert_eq!(d(other), None, "{other:?}");
        }
        let past = httpdate::fmt_http_date(now - Duration::from_secs(120));
        let h = Head {
            status: 429,
            headers: vec![("retry-after", past.as_str())],
        };
        assert_eq!(h.retry_after(now), Some(Duration::ZERO));
        assert_eq!(
            head(429, &[("retry-after", "99999999999999999999")]).retry_after(now),
            Some(MAX_RETRY_AFTER)
        );
        assert_eq!(
            head(429, &[("retry-after-ms", "1.5e30")]).retry_after(now),
            Some(MAX_RETRY_AFTER)
        );
        // Issue 40: LiteLLM passes the provider's wait on as `llm_provider-retry-after`, read
        // as `Retry-After` is, after `retry-after-ms` and `retry-after`.
        let litellm = |h: &[(&'static str, &'static str)]| head(429, h).retry_after(now);
        assert_eq!(
            litellm(&[("llm_provider-retry-after", "7")]),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            litellm(&[("llm_provider-retry-after", "7"), ("retry-after", "3")]),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            litellm(&[("llm_provider-retry-after", "7"), ("retry-after-ms", "250")]),
            Some(Duration::from_millis(250))
        );
        assert_eq!(litellm(&[("llm_provider-retry-after", "soon")]), None);
    }

    #[test]
    fn html_titles_and_userinfo() {
        assert_eq!(
            html_title("<html><TITLE> Oops </title>").as_deref(),
            Some("Oops")
        );
        assert_eq!(html_title("no title"), None);
    }

    /// Ruling 1: a 2xx body that yielded no event is judged whole unless it is an event stream.
    #[test]
    fn bodies_that_are_not_event_streams_are_judged_whole() {
        let kind = |b: &[u8]| judge_non_event_stream(b).map(|(k, _)| k);
        // Event streams that yielded nothing: empty_response is decided by the fold.
        for sse in [
            &b""[..],
            b"\n\n",
            b": keep-alive\r\n\r\n",
            b"event: ping\nid: 3\nretry: 100\n\n",
            b"data:\n\n",
            b"\xEF\xBB\xBF: bom then comment\n",
        ] {
            assert_eq!(kind(sse), None, "{:?}", String::from_utf8_lossy(sse));
        }
        assert_eq!(
            kind(br#"{"type":"error","error":{"type":"invalid_request_error","message":"x"}}"#),
            Some(ErrorType::BadRequest)
        );
        assert_eq!(
            kind(b"{\"error\":{\"code\":\"429\",\"message\":\"slow down\"}}\n"),
            Some(ErrorType::RateLimited)
        );
        assert_eq!(
            kind(b"<!DOCTYPE html><html><title>502 Bad Gateway</title></html>"),
            Some(ErrorType::ServerError)
        );
        assert_eq!(
            kind(br#"{"id":"resp_1","object":"response","status":"completed"}"#),
            Some(ErrorType::Malformed)
        );
        assert_eq!(kind(b"OK\n"), Some(ErrorType::Malformed));
        assert_eq!(
            kind(br#"{"error":null,"choices":[]}"#),
            Some(ErrorType::Malformed)
        );
    }

    /// Ruling 13: Google's `RESOURCE_EXHAUSTED` whose `QuotaFailure` names a daily (or monthly)
    /// quota and that carries no `RetryInfo` is a spent budget, as its `PerMinute` twin is a rate
    /// limit. Failed before: the `quotaId` was read only for `PerMinute`/`PerSecond`, so this was
    /// `rate_limited`.
    #[test]
    fn a_google_per_day_quota_failure_is_quota_exceeded() {
        let q = |id: &str| {
            let body = format!(
                r#"{{"error":{{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED","details":[{{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"{id}"}}]}}]}}}}"#
            );
            classify_response(&head(429, &[]), &body)
        };
        assert_eq!(
            q("GenerateRequestsPerDayPerProjectPerModel-FreeTier"),
            Some(ErrorType::QuotaExceeded)
        );
        assert_eq!(
            q("GenerateContentInputTokensPerMonthPerProject"),
            Some(ErrorType::QuotaExceeded)
        );
        assert_eq!(
            q("GenerateRequestsPerMinutePerProjectPerModel-FreeTier"),
            Some(ErrorType::RateLimited)
        );
    }

    #[test]
    fn a_body_is_an_event_stream_by_its_first_significant_line() {
        let start = |b: &str, ended: bool| starts_as_event_stream(b.as_bytes(), ended);
        // Ruling 15: decided by the first line that is neither blank nor a comment.
        assert_eq!(start("data: {}\n\n", false), Some(true));
        assert_eq!(start(": ping\r\n\r\nevent: x\n", false), Some(true));
        assert_eq!(start("\u{feff}id: 1\n", false), Some(true));
        assert_eq!(start("error: {\"code\":500}\n", false), Some(true));
        assert_eq!(start("retry\n", false), Some(true));
        assert_eq!(
            start("{\"id\":\"x\"}\n\ndata: [DONE]\n\n", false),
            Some(false)
        );
        assert_eq!(start("<html>", false), Some(false));
        assert_eq!(start("datum: 1\n", false), Some(false));
        // Not yet decidable: a name or a comment still arriving, or only blank lines so far.
        assert_eq!(start("da", false), None);
        assert_eq!(start("\n\n: keep", false), None);
        assert_eq!(start("\r\n", false), None);
        assert_eq!(start("", false), None);
        // At the body's end every line is complete.
        assert_eq!(start("da", true), Some(false));
        assert_eq!(start("data", true), Some(true));
        assert_eq!(start("\n: only keep-alives\n", true), Some(true));
        assert_eq!(start("", true), Some(true));
        // Ruling 25: a byte-order mark still arriving decides nothing; whole, it is dropped.
        let bytes = |b: &[u8], ended: bool| starts_as_event_stream(b, ended);
        assert_eq!(bytes(b"\xEF", false), None);
        assert_eq!(bytes(b"\xEF\xBB", false), None);
        assert_eq!(bytes(b"\xEF\xBB\xBF", false), None);
        assert_eq!(bytes(b"\xEF\xBB\xBFdata: {}\n", false), Some(true));
        assert_eq!(bytes(b"\xEF\xBBx", false), Some(false));
        assert_eq!(bytes(b"\xEF", true), Some(false));
    }

    /// Rulings 18, 19 and 27: the flat error object, HTTP 402, codes that are not HTTP statuses,
    /// TGI's `error_type`, and the names ruling 27 adds to ruling 3's table.
    #[test]
    fn error_objects_of_rulings_18_19_and_27() {
        let c = |json: &str| classify_error_object(&StreamError::from_payload(json));
        let table = [
            (
                r#"{"object":"error","message":"x","type":"BadRequestError","code":400}"#,
                ErrorType::BadRequest,
            ),
            (
                r#"{"error":{"message":"Insufficient credits","code":402}}"#,
                ErrorType::QuotaExceeded,
            ),
            (r#"{"error":{"code":"402"}}"#, ErrorType::QuotaExceeded),
            // Not HTTP statuses: the type decides.
            (
                r#"{"object":"error","type":"invalid_request_message_order","code":"3230"}"#,
                ErrorType::BadRequest,
            ),
            (
                r#"{"object":"error","type":"rate_limited","code":1300}"#,
                ErrorType::RateLimited,
            ),
            (r#"{"error":{"code":99999}}"#, ErrorType::ServerError),
            (r#"{"error":{"code":42}}"#, ErrorType::ServerError),
            (
                r#"{"error":{"type":"service_tier_capacity_exceeded"}}"#,
                ErrorType::Overloaded,
            ),
            (
                r#"{"error":{"type":"invalid_request"}}"#,
                ErrorType::BadRequest,
            ),
            // TGI: a string error and its error_type.
            (
                r#"{"error":"Input validation error","error_type":"validation"}"#,
                ErrorType::BadRequest,
            ),
            (
                r#"{"error":"Model is overloaded","error_type":"overloaded"}"#,
                ErrorType::Overloaded,
            ),
            (
                r#"{"error":"CUDA OOM","error_type":"generation"}"#,
                ErrorType::ServerError,
            ),
            // A status code still comes first.
            (
                r#"{"error":"slow down","error_type":"validation","status":429}"#,
                ErrorType::RateLimited,
            ),
        ];
        for (json, want) in table {
            assert_eq!(c(json), want, "{json}");
        }
        assert_eq!(
            classify_response(&head(402, &[]), "{}"),
            Some(ErrorType::QuotaExceeded)
        );
        assert_eq!(
            classify_response(&head(402, &[]), r#"{"error":{"type":"overloaded_error"}}"#),
            Some(ErrorType::QuotaExceeded)
        );
        // Ruling 18 for a 2xx body judged whole.
        let body = r#"{"object":"error","message":"m","code":401}"#;
        assert_eq!(
            judge_non_event_stream(body.as_bytes()).map(|(k, _)| k),
            Some(ErrorType::Auth)
        );
    }

    #[test]
    fn a_body_that_starts_as_json_is_judged_by_its_first_value() {
        let kind = |b: &str| judge_non_event_stream(b.as_bytes()).map(|(k, _)| k);
        // Ruling 15: a trailing `data: [DONE]` changes nothing.
        let whole = "{\"object\":\"chat.completion\",\"choices\":[]}\n\ndata: [DONE]\n\n";
        assert_eq!(kind(whole), Some(ErrorType::Malformed));
        let error = "{\"error\":{\"code\":429,\"message\":\"slow down\"}}\n\ndata: [DONE]\n\n";
        assert_eq!(kind(error), Some(ErrorType::RateLimited));
    }

    #[test]
    fn whole_answers_that_are_not_json_get_ruling_1s_types() {
        let kind = |b: &str| judge_non_answer(b).map(|(k, _)| k);
        assert_eq!(kind(""), Some(ErrorType::EmptyResponse));
        assert_eq!(kind(" \r\n"), Some(ErrorType::EmptyResponse));
        assert_eq!(
            kind("<!DOCTYPE html><html><title>502 Bad Gateway</title></html>"),
            Some(ErrorType::ServerError)
        );
        assert_eq!(kind("upstream connect error"), Some(ErrorType::Malformed));
        let (k, d) = judge_non_answer("data: {\"choices\":[]}\n\ndata: [DONE]\n\n").unwrap();
        assert_eq!(k, ErrorType::Malformed);
        assert!(d.contains("event stream"), "{d}");
        // JSON is the protocol's to read (an answer, an error object, or malformed).
        assert_eq!(kind("\u{feff}{\"choices\":[]}"), None);
        assert_eq!(kind("[1]"), None);
    }
}
