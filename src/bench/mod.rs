//! `tokenprobe bench`: load tests that step concurrency (or an arrival rate) up, per model, with
//! the same measurement code as `serve` ([`crate::probe::Prober::run`] → [`ProbeResult`]), so a
//! benchmark number and a dashboard number mean the same thing.
//!
//! - [`runner`]: the load generator (closed and open loop) and its own lag.
//! - [`stats`]: per-request samples and exact per-level statistics.
//! - [`criteria`]: metric names, limits, weights, SLOs and the `--bench.file` YAML.
//! - [`select`]: the knee, selection (hard limits, weighted score) and baseline regressions.
//! - [`report`]: the report and its terminal, Markdown, CSV and JSON renderings.
//! - [`plot`]: the SVG plot.
//! - [`server`]: server metrics beside every level; [`findings`]: what client and server numbers
//!   mean together.
//!
//! [`run`] takes a [`BenchPlan`], a validated run built from the flags by [`crate::cli::bench`].
//!
//! Exit codes: 0 done; 2 bad usage, config, bench file or baseline, or an output that cannot be
//! written; 3 a metric regressed against `--baseline` beyond the tolerance. `docs/bench.md` is the
//! user guide and defines every number.
//!
//! [`ProbeResult`]: crate::measure::ProbeResult

pub mod criteria;
pub mod findings;
pub mod plot;
pub mod report;
pub mod runner;
pub mod select;
pub mod server;
pub mod stats;

use crate::config::{Config, ConfigError, Job};
use crate::probe::ProbeSpec;
use crate::transport::TransportError;
use criteria::{Criteria, CriteriaError};
use report::{LoadMode, ModelReport, Report};
use runner::{Amount, Arrival, Progress, Runner};
use stats::{LevelKey, LevelStats};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

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
    /// The baseline report could not be read.
    #[error("cannot use baseline {path}: {reason}")]
    Baseline {
        /// The file.
        path: PathBuf,
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

/// Output formats, by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The JSON report (what `bench report`, `--baseline` and merges read).
    Json,
    /// One row per model and level.
    Csv,
    /// The Markdown table.
    Markdown,
}

impl Format {
    /// The format a path's extension names (`.json`, `.csv`, `.md`/`.markdown`).
    pub fn of(p: &Path) -> Option<Format> {
        match p
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("json") => Some(Format::Json),
            Some("csv") => Some(Format::Csv),
            Some("md" | "markdown") => Some(Format::Markdown),
            _ => None,
        }
    }
}

/// A validated bench run: everything that can be wrong with the invocation was checked when this
/// was built ([`crate::cli::bench`]), before any request is sent.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    /// Limits, weights, SLOs, knee rule, tolerances, selection level.
    pub criteria: Criteria,
    /// The job whose target and prompt are probed (its model is replaced per model).
    pub job: Job,
    /// The probe of one request (`max_tokens` already overridden).
    pub spec: ProbeSpec,
    /// Models, in order.
    pub models: Vec<String>,
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
    /// Keep every request's sample in the report.
    pub samples: bool,
    /// Show the progress bar (when stderr is a terminal).
    pub progress: bool,
    /// Models are judged (several models, limits, weights or a bench file).
    pub judged: bool,
    /// The baseline report and its path.
    pub baseline: Option<(Report, PathBuf)>,
    /// Report files and their formats.
    pub outputs: Vec<(PathBuf, Format)>,
    /// Server metrics, the Prometheus source and the finding thresholds.
    pub server: server::ServerPlan,
    /// The SVG plot's path.
    pub plot: Option<PathBuf>,
}

impl BenchPlan {
    /// Open loop (arrival rates) rather than closed loop (workers).
    pub fn open(&self) -> bool {
        self.levels.iter().any(|k| k.rate.is_some())
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
                stats::trim_float(x),
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
/// and the models to compare (named, or the target's).
///
/// # Errors
/// [`BenchError::Usage`] when the config has no such target or prompt.
pub fn choose(
    config: &Config,
    target: Option<&str>,
    prompt: Option<&str>,
    models: &[String],
) -> Result<(Job, Vec<String>), BenchError> {
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
    let models = if models.is_empty() {
        dedup(of_target.iter().map(|j| j.model.as_str()).collect())
            .into_iter()
            .map(str::to_owned)
            .collect()
    } else {
        models.to_vec()
    };
    Ok((job.clone(), models))
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

/// Reads a baseline report.
///
/// # Errors
/// [`BenchError::Baseline`] when it cannot be read or is not a bench JSON report.
pub fn load_baseline(path: &Path) -> Result<Report, BenchError> {
    let err = |reason: String| BenchError::Baseline {
        path: path.to_owned(),
        reason,
    };
    let text = crate::config::read_input_file(path).map_err(|e| err(e.to_string()))?;
    serde_json::from_str(&text)
        .map_err(|e| err(format!("not a tokenprobe bench JSON report ({e})")))
}

fn write(path: &Path, text: &str) -> Result<(), BenchError> {
    std::fs::write(path, text).map_err(|e| BenchError::Output {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// Runs `tokenprobe bench`.
///
/// # Errors
/// [`BenchError`] (exit 2) for bad flags, config, bench file or baseline, or an output that
/// cannot be written. A regression against the baseline is `Ok(ExitCode 3)`.
/// Runs a validated bench: every model at every level, then the report, its files and the plot.
///
/// # Errors
/// [`BenchError`] when the prober cannot be built or an output cannot be written.
pub async fn run(plan: BenchPlan) -> Result<ExitCode, BenchError> {
    let BenchPlan {
        criteria,
        job,
        spec,
        models,
        levels: level_keys,
        arrival,
        seed,
        amount,
        warmup,
        samples,
        progress: show,
        judged,
        baseline,
        outputs,
        plot,
        server: server_plan,
    } = plan;
    let open = level_keys.iter().any(|k| k.rate.is_some());
    let per_level_units = match amount {
        Amount::Requests(n) => n,
        Amount::Duration(d) => d.as_secs().max(1),
    };
    let total = per_level_units * level_keys.len() as u64 * models.len() as u64;
    let progress = Progress::new(total, show);
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    progress.println(&format!(
        "tokenprobe bench: target {} ({}), prompt {}, models {}, {} levels ({})",
        job.target.name,
        crate::redact::redact_url(&spec.url()),
        job.prompt.name,
        models.join(", "),
        level_keys.len(),
        if open {
            format!("open loop, {} arrivals", arrival.as_str())
        } else {
            "closed loop".into()
        }
    ));
    let mut runner = Runner::new(spec.clone(), progress.clone())?;
    let mut server_side = server::ServerSide::start(&server_plan)?;
    let mut reports = Vec::new();
    let mut done_units = 0;
    for (mi, model) in models.iter().enumerate() {
        runner.set_model(model);
        let mut levels_out = Vec::new();
        for (li, key) in level_keys.iter().enumerate() {
            let label = format!("{model} @ {}", key.label());
            runner.warmup(key.concurrency, warmup).await?;
            server_side.begin().await;
            let run = match key.rate {
                None => {
                    runner
                        .closed(key.concurrency, amount, label.clone(), done_units)
                        .await?
                }
                Some(rate) => {
                    let level_seed = seed.wrapping_add((mi as u64) << 32).wrapping_add(li as u64);
                    runner
                        .open(
                            rate,
                            key.concurrency,
                            arrival,
                            level_seed,
                            amount,
                            label.clone(),
                            done_units,
                        )
                        .await?
                }
            };
            done_units += per_level_units;
            let mut stats = LevelStats::from_samples(
                *key,
                &run.samples,
                run.wall_s,
                &run.loop_lag,
                &criteria.slos,
                run.capped,
            );
            stats.server = server_side
                .end((mi, model), li, &stats, &label, &progress)
                .await;
            if samples {
                let mut s = run.samples;
                s.sort_by(|x, y| x.sent_s.total_cmp(&y.sent_s));
                stats.samples = Some(s);
            }
            progress.println(&level_line(&label, &stats));
            levels_out.push(stats);
        }
        let knee = select::find_knee(&levels_out, &criteria.knee);
        reports.push(ModelReport {
            model: model.clone(),
            levels: levels_out,
            knee,
        });
    }
    server_side.finish(&mut reports, &progress).await;
    progress.finish();
    let selection = judged.then(|| select::select(&reports, &criteria));
    let comparison = baseline
        .as_ref()
        .map(|(b, p)| select::compare(&reports, &b.models, &criteria, &p.display().to_string()));
    let report = Report {
        tool: "tokenprobe".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        started_at,
        target: job.target.name.clone(),
        base_url: crate::redact::redact_url(&job.target.base_url),
        api: job.target.api.to_string(),
        prompt: job.prompt.name.clone(),
        max_tokens: spec.max_tokens,
        mode: load_mode(open, arrival, seed, amount, warmup),
        slo: criteria.slos.iter().map(ToString::to_string).collect(),
        knee_rule: criteria.knee,
        models: reports,
        selection,
        comparison,
        findings: Vec::new(),
    };
    let report = Report {
        findings: findings::findings(&report.models, &server_plan.thresholds),
        ..report
    };
    crate::output::print_stdout(&report::render_table(&report));
    write_outputs(&report, &outputs, plot.as_deref(), &criteria)?;
    let regressed = report
        .comparison
        .as_ref()
        .is_some_and(|c| !c.regressions.is_empty());
    Ok(if regressed {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// How the load was generated, as the report states it.
fn load_mode(open: bool, arrival: Arrival, seed: u64, amount: Amount, warmup: u64) -> LoadMode {
    LoadMode {
        kind: if open { "open" } else { "closed" }.into(),
        arrival: open.then(|| arrival.as_str().to_owned()),
        seed: (open && arrival == Arrival::Poisson).then_some(seed),
        requests_per_level: match amount {
            Amount::Requests(n) => Some(n),
            Amount::Duration(_) => None,
        },
        duration_per_level_s: match amount {
            Amount::Duration(d) => Some(d.as_secs_f64()),
            Amount::Requests(_) => None,
        },
        warmup,
    }
}

/// Writes the report files and the plot.
fn write_outputs(
    report: &Report,
    outputs: &[(PathBuf, Format)],
    plot: Option<&Path>,
    criteria: &Criteria,
) -> Result<(), BenchError> {
    for (o, format) in outputs {
        let text = match format {
            Format::Json => report::render_json(report),
            Format::Csv => report::render_csv(report).map_err(|e| BenchError::Output {
                path: o.clone(),
                reason: e.to_string(),
            })?,
            Format::Markdown => report::render_markdown(report),
        };
        write(o, &text)?;
    }
    if let Some(p) = plot {
        let lines = plot::ref_lines(criteria);
        let svg = plot::render_svg(report, &lines).map_err(|e| BenchError::Output {
            path: p.to_path_buf(),
            reason: e.to_string(),
        })?;
        write(p, &svg)?;
    }
    Ok(())
}

/// One line per finished level on stderr.
fn level_line(label: &str, l: &LevelStats) -> String {
    let f = |s: &Option<stats::Summary>, g: fn(&stats::Summary) -> f64| {
        s.as_ref()
            .map_or_else(|| "-".to_owned(), |s| criteria::fmt_secs(g(s)))
    };
    format!(
        "  {label}: {} requests, {:.2}% errors, TTFT p50 {} p95 {}, TPOT p50 {}, {:.1} tok/s, {:.2} req/s, lag p99 {}, loop lag p99 {}{}",
        l.requests,
        l.error_rate * 100.0,
        f(&l.ttft_s, |s| s.p50),
        f(&l.ttft_s, |s| s.p95),
        f(&l.tpot_s, |s| s.p50),
        l.output_tokens_per_s,
        l.requests_per_s,
        f(&l.lag_s, |s| s.p99),
        f(&l.loop_lag_s, |s| s.p99),
        l.ramp_s
            .map_or_else(String::new, |r| format!(", ramp {}", criteria::fmt_secs(r))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let (j, m) = choose(&cfg, None, None, &[]).unwrap();
        assert_eq!(
            (j.target.name.as_str(), j.prompt.name.as_str()),
            ("t1", "a")
        );
        assert_eq!(m, vec!["m1", "m2"]);
        let (j, m) = choose(&cfg, Some("t2"), None, &["y".into()]).unwrap();
        assert_eq!((j.prompt.name.as_str(), m), ("b", vec!["y".to_owned()]));
        let (j, _) = choose(&cfg, Some("t1"), Some("b"), &[]).unwrap();
        assert_eq!(j.prompt.name, "b");
        assert!(choose(&cfg, Some("nope"), None, &[]).is_err());
        assert!(choose(&cfg, Some("t2"), Some("a"), &[]).is_err());
    }

    #[test]
    fn output_formats_by_extension() {
        assert_eq!(Format::of(Path::new("r.json")), Some(Format::Json));
        assert_eq!(Format::of(Path::new("r.CSV")), Some(Format::Csv));
        assert_eq!(Format::of(Path::new("r.md")), Some(Format::Markdown));
        assert_eq!(Format::of(Path::new("r.txt")), None);
    }
}
