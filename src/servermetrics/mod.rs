//! The server's own view beside every bench level: its metrics endpoints scraped around and
//! during each level, a Prometheus server queried over it, and both folded into one vocabulary
//! (`gpu_utilization`, `kv_cache_usage_ratio`, `requests_waiting`, `server_ttft_s`, ...).
//!
//! - [`expo`]: the Prometheus text / OpenMetrics parser (strict, bounded).
//! - [`signals`]: the vocabulary and the one table of known families (DCGM, vLLM, SGLang, TGI,
//!   llama.cpp, node_exporter), plus custom families.
//! - [`level`]: one level's scrapes → its `server` block (pure).
//! - [`energy`]: the energy a level took: DCGM's energy counter, else its power × time, else
//!   RAPL (pure).
//! - [`scrape`]: the collector: its own thread and runtime, bounded time and size per scrape, so
//!   a slow, dead or huge endpoint never delays a probe.
//! - [`promql`]: the Prometheus query-API source (`--prometheus URL`).
//!
//! `docs/bench.md` ("Server metrics") is the user guide.

pub mod energy;
pub mod expo;
pub mod level;
pub mod promql;
pub mod scrape;
pub mod signals;

use crate::auth::{AuthStyle, KeySource};
use std::time::Duration;

/// The default time between scrapes during a level.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// The largest body a scrape reads; a larger one is a failed scrape.
pub const MAX_SCRAPE_BYTES: usize = 16 * 1024 * 1024;
/// The longest a scrape may take by default (and at most its interval).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// A metrics endpoint to scrape (validated).
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Its URL (may carry userinfo; shown only through `redact::redact_url`).
    pub url: String,
    /// Time between scrapes during a level.
    pub interval: Duration,
    /// The config set `interval:` (else `bench --server-metrics-interval` sets it).
    pub interval_given: bool,
    /// The bound on one scrape (connect to the last byte).
    pub timeout: Duration,
    /// The key and the header that carries it (by default the target's, when the endpoint has
    /// the target's origin: its scheme, host and port).
    pub auth: Option<(AuthStyle, KeySource)>,
    /// Custom families named with this endpoint (they apply to the whole bench).
    pub families: Vec<signals::Custom>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &crate::redact::redact_url(&self.url))
            .field("interval", &self.interval)
            .field("timeout", &self.timeout)
            .field("auth", &self.auth.as_ref().map(|(s, _)| s))
            .field("families", &self.families)
            .finish()
    }
}

/// Whether two URLs have one origin (scheme, host and port): a target's key goes only where the
/// target is, unless the config says `auth: target`.
pub fn same_origin(a: &str, b: &str) -> bool {
    match (url::Url::parse(a), url::Url::parse(b)) {
        (Ok(a), Ok(b)) => a.origin() == b.origin(),
        _ => false,
    }
}

impl Endpoint {
    /// An endpoint with the default interval and timeout.
    pub fn new(url: &str, auth: Option<(AuthStyle, KeySource)>) -> Endpoint {
        Endpoint {
            url: url.to_owned(),
            interval: DEFAULT_INTERVAL,
            interval_given: false,
            timeout: DEFAULT_TIMEOUT.min(DEFAULT_INTERVAL),
            auth,
            families: Vec::new(),
        }
    }
}
