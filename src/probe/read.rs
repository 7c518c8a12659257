//! Reading the answer of a probe's request: the response head, then the body as an event stream
//! (decoded and folded as it arrives, under the four deadlines), as a whole non-streamed answer
//! (`stream: false`: read to its end, then judged once), or, for a non-2xx head, as an error body
//! read for its message (docs/measurement.md rulings 1, 5 and 12, "Non-streaming requests").

use super::ProbeSpec;
use crate::config::{ConnectionMode, Expect, Timeouts};
use crate::kstamp::ReadStamps;
use crate::measure::{Flow, Measurement, ReadLag, RequestFacts};
use crate::outcome::{
    ErrorType, Flag, Head, classify_head, error_chain, html_title, judge_non_answer,
    judge_non_event_stream, starts_as_event_stream,
};
use crate::protocol::{Api, StreamError};
use crate::redact::redact_url;
use crate::sse::SseDecoder;
use crate::transport::{Transport, chunk, classify_transport};
use hyper::body::Incoming;
use std::borrow::Cow;
use std::io::Write as _;
use std::time::{Duration, Instant, SystemTime};
use tokio::time::timeout_at;

/// How much of an error body is read for classification and the message, and how much of a 2xx
/// body that has yielded no event yet is kept to judge it whole (bytes; ruling 1 and 5).
const MAX_ERROR_BODY: usize = 64 * 1024;
/// What a server may send before its response head (the TLS handshake, HTTP/2's SETTINGS and
/// WINDOW_UPDATE frames take a few KiB); past it, a connection lost before the head is the
/// server's doing (`malformed`), not the network's.
const MAX_BYTES_BEFORE_HEAD: u64 = 64 * 1024;

/// The most body bytes one probe reads (after decompression); past it the probe fails as
/// `malformed`. Memory does not grow with the body (events are folded as they arrive); this bounds
/// the work a runaway stream can cause within `timeouts.total`.
pub const MAX_BODY_BYTES: u64 = 256 * 1024 * 1024;

/// The largest non-streamed answer read (bytes, after decompression), kept whole to be parsed;
/// past it the probe fails as `malformed`. The same bound as one SSE line or event.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// The deadline that is due first, and which error type it means. `last_byte`: the instant of
/// the last body bytes read, `None` before any (the head's wait included).
///
/// A stream: `first_token` from `t0` until the first token-bearing event (the head's wait
/// included, ruling 9), then `idle` from the last bytes; `total` throughout. Without streaming
/// there is no first token, and the head comes only when the whole answer is ready: `total`
/// alone bounds the wait for the head and the first body bytes, then `idle` from the last bytes.
fn next_deadline(
    m: &Measurement,
    t: &Timeouts,
    last_byte: Option<Instant>,
    stream: bool,
) -> (Instant, ErrorType) {
    // Durations are validated to at most a day, but never panic on an overflow here either.
    let after = |i: Instant, d: Duration| {
        i.checked_add(d)
            .unwrap_or(i + Duration::from_secs(86_400 * 365))
    };
    let total = (after(m.t0(), t.total), ErrorType::TimeoutTotal);
    let idle = |b: Instant| (after(b, t.idle), ErrorType::TimeoutIdle);
    let other = match (stream, last_byte) {
        (true, Some(b)) if m.first_token_seen() => idle(b),
        (true, _) => (after(m.t0(), t.first_token), ErrorType::TimeoutFirstToken),
        (false, Some(b)) => idle(b),
        (false, None) => total,
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

/// The instants of a probe's reads: the kernel's receive instant of the connection's latest read
/// when the kernel stamped it (so the runtime's delay in getting round to the bytes drops out),
/// else the read's own instant; never before the previous instant, never after the read. The
/// differences go to the probe's [`ReadLag`].
struct Arrivals<'a> {
    stamps: &'a ReadStamps,
    floor: Instant,
    lag: ReadLag,
    /// The probe's start instant.
    t0: Instant,
    /// The kernel's transmit instant of the request's last byte, taken when the head came.
    sent: Option<Instant>,
}

impl<'a> Arrivals<'a> {
    fn new(stamps: &'a ReadStamps, t0: Instant) -> Self {
        Arrivals {
            stamps,
            floor: t0,
            lag: ReadLag::default(),
            t0,
            sent: None,
        }
    }

    /// Takes the request's send instant as the response head arrives at `head` (the client
    /// writes nothing more before it): one between the start instant and the head, else none.
    fn head(&mut self, head: Instant) {
        self.sent = self.stamps.sent().filter(|s| *s >= self.t0 && *s <= head);
    }

    /// The instant the bytes a read returned at `now` reached this machine.
    fn at(&mut self, now: Instant) -> Instant {
        let at = match self.stamps.latest().and_then(|s| s.kernel) {
            Some(k) => k.max(self.floor).min(now),
            None => {
                self.lag.unstamped_reads += 1;
                now
            }
        };
        self.lag.reads += 1;
        self.lag.max_s = self.lag.max_s.max((now - at).as_secs_f64());
        self.floor = at;
        at
    }

    /// Notes the difference at the first token-bearing event.
    fn first_token(&mut self, now: Instant, at: Instant) {
        self.lag
            .first_token_s
            .get_or_insert((now - at).as_secs_f64());
    }
}

/// Sends the request and reads its answer into the fold `m`, which it returns unfinished, with
/// what the reads knew beside the events in `facts`: the reads' lag behind their kernel instants,
/// the request's send instant, and whether a failure to send was the exporter's own.
pub(super) async fn run_request(
    transport: &mut Transport,
    req: super::request::Request,
    spec: &ProbeSpec,
    m: Measurement,
    proxy: Option<&str>,
    facts: &mut RequestFacts,
) -> Measurement {
    let stamps = transport.stamps().clone();
    let mut arrivals = Arrivals::new(&stamps, m.t0());
    let m = request_and_read(transport, req, spec, m, proxy, &mut arrivals, facts).await;
    facts.read_lag = Some(arrivals.lag);
    facts.sent_at = arrivals.sent;
    m
}

async fn request_and_read(
    transport: &mut Transport,
    req: super::request::Request,
    spec: &ProbeSpec,
    mut m: Measurement,
    proxy: Option<&str>,
    arrivals: &mut Arrivals<'_>,
    facts: &mut RequestFacts,
) -> Measurement {
    let t = &spec.timeouts;
    let (deadline, kind) = next_deadline(&m, t, None, spec.stream);
    // The deadline passed before the head (or the head came after it: timer and socket raced).
    let head_late = |mut m: Measurement| {
        let detail = format!("{} waiting for the response head", deadline_detail(kind, t));
        m.fail(kind, deadline, detail);
        m
    };
    let resp = match timeout_at(deadline.into(), transport.send(req)).await {
        Err(_) => return head_late(m),
        Ok(Err(e)) => {
            let (mut kind, mut detail) = classify_transport(&e, proxy);
            let sent = transport.stamps().bytes();
            if kind == ErrorType::Connect && sent > MAX_BYTES_BEFORE_HEAD {
                // Not the network: the server kept talking (HTTP/2 frames: a SETTINGS flood, a
                // head that never ends) and never gave a response head.
                kind = ErrorType::Malformed;
                detail = format!("the server sent {sent} bytes but no response head: {detail}");
            }
            m.fail(kind, Instant::now(), detail);
            facts.exporter_fault = crate::resources::is_fd_exhaustion(&e);
            return m;
        }
        Ok(Ok(r)) => r,
    };
    let now = Instant::now();
    if now > deadline {
        return head_late(m);
    }
    let t_headers = arrivals.at(now);
    arrivals.head(t_headers);
    let (parts, resp) = resp.into_parts();
    let status = parts.status.as_u16();
    m.headers(t_headers, status);
    let headers: Vec<(String, String)> = parts
        .headers
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
    m.rate_limits(crate::ratelimit::read(&head.headers, SystemTime::now()));
    m.server_request_id(request_id(&head));
    // A non-2xx head (or a proxy's answer) decides the type (ruling 5); a 2xx body is read as a
    // stream and judged from its bytes, whatever its Content-Type says (ruling 1).
    if classify_head(&head, &StreamError::default()).is_some() {
        return read_error_body(resp, &head, spec, m, proxy).await;
    }
    if let Some(wait) = head.retry_after(SystemTime::now()) {
        // Ruling 20: recorded should this answer fail (a success reports no wait).
        m.retry_after(wait);
    }
    if head.header("content-type").is_none() {
        m.flag(Flag::NoContentType);
    }
    let encoding = head.header("content-encoding");
    let inflater = match Inflater::for_encoding(encoding) {
        Ok(i) => i,
        Err(other) => {
            m.flag(Flag::CompressedStream);
            m.fail(
                ErrorType::Malformed,
                t_headers,
                format!("unsupported Content-Encoding {other:?}"),
            );
            return m;
        }
    };
    if !matches!(inflater, Inflater::Identity) {
        m.flag(Flag::CompressedStream);
    }
    if !spec.stream {
        return read_answer(resp, inflater, spec, m, t_headers, arrivals).await;
    }
    read_stream(resp, inflater, spec, m, arrivals).await
}

/// The response headers that carry the provider's id of the request, in the order they are
/// looked for: OpenAI's and most servers' (vLLM, SGLang, gateways) `x-request-id`, Anthropic's
/// `request-id`, Azure's `x-ms-request-id` and its API Management's `apim-request-id`, AWS's
/// `x-amzn-requestid`.
pub const REQUEST_ID_HEADERS: [&str; 5] = [
    "x-request-id",
    "request-id",
    "x-ms-request-id",
    "apim-request-id",
    "x-amzn-requestid",
];

/// The answer's request id: the first of [`REQUEST_ID_HEADERS`] the head carries, as
/// [`crate::protocol::identity_value`] keeps it.
fn request_id(head: &Head<'_>) -> Option<String> {
    REQUEST_ID_HEADERS
        .iter()
        .find_map(|h| head.header(h).and_then(crate::protocol::identity_value))
}

/// Reads a 2xx body as an event stream, decoding and folding the events as they arrive, under
/// the deadlines. The deadlines run on the reads' own instants (the timers' clock); the events are
/// stamped with their bytes' arrival ([`Arrivals`]).
async fn read_stream(
    mut resp: Incoming,
    mut inflater: Inflater,
    spec: &ProbeSpec,
    mut m: Measurement,
    arrivals: &mut Arrivals<'_>,
) -> Measurement {
    let (t, api) = (&spec.timeouts, spec.target.api);
    let mut dec = SseDecoder::new();
    let mut last_byte = Instant::now();
    let mut body = BodyStart::default();
    // One timer for the whole stream, moved as the deadline moves: moving it later (the idle
    // deadline after each event) is an atomic store, where a timer per read would be inserted
    // into and removed from the runtime's wheel once per event.
    let timer = tokio::time::sleep_until(next_deadline(&m, t, Some(last_byte), true).0.into());
    tokio::pin!(timer);
    loop {
        let (deadline, kind) = next_deadline(&m, t, Some(last_byte), true);
        if timer.deadline() != deadline.into() {
            timer.as_mut().reset(deadline.into());
        }
        let read = tokio::select! {
            biased;
            r = chunk(&mut resp) => Ok(r),
            () = &mut timer => Err(()),
        };
        match read {
            Err(()) => {
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
                let at = arrivals.at(now);
                let plain = match inflater.feed(&bytes) {
                    Ok(p) => p,
                    Err(e) => {
                        m.fail(
                            ErrorType::Malformed,
                            at,
                            format!("cannot decompress the body: {e}"),
                        );
                        break;
                    }
                };
                if !body.take(&plain, &m) {
                    m.fail(
                        ErrorType::Malformed,
                        at,
                        format!("the body passed the per-probe cap of {MAX_BODY_BYTES} bytes"),
                    );
                    break;
                }
                if body.not_event_stream() {
                    continue; // ruling 15: judged whole at its end
                }
                let had_first = m.first_token_seen();
                let step = feed_events(&mut dec, &plain, api, &mut m, at);
                if !had_first && m.first_token_seen() {
                    arrivals.first_token(now, at);
                }
                if step == Flow::Stop {
                    if spec.target.connection == ConnectionMode::Reuse && m.proper_end() {
                        drain_for_reuse(&mut resp, deadline).await;
                    }
                    break;
                }
            }
            Ok(Ok(None)) => {
                let now = Instant::now();
                match inflater.finish() {
                    Ok(rest) => {
                        body.take(&rest, &m);
                        body_end(&mut dec, &rest, &body, api, &mut m, now);
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
                // Ruling 17: a reset (or any break of the body) is the connection's end: an event it
                // cut is dispatched as an unterminated final event, and flagged.
                let now = Instant::now();
                body_end(&mut dec, &[], &body, api, &mut m, now);
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
    m
}

/// After the terminal event (the measurement is complete), how long and how many bytes the rest
/// of the body (typically only the chunked encoding's last chunk) is read so that the connection
/// goes back to the pool: an HTTP/1.1 body dropped before its end closes its connection, and the
/// next probe of a `reuse` target would pay a new connection. A server that keeps sending past
/// the terminal event, or stays silent, loses the connection instead.
const DRAIN_TIME: Duration = Duration::from_millis(50);
const DRAIN_BYTES: usize = 64 * 1024;

/// Reads the body's remains after the terminal event, ignoring them (ruling: nothing after the
/// terminal marker counts), within [`DRAIN_TIME`], [`DRAIN_BYTES`] and the probe's deadline.
pub(super) async fn drain_for_reuse(resp: &mut Incoming, deadline: Instant) {
    let until = (Instant::now() + DRAIN_TIME).min(deadline);
    let mut read = 0usize;
    while let Ok(Ok(Some(b))) = timeout_at(until.into(), chunk(resp)).await {
        read += b.len();
        if read > DRAIN_BYTES {
            return;
        }
    }
}

/// Reads a whole non-streamed answer to its end (bounded by [`MAX_ANSWER_BYTES`] and the
/// deadlines), then judges it once: an empty body, an HTML page or a body that is not JSON by
/// [`judge_non_answer`], the rest by the protocol's [`Api::interpret_answer`]. `t_end` is the
/// arrival of the bytes that completed the body ([`Arrivals`]).
async fn read_answer(
    mut resp: Incoming,
    mut inflater: Inflater,
    spec: &ProbeSpec,
    mut m: Measurement,
    t_headers: Instant,
    arrivals: &mut Arrivals<'_>,
) -> Measurement {
    let t = &spec.timeouts;
    let mut body: Vec<u8> = Vec::new();
    // The last body bytes' read (for the deadlines) and their arrival (`t_end`).
    let mut last_byte: Option<Instant> = None;
    let mut last_arrival: Option<Instant> = None;
    let failed = |mut m: Measurement, kind, at, detail: String| {
        m.fail(kind, at, detail);
        m
    };
    let t_end = loop {
        let (deadline, kind) = next_deadline(&m, t, last_byte, false);
        match timeout_at(deadline.into(), chunk(&mut resp)).await {
            Err(_) => return failed(m, kind, deadline, deadline_detail(kind, t)),
            Ok(Ok(Some(bytes))) => {
                let now = Instant::now();
                if now > deadline {
                    return failed(m, kind, deadline, deadline_detail(kind, t));
                }
                last_byte = Some(now);
                last_arrival = Some(arrivals.at(now));
                match inflater.feed(&bytes) {
                    Ok(p) => body.extend_from_slice(&p),
                    Err(e) => {
                        let d = format!("cannot decompress the body: {e}");
                        return failed(m, ErrorType::Malformed, now, d);
                    }
                }
                if body.len() > MAX_ANSWER_BYTES {
                    let d = format!("the answer passed the cap of {MAX_ANSWER_BYTES} bytes");
                    return failed(m, ErrorType::Malformed, now, d);
                }
            }
            Ok(Ok(None)) => {
                let now = Instant::now();
                match inflater.finish() {
                    Ok(rest) => body.extend_from_slice(&rest),
                    Err(e) => {
                        let d = format!("cannot decompress the body: {e}");
                        return failed(m, ErrorType::Malformed, now, d);
                    }
                }
                break last_arrival.unwrap_or(now).max(t_headers);
            }
            Ok(Err(e)) => {
                let now = Instant::now();
                let kind = if body.is_empty() {
                    ErrorType::EmptyResponse
                } else {
                    ErrorType::Truncated
                };
                let d = format!("the answer broke off: {}", error_chain(&e));
                return failed(m, kind, now, d);
            }
        }
    };
    m.eof(t_end);
    if body.len() > MAX_ANSWER_BYTES {
        let d = format!("the answer passed the cap of {MAX_ANSWER_BYTES} bytes");
        return failed(m, ErrorType::Malformed, t_end, d);
    }
    let text = String::from_utf8_lossy(&body);
    if let Some((kind, detail)) = judge_non_answer(&text) {
        return failed(m, kind, t_end, detail);
    }
    match spec.target.api.interpret_answer(&text) {
        Ok(meaning) => m.answer(t_end, meaning),
        Err(e) => {
            let d = format!("HTTP 2xx with a body that is not an answer: {}", e.reason);
            return failed(m, ErrorType::Malformed, t_end, d);
        }
    }
    if let Some(exp) = &spec.prompt.expect {
        m.validate(|text, n| check_expect(exp, text, n));
    }
    m
}

/// The content check: why the answer fails it, if it does (every check it sets must pass:
/// the minimum of output tokens, the exact answer, the regular expression, the number, the JSON
/// schema, in that order; docs/measurement.md, "Known-answer canaries").
/// `n`: N, `None` when unknown (a whole answer without usage), which cannot meet a minimum.
pub fn check_expect(exp: &Expect, text: &str, n: Option<u64>) -> Option<String> {
    if let Some(min) = exp.min_output_tokens {
        match n {
            Some(n) if n < min => {
                return Some(format!(
                    "content check: {n} output tokens, expected at least {min}"
                ));
            }
            None => {
                return Some(format!(
                    "content check: the answer carried no usage, so its output tokens are unknown; expected at least {min}"
                ));
            }
            Some(_) => {}
        }
    }
    let preview = || crate::units::truncate(text, 80);
    if let Some(want) = &exp.exact
        && text.trim() != want.trim()
    {
        return Some(format!(
            "content check: answer {:?} is not {:?}",
            preview(),
            crate::units::truncate(want.trim(), 80)
        ));
    }
    if let Some(re) = &exp.regex
        && !re.is_match(text)
    {
        return Some(format!(
            "content check: answer {:?} does not match /{}/",
            preview(),
            re.as_str()
        ));
    }
    if let Some(num) = &exp.number {
        match first_number(text) {
            Some(x) if (x - num.value).abs() <= num.tolerance => {}
            Some(x) => {
                return Some(format!(
                    "content check: the answer's number {x} is not {} ± {}",
                    num.value, num.tolerance
                ));
            }
            None => {
                return Some(format!(
                    "content check: answer {:?} has no number (expected {} ± {})",
                    preview(),
                    num.value,
                    num.tolerance
                ));
            }
        }
    }
    if let Some(schema) = &exp.json_schema
        && let Some(why) = schema.check(text)
    {
        return Some(format!("content check: {why}"));
    }
    None
}

/// The first number written in `text`: an optional minus sign, digits (thousands separated by
/// commas or not), an optional fraction and exponent (`-1,234.5`, `3e8`); `None` without one.
fn first_number(text: &str) -> Option<f64> {
    static NUMBER: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    let re = NUMBER
        .get_or_init(|| {
            regex::Regex::new(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?").ok()
        })
        .as_ref()?;
    let m = re.find(text)?;
    m.as_str()
        .replace(',', "")
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
}

/// The start of a 2xx body, kept while it has yielded no event, so that a body that is not an event
/// stream can be judged whole at its end (rulings 1 and 15); and the count of body bytes for the cap.
#[derive(Default)]
struct BodyStart {
    head: Vec<u8>,
    bytes: u64,
    /// Ruling 15, once its first significant line has told: whether the body is an event stream.
    event_stream: Option<bool>,
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
        if self.event_stream.is_none() && !m.events_seen() {
            self.event_stream = starts_as_event_stream(&self.head, false);
            if self.event_stream.is_none() && self.head.len() >= MAX_ERROR_BODY {
                // 64 KiB of blank lines and comments: keep-alives of an event stream.
                self.event_stream = Some(true);
            }
        }
        self.bytes <= MAX_BODY_BYTES
    }

    /// Ruling 15: the body's first significant line was not an SSE field, so none of it is read as
    /// events; it is judged whole at its end.
    fn not_event_stream(&self) -> bool {
        self.event_stream == Some(false)
    }

    /// At the body's end: a body that yielded no event and is not an event stream is judged whole.
    fn judge_whole(&self, m: &mut Measurement, end: Instant) {
        if m.events_seen() {
            return;
        }
        if let Some((kind, detail)) = judge_non_event_stream(&self.head) {
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
) -> Flow {
    if bytes.is_empty() {
        return Flow::Continue;
    }
    match dec.feed(bytes) {
        Ok(events) => {
            for ev in events {
                if fold_event(&ev, api, m, t) == Flow::Stop {
                    return Flow::Stop;
                }
            }
            Flow::Continue
        }
        Err(e) => {
            m.fail(ErrorType::Malformed, t, e.to_string());
            Flow::Stop
        }
    }
}

fn fold_event(ev: &crate::sse::SseEvent, api: Api, m: &mut Measurement, t: Instant) -> Flow {
    // The identity OpenAI chunks repeat is read until an event named the served model.
    let meaning = if m.identity_known() {
        api.interpret_without_identity(ev)
    } else {
        api.interpret(ev)
    };
    match meaning {
        Ok(meaning) => m.event(t, &meaning),
        Err(e) => {
            m.fail(ErrorType::Malformed, t, e.to_string());
            Flow::Continue
        }
    }
}

/// At the body's end (its close, its framing's end, or a break): the last bytes are decoded and an
/// unterminated final event is still dispatched, and flagged (docs/measurement.md). A body that is
/// not an event stream (ruling 15) is judged whole instead.
fn body_end(
    dec: &mut SseDecoder,
    rest: &[u8],
    body: &BodyStart,
    api: Api,
    m: &mut Measurement,
    t: Instant,
) {
    if body.not_event_stream() || starts_as_event_stream(&body.head, true) == Some(false) {
        return;
    }
    if feed_events(dec, rest, api, m, t) == Flow::Continue {
        flush_final(dec, api, m, t);
    }
}

/// An unterminated final event is still dispatched, and flagged (docs/measurement.md).
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
    mut resp: Incoming,
    head: &Head<'_>,
    spec: &ProbeSpec,
    mut m: Measurement,
    proxy: Option<&str>,
) -> Measurement {
    let mut body = Vec::new();
    let (deadline, deadline_kind) = next_deadline(&m, &spec.timeouts, None, spec.stream);
    let mut end = Instant::now();
    let mut stalled = false;
    while body.len() < MAX_ERROR_BODY {
        match timeout_at(deadline.into(), chunk(&mut resp)).await {
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
    m
}

/// A `Location` as an absolute URL safe to show: resolved against the request URL (a relative
/// `Location` too), credentials and secret query values removed.
fn resolve_location(request_url: &str, location: &str) -> String {
    match url::Url::parse(request_url).and_then(|base| base.join(location.trim())) {
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

    /// The plain bytes of `bytes`: themselves without an encoding (no copy), else what inflating
    /// them gave.
    fn feed<'a>(&mut self, bytes: &'a [u8]) -> std::io::Result<Cow<'a, [u8]>> {
        match self {
            Inflater::Identity => Ok(Cow::Borrowed(bytes)),
            Inflater::Gzip(d) => {
                d.write_all(bytes)?;
                d.flush()?;
                Ok(Cow::Owned(std::mem::take(d.get_mut())))
            }
            Inflater::Deflate(d) => {
                d.write_all(bytes)?;
                d.flush()?;
                Ok(Cow::Owned(std::mem::take(d.get_mut())))
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
    fn a_known_answer_is_checked_exactly_and_by_its_number() {
        let e = Expect {
            regex: None,
            min_output_tokens: None,
            exact: Some("4".into()),
            number: Some(crate::config::NumberCheck {
                value: 4.0,
                tolerance: 0.5,
            }),
            json_schema: None,
        };
        assert_eq!(check_expect(&e, " 4\n", None), None);
        let why = check_expect(&e, "four", None).unwrap_or_default();
        assert!(why.contains("is not \"4\""), "{why}");
        let number_only = Expect { exact: None, ..e };
        assert_eq!(check_expect(&number_only, "about 4.4 then", None), None);
        let why = check_expect(&number_only, "4.6", None).unwrap_or_default();
        assert!(
            why.contains("the answer's number 4.6 is not 4 ± 0.5"),
            "{why}"
        );
    }

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
        let (d, k) = next_deadline(&m, &t, Some(t0), true);
        assert_eq!(
            (d, k),
            (t0 + Duration::from_secs(10), ErrorType::TimeoutFirstToken)
        );
        let t2 = Timeouts {
            total: Duration::from_secs(3),
            ..t
        };
        assert_eq!(
            next_deadline(&m, &t2, Some(t0), true).1,
            ErrorType::TimeoutTotal
        );
    }

    #[test]
    fn without_streaming_first_token_never_fires() {
        // No first token exists: the head and the first body bytes wait for `total` alone, then
        // `idle` counts from the last body bytes.
        let t0 = Instant::now();
        let m = Measurement::new(t0);
        let t = Timeouts {
            connect: Duration::from_secs(1),
            first_token: Duration::from_secs(2),
            idle: Duration::from_secs(5),
            total: Duration::from_secs(60),
        };
        assert_eq!(
            next_deadline(&m, &t, None, false),
            (t0 + Duration::from_secs(60), ErrorType::TimeoutTotal)
        );
        let b = t0 + Duration::from_secs(40);
        assert_eq!(
            next_deadline(&m, &t, Some(b), false),
            (b + Duration::from_secs(5), ErrorType::TimeoutIdle)
        );
        let late = t0 + Duration::from_secs(58);
        assert_eq!(
            next_deadline(&m, &t, Some(late), false),
            (t0 + Duration::from_secs(60), ErrorType::TimeoutTotal)
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
        let mut out = inf.feed(&z[..5]).unwrap().into_owned();
        out.extend_from_slice(&inf.feed(&z[5..]).unwrap());
        out.extend(inf.finish().unwrap());
        assert_eq!(out, b"data: x\n\n");
    }
}
