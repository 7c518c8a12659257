//! The load generator: closed loop (C workers, each sending its next request when the previous
//! one ended) and open loop (arrivals at a rate, Poisson, gamma or constant, at most C in flight), both
//! sending through [`Prober::run`], so every number is the same measurement as `serve`'s.
//!
//! Each closed-loop worker owns one [`Prober`] (connection phases are per prober); the open loop
//! takes probers from a pool. Open-loop arrivals are timed by a dedicated OS thread with
//! `std::thread::sleep` (tokio's timer has a 1 ms tick, which would be lag of its own) that hands
//! each arrival to the runtime at its intended instant.
//!
//! The generator measures its own limits: **scheduling lag** is the instant a request is handed to
//! [`Prober::run`] minus the instant it was meant to be sent (closed loop: the instant the worker's
//! previous request ended; open loop: the arrival's scheduled instant, or the instant an in-flight
//! slot freed up when the cap was reached); the **ramp** is how long after the level's start the
//! last closed-loop worker sent its first request (all are meant to start at once); and the
//! **loop lag** is how long a task that yields waits to run again, sampled every 10 ms: when the
//! runtime is too busy, responses are read late and that shows there first.

use super::BenchError;
use super::health::Streak;
use super::progress::{Progress, Ticker};
use super::stats::Sample;
use crate::measure::ProbeResult;
use crate::probe::{Calibration, ProbeSpec, Prober, TokenModels};
use crate::rng::Rng;
use crate::transport::TransportError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// How much a level sends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    /// This many measured requests.
    Requests(u64),
    /// A session prompt's level: this many whole sessions (each of its turns a measured request).
    Sessions(u64),
    /// Send for this long; requests in flight at the end still finish and count.
    Duration(Duration),
}

/// Open-loop inter-arrival times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// Exponentially distributed gaps (a Poisson process).
    Poisson,
    /// Equal gaps.
    Constant,
    /// Gamma-distributed gaps of this shape K (`--burstiness K`, as vLLM's flag and AIPerf's
    /// `--arrival-smoothness`), mean `1/rate`: their coefficient of variation is `1/sqrt(K)`, so
    /// K < 1 is burstier than Poisson (K = 1) and K > 1 smoother.
    Gamma {
        /// The shape K, finite and above 0.
        shape: f64,
    },
}

impl Arrival {
    /// `poisson`, `constant` or `gamma`.
    pub fn as_str(self) -> &'static str {
        match self {
            Arrival::Poisson => "poisson",
            Arrival::Constant => "constant",
            Arrival::Gamma { .. } => "gamma",
        }
    }

    /// Whether its gaps are drawn from the seed (Poisson and gamma).
    pub fn random(self) -> bool {
        !matches!(self, Arrival::Constant)
    }

    /// The gamma shape, for `--burstiness`.
    pub fn burstiness(self) -> Option<f64> {
        match self {
            Arrival::Gamma { shape } => Some(shape),
            _ => None,
        }
    }
}

/// What a level measured, before folding.
#[derive(Debug, Default)]
pub struct LevelRun {
    /// One sample per measured request.
    pub samples: Vec<Sample>,
    /// `--canary`: the canaries sent beside it.
    pub canary: Option<super::canary::CanaryStats>,
    /// First intended send to the last request's end, s.
    pub wall_s: f64,
    /// Run-queue delays sampled during the level, s.
    pub loop_lag: Vec<f64>,
    /// Open loop: sends that waited for a free slot.
    pub capped: u64,
    /// The level's start (its sends' time 0), wall clock, Unix seconds.
    pub started_unix_s: Option<f64>,
    /// How long this process's threads waited for a CPU during the level and in how many time
    /// slices they ran, summed over threads (Linux).
    pub cpu: Option<CpuWait>,
    /// Requests still in flight when a stopped level's grace ran out: cut, not in `samples`.
    pub unfinished: u64,
    /// The server cache the level started from (its first run's).
    pub cache: Option<super::efficiency::CacheState>,
}

impl LevelRun {
    /// This run followed by `more` of the same level (its instants shifted to after this one's
    /// end): one level's samples, wall time, lags, caps and CPU wait.
    #[must_use]
    pub fn then(mut self, more: LevelRun) -> LevelRun {
        let off = self.wall_s;
        self.samples
            .extend(more.samples.into_iter().map(|s| Sample {
                sent_s: s.sent_s + off,
                end_s: s.end_s + off,
                first: false,
                ..s
            }));
        self.wall_s += more.wall_s;
        self.loop_lag.extend(more.loop_lag);
        self.capped += more.capped;
        self.unfinished += more.unfinished;
        self.cpu = match (self.cpu, more.cpu) {
            (Some(a), Some(b)) => Some(a.plus(b)),
            (a, b) => a.or(b),
        };
        self
    }
}

/// `t` as Unix seconds.
fn unix_s(t: std::time::SystemTime) -> Option<f64> {
    t.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs_f64())
}

/// `--ramp-up`: how a level's load rises from `from` to its own over `over` seconds, then stays
/// there: an open loop's arrival rate, a closed loop's number of workers sending.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadRamp {
    /// Linear (`r(t) = from + (rate − from)·t/over`) or exponential
    /// (`r(t) = from·(rate/from)^(t/over)`).
    pub exponential: bool,
    /// The load at the level's start: requests/s (above 0), or workers (at least 1).
    pub from: f64,
    /// Seconds to reach the level's load.
    pub over: f64,
}

impl LoadRamp {
    /// Seconds after the level's start at which the ramped load reaches `value`, for a level at
    /// `target` (0 at or below `from`, `over` at or above `target`): closed loop, worker `w`
    /// starts when the load reaches `w + 1` workers.
    pub fn reaches(&self, value: f64, target: f64) -> f64 {
        let (r0, d) = (self.from, self.over);
        if value <= r0 {
            return 0.0;
        }
        if value >= target || target <= r0 {
            return d;
        }
        if self.exponential {
            d * (value / r0).ln() / (target / r0).ln()
        } else {
            d * (value - r0) / (target - r0)
        }
    }

    /// The instant by which `n` arrivals are due (the inverse of the cumulative rate
    /// `Λ(t) = ∫₀ᵗ r`), for a level at `rate`.
    pub fn instant_of(&self, n: f64, rate: f64) -> f64 {
        let (r0, d) = (self.from, self.over);
        if d <= 0.0 || (rate - r0).abs() < 1e-12 {
            return n / rate;
        }
        let ramp_total = if self.exponential {
            (rate - r0) * d / (rate / r0).ln()
        } else {
            (r0 + rate) / 2.0 * d
        };
        if n >= ramp_total {
            return d + (n - ramp_total) / rate;
        }
        if self.exponential {
            let k = (rate / r0).ln() / d;
            (1.0 + k * n / r0).ln() / k
        } else {
            // r0·t + a·t²/2 = n with a = (rate − r0)/d.
            let a = (rate - r0) / d;
            (-r0 + (r0 * r0 + 2.0 * a * n).sqrt()) / a
        }
    }
}

/// [`arrival_offsets`] under a rate ramp: the same process drawn at rate 1 (its n-th arrival at
/// `u_n`), each mapped to the instant `Λ⁻¹(u_n)` the ramped rate makes it due (time rescaling:
/// Poisson arrivals stay Poisson of the changing rate, constant ones stay evenly spread in it).
pub fn ramped_offsets(
    rate: f64,
    arrival: Arrival,
    seed: u64,
    ramp: Option<LoadRamp>,
) -> Box<dyn Iterator<Item = f64> + Send> {
    match ramp {
        None => Box::new(arrival_offsets(rate, arrival, seed)),
        Some(r) => {
            Box::new(arrival_offsets(1.0, arrival, seed).map(move |u| r.instant_of(u, rate)))
        }
    }
}

/// The arrival offsets (seconds after the level's start) of an open-loop level: the first at 0,
/// then gaps of `1/rate` (constant), exponential with mean `1/rate` (Poisson), or gamma with
/// shape K and mean `1/rate` (scale `1/(rate·K)`).
pub fn arrival_offsets(rate: f64, arrival: Arrival, seed: u64) -> impl Iterator<Item = f64> {
    use rand_distr::Distribution as _;
    let mut rng = Rng::new(seed);
    // A shape the flag checked (finite, above 0) always makes a distribution; else Poisson.
    let gamma = arrival
        .burstiness()
        .and_then(|k| rand_distr::Gamma::new(k, 1.0 / (rate * k)).ok());
    let (mut t, mut i) = (0.0, 0u64);
    std::iter::from_fn(move || {
        let now = match arrival {
            // i / rate, not a running sum, so rounding does not accumulate.
            Arrival::Constant => i as f64 / rate,
            Arrival::Poisson | Arrival::Gamma { .. } => t,
        };
        i += 1;
        t += match &gamma {
            Some(g) => g.sample(&mut rng),
            None => -(1.0 - rng.unit()).ln() / rate,
        };
        Some(now)
    })
}

/// Samples the runtime's run-queue delay every 10 ms until stopped, and reads how long the
/// process's threads waited for a CPU in between (the kernel's own account).
struct LagMonitor {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<f64>>,
    cpu_wait_at_start: Option<CpuWait>,
}

/// How long this process's threads have waited for a CPU, and in how many time slices they ran.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuWait {
    /// The run-queue wait, summed over threads, s.
    pub waited_s: f64,
    /// The time slices run, summed over threads (each one ended a wait).
    pub timeslices: u64,
}

impl CpuWait {
    /// What happened between `start` and `self` (a thread that ended took its share with it, so
    /// this is a lower bound, never negative).
    fn since(self, start: CpuWait) -> CpuWait {
        CpuWait {
            waited_s: (self.waited_s - start.waited_s).max(0.0),
            timeslices: self.timeslices.saturating_sub(start.timeslices),
        }
    }

    /// Two parts of one level together.
    #[must_use]
    pub fn plus(self, more: CpuWait) -> CpuWait {
        CpuWait {
            waited_s: self.waited_s + more.waited_s,
            timeslices: self.timeslices.saturating_add(more.timeslices),
        }
    }
}

/// This process's CPU wait so far: the second (run-queue wait, ns) and third (time slices) field
/// of each `/proc/self/task/*/schedstat`, summed. `None` off Linux or without schedstats.
pub fn cpu_wait() -> Option<CpuWait> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let (mut ns, mut slices): (u64, u64) = (0, 0);
    let mut any = false;
    for t in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(t.path().join("schedstat")) else {
            continue;
        };
        let mut fields = text.split_whitespace().skip(1).map(str::parse::<u64>);
        if let (Some(Ok(w)), Some(Ok(n))) = (fields.next(), fields.next()) {
            ns = ns.saturating_add(w);
            slices = slices.saturating_add(n);
            any = true;
        }
    }
    any.then(|| CpuWait {
        waited_s: ns as f64 / 1e9,
        timeslices: slices,
    })
}

impl LagMonitor {
    fn start() -> LagMonitor {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let task = tokio::spawn(async move {
            let mut out = Vec::new();
            while !s.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(10)).await;
                let t = Instant::now();
                tokio::task::yield_now().await;
                out.push(t.elapsed().as_secs_f64());
            }
            out
        });
        LagMonitor {
            stop,
            task,
            cpu_wait_at_start: cpu_wait(),
        }
    }

    /// The loop lags sampled, and the CPU wait since the start.
    async fn stop(self) -> (Vec<f64>, Option<CpuWait>) {
        let waited = self
            .cpu_wait_at_start
            .zip(cpu_wait())
            .map(|(a, b)| b.since(a));
        self.stop.store(true, Ordering::Relaxed);
        (self.task.await.unwrap_or_default(), waited)
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Open loop: the probers built before a level's first arrival (more are built on demand, up
/// to the cap), and the ones pre-warmed.
pub const FIRST_PROBERS: usize = 64;

/// How long a stopped level waits for its requests in flight before it cuts them.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// How a level's sending stops before its amount: the run's stop signal, or the series' early
/// stop ([`Streak`]). Once `stop` is cancelled no request is sent; those in flight finish, or
/// are cut after the runner's grace ([`STOP_GRACE`]) and counted as unfinished.
#[derive(Debug, Clone, Default)]
pub struct Halt {
    /// Cancelled by the stop signal (it is a child of the run's token) or by the streak when it
    /// trips.
    pub stop: CancellationToken,
    /// The series' early stop: every finished request is counted (none: never).
    pub streak: Option<Arc<Mutex<Streak>>>,
}

impl Halt {
    /// Counts a finished request; stops the sending when the streak trips.
    fn record(&self, r: &ProbeResult) {
        let Some(streak) = &self.streak else { return };
        let tripped = streak
            .lock()
            .is_ok_and(|mut s| s.record(r.error_type, r.error_detail.as_deref()));
        if tripped {
            self.stop.cancel();
        }
    }

    /// A task that cancels `cut` `grace` after the stop (aborted when the level ends first).
    fn cutter(&self, grace: Duration) -> (CancellationToken, AbortOnDrop) {
        let (stop, cut) = (self.stop.clone(), CancellationToken::new());
        let c = cut.clone();
        let task = tokio::spawn(async move {
            stop.cancelled().await;
            tokio::time::sleep(grace).await;
            c.cancel();
        });
        (cut, AbortOnDrop(task))
    }
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs levels for one probe spec, keeping its probers between levels.
pub struct Runner {
    spec: Arc<ProbeSpec>,
    probers: Vec<Prober>,
    /// Progress display.
    pub progress: Progress,
    /// Closed loop: the first sends of a level's workers are spread evenly over this (worker `w`
    /// of `c` first sends at `ramp × w / c`), so streams do not start, and stay, in step.
    pub ramp: Duration,
    /// `--ramp-up`: each level's load rises to its own this way (open loop: its arrival rate;
    /// closed loop: worker `w` starts when the load reaches `w + 1`, instead of `ramp`'s spread).
    pub load_ramp: Option<LoadRamp>,
    /// What stops the sending before a level's amount (every run of the runner, warm-ups
    /// included, counts towards the early stop).
    pub halt: Halt,
    /// How long a stopped level waits for its requests in flight ([`STOP_GRACE`]).
    pub grace: Duration,
    /// Open loop of a session trace: its sessions start at their recorded instants
    /// (`--arrival recorded`).
    pub recorded_sessions: bool,
}

impl Runner {
    /// A runner for `spec` (the first prober is built here, so bad client settings fail early).
    ///
    /// # Errors
    /// [`TransportError`] when the client settings are unusable.
    pub fn new(spec: ProbeSpec, progress: Progress) -> Result<Runner, TransportError> {
        let first = Prober::new(&spec)?;
        Ok(Runner {
            spec: Arc::new(spec),
            probers: vec![first],
            progress,
            ramp: Duration::ZERO,
            load_ramp: None,
            halt: Halt::default(),
            grace: STOP_GRACE,
            recorded_sessions: false,
        })
    }

    /// Switches the model (probers are kept).
    pub fn set_model(&mut self, model: &str) {
        Arc::make_mut(&mut self.spec).model = model.to_owned();
    }

    /// Switches to another prompt of the same target (probers are kept; the model stays).
    pub fn set_prompt(&mut self, spec: &ProbeSpec) {
        let mut next = spec.clone();
        next.model.clone_from(&self.spec.model);
        self.spec = Arc::new(next);
    }

    /// The spec requests are sent with.
    pub fn spec(&self) -> &ProbeSpec {
        &self.spec
    }

    /// Calibrates the current target and model through `models` (kept for the run) and sizes
    /// the prompts with it; `None` when the workload needs no calibration.
    pub async fn calibrate(&mut self, models: &TokenModels) -> Option<Calibration> {
        let c = models.get(&mut self.probers[0], &self.spec).await?;
        Arc::make_mut(&mut self.spec).tokens = c.model();
        Some(c)
    }

    fn ensure_probers(&mut self, n: usize) -> Result<(), TransportError> {
        while self.probers.len() < n {
            self.probers.push(Prober::new(&self.spec)?);
        }
        Ok(())
    }

    /// `connection: reuse`: opens the connections of the first `n` workers (one unmeasured
    /// `GET /models` each, all at once) before a level, so its first round does not pay, in a
    /// burst, the set-up that later rounds do not. Other modes: nothing.
    ///
    /// # Errors
    /// [`TransportError`] if a prober cannot be built.
    pub async fn prewarm(&mut self, n: usize) -> Result<(), TransportError> {
        if self.spec.target.connection != crate::config::ConnectionMode::Reuse {
            return Ok(());
        }
        self.ensure_probers(n)?;
        let spec = &self.spec;
        futures_util::future::join_all(self.probers.iter_mut().take(n).map(|p| p.prewarm(spec)))
            .await;
        Ok(())
    }

    /// Unmeasured requests before a level, closed loop at `min(concurrency, n)` workers.
    ///
    /// # Errors
    /// As [`Runner::closed`].
    pub async fn warmup(&mut self, concurrency: u32, n: u64) -> Result<(), BenchError> {
        if n == 0 {
            return Ok(());
        }
        let c = u64::from(concurrency).min(n) as u32;
        self.quietly(c, Amount::Requests(n), "warm-up".into())
            .await
            .map(|_| ())
    }

    /// A closed-loop run of `c` workers that the progress bar does not show (warm-up, and
    /// `--cross-check`'s requests).
    ///
    /// # Errors
    /// As [`Runner::closed`].
    pub async fn quietly(
        &mut self,
        c: u32,
        amount: Amount,
        label: String,
    ) -> Result<LevelRun, BenchError> {
        let saved = self.silence();
        let ramp = std::mem::take(&mut self.ramp);
        let load_ramp = self.load_ramp.take();
        let r = self.closed(c, amount, label, 0).await;
        self.progress = saved;
        self.ramp = ramp;
        self.load_ramp = load_ramp;
        r
    }

    /// Hides what is sent next from the progress bar (its counters stay shared); the progress
    /// it replaced, to put back.
    fn silence(&mut self) -> Progress {
        let quiet = self.progress.quiet();
        std::mem::replace(&mut self.progress, quiet)
    }

    /// The display of a level of `amount` (by its clock, or by its requests), `base` units
    /// into the run.
    fn ticker(&self, label: String, base: u64, amount: Amount) -> Ticker {
        let (duration, requests) = match amount {
            Amount::Duration(d) => (Some(d), None),
            Amount::Requests(n) => (None, Some(n)),
            // Its turns are counted, with no total.
            Amount::Sessions(_) => (None, None),
        };
        self.progress.ticker(label, base, duration, requests)
    }

    /// `--warmup-duration` in open loop: the level's own arrivals for `d`, unmeasured and not
    /// shown by the progress bar.
    ///
    /// # Errors
    /// As [`Runner::open`].
    pub async fn warm_open(
        &mut self,
        (rate, cap): (f64, u32),
        arrival: Arrival,
        seed: u64,
        d: Duration,
    ) -> Result<(), BenchError> {
        let saved = self.silence();
        let r = self
            .open(
                (rate, cap),
                arrival,
                seed,
                Amount::Duration(d),
                "warm-up".into(),
                0,
            )
            .await;
        self.progress = saved;
        r.map(|_| ())
    }

    /// Streaming (the spec's own setting) or whole answers (`--cross-check`); probers are kept.
    /// Returns the setting it replaced.
    pub fn set_stream(&mut self, stream: bool) -> bool {
        std::mem::replace(&mut Arc::make_mut(&mut self.spec).stream, stream)
    }

    /// One closed-loop level: `c` workers, each with its own prober, their first sends spread over
    /// [`Runner::ramp`].
    ///
    /// # Errors
    /// [`BenchError::Client`] if a prober cannot be built; [`BenchError::Level`] if a worker
    /// panicked, or the level's instants do not fit the clock (then nothing is sent).
    pub async fn closed(
        &mut self,
        c: u32,
        amount: Amount,
        label: String,
        progress_base: u64,
    ) -> Result<LevelRun, BenchError> {
        self.ensure_probers(c as usize)?;
        // A session prompt's workers count sessions (a warm-up's requests too), others requests.
        let limit = match amount {
            Amount::Requests(n) | Amount::Sessions(n) => n,
            Amount::Duration(_) => u64::MAX,
        };
        let sessions = matches!(self.spec.workload, crate::workload::Workload::Session(_));
        let level = label.clone();
        let ticker = self.ticker(label, progress_base, amount);
        let tickets = Arc::new(AtomicU64::new(0));
        let monitor = LagMonitor::start();
        let start = Instant::now();
        let started_unix_s = unix_s(std::time::SystemTime::now());
        // Every instant of the level, before any worker starts: one the clock cannot hold fails
        // the level with nothing sent.
        let deadline = match amount {
            Amount::Duration(d) => start
                .checked_add(d)
                .map(Some)
                .ok_or_else(|| format!("its duration, {} s,", d.as_secs_f64())),
            Amount::Requests(_) | Amount::Sessions(_) => Ok(None),
        };
        let first_sends = (0..c)
            .map(|w| match self.load_ramp {
                Some(r) => instant_after(start, r.reaches(f64::from(w) + 1.0, f64::from(c))),
                None => start.checked_add(self.ramp.mul_f64(f64::from(w) / f64::from(c.max(1)))),
            })
            .collect::<Option<Vec<Instant>>>()
            .ok_or_else(|| "its workers' ramp".to_owned());
        let mut failed = None;
        let (deadline, first_sends) = match deadline.and_then(|d| Ok((d, first_sends?))) {
            Ok(both) => both,
            Err(what) => {
                failed = Some(format!("{what} ends past what the clock can hold"));
                (None, Vec::new())
            }
        };
        let mut handles = Vec::with_capacity(first_sends.len());
        // A stop: no more sends; what is in flight after the grace is cut.
        let (cut, _cutter) = self.halt.cutter(self.grace);
        let unfinished = Arc::new(AtomicU64::new(0));
        // Each worker owns its prober for the level and hands it back at the end.
        let workers: Vec<Prober> = self.probers.drain(..first_sends.len()).collect();
        for (mut prober, first_send) in workers.into_iter().zip(first_sends) {
            let (spec, tickets, progress) =
                (self.spec.clone(), tickets.clone(), self.progress.clone());
            let (halt, cut, unfinished) = (self.halt.clone(), cut.clone(), unfinished.clone());
            if sessions {
                let worker = SessionWorker {
                    spec,
                    tickets,
                    limit,
                    deadline,
                    progress,
                    halt,
                    cut,
                    unfinished,
                    start,
                };
                handles.push(tokio::spawn(worker.run(prober, first_send)));
                continue;
            }
            handles.push(tokio::spawn(async move {
                let mut out = Vec::new();
                let mut intended = first_send;
                let mut first = true;
                let stop = halt.stop.clone();
                tokio::select! {
                    () = tokio::time::sleep_until(first_send.into()) => {}
                    () = stop.cancelled() => {}
                }
                // Each worker keeps its own conversation (its turns in order, with think time).
                let mut session = spec.session();
                loop {
                    if stop.is_cancelled() || tickets.fetch_add(1, Ordering::Relaxed) >= limit {
                        break;
                    }
                    let (content, think) = session.next(&spec);
                    if !think.is_zero() {
                        intended += think;
                        tokio::select! {
                            () = tokio::time::sleep_until(intended.into()) => {}
                            () = stop.cancelled() => break,
                        }
                    }
                    let sent = Instant::now();
                    if deadline.is_some_and(|d| sent >= d) {
                        break;
                    }
                    progress.sent();
                    let r = tokio::select! {
                        r = prober.run_content(&spec, &content) => r,
                        () = cut.cancelled() => {
                            unfinished.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    };
                    halt.record(&r);
                    session.answered(&r);
                    let end = Instant::now();
                    progress.record(&r);
                    out.push(Sample::from_result(
                        &r,
                        secs(sent - start),
                        secs(end - start),
                        secs(sent.saturating_duration_since(intended)),
                        first,
                    ));
                    intended = end;
                    first = false;
                }
                Ok((vec![prober], out))
            }));
        }
        let mut samples = Vec::new();
        let mut back = Vec::with_capacity(handles.len());
        for h in handles {
            // A worker that panicked loses its prober and its samples: the level fails.
            match joined(h, &mut failed).await {
                Some(Ok((mut probers, mut v))) => {
                    back.append(&mut probers);
                    samples.append(&mut v);
                }
                Some(Err(e)) => {
                    failed.get_or_insert_with(|| format!("a sub-agent's prober: {e}"));
                }
                None => {}
            }
        }
        back.append(&mut self.probers);
        self.probers = back;
        // The first prober calibrates: keep one even if every worker was lost.
        self.ensure_probers(1)?;
        let (loop_lag, cpu) = monitor.stop().await;
        ticker.end().await;
        if let Some(reason) = failed {
            return Err(BenchError::Level { level, reason });
        }
        Ok(LevelRun {
            wall_s: samples.iter().map(|s| s.end_s).fold(0.0, f64::max),
            canary: None,
            samples,
            loop_lag,
            capped: 0,
            started_unix_s,
            cpu,
            unfinished: unfinished.load(Ordering::Relaxed),
            cache: None,
        })
    }

    /// One open-loop level: arrivals at `rate`/s, at most `cap` in flight (later arrivals wait
    /// for a slot and are counted as capped), `progress_base` units into the run.
    ///
    /// # Errors
    /// [`BenchError::Client`] if a prober cannot be built; [`BenchError::Level`] if an arrival's
    /// instant does not fit the clock (a trace's: before anything is sent; others' when due) or
    /// a task of the level panicked, once every request sent has ended.
    pub async fn open(
        &mut self,
        (rate, cap): (f64, u32),
        arrival: Arrival,
        seed: u64,
        amount: Amount,
        label: String,
        progress_base: u64,
    ) -> Result<LevelRun, BenchError> {
        // Probers for the first arrivals up front; more are built on demand up to the cap.
        self.ensure_probers((cap as usize).min(FIRST_PROBERS))?;
        let pool = Arc::new(ProberPool {
            idle: Mutex::new(std::mem::take(&mut self.probers)),
            back: tokio::sync::Notify::new(),
        });
        let slots = Arc::new(Semaphore::new(cap as usize));
        let capped = Arc::new(AtomicU64::new(0));
        let level = label.clone();
        let ticker = self.ticker(label, progress_base, amount);
        let monitor = LagMonitor::start();
        let handle = tokio::runtime::Handle::current();
        // The dispatcher thread needs a moment to start: arrivals are scheduled from then.
        let start = Instant::now() + Duration::from_millis(5);
        let started_unix_s = unix_s(std::time::SystemTime::now() + Duration::from_millis(5));
        let (spec, progress) = (self.spec.clone(), self.progress.clone());
        let load_ramp = self.load_ramp;
        let capped2 = capped.clone();
        let pool2 = pool.clone();
        // A level abandoned (a stop signal drops this future) ends its dispatcher within a
        // slice: a blocking task left sleeping towards later arrivals would hold the process's
        // exit for the rest of the level.
        let abandoned = Arc::new(AtomicBool::new(false));
        let _abandon = AbandonOnDrop(abandoned.clone());
        // A trace prompt's level replays the trace: each request at its own instant, with its
        // own content (request i of the trace, whatever order the sends run in).
        // A session trace at its recorded starts (`--arrival recorded`): each arrival is the
        // session that starts then, in order of their starts.
        let (trace, ids) = match &spec.workload {
            crate::workload::Workload::Trace(t) => (Some(t.offsets()), None),
            crate::workload::Workload::Session(crate::workload::Sessions::Replay(r))
                if self.recorded_sessions =>
            {
                let mut starts: Vec<(u64, f64)> = (0..r.len() as u64)
                    .map(|i| (i, r.start_offset(i).as_secs_f64()))
                    .collect();
                starts.sort_by(|a, b| a.1.total_cmp(&b.1));
                let (ids, offs): (Vec<u64>, Vec<f64>) = starts.into_iter().unzip();
                (Some(offs), Some(ids))
            }
            _ => (None, None),
        };
        let indexed = trace.is_some();
        // A trace's instants are all checked before its first is sent (a trace's span is bounded
        // at load, so this is the clock's own guard); generated ones as they come.
        let mut failed = trace.as_ref().and_then(|t| {
            let (i, off) = t
                .iter()
                .enumerate()
                .find(|(_, off)| instant_after(start, **off).is_none())?;
            Some(unschedulable(i, *off))
        });
        let offsets: Box<dyn Iterator<Item = f64> + Send> = match (trace, &failed) {
            (_, Some(_)) => Box::new(std::iter::empty()),
            (Some(t), None) => Box::new(t.into_iter()),
            (None, None) => ramped_offsets(rate, arrival, seed, load_ramp),
        };
        // Each arrival's task is handed over as it is spawned, so the requests sent are waited
        // for whatever becomes of the dispatcher (a panic of its own included).
        let (sent, mut arrivals) = tokio::sync::mpsc::unbounded_channel();
        // A stop: no more arrivals; what is in flight after the grace is cut.
        let (cut, _cutter) = self.halt.cutter(self.grace);
        let unfinished = Arc::new(AtomicU64::new(0));
        let (halt, cut2, unfinished2) = (self.halt.clone(), cut.clone(), unfinished.clone());
        let dispatcher = tokio::task::spawn_blocking(move || {
            for (i, off) in offsets.enumerate() {
                match amount {
                    Amount::Requests(n) | Amount::Sessions(n) if i as u64 >= n => break,
                    Amount::Duration(d) if off >= d.as_secs_f64() => break,
                    _ => {}
                }
                let Some(intended) = instant_after(start, off) else {
                    return Some(unschedulable(i, off));
                };
                loop {
                    if abandoned.load(Ordering::Acquire) || halt.stop.is_cancelled() {
                        return None;
                    }
                    let now = Instant::now();
                    if intended <= now {
                        break;
                    }
                    std::thread::sleep((intended - now).min(DISPATCH_SLICE));
                }
                let req = OpenRequest {
                    spec: spec.clone(),
                    pool: pool2.clone(),
                    slots: slots.clone(),
                    capped: capped2.clone(),
                    progress: progress.clone(),
                    halt: halt.clone(),
                    cut: cut2.clone(),
                    unfinished: unfinished2.clone(),
                    start,
                    intended,
                    index: indexed
                        .then(|| ids.as_ref().and_then(|v| v.get(i).copied()))
                        .map(|id| id.unwrap_or(i as u64)),
                };
                // The receiver lives until the sender is dropped: this cannot fail.
                let _ = sent.send(handle.spawn(req.run()));
            }
            None
        });
        let mut samples = Vec::new();
        while let Some(h) = arrivals.recv().await {
            match joined(h, &mut failed).await {
                Some(Ok(v)) => samples.extend(v),
                Some(Err(why)) => {
                    failed.get_or_insert(why);
                }
                None => {}
            }
        }
        if let Some(Some(reason)) = joined(dispatcher, &mut failed).await {
            failed.get_or_insert(reason);
        }
        let (loop_lag, cpu) = monitor.stop().await;
        ticker.end().await;
        // Keep the probers the pool grew to, for the next level (every arrival has handed its
        // prober back by now).
        if let Ok(mut p) = pool.idle.lock() {
            self.probers = std::mem::take(&mut *p);
        }
        self.ensure_probers(1)?;
        if let Some(reason) = failed {
            return Err(BenchError::Level { level, reason });
        }
        Ok(LevelRun {
            wall_s: samples.iter().map(|s| s.end_s).fold(0.0, f64::max),
            canary: None,
            samples,
            loop_lag,
            capped: capped.load(Ordering::Relaxed),
            started_unix_s,
            cpu,
            unfinished: unfinished.load(Ordering::Relaxed),
            cache: None,
        })
    }
}

/// What a worker hands back at its level's end: its probers (a session's sub-agents' too) and
/// its samples; or why a sub-agent's prober could not be built.
type WorkerRun = Result<(Vec<Prober>, Vec<Sample>), TransportError>;

/// A closed-loop worker of a session prompt: whole sessions one after another, each through
/// [`crate::probe::session::run_with`] (its sub-agents in parallel, each on a prober of its own),
/// until the level's sessions are taken or its duration is over (a session running then runs to
/// its end); each turn a sample.
struct SessionWorker {
    spec: Arc<ProbeSpec>,
    /// The level's sessions taken so far.
    tickets: Arc<AtomicU64>,
    /// The most sessions of the level.
    limit: u64,
    /// No session starts after it.
    deadline: Option<Instant>,
    progress: Progress,
    halt: Halt,
    cut: CancellationToken,
    unfinished: Arc<AtomicU64>,
    /// The level's start.
    start: Instant,
}

impl SessionWorker {
    async fn run(self, prober: Prober, first_send: Instant) -> WorkerRun {
        let mut probers = vec![prober];
        let mut out = Vec::new();
        let stop = self.halt.stop.clone();
        tokio::select! {
            () = tokio::time::sleep_until(first_send.into()) => {}
            () = stop.cancelled() => {}
        }
        let mut intended = first_send;
        let mut first = true;
        loop {
            if stop.is_cancelled() || self.tickets.fetch_add(1, Ordering::Relaxed) >= self.limit {
                break;
            }
            let began = Instant::now();
            if self.deadline.is_some_and(|d| began >= d) {
                break;
            }
            let id = self.spec.next_seq();
            let run = session_run(
                &self.spec,
                &mut probers,
                id,
                (&self.halt, &self.cut),
                &self.progress,
            )
            .await?;
            self.unfinished
                .fetch_add(u64::from(run.cut), Ordering::Relaxed);
            let at = SessionAt {
                began,
                level_start: self.start,
                late_s: secs(began.saturating_duration_since(intended)),
                first,
                behind_s: None,
            };
            out.extend(session_samples(&run, &at));
            first = false;
            intended = Instant::now();
        }
        Ok((probers, out))
    }
}

/// Runs session `id` of `spec` on `probers` as a level sends it: no turn after the `halt`'s
/// stop, a turn in flight given up at `cut`, each turn counted by the progress and the early
/// stop.
async fn session_run(
    spec: &ProbeSpec,
    probers: &mut Vec<Prober>,
    id: u64,
    (halt, cut): (&Halt, &CancellationToken),
    progress: &Progress,
) -> Result<crate::probe::session::SessionRun, TransportError> {
    let watch = |r: Option<&ProbeResult>| match r {
        None => progress.sent(),
        Some(r) => {
            halt.record(r);
            progress.record(r);
        }
    };
    let ctl = crate::probe::session::Control {
        stop: &halt.stop,
        cut,
        watch: &watch,
    };
    crate::probe::session::run_with(spec, probers, id, ctl).await
}

/// Where a session ran in its level: when it began, the level's start, how late its first turn
/// was sent (closed loop: after the worker's previous session; open loop: after its slot was
/// free), whether it is a closed-loop worker's first, and, open loop, how far behind its
/// arrival's instant it began (a wait for a slot included).
struct SessionAt {
    began: Instant,
    level_start: Instant,
    late_s: f64,
    first: bool,
    behind_s: Option<f64>,
}

/// Each turn of a session as a sample of its level: its instants after the level's start; its
/// lag its own wait's (the first turn's: the session's lateness); in open loop, how far behind
/// its schedule it was sent (the first turn: after its arrival; a later one: after the previous
/// answer and its wait). A closed-loop worker's first session's first turn is its `first`.
fn session_samples(run: &crate::probe::session::SessionRun, at: &SessionAt) -> Vec<Sample> {
    let off = secs(at.began.saturating_duration_since(at.level_start));
    run.turns
        .iter()
        .map(|t| {
            let opening = t.session.branch == 0 && t.turn == 1;
            let lag = if opening {
                at.late_s + t.lag_s
            } else {
                t.lag_s
            };
            let mut s = Sample::from_result(
                &t.result,
                off + t.sent_s,
                off + t.end_s,
                lag,
                at.first && opening,
            );
            if let Some(behind) = at.behind_s {
                s.behind_schedule_s = Some(if opening { behind + t.lag_s } else { t.lag_s });
            }
            s
        })
        .collect()
}

/// `start` plus `off` seconds, when the clock holds that instant: none for an offset that is
/// negative, not a number, or past the clock's range (where `Instant + Duration` panics).
fn instant_after(start: Instant, off: f64) -> Option<Instant> {
    Duration::try_from_secs_f64(off)
        .ok()
        .and_then(|d| start.checked_add(d))
}

/// Why arrival `i`, due `off` seconds after its level's start, was not sent.
fn unschedulable(i: usize, off: f64) -> String {
    format!("arrival {i} is due {off:e} s after the level's start, past what the clock can hold")
}

/// A level's task's result; none when it panicked (or was cancelled), and why in `failed` (the
/// first reason is kept). A panic's own message is printed by the panic hook where it happened,
/// and not repeated.
async fn joined<T>(task: tokio::task::JoinHandle<T>, failed: &mut Option<String>) -> Option<T> {
    match task.await {
        Ok(v) => Some(v),
        Err(e) => {
            failed.get_or_insert_with(|| {
                if e.is_panic() {
                    "a worker panicked (a bug: the panic's message and place are printed above)"
                        .into()
                } else {
                    "a worker was cancelled".into()
                }
            });
            None
        }
    }
}

/// The longest sleep of the open loop's dispatcher before it looks whether its level was
/// abandoned (the last slice before an arrival ends at its instant, so timing is unchanged).
const DISPATCH_SLICE: Duration = Duration::from_millis(50);

/// Marks a level abandoned when its future is dropped.
struct AbandonOnDrop(Arc<AtomicBool>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// The idle probers of an open-loop level: an arrival takes one (or builds one) and hands it
/// back, so no two requests ever share a prober.
struct ProberPool {
    idle: Mutex<Vec<Prober>>,
    back: tokio::sync::Notify,
}

impl ProberPool {
    /// An idle prober, else a new one; if none can be built (the settings built the level's
    /// first one, so this is not expected), the next one handed back.
    async fn take(&self, spec: &ProbeSpec) -> Prober {
        loop {
            if let Some(p) = self.idle.lock().ok().and_then(|mut p| p.pop()) {
                return p;
            }
            match Prober::new(spec) {
                Ok(p) => return p,
                Err(_) => self.back.notified().await,
            }
        }
    }

    fn give_back(&self, p: Prober) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(p);
        }
        self.back.notify_one();
    }
}

/// One open-loop arrival.
struct OpenRequest {
    spec: Arc<ProbeSpec>,
    pool: Arc<ProberPool>,
    slots: Arc<Semaphore>,
    capped: Arc<AtomicU64>,
    progress: Progress,
    halt: Halt,
    cut: CancellationToken,
    unfinished: Arc<AtomicU64>,
    start: Instant,
    intended: Instant,
    /// A trace's request number: it sends that request's content.
    index: Option<u64>,
}

impl OpenRequest {
    /// An in-flight slot for the arrival, with the instant it was meant to leave: its own, or,
    /// when every slot was taken (counted as capped), the instant one came free. `None` when the
    /// level was stopped while it waited.
    async fn slot(&self) -> Option<(Option<tokio::sync::OwnedSemaphorePermit>, Instant)> {
        match self.slots.clone().try_acquire_owned() {
            Ok(p) => Some((Some(p), self.intended)),
            Err(_) => {
                self.capped.fetch_add(1, Ordering::Relaxed);
                let p = tokio::select! {
                    p = self.slots.clone().acquire_owned() => p.ok(),
                    () = self.halt.stop.cancelled() => return None,
                };
                Some((p, Instant::now().max(self.intended)))
            }
        }
    }

    /// The arrival's samples: its request's (none when the level was stopped before it was
    /// sent, or it was cut in flight, counted as unfinished), or a session prompt's session's
    /// turns; why it failed, when a sub-agent's prober could not be built.
    async fn run(self) -> Result<Vec<Sample>, String> {
        Ok(match self.spec.workload {
            crate::workload::Workload::Session(_) => self.session().await?,
            _ => self.request().await.into_iter().collect(),
        })
    }

    /// A session arrival: its session (the trace's own at a recorded start, else the next)
    /// through an in-flight slot and probers of the pool, to its end.
    async fn session(self) -> Result<Vec<Sample>, String> {
        let stop = &self.halt.stop;
        let Some((permit, intended)) = self.slot().await else {
            return Ok(Vec::new());
        };
        let prober = tokio::select! {
            p = self.pool.take(&self.spec) => p,
            () = stop.cancelled() => return Ok(Vec::new()),
        };
        let mut probers = vec![prober];
        let id = self.index.unwrap_or_else(|| self.spec.next_seq());
        let began = Instant::now();
        let run = session_run(
            &self.spec,
            &mut probers,
            id,
            (&self.halt, &self.cut),
            &self.progress,
        )
        .await;
        for p in probers {
            self.pool.give_back(p);
        }
        drop(permit);
        let run = run.map_err(|e| format!("a sub-agent's prober: {e}"))?;
        self.unfinished
            .fetch_add(u64::from(run.cut), Ordering::Relaxed);
        let at = SessionAt {
            began,
            level_start: self.start,
            late_s: secs(began.saturating_duration_since(intended)),
            first: false,
            // From the arrival's own schedule, the slot's wait included.
            behind_s: Some(secs(began.saturating_duration_since(self.intended))),
        };
        Ok(session_samples(&run, &at))
    }

    /// The arrival's sample; none when the level was stopped before it was sent, or it was cut
    /// in flight (counted as unfinished).
    async fn request(self) -> Option<Sample> {
        let stop = &self.halt.stop;
        let (permit, intended) = self.slot().await?;
        let mut prober = tokio::select! {
            p = self.pool.take(&self.spec) => p,
            () = stop.cancelled() => return None,
        };
        if stop.is_cancelled() {
            self.pool.give_back(prober);
            return None;
        }
        let r = self.spec.as_ref();
        let content = match self.index {
            Some(i) => r.workload.draw(i, &r.tokens),
            None => r.next_content(),
        };
        let sent = Instant::now();
        self.progress.sent();
        let result = tokio::select! {
            r = prober.run_content(r, &content) => r,
            () = self.cut.cancelled() => {
                self.unfinished.fetch_add(1, Ordering::Relaxed);
                self.pool.give_back(prober);
                return None;
            }
        };
        let end = Instant::now();
        self.pool.give_back(prober);
        drop(permit);
        self.halt.record(&result);
        self.progress.record(&result);
        let mut sample = Sample::from_result(
            &result,
            secs(sent.saturating_duration_since(self.start)),
            secs(end.saturating_duration_since(self.start)),
            secs(sent.saturating_duration_since(intended)),
            false,
        );
        // From the arrival's own schedule, the cap's wait included.
        sample.behind_schedule_s = Some(secs(sent.saturating_duration_since(self.intended)));
        Some(sample)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::progress::ProgressMode;

    #[test]
    fn a_level_in_two_parts_sums_its_cpu_wait_and_shifts_the_second_part() {
        let part = |wait: Option<(f64, u64)>| LevelRun {
            wall_s: 2.0,
            samples: vec![Sample {
                sent_s: 0.5,
                end_s: 1.5,
                ..Sample::default()
            }],
            cpu: wait.map(|(waited_s, timeslices)| CpuWait {
                waited_s,
                timeslices,
            }),
            ..LevelRun::default()
        };
        let both = part(Some((0.25, 100))).then(part(Some((1.0, 20))));
        assert_eq!(
            both.cpu,
            Some(CpuWait {
                waited_s: 1.25,
                timeslices: 120
            })
        );
        assert_eq!(both.wall_s, 4.0);
        assert_eq!(both.samples[1].sent_s, 2.5);
        assert_eq!(both.samples[1].end_s, 3.5);
        // A part that could not read its wait leaves the other's.
        assert_eq!(
            part(None).then(part(Some((1.0, 20)))).cpu,
            part(Some((1.0, 20))).cpu
        );
        assert_eq!(part(None).then(part(None)).cpu, None);
    }

    #[test]
    fn constant_arrivals_are_evenly_spaced() {
        let v: Vec<f64> = arrival_offsets(4.0, Arrival::Constant, 1).take(4).collect();
        assert_eq!(v, vec![0.0, 0.25, 0.5, 0.75]);
    }

    /// `--ramp-up`: from 5/s to 25/s over 2 s, then 25/s. Linear: 10 arrivals are due in the
    /// first second (5 + 5·1²), 20 in the second, 25 a second after; exponential: the rate at t
    /// is 5·5^(t/2), so (25 − 5)·2/ln 5 = 24.85 arrivals are due by 2 s.
    #[test]
    fn a_ramped_rate_spreads_arrivals_as_its_integral_says() {
        let count_by = |t: &[f64], x: f64| t.iter().filter(|v| **v < x - 1e-9).count();
        let linear = LoadRamp {
            exponential: false,
            from: 5.0,
            over: 2.0,
        };
        let t: Vec<f64> = ramped_offsets(25.0, Arrival::Constant, 1, Some(linear))
            .take(200)
            .collect();
        assert_eq!(
            [count_by(&t, 1.0), count_by(&t, 2.0), count_by(&t, 3.0)],
            [10, 30, 55]
        );
        assert!(t.windows(2).all(|w| w[1] > w[0]));
        let exp = LoadRamp {
            exponential: true,
            ..linear
        };
        assert!((exp.instant_of((25.0 - 5.0) * 2.0 / 5f64.ln(), 25.0) - 2.0).abs() < 1e-9);
        assert!((exp.instant_of(0.0, 25.0)).abs() < 1e-12);
        let t: Vec<f64> = ramped_offsets(25.0, Arrival::Constant, 1, Some(exp))
            .take(200)
            .collect();
        assert_eq!(count_by(&t, 2.0), 25);
        // The rate past the ramp is the level's.
        let gaps: Vec<f64> = t.windows(2).skip(40).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|g| (g - 0.04).abs() < 1e-9), "{gaps:?}");
        // No ramp: the plain offsets.
        let plain: Vec<f64> = ramped_offsets(4.0, Arrival::Constant, 1, None)
            .take(3)
            .collect();
        assert_eq!(plain, [0.0, 0.25, 0.5]);
    }

    /// `--burstiness K`: gamma gaps of mean 1/rate whose coefficient of variation is 1/sqrt(K)
    /// (K = 0.25: 2, burstier than Poisson; K = 4: 0.5), reproducible from the seed.
    #[test]
    fn a_ramped_closed_loop_starts_each_worker_when_the_load_reaches_it() {
        let linear = LoadRamp {
            exponential: false,
            from: 2.0,
            over: 3.0,
        };
        let starts: Vec<f64> = (0..8)
            .map(|w| linear.reaches(w as f64 + 1.0, 8.0))
            .collect();
        // Two workers at once, then one every half second up to eight at 3 s.
        assert_eq!(starts, [0.0, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]);
        let exp = LoadRamp {
            exponential: true,
            from: 1.0,
            over: 3.0,
        };
        // Doubling every second: 2 workers at 1 s, 4 at 2 s, 8 at 3 s.
        for (w, at) in [(1, 1.0), (3, 2.0), (7, 3.0)] {
            assert!(
                (exp.reaches(w as f64 + 1.0, 8.0) - at).abs() < 1e-12,
                "worker {w}"
            );
        }
        assert_eq!(exp.reaches(1.0, 8.0), 0.0);
    }

    #[test]
    fn gamma_gaps_have_the_mean_and_spread_their_shape_says() {
        for (k, seed) in [(0.25, 11), (1.0, 12), (4.0, 13)] {
            let arrival = Arrival::Gamma { shape: k };
            let t: Vec<f64> = arrival_offsets(20.0, arrival, seed).take(40_001).collect();
            let gaps: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
            let n = gaps.len() as f64;
            let mean = gaps.iter().sum::<f64>() / n;
            let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
            let cv = sd / mean;
            assert!((mean - 0.05).abs() < 0.05 * 0.05, "K {k}: mean gap {mean}");
            let want = 1.0 / k.sqrt();
            assert!(
                (cv / want - 1.0).abs() < 0.05,
                "K {k}: CV {cv}, want {want}"
            );
            assert!(gaps.iter().all(|g| *g >= 0.0));
            let again: Vec<f64> = arrival_offsets(20.0, arrival, seed).take(40_001).collect();
            assert_eq!(t, again);
        }
        assert_eq!(Arrival::Gamma { shape: 0.5 }.as_str(), "gamma");
    }

    #[test]
    fn poisson_arrivals_have_the_rate() {
        let n = 20_000;
        let last = arrival_offsets(50.0, Arrival::Poisson, 7)
            .nth(n)
            .unwrap_or(0.0);
        let rate = n as f64 / last;
        assert!((rate - 50.0).abs() < 2.0, "rate {rate}");
        // Reproducible with the seed.
        let a: Vec<f64> = arrival_offsets(5.0, Arrival::Poisson, 3).take(5).collect();
        let b: Vec<f64> = arrival_offsets(5.0, Arrival::Poisson, 3).take(5).collect();
        assert_eq!(a, b);
    }

    /// A runner for a trace prompt whose instants (seconds) are `at_s`, bypassing the parser's
    /// bounds, aimed at a listener that counts nothing sent: the listener, to look at after.
    fn trace_runner(at_s: &[f64]) -> (Runner, std::net::TcpListener) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = crate::config::Config::parse(&format!(
            "prompts:\n  - name: p\n    trace: {{file: t.jsonl, format: mooncake}}\n\
             targets:\n  - name: t\n    base_url: http://{}/v1\n    models: [m]\n",
            listener.local_addr().unwrap()
        ))
        .unwrap();
        let spec = ProbeSpec::from_job(&c.jobs[0]);
        let crate::workload::Workload::Trace(t) = &spec.workload else {
            panic!("a trace prompt");
        };
        let requests = at_s
            .iter()
            .map(|&at_s| crate::workload::trace::TraceRequest {
                at_s,
                input_tokens: 5,
                output_tokens: 2,
                hash_ids: Vec::new(),
            })
            .collect();
        t.recording
            .set(crate::workload::trace::Recording {
                requests,
                ..Default::default()
            })
            .unwrap();
        listener.set_nonblocking(true).unwrap();
        (
            Runner::new(spec, Progress::new(0, ProgressMode::Off)).unwrap(),
            listener,
        )
    }

    /// Issue 39: an instant past the clock's range (a trace's 1e19 s, 1e300 s; a duration no
    /// instant holds) fails its level before anything is sent, instead of panicking a worker
    /// after the first request and reporting a level of nothing.
    #[tokio::test]
    async fn an_instant_past_the_clock_fails_the_level_with_nothing_sent() {
        for far in [1e19, 1e300, f64::INFINITY] {
            let (mut runner, listener) = trace_runner(&[0.0, far]);
            let r = runner
                .open(
                    (1.0, 10),
                    Arrival::Constant,
                    0,
                    Amount::Requests(2),
                    "m @ 1/s".into(),
                    0,
                )
                .await;
            let Err(BenchError::Level { level, reason }) = r else {
                panic!("{far}: {r:?}");
            };
            assert_eq!(level, "m @ 1/s");
            assert!(
                reason.starts_with("arrival 1 is due") && reason.contains("past what the clock"),
                "{reason}"
            );
            assert_eq!(runner.progress.started(), 0, "{far}");
            assert!(listener.accept().is_err(), "{far}: a connection was made");
        }
        let (mut runner, listener) = trace_runner(&[0.0]);
        let r = runner
            .closed(1, Amount::Duration(Duration::MAX), "m @ 1".into(), 0)
            .await;
        let Err(BenchError::Level { reason, .. }) = r else {
            panic!("{r:?}");
        };
        assert!(reason.starts_with("its duration"), "{reason}");
        assert_eq!(runner.progress.started(), 0);
        assert!(listener.accept().is_err(), "a connection was made");
    }

    /// A runner aimed at a server that accepts every connection and never answers: the
    /// runner, and the connections it accepted so far.
    fn hung_runner() -> (Runner, Arc<AtomicU64>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = crate::config::Config::parse(&format!(
            "prompts:\n  - name: p\n    messages: [{{role: user, content: hi}}]\n\
             targets:\n  - name: t\n    base_url: http://{}/v1\n    models: [m]\n",
            listener.local_addr().unwrap()
        ))
        .unwrap();
        let accepted = Arc::new(AtomicU64::new(0));
        let n = accepted.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for s in listener.incoming().flatten() {
                n.fetch_add(1, Ordering::Relaxed);
                held.push(s);
            }
        });
        let spec = ProbeSpec::from_job(&c.jobs[0]);
        let runner = Runner::new(spec, Progress::new(0, ProgressMode::Off)).unwrap();
        (runner, accepted)
    }

    /// Issue 40: a level stopped while its requests hang (a gateway retrying them) waits for
    /// them for the grace, then cuts them: the level returns what finished (nothing here) and
    /// how many were cut, at once rather than at the requests' own deadlines; nothing more is
    /// sent after the stop. Closed and open loop alike.
    #[tokio::test]
    async fn a_stopped_level_cuts_its_hung_requests_after_the_grace() {
        let (mut runner, accepted) = hung_runner();
        runner.grace = Duration::from_millis(200);
        let stop = runner.halt.stop.clone();
        let t = Instant::now();
        let level = runner.closed(3, Amount::Requests(100), "m @ 3".into(), 0);
        let signal = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            stop.cancel();
        };
        let (run, ()) = tokio::join!(level, signal);
        let run = run.unwrap();
        let took = t.elapsed();
        assert!(run.samples.is_empty(), "{:?}", run.samples);
        assert_eq!(run.unfinished, 3);
        assert!(
            took >= Duration::from_millis(500) && took < Duration::from_secs(3),
            "{took:?}"
        );
        assert_eq!(
            accepted.load(Ordering::Relaxed),
            3,
            "nothing sent after the stop"
        );
        // Open loop: arrivals after the stop are not sent; those in flight are cut.
        let (mut runner, accepted) = hung_runner();
        runner.grace = Duration::from_millis(200);
        let stop = runner.halt.stop.clone();
        let level = runner.open(
            (20.0, 100),
            Arrival::Constant,
            0,
            Amount::Requests(1000),
            "m @ 20/s".into(),
            0,
        );
        let signal = async {
            tokio::time::sleep(Duration::from_millis(120)).await;
            stop.cancel();
        };
        let (run, ()) = tokio::join!(level, signal);
        let run = run.unwrap();
        assert!(run.samples.is_empty());
        let sent = accepted.load(Ordering::Relaxed);
        assert!((1..=5).contains(&sent), "{sent} arrivals in 120 ms at 20/s");
        assert_eq!(run.unfinished, sent);
    }

    /// A task of a level that panicked is a reason the level fails, never a silent loss.
    #[tokio::test]
    async fn a_panicked_task_is_a_failure_of_its_level() {
        let mut failed = None;
        let ok = joined(tokio::spawn(async { 7 }), &mut failed).await;
        assert_eq!((ok, &failed), (Some(7), &None));
        let lost: Option<u32> =
            joined(tokio::spawn(async { panic!("on purpose") }), &mut failed).await;
        assert_eq!(lost, None);
        assert!(
            failed
                .as_deref()
                .is_some_and(|f| f.starts_with("a worker panicked")),
            "{failed:?}"
        );
    }
}
