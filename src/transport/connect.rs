//! Opening a prober's connection: the route (direct, or through the proxy the target or the
//! environment names), DNS, TCP (through a [`StampedStream`], so every read carries its kernel
//! receive instant), a CONNECT tunnel for an HTTPS target behind a proxy (hyper-util's
//! `Tunnel`), and TLS with ALPN. The phases go to the [`PhaseClock`]; the whole set-up is bounded
//! by `timeouts.connect`. Each failure is a [`ConnectError`] whose kind decides the `error_type`.

use super::PhaseClock;
use crate::kstamp::{ReadStamps, StampedStream};
use hyper::Uri;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::client::proxy::matcher::{Intercept, Matcher};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What part of the set-up failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectKind {
    /// `timeouts.connect` passed.
    Timeout,
    /// DNS or TCP to the target.
    Connect,
    /// Reaching the proxy, or its CONNECT answer.
    Proxy,
    /// The TLS handshake.
    Tls,
}

/// A failed connection set-up.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct ConnectError {
    /// The part that failed.
    pub kind: ConnectKind,
    what: String,
    #[source]
    source: BoxError,
}

impl ConnectError {
    fn new(kind: ConnectKind, what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        ConnectError {
            kind,
            what: what.into(),
            source: source.into(),
        }
    }
}

/// Any stream a connection runs over (TCP, TLS over TCP, TLS through a tunnel).
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// An open connection, as hyper's client takes it.
pub struct Conn {
    io: TokioIo<Box<dyn Io>>,
    h2: bool,
    proxied: bool,
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        let c = Connected::new().proxy(self.proxied);
        if self.h2 { c.negotiated_h2() } else { c }
    }
}

impl hyper::rt::Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The connector of one transport (a tower service from the request URI to a [`Conn`]).
#[derive(Clone)]
pub struct Connector {
    pub(super) clock: PhaseClock,
    pub(super) stamps: ReadStamps,
    /// TLS to targets (ALPN `h2`, `http/1.1`).
    pub(super) tls: Arc<rustls::ClientConfig>,
    /// TLS to an `https://` proxy (ALPN `http/1.1`: the CONNECT exchange is HTTP/1.1).
    pub(super) proxy_tls: Arc<rustls::ClientConfig>,
    /// Which proxy a URI goes through; `None`: none.
    pub(super) proxies: Option<Arc<Matcher>>,
    pub(super) timeout: Duration,
    pub(super) user_agent: &'static str,
}

impl tower::Service<Uri> for Connector {
    type Response = Conn;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            this.clock.with(|m| m.connect_start = Some(Instant::now()));
            let r = tokio::time::timeout(this.timeout, this.open(dst)).await;
            this.clock.with(|m| m.connect_end = Some(Instant::now()));
            r.unwrap_or_else(|_| {
                Err(ConnectError::new(
                    ConnectKind::Timeout,
                    "connection set-up",
                    format!(
                        "timeouts.connect = {} passed",
                        humantime::format_duration(this.timeout)
                    ),
                ))
            })
        })
    }
}

/// The host of `u` without IPv6 brackets, and its port (the scheme's default when absent).
fn host_port(u: &Uri) -> Option<(String, u16)> {
    let host = u.host()?.trim_start_matches('[').trim_end_matches(']');
    let https = u.scheme_str() == Some("https");
    let port = u.port_u16().unwrap_or(if https { 443 } else { 80 });
    Some((host.to_owned(), port))
}

impl Connector {
    /// The proxy `dst` goes through, if any.
    pub(super) fn intercept(&self, dst: &Uri) -> Option<Intercept> {
        self.proxies.as_ref().and_then(|m| m.intercept(dst))
    }

    async fn open(&self, dst: Uri) -> Result<Conn, ConnectError> {
        let https = dst.scheme_str() == Some("https");
        let (host, port) = host_port(&dst)
            .ok_or_else(|| ConnectError::new(ConnectKind::Connect, "the URL", "it has no host"))?;
        let Some(proxy) = self.intercept(&dst) else {
            let tcp = self.tcp(&host, port, ConnectKind::Connect).await?;
            return if https {
                self.tls_to_target(Box::new(tcp), &host).await
            } else {
                Ok(plain(Box::new(tcp), false))
            };
        };
        if !https {
            // Plain HTTP through a proxy: the request goes to it in absolute form.
            let io = self.to_proxy(proxy.uri().clone()).await?;
            return Ok(plain(io, true));
        }
        let mut tunnel = Tunnel::new(proxy.uri().clone(), ProxyConnector(self.clone()));
        if let Some(auth) = proxy.basic_auth() {
            tunnel = tunnel.with_auth(auth.clone());
        }
        let mut ua = hyper::HeaderMap::new();
        ua.insert(
            hyper::header::USER_AGENT,
            hyper::header::HeaderValue::from_static(self.user_agent),
        );
        tunnel = tunnel.with_headers(ua);
        let tunneled = tower::Service::call(&mut tunnel, dst).await.map_err(|e| {
            // The proxy's own connection failure (its kind) is inside; the rest is the proxy's
            // answer to CONNECT.
            let inner = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<ConnectError>())
                .map(|c| c.kind);
            let kind = match inner {
                Some(ConnectKind::Timeout) => ConnectKind::Timeout,
                _ => ConnectKind::Proxy,
            };
            ConnectError::new(kind, "the proxy tunnel", e)
        })?;
        self.tls_to_target(tunneled.into_inner(), &host).await
    }

    /// DNS (timed, skipped for an IP literal) and TCP to `host:port`, each address in turn.
    async fn tcp(
        &self,
        host: &str,
        port: u16,
        kind: ConnectKind,
    ) -> Result<StampedStream, ConnectError> {
        let addrs: Vec<std::net::SocketAddr> = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => vec![(ip, port).into()],
            Err(_) => {
                self.clock.with(|m| m.dns_start = Some(Instant::now()));
                let r = tokio::net::lookup_host((host, port)).await;
                self.clock.with(|m| m.dns_end = Some(Instant::now()));
                r.map_err(|e| ConnectError::new(kind, format!("resolving {host}"), e))?
                    .collect()
            }
        };
        let mut last: Option<std::io::Error> = None;
        for a in &addrs {
            match tokio::net::TcpStream::connect(a).await {
                Ok(s) => {
                    // Small writes (a request) go out at once.
                    let _ = s.set_nodelay(true);
                    return Ok(StampedStream::new(s, self.stamps.clone()));
                }
                Err(e) => last = Some(e),
            }
        }
        let what = format!("connecting to {host}:{port}");
        Err(match last {
            Some(e) => ConnectError::new(kind, what, e),
            None => ConnectError::new(kind, what, "no address"),
        })
    }

    /// TCP (and TLS for an `https://` proxy) to the proxy.
    async fn to_proxy(&self, proxy: Uri) -> Result<Box<dyn Io>, ConnectError> {
        let (host, port) = host_port(&proxy).ok_or_else(|| {
            ConnectError::new(ConnectKind::Proxy, "the proxy URL", "it has no host")
        })?;
        let tcp = self.tcp(&host, port, ConnectKind::Proxy).await?;
        if proxy.scheme_str() != Some("https") {
            return Ok(Box::new(tcp));
        }
        let name = server_name(&host, ConnectKind::Proxy)?;
        let tls = tokio_rustls::TlsConnector::from(self.proxy_tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| {
                ConnectError::new(ConnectKind::Proxy, format!("TLS to the proxy {host}"), e)
            })?;
        Ok(Box::new(tls))
    }

    async fn tls_to_target(&self, io: Box<dyn Io>, host: &str) -> Result<Conn, ConnectError> {
        let name = server_name(host, ConnectKind::Tls)?;
        // The TCP connection (and any tunnel) is up: the handshake starts now.
        self.clock.mark_tls_start();
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, io)
            .await
            .map_err(|e| {
                ConnectError::new(ConnectKind::Tls, format!("TLS handshake with {host}"), e)
            })?;
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        Ok(Conn {
            io: TokioIo::new(Box::new(tls)),
            h2,
            proxied: false,
        })
    }
}

fn plain(io: Box<dyn Io>, proxied: bool) -> Conn {
    Conn {
        io: TokioIo::new(io),
        h2: false,
        proxied,
    }
}

fn server_name(host: &str, kind: ConnectKind) -> Result<ServerName<'static>, ConnectError> {
    ServerName::try_from(host.to_owned())
        .map_err(|e| ConnectError::new(kind, format!("the TLS server name {host:?}"), e))
}

/// The inner connector of a CONNECT tunnel: the connection to the proxy.
#[derive(Clone)]
struct ProxyConnector(Connector);

impl tower::Service<Uri> for ProxyConnector {
    type Response = TokioIo<Box<dyn Io>>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, proxy: Uri) -> Self::Future {
        let c = self.0.clone();
        Box::pin(async move { c.to_proxy(proxy).await.map(TokioIo::new) })
    }
}
