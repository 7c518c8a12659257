//! `tokenprobe bench`'s flags and their conversion into a validated [`BenchPlan`]: every check of
//! the invocation (outputs, levels against the fd limit, the selection level, amounts, the config,
//! target, prompt and models, the baseline) happens here, before any request is sent.

use crate::bench::criteria::{self, Criteria, CriteriaError, parse_ratio, parse_weights};
use crate::bench::crosscheck::CrossCheckSpec;
use crate::bench::plan::{BenchPlan, Judging, LoadPlan, RunPart, Sent, Watch};
use crate::bench::progress::ProgressMode;
use crate::bench::run_exit::ExitRules;
use crate::bench::runner::{Amount, Arrival};
use crate::bench::schedule::{CapacitySearch, FixedSweep, Replay, Schedule};
use crate::bench::server_cache::CachePlan;
use crate::bench::session::SessionMode;
use crate::bench::shard::{Shard, StartPlan};
use crate::bench::stats::LevelKey;
use crate::bench::{
    BenchError, MAX_REQUESTS_PER_LEVEL, check_select_at, choose_prompts, fd_limit, fit_fd_limit,
    levels, load_report,
};
use crate::config::Config;
use crate::exit::Exit;
use crate::probe::ProbeSpec;
use crate::render::Outputs;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::Duration;

/// Open-loop inter-arrival distribution (flag value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ArrivalArg {
    /// Exponential gaps (a Poisson process).
    Poisson,
    /// Equal gaps.
    Constant,
    /// A session trace's sessions start at their recorded instants: one level of the whole
    /// trace, no `--rate`.
    Recorded,
}

/// How `--ramp-up` raises the rate (flag value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RampUpArg {
    /// The rate grows by the same amount every second.
    Linear,
    /// The rate grows by the same factor every second.
    Exponential,
}

/// Flags of `tokenprobe bench`.
#[derive(clap::Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
#[command(group(
    clap::ArgGroup::new("level_length")
        .args(["requests_per_level", "duration_per_level", "sessions_per_level"])
))]
pub struct BenchArgs {
    /// What to do instead of a load test.
    #[command(subcommand)]
    pub action: Option<BenchAction>,
    /// The YAML config file (the same one `serve` uses); or give the target as flags
    /// (--base-url, --models, --api, the key, --prompt TEXT, ...).
    #[arg(long = "config.file", required_unless_present = "base_url")]
    pub config_file: Option<PathBuf>,
    /// The target and its prompt as flags, without --config.file.
    #[command(flatten)]
    pub target_flags: super::target_flags::TargetFlags,
    /// Target name in the config (default: the first target).
    #[arg(long, requires = "config_file")]
    pub target: Option<String>,
    /// Models to compare, comma-separated (with --config.file default: the target's models;
    /// `TARGET/MODEL` is a model at another target of the config; with --base-url required), the
    /// same prompt sent to each.
    #[arg(long, value_delimiter = ',', required_unless_present = "config_file")]
    pub models: Vec<String>,
    /// With --config.file: prompt names, comma-separated (default: the target's first prompt);
    /// several are swept one after the other, each its own series per model (e.g. an
    /// input-length sweep). With --base-url: the user message (default "Say hello in five words.").
    #[arg(long)]
    pub prompt: Vec<String>,
    /// Override the prompt's max_tokens (with --base-url: the output cap, default 64).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: Option<u32>,
    /// Concurrency levels, e.g. 1,5,10,20,50 (closed loop: workers; open loop: the in-flight cap).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: Vec<u32>,
    /// Measured requests per level.
    #[arg(
        long,
        conflicts_with = "duration_per_level",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub requests_per_level: Option<u64>,
    /// Sending time per level (e.g. 30s); requests in flight at its end still finish (a session
    /// prompt's sessions running at its end run to their end).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration_per_level: Option<Duration>,
    /// A session prompt: whole sessions per level (each of their turns a measured request).
    #[arg(
        long,
        conflicts_with_all = ["requests_per_level", "duration_per_level"],
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub sessions_per_level: Option<u64>,
    /// A session prompt: the model's context window, in tokens: a turn the server counted more
    /// input for overflowed it (for servers that do not refuse one; a refusal for the context's
    /// length is one anyway).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_context: Option<u64>,
    /// A session prompt: a level is invalid (not judged, marked in every output) when more than
    /// this share of its sessions overflowed the model's context (default 5%).
    #[arg(long)]
    pub max_overflow: Option<String>,
    /// Unmeasured requests before each level.
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// Each level's load rises from --ramp-from to its own over --ramp-over, linearly or
    /// exponentially, then stays there (open loop: the arrival rate; closed loop: the workers
    /// sending, each starting when the load reaches it); each level is then reported second by
    /// second.
    #[arg(long, value_enum, requires_all = ["ramp_from", "ramp_over"])]
    pub ramp_up: Option<RampUpArg>,
    /// --ramp-up: the load each level starts at (requests/s, or workers).
    #[arg(long, requires = "ramp_up")]
    pub ramp_from: Option<f64>,
    /// --ramp-up: how long the load takes to reach the level's, e.g. 30s.
    #[arg(long, requires = "ramp_up", value_parser = humantime::parse_duration)]
    pub ramp_over: Option<Duration>,
    /// Before each level, unmeasured requests at the level's own load (its workers, or its
    /// arrivals) for this long, e.g. 10s (after the --warmup requests, if any).
    #[arg(long, value_parser = parse_warmup_duration)]
    pub warmup_duration: Option<Duration>,
    /// Closed loop: spread the workers' first sends evenly over this (e.g. 200ms), so streams do
    /// not start, and stay, in step against a server without jitter (default 0: all at once).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub ramp: Duration,
    /// Do not open the workers' connections before each level (`connection: reuse` targets get
    /// one unmeasured `GET /models` per worker by default, so a level's first requests do not pay
    /// a connection set-up that its later ones do not).
    #[arg(long)]
    pub no_prewarm: bool,
    /// Empty the server's prefix cache before each level, after its warm-up (vLLM's POST
    /// /reset_prefix_cache, SGLang's POST /flush_cache; other servers: said, and the run goes
    /// on), so every level starts from the same server state.
    #[arg(long)]
    pub reset_prefix_cache: bool,
    /// Give every request a unique leading block, so no two requests share a prefix the server
    /// could serve from its cache (adds about 10 tokens to each request's input).
    #[arg(long)]
    pub cache_bust: bool,
    /// Open loop: arrival rates in requests/s, e.g. 1,2,4 (the levels; --concurrency caps in-flight, default 1000).
    #[arg(long, value_delimiter = ',')]
    pub rate: Vec<f64>,
    /// Open loop: inter-arrival distribution.
    #[arg(long, value_enum, default_value_t = ArrivalArg::Poisson)]
    pub arrival: ArrivalArg,
    /// Open loop: gamma-distributed gaps of shape K with the rate's mean (as vLLM's --burstiness):
    /// below 1 burstier than Poisson, 1 Poisson, above 1 smoother (their coefficient of variation
    /// is 1/sqrt(K)).
    #[arg(long, value_parser = parse_burstiness)]
    pub burstiness: Option<f64>,
    /// Seed of the Poisson or gamma arrivals (default: from the clock; recorded in the report).
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
    /// The level (concurrency, or rate in open loop) at which models are judged (default: with SLOs the highest load every model serves within them, else the highest load every model ran).
    #[arg(long)]
    pub select_at: Option<f64>,
    /// Rank a model whose answers came from another model (flagged model_mismatch) too; by
    /// default it is marked and not ranked (its figures are another model's).
    #[arg(long)]
    pub rank_substituted: bool,
    /// Knee: aggregate tokens/s grew by less than this (default 10%).
    #[arg(long)]
    pub knee_tps_growth: Option<String>,
    /// Knee: while TTFT p95 grew by more than this (default 50%).
    #[arg(long)]
    pub knee_ttft_growth: Option<String>,
    /// An earlier run to compare with, exit 3 when a metric got worse beyond the tolerance: its
    /// JSON report's file, or a run in the run store (`last`: the newest of the same target,
    /// model, prompt and load kind; or its id, as `bench history` lists it).
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Relative tolerance of the baseline comparison (default 10%).
    #[arg(long)]
    pub tolerance: Option<String>,
    /// Absolute tolerance of the error rate against the baseline (default 0.01 = 1 point).
    #[arg(long)]
    pub tolerance_error_rate: Option<String>,
    /// Family-wise confidence of the baseline comparison: a value regresses only when its change
    /// is significant at this confidence over every value compared (Holm), default 95%.
    #[arg(long)]
    pub confidence: Option<String>,
    /// Write the report to FILE.json, FILE.csv, FILE.md or FILE.html (by extension; repeatable).
    #[arg(long = "output", short = 'o')]
    pub outputs: Vec<PathBuf>,
    /// Include every request's sample in the JSON report.
    #[arg(long)]
    pub samples: bool,
    /// Plot TTFT p95 and aggregate tokens/s against the load to FILE.svg.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// No progress: neither the bar (when stderr is a terminal) nor the line every 5 s (when it
    /// is not).
    #[arg(long)]
    pub no_progress: bool,
    /// Run shard INDEX of COUNT (0-based, e.g. `$(JOB_COMPLETION_INDEX)/4` in a Kubernetes Indexed
    /// Job): this process sends its share of every level and keeps every sample (`bench merge`
    /// makes the shards' reports into the run's).
    #[arg(long, value_parser = clap::value_parser!(crate::bench::shard::Shard))]
    pub shard: Option<crate::bench::shard::Shard>,
    /// Start the first level at this wall-clock instant (RFC 3339, e.g. 2026-12-01T12:00:00Z) and
    /// every later one a level slot after the previous (duration per level + --level-gap), so the
    /// levels of every shard line up. Needs --duration-per-level.
    #[arg(long, value_parser = parse_start_at)]
    pub start_at: Option<chrono::DateTime<chrono::Utc>>,
    /// With --start-at: the time left after a level's sending ends for its last requests and the
    /// next level's warm-up, before the next level starts.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub level_gap: Duration,
    /// The run id every shard's report carries (default: with --start-at, computed alike on every
    /// shard from the config's target, prompt, models, levels, load and --start-at; without it,
    /// unique to this invocation).
    #[arg(long)]
    pub run_id: Option<String>,
    /// After each level, N non-streaming requests of the same workload at its concurrency (default 5), and their E2E p50 against the level's.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "5", value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub cross_check: Option<u64>,
    /// Cross-check: a gap is a finding when the E2E ratio is off by more than this (default 10%)...
    #[arg(long, requires = "cross_check")]
    pub cross_check_ratio: Option<String>,
    /// ...and the difference is more than this (default 50ms).
    #[arg(long, requires = "cross_check", value_parser = humantime::parse_duration)]
    pub cross_check_min_gap: Option<Duration>,
    /// Search each model's capacity within the --slo objectives: the highest concurrency (closed
    /// loop; --concurrency START,MAX, default 1,256) or arrival rate (open loop; --rate MIN,MAX)
    /// whose SLO attainment reaches --attainment. Doubles the load, then bisects.
    #[arg(long)]
    pub find_capacity: bool,
    /// The SLO attainment a level must reach in the capacity search (default 95%).
    #[arg(long, requires = "find_capacity")]
    pub attainment: Option<String>,
    /// Open loop: the capacity search bisects until the rates that passed and failed are this
    /// close (default 5%).
    #[arg(long, requires = "find_capacity")]
    pub capacity_tolerance: Option<String>,
    /// Stop each model's capacity search after this long (e.g. 10m), keeping what it found.
    #[arg(long, requires = "find_capacity", value_parser = humantime::parse_duration)]
    pub capacity_budget: Option<Duration>,
    /// Run a level of the capacity search up to N more times at its amount while its attainment's
    /// 95% interval reaches across the target (0: never; default 3, or, without a level length,
    /// 11 more parts of 10 s each).
    #[arg(long, requires = "find_capacity", value_parser = clap::value_parser!(u32).range(0..=100))]
    pub capacity_extend: Option<u32>,
    /// Run every level N times (one after the other, with the level's amount each time): the
    /// level's figures are those of all its requests, and each run's are kept to show the spread.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// Add up to N levels per sweep between the capacity ceiling (the last level before
    /// saturation) and the knee when they are further apart than one stream (or 5% of the rate),
    /// each where the fit of throughput against load bends or to confirm it, and leave out the
    /// planned levels once clearly past saturation (0: the levels as given). Not in sharded runs
    /// or with --start-at.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=32))]
    pub knee_levels: u32,
    /// A fixed sweep with --slo: run a level up to N more times at its amount while its SLO
    /// attainment's 95% interval holds 95% (the answer cannot say whether it passes), so each
    /// level is as long as its decision needs (0: never; the capacity search has
    /// --capacity-extend).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub until_clear: u32,
    /// Send single probes at this rate per second beside every level's load (at most 10), one
    /// at a time through their own connection: what a user arriving during that load sees,
    /// reported per level as its own series (the level's figures do not include them).
    #[arg(long, value_parser = parse_canary_rate)]
    pub canary: Option<f64>,
    /// The config prompt the canaries send (default: the level's own prompt), on the level's
    /// target and model.
    #[arg(long, requires = "canary")]
    pub canary_prompt: Option<String>,
    /// Exit 0 even when a level was client-bound (the bench's own CPU starvation reached its
    /// figures): such a level stays marked in every output.
    #[arg(long)]
    pub accept_client_bound: bool,
    /// Do not send the connectivity check: by default each model gets one unmeasured request
    /// before any level, and a model whose request fails is not loaded (exit 7).
    #[arg(long)]
    pub no_check: bool,
    /// A model whose connectivity check failed is left out and the others are loaded, without
    /// exit 7 for it (exit 7 still when every model failed its check).
    #[arg(long, conflicts_with = "no_check")]
    pub keep_going: bool,
    /// Stop a model's load after N requests in a row failed with an error more load cannot
    /// change (auth, bad_request, quota_exceeded; connect once the server had answered), no
    /// success between them: its level is kept, marked partial, its later levels are not run,
    /// and the run exits 8 (0: never stop).
    #[arg(long, default_value_t = crate::bench::health::STOP_AFTER_ERRORS)]
    pub stop_after_errors: u32,
    /// Server metrics beside every level.
    #[command(flatten)]
    pub server: super::bench_servermetrics::ServerArgs,
    /// The run store this run is recorded in.
    #[command(flatten)]
    pub store: super::bench_history::StoreArgs,
    /// Where every level's results are also sent.
    #[command(flatten)]
    pub export: super::bench_export::ExportArgs,
}

/// `--until-clear N` needs the objectives it decides and a fixed sweep in one process.
///
/// # Errors
/// [`BenchError::Usage`] without `--slo`, with `--find-capacity` (it has `--capacity-extend`), or
/// with shards or `--start-at` (every shard's levels must keep their length).
fn check_until_clear(a: &BenchArgs, criteria: &Criteria) -> Result<(), BenchError> {
    let usage = |m: &str| Err(BenchError::Usage(format!("--until-clear: {m}")));
    if a.until_clear == 0 {
        Ok(())
    } else if criteria.slos.is_empty() {
        usage("give the objectives whose attainment decides, e.g. --slo ttft=2s")
    } else if a.find_capacity {
        usage("the capacity search extends its levels with --capacity-extend")
    } else if a.sharded() || a.start_at.is_some() {
        usage("each shard would extend its levels on its own; run it in one process")
    } else {
        Ok(())
    }
}

/// `--ramp-up KIND --ramp-from R --ramp-over D`, checked: a start load above 0 and below every
/// level's (open loop: a rate; closed loop: at least one worker, without `--ramp`), a duration
/// above 0.
///
/// # Errors
/// [`BenchError::Usage`] saying what does not fit.
fn load_ramp(a: &BenchArgs) -> Result<Option<crate::bench::runner::LoadRamp>, BenchError> {
    let (Some(kind), Some(from), Some(over)) = (a.ramp_up, a.ramp_from, a.ramp_over) else {
        return Ok(None);
    };
    let usage = |m: String| Err(BenchError::Usage(format!("--ramp-up: {m}")));
    if a.rate.is_empty() {
        let concurrency = if a.concurrency.is_empty() {
            &[1][..]
        } else {
            &a.concurrency
        };
        if !a.ramp.is_zero() {
            return usage("starts a closed loop's workers as the load rises; --ramp spreads them evenly instead: give one of the two".into());
        }
        if !(from.is_finite() && from >= 1.0) || concurrency.iter().any(|c| from >= f64::from(*c)) {
            return usage(format!(
                "--ramp-from {from} must be at least 1 worker and below every --concurrency"
            ));
        }
    } else if !(from.is_finite() && from > 0.0) || a.rate.iter().any(|r| from >= *r) {
        return usage(format!(
            "--ramp-from {from} must be above 0 and below every --rate"
        ));
    }
    if over.is_zero() {
        return usage("--ramp-over must be longer than 0".into());
    }
    Ok(Some(crate::bench::runner::LoadRamp {
        exponential: kind == RampUpArg::Exponential,
        from,
        over: over.as_secs_f64(),
    }))
}

/// `x` to four significant digits (a trace's mean rate as its level's name: 3.356/s, not
/// 3.3559934601153083/s).
fn four_digits(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return x;
    }
    let scale = 10f64.powi(3 - x.log10().floor() as i32);
    (x * scale).round() / scale
}

/// What each level sends: `--requests-per-level` or `--duration-per-level` (a trace replay's
/// `replay`: every request of it), within [`MAX_REQUESTS_PER_LEVEL`] as the rates say.
fn level_amount(a: &BenchArgs, replay: Option<Amount>) -> Result<Amount, BenchError> {
    let amount = match (replay, a.requests_per_level, a.duration_per_level) {
        (Some(all), ..) => all,
        (None, Some(n), _) => Amount::Requests(n),
        (None, None, Some(d)) => Amount::Duration(d),
        (None, None, None) if a.sessions_per_level.is_some() => {
            Amount::Sessions(a.sessions_per_level.unwrap_or(1))
        }
        // The capacity search runs each level as long as its decision needs, within a cap.
        (None, None, None) if a.find_capacity => {
            Amount::Duration(crate::bench::capacity::AUTO_PART)
        }
        (None, None, None) => {
            return Err(BenchError::Usage(
                "give --requests-per-level N or --duration-per-level D (--sessions-per-level N for a session prompt; a trace prompt needs neither: it sends its requests; nor --find-capacity: it runs each level until its decision is clear)".into(),
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
        Amount::Requests(n) | Amount::Sessions(n) => n as f64 > MAX_REQUESTS_PER_LEVEL,
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
    Ok(amount)
}

/// A trace prompt's replay: its one level (the trace's mean rate, `--concurrency` the in-flight
/// cap, 1000 by default) and every request of it; `None` for other prompts. What would send
/// something else than the trace, or send it otherwise, is refused.
fn trace_replay(
    a: &BenchArgs,
    prompts: &[ProbeSpec],
) -> Result<Option<(LevelKey, Amount)>, BenchError> {
    let Some(t) = prompts.iter().find_map(|p| match &p.workload {
        crate::workload::Workload::Trace(t) => Some(t),
        _ => None,
    }) else {
        return Ok(None);
    };
    let own = [
        (prompts.len() > 1, "--prompt with several prompts"),
        (a.requests_per_level.is_some(), "--requests-per-level"),
        (a.burstiness.is_some(), "--burstiness"),
    ];
    if let Some(flag) = one_level_refusal(a, &own) {
        return Err(BenchError::Usage(format!(
            "a trace prompt replays its requests at their own instants, one level of the whole trace (pick a part with its start and duration, the pace with time_scale, the in-flight cap with one --concurrency); {flag} does not apply"
        )));
    }
    if t.is_empty() {
        return Err(BenchError::Usage("the trace holds no request".into()));
    }
    let key = LevelKey {
        concurrency: a.concurrency.first().copied().unwrap_or(1000),
        rate: Some(four_digits(t.mean_rate()).clamp(1e-6, crate::bench::MAX_RATE)),
    };
    Ok(Some((key, Amount::Requests(t.len() as u64))))
}

/// What [`session_plan`] makes of a run: its session mode (a session prompt's), and a recorded
/// replay's one level and amount.
type SessionPlanned = (Option<SessionMode>, Option<(LevelKey, Amount)>);

/// A session prompt's run, checked: every prompt a session (a sweep does not mix sessions with
/// other prompts), its levels' amount whole sessions (`--sessions-per-level`, not
/// `--requests-per-level`), no `--cross-check`; `--sessions-per-level`, `--max-context` and
/// `--max-overflow` for session prompts only. `--arrival recorded` replays a session trace's
/// sessions at their recorded starts: one level of the whole trace, named by its mean session
/// rate, its in-flight cap one `--concurrency` (default 1000); what would send otherwise is
/// refused. The mode, and the recorded replay's level and amount.
///
/// # Errors
/// [`BenchError::Usage`] naming the flag that does not fit.
fn session_plan(a: &BenchArgs, prompts: &[ProbeSpec]) -> Result<SessionPlanned, BenchError> {
    use crate::workload::Workload;
    let usage = |m: String| Err(BenchError::Usage(m));
    let is_session = |p: &ProbeSpec| matches!(p.workload, Workload::Session(_));
    let Some(first) = prompts.iter().find(|p| is_session(p)) else {
        let flag = [
            (a.sessions_per_level.is_some(), "--sessions-per-level"),
            (a.max_context.is_some(), "--max-context"),
            (a.max_overflow.is_some(), "--max-overflow"),
            (a.arrival == ArrivalArg::Recorded, "--arrival recorded"),
        ]
        .into_iter()
        .find_map(|(on, f)| on.then_some(f));
        return match flag {
            Some(f) => usage(format!(
                "{f} is for session prompts (session:), and no prompt of this run is one"
            )),
            None => Ok((None, None)),
        };
    };
    if let Some(other) = prompts.iter().find(|p| !is_session(p)) {
        return usage(format!(
            "prompt {}: a session prompt's levels are whole sessions, another prompt's requests; sweep session prompts with each other only (prompt {} is a {})",
            first.prompt.name,
            other.prompt.name,
            other.workload.kind()
        ));
    }
    if a.requests_per_level.is_some() {
        return usage(format!(
            "prompt {}: a session prompt's level is whole sessions: give --sessions-per-level N (or --duration-per-level D) instead of --requests-per-level",
            first.prompt.name
        ));
    }
    if a.cross_check.is_some() {
        return usage(format!(
            "prompt {}: --cross-check sends single requests of the prompt; a session's turns depend on each other's answers",
            first.prompt.name
        ));
    }
    let max_overflow = match &a.max_overflow {
        Some(v) => parse_ratio(v)?,
        None => crate::bench::session::DEFAULT_MAX_OVERFLOW,
    };
    if !(0.0..=1.0).contains(&max_overflow) {
        return usage("--max-overflow must be from 0% to 100%".into());
    }
    let mode = SessionMode {
        per_level: a.sessions_per_level,
        max_context: a.max_context,
        max_overflow,
        recorded: a.arrival == ArrivalArg::Recorded,
    };
    if !mode.recorded {
        return Ok((Some(mode), None));
    }
    let replay = match &first.workload {
        Workload::Session(crate::workload::Sessions::Replay(r)) if prompts.len() == 1 => r,
        _ => {
            return usage(format!(
                "--arrival recorded starts a session trace's sessions at their recorded instants: prompt {} is not one session trace",
                first.prompt.name
            ));
        }
    };
    let own = [(a.sessions_per_level.is_some(), "--sessions-per-level")];
    if let Some(flag) = one_level_refusal(a, &own) {
        return usage(format!(
            "--arrival recorded replays the trace's sessions at their recorded starts, one level of the whole trace (the pace with its time_scale, the sessions in flight with one --concurrency); {flag} does not apply"
        ));
    }
    let n = replay.len() as u64;
    if n == 0 {
        return usage("the session trace holds no session".into());
    }
    // The mean session rate: sessions after the first over the span of their starts.
    let span = (0..n)
        .map(|i| replay.start_offset(i).as_secs_f64())
        .fold(0.0, f64::max);
    let rate = if n > 1 && span > 0.0 {
        (n - 1) as f64 / span
    } else {
        1.0
    };
    let key = LevelKey {
        concurrency: a.concurrency.first().copied().unwrap_or(1000),
        rate: Some(four_digits(rate).clamp(1e-6, crate::bench::MAX_RATE)),
    };
    Ok((Some(mode), Some((key, Amount::Sessions(n)))))
}

/// `--warmup-duration D`: above 0 and at most an hour.
fn parse_warmup_duration(v: &str) -> Result<Duration, String> {
    match humantime::parse_duration(v) {
        Ok(d) if !d.is_zero() && d <= Duration::from_secs(3600) => Ok(d),
        Ok(_) => Err(format!("{v:?}: a warm-up of more than 0 and at most 1h")),
        Err(e) => Err(format!("{v:?}: {e}")),
    }
}

/// `--canary RATE`: canaries per second, above 0 and at most
/// [`crate::bench::canary::MAX_CANARY_RATE`].
fn parse_canary_rate(v: &str) -> Result<f64, String> {
    let max = crate::bench::canary::MAX_CANARY_RATE;
    match v.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= max => Ok(r),
        _ => Err(format!(
            "{v:?} is not a canary rate above 0 and at most {max} per second (canaries are a user beside the load, not load)"
        )),
    }
}

/// `--canary RATE [--canary-prompt NAME]`: the canaries' rate and prompt (a prompt of the
/// config, on each level's target and model), checked; one process only.
///
/// # Errors
/// [`BenchError::Usage`] with shards (each would send its own canaries), or an unknown prompt.
fn canary_plan(
    a: &BenchArgs,
    config: &Config,
) -> Result<Option<crate::bench::canary::CanaryPlan>, BenchError> {
    let Some(rate) = a.canary else {
        return Ok(None);
    };
    if a.sharded() {
        return Err(BenchError::Usage(
            "--canary: each shard would send its own canaries; run them in one process".into(),
        ));
    }
    let prompt = match &a.canary_prompt {
        None => None,
        Some(name) => {
            let (jobs, _) = choose_prompts(
                config,
                a.target.as_deref(),
                std::slice::from_ref(name),
                &a.models,
            )?;
            jobs.first().map(ProbeSpec::from_job)
        }
    };
    Ok(Some(crate::bench::canary::CanaryPlan { rate, prompt }))
}

/// `--burstiness K`: a shape above 0 (and finite).
fn parse_burstiness(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(k) if k.is_finite() && k > 0.0 => Ok(k),
        _ => Err(format!(
            "{v:?} is not a shape above 0 (e.g. 0.5 for bursts, 1 for Poisson, 4 for smoother)"
        )),
    }
}

/// The first flag given that a one-level replay (a trace, or a session trace's recorded starts)
/// cannot take: the replay's `own` (its level's amount, ...), then what every such replay
/// refuses: levels, their pace and length, warm-ups, searches, shards.
fn one_level_refusal(a: &BenchArgs, own: &[(bool, &'static str)]) -> Option<&'static str> {
    let shared = [
        (!a.rate.is_empty(), "--rate"),
        (a.concurrency.len() > 1, "several --concurrency values"),
        (a.duration_per_level.is_some(), "--duration-per-level"),
        (a.ramp_up.is_some(), "--ramp-up"),
        (a.warmup > 0, "--warmup"),
        (a.warmup_duration.is_some(), "--warmup-duration"),
        (a.find_capacity, "--find-capacity"),
        (a.until_clear > 0, "--until-clear"),
        (
            a.shard.is_some() || a.start_at.is_some(),
            "--shard and --start-at",
        ),
    ];
    own.iter()
        .chain(&shared)
        .find(|(on, _)| *on)
        .map(|(_, flag)| *flag)
}

/// The open-loop arrivals from `--arrival` and `--burstiness` (K = 1 is Poisson).
///
/// # Errors
/// [`BenchError::Usage`] for a burstiness without `--rate`, with constant arrivals, or split
/// across shards (gamma processes merged are not one of the same shape).
fn arrival(a: &BenchArgs) -> Result<Arrival, BenchError> {
    let usage = |m: &str| Err(BenchError::Usage(format!("--burstiness: {m}")));
    match (a.arrival, a.burstiness) {
        (ArrivalArg::Constant, None) => Ok(Arrival::Constant),
        (ArrivalArg::Poisson, None) => Ok(Arrival::Poisson),
        // The trace's recorded starts replace the arrivals (`session_plan` checks the prompt).
        (ArrivalArg::Recorded, None) => Ok(Arrival::Constant),
        (ArrivalArg::Constant, Some(_)) => {
            usage("shapes random gaps; --arrival constant has none (drop one of them)")
        }
        (ArrivalArg::Recorded, Some(_)) => usage(
            "shapes random gaps; --arrival recorded replays a trace's starts (drop one of them)",
        ),
        (ArrivalArg::Poisson, Some(_)) if a.rate.is_empty() => {
            usage("shapes open-loop arrivals: give the rates with --rate")
        }
        (ArrivalArg::Poisson, Some(_)) if a.sharded() => usage(
            "each shard would send its own gamma arrivals, and together they are not of that shape; run it in one process",
        ),
        (ArrivalArg::Poisson, Some(1.0)) => Ok(Arrival::Poisson),
        (ArrivalArg::Poisson, Some(shape)) => Ok(Arrival::Gamma { shape }),
    }
}

/// The search of `--find-capacity` from the flags, checked: SLOs to search within, bounds that
/// make a search, one process (no shards or shared start instants).
///
/// # Errors
/// [`BenchError::Usage`] saying what is missing or does not fit.
fn capacity_plan(
    a: &BenchArgs,
    level_keys: &mut Vec<LevelKey>,
    criteria: &Criteria,
) -> Result<Option<crate::bench::capacity::CapacityPlan>, BenchError> {
    use crate::bench::capacity::{CapacityPlan, Search};
    if !a.find_capacity {
        return Ok(None);
    }
    let usage = |m: &str| Err(BenchError::Usage(format!("--find-capacity: {m}")));
    if criteria.slos.is_empty() {
        return usage("give the objectives to search within, e.g. --slo ttft=2s --slo tpot=50ms");
    }
    if a.sharded() || a.start_at.is_some() {
        return usage(
            "the search decides each level from the one before: it runs in one process (no --shard, no --start-at)",
        );
    }
    if a.select_at.is_some() {
        return usage("the levels are the search's: --select-at cannot name one in advance");
    }
    if a.repeat > 1 {
        return usage(
            "the search runs a level on while its decision is unclear (--capacity-extend); --repeat is for fixed levels",
        );
    }
    let attainment = match &a.attainment {
        Some(s) => parse_ratio(s)?,
        None => 0.95,
    };
    if !(attainment > 0.0 && attainment <= 1.0) {
        return usage("--attainment must be above 0% and at most 100%");
    }
    let tolerance = match &a.capacity_tolerance {
        Some(s) => parse_ratio(s)?,
        None => 0.05,
    };
    if !(tolerance > 0.0 && tolerance < 1.0) {
        return usage("--capacity-tolerance must be above 0% and below 100%");
    }
    let open = !a.rate.is_empty();
    if !open && a.concurrency.is_empty() {
        // The search's default bounds: 1 to 256, or to what the open-file limit leaves room for.
        let room = fd_limit().map_or(256, |l| {
            l.saturating_sub(crate::bench::FD_RESERVE).clamp(2, 256) as u32
        });
        *level_keys = levels(&[1, room], &[])?;
    }
    let levels: &[LevelKey] = level_keys;
    let (start, max) = if open {
        match a.rate.as_slice() {
            [lo, hi] if lo < hi => (*lo, *hi),
            _ => return usage("in open loop give the rates to search between, --rate MIN,MAX"),
        }
    } else {
        match levels
            .iter()
            .map(|k| f64::from(k.concurrency))
            .collect::<Vec<_>>()
            .as_slice()
        {
            [1.0] => return usage("--concurrency 1 leaves nothing to search: give START,MAX"),
            [hi] => (1.0, *hi),
            [lo, hi] if lo < hi => (*lo, *hi),
            _ => return usage("give the concurrency to search between, --concurrency START,MAX"),
        }
    };
    Ok(Some(CapacityPlan {
        search: Search {
            attainment,
            start,
            max,
            tolerance,
            open,
        },
        cap: levels.first().map_or(1000, |k| k.concurrency),
        budget: a.capacity_budget,
        extensions: a.capacity_extend.unwrap_or(if a.auto_length() {
            crate::bench::capacity::AUTO_PARTS - 1
        } else {
            crate::bench::capacity::DEFAULT_EXTENSIONS
        }),
    }))
}

/// How each series chooses its levels: the capacity search's, a trace's one level, or the
/// levels as given (with the knee's added ones, except where every shard must run the same
/// levels: several shards, or shared start instants).
fn schedule(
    a: &BenchArgs,
    levels: Vec<LevelKey>,
    capacity: Option<crate::bench::capacity::CapacityPlan>,
    replay: Option<(LevelKey, Amount)>,
    criteria: &Criteria,
    (shared_start, sessions): (bool, bool),
) -> Box<dyn Schedule> {
    match (capacity, replay) {
        (Some(search), _) if sessions => Box::new(CapacitySearch::new(search).in_sessions()),
        (Some(search), _) => Box::new(CapacitySearch::new(search)),
        (None, Some((key, _))) => Box::new(Replay::new(key)),
        (None, None) => {
            let knee_levels = if a.sharded() || shared_start {
                0
            } else {
                a.knee_levels
            };
            Box::new(FixedSweep::new(
                levels,
                knee_levels,
                a.until_clear,
                criteria.knee,
            ))
        }
    }
}

/// How progress is shown: nothing with `--no-progress`, a bar on a terminal, else lines.
fn progress_mode(a: &BenchArgs) -> ProgressMode {
    if a.no_progress {
        ProgressMode::Off
    } else if std::io::stderr().is_terminal() {
        ProgressMode::Bar
    } else {
        ProgressMode::Lines
    }
}

fn parse_start_at(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| format!("{s:?}: not an RFC 3339 time such as 2026-12-01T12:00:00Z ({e})"))
}

/// A workload that does not stream has no TTFT, TTFO, TPOT or decode rate: criteria on them could
/// neither be met nor judged, so they are refused; the default score weights become `e2e=1`.
///
/// # Errors
/// [`BenchError::Usage`] naming the first such limit, SLO or weight.
fn fit_non_stream(criteria: &mut Criteria, spec: &ProbeSpec) -> Result<(), BenchError> {
    use crate::bench::criteria::Base;
    if spec.stream {
        return Ok(());
    }
    let per_token = |b: Base| matches!(b, Base::Ttft | Base::Ttfo | Base::Tpot | Base::Tps);
    let named = criteria
        .limits
        .iter()
        .map(|l| l.metric)
        .chain(criteria.weights.iter().map(|(m, _)| *m))
        .filter(|m| per_token(m.base))
        .map(|m| m.to_string())
        .chain(
            criteria
                .slos
                .iter()
                .filter(|s| per_token(s.base))
                .map(|s| format!("--slo {s}")),
        )
        .next();
    if let Some(m) = named {
        return Err(BenchError::Usage(format!(
            "{m}: this workload does not stream (stream: false), so TTFT, TTFO, TPOT and decode tokens/s are not measured; judge it by e2e, agg_tps, rps or error_rate"
        )));
    }
    if criteria.weights.is_empty() {
        criteria.weights = parse_weights("e2e=1")?;
    }
    Ok(())
}

/// The `--cross-check` settings, when given.
///
/// # Errors
/// [`BenchError::Usage`] for a bad ratio, or a workload that does not stream (nothing to compare).
fn cross_check(a: &BenchArgs, spec: &ProbeSpec) -> Result<Option<CrossCheckSpec>, BenchError> {
    let Some(requests) = a.cross_check else {
        return Ok(None);
    };
    if !spec.stream {
        return Err(BenchError::Usage(
            "--cross-check compares streaming with non-streaming requests, but this workload does not stream (stream: false)".into(),
        ));
    }
    let mut c = CrossCheckSpec {
        requests,
        ..CrossCheckSpec::default()
    };
    if let Some(r) = &a.cross_check_ratio {
        c.max_ratio =
            parse_ratio(r).map_err(|e| BenchError::Usage(format!("--cross-check-ratio: {e}")))?;
    }
    if let Some(g) = a.cross_check_min_gap {
        c.min_gap_s = g.as_secs_f64();
    }
    Ok(Some(c))
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
    if let Some(t) = &a.confidence {
        c.confidence = crate::bench::criteria::parse_confidence(t)?;
    }
    if a.select_at.is_some() {
        c.select_at = a.select_at;
    }
    c.rank_substituted |= a.rank_substituted;
    Ok(c)
}

/// `tokenprobe bench merge`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct MergeArgs {
    /// The shards' JSON reports (every shard of one run, in any order).
    #[arg(required = true, num_args = 1..)]
    pub reports: Vec<PathBuf>,
    /// Write the merged report to FILE.json, FILE.csv, FILE.md or FILE.html (by extension; repeatable).
    #[arg(long = "output", short = 'o')]
    pub outputs: Vec<PathBuf>,
    /// Plot the merged run to FILE.svg.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// An earlier run to compare the merged run with (exit 3 when a metric got worse beyond the
    /// tolerance the shards were run with): its JSON report's file, or a stored run (`last`, an
    /// id).
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// The run store the merged run is recorded in.
    #[command(flatten)]
    pub store: super::bench_history::StoreArgs,
}

/// What `bench` does besides running a load test.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum BenchAction {
    /// Merge the JSON reports of a run's shards (`bench --shard i/N`) into the run's report:
    /// every statistic recomputed from the union of their samples.
    Merge(MergeArgs),
    /// Render earlier runs' JSON reports (one, or several side by side) to FILE.html, .md, .csv
    /// or .json, without sending a request.
    Report(super::bench_report::ReportArgs),
    /// The run store: runs listed newest first, one model's trend across them (--model), as
    /// text, JSON or a page.
    History(super::bench_history::HistoryArgs),
}

impl MergeArgs {
    /// Merges the shards' reports, judges the merged run as the shards' criteria say, and writes
    /// it (exit 3 on a regression against `--baseline`).
    ///
    /// # Errors
    /// [`BenchError`] for an unreadable report, shards that are not one run's, or an output
    /// that cannot be written.
    pub fn run(&self) -> Result<Exit, BenchError> {
        let outputs = Outputs::check(&self.outputs, self.plot.as_deref())?;
        let mut reports = Vec::new();
        for p in &self.reports {
            reports.push((p.display().to_string(), load_report(p)?));
        }
        let first = &reports[0].1;
        let criteria = match &first.criteria {
            Some(r) => Criteria::from_record(r, first.knee_rule)?,
            None => Criteria {
                knee: first.knee_rule,
                ..Criteria::default()
            },
        };
        let judged = first.selection.is_some();
        let store = self.store.open_for_recording()?;
        let mut merged = crate::bench::merge::merge(&reports, &criteria.slos)
            .map_err(|e| BenchError::Usage(format!("bench merge: {e}")))?;
        let fit = crate::bench::baseline::Fit {
            models: merged
                .models
                .iter()
                .map(|m| {
                    let target = m.target.clone().unwrap_or_else(|| merged.target.clone());
                    (target, m.model.clone())
                })
                .collect(),
            workload: crate::bench::baseline::WorkloadKey::of(&merged),
            open_loop: merged.mode.kind.is_open(),
            levels: Some(
                merged
                    .models
                    .iter()
                    .flat_map(|m| m.levels.iter().map(|l| l.key))
                    .collect(),
            ),
        };
        let baseline = super::bench_history::baseline(self.baseline.as_deref(), &self.store, &fit)?;
        crate::bench::judge(
            &mut merged,
            &criteria,
            judged,
            baseline.as_ref(),
            &crate::bench::findings::Thresholds::default(),
        );
        crate::render::deliver(&merged, &outputs, &criteria)?;
        // The shards ran the check and judged their own client-bound levels, each saying so
        // (and exiting 4); a level of the run all errors is the run's.
        let rules = ExitRules {
            keep_going: true,
            accept_client_bound: true,
        };
        Ok(finish(store, &merged, rules))
    }
}

/// A delivered run's exit: its report's ([`crate::bench::run_exit`], its line said on stderr),
/// then the run recorded in `store` ([`Exit::NotRecorded`] when that fails).
fn finish(
    store: Option<crate::history::Store>,
    report: &crate::bench::report::Report,
    rules: ExitRules,
) -> Exit {
    let (exit, line) = crate::bench::run_exit::of(report, rules);
    if let Some(line) = line {
        crate::output::print_stderr_line(&line);
    }
    super::bench_history::record(store, report, exit)
}

/// `--shard`, `--start-at` and the run id: this process's part of the run, the levels' shared
/// start instants, and the run's id: with `--start-at`, the one every shard of the run computes
/// alike (from the target, prompts, models, levels, load and start; see
/// [`crate::bench::shard`]); without it, the same parts and this invocation's
/// [`invocation_nonce`], so two runs of one config never share an id.
///
/// # Errors
/// [`BenchError::Usage`] for `--start-at` without `--duration-per-level`, a bad `--run-id`, or
/// shards that could not agree on their run (neither `--start-at` nor `--run-id`).
fn sharding(
    a: &BenchArgs,
    amount: Amount,
    sent: &Sent,
    level_keys: &[LevelKey],
) -> Result<(Shard, Option<StartPlan>, String), BenchError> {
    let target = &sent.spec().target;
    let arrival = a.arrival;
    let shard = a.shard.unwrap_or_default();
    let start = match (a.start_at, amount) {
        (None, _) => None,
        (Some(start_at), Amount::Duration(d)) => Some(StartPlan {
            start_at,
            slot: d + a.level_gap,
        }),
        (Some(_), Amount::Requests(_) | Amount::Sessions(_)) => {
            return Err(BenchError::Usage(
                "--start-at needs --duration-per-level: levels start at shared instants one level slot apart, so every level must take the same time".into(),
            ));
        }
    };
    let run_id = match &a.run_id {
        Some(id) if id.trim().is_empty() || id.len() > 128 => {
            return Err(BenchError::Usage("--run-id: 1 to 128 characters".into()));
        }
        Some(id) => id.clone(),
        None if shard.count > 1 && a.start_at.is_none() => {
            return Err(BenchError::Usage(format!(
                "--shard {shard}: the shards of a run agree on its id through --start-at (the shared start that defines the run) or --run-id ID; give one of them"
            )));
        }
        None => crate::bench::shard::run_id(&[
            &target.name,
            &crate::redact::redact_url(&target.base_url),
            &sent
                .prompts()
                .iter()
                .map(|p| p.prompt.name.as_str())
                .collect::<Vec<_>>()
                .join(","),
            &sent
                .models()
                .iter()
                .map(crate::bench::BenchModel::name)
                .collect::<Vec<_>>()
                .join(","),
            &format!("{level_keys:?}"),
            &format!("{amount:?} {arrival:?} warmup {}", a.warmup),
            &a.start_at.map_or_else(invocation_nonce, |t| t.to_rfc3339()),
            &shard.count.to_string(),
        ]),
    };
    Ok((shard, start, run_id))
}

/// What makes a run without `--start-at` its own: this invocation's wall-clock start (ns), its
/// process id, a count of the runs planned in this process, and 64 bits the standard library
/// seeds from the operating system's randomness.
fn invocation_nonce() -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    use std::sync::atomic::{AtomicU64, Ordering};
    static PLANNED: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut random = std::collections::hash_map::RandomState::new().build_hasher();
    random.write_u128(nanos);
    format!(
        "{nanos} {} {} {:016x}",
        std::process::id(),
        PLANNED.fetch_add(1, Ordering::Relaxed),
        random.finish()
    )
}

impl BenchArgs {
    /// `--find-capacity` chooses each level's length itself (no `--requests-per-level` or
    /// `--duration-per-level`).
    fn auto_length(&self) -> bool {
        self.find_capacity && self.requests_per_level.is_none() && self.duration_per_level.is_none()
    }

    /// The config: `--config.file`'s, or the one target the flags describe (`--base-url`, its
    /// `--models` and one prompt), checked by the same rules.
    ///
    /// # Errors
    /// [`BenchError::Config`] for a config that cannot be loaded, [`BenchError::Usage`] for flags
    /// that are not valid (each problem named by its flag).
    fn config(&self) -> Result<Config, BenchError> {
        let t = &self.target_flags;
        if let Some(file) = &self.config_file {
            if let Some(flag) = t.target_only_flag() {
                return Err(BenchError::Usage(format!(
                    "{flag} describes a target given as flags (--base-url); with --config.file set it in the config's target"
                )));
            }
            return Config::load(file).map_err(|source| BenchError::Config {
                path: file.clone(),
                source,
            });
        }
        let Some(base_url) = &t.base_url else {
            return Err(BenchError::Usage(
                "give --config.file FILE, or the target as flags: --base-url URL --models A,B"
                    .into(),
            ));
        };
        let mut models: Vec<String> = Vec::new();
        for m in &self.models {
            if models.contains(m) {
                return Err(BenchError::Usage(format!("--models: {m:?} is given twice")));
            }
            models.push(m.clone());
        }
        let name = super::target_flags::target_name(base_url, "flags");
        let prompt = match self.prompt.as_slice() {
            [] => "Say hello in five words.".to_owned(),
            [text] => text.clone(),
            _ => {
                return Err(BenchError::Usage(
                    "--prompt is given twice: with --base-url it is the one user message sent (a sweep of prompts needs --config.file)".into(),
                ));
            }
        };
        let flags = t
            .flag_target(
                name,
                base_url.clone(),
                models,
                prompt,
                self.max_tokens.unwrap_or(64),
            )
            .map_err(BenchError::Usage)?;
        Config::from_flags(&flags).map_err(|e| match e {
            crate::config::ConfigError::Invalid(issues) => BenchError::Usage(format!(
                "invalid flags: {}",
                issues
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
            other => BenchError::Usage(other.to_string()),
        })
    }

    /// This process sends one shard of several (`--shard i/N` with N above 1): every shard must
    /// run the same levels, so what one process decides alone is refused.
    fn sharded(&self) -> bool {
        self.shard.is_some_and(|s| s.count > 1)
    }

    /// Runs this invocation: its plan, then the judged report printed and written.
    ///
    /// # Errors
    /// [`BenchError`] for a bad invocation, a prober that cannot be built, a prompt that cannot
    /// be calibrated or an output that cannot be written.
    pub async fn run(&self) -> Result<Exit, BenchError> {
        let outputs = Outputs::check(&self.outputs, self.plot.as_deref())?;
        let mut plan = self.plan()?;
        let exports = super::bench_export::Exports::start(&self.export, &mut plan)?;
        // A shard's report is part of a run: `bench merge` records the run.
        let store = if self.sharded() {
            None
        } else {
            self.store.open_for_recording()?
        };
        let criteria = plan.criteria().clone();
        let finished = crate::bench::plan::run(plan).await?;
        exports.finish().await;
        crate::render::deliver(&finished.report, &outputs, &criteria)?;
        let rules = ExitRules {
            keep_going: self.keep_going,
            accept_client_bound: self.accept_client_bound,
        };
        Ok(finish(store, &finished.report, rules))
    }

    /// The validated plan of this invocation.
    ///
    /// # Errors
    /// [`BenchError`] for anything that would make the run fail or mean something else than asked.
    pub fn plan(&self) -> Result<BenchPlan, BenchError> {
        let a = self;
        let criteria = criteria(a)?;
        if a.models.iter().any(|m| m.trim().is_empty()) {
            return Err(BenchError::Usage("--models: empty model name".into()));
        }
        let config = self.config()?;
        let prompt_names: Vec<String> = match &a.config_file {
            Some(_) => a
                .prompt
                .iter()
                .flat_map(|p| p.split(','))
                .map(|n| n.trim().to_owned())
                .collect(),
            None => Vec::new(),
        };
        let (jobs, mut models) =
            choose_prompts(&config, a.target.as_deref(), &prompt_names, &a.models)?;
        if a.config_file.is_some() {
            // Deadline flags apply on top of a configured target, as for `probe`.
            for m in &mut models {
                m.timeouts = a.target_flags.deadlines(m.timeouts);
            }
        }
        let prompts: Vec<ProbeSpec> = jobs
            .iter()
            .map(|j| {
                let mut spec = ProbeSpec::from_job(j);
                if a.max_tokens.is_some() {
                    spec.max_tokens = a.max_tokens;
                }
                spec.cache_bust = a.cache_bust;
                spec
            })
            .collect();
        let sent = Sent::new(prompts, models)?;
        let (prompts, spec) = (sent.prompts(), sent.spec());
        let replay = trace_replay(a, prompts)?;
        let mut level_keys = match &replay {
            Some((key, _)) => vec![*key],
            None => levels(&a.concurrency, &a.rate)?,
        };
        fit_fd_limit(&mut level_keys, !a.concurrency.is_empty(), fd_limit())?;
        check_select_at(&level_keys, criteria.select_at)?;
        if !a.rate.is_empty()
            && let Some(p) = prompts
                .iter()
                .find(|p| matches!(p.workload, crate::workload::Workload::Conversation(_)))
        {
            return Err(BenchError::Usage(format!(
                "prompt {}: a {} runs in closed loop (each worker keeps its turns); drop --rate",
                p.prompt.name,
                p.workload.kind()
            )));
        }
        let (sessions, recorded) = session_plan(a, prompts)?;
        if recorded.is_some() {
            level_keys = recorded.iter().map(|r| r.0).collect();
        }
        if prompts.len() > 1
            && (a.baseline.is_some()
                || !criteria.limits.is_empty()
                || !a.weights.is_empty()
                || a.bench_file.is_some())
        {
            return Err(BenchError::Usage(
                "several prompts are a sweep, not a selection: --baseline, --limit, --weight and --bench.file compare one prompt at a time".into(),
            ));
        }
        let cross_check = cross_check(a, spec)?;
        let mut criteria = criteria;
        fit_non_stream(&mut criteria, spec)?;
        let arrival = arrival(a)?;
        let seed = a.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
        let amount = level_amount(a, replay.or(recorded).as_ref().map(|r| r.1))?;
        let capacity = capacity_plan(a, &mut level_keys, &criteria)?;
        if a.repeat > 1 && a.sharded() {
            return Err(BenchError::Usage(
                "--repeat runs each level again in this process: it does not split across shards (repeat the whole sharded run instead)".into(),
            ));
        }
        let (shard, start, run_id) = sharding(a, amount, &sent, &level_keys)?;
        let judged = (sent.models().len() > 1 && prompts.len() == 1)
            || !criteria.limits.is_empty()
            || !a.weights.is_empty()
            || a.bench_file.is_some();
        let named: Vec<(&crate::config::Target, &str)> = sent
            .models()
            .iter()
            .map(|m| (m.target.as_ref(), m.model.as_str()))
            .collect();
        let server = a.server.plan(&named)?;
        check_until_clear(a, &criteria)?;
        let canary = canary_plan(a, &config)?;
        let load_ramp = load_ramp(a)?;
        let load = LoadPlan {
            arrival,
            seed,
            amount,
            warmup: a.warmup,
            warmup_duration: a.warmup_duration,
            ramp: a.ramp,
            load_ramp,
            prewarm: !a.no_prewarm,
            canary,
            repeat: a.repeat,
            cross_check,
            samples: a.samples || shard.count > 1,
            sessions,
            cache: CachePlan::new(a.reset_prefix_cache, a.cache_bust),
        };
        let schedule = schedule(
            a,
            level_keys,
            capacity,
            replay.or(recorded),
            &criteria,
            (start.is_some(), sessions.is_some()),
        );
        let watch = Watch {
            server,
            health: crate::bench::health::HealthPlan {
                check: !a.no_check,
                keep_going: a.keep_going,
                stop_after: a.stop_after_errors,
            },
            progress: progress_mode(a),
        };
        let part = RunPart {
            shard,
            start,
            run_id,
            command: std::env::args().collect(),
        };
        let judging = Judging {
            criteria,
            judged,
            baseline: None,
        };
        let mut plan = BenchPlan::new(sent, schedule, load, judging, part, watch);
        plan.set_baseline(super::bench_history::baseline(
            a.baseline.as_deref(),
            &a.store,
            &plan.fit(),
        )?);
        Ok(plan)
    }
}

#[cfg(test)]
mod tests;
