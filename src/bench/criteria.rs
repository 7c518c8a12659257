//! The bench's vocabulary: metric names, hard limits, weights, SLOs, ratios, and the optional
//! `--bench.file` YAML that holds them (pure parsing).
//!
//! Metric names: `ttft`, `ttfo`, `tpot`, `e2e` (seconds), `tps` (per-request decode tokens/s) and
//! `lag` (the load generator's scheduling lag, seconds), each with a statistic suffix `_mean`,
//! `_p50`, `_p90`, `_p95`, `_p99` or `_max`; bare, they mean `_p95` (`tps`: `_p50`; `lag`:
//! `_p99`). Level-wide metrics without a suffix: `agg_tps` (aggregate output tokens/s),
//! `rps` (requests/s), `goodput` (requests/s that met every SLO), `error_rate` (0..1), and, when
//! the model has a price, `cost_per_request` (mean cost of a successful request) and
//! `cost_per_mtok` (cost per million output tokens), lower is better; with a GPU count,
//! `agg_tps_per_gpu` (aggregate output tokens/s per GPU), with a `gpu_hour_price:` too,
//! `gpu_cost_per_mtok` (the self-hosted cost per million output tokens), and with the server's
//! energy, `joules_per_token` (per output token), the last two lower is better.

use super::stats::{LevelStats, Objective, Sample, Summary};
use crate::units::{fmt_cost, fmt_secs};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// A problem with a bench flag or the bench file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CriteriaError {
    /// A flag value could not be parsed.
    #[error("{0}")]
    Invalid(String),
    /// The bench file could not be read.
    #[error("cannot read bench file {path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The bench file is not valid.
    #[error("bench file {path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// What is wrong (with the YAML location when known).
        reason: String,
    },
}

fn invalid(s: impl Into<String>) -> CriteriaError {
    CriteriaError::Invalid(s.into())
}

/// What a metric is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Base {
    /// Time to first token, s.
    Ttft,
    /// Time to first output token, s.
    Ttfo,
    /// Time per output token, s.
    Tpot,
    /// End-to-end request duration, s.
    E2e,
    /// Per-request decode tokens/s.
    Tps,
    /// Load generator scheduling lag, s.
    Lag,
    /// Aggregate output tokens/s of the level.
    AggTps,
    /// Requests/s of the level.
    Rps,
    /// Requests/s that met every SLO.
    Goodput,
    /// Failed / all requests.
    ErrorRate,
    /// Mean cost of a successful request.
    CostPerRequest,
    /// Cost per million output tokens.
    CostPerMtok,
    /// Aggregate output tokens/s per GPU (the model's GPU count).
    AggTpsPerGpu,
    /// Cost per million output tokens on the model's own GPUs (`gpu_hour_price:`).
    GpuCostPerMtok,
    /// Joules per output token (the server's energy over the level).
    JoulesPerToken,
}

/// A statistic of a per-request distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stat {
    /// Mean.
    Mean,
    /// Median.
    P50,
    /// 90th percentile.
    P90,
    /// 95th percentile.
    P95,
    /// 99th percentile.
    P99,
    /// Maximum.
    Max,
}

impl Stat {
    fn name(self) -> &'static str {
        match self {
            Stat::Mean => "mean",
            Stat::P50 => "p50",
            Stat::P90 => "p90",
            Stat::P95 => "p95",
            Stat::P99 => "p99",
            Stat::Max => "max",
        }
    }

    fn of(self, s: &Summary) -> f64 {
        match self {
            Stat::Mean => s.mean,
            Stat::P50 => s.p50,
            Stat::P90 => s.p90,
            Stat::P95 => s.p95,
            Stat::P99 => s.p99,
            Stat::Max => s.max,
        }
    }
}

impl Base {
    fn name(self) -> &'static str {
        match self {
            Base::Ttft => "ttft",
            Base::Ttfo => "ttfo",
            Base::Tpot => "tpot",
            Base::E2e => "e2e",
            Base::Tps => "tps",
            Base::Lag => "lag",
            Base::AggTps => "agg_tps",
            Base::Rps => "rps",
            Base::Goodput => "goodput",
            Base::ErrorRate => "error_rate",
            Base::CostPerRequest => "cost_per_request",
            Base::CostPerMtok => "cost_per_mtok",
            Base::AggTpsPerGpu => "agg_tps_per_gpu",
            Base::GpuCostPerMtok => "gpu_cost_per_mtok",
            Base::JoulesPerToken => "joules_per_token",
        }
    }

    fn from_name(s: &str) -> Option<Base> {
        Some(match s {
            "ttft" => Base::Ttft,
            "ttfo" => Base::Ttfo,
            "tpot" => Base::Tpot,
            "e2e" => Base::E2e,
            "tps" | "decode_tps" => Base::Tps,
            "lag" => Base::Lag,
            "agg_tps" | "output_tps" | "throughput" => Base::AggTps,
            "rps" => Base::Rps,
            "goodput" => Base::Goodput,
            "error_rate" | "errors" => Base::ErrorRate,
            "cost_per_request" | "cost" => Base::CostPerRequest,
            "cost_per_mtok" => Base::CostPerMtok,
            "agg_tps_per_gpu" | "tps_per_gpu" => Base::AggTpsPerGpu,
            "gpu_cost_per_mtok" => Base::GpuCostPerMtok,
            "joules_per_token" | "j_per_token" => Base::JoulesPerToken,
            _ => return None,
        })
    }

    /// A per-request distribution (takes a statistic).
    fn distribution(self) -> bool {
        matches!(
            self,
            Base::Ttft | Base::Ttfo | Base::Tpot | Base::E2e | Base::Tps | Base::Lag
        )
    }

    /// Measured in seconds (limits take durations such as `2s`, `50ms`).
    pub fn is_time(self) -> bool {
        self.unit() == Unit::Seconds
    }

    /// What its values measure.
    pub fn unit(self) -> Unit {
        match self {
            Base::Ttft | Base::Ttfo | Base::Tpot | Base::E2e | Base::Lag => Unit::Seconds,
            Base::ErrorRate => Unit::Share,
            Base::Tps | Base::AggTps => Unit::TokensPerSecond,
            Base::Rps | Base::Goodput => Unit::RequestsPerSecond,
            Base::CostPerRequest => Unit::Cost,
            Base::CostPerMtok | Base::GpuCostPerMtok => Unit::CostPerMtok,
            Base::AggTpsPerGpu => Unit::TokensPerSecondPerGpu,
            Base::JoulesPerToken => Unit::JoulesPerToken,
        }
    }

    /// Smaller values are better.
    pub fn lower_is_better(self) -> bool {
        self.is_time()
            || matches!(
                self,
                Base::ErrorRate
                    | Base::CostPerRequest
                    | Base::CostPerMtok
                    | Base::GpuCostPerMtok
                    | Base::JoulesPerToken
            )
    }

    fn default_stat(self) -> Option<Stat> {
        match self {
            Base::Tps => Some(Stat::P50),
            Base::Lag => Some(Stat::P99),
            b if b.distribution() => Some(Stat::P95),
            _ => None,
        }
    }
}

/// A metric of a level, e.g. `ttft_p95`, `tps_p50`, `agg_tps`, `error_rate`. The report keys
/// its values by it, written by its name (and ordered by it, as those maps always were).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Metric {
    /// What.
    pub base: Base,
    /// Which statistic (distribution metrics only).
    pub stat: Option<Stat>,
}

impl Ord for Metric {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.to_string().cmp(&other.to_string())
    }
}

impl PartialOrd for Metric {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Serialize for Metric {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Metric {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<str>::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// What a metric's values measure: the one rule by which every output writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Seconds (TTFT, TTFO, TPOT, E2E, lag).
    Seconds,
    /// A share of requests, 0..1 (the error rate).
    Share,
    /// Output tokens per second.
    TokensPerSecond,
    /// Requests per second.
    RequestsPerSecond,
    /// The config's currency, per request.
    Cost,
    /// The config's currency, per million output tokens.
    CostPerMtok,
    /// Output tokens per second per GPU.
    TokensPerSecondPerGpu,
    /// Joules per output token.
    JoulesPerToken,
}

impl Unit {
    /// The symbol written after a plain value: `tok/s`, `req/s`, `per Mtok`; empty for seconds
    /// and shares (written by their own formats) and for a cost per request (in the config's
    /// currency).
    pub fn symbol(self) -> &'static str {
        match self {
            Unit::TokensPerSecond => "tok/s",
            Unit::RequestsPerSecond => "req/s",
            Unit::CostPerMtok => "per Mtok",
            Unit::TokensPerSecondPerGpu => "tok/s per GPU",
            Unit::JoulesPerToken => "J/tok",
            Unit::Seconds | Unit::Share | Unit::Cost => "",
        }
    }
}

impl FromStr for Metric {
    type Err = CriteriaError;

    fn from_str(s: &str) -> Result<Self, CriteriaError> {
        let s = s.trim().to_ascii_lowercase();
        if let Some(base) = Base::from_name(&s) {
            return Ok(Metric {
                base,
                stat: base.default_stat(),
            });
        }
        let parsed = s.rsplit_once('_').and_then(|(b, st)| {
            let base = Base::from_name(b).filter(|b| b.distribution())?;
            let stat = match st {
                "mean" | "avg" => Stat::Mean,
                "p50" | "median" => Stat::P50,
                "p90" => Stat::P90,
                "p95" => Stat::P95,
                "p99" => Stat::P99,
                "max" => Stat::Max,
                _ => return None,
            };
            Some(Metric {
                base,
                stat: Some(stat),
            })
        });
        parsed.ok_or_else(|| {
            invalid(format!(
                "unknown metric {s:?}: expected ttft, ttfo, tpot, e2e, tps or lag (optionally with \
                 _mean, _p50, _p90, _p95, _p99, _max), agg_tps, rps, goodput, error_rate, \
                 cost_per_request, cost_per_mtok, agg_tps_per_gpu, gpu_cost_per_mtok or \
                 joules_per_token"
            ))
        })
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.stat {
            Some(st) => write!(f, "{}_{}", self.base.name(), st.name()),
            None => f.write_str(self.base.name()),
        }
    }
}

impl Metric {
    /// The statistic `stat` of the per-request distribution `base` (`ttft_p95`).
    pub const fn of(base: Base, stat: Stat) -> Metric {
        Metric {
            base,
            stat: Some(stat),
        }
    }

    /// The level-wide figure `base` (`agg_tps`, `error_rate`).
    pub const fn level(base: Base) -> Metric {
        Metric { base, stat: None }
    }

    /// The metric's value at a level; `None` when the level has no such value (no successes,
    /// no SLOs for goodput).
    pub fn value(&self, l: &LevelStats) -> Option<f64> {
        let dist = |s: &Option<Summary>| {
            s.as_ref()
                .map(|s| self.stat.unwrap_or(Stat::P95).of(s))
                .filter(|v| v.is_finite())
        };
        match self.base {
            Base::Ttft => dist(&l.ttft_s),
            Base::Ttfo => dist(&l.ttfo_s),
            Base::Tpot => dist(&l.tpot_s),
            Base::E2e => dist(&l.e2e_s),
            Base::Tps => dist(&l.decode_tokens_per_s),
            Base::Lag => dist(&l.lag_s),
            Base::AggTps => Some(l.output_tokens_per_s),
            Base::Rps => Some(l.requests_per_s),
            Base::Goodput => l.goodput_rps,
            Base::ErrorRate => Some(l.error_rate),
            Base::CostPerRequest => l.cost_per_request,
            Base::CostPerMtok => l.cost_per_mtok,
            Base::AggTpsPerGpu => l.efficiency.output_tokens_per_s_per_gpu,
            Base::GpuCostPerMtok => l.efficiency.gpu_cost.as_ref().map(|c| c.cost_per_mtok),
            Base::JoulesPerToken => l
                .efficiency
                .energy
                .as_ref()
                .and_then(|e| e.joules_per_output_token),
        }
    }

    /// What its values measure.
    pub fn unit(&self) -> Unit {
        self.base.unit()
    }

    /// A value of this metric for people: `212.3 ms`, `41.7 tok/s`, `2.08 req/s`, `0.50%`.
    pub fn format(&self, v: f64) -> String {
        let unit = self.unit();
        match unit {
            Unit::Seconds => fmt_secs(v),
            Unit::Share => crate::units::fmt_pct(v),
            Unit::TokensPerSecond | Unit::TokensPerSecondPerGpu => {
                format!("{v:.1} {}", unit.symbol())
            }
            Unit::JoulesPerToken => format!("{v:.3} {}", unit.symbol()),
            Unit::Cost => fmt_cost(v),
            Unit::CostPerMtok => format!("{} {}", fmt_cost(v), unit.symbol()),
            Unit::RequestsPerSecond => format!("{v:.2} {}", unit.symbol()),
        }
    }

    /// Parses a threshold for this metric: a duration (`2s`, `50ms`, or bare seconds) for time
    /// metrics, a ratio (`1%` or `0.01`) for `error_rate`, a number otherwise.
    pub fn parse_value(&self, s: &str) -> Result<f64, CriteriaError> {
        let s = s.trim();
        if self.base.is_time() {
            parse_seconds(s)
        } else if self.base == Base::ErrorRate {
            parse_ratio(s)
        } else {
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| invalid(format!("{self}: {s:?} is not a number")))
        }
    }
}

/// Seconds from `2s`, `50ms`, `1m30s` (humantime) or a bare number of seconds.
pub fn parse_seconds(s: &str) -> Result<f64, CriteriaError> {
    let s = s.trim();
    if let Ok(v) = s.parse::<f64>()
        && v.is_finite()
        && v >= 0.0
    {
        return Ok(v);
    }
    humantime::parse_duration(s)
        .map(|d| d.as_secs_f64())
        .map_err(|e| invalid(format!("{s:?} is not a duration ({e})")))
}

/// A ratio from `10%` or `0.1`.
pub fn parse_ratio(s: &str) -> Result<f64, CriteriaError> {
    let s = s.trim();
    let (num, scale) = match s.strip_suffix('%') {
        Some(n) => (n.trim(), 0.01),
        None => (s, 1.0),
    };
    num.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| v * scale)
        .ok_or_else(|| invalid(format!("{s:?} is not a ratio (e.g. 10% or 0.1)")))
}

/// A comparison of a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl Op {
    fn holds(self, v: f64, t: f64) -> bool {
        match self {
            Op::Lt => v < t,
            Op::Le => v <= t,
            Op::Gt => v > t,
            Op::Ge => v >= t,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
}

/// A hard limit, e.g. `ttft_p95<2s`, `error_rate<1%`, `tps_p50>30`.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// The metric.
    pub metric: Metric,
    /// The comparison that must hold.
    pub op: Op,
    /// The threshold (seconds, ratio or number).
    pub value: f64,
}

impl FromStr for Limit {
    type Err = CriteriaError;

    fn from_str(s: &str) -> Result<Self, CriteriaError> {
        let i = s.find(['<', '>']).ok_or_else(|| {
            invalid(format!(
                "limit {s:?}: expected METRIC<VALUE or METRIC>VALUE"
            ))
        })?;
        let (name, rest) = s.split_at(i);
        let (op, value) = if let Some(v) = rest.strip_prefix("<=") {
            (Op::Le, v)
        } else if let Some(v) = rest.strip_prefix(">=") {
            (Op::Ge, v)
        } else if let Some(v) = rest.strip_prefix('<') {
            (Op::Lt, v)
        } else {
            (Op::Gt, &rest[1..])
        };
        let metric: Metric = name
            .parse()
            .map_err(|e: CriteriaError| invalid(format!("limit {s:?}: {e}")))?;
        let value = metric
            .parse_value(value)
            .map_err(|e| invalid(format!("limit {s:?}: {e}")))?;
        Ok(Limit { metric, op, value })
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {}",
            self.metric,
            self.op.as_str(),
            self.metric.format(self.value)
        )
    }
}

impl Limit {
    /// `None` when the level satisfies the limit, else why not (a missing value fails).
    pub fn violation(&self, l: &LevelStats) -> Option<String> {
        match self.metric.value(l) {
            Some(v) if self.op.holds(v, self.value) => None,
            Some(v) => Some(format!(
                "{} = {} (limit {self})",
                self.metric,
                self.metric.format(v)
            )),
            None => Some(format!("{} not measured (limit {self})", self.metric)),
        }
    }
}

/// Parses `ttft=0.5,tps=0.3` (one or more `METRIC=WEIGHT`).
pub fn parse_weights(s: &str) -> Result<Vec<(Metric, f64)>, CriteriaError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (m, w) = part
            .split_once('=')
            .ok_or_else(|| invalid(format!("weight {part:?}: expected METRIC=WEIGHT")))?;
        let metric: Metric = m.parse()?;
        let w = w
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|w| w.is_finite() && *w >= 0.0)
            .ok_or_else(|| invalid(format!("weight {part:?}: not a non-negative number")))?;
        out.push((metric, w));
    }
    Ok(out)
}

/// A per-request service-level objective for the goodput, e.g. `ttft=2s`, `tpot=50ms`, `tps=30`.
/// Latencies must be at most the threshold, `tps` at least.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slo {
    /// `Ttft`, `Ttfo`, `Tpot`, `E2e` or `Tps`.
    pub base: Base,
    /// Seconds, or tokens/s for `Tps`.
    pub value: f64,
}

impl FromStr for Slo {
    type Err = CriteriaError;

    fn from_str(s: &str) -> Result<Self, CriteriaError> {
        let (name, v) = s
            .split_once('=')
            .ok_or_else(|| invalid(format!("slo {s:?}: expected METRIC=VALUE, e.g. ttft=2s")))?;
        let base = Base::from_name(name.trim().to_ascii_lowercase().as_str())
            .filter(|b| {
                matches!(
                    b,
                    Base::Ttft | Base::Ttfo | Base::Tpot | Base::E2e | Base::Tps
                )
            })
            .ok_or_else(|| {
                invalid(format!(
                    "slo {s:?}: the metric must be ttft, ttfo, tpot, e2e or tps"
                ))
            })?;
        let value = Metric {
            base,
            stat: base.default_stat(),
        }
        .parse_value(v)
        .map_err(|e| invalid(format!("slo {s:?}: {e}")))?;
        Ok(Slo { base, value })
    }
}

impl fmt::Display for Slo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.base {
            Base::Tps => write!(f, "tps>={}", self.value),
            b => write!(f, "{}<={}", b.name(), fmt_secs(self.value)),
        }
    }
}

/// No SLO: a level folded without a goodput.
pub const NO_SLO: [Slo; 0] = [];

impl Objective for Slo {
    /// The request meets this SLO (a value it does not have does not count against it).
    fn name(&self) -> String {
        self.to_string()
    }

    /// Latencies from the start of the request count from its scheduled arrival in open loop
    /// ([`Sample::from_schedule`]): a request that left late missed what its user would have.
    fn met_by(&self, s: &Sample) -> bool {
        let v = match self.base {
            Base::Ttft => s.from_schedule(s.ttft_s),
            Base::Ttfo => s.from_schedule(s.ttfo_s),
            Base::Tpot => s.tpot_s,
            Base::E2e => s.from_schedule(s.e2e_s),
            Base::Tps => s.decode_tokens_per_s,
            _ => None,
        };
        match v {
            None => true,
            Some(v) if self.base == Base::Tps => v >= self.value,
            Some(v) => v <= self.value,
        }
    }
}

/// The knee rule: at the first level where aggregate tokens/s grew by less than `tps_growth` over
/// the previous level while TTFT p95 grew by more than `ttft_growth`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KneeRule {
    /// Relative growth of aggregate output tokens/s below which throughput has levelled off.
    pub tps_growth: f64,
    /// Relative growth of TTFT p95 above which latency has taken off.
    pub ttft_growth: f64,
}

impl Default for KneeRule {
    fn default() -> Self {
        KneeRule {
            tps_growth: 0.10,
            ttft_growth: 0.50,
        }
    }
}

/// Everything that judges results: limits, weights, SLOs, knee rule, regression tolerances.
#[derive(Debug, Clone, PartialEq)]
pub struct Criteria {
    /// Hard limits; a model failing one is not ranked.
    pub limits: Vec<Limit>,
    /// Weights of the score (empty: the default `ttft=0.5,tps=0.3,tpot=0.2`).
    pub weights: Vec<(Metric, f64)>,
    /// Per-request SLOs of the goodput.
    pub slos: Vec<Slo>,
    /// The knee rule.
    pub knee: KneeRule,
    /// Relative tolerance of the regression check.
    pub tolerance: f64,
    /// Absolute tolerance of the error rate in the regression check.
    pub tolerance_error_rate: f64,
    /// The family-wise confidence of the regression check: the chance that a comparison of two
    /// runs of one server calls any of its values a significant change stays below
    /// `1 − confidence` (default 0.95).
    pub confidence: f64,
    /// The level (concurrency, or rate in open loop) at which models are selected; `None`: the
    /// answer's own load ([`super::answer::answer_load`]), or to [`super::select::select`] each
    /// model's last level.
    pub select_at: Option<f64>,
    /// `--rank-substituted`: rank a model whose answers came from another model too (by
    /// default it is not ranked: [`super::served::judged`]).
    pub rank_substituted: bool,
}

impl Default for Criteria {
    fn default() -> Self {
        Criteria {
            limits: Vec::new(),
            weights: Vec::new(),
            slos: Vec::new(),
            knee: KneeRule::default(),
            tolerance: 0.10,
            tolerance_error_rate: 0.01,
            confidence: DEFAULT_CONFIDENCE,
            select_at: None,
            rank_substituted: false,
        }
    }
}

/// The criteria a run judged by, as its JSON report records them: exactly (canonical texts with
/// the numbers in full), so that `bench merge` judges the union of shards as the run would have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriteriaRecord {
    /// Hard limits, e.g. `ttft_p95<2`.
    pub limits: Vec<String>,
    /// Weights as given (empty: the default ones).
    pub weights: Vec<(String, f64)>,
    /// Per-request SLOs, e.g. `ttft=2`.
    pub slo: Vec<String>,
    /// The selection level.
    #[serde(default)]
    pub select_at: Option<f64>,
    /// Relative tolerance of the regression check.
    pub tolerance: f64,
    /// Absolute tolerance of the error rate in the regression check.
    pub tolerance_error_rate: f64,
    /// The family-wise confidence of the regression check (0.95 in reports of older versions).
    #[serde(default = "default_confidence")]
    pub confidence: f64,
    /// `--rank-substituted`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rank_substituted: bool,
}

/// The regression check's family-wise confidence unless told otherwise.
pub const DEFAULT_CONFIDENCE: f64 = 0.95;

fn default_confidence() -> f64 {
    DEFAULT_CONFIDENCE
}

/// A confidence from `95%` or `0.95`: at least 50%, below 100%.
///
/// # Errors
/// [`CriteriaError::Invalid`] for anything else.
pub fn parse_confidence(s: &str) -> Result<f64, CriteriaError> {
    let c = parse_ratio(s)?;
    if (0.5..1.0).contains(&c) {
        Ok(c)
    } else {
        Err(invalid(format!(
            "confidence {s:?} must be at least 50% and below 100% (e.g. 95%)"
        )))
    }
}

impl Criteria {
    /// What a report records of these criteria (see [`CriteriaRecord`]; the knee rule is
    /// recorded apart).
    pub fn record(&self) -> CriteriaRecord {
        CriteriaRecord {
            limits: self
                .limits
                .iter()
                .map(|l| format!("{}{}{}", l.metric, l.op.as_str(), l.value))
                .collect(),
            weights: self
                .weights
                .iter()
                .map(|(m, w)| (m.to_string(), *w))
                .collect(),
            slo: self
                .slos
                .iter()
                .map(|s| format!("{}={}", s.base.name(), s.value))
                .collect(),
            select_at: self.select_at,
            tolerance: self.tolerance,
            tolerance_error_rate: self.tolerance_error_rate,
            confidence: self.confidence,
            rank_substituted: self.rank_substituted,
        }
    }

    /// The criteria a report recorded, with its knee rule.
    ///
    /// # Errors
    /// [`CriteriaError`] when the record does not parse (a hand-edited report).
    pub fn from_record(r: &CriteriaRecord, knee: KneeRule) -> Result<Criteria, CriteriaError> {
        let mut weights = Vec::new();
        for (m, w) in &r.weights {
            weights.extend(parse_weights(&format!("{m}={w}"))?);
        }
        Ok(Criteria {
            limits: r
                .limits
                .iter()
                .map(|l| l.parse())
                .collect::<Result<_, _>>()?,
            weights,
            slos: r.slo.iter().map(|s| s.parse()).collect::<Result<_, _>>()?,
            knee,
            tolerance: r.tolerance,
            tolerance_error_rate: r.tolerance_error_rate,
            confidence: parse_confidence(&r.confidence.to_string())?,
            select_at: r.select_at,
            rank_substituted: r.rank_substituted,
        })
    }

    /// The weights in force: the configured ones, else `ttft=0.5,tps=0.3,tpot=0.2`.
    pub fn effective_weights(&self) -> Vec<(Metric, f64)> {
        if self.weights.is_empty() {
            parse_weights("ttft=0.5,tps=0.3,tpot=0.2").unwrap_or_default()
        } else {
            self.weights.clone()
        }
    }
}

/// A number or a string in the bench file (`30`, `2s`, `10%`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Scalar {
    Num(f64),
    Text(String),
}

impl Scalar {
    fn text(&self) -> String {
        match self {
            Scalar::Num(n) => n.to_string(),
            Scalar::Text(s) => s.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KneeFile {
    tps_growth: Option<Scalar>,
    ttft_growth: Option<Scalar>,
}

/// The `--bench.file` YAML.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BenchFile {
    #[serde(default)]
    limits: Vec<String>,
    #[serde(default)]
    weights: BTreeMap<String, f64>,
    #[serde(default)]
    slo: BTreeMap<String, Scalar>,
    knee: Option<KneeFile>,
    tolerance: Option<Scalar>,
    tolerance_error_rate: Option<Scalar>,
    confidence: Option<Scalar>,
    select_at: Option<f64>,
}

impl Criteria {
    /// Parses a bench file's text (see `docs/bench.md`), every problem listed.
    ///
    /// # Errors
    /// [`CriteriaError::File`] naming the file `origin`.
    pub fn parse_file(text: &str, origin: &str) -> Result<Criteria, CriteriaError> {
        let file_err = |reason: String| CriteriaError::File {
            path: origin.to_owned(),
            reason,
        };
        let f: BenchFile = serde_saphyr::from_str(text).map_err(|e| file_err(e.to_string()))?;
        let mut c = Criteria::default();
        let mut problems = Vec::new();
        let mut keep = |r: Result<(), CriteriaError>| {
            if let Err(e) = r {
                problems.push(e.to_string());
            }
        };
        for l in &f.limits {
            keep(l.parse().map(|l| c.limits.push(l)));
        }
        for (m, w) in &f.weights {
            keep(parse_weights(&format!("{m}={w}")).map(|w| c.weights.extend(w)));
        }
        for (m, v) in &f.slo {
            keep(format!("{m}={}", v.text()).parse().map(|s| c.slos.push(s)));
        }
        if let Some(k) = &f.knee {
            if let Some(g) = &k.tps_growth {
                keep(parse_ratio(&g.text()).map(|g| c.knee.tps_growth = g));
            }
            if let Some(g) = &k.ttft_growth {
                keep(parse_ratio(&g.text()).map(|g| c.knee.ttft_growth = g));
            }
        }
        if let Some(t) = &f.tolerance {
            keep(parse_ratio(&t.text()).map(|t| c.tolerance = t));
        }
        if let Some(t) = &f.tolerance_error_rate {
            keep(parse_ratio(&t.text()).map(|t| c.tolerance_error_rate = t));
        }
        if let Some(t) = &f.confidence {
            keep(parse_confidence(&t.text()).map(|t| c.confidence = t));
        }
        c.select_at = f.select_at;
        if problems.is_empty() {
            Ok(c)
        } else {
            Err(file_err(problems.join("; ")))
        }
    }

    /// Reads a bench file.
    ///
    /// # Errors
    /// [`CriteriaError::Io`] or [`CriteriaError::File`].
    pub fn load_file(path: &Path) -> Result<Criteria, CriteriaError> {
        let text = crate::config::read_input_file(path).map_err(|e| CriteriaError::Io {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Criteria::parse_file(&text, &path.display().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report keys values by metric: written by its name, in name order (as the string keys
    /// of older reports were), read back from it; a name no metric has is refused.
    #[test]
    fn a_metric_key_is_written_and_read_by_its_name() {
        let weights: BTreeMap<Metric, f64> = parse_weights("ttft=0.5,tps=0.3,tpot=0.2")
            .unwrap()
            .into_iter()
            .collect();
        let json = serde_json::to_string(&weights).unwrap();
        assert_eq!(json, r#"{"tpot_p95":0.2,"tps_p50":0.3,"ttft_p95":0.5}"#);
        assert_eq!(
            serde_json::from_str::<BTreeMap<Metric, f64>>(&json).unwrap(),
            weights
        );
        assert!(serde_json::from_str::<Metric>(r#""ttft_p42""#).is_err());
        let m: Metric = "error_rate".parse().unwrap();
        assert_eq!((m.unit(), m.format(0.005)), (Unit::Share, "0.50%".into()));
        let m: Metric = "agg_tps".parse().unwrap();
        assert_eq!(m.unit().symbol(), "tok/s");
    }

    /// `bench merge` judges by what the shards' reports recorded: the record must give back the
    /// same criteria, numbers in full (a limit of 1/3 s stays 1/3 s, not a rounded text).
    #[test]
    fn criteria_records_round_trip_exactly() {
        let mut c = Criteria {
            limits: [
                "ttft_p95<2s",
                "tpot_p50<=50ms",
                "error_rate<1%",
                "tps_p50>30",
                "rps>=2.5",
            ]
            .iter()
            .map(|l| l.parse().unwrap())
            .collect(),
            weights: parse_weights("ttft=0.5,agg_tps=0.25,error_rate=0.25").unwrap(),
            slos: vec!["ttft=2s".parse().unwrap(), "tps=30".parse().unwrap()],
            select_at: Some(8.0),
            tolerance: 0.05,
            tolerance_error_rate: 0.02,
            confidence: 0.99,
            ..Criteria::default()
        };
        c.limits[0].value = 1.0 / 3.0;
        let knee = KneeRule {
            tps_growth: 0.2,
            ttft_growth: 0.7,
        };
        c.knee = knee;
        let r = c.record();
        assert_eq!(r.limits[0], format!("ttft_p95<{}", 1.0 / 3.0));
        let json = serde_json::to_string(&r).unwrap();
        let back: CriteriaRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(Criteria::from_record(&back, knee).unwrap(), c);
        assert_eq!(
            Criteria::from_record(&Criteria::default().record(), KneeRule::default()).unwrap(),
            Criteria::default()
        );
        let mut bad = r.clone();
        bad.limits.push("nonsense<1".into());
        assert!(Criteria::from_record(&bad, knee).is_err());
    }

    #[test]
    fn metric_names_round_trip() {
        for (s, shown) in [
            ("ttft", "ttft_p95"),
            ("ttft_p50", "ttft_p50"),
            ("TPS", "tps_p50"),
            ("tpot_mean", "tpot_mean"),
            ("agg_tps", "agg_tps"),
            ("error_rate", "error_rate"),
            ("lag", "lag_p99"),
            ("e2e_max", "e2e_max"),
        ] {
            assert_eq!(s.parse::<Metric>().unwrap().to_string(), shown, "{s}");
        }
        assert!("agg_tps_p50".parse::<Metric>().is_err());
        for (s, shown) in [
            ("cost_per_request", "cost_per_request"),
            ("cost", "cost_per_request"),
            ("COST_PER_MTOK", "cost_per_mtok"),
        ] {
            let m: Metric = s.parse().unwrap();
            assert_eq!(m.to_string(), shown);
            assert!(m.base.lower_is_better() && m.stat.is_none());
        }
        assert!("cost_per_mtok_p95".parse::<Metric>().is_err());
        assert!("ttft_p42".parse::<Metric>().is_err());
        assert!("latency".parse::<Metric>().is_err());
    }

    #[test]
    fn limits_parse_with_units() {
        let l: Limit = "ttft_p95<2s".parse().unwrap();
        assert_eq!((l.op, l.value), (Op::Lt, 2.0));
        let l: Limit = "tpot<=50ms".parse().unwrap();
        assert_eq!((l.op, l.value), (Op::Le, 0.05));
        let l: Limit = "error_rate<1%".parse().unwrap();
        assert_eq!(l.value, 0.01);
        let l: Limit = "error_rate<0.02".parse().unwrap();
        assert_eq!(l.value, 0.02);
        let l: Limit = "tps_p50>30".parse().unwrap();
        assert_eq!((l.op, l.value), (Op::Gt, 30.0));
        assert_eq!(l.to_string(), "tps_p50 > 30.0 tok/s");
        let l: Limit = "cost_per_request<=0.01".parse().unwrap();
        assert_eq!((l.op, l.value), (Op::Le, 0.01));
        assert_eq!(l.to_string(), "cost_per_request <= 0.01");
        let l: Limit = "cost_per_mtok<12.5".parse().unwrap();
        assert_eq!(l.to_string(), "cost_per_mtok < 12.5 per Mtok");
        assert!("cost_per_request<cheap".parse::<Limit>().is_err());
        assert_eq!(
            [0.007, 0.000_123_46, 35.0, 1234.5678, 0.0].map(fmt_cost),
            ["0.007", "0.0001235", "35", "1235", "0"]
        );
        assert!("ttft_p95=2s".parse::<Limit>().is_err());
        assert!("ttft_p95<fast".parse::<Limit>().is_err());
    }

    #[test]
    fn weights_and_slos() {
        let w = parse_weights("ttft=0.5, tps=0.3,tpot=0.2").unwrap();
        assert_eq!(w.len(), 3);
        assert_eq!(w[1].0.to_string(), "tps_p50");
        assert!(parse_weights("ttft").is_err());
        assert!(parse_weights("ttft=-1").is_err());
        let s: Slo = "tpot=50ms".parse().unwrap();
        assert_eq!((s.base, s.value), (Base::Tpot, 0.05));
        let s: Slo = "tps=30".parse().unwrap();
        assert_eq!(s.to_string(), "tps>=30");
        assert!("rps=3".parse::<Slo>().is_err());
    }

    #[test]
    fn ratios() {
        assert_eq!(parse_ratio("10%").unwrap(), 0.1);
        assert_eq!(parse_ratio("0.25").unwrap(), 0.25);
        assert!(parse_ratio("ten").is_err());
        assert!(parse_ratio("-1").is_err());
    }

    #[test]
    fn bench_file_parses_and_rejects_unknown_keys() {
        let c = Criteria::parse_file(
            "limits: [\"ttft_p95<2s\", \"error_rate<1%\"]\nweights: {ttft: 0.5, tps: 0.5}\n\
             slo: {ttft: 2s, tps: 30}\nknee: {tps_growth: 5%, ttft_growth: 1.0}\n\
             tolerance: 20%\nselect_at: 8\n",
            "b.yml",
        )
        .unwrap();
        assert_eq!(c.limits.len(), 2);
        assert_eq!(c.weights.len(), 2);
        assert_eq!(c.slos.len(), 2);
        assert_eq!(c.knee.tps_growth, 0.05);
        assert_eq!(c.knee.ttft_growth, 1.0);
        assert_eq!(c.tolerance, 0.2);
        assert_eq!(c.select_at, Some(8.0));
        let e = Criteria::parse_file("limitz: []\n", "b.yml").unwrap_err();
        assert!(e.to_string().contains("limitz"), "{e}");
        let e = Criteria::parse_file("limits: [\"ttft<soon\"]\n", "b.yml").unwrap_err();
        assert!(e.to_string().contains("ttft<soon"), "{e}");
    }
}
