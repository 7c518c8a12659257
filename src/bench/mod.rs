//! `tokenprobe bench`: load tests that step concurrency (or an arrival rate) up, per model, with
//! the same measurement code as `serve` ([`crate::probe::Prober::run`] → [`ProbeResult`]), so a
//! benchmark number and a dashboard number mean the same thing.
//!
//! - [`runner`]: the load generator (closed and open loop) and its own lag.
//! - [`stats`]: per-request samples and exact per-level statistics.
//! - [`criteria`]: metric names, limits, weights, SLOs and the `--bench.file` YAML.
//! - [`select`]: the knee and selection (hard limits, weighted score).
//! - [`gate`]: the comparison with a baseline run, each value's verdict (regression only when
//!   beyond the tolerance and significant), on [`significance`]'s tests.
//! - [`report`]: the typed report every renderer reads ([`crate::render`] writes it out).
//! - [`shard`]: one run split across processes (`--shard i/N`, `--start-at`), the run id.
//! - [`merge`]: `bench merge`, the shards' reports made into the whole run's.
//! - [`crosscheck`]: `--cross-check`, streaming vs non-streaming E2E beside each level.
//! - [`server_view`]: the LLM server's metrics beside every level; [`findings`]: what client and server numbers
//!   mean together.
//! - [`health`]: nothing sent in vain: the connectivity check, the early stop of a load whose
//!   requests all fail with an error more load cannot change, partial levels, exits 7 and 8.
//!
//! This is the measuring half: it sends, folds and judges. [`run`] takes a [`BenchPlan`], a
//! validated run built from the flags by [`crate::cli::bench`], and returns the judged
//! [`Report`]; the rendering half, [`crate::render`], prints and writes it.
//!
//! Exit codes: [`crate::exit::Exit`] lists them and their precedence; [`run_exit`] decides a
//! judged run's (3, a regression, is [`gate`]'s verdict: worse beyond the tolerance and
//! significantly so). `docs/bench.md` is the user guide and defines every number.
//!
//! [`ProbeResult`]: crate::measure::ProbeResult

pub mod answer;
pub mod baseline;
pub mod canary;
pub mod capacity;
pub mod confidence;
pub mod criteria;
pub mod crosscheck;
pub mod efficiency;
pub mod findings;
pub mod frontier;
pub mod gate;
pub mod health;
pub mod merge;
pub mod provenance;
pub mod report;
pub mod run_exit;
pub mod runner;
pub mod sample;
pub mod select;
pub mod server_cache;
pub mod server_view;
pub mod session;
pub mod shard;
pub mod significance;
pub mod stats;
pub mod steady;
mod sweep;

use crate::config::{Config, ConfigError, Job, Target, Timeouts};
use crate::probe::ProbeSpec;
use crate::stop::StopSignals;
use crate::transport::TransportError;
use criteria::{Criteria, CriteriaError};
use report::{LoadMode, ModelReport, Report};
use runner::{Amount, Arrival, Progress, ProgressMode, Runner};
use stats::{LevelKey, LevelStats};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use sweep::Sender;
use tokio_util::sync::CancellationToken;

/// A closed-loop level with more workers than requests never has all of them in flight: the
/// warning that says so (the level is labelled with its workers, but measures fewer).
fn fewer_requests_than_workers(amount: Amount, levels: &[LevelKey]) -> Option<String> {
    let Amount::Requests(n) = amount else {
        return None;
    };
    let short: Vec<String> = levels
        .iter()
        .filter(|k| k.rate.is_none() && u64::from(k.concurrency) > n)
        .map(LevelKey::label)
        .collect();
    (!short.is_empty()).then(|| {
        format!(
            "tokenprobe: WARNING: concurrency {} above --requests-per-level {n}: such a level never has more than {n} requests in flight; give at least as many requests as workers (or --duration-per-level)",
            short.join(", ")
        )
    })
}

/// One model of a comparison: the model name sent and the target it is sent to (with that
/// target's deadlines), so one run compares models behind one gateway and the same model at two
/// providers with the same prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchModel {
    /// The target.
    pub target: Arc<Target>,
    /// Its deadlines (from the config).
    pub timeouts: Timeouts,
    /// The model name sent.
    pub model: String,
}

impl BenchModel {
    /// `target/model`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.target.name, self.model)
    }

    /// The probe of this model: `base` (the prompt and its overrides) sent to this target.
    pub fn spec(&self, base: &ProbeSpec) -> ProbeSpec {
        let mut spec = base.clone();
        spec.target = self.target.clone();
        spec.timeouts = self.timeouts;
        spec.model.clone_from(&self.model);
        spec
    }
}

/// Why a bench could not run or report (all exit 2).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A flag or the bench file is invalid.
    #[error(transparent)]
    Spec(#[from] CriteriaError),
    /// Flags that do not fit together, or a target/model/prompt the config does not have.
    #[error("{0}")]
    Usage(String),
    /// The config could not be loaded.
    #[error("loading {}", path.display())]
    Config {
        /// The config file.
        path: PathBuf,
        /// Why.
        source: ConfigError,
    },
    /// The HTTP client could not be built from the target's settings.
    #[error(transparent)]
    Client(#[from] TransportError),
    /// A level's sending broke: a worker panicked (a bug: the panic's message is printed
    /// above), or an instant the clock cannot hold was asked for. The requests it had sent were
    /// waited for; the run stops without a report rather than report a level short of them.
    #[error("{level}: {reason}; the run stops without a report")]
    Level {
        /// The level (model and load).
        level: String,
        /// What broke.
        reason: String,
    },
    /// The baseline report could not be read.
    #[error("cannot use baseline {path}: {reason}")]
    Baseline {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A report to merge could not be read.
    #[error("cannot read {path}: {reason}")]
    Report {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A prompt built to a token length could not be calibrated: nothing is sent at a guessed
    /// length.
    #[error("{series}: calibration failed: {reason}; no prompt is sent at a guessed length")]
    Calibration {
        /// The series (model, prompt).
        series: String,
        /// Why.
        reason: String,
    },
    /// An output file could not be written.
    #[error("cannot write {path}: {reason}")]
    Output {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// What the sweep hands each finished level to besides the report (`--remote-write`'s queue, the
/// OTLP instruments). It is called on the sweep's task between levels and must not wait.
pub trait LevelSink: Send + Sync + std::fmt::Debug {
    /// `level` of `model` has ended: its statistics final, its measured requests' samples in
    /// `level.samples` (whether or not the report keeps them), before it joins the report.
    fn level_done(&self, model: &ModelReport, level: &LevelStats);
}

/// A validated bench run: everything that can be wrong with the invocation was checked when this
/// was built ([`crate::cli::bench`]), before any request is sent.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    /// Where each finished level also goes (`--remote-write`, OTLP), set by the caller.
    pub sinks: Vec<std::sync::Arc<dyn LevelSink>>,
    /// Limits, weights, SLOs, knee rule, tolerances, selection level.
    pub criteria: Criteria,
    /// The job whose target and prompt are probed (its model is replaced per model).
    pub job: Job,
    /// The probe of one request (`max_tokens` already overridden).
    pub spec: ProbeSpec,
    /// Models (each with its target), in order.
    pub models: Vec<BenchModel>,
    /// Every prompt swept (`--prompt a,b`), the first being `spec`'s; each is its own series
    /// per model.
    pub prompts: Vec<ProbeSpec>,
    /// The levels (concurrency, or rate with its in-flight cap), within the fd limit.
    pub levels: Vec<LevelKey>,
    /// Open loop: the arrival process.
    pub arrival: Arrival,
    /// Open loop: the seed of the arrivals.
    pub seed: u64,
    /// Requests or sending time per level.
    pub amount: Amount,
    /// Unmeasured requests before each level.
    pub warmup: u64,
    /// Closed loop: the workers' first sends are spread over this.
    pub ramp: std::time::Duration,
    /// `connection: reuse` targets: open every worker's connection before each level.
    pub prewarm: bool,
    /// Keep every request's sample in the report.
    pub samples: bool,
    /// How progress inside a level is shown: a bar on a terminal, else a line every few seconds.
    pub progress: ProgressMode,
    /// The connectivity check and the early stop (`--no-check`, `--keep-going`,
    /// `--stop-after-errors`).
    pub health: health::HealthPlan,
    /// Models are judged (several models, limits, weights or a bench file).
    pub judged: bool,
    /// The baseline report and its name (its file, or its run in the run store).
    pub baseline: Option<(Report, String)>,
    /// Server metrics, the Prometheus source and the finding thresholds.
    pub server: server_view::ServerPlan,
    /// This process's shard of the run (0/1 when it is the whole run).
    pub shard: shard::Shard,
    /// `--start-at`: the shared start instants of the levels.
    pub start: Option<shard::StartPlan>,
    /// The run id (every shard of a run computes the same).
    pub run_id: String,
    /// `--cross-check`: non-streaming requests beside each level.
    pub cross_check: Option<crosscheck::CrossCheckSpec>,
    /// The command line, as given (recorded in the report with its secrets redacted).
    pub command: Vec<String>,
    /// `--find-capacity`: each model's levels come from the search.
    pub capacity: Option<capacity::CapacityPlan>,
    /// `--repeat N`: every level is run this many times (1: once).
    pub repeat: u32,
    /// How each level is shaped beyond its load and amount.
    pub shape: LevelShape,
}

/// How each level is shaped beyond its load and amount: the knee's added levels, canaries, a
/// length its decision needs, a warm-up by duration, a rising arrival rate.
#[derive(Debug, Clone, Default)]
pub struct LevelShape {
    /// `--knee-levels N`: at most this many levels added per sweep between the capacity ceiling
    /// and the knee (0: the levels as given).
    pub knee_levels: u32,
    /// `--canary RATE`: single probes beside every level's load.
    pub canary: Option<canary::CanaryPlan>,
    /// `--until-clear N`: a fixed sweep's levels run on while their SLO attainment is unclear.
    pub until_clear: u32,
    /// `--warmup-duration`: unmeasured requests at each level's own load for this long first.
    pub warmup_duration: Option<std::time::Duration>,
    /// `--ramp-up`: each level's load (arrival rate or workers) rises to its own this way.
    pub load_ramp: Option<runner::LoadRamp>,
    /// `--reset-prefix-cache`, `--cache-bust`: the server cache each level starts from.
    pub cache: server_cache::CachePlan,
}

impl BenchPlan {
    /// Open loop (arrival rates) rather than closed loop (workers).
    pub fn open(&self) -> bool {
        self.levels.iter().any(|k| k.rate.is_some())
    }

    /// What a baseline must share with this plan's run: its workload as its report will record
    /// it (by the same code [`run`] writes the report with), its models, and its levels (not
    /// known before a capacity search runs).
    pub fn fit(&self) -> baseline::Fit {
        let open = self.open();
        let head = self
            .models
            .first()
            .map_or_else(|| self.job.target.clone(), |m| m.target.clone());
        let mode = load_mode(
            open,
            self.arrival,
            self.seed,
            self.amount,
            (self.warmup, &self.shape),
        );
        baseline::Fit {
            models: self
                .models
                .iter()
                .map(|m| (m.target.name.clone(), m.model.clone()))
                .collect(),
            workload: baseline::WorkloadKey {
                api: head.api.to_string(),
                prompt: self
                    .prompts
                    .iter()
                    .map(|p| p.prompt.name.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                workload: Some(baseline::describe_all(&self.prompts)),
                max_tokens: self.spec.max_tokens,
                load: baseline::load_words(&with_trace(mode, &self.spec)),
            },
            open_loop: open,
            levels: self.capacity.is_none().then(|| self.levels.clone()),
        }
    }
}
/// Highest open-loop arrival rate accepted, requests/s.
pub const MAX_RATE: f64 = 100_000.0;
/// Most requests one level may schedule (bounds time and memory of the arrival plan).
pub const MAX_REQUESTS_PER_LEVEL: f64 = 1_000_000.0;
/// File descriptors kept free of the bench's connections (runtime, stdio, output files, DNS).
pub const FD_RESERVE: u64 = 64;

/// The open-file limit of this process (the soft `RLIMIT_NOFILE`), when known.
pub fn fd_limit() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Checks that every level's requests in flight fit the open-file limit less [`FD_RESERVE`]
/// (each request in flight holds one socket), before anything is sent: past it, requests fail
/// as `connect` errors that are the bench's own, not the target's. A default open-loop cap is
/// lowered to fit instead.
///
/// # Errors
/// [`BenchError::Usage`] naming the level, the limit and how to raise it.
pub fn fit_fd_limit(
    keys: &mut [LevelKey],
    explicit: bool,
    limit: Option<u64>,
) -> Result<(), BenchError> {
    let Some(limit) = limit else { return Ok(()) };
    let room = limit.saturating_sub(FD_RESERVE).max(1);
    for k in keys.iter_mut() {
        if u64::from(k.concurrency) <= room {
            continue;
        }
        if !explicit && k.rate.is_some() {
            k.concurrency = u32::try_from(room).unwrap_or(u32::MAX);
            continue;
        }
        return Err(BenchError::Usage(format!(
            "--concurrency {}: more requests in flight than this process may open sockets (open-file limit {limit}, {FD_RESERVE} kept in reserve, so at most {room}); lower it or raise the limit (ulimit -n)",
            k.concurrency
        )));
    }
    Ok(())
}

/// Checks that the selection level (`--select-at` or the bench file's `select_at`) is one of the
/// levels run.
///
/// # Errors
/// [`BenchError::Usage`] listing the levels.
pub fn check_select_at(keys: &[LevelKey], select_at: Option<f64>) -> Result<(), BenchError> {
    match select_at {
        Some(x) if !keys.iter().any(|k| (k.x() - x).abs() < 1e-9) => {
            Err(BenchError::Usage(format!(
                "--select-at {}: not one of the levels run ({})",
                crate::units::trim_float(x),
                keys.iter()
                    .map(LevelKey::label)
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
        _ => Ok(()),
    }
}

/// The levels to run: closed loop, one per concurrency; open loop, one per rate, each capped by
/// the matching concurrency (one concurrency caps every rate; one rate runs at every cap).
///
/// # Errors
/// [`BenchError::Usage`] when the lists do not fit.
pub fn levels(concurrency: &[u32], rate: &[f64]) -> Result<Vec<LevelKey>, BenchError> {
    let keys = level_keys(concurrency, rate)?;
    // A level given twice would be run twice and then be one point of the sweep twice over
    // (the knee, the selection level and the baseline all look levels up by key).
    for (i, k) in keys.iter().enumerate() {
        if keys[..i].contains(k) {
            return Err(BenchError::Usage(format!(
                "the level {} is given twice: levels must differ",
                k.label()
            )));
        }
    }
    Ok(keys)
}

fn level_keys(concurrency: &[u32], rate: &[f64]) -> Result<Vec<LevelKey>, BenchError> {
    if rate.is_empty() {
        let c = if concurrency.is_empty() {
            &[1][..]
        } else {
            concurrency
        };
        return Ok(c
            .iter()
            .map(|&c| LevelKey {
                concurrency: c,
                rate: None,
            })
            .collect());
    }
    if let Some(r) = rate
        .iter()
        .find(|r| !(r.is_finite() && **r > 0.0 && **r <= MAX_RATE))
    {
        let shown = if r.is_finite() && r.abs() < 1e9 {
            format!("{r}")
        } else {
            format!("{r:e}")
        };
        return Err(BenchError::Usage(format!(
            "--rate {shown}: must be a number of requests/s above 0 and at most {MAX_RATE}"
        )));
    }
    let caps = if concurrency.is_empty() {
        &[1000][..]
    } else {
        concurrency
    };
    let n = rate.len().max(caps.len());
    if (rate.len() != 1 && rate.len() != n) || (caps.len() != 1 && caps.len() != n) {
        return Err(BenchError::Usage(format!(
            "--rate has {} values and --concurrency {}: give one of them a single value, or both the same number",
            rate.len(),
            caps.len()
        )));
    }
    Ok((0..n)
        .map(|i| LevelKey {
            concurrency: caps[if caps.len() == 1 { 0 } else { i }],
            rate: Some(rate[if rate.len() == 1 { 0 } else { i }]),
        })
        .collect())
}

/// The job the bench sends: the target (named, or the first), its prompt (named, or its first),
/// and the models to compare (named, or the target's). A named model `T/M` whose `T` is a
/// target of the config is model `M` at target `T`; any other name (`M`, also `org/M`) is a
/// model of the chosen target.
///
/// # Errors
/// [`BenchError::Usage`] when the config has no such target or prompt.
pub fn choose(
    config: &Config,
    target: Option<&str>,
    prompt: Option<&str>,
    models: &[String],
) -> Result<(Job, Vec<BenchModel>), BenchError> {
    let first = config
        .jobs
        .iter()
        .find(|j| target.is_none_or(|t| j.target.name == t))
        .ok_or_else(|| {
            let names: Vec<&str> = config.jobs.iter().map(|j| j.target.name.as_str()).collect();
            BenchError::Usage(format!(
                "no target {:?} in the config (targets: {})",
                target.unwrap_or_default(),
                dedup(names).join(", ")
            ))
        })?;
    let of_target: Vec<&Job> = config
        .jobs
        .iter()
        .filter(|j| j.target.name == first.target.name)
        .collect();
    let job = match prompt {
        None => first,
        Some(p) => of_target
            .iter()
            .copied()
            .find(|j| j.prompt.name == p)
            .ok_or_else(|| {
                let names = dedup(of_target.iter().map(|j| j.prompt.name.as_str()).collect());
                BenchError::Usage(format!(
                    "target {} has no prompt {p:?} (its prompts: {})",
                    first.target.name,
                    names.join(", ")
                ))
            })?,
    };
    let at = |j: &Job, model: &str| BenchModel {
        target: j.target.clone(),
        timeouts: j.timeouts,
        model: model.to_owned(),
    };
    let models: Vec<BenchModel> = if models.is_empty() {
        dedup(of_target.iter().map(|j| j.model.as_str()).collect())
            .into_iter()
            .map(|m| at(job, m))
            .collect()
    } else {
        models
            .iter()
            .map(|m| {
                m.split_once('/')
                    .and_then(|(t, rest)| {
                        let j = config.jobs.iter().find(|j| j.target.name == t)?;
                        Some(at(j, rest))
                    })
                    .unwrap_or_else(|| at(job, m))
            })
            .collect()
    };
    for (i, m) in models.iter().enumerate() {
        if m.model.trim().is_empty() {
            return Err(BenchError::Usage(format!(
                "--models {}: empty model name",
                m.name()
            )));
        }
        if models[..i].contains(m) {
            return Err(BenchError::Usage(format!(
                "--models: {} is given twice",
                m.name()
            )));
        }
    }
    Ok((job.clone(), models))
}

/// As [`choose`], with several prompts (`--prompt a,b`; none: the target's first): one job per
/// prompt, in the order given, and the models to compare.
///
/// # Errors
/// [`BenchError::Usage`] when the config has no such target or prompt, or a prompt is named
/// twice.
pub fn choose_prompts(
    config: &Config,
    target: Option<&str>,
    prompts: &[String],
    models: &[String],
) -> Result<(Vec<Job>, Vec<BenchModel>), BenchError> {
    if prompts.is_empty() {
        let (job, models) = choose(config, target, None, models)?;
        return Ok((vec![job], models));
    }
    let mut jobs = Vec::new();
    let mut chosen_models = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        if prompts[..i].contains(p) {
            return Err(BenchError::Usage(format!(
                "--prompt {p:?} is given twice: prompts must differ"
            )));
        }
        let (job, m) = choose(config, target, Some(p), models)?;
        jobs.push(job);
        chosen_models = m;
    }
    Ok((jobs, chosen_models))
}

fn dedup(v: Vec<&str>) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for s in v {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// The largest bench JSON report read (a baseline, a shard's report): a million samples fit.
pub const MAX_REPORT_FILE_BYTES: u64 = 1 << 30;

/// Reads a JSON report; `Err` says why, in words. Parsed as it is read (a report is held once,
/// as values, never as text too), at most [`MAX_REPORT_FILE_BYTES`] of it: a file that never
/// ends (`/dev/zero`) fails at its first byte that is not JSON, a larger one at the limit.
pub fn read_report(path: &Path) -> Result<Report, String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    if file
        .metadata()
        .is_ok_and(|m| m.len() > MAX_REPORT_FILE_BYTES)
    {
        return Err(format!(
            "larger than {}",
            crate::units::fmt_bytes(MAX_REPORT_FILE_BYTES)
        ));
    }
    let reader = std::io::BufReader::new(file.take(MAX_REPORT_FILE_BYTES));
    serde_json::from_reader(reader).map_err(|e| format!("not a tokenprobe bench JSON report ({e})"))
}

/// Reads a baseline report.
///
/// # Errors
/// [`BenchError::Baseline`] when it cannot be read or is not a bench JSON report.
pub fn load_baseline(path: &Path) -> Result<Report, BenchError> {
    read_report(path).map_err(|reason| BenchError::Baseline {
        path: path.to_owned(),
        reason,
    })
}

/// Reads a report to merge.
///
/// # Errors
/// [`BenchError::Report`] when it cannot be read or is not a bench JSON report.
pub fn load_report(path: &Path) -> Result<Report, BenchError> {
    read_report(path).map_err(|reason| BenchError::Report {
        path: path.to_owned(),
        reason,
    })
}

/// Runs a validated bench: every model at every level, then the judged report ([`crate::render`]
/// writes it).
/// A shard (`--shard i/N`) sends its share of every level; with `--start-at` every level starts at
/// its shared instant (see [`shard`]).
///
/// # Errors
/// [`BenchError`] when the prober cannot be built or a prompt cannot be calibrated.
pub async fn run(plan: BenchPlan) -> Result<Finished, BenchError> {
    let BenchPlan {
        mut sinks,
        criteria,
        job,
        mut spec,
        mut prompts,
        models,
        levels: level_keys,
        arrival,
        seed,
        amount,
        warmup,
        ramp,
        prewarm,
        samples,
        progress: show,
        health,
        judged,
        baseline,
        shard,
        start,
        run_id,
        cross_check,
        server: server_plan,
        command,
        capacity,
        repeat,
        shape,
    } = plan;
    let open = level_keys.iter().any(|k| k.rate.is_some());
    identify(&mut spec, &mut prompts, &run_id, shard);
    // The run's total per level: each level's share of this shard is its own (a closed loop's
    // follows the shard's workers, so the shards send the total between them).
    let per_level_total = amount;
    let amount = shard.share_of(amount);
    let (per_level_units, total) = progress_units(
        amount,
        level_keys.len() * models.len() * prompts.len().max(1),
    );
    let prompt_names: Vec<&str> = prompts.iter().map(|p| p.prompt.name.as_str()).collect();
    let progress = Progress::new(total, show);
    // The report's target: every model's (the --target's unless pairs name others), in the
    // order of the models, each once.
    let head = models
        .first()
        .map_or_else(|| job.target.clone(), |m| m.target.clone());
    let mixed = models.iter().any(|m| m.target != head);
    let (target_names, base_urls, urls) = targets_of(&head, &models);
    let names = shown_names(&models, mixed);
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let (load, part) = run_words(&spec, open, arrival, shard, &run_id);
    progress.println(&format!(
        "tokenprobe bench: target {target_names} ({}), prompt {}, models {}, {} ({load}){part}",
        urls,
        prompt_names.join(", "),
        names.join(", "),
        crate::units::count(level_keys.len(), "level"),
    ));
    let redactor = command_redactor(&spec, &models).await;
    let mut provenance =
        provenance::collect::collect(&models, &server_plan.endpoints, &redactor).await;
    let served = provenance::ServedTally::sink(&mut sinks); // what answered, level by level
    let sender = Sender {
        before_level: server_cache::BeforeLevel::new(shape.cache, shard.index, Some(&provenance)),
        sinks,
        shard,
        start,
        amount,
        total: per_level_total,
        arrival,
        seed,
        warmup,
        ramp,
        prewarm,
        levels: level_keys.clone(),
        search: capacity,
        repeat,
        shape: shape.clone(),
        per_level_units,
        criteria: criteria.clone(),
        cross_check,
        samples,
        progress: progress.clone(),
        running: std::sync::Mutex::new(None),
        health,
        stop: CancellationToken::new(),
        signal: Arc::new(OnceLock::new()),
    };
    let mut server_side = server_view::ServerSide::start(&server_plan)?;
    let watch = StopSignals::install().watch_naming(sender.stop.clone(), sender.signal.clone());
    let stop_watch = tokio::spawn(watch);
    let mut reports = Vec::new();
    let interrupted = sender
        .all_until(
            (&spec, &models, &names, &prompts),
            &mut server_side,
            &mut reports,
        )
        .await?;
    if interrupted.is_none() {
        server_side.finish(&mut reports, &progress).await;
    }
    progress.finish();
    served_by(&mut reports, &models, &mut provenance, &served);
    let mut report = Report {
        tool: "tokenprobe".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        started_at,
        command: Some(crate::redact::command_line(&command, &redactor)),
        target: target_names,
        base_url: base_urls,
        api: head.api.to_string(),
        prompt: prompt_names.join(","),
        max_tokens: spec.max_tokens,
        workload: Some(baseline::describe_all(&prompts)),
        mode: with_trace(
            LoadMode {
                ramp_s: (!open && !ramp.is_zero()).then_some(ramp.as_secs_f64()),
                prewarm,
                ..load_mode(open, arrival, seed, amount, (warmup, &shape))
            },
            &spec,
        ),
        slo: criteria.slos.iter().map(ToString::to_string).collect(),
        knee_rule: criteria.knee,
        models: reports,
        selection: None,
        also_at: None,
        slo_capacity: None,
        comparison: None,
        run: Some(report::RunInfo {
            id: run_id,
            shard: (shard.count > 1).then(|| shard.to_string()),
            start_at: sender.start.map(|p| p.start_at.to_rfc3339()),
            merged_from: Vec::new(),
        }),
        criteria: Some(criteria.record()),
        findings: Vec::new(),
        interrupted,
        combined_from: Vec::new(),
        frontier: None,
        provenance: Some(provenance),
    };
    judge(
        &mut report,
        &criteria,
        judged,
        baseline.as_ref(),
        &server_plan.thresholds,
    );
    Ok(Finished { report, stop_watch })
}

/// What served each series, after the sweep: the served names and fingerprints its levels
/// carried into `provenance`, and each series' GPU count (its target's, as the provenance
/// records it: declared, else DCGM's) and GPU price.
fn served_by(
    reports: &mut [ModelReport],
    models: &[BenchModel],
    provenance: &mut provenance::Provenance,
    served: &provenance::ServedTally,
) {
    for s in &mut provenance.servers {
        s.served = served.served(&s.target);
    }
    for r in reports {
        let Some(t) = r.target.clone() else { continue };
        r.gpus = provenance
            .server(&t)
            .and_then(|s| s.gpus.as_ref())
            .map(|g| g.count);
        r.gpu_hour_price = models
            .iter()
            .find(|m| m.target.name == t)
            .and_then(|m| m.target.gpu_hour_price)
            .map(|p| p.0);
    }
}

/// The progress units of one level (its requests, or its seconds) and of the run's `levels`.
fn progress_units(amount: Amount, levels: usize) -> (u64, u64) {
    let per_level = match amount {
        Amount::Requests(n) => n,
        Amount::Duration(d) => d.as_secs().max(1),
    };
    (per_level, per_level.saturating_mul(levels as u64))
}

/// A finished run: its judged report, and the watch of the stop signals, which stays on while
/// the report is printed and written (a second signal then still exits at once, say while a
/// file's writer waits for a reader) and ends when this is dropped.
#[derive(Debug)]
pub struct Finished {
    /// The judged report.
    pub report: Report,
    stop_watch: tokio::task::JoinHandle<()>,
}

impl Drop for Finished {
    fn drop(&mut self) {
        self.stop_watch.abort();
    }
}

/// The start line's words for the load (closed loop, or open loop and its arrivals) and, for a
/// shard, which part of which run it is.
fn run_words(
    spec: &ProbeSpec,
    open: bool,
    arrival: Arrival,
    shard: shard::Shard,
    run_id: &str,
) -> (String, String) {
    let load = if let crate::workload::Workload::Trace(t) = &spec.workload {
        let r = t.replayed();
        format!(
            "open loop, a {} trace replayed: {} requests over {} s",
            r.format.as_str(),
            r.requests,
            crate::units::trim_float((r.replay_span_s * 1000.0).round() / 1000.0)
        )
    } else if open {
        format!("open loop, {} arrivals", arrival.as_str())
    } else {
        "closed loop".into()
    };
    let part = if shard.count > 1 {
        format!(", shard {shard} of run {run_id}")
    } else {
        String::new()
    };
    (load, part)
}

/// The models as the run shows them: `target/model` when they are sent to several targets.
fn shown_names(models: &[BenchModel], mixed: bool) -> Vec<String> {
    models
        .iter()
        .map(|m| if mixed { m.name() } else { m.model.clone() })
        .collect()
}

/// Every target of a run (`head`'s first, then each model's, each once): their names, base URLs
/// and endpoint URLs (redacted), each list joined by `, `.
fn targets_of(head: &Arc<Target>, models: &[BenchModel]) -> (String, String, String) {
    let mut targets: Vec<&Target> = Vec::new();
    for t in std::iter::once(head).chain(models.iter().map(|m| &m.target)) {
        if !targets.iter().any(|x| x.name == t.name) {
            targets.push(t);
        }
    }
    let joined = |f: &dyn Fn(&Target) -> String| {
        let mut v: Vec<String> = Vec::new();
        for t in &targets {
            let x = f(t);
            if !v.contains(&x) {
                v.push(x);
            }
        }
        v.join(", ")
    };
    (
        joined(&|t| t.name.clone()),
        joined(&|t| crate::redact::redact_url(&t.base_url)),
        joined(&|t| crate::redact::redact_url(&t.url())),
    )
}

/// Every request of the run carries its identity, `x-request-id: tp-<run>-<shard>-<n>` (one
/// counter for every spec of the run).
fn identify(spec: &mut ProbeSpec, prompts: &mut [ProbeSpec], run_id: &str, shard: shard::Shard) {
    let ids = crate::probe::RequestIds::new(&format!("tp-{run_id}-{}", shard.index));
    for s in std::iter::once(spec).chain(prompts.iter_mut()) {
        s.request_ids = Some(ids.clone());
    }
}

/// Judges a run's sweeps (the one place a run and a merge of shards are judged): each model's
/// knee, the answer when `judged` (the selection at its load, and the view at the highest load
/// every model ran when that is another), each model's capacity within the SLOs, the findings by
/// `thresholds`, the comparison with the baseline. A partial level (this run's or the
/// baseline's) is none of these: they read the whole levels only ([`health::whole_levels`]).
pub fn judge(
    report: &mut Report,
    criteria: &Criteria,
    judged: bool,
    baseline: Option<&(Report, String)>,
    thresholds: &findings::Thresholds,
) {
    // Per GPU, the self-hosted cost and the energy first: limits and weights may read them.
    efficiency::derive(&mut report.models);
    report.frontier = frontier::of(&report.models);
    let knees: Vec<Option<report::Knee>> = health::whole_levels(&report.models)
        .iter()
        .zip(&report.models)
        .map(|(w, m)| {
            let mut k = select::find_knee(&w.levels, &criteria.knee)?;
            // Its index among all the model's levels, partial ones included.
            k.index = health::index_of_whole(&m.levels, k.index)?;
            Some(k)
        })
        .collect();
    for (m, k) in report.models.iter_mut().zip(knees) {
        m.knee = k;
    }
    let whole = health::whole_levels(&report.models);
    // A run that measured no level (every check failed) has nothing to select from.
    let measured = whole.iter().any(|m| !m.levels.is_empty());
    let (selection, also_at) = (judged && measured)
        .then(|| answer::answer(&whole, criteria))
        .unzip();
    let slo_capacity = answer::slo_capacity(&whole);
    let found = findings::findings(&whole, thresholds);
    let comparison = baseline.map(|(b, name)| {
        let mut c = gate::compare(
            &whole,
            &health::whole_levels(&b.models),
            &b.slo,
            criteria,
            name,
        );
        // What changed in what served the two runs, beside their regressions.
        if let (Some(old), Some(new)) = (&b.provenance, &report.provenance) {
            c.changed = provenance::changes(old, new);
        }
        c
    });
    drop(whole);
    report.selection = selection;
    report.also_at = also_at.flatten();
    report.slo_capacity = slo_capacity;
    report.findings = found;
    report.comparison = comparison;
}

/// The runner's (target, model) calibrated (once per run; `None` when the prompt needs none),
/// said on stderr where it was made, not again for the model's later prompts.
async fn calibrate(
    runner: &mut Runner,
    models: &crate::probe::TokenModels,
    earlier: &[ModelReport],
    name: &str,
) -> Result<Option<crate::probe::Calibration>, BenchError> {
    let Some(c) = runner.calibrate(models).await else {
        return Ok(None);
    };
    let model = &runner.spec().model;
    if c.error.is_some() {
        return Err(BenchError::Calibration {
            series: name.to_owned(),
            reason: c.summary(),
        });
    }
    if !earlier
        .iter()
        .any(|r| &r.model == model && r.calibration.as_ref() == Some(&c))
    {
        runner
            .progress
            .println(&format!("  {name}: calibrated with {}", c.summary()));
    }
    Ok(Some(c))
}

/// What the command line is shown without: every secret of every target the run sent to.
async fn command_redactor(spec: &ProbeSpec, models: &[BenchModel]) -> crate::redact::Redactor {
    let mut redactor = crate::redact::Redactor::new();
    for s in std::iter::once(spec.clone()).chain(models.iter().map(|m| m.spec(spec))) {
        let key = s.target.load_key().await.ok().flatten();
        redactor.merge(&s.redactor(key.as_ref()));
    }
    redactor
}

/// How the load was generated, as the report states it.
/// A trace prompt's mode: its arrivals are the trace's (no seed), and what was replayed.
fn with_trace(mode: LoadMode, spec: &ProbeSpec) -> LoadMode {
    match &spec.workload {
        crate::workload::Workload::Trace(t) => LoadMode {
            arrival: Some("trace".into()),
            seed: None,
            trace: Some(t.replayed()),
            ..mode
        },
        _ => mode,
    }
}

fn load_mode(
    open: bool,
    arrival: Arrival,
    seed: u64,
    amount: Amount,
    (warmup, shape): (u64, &LevelShape),
) -> LoadMode {
    LoadMode {
        kind: if open { "open" } else { "closed" }.into(),
        arrival: open.then(|| arrival.as_str().to_owned()),
        seed: (open && arrival.random()).then_some(seed),
        burstiness: arrival.burstiness().filter(|_| open),
        requests_per_level: match amount {
            Amount::Requests(n) => Some(n),
            Amount::Duration(_) => None,
        },
        duration_per_level_s: match amount {
            Amount::Duration(d) => Some(d.as_secs_f64()),
            Amount::Requests(_) => None,
        },
        warmup,
        warmup_s: shape.warmup_duration.map(|d| d.as_secs_f64()),
        ramp_up: shape.load_ramp.map(|r| {
            format!(
                "{} from {} over {} s",
                if r.exponential {
                    "exponential"
                } else {
                    "linear"
                },
                if open {
                    format!("{}/s", crate::units::trim_float(r.from))
                } else {
                    format!("{} workers", crate::units::trim_float(r.from))
                },
                crate::units::trim_float(r.over)
            )
        }),
        trace: None,
        ramp_s: None,
        prewarm: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_with_more_workers_than_requests_is_named() {
        let keys = levels(&[1, 10, 20], &[]).unwrap();
        let w = fewer_requests_than_workers(Amount::Requests(10), &keys).unwrap();
        assert!(
            w.contains("concurrency 20 above --requests-per-level 10"),
            "{w}"
        );
        assert!(
            !w.contains("10,"),
            "10 workers with 10 requests are all in flight: {w}"
        );
        assert_eq!(
            fewer_requests_than_workers(Amount::Requests(20), &keys),
            None
        );
        let d = Amount::Duration(std::time::Duration::from_secs(5));
        assert_eq!(fewer_requests_than_workers(d, &keys), None);
        let open = levels(&[], &[50.0]).unwrap();
        assert_eq!(
            fewer_requests_than_workers(Amount::Requests(5), &open),
            None
        );
    }

    /// Issue 40: a partial level (stopped before its amount) is never judged as a level: the
    /// knee, the selection and the findings read the whole levels only (the knee's index still
    /// names its level among all of them), and a baseline's partial level is not compared.
    #[test]
    fn partial_levels_are_not_judged_nor_compared() {
        let plain = report::tests::synthetic();
        let criteria = Criteria {
            limits: vec!["error_rate<1%".parse().unwrap()],
            slos: vec!["ttft=300ms".parse().unwrap()],
            ..Criteria::default()
        };
        let th = findings::Thresholds::default();
        let mut want = plain.clone();
        judge(&mut want, &criteria, true, None, &th);
        let knee = want.models[0].knee.clone().expect("alpha's knee");
        // A partial level of alpha at 3, all errors, between its whole levels 2 and 4.
        let mut stopped = plain.models[0].levels[0].clone();
        stopped.key.concurrency = 3;
        stopped.successes = 0;
        stopped.error_rate = 1.0;
        stopped.ttft_s = None;
        stopped.output_tokens_per_s = 0.0;
        stopped.partial = true;
        let mut got = plain.clone();
        got.models[0].levels.insert(1, stopped.clone());
        judge(&mut got, &criteria, true, None, &th);
        let k = got.models[0].knee.clone().expect("the same knee");
        assert_eq!((k.level, k.index), (knee.level, knee.index + 1));
        assert_eq!(got.models[0].levels[k.index].key, knee.level);
        assert_eq!(got.selection, want.selection);
        assert_eq!(got.slo_capacity, want.slo_capacity);
        assert_eq!(got.also_at, want.also_at);
        assert_eq!(got.findings, want.findings);
        // Against a baseline whose level 8 is partial (and far better): 8 is not in it.
        let mut base = plain.clone();
        for l in &mut base.models[0].levels {
            if l.key.concurrency == 8 {
                l.partial = true;
                l.ttft_s = l.ttft_s.map(|mut s| {
                    s.p95 /= 100.0;
                    s.p50 /= 100.0;
                    s
                });
            }
        }
        let mut cur = plain.clone();
        judge(&mut cur, &criteria, true, Some(&(base, "b".into())), &th);
        let c = cur.comparison.unwrap();
        assert!(c.not_in_baseline.contains(&"alpha @ 8".to_owned()), "{c:?}");
        assert!(
            c.regressions
                .iter()
                .all(|r| r.level != "8" || r.model != "alpha"),
            "{c:?}"
        );
    }

    #[test]
    fn closed_and_open_levels() {
        let l = levels(&[1, 5], &[]).unwrap();
        assert_eq!(l.iter().map(|k| k.label()).collect::<Vec<_>>(), ["1", "5"]);
        assert_eq!(levels(&[], &[]).unwrap()[0].concurrency, 1);
        let l = levels(&[100], &[1.0, 2.0]).unwrap();
        assert_eq!((l[1].concurrency, l[1].rate), (100, Some(2.0)));
        let l = levels(&[], &[3.0]).unwrap();
        assert_eq!(l[0].concurrency, 1000);
        let l = levels(&[1, 2, 4], &[5.0]).unwrap();
        assert_eq!(l.len(), 3);
        assert!(levels(&[1, 2], &[1.0, 2.0, 3.0]).is_err());
        assert!(levels(&[1], &[0.0]).is_err());
    }

    #[test]
    fn choose_target_prompt_models() {
        let cfg = Config::parse(
            "prompts:\n  - name: a\n    messages: [{role: user, content: hi}]\n  - name: b\n    messages: [{role: user, content: yo}]\n\
             targets:\n  - name: t1\n    base_url: http://127.0.0.1:1/v1\n    models: [m1, m2]\n  - name: t2\n    base_url: http://127.0.0.1:2/v1\n    models: [x]\n    prompts: [b]\n",
        )
        .unwrap();
        let names = |m: Vec<BenchModel>| m.iter().map(BenchModel::name).collect::<Vec<_>>();
        let (j, m) = choose(&cfg, None, None, &[]).unwrap();
        assert_eq!(
            (j.target.name.as_str(), j.prompt.name.as_str()),
            ("t1", "a")
        );
        assert_eq!(names(m), vec!["t1/m1", "t1/m2"]);
        let (j, m) = choose(&cfg, Some("t2"), None, &["y".into()]).unwrap();
        assert_eq!(
            (j.prompt.name.as_str(), names(m)),
            ("b", vec!["t2/y".to_owned()])
        );
        // target/model pairs: the same model at two targets; a prefix that names no target is
        // part of the model's name.
        let pairs = [
            "m1".into(),
            "t2/m1".into(),
            "org/big".into(),
            "t2/org/big".into(),
        ];
        let (j, m) = choose(&cfg, None, None, &pairs).unwrap();
        assert_eq!(j.target.name, "t1");
        assert_eq!(
            names(m.clone()),
            ["t1/m1", "t2/m1", "t1/org/big", "t2/org/big"]
        );
        assert_eq!(m[1].target.base_url, "http://127.0.0.1:2/v1");
        assert_eq!(m[2].model, "org/big");
        let e = choose(&cfg, None, None, &["m1".into(), "t1/m1".into()]).unwrap_err();
        assert!(e.to_string().contains("t1/m1 is given twice"), "{e}");
        let e = choose(&cfg, None, None, &["t2/".into()]).unwrap_err();
        assert!(e.to_string().contains("empty model name"), "{e}");
        let (j, _) = choose(&cfg, Some("t1"), Some("b"), &[]).unwrap();
        assert_eq!(j.prompt.name, "b");
        assert!(choose(&cfg, Some("nope"), None, &[]).is_err());
        assert!(choose(&cfg, Some("t2"), Some("a"), &[]).is_err());
    }
}
