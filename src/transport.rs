//! The HTTP client of a prober, instrumented to time connection set-up.
//!
//! reqwest does not report connection phases, so three hooks record instants into a shared
//! [`PhaseClock`]: a DNS resolver (`resolve`), a tower layer around reqwest's connector (the whole
//! set-up, and whether a new connection was opened at all), and a rustls session store whose lookup
//! marks the start of the TLS handshake (rustls asks it while building the ClientHello, right after
//! the TCP connection is up). Phase names follow blackbox_exporter: `resolve`, `connect`, `tls`.
//! Through an HTTPS proxy, `connect` includes the CONNECT exchange. One [`Transport`] serves one
//! probe at a time (a job never overlaps itself), so the clock needs no per-request correlation.

use crate::config::{ConnectionMode, ProxySetting, TlsOptions};
use rustls::client::{ClientSessionMemoryCache, ClientSessionStore, Resumption};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
use serde::Serialize;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Connection set-up of one probe, in seconds; `None` where the phase did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Phases {
    /// The probe used a pooled connection (no set-up at all).
    pub reused: bool,
    /// DNS resolution (absent for IP literals).
    pub resolve_s: Option<f64>,
    /// TCP connect (to the target, or to the proxy).
    pub connect_s: Option<f64>,
    /// TLS handshake.
    pub tls_s: Option<f64>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Marks {
    dns_start: Option<Instant>,
    dns_end: Option<Instant>,
    connect_start: Option<Instant>,
    tls_start: Option<Instant>,
    connect_end: Option<Instant>,
}

/// Shared instants of the current probe's connection set-up.
#[derive(Debug, Default, Clone)]
pub struct PhaseClock(Arc<Mutex<Marks>>);

impl PhaseClock {
    fn with(&self, f: impl FnOnce(&mut Marks)) {
        if let Ok(mut m) = self.0.lock() {
            f(&mut m);
        }
    }

    /// Forgets the previous probe's marks.
    pub fn reset(&self) {
        self.with(|m| *m = Marks::default());
    }

    /// True when a TLS handshake started since the last reset.
    pub fn tls_started(&self) -> bool {
        self.0
            .lock()
            .map(|m| m.tls_start.is_some())
            .unwrap_or(false)
    }

    /// The phases recorded since the last reset.
    pub fn phases(&self) -> Phases {
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

/// An HTTP client plus its phase clock.
#[derive(Debug, Clone)]
pub struct Transport {
    /// The client.
    pub client: reqwest::Client,
    /// Its phase clock.
    pub clock: PhaseClock,
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
    /// reqwest refused the settings.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
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

impl Transport {
    /// Builds a client: identity encoding, no redirects, no retries, TCP_NODELAY, instrumented
    /// phases.
    ///
    /// # Errors
    /// [`TransportError`] when the CA file, the proxy URL or the TLS settings are unusable.
    pub fn new(opts: &ClientOptions, connect_timeout: Duration) -> Result<Self, TransportError> {
        let clock = PhaseClock::default();
        let tls = tls_config(&opts.tls, clock.clone())?;
        let mut b = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            // One probe is one request: reqwest by default re-sends a request that an HTTP/2
            // server refused (REFUSED_STREAM) or dropped with GOAWAY, which would hide the failure
            // and put the retry inside the TTFT.
            .retry(reqwest::retry::never())
            .tcp_nodelay(true)
            .user_agent(concat!("tokenprobe/", env!("CARGO_PKG_VERSION")))
            .use_preconfigured_tls(tls)
            .dns_resolver(Arc::new(TimedResolver(clock.clone())))
            .connector_layer(TimingLayer(clock.clone()));
        b = match opts.connection {
            ConnectionMode::New => b.pool_max_idle_per_host(0),
            ConnectionMode::Reuse => b.pool_idle_timeout(Duration::from_secs(300)),
        };
        b = match &opts.proxy {
            ProxySetting::Environment => b,
            ProxySetting::Disabled => b.no_proxy(),
            ProxySetting::Url(u) => b.proxy(reqwest::Proxy::all(u)?),
        };
        Ok(Transport {
            client: b.build()?,
            clock,
        })
    }
}

fn tls_config(o: &TlsOptions, clock: PhaseClock) -> Result<rustls::ClientConfig, TransportError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TransportError::Tls(e.to_string()))?;
    let mut cfg = if o.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider)))
            .with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(path) = &o.ca_file {
            let err = |reason: String| TransportError::CaFile {
                path: path.display().to_string(),
                reason,
            };
            let pem = read_ca_file(path).map_err(err)?;
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| err(e.to_string()))?;
            if certs.is_empty() {
                return Err(err("no PEM certificate in the file".into()));
            }
            for c in certs {
                roots.add(c).map_err(|e| err(e.to_string()))?;
            }
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    cfg.resumption = Resumption::store(Arc::new(TimedSessionStore {
        inner: ClientSessionMemoryCache::new(64),
        clock,
    }));
    Ok(cfg)
}

/// The largest `ca_file` read (a full public CA bundle is about 250 KB).
const MAX_CA_FILE_BYTES: u64 = 8 << 20;

/// Reads a `ca_file`: a regular file (a device such as `/dev/zero` never ends, and a FIFO blocks
/// its opener) of at most [`MAX_CA_FILE_BYTES`].
fn read_ca_file(path: &std::path::Path) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut pem = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CA_FILE_BYTES + 1).read_to_end(&mut pem))
        .map_err(|e| e.to_string())?;
    if pem.len() as u64 > MAX_CA_FILE_BYTES {
        return Err(format!(
            "larger than {} MiB: not a CA bundle",
            MAX_CA_FILE_BYTES >> 20
        ));
    }
    Ok(pem)
}

/// DNS through tokio's resolver (the system's getaddrinfo), timed.
struct TimedResolver(PhaseClock);

impl reqwest::dns::Resolve for TimedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let clock = self.0.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            clock.with(|m| m.dns_start = Some(Instant::now()));
            let addrs = tokio::net::lookup_host((host.as_str(), 0)).await;
            clock.with(|m| m.dns_end = Some(Instant::now()));
            let addrs: Vec<_> = addrs?.collect();
            let it: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(it)
        })
    }
}

/// A tower layer that times reqwest's connector: its call is a new connection.
#[derive(Clone)]
struct TimingLayer(PhaseClock);

impl<S> tower::Layer<S> for TimingLayer {
    type Service = Timing<S>;
    fn layer(&self, inner: S) -> Timing<S> {
        Timing {
            inner,
            clock: self.0.clone(),
        }
    }
}

#[derive(Clone)]
struct Timing<S> {
    inner: S,
    clock: PhaseClock,
}

impl<S, R> tower::Service<R> for Timing<S>
where
    S: tower::Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.clock.with(|m| m.connect_start = Some(Instant::now()));
        let clock = self.clock.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let r = fut.await;
            clock.with(|m| m.connect_end = Some(Instant::now()));
            r
        })
    }
}

/// rustls' session cache, which also marks when a handshake starts (rustls consults the store
/// while it builds the ClientHello, right after the TCP connection is established).
#[derive(Debug)]
struct TimedSessionStore {
    inner: ClientSessionMemoryCache,
    clock: PhaseClock,
}

impl TimedSessionStore {
    fn mark(&self) {
        self.clock.with(|m| {
            if m.tls_start.is_none() {
                m.tls_start = Some(Instant::now());
            }
        });
    }
}

impl ClientSessionStore for TimedSessionStore {
    fn set_kx_hint(&self, n: ServerName<'static>, g: rustls::NamedGroup) {
        self.inner.set_kx_hint(n, g)
    }
    fn kx_hint(&self, n: &ServerName<'_>) -> Option<rustls::NamedGroup> {
        self.mark();
        self.inner.kx_hint(n)
    }
    fn set_tls12_session(
        &self,
        n: ServerName<'static>,
        v: rustls::client::Tls12ClientSessionValue,
    ) {
        self.inner.set_tls12_session(n, v)
    }
    fn tls12_session(&self, n: &ServerName<'_>) -> Option<rustls::client::Tls12ClientSessionValue> {
        self.mark();
        self.inner.tls12_session(n)
    }
    fn remove_tls12_session(&self, n: &ServerName<'static>) {
        self.inner.remove_tls12_session(n)
    }
    fn insert_tls13_ticket(
        &self,
        n: ServerName<'static>,
        v: rustls::client::Tls13ClientSessionValue,
    ) {
        self.inner.insert_tls13_ticket(n, v)
    }
    fn take_tls13_ticket(
        &self,
        n: &ServerName<'static>,
    ) -> Option<rustls::client::Tls13ClientSessionValue> {
        self.mark();
        self.inner.take_tls13_ticket(n)
    }
}

/// `insecure_skip_verify`: accepts any certificate (signatures are still checked for form).
#[derive(Debug)]
struct AcceptAnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        msg: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            msg,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        msg: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            msg,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
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
