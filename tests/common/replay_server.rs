//! A replay server: a tokio TCP listener on 127.0.0.1:0 that, for every connection, reads one
//! HTTP/1.1 request in full, records it, and then plays a [`Script`] of timed writes (TCP_NODELAY,
//! one write per segment, times counted from the instant the request was read in full) and ends the
//! connection as the script says: a close, a reset (SO_LINGER 0), or held open until the client
//! closes it (bounded by [`KEEP_OPEN_LIMIT`]).
//!
//! The same script is served to every connection; requests are counted, so a test can assert that
//! a probe sent exactly one. Dropping the [`ReplayHandle`] stops the listener and every connection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, sleep_until, timeout};

use super::case::{Case, End, Script, render_http_dates};

/// How long a client may take to send its request before the server gives up on the connection.
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_HEAD_LINE: usize = 64 * 1024;
const MAX_BODY: usize = 16 * 1024 * 1024;
/// A connection the script keeps open is closed by the server after this long at the latest, so a
/// client that never closes cannot hold a test forever.
const KEEP_OPEN_LIMIT: Duration = Duration::from_secs(120);

/// One request as the server read it.
#[derive(Debug, Clone)]
pub struct ReceivedRequest {
    pub method: String,
    /// The request-target as sent: origin-form (`/v1/...`) or absolute-form (`http://host/...`).
    pub target: String,
    pub version: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl ReceivedRequest {
    /// First value of a header, name compared case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn body_json(&self) -> Result<serde_json::Value, String> {
        serde_json::from_slice(&self.body).map_err(|e| format!("request body is not JSON: {e}"))
    }

    /// The request line and headers, for messages.
    pub fn head_text(&self) -> String {
        let mut s = format!("{} {} {}\n", self.method, self.target, self.version);
        for (n, v) in &self.headers {
            s.push_str(&format!("{n}: {v}\n"));
        }
        s
    }
}

#[derive(Default)]
struct State {
    connections: AtomicUsize,
    requests: Mutex<Vec<ReceivedRequest>>,
    /// The number of requests read so far, for waiters.
    request_count: watch::Sender<usize>,
    errors: Mutex<Vec<String>>,
}

/// A running replay server. Dropping it aborts the listener and all connection tasks.
pub struct ReplayHandle {
    addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl ReplayHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests read in full so far.
    pub fn requests_received(&self) -> usize {
        self.state.requests.lock().map_or(0, |r| r.len())
    }

    pub fn requests(&self) -> Vec<ReceivedRequest> {
        self.state
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// Wait until at least `n` requests have been read in full.
    pub async fn wait_for_requests(&self, n: usize) {
        let mut rx = self.state.request_count.subscribe();
        let _ = rx.wait_for(|count| *count >= n).await;
    }

    /// TCP connections accepted so far (with or without a request).
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// Problems the server saw while reading requests (malformed request, timeout).
    pub fn errors(&self) -> Vec<String> {
        self.state
            .errors
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default()
    }
}

impl Drop for ReplayHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub struct ReplayServer;

impl ReplayServer {
    /// Serve `case` (gzip handled per the case's head) to every connection.
    pub async fn start(case: &Case) -> std::io::Result<(SocketAddr, ReplayHandle)> {
        let script = case.script().map_err(std::io::Error::other)?;
        Self::start_script(script).await
    }

    /// A listener that records requests and closes at once without answering; for asserting that
    /// nothing reaches an address (e.g. the target behind a proxy).
    pub async fn start_sink() -> std::io::Result<(SocketAddr, ReplayHandle)> {
        Self::start_script(Script {
            writes: Vec::new(),
            end: End::Close(Duration::ZERO),
        })
        .await
    }

    pub async fn start_script(script: Script) -> std::io::Result<(SocketAddr, ReplayHandle)> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State::default());
        let script = Arc::new(script);
        let task = tokio::spawn(accept_loop(listener, script, state.clone()));
        Ok((addr, ReplayHandle { addr, state, task }))
    }
}

async fn accept_loop(listener: TcpListener, script: Arc<Script>, state: Arc<State>) {
    // Connection tasks live in the JoinSet: aborting this task drops it and aborts them all.
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    state.connections.fetch_add(1, Ordering::SeqCst);
                    conns.spawn(serve_connection(stream, script.clone(), state.clone()));
                }
                Err(e) => {
                    push(&state.errors, format!("accept: {e}"));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn serve_connection(mut stream: TcpStream, script: Arc<Script>, state: Arc<State>) {
    let _ = stream.set_nodelay(true);
    let request = match timeout(REQUEST_READ_TIMEOUT, read_request(&mut stream)).await {
        Ok(Ok(Some(req))) => req,
        Ok(Ok(None)) => return, // closed before sending anything
        Ok(Err(e)) => {
            push(&state.errors, format!("reading request: {e}"));
            return;
        }
        Err(_) => {
            push(
                &state.errors,
                "request not complete within 10 s".to_string(),
            );
            return;
        }
    };
    // t = 0: the request has been read in full.
    let start = Instant::now();
    push(&state.requests, request);
    state.request_count.send_modify(|n| *n += 1);
    for write in &script.writes {
        sleep_precise(start + write.at).await;
        if write.bytes.is_empty() {
            continue;
        }
        let bytes = render_http_dates(&write.bytes, SystemTime::now());
        if stream.write_all(&bytes).await.is_err() {
            return; // the client went away (normal after a client-side deadline or error)
        }
    }
    match script.end {
        End::Close(at) => {
            sleep_precise(start + at).await;
            let _ = stream.shutdown().await;
        }
        End::Reset(at) => {
            sleep_precise(start + at).await;
            // SO_LINGER 0: closing sends a RST instead of a FIN.
            let _ = stream.set_zero_linger();
            drop(stream);
        }
        End::KeepOpen => {
            // Hold the connection until the client closes it (read returns 0 or fails).
            let mut sink = [0u8; 1024];
            let _ = timeout(KEEP_OPEN_LIMIT, async {
                while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
            })
            .await;
        }
    }
}

/// Tokio's timer has a 1 ms granularity and fires up to ~2 ms late; sleep until shortly before
/// `deadline`, then yield until it has passed, so writes land within ~0.1 ms of their time.
async fn sleep_precise(deadline: Instant) {
    const SPIN: Duration = Duration::from_millis(2);
    if let Some(coarse) = deadline.checked_sub(SPIN)
        && coarse > Instant::now()
    {
        sleep_until(coarse).await;
    }
    while Instant::now() < deadline {
        tokio::task::yield_now().await;
    }
}

fn push<T>(m: &Mutex<Vec<T>>, v: T) {
    if let Ok(mut g) = m.lock() {
        g.push(v);
    }
}

/// Read one HTTP/1.1 request: head up to the blank line, then a Content-Length or chunked body.
/// `Ok(None)` when the peer closed before sending a byte.
async fn read_request(stream: &mut TcpStream) -> Result<Option<ReceivedRequest>, String> {
    let mut r = BufReader::new(stream);
    let request_line = read_line(&mut r).await?;
    let Some(request_line) = request_line else {
        return Ok(None);
    };
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("bad request line {request_line:?}"));
    };
    let mut headers = Vec::new();
    loop {
        let line = read_line(&mut r)
            .await?
            .ok_or("connection closed inside the head")?;
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("bad header line {line:?}"))?;
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    let mut req = ReceivedRequest {
        method: method.to_string(),
        target: target.to_string(),
        version: version.to_string(),
        headers,
        body: Vec::new(),
    };
    let chunked = req
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        loop {
            let size_line = read_line(&mut r)
                .await?
                .ok_or("closed inside chunked body")?;
            let size_hex = size_line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_hex, 16)
                .map_err(|_| format!("bad chunk size {size_line:?}"))?;
            if size == 0 {
                // trailers, up to the blank line
                while !read_line(&mut r)
                    .await?
                    .ok_or("closed in trailers")?
                    .is_empty()
                {}
                break;
            }
            if req.body.len() + size > MAX_BODY {
                return Err("request body too large".into());
            }
            let mut chunk = vec![0u8; size];
            r.read_exact(&mut chunk).await.map_err(|e| e.to_string())?;
            req.body.extend_from_slice(&chunk);
            let crlf = read_line(&mut r).await?.ok_or("closed after a chunk")?;
            if !crlf.is_empty() {
                return Err("chunk not followed by CRLF".into());
            }
        }
    } else if let Some(len) = req.header("content-length") {
        let len: usize = len
            .parse()
            .map_err(|_| format!("bad Content-Length {len:?}"))?;
        if len > MAX_BODY {
            return Err("request body too large".into());
        }
        req.body = vec![0u8; len];
        r.read_exact(&mut req.body)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(Some(req))
}

/// One line without its CRLF/LF; `None` at EOF before any byte.
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
) -> Result<Option<String>, String> {
    let mut buf = Vec::new();
    let n = (&mut *r)
        .take(MAX_HEAD_LINE as u64)
        .read_until(b'\n', &mut buf)
        .await
        .map_err(|e| e.to_string())?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&b'\n') {
        return Err("line too long or connection closed mid-line".into());
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(Some(String::from_utf8_lossy(&buf).into_owned()))
}
