//! `tokenprobe bench`'s flags and their conversion into a validated [`BenchPlan`]: every check of
//! the invocation (outputs, levels against the fd limit, the selection level, amounts, the config,
//! target, prompt and models, the baseline) happens here, before any request is sent.

use crate::bench::criteria::{self, Criteria, CriteriaError, parse_ratio, parse_weights};
use crate::bench::runner::{Amount, Arrival};
use crate::bench::{
    BenchError, BenchPlan, Format, MAX_REQUESTS_PER_LEVEL, check_select_at, choose, fd_limit,
    fit_fd_limit, levels, load_baseline,
};
use crate::config::Config;
use crate::probe::ProbeSpec;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Open-loop inter-arrival distribution (flag value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ArrivalArg {
    /// Exponential gaps (a Poisson process).
    Poisson,
    /// Equal gaps.
    Constant,
}

/// Flags of `tokenprobe bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// The YAML config file (the same one `serve` uses).
    #[arg(long = "config.file")]
    pub config_file: PathBuf,
    /// Target name in the config (default: the first target).
    #[arg(long)]
    pub target: Option<String>,
    /// Models to compare, comma-separated (default: the target's models).
    #[arg(long, value_delimiter = ',')]
    pub models: Vec<String>,
    /// Prompt name (default: the target's first prompt).
    #[arg(long)]
    pub prompt: Option<String>,
    /// Override the prompt's max_tokens.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: Option<u32>,
    /// Concurrency levels, e.g. 1,5,10,20,50 (closed loop: workers; open loop: the in-flight cap).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: Vec<u32>,
    /// Measured requests per level.
    #[arg(
        long,
        required_unless_present = "duration_per_level",
        conflicts_with = "duration_per_level",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub requests_per_level: Option<u64>,
    /// Sending time per level (e.g. 30s); requests in flight at its end still finish.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration_per_level: Option<Duration>,
    /// Unmeasured requests before each level.
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// Open loop: arrival rates in requests/s, e.g. 1,2,4 (the levels; --concurrency caps in-flight, default 1000).
    #[arg(long, value_delimiter = ',')]
    pub rate: Vec<f64>,
    /// Open loop: inter-arrival distribution.
    #[arg(long, value_enum, default_value_t = ArrivalArg::Poisson)]
    pub arrival: ArrivalArg,
    /// Seed of the Poisson arrivals (default: from the clock; recorded in the report).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Hard limit a model must meet to be ranked, e.g. ttft_p95<2s, error_rate<0.01, tps_p50>30 (repeatable).
    #[arg(long = "limit")]
    pub limits: Vec<String>,
    /// Score weights, e.g. ttft=0.5,tps=0.3,tpot=0.2 (repeatable; default exactly that).
    #[arg(long = "weight")]
    pub weights: Vec<String>,
    /// Per-request SLO of the goodput, e.g. ttft=2s, tpot=50ms, tps=30 (repeatable).
    #[arg(long = "slo")]
    pub slos: Vec<String>,
    /// YAML with limits, weights, slo, knee, tolerance, select_at (flags add to or override it).
    #[arg(long = "bench.file")]
    pub bench_file: Option<PathBuf>,
    /// The level (concurrency, or rate in open loop) at which models are judged (default: the last).
    #[arg(long)]
    pub select_at: Option<f64>,
    /// Knee: aggregate tokens/s grew by less than this (default 10%).
    #[arg(long)]
    pub knee_tps_growth: Option<String>,
    /// Knee: while TTFT p95 grew by more than this (default 50%).
    #[arg(long)]
    pub knee_ttft_growth: Option<String>,
    /// An earlier run's JSON report: exit 3 when a metric got worse beyond the tolerance.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Relative tolerance of the baseline comparison (default 10%).
    #[arg(long)]
    pub tolerance: Option<String>,
    /// Absolute tolerance of the error rate against the baseline (default 0.01 = 1 point).
    #[arg(long)]
    pub tolerance_error_rate: Option<String>,
    /// Write the report to FILE.json, FILE.csv or FILE.md (by extension; repeatable).
    #[arg(long = "output", short = 'o')]
    pub outputs: Vec<PathBuf>,
    /// Include every request's sample in the JSON report.
    #[arg(long)]
    pub samples: bool,
    /// Plot TTFT p95 and aggregate tokens/s against the load to FILE.svg.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// No progress bar (it is shown only when stderr is a terminal anyway).
    #[arg(long)]
    pub no_progress: bool,
    /// Server metrics beside every level.
    #[command(flatten)]
    pub server: super::bench_server::ServerArgs,
}

/// The criteria from the bench file and the flags (flags add limits and SLOs, and replace the
/// file's weights, knee rule, tolerances and selection level).
///
/// # Errors
/// [`CriteriaError`] for an unreadable or invalid file or flag.
pub fn criteria(a: &BenchArgs) -> Result<Criteria, CriteriaError> {
    let mut c = match &a.bench_file {
        Some(p) => Criteria::load_file(p)?,
        None => Criteria::default(),
    };
    for l in &a.limits {
        c.limits.push(l.parse()?);
    }
    if !a.weights.is_empty() {
        c.weights.clear();
        for w in &a.weights {
            c.weights.extend(parse_weights(w)?);
        }
    }
    for s in &a.slos {
        let slo: criteria::Slo = s.parse()?;
        c.slos.retain(|o| o.base != slo.base);
        c.slos.push(slo);
    }
    if let Some(g) = &a.knee_tps_growth {
        c.knee.tps_growth = parse_ratio(g)?;
    }
    if let Some(g) = &a.knee_ttft_growth {
        c.knee.ttft_growth = parse_ratio(g)?;
    }
    if let Some(t) = &a.tolerance {
        c.tolerance = parse_ratio(t)?;
    }
    if let Some(t) = &a.tolerance_error_rate {
        c.tolerance_error_rate = parse_ratio(t)?;
    }
    if a.select_at.is_some() {
        c.select_at = a.select_at;
    }
    Ok(c)
}

impl BenchArgs {
    /// The validated plan of this invocation.
    ///
    /// # Errors
    /// [`BenchError`] for anything that would make the run fail or mean something else than asked.
    pub fn plan(&self) -> Result<BenchPlan, BenchError> {
        let a = self;
        let criteria = criteria(a)?;
        let mut outputs = Vec::new();
        for o in &a.outputs {
            let Some(format) = Format::of(o) else {
                return Err(BenchError::Usage(format!(
                    "--output {}: the extension must be .json, .csv or .md",
                    o.display()
                )));
            };
            outputs.push((o.clone(), format));
        }
        if let Some(p) = &a.plot
            && p.extension().and_then(|e| e.to_str()) != Some("svg")
        {
            return Err(BenchError::Usage(format!(
                "--plot {}: only .svg is supported (convert it with e.g. rsvg-convert for a PNG)",
                p.display()
            )));
        }
        for o in a.outputs.iter().chain(a.plot.iter()) {
            let dir = o
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if !dir.is_dir() {
                return Err(BenchError::Usage(format!(
                    "{}: the directory {} does not exist",
                    o.display(),
                    dir.display()
                )));
            }
        }
        if a.models.iter().any(|m| m.trim().is_empty()) {
            return Err(BenchError::Usage("--models: empty model name".into()));
        }
        let baseline = match &a.baseline {
            Some(p) => Some((load_baseline(p)?, p.clone())),
            None => None,
        };
        let mut level_keys = levels(&a.concurrency, &a.rate)?;
        fit_fd_limit(&mut level_keys, !a.concurrency.is_empty(), fd_limit())?;
        check_select_at(&level_keys, criteria.select_at)?;
        let config = Config::load(&a.config_file).map_err(|source| BenchError::Config {
            path: a.config_file.clone(),
            source,
        })?;
        let (job, models) = choose(&config, a.target.as_deref(), a.prompt.as_deref(), &a.models)?;
        let mut spec = ProbeSpec::from_job(&job);
        if a.max_tokens.is_some() {
            spec.max_tokens = a.max_tokens;
        }
        let arrival = match a.arrival {
            ArrivalArg::Poisson => Arrival::Poisson,
            ArrivalArg::Constant => Arrival::Constant,
        };
        let seed = a.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
        let amount = match (a.requests_per_level, a.duration_per_level) {
            (Some(n), _) => Amount::Requests(n),
            (None, Some(d)) => Amount::Duration(d),
            (None, None) => {
                return Err(BenchError::Usage(
                    "give --requests-per-level N or --duration-per-level D".into(),
                ));
            }
        };
        let too_many = match amount {
            Amount::Duration(d) if d.is_zero() => {
                return Err(BenchError::Usage(
                    "--duration-per-level must be above 0".into(),
                ));
            }
            Amount::Requests(0) => {
                return Err(BenchError::Usage(
                    "--requests-per-level must be at least 1".into(),
                ));
            }
            Amount::Requests(n) => n as f64 > MAX_REQUESTS_PER_LEVEL,
            Amount::Duration(d) => a
                .rate
                .iter()
                .any(|r| r * d.as_secs_f64() > MAX_REQUESTS_PER_LEVEL),
        };
        if a.warmup as f64 > MAX_REQUESTS_PER_LEVEL {
            return Err(BenchError::Usage(format!(
                "--warmup {}: at most {MAX_REQUESTS_PER_LEVEL} unmeasured requests per level",
                a.warmup
            )));
        }
        if too_many {
            return Err(BenchError::Usage(format!(
                "a level would send more than {MAX_REQUESTS_PER_LEVEL} requests: lower --rate, --duration-per-level or --requests-per-level"
            )));
        }
        let judged = models.len() > 1
            || !criteria.limits.is_empty()
            || !a.weights.is_empty()
            || a.bench_file.is_some();
        let server = a.server.plan(&job.target)?;
        Ok(BenchPlan {
            criteria,
            job,
            spec,
            models,
            levels: level_keys,
            arrival,
            seed,
            amount,
            warmup: a.warmup,
            samples: a.samples,
            progress: !a.no_progress && std::io::stderr().is_terminal(),
            judged,
            baseline,
            outputs,
            plot: a.plot.clone(),
            server,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        bench: BenchArgs,
    }

    /// The plan of `tokenprobe bench <args>` against the shipped `config/bench.yml`.
    fn plan(args: &[&str]) -> Result<BenchPlan, BenchError> {
        let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/bench.yml");
        let mut argv = vec!["bench", "--config.file", config];
        argv.extend_from_slice(args);
        Cmd::try_parse_from(argv)
            .map_err(|e| BenchError::Usage(e.to_string()))?
            .bench
            .plan()
    }

    fn usage(r: Result<BenchPlan, BenchError>) -> String {
        match r {
            Err(BenchError::Usage(m)) => m,
            Err(e) => panic!("not a usage error: {e}"),
            Ok(p) => panic!("accepted: {p:?}"),
        }
    }

    #[test]
    fn closed_loop_flags_become_levels_models_and_outputs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let json = dir.path().join("r.json");
        let md = dir.path().join("r.MD");
        let p = plan(&[
            "--concurrency",
            "1,5,10",
            "--requests-per-level",
            "20",
            "--models",
            "a,b",
            "--max-tokens",
            "7",
            "-o",
            json.to_str().expect("path"),
            "-o",
            md.to_str().expect("path"),
        ])
        .expect("plan");
        assert_eq!(
            p.levels
                .iter()
                .map(|k| (k.concurrency, k.rate))
                .collect::<Vec<_>>(),
            [(1, None), (5, None), (10, None)]
        );
        assert!(!p.open());
        assert_eq!(p.models, ["a", "b"]);
        assert!(p.judged, "two models are ranked");
        assert_eq!(p.spec.max_tokens, Some(7));
        assert!(matches!(p.amount, Amount::Requests(20)));
        assert_eq!(p.outputs, [(json, Format::Json), (md, Format::Markdown)]);
        assert_eq!(p.job.target.name, "sim");
        assert!(!p.progress, "no terminal in a test");
    }

    #[test]
    fn open_loop_keeps_the_seed_and_the_arrivals() {
        let p = plan(&[
            "--rate",
            "1,2.5",
            "--duration-per-level",
            "3s",
            "--arrival",
            "constant",
            "--seed",
            "42",
        ])
        .expect("plan");
        assert!(p.open());
        assert_eq!(
            p.levels.iter().map(|k| k.rate).collect::<Vec<_>>(),
            [Some(1.0), Some(2.5)]
        );
        assert_eq!((p.arrival, p.seed), (Arrival::Constant, 42));
        assert!(matches!(p.amount, Amount::Duration(d) if d == Duration::from_secs(3)));
        assert!(!p.judged, "one model, no limits: nothing to rank");
    }

    #[test]
    fn what_cannot_run_is_refused_before_sending() {
        let missing_dir = "/nonexistent-dir-of-tokenprobe/r.json";
        for (args, says) in [
            (
                &[
                    "--concurrency",
                    "1",
                    "--requests-per-level",
                    "1",
                    "-o",
                    "r.txt",
                ][..],
                ".json, .csv or .md",
            ),
            (
                &[
                    "--concurrency",
                    "1",
                    "--requests-per-level",
                    "1",
                    "--plot",
                    "p.png",
                ],
                "only .svg",
            ),
            (
                &[
                    "--concurrency",
                    "1",
                    "--requests-per-level",
                    "1",
                    "-o",
                    missing_dir,
                ],
                "does not exist",
            ),
            (
                &[
                    "--concurrency",
                    "1,2",
                    "--requests-per-level",
                    "1",
                    "--select-at",
                    "7",
                ],
                "7",
            ),
            (
                &[
                    "--concurrency",
                    "1",
                    "--requests-per-level",
                    "1",
                    "--models",
                    "a,,b",
                ],
                "empty model",
            ),
            (
                &["--rate", "1000", "--duration-per-level", "2000s"],
                "more than",
            ),
        ] {
            let m = usage(plan(args));
            assert!(m.contains(says), "{args:?}: {m}");
        }
    }

    #[test]
    fn limits_and_slos_from_flags_join_the_criteria() {
        let p = plan(&[
            "--concurrency",
            "1",
            "--requests-per-level",
            "1",
            "--limit",
            "ttft_p95<2s",
            "--slo",
            "ttft=1s",
            "--knee-tps-growth",
            "5%",
        ])
        .expect("plan");
        assert_eq!(p.criteria.limits.len(), 1);
        assert_eq!(p.criteria.slos.len(), 1);
        assert!((p.criteria.knee.tps_growth - 0.05).abs() < 1e-12);
        assert!(p.judged, "a limit is a judgement");
    }
}
