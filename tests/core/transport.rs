//! The prober's own transport against real sockets on loopback, in-process:
//! - kernel-stamped reads: a read the runtime makes late still carries the instant its bytes
//!   arrived, checked against the server's own write instants of the same request;
//! - TLS with a `ca_file` (and a certificate nobody vouches for: `tls`);
//! - an HTTPS target through a CONNECT proxy with credentials, a proxy that refuses CONNECT
//!   (`proxy`), and plain HTTP through a proxy (absolute form, credentials on the request).

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokenprobe::config::Config;
use tokenprobe::measure::ProbeResult;
use tokenprobe::outcome::ErrorType;
use tokenprobe::probe::{ProbeSpec, Prober};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Instants the server took around its writes of one answer: before and after the head, the
/// first token's event and the second's.
#[derive(Debug, Clone, Copy)]
struct Writes {
    head: (Instant, Instant),
    first: (Instant, Instant),
    second: (Instant, Instant),
}

/// When a test server writes an answer's events: the first token `first` after the head, the
/// second `then` after the first.
#[derive(Debug, Clone, Copy)]
struct Pace {
    first: Duration,
    then: Duration,
}

const QUICK: Pace = Pace {
    first: Duration::from_millis(5),
    then: Duration::from_millis(20),
};

type Log = Arc<Mutex<Vec<Writes>>>;

fn event(text: &str) -> String {
    format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n")
}

fn chunk(s: &str) -> Vec<u8> {
    format!("{:x}\r\n{s}\r\n", s.len()).into_bytes()
}

/// Reads one request (head and a Content-Length body); returns its head.
async fn read_request<S: AsyncRead + Unpin>(s: &mut S) -> Option<String> {
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    let end = loop {
        let n = s.read(&mut b).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&b[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    while buf.len() - end < len {
        let n = s.read(&mut b).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&b[..n]);
    }
    Some(head)
}

/// Answers one request with an event stream: the head at once, then two tokens and `[DONE]` at
/// `pace`; logs its write instants.
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, pace: Pace, log: &Log) {
    if read_request(s).await.is_none() {
        return;
    }
    let head =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    let h0 = Instant::now();
    if s.write_all(head).await.is_err() || s.flush().await.is_err() {
        return;
    }
    let h1 = Instant::now();
    tokio::time::sleep(pace.first).await;
    let f0 = Instant::now();
    if s.write_all(&chunk(&event("Hi"))).await.is_err() || s.flush().await.is_err() {
        return;
    }
    let f1 = Instant::now();
    tokio::time::sleep(pace.then).await;
    let mut rest = chunk(&event(" there"));
    rest.extend_from_slice(&chunk("data: [DONE]\n\n"));
    rest.extend_from_slice(b"0\r\n\r\n");
    let s0 = Instant::now();
    let _ = s.write_all(&rest).await;
    let _ = s.flush().await;
    log.lock().unwrap().push(Writes {
        head: (h0, h1),
        first: (f0, f1),
        second: (s0, Instant::now()),
    });
}

/// A plain event-stream server on its own thread and runtime (so a test can stall the prober's
/// runtime without stalling the server).
fn plain_server_thread(pace: Pace) -> (SocketAddr, Log) {
    let log: Log = Arc::default();
    let l = log.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            while let Ok((mut s, _)) = listener.accept().await {
                let l = l.clone();
                tokio::spawn(async move {
                    // Answers requests until the client closes (a `reuse` prober keeps one
                    // connection; a `new` one opens one per probe).
                    loop {
                        answer(&mut s, pace, &l).await;
                        if s.peek(&mut [0u8; 1]).await.unwrap_or(0) == 0 {
                            break;
                        }
                    }
                });
            }
        });
    });
    (rx.recv().unwrap(), log)
}

fn spec(base_url: &str, target_extra: &str) -> ProbeSpec {
    let c = Config::parse(&format!(
        "prompts:\n  - name: p\n    messages: [{{role: user, content: \"Say hi\"}}]\n    max_tokens: 4\n\
         targets:\n  - name: t\n    base_url: {base_url}\n    models: [m]\n{target_extra}"
    ))
    .unwrap_or_else(|e| panic!("config: {e}"));
    ProbeSpec::from_job(&c.jobs[0])
}

fn ok(r: &ProbeResult) {
    assert_eq!(
        r.error_type, None,
        "{:?}: {:?}",
        r.error_type, r.error_detail
    );
}

/// A probe whose runtime (one thread) is stalled by a blocking call from 50 ms to 650 ms after
/// it starts, while the server answers at `pace`; returns the result, the server's write instants
/// and the stall's end. Probes first until one carries kernel stamps only: the kernel turns
/// receive stamping on for the whole machine a moment after the first socket asks, so the first
/// probes of a fresh machine may carry none.
fn stalled_probe(pace: Pace) -> (ProbeResult, Writes, Instant) {
    let (addr, log) = plain_server_thread(pace);
    let spec = spec(&format!("http://{addr}/v1"), "    proxy: none\n");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut prober = Prober::new(&spec).expect("prober");
        let mut tries = 0;
        loop {
            tries += 1;
            let r = prober.run(&spec).await;
            ok(&r);
            let lag = r.read_lag.expect("a head came: read_lag is set");
            assert!(lag.reads >= 2, "{lag:?}");
            if lag.unstamped_reads == 0 {
                break;
            }
            assert!(tries < 20, "no stamped probe in {tries}: {lag:?}");
        }
        let stall = tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            std::thread::sleep(Duration::from_millis(600));
            Instant::now()
        });
        let r = prober.run(&spec).await;
        let stall_end = stall.await.unwrap();
        ok(&r);
        let w = *log.lock().unwrap().last().unwrap();
        assert!(
            w.first.1 < stall_end,
            "the first token came {:?} after the stall: the test did not arrange a late read",
            w.first.1 - stall_end
        );
        assert_eq!(r.read_lag.unwrap().unstamped_reads, 0, "{:?}", r.read_lag);
        (r, w, stall_end)
    })
}

/// Loopback delivery takes microseconds; 2 ms covers a writer thread descheduled around a write.
const EPS: f64 = 0.002;

/// Head to first token, as measured, and the bounds the server's write instants put on it when
/// the first token's bytes are the ones stamped (`until`: the write whose arrival bounds it late).
fn head_to_first(r: &ProbeResult, w: &Writes, until: (Instant, Instant)) -> (f64, f64, f64) {
    let measured = r.ttft_s.unwrap() - r.ttfb_s.unwrap();
    let low = (w.first.0 - w.head.1).as_secs_f64() - EPS;
    let high = (until.1 - w.head.0).as_secs_f64() + EPS;
    (measured, low, high)
}

/// The runtime is stalled while the first token arrives (and nothing after it until the stall
/// ends): the event keeps the instant the kernel received it. The server's write instants of the
/// same answer bound the true interval between head and first token; the measured one lies in it,
/// although the read came hundreds of milliseconds later, which the read lag shows.
#[test]
fn a_late_read_keeps_the_instant_its_bytes_arrived() {
    let (r, w, stall_end) = stalled_probe(Pace {
        first: Duration::from_millis(200),
        then: Duration::from_millis(700),
    });
    assert!(
        w.second.0 > stall_end,
        "the second token came during the stall"
    );
    let (measured, low, high) = head_to_first(&r, &w, w.first);
    assert!(
        (low..=high).contains(&measured),
        "head to first token {measured:.4} s, the server wrote them {low:.4}..{high:.4} s apart"
    );
    let lag = r.read_lag.unwrap();
    let late = (stall_end - w.first.1).as_secs_f64();
    let first_lag = lag.first_token_s.unwrap();
    assert!(
        first_lag >= late - EPS,
        "the first token was read {first_lag:.4} s after it arrived, but the runtime was stalled {late:.4} s past its arrival"
    );
    assert!(lag.max_s >= first_lag, "{lag:?}");
}

/// Two events that arrive during one stall are read together, and the kernel stamps a read with
/// its last packet's arrival: the first event's instant is then at most that packet's, between
/// the two writes, and still far earlier than the read (docs/measurement.md, "Clock and
/// instants").
#[test]
fn events_read_together_carry_the_last_packets_instant() {
    let (r, w, stall_end) = stalled_probe(Pace {
        first: Duration::from_millis(200),
        then: Duration::from_millis(100),
    });
    assert!(
        w.second.1 < stall_end,
        "the second token came after the stall"
    );
    let (measured, low, high) = head_to_first(&r, &w, w.second);
    assert!(
        (low..=high).contains(&measured),
        "head to first token {measured:.4} s, the server wrote the first {low:.4} s and the second {high:.4} s after the head"
    );
    let user = (stall_end - w.head.0).as_secs_f64();
    assert!(
        measured < user,
        "{measured:.4} s is not earlier than the stall's end, {user:.4} s after the head"
    );
}

/// An HTTPS event-stream server (ALPN `http/1.1`) with a self-signed certificate; returns its
/// address and the certificate's path.
async fn tls_server(dir: &Path) -> (SocketAddr, std::path::PathBuf, Log) {
    let (cert, key) = common::test_cert(dir);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(&key).unwrap();
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log: Log = Arc::default();
    let l = log.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, l) = (acceptor.clone(), l.clone());
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    answer(&mut tls, QUICK, &l).await;
                }
            });
        }
    });
    (addr, cert, log)
}

/// How a test proxy answers.
#[derive(Clone, Copy)]
enum ProxyMode {
    /// CONNECT: `200`, then bytes both ways to the requested target.
    Tunnel,
    /// CONNECT: `407 Proxy Authentication Required`.
    Refuse,
    /// A plain-HTTP request in absolute form: answered by the proxy itself.
    Answer,
}

/// A proxy that records each request head it gets.
async fn proxy(mode: ProxyMode) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads: Arc<Mutex<Vec<String>>> = Arc::default();
    let h = heads.clone();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = listener.accept().await {
            let h = h.clone();
            tokio::spawn(async move {
                match mode {
                    ProxyMode::Answer => {
                        let log: Log = Arc::default();
                        let mut peeked = [0u8; 4096];
                        let n = c.peek(&mut peeked).await.unwrap_or(0);
                        h.lock()
                            .unwrap()
                            .push(String::from_utf8_lossy(&peeked[..n]).into_owned());
                        answer(&mut c, QUICK, &log).await;
                    }
                    ProxyMode::Tunnel | ProxyMode::Refuse => {
                        let Some(head) = read_request(&mut c).await else {
                            return;
                        };
                        h.lock().unwrap().push(head.clone());
                        if matches!(mode, ProxyMode::Refuse) {
                            let _ = c
                                .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n")
                                .await;
                            return;
                        }
                        let target = head
                            .split_whitespace()
                            .nth(1)
                            .unwrap_or_default()
                            .replace("localhost", "127.0.0.1");
                        let Ok(mut up) = TcpStream::connect(target).await else {
                            return;
                        };
                        let _ = c
                            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                            .await;
                        let _ = tokio::io::copy_bidirectional(&mut c, &mut up).await;
                    }
                }
            });
        }
    });
    (addr, heads)
}

fn basic(pair: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_ca_file_directly_and_through_a_connect_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, cert, log) = tls_server(dir.path()).await;
    let base = format!("https://localhost:{}/v1", addr.port());
    let ca = format!("    ca_file: {}\n", cert.display());

    let direct = spec(&base, &format!("{ca}    proxy: none\n"));
    let r = Prober::new(&direct).unwrap().run(&direct).await;
    ok(&r);
    assert_eq!(r.text, "Hi there");
    let p = r.phases.unwrap();
    assert!(
        !p.reused && p.connect_s.is_some() && p.tls_s.is_some(),
        "{p:?}"
    );
    assert_eq!(log.lock().unwrap().len(), 1);

    let (paddr, heads) = proxy(ProxyMode::Tunnel).await;
    let via = spec(
        &base,
        &format!("{ca}    proxy: http://tp-user:p%40ss@{paddr}\n"),
    );
    let r = Prober::new(&via).unwrap().run(&via).await;
    ok(&r);
    assert_eq!(r.text, "Hi there");
    assert!(r.phases.unwrap().tls_s.is_some());
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(
        heads[0].starts_with(&format!("CONNECT localhost:{} HTTP/1.1\r\n", addr.port())),
        "{}",
        heads[0]
    );
    assert_eq!(
        header(&heads[0], "proxy-authorization"),
        Some(basic("tp-user:p@ss").as_str())
    );
    assert_eq!(
        log.lock().unwrap().len(),
        2,
        "the answer came through the tunnel"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_certificate_is_tls_and_a_refused_connect_is_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, _cert, log) = tls_server(dir.path()).await;
    let base = format!("https://localhost:{}/v1", addr.port());

    let untrusted = spec(&base, "    proxy: none\n");
    let r = Prober::new(&untrusted).unwrap().run(&untrusted).await;
    assert_eq!(r.error_type, Some(ErrorType::Tls), "{:?}", r.error_detail);
    assert!(
        r.error_detail
            .as_deref()
            .unwrap_or("")
            .contains("certificate"),
        "{:?}",
        r.error_detail
    );

    let (paddr, heads) = proxy(ProxyMode::Refuse).await;
    let refused = spec(&base, &format!("    proxy: http://{paddr}\n"));
    let r = Prober::new(&refused).unwrap().run(&refused).await;
    assert_eq!(r.error_type, Some(ErrorType::Proxy), "{:?}", r.error_detail);
    assert_eq!(heads.lock().unwrap().len(), 1);
    assert!(log.lock().unwrap().is_empty(), "nothing reached the target");

    // A proxy nobody listens on: `proxy` for an HTTPS target and a plain one alike (the
    // connector knows it was the proxy it could not reach).
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    for base in [base.as_str(), "http://127.0.0.1:9/v1"] {
        let s = spec(base, &format!("    proxy: http://{dead}\n"));
        let r = Prober::new(&s).unwrap().run(&s).await;
        assert_eq!(
            r.error_type,
            Some(ErrorType::Proxy),
            "{base}: {:?}",
            r.error_detail
        );
        assert!(
            r.error_detail
                .as_deref()
                .unwrap_or("")
                .contains("via proxy"),
            "{:?}",
            r.error_detail
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_through_a_proxy_names_the_target_and_carries_the_credentials() {
    let (paddr, heads) = proxy(ProxyMode::Answer).await;
    let s = spec(
        "http://llm.invalid:8000/v1",
        &format!("    proxy: http://tp-user:s3cret@{paddr}\n"),
    );
    let r = Prober::new(&s).unwrap().run(&s).await;
    ok(&r);
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 1);
    assert!(
        heads[0].starts_with("POST http://llm.invalid:8000/v1/chat/completions HTTP/1.1\r\n"),
        "{}",
        heads[0]
    );
    assert_eq!(
        header(&heads[0], "proxy-authorization"),
        Some(basic("tp-user:s3cret").as_str())
    );
    assert_eq!(header(&heads[0], "host"), Some("llm.invalid:8000"));
}
