//! Reading the answer of a probe's request: the response head, then the body as an event stream
//! (decoded and folded as it arrives, under the four deadlines) or, for a non-2xx head, as an error
//! body read for its message (docs/measurement.md rulings 1, 5 and 12).

use super::ProbeSpec;
use crate::config::{Expect, Timeouts};
use crate::measure::{Measurement, ProbeResult, Step};
use crate::outcome::{
    ErrorType, Flag, Head, classify_head, classify_transport, error_chain, html_title,
    judge_non_stream,
};
use crate::protocol::{Api, StreamError};
use crate::redact::redact_url;
use crate::sse::SseDecoder;
use crate::transport::Transport;
use std::io::Write as _;
use std::time::{Duration, Instant, SystemTime};
use tokio::time::timeout_at;

/// How much of an error body is read for classification and the message, and how much of a 2xx
/// body that has yielded no event yet is kept to judge it whole (bytes; ruling 1 and 5).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// The most body bytes one probe reads (after decompression); past it the probe fails as
/// `malformed`. Memory does not grow with the body (events are folded as they arrive); this bounds
/// the work a runaway stream can cause within `timeouts.total`.
pub const MAX_BODY_BYTES: u64 = 256 * 1024 * 1024;

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

pub(super) async fn run_request(
    transport: &Transport,
    req: reqwest::Request,
    spec: &ProbeSpec,
    mut m: Measurement,
    proxy: Option<&str>,
) -> ProbeResult {
    let t = &spec.timeouts;
    let (deadline, kind) = next_deadline(&m, t, m.t0());
    // The deadline passed before the head (or the head came after it: timer and socket raced).
    let head_late = |mut m: Measurement| {
        let detail = format!("{} waiting for the response head", deadline_detail(kind, t));
        m.fail(kind, deadline, detail);
        m.finish()
    };
    let resp = match timeout_at(deadline.into(), transport.client.execute(req)).await {
        Err(_) => return head_late(m),
        Ok(Err(e)) => {
            let (kind, detail) = classify_transport(&e, proxy, transport.clock.tls_started());
            m.fail(kind, Instant::now(), detail);
            let mut r = m.finish();
            r.exporter_fault = crate::resources::is_fd_exhaustion(&e);
            return r;
        }
        Ok(Ok(r)) => r,
    };
    let t_headers = Instant::now();
    if t_headers > deadline {
        return head_late(m);
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
    if classify_head(&head, &StreamError::default()).is_some() {
        return read_error_body(resp, &head, spec, m, proxy).await;
    }
    if head.header("content-type").is_none() {
        m.flag(Flag::NoContentType);
    }
    let encoding = head.header("content-encoding");
    let mut inflater = match Inflater::for_encoding(encoding) {
        Ok(i) => i,
        Err(other) => {
            m.flag(Flag::CompressedStream);
            m.fail(
                ErrorType::Malformed,
                t_headers,
                format!("unsupported Content-Encoding {other:?}"),
            );
            return m.finish();
        }
    };
    if !matches!(inflater, Inflater::Identity) {
        m.flag(Flag::CompressedStream);
    }
    let api = spec.target.api;
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
                if feed_events(&mut dec, &plain, api, &mut m, now) == Step::Stop {
                    break;
                }
            }
            Ok(Ok(None)) => {
                let now = Instant::now();
                match inflater.finish() {
                    Ok(rest) => {
                        body.take(&rest, &m);
                        if feed_events(&mut dec, &rest, api, &mut m, now) == Step::Continue {
                            flush_final(&mut dec, api, &mut m, now);
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
    if let Some(exp) = &spec.prompt.expect {
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
    let (deadline, deadline_kind) = next_deadline(&m, &spec.timeouts, m.t0());
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
    let kind = classify_head(head, &err).unwrap_or(ErrorType::ServerError);
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
            deadline_detail(deadline_kind, &spec.timeouts)
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

/// Streaming decompression of a `Content-Encoding` the server used although we asked for identity.
enum Inflater {
    Identity,
    Gzip(flate2::write::GzDecoder<Vec<u8>>),
    Deflate(flate2::write::ZlibDecoder<Vec<u8>>),
}

impl Inflater {
    /// The inflater of a `Content-Encoding` (absent, empty or `identity`: none); the encoding's
    /// name when it is not one tokenprobe can undo.
    fn for_encoding(encoding: Option<&str>) -> Result<Self, String> {
        let e = encoding.map(|e| e.trim().to_ascii_lowercase());
        match e.as_deref() {
            None | Some("" | "identity") => Ok(Inflater::Identity),
            Some("gzip" | "x-gzip") => {
                Ok(Inflater::Gzip(flate2::write::GzDecoder::new(Vec::new())))
            }
            Some("deflate") => Ok(Inflater::Deflate(flate2::write::ZlibDecoder::new(
                Vec::new(),
            ))),
            Some(other) => Err(other.to_owned()),
        }
    }

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
