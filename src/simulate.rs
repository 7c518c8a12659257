//! `tokenprobe simulate`: a built-in OpenAI-compatible (and Anthropic) streaming server with
//! configured timing and faults, for testing dashboards and alerts and as the timing ground truth
//! of load tests and benchmarks.
//!
//! Endpoints: `POST /v1/chat/completions`, `POST /v1/completions`, `POST /v1/messages`
//! (Anthropic), `POST /v1/responses` (OpenAI Responses), each also without the `/v1` prefix;
//! `GET /v1/models` (the default model `tokenprobe-simulated`, then every `--profile`),
//! `GET /health`, and vLLM's `POST /reset_prefix_cache` (every prefix cache emptied; the call
//! is a line of the event log with its path). `"stream": true` gets an SSE stream, anything else one JSON
//! body once the whole answer would have been generated.
//!
//! Timing. A request *arrives* when its body has been read in full; its head is written at once.
//! When `--max-concurrency` is set it then waits for a slot; generation starts at arrival or at
//! the slot, whichever is later, and the opening events (role chunk, `message_start`) go out then.
//! Token `i` is due at `start + ttft + gap_1 + … + gap_i` (see [`plan`]) and every event waits for
//! that absolute deadline, so lateness never accumulates. The deadline source (see `--timer`) is
//! by default a timerfd in tokio's I/O driver: 0.05–0.3 ms late, and under load (over
//! 2,000 events/s) on a 500 µs grid so that nearby deadlines share a wake-up; or tokio's own 1 ms
//! timer (0–2 ms late). The HTTP/1.1 server is hand-written on a `TCP_NODELAY` socket: every
//! event is exactly one `write` (no framework buffers in between; with chunked framing the chunk
//! header travels in the same write), and its send instant is `Instant::now()` right after the
//! write returns.
//! `--event-log FILE` writes, per request, each event's due and send instants relative to arrival
//! (one JSON line, written by a separate thread), so a benchmark can compare a client's TTFT with
//! the instant the first token left the server; with the request's model, profile, input and
//! cached tokens, prefill time and whether it answered with a tool call.
//!
//! Models. `--profile NAME:ttft=D,itl=D[,output_tokens=N][,prefill_per_1k=D][,prefix_cache=on][,tool_calls=on][,max_context=N]`
//! (repeatable, see [`profile`]) gives the model `NAME` its own timing; the request's `model`
//! picks it, any other model gets the command's flags. Input tokens follow the token rule of
//! [`profile`]: the input rendered to bytes, 4 bytes a token, a chat message being a 16-byte role
//! header (4 template tokens) and its text content padded to whole tokens, so `4 + ceil(bytes /
//! 4)` per message (a completions `prompt`: `ceil(bytes / 4)`); they are reported in `usage`
//! (`prompt_tokens`; Anthropic's and the Responses API's `input_tokens`). The TTFT is the
//! profile's plus `prefill_per_1k × uncached input tokens / 1000`; with `prefix_cache=on` (or
//! `--prefix-cache`) a prefix seen before, in whole 16-token blocks, is cached (vLLM's automatic
//! prefix caching; a bounded LRU per profile) and reported as
//! `usage.prompt_tokens_details.cached_tokens`. The output length is the profile's, raised to the
//! request's `min_tokens` and capped by its `max_tokens`; with `ignore_eos: true` it is exactly
//! `max_tokens`. With `tool_calls=on` (or `--tool-calls`) a request that offers tools and does not
//! ask for none (`tool_choice`) is answered with a call of its first tool, streamed as each API
//! streams one, its arguments (`{"query":"…"}`) being the output tokens; the token rule counts
//! the tools' definitions, the calls and their results (see [`profile`]). With `max_context=N` a
//! request of more than N input tokens is refused as vLLM refuses one: HTTP 400,
//! `context_length_exceeded`, "This model's maximum context length is N tokens. However, your
//! request has M input tokens." (logged with that fault).
//!
//! Connections: HTTP/1.1 keep-alive with chunked streams (several requests per connection, also
//! pipelined); `Connection: close` or HTTP/1.0 end the connection after the response. A client
//! that disconnects ends its request at once, also while it is queued or stalled.
//!
//! Faults (`--error-rate`, `--errors`): an HTTP status (`429` with `retry-after: 1`, `500`, `529`
//! with Anthropic's `overloaded_error`, `401`, or any other 4xx/5xx), `stall` (head and opening
//! events, then silence until the client goes), `stall-mid` (silence after half the tokens),
//! `truncate` (close after half the tokens, without finish or end marker) and `malformed` (a
//! `data: {not json` event after half the tokens, then the normal rest).

mod body;
mod conn;
mod http;
mod log;
pub mod plan;
pub mod profile;
pub mod quota;
mod timer;

use crate::exit::Exit;
use anyhow::{Context, Result, bail};
use plan::Timing;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
pub use timer::{Slack, TimerKind};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::Semaphore;

/// Flags of `tokenprobe simulate`.
#[derive(clap::Args, Debug, Clone)]
pub struct SimulateArgs {
    /// Address to listen on; port 0 picks a free port. The first line on stdout is
    /// `listening on http://ADDR`.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub listen: String,
    /// Time to first token, from arrival (or from the concurrency slot).
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    pub ttft: Duration,
    /// Inter-token latency: the gap between consecutive tokens.
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    pub itl: Duration,
    /// Output length in tokens (a request's max_tokens caps it: finish reason "length").
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub output_tokens: u32,
    /// Prefill time per 1,000 uncached input tokens, added to the TTFT (input tokens: see the
    /// token rule in docs/bench.md).
    #[arg(long = "prefill-per-1k", default_value = "0ms", value_parser = humantime::parse_duration)]
    pub prefill_per_1k: Duration,
    /// Automatic prefix caching: a repeated input prefix (in 16-token blocks) is not prefilled
    /// again.
    #[arg(long)]
    pub prefix_cache: bool,
    /// A request that offers tools (and does not ask for none) is answered with a call of its
    /// first tool, the output tokens being the call's arguments.
    #[arg(long)]
    pub tool_calls: bool,
    /// A model's own timing, picked by the request's `model`:
    /// `NAME:ttft=D,itl=D[,output_tokens=N][,prefill_per_1k=D][,prefix_cache=on][,tool_calls=on][,max_context=N]`
    /// (repeatable; other models get the flags above).
    #[arg(long = "profile", value_name = "PROFILE")]
    pub profiles: Vec<profile::Profile>,
    /// Uniform jitter on the TTFT (ttft ± this).
    #[arg(long, default_value = "0ms", value_parser = humantime::parse_duration)]
    pub ttft_jitter: Duration,
    /// Uniform jitter on each inter-token gap (itl ± this).
    #[arg(long, default_value = "0ms", value_parser = humantime::parse_duration)]
    pub itl_jitter: Duration,
    /// Uniform jitter on the output length (output-tokens ± this, at least 1).
    #[arg(long, default_value_t = 0)]
    pub output_tokens_jitter: u32,
    /// Tokens per content event after the first token, which always goes out alone.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub tokens_per_chunk: u32,
    /// Probability that a request gets a fault from --errors.
    #[arg(long, default_value_t = 0.0)]
    pub error_rate: f64,
    /// Faults to choose from, uniformly: HTTP statuses (429, 500, 529, 401, any 4xx/5xx), stall,
    /// stall-mid, truncate, malformed.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "429,500,529,stall,truncate,malformed"
    )]
    pub errors: Vec<Fault>,
    /// Seed of the jitter and fault draws (request n gets the n-th stream); random when absent.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write one JSON line per finished request with the send instant of every event.
    #[arg(long)]
    pub event_log: Option<PathBuf>,
    /// A request quota, REQUESTS/WINDOW (e.g. 60/1m, fixed windows from the start): every answer
    /// states it in rate-limit headers, and a request past it gets a 429 with retry-after.
    #[arg(long, value_name = "REQUESTS/WINDOW")]
    pub rate_limit: Option<quota::Quota>,
    /// Whose headers state --rate-limit's quota.
    #[arg(long, value_enum, default_value = "openai", requires = "rate_limit")]
    pub rate_limit_headers: quota::Style,
    /// Generate at most this many answers at once; excess requests queue, and their TTFT
    /// (counted from arrival) grows.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrency: Option<u32>,
    /// How event deadlines are waited for: `precise` (a timerfd, 0.05-0.3 ms late) or
    /// `tokio` (the runtime's 1 ms timer, 0-2 ms late).
    #[arg(long, value_enum, default_value = "precise")]
    pub timer: TimerKind,
    /// With `--timer precise`: `auto` (exact below 2,000 events/s, a 500us grid above, which
    /// keeps the CPU cost near tokio's timer) or a grid such as `100us` to which deadlines are
    /// rounded up so that nearby ones share one wake-up (`0us` for none).
    #[arg(long, default_value = "auto")]
    pub timer_slack: Slack,
    /// Name this model in every answer instead of the one asked for (a relay that routes to
    /// another model): the known truth of `model_mismatch`.
    #[arg(long, value_name = "NAME")]
    pub served_model: Option<String>,
    /// Multiply every count the answers' usage states by this (rounded): a relay that bills
    /// other tokens than it streamed, the known truth of `usage_mismatch`.
    #[arg(long, default_value_t = 1.0, value_name = "F")]
    pub usage_scale: f64,
    /// The `system_fingerprint` of chat, completions and Responses answers (none without it).
    #[arg(long, value_name = "FP")]
    pub fingerprint: Option<String>,
    /// From request N on (arrival order, from 0), answers come from another build: this
    /// fingerprint, and other words (a deterministic prompt's answer changes: `answer_drift`).
    #[arg(long, value_name = "N:FP", value_parser = parse_new_fingerprint)]
    pub new_fingerprint: Option<(u64, String)>,
}

/// `--new-fingerprint N:FP`.
fn parse_new_fingerprint(s: &str) -> std::result::Result<(u64, String), String> {
    let bad = || format!("--new-fingerprint {s:?}: expected N:FP, e.g. 20:fp_b");
    let (n, fp) = s.split_once(':').ok_or_else(bad)?;
    let n = n.trim().parse::<u64>().map_err(|_| bad())?;
    if fp.trim().is_empty() {
        return Err(bad());
    }
    Ok((n, fp.trim().to_owned()))
}

/// A fault the simulator can inject into a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this HTTP status and an error body in the endpoint's shape.
    Status(u16),
    /// Send the head and the opening events (role chunk, `message_start`), then nothing until the
    /// client disconnects.
    Stall,
    /// Like `Stall`, but after half the tokens.
    StallMid,
    /// Close the connection after half the tokens, without finish reason or end marker.
    Truncate,
    /// Send `data: {not json` after half the tokens, then the rest as usual.
    Malformed,
}

impl std::str::FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "stall" => Ok(Fault::Stall),
            "stall-mid" | "stall_mid" => Ok(Fault::StallMid),
            "truncate" => Ok(Fault::Truncate),
            "malformed" => Ok(Fault::Malformed),
            other => match other.parse::<u16>() {
                Ok(code) if (400..=599).contains(&code) => Ok(Fault::Status(code)),
                _ => Err(format!(
                    "unknown fault {s:?}: expected an HTTP status 400-599, stall, stall-mid, truncate or malformed"
                )),
            },
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Status(c) => write!(f, "{c}"),
            Fault::Stall => f.write_str("stall"),
            Fault::StallMid => f.write_str("stall-mid"),
            Fault::Truncate => f.write_str("truncate"),
            Fault::Malformed => f.write_str("malformed"),
        }
    }
}

/// What every connection task shares.
pub(crate) struct Shared {
    /// The `--profile`s.
    pub profiles: Vec<profile::Served>,
    /// What a model without a profile gets (the command's flags).
    pub default: profile::Served,
    pub error_rate: f64,
    pub errors: Vec<Fault>,
    pub seed: u64,
    /// Request sequence number (arrival order).
    pub seq: AtomicU64,
    /// Connection number (accept order).
    pub conns: AtomicU64,
    pub slots: Option<Arc<Semaphore>>,
    pub log: Option<log::EventLog>,
    pub timer: timer::Timer,
    /// `--rate-limit`.
    pub rate_limit: Option<quota::Limiter>,
    /// What answers say of themselves (`--served-model`, `--usage-scale`, `--fingerprint`).
    pub says: body::Says,
    /// `--new-fingerprint`.
    pub new_fingerprint: Option<(u64, String)>,
}

impl SimulateArgs {
    fn validate(&self) -> Result<()> {
        if !(0.0..=1.0).contains(&self.error_rate) {
            bail!(
                "--error-rate must be between 0 and 1, got {}",
                self.error_rate
            );
        }
        if self.error_rate > 0.0 && self.errors.is_empty() {
            bail!("--error-rate > 0 needs at least one fault in --errors");
        }
        if !(self.usage_scale.is_finite() && (0.0..=1e6).contains(&self.usage_scale)) {
            bail!(
                "--usage-scale must be a number from 0 to 1000000, got {}",
                self.usage_scale
            );
        }
        profile::check_profiles(&self.profiles).map_err(anyhow::Error::msg)
    }

    fn timing(&self) -> Timing {
        Timing {
            ttft: self.ttft,
            ttft_jitter: self.ttft_jitter,
            itl: self.itl,
            itl_jitter: self.itl_jitter,
            output_tokens: self.output_tokens,
            output_tokens_jitter: self.output_tokens_jitter,
            tokens_per_chunk: self.tokens_per_chunk,
        }
    }
}

impl Shared {
    /// What the answer to request `seq` (arrival order) says of itself: from
    /// `--new-fingerprint`'s request on, the new fingerprint and other words.
    pub(crate) fn says(&self, seq: u64) -> body::Says {
        match &self.new_fingerprint {
            Some((from, fp)) if seq >= *from => body::Says {
                fingerprint: Some(fp.clone()),
                shift: 1,
                ..self.says.clone()
            },
            _ => self.says.clone(),
        }
    }

    /// What `--rate-limit` says of a request arriving at `at` (`wall` on the wall clock).
    pub(crate) fn quota(
        &self,
        at: std::time::Instant,
        wall: std::time::SystemTime,
    ) -> quota::Verdict {
        self.rate_limit
            .as_ref()
            .map_or(quota::Verdict::NONE, |l| l.take(at, wall))
    }

    /// The profile a request's model picks: its `--profile`, else the defaults.
    pub(crate) fn served(&self, model: &str) -> &profile::Served {
        self.profiles
            .iter()
            .find(|p| p.name.as_deref() == Some(model))
            .unwrap_or(&self.default)
    }
}

/// Binds `listen` with a deep accept backlog (thousands of clients may connect at once).
async fn bind(listen: &str) -> Result<TcpListener> {
    let addr = tokio::net::lookup_host(listen)
        .await
        .with_context(|| format!("cannot resolve --listen {listen:?}"))?
        .next()
        .with_context(|| format!("--listen {listen:?} resolves to no address"))?;
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .context("cannot create a socket")?;
    sock.set_reuseaddr(true).context("SO_REUSEADDR")?;
    // On the listener, so an accepted socket stamps from its first packet: a client's first
    // request often arrives before `accept` returns.
    if !crate::kstamp::enable(&sock) {
        tracing::debug!("no kernel receive timestamps on the listener");
    }
    sock.bind(addr)
        .with_context(|| format!("cannot listen on {addr}"))?;
    sock.listen(4096)
        .with_context(|| format!("cannot listen on {addr}"))
}

/// Runs the simulator until SIGINT/SIGTERM.
///
/// # Errors
/// Invalid flags, an address that cannot be bound, or an event log that cannot be created.
pub async fn run(args: SimulateArgs) -> Result<Exit> {
    args.validate()?;
    // Before the address is printed: a client that reads it may stop us at once.
    let stop = crate::stop::StopSignals::install();
    let listener = bind(&args.listen).await?;
    let addr = listener.local_addr().context("listener address")?;
    let log = match &args.event_log {
        Some(p) => Some(
            log::EventLog::create(p)
                .with_context(|| format!("cannot create the event log {}", p.display()))?,
        ),
        None => None,
    };
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()).rotate_left(32)
    });
    let timing = args.timing();
    let shared = Arc::new(Shared {
        profiles: args
            .profiles
            .iter()
            .map(|p| profile::Served::of(p, &timing))
            .collect(),
        default: profile::Served::new(None, timing, args.prefill_per_1k, args.prefix_cache)
            .with_tool_calls(args.tool_calls),
        error_rate: args.error_rate,
        errors: args.errors.clone(),
        seed,
        seq: AtomicU64::new(0),
        conns: AtomicU64::new(0),
        slots: args
            .max_concurrency
            .map(|n| Arc::new(Semaphore::new(n as usize))),
        log,
        timer: timer::Timer::start(args.timer, args.timer_slack),
        rate_limit: args
            .rate_limit
            .map(|q| quota::Limiter::new(q, args.rate_limit_headers, std::time::Instant::now())),
        says: body::Says {
            model: args.served_model.clone(),
            usage_scale: args.usage_scale,
            fingerprint: args.fingerprint.clone(),
            shift: 0,
        },
        new_fingerprint: args.new_fingerprint.clone(),
    });
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://{addr}");
        let _ = out.flush();
    }
    tracing::info!(
        address = %addr,
        ttft = %humantime::format_duration(args.ttft),
        itl = %humantime::format_duration(args.itl),
        output_tokens = args.output_tokens,
        profiles = args.profiles.len(),
        error_rate = args.error_rate,
        seed,
        "tokenprobe simulate serving"
    );
    tokio::select! {
        () = accept_loop(listener, shared.clone()) => {},
        () = stop.first() => tracing::info!("shutting down"),
    }
    if let Some(l) = &shared.log {
        l.close();
    }
    Ok(Exit::Done)
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::debug!(error = %e, "cannot set TCP_NODELAY");
                }
                tokio::spawn(conn::serve(stream, shared.clone()));
            }
            Err(e) => {
                // Out of file descriptors and the like: back off briefly instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_and_print() {
        for s in [
            "429",
            "500",
            "529",
            "401",
            "stall",
            "stall-mid",
            "truncate",
            "malformed",
        ] {
            let f: Fault = s.parse().unwrap();
            assert_eq!(f.to_string(), s);
        }
        assert_eq!("STALL".parse::<Fault>(), Ok(Fault::Stall));
        assert!("200".parse::<Fault>().is_err());
        assert!("boom".parse::<Fault>().is_err());
    }
}
