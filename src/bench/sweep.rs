//! A run's series swept: each model with each prompt, its connectivity check first, then its
//! levels one after another as the run's [`Schedule`] chooses them, each run by the
//! [`LevelStep`]. A stop signal ends the sweep with the finished levels kept.

use super::health::{self, Check, HealthPlan, StopCause};
use super::level::{Ended, LevelStep, Place, Stop};
use super::progress::Progress;
use super::report::{Interrupted, ModelReport};
use super::runner::{self, Runner};
use super::schedule::Schedule;
use super::server_view::{ServerPlan, ServerSide};
use super::shard::Shard;
use super::stats::{Lengths, LevelKey};
use super::{BenchError, BenchModel};
use crate::config::Target;
use crate::probe::{Calibration, ProbeSpec, RequestIds, TokenModels};
use crate::stop::StopSignals;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long after a stop signal the sweep may take to end (the running level's grace, then its
/// server view): past it, whatever still runs is dropped.
pub(super) const WRAP_UP: Duration = Duration::from_secs(10);

/// What a run sends, and to whom: every prompt (each a series per model; the first is the
/// run's own) to every model, in order.
#[derive(Debug, Clone)]
pub struct Sent {
    prompts: Vec<ProbeSpec>,
    models: Vec<BenchModel>,
}

impl Sent {
    /// `prompts` to `models`.
    ///
    /// # Errors
    /// [`BenchError::Usage`] without a prompt.
    pub fn new(prompts: Vec<ProbeSpec>, models: Vec<BenchModel>) -> Result<Sent, BenchError> {
        if prompts.is_empty() {
            return Err(BenchError::Usage("no prompt to send".into()));
        }
        Ok(Sent { prompts, models })
    }

    /// The run's prompt: the first.
    pub fn spec(&self) -> &ProbeSpec {
        &self.prompts[0]
    }

    /// Every prompt swept, in order.
    pub fn prompts(&self) -> &[ProbeSpec] {
        &self.prompts
    }

    /// The models, each with its target, in order.
    pub fn models(&self) -> &[BenchModel] {
        &self.models
    }

    /// The report's target: the first model's (the prompt's when there is none).
    pub fn head(&self) -> &Arc<Target> {
        self.models
            .first()
            .map_or(&self.spec().target, |m| &m.target)
    }

    /// Each model as the report names it: its name, with its target's when the models are not
    /// all at one target.
    pub fn names(&self) -> Vec<String> {
        let head = self.head();
        let mixed = self.models.iter().any(|m| &m.target != head);
        self.models
            .iter()
            .map(|m| if mixed { m.name() } else { m.model.clone() })
            .collect()
    }

    /// The series of the run: each model with each prompt, in order.
    pub fn series(&self) -> usize {
        self.models.len() * self.prompts.len()
    }

    /// Every request of the run carries its identity, `x-request-id: tp-<run>-<shard>-<n>` (one
    /// counter for every prompt of the run).
    pub(super) fn identify(&mut self, run_id: &str, shard: Shard) {
        let ids = RequestIds::new(&format!("tp-{run_id}-{}", shard.index));
        for p in &mut self.prompts {
            p.request_ids = Some(ids.clone());
        }
    }
}

/// What a sweep measured.
#[derive(Debug)]
pub(super) struct Swept {
    /// Each series' report, in order (those a stop signal left unrun are missing).
    pub(super) models: Vec<ModelReport>,
    /// Why it ended before its last level, when a stop signal came.
    pub(super) interrupted: Option<Interrupted>,
    /// The watch of the stop signals, still on.
    pub(super) stop_watch: tokio::task::JoinHandle<()>,
}

/// Every series of a run, sent and measured.
pub(super) struct Sweep {
    sent: Sent,
    schedule: Box<dyn Schedule>,
    step: LevelStep,
    health: HealthPlan,
    server: ServerPlan,
    progress: Progress,
    stop: Stop,
    /// The level running now (`model @ load`), for the report of a stopped run.
    running: Mutex<Option<String>>,
}

/// A series' name: the model's, with ` · prompt` in a prompt sweep.
fn series_name(name: &str, prompt: &ProbeSpec, sweep: bool) -> String {
    if sweep {
        format!("{name} · {}", prompt.prompt.name)
    } else {
        name.to_owned()
    }
}

impl Sweep {
    /// The series of `sent`, each on levels `schedule` chooses and `step` runs, with `health`'s
    /// check and early stop and `server`'s view; shown on `progress` (the run's start line
    /// already said), stopped by `stop`.
    pub(super) fn new(
        sent: Sent,
        schedule: Box<dyn Schedule>,
        step: LevelStep,
        (health, server): (HealthPlan, ServerPlan),
        (progress, stop): (Progress, Stop),
    ) -> Sweep {
        Sweep {
            sent,
            schedule,
            step,
            health,
            server,
            progress,
            stop,
            running: Mutex::new(None),
        }
    }

    /// Runs every series, until done or a stop signal; the server's view of the whole run
    /// after it.
    ///
    /// # Errors
    /// [`BenchError`] when the server's view cannot start, a prober cannot be built, a prompt
    /// cannot be calibrated or a level's sending broke.
    pub(super) async fn run(&self) -> Result<Swept, BenchError> {
        let mut server_side = ServerSide::start(&self.server)?;
        let watch =
            StopSignals::install().watch_naming(self.stop.token.clone(), self.stop.signal.clone());
        let stop_watch = tokio::spawn(watch);
        let mut models = Vec::new();
        let interrupted = self.all_until(&mut server_side, &mut models).await?;
        if interrupted.is_none() {
            server_side.finish(&mut models, &self.progress).await;
        }
        self.progress.finish();
        Ok(Swept {
            models,
            interrupted,
            stop_watch,
        })
    }

    /// [`Sweep::all`] until it is done or a stop signal cancels the run's [`Stop`]: the running
    /// level stops sending, waits for its requests in flight (at most the runner's grace, then
    /// cuts them) and is kept, partial, with those that finished; the sweep ends there.
    /// Whatever has not ended [`WRAP_UP`] after the signal is dropped, and the level then
    /// running (or one that sent nothing) is left out and named.
    async fn all_until(
        &self,
        server_side: &mut ServerSide,
        reports: &mut Vec<ModelReport>,
    ) -> Result<Option<Interrupted>, BenchError> {
        self.step
            .warn_few_requests(self.schedule.planned().unwrap_or_default());
        let stop = &self.stop.token;
        let done = {
            let all = self.all(server_side, reports);
            tokio::pin!(all);
            tokio::select! {
                biased;
                done = &mut all => Some(done),
                () = stop.cancelled() => tokio::time::timeout(WRAP_UP, &mut all).await.ok(),
            }
        };
        if let Some(done) = done {
            done?;
        }
        if !stop.is_cancelled() {
            return Ok(None);
        }
        Ok(Some(Interrupted {
            signal: self.stop.name().to_owned(),
            level_left_out: self.running.lock().ok().and_then(|l| l.clone()),
        }))
    }

    /// The connectivity check of every series (each model with each prompt, in order), before
    /// any level: one unmeasured request each through a prober of its target, its outcome said
    /// on stderr. `None` each with `--no-check`; fewer than the series when a stop signal came.
    ///
    /// # Errors
    /// [`BenchError::Client`] when a prober cannot be built.
    async fn checks(&self, names: &[String]) -> Result<Vec<Option<Check>>, BenchError> {
        let (models, prompts) = (self.sent.models(), self.sent.prompts());
        let n = self.sent.series();
        if !self.health.check {
            return Ok(vec![None; n]);
        }
        self.progress.println(
            "tokenprobe bench: connectivity check, one unmeasured request per model before any level (--no-check skips it)",
        );
        let mut out = Vec::with_capacity(n);
        for (bm, name) in models.iter().zip(names) {
            for p in prompts {
                let spec = bm.spec(p);
                let mut prober = crate::probe::Prober::new(&spec)?;
                let t = std::time::Instant::now();
                let content = spec.workload.check_content(self.step.seed() ^ 0xC4EC_u64);
                let r = tokio::select! {
                    r = prober.run_content(&spec, &content) => r,
                    () = self.stop.token.cancelled() => return Ok(out),
                };
                let c = Check::of(&r, t.elapsed().as_secs_f64());
                let shown = series_name(name, p, prompts.len() > 1);
                let verdict = if c.ok { "" } else { "failed: " };
                self.progress.println(&format!(
                    "  {shown}: connectivity check {verdict}{}",
                    c.line()
                ));
                out.push(Some(c));
            }
        }
        Ok(out)
    }

    /// Every series of the run: each model (as the report names it) with each prompt, in
    /// order; a runner per target (its own client settings), calibrated per (target, model).
    /// The connectivity checks come first: when one failed (without `--keep-going`) no series
    /// is loaded; a series whose check failed never is.
    async fn all(
        &self,
        server_side: &mut ServerSide,
        reports: &mut Vec<ModelReport>,
    ) -> Result<(), BenchError> {
        let (models, prompts) = (self.sent.models(), self.sent.prompts());
        let names = self.sent.names();
        let sweep = prompts.len() > 1;
        let checks = self.checks(&names).await?;
        if self.stop.token.is_cancelled() {
            return Ok(());
        }
        let failed = |c: &Option<Check>| c.as_ref().is_some_and(|c| !c.ok);
        let load = self.health.keep_going || !checks.iter().any(failed);
        let token_models = TokenModels::default();
        let mut done_units = 0;
        let mut runner: Option<(Runner, Arc<Target>)> = None;
        let mut checks = checks.into_iter();
        for (model_index, (bm, name)) in models.iter().zip(&names).enumerate() {
            server_side.select(model_index, &bm.model);
            for prompt_spec in prompts {
                let check = checks.next().flatten();
                let head = ModelReport {
                    prompt: sweep.then(|| prompt_spec.prompt.name.clone()),
                    check: check.clone(),
                    ..series_report(bm)
                };
                if !load || failed(&check) {
                    reports.push(head);
                    continue;
                }
                let runner = match &mut runner {
                    Some((r, t)) if *t == bm.target => r,
                    slot => {
                        let r = self.step.runner(bm.spec(self.sent.spec()))?;
                        &mut slot.insert((r, bm.target.clone())).0
                    }
                };
                runner.set_prompt(&bm.spec(prompt_spec));
                runner.set_model(&bm.model);
                let name = series_name(name, prompt_spec, sweep);
                let calibration = self
                    .calibrate(runner, &token_models, reports, &name)
                    .await?;
                let series = reports.len();
                reports.push(ModelReport {
                    calibration,
                    ..head
                });
                // The series' early stop: the server counts as reached once its check passed.
                let reached = check.as_ref().is_some_and(|c| c.ok);
                runner.halt = runner::Halt {
                    stop: self.stop.token.child_token(),
                    streak: Some(Arc::new(Mutex::new(health::Streak::new(
                        self.health.stop_after,
                        reached,
                    )))),
                };
                done_units = self
                    .series(
                        runner,
                        server_side,
                        (series, name),
                        done_units,
                        &mut reports[series],
                    )
                    .await?;
                if self.stop.token.is_cancelled() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// The runner's (target, model) calibrated (once per run; `None` when the prompt needs
    /// none), said on stderr where it was made, not again for the model's later prompts.
    async fn calibrate(
        &self,
        runner: &mut Runner,
        models: &TokenModels,
        earlier: &[ModelReport],
        name: &str,
    ) -> Result<Option<Calibration>, BenchError> {
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
            self.progress
                .println(&format!("  {name}: calibrated with {}", c.summary()));
        }
        Ok(Some(c))
    }

    /// One series (`mi` of the run, shown as `name`): level after level as its schedule says,
    /// through `runner`, which already sends to its model, each added to `series` as it ends
    /// (so a stopped run keeps what it finished). The progress units done after it, from
    /// `done_units` before it.
    async fn series(
        &self,
        runner: &mut Runner,
        server_side: &mut ServerSide,
        (mi, name): (usize, String),
        mut done_units: u64,
        series: &mut ModelReport,
    ) -> Result<u64, BenchError> {
        let mut schedule = self.schedule.fresh();
        let planned = self.schedule.planned().map_or(0, <[LevelKey]>::len);
        let mut lengths = Lengths::default();
        for index in 0.. {
            let stopped_early = series.stopped_early.is_some();
            let next = schedule.next(series);
            if let Some(why) = series.stopped_early.as_ref().filter(|_| !stopped_early) {
                self.progress
                    .println(&format!("  {}: {why}", series.name()));
            }
            let Some(level) = next else {
                if let Some(c) = &series.capacity {
                    let load = match c.load() {
                        None => "none".to_owned(),
                        Some(l) if c.sessions => super::session::load_words(l),
                        Some(l) => l.to_string(),
                    };
                    self.progress.println(&format!(
                        "  {name}: capacity {load} ({}; {}, {} requests, {:.1} s)",
                        c.stopped,
                        crate::units::count(c.levels_tried.len(), "level"),
                        c.requests,
                        c.seconds
                    ));
                }
                break;
            };
            let key = level.key;
            let level_at = Place {
                series: mi,
                index,
                slot: mi * planned + index,
                label: format!("{name} @ {}", key.label()),
                done_units,
            };
            if let Ok(mut running) = self.running.lock() {
                *running = Some(level_at.label.clone());
            }
            let ended = self
                .step
                .run(runner, server_side, level, &level_at, series, &mut lengths)
                .await?;
            done_units += self.step.units();
            if ended == Ended::LeftOut {
                break;
            }
            if let Ok(mut running) = self.running.lock() {
                *running = None;
            }
            match ended {
                Ended::Stopped(StopCause::Errors, reason) => {
                    let why = load_stopped(&key, schedule.left_out(), &reason);
                    self.progress.println(&format!("  {name}: {why}"));
                    series.stopped_early = Some(why);
                    break;
                }
                Ended::Stopped(StopCause::Signal, _) => break,
                _ => {}
            }
        }
        Ok(done_units)
    }
}

/// The report of one series before its levels: the model, its target, its price.
fn series_report(bm: &BenchModel) -> ModelReport {
    ModelReport {
        prompt: None,
        calibration: None,
        model: bm.model.clone(),
        target: Some(bm.target.name.clone()),
        price: bm.target.price_of(&bm.model),
        gpus: None,
        gpu_hour_price: None,
        input_tokens_mean: None,
        output_tokens_mean: None,
        levels: Vec::new(),
        knee: None,
        capacity: None,
        stopped_early: None,
        check: None,
    }
}

/// Why a series' load stopped at `key` by its errors' `reason`, and the planned levels it
/// leaves out (`left`).
fn load_stopped(key: &LevelKey, left: &[LevelKey], reason: &str) -> String {
    let later = if left.is_empty() {
        "no later level is run".to_owned()
    } else {
        let left: Vec<String> = left.iter().map(LevelKey::label).collect();
        format!("its later levels ({}) are not run", left.join(", "))
    };
    format!("load stopped at {}: {reason}; {later}", key.label())
}
