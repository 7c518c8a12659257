//! The Prometheus side: one registry, the metric families, and how a [`ProbeResult`] is recorded.
//!
//! Labels are `target`, `model`, `prompt` (config names only, never anything from a response) plus
//! the bounded enums `error_type`, `flag` and `reason`, so the series count is bounded by the config
//! (shared case 36). A `location` (`serve --location`, or `location:` in the config) is one
//! constant label on every series of the registry, so it adds none. Every counter series of a job exists at 0 from the moment the job is loaded
//! (shared case 35). Successful probes feed the latency histograms; a failed probe feeds only the
//! failure series (docs/measurement.md, "Outcome").
//!
//! A job's series are one [`JobSeries`]: created together by [`Metrics::register_job`], removed
//! together by [`Metrics::remove_job`], and written only through [`JobSeries::record`] and
//! [`JobSeries::skipped`], which do nothing once the job is removed. `serve`'s scheduler reaches
//! them as one of its result sinks ([`ResultSink`]): a job's side of the registry is its series.

mod answered;

use crate::config::{Buckets, HistogramFamily, Histograms, Job};
use crate::measure::ProbeResult;
use crate::outcome::{ErrorType, Flag};
use crate::scheduler::{InternalReason, JobSink, ResultSink, SessionDone, SkipReason};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, NativeHistogramConfig};
use prometheus_client::registry::{Registry, Unit};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Content-Type of the OpenMetrics text format served when the scraper asks for it.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content-Type of the classic Prometheus text format (0.0.4), served otherwise.
pub const TEXT_CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;
/// Content-Type of the Prometheus protobuf exposition (length-delimited `MetricFamily`
/// messages), the only one that carries native histograms to Prometheus 2.x.
pub const PROTOBUF_CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// The native-histogram resolution of every histogram when `buckets.native` is on: schema 3
/// (each bucket 2^(1/8), about 9%, wider than the one below; 1 s, 2 s and every power of two are
/// boundaries), at most [`NATIVE_MAX_BUCKETS`] buckets (beyond that the library halves the
/// resolution, so a histogram's memory stays bounded whatever is observed).
pub const NATIVE_SCHEMA: i8 = 3;
/// See [`NATIVE_SCHEMA`]: the bucket count past which the resolution is halved.
pub const NATIVE_MAX_BUCKETS: usize = 160;

fn native_config() -> NativeHistogramConfig {
    NativeHistogramConfig::with_schema(NATIVE_SCHEMA).max_buckets(NATIVE_MAX_BUCKETS)
}

/// The labels of one job.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct JobLabels {
    /// Target name from the config.
    pub target: String,
    /// Model name from the config.
    pub model: String,
    /// Prompt name from the config.
    pub prompt: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    #[prometheus(flatten)]
    job: JobLabels,
    error_type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlagLabels {
    #[prometheus(flatten)]
    job: JobLabels,
    flag: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkipLabels {
    #[prometheus(flatten)]
    job: JobLabels,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    #[prometheus(flatten)]
    job: JobLabels,
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RateLimitLabels {
    #[prometheus(flatten)]
    job: JobLabels,
    kind: &'static str,
}

/// `tokenprobe_ratelimit_{limit,remaining,reset_seconds}`: a job's series exist once an answer
/// stated that kind of quota, and hold the last one stated.
type RateGauges = Family<RateLimitLabels, Gauge<f64, AtomicU64>>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TurnLabels {
    #[prometheus(flatten)]
    job: JobLabels,
    turn: &'static str,
}

/// The `turn` label values of a conversation job's series: its first turn, and every later one
/// (which resends the history, so a prefix cache can serve it).
pub const TURNS: [&str; 2] = ["first", "later"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReusedLabels {
    #[prometheus(flatten)]
    job: JobLabels,
    reused: &'static str,
}

/// Settings of a job that change what its numbers mean, exposed as `tokenprobe_job_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobInfo {
    /// The job.
    #[prometheus(flatten)]
    pub job: JobLabels,
    /// Protocol, e.g. `openai-chat`.
    pub api: String,
    /// `new` (cold connection per probe) or `reuse`.
    pub connection: String,
    /// `true` when every probe's prompt carries a fresh nonce (no prompt-cache hits).
    pub nonce: String,
    /// `false` when probes ask for the whole answer at once (no TTFT or TPOT observed).
    pub stream: String,
    /// The prompt's kind: `messages`, `synthetic`, `dataset` or `conversation`.
    pub workload: String,
}

impl JobLabels {
    /// The labels of a job.
    pub fn of(job: &Job) -> Self {
        JobLabels {
            target: job.target.name.clone(),
            model: job.model.clone(),
            prompt: job.prompt.name.clone(),
        }
    }
}

impl JobInfo {
    /// The `tokenprobe_job_info` labels of a job.
    pub fn of(job: &Job) -> Self {
        JobInfo {
            job: JobLabels::of(job),
            api: job.target.api.to_string(),
            connection: job.target.connection.as_str().to_owned(),
            nonce: job.prompt.nonce.to_string(),
            stream: job.stream().to_string(),
            workload: job.prompt.workload.kind().to_owned(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InternalLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExportLabels {
    result: &'static str,
}

/// A job's most recent probe, as shown on `/`.
#[derive(Debug, Clone, PartialEq)]
pub struct LastResult {
    /// The error type, `None` for a success.
    pub error_type: Option<ErrorType>,
    /// TTFT of a successful probe, seconds.
    pub ttft_s: Option<f64>,
    /// When it finished.
    pub at: SystemTime,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// Builds histograms with a fixed bucket layout, and native buckets beside them when `native`.
#[derive(Clone, Debug)]
pub struct Layout {
    bounds: Arc<[f64]>,
    native: bool,
}

impl MetricConstructor<Histogram> for Layout {
    fn new_metric(&self) -> Histogram {
        let bounds = self.bounds.iter().copied();
        if self.native {
            Histogram::new_classic_and_native(bounds, native_config())
        } else {
            Histogram::new(bounds)
        }
    }
}

type Hist = Family<JobLabels, Histogram, Layout>;

/// A histogram family laid out by `bounds` (and native buckets when `native`).
fn hist<S: Clone + std::hash::Hash + Eq>(
    bounds: &[f64],
    native: bool,
) -> Family<S, Histogram, Layout> {
    Family::new_with_constructor(Layout {
        bounds: bounds.into(),
        native,
    })
}

/// All of tokenprobe's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    ttft: Hist,
    ttfo: Hist,
    tpot: Hist,
    itl: Hist,
    decode_tps: Hist,
    e2e: Hist,
    ttfb: Hist,
    failed_duration: Hist,
    probes: Family<JobLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    flags: Family<FlagLabels, Counter>,
    output_tokens: Family<JobLabels, Counter>,
    input_tokens: Family<JobLabels, Counter>,
    cached_input_tokens: Family<JobLabels, Counter>,
    reasoning_tokens: Family<JobLabels, Counter>,
    skipped: Family<SkipLabels, Counter>,
    last_success: Family<JobLabels, Gauge>,
    last_timestamp: Family<JobLabels, Gauge<f64, AtomicU64>>,
    phases: Family<PhaseLabels, Histogram, Layout>,
    turn_ttft: Family<TurnLabels, Histogram, Layout>,
    cold_ttft: Hist,
    connections: Family<ReusedLabels, Counter>,
    retry_after: Family<JobLabels, Gauge<f64, AtomicU64>>,
    target_wait: Family<JobLabels, Counter<f64, AtomicU64>>,
    /// Limit, remaining, seconds to reset.
    ratelimit: [RateGauges; 3],
    /// Values of those the headers stated that were not data, left out (a pair once).
    ratelimit_invalid: Family<RateLimitLabels, Counter>,
    job_info: Family<JobInfo, Gauge>,
    reload_ok: Gauge,
    reload_ts: Gauge<f64, AtomicU64>,
    internal: Family<InternalLabels, Counter>,
    /// OTLP exports by result (series only once `serve` exports OTLP).
    otlp_exports: Family<ExportLabels, Counter>,
    /// What answered (`answered`).
    answered: answered::Families,
    /// Session jobs' series: each tick's whole session.
    sessions: session::SessionFamilies,
    /// The `location` label, if any.
    location: Option<String>,
    /// The loaded jobs' series, by labels (for `/`'s last results, and so a job that a reload
    /// changed keeps its series).
    active: Arc<Active>,
    /// Bumped by every config (re)load attempt, so cached expositions from before it are not
    /// served after it.
    generation: AtomicU64,
}

/// The loaded jobs' series, by labels.
type Active = RwLock<HashMap<JobLabels, Arc<JobSeries>>>;

/// Phase names of `tokenprobe_connection_phase_seconds`, as blackbox_exporter names them.
pub const PHASES: [&str; 3] = ["resolve", "connect", "tls"];

impl Metrics {
    /// A registry with every family registered, histograms laid out by `buckets`.
    pub fn new(buckets: &Buckets) -> Self {
        Self::with_location(buckets, None)
    }

    /// [`Metrics::new`], with `location` (already checked by [`crate::config::check_location`])
    /// as a constant `location` label on every series, so several exporters probing the same
    /// targets from different places can be told apart and aggregated by one Prometheus.
    pub fn with_location(buckets: &Buckets, location: Option<&str>) -> Self {
        let labels = location
            .map(|l| (Cow::Borrowed("location"), Cow::Owned(l.to_owned())))
            .into_iter();
        let mut registry = Registry::with_prefix_and_labels("tokenprobe", labels);
        let m = Metrics {
            ttft: hist(&buckets.time_to_first_token, buckets.native),
            ttfo: hist(&buckets.time_to_first_token, buckets.native),
            tpot: hist(&buckets.time_per_output_token, buckets.native),
            itl: hist(&buckets.time_per_output_token, buckets.native),
            decode_tps: hist(&buckets.decode_tokens_per_second, buckets.native),
            e2e: hist(&buckets.request_duration, buckets.native),
            ttfb: hist(&buckets.time_to_headers, buckets.native),
            failed_duration: hist(&buckets.request_duration, buckets.native),
            probes: Family::default(),
            errors: Family::default(),
            flags: Family::default(),
            output_tokens: Family::default(),
            input_tokens: Family::default(),
            cached_input_tokens: Family::default(),
            reasoning_tokens: Family::default(),
            skipped: Family::default(),
            last_success: Family::default(),
            last_timestamp: Family::default(),
            phases: hist(&buckets.time_to_headers, buckets.native),
            turn_ttft: hist(&buckets.time_to_first_token, buckets.native),
            cold_ttft: hist(&buckets.time_to_first_token, buckets.native),
            connections: Family::default(),
            retry_after: Family::default(),
            target_wait: Family::default(),
            ratelimit: Default::default(),
            ratelimit_invalid: Family::default(),
            job_info: Family::default(),
            reload_ok: Gauge::default(),
            reload_ts: Gauge::default(),
            internal: Family::default(),
            otlp_exports: Family::default(),
            answered: answered::Families::default(),
            sessions: session::SessionFamilies::new(buckets),
            location: location.map(str::to_owned),
            active: Arc::default(),
            generation: AtomicU64::new(0),
            registry: Registry::default(),
        };
        let r = &mut registry;
        let s = Unit::Seconds;
        r.register_with_unit("time_to_first_token", "TTFT of successful probes: from sending the request to the first token-bearing event (any channel, reasoning included)", s.clone(), m.ttft.clone());
        r.register_with_unit("time_to_first_output_token", "TTFO of successful probes: from sending the request to the first event with visible answer text (absent for reasoning- or tool-only answers)", s.clone(), m.ttfo.clone());
        r.register_with_unit("time_per_output_token", "TPOT of successful probes: (last token event - first token event) / (output tokens - 1); not observed for N < 2 or burst delivery", s.clone(), m.tpot.clone());
        r.register_with_unit("inter_chunk_latency", "Gaps between consecutive token-bearing events of successful probes (time per output chunk; a chunk may hold several tokens)", s.clone(), m.itl.clone());
        r.register("decode_tokens_per_second", "Per-request decode rate of successful probes: (output tokens - 1) / (last token event - first token event) = 1 / TPOT", m.decode_tps.clone());
        r.register_with_unit("request_duration", "E2E of successful probes: from sending the request to the stream's end marker (or the connection's end after a finish reason; without streaming, the end of the whole answer)", s.clone(), m.e2e.clone());
        r.register_with_unit("time_to_headers", "TTFB of successful probes: from sending the request to the response status line and headers", s.clone(), m.ttfb.clone());
        r.register_with_unit("failed_probe_duration", "Failed probes: from sending the request to the failure instant (error event, close or deadline)", s, m.failed_duration.clone());
        m.sessions.register(r);
        r.register("probes", "Probes run, successful or not", m.probes.clone());
        r.register("probe_errors", "Failed probes by error_type (exactly one per failed probe; see docs/measurement.md for the order)", m.errors.clone());
        r.register("probe_flags", "Anomalies seen in probes (not errors): no_content_type, unterminated_final_event, compressed_stream, burst_delivery, input_length_off, concurrent_probe (another probe of the same target was in flight), cold_start (the first probe of the target after its cold_after without one), model_mismatch (another model answered), usage_mismatch (the usage stated is off what was streamed), answer_drift (a drift: true prompt's answer changed)", m.flags.clone());
        r.register(
            "output_tokens",
            "Output tokens of successful probes (usage when reported, else token-bearing events)",
            m.output_tokens.clone(),
        );
        r.register(
            "input_tokens",
            "Input tokens of successful probes, as reported by the server (the whole input, cached tokens included)",
            m.input_tokens.clone(),
        );
        r.register(
            "cached_input_tokens",
            "Of the input tokens of successful probes, those the server's prompt cache served, as its usage said (prompt_tokens_details.cached_tokens, Anthropic's cache_read_input_tokens, DeepSeek's prompt_cache_hit_tokens); only jobs whose answers say have these series",
            m.cached_input_tokens.clone(),
        );
        r.register(
            "reasoning_tokens",
            "Of the output tokens of successful probes, the reasoning tokens, as the server's usage said (completion_tokens_details.reasoning_tokens, the Responses API's output_tokens_details); only jobs whose answers say have these series",
            m.reasoning_tokens.clone(),
        );
        r.register("probes_skipped", "Scheduled probes that did not run, by reason (overlap: the previous probe was still running; rate_limited: the target's Retry-After had not passed; uncalibrated: the prompt's token length could not be calibrated)", m.skipped.clone());
        r.register(
            "last_probe_success",
            "1 when the job's most recent probe succeeded, else 0",
            m.last_success.clone(),
        );
        r.register_with_unit(
            "last_probe_timestamp",
            "When the job's most recent probe finished, Unix time",
            Unit::Seconds,
            m.last_timestamp.clone(),
        );
        r.register_with_unit("connection_phase", "Connection set-up of probes that opened a connection, by phase: resolve (DNS), connect (TCP, to the target or the proxy), tls (handshake)", Unit::Seconds, m.phases.clone());
        r.register_with_unit("conversation_time_to_first_token", "TTFT of successful probes of conversation prompts, by turn: first (a new conversation) or later (the history resent, which a prefix cache can serve); only conversation jobs have these series", Unit::Seconds, m.turn_ttft.clone());
        r.register_with_unit("cold_start_time_to_first_token", "TTFT of successful probes flagged cold_start (the first of their target after its cold_after without one), also counted in time_to_first_token; only jobs that had one have these series", Unit::Seconds, m.cold_ttft.clone());
        r.register(
            "probe_connections",
            "Probes by whether they reused a kept-alive connection (reused=\"true\") or opened one",
            m.connections.clone(),
        );
        r.register_with_unit("target_wait", "Time the job's probes waited for their target's max_in_flight before they were sent (not part of any TTFT)", Unit::Seconds, m.target_wait.clone());
        r.register_with_unit("retry_after", "The wait the target last asked for with Retry-After on a 429/overload answer; the job's probes pause that long; 0 after a success", Unit::Seconds, m.retry_after.clone());
        r.register("ratelimit_limit", "The quota the target's last answer stated, by kind (requests, tokens, input_tokens, output_tokens), from its rate-limit headers (OpenAI x-ratelimit-*, Anthropic anthropic-ratelimit-*, the IETF RateLimit fields); only jobs whose answers state one have these series", m.ratelimit[0].clone());
        r.register(
            "ratelimit_remaining",
            "What was left of that quota at the target's last answer stating it, by kind",
            m.ratelimit[1].clone(),
        );
        r.register_with_unit(
            "ratelimit_reset",
            "Time until that quota resets, as of the target's last answer stating it, by kind",
            Unit::Seconds,
            m.ratelimit[2].clone(),
        );
        r.register(
            "ratelimit_invalid_values",
            "Values the target's rate-limit headers stated that are not data, by kind, left out of the ratelimit gauges: a number not finite, negative or over 1e16 (the rule of server metrics), or a remaining above its limit (the pair left out, counted once)",
            m.ratelimit_invalid.clone(),
        );
        r.register("job_info", "A job's settings that change what its numbers mean: api, connection (new = cold connection per probe, reuse = warm path), nonce (true = prompt-cache hits prevented), workload (messages, synthetic, dataset, conversation), stream (false = whole answers: no TTFT/TPOT observed); always 1", m.job_info.clone());
        r.register("config_last_reload_successful", "1 when the last config (re)load succeeded, 0 when the last attempt was refused (the previous config keeps running)", m.reload_ok.clone());
        r.register_with_unit(
            "config_last_reload_success_timestamp",
            "When the config was last loaded successfully, Unix time",
            Unit::Seconds,
            m.reload_ts.clone(),
        );
        r.register("internal_errors", "The exporter's own failures, by reason (fd_exhausted: out of file descriptors); a probe that hit one is not counted against its target", m.internal.clone());
        r.register("otlp_exports", "OTLP metric exports by result (sent; failed: refused or unanswered within the timeout; dropped: an export interval skipped while the previous export was in flight); only an exporter with OTEL_METRICS_EXPORTER=otlp has these series", m.otlp_exports.clone());
        m.answered.register(r);
        for reason in InternalReason::ALL {
            let _ = m.internal.get_or_create(&InternalLabels {
                reason: reason.as_str(),
            });
        }
        let build: Family<BuildLabels, Gauge> = Family::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        r.register("build_info", "tokenprobe's version; always 1", build);
        Metrics { registry, ..m }
    }

    /// Creates every series of a job at 0 (shared case 35: `increase()` sees the first error)
    /// and returns them as one [`JobSeries`]. A job already registered under the same labels (a
    /// reload changed its settings) keeps its series and its last result; only its
    /// `tokenprobe_job_info` series follows the new `info`, unless its `histograms` changed: then
    /// its series start afresh in the new layout.
    pub fn register_job(&self, info: JobInfo, histograms: Histograms) -> Arc<JobSeries> {
        let mut active = self.active.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = active.get(&info.job) {
            // A job that becomes (or stops being) a session job gets its series anew.
            if s.histograms == histograms && s.session.is_some() == (info.workload == "session") {
                s.set_info(info);
                return s.clone();
            }
            s.remove();
        }
        let s = Arc::new(JobSeries::new(self, info, histograms));
        active.insert(s.labels.clone(), s.clone());
        s
    }

    /// Removes every series of a job (when a reload drops it). Its [`JobSeries`], still held by a
    /// probe in flight, records nothing from then on.
    pub fn remove_job(&self, job: &JobLabels) {
        remove_job(&self.active, job);
    }

    /// Records the outcome of a config (re)load attempt at wall time `at`.
    pub fn reload_result(&self, ok: bool, at: SystemTime) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.reload_ok.set(i64::from(ok));
        if ok {
            let unix = at
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            self.reload_ts.set(unix);
        }
    }

    /// Changes with every config (re)load attempt (see [`Metrics::reload_result`]).
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Counts one OTLP export by its result (`sent`, `failed`, `dropped`).
    pub fn otlp_export(&self, result: &'static str) {
        self.otlp_exports
            .get_or_create(&ExportLabels { result })
            .inc();
    }

    /// The `location` label of every series, if any.
    pub fn location(&self) -> Option<&str> {
        self.location.as_deref()
    }

    /// Counts one of the exporter's own failures.
    pub fn internal_error(&self, reason: InternalReason) {
        count_internal(&self.internal, reason);
    }

    /// A job's most recent probe, `None` before the first or for an unknown job.
    pub fn last_result(&self, job: &JobLabels) -> Option<LastResult> {
        let series = self
            .active
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(job)
            .cloned()?;
        series.last_result()
    }

    /// The OpenMetrics 1.0 text exposition (ends with `# EOF`).
    ///
    /// # Errors
    /// Only a formatting error of the encoder, which writing to a `String` does not produce.
    pub fn encode_openmetrics(&self) -> Result<String, std::fmt::Error> {
        let mut s = String::with_capacity(64 * 1024);
        prometheus_client::encoding::text::encode(&mut s, &self.registry)?;
        Ok(sort_series(&s))
    }

    /// The Prometheus protobuf exposition: length-delimited `io.prometheus.client.MetricFamily`
    /// messages, each family's series sorted by their labels. Histograms carry their native
    /// buckets beside the classic ones when `buckets.native` is on.
    ///
    /// # Errors
    /// An encoder error (none is expected from the metric types registered here).
    pub fn encode_protobuf(
        &self,
    ) -> Result<Vec<u8>, prometheus_client::encoding::prometheus_protobuf::EncodeError> {
        use prometheus_client::encoding::prometheus_protobuf::prometheus_data_model::LabelPair;
        use prost::Message as _;
        /// A series' labels as (name, value) pairs, compared in place (no copy per comparison).
        fn pairs(l: &[LabelPair]) -> impl Iterator<Item = (&String, &String)> {
            l.iter().map(|p| (&p.name, &p.value))
        }
        let mut families =
            prometheus_client::encoding::prometheus_protobuf::encode(&self.registry)?;
        let mut out = Vec::with_capacity(32 * 1024);
        for f in &mut families {
            f.metric
                .sort_by(|a, b| pairs(&a.label).cmp(pairs(&b.label)));
            f.encode_length_delimited(&mut out)?;
        }
        Ok(out)
    }

    /// The classic Prometheus text exposition, version 0.0.4.
    ///
    /// # Errors
    /// As [`Metrics::encode_openmetrics`].
    pub fn encode_text(&self) -> Result<String, std::fmt::Error> {
        let mut s = String::with_capacity(64 * 1024);
        prometheus_client::encoding::prometheus_text::encode(&mut s, &self.registry)?;
        Ok(sort_series(&s))
    }
}

/// Every series of one job: its labels in every family, created at 0 in one call
/// ([`Metrics::register_job`]) and removed in one call ([`Metrics::remove_job`]). A probe's result
/// is recorded through it ([`JobSeries::record`]); once removed it records nothing, so a probe that
/// a reload's removal caught in flight leaves no series behind.
///
/// Adding a metric: a field here, its handle in [`JobSeries::new`] (which also makes its removal),
/// and what [`JobSeries::record`] writes to it.
pub struct JobSeries {
    labels: JobLabels,
    histograms: Histograms,
    /// The histogram families the job exports (`histograms:`); `None`: a family it does not.
    ttft: Option<Histogram>,
    ttfo: Option<Histogram>,
    tpot: Option<Histogram>,
    itl: Option<Histogram>,
    decode_tps: Option<Histogram>,
    e2e: Option<Histogram>,
    ttfb: Option<Histogram>,
    failed_duration: Option<Histogram>,
    probes: Counter,
    output_tokens: Counter,
    input_tokens: Counter,
    /// The cached input and reasoning tokens: a job has their series once an answer says them.
    usage_details: [Family<JobLabels, Counter>; 2],
    /// In the order of [`ErrorType::ALL`].
    errors: Vec<Counter>,
    /// In the order of [`Flag::ALL`].
    flags: Vec<Counter>,
    /// In the order of [`SkipReason::ALL`].
    skipped: Vec<Counter>,
    /// In the order of [`PHASES`] (empty without `connection_phase`).
    phases: Vec<Histogram>,
    /// Conversation jobs: TTFT by turn, in the order of [`TURNS`].
    turn_ttft: Vec<Histogram>,
    /// `reused="true"`, `reused="false"`.
    connections: [Counter; 2],
    retry_after: Gauge<f64, AtomicU64>,
    target_wait: Counter<f64, AtomicU64>,
    ratelimit: [RateGauges; 3],
    ratelimit_invalid: Family<RateLimitLabels, Counter>,
    /// `None` without `cold_start_time_to_first_token`.
    cold_ttft: Option<Hist>,
    last_success: Gauge,
    last_timestamp: Gauge<f64, AtomicU64>,
    job_info: Family<JobInfo, Gauge>,
    /// What answered (`answered`).
    answered: answered::Series,
    /// A `session:` job's session series.
    session: Option<session::SessionSeries>,
    /// Held while recording and while removing: a probe records all of its result or nothing.
    state: Mutex<SeriesState>,
}

struct SeriesState {
    /// False once removed.
    live: bool,
    last: Option<LastResult>,
    /// The current `tokenprobe_job_info` labels.
    info: JobInfo,
    /// Removes each of the job's series from its family.
    removers: Vec<Remover>,
    /// The quota kinds whose series exist.
    rate_kinds: Vec<crate::ratelimit::Kind>,
    /// Whether the cold-start TTFT series exists.
    cold_seen: bool,
    /// Whether the cached input and the reasoning tokens' series exist.
    usage_details_seen: [bool; 2],
    /// What answered: the label values kept, the last served model, the info series.
    answered: answered::State,
}

type Remover = Box<dyn FnOnce() + Send + Sync>;

/// The handle of `labels` in `family`, created at 0 if new; pushes its removal onto `removers`.
fn handle<S, M, C>(removers: &mut Vec<Remover>, family: &Family<S, M, C>, labels: S) -> M
where
    S: Clone + std::hash::Hash + Eq + Send + Sync + 'static,
    M: Clone + Send + Sync + 'static,
    C: MetricConstructor<M> + Clone + Send + Sync + 'static,
{
    let metric = family.get_or_create_owned(&labels);
    let family = family.clone();
    removers.push(Box::new(move || {
        family.remove(&labels);
    }));
    metric
}

impl std::fmt::Debug for JobSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobSeries")
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

impl JobSeries {
    fn new(m: &Metrics, info: JobInfo, histograms: Histograms) -> Self {
        use HistogramFamily as F;
        let job = info.job.clone();
        let mut rm = Vec::new();
        let has = |f: F| histograms.contains(f);
        let mut h = |f: F, family: &Hist| has(f).then(|| handle(&mut rm, family, job.clone()));
        let (ttft, ttfo) = (
            h(F::TimeToFirstToken, &m.ttft),
            h(F::TimeToFirstOutputToken, &m.ttfo),
        );
        let (tpot, itl) = (
            h(F::TimePerOutputToken, &m.tpot),
            h(F::InterChunkLatency, &m.itl),
        );
        let decode_tps = h(F::DecodeTokensPerSecond, &m.decode_tps);
        let (e2e, ttfb) = (h(F::RequestDuration, &m.e2e), h(F::TimeToHeaders, &m.ttfb));
        let failed_duration = h(F::FailedProbeDuration, &m.failed_duration);
        let errors = ErrorType::ALL
            .iter()
            .map(|e| {
                let l = ErrorLabels {
                    job: job.clone(),
                    error_type: e.as_str(),
                };
                handle(&mut rm, &m.errors, l)
            })
            .collect();
        let flags = Flag::ALL
            .iter()
            .map(|f| {
                let l = FlagLabels {
                    job: job.clone(),
                    flag: f.as_str(),
                };
                handle(&mut rm, &m.flags, l)
            })
            .collect();
        let skipped = SkipReason::ALL
            .iter()
            .map(|r| {
                let l = SkipLabels {
                    job: job.clone(),
                    reason: r.as_str(),
                };
                handle(&mut rm, &m.skipped, l)
            })
            .collect();
        let phase_list: &[&'static str] = if has(F::ConnectionPhase) {
            &PHASES
        } else {
            &[]
        };
        let phases = phase_list
            .iter()
            .map(|phase| {
                let l = PhaseLabels {
                    job: job.clone(),
                    phase,
                };
                handle(&mut rm, &m.phases, l)
            })
            .collect();
        let turn_ttft = if info.workload == "conversation" && has(F::ConversationTimeToFirstToken) {
            TURNS
                .iter()
                .map(|turn| {
                    let l = TurnLabels {
                        job: job.clone(),
                        turn,
                    };
                    handle(&mut rm, &m.turn_ttft, l)
                })
                .collect()
        } else {
            Vec::new()
        };
        let connections = ["true", "false"].map(|reused| {
            let l = ReusedLabels {
                job: job.clone(),
                reused,
            };
            handle(&mut rm, &m.connections, l)
        });
        let probes = handle(&mut rm, &m.probes, job.clone());
        let output_tokens = handle(&mut rm, &m.output_tokens, job.clone());
        let input_tokens = handle(&mut rm, &m.input_tokens, job.clone());
        let last_success = handle(&mut rm, &m.last_success, job.clone());
        let last_timestamp = handle(&mut rm, &m.last_timestamp, job.clone());
        let retry_after = handle(&mut rm, &m.retry_after, job.clone());
        let target_wait = handle(&mut rm, &m.target_wait, job.clone());
        let session = (info.workload == "session")
            .then(|| session::SessionSeries::new(&m.sessions, &job, &mut rm));
        m.job_info.get_or_create(&info).set(1);
        JobSeries {
            answered: answered::Series::new(job.clone(), &m.answered),
            labels: job,
            histograms,
            ttft,
            ttfo,
            tpot,
            itl,
            decode_tps,
            e2e,
            ttfb,
            failed_duration,
            probes,
            output_tokens,
            input_tokens,
            usage_details: [m.cached_input_tokens.clone(), m.reasoning_tokens.clone()],
            errors,
            flags,
            skipped,
            phases,
            turn_ttft,
            connections,
            retry_after,
            target_wait,
            ratelimit: m.ratelimit.clone(),
            ratelimit_invalid: m.ratelimit_invalid.clone(),
            cold_ttft: has(F::ColdStartTimeToFirstToken).then(|| m.cold_ttft.clone()),
            last_success,
            last_timestamp,
            job_info: m.job_info.clone(),
            session,
            state: Mutex::new(SeriesState {
                live: true,
                last: None,
                info,
                removers: rm,
                rate_kinds: Vec::new(),
                cold_seen: false,
                usage_details_seen: [false; 2],
                answered: answered::State::default(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SeriesState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The job's labels.
    pub fn labels(&self) -> &JobLabels {
        &self.labels
    }

    /// The job's most recent probe, `None` before the first.
    pub fn last_result(&self) -> Option<LastResult> {
        self.state().last.clone()
    }

    /// Replaces the job's `tokenprobe_job_info` series when `info` differs.
    fn set_info(&self, info: JobInfo) {
        let mut st = self.state();
        if !st.live || st.info == info {
            return;
        }
        self.job_info.remove(&st.info);
        self.job_info.get_or_create(&info).set(1);
        st.info = info;
    }

    /// Deletes every series of the job; later records and skips do nothing.
    fn remove(&self) {
        let mut st = self.state();
        st.live = false;
        for r in st.removers.drain(..) {
            r();
        }
        self.job_info.remove(&st.info);
        st.last = None;
        self.answered.remove(&mut st.answered);
    }

    /// Records one probe's result, finished at wall time `finished` (nothing once removed).
    pub fn record(&self, r: &ProbeResult, finished: SystemTime) {
        let mut st = self.state();
        if !st.live {
            return;
        }
        st.last = Some(LastResult {
            error_type: r.error_type,
            ttft_s: r.ttft_s,
            at: finished,
        });
        self.probes.inc();
        let state = &mut *st;
        self.answered
            .record(r, &mut state.answered, &mut state.removers);
        for f in &r.flags {
            if let Some(c) = nth(&Flag::ALL, f, &self.flags) {
                c.inc();
            }
        }
        let unix = finished
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        self.last_timestamp.set(unix);
        if let Some(p) = &r.phases {
            self.connections[usize::from(!p.reused)].inc();
            for (h, v) in self.phases.iter().zip([p.resolve_s, p.connect_s, p.tls_s]) {
                if let Some(v) = v {
                    h.observe(v);
                }
            }
        }
        for q in &r.rate_limits {
            let labels = RateLimitLabels {
                job: self.labels.clone(),
                kind: q.kind.as_str(),
            };
            if !st.rate_kinds.contains(&q.kind) {
                st.rate_kinds.push(q.kind);
                for family in &self.ratelimit {
                    let (family, labels) = (family.clone(), labels.clone());
                    st.removers.push(Box::new(move || {
                        family.remove(&labels);
                    }));
                }
                // The kind's count of values left out exists (at 0) with its gauges.
                let _ = handle(&mut st.removers, &self.ratelimit_invalid, labels.clone());
            }
            for (family, v) in self.ratelimit.iter().zip([q.limit, q.remaining, q.reset_s]) {
                if let Some(v) = v {
                    family.get_or_create(&labels).set(v);
                }
            }
            if !q.left_out.is_empty() {
                self.ratelimit_invalid
                    .get_or_create(&labels)
                    .inc_by(q.left_out.len() as u64);
            }
        }
        match (r.error_type, r.retry_after_s) {
            (Some(_), Some(w)) => {
                self.retry_after.set(w);
            }
            (None, _) => {
                self.retry_after.set(0.0);
            }
            _ => {}
        }
        match r.error_type {
            Some(e) => {
                if let Some(c) = nth(&ErrorType::ALL, &e, &self.errors) {
                    c.inc();
                }
                if let (Some(h), Some(d)) = (&self.failed_duration, r.failure_s) {
                    h.observe(d);
                }
                self.last_success.set(0);
            }
            None => {
                let observe = |h: Option<&Histogram>, v: Option<f64>| {
                    if let (Some(h), Some(v)) = (h, v) {
                        h.observe(v);
                    }
                };
                observe(self.ttft.as_ref(), r.ttft_s);
                if let Some(cold) = &self.cold_ttft
                    && r.flags.contains(&Flag::ColdStart)
                {
                    if !st.cold_seen {
                        st.cold_seen = true;
                        let (family, labels) = (cold.clone(), self.labels.clone());
                        st.removers.push(Box::new(move || {
                            family.remove(&labels);
                        }));
                    }
                    observe(Some(&cold.get_or_create(&self.labels)), r.ttft_s);
                }
                if let Some(t) = r.turn {
                    observe(self.turn_ttft.get(usize::from(t > 1)), r.ttft_s);
                }
                observe(self.ttfo.as_ref(), r.ttfo_s);
                observe(self.tpot.as_ref(), r.tpot_s);
                observe(self.decode_tps.as_ref(), r.decode_tokens_per_s);
                observe(self.e2e.as_ref(), r.e2e_s);
                observe(self.ttfb.as_ref(), r.ttfb_s);
                if let Some(itl) = &self.itl {
                    for g in &r.chunk_gaps_s {
                        itl.observe(*g);
                    }
                }
                self.output_tokens.inc_by(r.output_tokens);
                if let Some(i) = r.input_tokens {
                    self.input_tokens.inc_by(i);
                }
                for (i, n) in [r.cached_input_tokens, r.reasoning_tokens]
                    .into_iter()
                    .enumerate()
                {
                    let Some(n) = n else { continue };
                    let family = &self.usage_details[i];
                    if !st.usage_details_seen[i] {
                        st.usage_details_seen[i] = true;
                        let (family, labels) = (family.clone(), self.labels.clone());
                        st.removers.push(Box::new(move || {
                            family.remove(&labels);
                        }));
                    }
                    family.get_or_create(&self.labels).inc_by(n);
                }
                self.last_success.set(1);
            }
        }
    }

    /// A session job's session, once it is over (nothing once removed, or for another job).
    pub fn session(&self, s: &SessionDone) {
        let mut st = self.state();
        if let (true, Some(series)) = (st.live, &self.session) {
            series.record(s, &mut st.removers);
        }
    }

    /// A probe waited `d` for its target's `max_in_flight` before it was sent (nothing once
    /// removed).
    pub fn waited(&self, d: Duration) {
        if self.state().live {
            self.target_wait.inc_by(d.as_secs_f64());
        }
    }

    /// Counts a scheduled probe that did not run (nothing once removed).
    pub fn skipped(&self, reason: SkipReason) {
        let st = self.state();
        if st.live
            && let Some(c) = nth(&SkipReason::ALL, &reason, &self.skipped)
        {
            c.inc();
        }
    }
}

/// Counts one of the exporter's own failures.
fn count_internal(family: &Family<InternalLabels, Counter>, reason: InternalReason) {
    family
        .get_or_create(&InternalLabels {
            reason: reason.as_str(),
        })
        .inc();
}

/// Removes the series of the job of `labels` from `active` and from their families.
fn remove_job(active: &Active, labels: &JobLabels) {
    let removed = active
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(labels);
    if let Some(s) = removed {
        s.remove();
    }
}

/// The registry is one of `serve`'s result sinks: a job's side of it is its series.
impl ResultSink for Metrics {
    fn start(&self, job: &Job) -> Box<dyn JobSink> {
        Box::new(JobSide {
            series: self.register_job(JobInfo::of(job), job.histograms),
            active: self.active.clone(),
            internal: self.internal.clone(),
        })
    }
}

/// A job's side of the registry: its series, and where they are removed from when it stops.
struct JobSide {
    series: Arc<JobSeries>,
    active: Arc<Active>,
    internal: Family<InternalLabels, Counter>,
}

impl JobSink for JobSide {
    fn record(&self, r: &ProbeResult, finished: SystemTime) {
        self.series.record(r, finished);
    }

    fn skipped(&self, reason: SkipReason) {
        self.series.skipped(reason);
    }

    fn waited(&self, d: Duration) {
        self.series.waited(d);
    }

    fn session(&self, s: &SessionDone) {
        self.series.session(s);
    }

    /// Counted as the exporter's own (`tokenprobe_internal_errors_total`), in no series of the
    /// job.
    fn internal_error(&self, reason: InternalReason) {
        count_internal(&self.internal, reason);
    }

    /// Its series stay for the job that replaces it (the same labels: [`Metrics::register_job`]
    /// gave it the same series); else they are deleted.
    fn stop(&self, replaced: bool) {
        if !replaced {
            remove_job(&self.active, self.series.labels());
        }
    }
}

/// The handle of `v` in `handles`, laid out in the order of `all`.
fn nth<'a, T: PartialEq, M>(all: &[T], v: &T, handles: &'a [M]) -> Option<&'a M> {
    all.iter().position(|x| x == v).and_then(|i| handles.get(i))
}

/// The exposition with the series of every family in a stable order, sorted by their label sets
/// (prometheus-client encodes a family from a hash map). A series is the run of consecutive
/// samples with the same labels apart from `le` (a histogram's buckets, `_sum`, `_count`), and
/// keeps its samples in the encoder's order; comment lines stay where they are.
pub fn sort_series(text: &str) -> String {
    /// The labels of a sample without `le` (first in OpenMetrics, last in the 0.0.4 format).
    fn series_key(line: &str) -> String {
        let Some(open) = line.find('{') else {
            return String::new();
        };
        let rest = &line[open + 1..];
        let inner = rest.rsplit_once("} ").map_or(rest, |(l, _)| l);
        let after_value = |v: &str| v.find('"').map_or("", |i| &v[i + 1..]).to_owned();
        if let Some(v) = inner.strip_prefix("le=\"") {
            after_value(v).trim_start_matches(',').to_owned()
        } else if let Some(i) = inner.find(",le=\"") {
            format!("{}{}", &inner[..i], after_value(&inner[i + 5..]))
        } else {
            inner.to_owned()
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut family: Vec<(String, Vec<&str>)> = Vec::new();
    let flush = |family: &mut Vec<(String, Vec<&str>)>, out: &mut String| {
        family.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, lines) in family.drain(..) {
            for l in lines {
                out.push_str(l);
                out.push('\n');
            }
        }
    };
    for line in text.lines() {
        if line.starts_with('#') {
            flush(&mut family, &mut out);
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let key = series_key(line);
        match family.last_mut() {
            Some((k, lines)) if *k == key => lines.push(line),
            _ => family.push((key, vec![line])),
        }
    }
    flush(&mut family, &mut out);
    out
}

mod session;

#[cfg(test)]
mod tests;
