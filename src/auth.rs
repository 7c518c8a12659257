//! API keys and how a request carries them: the key itself (a [`Secret`], never shown), where it
//! comes from ([`KeySource`]: the config, or a file read at every use), and the header it goes in
//! ([`AuthStyle`]). The config names them; probes and metrics scrapes send them.

use serde::Deserialize;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// A secret string (an API key). Its `Debug` and `Display` never show the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    /// The secret value, for the one place that needs it: the request header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where a target's API key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// Given in the config (after `${VAR}` expansion) or by `--api-key-env`.
    Inline(Secret),
    /// Read from this file (trimmed) at every probe.
    File(PathBuf),
}

/// How long reading an `api_key_file` may take (a FIFO without a writer, a hung NFS or FUSE
/// secrets mount must fail the probe, not hold it).
pub const KEY_FILE_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest `api_key_file` read (a key is far smaller; a larger file is a mistake).
pub const KEY_FILE_MAX_BYTES: u64 = 64 * 1024;

impl KeySource {
    /// The key's value now. A file is read as every file a config names is ([`crate::files`]): on
    /// a thread of its own, never on the async runtime, within [`KEY_FILE_TIMEOUT`] and up to
    /// [`KEY_FILE_MAX_BYTES`], a regular file only.
    ///
    /// # Errors
    /// The file cannot be read, is too large, is not a regular file or did not answer in time
    /// (the error names the path, never the content).
    pub async fn load(&self) -> Result<Secret, String> {
        let p = match self {
            KeySource::Inline(s) => return Ok(s.clone()),
            KeySource::File(p) => p,
        };
        let bytes = crate::files::Read {
            what: "api_key_file",
            max_bytes: KEY_FILE_MAX_BYTES,
            timeout: KEY_FILE_TIMEOUT,
            pipes: false,
        }
        .run_async(p)
        .await
        .map_err(|e| match e {
            crate::files::FileError::TooLarge { path, limit, .. } => {
                format!("api_key_file {path} is larger than {limit}: not a key")
            }
            other => other.to_string(),
        })?;
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("api_key_file {} is not UTF-8 text", p.display()))?;
        Ok(Secret::new(text.trim()))
    }
}

/// Which header carries the API key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuthStyle {
    /// `Authorization: Bearer KEY` (OpenAI and compatible servers).
    Bearer,
    /// `x-api-key: KEY` (Anthropic).
    XApiKey,
    /// `api-key: KEY` (Azure OpenAI).
    ApiKey,
}

impl AuthStyle {
    /// The header that carries `key` in this style, its value marked sensitive (no debug output
    /// shows it): the one place a key becomes a header.
    ///
    /// # Errors
    /// When the key is not a valid header value (never quoting it).
    pub fn header(
        self,
        key: &Secret,
    ) -> Result<(hyper::header::HeaderName, hyper::header::HeaderValue), String> {
        use hyper::header::{AUTHORIZATION, HeaderName, HeaderValue};
        let (name, value) = match self {
            AuthStyle::Bearer => (AUTHORIZATION, format!("Bearer {}", key.expose())),
            AuthStyle::XApiKey => (
                HeaderName::from_static("x-api-key"),
                key.expose().to_owned(),
            ),
            AuthStyle::ApiKey => (HeaderName::from_static("api-key"), key.expose().to_owned()),
        };
        let mut value = HeaderValue::from_str(&value)
            .map_err(|_| "the key is not a valid header value".to_owned())?;
        value.set_sensitive(true);
        Ok((name, value))
    }
}
