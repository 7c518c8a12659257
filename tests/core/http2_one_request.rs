//! One probe is exactly one request on HTTP/2 too: a server that refuses the stream
//! (`RST_STREAM REFUSED_STREAM`) or sends `GOAWAY` before processing it must see one request, and
//! the probe fails; the HTTP client's default retry of such "protocol NACKs" would otherwise send a
//! second request and report its success, with the retry inside the TTFT.
//!
//! The server is a minimal HTTP/2 speaker over TLS (ALPN `h2`), written here frame by frame so each
//! misbehaviour is exact: the first request it receives gets the fault, any later one a valid
//! event stream (so a retry would succeed, and the test would see it).

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;
const REFUSED_STREAM: u32 = 0x7;

#[derive(Clone, Copy, Debug)]
enum Fault {
    RefuseStream,
    GoAway,
    /// A response head that never ends: HEADERS without END_HEADERS, then CONTINUATION frames
    /// of 16 KiB each, endlessly (the CONTINUATION flood of CVE-2024-27316 and kin).
    ContinuationFlood,
    /// SETTINGS frames, one after another, none waiting for its ACK.
    SettingsFlood,
}

const CONTINUATION: u8 = 9;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

const SSE: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there\"},\"finish_reason\":\"stop\"}]}\n\n\
data: [DONE]\n\n";

struct Counts {
    requests: AtomicUsize,
    connections: AtomicUsize,
}

async fn serve_conn<S>(mut s: S, fault: Fault, counts: Arc<Counts>) -> std::io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut preface = [0u8; 24];
    s.read_exact(&mut preface).await?;
    assert_eq!(&preface, PREFACE, "client preface");
    s.write_all(&frame(SETTINGS, 0, 0, &[])).await?;
    loop {
        let mut h = [0u8; 9];
        if s.read_exact(&mut h).await.is_err() {
            return Ok(()); // the client closed
        }
        let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
        let (kind, flags) = (h[3], h[4]);
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).await?;
        match kind {
            SETTINGS if flags & ACK == 0 => s.write_all(&frame(SETTINGS, ACK, 0, &[])).await?,
            PING if flags & ACK == 0 => s.write_all(&frame(PING, ACK, 0, &payload)).await?,
            HEADERS => {
                let n = counts.requests.fetch_add(1, Ordering::SeqCst) + 1;
                if n == 1 {
                    match fault {
                        Fault::ContinuationFlood => {
                            s.write_all(&frame(HEADERS, 0, stream, &[0x88])).await?;
                            // A literal header, never indexed, repeated: 16 KiB per frame.
                            let block = [0x10, 0x01, b'x', 0x7f, 0x81, 0x7f]
                                .iter()
                                .copied()
                                .chain(std::iter::repeat_n(b'a', 16 * 1024 - 6))
                                .collect::<Vec<u8>>();
                            for _ in 0..2_000 {
                                if s.write_all(&frame(CONTINUATION, 0, stream, &block))
                                    .await
                                    .is_err()
                                {
                                    return Ok(());
                                }
                            }
                            return Ok(());
                        }
                        Fault::SettingsFlood => {
                            for _ in 0..100_000 {
                                if s.write_all(&frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100]))
                                    .await
                                    .is_err()
                                {
                                    return Ok(());
                                }
                            }
                            return Ok(());
                        }
                        Fault::RefuseStream => {
                            s.write_all(&frame(
                                RST_STREAM,
                                0,
                                stream,
                                &REFUSED_STREAM.to_be_bytes(),
                            ))
                            .await?;
                        }
                        Fault::GoAway => {
                            // last-stream-id 0: this stream was not processed, so a client may
                            // retry it elsewhere. Then close.
                            let mut p = 0u32.to_be_bytes().to_vec();
                            p.extend_from_slice(&0u32.to_be_bytes()); // NO_ERROR
                            s.write_all(&frame(GOAWAY, 0, 0, &p)).await?;
                            s.flush().await?;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            return Ok(());
                        }
                    }
                } else {
                    // `:status: 200` is index 8 of HPACK's static table.
                    s.write_all(&frame(HEADERS, END_HEADERS, stream, &[0x88]))
                        .await?;
                    s.write_all(&frame(DATA, END_STREAM, stream, SSE.as_bytes()))
                        .await?;
                }
            }
            _ => {} // DATA of the request body, WINDOW_UPDATE, SETTINGS ACK, PING ACK
        }
        s.flush().await?;
    }
}

async fn start_h2(fault: Fault, dir: &Path) -> (SocketAddr, Arc<Counts>) {
    let (cert, key) = common::test_cert(dir);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .expect("cert")
        .collect::<Result<_, _>>()
        .expect("cert");
    let key = PrivateKeyDer::from_pem_file(&key).expect("key");
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("tls versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("server cert");
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let counts = Arc::new(Counts {
        requests: AtomicUsize::new(0),
        connections: AtomicUsize::new(0),
    });
    let c = counts.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            c.connections.fetch_add(1, Ordering::SeqCst);
            let (acceptor, c) = (acceptor.clone(), c.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    let _ = serve_conn(tls, fault, c).await;
                }
            });
        }
    });
    (addr, counts)
}

fn probe(addr: SocketAddr) -> serde_json::Value {
    let out = Command::new(common::tokenprobe_bin())
        .args([
            "probe",
            "--base-url",
            &format!("https://localhost:{}/v1", addr.port()),
        ])
        .args(["--model", "m", "--insecure-skip-verify", "--proxy", "none"])
        .args(["--format", "json", "--timeout-total", "10s"])
        .output()
        .expect("run tokenprobe probe");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

async fn one_request_under(fault: Fault) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (addr, counts) = start_h2(fault, dir.path()).await;
    let v = tokio::task::spawn_blocking(move || probe(addr))
        .await
        .expect("probe task");
    assert_eq!(
        counts.requests.load(Ordering::SeqCst),
        1,
        "{fault:?}: the server saw more than one request for one probe: {v}"
    );
    assert_eq!(v["outcome"], "error", "{fault:?}: {v}");
    assert_eq!(v["ttft_s"], serde_json::Value::Null, "{fault:?}: {v}");
    assert_eq!(
        counts.connections.load(Ordering::SeqCst),
        1,
        "{fault:?}: reconnected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_stream_is_not_retried() {
    one_request_under(Fault::RefuseStream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goaway_is_not_retried() {
    one_request_under(Fault::GoAway).await;
}

/// The server itself answers a second request properly: without this, the two tests above could
/// pass against a server that never answers at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_server_answers_a_second_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (addr, counts) = start_h2(Fault::RefuseStream, dir.path()).await;
    let first = tokio::task::spawn_blocking(move || probe(addr))
        .await
        .expect("task");
    assert_eq!(first["outcome"], "error");
    let second = tokio::task::spawn_blocking(move || probe(addr))
        .await
        .expect("task");
    assert_eq!(second["outcome"], "success", "{second}");
    assert_eq!(second["output_tokens"], 2, "{second}");
    assert_eq!(counts.requests.load(Ordering::SeqCst), 2);
}

/// A server that abuses HTTP/2's framing (a head that never ends, a flood of SETTINGS) spoke,
/// badly: `malformed`, as the same abuse over HTTP/1 is, never a network fault (`connect`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_framing_abuse_is_malformed() {
    for fault in [Fault::ContinuationFlood, Fault::SettingsFlood] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (addr, counts) = start_h2(fault, dir.path()).await;
        let v = tokio::task::spawn_blocking(move || probe(addr))
            .await
            .expect("probe task");
        assert_eq!(v["error_type"], "malformed", "{fault:?}: {v}");
        assert_eq!(counts.requests.load(Ordering::SeqCst), 1, "{fault:?}");
    }
}
