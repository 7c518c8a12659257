//! The YAML as written: serde shapes with unknown keys rejected and the places (`line:column`) of
//! the values a problem can be reported at. Nothing here checks a value; `validate` does.

use super::types::{AuthStyle, ConnectionMode, HistogramFamily};
use crate::protocol::{Api, ExactOutput, Message};
use crate::workload::{DatasetFormat, Order, TraceFormat};
use serde::Deserialize;
use serde_saphyr::Spanned;
use std::collections::BTreeMap;

/// A value with its place in the file.
pub(super) type S<T> = Spanned<T>;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) defaults: Option<RawDefaults>,
    #[serde(default)]
    pub(super) prompts: Vec<RawPrompt>,
    #[serde(default)]
    pub(super) targets: Vec<RawTarget>,
    #[serde(default)]
    pub(super) buckets: Option<RawBuckets>,
    /// Where this exporter probes from (a constant `location` label on every series).
    #[serde(default)]
    pub(super) location: Option<S<String>>,
}

/// `defaults:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefaults {
    pub(super) interval: Option<S<String>>,
    pub(super) cron: Option<S<String>>,
    pub(super) timeouts: Option<RawTimeouts>,
    pub(super) histograms: Option<Vec<HistogramFamily>>,
}

/// `timeouts:` (under `defaults:` or a target).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTimeouts {
    pub(super) connect: Option<S<String>>,
    pub(super) first_token: Option<S<String>>,
    pub(super) idle: Option<S<String>>,
    pub(super) total: Option<S<String>>,
}

/// One entry of `prompts:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrompt {
    pub(super) name: S<String>,
    #[serde(default)]
    pub(super) messages: Vec<Message>,
    pub(super) max_tokens: Option<u32>,
    #[serde(default)]
    pub(super) nonce: bool,
    pub(super) expect: Option<RawExpect>,
    /// `stream: false` asks for the whole answer at once (overrides the target's).
    #[serde(default)]
    pub(super) stream: Option<bool>,
    pub(super) synthetic: Option<S<RawSynthetic>>,
    pub(super) dataset: Option<S<RawDataset>>,
    pub(super) conversation: Option<S<RawConversation>>,
    pub(super) trace: Option<S<RawTrace>>,
    pub(super) session: Option<S<RawSession>>,
    /// Drift detection of a deterministic prompt's answers.
    #[serde(default)]
    pub(super) drift: Option<S<bool>>,
}

/// A prompt's `synthetic:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSynthetic {
    pub(super) input_tokens: Option<S<RawLength>>,
    pub(super) output_tokens: Option<S<RawLength>>,
    pub(super) shared_prefix_tokens: Option<S<u32>>,
    pub(super) seed: Option<u64>,
}

/// A prompt's `dataset:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDataset {
    pub(super) file: S<String>,
    pub(super) format: DatasetFormat,
    #[serde(default = "default_order")]
    pub(super) order: Order,
    pub(super) seed: Option<u64>,
}

/// A prompt's `trace:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTrace {
    pub(super) file: S<String>,
    pub(super) format: TraceFormat,
    pub(super) model: Option<S<String>>,
    pub(super) time_scale: Option<S<f64>>,
    pub(super) start: Option<S<String>>,
    pub(super) duration: Option<S<String>>,
    pub(super) seed: Option<u64>,
}

/// A prompt's `conversation:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConversation {
    pub(super) turns: S<u32>,
    pub(super) think_time: Option<S<String>>,
    pub(super) user_tokens: Option<S<RawLength>>,
    pub(super) output_tokens: Option<S<RawLength>>,
    pub(super) seed: Option<u64>,
}

/// A prompt's `session:`: a generated agent loop, or a `trace` of recorded sessions.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSession {
    pub(super) system_tokens: Option<S<u32>>,
    pub(super) tools: Option<S<RawTools>>,
    pub(super) user_tokens: Option<S<RawLength>>,
    pub(super) turns: Option<S<RawLength>>,
    pub(super) call_tokens: Option<S<RawLength>>,
    pub(super) result_tokens: Option<S<RawLength>>,
    pub(super) answer_tokens: Option<S<RawLength>>,
    pub(super) think_time: Option<S<RawWait>>,
    pub(super) context_budget: Option<S<u32>>,
    pub(super) overflow: Option<S<String>>,
    pub(super) summary_tokens: Option<S<u32>>,
    pub(super) subagents: Option<S<RawSubagents>>,
    pub(super) tool_choice: Option<S<String>>,
    pub(super) trace: Option<S<RawSessionTrace>>,
    pub(super) seed: Option<u64>,
}

/// A session's `tools:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTools {
    pub(super) count: S<u32>,
    pub(super) tokens: Option<S<u32>>,
}

/// A session's `subagents:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSubagents {
    pub(super) count: S<u32>,
    pub(super) every: Option<S<u32>>,
    pub(super) turns: Option<S<RawLength>>,
}

/// A session's `trace:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSessionTrace {
    pub(super) file: S<String>,
    pub(super) time_scale: Option<S<f64>>,
}

/// A think time as written: a duration, or `{distribution: ..., ...}`.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum RawWait {
    /// `think_time: 2s`.
    Fixed(String),
    /// `think_time: {distribution: exponential, mean: 2s, max: 30s}`.
    Distribution(RawWaitDistribution),
}

/// A think time's `{distribution: ...}` map.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWaitDistribution {
    pub(super) distribution: String,
    pub(super) value: Option<String>,
    pub(super) mean: Option<String>,
    pub(super) min: Option<String>,
    pub(super) max: Option<String>,
}

impl<'de> Deserialize<'de> for RawWait {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawWait;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration like 2s or {distribution: fixed|uniform|exponential, ...}")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawWait, E> {
                Ok(RawWait::Fixed(v.to_owned()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RawWait, E> {
                // A bare number is not a duration: said by the validator with its place.
                Ok(RawWait::Fixed(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<RawWait, A::Error> {
                RawWaitDistribution::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(RawWait::Distribution)
            }
        }
        d.deserialize_any(V)
    }
}

/// A token length as written: a whole number, or `{distribution: ..., ...}`.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum RawLength {
    /// `input_tokens: 512`.
    Fixed(u64),
    /// `input_tokens: {distribution: normal, mean: 1000, stddev: 200}`.
    Distribution(RawDistribution),
}

/// A length's `{distribution: ...}` map (which keys a distribution needs is `validate`'s).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDistribution {
    pub(super) distribution: String,
    pub(super) value: Option<f64>,
    pub(super) mean: Option<f64>,
    pub(super) stddev: Option<f64>,
    pub(super) min: Option<f64>,
    pub(super) max: Option<f64>,
}

impl<'de> Deserialize<'de> for RawLength {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawLength;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a whole number of tokens or {distribution: fixed|uniform|normal|lognormal, ...}")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RawLength, E> {
                Ok(RawLength::Fixed(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RawLength, E> {
                u64::try_from(v)
                    .map(RawLength::Fixed)
                    .map_err(|_| E::custom("a length must be at least 1"))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<RawLength, A::Error> {
                RawDistribution::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(RawLength::Distribution)
            }
        }
        d.deserialize_any(V)
    }
}

fn default_order() -> Order {
    Order::Sequential
}

/// A prompt's `expect:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExpect {
    pub(super) regex: Option<S<String>>,
    pub(super) min_output_tokens: Option<u64>,
    /// The whole answer, exactly (surrounding whitespace aside).
    pub(super) exact: Option<S<String>>,
    /// The first number of the answer, within a tolerance.
    pub(super) number: Option<S<RawNumber>>,
    /// The answer is JSON that this schema (a subset of JSON Schema) admits.
    pub(super) json_schema: Option<S<serde_json::Value>>,
}

/// `expect.number`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNumber {
    pub(super) value: f64,
    #[serde(default)]
    pub(super) tolerance: f64,
}

/// A target's `usage_audit:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUsageAudit {
    #[serde(default)]
    pub(super) count: super::types::AuditCount,
    pub(super) tolerance_percent: Option<S<f64>>,
    pub(super) tolerance_tokens: Option<u64>,
}

/// One entry of `targets:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTarget {
    pub(super) name: S<String>,
    pub(super) base_url: S<String>,
    #[serde(default = "default_api")]
    pub(super) api: Api,
    pub(super) api_key: Option<S<String>>,
    pub(super) api_key_file: Option<S<String>>,
    pub(super) models: S<Vec<String>>,
    pub(super) prompts: Option<Vec<S<String>>>,
    pub(super) interval: Option<S<String>>,
    pub(super) cron: Option<S<String>>,
    pub(super) timeouts: Option<RawTimeouts>,
    /// The histogram families its jobs export (overrides `defaults.histograms`).
    #[serde(default)]
    pub(super) histograms: Option<Vec<HistogramFamily>>,
    #[serde(default = "default_true")]
    pub(super) include_usage: bool,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) extra_body: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub(super) query: BTreeMap<String, String>,
    pub(super) auth: Option<AuthStyle>,
    pub(super) proxy: Option<S<String>>,
    pub(super) ca_file: Option<S<String>>,
    #[serde(default)]
    pub(super) insecure_skip_verify: bool,
    #[serde(default)]
    pub(super) connection: ConnectionMode,
    /// `serve`: at most this many probes of the target in flight at once.
    pub(super) max_in_flight: Option<S<u32>>,
    /// `serve`: a probe after this long without one of the target is flagged `cold_start`.
    pub(super) cold_after: Option<S<String>>,
    /// Metrics endpoints `bench` scrapes beside every level.
    #[serde(default)]
    pub(super) server_metrics: Vec<S<RawServerMetricsEntry>>,
    pub(super) tokenizer: Option<S<String>>,
    #[serde(default = "default_true")]
    pub(super) stream: bool,
    #[serde(default)]
    pub(super) exact_output: ExactOutput,
    pub(super) price: Option<RawPrice>,
    #[serde(default)]
    pub(super) model_prices: BTreeMap<String, RawPrice>,
    /// Other names each model may answer as.
    #[serde(default)]
    pub(super) model_aliases: Option<S<BTreeMap<String, Vec<String>>>>,
    /// `flag` (default) or `fail`: what another model answering does.
    #[serde(default)]
    pub(super) model_mismatch: super::types::MismatchAction,
    /// How the answers' usage is audited.
    pub(super) usage_audit: Option<S<RawUsageAudit>>,
    /// `bench`: the GPUs that serve the target (the frontier's and the GPU cost's divisor).
    pub(super) gpus: Option<S<u32>>,
    /// `bench`: what one of those GPUs costs per hour (the cost of self-hosted tokens).
    pub(super) gpu_hour_price: Option<S<f64>>,
}

/// A target's `price:` or an entry of its `model_prices:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrice {
    pub(super) input_per_mtok: S<f64>,
    pub(super) output_per_mtok: S<f64>,
}

/// One entry of a target's `server_metrics:` as written: a plain URL, or the whole form.
#[derive(Debug)]
pub(super) enum RawServerMetricsEntry {
    /// `- http://host/metrics`: `{url: ...}` with every other key at its default.
    Url(String),
    /// `- {url: ..., interval: ..., ...}`.
    Endpoint(Box<RawServerMetrics>),
}

impl<'de> Deserialize<'de> for RawServerMetricsEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entry;
        impl<'de> serde::de::Visitor<'de> for Entry {
            type Value = RawServerMetricsEntry;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a metrics URL, or a map with `url` (and `interval`, `timeout`, `auth`, `families`)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(RawServerMetricsEntry::Url(v.to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                RawServerMetrics::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(|m| RawServerMetricsEntry::Endpoint(Box::new(m)))
            }
        }
        d.deserialize_any(Entry)
    }
}

/// One entry of a target's `server_metrics:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServerMetrics {
    pub(super) url: S<String>,
    pub(super) interval: Option<S<String>>,
    pub(super) timeout: Option<S<String>>,
    /// `target` (default: the target's key and header) or `none`.
    pub(super) auth: Option<S<String>>,
    #[serde(default)]
    pub(super) families: Vec<RawFamily>,
}

/// A custom family under `server_metrics[].families`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFamily {
    pub(super) name: S<String>,
    pub(super) metric: S<String>,
    pub(super) kind: crate::servermetrics::signals::CustomKind,
    #[serde(default)]
    pub(super) labels: BTreeMap<String, String>,
    pub(super) across: Option<crate::servermetrics::signals::Across>,
}

/// `buckets:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBuckets {
    pub(super) time_to_first_token: Option<S<Vec<f64>>>,
    pub(super) time_per_output_token: Option<S<Vec<f64>>>,
    pub(super) decode_tokens_per_second: Option<S<Vec<f64>>>,
    pub(super) request_duration: Option<S<Vec<f64>>>,
    pub(super) time_to_headers: Option<S<Vec<f64>>>,
    #[serde(default)]
    pub(super) native: bool,
}

fn default_api() -> Api {
    Api::OpenaiChat
}

fn default_true() -> bool {
    true
}
