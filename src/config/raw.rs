//! The YAML as written: serde shapes with unknown keys rejected and the places (`line:column`) of
//! the values a problem can be reported at. Nothing here checks a value; `validate` does.

use super::types::{AuthStyle, ConnectionMode};
use crate::protocol::{Api, Message};
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
}

/// `defaults:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefaults {
    pub(super) interval: Option<S<String>>,
    pub(super) cron: Option<S<String>>,
    pub(super) timeouts: Option<RawTimeouts>,
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
    pub(super) messages: Vec<Message>,
    pub(super) max_tokens: Option<u32>,
    #[serde(default)]
    pub(super) nonce: bool,
    pub(super) expect: Option<RawExpect>,
}

/// A prompt's `expect:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExpect {
    pub(super) regex: Option<S<String>>,
    pub(super) min_output_tokens: Option<u64>,
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
    /// Metrics endpoints `bench` scrapes beside every level.
    #[serde(default)]
    pub(super) server_metrics: Vec<RawServerMetrics>,
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
}

fn default_api() -> Api {
    Api::OpenaiChat
}

fn default_true() -> bool {
    true
}
