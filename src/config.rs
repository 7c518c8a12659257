//! Configuration: the YAML file parsed once into validated types.
//!
//! The raw shape (`Raw*` types) mirrors the YAML with unknown keys rejected; [`Config::parse`]
//! turns it into [`Config`], collecting every semantic problem at once, each with its key path and
//! `line:column`. The rest of the program never sees raw YAML. Environment references `${VAR}` in
//! `api_key` and `base_url` are expanded here; `api_key_file` is read at each probe, so a rotated
//! secret is picked up without a restart.

use crate::protocol::{Api, Message};
use serde::Deserialize;
use serde_saphyr::Spanned;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
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

/// Key files whose read is still blocked from an earlier probe: not read again until it returns,
/// so a hung file holds one thread, not one per probe.
static KEY_READS_IN_FLIGHT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

fn read_key_file(p: &Path) -> Result<Secret, String> {
    use std::io::Read as _;
    let f = std::fs::File::open(p)
        .map_err(|e| format!("cannot read api_key_file {}: {e}", p.display()))?;
    let mut buf = Vec::new();
    f.take(KEY_FILE_MAX_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read api_key_file {}: {e}", p.display()))?;
    if buf.len() as u64 > KEY_FILE_MAX_BYTES {
        return Err(format!(
            "api_key_file {} is larger than {} KiB: not a key",
            p.display(),
            KEY_FILE_MAX_BYTES / 1024
        ));
    }
    let text = String::from_utf8(buf)
        .map_err(|_| format!("api_key_file {} is not UTF-8 text", p.display()))?;
    Ok(Secret::new(text.trim()))
}

impl KeySource {
    /// The key's value now. A file is read on a thread of its own, never on the async runtime,
    /// within [`KEY_FILE_TIMEOUT`] and up to [`KEY_FILE_MAX_BYTES`].
    ///
    /// # Errors
    /// The file cannot be read, is too large, or did not answer in time (the error names the
    /// path, never the content).
    pub async fn load(&self) -> Result<Secret, String> {
        let p = match self {
            KeySource::Inline(s) => return Ok(s.clone()),
            KeySource::File(p) => p.clone(),
        };
        let hung = || {
            format!(
                "api_key_file {}: no answer within {} (a FIFO without a writer, or a hung mount?)",
                p.display(),
                humantime::format_duration(KEY_FILE_TIMEOUT)
            )
        };
        {
            let Ok(mut busy) = KEY_READS_IN_FLIGHT.lock() else {
                return Err(hung());
            };
            if busy.contains(&p) {
                return Err(hung());
            }
            busy.push(p.clone());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let path = p.clone();
        let spawned = std::thread::Builder::new()
            .name("tokenprobe-keyfile".into())
            .spawn(move || {
                let r = read_key_file(&path);
                if let Ok(mut busy) = KEY_READS_IN_FLIGHT.lock() {
                    busy.retain(|b| b != &path);
                }
                let _ = tx.send(r);
            });
        if let Err(e) = spawned {
            if let Ok(mut busy) = KEY_READS_IN_FLIGHT.lock() {
                busy.retain(|b| b != &p);
            }
            return Err(format!("cannot read api_key_file {}: {e}", p.display()));
        }
        match tokio::time::timeout(KEY_FILE_TIMEOUT, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(format!("cannot read api_key_file {}", p.display())),
            Err(_) => Err(hung()),
        }
    }
}

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

/// Which proxy a target's requests use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ProxySetting {
    /// The environment's (`http_proxy`, `https_proxy`, `all_proxy`, `no_proxy`), as curl reads it.
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

/// A prompt's content check (docs/measurement.md: `validation_failed`).
#[derive(Debug, Clone)]
pub struct Expect {
    /// The visible answer must match this regular expression.
    pub regex: Option<regex::Regex>,
    /// At least this many output tokens.
    pub min_output_tokens: Option<u64>,
}

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
    /// The conversation sent.
    pub messages: Vec<Message>,
    /// Output cap.
    pub max_tokens: Option<u32>,
    /// Prepend a fresh random nonce to the last user message of every probe, so a server's prompt
    /// cache cannot hide prefill time.
    pub nonce: bool,
    /// Content check, if any.
    pub expect: Option<Expect>,
}

impl PartialEq for Expect {
    fn eq(&self, o: &Self) -> bool {
        self.regex.as_ref().map(regex::Regex::as_str) == o.regex.as_ref().map(regex::Regex::as_str)
            && self.min_output_tokens == o.min_output_tokens
    }
}

impl Eq for Expect {}

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
}

impl Job {
    /// `target/model/prompt`, unique per config.
    pub fn name(&self) -> String {
        format!("{}/{}/{}", self.target.name, self.model, self.prompt.name)
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
}

impl Default for Buckets {
    fn default() -> Self {
        Buckets {
            // 10 ms to 60 s, fine between 0.5 and 3 s; 2 s is a boundary so a 2 s alert is exact.
            time_to_first_token: vec![
                0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9,
                1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0,
                60.0,
            ],
            // 1 ms to 1 s.
            time_per_output_token: vec![
                0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
                0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0,
            ],
            decode_tokens_per_second: vec![
                1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 75.0, 100.0, 125.0,
                150.0, 200.0, 250.0, 300.0, 400.0, 500.0, 750.0, 1000.0, 2000.0,
            ],
            request_duration: vec![
                0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0,
                120.0, 180.0, 240.0, 300.0, 450.0, 600.0,
            ],
            time_to_headers: vec![
                0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0,
                3.0, 5.0, 10.0, 20.0, 30.0, 60.0,
            ],
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
    fn from_yaml(e: &serde_saphyr::Error, path: &str, text: &str) -> Self {
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

// ---------------------------------------------------------------------------------------------
// Raw YAML shape.

type S<T> = Spanned<T>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    defaults: Option<RawDefaults>,
    #[serde(default)]
    prompts: Vec<RawPrompt>,
    #[serde(default)]
    targets: Vec<RawTarget>,
    #[serde(default)]
    buckets: Option<RawBuckets>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    interval: Option<S<String>>,
    cron: Option<S<String>>,
    timeouts: Option<RawTimeouts>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTimeouts {
    connect: Option<S<String>>,
    first_token: Option<S<String>>,
    idle: Option<S<String>>,
    total: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrompt {
    name: S<String>,
    messages: Vec<Message>,
    max_tokens: Option<u32>,
    #[serde(default)]
    nonce: bool,
    expect: Option<RawExpect>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    regex: Option<S<String>>,
    min_output_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    name: S<String>,
    base_url: S<String>,
    #[serde(default = "default_api")]
    api: Api,
    api_key: Option<S<String>>,
    api_key_file: Option<S<String>>,
    models: S<Vec<String>>,
    prompts: Option<Vec<S<String>>>,
    interval: Option<S<String>>,
    cron: Option<S<String>>,
    timeouts: Option<RawTimeouts>,
    #[serde(default = "default_true")]
    include_usage: bool,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    extra_body: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    query: BTreeMap<String, String>,
    auth: Option<AuthStyle>,
    proxy: Option<S<String>>,
    ca_file: Option<S<String>>,
    #[serde(default)]
    insecure_skip_verify: bool,
    #[serde(default)]
    connection: ConnectionMode,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBuckets {
    time_to_first_token: Option<S<Vec<f64>>>,
    time_per_output_token: Option<S<Vec<f64>>>,
    decode_tokens_per_second: Option<S<Vec<f64>>>,
    request_duration: Option<S<Vec<f64>>>,
    time_to_headers: Option<S<Vec<f64>>>,
}

fn default_api() -> Api {
    Api::OpenaiChat
}

fn default_true() -> bool {
    true
}

// ---------------------------------------------------------------------------------------------
// Validation.

struct Issues(Vec<Issue>);

impl Issues {
    fn push<T>(&mut self, path: impl Into<String>, at: &S<T>, message: impl Into<String>) {
        self.0.push(Issue {
            path: path.into(),
            line: at.referenced.line(),
            column: at.referenced.column(),
            message: message.into(),
        });
    }

    fn push_here(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Issue {
            path: path.into(),
            line: 0,
            column: 0,
            message: message.into(),
        });
    }

    fn duration(&mut self, path: &str, v: &Option<S<String>>) -> Option<Duration> {
        self.duration_in(path, v, Duration::from_millis(1), MAX_TIMEOUT)
    }

    fn duration_in(
        &mut self,
        path: &str,
        v: &Option<S<String>>,
        min: Duration,
        max: Duration,
    ) -> Option<Duration> {
        let v = v.as_ref()?;
        match humantime::parse_duration(v.value.trim()) {
            Ok(d) if d >= min && d <= max => Some(d),
            Ok(_) => {
                self.push(
                    path,
                    v,
                    format!(
                        "must be between {} and {}",
                        humantime::format_duration(min),
                        humantime::format_duration(max)
                    ),
                );
                None
            }
            Err(e) => {
                self.push(path, v, format!("not a duration like 30s or 1m30s ({e})"));
                None
            }
        }
    }

    fn timeouts(&mut self, path: &str, base: Timeouts, raw: &Option<RawTimeouts>) -> Timeouts {
        let Some(raw) = raw else { return base };
        Timeouts {
            connect: self
                .duration(&format!("{path}.connect"), &raw.connect)
                .unwrap_or(base.connect),
            first_token: self
                .duration(&format!("{path}.first_token"), &raw.first_token)
                .unwrap_or(base.first_token),
            idle: self
                .duration(&format!("{path}.idle"), &raw.idle)
                .unwrap_or(base.idle),
            total: self
                .duration(&format!("{path}.total"), &raw.total)
                .unwrap_or(base.total),
        }
    }

    fn schedule(
        &mut self,
        path: &str,
        interval: &Option<S<String>>,
        cron: &Option<S<String>>,
    ) -> Option<Schedule> {
        match (interval, cron) {
            (Some(i), Some(_)) => {
                self.push(
                    format!("{path}.interval"),
                    i,
                    "set either interval or cron, not both",
                );
                None
            }
            (Some(_), None) => self
                .duration_in(
                    &format!("{path}.interval"),
                    interval,
                    MIN_INTERVAL,
                    MAX_INTERVAL,
                )
                .map(Schedule::Interval),
            (None, Some(c)) => {
                let parser = croner::parser::CronParser::builder()
                    .seconds(croner::parser::Seconds::Optional)
                    .build();
                match parser.parse(&c.value) {
                    Ok(cron)
                        if cron
                            .find_next_occurrence(&chrono::Utc::now(), false)
                            .is_err() =>
                    {
                        self.push(
                            format!("{path}.cron"),
                            c,
                            "this cron expression never fires",
                        );
                        None
                    }
                    Ok(cron) => Some(Schedule::Cron(Box::new(cron))),
                    Err(e) => {
                        self.push(
                            format!("{path}.cron"),
                            c,
                            format!("not a cron expression ({e})"),
                        );
                        None
                    }
                }
            }
            (None, None) => None,
        }
    }

    fn buckets(&mut self, path: &str, v: &Option<S<Vec<f64>>>, default: Vec<f64>) -> Vec<f64> {
        let Some(v) = v else { return default };
        let ok = !v.value.is_empty()
            && v.value.iter().all(|b| b.is_finite())
            && v.value.windows(2).all(|w| w[0] < w[1]);
        if !ok {
            self.push(
                path,
                v,
                "bucket bounds must be finite and strictly increasing",
            );
            return default;
        }
        if v.value.len() > MAX_BUCKETS {
            self.push(
                path,
                v,
                format!(
                    "at most {MAX_BUCKETS} bucket bounds (every histogram of every job gets each one), got {}",
                    v.value.len()
                ),
            );
            return default;
        }
        v.value.clone()
    }
}

/// Expands `${VAR}` only: a `$` not followed by `{` stays literal (API keys may contain `$`).
fn expand_env(s: &str) -> Result<String, String> {
    let mut escaped = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        escaped.push(c);
        if c == '$' && chars.peek() != Some(&'{') {
            escaped.push('$');
        }
    }
    shellexpand::env(&escaped)
        .map(|c| c.into_owned())
        .map_err(|e| format!("environment variable {} is not set", e.var_name))
}

/// The most bounds a histogram layout (`buckets:`) may have.
pub const MAX_BUCKETS: usize = 100;

/// The largest config, bench or baseline file read (a config of 20,000 targets is about 2 MB;
/// a read at this cap must fit well inside the Helm chart's 64 Mi memory limit).
pub const MAX_INPUT_FILE_BYTES: u64 = 8 << 20;

/// Reads a text input file (config, bench file, baseline), at most [`MAX_INPUT_FILE_BYTES`]: a
/// file that never ends (`/dev/zero`) or is far too large is an error, not an unbounded read.
/// A pipe (`--config.file <(envsubst < c.yml)`) is read like a file.
///
/// # Errors
/// The I/O error, or `InvalidData` for a file past the limit or not UTF-8.
pub fn read_input_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_INPUT_FILE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_INPUT_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {} MiB", MAX_INPUT_FILE_BYTES >> 20),
        ));
    }
    String::from_utf8(bytes).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })
}

impl Config {
    /// Reads and validates a config file.
    ///
    /// # Errors
    /// [`ConfigError::Io`], [`ConfigError::Syntax`] (with the YAML location) or
    /// [`ConfigError::Invalid`] listing every problem with its key path and `line:column`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = read_input_file(path).map_err(|reason| ConfigError::Io {
            path: path.to_owned(),
            reason,
        })?;
        Config::parse(&text).map_err(|e| match e {
            ConfigError::Syntax(mut s) => {
                s.file = Some(path.display().to_string());
                ConfigError::Syntax(s)
            }
            other => other,
        })
    }

    /// Parses and validates config text (see [`Config::load`]).
    ///
    /// # Errors
    /// As [`Config::load`], without `Io`.
    #[expect(
        clippy::too_many_lines,
        reason = "one pass over the raw config collecting every problem; to be split into per-section validators (config/validate.rs)"
    )]
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        // serde-saphyr's own snippet would quote the file verbatim (secrets included): the error
        // is rendered here, with the key path and a redacted snippet.
        let mut at = String::new();
        let opts = serde_saphyr::options! { with_snippet: false };
        let raw: RawConfig =
            serde_saphyr::with_deserializer_from_str_with_options(text, opts, |de| {
                serde_path_to_error::deserialize(de).map_err(|e| {
                    at = e.path().to_string();
                    e.into_inner()
                })
            })
            .map_err(|e| ConfigError::Syntax(Box::new(SyntaxError::from_yaml(&e, &at, text))))?;
        let mut iss = Issues(Vec::new());
        let defaults = raw.defaults.unwrap_or_default();
        let def_timeouts =
            iss.timeouts("defaults.timeouts", Timeouts::default(), &defaults.timeouts);
        let def_schedule = iss
            .schedule("defaults", &defaults.interval, &defaults.cron)
            .unwrap_or(Schedule::Interval(Duration::from_secs(30)));

        let mut prompts: Vec<Arc<Prompt>> = Vec::new();
        for (i, p) in raw.prompts.iter().enumerate() {
            let path = format!("prompts[{i}]");
            if !valid_name(&p.name.value) {
                iss.push(format!("{path}.name"), &p.name, NAME_RULE);
            }
            if prompts.iter().any(|q| q.name == p.name.value) {
                iss.push(format!("{path}.name"), &p.name, "duplicate prompt name");
            }
            if p.messages.is_empty() {
                iss.push(
                    format!("{path}.messages"),
                    &p.name,
                    "a prompt needs at least one message",
                );
            }
            for (j, m) in p.messages.iter().enumerate() {
                if !["system", "user", "assistant", "developer"].contains(&m.role.as_str()) {
                    iss.push(
                        format!("{path}.messages[{j}].role"),
                        &p.name,
                        format!(
                            "unknown role {:?} (system, user, assistant, developer)",
                            m.role
                        ),
                    );
                }
            }
            if p.max_tokens == Some(0) {
                iss.push(format!("{path}.max_tokens"), &p.name, "must be at least 1");
            }
            let expect = p.expect.as_ref().map(|e| Expect {
                regex: e
                    .regex
                    .as_ref()
                    .and_then(|r| match regex::Regex::new(&r.value) {
                        Ok(re) => Some(re),
                        Err(err) => {
                            iss.push(
                                format!("{path}.expect.regex"),
                                r,
                                format!("not a regular expression ({err})"),
                            );
                            None
                        }
                    }),
                min_output_tokens: e.min_output_tokens,
            });
            prompts.push(Arc::new(Prompt {
                name: p.name.value.clone(),
                messages: p.messages.clone(),
                max_tokens: p.max_tokens,
                nonce: p.nonce,
                expect,
            }));
        }
        if raw.targets.is_empty() {
            iss.push_here("targets", "at least one target is required");
        }

        let mut jobs = Vec::new();
        let mut target_names = HashSet::new();
        for (i, t) in raw.targets.iter().enumerate() {
            let path = format!("targets[{i}]");
            if !valid_name(&t.name.value) {
                iss.push(format!("{path}.name"), &t.name, NAME_RULE);
            }
            if !target_names.insert(t.name.value.clone()) {
                iss.push(format!("{path}.name"), &t.name, "duplicate target name");
            }
            let base_url = match expand_env(&t.base_url.value) {
                Ok(u) if u.trim().is_empty() => {
                    iss.push(
                        format!("{path}.base_url"),
                        &t.base_url,
                        "must not be empty (e.g. http://127.0.0.1:8080/v1)",
                    );
                    String::new()
                }
                Ok(u) => u.trim_end_matches('/').to_owned(),
                Err(e) => {
                    iss.push(format!("{path}.base_url"), &t.base_url, e);
                    String::new()
                }
            };
            match reqwest::Url::parse(&base_url) {
                Ok(u) if u.query().is_some() || u.fragment().is_some() => iss.push(
                    format!("{path}.base_url"),
                    &t.base_url,
                    "must not carry a query or fragment: put query parameters under `query:`",
                ),
                Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                Ok(_) => iss.push(
                    format!("{path}.base_url"),
                    &t.base_url,
                    "must be http:// or https://",
                ),
                Err(e) if !base_url.is_empty() => iss.push(
                    format!("{path}.base_url"),
                    &t.base_url,
                    format!("not a URL ({e})"),
                ),
                Err(_) => {}
            }
            let api_key = match (&t.api_key, &t.api_key_file) {
                (Some(k), Some(_)) => {
                    iss.push(
                        format!("{path}.api_key"),
                        k,
                        "set either api_key or api_key_file, not both",
                    );
                    None
                }
                (Some(k), None) => match expand_env(&k.value) {
                    Ok(v) => Some(KeySource::Inline(Secret::new(v))),
                    Err(e) => {
                        iss.push(format!("{path}.api_key"), k, e);
                        None
                    }
                },
                (None, Some(f)) => {
                    let p = PathBuf::from(&f.value);
                    match std::fs::metadata(&p) {
                        Err(e) => iss.push(
                            format!("{path}.api_key_file"),
                            f,
                            format!("cannot read {}: {e}", p.display()),
                        ),
                        Ok(m) if m.is_dir() => iss.push(
                            format!("{path}.api_key_file"),
                            f,
                            format!("{} is a directory, not a key file", p.display()),
                        ),
                        Ok(_) => {}
                    }
                    Some(KeySource::File(p))
                }
                (None, None) => None,
            };
            if t.models.value.is_empty() {
                iss.push(
                    format!("{path}.models"),
                    &t.models,
                    "at least one model is required",
                );
            }
            let mut seen_models = HashSet::new();
            for m in &t.models.value {
                if m.trim().is_empty() || !seen_models.insert(m.as_str()) {
                    iss.push(
                        format!("{path}.models"),
                        &t.models,
                        format!("empty or duplicate model {m:?}"),
                    );
                }
            }
            let schedule = iss
                .schedule(&path, &t.interval, &t.cron)
                .unwrap_or_else(|| def_schedule.clone());
            let timeouts = iss.timeouts(&format!("{path}.timeouts"), def_timeouts, &t.timeouts);
            let mut headers = Vec::new();
            let auth = t.auth.unwrap_or(match t.api {
                Api::AnthropicMessages => AuthStyle::XApiKey,
                _ => AuthStyle::Bearer,
            });
            let has_key = t.api_key.is_some() || t.api_key_file.is_some();
            if let Some(why) = userinfo_conflict(&base_url, auth, has_key) {
                iss.push(format!("{path}.base_url"), &t.base_url, why);
            }
            for (k, v) in &t.headers {
                let ok = reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_ok()
                    && reqwest::header::HeaderValue::from_str(v).is_ok();
                if let Some(why) = header_set_by_tokenprobe(k, auth, has_key) {
                    iss.push(format!("{path}.headers.{k}"), &t.name, why);
                } else if ok {
                    headers.push((k.clone(), v.clone()));
                } else {
                    iss.push(
                        format!("{path}.headers.{k}"),
                        &t.name,
                        "not a valid HTTP header",
                    );
                }
            }
            let proxy = match &t.proxy {
                None => ProxySetting::Environment,
                Some(p) if p.value == "none" || p.value.is_empty() => ProxySetting::Disabled,
                Some(p) => match reqwest::Url::parse(&p.value) {
                    Ok(u) if matches!(u.scheme(), "http" | "https") => {
                        ProxySetting::Url(p.value.clone())
                    }
                    _ => {
                        iss.push(
                            format!("{path}.proxy"),
                            p,
                            "must be an http://, https:// proxy URL or \"none\"",
                        );
                        ProxySetting::Environment
                    }
                },
            };
            let ca_file = t.ca_file.as_ref().map(|f| {
                // The same loading `serve` does (the transport owns how a CA file is read).
                let tls = TlsOptions {
                    ca_file: Some(PathBuf::from(&f.value)),
                    insecure_skip_verify: false,
                };
                let opts = crate::transport::ClientOptions {
                    proxy: ProxySetting::Disabled,
                    tls,
                    connection: ConnectionMode::New,
                };
                if let Err(e) = crate::transport::Transport::new(&opts, Duration::from_secs(1)) {
                    iss.push(format!("{path}.ca_file"), f, e.to_string());
                }
                PathBuf::from(&f.value)
            });
            for k in t.extra_body.keys() {
                if RESERVED_BODY_KEYS.contains(&k.as_str()) || sets_body_key(t.api, k) {
                    iss.push(
                        format!("{path}.extra_body.{k}"),
                        &t.name,
                        format!(
                            "{k:?} is set by tokenprobe itself ({} sends it); extra_body may only add fields",
                            t.api
                        ),
                    );
                }
            }
            let target = Arc::new(Target {
                name: t.name.value.clone(),
                base_url,
                api: t.api,
                api_key,
                include_usage: t.include_usage,
                headers,
                extra_body: t.extra_body.clone(),
                query: t
                    .query
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                auth,
                proxy,
                tls: TlsOptions {
                    ca_file,
                    insecure_skip_verify: t.insecure_skip_verify,
                },
                connection: t.connection,
            });
            let chosen: Vec<Arc<Prompt>> = match &t.prompts {
                None => prompts.clone(),
                Some(names) => names
                    .iter()
                    .enumerate()
                    .filter_map(|(j, n)| {
                        let found = prompts.iter().find(|p| p.name == n.value).cloned();
                        if found.is_none() {
                            iss.push(
                                format!("{path}.prompts[{j}]"),
                                n,
                                format!("no prompt named {:?}", n.value),
                            );
                        }
                        found
                    })
                    .collect(),
            };
            if chosen.is_empty() && t.prompts.is_none() {
                iss.push(
                    format!("{path}.name"),
                    &t.name,
                    "no prompts are defined for this target",
                );
            }
            for model in &t.models.value {
                for prompt in &chosen {
                    jobs.push(Job {
                        target: target.clone(),
                        model: model.clone(),
                        prompt: prompt.clone(),
                        schedule: schedule.clone(),
                        timeouts,
                    });
                }
            }
        }

        let d = Buckets::default();
        let rb = raw.buckets.unwrap_or_default();
        let buckets = Buckets {
            time_to_first_token: iss.buckets(
                "buckets.time_to_first_token",
                &rb.time_to_first_token,
                d.time_to_first_token,
            ),
            time_per_output_token: iss.buckets(
                "buckets.time_per_output_token",
                &rb.time_per_output_token,
                d.time_per_output_token,
            ),
            decode_tokens_per_second: iss.buckets(
                "buckets.decode_tokens_per_second",
                &rb.decode_tokens_per_second,
                d.decode_tokens_per_second,
            ),
            request_duration: iss.buckets(
                "buckets.request_duration",
                &rb.request_duration,
                d.request_duration,
            ),
            time_to_headers: iss.buckets(
                "buckets.time_to_headers",
                &rb.time_to_headers,
                d.time_to_headers,
            ),
        };

        if jobs.is_empty() && !raw.targets.is_empty() && iss.0.is_empty() {
            iss.push_here(
                "targets",
                "the config defines no job (every target has no model or no prompt)",
            );
        }
        if !iss.0.is_empty() {
            // In file order; problems without a place last.
            iss.0.sort_by_key(|i| (i.line == 0, i.line, i.column));
            return Err(ConfigError::Invalid(iss.0));
        }
        Ok(Config { jobs, buckets })
    }
}

/// Why a custom header named `name` may not be sent, if it may not: tokenprobe sends it itself,
/// so the header would replace or double it and change what is measured (docs/measurement.md,
/// "What requests look like"): the body's framing, `Accept-Encoding: identity`, `Accept`,
/// `Content-Type`, and, when a key is configured, the header the key goes in. The one rule for
/// `headers:` in a config and `probe --header`.
pub fn header_set_by_tokenprobe(name: &str, auth: AuthStyle, has_key: bool) -> Option<String> {
    let n = name.trim().to_ascii_lowercase();
    let (key_header, style) = match auth {
        AuthStyle::Bearer => ("authorization", "bearer"),
        AuthStyle::XApiKey => ("x-api-key", "x-api-key"),
        AuthStyle::ApiKey => ("api-key", "api-key"),
    };
    if [
        "content-length",
        "transfer-encoding",
        "connection",
        "te",
        "trailer",
        "upgrade",
        "keep-alive",
    ]
    .contains(&n.as_str())
    {
        Some(format!(
            "{name} is set by tokenprobe itself (the HTTP client frames the request); headers may only add fields"
        ))
    } else if ["accept-encoding", "accept", "content-type"].contains(&n.as_str()) {
        Some(format!(
            "{name} is set by tokenprobe itself (an event stream, uncompressed: docs/measurement.md); headers may only add fields"
        ))
    } else if has_key && n == key_header {
        Some(format!(
            "{name} would be sent twice: the API key already goes in it (auth: {style}); drop the header or the key"
        ))
    } else {
        None
    }
}

/// Why `base_url` may not carry `user:password` with this key setting, if it may not: userinfo is
/// sent as `Authorization: Basic`, so a key in `Authorization: Bearer` would make the request carry
/// two `Authorization` headers. The one rule for a config's `base_url` and `probe --base-url`.
pub fn userinfo_conflict(base_url: &str, auth: AuthStyle, has_key: bool) -> Option<&'static str> {
    let u = reqwest::Url::parse(base_url).ok()?;
    let userinfo = !u.username().is_empty() || u.password().is_some();
    (userinfo && has_key && auth == AuthStyle::Bearer).then_some(
        "carries user:password, sent as Authorization: Basic, and the API key goes in Authorization: Bearer: a request carries one Authorization header; drop one, or set auth: x-api-key or api-key",
    )
}

/// Body fields `extra_body` may never set, whatever the protocol sends: they decide what is
/// measured (a stream) and what the labels say (the model).
const RESERVED_BODY_KEYS: &[&str] = &["stream", "model", "stream_options"];

/// True when the request body of `api` already sets the top-level field `key` (asked of the
/// protocol's own body builder, with every optional field on).
fn sets_body_key(api: Api, key: &str) -> bool {
    let messages = [
        Message {
            role: "system".into(),
            content: "s".into(),
        },
        Message {
            role: "user".into(),
            content: "u".into(),
        },
    ];
    let body = api.request_body(&crate::protocol::BodyParams {
        model: "m",
        messages: &messages,
        max_tokens: Some(1),
        include_usage: true,
        extra_body: None,
    });
    body.as_object().is_some_and(|o| o.contains_key(key))
}

/// Shortest probe interval accepted.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// Longest probe interval accepted (use cron for rarer schedules).
pub const MAX_INTERVAL: Duration = Duration::from_secs(7 * 86_400);
/// Longest deadline accepted.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

/// Parses a deadline given on the command line: a humantime duration between 1 ms and a day.
///
/// # Errors
/// A message saying what is wrong.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_millis(1) || d > MAX_TIMEOUT {
        return Err("must be between 1ms and 1day".into());
    }
    Ok(d)
}

const NAME_RULE: &str = "names are 1-64 characters of letters, digits, '_', '-', '.'";

fn valid_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
defaults:
  interval: 30s
  timeouts: {connect: 5s, first_token: 30s, idle: 30s, total: 120s}
prompts:
  - name: hello
    messages: [{role: user, content: "Say hello"}]
    max_tokens: 64
  - name: long
    messages: [{role: user, content: "Write a poem"}]
targets:
  - name: local
    base_url: http://127.0.0.1:8080/v1/
    api: openai-chat
    api_key: ${TOKENPROBE_TEST_KEY_SET}
    models: [smollm2, other]
    prompts: [hello]
    interval: 15s
  - name: claude
    base_url: https://api.example.com
    api: anthropic-messages
    models: [c]
    cron: "*/30 * * * * *"
    timeouts: {first_token: 10s}
"#;

    fn with_env<R>(f: impl FnOnce() -> R) -> R {
        // SAFETY: tests in this module only read this variable; set once, same value.
        unsafe { std::env::set_var("TOKENPROBE_TEST_KEY_SET", "sk-test") };
        f()
    }

    #[test]
    fn good_config_expands_to_jobs() {
        let c = with_env(|| Config::parse(GOOD)).unwrap();
        let names: Vec<String> = c.jobs.iter().map(Job::name).collect();
        assert_eq!(
            names,
            [
                "local/smollm2/hello",
                "local/other/hello",
                "claude/c/hello",
                "claude/c/long"
            ]
        );
        let j = &c.jobs[0];
        assert_eq!(j.target.base_url, "http://127.0.0.1:8080/v1");
        assert!(matches!(j.schedule, Schedule::Interval(d) if d == Duration::from_secs(15)));
        assert_eq!(
            futures_util::FutureExt::now_or_never(j.target.api_key.as_ref().unwrap().load())
                .unwrap()
                .unwrap()
                .expose(),
            "sk-test"
        );
        let claude = &c.jobs[2];
        assert!(matches!(claude.schedule, Schedule::Cron(_)));
        assert_eq!(claude.timeouts.first_token, Duration::from_secs(10));
        assert_eq!(claude.timeouts.total, Duration::from_secs(120));
        assert_eq!(c.buckets, Buckets::default());
    }

    #[test]
    fn unknown_key_is_a_syntax_error_with_location() {
        let e = Config::parse("targets:\n  - name: a\n    base_url: http://x\n    modelz: [m]\n")
            .unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, ConfigError::Syntax(_)));
        assert!(msg.contains("modelz"), "{msg}");
        assert!(msg.contains('4'), "line number expected: {msg}");
    }

    #[test]
    fn all_semantic_errors_at_once_with_paths_and_lines() {
        let text = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - name: a\n    base_url: ftp://x\n    models: [m]\n    interval: soon\n    prompts: [nope]\n    api_key: ${TOKENPROBE_SURELY_UNSET_VAR}\n";
        let Err(ConfigError::Invalid(issues)) = Config::parse(text) else {
            panic!("expected Invalid");
        };
        let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
        assert!(paths.contains(&"targets[0].base_url"), "{paths:?}");
        assert!(paths.contains(&"targets[0].interval"), "{paths:?}");
        assert!(paths.contains(&"targets[0].prompts[0]"), "{paths:?}");
        assert!(paths.contains(&"targets[0].api_key"), "{paths:?}");
        let interval = issues
            .iter()
            .find(|i| i.path == "targets[0].interval")
            .unwrap();
        assert_eq!(interval.line, 8);
        let shown = ConfigError::Invalid(issues).to_string();
        assert!(shown.contains("TOKENPROBE_SURELY_UNSET_VAR"));
    }

    #[test]
    fn secrets_never_print() {
        let k = KeySource::Inline(Secret::new("sk-very-secret"));
        assert!(!format!("{k:?}").contains("sk-very"));
        let c = with_env(|| Config::parse(GOOD)).unwrap();
        assert!(!format!("{c:?}").contains("sk-test"));
        let text = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - name: a\n    base_url: http://u:pw-debug-1@h/v1\n    models: [m]\n    headers: {X-Key: hdr-debug-1}\n    query: {code: q-debug-1, api-version: '1'}\n    proxy: http://pu:proxy-debug-1@p:3128\n";
        let shown = format!("{:?}", Config::parse(text).unwrap());
        for leak in ["pw-debug", "hdr-debug", "q-debug", "proxy-debug"] {
            assert!(!shown.contains(leak), "{leak}: {shown}");
        }
        assert!(shown.contains("\"api-version\", \"1\""), "{shown}");
    }

    #[test]
    fn a_change_of_a_hidden_value_still_changes_the_job() {
        let at = |h: &str, q: &str, u: &str| {
            let text = format!(
                "prompts:\n  - name: p\n    messages: [{{role: user, content: hi}}]\ntargets:\n  - name: a\n    base_url: http://{u}@h/v1\n    models: [m]\n    headers: {{X-Key: {h}}}\n    query: {{code: {q}}}\n"
            );
            Config::parse(&text).unwrap().jobs[0].clone()
        };
        let base = at("h1", "q1", "u:p1");
        assert_ne!(base, at("h2", "q1", "u:p1"), "header value");
        assert_ne!(base, at("h1", "q2", "u:p1"), "query value");
        assert_ne!(base, at("h1", "q1", "u:p2"), "userinfo");
        assert_eq!(base, at("h1", "q1", "u:p1"));
    }

    #[test]
    fn bounds_literal_dollars_and_jobless_configs() {
        let base = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - name: a\n    base_url: http://x\n    models: [m]\n";
        let bad = |extra: &str| match Config::parse(&format!("{base}{extra}")) {
            Err(ConfigError::Invalid(i)) => i
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join("; "),
            other => panic!("expected Invalid for {extra:?}, got {other:?}"),
        };
        assert!(bad("    interval: 1ns\n").contains("between"));
        assert!(bad("    timeouts: {total: 500000000000y}\n").contains("between"));
        assert!(bad("    cron: '0 0 0 30 2 *'\n").contains("never fires"));
        let c = Config::parse(&format!("{base}    api_key: 'sk-ab$cd$'\n")).unwrap();
        let key = futures_util::FutureExt::now_or_never(
            c.jobs[0].target.api_key.as_ref().unwrap().load(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(key.expose(), "sk-ab$cd$");
        let e = Config::parse(
            "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - {name: a, base_url: 'http://x/v1?k=1', models: [m]}\n",
        );
        assert!(matches!(e, Err(ConfigError::Invalid(_))));
        let e = Config::parse(
            "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - {name: a, base_url: 'http://x', models: [m], prompts: []}\n",
        );
        assert!(format!("{e:?}").contains("no job"));
    }

    #[test]
    fn bad_buckets_and_both_schedules() {
        let text = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - name: a\n    base_url: http://x\n    models: [m]\n    interval: 1s\n    cron: '* * * * *'\nbuckets:\n  time_to_first_token: [1, 0.5]\n";
        let Err(ConfigError::Invalid(issues)) = Config::parse(text) else {
            panic!("expected Invalid");
        };
        assert_eq!(issues.len(), 2, "{issues:?}");
    }

    const BASE: &str = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - name: a\n    base_url: http://x\n    models: [m]\n";

    fn problems(extra: &str) -> String {
        match Config::parse(&format!("{BASE}{extra}")) {
            Err(ConfigError::Invalid(i)) => i
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join("; "),
            other => panic!("expected Invalid for {extra:?}, got {other:?}"),
        }
    }

    #[test]
    fn syntax_error_snippets_hide_every_secret() {
        let text = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\n\
                    targets:\n  - name: a\n    base_url: http://user:pw-userinfo-1@127.0.0.1:1/v1\n\
                    \x20   api_key: sk-live-abcdefghijklmnop # rotated: sk-old-zyxwvut\n\
                    \x20   headers:\n      name: hdr-secret-under-name\n      X-Custom: hdr-secret-value-1234\n\
                    \x20   query: {code: query-secret-value-99}\n\
                    \x20   extra_body: {temperature: 0}\n    models: [m]\n\
                    \x20 - {name: b, base_url: 'http://127.0.0.1:2', api_key: sk-flow-secret-5555, models: [m], \"headers\":{\"k\":\"sk-json-style-7777\"}}\n\
                    \x20 - name: c\n    base_url: http://x\n    models: [m\n    interval: 1s\n";
        let e = Config::parse(text).unwrap_err();
        let ConfigError::Syntax(se) = &e else {
            panic!("expected a syntax error, got {e:?}")
        };
        assert_eq!((se.line, se.column), (18, 13), "{se:?}");
        // Every line up to the error, as check-config could show it.
        let all = crate::redact::config_lines(text, 18).join("\n");
        for leak in [
            "pw-userinfo",
            "sk-live",
            "sk-old",
            "hdr-secret",
            "query-secret",
            "sk-flow",
            "sk-json",
        ] {
            assert!(!all.contains(leak), "{leak} shown:\n{all}");
            assert!(!e.to_string().contains(leak), "{leak} in {e}");
        }
        assert!(
            all.contains("    base_url: http://<redacted>@127.0.0.1:1/v1"),
            "{all}"
        );
        assert!(all.contains("    api_key: <redacted>"), "{all}");
        assert!(all.contains("  - {name: b, base_url: 'http://127.0.0.1:2', api_key: <redacted>, models: [m], \"headers\":{\"k\": <redacted>}}"), "{all}");
        assert!(e.to_string().contains("18 |     interval: 1s"), "{e}");
        assert!(!e.summary().contains("interval: 1s"), "{}", e.summary());
        assert!(e.summary().contains("line 18 column 13"), "{}", e.summary());
    }

    #[test]
    fn a_wrong_type_names_its_key_path() {
        let e = Config::parse("prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\n    max_tokens: lots\ntargets: []\n").unwrap_err();
        let ConfigError::Syntax(se) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(se.path, "prompts[0].max_tokens");
        assert_eq!((se.line, se.column), (4, 17));
        assert!(!e.to_string().contains("<input>"), "{e}");
    }

    #[test]
    fn a_missing_file_says_why_once() {
        let e = Config::load(Path::new("/nonexistent/tokenprobe.yml")).unwrap_err();
        let shown = format!("{:#}", anyhow::Error::new(e));
        assert_eq!(shown.matches("os error 2").count(), 1, "{shown}");
    }

    #[test]
    fn problems_are_sorted_by_line() {
        let text = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - name: a\n    base_url: http://x\n    models: [m]\n    cron: 'nope'\n    interval: soon\n    api_key: ${TOKENPROBE_SURELY_UNSET_VAR}\n    prompts: [nope]\n";
        let Err(ConfigError::Invalid(issues)) = Config::parse(text) else {
            panic!("expected Invalid");
        };
        let lines: Vec<u64> = issues.iter().map(|i| i.line).collect();
        let mut sorted = lines.clone();
        sorted.sort_unstable();
        assert_eq!(lines, sorted, "{issues:?}");
    }

    #[test]
    fn what_serve_rejects_check_config_rejects() {
        let empty = Config::parse(
            "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - {name: a, base_url: '', models: [m]}\n",
        );
        assert!(
            format!("{empty:?}").contains("must not be empty"),
            "{empty:?}"
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        assert!(problems(&format!("    api_key_file: {d}\n")).contains("is a directory"));
        let not_pem = dir.path().join("ca.txt");
        std::fs::write(&not_pem, "not a certificate\n").unwrap();
        let p = problems(&format!("    ca_file: {}\n", not_pem.display()));
        assert!(
            p.contains("targets[0].ca_file") && p.contains("no PEM certificate"),
            "{p}"
        );
        for key in [
            "stream",
            "model",
            "messages",
            "max_tokens",
            "stream_options",
        ] {
            let p = problems(&format!("    extra_body: {{{key}: 1}}\n"));
            assert!(
                p.contains(&format!("targets[0].extra_body.{key}")),
                "{key}: {p}"
            );
        }
        let anth = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - {name: a, base_url: 'http://x', api: anthropic-messages, models: [m], extra_body: {system: x}}\n";
        assert!(format!("{:?}", Config::parse(anth)).contains("extra_body.system"));
        // Fields the body does not set are fine.
        assert!(
            Config::parse(&format!(
                "{BASE}    extra_body: {{temperature: 0, seed: 1}}\n"
            ))
            .is_ok()
        );
    }

    /// Issue 9 item 4: a FIFO without a writer (or a hung mount) fails the key load within
    /// [`KEY_FILE_TIMEOUT`] instead of blocking; a second load while the first read still hangs
    /// fails at once without another thread; a file over the size cap is refused.
    #[cfg(unix)]
    #[tokio::test(flavor = "current_thread")]
    async fn key_file_reads_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("key.fifo");
        let ok = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mkfifo");
        let src = KeySource::File(fifo.clone());
        let t = std::time::Instant::now();
        // On a current-thread runtime a blocking read would hang this very test forever.
        let e = src.load().await.unwrap_err();
        let took = t.elapsed();
        assert!(e.contains("no answer within 2s"), "{e}");
        assert!(
            took >= KEY_FILE_TIMEOUT && took < KEY_FILE_TIMEOUT * 3,
            "{took:?}"
        );
        let t = std::time::Instant::now();
        let e = src.load().await.unwrap_err();
        assert!(e.contains("no answer"), "{e}");
        assert!(t.elapsed() < KEY_FILE_TIMEOUT, "{:?}", t.elapsed());
        // Unblock the hung reader: opening for writing lets its open() return.
        let _ = {
            use std::os::unix::fs::OpenOptionsExt as _;
            // O_NONBLOCK: fails instead of waiting when no reader is left.
            std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(0o4000)
                .open(&fifo)
        };

        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'k'; KEY_FILE_MAX_BYTES as usize + 1]).unwrap();
        let e = KeySource::File(big).load().await.unwrap_err();
        assert!(e.contains("larger than 64 KiB"), "{e}");
        let good = dir.path().join("good");
        std::fs::write(&good, "  sk-file\n").unwrap();
        assert_eq!(
            KeySource::File(good).load().await.unwrap().expose(),
            "sk-file"
        );
    }
}
