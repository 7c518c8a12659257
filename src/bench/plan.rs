//! A validated bench run, [`BenchPlan`]: what is sent to whom ([`Sent`]), which levels each
//! series runs ([`Schedule`]), how each level is sent ([`LoadPlan`]), how the run is judged
//! ([`Judging`]), this process's part of the run ([`RunPart`]) and what watches it ([`Watch`]).
//! Everything that can be wrong with an invocation was checked when these were made
//! ([`crate::cli::bench`]), before any request is sent. The plan keeps its parts to itself: it
//! hands out what is read of it, and [`run`] has it say the run's start, read what serves the run
//! ([`Provenance`]), build the run's sweep and the report that sweep fills, run the one and
//! finish the other.

pub use super::level::LoadPlan;
pub use super::sweep::Sent;

use super::criteria::Criteria;
use super::findings::Thresholds;
use super::health::HealthPlan;
use super::level::{LevelStep, Stop};
use super::progress::{Progress, ProgressMode};
use super::provenance::{Provenance, ServedTally};
use super::report::{Interrupted, LoadMode, ModelReport, Report, RunInfo};
use super::runner::{Amount, Arrival};
use super::schedule::Schedule;
use super::server_cache::BeforeLevel;
use super::server_view::ServerPlan;
use super::shard::{Shard, StartPlan};
use super::sweep::Sweep;
use super::{BenchError, BenchModel, LevelSink, baseline};
use crate::config::Target;
use crate::probe::ProbeSpec;
use std::sync::Arc;

/// How a run is judged once its levels are measured.
#[derive(Debug, Clone)]
pub struct Judging {
    /// Limits, weights, SLOs, knee rule, tolerances, selection level.
    pub criteria: Criteria,
    /// Models are judged (several models, limits, weights or a bench file).
    pub judged: bool,
    /// The baseline report and its name (its file, or its run in the run store).
    pub baseline: Option<(Report, String)>,
}

/// This process's part of a run, and how the run is known.
#[derive(Debug, Clone)]
pub struct RunPart {
    /// This process's shard of the run (0/1 when it is the whole run).
    pub shard: Shard,
    /// `--start-at`: the shared start instants of the levels.
    pub start: Option<StartPlan>,
    /// The run id (every shard of a run computes the same).
    pub run_id: String,
    /// The command line, as given (recorded in the report with its secrets redacted).
    pub command: Vec<String>,
}

/// What watches a run beside its requests: the server, the run's health, the person at the
/// terminal.
#[derive(Debug, Clone)]
pub struct Watch {
    /// Server metrics, the Prometheus source and the finding thresholds.
    pub server: ServerPlan,
    /// The connectivity check and the early stop (`--no-check`, `--keep-going`,
    /// `--stop-after-errors`).
    pub health: HealthPlan,
    /// How progress inside a level is shown: a bar on a terminal, else a line every few seconds.
    pub progress: ProgressMode,
}

/// A validated bench run.
#[derive(Debug)]
pub struct BenchPlan {
    sent: Sent,
    schedule: Box<dyn Schedule>,
    load: LoadPlan,
    judging: Judging,
    part: RunPart,
    watch: Watch,
    /// Where each finished level also goes (`--remote-write`, OTLP).
    sinks: Vec<Arc<dyn LevelSink>>,
}

impl BenchPlan {
    /// The run that sends `sent` on the levels `schedule` chooses, each as `load` says, judged
    /// as `judging` says; `part` of the run (whose identity every request carries), watched as
    /// `watch` says.
    pub fn new(
        mut sent: Sent,
        schedule: Box<dyn Schedule>,
        load: LoadPlan,
        judging: Judging,
        part: RunPart,
        watch: Watch,
    ) -> BenchPlan {
        sent.identify(&part.run_id, part.shard);
        BenchPlan {
            sent,
            schedule,
            load,
            judging,
            part,
            watch,
            sinks: Vec::new(),
        }
    }

    /// Each finished level also goes to `sink` (it must not wait).
    pub fn add_sink(&mut self, sink: Arc<dyn LevelSink>) {
        self.sinks.push(sink);
    }

    /// The run is compared with `baseline` (its report, and its name).
    pub fn set_baseline(&mut self, baseline: Option<(Report, String)>) {
        self.judging.baseline = baseline;
    }

    /// What is sent to whom.
    pub fn sent(&self) -> &Sent {
        &self.sent
    }

    /// How each series chooses its levels.
    pub fn schedule(&self) -> &dyn Schedule {
        self.schedule.as_ref()
    }

    /// How each level is sent.
    pub fn load(&self) -> &LoadPlan {
        &self.load
    }

    /// How the run is judged.
    pub fn judging(&self) -> &Judging {
        &self.judging
    }

    /// The run's criteria.
    pub fn criteria(&self) -> &Criteria {
        &self.judging.criteria
    }

    /// This process's part of the run.
    pub fn part(&self) -> &RunPart {
        &self.part
    }

    /// What watches the run.
    pub fn watch(&self) -> &Watch {
        &self.watch
    }

    /// Open loop (arrival rates) rather than closed loop (workers).
    pub fn open(&self) -> bool {
        self.schedule.open()
    }

    /// What a baseline must share with this plan's run: its workload as its report will record
    /// it (by the same code the report is written with), its models, and its levels (not known
    /// before a capacity search runs).
    pub fn fit(&self) -> baseline::Fit {
        let open = self.open();
        let mode = load_mode(open, &self.load, self.load.amount);
        baseline::Fit {
            models: self
                .sent
                .models()
                .iter()
                .map(|m| (m.target.name.clone(), m.model.clone()))
                .collect(),
            workload: baseline::WorkloadKey {
                api: super::report::Apis::one(self.sent.head().api),
                prompt: self.prompt_names().join(","),
                workload: Some(baseline::describe_all(self.sent.prompts())),
                max_tokens: self.sent.spec().max_tokens,
                load: baseline::load_words(&with_trace(mode, self.sent.spec())),
            },
            open_loop: open,
            levels: self.schedule.planned().map(<[_]>::to_vec),
        }
    }

    /// What the progress counts for the whole run: each level's requests (or seconds) for this
    /// process, times the most levels each series runs, times the series.
    pub fn progress_units(&self) -> u64 {
        let levels = self.schedule.most_levels() * self.sent.series();
        self.load
            .units(self.part.shard)
            .saturating_mul(levels as u64)
    }

    fn prompt_names(&self) -> Vec<&str> {
        self.sent
            .prompts()
            .iter()
            .map(|p| p.prompt.name.as_str())
            .collect()
    }

    /// The run's progress display, counting the most levels each series may run.
    fn progress(&self) -> Progress {
        Progress::new(self.progress_units(), self.watch.progress)
    }

    /// What serves the run and what sends it, read before its first level (within
    /// [`super::provenance::collect::TIMEOUT`]).
    async fn provenance(&self) -> Provenance {
        let redactor = command_redactor(self.sent.spec(), self.sent.models()).await;
        super::provenance::collect::collect(
            self.sent.models(),
            &self.watch.server.endpoints,
            &redactor,
        )
        .await
    }

    /// The run this plan makes, shown on `progress`, its servers as `provenance` records them:
    /// its sweep (every series, on the levels the schedule chooses, each sent by one level
    /// step), and the report the sweep's series fill, judged.
    fn build(mut self, progress: Progress, provenance: Provenance) -> (Sweep, ReportDraft) {
        let open = self.open();
        let stop = Stop::default();
        // What answered, level by level.
        let served = ServedTally::sink(&mut self.sinks);
        let cache = BeforeLevel::new(self.load.cache, self.part.shard.index, Some(&provenance));
        let draft = self.draft(open, provenance, served);
        let step = LevelStep::new(
            self.load,
            (self.part.shard, self.part.start),
            (self.judging.criteria.clone(), self.schedule.extension()),
            cache,
            self.sinks,
            (progress.clone(), stop.clone()),
        );
        let sweep = Sweep::new(
            self.sent,
            self.schedule,
            step,
            (self.watch.health, self.watch.server),
            (progress, stop),
        );
        (sweep, draft)
    }

    /// What the run says first: its targets, prompts, models, levels and load, and for a shard
    /// which part of which run it is.
    fn start_line(&self) -> String {
        let open = self.open();
        let (targets, _, urls) = targets_of(self.sent.head(), self.sent.models());
        let recorded = self.load.sessions.is_some_and(|m| m.recorded);
        let (load, part) = run_words(
            self.sent.spec(),
            (open, recorded),
            self.load.arrival,
            self.part.shard,
            &self.part.run_id,
        );
        format!(
            "tokenprobe bench: target {targets} ({urls}), prompt {}, models {}, {} ({load}){part}",
            self.prompt_names().join(", "),
            self.sent.names().join(", "),
            self.schedule.words(),
        )
    }

    /// The report as far as the plan knows it before a level is run: what served the run as
    /// `provenance` records it, completed by what `served` saw answer.
    fn draft(&self, open: bool, provenance: Provenance, served: Arc<ServedTally>) -> ReportDraft {
        let (spec, head) = (self.sent.spec(), self.sent.head());
        let (target_names, base_urls, _) = targets_of(head, self.sent.models());
        let criteria = &self.judging.criteria;
        let share = self.load.share(self.part.shard);
        let report = Report {
            tool: "tokenprobe".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            command: None,
            target: target_names,
            base_url: base_urls,
            api: super::report::Apis::one(head.api),
            prompt: self.prompt_names().join(","),
            max_tokens: spec.max_tokens,
            workload: Some(baseline::describe_all(self.sent.prompts())),
            mode: with_trace(
                LoadMode {
                    ramp_s: (!open && !self.load.ramp.is_zero())
                        .then_some(self.load.ramp.as_secs_f64()),
                    prewarm: self.load.prewarm,
                    ..load_mode(open, &self.load, share)
                },
                spec,
            ),
            slo: criteria.slos.iter().map(ToString::to_string).collect(),
            knee_rule: criteria.knee,
            models: Vec::new(),
            selection: None,
            also_at: None,
            slo_capacity: None,
            comparison: None,
            run: Some(RunInfo {
                id: self.part.run_id.clone(),
                shard: (self.part.shard.count > 1).then(|| self.part.shard.to_string()),
                start_at: self.part.start.map(|p| p.start_at.to_rfc3339()),
                merged_from: Vec::new(),
            }),
            criteria: Some(criteria.record()),
            findings: Vec::new(),
            interrupted: None,
            combined_from: Vec::new(),
            frontier: None,
            provenance: None,
        };
        ReportDraft {
            report,
            command: self.part.command.clone(),
            sent: self.sent.clone(),
            judging: self.judging.clone(),
            thresholds: self.watch.server.thresholds,
            provenance,
            served,
        }
    }
}

/// Runs `plan`: every series on the levels its schedule chooses, then the judged report
/// ([`crate::render`] writes it). A shard (`--shard i/N`) sends its share of every level; with
/// `--start-at` every level starts at its shared instant (see [`super::shard`]).
///
/// # Errors
/// [`BenchError`] when the prober cannot be built, a prompt cannot be calibrated or a level's
/// sending broke.
pub async fn run(plan: BenchPlan) -> Result<Finished, BenchError> {
    let progress = plan.progress();
    progress.println(&plan.start_line());
    let provenance = plan.provenance().await;
    let (sweep, draft) = plan.build(progress, provenance);
    let swept = sweep.run().await?;
    let report = draft.finish(swept.models, swept.interrupted).await;
    Ok(Finished {
        report,
        stop_watch: swept.stop_watch,
    })
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

/// A run's report before its series are measured: what the plan says of the run (its targets,
/// workload, load and criteria), the command line to record, and how the run is judged.
#[derive(Debug)]
struct ReportDraft {
    report: Report,
    command: Vec<String>,
    /// What the command line is shown without: every secret of what was sent to whom.
    sent: Sent,
    judging: Judging,
    thresholds: Thresholds,
    /// What served the run, read before its first level.
    provenance: Provenance,
    /// The served names and fingerprints its levels carried.
    served: Arc<ServedTally>,
}

impl ReportDraft {
    /// The run's judged report, with its series' `models` (what served each beside it) and, when
    /// a stop signal came, what it `interrupted`.
    async fn finish(
        self,
        mut models: Vec<ModelReport>,
        interrupted: Option<Interrupted>,
    ) -> Report {
        let redactor = command_redactor(self.sent.spec(), self.sent.models()).await;
        let mut provenance = self.provenance;
        served_by(
            &mut models,
            self.sent.models(),
            &mut provenance,
            &self.served,
        );
        let mut report = Report {
            command: Some(crate::redact::command_line(&self.command, &redactor)),
            models,
            interrupted,
            provenance: Some(provenance),
            ..self.report
        };
        let j = &self.judging;
        super::judge(
            &mut report,
            &j.criteria,
            j.judged,
            j.baseline.as_ref(),
            &self.thresholds,
        );
        report
    }
}

/// What served each series, after the sweep: the served names and fingerprints its levels
/// carried into `provenance`, and each series' GPU count (its target's, as the provenance
/// records it: declared, else DCGM's) and GPU price.
fn served_by(
    reports: &mut [ModelReport],
    models: &[BenchModel],
    provenance: &mut Provenance,
    served: &ServedTally,
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

/// The start line's words for the load (closed loop, or open loop and its arrivals) and, for a
/// shard, which part of which run it is.
fn run_words(
    spec: &ProbeSpec,
    (open, recorded): (bool, bool),
    arrival: Arrival,
    shard: Shard,
    run_id: &str,
) -> (String, String) {
    let recorded = match &spec.workload {
        crate::workload::Workload::Session(crate::workload::Sessions::Replay(r)) if recorded => {
            Some(r)
        }
        _ => None,
    };
    let load = if let Some(r) = recorded {
        format!(
            "open loop, a session trace's {} sessions at their recorded starts",
            r.len()
        )
    } else if let crate::workload::Workload::Trace(t) = &spec.workload {
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

/// What the command line is shown without: every secret of every target the run sent to.
async fn command_redactor(spec: &ProbeSpec, models: &[BenchModel]) -> crate::redact::Redactor {
    let mut redactor = crate::redact::Redactor::new();
    for s in std::iter::once(spec.clone()).chain(models.iter().map(|m| m.spec(spec))) {
        let key = s.target.load_key().await.ok().flatten();
        redactor.merge(&s.redactor(key.as_ref()));
    }
    redactor
}

/// A trace prompt's mode: its arrivals are the trace's (no seed), and what was replayed; a
/// session trace's at its recorded starts: `recorded` arrivals.
fn with_trace(mode: LoadMode, spec: &ProbeSpec) -> LoadMode {
    if mode.sessions.is_some_and(|m| m.recorded) {
        return LoadMode {
            arrival: Some("recorded".into()),
            seed: None,
            ..mode
        };
    }
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

/// How the load was generated, as the report states it, each level sending `amount`.
fn load_mode(open: bool, load: &LoadPlan, amount: Amount) -> LoadMode {
    let arrival = load.arrival;
    LoadMode {
        kind: super::report::LoadKind::of(open),
        arrival: open.then(|| arrival.as_str().to_owned()),
        seed: (open && arrival.random()).then_some(load.seed),
        burstiness: arrival.burstiness().filter(|_| open),
        requests_per_level: match amount {
            Amount::Requests(n) => Some(n),
            Amount::Duration(_) | Amount::Sessions(_) => None,
        },
        duration_per_level_s: match amount {
            Amount::Duration(d) => Some(d.as_secs_f64()),
            Amount::Requests(_) | Amount::Sessions(_) => None,
        },
        sessions: load.sessions.map(|m| crate::bench::session::SessionMode {
            per_level: match amount {
                Amount::Sessions(n) => Some(n),
                _ => None,
            },
            ..m
        }),
        warmup: load.warmup,
        warmup_s: load.warmup_duration.map(|d| d.as_secs_f64()),
        ramp_up: load.load_ramp.map(|r| {
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
