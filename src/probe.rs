//! One probe: send exactly one streaming request and fold what arrives into a [`ProbeResult`].
//!
//! This is the thin async I/O around the pure cores: [`crate::sse::SseDecoder`] (bytes to events),
//! [`crate::protocol`] (event meaning) and [`crate::measure::Measurement`] (the fold). Bytes are
//! timestamped with `Instant::now()` in the same task that reads them and decoded right there, with
//! no channel between arrival and timestamp. Deadlines follow MEASUREMENT.md: `connect` (connection
//! set-up), `first_token` (from `t0`), `idle` (no bytes after the first token) and `total`. No
//! retries, no redirects, no reconnects: one probe is one request.

use crate::config::{AuthStyle, Expect, Job, KeySource, ProxySetting, Timeouts};
use crate::measure::{Measurement, ProbeResult, Step};
use crate::outcome::{ErrorType, Flag, Head, classify_response, classify_stream_error};
use crate::protocol::{Api, Message, RequestSpec, StreamError};
use crate::sse::SseDecoder;
use crate::transport::{ClientOptions, Transport, TransportError};
use std::error::Error as _;
use std::io::Write as _;
use std::time::{Duration, Instant, SystemTime};
use tokio::time::timeout_at;

/// How much of an error body is read for classification and the message (bytes).
const MAX_ERROR_BODY: usize = 64 * 1024;

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
        let key = match &spec.api_key {
            Some(k) => k.load().await.map(Some),
            None => Ok(None),
        };
        let key = match key {
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
        // A server may echo the key in its error message: never pass it on.
        if let (Some(k), Some(d)) = (&key, r.error_detail.as_mut())
            && !k.expose().is_empty()
        {
            *d = d.replace(k.expose(), "<redacted>");
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
    // On a tie the type listed first in MEASUREMENT.md wins (first_token/idle before total).
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
    let content_type = head.header("content-type").map(str::to_ascii_lowercase);
    let is_json = content_type.as_deref().is_some_and(|c| c.contains("json"));
    if !resp.status().is_success()
        || head.from_proxy()
        || classify_response(&head, "").is_some()
        || is_json
    {
        return read_error_body(resp, &head, spec, m, proxy).await;
    }
    if content_type.is_none() {
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
                if feed_events(&mut dec, &plain, spec.api, &mut m, now) == Step::Stop {
                    break;
                }
            }
            Ok(Ok(None)) => {
                let now = Instant::now();
                match inflater.finish() {
                    Ok(rest) => {
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
                break;
            }
            Ok(Err(e)) => {
                let now = Instant::now();
                m.eof(now);
                if !m.proper_end() {
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

/// At EOF: an unterminated final event is still dispatched, and flagged (MEASUREMENT.md).
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

/// Reads (a bounded part of) a non-stream answer and classifies it.
async fn read_error_body(
    mut resp: reqwest::Response,
    head: &Head<'_>,
    spec: &ProbeSpec,
    mut m: Measurement,
    proxy: Option<&str>,
) -> ProbeResult {
    let mut body = Vec::new();
    // No token can come from an error answer, so the first-token (or total) deadline bounds the
    // body. When it passes first, that timeout applies and comes before the status-based types in
    // MEASUREMENT.md's order; it is also recorded below (the status stays in the detail).
    let (deadline, deadline_kind) = next_deadline(&m, &spec.timeouts, m.t0());
    let mut end = Instant::now();
    let mut stalled = false;
    while body.len() < MAX_ERROR_BODY {
        match timeout_at(deadline.into(), resp.chunk()).await {
            Ok(Ok(Some(b))) => {
                end = Instant::now();
                body.extend_from_slice(&b);
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
    if stalled {
        let detail = format!(
            "{} while reading the body of an HTTP {} answer",
            deadline_detail(deadline_kind, &spec.timeouts),
            head.status
        );
        m.fail(deadline_kind, end, detail);
    }
    let text = String::from_utf8_lossy(&body);
    if let Some(wait) = head.retry_after(SystemTime::now()) {
        m.retry_after(wait);
    }
    let err = StreamError::from_payload(&text);
    let kind = match classify_response(head, &text) {
        Some(k) => k,
        // A 2xx JSON body: an error object inside it, or not a stream at all.
        None => match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(v) if v.get("error").is_some_and(|e| !e.is_null()) => classify_stream_error(&err),
            _ => {
                m.fail(
                    ErrorType::Malformed,
                    end,
                    "HTTP 2xx with a JSON body instead of an event stream (does the server support \"stream\": true?)",
                );
                return m.finish();
            }
        },
    };
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
    if (300..400).contains(&head.status)
        && let Some(loc) = head.header("location")
    {
        detail.push_str(&format!(
            " redirect to {} (probes do not follow redirects: fix base_url)",
            redact_url(loc)
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
    m.fail(kind, end, detail);
    m.finish()
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

/// The proxy the environment routes `url` through, as curl and reqwest read it (`http_proxy` /
/// `HTTP_PROXY`, `https_proxy` / `HTTPS_PROXY`, `all_proxy` / `ALL_PROXY`, minus `no_proxy` /
/// `NO_PROXY`), with any credentials removed. `None` when the connection is direct.
pub fn effective_proxy(url: &str) -> Option<String> {
    let u = reqwest::Url::parse(url).ok()?;
    let host = u.host_str()?.trim_matches(['[', ']']).to_ascii_lowercase();
    let var = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| std::env::var(n).ok().filter(|v| !v.trim().is_empty()))
    };
    if let Some(no) = var(&["no_proxy", "NO_PROXY"]) {
        let bypass = no
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .any(|e| {
                let e = e
                    .trim_start_matches("*.")
                    .trim_start_matches('.')
                    .to_ascii_lowercase();
                e == "*" || host == e || host.ends_with(&format!(".{e}"))
            });
        if bypass {
            return None;
        }
    }
    let p = match u.scheme() {
        "https" => var(&["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]),
        _ => var(&["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]),
    }?;
    Some(redact_userinfo(&p))
}

/// A URL safe to show: no user or password, and the values of query parameters whose names look
/// secret (`key`, `token`, `secret`, `sig`, `auth`, `password`) replaced by `<redacted>`.
pub fn redact_url(url: &str) -> String {
    let Ok(mut u) = reqwest::Url::parse(url) else {
        return "<unparsable URL>".to_owned();
    };
    let _ = u.set_username("");
    let _ = u.set_password(None);
    if u.query().is_some() {
        let pairs: Vec<(String, String)> = u
            .query_pairs()
            .map(|(k, v)| {
                let lower = k.to_ascii_lowercase();
                let secret = ["key", "token", "secret", "sig", "auth", "password"]
                    .iter()
                    .any(|w| lower.contains(w));
                (
                    k.into_owned(),
                    if secret {
                        "<redacted>".to_owned()
                    } else {
                        v.into_owned()
                    },
                )
            })
            .collect();
        u.query_pairs_mut().clear().extend_pairs(pairs);
    }
    u.to_string()
}

fn redact_userinfo(p: &str) -> String {
    match reqwest::Url::parse(p) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Ok(u) => u.to_string(),
        Err(_) => "<unparsable proxy URL>".to_owned(),
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
    fn urls_are_shown_without_secrets() {
        assert_eq!(
            redact_url("https://u:pw@h/v1/chat?api-version=1&api-key=SECRET&sig=X"),
            "https://h/v1/chat?api-version=1&api-key=%3Credacted%3E&sig=%3Credacted%3E"
        );
        assert_eq!(redact_url("http://h:8080/v1"), "http://h:8080/v1");
    }

    #[test]
    fn html_titles_and_userinfo() {
        assert_eq!(
            html_title("<html><TITLE> Oops </title>").as_deref(),
            Some("Oops")
        );
        assert_eq!(html_title("no title"), None);
        assert_eq!(
            redact_userinfo("http://u:p@proxy:3128"),
            "http://proxy:3128/"
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
