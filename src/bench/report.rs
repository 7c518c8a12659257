//! The bench report (pure): the typed schema a run produces and every renderer reads
//! ([`crate::render`] writes it as a table, Markdown, CSV, JSON and HTML). One model's sweep is a
//! [`ModelReport`]; the run is a [`Report`].

use super::criteria::{CriteriaRecord, KneeRule, Metric};
use super::stats::{CapacityLimit, LevelKey, LevelStats, Load};
use crate::config::Price;
use crate::protocol::Api;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One model's sweep (of one prompt, when the run sweeps several).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelReport {
    /// The model name sent.
    pub model: String,
    /// The config's target it was sent to (absent in reports of older versions).
    #[serde(default)]
    pub target: Option<String>,
    /// Its price at that target, when the config gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    /// The GPUs that serve it: its target's `gpus:`, else the device count of its DCGM metrics
    /// (absent: neither, and no per-GPU figure is given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<super::efficiency::GpuCount>,
    /// What one of those GPUs costs per hour (its target's `gpu_hour_price:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hour_price: Option<f64>,
    /// Achieved input length: mean input tokens of the successful requests that reported them.
    #[serde(default)]
    pub input_tokens_mean: Option<f64>,
    /// Achieved output length: mean output tokens (N) of the successful requests.
    #[serde(default)]
    pub output_tokens_mean: Option<f64>,
    /// One entry per level, in the order run (by load when a capacity search or the knee's
    /// `--knee-levels` added levels).
    pub levels: Vec<LevelStats>,
    /// Where scaling stopped, if it did within the sweep.
    #[serde(default)]
    pub knee: Option<Knee>,
    /// The prompt of this sweep, when the run has several (`--prompt a,b`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The calibration that sized this sweep's prompts (requests, seconds, the fit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<crate::probe::Calibration>,
    /// `--find-capacity`: the highest load within the SLOs at the target attainment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<super::capacity::Capacity>,
    /// Why the sweep ended before its last planned level (clearly past saturation, or its load
    /// stopped because its requests failed with an error more load cannot change), and the
    /// levels it left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<String>,
    /// The connectivity check before its first level (absent with `--no-check`, and in reports
    /// of older versions): a series whose check failed has no level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<super::health::Check>,
}

impl ModelReport {
    /// Puts the levels in load order (concurrency, or rate in open loop), as a capacity search
    /// and a knee's added levels leave them.
    pub fn sort_levels_by_load(&mut self) {
        self.levels.sort_by(|a, b| a.key.x().total_cmp(&b.key.x()));
    }

    /// The sweep's name in tables and plots: the model, with the prompt when there are several.
    pub fn name(&self) -> String {
        match &self.prompt {
            Some(p) => format!("{} · {p}", self.model),
            None => self.model.clone(),
        }
    }
}

/// Closed loop (a fixed number of streams) or open loop (an arrival rate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadKind {
    /// `closed`: each level keeps a fixed number of requests in flight (its concurrency).
    Closed,
    /// `open`: each level's requests arrive at a rate, whether earlier ones ended or not.
    Open,
}

impl LoadKind {
    /// Open loop when `open`, else closed.
    pub fn of(open: bool) -> LoadKind {
        if open {
            LoadKind::Open
        } else {
            LoadKind::Closed
        }
    }

    /// True for open loop.
    pub fn is_open(self) -> bool {
        self == LoadKind::Open
    }

    /// `closed` or `open`, as the report writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            LoadKind::Closed => "closed",
            LoadKind::Open => "open",
        }
    }
}

/// How load was generated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadMode {
    /// Closed or open loop.
    pub kind: LoadKind,
    /// Open loop: `poisson`, `gamma` or `constant`.
    #[serde(default)]
    pub arrival: Option<String>,
    /// Open loop with `--burstiness K`: the gamma gaps' shape K (their coefficient of variation
    /// is `1/sqrt(K)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burstiness: Option<f64>,
    /// Seed of the Poisson or gamma arrivals.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Measured requests per level (count mode).
    #[serde(default)]
    pub requests_per_level: Option<u64>,
    /// Seconds of sending per level (duration mode).
    #[serde(default)]
    pub duration_per_level_s: Option<f64>,
    /// Unmeasured requests before each level.
    #[serde(default)]
    pub warmup: u64,
    /// `--warmup-duration`: seconds of unmeasured requests at each level's own load before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_s: Option<f64>,
    /// `--ramp-up`: how each open-loop level's rate rose to its rate (e.g. `linear from 5/s over
    /// 2 s`); its levels carry `per_second`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_up: Option<String>,
    /// A trace replay: what of which trace was sent, at what pace (`arrival` is `trace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::workload::trace::Replayed>,
    /// Closed loop: the first sends of each level's workers were spread over this, s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_s: Option<f64>,
    /// Each level's workers of `connection: reuse` targets had their connections opened first
    /// (one unmeasured `GET /models` each; `--no-prewarm` turns it off).
    #[serde(default)]
    pub prewarm: bool,
    /// A session workload: each level's load is sessions (closed loop: concurrent sessions;
    /// open loop: sessions started per second), and how its sessions are sent and judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<super::session::SessionMode>,
}

/// The API protocol of a run (its first model's target's), or of each run a combination was
/// made from, once each in order; written as its name, joined by `, ` (`openai-chat`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Apis(pub Vec<Api>);

impl Apis {
    /// One protocol.
    pub fn one(api: Api) -> Apis {
        Apis(vec![api])
    }
}

impl std::fmt::Display for Apis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, api) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(api.as_str())?;
        }
        Ok(())
    }
}

impl Serialize for Apis {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Apis {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::IntoDeserializer;
        let names = std::borrow::Cow::<str>::deserialize(d)?;
        names
            .split(", ")
            .map(|name| {
                Api::deserialize(name.into_deserializer())
                    .map_err(|e: serde::de::value::Error| serde::de::Error::custom(e))
            })
            .collect::<Result<_, _>>()
            .map(Apis)
    }
}

/// A whole bench run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// `tokenprobe`.
    pub tool: String,
    /// tokenprobe's version.
    pub version: String,
    /// When the run started (RFC 3339, UTC).
    pub started_at: String,
    /// The command line that ran the bench, secrets redacted (absent in older reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The config's target name; every model's, in order and joined by `, `, when `--models`
    /// names several targets.
    pub target: String,
    /// Their base URLs, likewise.
    pub base_url: String,
    /// Its protocol (a combination of runs: each of theirs).
    pub api: Apis,
    /// The prompt's name.
    pub prompt: String,
    /// The prompt's output cap.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// What the prompt sends, in words (its kind and lengths, a hash of its messages; see
    /// [`super::baseline::describe`]): a baseline must have sent the same (absent in reports of
    /// older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// How load was generated.
    pub mode: LoadMode,
    /// The goodput SLOs, as text.
    #[serde(default)]
    pub slo: Vec<String>,
    /// The knee rule used.
    pub knee_rule: KneeRule,
    /// One sweep per model.
    pub models: Vec<ModelReport>,
    /// The run's one answer, when judged: the limits and the ranking at one stated load
    /// (`selection.load` says why that load).
    #[serde(default)]
    pub selection: Option<Selection>,
    /// The same limits and weights at the highest load every model ran, when the answer is
    /// stated at another load: a view at that load, not a second answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub also_at: Option<Selection>,
    /// With SLOs: each model's capacity within them and what limited it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_capacity: Option<SloCapacity>,
    /// Comparison with `--baseline`.
    #[serde(default)]
    pub comparison: Option<Comparison>,
    /// Which run this is and, for a shard, which part of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunInfo>,
    /// What the run was judged by (so that a merge of its shards judges alike).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub criteria: Option<CriteriaRecord>,
    /// What the client and server numbers mean together (the findings' rules).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
    /// The run was stopped before its end: by which signal, and the level left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interrupted>,
    /// A combination of runs (`bench report a.json b.json`): the reports it was made from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub combined_from: Vec<String>,
    /// Tokens/s per user against tokens/s per GPU: every level a point, the Pareto frontier
    /// marked (absent when no model has a GPU count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontier: Option<super::frontier::Frontier>,
    /// What served the run and what sent it, recorded without asking (absent in reports of
    /// older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<super::provenance::Provenance>,
}

/// How a run that was stopped by a signal ended: the levels it finished are in the report, and
/// the one that was running, marked partial with the requests that finished; a level the signal
/// came before it sent anything is left out and named here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interrupted {
    /// `SIGINT` or `SIGTERM`.
    pub signal: String,
    /// The level that was running (`model @ load`), left out (it sent nothing, or had not ended
    /// the wrap-up's time after the signal); absent when it was kept partial, and between levels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level_left_out: Option<String>,
}

/// A run's identity: every shard of one run has the same id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// From `--run-id`, else computed alike on every shard from what defines the run and its
    /// `--start-at` (without `--start-at`, unique to the invocation).
    pub id: String,
    /// This report's shard, `i/N` (absent for a run of one process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// `--start-at`: the shared start of the first level (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    /// A merged report: the shards it was computed from, `i/N` each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_from: Vec<String>,
}

/// True when the models were sent to more than one target.
pub fn mixed_targets(models: &[ModelReport]) -> bool {
    models.iter().any(|m| m.target != models[0].target)
}

/// The names models are judged and shown by: `target/model` when their targets differ, else the
/// model, each with ` · prompt` in a prompt sweep (one per series, in order), and
/// ` [answered by NAME]` when another model answered it ([`super::served::answered_by`]).
pub fn model_names(models: &[ModelReport]) -> Vec<String> {
    let mixed = mixed_targets(models);
    models
        .iter()
        .map(|m| match (&m.target, mixed) {
            (Some(t), true) => format!("{t}/{}", m.name()),
            _ => m.name(),
        })
        .zip(models)
        .map(|(name, m)| name + &super::served::answered_by(m))
        .collect()
}

// What judging a run adds to it (the selection's rules and the findings' make these): its knees,
// the selection, the comparison with a baseline, and the findings.

/// Where a sweep stopped scaling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    /// Index of the knee level in the model's levels.
    pub index: usize,
    /// The knee level's load.
    pub level: LevelKey,
    /// Relative growth of aggregate output tokens/s over the previous level.
    pub agg_tps_growth: f64,
    /// Relative growth of TTFT p95 over the previous level.
    pub ttft_p95_growth: f64,
    /// The server's requests waiting (mean) at the level before and at the knee, when the
    /// server's queue, not TTFT p95, is what marked it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_waiting: Option<[f64; 2]>,
    /// The capacity ceiling: the last level before saturation (the one before the knee; absent in
    /// reports of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<LevelKey>,
    /// Where the hinge fit of throughput against load bends, when it lies between the ceiling
    /// and the knee (concurrency, or rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<f64>,
    /// What limited throughput there (queueing, shared compute, errors), from the ceiling to
    /// the knee.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limited_by: Option<Limiter>,
}

/// Each model's capacity within the SLOs at the target attainment (the capacity search's, or a
/// fixed sweep's highest level within them), with what limited it. Listed in the models' order:
/// capacities are facts beside the answer, not a second ranking.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloCapacity {
    /// The SLO attainment a load must reach (the capacity search's target, else 95%).
    pub target_attainment: f64,
    /// One per model, in the models' order.
    pub models: Vec<ModelCapacity>,
}

/// One model's capacity within the SLOs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCapacity {
    /// The model, as shown.
    pub model: String,
    /// The highest level within the SLOs (absent: none of the levels run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<LevelKey>,
    /// The SLO attainment there, and its 95% interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attainment: Option<f64>,
    /// Its interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attainment_interval: Option<[f64; 2]>,
    /// The level where the SLOs failed (the search's `failed_at`; in a fixed sweep the first
    /// level run below the target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<LevelKey>,
    /// The attainment there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_attainment: Option<f64>,
    /// Its interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_interval: Option<[f64; 2]>,
    /// What the failing level missed most: an objective (`ttft<=2.00 s`), or `errors`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<CapacityLimit>,
    /// Whether the two intervals decide the capacity at 95% confidence
    /// ([`super::capacity::clear`]).
    pub clear: bool,
    /// What made the failing level miss, against the capacity's level (queueing, shared
    /// compute, errors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limited_by: Option<Limiter>,
}

/// What limited a model at a load: the server's queue, the compute its running requests share,
/// or errors; read from the server's view when the levels have one, else from the client's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limiter {
    /// The cause.
    pub cause: Cause,
    /// Whose figures say so.
    pub view: View,
    /// Those figures, in words (from the level before to the level limited).
    pub evidence: String,
}

/// What limited a load ([`Limiter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// Requests waited before the server started them.
    Queueing,
    /// The running requests shared the server's compute: latency grew without a queue.
    SharedCompute,
    /// The error rate rose.
    Errors,
    /// Latency grew, and neither view can tell which of the two above made it.
    Unknown,
}

impl Cause {
    /// In words: `queueing`, `shared compute`, `errors`, `latency (cause unknown)`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Queueing => "queueing",
            Cause::SharedCompute => "shared compute",
            Cause::Errors => "errors",
            Cause::Unknown => "latency (cause unknown)",
        }
    }
}

/// Whose figures a [`Limiter`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum View {
    /// The server's own metrics (its queue, its running requests).
    Server,
    /// The client's figures alone (TTFT, TPOT, errors).
    Client,
}

impl View {
    /// `from the server's view`, `from the client's view`.
    pub fn as_str(self) -> &'static str {
        match self {
            View::Server => "from the server's view",
            View::Client => "from the client's view",
        }
    }
}

/// Why the answer is stated at its load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerLoad {
    /// Asked for (`--select-at`, or the bench file's `select_at`).
    Asked,
    /// The highest load every model ran within the SLOs at the target attainment.
    WithinSlos,
    /// The highest load every model ran (no SLOs, or no load every model ran within them).
    HighestCommon,
    /// Each model's last level: there is no load every model ran.
    LastLevels,
}

/// A ranked model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ranked {
    /// 1 = best; tied models (equal scores) share a rank, and the next rank skips theirs.
    pub rank: usize,
    /// The model.
    pub model: String,
    /// Weighted score in `[0, 1]`.
    pub score: f64,
    /// The weighted metrics' values.
    pub values: BTreeMap<Metric, Option<f64>>,
    /// Their normalized values in `[0, 1]` (1 = best among the eligible models).
    pub normalized: BTreeMap<Metric, f64>,
}

/// A model that failed a hard limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rejected {
    /// The model.
    pub model: String,
    /// Every limit it failed, with its value.
    pub reasons: Vec<String>,
    /// The highest level of its sweep at which it meets every limit (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passes_at: Option<Load>,
    /// Each limit it failed, with its distance to it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub misses: Vec<Miss>,
    /// When no model passes every limit: its place by distance to the limits, 1 = closest
    /// (fewest limits failed, then the smallest largest miss; ties share a place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closest: Option<usize>,
    /// When no model passes every limit: its weighted score among the models measured at the
    /// load (what the score would say, not a pass).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

/// A limit a model failed, and how far it is from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Miss {
    /// The limit, as text.
    pub limit: String,
    /// The model's value (absent: not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// The relative miss `|value / limit − 1|` (for a limit of 0, `|value|`); absent when not
    /// measured, which is farther than any miss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distance: Option<f64>,
}

/// The level a selection is read at: one load, or each model's last level.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SelectedLevel {
    /// Every model's level at this load.
    At(Load),
    /// Each model's last level (written `last`).
    Last,
}

impl std::fmt::Display for SelectedLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SelectedLevel::At(l) => l.fmt(f),
            SelectedLevel::Last => f.write_str("last"),
        }
    }
}

impl Serialize for SelectedLevel {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SelectedLevel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let label = std::borrow::Cow::<str>::deserialize(d)?;
        match label.as_ref() {
            // Older versions left it empty when no model had a level.
            "last" | "" => Ok(SelectedLevel::Last),
            l => l
                .parse()
                .map(SelectedLevel::At)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// The outcome of selection at one level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    /// The level selection used (`8`, or `4/s` in open loop; `last` at each model's last
    /// level).
    pub level: SelectedLevel,
    /// Why that load (absent in reports of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<AnswerLoad>,
    /// The hard limits, as text.
    pub limits: Vec<String>,
    /// The weights, by metric.
    pub weights: BTreeMap<Metric, f64>,
    /// Models that passed every limit, best first.
    pub ranked: Vec<Ranked>,
    /// Models that failed a limit.
    pub rejected: Vec<Rejected>,
    /// The models' achieved input or output lengths differ by more than
    /// the selection's length tolerance (the sentence saying so), so the ranking compares
    /// different work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_mismatch: Option<String>,
}

/// What the gate made of one value compared with the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Worse beyond the tolerance, and significantly so: its test of "worse by more than the
    /// tolerance" passes after Holm's adjustment over every value judged. The run exits 3.
    Regression,
    /// Worse beyond the tolerance, but the two runs' samples cannot say it is, at the confidence
    /// asked: not a failure.
    Inconclusive,
    /// No worse than the tolerance allows (better, unchanged, or worse by less).
    WithinTolerance,
    /// Not tested (`not_judged` says why): never a failure.
    NotJudged,
}

impl Verdict {
    /// How outputs name it.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Regression => "REGRESSION",
            Verdict::Inconclusive => "inconclusive",
            Verdict::WithinTolerance => "within tolerance",
            Verdict::NotJudged => "not judged",
        }
    }
}

/// One value compared with the baseline (in `regressions`: one the gate found regressed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Regression {
    /// The model.
    pub model: String,
    /// The level.
    pub level: Load,
    /// The metric.
    pub metric: Metric,
    /// The baseline's value.
    pub baseline: f64,
    /// This run's value.
    pub current: f64,
    /// Relative change, `current / baseline − 1` (for `error_rate`: the absolute difference).
    pub change: f64,
    /// The gate's verdict (absent in reports of older versions, which judged by the tolerance
    /// alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// The 95% interval of the change, in `change`'s terms (relative; for `error_rate`
    /// absolute), except for `goodput`: the interval of the difference of the two SLO
    /// attainments it is judged by (absolute). Not adjusted for the many values compared; absent
    /// when not judged or when the values are too few to bound it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<[f64; 2]>,
    /// The one-sided p-value of the test that it got worse by more than the tolerance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p_value: Option<f64>,
    /// That p-value adjusted (Holm) over every value the comparison judged: significant when at
    /// most `1 − confidence`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p_holm: Option<f64>,
    /// The test that judged it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<String>,
    /// Why it was not judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_judged: Option<String>,
}

/// The comparison with a baseline run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The baseline file.
    pub baseline: String,
    /// Relative tolerance.
    pub tolerance: f64,
    /// Absolute tolerance of the error rate.
    pub tolerance_error_rate: f64,
    /// The family-wise confidence of the verdicts (absent in reports of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    /// (model, level, metric) values compared.
    pub compared: u64,
    /// Of which judged (tested): the family Holm's adjustment is over (absent in reports of
    /// older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judged: Option<u64>,
    /// Values whose verdict is a regression (older versions: worse beyond the tolerance).
    pub regressions: Vec<Regression>,
    /// (model, level) pairs of this run that the baseline does not have.
    pub not_in_baseline: Vec<String>,
    /// What changed in what served the runs (server version, GPUs, settings, fingerprints),
    /// from the two runs' provenance: read beside a regression.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    /// Every value compared, with the baseline's beside it and its verdict (absent in older
    /// reports).
    #[serde(default)]
    pub values: Vec<Regression>,
}

impl Comparison {
    /// The values with `verdict`.
    pub fn with(&self, verdict: Verdict) -> impl Iterator<Item = &Regression> {
        self.values
            .iter()
            .filter(move |v| v.verdict == Some(verdict))
    }
}

/// What a finding is about ([`super::findings`] says when each fires); written as its code,
/// `queueing`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FindingCode {
    /// `client_bound`: the client could not measure the level.
    ClientBound,
    /// `gpu_underutilized`: the GPU was mostly idle at the knee.
    GpuUnderutilized,
    /// `memory_pressure`: GPU memory, the KV cache or host memory was nearly full.
    MemoryPressure,
    /// `queueing`: the server's queue grew while throughput did not.
    Queueing,
    /// `ttft_growth`: TTFT grew well past the lowest load's.
    TtftGrowth,
    /// `long_tail`: p95 far above p50.
    LongTail,
    /// `errors_past_knee`: requests failed past the knee.
    ErrorsPastKnee,
    /// `client_server_gap`: the client's and the server's figures differ.
    ClientServerGap,
    /// A code this version does not know (a report of another version), kept as written.
    Other(String),
}

impl FindingCode {
    const KNOWN: [FindingCode; 8] = [
        FindingCode::ClientBound,
        FindingCode::GpuUnderutilized,
        FindingCode::MemoryPressure,
        FindingCode::Queueing,
        FindingCode::TtftGrowth,
        FindingCode::LongTail,
        FindingCode::ErrorsPastKnee,
        FindingCode::ClientServerGap,
    ];

    /// The code as the report writes it.
    pub fn as_str(&self) -> &str {
        match self {
            FindingCode::ClientBound => "client_bound",
            FindingCode::GpuUnderutilized => "gpu_underutilized",
            FindingCode::MemoryPressure => "memory_pressure",
            FindingCode::Queueing => "queueing",
            FindingCode::TtftGrowth => "ttft_growth",
            FindingCode::LongTail => "long_tail",
            FindingCode::ErrorsPastKnee => "errors_past_knee",
            FindingCode::ClientServerGap => "client_server_gap",
            FindingCode::Other(code) => code,
        }
    }

    /// The code written `code`.
    pub fn of(code: &str) -> FindingCode {
        Self::KNOWN
            .into_iter()
            .find(|k| k.as_str() == code)
            .unwrap_or_else(|| FindingCode::Other(code.to_owned()))
    }
}

impl std::fmt::Display for FindingCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for FindingCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FindingCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(FindingCode::of(&std::borrow::Cow::<str>::deserialize(d)?))
    }
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// What it is about.
    pub code: FindingCode,
    /// The model.
    pub model: String,
    /// The level (`8`, `4/s`).
    pub level: Load,
    /// What it means and what to do.
    pub message: String,
    /// In a combination of runs (`bench report a.json b.json`): the run it came from, `#2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::bench::capacity::SearchStop;
    use crate::bench::criteria::Criteria;
    use crate::bench::gate::compare;
    use crate::bench::select::find_knee;
    use crate::bench::stats::{LevelKey, Sample};

    pub(crate) fn samples(
        n: usize,
        ttft: f64,
        tokens: u64,
        itl: f64,
        err_every: usize,
    ) -> Vec<Sample> {
        (0..n)
            .map(|i| {
                let failed = err_every > 0 && i % err_every == 0;
                let t = ttft * (1.0 + i as f64 / n as f64);
                Sample {
                    error_type: failed.then_some(crate::outcome::ErrorType::RateLimited),
                    error_detail: failed.then(|| "HTTP 429: slow down".to_owned()),
                    ttft_s: (!failed).then_some(t),
                    ttfo_s: (!failed).then_some(t),
                    tpot_s: (!failed).then_some(itl),
                    e2e_s: (!failed).then_some(t + itl * (tokens - 1) as f64),
                    failure_s: failed.then_some(0.01),
                    decode_tokens_per_s: (!failed).then_some(1.0 / itl),
                    output_tokens: if failed { 0 } else { tokens },
                    input_tokens: None,
                    sent_s: 0.0,
                    end_s: 1.0,
                    lag_s: 0.0002 * (i % 3) as f64,
                    behind_schedule_s: None,
                    first: false,
                    new_connection: false,
                    connect_s: None,
                    read_lag_s: None,
                    send_lag_s: None,
                    wire_ttft_s: None,
                    unstamped: false,
                    first_token_shared_read: false,
                    server_predicted_per_token_ms: None,
                    requested_input_tokens: None,
                    requested_output_tokens: None,
                    turn: None,
                    session: None,
                    branch: None,
                    tool_calls: 0,
                    request_id: None,
                    cached_input_tokens: None,
                    reasoning_tokens: None,
                    served_model: None,
                    system_fingerprint: None,
                    response_id: None,
                    server_request_id: None,
                    ..Sample::default()
                }
            })
            .collect()
    }

    /// The report's typed leaves are written as the strings older versions wrote, and read
    /// back from them (a finding's code this version does not know is kept as written).
    #[test]
    fn typed_leaves_are_written_and_read_as_the_strings_they_were() {
        let mut r = synthetic();
        r.findings = vec![Finding {
            code: FindingCode::Queueing,
            model: "alpha".into(),
            level: Load::Concurrency(8),
            message: "waits".into(),
            run: None,
        }];
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["mode"]["kind"], "closed");
        assert_eq!(json["api"], "openai-chat");
        assert_eq!(json["selection"]["level"], "8");
        assert_eq!(json["selection"]["weights"]["ttft_p95"], 0.5);
        assert_eq!(json["selection"]["ranked"][0]["values"]["tps_p50"], 50.0);
        let first = &json["comparison"]["values"][0];
        assert_eq!(
            (&first["level"], &first["metric"]),
            (&"2".into(), &"ttft_p50".into())
        );
        assert_eq!(json["findings"][0]["code"], "queueing");
        assert_eq!(json["findings"][0]["level"], "8");
        let mut older = json.clone();
        older["mode"]["kind"] = "open".into();
        older["api"] = "openai-chat, anthropic-messages".into();
        older["selection"]["level"] = "last".into();
        older["findings"][0]["code"] = "kv_cache_pressure".into();
        older["findings"][0]["level"] = "2.5/s".into();
        older["models"][0]["capacity"] = serde_json::json!({
            "concurrency": 4, "target_attainment": 0.95, "attainment": 1.0,
            "attainment_interval": [0.9, 1.0], "limited_by": "errors", "failed_at": 8.0,
            "clear": true, "levels_tried": [1.0, 2.0, 4.0, 8.0], "requests": 80, "seconds": 4.0,
            "stopped": "even 8 failed; a higher load passed again, so the capacity is kept below the lowest failure",
        });
        older["models"][1]["capacity"] = older["models"][0]["capacity"].clone();
        older["models"][1]["capacity"]["limited_by"] = "ttft<=300.0 ms".into();
        older["models"][1]["capacity"]["stopped"] = "the search was stopped".into();
        let back: Report = serde_json::from_value(older.clone()).unwrap();
        assert_eq!(back.mode.kind, LoadKind::Open);
        assert_eq!(
            back.api,
            Apis(vec![Api::OpenaiChat, Api::AnthropicMessages])
        );
        assert_eq!(back.selection.as_ref().unwrap().level, SelectedLevel::Last);
        assert_eq!(
            (&back.findings[0].code, back.findings[0].level),
            (
                &FindingCode::Other("kv_cache_pressure".into()),
                Load::Rate(2.5)
            )
        );
        let (a, b) = (
            back.models[0].capacity.as_ref().unwrap(),
            back.models[1].capacity.as_ref().unwrap(),
        );
        assert_eq!(
            (&a.limited_by, &a.stopped),
            (
                &Some(CapacityLimit::Errors),
                &SearchStop::EvenFailed {
                    load: 8.0,
                    passed_above: true
                }
            )
        );
        assert_eq!(
            (&b.limited_by, &b.stopped),
            (
                &Some(CapacityLimit::Objective("ttft<=300.0 ms".into())),
                &SearchStop::Other("the search was stopped".into())
            )
        );
        assert_eq!(serde_json::to_value(&back).unwrap(), older);
        older["findings"][0]["level"] = "fast".into();
        assert!(serde_json::from_value::<Report>(older).is_err());
    }

    /// A synthetic two-model sweep with a knee, selection and a comparison.
    pub(crate) fn synthetic() -> Report {
        let slos = vec!["ttft=300ms".parse().unwrap()];
        let mk = |c: u32, ttft: f64, wall: f64, err_every: usize| {
            LevelStats::from_samples(
                LevelKey {
                    concurrency: c,
                    rate: None,
                },
                &samples(20, ttft, 64, 0.02, err_every),
                wall,
                &[0.00005, 0.0001],
                &slos,
                0,
            )
        };
        let mut models = vec![
            ModelReport {
                model: "alpha".into(),
                target: Some("local".into()),
                price: None,
                gpus: None,
                gpu_hour_price: None,
                input_tokens_mean: None,
                output_tokens_mean: Some(64.0),
                levels: vec![mk(2, 0.1, 10.0, 0), mk(4, 0.1, 5.0, 0), mk(8, 0.4, 4.8, 0)],
                knee: None,
                capacity: None,
                stopped_early: None,
                check: None,
                prompt: None,
                calibration: None,
            },
            ModelReport {
                model: "beta".into(),
                target: Some("local".into()),
                price: None,
                gpus: None,
                gpu_hour_price: None,
                input_tokens_mean: None,
                output_tokens_mean: Some(60.8),
                levels: vec![
                    mk(2, 0.2, 12.0, 0),
                    mk(4, 0.2, 6.0, 10),
                    mk(8, 0.25, 3.0, 10),
                ],
                knee: None,
                capacity: None,
                stopped_early: None,
                check: None,
                prompt: None,
                calibration: None,
            },
        ];
        let rule = KneeRule::default();
        for m in &mut models {
            m.knee = find_knee(&m.levels, &rule);
        }
        let criteria = Criteria {
            limits: vec!["error_rate<1%".parse().unwrap()],
            slos: slos.clone(),
            ..Criteria::default()
        };
        let (selection, also_at) = crate::bench::answer::answer(&models, &criteria);
        let slo_capacity = crate::bench::answer::slo_capacity(&models);
        let mut baseline = models.clone();
        baseline[0].levels[2] = mk(8, 0.2, 4.8, 0);
        let slo_texts: Vec<String> = slos.iter().map(ToString::to_string).collect();
        let comparison = compare(&models, &baseline, &slo_texts, &criteria, "old.json");
        Report {
            tool: "tokenprobe".into(),
            version: "0.1.0".into(),
            started_at: "2025-01-01T00:00:00Z".into(),
            command: None,
            target: "local".into(),
            base_url: "http://127.0.0.1:8000/v1".into(),
            api: Apis::one(Api::OpenaiChat),
            prompt: "hello".into(),
            max_tokens: Some(64),
            workload: None,
            mode: LoadMode {
                kind: LoadKind::Closed,
                arrival: None,
                burstiness: None,
                seed: None,
                requests_per_level: Some(20),
                duration_per_level_s: None,
                warmup: 2,
                warmup_s: None,
                ramp_up: None,
                trace: None,
                ramp_s: None,
                prewarm: false,
                sessions: None,
            },
            slo: slos.iter().map(ToString::to_string).collect(),
            knee_rule: rule,
            models,
            selection: Some(selection),
            also_at,
            slo_capacity,
            comparison: Some(comparison),
            run: None,
            criteria: None,
            findings: Vec::new(),
            interrupted: None,
            combined_from: Vec::new(),
            frontier: None,
            provenance: None,
        }
    }
}
