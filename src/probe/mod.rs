//! One probe: send exactly one request (streaming, or asking for the whole answer) and fold what
//! arrives into a [`ProbeResult`].
//!
//! This is the thin async I/O around the pure cores: [`crate::sse::SseDecoder`] (bytes to events),
//! [`crate::protocol`] (event meaning), [`crate::measure::Measurement`] (the fold) and
//! [`crate::outcome`] (the classification rules). `request` builds the one HTTP request;
//! `read` reads the answer, timestamping bytes with `Instant::now()` in the same task that reads
//! them and decoding them right there, with no channel between arrival and timestamp. Deadlines
//! follow docs/measurement.md: `connect` (connection set-up), `first_token` (from `t0`), `idle` (no
//! bytes after the first token) and `total`. No retries, no redirects, no reconnects: one probe is
//! one request. [`report`] shows a result to people (text) and programs (JSON).

mod read;
pub mod report;
mod request;

pub use read::{MAX_ANSWER_BYTES, MAX_BODY_BYTES, check_expect};

use crate::config::{Job, Prompt, ProxySetting, Target, Timeouts};
use crate::measure::{Measurement, ProbeResult};
use crate::outcome::ErrorType;
use crate::protocol::truncate;
use crate::redact::{Redactor, effective_proxy, redact_userinfo};
use crate::transport::{ClientOptions, Transport, TransportError};
use std::sync::Arc;
use std::time::Instant;

/// How much of a failure's detail (status, the server's message, ...) is shown (characters).
pub const MAX_DETAIL_CHARS: usize = 640;

/// Everything one probe needs: the validated target and prompt of a [`Job`] (a config's, or the
/// `probe` command's flags made into one), the model, and what a command may override.
#[derive(Debug, Clone)]
pub struct ProbeSpec {
    /// The validated target: protocol, URL, key, headers, query, body fields, client settings.
    pub target: Arc<Target>,
    /// The validated prompt: messages, nonce, content check.
    pub prompt: Arc<Prompt>,
    /// Model name sent.
    pub model: String,
    /// Output cap (the prompt's, unless overridden).
    pub max_tokens: Option<u32>,
    /// Deadlines.
    pub timeouts: Timeouts,
    /// Stream the answer (the prompt's `stream:`, else the target's; `probe --no-stream` and
    /// `bench --cross-check` set it false): without streaming only E2E, N and input tokens are
    /// measured (docs/measurement.md, "Non-streaming requests").
    pub stream: bool,
}

impl ProbeSpec {
    /// The spec of a configured job.
    pub fn from_job(job: &Job) -> Self {
        ProbeSpec {
            target: job.target.clone(),
            prompt: job.prompt.clone(),
            model: job.model.clone(),
            max_tokens: job.prompt.max_tokens,
            timeouts: job.timeouts,
            stream: job.stream(),
        }
    }

    /// The client settings of the target (proxy, TLS, connection reuse).
    pub fn client(&self) -> ClientOptions {
        ClientOptions {
            proxy: self.target.proxy.clone(),
            tls: self.target.tls.clone(),
            connection: self.target.connection,
        }
    }

    /// The output length asked for exactly (`max_tokens` with the target's `exact_output` switch
    /// on); `None` when the server may stop early.
    pub fn requested_output_tokens(&self) -> Option<u64> {
        match self.target.exact_output {
            crate::protocol::ExactOutput::None => None,
            _ => self.max_tokens.map(u64::from),
        }
    }

    /// The full endpoint URL (see [`Target::url`]).
    pub fn url(&self) -> String {
        self.target.url()
    }

    /// The proxy this spec's requests go through, credentials removed; `None` when direct.
    pub fn proxy(&self) -> Option<String> {
        match &self.target.proxy {
            ProxySetting::Environment => effective_proxy(&self.url()),
            ProxySetting::Disabled => None,
            ProxySetting::Url(u) => Some(redact_userinfo(u)),
        }
    }
}

/// A prober: an instrumented HTTP client (identity encoding, no redirects; by default no pooled
/// connections, so TTFT includes what a cold user sees). Run one probe at a time per prober when
/// connection phases matter (the scheduler does).
#[derive(Debug, Clone)]
pub struct Prober {
    transport: Transport,
}

impl Prober {
    /// A prober for `spec`: its client settings, connection set-up bounded by `timeouts.connect`.
    ///
    /// # Errors
    /// [`TransportError`] when the CA file, proxy URL or TLS settings are unusable.
    pub fn new(spec: &ProbeSpec) -> Result<Self, TransportError> {
        Ok(Prober {
            transport: Transport::new(&spec.client(), spec.timeouts.connect)?,
        })
    }

    /// Runs one probe. Never panics on network data; every failure is an `error_type`.
    pub async fn run(&self, spec: &ProbeSpec) -> ProbeResult {
        let url = spec.url();
        let proxy = spec.proxy();
        let key = match &spec.target.api_key {
            Some(k) => k.load().await.map(Some),
            None => Ok(None),
        };
        let key = match key {
            Ok(k) => k,
            Err(msg) => {
                let mut m = Measurement::new(Instant::now());
                m.fail(ErrorType::Auth, m.t0(), msg);
                return m.finish();
            }
        };
        let req = match request::build(&self.transport.client, spec, &url, key.as_ref()) {
            Ok(r) => r,
            Err(e) => {
                let mut m = Measurement::new(Instant::now());
                m.fail(
                    ErrorType::BadRequest,
                    m.t0(),
                    format!("cannot build the request: {e}"),
                );
                return m.finish();
            }
        };
        self.transport.clock.reset();
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        if !spec.stream {
            m.non_stream();
        }
        let mut r = read::run_request(&self.transport, req, spec, m, proxy.as_deref()).await;
        r.phases = Some(self.transport.clock.phases());
        r.requested_output_tokens = spec.requested_output_tokens();
        // A server may echo the request in its error message: never pass a secret on. Redacted
        // whole, then cut for display, so no part of a secret survives at the cut.
        if let Some(d) = r.error_detail.as_mut() {
            *d = truncate(
                &Redactor::for_spec(spec, key.as_ref()).redact(d),
                MAX_DETAIL_CHARS,
            );
        }
        r
    }
}
