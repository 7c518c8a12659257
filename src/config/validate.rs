//! The rules a config's values must follow, one validator per section (`defaults`, `prompt`,
//! `target`, `buckets`), each writing into the one shared list of problems so that every problem
//! is reported at once (blackbox_exporter's per-type validation). Pure: the files a target names
//! (`api_key_file`, `ca_file`) are only recorded here, and checked in `mod.rs`.

use super::raw::{
    RawBuckets, RawConfig, RawDefaults, RawPrice, RawServerMetrics, RawServerMetricsEntry,
    RawTarget, RawTimeouts, S,
};
use super::types::{
    AuthStyle, Buckets, Config, ConfigError, GpuHourPrice, Histograms, Issue, Job, KeySource,
    Price, Prompt, ProxySetting, Schedule, Secret, Target, Timeouts, TlsOptions,
};
use crate::protocol::{Api, Message};
use crate::workload::{DatasetFormat, TraceFormat, Workload};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

mod answered;
mod prompts;
mod session;

/// The most bounds a histogram layout (`buckets:`) may have.
pub const MAX_BUCKETS: usize = 100;
/// Shortest probe interval accepted.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// Longest probe interval accepted (use cron for rarer schedules).
pub const MAX_INTERVAL: Duration = Duration::from_secs(7 * 86_400);
/// Longest deadline accepted.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);
/// Most turns of a `conversation` prompt (each resends the whole history).
pub const MAX_TURNS: u32 = 100;

/// A file the config names, checked in `mod.rs` (reading files is no validator's business).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FileRef {
    /// Key path, e.g. `targets[0].ca_file`.
    pub(super) key: String,
    /// Where its value is written.
    pub(super) line: u64,
    /// 1-based column.
    pub(super) column: u64,
    /// The file.
    pub(super) file: PathBuf,
    /// What it must be.
    pub(super) kind: FileKind,
}

/// What a named file must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum FileKind {
    /// An `api_key_file`: readable, not a directory.
    ApiKey,
    /// A `ca_file`: PEM certificates, read at load time into `pem` (the target's TLS options
    /// hold it, so no client reads the file).
    Ca {
        /// Where its content goes.
        pem: Arc<std::sync::OnceLock<Vec<u8>>>,
    },
    /// A `tokenizer`: a Hugging Face `tokenizer.json`, a readable file within the size cap
    /// (calibration parses it).
    Tokenizer,
    /// A prompt's `trace.file`: read, parsed and windowed at load time into `recording`.
    Trace {
        /// Its format.
        format: TraceFormat,
        /// BurstGPT: only this model's rows.
        model: Option<String>,
        /// The window's start and length, in the trace's time.
        window: (Duration, Option<Duration>),
        /// Where its requests go.
        recording: Arc<std::sync::OnceLock<crate::workload::trace::Recording>>,
    },
    /// A session prompt's `trace.file`: read and parsed at load time into `recording`.
    SessionTrace {
        /// Where its sessions go.
        recording: Arc<std::sync::OnceLock<crate::workload::session::replay::SessionRecording>>,
    },
    /// A prompt's `dataset.file`: read and parsed at load time into `entries`.
    Dataset {
        /// Its format.
        format: DatasetFormat,
        /// Where its conversations go.
        entries: Arc<std::sync::OnceLock<Vec<Vec<Message>>>>,
    },
}

/// A config checked except for the files it names: what `parse` and `load` finish.
pub(super) struct Checked {
    jobs: Vec<Job>,
    buckets: Buckets,
    location: Option<String>,
    has_targets: bool,
    /// Every problem found so far (the files' problems are added apart).
    pub(super) issues: Vec<Issue>,
    /// The files to check.
    pub(super) files: Vec<FileRef>,
}

impl Checked {
    /// The config, or every problem, in file order (problems without a place last).
    pub(super) fn finish(mut self) -> Result<Config, ConfigError> {
        if self.jobs.is_empty() && self.has_targets && self.issues.is_empty() {
            self.issues.push(Issue {
                path: "targets".into(),
                line: 0,
                column: 0,
                message: "the config defines no job (every target has no model or no prompt)"
                    .into(),
            });
        }
        if !self.issues.is_empty() {
            self.issues.sort_by_key(|i| (i.line == 0, i.line, i.column));
            return Err(ConfigError::Invalid(self.issues));
        }
        Ok(Config {
            jobs: self.jobs,
            buckets: self.buckets,
            location: self.location,
        })
    }
}

/// Validates the raw config, section by section.
pub(super) fn config(raw: &RawConfig) -> Checked {
    let mut v = Validator::default();
    let (def_schedule, def_timeouts) = v.defaults(raw.defaults.as_ref());
    let mut prompts: Vec<Arc<Prompt>> = Vec::new();
    for (i, p) in raw.prompts.iter().enumerate() {
        let prompt = v.prompt(&format!("prompts[{i}]"), p, &prompts);
        prompts.push(Arc::new(prompt));
    }
    if raw.targets.is_empty() {
        v.push_here("targets", "at least one target is required");
    }
    let mut jobs = Vec::new();
    let mut target_names = HashSet::new();
    for (i, t) in raw.targets.iter().enumerate() {
        let path = format!("targets[{i}]");
        let unique = target_names.insert(t.name.value.clone());
        let target = Arc::new(v.target(&path, t, unique));
        let schedule = v
            .schedule(&path, &t.interval, &t.cron)
            .unwrap_or_else(|| def_schedule.clone());
        let timeouts = v.timeouts(&format!("{path}.timeouts"), def_timeouts, &t.timeouts);
        let histograms = t
            .histograms
            .as_ref()
            .or(raw.defaults.as_ref().and_then(|d| d.histograms.as_ref()))
            .map_or_else(Histograms::default, |h| Histograms::of(h.iter().copied()));
        let chosen = v.target_prompts(&path, t, &prompts);
        for model in &t.models.value {
            for prompt in &chosen {
                jobs.push(Job {
                    target: target.clone(),
                    model: model.clone(),
                    prompt: prompt.clone(),
                    schedule: schedule.clone(),
                    timeouts,
                    histograms,
                });
            }
        }
    }
    v.drift_jobs(&jobs);
    let buckets = v.buckets(raw.buckets.as_ref());
    let location = raw
        .location
        .as_ref()
        .and_then(|l| match check_location(&l.value) {
            Ok(()) => Some(l.value.clone()),
            Err(m) => {
                v.push("location", l, m);
                None
            }
        });
    Checked {
        jobs,
        buckets,
        location,
        has_targets: !raw.targets.is_empty(),
        issues: v.issues,
        files: v.files,
    }
}

/// The longest `location` (a label value on every series, so kept short).
pub const MAX_LOCATION_CHARS: usize = 63;

/// The rule for a `location` (the config key and `serve --location`): 1 to 63 characters of
/// letters, digits, `_`, `-`, `.` and `:`, starting with a letter or digit, such as `eu-west-1`
/// or `gcp:us-central1`. One constant value per exporter, so it adds no series.
///
/// # Errors
/// What is wrong with it, in words that quote nothing but the rule.
pub fn check_location(s: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':');
    if s.is_empty() || s.chars().count() > MAX_LOCATION_CHARS {
        return Err(format!(
            "a location is 1 to {MAX_LOCATION_CHARS} characters (e.g. eu-west-1)"
        ));
    }
    if !s.starts_with(|c: char| c.is_ascii_alphanumeric()) || !s.chars().all(ok_char) {
        return Err(
            "a location is letters, digits, `_`, `-`, `.` and `:`, starting with a letter or digit (e.g. eu-west-1)"
                .into(),
        );
    }
    Ok(())
}

/// The shared list of problems (and of files to check) the validators write into.
#[derive(Default)]
struct Validator {
    issues: Vec<Issue>,
    files: Vec<FileRef>,
}

impl Validator {
    fn push<T>(&mut self, path: impl Into<String>, at: &S<T>, message: impl Into<String>) {
        self.issues.push(Issue {
            path: path.into(),
            line: at.referenced.line(),
            column: at.referenced.column(),
            message: message.into(),
        });
    }

    fn push_here(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.issues.push(Issue {
            path: path.into(),
            line: 0,
            column: 0,
            message: message.into(),
        });
    }

    fn file(&mut self, key: String, at: &S<String>, kind: FileKind) -> PathBuf {
        let file = PathBuf::from(&at.value);
        self.files.push(FileRef {
            key,
            line: at.referenced.line(),
            column: at.referenced.column(),
            file: file.clone(),
            kind,
        });
        file
    }

    // -- defaults ---------------------------------------------------------------------------

    /// `defaults:`: the schedule and deadlines a target without its own gets.
    fn defaults(&mut self, raw: Option<&RawDefaults>) -> (Schedule, Timeouts) {
        let empty = RawDefaults::default();
        let d = raw.unwrap_or(&empty);
        let timeouts = self.timeouts("defaults.timeouts", Timeouts::default(), &d.timeouts);
        let schedule = self
            .schedule("defaults", &d.interval, &d.cron)
            .unwrap_or(Schedule::Interval(Duration::from_secs(30)));
        (schedule, timeouts)
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
            (None, Some(c)) => self.cron(&format!("{path}.cron"), c),
            (None, None) => None,
        }
    }

    fn cron(&mut self, path: &str, c: &S<String>) -> Option<Schedule> {
        let parser = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .build();
        match parser.parse(&c.value) {
            Ok(cron)
                if cron
                    .find_next_occurrence(&chrono::Utc::now(), false)
                    .is_err() =>
            {
                self.push(path, c, "this cron expression never fires");
                None
            }
            Ok(cron) => Some(Schedule::Cron(Box::new(cron))),
            Err(e) => {
                self.push(path, c, format!("not a cron expression ({e})"));
                None
            }
        }
    }

    // -- targets ----------------------------------------------------------------------------

    /// One target (its schedule, deadlines and prompts are the job's, checked apart);
    /// `unique`: no earlier target has its name.
    fn target(&mut self, path: &str, t: &RawTarget, unique: bool) -> Target {
        if !valid_name(&t.name.value) {
            self.push(format!("{path}.name"), &t.name, NAME_RULE);
        }
        if !unique {
            self.push(format!("{path}.name"), &t.name, "duplicate target name");
        }
        let base_url = self.base_url(path, &t.base_url);
        let api_key = self.api_key(path, t);
        self.models(path, &t.models);
        let auth = t.auth.unwrap_or(match t.api {
            Api::AnthropicMessages => AuthStyle::XApiKey,
            _ => AuthStyle::Bearer,
        });
        let has_key = t.api_key.is_some() || t.api_key_file.is_some();
        if let Some(why) = userinfo_conflict(&base_url, auth, has_key) {
            self.push(format!("{path}.base_url"), &t.base_url, why);
        }
        let headers = self.headers(path, t, auth, has_key);
        let proxy = self.proxy(path, t.proxy.as_ref());
        let ca_pem = Arc::new(std::sync::OnceLock::new());
        let ca_file = t.ca_file.as_ref().map(|f| {
            let pem = ca_pem.clone();
            self.file(format!("{path}.ca_file"), f, FileKind::Ca { pem })
        });
        self.extra_body(path, t);
        let (price, model_prices) = self.prices(path, t);
        let server_metrics = self.server_metrics(path, t, (auth, api_key.as_ref(), &base_url));
        let model_aliases = self.model_aliases(path, t);
        let usage_audit = self.usage_audit(path, t.usage_audit.as_ref(), t.tokenizer.is_some());
        Target {
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
                ca_pem,
                insecure_skip_verify: t.insecure_skip_verify,
            },
            connection: t.connection,
            max_in_flight: t.max_in_flight.as_ref().and_then(|m| {
                if (1..=10_000).contains(&m.value) {
                    Some(m.value)
                } else {
                    self.push(
                        format!("{path}.max_in_flight"),
                        m,
                        "must be between 1 and 10000",
                    );
                    None
                }
            }),
            cold_after: self.duration_in(
                &format!("{path}.cold_after"),
                &t.cold_after,
                Duration::from_secs(1),
                MAX_INTERVAL,
            ),
            price,
            model_prices,
            gpus: t.gpus.as_ref().and_then(|g| {
                if (1..=100_000).contains(&g.value) {
                    Some(g.value)
                } else {
                    self.push(
                        format!("{path}.gpus"),
                        g,
                        "must be a whole number of GPUs between 1 and 100000",
                    );
                    None
                }
            }),
            gpu_hour_price: t.gpu_hour_price.as_ref().and_then(|p| {
                if p.value.is_finite() && p.value >= 0.0 {
                    Some(GpuHourPrice(p.value))
                } else {
                    self.push(
                        format!("{path}.gpu_hour_price"),
                        p,
                        "must be a non-negative number (what one GPU costs per hour)",
                    );
                    None
                }
            }),
            stream: t.stream,
            exact_output: t.exact_output,
            tokenizer: t
                .tokenizer
                .as_ref()
                .map(|f| self.file(format!("{path}.tokenizer"), f, FileKind::Tokenizer)),
            server_metrics,
            model_aliases,
            model_mismatch: t.model_mismatch,
            usage_audit,
        }
    }

    /// `server_metrics:`: each endpoint's URL, interval, timeout (at most the interval), auth
    /// (`target`: the target's key and header, the default; `none`) and custom families.
    fn server_metrics(
        &mut self,
        path: &str,
        t: &RawTarget,
        (auth, key, base): (AuthStyle, Option<&KeySource>, &str),
    ) -> Vec<crate::servermetrics::Endpoint> {
        use crate::servermetrics::{DEFAULT_INTERVAL, DEFAULT_TIMEOUT, Endpoint};
        let mut out = Vec::new();
        for (i, entry) in t.server_metrics.iter().enumerate() {
            let p = format!("{path}.server_metrics[{i}]");
            let plain;
            let m = match &entry.value {
                RawServerMetricsEntry::Endpoint(m) => m,
                RawServerMetricsEntry::Url(u) => {
                    plain = RawServerMetrics {
                        url: S::new(u.clone(), entry.referenced, entry.defined),
                        interval: None,
                        timeout: None,
                        auth: None,
                        families: Vec::new(),
                    };
                    &plain
                }
            };
            let url = match expand_env(&m.url.value) {
                Ok(u) => u.trim().to_owned(),
                Err(e) => {
                    self.push(format!("{p}.url"), &m.url, e);
                    String::new()
                }
            };
            match url::Url::parse(&url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                Ok(_) => self.push(format!("{p}.url"), &m.url, "must be http:// or https://"),
                Err(e) => self.push(format!("{p}.url"), &m.url, format!("not a URL ({e})")),
            }
            let interval = self
                .duration_in(
                    &format!("{p}.interval"),
                    &m.interval,
                    Duration::from_millis(50),
                    Duration::from_secs(3600),
                )
                .unwrap_or(DEFAULT_INTERVAL);
            let timeout = match self.duration(&format!("{p}.timeout"), &m.timeout) {
                Some(d) if d > interval => {
                    if let Some(at) = &m.timeout {
                        self.push(
                            format!("{p}.timeout"),
                            at,
                            "must not exceed the interval (one scrape at a time)",
                        );
                    }
                    interval
                }
                Some(d) => d,
                None => DEFAULT_TIMEOUT.min(interval),
            };
            let auth = match m.auth.as_ref().map(|a| a.value.as_str()) {
                // The target's key goes where the target is, or where the config says.
                None if !crate::servermetrics::same_origin(&url, base) => None,
                None | Some("target") => key.map(|k| (auth, k.clone())),
                Some("none") => None,
                Some(other) => {
                    if let Some(at) = &m.auth {
                        self.push(
                            format!("{p}.auth"),
                            at,
                            format!("{other:?}: target (the target's key and header) or none"),
                        );
                    }
                    None
                }
            };
            let families = m
                .families
                .iter()
                .enumerate()
                .map(|(j, f)| self.family(&format!("{p}.families[{j}]"), f))
                .collect();
            out.push(Endpoint {
                url,
                interval,
                interval_given: m.interval.is_some(),
                timeout,
                auth,
                families,
            });
        }
        out
    }

    fn family(
        &mut self,
        path: &str,
        f: &super::raw::RawFamily,
    ) -> crate::servermetrics::signals::Custom {
        let metric_name = |s: &str| {
            s.bytes()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_' || c == b':')
                && s.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
        };
        let n = &f.name.value;
        if n.is_empty()
            || n.len() > 64
            || !n
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
        {
            self.push(
                format!("{path}.name"),
                &f.name,
                "a signal name is 1-64 characters of a-z, 0-9 and _",
            );
        }
        if !metric_name(&f.metric.value) {
            self.push(
                format!("{path}.metric"),
                &f.metric,
                "not a Prometheus metric name",
            );
        }
        crate::servermetrics::signals::Custom {
            name: n.clone(),
            metric: f.metric.value.clone(),
            kind: f.kind,
            labels: f
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            across: f
                .across
                .unwrap_or(crate::servermetrics::signals::Across::Sum),
        }
    }

    /// `price:` and `model_prices:` (whose models must be the target's).
    fn prices(&mut self, path: &str, t: &RawTarget) -> (Option<Price>, Vec<(String, Price)>) {
        let price = t
            .price
            .as_ref()
            .and_then(|p| self.price(&format!("{path}.price"), p));
        let mut model_prices = Vec::new();
        for (m, p) in &t.model_prices {
            let key = format!("{path}.model_prices.{m}");
            if !t.models.value.contains(m) {
                self.push(
                    &key,
                    &p.input_per_mtok,
                    format!("{m:?} is not one of the target's models"),
                );
            }
            if let Some(p) = self.price(&key, p) {
                model_prices.push((m.clone(), p));
            }
        }
        (price, model_prices)
    }

    fn price(&mut self, path: &str, p: &RawPrice) -> Option<Price> {
        let mut ok = true;
        for (k, v) in [
            ("input_per_mtok", &p.input_per_mtok),
            ("output_per_mtok", &p.output_per_mtok),
        ] {
            if !(v.value.is_finite() && v.value >= 0.0) {
                self.push(
                    format!("{path}.{k}"),
                    v,
                    "must be a non-negative number (a price per million tokens)",
                );
                ok = false;
            }
        }
        ok.then_some(Price {
            input_per_mtok: p.input_per_mtok.value,
            output_per_mtok: p.output_per_mtok.value,
        })
    }

    /// `base_url`, `${VAR}`-expanded, without a trailing slash (empty when unusable).
    fn base_url(&mut self, path: &str, raw: &S<String>) -> String {
        let key = format!("{path}.base_url");
        let base_url = match expand_env(&raw.value) {
            Ok(u) if u.trim().is_empty() => {
                self.push(
                    &key,
                    raw,
                    "must not be empty (e.g. http://127.0.0.1:8080/v1)",
                );
                String::new()
            }
            Ok(u) => u.trim_end_matches('/').to_owned(),
            Err(e) => {
                self.push(&key, raw, e);
                String::new()
            }
        };
        match url::Url::parse(&base_url) {
            Ok(u) if u.query().is_some() || u.fragment().is_some() => self.push(
                key,
                raw,
                "must not carry a query or fragment: put query parameters under `query:`",
            ),
            Ok(u) if matches!(u.scheme(), "http" | "https") => {}
            Ok(_) => self.push(key, raw, "must be http:// or https://"),
            Err(e) if !base_url.is_empty() => self.push(key, raw, format!("not a URL ({e})")),
            Err(_) => {}
        }
        base_url
    }

    /// `api_key` (`${VAR}`-expanded) or `api_key_file` (its file checked apart).
    fn api_key(&mut self, path: &str, t: &RawTarget) -> Option<KeySource> {
        match (&t.api_key, &t.api_key_file) {
            (Some(k), Some(_)) => {
                self.push(
                    format!("{path}.api_key"),
                    k,
                    "set either api_key or api_key_file, not both",
                );
                None
            }
            (Some(k), None) => match expand_env(&k.value) {
                Ok(v) => Some(KeySource::Inline(Secret::new(v))),
                Err(e) => {
                    self.push(format!("{path}.api_key"), k, e);
                    None
                }
            },
            (None, Some(f)) => Some(KeySource::File(self.file(
                format!("{path}.api_key_file"),
                f,
                FileKind::ApiKey,
            ))),
            (None, None) => None,
        }
    }

    fn models(&mut self, path: &str, models: &S<Vec<String>>) {
        if models.value.is_empty() {
            self.push(
                format!("{path}.models"),
                models,
                "at least one model is required",
            );
        }
        let mut seen = HashSet::new();
        for m in &models.value {
            if m.trim().is_empty() || !seen.insert(m.as_str()) {
                self.push(
                    format!("{path}.models"),
                    models,
                    format!("empty or duplicate model {m:?}"),
                );
            }
        }
    }

    fn headers(
        &mut self,
        path: &str,
        t: &RawTarget,
        auth: AuthStyle,
        has_key: bool,
    ) -> Vec<(String, String)> {
        let mut headers = Vec::new();
        for (k, v) in &t.headers {
            let ok = hyper::header::HeaderName::from_bytes(k.as_bytes()).is_ok()
                && hyper::header::HeaderValue::from_str(v).is_ok();
            if let Some(why) = header_set_by_tokenprobe(k, auth, has_key) {
                self.push(format!("{path}.headers.{k}"), &t.name, why);
            } else if ok {
                headers.push((k.clone(), v.clone()));
            } else {
                self.push(
                    format!("{path}.headers.{k}"),
                    &t.name,
                    "not a valid HTTP header",
                );
            }
        }
        headers
    }

    fn proxy(&mut self, path: &str, raw: Option<&S<String>>) -> ProxySetting {
        match raw {
            None => ProxySetting::Environment,
            Some(p) if p.value == "none" || p.value.is_empty() => ProxySetting::Disabled,
            Some(p) => match url::Url::parse(&p.value) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => {
                    ProxySetting::Url(p.value.clone())
                }
                _ => {
                    self.push(
                        format!("{path}.proxy"),
                        p,
                        "must be an http://, https:// proxy URL or \"none\"",
                    );
                    ProxySetting::Environment
                }
            },
        }
    }

    fn extra_body(&mut self, path: &str, t: &RawTarget) {
        for k in t.extra_body.keys() {
            if RESERVED_BODY_KEYS.contains(&k.as_str()) || sets_body_key(t.api, k) {
                self.push(
                    format!("{path}.extra_body.{k}"),
                    &t.name,
                    format!(
                        "{k:?} is set by tokenprobe itself ({} sends it); extra_body may only add fields",
                        t.api
                    ),
                );
            }
        }
        if let Some((k, _)) = t.exact_output.field(Some(1))
            && t.extra_body.contains_key(k)
        {
            self.push(
                format!("{path}.extra_body.{k}"),
                &t.name,
                format!(
                    "{k:?} is set by exact_output: {}; give it in one place only",
                    t.exact_output.as_str()
                ),
            );
        }
    }

    /// The prompts a target runs: its `prompts:` list, or every prompt.
    fn target_prompts(
        &mut self,
        path: &str,
        t: &RawTarget,
        prompts: &[Arc<Prompt>],
    ) -> Vec<Arc<Prompt>> {
        let chosen: Vec<Arc<Prompt>> = match &t.prompts {
            None => prompts.to_vec(),
            Some(names) => names
                .iter()
                .enumerate()
                .filter_map(|(j, n)| {
                    let found = prompts.iter().find(|p| p.name == n.value).cloned();
                    if found.is_none() {
                        self.push(
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
            self.push(
                format!("{path}.name"),
                &t.name,
                "no prompts are defined for this target",
            );
        }
        if let Some(p) = chosen
            .iter()
            .find(|p| matches!(p.workload, Workload::Session(_)))
        {
            // A session's turns call tools: the legacy completions API has none.
            if t.api == Api::OpenaiCompletions {
                self.push(
                    format!("{path}.api"),
                    &t.name,
                    format!(
                        "prompt {:?} is a session, whose turns call tools: openai-completions has none (use openai-chat, openai-responses or anthropic-messages)",
                        p.name
                    ),
                );
            }
            for key in ["tools", "tool_choice"] {
                if t.extra_body.contains_key(key) {
                    self.push(
                        format!("{path}.extra_body.{key}"),
                        &t.name,
                        format!("prompt {:?} is a session, which sets {key} itself", p.name),
                    );
                }
            }
        }
        chosen
    }

    // -- buckets ----------------------------------------------------------------------------

    /// `buckets:`, each layout defaulted when absent or invalid.
    fn buckets(&mut self, raw: Option<&RawBuckets>) -> Buckets {
        let d = Buckets::default();
        let empty = RawBuckets::default();
        let rb = raw.unwrap_or(&empty);
        Buckets {
            time_to_first_token: self.layout(
                "buckets.time_to_first_token",
                &rb.time_to_first_token,
                d.time_to_first_token,
            ),
            time_per_output_token: self.layout(
                "buckets.time_per_output_token",
                &rb.time_per_output_token,
                d.time_per_output_token,
            ),
            decode_tokens_per_second: self.layout(
                "buckets.decode_tokens_per_second",
                &rb.decode_tokens_per_second,
                d.decode_tokens_per_second,
            ),
            request_duration: self.layout(
                "buckets.request_duration",
                &rb.request_duration,
                d.request_duration,
            ),
            time_to_headers: self.layout(
                "buckets.time_to_headers",
                &rb.time_to_headers,
                d.time_to_headers,
            ),
            native: rb.native,
        }
    }

    fn layout(&mut self, path: &str, v: &Option<S<Vec<f64>>>, default: Vec<f64>) -> Vec<f64> {
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
    let u = url::Url::parse(base_url).ok()?;
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
            ..Default::default()
        },
        Message {
            role: "user".into(),
            content: "u".into(),
            ..Default::default()
        },
    ];
    let body = api.request_body(&crate::protocol::BodyParams {
        model: "m",
        messages: &messages,
        max_tokens: Some(1),
        include_usage: true,
        // `exact_output`'s fields are checked apart (they may come from extra_body instead).
        stream: true,
        exact_output: crate::protocol::ExactOutput::None,
        extra_body: None,
        tools: &[],
        tool_choice: None,
    });
    body.as_object().is_some_and(|o| o.contains_key(key))
}

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
