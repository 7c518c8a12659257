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
//! without credentials) needs basic auth. Successful password checks are cached (keyed by a salted
//! hash, never the password), since bcrypt is deliberately slow.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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
    #[error("cannot read web config {path}: {source}")]
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
        let text = std::fs::read_to_string(path).map_err(|source| WebConfigError::Io {
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

#[derive(Debug)]
struct Auth {
    users: HashMap<String, String>,
    salt: std::collections::hash_map::RandomState,
    verified: Mutex<HashSet<u64>>,
}

impl Auth {
    fn check(&self, header_value: Option<&str>) -> bool {
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
        let Some(hash) = self.users.get(user) else {
            return false;
        };

        let key = self.salt.hash_one(&creds);
        if self
            .verified
            .lock()
            .map(|v| v.contains(&key))
            .unwrap_or(false)
        {
            return true;
        }
        let ok = bcrypt::verify(pass, hash).unwrap_or(false);
        if ok && let Ok(mut v) = self.verified.lock() {
            if v.len() > 1024 {
                v.clear();
            }
            v.insert(key);
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
    if auth.check(value) {
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
    let auth = Arc::new(Auth {
        users: web.users.clone(),
        salt: std::collections::hash_map::RandomState::new(),
        verified: Mutex::new(HashSet::new()),
    });
    app.layer(middleware::from_fn_with_state(auth, require_auth))
}

/// Serves `app` on `listener` (TLS when configured) until `shutdown` completes.
///
/// # Errors
/// I/O errors of the listener, or an unusable certificate/key.
pub async fn serve(
    listener: std::net::TcpListener,
    app: Router,
    web: &WebConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = protect(app, web);
    match &web.tls {
        None => {
            listener.set_nonblocking(true)?;
            let l = tokio::net::TcpListener::from_std(listener)?;
            axum::serve(l, app).with_graceful_shutdown(shutdown).await
        }
        Some((cert, key)) => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let cfg = axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key).await?;
            let handle = axum_server::Handle::new();
            let h = handle.clone();
            tokio::spawn(async move {
                shutdown.await;
                h.graceful_shutdown(Some(std::time::Duration::from_secs(5)));
            });
            axum_server::from_tcp_rustls(listener, cfg)?
                .handle(handle)
                .serve(app.into_make_service())
                .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_auth_checks_bcrypt_and_caches() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let web = WebConfig::parse(&format!("basic_auth_users:\n  prom: '{hash}'\n")).unwrap();
        let auth = Auth {
            users: web.users,
            salt: Default::default(),
            verified: Mutex::new(HashSet::new()),
        };
        let b64 = |s: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(s)
            )
        };
        assert!(auth.check(Some(&b64("prom:s3cret"))));
        assert!(auth.check(Some(&b64("prom:s3cret"))), "cached path");
        assert!(!auth.check(Some(&b64("prom:wrong"))));
        assert!(!auth.check(Some(&b64("other:s3cret"))));
        assert!(!auth.check(Some("Bearer x")));
        assert!(!auth.check(None));
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
