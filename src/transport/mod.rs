//! The HTTP client of a prober: hyper's client over our own connector ([`connect`]), so that the
//! connection set-up is timed phase by phase and every read of the socket carries the kernel's
//! receive instant ([`crate::kstamp`]).
//!
//! The connector records the phases into the transport's [`PhaseClock`] (`resolve`, `connect`,
//! `tls`, as blackbox_exporter names them; through an HTTPS proxy, `connect` includes the CONNECT
//! exchange), and its streams record each read into the transport's [`ReadStamps`]. Both hold one
//! request's state: a [`Transport`] is not `Clone` and [`Transport::send`] takes it `&mut` and
//! starts both afresh, so the compiler keeps two requests from sharing them. The client never
//! retries, redirects or reconnects: one probe is one request (HTTP/2 too).

mod classify;
mod connect;
mod fetch;
mod options;
mod tls;
mod uri;

pub use crate::kstamp::{ReadStamps, Stamp};
pub use crate::measure::Phases;
use bytes::Bytes;
pub(crate) use classify::classify_transport;
pub use connect::{ConnectError, ConnectKind};
pub use fetch::{FetchError, Fetched, Fetcher, sensitive_header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioTimer};
pub use options::{ConnectionMode, ProxySetting, TlsOptions};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
pub use tls::{MAX_CA_FILE_BYTES, ca_certificates};
pub use uri::request_uri;

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Marks {
    pub(crate) dns_start: Option<Instant>,
    pub(crate) dns_end: Option<Instant>,
    pub(crate) connect_start: Option<Instant>,
    pub(crate) tls_start: Option<Instant>,
    pub(crate) connect_end: Option<Instant>,
}

/// The instants of the current request's connection set-up, shared between the transport and its
/// connector.
#[derive(Debug, Default, Clone)]
pub(crate) struct PhaseClock(Arc<Mutex<Marks>>);

impl PhaseClock {
    pub(crate) fn with(&self, f: impl FnOnce(&mut Marks)) {
        if let Ok(mut m) = self.0.lock() {
            f(&mut m);
        }
    }

    /// Forgets the previous request's marks.
    pub(crate) fn reset(&self) {
        self.with(|m| *m = Marks::default());
    }

    /// Marks the start of a TLS handshake (the first mark of a probe counts).
    pub(crate) fn mark_tls_start(&self) {
        self.with(|m| {
            if m.tls_start.is_none() {
                m.tls_start = Some(Instant::now());
            }
        });
    }

    /// The phases recorded since the last reset.
    pub(crate) fn phases(&self) -> Phases {
        let m = self.0.lock().map(|m| *m).unwrap_or_default();
        let d = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(a), Some(b)) if b >= a => Some(b.duration_since(a).as_secs_f64()),
            _ => None,
        };
        let Some(start) = m.connect_start else {
            return Phases {
                reused: true,
                ..Phases::default()
            };
        };
        let tcp_start = m.dns_end.unwrap_or(start);
        Phases {
            reused: false,
            resolve_s: d(m.dns_start, m.dns_end),
            connect_s: d(Some(tcp_start), m.tls_start.or(m.connect_end)),
            tls_s: d(m.tls_start, m.connect_end),
        }
    }
}

/// The body of a request.
pub type Body = Full<Bytes>;

/// The error of a request that got no response head.
pub type SendError = hyper_util::client::legacy::Error;

/// An HTTP client plus the phase clock and read stamps of its current request (one request at a
/// time: not `Clone`, and [`Transport::send`] takes it `&mut`).
pub struct Transport {
    client: Client<connect::Connector, Body>,
    connector: connect::Connector,
    clock: PhaseClock,
    stamps: ReadStamps,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport").finish_non_exhaustive()
    }
}

/// Client settings of a target (the connection set-up deadline is the probe's `timeouts.connect`).
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// Proxy choice.
    pub proxy: ProxySetting,
    /// TLS trust.
    pub tls: TlsOptions,
    /// New connection per probe, or keep-alive reuse.
    pub connection: ConnectionMode,
}

/// Errors building a transport.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The proxy URL is unusable.
    #[error("cannot use the proxy URL: {0}")]
    Proxy(String),
    /// The CA file could not be read or parsed.
    #[error("cannot load ca_file {path}: {reason}")]
    CaFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The TLS configuration was rejected.
    #[error("TLS configuration: {0}")]
    Tls(String),
}

/// The `User-Agent` of every request.
pub const USER_AGENT: &str = concat!("tokenprobe/", env!("CARGO_PKG_VERSION"));

impl Transport {
    /// Builds a client: no redirects (hyper's client follows none), no retries, TCP_NODELAY,
    /// instrumented phases, stamped reads.
    ///
    /// # Errors
    /// [`TransportError`] when the CA file, the proxy URL or the TLS settings are unusable.
    pub fn new(opts: &ClientOptions, connect_timeout: Duration) -> Result<Self, TransportError> {
        let clock = PhaseClock::default();
        let proxies = match &opts.proxy {
            ProxySetting::Environment => Some(Matcher::from_env()),
            ProxySetting::Disabled => None,
            ProxySetting::Url(u) => {
                u.parse::<hyper::Uri>()
                    .map_err(|e| TransportError::Proxy(e.to_string()))?;
                Some(Matcher::builder().all(u.clone()).build())
            }
        };
        let connector = connect::Connector {
            clock: clock.clone(),
            stamps: ReadStamps::default(),
            tls: Arc::new(tls::config(&opts.tls, &[b"h2", b"http/1.1"])?),
            proxy_tls: Arc::new(tls::config(&opts.tls, &[b"http/1.1"])?),
            proxies: proxies.map(Arc::new),
            timeout: connect_timeout,
            user_agent: USER_AGENT,
        };
        let mut b = Client::builder(TokioExecutor::new());
        // One probe is one request: hyper's client would otherwise re-send a request whose
        // pooled connection closed before it was written.
        b.retry_canceled_requests(false)
            .pool_timer(TokioTimer::new());
        match opts.connection {
            ConnectionMode::New => b.pool_max_idle_per_host(0),
            ConnectionMode::Reuse => b.pool_idle_timeout(Duration::from_secs(300)),
        };
        Ok(Transport {
            client: b.build(connector.clone()),
            stamps: connector.stamps.clone(),
            connector,
            clock,
        })
    }

    /// The connection set-up of the latest request (`reused` when it took a pooled connection).
    pub fn phases(&self) -> Phases {
        self.clock.phases()
    }

    /// The reads of the latest request's connection, so far.
    pub fn stamps(&self) -> &ReadStamps {
        &self.stamps
    }

    /// Sends `req` (its phases and reads recorded afresh) and waits for the response head. A plain-HTTP request through a proxy carries
    /// the proxy's credentials (an HTTPS one sends them in its CONNECT).
    ///
    /// # Errors
    /// [`SendError`] when no response head came (its chain holds a [`ConnectError`] for a failed
    /// set-up).
    pub async fn send(
        &mut self,
        mut req: hyper::Request<Body>,
    ) -> Result<hyper::Response<Incoming>, SendError> {
        // This request's state starts here.
        self.clock.reset();
        self.stamps.reset();
        let h = req.headers_mut();
        if !h.contains_key(hyper::header::USER_AGENT) {
            h.insert(
                hyper::header::USER_AGENT,
                hyper::header::HeaderValue::from_static(USER_AGENT),
            );
        }
        if req.uri().scheme_str() == Some("http")
            && let Some(auth) = self
                .connector
                .intercept(req.uri())
                .and_then(|i| i.basic_auth().cloned())
        {
            req.headers_mut()
                .insert(hyper::header::PROXY_AUTHORIZATION, auth);
        }
        self.client.request(req).await
    }
}

/// The next data of a body (trailers skipped); `None` at its end.
///
/// # Errors
/// hyper's error when the body broke.
pub async fn chunk(body: &mut Incoming) -> Result<Option<Bytes>, hyper::Error> {
    use http_body_util::BodyExt as _;
    loop {
        match body.frame().await {
            None => return Ok(None),
            Some(Err(e)) => return Err(e),
            Some(Ok(f)) => {
                if let Ok(d) = f.into_data()
                    && !d.is_empty()
                {
                    return Ok(Some(d));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_from_marks() {
        let c = PhaseClock::default();
        assert!(c.phases().reused);
        let t = Instant::now();
        let ms = |n: u64| t + Duration::from_millis(n);
        c.with(|m| {
            m.connect_start = Some(ms(0));
            m.dns_start = Some(ms(0));
            m.dns_end = Some(ms(5));
            m.tls_start = Some(ms(15));
            m.connect_end = Some(ms(45));
        });
        let p = c.phases();
        assert!(!p.reused);
        assert!((p.resolve_s.unwrap() - 0.005).abs() < 1e-9);
        assert!((p.connect_s.unwrap() - 0.010).abs() < 1e-9);
        assert!((p.tls_s.unwrap() - 0.030).abs() < 1e-9);
        c.reset();
        c.with(|m| {
            m.connect_start = Some(ms(0));
            m.connect_end = Some(ms(1));
        });
        let p = c.phases();
        assert_eq!((p.resolve_s, p.tls_s), (None, None));
        assert!((p.connect_s.unwrap() - 0.001).abs() < 1e-9);
    }
}
