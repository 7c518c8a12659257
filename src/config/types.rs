//! The validated config types (what the rest of the program sees), their small methods, and the
//! errors a config can have ([`ConfigError`], [`Issue`], [`SyntaxError`]).

pub use crate::auth::{AuthStyle, KEY_FILE_MAX_BYTES, KEY_FILE_TIMEOUT, KeySource, Secret};
use crate::protocol::{Api, ExactOutput};
pub use crate::transport::{ConnectionMode, ProxySetting, TlsOptions};
use crate::workload::Workload;
use serde::Deserialize;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The four deadlines of a probe (docs/measurement.md, `timeout_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Connection set-up (DNS, TCP, TLS).
    pub connect: Duration,
    /// `t0` to the first token-bearing event.
    pub first_token: Duration,
    /// No bytes at all for this long after the first token-bearing event.
    pub idle: Duration,
    /// `t0` to the end of the stream.
    pub total: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            first_token: Duration::from_secs(30),
            idle: Duration::from_secs(30),
            total: Duration::from_secs(120),
        }
    }
}

/// A prompt's content check (docs/measurement.md: `validation_failed`): every check it sets must
/// pass.
#[derive(Debug, Clone)]
pub struct Expect {
    /// The visible answer must match this regular expression.
    pub regex: Option<regex::Regex>,
    /// At least this many output tokens.
    pub min_output_tokens: Option<u64>,
    /// The visible answer, exactly (surrounding whitespace aside).
    pub exact: Option<String>,
    /// The first number in the visible answer, within a tolerance.
    pub number: Option<NumberCheck>,
    /// The visible answer is JSON (a code fence around it aside) this schema admits.
    pub json_schema: Option<super::schema::JsonSchema>,
}

/// `expect.number`: the answer's first number is `value` give or take `tolerance`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NumberCheck {
    /// The number expected.
    pub value: f64,
    /// How far from it the answer's may be (inclusive).
    pub tolerance: f64,
}

/// What another model answering does (a target's `model_mismatch:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MismatchAction {
    /// The probe is flagged `model_mismatch` (and counted), and succeeds.
    #[default]
    Flag,
    /// The probe fails with the error type `model_mismatch`.
    Fail,
}

/// How the streamed output is counted for the usage audit (a target's `usage_audit.count`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditCount {
    /// The target's `tokenizer:` when it has one, else the events once the server's own usage
    /// showed it streams one token per event.
    #[default]
    Auto,
    /// The target's `tokenizer:` (required).
    Tokenizer,
    /// The token-bearing events: the server streams one token per event (declared).
    Events,
    /// No audit.
    Off,
}

/// A target's usage audit (`usage_audit:`; docs/measurement.md, "Usage audit").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UsageAuditSettings {
    /// How the streamed output is counted.
    pub count: AuditCount,
    /// A count is off beyond this share of the expected count...
    pub tolerance_share: f64,
    /// ...and beyond this many tokens.
    pub tolerance_tokens: u64,
}

impl Default for UsageAuditSettings {
    fn default() -> Self {
        UsageAuditSettings {
            count: AuditCount::Auto,
            tolerance_share: 0.05,
            tolerance_tokens: 3,
        }
    }
}

// The validator admits finite tolerances only, so equality is an equivalence.
impl Eq for UsageAuditSettings {}

/// When a job runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// Every so often, from a per-job offset.
    Interval(Duration),
    /// At the instants of a cron expression (UTC; seconds field optional).
    Cron(Box<croner::Cron>),
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Interval(d) => write!(f, "every {}", humantime::format_duration(*d)),
            Schedule::Cron(c) => write!(f, "cron \"{}\"", c.pattern),
        }
    }
}

/// A named prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// Config name (a label value).
    pub name: String,
    /// What its probes send: the configured messages, synthetic lengths, a dataset or a
    /// conversation (docs/bench.md, "Workloads").
    pub workload: Workload,
    /// Output cap of `messages` and `dataset` prompts (the others draw theirs per request).
    pub max_tokens: Option<u32>,
    /// Prepend a fresh random nonce to the last user message of every probe, so a server's prompt
    /// cache cannot hide prefill time.
    pub nonce: bool,
    /// Content check, if any.
    pub expect: Option<Expect>,
    /// `stream:` of the prompt, overriding the target's when set.
    pub stream: Option<bool>,
    /// `drift: true`: a deterministic prompt whose answers are hashed and compared, a change
    /// flagged `answer_drift` (the validator holds its jobs to a temperature of 0 and a seed).
    pub drift: bool,
}

impl PartialEq for Expect {
    fn eq(&self, o: &Self) -> bool {
        self.regex.as_ref().map(regex::Regex::as_str) == o.regex.as_ref().map(regex::Regex::as_str)
            && self.min_output_tokens == o.min_output_tokens
            && self.exact == o.exact
            && self.number == o.number
            && self.json_schema == o.json_schema
    }
}

impl Eq for Expect {}

/// What a model costs, per million tokens (in the currency of the config; validated
/// non-negative and finite).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, Deserialize)]
pub struct Price {
    /// Per million input tokens.
    pub input_per_mtok: f64,
    /// Per million output tokens.
    pub output_per_mtok: f64,
}

// The validator admits finite numbers only, so equality is an equivalence.
impl Eq for Price {}

impl Price {
    /// The cost of one request of `input` and `output` tokens.
    pub fn cost(&self, input: u64, output: u64) -> f64 {
        (input as f64 * self.input_per_mtok + output as f64 * self.output_per_mtok) / 1e6
    }
}

/// What one GPU costs per hour (validated finite and non-negative, so equality is an
/// equivalence).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, Deserialize)]
#[serde(transparent)]
pub struct GpuHourPrice(pub f64);

impl Eq for GpuHourPrice {}

/// A validated target. Its `Debug` hides what may be secret (userinfo, non-public header and
/// query values, a proxy's credentials), as every output does.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    /// Config name (a label value).
    pub name: String,
    /// Base URL without a trailing slash, e.g. `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// Protocol.
    pub api: Api,
    /// API key, if any.
    pub api_key: Option<KeySource>,
    /// Ask for usage in the stream (`stream_options.include_usage`); off for servers that reject it.
    pub include_usage: bool,
    /// Extra request headers.
    pub headers: Vec<(String, String)>,
    /// Extra top-level body fields (e.g. `temperature: 0`, `seed`).
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Query parameters added to the URL (e.g. Azure's `api-version`).
    pub query: Vec<(String, String)>,
    /// The header carrying the key.
    pub auth: AuthStyle,
    /// Proxy choice.
    pub proxy: ProxySetting,
    /// TLS trust.
    pub tls: TlsOptions,
    /// New connection per probe or reuse.
    pub connection: ConnectionMode,
    /// `max_in_flight:` (`serve`): at most this many probes of the target in flight at once; a
    /// probe held back waits (counted apart, never in its TTFT). `None`: no limit.
    pub max_in_flight: Option<u32>,
    /// `cold_after:` (`serve`): the first probe of the target after this long without one is
    /// flagged `cold_start`, and its TTFT also goes to the cold-start histogram. `None`: never.
    pub cold_after: Option<std::time::Duration>,
    /// `price:`: what every model of the target costs, unless `model_prices` names it.
    pub price: Option<Price>,
    /// `model_prices:`: per-model prices.
    pub model_prices: Vec<(String, Price)>,
    /// `gpus:` (`bench`): how many GPUs serve the target, the one declared count (else the
    /// device count of its DCGM metrics; never guessed).
    pub gpus: Option<u32>,
    /// `gpu_hour_price:` (`bench`): what one of its GPUs costs per hour, in the config's
    /// currency (validated finite and non-negative): the cost of self-hosted tokens.
    pub gpu_hour_price: Option<GpuHourPrice>,
    /// Stream the answer (`stream: true`, the default) or ask for it whole (`false`).
    pub stream: bool,
    /// How requests ask for exactly `max_tokens` output tokens.
    pub exact_output: ExactOutput,
    /// A Hugging Face `tokenizer.json` of the target's models: filler is counted with it, so a
    /// calibration needs one request (the chat template) instead of three.
    pub tokenizer: Option<PathBuf>,
    /// Metrics endpoints `bench` scrapes beside every level (`server_metrics:`).
    pub server_metrics: Vec<crate::servermetrics::Endpoint>,
    /// `model_aliases:`: the other names each model may answer as (beside the vendors'
    /// aliasing: a snapshot stamp, a provider prefix).
    pub model_aliases: Vec<(String, Vec<String>)>,
    /// `model_mismatch:`: what another model answering does.
    pub model_mismatch: MismatchAction,
    /// `usage_audit:`: how the answers' usage is held to what they streamed.
    pub usage_audit: UsageAuditSettings,
}

impl Target {
    /// The other names `model` may answer as (`model_aliases:`).
    pub fn aliases_of(&self, model: &str) -> &[String] {
        self.model_aliases
            .iter()
            .find(|(m, _)| m == model)
            .map_or(&[], |(_, a)| a.as_slice())
    }

    /// The price of `model` at this target: its `model_prices` entry, else the target's `price`.
    pub fn price_of(&self, model: &str) -> Option<Price> {
        self.model_prices
            .iter()
            .find(|(m, _)| m == model)
            .map(|(_, p)| *p)
            .or(self.price)
    }

    /// The target's API key, read now (a key file is read on every call, so a rotated key is
    /// used); `None` without one.
    ///
    /// # Errors
    /// What [`KeySource::load`] says when the key file cannot be read.
    pub async fn load_key(&self) -> Result<Option<Secret>, String> {
        match &self.api_key {
            Some(k) => k.load().await.map(Some),
            None => Ok(None),
        }
    }

    /// The endpoint URL: `base_url` + the protocol's path + the query parameters (the one place
    /// a target's URL is built; show it through `redact::redact_url`).
    pub fn url(&self) -> String {
        self.url_of(self.api.path())
    }

    /// The target's model list (`base_url` + `/models` + the query parameters): what `bench`
    /// asks to open a worker's connection before a level without generating anything.
    pub fn models_url(&self) -> String {
        self.url_of("/models")
    }

    fn url_of(&self, path: &str) -> String {
        let mut url = format!("{}{}", self.base_url, path);
        if !self.query.is_empty()
            && let Ok(mut u) = url::Url::parse(&url)
        {
            u.query_pairs_mut().extend_pairs(self.query.iter());
            url = u.to_string();
        }
        url
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::redact::{REDACTED, is_public_name, redact_url, redact_userinfo};
        let pairs = |v: &[(String, String)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(n, x)| {
                    let x = if is_public_name(n) {
                        x.clone()
                    } else {
                        REDACTED.to_owned()
                    };
                    (n.clone(), x)
                })
                .collect()
        };
        let proxy = match &self.proxy {
            ProxySetting::Url(u) => format!("Url({})", redact_userinfo(u)),
            other => format!("{other:?}"),
        };
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("base_url", &redact_url(&self.base_url))
            .field("api", &self.api)
            .field("api_key", &self.api_key)
            .field("include_usage", &self.include_usage)
            .field("headers", &pairs(&self.headers))
            .field("extra_body", &self.extra_body)
            .field("query", &pairs(&self.query))
            .field("auth", &self.auth)
            .field("proxy", &proxy)
            .field("tls", &self.tls)
            .field("connection", &self.connection)
            .field("price", &self.price)
            .field("model_prices", &self.model_prices)
            .field("gpus", &self.gpus)
            .field("gpu_hour_price", &self.gpu_hour_price)
            .field("stream", &self.stream)
            .field("exact_output", &self.exact_output)
            .field("tokenizer", &self.tokenizer)
            .field("server_metrics", &self.server_metrics)
            .field("model_aliases", &self.model_aliases)
            .field("model_mismatch", &self.model_mismatch)
            .field("usage_audit", &self.usage_audit)
            .finish()
    }
}

/// One job: a (target, model, prompt) triple with its schedule and deadlines. Two jobs are equal
/// when every setting is (hidden values included; the scheduler restarts a job that changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The target.
    pub target: Arc<Target>,
    /// Model name (a label value; from the config, never from a response).
    pub model: String,
    /// The prompt.
    pub prompt: Arc<Prompt>,
    /// When it runs.
    pub schedule: Schedule,
    /// Its deadlines.
    pub timeouts: Timeouts,
    /// The histogram families it exports.
    pub histograms: Histograms,
}

impl Job {
    /// `target/model/prompt`, unique per config.
    pub fn name(&self) -> String {
        format!("{}/{}/{}", self.target.name, self.model, self.prompt.name)
    }

    /// Whether this job's requests stream: the prompt's `stream:`, else the target's.
    pub fn stream(&self) -> bool {
        self.prompt.stream.unwrap_or(self.target.stream)
    }
}

/// A histogram family a job can export, named as its metric without `tokenprobe_` and the unit
/// (`histograms:` under `defaults:` or a target).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistogramFamily {
    /// TTFT.
    TimeToFirstToken,
    /// TTFO.
    TimeToFirstOutputToken,
    /// TPOT.
    TimePerOutputToken,
    /// The gaps between token-bearing events.
    InterChunkLatency,
    /// Per-request decode rate (1 / TPOT).
    DecodeTokensPerSecond,
    /// E2E.
    RequestDuration,
    /// TTFB.
    TimeToHeaders,
    /// Failed probes' durations.
    FailedProbeDuration,
    /// Connection set-up by phase (three series sets: resolve, connect, tls).
    ConnectionPhase,
    /// Conversation jobs' TTFT by turn (only conversation jobs have it).
    ConversationTimeToFirstToken,
    /// TTFT of cold-start probes (only jobs that had one have it).
    ColdStartTimeToFirstToken,
}

impl HistogramFamily {
    /// Every family, in the order `/metrics` registers them.
    pub const ALL: [HistogramFamily; 11] = [
        HistogramFamily::TimeToFirstToken,
        HistogramFamily::TimeToFirstOutputToken,
        HistogramFamily::TimePerOutputToken,
        HistogramFamily::InterChunkLatency,
        HistogramFamily::DecodeTokensPerSecond,
        HistogramFamily::RequestDuration,
        HistogramFamily::TimeToHeaders,
        HistogramFamily::FailedProbeDuration,
        HistogramFamily::ConnectionPhase,
        HistogramFamily::ConversationTimeToFirstToken,
        HistogramFamily::ColdStartTimeToFirstToken,
    ];

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// The histogram families a job exports. The default keeps what the shipped alerts and SLO
/// rules read (TTFT, TPOT, E2E and the decode rate, whose layouts hold the 2 s and 30 tokens/s
/// bounds) and the two that exist only for the jobs that need them; the rest is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Histograms(u16);

impl Histograms {
    /// Every family.
    pub const ALL: Histograms = Histograms((1 << HistogramFamily::ALL.len()) - 1);

    /// The families named.
    pub fn of(families: impl IntoIterator<Item = HistogramFamily>) -> Self {
        Histograms(families.into_iter().fold(0, |b, f| b | f.bit()))
    }

    /// Whether `f` is exported.
    pub fn contains(self, f: HistogramFamily) -> bool {
        self.0 & f.bit() != 0
    }
}

impl Default for Histograms {
    fn default() -> Self {
        use HistogramFamily as F;
        Histograms::of([
            F::TimeToFirstToken,
            F::TimePerOutputToken,
            F::DecodeTokensPerSecond,
            F::RequestDuration,
            F::ConversationTimeToFirstToken,
            F::ColdStartTimeToFirstToken,
        ])
    }
}

/// Histogram bucket upper bounds per metric (seconds, or tokens/s for decode rate).
#[derive(Debug, Clone, PartialEq)]
pub struct Buckets {
    /// TTFT and TTFO.
    pub time_to_first_token: Vec<f64>,
    /// TPOT and inter-chunk gaps.
    pub time_per_output_token: Vec<f64>,
    /// Decode tokens/s.
    pub decode_tokens_per_second: Vec<f64>,
    /// E2E and failed-probe durations.
    pub request_duration: Vec<f64>,
    /// TTFB.
    pub time_to_headers: Vec<f64>,
    /// Native histograms beside the classic buckets (`buckets.native`), sent to a scraper that
    /// asks for the Prometheus protobuf format.
    pub native: bool,
}

impl Default for Buckets {
    /// Lean layouts (a job's default histograms come to 60 series, its whole default set to 97),
    /// each bound where the shipped rules compare: 2 s for TTFT, 30 tokens/s for the decode rate.
    /// A finer layout is one `buckets:` away.
    fn default() -> Self {
        Buckets {
            // 25 ms to 60 s, closest around the 2 s alerts.
            time_to_first_token: vec![
                0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 5.0, 10.0, 30.0,
                60.0,
            ],
            // 5 ms to 1 s.
            time_per_output_token: vec![0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0],
            decode_tokens_per_second: vec![
                5.0, 10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 150.0, 200.0, 500.0, 1000.0,
            ],
            request_duration: vec![
                0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
            ],
            time_to_headers: vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
            ],
            native: false,
        }
    }
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Every job, in config order (targets × models × prompts).
    pub jobs: Vec<Job>,
    /// Histogram layouts.
    pub buckets: Buckets,
    /// Where this exporter probes from (`location:`), a constant label on every series.
    pub location: Option<String>,
}

/// One problem found in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// Key path, e.g. `targets[0].interval`.
    pub path: String,
    /// 1-based line and column, when known.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
    /// What is wrong (never a secret's value).
    pub message: String,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(
                f,
                "{}:{}: {}: {}",
                self.line, self.column, self.path, self.message
            )
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {}: {reason}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause (shown in the message, not chained, so it is printed once).
        reason: std::io::Error,
    },
    /// The YAML is not well-formed or does not have the config's shape (unknown key, wrong type).
    #[error("invalid config: {0}")]
    Syntax(Box<SyntaxError>),
    /// The YAML has the right shape but its values are invalid; every problem is listed.
    #[error("invalid config ({} problem{}):\n{}", .0.len(), if .0.len() == 1 { "" } else { "s" },
        .0.iter().map(|i| format!("  {i}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<Issue>),
}

impl ConfigError {
    /// What failed, in one line that quotes nothing from the file (for answers to clients such as
    /// `POST /-/reload`): the kind of problem and where, never a value or a source line.
    pub fn summary(&self) -> String {
        match self {
            ConfigError::Io { path, reason } => {
                format!(
                    "cannot read config file {}: {}",
                    path.display(),
                    reason.kind()
                )
            }
            ConfigError::Syntax(e) => format!(
                "the config has a syntax or type error at line {} column {}{} (run check-config)",
                e.line,
                e.column,
                if e.path.is_empty() {
                    String::new()
                } else {
                    format!(", key {}", e.path)
                }
            ),
            ConfigError::Invalid(issues) => format!(
                "the config has {} invalid value{} (first at line {}: {}; run check-config)",
                issues.len(),
                if issues.len() == 1 { "" } else { "s" },
                issues.first().map_or(0, |i| i.line),
                issues.first().map_or("", |i| i.path.as_str()),
            ),
        }
    }
}

/// A YAML syntax error or a value of the wrong type, with its place and a source snippet in which
/// every value that may be secret is replaced by `<redacted>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// The file, when the text came from one.
    pub file: Option<String>,
    /// 1-based line (0 when unknown).
    pub line: u64,
    /// 1-based column.
    pub column: u64,
    /// Key path where the parser was, e.g. `prompts[0].max_tokens` (may be empty).
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// The lines up to the error, redacted, with a caret under the column.
    pub snippet: String,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.as_deref().unwrap_or("config");
        write!(f, "{file}:{}:{}: ", self.line, self.column)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)?;
        if !self.snippet.is_empty() {
            write!(f, "\n{}", self.snippet)?;
        }
        Ok(())
    }
}

impl SyntaxError {
    pub(super) fn from_yaml(e: &serde_saphyr::Error, path: &str, text: &str) -> Self {
        let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
        let mut message = e.to_string();
        // The location is given separately.
        if let Some(i) = message.rfind(" at line ") {
            message.truncate(i);
        }
        let message =
            crate::redact::yaml_message(&plain_yaml_message(message.trim_start_matches("error: ")));
        let path = path
            .split('.')
            .map(|p| {
                p.strip_prefix("value")
                    .filter(|r| r.starts_with('['))
                    .unwrap_or(p)
            })
            .filter(|p| *p != "value" && !p.is_empty() && *p != "?")
            .collect::<Vec<_>>()
            .join(".")
            .replace(".[", "[");
        SyntaxError {
            file: None,
            line,
            column,
            path,
            message,
            snippet: crate::redact::config_snippet(text, line as usize, column as usize),
        }
    }
}

/// The YAML library's message in the words of the file's author: its advice to programmers
/// (`set DuplicateKeyPolicy in Options`), Rust type names (`invalid u32`) and Debug output
/// (`budget breached: Depth { depth: 65 }`) replaced by what is wrong in the file.
fn plain_yaml_message(m: &str) -> String {
    if let Some(rest) = m.strip_prefix("duplicate mapping key: ") {
        let key = rest
            .split(", set DuplicateKeyPolicy")
            .next()
            .unwrap_or(rest);
        return format!("duplicate key `{key}`");
    }
    if m.starts_with("multiple YAML documents detected") {
        return "more than one YAML document (a `---` line): a config is one document".into();
    }
    if let Some(rest) = m.strip_prefix("budget breached: ") {
        return if rest.starts_with("Depth") {
            "nested too deeply".into()
        } else {
            // Nodes, aliases, ...: an alias expansion far larger than any config.
            "too large once its aliases are expanded (an alias bomb?)".into()
        };
    }
    match m {
        "invalid u8" | "invalid u16" | "invalid u32" | "invalid u64" | "invalid usize" => {
            "expected a whole number".into()
        }
        "invalid floating point" | "invalid f32" | "invalid f64" => "expected a number".into(),
        "expected string scalar" => "expected a string".into(),
        "expected mapping start" => "expected a mapping (`key: value` lines)".into(),
        "recursion limit exceeded" => "nested too deeply".into(),
        _ => m.to_owned(),
    }
}
