//! A minimal HTTP/1.1 server side: read one request (head, then a `Content-Length` or chunked
//! body), and the response heads. Hand-written so that every event is exactly one `write` on a
//! `TCP_NODELAY` socket and its send instant is known; no framework buffers in between.

use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Largest request head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Largest request body accepted.
const MAX_BODY: usize = 32 * 1024 * 1024;

/// One parsed request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path without the query string.
    pub path: String,
    /// The connection stays open after the response (HTTP/1.1 without `Connection: close`).
    pub keep_alive: bool,
    /// The response may use chunked transfer coding (HTTP/1.1).
    pub chunked_ok: bool,
    /// The `x-request-id` header, when it is printable ASCII of at most 200 bytes.
    pub request_id: Option<String>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
    /// The kernel's receive instant of the read that completed the request (`kstamp`); `None`
    /// when the socket does not stamp, or the request was already buffered (pipelined).
    pub received: Option<std::time::SystemTime>,
}

/// Why no request could be read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReadError {
    /// The client closed (or went silent) between requests: not an error.
    Closed,
    /// The bytes are not an HTTP/1.x request; answer with this status and close.
    Bad(u16, &'static str),
}

/// Reads one request from `stream`; `buf` holds bytes already read (pipelining) and keeps any
/// bytes after this request. Waits at most `idle` for each read.
pub(crate) async fn read_request(
    stream: &mut crate::kstamp::SentStream,
    buf: &mut Vec<u8>,
    idle: Duration,
) -> Result<Request, ReadError> {
    let mut sent_continue = false;
    let mut received = None;
    loop {
        match parse(buf)? {
            Parsed::Complete(mut req, used) => {
                buf.drain(..used);
                req.received = received;
                return Ok(req);
            }
            Parsed::NeedBody { expect_continue } => {
                if expect_continue && !sent_continue {
                    sent_continue = true;
                    if stream
                        .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                        .await
                        .is_err()
                    {
                        return Err(ReadError::Closed);
                    }
                }
            }
            Parsed::NeedHead => {}
        }
        let start = buf.len();
        buf.resize(start + 16 * 1024, 0);
        let n =
            match tokio::time::timeout(idle, crate::kstamp::read(stream.tcp(), &mut buf[start..]))
                .await
            {
                Ok(Ok((n, at))) => {
                    received = at;
                    n
                }
                Ok(Err(_)) | Err(_) => 0,
            };
        buf.truncate(start + n);
        if n == 0 {
            return Err(ReadError::Closed);
        }
    }
}

enum Parsed {
    NeedHead,
    NeedBody { expect_continue: bool },
    Complete(Request, usize),
}

fn parse(buf: &[u8]) -> Result<Parsed, ReadError> {
    let mut headers = [httparse::EMPTY_HEADER; 96];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
            return Err(ReadError::Bad(431, "request head too large"));
        }
        Ok(httparse::Status::Partial) => return Ok(Parsed::NeedHead),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(ReadError::Bad(431, "too many headers"));
        }
        Err(_) => return Err(ReadError::Bad(400, "not an HTTP/1.x request")),
    };
    let version = req.version.unwrap_or(0);
    let mut out = Request {
        method: req.method.unwrap_or_default().to_owned(),
        path: req
            .path
            .unwrap_or("/")
            .split('?')
            .next()
            .unwrap_or("/")
            .to_owned(),
        keep_alive: version == 1,
        chunked_ok: version == 1,
        ..Request::default()
    };
    let mut content_length: Option<usize> = None;
    let mut chunked = false;
    let mut expect_continue = false;
    for h in req.headers.iter() {
        let v = std::str::from_utf8(h.value).unwrap_or("").trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = v
                .parse::<usize>()
                .map_err(|_| ReadError::Bad(400, "bad Content-Length"))?;
            if content_length.is_some_and(|c| c != n) {
                return Err(ReadError::Bad(400, "conflicting Content-Length"));
            }
            content_length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = v.to_ascii_lowercase().ends_with("chunked");
            if !chunked {
                return Err(ReadError::Bad(501, "unsupported Transfer-Encoding"));
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            let v = v.to_ascii_lowercase();
            if v.split(',').any(|t| t.trim() == "close") {
                out.keep_alive = false;
            }
        } else if h.name.eq_ignore_ascii_case("expect") {
            expect_continue = v.eq_ignore_ascii_case("100-continue");
        } else if h.name.eq_ignore_ascii_case("x-request-id")
            && !v.is_empty()
            && v.len() <= 200
            && v.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
        {
            out.request_id = Some(v.to_owned());
        }
    }
    let rest = &buf[head_len..];
    if chunked {
        return match dechunk(rest)? {
            Some((body, used)) => {
                out.body = body;
                Ok(Parsed::Complete(out, head_len + used))
            }
            None => Ok(Parsed::NeedBody { expect_continue }),
        };
    }
    let len = content_length.unwrap_or(0);
    if len > MAX_BODY {
        return Err(ReadError::Bad(413, "request body too large"));
    }
    if rest.len() < len {
        return Ok(Parsed::NeedBody { expect_continue });
    }
    out.body = rest[..len].to_vec();
    Ok(Parsed::Complete(out, head_len + len))
}

/// Decodes a complete chunked body at the start of `b`: `(body, bytes used)`, or `None` when
/// more bytes are needed. Trailers are skipped.
fn dechunk(b: &[u8]) -> Result<Option<(Vec<u8>, usize)>, ReadError> {
    let mut body = Vec::new();
    let mut pos = 0;
    loop {
        let (size_len, size) = match httparse::parse_chunk_size(&b[pos..]) {
            Ok(httparse::Status::Complete(x)) => x,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(ReadError::Bad(400, "bad chunk size")),
        };
        pos += size_len;
        let size = usize::try_from(size).map_err(|_| ReadError::Bad(413, "chunk too large"))?;
        if body.len().saturating_add(size) > MAX_BODY {
            return Err(ReadError::Bad(413, "request body too large"));
        }
        if size == 0 {
            // Trailer section: header lines until an empty line.
            loop {
                let Some(eol) = b[pos..].windows(2).position(|w| w == b"\r\n") else {
                    return Ok(None);
                };
                pos += eol + 2;
                if eol == 0 {
                    return Ok(Some((body, pos)));
                }
            }
        }
        if b.len() < pos + size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&b[pos..pos + size]);
        if &b[pos + size..pos + size + 2] != b"\r\n" {
            return Err(ReadError::Bad(400, "bad chunk"));
        }
        pos += size + 2;
    }
}

/// The reason phrase of a status code.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Site Overloaded",
        _ => "Unknown",
    }
}

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `Content-Length: n`.
    Length(usize),
    /// `Transfer-Encoding: chunked` (keep-alive streams).
    Chunked,
    /// Until the connection closes (HTTP/1.0 clients, `Connection: close`).
    Close,
}

/// A response head; `request_id` is echoed as `x-request-id` unless empty. `extra` headers are
/// written as given (names and values must be clean).
pub(crate) fn head(
    status: u16,
    content_type: &str,
    framing: Framing,
    keep_alive: bool,
    request_id: &str,
    extra: &[(&str, &str)],
) -> Vec<u8> {
    let mut h = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\nserver: tokenprobe-simulate\r\n",
        reason(status)
    );
    if !request_id.is_empty() {
        h.push_str(&format!("x-request-id: {request_id}\r\n"));
    }
    match framing {
        Framing::Length(n) => h.push_str(&format!("content-length: {n}\r\n")),
        Framing::Chunked => h.push_str("transfer-encoding: chunked\r\n"),
        Framing::Close => {}
    }
    if content_type.starts_with("text/event-stream") {
        h.push_str("cache-control: no-cache\r\n");
    }
    h.push_str(if keep_alive {
        "connection: keep-alive\r\n"
    } else {
        "connection: close\r\n"
    });
    for (n, v) in extra {
        h.push_str(&format!("{n}: {v}\r\n"));
    }
    h.push_str("\r\n");
    h.into_bytes()
}

/// Frames `payload` for the wire into `out` (cleared first): one chunk when chunked, else as is.
pub(crate) fn frame(out: &mut Vec<u8>, payload: &[u8], chunked: bool) {
    out.clear();
    if chunked {
        out.extend_from_slice(format!("{:x}\r\n", payload.len()).as_bytes());
        out.extend_from_slice(payload);
        out.extend_from_slice(b"\r\n");
    } else {
        out.extend_from_slice(payload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(raw: &[u8]) -> (Request, usize) {
        match parse(raw) {
            Ok(Parsed::Complete(r, n)) => (r, n),
            Ok(_) => panic!("incomplete"),
            Err(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn content_length_and_pipelining() {
        let raw = b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nX-Request-Id: abc-1\r\n\r\n{}GET /";
        let (r, n) = complete(raw);
        assert_eq!(
            (r.method.as_str(), r.path.as_str()),
            ("POST", "/v1/chat/completions")
        );
        assert_eq!(r.body, b"{}");
        assert_eq!(r.request_id.as_deref(), Some("abc-1"));
        assert!(r.keep_alive && r.chunked_ok);
        assert_eq!(&raw[n..], b"GET /");
    }

    #[test]
    fn partial_heads_and_bodies_wait() {
        assert!(matches!(
            parse(b"POST / HTTP/1.1\r\nContent-Len"),
            Ok(Parsed::NeedHead)
        ));
        assert!(matches!(
            parse(b"POST / HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nab"),
            Ok(Parsed::NeedBody {
                expect_continue: true
            })
        ));
    }

    #[test]
    fn chunked_bodies() {
        let raw = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: v\r\n\r\nNEXT";
        let (r, n) = complete(raw);
        assert_eq!(r.body, b"abcde");
        assert_eq!(&raw[n..], b"NEXT");
        assert!(matches!(
            parse(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab"),
            Ok(Parsed::NeedBody { .. })
        ));
        assert!(parse(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_err());
    }

    #[test]
    fn connection_close_http10_and_garbage() {
        let (r, _) = complete(b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n");
        assert!(!r.keep_alive && r.chunked_ok);
        let (r, _) = complete(b"GET /health HTTP/1.0\r\n\r\n");
        assert!(!r.keep_alive && !r.chunked_ok);
        assert_eq!(
            parse(b"\x16\x03\x01garbage\r\n\r\n").err(),
            Some(ReadError::Bad(400, "not an HTTP/1.x request"))
        );
        let (r, _) = complete(b"GET / HTTP/1.1\r\nx-request-id: a\xffb\r\n\r\n");
        assert_eq!(r.request_id, None);
    }

    #[test]
    fn heads_and_frames() {
        let h = head(
            429,
            "application/json",
            Framing::Length(3),
            true,
            "id1",
            &[("retry-after", "1")],
        );
        let s = String::from_utf8(h).unwrap();
        assert!(s.starts_with("HTTP/1.1 429 Too Many Requests\r\n"));
        assert!(
            s.contains("content-length: 3\r\n")
                && s.contains("retry-after: 1\r\n")
                && s.ends_with("\r\n\r\n")
        );
        let mut out = Vec::new();
        frame(&mut out, b"data: x\n\n", true);
        assert_eq!(out, b"9\r\ndata: x\n\n\r\n");
        frame(&mut out, b"abc", false);
        assert_eq!(out, b"abc");
    }
}
