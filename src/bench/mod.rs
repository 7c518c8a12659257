//! `tokenprobe bench`: load tests that step concurrency (or an arrival rate) up, per model, with
//! the same measurement code as `serve` ([`crate::probe::Prober::run`] → [`ProbeResult`]), so a
//! benchmark number and a dashboard number mean the same thing.
//!
//! - [`plan`]: the validated run ([`plan::BenchPlan`]), which builds the sweep and the report it
//!   fills; [`plan::run`] runs them.
//! - [`schedule`]: what a series runs next, one interface with an implementation per way of
//!   choosing levels (a fixed sweep and the knee's added levels, the capacity search, a trace's
//!   replay); the sweep (`sweep`) runs each series' levels as its schedule says, each through
//!   the level step (`level`: warm-up, canaries, extensions, repeats, server view, cross-check).
//! - [`runner`]: the load generator (closed and open loop) and its own lag; [`progress`]: what
//!   is shown while it sends.
//! - [`stats`]: per-request samples and exact per-level statistics.
//! - [`criteria`]: metric names, limits, weights, SLOs and the `--bench.file` YAML.
//! - [`select`]: the knee and selection (hard limits, weighted score).
//! - [`gate`]: the comparison with a baseline run, each value's verdict (regression only when
//!   beyond the tolerance and significant), on [`significance`]'s tests.
//! - [`report`]: the typed report every renderer reads ([`crate::render`] writes it out).
//! - [`shard`]: one run split across processes (`--shard i/N`, `--start-at`), the run id.
//! - [`merge`]: `bench merge`, the shards' reports made into the whole run's; [`combine`]:
//!   `bench report`'s runs side by side, judged again.
//! - [`crosscheck`]: `--cross-check`, streaming vs non-streaming E2E beside each level.
//! - [`server_view`]: the LLM server's metrics beside every level; [`findings`]: what client and server numbers
//!   mean together.
//! - [`health`]: nothing sent in vain: the connectivity check, the early stop of a load whose
//!   requests all fail with an error more load cannot change, partial levels, exits 7 and 8.
//!
//! This is the measuring half: it sends, folds and judges. [`plan::run`] takes a
//! [`plan::BenchPlan`], a validated run built from the flags by [`crate::cli::bench`], and returns
//! the judged [`Report`]; the rendering half, [`crate::render`], prints and writes it.
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
pub mod combine;
pub mod confidence;
pub mod criteria;
pub mod crosscheck;
pub mod efficiency;
pub mod findings;
pub mod frontier;
pub mod gate;
pub mod health;
mod level;
pub mod merge;
pub mod plan;
pub mod progress;
pub mod provenance;
pub mod report;
pub mod run_exit;
pub mod runner;
pub mod sample;
pub mod schedule;
pub mod select;
pub mod served;
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
use crate::transport::TransportError;
use criteria::{Criteria, CriteriaError};
use report::{ModelReport, Report};
use stats::{LevelKey, LevelStats};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

#[cfg(test)]
mod tests {
    use super::*;

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
                .all(|r| r.level != stats::Load::Concurrency(8) || r.model != "alpha"),
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
