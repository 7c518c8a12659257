//! One bounded `GET` (or `POST`) for what tokenprobe reads of other servers besides its probes (a
//! server's metrics, a Prometheus query) and what it sends them (remote write): the probes' own
//! transport, so TLS trust, `ca_file`, redirects (none) and retries (none) mean one thing
//! everywhere. No proxy: metrics endpoints sit beside
//! the server, and a proxy would add its own failures to the server's figures. The body is read
//! up to a size bound; the caller bounds the time.

use super::{Body, ClientOptions, ConnectionMode, ProxySetting, TlsOptions, Transport};
use super::{TransportError, chunk, classify::classify_transport};
use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};

/// Why a fetch got no whole answer.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FetchError {
    /// The URL is not an absolute `http(s)` URL.
    #[error("not a usable URL")]
    Url,
    /// No response head: the connection, TLS or the answer's head failed (`error_type`, detail).
    #[error("{0}: {1}")]
    Send(&'static str, String),
    /// The body broke off.
    #[error("the answer broke off: {0}")]
    Body(String),
    /// The body passed the bound.
    #[error("larger than {}", crate::units::fmt_bytes(u64::try_from(*.0).unwrap_or(u64::MAX)))]
    TooLarge(usize),
}

/// A header a user gave for what tokenprobe sends to other servers (remote write, OTLP), its
/// value marked sensitive so no debug output shows it.
///
/// # Errors
/// Why the name or the value is not valid HTTP, never quoting the value.
pub fn sensitive_header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), String> {
    let name = name.trim();
    let Ok(n) = HeaderName::from_bytes(name.as_bytes()) else {
        return Err(format!("{name:?} is not a header name"));
    };
    let Ok(mut v) = HeaderValue::from_str(value) else {
        return Err(format!(
            "the value of header {n} is not a valid header value"
        ));
    };
    v.set_sensitive(true);
    Ok((n, v))
}

/// A whole answer.
#[derive(Debug)]
pub struct Fetched {
    /// Its status code.
    pub status: u16,
    /// Its body.
    pub body: Vec<u8>,
}

/// A client for bounded `GET`s, keeping its connection between them (one request at a time).
#[derive(Debug)]
pub struct Fetcher {
    transport: Transport,
}

impl Fetcher {
    /// A fetcher with `tls` trust (the bundled roots, plus `ca_file`), no proxy, a kept
    /// connection, and `connect_timeout` for each connection's set-up.
    ///
    /// # Errors
    /// [`TransportError`] when the TLS settings are unusable.
    pub fn new(
        tls: TlsOptions,
        connect_timeout: std::time::Duration,
    ) -> Result<Self, TransportError> {
        let opts = ClientOptions {
            proxy: ProxySetting::Disabled,
            tls,
            connection: ConnectionMode::Reuse,
        };
        Ok(Fetcher {
            transport: Transport::new(&opts, connect_timeout)?,
        })
    }

    /// `GET url` with `headers` (a `user:password` in the URL is sent as Basic credentials; a
    /// header given replaces them); the body read whole up to `max_bytes`.
    ///
    /// # Errors
    /// [`FetchError`]: the URL, the connection, a broken body, or a body over `max_bytes`.
    pub async fn get(
        &mut self,
        url: &str,
        headers: &[(HeaderName, HeaderValue)],
        max_bytes: usize,
    ) -> Result<Fetched, FetchError> {
        self.request(hyper::Method::GET, url, headers, Bytes::new(), max_bytes)
            .await
    }

    /// `POST url` with `headers` and `body`, as [`Fetcher::get`] otherwise (one request: no
    /// retry, no redirect).
    ///
    /// # Errors
    /// As [`Fetcher::get`].
    pub async fn post(
        &mut self,
        url: &str,
        headers: &[(HeaderName, HeaderValue)],
        body: Bytes,
        max_bytes: usize,
    ) -> Result<Fetched, FetchError> {
        self.request(hyper::Method::POST, url, headers, body, max_bytes)
            .await
    }

    async fn request(
        &mut self,
        method: hyper::Method,
        url: &str,
        headers: &[(HeaderName, HeaderValue)],
        body: Bytes,
        max_bytes: usize,
    ) -> Result<Fetched, FetchError> {
        let (uri, basic) = super::request_uri(url).map_err(|_| FetchError::Url)?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(FetchError::Url);
        }
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::new(body))
            .map_err(|_| FetchError::Url)?;
        let h = req.headers_mut();
        if let Some(b) = basic {
            h.insert(hyper::header::AUTHORIZATION, b);
        }
        for (k, v) in headers {
            h.insert(k.clone(), v.clone());
        }
        let resp = self.transport.send(req).await.map_err(|e| {
            let (kind, detail) = classify_transport(&e, None);
            FetchError::Send(kind.as_str(), detail)
        })?;
        let status = resp.status().as_u16();
        let mut body = resp.into_body();
        let mut out = Vec::new();
        while let Some(d) = chunk(&mut body)
            .await
            .map_err(|e| FetchError::Body(e.to_string()))?
        {
            if out.len() + d.len() > max_bytes {
                return Err(FetchError::TooLarge(max_bytes));
            }
            out.extend_from_slice(&d);
        }
        Ok(Fetched { status, body: out })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// A server that answers each connection's first request with `answer`, once.
    async fn answering(answer: Vec<u8>) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf).await;
                    let _ = s.write_all(&answer).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        format!("http://{addr}/metrics")
    }

    fn fetcher() -> Fetcher {
        Fetcher::new(TlsOptions::default(), Duration::from_secs(2)).unwrap()
    }

    #[tokio::test]
    async fn a_whole_answer_its_status_and_a_bound() {
        let url = answering(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy"
                .to_vec(),
        )
        .await;
        let got = fetcher().get(&url, &[], 1024).await.unwrap();
        assert_eq!((got.status, got.body.as_slice()), (503, &b"busy"[..]));
        let big = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: 2048\r\nConnection: close\r\n\r\n{}",
            "x".repeat(2048)
        );
        let url = answering(big.into_bytes()).await;
        let e = fetcher().get(&url, &[], 1024).await.unwrap_err();
        assert_eq!(e, FetchError::TooLarge(1024));
        // The cap as it is, never rounded down to whole MiB ("larger than 0 MiB").
        assert_eq!(e.to_string(), "larger than 1 KiB");
        assert_eq!(
            FetchError::TooLarge(64 * 1024).to_string(),
            "larger than 64 KiB"
        );
        assert_eq!(
            FetchError::TooLarge(16 << 20).to_string(),
            "larger than 16 MiB"
        );
    }

    #[tokio::test]
    async fn no_redirect_is_followed_and_a_closed_port_is_connect() {
        let url = answering(
            b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                .to_vec(),
        )
        .await;
        assert_eq!(fetcher().get(&url, &[], 1024).await.unwrap().status, 302);
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let e = fetcher()
            .get(&format!("http://{closed}/metrics"), &[], 1024)
            .await
            .unwrap_err();
        assert!(matches!(e, FetchError::Send("connect", _)), "{e}");
        assert_eq!(
            fetcher().get("ftp://x/", &[], 1).await.unwrap_err(),
            FetchError::Url
        );
    }
}
