//! Protecting the endpoints: TLS and basic auth from a web config file, in the format of the
//! Prometheus exporter toolkit (`--web.config.file`):
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: /etc/tokenprobe/tls.crt
//!   key_file: /etc/tokenprobe/tls.key
//! basic_auth_users:
//!   prometheus: $2y$10$...   # bcrypt hash, e.g. from `htpasswd -nBC 10 prometheus`
//! ```
//!
//! With users configured every endpoint but `/-/healthy` and `/-/ready` (which orchestrators probe
//! without credentials) needs basic auth. bcrypt is deliberately slow, so checks run on the blocking
//! pool (one at a time), unknown users are checked against a dummy hash of the same cost (no
//! user enumeration by timing), and verified credentials are trusted for a minute (keyed by a
//! salted hash, never the password).
//!
//! [`serve`] is the web server itself: HTTP/1.1 with a head-read timeout, an idle timeout, a bound
//! on connections and a hard deadline on shutdown, so no client can hold the process.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::Deserialize;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// The parsed web config.
#[derive(Debug, Clone, Default)]
pub struct WebConfig {
    /// Certificate and key files (PEM) when TLS is on.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// user → bcrypt hash.
    pub users: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWeb {
    tls_server_config: Option<RawTls>,
    #[serde(default)]
    basic_auth_users: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert_file: String,
    key_file: String,
}

/// Why a web config is unusable.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    /// Unreadable file.
    #[error("cannot read web config {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Not the expected YAML.
    #[error("invalid web config: {0}")]
    Syntax(String),
    /// A value is wrong (the message names the key, never a hash or password).
    #[error("invalid web config: {0}")]
    Invalid(String),
}

impl WebConfig {
    /// Reads and checks a web config file.
    ///
    /// # Errors
    /// [`WebConfigError`] naming the problem.
    pub fn load(path: &Path) -> Result<Self, WebConfigError> {
        let text = crate::config::read_input_file(path).map_err(|source| WebConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text)
    }

    /// Parses web config text (see [`WebConfig::load`]).
    ///
    /// # Errors
    /// [`WebConfigError::Syntax`] or [`WebConfigError::Invalid`].
    pub fn parse(text: &str) -> Result<Self, WebConfigError> {
        let raw: RawWeb =
            serde_saphyr::from_str(text).map_err(|e| WebConfigError::Syntax(e.to_string()))?;
        for (user, hash) in &raw.basic_auth_users {
            if !hash.starts_with("$2") {
                return Err(WebConfigError::Invalid(format!(
                    "basic_auth_users.{user}: not a bcrypt hash (expected $2a$/$2b$/$2y$...)"
                )));
            }
        }
        let tls = raw
            .tls_server_config
            .map(|t| (PathBuf::from(t.cert_file), PathBuf::from(t.key_file)));
        if let Some((c, k)) = &tls {
            for (key, p) in [("cert_file", c), ("key_file", k)] {
                if std::fs::metadata(p).is_err() {
                    return Err(WebConfigError::Invalid(format!(
                        "tls_server_config.{key}: cannot read {}",
                        p.display()
                    )));
                }
            }
        }
        Ok(WebConfig {
            tls,
            users: raw.basic_auth_users,
        })
    }
}

/// How long a verified credential is trusted without running bcrypt again.
const VERIFIED_TTL: Duration = Duration::from_secs(60);
/// Most cached verified credentials (the cache is cleared when full).
const VERIFIED_MAX: usize = 1024;
/// Most bcrypt checks running at once (each takes a core for tens of milliseconds).
const MAX_CONCURRENT_CHECKS: usize = 1;

struct Auth {
    users: HashMap<String, String>,
    /// A hash of a random password at the highest cost of the configured users: unknown users are
    /// checked against it, so they take as long as a wrong password (no user enumeration).
    dummy: String,
    salt: std::collections::hash_map::RandomState,
    verified: Mutex<HashMap<u64, Instant>>,
    checks: Arc<Semaphore>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("users", &self.users.len())
            .finish_non_exhaustive()
    }
}

/// The cost field of a bcrypt hash (`$2y$10$...` is 10).
fn bcrypt_cost(hash: &str) -> Option<u32> {
    hash.split('$').nth(2)?.parse().ok()
}

impl Auth {
    fn new(users: HashMap<String, String>) -> Self {
        let cost = users
            .values()
            .filter_map(|h| bcrypt_cost(h))
            .max()
            .unwrap_or(bcrypt::DEFAULT_COST)
            .clamp(4, 31);
        let salt = std::collections::hash_map::RandomState::new();
        let random = format!("{:016x}", salt.hash_one(Instant::now()));
        let dummy = bcrypt::hash(random, cost).unwrap_or_default();
        Auth {
            users,
            dummy,
            salt,
            verified: Mutex::new(HashMap::new()),
            checks: Arc::new(Semaphore::new(MAX_CONCURRENT_CHECKS)),
        }
    }

    fn cached(&self, key: u64) -> bool {
        self.verified
            .lock()
            .map(|v| v.get(&key).is_some_and(|t| t.elapsed() < VERIFIED_TTL))
            .unwrap_or(false)
    }

    /// Checks a `Authorization` header value. bcrypt runs on the blocking pool, at most
    /// [`MAX_CONCURRENT_CHECKS`] at once, never on the async workers.
    async fn check(&self, header_value: Option<&str>) -> bool {
        let Some(creds) = header_value
            .and_then(|v| v.strip_prefix("Basic "))
            .and_then(|b| {
                base64::engine::general_purpose::STANDARD
                    .decode(b.trim())
                    .ok()
            })
            .and_then(|b| String::from_utf8(b).ok())
        else {
            return false;
        };
        let Some((user, pass)) = creds.split_once(':') else {
            return false;
        };
        let key = self.salt.hash_one(&creds);
        if self.cached(key) {
            return true;
        }
        let (known, hash) = match self.users.get(user) {
            Some(h) => (true, h.clone()),
            None => (false, self.dummy.clone()),
        };
        let Ok(permit) = self.checks.clone().acquire_owned().await else {
            return false;
        };
        let pass = pass.to_owned();
        let matched = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            // The lowest priority there is without privileges: when probes and bcrypt both want
            // a core, the probes get it (a flood of wrong passwords is bcrypt all the time).
            crate::resources::lower_thread_priority(19);
            bcrypt::verify(pass, &hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        let ok = matched && known;
        if ok && let Ok(mut v) = self.verified.lock() {
            if v.len() >= VERIFIED_MAX {
                v.clear();
            }
            v.insert(key, Instant::now());
        }
        ok
    }
}

async fn require_auth(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if path == "/-/healthy" || path == "/-/ready" {
        return next.run(req).await;
    }
    let value = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if auth.check(value).await {
        next.run(req).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic realm=\"tokenprobe\"")],
            "Unauthorized\n",
        )
            .into_response()
    }
}

/// Adds basic auth to `app` when the config has users.
pub fn protect(app: Router, web: &WebConfig) -> Router {
    if web.users.is_empty() {
        return app;
    }
    let auth = Arc::new(Auth::new(web.users.clone()));
    app.layer(middleware::from_fn_with_state(auth, require_auth))
}

/// Bounds of the web server, so no client can hold it (or the process's fds) forever.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A request head (or, on a kept-alive connection, the next one) must arrive within this;
    /// also bounds the TLS handshake.
    pub header_read_timeout: Duration,
    /// A connection with no byte read or written for this long is closed.
    pub idle_timeout: Duration,
    /// Connections served at once; further clients wait in the listen backlog (see
    /// [`crate::resources::web_connection_limit`]).
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: crate::resources::MAX_WEB_CONNECTIONS,
        }
    }
}

fn tls_acceptor(cert: &Path, key: &Path) -> std::io::Result<tokio_rustls::TlsAcceptor> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |what: &str, p: &Path, e: &dyn std::fmt::Display| {
        std::io::Error::other(format!("tls_server_config.{what} {}: {e}", p.display()))
    };
    // Read with the size cap of every input file (a `/dev/zero` cert must not take the memory).
    let read =
        |what: &str, p: &Path| crate::config::read_input_file(p).map_err(|e| bad(what, p, &e));
    let cert_pem = read("cert_file", cert)?;
    let key_pem = read("key_file", key)?;
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("cert_file", cert, &e))?;
    let key_der =
        PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| bad("key_file", key, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| bad("cert_file", cert, &e))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
}

/// Serves `app` on `listener` (TLS when configured) until `shutdown` completes, then stops
/// accepting, asks every connection to finish its request, and returns once they have, or after
/// `drain` at the latest (remaining connections are dropped).
///
/// HTTP/1.1 only. Every connection is bounded by `limits` (head and handshake timeout, idle
/// timeout); at most `limits.max_connections` are served at once, and when three quarters are
/// taken new connections are served without keep-alive so waiting clients get their turn.
///
/// # Errors
/// I/O errors of the listener, or an unusable certificate/key.
pub async fn serve(
    listener: std::net::TcpListener,
    app: Router,
    web: &WebConfig,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    drain: Duration,
) -> std::io::Result<()> {
    let app = protect(app, web);
    let tls = match &web.tls {
        Some((cert, key)) => Some(tls_acceptor(cert, key)?),
        None => None,
    };
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let max = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let stop = CancellationToken::new();
    let mut conns = tokio::task::JoinSet::new();
    let mut last_fd_warning: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    if crate::resources::is_fd_exhaustion_io(&e) {
                        if last_fd_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(1)) {
                            tracing::error!(error = %e, "the exporter is out of file descriptors: web connections wait");
                            last_fd_warning = Some(Instant::now());
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        while conns.try_join_next().is_some() {}
        let _ = stream.set_nodelay(true);
        let keep_alive = slots.available_permits() >= max / 4;
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        let tls = tls.clone();
        let stop = stop.clone();
        conns.spawn(async move {
            let _permit = permit;
            match tls {
                None => serve_connection(stream, svc, keep_alive, limits, stop).await,
                Some(acceptor) => {
                    let accepted =
                        tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream))
                            .await;
                    if let Ok(Ok(s)) = accepted {
                        serve_connection(s, svc, keep_alive, limits, stop).await;
                    }
                }
            }
        });
    }
    drop(listener);
    stop.cancel();
    let all_done = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(drain, all_done).await.is_err() {
        tracing::warn!(
            open = conns.len(),
            "web connections still open at the shutdown deadline: closed"
        );
    }
    conns.abort_all();
    Ok(())
}

async fn serve_connection<I>(
    io: I,
    svc: hyper_util::service::TowerToHyperService<Router>,
    keep_alive: bool,
    limits: Limits,
    stop: CancellationToken,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = Watched::new(io);
    let activity = io.activity.clone();
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(keep_alive)
        .max_buf_size(64 * 1024);
    let conn = b.serve_connection(hyper_util::rt::TokioIo::new(io), svc);
    tokio::pin!(conn);
    let mut watch = tokio::time::interval((limits.idle_timeout / 4).max(Duration::from_millis(10)));
    let mut draining = false;
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            () = stop.cancelled(), if !draining => {
                conn.as_mut().graceful_shutdown();
                draining = true;
            }
            _ = watch.tick() => {
                if activity.idle() >= limits.idle_timeout {
                    return;
                }
            }
        }
    }
}

/// When a connection last moved a byte.
#[derive(Debug)]
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn idle(&self) -> Duration {
        let now = self.start.elapsed();
        now.saturating_sub(Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// An I/O stream that notes every read and write that moved bytes (for the idle timeout).
struct Watched<I> {
    inner: I,
    activity: Arc<Activity>,
}

impl<I> Watched<I> {
    fn new(inner: I) -> Self {
        Watched {
            inner,
            activity: Arc::new(Activity {
                start: Instant::now(),
                last_ms: AtomicU64::new(0),
            }),
        }
    }
}

impl<I: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<I: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(s)
        )
    }

    fn auth_with(pass: &str, cost: u32) -> Auth {
        let hash = bcrypt::hash(pass, cost).unwrap();
        let web = WebConfig::parse(&format!("basic_auth_users:\n  prom: '{hash}'\n")).unwrap();
        Auth::new(web.users)
    }

    #[tokio::test]
    async fn basic_auth_checks_bcrypt_and_caches() {
        let auth = auth_with("s3cret", 4);
        assert!(auth.check(Some(&b64("prom:s3cret"))).await);
        assert!(auth.cached(auth.salt.hash_one("prom:s3cret")));
        assert!(auth.check(Some(&b64("prom:s3cret"))).await, "cached path");
        assert!(!auth.check(Some(&b64("prom:wrong"))).await);
        assert!(!auth.check(Some(&b64("other:s3cret"))).await);
        assert!(!auth.check(Some("Bearer x")).await);
        assert!(!auth.check(None).await);
        assert_eq!(bcrypt_cost(&auth.dummy), Some(4));
    }

    /// An unknown user costs a bcrypt check like a wrong password does (before: 0.4 ms against
    /// 70 ms, which told an attacker which user names exist). Medians of 5, cost 8 (about 15-25 ms
    /// per check here): the bound (a factor of 4 either way) only allows for CPU contention; a
    /// skipped check is over 100 times faster.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unknown_user_takes_as_long_as_a_wrong_password() {
        let auth = auth_with("s3cret", 8);
        let median = |mut v: Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        let mut wrong = Vec::new();
        let mut unknown = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            assert!(!auth.check(Some(&b64("prom:wrong"))).await);
            wrong.push(t.elapsed());
            let t = Instant::now();
            assert!(!auth.check(Some(&b64("nobody:wrong"))).await);
            unknown.push(t.elapsed());
        }
        let (w, u) = (median(wrong), median(unknown));
        assert!(
            u * 4 >= w && w * 4 >= u,
            "wrong password {w:?}, unknown user {u:?}"
        );
    }

    /// bcrypt does not run on the async worker: with one worker, a timer task keeps ticking while
    /// 8 wrong passwords are checked.
    #[tokio::test(flavor = "current_thread")]
    async fn bcrypt_does_not_block_the_async_worker() {
        let auth = Arc::new(auth_with("s3cret", 10));
        let checks: Vec<_> = (0..8)
            .map(|_| {
                let a = auth.clone();
                tokio::spawn(async move { a.check(Some(&b64("prom:wrong"))).await })
            })
            .collect();
        let start = Instant::now();
        let mut worst = Duration::ZERO;
        let mut last = Instant::now();
        while checks.iter().any(|c| !c.is_finished()) {
            tokio::time::sleep(Duration::from_millis(5)).await;
            worst = worst.max(last.elapsed());
            last = Instant::now();
        }
        let total = start.elapsed();
        for c in checks {
            assert!(!c.await.unwrap());
        }
        // Inline bcrypt at cost 10 holds the only worker for one whole check (tens of ms) per
        // password; off the worker a 5 ms sleep overshoots by scheduling noise only. The bound is
        // a third of the total check time, which a blocked worker exceeds by construction.
        assert!(
            worst < total / 3,
            "a 5 ms timer was late by {worst:?} during {total:?} of checks"
        );
    }

    #[test]
    fn rejects_plain_passwords_and_unknown_keys() {
        assert!(WebConfig::parse("basic_auth_users:\n  a: plain\n").is_err());
        assert!(
            WebConfig::parse("tls_server_config: {cert_file: /nope, key_file: /nope}\n").is_err()
        );
        assert!(WebConfig::parse("bogus: 1\n").is_err());
    }
}
