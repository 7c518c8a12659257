//! One level of a series, sent and measured, whatever schedule chose it: this shard's share of
//! it from its shared start instant, closed or open loop through the [`Runner`], after its
//! warm-up, with its canaries; run on while its decision is unclear, and again for its repeats;
//! folded into its statistics, with the server's view around it and the cross-check after it;
//! handed to the sinks, and added to its series.

use super::canary::{self, CanaryPlan};
use super::capacity;
use super::criteria::Criteria;
use super::crosscheck::{self, CrossCheckSpec};
use super::health::StopCause;
use super::progress::Progress;
use super::report::ModelReport;
use super::runner::{self, Amount, Arrival, LevelRun, LoadRamp, Runner};
use super::schedule::{Extension, Level};
use super::server_cache::{BeforeLevel, CachePlan};
use super::server_view::ServerSide;
use super::session::SessionLevel;
use super::shard::{Shard, StartPlan};
use super::stats::{self, LevelKey, LevelStats};
use super::{BenchError, LevelSink, steady};
use crate::probe::ProbeSpec;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How every level of a run is sent and measured.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// Open loop: the arrival process.
    pub arrival: Arrival,
    /// Open loop: the seed of the arrivals.
    pub seed: u64,
    /// Requests or sending time per level (the whole run's: a shard sends its share).
    pub amount: Amount,
    /// Unmeasured requests before each level.
    pub warmup: u64,
    /// `--warmup-duration`: unmeasured requests at each level's own load for this long first.
    pub warmup_duration: Option<Duration>,
    /// Closed loop: the workers' first sends are spread over this.
    pub ramp: Duration,
    /// `--ramp-up`: each level's load (arrival rate or workers) rises to its own this way.
    pub load_ramp: Option<LoadRamp>,
    /// `connection: reuse` targets: open every worker's connection before each level.
    pub prewarm: bool,
    /// `--canary RATE`: single probes beside every level's load.
    pub canary: Option<CanaryPlan>,
    /// `--repeat N`: every level is run this many times (1: once).
    pub repeat: u32,
    /// `--cross-check`: non-streaming requests after each level.
    pub cross_check: Option<CrossCheckSpec>,
    /// Keep every request's sample in the report.
    pub samples: bool,
    /// A session prompt: how its sessions are sent and judged (each level's amount is then
    /// sessions, and each worker or arrival runs whole sessions).
    pub sessions: Option<super::session::SessionMode>,
    /// `--reset-prefix-cache`, `--cache-bust`: the server cache each level starts from.
    pub cache: CachePlan,
}

impl LoadPlan {
    /// `shard`'s share of a level's amount: its part of the requests (a closed loop's part
    /// follows the shard's workers instead, when it is sent), or the whole duration.
    pub fn share(&self, shard: Shard) -> Amount {
        match self.amount {
            Amount::Requests(n) => Amount::Requests(shard.share(n)),
            Amount::Sessions(n) => Amount::Sessions(shard.share(n)),
            d @ Amount::Duration(_) => d,
        }
    }

    /// The progress units of one level of `shard`: its requests, or its seconds.
    pub fn units(&self, shard: Shard) -> u64 {
        match self.share(shard) {
            Amount::Requests(n) | Amount::Sessions(n) => n,
            Amount::Duration(d) => d.as_secs().max(1),
        }
    }
}

/// The run's stop signal: each series' sending stops on a child of `token`; `signal` names the
/// signal once one came.
#[derive(Debug, Clone, Default)]
pub(super) struct Stop {
    pub(super) token: CancellationToken,
    pub(super) signal: Arc<OnceLock<&'static str>>,
}

impl Stop {
    /// The signal's name (`a stop signal` before one is known).
    pub(super) fn name(&self) -> &'static str {
        self.signal.get().copied().unwrap_or("a stop signal")
    }
}

/// Where a level stands in its run.
#[derive(Debug, Clone)]
pub(super) struct Place {
    /// Its series' index in the run.
    pub(super) series: usize,
    /// Its index among its series' levels.
    pub(super) index: usize,
    /// Its slot among the levels' shared start instants (`--start-at`).
    pub(super) slot: usize,
    /// `model @ load`.
    pub(super) label: String,
    /// Progress units done before it.
    pub(super) done_units: u64,
}

/// How a level ended.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Ended {
    /// It sent its amount (its extensions and repeats too).
    Whole,
    /// Its sending was stopped: by the stop signal, or by its series' errors (why, in words).
    /// It is kept, partial, with the requests that finished.
    Stopped(StopCause, String),
    /// A stop signal came before it sent anything: it is left out.
    LeftOut,
}

/// How each level of the run is sent and measured: the load plan, for this shard.
pub(super) struct LevelStep {
    load: LoadPlan,
    shard: Shard,
    start: Option<StartPlan>,
    /// This shard's share of a level's amount (open loop; a duration).
    share: Amount,
    criteria: Criteria,
    extension: Option<Extension>,
    sinks: Vec<Arc<dyn LevelSink>>,
    /// Before each level's measured requests: its server's prefix cache reset, when asked for.
    cache: BeforeLevel,
    progress: Progress,
    stop: Stop,
    /// The levels named for having more workers than requests.
    warned: std::sync::Mutex<Vec<LevelKey>>,
}

impl LevelStep {
    /// Each level sent as `load` says by this `shard` (from its shared `start` instants), judged
    /// by `criteria` and run on as `extension` says, its server's cache first made as `cache`
    /// makes it, handed to `sinks`, shown on `progress`, stopped by `stop`.
    pub(super) fn new(
        load: LoadPlan,
        (shard, start): (Shard, Option<StartPlan>),
        (criteria, extension): (Criteria, Option<Extension>),
        cache: BeforeLevel,
        sinks: Vec<Arc<dyn LevelSink>>,
        (progress, stop): (Progress, Stop),
    ) -> LevelStep {
        let share = load.share(shard);
        LevelStep {
            load,
            shard,
            start,
            share,
            criteria,
            extension,
            sinks,
            cache,
            progress,
            stop,
            warned: std::sync::Mutex::default(),
        }
    }

    /// The progress units of one level: its requests, or its seconds.
    pub(super) fn units(&self) -> u64 {
        self.load.units(self.shard)
    }

    /// The seed of the run's arrivals (the connectivity check draws its content from it too).
    pub(super) fn seed(&self) -> u64 {
        self.load.seed
    }

    /// A runner sending to `spec` as every level is sent (its workers' ramp, the load's rise).
    ///
    /// # Errors
    /// [`BenchError::Client`] when the client settings are unusable.
    pub(super) fn runner(&self, spec: ProbeSpec) -> Result<Runner, BenchError> {
        let mut r = Runner::new(spec, self.progress.clone())?;
        r.ramp = self.load.ramp;
        r.load_ramp = self.load.load_ramp;
        r.recorded_sessions = self.load.sessions.is_some_and(|m| m.recorded);
        Ok(r)
    }

    /// Names the levels among `keys` that have more workers than requests (each once in the run):
    /// such a level never has all of its workers in flight.
    pub(super) fn warn_few_requests(&self, keys: &[LevelKey]) {
        let Ok(mut warned) = self.warned.lock() else {
            return;
        };
        let new: Vec<LevelKey> = keys
            .iter()
            .filter(|k| !warned.contains(k))
            .copied()
            .collect();
        warned.extend(&new);
        if let Some(w) = fewer_requests_than_workers(self.load.amount, &new) {
            self.progress.println(&w);
        }
    }

    /// Runs `level` of `series` (placed `at`) through `runner`, which already sends to the
    /// series' model: the level, then more of it while its decision is unclear and its repeats;
    /// its statistics, with the server's view and the cross-check, go to the sinks and join the
    /// series (at their load when the level was added between others).
    ///
    /// # Errors
    /// [`BenchError`] when a prober cannot be built or the level's sending broke.
    pub(super) async fn run(
        &self,
        runner: &mut Runner,
        server_side: &mut ServerSide,
        level: Level,
        at: &Place,
        series: &mut ModelReport,
        lengths: &mut stats::Lengths,
    ) -> Result<Ended, BenchError> {
        let key = &level.key;
        let label = &at.label;
        self.warn_few_requests(std::slice::from_ref(key));
        let began = Instant::now();
        let (mut run, late) = self.first(runner, server_side, key, at).await?;
        let more_at = Place {
            done_units: at.done_units + self.units(),
            ..at.clone()
        };
        let series_stop = runner.halt.stop.clone();
        let halted = || series_stop.is_cancelled();
        // A level runs on while its decision is unclear (its attainment interval reaches
        // across the target), up to the schedule's extensions.
        let mut extended = 0;
        while let Some(e) = self.extension
            && extended < e.most
            && !halted()
            && self.unclear(&run.samples, e.target)
        {
            extended += 1;
            let more = self.again(runner, key, &more_at, extended).await?;
            run = run.then(more);
        }
        let mut repeats = Vec::new();
        for r in 1..self.load.repeat {
            if halted() {
                break;
            }
            if r == 1 {
                repeats.push(stats::Repeat::of(&fold_run(key, &run, &self.criteria)));
            }
            let more = self.again(runner, key, &more_at, r).await?;
            repeats.push(stats::Repeat::of(&fold_run(key, &more, &self.criteria)));
            run = run.then(more);
        }
        let stop = halted().then(|| self.stop_cause(runner, &run, began));
        if let Some((StopCause::Signal, _)) = &stop
            && run.samples.is_empty()
            && run.unfinished == 0
        {
            // Stopped before it sent anything: left out, and named as the level running.
            return Ok(Ended::LeftOut);
        }
        if stop.is_none() {
            lengths.add(&run.samples);
        }
        let unfinished = run.unfinished;
        let mut stats = fold_level(*key, run, &self.criteria, series.price.as_ref(), late);
        if let Some(stop) = &stop {
            mark_stopped(runner, &mut stats, stop, unfinished);
        }
        if self.load.load_ramp.is_some() {
            stats.per_second = steady::per_second(stats.samples.as_deref().unwrap_or_default());
        }
        stats.repeats = repeats;
        if let Some(mode) = &self.load.sessions {
            let all = stats.samples.as_deref().unwrap_or_default();
            stats.sessions = SessionLevel::of(all, &self.criteria.slos, mode);
        }
        self.note(&mut stats, label, level.added.clone(), extended);
        stats.server = server_side
            .end(at.series, at.index, &stats, label, &self.progress)
            .await;
        if let Some(cc) = self.load.cross_check.as_ref().filter(|_| stop.is_none()) {
            let all = stats.samples.as_deref().unwrap_or_default();
            let c = crosscheck::run(runner, &stats, all, cc, label).await?;
            stats.cross_check = Some(c);
        }
        // A partial level's figures are not the level's: they go to the report only.
        if !stats.partial {
            for sink in &self.sinks {
                sink.level_done(series, &stats);
            }
        }
        if !self.load.samples {
            stats.samples = None;
        }
        self.progress.println(&level_line(label, &stats));
        let place = match level.added {
            Some(_) => series
                .levels
                .partition_point(|l| l.key.x() <= stats.key.x()),
            None => series.levels.len(),
        };
        series.levels.insert(place, stats);
        (series.input_tokens_mean, series.output_tokens_mean) = lengths.means();
        Ok(match stop {
            None => Ended::Whole,
            Some((by, reason)) => Ended::Stopped(by, reason),
        })
    }

    /// True when the SLO attainment of `samples` cannot decide the level against `target` at
    /// 95% confidence: a session workload's over its sessions, else over its requests.
    fn unclear(&self, samples: &[super::stats::Sample], target: f64) -> bool {
        let slos = &self.criteria.slos;
        match &self.load.sessions {
            Some(m) => capacity::undecided(
                super::session::attainment(samples, slos, m.max_context).as_ref(),
                target,
            ),
            None => capacity::unclear(samples, slos, target),
        }
    }

    /// The notes a level's reader must know: a level the schedule added (`added`), one run on
    /// `extended` more times while its decision was unclear, a shard without a worker at it, a
    /// session level invalid for its sessions' context overflow.
    fn note(&self, stats: &mut LevelStats, label: &str, added: Option<String>, extended: u32) {
        if let Some(note) = added {
            self.progress.println(&format!("  {label}: {note}"));
            stats.notes.push(note);
        }
        if extended > 0 {
            let note = format!(
                "run {extended} more time(s) at its amount: the attainment's interval reached across the target"
            );
            stats.notes.push(note);
        }
        if let Some(why) = stats.session_invalid() {
            let note = format!("INVALID, not judged: {why}");
            self.progress.println(&format!("  {label}: {note}"));
            stats.notes.push(note);
        }
        let key = stats.key;
        if key.rate.is_none() && self.shard.workers(key.concurrency) == 0 {
            // Said, so that a merge knows why this shard's part of the level is empty.
            let note = format!(
                "shard {} had no worker at concurrency {} (the level's workers are on the shards before it): it sent nothing at this level",
                self.shard, key.concurrency
            );
            self.progress.println(&format!("  {label}: {note}"));
            stats.notes.push(note);
        }
    }

    /// What stopped a level whose sending was halted, and why: the stop signal (how long into
    /// the level, what finished and what was cut), or its series' early stop (the streak's
    /// reason).
    fn stop_cause(&self, runner: &Runner, run: &LevelRun, began: Instant) -> (StopCause, String) {
        let streak = runner
            .halt
            .streak
            .as_ref()
            .and_then(|s| s.lock().ok().and_then(|s| s.reason()));
        match streak {
            Some(reason) if !self.stop.token.is_cancelled() => (StopCause::Errors, reason),
            _ => {
                let signal = self.stop.name();
                // Requests cut in flight were waited for the runner's grace after the signal.
                let (at, cut) = if run.unfinished > 0 {
                    let grace = runner.grace.as_secs_f64();
                    (
                        (began.elapsed().as_secs_f64() - grace).max(0.0),
                        format!(
                            "; {} request(s) still in flight {} s later were cut",
                            run.unfinished,
                            crate::units::trim_float(grace)
                        ),
                    )
                } else {
                    (began.elapsed().as_secs_f64(), String::new())
                };
                (
                    StopCause::Signal,
                    format!("stopped by {signal} {at:.1} s into the level{cut}"),
                )
            }
        }
    }

    /// Run `n` (1, 2, ...) after the first of the level `at`: the same sending, its open-loop
    /// arrivals seeded apart from every other run's.
    async fn again(
        &self,
        runner: &mut Runner,
        key: &LevelKey,
        at: &Place,
        n: u32,
    ) -> Result<LevelRun, BenchError> {
        let seeded_as = at.index + 1000 * n as usize;
        self.send(runner, key, (at.series, seeded_as), at).await
    }

    /// The sending of one level (or one more batch of it) at `key` through `runner`: this
    /// shard's workers or arrivals, its amount; the open loop's arrivals seeded by `seeded`
    /// (series, level).
    async fn send(
        &self,
        runner: &mut Runner,
        key: &LevelKey,
        (mi, li): (usize, usize),
        at: &Place,
    ) -> Result<LevelRun, BenchError> {
        let shard = self.shard;
        let (label, base) = (at.label.clone(), at.done_units);
        let run = match key.rate {
            None => match shard.workers(key.concurrency) {
                0 => LevelRun::default(),
                c => {
                    let amount = match self.load.amount {
                        Amount::Requests(n) => Amount::Requests(shard.requests(n, key.concurrency)),
                        Amount::Sessions(n) => Amount::Sessions(shard.requests(n, key.concurrency)),
                        d @ Amount::Duration(_) => d,
                    };
                    runner.closed(c, amount, label, base).await?
                }
            },
            Some(rate) => {
                let level_seed = self
                    .load
                    .seed
                    .wrapping_add((mi as u64) << 32)
                    .wrapping_add(li as u64);
                runner
                    .open(
                        (shard.rate(rate), shard.cap(key.concurrency)),
                        self.load.arrival,
                        shard.seed(level_seed),
                        self.share,
                        label,
                        base,
                    )
                    .await?
            }
        };
        Ok(run)
    }

    /// Sends a level's first run through `runner`: the warm-up, the server cache's reset, the
    /// wait for the level's shared start, then the level (with its canaries). What it measured
    /// (with the cache it started from), and how late it started after its shared instant (with
    /// `--start-at`).
    async fn first(
        &self,
        runner: &mut Runner,
        server_side: &mut ServerSide,
        key: &LevelKey,
        at: &Place,
    ) -> Result<(LevelRun, Option<f64>), BenchError> {
        let shard = self.shard;
        if self.load.prewarm {
            // Every worker of a closed loop; the probers an open loop starts with.
            let n = match key.rate {
                None => shard.workers(key.concurrency) as usize,
                Some(_) => (shard.cap(key.concurrency) as usize).min(runner::FIRST_PROBERS),
            };
            runner.prewarm(n).await?;
        }
        runner
            .warmup(key.concurrency, shard.share(self.load.warmup))
            .await?;
        if let Some(d) = self.load.warmup_duration {
            match key.rate {
                None => match shard.workers(key.concurrency) {
                    0 => {}
                    w => {
                        runner
                            .quietly(w, Amount::Duration(d), "warm-up".into())
                            .await?;
                    }
                },
                Some(rate) => {
                    // Seeded apart from the level's own arrivals.
                    let seed = shard.seed(self.load.seed.wrapping_add(0x5741_524d));
                    let load = (shard.rate(rate), shard.cap(key.concurrency));
                    runner.warm_open(load, self.load.arrival, seed, d).await?;
                }
            }
        }
        let cache = self.cache.run(&runner.spec().target, &self.progress).await;
        if let Some(p) = &self.start {
            tokio::select! {
                () = tokio::time::sleep(p.wait(at.slot, chrono::Utc::now())) => {}
                () = runner.halt.stop.cancelled() => {}
            }
        }
        let started = chrono::Utc::now();
        server_side.begin().await;
        let seeded = (at.series, at.index);
        let run = match &self.load.canary {
            None => self.send(runner, key, seeded, at).await?,
            Some(plan) => {
                // The canaries run from the level's first send to its last request's end.
                let spec = plan.spec(runner.spec());
                let prompt = spec.prompt.name.clone();
                let stop = CancellationToken::new();
                let load = async {
                    let run = self.send(runner, key, seeded, at).await;
                    stop.cancel();
                    run
                };
                let (run, (samples, skipped)) =
                    tokio::join!(load, canary::send(spec, plan.rate, stop.clone()));
                LevelRun {
                    canary: Some(canary::CanaryStats::of(
                        plan.rate, &prompt, &samples, skipped,
                    )),
                    ..run?
                }
            }
        };
        let late = self.start.as_ref().map(|p| {
            (started - p.level_start(at.slot))
                .to_std()
                .map_or(0.0, |d| d.as_secs_f64())
        });
        Ok((
            LevelRun {
                cache: Some(cache),
                ..run
            },
            late,
        ))
    }
}

/// A closed-loop level with more workers than requests never has all of them in flight: the
/// warning that says so (the level is labelled with its workers, but measures fewer).
pub(super) fn fewer_requests_than_workers(amount: Amount, levels: &[LevelKey]) -> Option<String> {
    let (n, what) = match amount {
        Amount::Requests(n) => (n, "requests"),
        Amount::Sessions(n) => (n, "sessions"),
        Amount::Duration(_) => return None,
    };
    let short: Vec<String> = levels
        .iter()
        .filter(|k| k.rate.is_none() && u64::from(k.concurrency) > n)
        .map(LevelKey::label)
        .collect();
    (!short.is_empty()).then(|| {
        format!(
            "tokenprobe: WARNING: concurrency {} above --{what}-per-level {n}: such a level never has more than {n} {what} in flight; give at least as many {what} as workers (or --duration-per-level)",
            short.join(", ")
        )
    })
}

/// Marks a level's statistics stopped (partial) as `stop` says, with its errors' first messages
/// (the series' streak's when none of its requests finished: the warm-up tripped the stop).
fn mark_stopped(
    runner: &Runner,
    stats: &mut LevelStats,
    (by, reason): &(StopCause, String),
    unfinished: u64,
) {
    let streak = runner.halt.streak.as_ref().and_then(|s| s.lock().ok());
    let fallback = streak.map(|s| s.messages().clone()).unwrap_or_default();
    let samples = stats.samples.take().unwrap_or_default();
    stats.mark_stopped(*by, reason.clone(), unfinished, &samples, &fallback);
    stats.samples = Some(samples);
}

/// A level's statistics from its run: the fold, the cost at `price`, when it started (and, with
/// `--start-at`, how `late` after its shared instant), and the samples, sorted by send instant
/// (the sinks and the cross-check read them; the report keeps them when asked).
fn fold_level(
    key: LevelKey,
    run: LevelRun,
    criteria: &Criteria,
    price: Option<&crate::config::Price>,
    late: Option<f64>,
) -> LevelStats {
    let mut stats = fold_run(&key, &run, criteria);
    if let Some(p) = price {
        stats.set_cost(&run.samples, p);
    }
    stats.started_unix_s = run.started_unix_s;
    stats.cpu_wait_s = run.cpu.map(|c| c.waited_s);
    stats.cpu_timeslices = run.cpu.map(|c| c.timeslices);
    stats.client_bound = stats.client_bound_reason();
    stats.start_offset_s = late;
    stats.canary = run.canary;
    stats.efficiency.server_cache = run.cache;
    let mut s = run.samples;
    s.sort_by(|x, y| x.sent_s.total_cmp(&y.sent_s));
    stats.samples = Some(s);
    stats
}

/// One run's statistics alone (for a repeat's figures).
fn fold_run(key: &LevelKey, run: &LevelRun, criteria: &Criteria) -> LevelStats {
    LevelStats::from_samples(
        *key,
        &run.samples,
        run.wall_s,
        &run.loop_lag,
        &criteria.slos,
        run.capped,
    )
}

/// One line per finished level on stderr.
fn level_line(label: &str, l: &LevelStats) -> String {
    let f = |s: &Option<stats::Summary>, g: fn(&stats::Summary) -> f64| {
        s.as_ref()
            .map_or_else(|| "-".to_owned(), |s| crate::units::fmt_secs(g(s)))
    };
    format!(
        "  {label}: {} requests, {:.2}% errors, TTFT p50 {} p95 {}, TPOT p50 {}, {:.1} tok/s, {:.2} req/s, lag p99 {}, loop lag p99 {}{}{}{}",
        l.requests,
        l.error_rate * 100.0,
        f(&l.ttft_s, |s| s.p50),
        f(&l.ttft_s, |s| s.p95),
        f(&l.tpot_s, |s| s.p50),
        l.output_tokens_per_s,
        l.requests_per_s,
        f(&l.lag_s, |s| s.p99),
        f(&l.loop_lag_s, |s| s.p99),
        l.ramp_s.map_or_else(String::new, |r| format!(
            ", ramp {}",
            crate::units::fmt_secs(r)
        )),
        l.client_bound
            .as_ref()
            .map_or_else(String::new, |w| format!(
                "; CLIENT-BOUND, not the server's figures: {w}"
            )),
        l.stopped
            .as_ref()
            .map_or_else(String::new, |s| format!("; PARTIAL, {}", s.reason)),
    ) + &l.sessions.as_ref().map_or_else(String::new, session_line)
}

/// A session level's part of its line: its sessions, within the SLOs, failed and overflowed.
fn session_line(s: &SessionLevel) -> String {
    let within = s.slo_attainment.as_ref().map_or_else(String::new, |a| {
        format!(
            ", {} within the SLOs ({})",
            a.met,
            crate::units::fmt_pct(a.share)
        )
    });
    format!(
        "; {}{within}, {} failed, {} overflowed the context{}",
        crate::units::count(s.sessions as usize, "session"),
        s.summary.failed,
        s.overflowed,
        if s.invalid.is_some() { ": INVALID" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_with_more_workers_than_requests_is_named() {
        let keys = super::super::levels(&[1, 10, 20], &[]).unwrap();
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
        let open = super::super::levels(&[], &[50.0]).unwrap();
        assert_eq!(
            fewer_requests_than_workers(Amount::Requests(5), &open),
            None
        );
    }
}
