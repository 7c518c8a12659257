//! The options of a prober's transport, as a target's config sets them: the proxy route, TLS
//! trust, and whether connections are kept.

use serde::Deserialize;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// Which proxy a target's requests use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ProxySetting {
    /// The environment's (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`, or their
    /// lower-case forms), as hyper-util's proxy matcher reads them.
    #[default]
    Environment,
    /// No proxy, whatever the environment says (`proxy: none`).
    Disabled,
    /// This proxy URL for every request.
    Url(String),
}

/// TLS trust settings of a target.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// Extra PEM CA certificates trusted besides the Mozilla roots.
    pub ca_file: Option<PathBuf>,
    /// The `ca_file`'s content, read (bounded) when the config was loaded, so that building a
    /// client reads no file (a reload builds clients on the web runtime). Empty when the config
    /// was parsed without its files: the client then reads the file itself, bounded likewise.
    /// Part of the options' equality, so a changed CA file is a changed target.
    pub ca_pem: Arc<OnceLock<Vec<u8>>>,
    /// Accept any server certificate (logged loudly at start-up).
    pub insecure_skip_verify: bool,
}

/// Whether a probe opens its own connection (`new`, the default: TTFT includes what a cold user
/// sees) or reuses a kept-alive one (`reuse`: the warm path).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConnectionMode {
    /// A new connection per probe.
    #[default]
    New,
    /// Keep-alive connections are reused.
    Reuse,
}

impl ConnectionMode {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionMode::New => "new",
            ConnectionMode::Reuse => "reuse",
        }
    }
}
