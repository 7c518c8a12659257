//! Probe results (and bench samples, through [`Observation`]) folded into OTLP instruments (pure:
//! observations in, metrics out, time passed in): cumulative histograms with the GenAI
//! conventions' advised buckets, per job and attribute set.
//!
//! What each instrument records (the one place these rules live):
//!
//! | instrument | unit | what | when |
//! |---|---|---|---|
//! | `gen_ai.client.operation.duration` | s | E2E; for a failure, the time until it failed, with `error.type` | every probe |
//! | `gen_ai.client.operation.time_to_first_chunk` | s | TTFT (the first chunk carrying a token) | successful streams |
//! | `gen_ai.client.operation.time_per_output_chunk` | s | each gap between content chunks after the first | successful streams |
//! | `gen_ai.client.token.usage` | {token} | input tokens (when known) and output tokens, by `gen_ai.token.type` | successes |
//! | `gen_ai.usage.cache_read.input_tokens` | {token} | of the input tokens, those the prompt cache served, when the answer said | successes |
//! | `gen_ai.usage.reasoning.output_tokens` | {token} | of the output tokens, the reasoning tokens, when the answer said | successes |
//! | `tokenprobe.time_to_first_output_token` | s | TTFO | successes |
//! | `tokenprobe.time_per_output_token` | s | TPOT | successes |
//! | `tokenprobe.probes` | {probe} | probes, with `error.type` for failures (tokenprobe's `error_type`) | every probe |
//!
//! Every series carries the job's attributes: `gen_ai.operation.name`, `gen_ai.provider.name`,
//! `gen_ai.request.model`, `server.address`, `server.port`, and tokenprobe's own
//! `tokenprobe.target` and `tokenprobe.prompt` (and `tokenprobe.location` when set). What answered
//! is no attribute of a series (a new value per answer would be a new series): each point of
//! `gen_ai.client.operation.duration` carries one exemplar, its latest probe, with that probe's
//! `gen_ai.response.model` and `gen_ai.response.id` when the answer named them.

use super::proto::{
    CUMULATIVE, Data, Exemplar, Histogram, HistogramDataPoint, KeyValue, Metric, NumberDataPoint,
    Sum, kv, kv_int,
};
use crate::measure::ProbeResult;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The GenAI conventions' advised buckets of durations (s).
pub const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// The GenAI conventions' advised buckets of token counts.
pub const TOKEN_BUCKETS: [f64; 14] = [
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];

/// tokenprobe's buckets of TPOT (s): per-token times are milliseconds.
pub const TPOT_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56,
];

/// The histograms, in the order they are exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Instrument {
    Duration,
    TimeToFirstChunk,
    TimePerOutputChunk,
    TokenUsage,
    CacheRead,
    Reasoning,
    Ttfo,
    Tpot,
}

impl Instrument {
    const ALL: [Instrument; 8] = [
        Instrument::Duration,
        Instrument::TimeToFirstChunk,
        Instrument::TimePerOutputChunk,
        Instrument::TokenUsage,
        Instrument::CacheRead,
        Instrument::Reasoning,
        Instrument::Ttfo,
        Instrument::Tpot,
    ];

    /// Name, description, unit, bounds.
    fn def(self) -> (&'static str, &'static str, &'static str, &'static [f64]) {
        match self {
            Instrument::Duration => (
                "gen_ai.client.operation.duration",
                "GenAI operation duration (a probe's E2E; for a failure, until it failed).",
                "s",
                &DURATION_BUCKETS,
            ),
            Instrument::TimeToFirstChunk => (
                "gen_ai.client.operation.time_to_first_chunk",
                "Time to the first chunk carrying a token (tokenprobe's TTFT).",
                "s",
                &DURATION_BUCKETS,
            ),
            Instrument::TimePerOutputChunk => (
                "gen_ai.client.operation.time_per_output_chunk",
                "Time between content chunks after the first (tokenprobe's ITL per chunk).",
                "s",
                &DURATION_BUCKETS,
            ),
            Instrument::TokenUsage => (
                "gen_ai.client.token.usage",
                "Input and output tokens of successful probes.",
                "{token}",
                &TOKEN_BUCKETS,
            ),
            Instrument::CacheRead => (
                "gen_ai.usage.cache_read.input_tokens",
                "Input tokens the server's prompt cache served, of successful probes whose answer said.",
                "{token}",
                &TOKEN_BUCKETS,
            ),
            Instrument::Reasoning => (
                "gen_ai.usage.reasoning.output_tokens",
                "Reasoning tokens of the output, of successful probes whose answer said.",
                "{token}",
                &TOKEN_BUCKETS,
            ),
            Instrument::Ttfo => (
                "tokenprobe.time_to_first_output_token",
                "Time to the first answer token (TTFO: reasoning left out).",
                "s",
                &DURATION_BUCKETS,
            ),
            Instrument::Tpot => (
                "tokenprobe.time_per_output_token",
                "Time per output token after the first (TPOT).",
                "s",
                &TPOT_BUCKETS,
            ),
        }
    }
}

/// What one probe or bench request gives the instruments (from a [`ProbeResult`], or from a
/// bench sample, which keeps no chunk gaps).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Observation<'a> {
    /// tokenprobe's `error_type`, for a failure.
    pub error: Option<&'static str>,
    /// Time until the failure.
    pub failure_s: Option<f64>,
    /// E2E.
    pub e2e_s: Option<f64>,
    /// TTFT, for a stream.
    pub ttft_s: Option<f64>,
    /// The gaps between content chunks after the first, for a stream.
    pub chunk_gaps_s: &'a [f64],
    /// Input tokens, when known.
    pub input_tokens: Option<u64>,
    /// Output tokens.
    pub output_tokens: u64,
    /// TTFO.
    pub ttfo_s: Option<f64>,
    /// TPOT.
    pub tpot_s: Option<f64>,
    /// Of the input tokens, the cached ones, when the answer said.
    pub cached_input_tokens: Option<u64>,
    /// Of the output tokens, the reasoning ones, when the answer said.
    pub reasoning_tokens: Option<u64>,
    /// The model that answered (`gen_ai.response.model`).
    pub response_model: Option<&'a str>,
    /// The answer's id (`gen_ai.response.id`).
    pub response_id: Option<&'a str>,
}

impl<'a> From<&'a ProbeResult> for Observation<'a> {
    fn from(r: &'a ProbeResult) -> Self {
        Observation {
            error: r.error_type.map(|e| e.as_str()),
            failure_s: r.failure_s,
            e2e_s: r.e2e_s,
            ttft_s: r.ttft_s.filter(|_| r.stream),
            chunk_gaps_s: if r.stream { &r.chunk_gaps_s } else { &[] },
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            ttfo_s: r.ttfo_s,
            tpot_s: r.tpot_s,
            cached_input_tokens: r.cached_input_tokens,
            reasoning_tokens: r.reasoning_tokens,
            response_model: r.served_model.as_deref(),
            response_id: r.response_id.as_deref(),
        }
    }
}

/// A job's attributes, on every one of its series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobAttrs(Vec<KeyValue>);

impl JobAttrs {
    /// The attributes of a job sending `model` to `base_url` in `api` (tokenprobe's spelling,
    /// e.g. `openai-chat`), named `target` and `prompt` in the config.
    pub fn new(
        api: &str,
        base_url: &str,
        model: &str,
        target: &str,
        prompt: &str,
        location: Option<&str>,
    ) -> Self {
        let (operation, provider) = match api {
            "openai-completions" => ("text_completion", "openai"),
            "anthropic-messages" => ("chat", "anthropic"),
            _ => ("chat", "openai"),
        };
        let mut a = vec![
            kv("gen_ai.operation.name", operation),
            kv("gen_ai.provider.name", provider),
            kv("gen_ai.request.model", model),
        ];
        if let Ok(u) = url::Url::parse(base_url)
            && let Some(host) = u.host_str()
        {
            a.push(kv("server.address", host));
            if let Some(port) = u.port_or_known_default() {
                a.push(kv_int("server.port", i64::from(port)));
            }
        }
        a.push(kv("tokenprobe.target", target));
        a.push(kv("tokenprobe.prompt", prompt));
        if let Some(l) = location {
            a.push(kv("tokenprobe.location", l));
        }
        JobAttrs(a)
    }

    /// One more string attribute (a bench run's `tokenprobe.run_id`).
    pub fn with(mut self, key: &str, value: &str) -> Self {
        self.0.push(kv(key, value));
        self
    }
}

#[derive(Debug, Clone)]
struct Hist {
    bounds: &'static [f64],
    counts: Vec<u64>,
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
    /// The latest observation that carries attributes of its own, as an exemplar.
    exemplar: Option<Exemplar>,
}

impl Hist {
    fn new(bounds: &'static [f64]) -> Self {
        Hist {
            bounds,
            counts: vec![0; bounds.len() + 1],
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            exemplar: None,
        }
    }

    /// A value into its bucket: the first whose upper bound it does not pass (bounds are
    /// inclusive upper bounds, as OTLP's explicit bounds are).
    fn observe(&mut self, v: f64) {
        if !v.is_finite() {
            return;
        }
        let i = self.bounds.partition_point(|b| *b < v);
        self.counts[i] += 1;
        self.count += 1;
        self.sum += v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }
}

/// One extra attribute of a series beyond the job's (`error.type`, `gen_ai.token.type`).
type Extra = Option<(&'static str, &'static str)>;

#[derive(Debug)]
struct JobState {
    attrs: Vec<KeyValue>,
    start_ns: u64,
    hists: BTreeMap<(Instrument, Extra), Hist>,
    /// Probes by `error.type` (none: successes).
    probes: BTreeMap<Option<&'static str>, u64>,
}

impl JobState {
    fn observe(&mut self, i: Instrument, extra: Extra, v: f64) {
        self.hists
            .entry((i, extra))
            .or_insert_with(|| Hist::new(i.def().3))
            .observe(v);
    }

    /// The duration, with the probe's identity as the point's exemplar when the answer named
    /// it (a value that is no number is not observed, and so is no exemplar).
    fn duration(&mut self, extra: Extra, v: f64, r: &Observation<'_>, at_ns: u64) {
        let h = self
            .hists
            .entry((Instrument::Duration, extra))
            .or_insert_with(|| Hist::new(Instrument::Duration.def().3));
        h.observe(v);
        let filtered_attributes: Vec<KeyValue> = [
            ("gen_ai.response.model", r.response_model),
            ("gen_ai.response.id", r.response_id),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| kv(k, v)))
        .collect();
        if !filtered_attributes.is_empty() && v.is_finite() {
            h.exemplar = Some(Exemplar {
                filtered_attributes,
                time_unix_nano: at_ns,
                as_double: Some(v),
            });
        }
    }

    /// The recording rules of the module's table; `at_ns` is when the observation was made.
    fn record(&mut self, r: &Observation<'_>, at_ns: u64) {
        *self.probes.entry(r.error).or_insert(0) += 1;
        if let Some(e) = r.error {
            if let Some(d) = r.failure_s {
                self.duration(Some(("error.type", e)), d, r, at_ns);
            }
            return;
        }
        if let Some(d) = r.e2e_s {
            self.duration(None, d, r, at_ns);
        }
        if let Some(t) = r.ttft_s {
            self.observe(Instrument::TimeToFirstChunk, None, t);
        }
        for g in r.chunk_gaps_s {
            self.observe(Instrument::TimePerOutputChunk, None, *g);
        }
        if let Some(n) = r.input_tokens {
            self.observe(
                Instrument::TokenUsage,
                Some(("gen_ai.token.type", "input")),
                n as f64,
            );
        }
        self.observe(
            Instrument::TokenUsage,
            Some(("gen_ai.token.type", "output")),
            r.output_tokens as f64,
        );
        if let Some(n) = r.cached_input_tokens {
            self.observe(Instrument::CacheRead, None, n as f64);
        }
        if let Some(n) = r.reasoning_tokens {
            self.observe(Instrument::Reasoning, None, n as f64);
        }
        if let Some(t) = r.ttfo_s {
            self.observe(Instrument::Ttfo, None, t);
        }
        if let Some(t) = r.tpot_s {
            self.observe(Instrument::Tpot, None, t);
        }
    }
}

/// Every job's instruments.
#[derive(Debug, Default)]
pub struct Instruments {
    jobs: Mutex<BTreeMap<u64, JobState>>,
    next: AtomicU64,
}

/// One job's side of the instruments: records its results, and removes its series when the job
/// goes.
#[derive(Debug, Clone)]
pub struct JobRecorder {
    instruments: Arc<Instruments>,
    id: u64,
}

impl JobRecorder {
    /// Records one observation, made now.
    pub fn observe(&self, r: &Observation<'_>) {
        self.observe_at(r, super::exporter::now_ns());
    }

    /// Records one observation made at `at_ns` (ns since the Unix epoch).
    pub fn observe_at(&self, r: &Observation<'_>, at_ns: u64) {
        let mut jobs = self
            .instruments
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(j) = jobs.get_mut(&self.id) {
            j.record(r, at_ns);
        }
    }

    /// Removes the job's series (a reload dropped or changed it); later records do nothing.
    pub fn remove(&self) {
        self.instruments
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

impl Instruments {
    /// No job yet.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// A job whose series count from `now_ns` (ns since the Unix epoch).
    pub fn job(self: &Arc<Self>, attrs: JobAttrs, now_ns: u64) -> JobRecorder {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                id,
                JobState {
                    attrs: attrs.0,
                    start_ns: now_ns,
                    hists: BTreeMap::new(),
                    probes: BTreeMap::new(),
                },
            );
        JobRecorder {
            instruments: self.clone(),
            id,
        }
    }

    /// Jobs held.
    pub fn len(&self) -> usize {
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// True when no job is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every instrument with a point, its points at `now_ns` (cumulative since each job's start).
    pub fn metrics(&self, now_ns: u64) -> Vec<Metric> {
        let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        for i in Instrument::ALL {
            let (name, description, unit, bounds) = i.def();
            let mut points = Vec::new();
            for j in jobs.values() {
                for ((_, extra), h) in j.hists.range((i, None)..).take_while(|((k, _), _)| *k == i)
                {
                    let mut attributes = j.attrs.clone();
                    if let Some((k, v)) = extra {
                        attributes.push(kv(k, v));
                    }
                    points.push(HistogramDataPoint {
                        attributes,
                        start_time_unix_nano: j.start_ns,
                        time_unix_nano: now_ns,
                        count: h.count,
                        sum: Some(h.sum),
                        bucket_counts: h.counts.clone(),
                        explicit_bounds: bounds.to_vec(),
                        min: (h.count > 0).then_some(h.min),
                        max: (h.count > 0).then_some(h.max),
                        exemplars: h.exemplar.iter().cloned().collect(),
                    });
                }
            }
            if !points.is_empty() {
                out.push(Metric {
                    name: name.into(),
                    description: description.into(),
                    unit: unit.into(),
                    data: Some(Data::Histogram(Histogram {
                        data_points: points,
                        aggregation_temporality: CUMULATIVE,
                    })),
                });
            }
        }
        let mut points = Vec::new();
        for j in jobs.values() {
            for (error, n) in &j.probes {
                let mut attributes = j.attrs.clone();
                if let Some(e) = error {
                    attributes.push(kv("error.type", e));
                }
                points.push(NumberDataPoint {
                    attributes,
                    start_time_unix_nano: j.start_ns,
                    time_unix_nano: now_ns,
                    as_int: i64::try_from(*n).unwrap_or(i64::MAX),
                });
            }
        }
        if !points.is_empty() {
            out.push(Metric {
                name: "tokenprobe.probes".into(),
                description: "Probes sent, by error.type for failures (tokenprobe's error_type)."
                    .into(),
                unit: "{probe}".into(),
                data: Some(Data::Sum(Sum {
                    data_points: points,
                    aggregation_temporality: CUMULATIVE,
                    is_monotonic: true,
                })),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests;
