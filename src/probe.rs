//! One probe: send exactly one streaming request and fold what arrives into a [`ProbeResult`].
//!
//! This is the thin async I/O around the pure cores: [`crate::sse::SseDecoder`] (bytes to events),
//! [`crate::protocol`] (event meaning) and [`crate::measure::Measurement`] (the fold). Bytes are
//! timestamped with `Instant::now()` in the same task that reads them and decoded right there, with
//! no channel between arrival and timestamp. Deadlines follow docs/measurement.md: `connect` (connection
//! set-up), `first_token` (from `t0`), `idle` (no bytes after the first token) and `total`. No
//! retries, no redirects, no reconnects: one probe is one request.

use crate::config::{AuthStyle, Expect, Job, KeySource, ProxySetting, Timeouts};
use crate::measure::{Measurement, ProbeResult, Step};
use crate::outcome::{ErrorType, Flag, Head, classify_error_object, classify_response};
use crate::protocol::{Api, Message, RequestSpec, StreamError, truncate};
use crate::redact::{Redactor, effective_proxy, redact_url, redact_userinfo};
use crate::sse::SseDecoder;
use crate::transport::{ClientOptions, Transport, TransportError};
use std::error::Error as _;
use std::io::Write as _;
use std::time::{Duration, Instant, SystemTime};
use tokio::time::timeout_at;

/// How much of an error body is read for classification and the message, and how much of a 2xx
/// body that has yielded no event yet is kept to judge it whole (bytes; ruling 1 and 5).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// How much of a failure's detail (status, the server's message, ...) is shown (characters).
pub const MAX_DETAIL_CHARS: usize = 640;

/// The most body bytes one probe reads (after decompression); past it the probe fails as
/// `malformed`. Memory does not grow with the body (events are folded as they arrive); this bounds
/// the work a runaway stream can cause within `timeouts.total`.
pub const MAX_BODY_BYTES: u64 = 256 * 1024 * 1024;

/// Everything one probe needs; built from a [`Job`] or from `probe` command-line flags.
#[derive(Debug, Clone)]
pub struct ProbeSpec {
    /// Protocol.
    pub api: Api,
    /// Base URL without trailing slash; the protocol's path is appended.
    pub base_url: String,
    /// Model name sent.
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Output cap.
    pub max_tokens: Option<u32>,
    /// Ask for usage in the stream.
    pub include_usage: bool,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// Extra body fields.
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// API key source.
    pub api_key: Option<KeySource>,
    /// The header carrying the key.
    pub auth: AuthStyle,
    /// Query parameters added to the URL.
    pub query: Vec<(String, String)>,
    /// Prepend a fresh nonce to the last user message.
    pub nonce: bool,
    /// Content check.
    pub expect: Option<Expect>,
    /// Deadlines.
    pub timeouts: Timeouts,
    /// Client settings (proxy, TLS, connection reuse; connect deadline from `timeouts`).
    pub client: ClientOptions,
}

impl ProbeSpec {
    /// The spec of a configured job.
    pub fn from_job(job: &Job) -> Self {
        ProbeSpec {
            api: job.target.api,
            base_url: job.target.base_url.clone(),
            model: job.model.clone(),
            messages: job.prompt.messages.clone(),
            max_tokens: job.prompt.max_tokens,
            include_usage: job.target.include_usage,
            headers: job.target.headers.clone(),
            extra_body: job.target.extra_body.clone(),
            api_key: job.target.api_key.clone(),
            auth: job.target.auth,
            query: job.target.query.clone(),
            nonce: job.prompt.nonce,
            expect: job.prompt.expect.clone(),
            timeouts: job.timeouts,
            client: ClientOptions {
                proxy: job.target.proxy.clone(),
                tls: job.target.tls.clone(),
                connection: job.target.connection,
            },
        }
    }

    /// The full endpoint URL: `base_url` + the protocol's path + the query parameters.
    pub fn url(&self) -> String {
        let mut url = format!("{}{}", self.base_url, self.api.path());
        if !self.query.is_empty()
            && let Ok(mut u) = reqwest::Url::parse(&url)
        {
            u.query_pairs_mut().extend_pairs(self.query.iter());
            url = u.to_string();
        }
        url
    }

    /// The proxy this spec's requests go through, credentials removed; `None` when direct.
    pub fn proxy(&self) -> Option<String> {
        match &self.client.proxy {
            ProxySetting::Environment => effective_proxy(&self.url()),
            ProxySetting::Disabled => None,
            ProxySetting::Url(u) => Some(redact_userinfo(u)),
        }
    }
}

/// A fresh nonce: 16 hex digits from the standard library's randomly seeded hasher.
fn nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    format!("{:016x}", h.finish())
}

fn with_nonce(messages: &[Message]) -> Vec<Message> {
    let mut out = messages.to_vec();
    if let Some(m) = out.iter_mut().rev().find(|m| m.role == "user") {
        m.content = format!("[{}] {}", nonce(), m.content);
    }
    out
}

/// Errors building a [`Prober`].
pub type ProbeError = TransportError;

/// A prober: an instrumented HTTP client (identity encoding, no redirects; by default no pooled
/// connections, so TTFT includes what a cold user sees). Run one probe at a time per prober when
/// connection phases matter (the scheduler does).
#[derive(Debug, Clone)]
pub struct Prober {
    transport: Transport,
}

impl Prober {
    /// A prober for `spec`: its client settings, connection set-up bounded by `timeouts.connect`.
    ///
    /// # Errors
    /// [`TransportError`] when the CA file, proxy URL or TLS settings are unusable.
    pub fn new(spec: &ProbeSpec) -> Result<Self, ProbeError> {
        Ok(Prober {
            transport: Transport::new(&spec.client, spec.timeouts.connect)?,
        })
    }

    /// Runs one probe. Never panics on network data; every failure is an `error_type`.
    pub async fn run(&self, spec: &ProbeSpec) -> ProbeResult {
        let url = spec.url();
        let proxy = spec.proxy();
        let key = match spec.api_key.as_ref().map(KeySource::load).transpose() {
            Ok(k) => k,
            Err(msg) => {
                let mut m = Measurement::new(Instant::now());
                m.fail(ErrorType::Auth, m.t0(), msg);
                return m.finish();
            }
        };
        let messages = if spec.nonce {
            with_nonce(&spec.messages)
        } else {
            spec.messages.clone()
        };
        let body = spec.api.request_body(&RequestSpec {
            model: &spec.model,
            messages: &messages,
            max_tokens: spec.max_tokens,
            include_usage: spec.include_usage,
            extra_body: Some(&spec.extra_body),
        });
        let mut req = self
            .transport
            .client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .header("accept-encoding", "identity");
        if let Some(k) = &key {
            req = match spec.auth {
                AuthStyle::XApiKey => req.header("x-api-key", k.expose()),
                AuthStyle::ApiKey => req.header("api-key", k.expose()),
                AuthStyle::Bearer => req.bearer_auth(k.expose()),
            };
        }
        if spec.api == Api::AnthropicMessages
            && !spec
                .headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("anthropic-version"))
        {
            req = req.header("anthropic-version", "2023-06-01");
        }
        for (n, v) in &spec.headers {
            req = req.header(n, v);
        }
        let req = match req.body(body.to_string()).build() {
            Ok(r) => r,
            Err(e) => {
                let mut m = Measurement::new(Instant::now());
                m.fail(
                    ErrorType::BadRequest,
                    m.t0(),
                    format!("cannot build the request: {e}"),
                );
                return m.finish();
            }
        };
        self.transport.clock.reset();
        let t0 = Instant::now();
        let m = Measurement::new(t0);
        let mut r = run_request(&self.transport, req, spec, m, proxy.as_deref()).await;
        r.phases = Some(self.transport.clock.phases());
        // A server may echo the request in its error message: never pass a secret on. Redacted
        // whole, then cut for display, so no part of a secret survives at the cut.
        if let Some(d) = r.error_detail.as_mut() {
            *d = truncate(
                &Redactor::for_spec(spec, key.as_ref()).redact(d),
                MAX_DETAIL_CHARS,
            );
        }
        r
    }
}

/// The deadline that is due first, and which error type it means.
fn next_deadline(m: &Measurement, t: &Timeouts, last_byte: Instant) -> (Instant, ErrorType) {
    // Durations are validated to at most a day, but never panic on an overflow here either.
    let after = |i: Instant, d: Duration| {
        i.checked_add(d)
            .unwrap_or(i + Duration::from_secs(86_400 * 365))
    };
    let total = (after(m.t0(), t.total), ErrorType::TimeoutTotal);
    let other = if m.first_token_seen() {
        (after(last_byte, t.idle), ErrorType::TimeoutIdle)
    } else {
        (after(m.t0(), t.first_token), ErrorType::TimeoutFirstToken)
    };
    // On a tie the type listed first in docs/measurement.md wins (first_token/idle before total).
    if other.0 <= total.0 { other } else { total }
}

fn deadline_detail(kind: ErrorType, t: &Timeouts) -> String {
    let d = match kind {
        ErrorType::TimeoutFirstToken => ("first_token", t.first_token),
        ErrorType::TimeoutIdle => ("idle", t.idle),
        _ => ("total", t.total),
    };
    format!(
        "deadline timeouts.{} = {} passed",
        d.0,
        humantime::format_duration(d.1)
    )
}

async fn run_request(
    transport: &Transport,
    req: reqwest::Request,
    spec: &ProbeSpec,
    mut m: Measurement,
    proxy: Option<&str>,
) -> ProbeResult {
    let t = &spec.timeouts;
    let (deadline, kind) = next_deadline(&m, t, m.t0());
    let resp = match timeout_at(deadline.into(), transport.client.execute(req)).await {
        Err(_) => {
            m.fail(
                kind,
                deadline,
                format!("{} waiting for the response head", deadline_detail(kind, t)),
            );
            return m.finish();
        }
        Ok(Err(e)) => {
            let (kind, detail) = classify_transport(&e, proxy, transport.clock.tls_started());
            m.fail(kind, Instant::now(), detail);
            return m.finish();
        }
        Ok(Ok(r)) => r,
    };
    let t_headers = Instant::now();
    if t_headers > deadline {
        // The head was ready but arrived after the deadline (the timer and the socket raced).
        m.fail(
            kind,
            deadline,
            format!("{} waiting for the response head", deadline_detail(kind, t)),
        );
        return m.finish();
    }
    let status = resp.status().as_u16();
    m.headers(t_headers, status);
    let headers: Vec<(String, String)> = resp
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let head = Head {
        status,
        headers: headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect(),
    };
    // A non-2xx head (or a proxy's answer) decides the type (ruling 5); a 2xx body is read as a
    // stream and judged from its bytes, whatever its Content-Type says (ruling 1).
    if classify_response(&head, "").is_some() {
        return read_error_body(resp, &head, spec, m, proxy).await;
    }
    if head.header("content-type").is_none() {
        m.flag(Flag::NoContentType);
    }
    let mut inflater = match head
        .header("content-encoding")
        .map(|e| e.trim().to_ascii_lowercase())
    {
        None => Inflater::Identity,
        Some(e) if e.is_empty() || e == "identity" => Inflater::Identity,
        Some(e) => {
            m.flag(Flag::CompressedStream);
            match e.as_str() {
                "gzip" | "x-gzip" => Inflater::Gzip(flate2::write::GzDecoder::new(Vec::new())),
                "deflate" => Inflater::Deflate(flate2::write::ZlibDecoder::new(Vec::new())),
                other => {
                    m.fail(
                        ErrorType::Malformed,
                        t_headers,
                        format!("unsupported Content-Encoding {other:?}"),
                    );
                    return m.finish();
                }
            }
        }
    };
    let mut resp = resp;
    let mut dec = SseDecoder::new();
    let mut last_byte = t_headers;
    let mut body = BodyStart::default();
    loop {
        let (deadline, kind) = next_deadline(&m, t, last_byte);
        match timeout_at(deadline.into(), resp.chunk()).await {
            Err(_) => {
                m.fail(kind, deadline, deadline_detail(kind, t));
                break;
            }
            Ok(Ok(Some(bytes))) => {
                let now = Instant::now();
                if now > deadline {
                    // Bytes that arrive after a deadline do not count (timer/socket race).
                    m.fail(kind, deadline, deadline_detail(kind, t));
                    break;
                }
                last_byte = now;
                let plain = match inflater.feed(&bytes) {
                    Ok(p) => p,
                    Err(e) => {
                        m.fail(
                            ErrorType::Malformed,
                            now,
                            format!("cannot decompress the body: {e}"),
                        );
                        break;
                    }
                };
                if !body.take(&plain, &m) {
                    m.fail(
                        ErrorType::Malformed,
                        now,
                        format!("the body passed the per-probe cap of {MAX_BODY_BYTES} bytes"),
                    );
                    break;
                }
                if feed_events(&mut dec, &plain, spec.api, &mut m, now) == Step::Stop {
                    break;
                }
            }
            Ok(Ok(None)) => {
                let now = Instant::now();
                match inflater.finish() {
                    Ok(rest) => {
                        body.take(&rest, &m);
                        if feed_events(&mut dec, &rest, spec.api, &mut m, now) == Step::Continue {
                            flush_final(&mut dec, spec.api, &mut m, now);
                        }
                    }
                    Err(e) => m.fail(
                        ErrorType::Malformed,
                        now,
                        format!("cannot decompress the body: {e}"),
                    ),
                }
                m.eof(now);
                body.judge_whole(&mut m, now);
                break;
            }
            Ok(Err(e)) => {
                let now = Instant::now();
                m.eof(now);
                body.judge_whole(&mut m, now);
                if !m.proper_end() && m.events_seen() {
                    m.fail(
                        ErrorType::Truncated,
                        now,
                        format!("the stream broke: {}", error_chain(&e)),
                    );
                }
                break;
            }
        }
    }
    if let Some(exp) = &spec.expect {
        m.validate(|text, n| check_expect(exp, text, n));
    }
    m.finish()
}

/// The content check: why the answer fails it, if it does.
pub fn check_expect(exp: &Expect, text: &str, n: u64) -> Option<String> {
    if let Some(min) = exp.min_output_tokens
        && n < min
    {
        return Some(format!(
            "content check: {n} output tokens, expected at least {min}"
        ));
    }
    if let Some(re) = &exp.regex
        && !re.is_match(text)
    {
        let preview: String = text.chars().take(80).collect();
        return Some(format!(
            "content check: answer {preview:?} does not match /{}/",
            re.as_str()
        ));
    }
    None
}

/// The start of a 2xx body, kept while it has yielded no event, so that a body that is not an event
/// stream can be judged whole at its end (ruling 1); and the count of body bytes for the cap.
#[derive(Default)]
struct BodyStart {
    head: Vec<u8>,
    bytes: u64,
}

impl BodyStart {
    /// Counts `plain` and keeps it while no event was seen; false once the body passes the cap.
    fn take(&mut self, plain: &[u8], m: &Measurement) -> bool {
        self.bytes = self.bytes.saturating_add(plain.len() as u64);
        if m.events_seen() {
            self.head = Vec::new();
        } else if self.head.len() < MAX_ERROR_BODY {
            let room = MAX_ERROR_BODY - self.head.len();
            self.head.extend_from_slice(&plain[..plain.len().min(room)]);
        }
        self.bytes <= MAX_BODY_BYTES
    }

    /// At the body's end: a body that yielded no event and is not an event stream is judged whole.
    fn judge_whole(&self, m: &mut Measurement, end: Instant) {
        if m.events_seen() {
            return;
        }
        if let Some((kind, detail)) = judge_non_stream(&self.head) {
            m.fail(kind, end, detail);
        }
    }
}

/// Ruling 1: a 2xx body that yielded no event is an event stream only when every line is blank, a
/// comment or an SSE field (`data`, `event`, `id`, `retry`, and llama.cpp's `error`). Otherwise it
/// is judged whole: a JSON error object by ruling 3, an HTML page `server_error`, anything else
/// (a whole non-streamed answer, say) `malformed`. `None` when it is an (empty) event stream.
pub fn judge_non_stream(body: &[u8]) -> Option<(ErrorType, String)> {
    let text = String::from_utf8_lossy(body);
    let text = text.trim_start_matches('\u{feff}');
    let is_sse_line = |line: &str| {
        let name = line.split(':').next().unwrap_or("");
        line.trim().is_empty()
            || line.starts_with(':')
            || (line.contains(':') && ["data", "event", "id", "retry", "error"].contains(&name))
            || ["data", "event", "id", "retry"].contains(&line)
    };
    if text.split(['\n', '\r']).all(is_sse_line) {
        return None;
    }
    let trimmed = text.trim_start();
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(trimmed)
        && v.get("error").is_some_and(|e| !e.is_null())
    {
        let err = StreamError::from_json(&v);
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

/// Decodes bytes into events and folds each; stops at the first `Stop`.
fn feed_events(
    dec: &mut SseDecoder,
    bytes: &[u8],
    api: Api,
    m: &mut Measurement,
    t: Instant,
) -> Step {
    if bytes.is_empty() {
        return Step::Continue;
    }
    match dec.feed(bytes) {
        Ok(events) => {
            for ev in events {
                if fold_event(&ev, api, m, t) == Step::Stop {
                    return Step::Stop;
                }
            }
            Step::Continue
        }
        Err(e) => {
            m.fail(ErrorType::Malformed, t, e.to_string());
            Step::Stop
        }
    }
}

fn fold_event(ev: &crate::sse::SseEvent, api: Api, m: &mut Measurement, t: Instant) -> Step {
    match api.interpret(ev) {
        Ok(meaning) => m.event(t, &meaning),
        Err(e) => {
            m.fail(ErrorType::Malformed, t, e.to_string());
            Step::Continue
        }
    }
}

/// At EOF: an unterminated final event is still dispatched, and flagged (docs/measurement.md).
fn flush_final(dec: &mut SseDecoder, api: Api, m: &mut Measurement, t: Instant) {
    match dec.finish() {
        Ok(Some(ev)) => {
            m.flag(Flag::UnterminatedFinalEvent);
            fold_event(&ev, api, m, t);
        }
        Ok(None) => {}
        Err(e) => m.fail(ErrorType::Malformed, t, e.to_string()),
    }
}

/// Reads (a bounded part of) a non-2xx answer, or a proxy's, for its message: the head has decided
/// the type (ruling 5). The read is bounded by [`MAX_ERROR_BODY`] and the first-token deadline; the
/// failure instant is the end of that read.
async fn read_error_body(
    mut resp: reqwest::Response,
    head: &Head<'_>,
    spec: &ProbeSpec,
    mut m: Measurement,
    proxy: Option<&str>,
) -> ProbeResult {
    let mut body = Vec::new();
    let (deadline, _) = next_deadline(&m, &spec.timeouts, m.t0());
    let mut end = Instant::now();
    let mut stalled = false;
    while body.len() < MAX_ERROR_BODY {
        match timeout_at(deadline.into(), resp.chunk()).await {
            Ok(Ok(Some(b))) => {
                end = Instant::now();
                let room = MAX_ERROR_BODY - body.len();
                body.extend_from_slice(&b[..b.len().min(room)]);
            }
            Ok(Ok(None)) | Ok(Err(_)) => {
                end = Instant::now();
                break;
            }
            Err(_) => {
                end = deadline;
                stalled = true;
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&body);
    let err = StreamError::from_payload(&text);
    // The head's wait, else the body's RetryInfo.retryDelay (ruling 13).
    if let Some(wait) = head
        .retry_after(SystemTime::now())
        .or(err.retry_delay.filter(|_| head.status == 429))
    {
        m.retry_after(wait);
    }
    let kind = classify_response(head, &text).unwrap_or(ErrorType::ServerError);
    let mut detail = format!("HTTP {}", head.status);
    if kind == ErrorType::Proxy {
        match proxy {
            Some(p) => detail.push_str(&format!(" from the proxy {p}")),
            None => detail.push_str(" from a proxy"),
        }
        if let Some(v) = head.header("x-squid-error").or(head.header("proxy-status")) {
            detail.push_str(&format!(" ({v})"));
        }
    }
    if (300..400).contains(&head.status) {
        let target = head.header("location").map_or_else(
            || "nowhere (no Location)".to_owned(),
            |loc| resolve_location(&spec.url(), loc),
        );
        detail.push_str(&format!(
            " redirect to {target} (probes do not follow redirects: fix base_url)"
        ));
    }
    let summary = if head
        .header("content-type")
        .is_some_and(|c| c.contains("html"))
    {
        html_title(&text).unwrap_or_default()
    } else {
        err.summary()
    };
    if !summary.is_empty() {
        detail.push_str(": ");
        detail.push_str(&summary);
    }
    if stalled {
        detail.push_str(&format!(
            " (the body stalled: read until {})",
            deadline_detail(next_deadline(&m, &spec.timeouts, m.t0()).1, &spec.timeouts)
        ));
    }
    m.fail(kind, end, detail);
    m.finish()
}

/// A `Location` as an absolute URL safe to show: resolved against the request URL (a relative
/// `Location` too), credentials and secret query values removed.
fn resolve_location(request_url: &str, location: &str) -> String {
    match reqwest::Url::parse(request_url).and_then(|base| base.join(location.trim())) {
        Ok(u) => redact_url(u.as_str()),
        Err(_) => "<unparsable Location>".to_owned(),
    }
}

fn html_title(s: &str) -> Option<String> {
    let lower = s.to_ascii_lowercase();
    let a = lower.find("<title>")? + 7;
    let b = lower[a..].find("</title>")? + a;
    s.get(a..b).map(|t| t.trim().to_owned())
}

/// Classifies a failure before any response: connect timeout, TLS (the handshake had started),
/// proxy, or connect.
fn classify_transport(
    e: &reqwest::Error,
    proxy: Option<&str>,
    tls_started: bool,
) -> (ErrorType, String) {
    let chain = error_chain(e);
    let lower = chain.to_ascii_lowercase();
    let kind = if e.is_timeout() && e.is_connect() {
        ErrorType::TimeoutConnect
    } else if not_http(e) {
        // The target answered, but not in HTTP (no status line, a head too large, too many
        // headers): that is its answer's fault, not the network's.
        ErrorType::Malformed
    } else if e.is_connect() && tls_started {
        // The TCP connection (and any proxy tunnel) was up: the handshake failed.
        ErrorType::Tls
    } else if lower.contains("tunnel") || (proxy.is_some() && e.is_connect()) {
        ErrorType::Proxy
    } else if lower.contains("certificate")
        || lower.contains("tls")
        || lower.contains("handshake")
        || lower.contains("invalid peer")
    {
        ErrorType::Tls
    } else {
        ErrorType::Connect
    };
    let detail = match (kind, proxy) {
        (ErrorType::Proxy, Some(p)) => format!("via proxy {p}: {chain}"),
        _ => chain,
    };
    (kind, detail)
}

/// True when the HTTP client could not parse the response head (hyper's parse errors).
fn not_http(e: &reqwest::Error) -> bool {
    let mut src = e.source();
    while let Some(c) = src {
        if let Some(h) = c.downcast_ref::<hyper::Error>() {
            return h.is_parse() || h.is_parse_too_large() || h.is_parse_status();
        }
        src = c.source();
    }
    false
}

/// `e: cause: cause`, with the request URL shown by [`redact_url`].
fn error_chain(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(u) = e.url() {
        s = s.replace(u.as_str(), &redact_url(u.as_str()));
    }
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

/// Streaming decompression of a `Content-Encoding` the server used although we asked for identity.
enum Inflater {
    Identity,
    Gzip(flate2::write::GzDecoder<Vec<u8>>),
    Deflate(flate2::write::ZlibDecoder<Vec<u8>>),
}

impl Inflater {
    fn feed(&mut self, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
        match self {
            Inflater::Identity => Ok(bytes.to_vec()),
            Inflater::Gzip(d) => {
                d.write_all(bytes)?;
                d.flush()?;
                Ok(std::mem::take(d.get_mut()))
            }
            Inflater::Deflate(d) => {
                d.write_all(bytes)?;
                d.flush()?;
                Ok(std::mem::take(d.get_mut()))
            }
        }
    }

    fn finish(&mut self) -> std::io::Result<Vec<u8>> {
        match self {
            Inflater::Identity => Ok(Vec::new()),
            Inflater::Gzip(d) => {
                d.try_finish()?;
                Ok(std::mem::take(d.get_mut()))
            }
            Inflater::Deflate(d) => {
                d.try_finish()?;
                Ok(std::mem::take(d.get_mut()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_pick_the_earliest_and_prefer_first_token_on_ties() {
        let t0 = Instant::now();
        let m = Measurement::new(t0);
        let t = Timeouts {
            connect: Duration::from_secs(1),
            first_token: Duration::from_secs(10),
            idle: Duration::from_secs(5),
            total: Duration::from_secs(10),
        };
        let (d, k) = next_deadline(&m, &t, t0);
        assert_eq!(
            (d, k),
            (t0 + Duration::from_secs(10), ErrorType::TimeoutFirstToken)
        );
        let t2 = Timeouts {
            total: Duration::from_secs(3),
            ..t
        };
        assert_eq!(next_deadline(&m, &t2, t0).1, ErrorType::TimeoutTotal);
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
        let kind = |b: &[u8]| judge_non_stream(b).map(|(k, _)| k);
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

    #[test]
    fn relative_locations_are_resolved_and_redacted() {
        assert_eq!(
            resolve_location(
                "http://h:1/v1/chat/completions?key=S",
                "/v1/chat/completions/"
            ),
            "http://h:1/v1/chat/completions/"
        );
        assert_eq!(
            resolve_location("http://h/v1/x", "https://u:p@other/v1?api-key=S"),
            "https://other/v1?api-key=%3Credacted%3E"
        );
    }

    #[test]
    fn gzip_inflater_streams() {
        use flate2::{Compression, write::GzEncoder};
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(b"data: x\n\n").unwrap();
        let z = enc.finish().unwrap();
        let mut inf = Inflater::Gzip(flate2::write::GzDecoder::new(Vec::new()));
        let mut out = inf.feed(&z[..5]).unwrap();
        out.extend(inf.feed(&z[5..]).unwrap());
        out.extend(inf.finish().unwrap());
        assert_eq!(out, b"data: x\n\n");
    }
}
