//! Runs jobs on their schedules: one tokio task per job, never overlapping itself.
//!
//! Intervals use `tokio::time::interval_at` with `MissedTickBehavior::Skip` and a per-job offset
//! (a hash of the job name spread over the first `min(interval, 10 s)`), so jobs do not fire
//! together. Cron schedules are evaluated in UTC with `croner` (no local-time DST jumps). A tick
//! that finds the job's previous probe still running is skipped and counted
//! (`tokenprobe_probes_skipped_total{reason="overlap"}`); a target that answered 429 or overloaded
//! with a `Retry-After` is not probed until that wait has passed (`reason="rate_limited"`).

use crate::config::{Job, Schedule};
use crate::measure::ProbeResult;
use crate::metrics::{InternalReason, JobInfo, JobLabels, JobSeries, Metrics, SkipReason};
use crate::probe::{ProbeSpec, Prober, TokenModels};
use crate::transport::TransportError;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

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

/// Per-target pause requested by `Retry-After`.
type Pauses = Arc<Mutex<HashMap<String, Instant>>>;

/// The probes of one target in flight, across its jobs: whether one ran while another was in
/// flight (flag `concurrent_probe`), whether the target had been idle for its `cold_after` (flag
/// `cold_start`), and the target's `max_in_flight`.
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
    last_end: std::sync::Mutex<Option<Instant>>,
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

impl InFlight {
    /// Whether another probe of the target was in flight at some point of this one so far.
    fn overlapped(&self) -> bool {
        self.others_in_flight || self.gate.begun.load(Ordering::SeqCst) > self.number
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gate.in_flight.fetch_sub(1, Ordering::SeqCst);
        *self.gate.last_end() = Some(Instant::now());
    }
}

impl TargetGate {
    fn new(max: Option<u32>, cold_after: Option<Duration>) -> Self {
        TargetGate {
            in_flight: AtomicUsize::new(0),
            begun: AtomicU64::new(0),
            max,
            permits: max.map(|n| Arc::new(tokio::sync::Semaphore::new(n as usize))),
            cold_after,
            last_end: std::sync::Mutex::new(None),
        }
    }

    fn last_end(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.last_end
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

/// Each target's gate, by name; kept across reloads while its `max_in_flight` stays.
type Gates = HashMap<String, Arc<TargetGate>>;

/// A job as the key of the running set: equal keys mean nothing about the job changed. Equality
/// is the config types' own (`Eq` on [`Job`], every setting compared, hidden values included),
/// never their `Debug` text, which hides secrets; the hash is of the job's name, unique per config.
#[derive(Debug, Clone, PartialEq, Eq)]
struct JobKey(Job);

impl Hash for JobKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        let j = &self.0;
        (&j.target.name, &j.model, &j.prompt.name).hash(h);
    }
}

struct Running {
    series: Arc<JobSeries>,
    cancel: CancellationToken,
    /// Its OTLP instruments' side, when `serve` exports OTLP.
    otlp: Option<crate::otlp::JobRecorder>,
}

/// The running jobs. Dropping it does not stop them; call [`Scheduler::shutdown`].
pub struct Scheduler {
    metrics: Arc<Metrics>,
    runtime: tokio::runtime::Handle,
    cancel: CancellationToken,
    ticks: TaskTracker,
    probes: TaskTracker,
    pauses: Pauses,
    jobs: HashMap<JobKey, Running>,
    /// Calibrations of the (target, model)s whose prompts are built to a token length.
    token_models: Arc<TokenModels>,
    gates: Gates,
    /// The OTLP instruments every job also records into (`OTEL_METRICS_EXPORTER=otlp`).
    otlp: Option<Arc<crate::otlp::Instruments>>,
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
    /// job, later ones after a reload too, runs there, whichever runtime calls [`Scheduler::apply`]).
    ///
    /// # Errors
    /// [`TransportError`] when an HTTP client cannot be built.
    pub fn start(
        jobs: &[Job],
        metrics: Arc<Metrics>,
        runtime: tokio::runtime::Handle,
        otlp: Option<Arc<crate::otlp::Instruments>>,
    ) -> Result<Self, TransportError> {
        let mut s = Scheduler {
            otlp,
            metrics,
            runtime,
            cancel: CancellationToken::new(),
            ticks: TaskTracker::new(),
            probes: TaskTracker::new(),
            pauses: Arc::default(),
            jobs: HashMap::new(),
            token_models: Arc::default(),
            gates: HashMap::new(),
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
        let new_labels: std::collections::HashSet<JobLabels> =
            jobs.iter().map(JobLabels::of).collect();
        self.jobs.retain(|key, r| {
            if wanted.contains_key(key) {
                return true;
            }
            r.cancel.cancel();
            applied.stopped += 1;
            if let Some(o) = &r.otlp {
                o.remove();
            }
            if !new_labels.contains(r.series.labels()) {
                self.metrics.remove_job(r.series.labels());
            }
            false
        });
        applied.kept = self.jobs.len();
        self.gate_targets(jobs);
        for (key, job, spec, prober) in fresh {
            let series = self.metrics.register_job(JobInfo::of(job), job.histograms);
            if spec.target.tls.insecure_skip_verify {
                tracing::warn!(job = %job.name(), "insecure_skip_verify is set: server certificates are NOT verified");
            }
            if let Some(p) = spec.proxy() {
                tracing::info!(job = %job.name(), proxy = %p, "requests go through a proxy");
            }
            let cancel = self.cancel.child_token();
            let otlp = self.otlp.as_ref().map(|i| {
                let attrs = crate::otlp::JobAttrs::new(
                    spec.target.api.as_str(),
                    &spec.target.base_url,
                    &job.model,
                    &job.target.name,
                    &job.prompt.name,
                    self.metrics.location(),
                );
                i.job(attrs, crate::otlp::exporter::now_ns())
            });
            let runner = JobRunner {
                otlp: otlp.clone(),
                series: series.clone(),
                name: job.name(),
                prober: Arc::new(tokio::sync::Mutex::new(prober)),
                spec: Arc::new(spec),
                metrics: self.metrics.clone(),
                running: Arc::new(AtomicBool::new(false)),
                pauses: self.pauses.clone(),
                probes: self.probes.clone(),
                runtime: self.runtime.clone(),
                token_models: self.token_models.clone(),
                calibrated: Arc::default(),
                gate: self.gates[&job.target.name].clone(),
            };
            let schedule = job.schedule.clone();
            let c = cancel.clone();
            self.ticks
                .spawn_on(async move { runner.run(schedule, c).await }, &self.runtime);
            self.jobs.insert(
                key,
                Running {
                    series,
                    cancel,
                    otlp,
                },
            );
            applied.started += 1;
        }
        Ok(applied)
    }

    /// One gate per target of `jobs` (a target whose `max_in_flight` changed gets a new one; the
    /// probes in flight keep the old), and a warning for each target whose jobs can overlap.
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
        self.gates.retain(|name, g| {
            per_target
                .get(name.as_str())
                .is_some_and(|(_, m, c)| *m == g.max && *c == g.cold_after)
        });
        for (name, (n, max, cold_after)) in per_target {
            self.gates
                .entry(name.to_owned())
                .or_insert_with(|| Arc::new(TargetGate::new(max, cold_after)));
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

struct JobRunner {
    /// The job's series, which its probes record into.
    series: Arc<JobSeries>,
    /// The job's OTLP instruments, which its probes also record into.
    otlp: Option<crate::otlp::JobRecorder>,
    name: String,
    spec: Arc<ProbeSpec>,
    /// The job's prober, taken by its one probe in flight (the `running` flag skips a tick
    /// before it would wait for the lock).
    prober: Arc<tokio::sync::Mutex<Prober>>,
    metrics: Arc<Metrics>,
    running: Arc<AtomicBool>,
    pauses: Pauses,
    probes: TaskTracker,
    runtime: tokio::runtime::Handle,
    token_models: Arc<TokenModels>,
    /// The job's calibration was logged (once per job).
    calibrated: Arc<AtomicBool>,
    /// Its target's probes in flight.
    gate: Arc<TargetGate>,
}

impl JobRunner {
    async fn run(self, schedule: Schedule, cancel: CancellationToken) {
        match schedule {
            Schedule::Interval(period) => {
                let start = tokio::time::Instant::now() + offset(&self.name, period);
                let mut iv = tokio::time::interval_at(start, period);
                iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = iv.tick() => self.fire(&cancel),
                    }
                }
            }
            Schedule::Cron(cron) => loop {
                let now = chrono::Utc::now();
                let next = match cron.find_next_occurrence(&now, false) {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::error!(job = %self.name, error = %e, "cron schedule has no next run; job stopped");
                        return;
                    }
                };
                let wait = (next - now).to_std().unwrap_or(Duration::ZERO);
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(wait) => self.fire(&cancel),
                }
            },
        }
    }

    fn paused(&self) -> bool {
        let Ok(mut p) = self.pauses.lock() else {
            return false;
        };
        let target = &self.series.labels().target;
        match p.get(target) {
            Some(until) if Instant::now() < *until => true,
            Some(_) => {
                p.remove(target);
                false
            }
            None => false,
        }
    }

    /// One tick: a probe, or for a conversation prompt its turns, one after the other with the
    /// think time between them (a stop between turns ends the conversation there).
    fn fire(&self, cancel: &CancellationToken) {
        if self.paused() {
            self.series.skipped(SkipReason::RateLimited);
            return;
        }
        if self.running.swap(true, Ordering::AcqRel) {
            self.series.skipped(SkipReason::Overlap);
            tracing::debug!(job = %self.name, "previous probe still running; tick skipped");
            return;
        }
        let (calibrated, gate) = (self.calibrated.clone(), self.gate.clone());
        let otlp = self.otlp.clone();
        let (prober, spec, metrics, series, running, pauses, name, models, cancel) = (
            self.prober.clone(),
            self.spec.clone(),
            self.metrics.clone(),
            self.series.clone(),
            self.running.clone(),
            self.pauses.clone(),
            self.name.clone(),
            self.token_models.clone(),
            cancel.clone(),
        );
        self.probes.spawn_on(async move {
            // Cleared on drop, so even a panicking probe cannot block its job's later ticks.
            let _running = RunningGuard(running);
            let mut prober = prober.lock().await;
            let spec = match models.get(&mut prober, &spec).await {
                Some(c) => {
                    if c.error.is_some() {
                        // Never a prompt of a guessed length: this tick is skipped.
                        tracing::warn!(job = %name, requests = c.requests, seconds = c.seconds, calibration = %c.summary(), "calibration failed: no probe at a guessed length; tried again at the next tick");
                        series.skipped(SkipReason::Uncalibrated);
                        return;
                    }
                    if !calibrated.swap(true, Ordering::AcqRel) {
                        tracing::info!(job = %name, requests = c.requests, seconds = c.seconds, calibration = %c.summary(), "calibrated the input length");
                    }
                    let mut s = (*spec).clone();
                    s.tokens = c.model();
                    Arc::new(s)
                }
                None => spec,
            };
            let mut session = spec.session();
            loop {
                let (content, wait) = session.next(&spec);
                if !wait.is_zero() {
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(wait) => {}
                    }
                }
                // The target's limit: the wait is before `t0`, so it is in no TTFT; it is counted.
                let _permit = match &gate.permits {
                    Some(permits) => {
                        let from = Instant::now();
                        let permit = tokio::select! {
                            () = cancel.cancelled() => return,
                            p = permits.clone().acquire_owned() => p.ok(),
                        };
                        series.waited(from.elapsed());
                        permit
                    }
                    None => None,
                };
                let flight = gate.begin(Instant::now());
                let mut r = prober.run_content(&spec, &content).await;
                if flight.overlapped() {
                    r.flags.insert(crate::outcome::Flag::ConcurrentProbe);
                }
                if flight.cold {
                    r.flags.insert(crate::outcome::Flag::ColdStart);
                }
                drop(flight);
                if r.exporter_fault {
                    // Our own fd exhaustion says nothing about the target: not a probe of it.
                    metrics.internal_error(InternalReason::FdExhausted);
                    tracing::error!(
                        job = %name,
                        reason = InternalReason::FdExhausted.as_str(),
                        message = r.error_detail.as_deref().unwrap_or(""),
                        "the exporter ran out of file descriptors: probe not sent, not counted against the target"
                    );
                    return;
                }
                series.record(&r, SystemTime::now());
                if let Some(o) = &otlp {
                    o.record(&r);
                }
                if let Some(wait) = r.retry_after_s.filter(|w| *w > 0.0)
                    && let Ok(mut p) = pauses.lock()
                {
                    let until = Instant::now() + Duration::from_secs_f64(wait.clamp(0.0, 3600.0));
                    p.insert(series.labels().target.clone(), until);
                }
                log_result(&name, &r);
                session.answered(&r);
                if session.at_start() || cancel.is_cancelled() {
                    return;
                }
            }
        }, &self.runtime);
    }
}

struct RunningGuard(Arc<AtomicBool>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// One log line per probe: `warn` for a failure (job, error_type, status, message, and what
/// answered when the answer said: the served model, fingerprint, response id and request id
/// header, so a failure can be found in the provider's logs), `debug` with every measured value
/// for a success; and a `debug` line for each rate-limit value its answer stated that was left
/// out as not data (`tokenprobe_ratelimit_invalid_values_total` counts them). What answered is
/// cut and cleaned where it is read ([`crate::protocol::identity_value`]), and is never a label.
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

    #[test]
    fn a_probe_overlapped_when_another_was_in_flight_at_any_point() {
        let g = Arc::new(TargetGate::new(None, None));
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
        let g = Arc::new(TargetGate::new(None, Some(after)));
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
        let never = Arc::new(TargetGate::new(None, None));
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
            metrics.clone(),
            tokio::runtime::Handle::current(),
            None,
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
