//! Runs jobs on their schedules: one tokio task per job, never overlapping itself.
//!
//! Intervals use `tokio::time::interval_at` with `MissedTickBehavior::Skip` and a per-job offset
//! (a hash of the job name spread over the first `min(interval, 10 s)`), so jobs do not fire
//! together. Cron schedules are evaluated in UTC with `croner` (no local-time DST jumps). A tick
//! that finds the job's previous probe still running is skipped and counted
//! (`tokenprobe_probes_skipped_total{reason="overlap"}`); a target that answered 429 or overloaded
//! with a `Retry-After` is not probed until that wait has passed (`reason="rate_limited"`).
//!
//! What a job observes goes to every [`ResultSink`] the daemon built (the Prometheus registry, the
//! OTLP instruments): each job gets its side of each sink as it starts ([`JobSink`]), and its
//! results, skips and waits go to all of them by one call. A target's probes across its jobs
//! share one gate (`TargetGate`): their flight (overlap, cold start, `max_in_flight`) and the pause
//! the target asked for.

use crate::config::{Job, Schedule};
use crate::measure::ProbeResult;
use crate::outcome::Flag;
pub use crate::probe::session::{SessionDone, SessionOutcome, TurnDone};
use crate::probe::{Flight, ProbeSpec, Prober, TokenModels};
use crate::transport::TransportError;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Where `serve` sends what its jobs observe. Each exporter is one sink (the Prometheus
/// registry, the OTLP instruments: the next exporter is one more implementation); the daemon
/// builds them once and the scheduler keeps them across reloads.
pub trait ResultSink: Send + Sync {
    /// A job starts (new, or changed by a reload): the sink's side of it, which the job's
    /// probes record into.
    fn start(&self, job: &Job) -> Box<dyn JobSink>;
}

/// One job's side of a [`ResultSink`].
pub trait JobSink: Send + Sync {
    /// One probe's result (whole: [`crate::measure::Measurement::finish_with`]), finished at
    /// wall time `finished`.
    fn record(&self, r: &ProbeResult, finished: SystemTime);
    /// A scheduled probe that did not run.
    fn skipped(&self, _reason: SkipReason) {}
    /// A probe waited `d` for its target's `max_in_flight` before it was sent.
    fn waited(&self, _d: Duration) {}
    /// A probe the exporter itself could not make: not the target's failure, not a probe of it.
    fn internal_error(&self, _reason: InternalReason) {}
    /// A `session:` job's tick ran one whole session (each of its turns was [`JobSink::record`]ed
    /// as it ended): its turns, how it ended, how long it took.
    fn session(&self, _s: &SessionDone) {}
    /// The job stopped (a reload removed or changed it); `replaced`: a job of the same target,
    /// model and prompt starts in its place.
    fn stop(&self, replaced: bool);
}

/// Why a scheduled probe did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// The job's previous probe was still running at the tick.
    Overlap,
    /// The target asked to wait (`Retry-After`), and the wait had not passed.
    RateLimited,
    /// The prompt is built to a token length and its calibration failed: nothing is sent at a
    /// guessed length (the next tick calibrates again).
    Uncalibrated,
}

impl SkipReason {
    /// Every reason (series are pre-created at 0).
    pub const ALL: [SkipReason; 3] = [
        SkipReason::Overlap,
        SkipReason::RateLimited,
        SkipReason::Uncalibrated,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Overlap => "overlap",
            SkipReason::RateLimited => "rate_limited",
            SkipReason::Uncalibrated => "uncalibrated",
        }
    }
}

/// The exporter's own failures that are not the target's: a probe that hit one is not counted as
/// a probe of the target (`tokenprobe_internal_errors_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InternalReason {
    /// The process (or system) ran out of file descriptors (`EMFILE`/`ENFILE`).
    FdExhausted,
}

impl InternalReason {
    /// Every reason (series are pre-created at 0).
    pub const ALL: [InternalReason; 1] = [InternalReason::FdExhausted];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            InternalReason::FdExhausted => "fd_exhausted",
        }
    }
}

/// A job's side of every sink: each fact of the job goes to all of them by one call.
struct JobSinks(Vec<Box<dyn JobSink>>);

impl JobSink for JobSinks {
    fn record(&self, r: &ProbeResult, finished: SystemTime) {
        for s in &self.0 {
            s.record(r, finished);
        }
    }

    fn skipped(&self, reason: SkipReason) {
        for s in &self.0 {
            s.skipped(reason);
        }
    }

    fn waited(&self, d: Duration) {
        for s in &self.0 {
            s.waited(d);
        }
    }

    fn internal_error(&self, reason: InternalReason) {
        for s in &self.0 {
            s.internal_error(reason);
        }
    }

    fn session(&self, done: &SessionDone) {
        for s in &self.0 {
            s.session(done);
        }
    }

    fn stop(&self, replaced: bool) {
        for s in &self.0 {
            s.stop(replaced);
        }
    }
}

/// The longest start offset given to a job.
const MAX_OFFSET: Duration = Duration::from_secs(10);

/// Start offset of a job: stable for a name, spread over `[0, min(period, 10 s))`.
pub fn offset(name: &str, period: Duration) -> Duration {
    let span = period.min(MAX_OFFSET);
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    let frac = (h.finish() % 10_000) as f64 / 10_000.0;
    span.mul_f64(frac)
}

/// One target's state across its jobs: its probes in flight (whether one ran while another was in
/// flight, flag `concurrent_probe`; whether the target had been idle for its `cold_after`, flag
/// `cold_start`; the target's `max_in_flight`) and the pause its answers asked for.
#[derive(Debug)]
struct TargetGate {
    in_flight: AtomicUsize,
    /// Probes begun so far (a probe that sees more begun at its end than at its start overlapped
    /// one that began after it).
    begun: AtomicU64,
    /// The limit, as configured, and its permits.
    max: Option<u32>,
    permits: Option<Arc<tokio::sync::Semaphore>>,
    /// `cold_after`, as configured.
    cold_after: Option<Duration>,
    /// When the target's last probe ended (none yet: not known to be idle).
    last_end: Mutex<Option<Instant>>,
    /// Until when the target asked not to be probed (`Retry-After`); passed on to the gate that
    /// replaces this one when a reload changes the target's limits.
    pause: Arc<Mutex<Option<Instant>>>,
}

/// A probe of a target in flight: what [`TargetGate::begin`] saw; leaving the flight (dropping
/// it, also on a panic) counts it out.
struct InFlight {
    gate: Arc<TargetGate>,
    others_in_flight: bool,
    number: u64,
    /// The target had no probe for its `cold_after` before this one.
    cold: bool,
}

impl Flight for InFlight {
    /// Whether another probe of the target was in flight at some point of this one so far.
    fn overlapped(&self) -> bool {
        self.others_in_flight || self.gate.begun.load(Ordering::SeqCst) > self.number
    }

    fn cold(&self) -> bool {
        self.cold
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gate.in_flight.fetch_sub(1, Ordering::SeqCst);
        *self.gate.last_end() = Some(Instant::now());
    }
}

impl TargetGate {
    fn new(
        max: Option<u32>,
        cold_after: Option<Duration>,
        pause: Arc<Mutex<Option<Instant>>>,
    ) -> Self {
        TargetGate {
            in_flight: AtomicUsize::new(0),
            begun: AtomicU64::new(0),
            max,
            permits: max.map(|n| Arc::new(tokio::sync::Semaphore::new(n as usize))),
            cold_after,
            last_end: Mutex::new(None),
            pause,
        }
    }

    fn last_end(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.last_end.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn pause(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.pause.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The target asked, at `now`, to wait `wait_s` seconds (at most an hour) before it is probed
    /// again.
    fn pause_for(&self, now: Instant, wait_s: f64) {
        *self.pause() = Some(now + Duration::from_secs_f64(wait_s.clamp(0.0, 3600.0)));
    }

    /// Whether the wait the target asked for has not passed at `now`.
    fn paused(&self, now: Instant) -> bool {
        let mut pause = self.pause();
        match *pause {
            Some(until) if now < until => true,
            Some(_) => {
                *pause = None;
                false
            }
            None => false,
        }
    }

    /// A probe begins at `now`: cold when no other is in flight and the last one of the target
    /// ended `cold_after` or longer ago.
    fn begin(self: &Arc<Self>, now: Instant) -> InFlight {
        let before = self.in_flight.fetch_add(1, Ordering::SeqCst);
        let number = self.begun.fetch_add(1, Ordering::SeqCst) + 1;
        let cold = before == 0
            && match (self.cold_after, *self.last_end()) {
                (Some(after), Some(end)) => now.saturating_duration_since(end) >= after,
                _ => false,
            };
        InFlight {
            gate: self.clone(),
            others_in_flight: before > 0,
            number,
            cold,
        }
    }
}

/// A target, as the key of its gate: its name in the config (unique per config, and kept across
/// reloads), never a metric's label.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct TargetName(String);

impl TargetName {
    fn of(job: &Job) -> Self {
        TargetName(job.target.name.clone())
    }
}

/// Each target's gate; kept across reloads while its `max_in_flight` and `cold_after` stay (a new
/// gate takes over the old one's pause).
type Targets = HashMap<TargetName, Arc<TargetGate>>;

/// A job as the key of the running set: equal keys mean nothing about the job changed. Equality
/// is the config types' own (`Eq` on [`Job`], every setting compared, hidden values included),
/// never their `Debug` text, which hides secrets; the hash is of the job's name, unique per config.
#[derive(Debug, Clone, PartialEq, Eq)]
struct JobKey(Job);

/// A job's target, model and prompt names: its labels, unique per config.
fn names(j: &Job) -> (&str, &str, &str) {
    (&j.target.name, &j.model, &j.prompt.name)
}

impl Hash for JobKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        names(&self.0).hash(h);
    }
}

/// Where `serve` sends what its jobs observe, built once by the daemon.
pub type Sinks = Vec<Arc<dyn ResultSink>>;

/// The running jobs. Dropping it does not stop them; call [`Scheduler::shutdown`].
pub struct Scheduler {
    sinks: Sinks,
    runtime: tokio::runtime::Handle,
    cancel: CancellationToken,
    ticks: TaskTracker,
    probes: TaskTracker,
    /// Each running job's context, which its ticks and probes share.
    jobs: HashMap<JobKey, Arc<JobContext>>,
    /// Calibrations of the (target, model)s whose prompts are built to a token length.
    token_models: Arc<TokenModels>,
    targets: Targets,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("jobs", &self.jobs.len())
            .finish()
    }
}

/// What [`Scheduler::apply`] changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Jobs started (new or changed).
    pub started: usize,
    /// Jobs stopped (removed or changed).
    pub stopped: usize,
    /// Jobs left running untouched.
    pub kept: usize,
}

impl Scheduler {
    /// Starts one task per job on `runtime` (the probing runtime: every tick and probe of every
    /// job, later ones after a reload too, runs there, whichever runtime calls [`Scheduler::apply`]);
    /// every job records into each of `sinks`.
    ///
    /// # Errors
    /// [`TransportError`] when an HTTP client cannot be built.
    pub fn start(
        jobs: &[Job],
        sinks: Sinks,
        runtime: tokio::runtime::Handle,
    ) -> Result<Self, TransportError> {
        let mut s = Scheduler {
            sinks,
            runtime,
            cancel: CancellationToken::new(),
            ticks: TaskTracker::new(),
            probes: TaskTracker::new(),
            jobs: HashMap::new(),
            token_models: Arc::default(),
            targets: HashMap::new(),
        };
        s.apply(jobs)?;
        Ok(s)
    }

    /// Makes the running set equal `jobs`: unchanged jobs keep running on their schedule with
    /// their series; removed jobs stop and their series are deleted; new or changed jobs start.
    /// Probes already in flight finish and are recorded.
    ///
    /// # Errors
    /// [`TransportError`] when an HTTP client cannot be built; then nothing was changed.
    pub fn apply(&mut self, jobs: &[Job]) -> Result<Applied, TransportError> {
        #[allow(
            clippy::mutable_key_type,
            reason = "a regex's cache is its only interior mutability; JobKey's hash and equality never see it"
        )]
        let wanted: HashMap<JobKey, &Job> = jobs.iter().map(|j| (JobKey(j.clone()), j)).collect();
        // Build every new client first, so a failure leaves the running set as it was.
        let mut fresh = Vec::new();
        for (key, job) in &wanted {
            if !self.jobs.contains_key(key) {
                let spec = ProbeSpec::from_job(job);
                let prober = Prober::new(&spec)?;
                fresh.push((key.clone(), *job, spec, prober));
            }
        }
        let mut applied = Applied::default();
        let configured: std::collections::HashSet<(&str, &str, &str)> =
            jobs.iter().map(names).collect();
        self.jobs.retain(|key, job| {
            if wanted.contains_key(key) {
                return true;
            }
            job.cancel.cancel();
            applied.stopped += 1;
            job.sinks.stop(configured.contains(&names(&key.0)));
            false
        });
        applied.kept = self.jobs.len();
        self.gate_targets(jobs);
        for (key, job, spec, prober) in fresh {
            let sinks = JobSinks(self.sinks.iter().map(|s| s.start(job)).collect());
            if spec.target.tls.insecure_skip_verify {
                tracing::warn!(job = %job.name(), "insecure_skip_verify is set: server certificates are NOT verified");
            }
            if let Some(p) = spec.proxy() {
                tracing::info!(job = %job.name(), proxy = %p, "requests go through a proxy");
            }
            let context = Arc::new(JobContext {
                name: job.name(),
                spec: Arc::new(spec),
                prober: tokio::sync::Mutex::new(prober),
                sinks,
                target: self.targets[&TargetName::of(job)].clone(),
                token_models: self.token_models.clone(),
                running: AtomicBool::new(false),
                calibrated: AtomicBool::new(false),
                cancel: self.cancel.child_token(),
            });
            let runner = JobRunner {
                context: context.clone(),
                probes: self.probes.clone(),
                runtime: self.runtime.clone(),
            };
            let schedule = job.schedule.clone();
            self.ticks
                .spawn_on(async move { runner.run(schedule).await }, &self.runtime);
            self.jobs.insert(key, context);
            applied.started += 1;
        }
        Ok(applied)
    }

    /// One gate per target of `jobs` (a target whose `max_in_flight` or `cold_after` changed gets
    /// a new one, which takes over the old one's pause; the probes in flight keep the old), and a
    /// warning for each target whose jobs can overlap.
    fn gate_targets(&mut self, jobs: &[Job]) {
        let mut per_target: HashMap<&str, (usize, Option<u32>, Option<Duration>)> = HashMap::new();
        for j in jobs {
            let e = per_target.entry(j.target.name.as_str()).or_insert((
                0,
                j.target.max_in_flight,
                j.target.cold_after,
            ));
            e.0 += 1;
        }
        self.targets
            .retain(|name, _| per_target.contains_key(name.0.as_str()));
        for (name, (n, max, cold_after)) in per_target {
            let key = TargetName(name.to_owned());
            match self.targets.get(&key) {
                Some(g) if g.max == max && g.cold_after == cold_after => {}
                old => {
                    let pause = old.map(|g| g.pause.clone()).unwrap_or_default();
                    let gate = Arc::new(TargetGate::new(max, cold_after, pause));
                    self.targets.insert(key, gate);
                }
            }
            if n > 1 && max != Some(1) {
                tracing::warn!(
                    target = name,
                    jobs = n,
                    max_in_flight = max.map_or_else(|| "none".to_owned(), |m| m.to_string()),
                    "several jobs probe this target and their probes can overlap: a probe that waits behind another's prefill measures it (flagged concurrent_probe); max_in_flight: 1 on the target sends them one at a time"
                );
            }
        }
    }

    /// The running jobs, in the order of `order` (a config's jobs, equal to the running ones):
    /// a job kept across a reload is the running one, so what it holds (a dataset's
    /// conversations) is not kept twice.
    pub fn running_jobs(&self, order: &[Job]) -> Vec<Job> {
        order
            .iter()
            .map(|j| {
                self.jobs
                    .get_key_value(&JobKey(j.clone()))
                    .map_or_else(|| j.clone(), |(k, _)| k.0.clone())
            })
            .collect()
    }

    /// Number of running jobs.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// True when no job runs.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Stops scheduling, then waits up to `grace` for in-flight probes. Returns whether all
    /// in-flight probes finished in time.
    pub async fn shutdown(self, grace: Duration) -> bool {
        self.cancel.cancel();
        self.ticks.close();
        self.ticks.wait().await;
        self.probes.close();
        tokio::time::timeout(grace, self.probes.wait())
            .await
            .is_ok()
    }
}

/// What a job's ticks and probes share, made once as the job starts: a tick's probe takes one
/// `Arc` of it.
struct JobContext {
    /// `target/model/prompt`, for the log.
    name: String,
    spec: Arc<ProbeSpec>,
    /// The job's prober, taken by its one probe in flight (the `running` flag skips a tick
    /// before it would wait for the lock).
    prober: tokio::sync::Mutex<Prober>,
    /// The job's side of every sink.
    sinks: JobSinks,
    /// Its target's probes in flight, and the target's pause.
    target: Arc<TargetGate>,
    token_models: Arc<TokenModels>,
    /// A probe of the job is in flight.
    running: AtomicBool,
    /// The job's calibration was logged (once per job).
    calibrated: AtomicBool,
    /// Cancelled when the job stops.
    cancel: CancellationToken,
}

struct JobRunner {
    context: Arc<JobContext>,
    probes: TaskTracker,
    runtime: tokio::runtime::Handle,
}

impl JobRunner {
    async fn run(self, schedule: Schedule) {
        let (name, cancel) = (&self.context.name, &self.context.cancel);
        match schedule {
            Schedule::Interval(period) => {
                let start = tokio::time::Instant::now() + offset(name, period);
                let mut iv = tokio::time::interval_at(start, period);
                iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = iv.tick() => self.fire(),
                    }
                }
            }
            Schedule::Cron(cron) => loop {
                let now = chrono::Utc::now();
                let next = match cron.find_next_occurrence(&now, false) {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::error!(job = %name, error = %e, "cron schedule has no next run; job stopped");
                        return;
                    }
                };
                let wait = (next - now).to_std().unwrap_or(Duration::ZERO);
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(wait) => self.fire(),
                }
            },
        }
    }

    /// One tick: a probe (or a conversation's turns) on its own task, unless the target asked
    /// to wait or the job's previous probe still runs.
    fn fire(&self) {
        let job = &self.context;
        if job.target.paused(Instant::now()) {
            job.sinks.skipped(SkipReason::RateLimited);
            return;
        }
        if job.running.swap(true, Ordering::AcqRel) {
            job.sinks.skipped(SkipReason::Overlap);
            tracing::debug!(job = %job.name, "previous probe still running; tick skipped");
            return;
        }
        self.probes
            .spawn_on(self.context.clone().probe(), &self.runtime);
    }
}

impl JobContext {
    /// A probe, or for a conversation prompt its turns, one after the other with the think time
    /// between them (a stop between turns ends the conversation there).
    async fn probe(self: Arc<Self>) {
        // Cleared on drop, so even a panicking probe cannot block its job's later ticks.
        let _running = RunningGuard(&self.running);
        let cancel = &self.cancel;
        let mut prober = self.prober.lock().await;
        let spec = match self.token_models.get(&mut prober, &self.spec).await {
            Some(c) => {
                if c.error.is_some() {
                    // Never a prompt of a guessed length: this tick is skipped.
                    tracing::warn!(job = %self.name, requests = c.requests, seconds = c.seconds, calibration = %c.summary(), "calibration failed: no probe at a guessed length; tried again at the next tick");
                    self.sinks.skipped(SkipReason::Uncalibrated);
                    return;
                }
                if !self.calibrated.swap(true, Ordering::AcqRel) {
                    tracing::info!(job = %self.name, requests = c.requests, seconds = c.seconds, calibration = %c.summary(), "calibrated the input length");
                }
                let mut s = (*self.spec).clone();
                s.tokens = c.model();
                Arc::new(s)
            }
            None => self.spec.clone(),
        };
        let mut session = spec.session();
        // A session prompt's turns, told to the sinks as one session once it is over.
        let mut tally = crate::probe::session::SessionTally::default();
        loop {
            let (content, wait) = session.next(&spec);
            if !wait.is_zero() {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(wait) => {}
                }
            }
            // The target's limit: the wait is before `t0`, so it is in no TTFT; it is counted.
            let _permit = match &self.target.permits {
                Some(permits) => {
                    let from = Instant::now();
                    let permit = tokio::select! {
                        () = cancel.cancelled() => return,
                        p = permits.clone().acquire_owned() => p.ok(),
                    };
                    self.sinks.waited(from.elapsed());
                    permit
                }
                None => None,
            };
            let sent = Instant::now();
            let flight = self.target.begin(sent);
            let r = prober.run_in_flight(&spec, &content, Some(&flight)).await;
            drop(flight);
            let finished = SystemTime::now();
            if r.exporter_fault {
                // Our own fd exhaustion says nothing about the target: not a probe of it.
                self.sinks.internal_error(InternalReason::FdExhausted);
                tracing::error!(
                    job = %self.name,
                    reason = InternalReason::FdExhausted.as_str(),
                    message = r.error_detail.as_deref().unwrap_or(""),
                    "the exporter ran out of file descriptors: probe not sent, not counted against the target"
                );
                return;
            }
            self.sinks.record(&r, finished);
            if let Some(wait) = r.retry_after_s.filter(|w| *w > 0.0) {
                self.target.pause_for(Instant::now(), wait);
            }
            log_result(&self.name, &r);
            session.answered(&r);
            if content.session.is_some() {
                tally.add(&r, sent, Instant::now());
            }
            if let Some(end) = session.session_end() {
                self.sinks.session(&tally.finish(end));
            }
            if session.at_start() || cancel.is_cancelled() {
                return;
            }
        }
    }
}

struct RunningGuard<'a>(&'a AtomicBool);

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// One log line per probe: `warn` for a failure (job, error_type, status, message, and what
/// answered when the answer said: the served model, fingerprint, response id and request id
/// header, so a failure can be found in the provider's logs), `debug` with every measured value
/// for a success; and a `debug` line for each rate-limit value its answer stated that was left
/// out as not data (`tokenprobe_ratelimit_invalid_values_total` counts them); a `warn` line for a
/// success flagged `model_mismatch`, `usage_mismatch` or `answer_drift` (what answered, the usage
/// ratios, the hashes). What answered is cut and cleaned where it is read
/// ([`crate::protocol::identity_value`]); as a label it is bounded ([`crate::metrics`]).
pub fn log_result(job: &str, r: &ProbeResult) {
    for q in &r.rate_limits {
        for why in &q.left_out {
            tracing::debug!(
                job,
                kind = q.kind.as_str(),
                left_out = why.as_str(),
                "rate-limit value left out"
            );
        }
    }
    let st = r.server_timings.unwrap_or_default();
    let off = [Flag::ModelMismatch, Flag::UsageMismatch, Flag::AnswerDrift]
        .into_iter()
        .filter(|f| r.flags.contains(f))
        .map(Flag::as_str)
        .collect::<Vec<_>>();
    if r.success() && !off.is_empty() {
        let audit = r.usage_audit.as_ref();
        let ratio = |c: Option<crate::measure::answered::UsageCheck>| c.and_then(|c| c.ratio);
        tracing::warn!(
            job,
            outcome = "success",
            flags = off.join(","),
            served_model = r.served_model.as_deref(),
            system_fingerprint = r.system_fingerprint.as_deref(),
            output_usage_ratio = ratio(audit.and_then(|a| a.output)),
            input_usage_ratio = ratio(audit.and_then(|a| a.input)),
            drift_from = r.drift.as_ref().map(|d| d.from.hash.as_str()),
            drift_to = r.drift.as_ref().map(|d| d.to.hash.as_str()),
            response_id = r.response_id.as_deref(),
            request_id = r.server_request_id.as_deref(),
            "what answered is not what was asked for"
        );
    }
    match r.error_type {
        Some(e) => tracing::warn!(
            job,
            outcome = "error",
            error_type = e.as_str(),
            status = r.http_status,
            duration_s = r.failure_s,
            retry_after_s = r.retry_after_s,
            message = r.error_detail.as_deref().unwrap_or(""),
            served_model = r.served_model.as_deref(),
            system_fingerprint = r.system_fingerprint.as_deref(),
            response_id = r.response_id.as_deref(),
            request_id = r.server_request_id.as_deref(),
            "probe failed"
        ),
        None => tracing::debug!(
            job,
            outcome = "success",
            status = r.http_status,
            ttfb_s = r.ttfb_s,
            ttft_s = r.ttft_s,
            ttfo_s = r.ttfo_s,
            tpot_s = r.tpot_s,
            e2e_s = r.e2e_s,
            stream = r.stream,
            // Unknown (a whole answer without usage) is absent, not 0.
            output_tokens =
                (r.token_source != crate::measure::TokenSource::Unknown).then_some(r.output_tokens),
            token_events = r.token_events,
            input_tokens = r.input_tokens,
            cached_input_tokens = r.cached_input_tokens,
            reasoning_tokens = r.reasoning_tokens,
            served_model = r.served_model.as_deref(),
            requested_input_tokens = r.requested_input_tokens,
            requested_output_tokens = r.requested_output_tokens,
            turn = r.turn,
            server_prompt_ms = st.prompt_ms,
            server_predicted_ms = st.predicted_ms,
            server_predicted_n = st.predicted_n,
            server_predicted_per_token_ms = st.predicted_per_token_ms,
            "probe succeeded"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    #[test]
    fn a_probe_overlapped_when_another_was_in_flight_at_any_point() {
        let g = Arc::new(TargetGate::new(None, None, Arc::default()));
        let now = Instant::now();
        // Alone: not overlapped.
        let a = g.begin(now);
        assert!(!a.overlapped());
        drop(a);
        // b starts while a runs; a ends first: both overlapped (a saw b begin, b saw a).
        let a = g.begin(now);
        let b = g.begin(now);
        assert!(a.overlapped() && b.overlapped());
        drop(a);
        let c = g.begin(now);
        assert!(c.overlapped(), "b is still in flight");
        drop(b);
        drop(c);
        // After everything ended, a new probe is alone again.
        let d = g.begin(now);
        assert!(!d.overlapped());
        assert_eq!(g.in_flight.load(Ordering::SeqCst), 1);
        drop(d);
        assert_eq!(g.in_flight.load(Ordering::SeqCst), 0);
    }

    /// Issue 25 item 5: a probe is cold when its target's last probe ended `cold_after` or
    /// longer before it and none is in flight; the first probe after a start is not known to be
    /// cold; without `cold_after` none is.
    #[test]
    fn a_probe_after_the_targets_cold_after_is_cold() {
        let after = Duration::from_secs(60);
        let g = Arc::new(TargetGate::new(None, Some(after), Arc::default()));
        let t = Instant::now();
        let first = g.begin(t);
        assert!(
            !first.cold,
            "nothing known of the target before the first probe"
        );
        drop(first);
        let ended = g.last_end().expect("the end is kept");
        assert!(!g.begin(ended + Duration::from_secs(59)).cold);
        // That probe's end (now) is the target's last: a minute after it is cold.
        let ended = g.last_end().expect("the end is kept");
        let cold = g.begin(ended + after);
        assert!(cold.cold, "a minute idle");
        // Another probe beginning while that one runs is not cold: the target is busy.
        assert!(!g.begin(ended + after + after).cold);
        let never = Arc::new(TargetGate::new(None, None, Arc::default()));
        drop(never.begin(t));
        assert!(!never.begin(t + Duration::from_secs(86_400)).cold);
    }

    fn jobs_with_header(value: &str) -> Vec<Job> {
        let text = format!(
            "prompts:\n  - name: p\n    messages: [{{role: user, content: hi}}]\ntargets:\n  - name: a\n    base_url: http://127.0.0.1:9/v1\n    models: [m]\n    interval: 1h\n    headers: {{X-Key: {value}}}\n"
        );
        crate::config::Config::parse(&text).unwrap().jobs
    }

    /// Issue 10 item 5: a job's identity is its settings (`Eq` on the config types), not its
    /// `Debug` text: a changed header value, which `Debug` hides, restarts the job; an identical
    /// config keeps it running.
    #[tokio::test]
    async fn a_job_is_its_settings_not_its_debug_text() {
        let (h1, h2) = (jobs_with_header("h1"), jobs_with_header("h2"));
        assert_eq!(format!("{:?}", h1[0]), format!("{:?}", h2[0]));
        assert!(!format!("{:?}", h1[0]).contains("h1"));
        assert_ne!(h1[0], h2[0]);
        let metrics = Arc::new(Metrics::new(&crate::config::Buckets::default()));
        let mut s = Scheduler::start(
            &h1,
            vec![metrics.clone()],
            tokio::runtime::Handle::current(),
        )
        .unwrap();
        let kept = Applied {
            started: 0,
            stopped: 0,
            kept: 1,
        };
        assert_eq!(s.apply(&jobs_with_header("h1")).unwrap(), kept);
        let restarted = Applied {
            started: 1,
            stopped: 1,
            kept: 0,
        };
        assert_eq!(s.apply(&h2).unwrap(), restarted);
        assert_eq!(s.len(), 1);
        // Same labels: the series stayed (registered once, never removed).
        let text = metrics.encode_text().unwrap();
        assert_eq!(
            text.matches("tokenprobe_probes_total{target=\"a\",model=\"m\",prompt=\"p\"} 0")
                .count(),
            1,
            "{text}"
        );
        s.shutdown(Duration::ZERO).await;
    }

    /// What a sink was told, one line per call.
    #[derive(Default)]
    struct Told(Mutex<Vec<String>>);

    impl Told {
        fn push(&self, line: String) {
            self.0.lock().unwrap().push(line);
        }

        fn lines(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
    }

    /// A third exporter: one implementation of the sink, nothing else.
    struct Recording(Arc<Told>);

    struct RecordingJob(String, Arc<Told>);

    impl ResultSink for Recording {
        fn start(&self, job: &Job) -> Box<dyn JobSink> {
            self.0.push(format!("start {}", job.name()));
            Box::new(RecordingJob(job.name(), self.0.clone()))
        }
    }

    impl JobSink for RecordingJob {
        fn record(&self, r: &ProbeResult, _: SystemTime) {
            let e = r.error_type.map_or("success", |e| e.as_str());
            self.1.push(format!("record {} {e}", self.0));
        }

        fn stop(&self, replaced: bool) {
            self.1.push(format!("stop {} replaced={replaced}", self.0));
        }
    }

    fn jobs(model: &str, max_in_flight: u32, interval: &str) -> Vec<Job> {
        let text = format!(
            "prompts:\n  - name: p\n    messages: [{{role: user, content: hi}}]\ntargets:\n  - name: a\n    base_url: http://127.0.0.1:1/v1\n    proxy: none\n    models: [{model}]\n    interval: {interval}\n    max_in_flight: {max_in_flight}\n"
        );
        crate::config::Config::parse(&text).unwrap().jobs
    }

    /// Issue 41 item 4: every result of a job goes to each sink the scheduler was given (the
    /// next exporter is one implementation of [`ResultSink`]); a job a reload changes is stopped
    /// as replaced (its labels stay), one it removes as not.
    #[tokio::test]
    async fn each_result_goes_to_every_sink() {
        let told = [Arc::new(Told::default()), Arc::new(Told::default())];
        let sinks: Sinks = told
            .iter()
            .map(|t| Arc::new(Recording(t.clone())) as Arc<dyn ResultSink>)
            .collect();
        let mut s = Scheduler::start(
            &jobs("m", 1, "100ms"),
            sinks,
            tokio::runtime::Handle::current(),
        )
        .unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        while told.iter().any(|t| t.lines().len() < 2) && Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The same settings but the limit: the job is replaced under its labels.
        s.apply(&jobs("m", 2, "1h")).unwrap();
        s.apply(&jobs("other", 2, "1h")).unwrap();
        s.shutdown(Duration::from_secs(5)).await;
        for t in &told {
            let lines = t.lines();
            assert_eq!(
                lines[..2],
                ["start a/m/p", "record a/m/p connect"],
                "{lines:?}"
            );
            let rest: Vec<&String> = lines.iter().filter(|l| !l.starts_with("record")).collect();
            assert_eq!(
                rest,
                [
                    "start a/m/p",
                    "stop a/m/p replaced=true",
                    "start a/m/p",
                    "stop a/m/p replaced=false",
                    "start a/other/p",
                ],
                "{lines:?}"
            );
        }
    }

    /// The pause a target asked for lives with its gate, keyed by the target: a reload that
    /// changes the target's limit makes a new gate that keeps the pause; a target a reload
    /// removes takes its gate and pause with it.
    #[tokio::test]
    async fn a_targets_pause_lives_with_its_gate() {
        let mut s = Scheduler::start(
            &jobs("m", 1, "1h"),
            Vec::new(),
            tokio::runtime::Handle::current(),
        )
        .unwrap();
        let a = TargetName("a".into());
        let now = Instant::now();
        let first = s.targets[&a].clone();
        first.pause_for(now, 60.0);
        assert!(first.paused(now + Duration::from_secs(59)));
        assert!(!first.paused(now + Duration::from_secs(61)));
        first.pause_for(now, 60.0);
        s.apply(&jobs("m", 2, "1h")).unwrap();
        let second = s.targets[&a].clone();
        assert!(!Arc::ptr_eq(&first, &second) && second.max == Some(2));
        assert!(second.paused(now + Duration::from_secs(30)), "kept");
        let text = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - name: b\n    base_url: http://127.0.0.1:1/v1\n    models: [m]\n    interval: 1h\n";
        s.apply(&crate::config::Config::parse(text).unwrap().jobs)
            .unwrap();
        assert_eq!(
            s.targets.keys().collect::<Vec<_>>(),
            [&TargetName("b".into())]
        );
        s.shutdown(Duration::ZERO).await;
    }

    #[test]
    fn offsets_are_stable_bounded_and_spread() {
        let p = Duration::from_secs(30);
        assert_eq!(offset("a/b/c", p), offset("a/b/c", p));
        assert!(offset("a/b/c", p) < MAX_OFFSET);
        assert!(offset("x", Duration::from_secs(2)) < Duration::from_secs(2));
        let distinct: std::collections::HashSet<_> =
            (0..10).map(|i| offset(&format!("job{i}"), p)).collect();
        assert!(distinct.len() >= 8, "offsets should differ: {distinct:?}");
    }
}
