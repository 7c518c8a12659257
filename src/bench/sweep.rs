//! A sweep's levels, sent and measured: each level's share for this shard from its shared start
//! instant, closed or open loop through the [`Runner`], its warm-up, the server's view around
//! it, the cross-check, and its statistics folded ([`fold_level`]); a stop signal ends the sweep
//! with the finished levels kept.

use super::*;

/// How each level is sent and measured: this shard's share of it, from its shared start instant,
/// folded into its statistics (with the cross-check, when asked for).
pub(super) struct Sender {
    /// The step before each level's measured requests: the server cache reset, when asked for.
    pub(super) before_level: server_cache::BeforeLevel,
    /// Where each finished level also goes (`--remote-write`, OTLP).
    pub(super) sinks: Vec<std::sync::Arc<dyn super::LevelSink>>,
    pub(super) shard: shard::Shard,
    pub(super) start: Option<shard::StartPlan>,
    /// This shard's share of a level (open loop; a duration).
    pub(super) amount: Amount,
    /// The whole run's amount per level (a closed loop's share follows the shard's workers).
    pub(super) total: Amount,
    pub(super) arrival: Arrival,
    pub(super) seed: u64,
    pub(super) warmup: u64,
    pub(super) ramp: std::time::Duration,
    pub(super) prewarm: bool,
    pub(super) levels: Vec<LevelKey>,
    /// `--find-capacity`: the levels come from the search, not from `levels`.
    pub(super) search: Option<capacity::CapacityPlan>,
    /// `--repeat N`: each level is run N times, each run's figures kept.
    pub(super) repeat: u32,
    /// The knee's added levels (none in sharded runs and with `--start-at`, where every shard
    /// runs the same levels), canaries, `--until-clear`, `--warmup-duration`, `--ramp-up`.
    pub(super) shape: LevelShape,
    pub(super) per_level_units: u64,
    pub(super) criteria: Criteria,
    pub(super) cross_check: Option<crosscheck::CrossCheckSpec>,
    pub(super) samples: bool,
    pub(super) progress: Progress,
    /// The level running now (`model @ load`), for the report of a stopped run.
    pub(super) running: std::sync::Mutex<Option<String>>,
    /// The connectivity check and the early stop.
    pub(super) health: health::HealthPlan,
    /// The run's stop signal: each series' sending stops on a child of it.
    pub(super) stop: CancellationToken,
    /// The stop signal's name, once one came.
    pub(super) signal: Arc<OnceLock<&'static str>>,
}

/// How long after a stop signal the sweep may take to end (the running level's grace, then its
/// server view): past it, whatever still runs is dropped.
pub(super) const WRAP_UP: std::time::Duration = std::time::Duration::from_secs(10);

/// A series' name: the model's, with ` · prompt` in a prompt sweep.
fn series_name(name: &str, prompt: &ProbeSpec, sweep: bool) -> String {
    if sweep {
        format!("{name} · {}", prompt.prompt.name)
    } else {
        name.to_owned()
    }
}

impl Sender {
    /// [`Sender::all`] until it is done or a stop signal cancels [`Sender::stop`] (named in
    /// [`Sender::signal`]): the running level stops sending, waits for its requests in flight (at most
    /// the runner's grace, then cuts them) and is kept, partial, with those that finished; the
    /// sweep ends there. Whatever has not ended [`WRAP_UP`] after the signal is dropped, and the
    /// level then running (or one that sent nothing) is left out and named.
    pub(super) async fn all_until(
        &self,
        (spec, models, names, prompts): (&ProbeSpec, &[BenchModel], &[String], &[ProbeSpec]),
        server_side: &mut server_view::ServerSide,
        reports: &mut Vec<ModelReport>,
    ) -> Result<Option<report::Interrupted>, BenchError> {
        if let Some(w) = fewer_requests_than_workers(self.total, &self.levels) {
            self.progress.println(&w);
        }
        let stop = &self.stop;
        let done = {
            let all = self.all(spec, models, names, prompts, server_side, reports);
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
        Ok(Some(report::Interrupted {
            signal: self
                .signal
                .get()
                .copied()
                .unwrap_or("a stop signal")
                .to_owned(),
            level_left_out: self.running.lock().ok().and_then(|l| l.clone()),
        }))
    }

    /// The connectivity check of every series (each model with each prompt, in order), before
    /// any level: one unmeasured request each through a prober of its target, its outcome said
    /// on stderr. `None` each with `--no-check`; fewer than the series when a stop signal came.
    ///
    /// # Errors
    /// [`BenchError::Client`] when a prober cannot be built.
    async fn checks(
        &self,
        models: &[BenchModel],
        names: &[String],
        prompts: &[ProbeSpec],
    ) -> Result<Vec<Option<health::Check>>, BenchError> {
        let n = models.len() * prompts.len();
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
                let content = spec.workload.check_content(self.seed ^ 0xC4EC_u64);
                let r = tokio::select! {
                    r = prober.run_content(&spec, &content) => r,
                    () = self.stop.cancelled() => return Ok(out),
                };
                let c = health::Check::of(&r, t.elapsed().as_secs_f64());
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

    /// Every series of the run: each model (`names` as shown) with each prompt, in order; a
    /// runner per target (its own client settings), calibrated per (target, model). The
    /// connectivity checks come first: when one failed (without `--keep-going`) no series is
    /// loaded; a series whose check failed never is.
    pub(super) async fn all(
        &self,
        spec: &ProbeSpec,
        models: &[BenchModel],
        names: &[String],
        prompts: &[ProbeSpec],
        server_side: &mut server_view::ServerSide,
        reports: &mut Vec<ModelReport>,
    ) -> Result<(), BenchError> {
        let sweep = prompts.len() > 1;
        let checks = self.checks(models, names, prompts).await?;
        if self.stop.is_cancelled() {
            return Ok(());
        }
        let failed = |c: &Option<health::Check>| c.as_ref().is_some_and(|c| !c.ok);
        let load = self.health.keep_going || !checks.iter().any(failed);
        let token_models = crate::probe::TokenModels::default();
        let mut done_units = 0;
        let mut runner: Option<(Runner, Arc<crate::config::Target>)> = None;
        let mut checks = checks.into_iter();
        for (model_index, (bm, name)) in models.iter().zip(names).enumerate() {
            server_side.select(model_index, &bm.model);
            for prompt_spec in prompts {
                let check = checks.next().flatten();
                let head = ModelReport {
                    prompt: sweep.then(|| prompt_spec.prompt.name.clone()),
                    check: check.clone(),
                    ..self.series(bm)
                };
                if !load || failed(&check) {
                    reports.push(head);
                    continue;
                }
                let runner = match &mut runner {
                    Some((r, t)) if *t == bm.target => r,
                    slot => {
                        let mut r = Runner::new(bm.spec(spec), self.progress.clone())?;
                        r.ramp = self.ramp;
                        r.load_ramp = self.shape.load_ramp;
                        &mut slot.insert((r, bm.target.clone())).0
                    }
                };
                runner.set_prompt(&bm.spec(prompt_spec));
                runner.set_model(&bm.model);
                let name = series_name(name, prompt_spec, sweep);
                let calibration = calibrate(runner, &token_models, reports, &name).await?;
                let series = reports.len();
                reports.push(ModelReport {
                    calibration,
                    ..head
                });
                // The series' early stop: the server counts as reached once its check passed.
                let reached = check.as_ref().is_some_and(|c| c.ok);
                runner.halt = runner::Halt {
                    stop: self.stop.child_token(),
                    streak: Some(Arc::new(std::sync::Mutex::new(health::Streak::new(
                        self.health.stop_after,
                        reached,
                    )))),
                };
                self.sweep(
                    runner,
                    server_side,
                    bm,
                    &name,
                    series,
                    reports,
                    &mut done_units,
                )
                .await?;
                if self.stop.is_cancelled() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// The report of one series before its levels: the model, its target, its price.
    pub(super) fn series(&self, bm: &BenchModel) -> ModelReport {
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

    /// The next level of a fixed sweep after `li` levels: the planned ones in turn, unless the
    /// sweep is clearly past saturation (the rest are left out, `report.stopped_early` says why);
    /// then up to `knee_levels` added between the capacity ceiling and the knee, each where the
    /// fit puts the bend or to confirm it (a note on the level says so). `None` when done.
    fn next_fixed(
        &self,
        li: usize,
        refining: &mut bool,
        added: &mut u32,
        report: &mut ModelReport,
    ) -> Option<(LevelKey, Option<String>)> {
        // Every shard runs the same levels, each at its shared instant: none added or left out
        // there; `--knee-levels 0` runs the levels as given.
        let adapt = self.shape.knee_levels > 0 && self.shard.count <= 1 && self.start.is_none();
        if !*refining {
            let planned = self.levels.get(li);
            if let Some(why) = planned
                .filter(|_| adapt)
                .and_then(|_| self.far_past(report))
            {
                let left: Vec<String> = self.levels[li..].iter().map(LevelKey::label).collect();
                report.stopped_early = Some(format!(
                    "stopped before {}: clearly past saturation ({why})",
                    left.join(", ")
                ));
                self.progress.println(&format!(
                    "  {}: {}",
                    report.name(),
                    report.stopped_early.as_deref().unwrap_or_default()
                ));
            } else if let Some(k) = planned {
                return Some((*k, None));
            }
            *refining = true;
        }
        if !adapt || *added >= self.shape.knee_levels {
            return None;
        }
        report.sort_levels_by_load();
        let knee = select::find_knee(&report.levels, &self.criteria.knee)?;
        let ceiling = knee.ceiling?;
        let closed = knee.level.rate.is_none();
        let load = select::next_knee_load(
            ceiling.x(),
            knee.level.x(),
            knee.estimate,
            closed,
            select::KNEE_RATE_TOLERANCE,
        )?;
        if report
            .levels
            .iter()
            .any(|l| (l.key.x() - load).abs() < 1e-9)
        {
            return None;
        }
        *added += 1;
        let key = if closed {
            // A whole number of streams, from 2 up (below the knee's own).
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let c = load as u32;
            LevelKey {
                concurrency: c,
                rate: None,
            }
        } else {
            LevelKey {
                rate: Some(load),
                ..knee.level
            }
        };
        let note = format!(
            "added between {} and {} to place the knee",
            ceiling.label(),
            knee.level.label()
        );
        Some((key, Some(note)))
    }

    /// How many more times a level may run while its decision is unclear, and the attainment
    /// it decides: the capacity search's extensions and target, or a fixed sweep's
    /// `--until-clear` and the answer's target; `None` when levels are not extended.
    fn decision(&self) -> Option<(u32, f64)> {
        match &self.search {
            Some(plan) => Some((plan.extensions, plan.search.attainment)),
            None => (self.shape.until_clear > 0 && !self.criteria.slos.is_empty())
                .then_some((self.shape.until_clear, select::ANSWER_ATTAINMENT)),
        }
    }

    /// Why the sweep is clearly past saturation at its last level run (a knee below it, then
    /// [`select::far_past`]); `None` while it is not, or when the levels do not rise.
    fn far_past(&self, report: &ModelReport) -> Option<String> {
        let last = report.levels.last()?;
        if report.levels.iter().any(|l| l.key.x() > last.key.x()) {
            return None;
        }
        let knee = select::find_knee(&report.levels, &self.criteria.knee)?;
        let ceiling = report.levels.get(knee.index.checked_sub(1)?)?;
        (knee.level.x() <= last.key.x())
            .then(|| select::far_past(ceiling, last))
            .flatten()
    }

    /// One model's sweep (series `mi` of the run, shown as `name`): every level in turn through
    /// `runner`, which already sends to this model, each appended to `reports[mi]` as it ends
    /// (so a stopped run keeps what it finished). `done_units` counts the progress.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn sweep(
        &self,
        runner: &mut Runner,
        server_side: &mut server_view::ServerSide,
        bm: &BenchModel,
        name: &str,
        mi: usize,
        reports: &mut [ModelReport],
        done_units: &mut u64,
    ) -> Result<(), BenchError> {
        let price = bm.target.price_of(&bm.model);
        let mut lengths = stats::Lengths::default();
        let began = std::time::Instant::now();
        let mut tried: Vec<(f64, capacity::Verdict)> = Vec::new();
        let (mut refining, mut added) = (false, 0);
        for li in 0.. {
            let mut added_note = None;
            let key = match &self.search {
                None => match self.next_fixed(li, &mut refining, &mut added, &mut reports[mi]) {
                    Some((k, note)) => {
                        added_note = note;
                        k
                    }
                    None => break,
                },
                Some(plan) => {
                    let over = plan.budget.filter(|b| began.elapsed() >= *b);
                    let step = match over {
                        Some(b) => capacity::Step::Done(plan.search.stopped(
                            &tried,
                            &format!(
                                "its time budget ({}) was spent",
                                humantime::format_duration(b)
                            ),
                        )),
                        None => plan.search.next(&tried),
                    };
                    match step {
                        capacity::Step::Run(load) => plan.key(load),
                        capacity::Step::Done(outcome) => {
                            self.found(plan, &outcome, &tried, name, &mut reports[mi]);
                            break;
                        }
                    }
                }
            };
            let key = &key;
            let label = format!("{name} @ {}", key.label());
            if let Ok(mut running) = self.running.lock() {
                *running = Some(label.clone());
            }
            let slot = mi * self.levels.len() + li;
            let began = std::time::Instant::now();
            let (mut run, late) = self
                .level(
                    runner,
                    server_side,
                    key,
                    (mi, li, slot),
                    label.clone(),
                    *done_units,
                )
                .await?;
            *done_units += self.per_level_units;
            let series_stop = runner.halt.stop.clone();
            let halted = || series_stop.is_cancelled();
            // A level runs on while its decision is unclear (its attainment interval reaches
            // across the target), up to the capacity search's extensions or `--until-clear`.
            let mut extended = 0;
            while let Some((most, target)) = self.decision()
                && extended < most
                && !halted()
                && capacity::unclear(&run.samples, &self.criteria.slos, target)
            {
                extended += 1;
                let more = self
                    .again(runner, key, (mi, li), extended, &label, *done_units)
                    .await?;
                run = run.then(more);
            }
            let mut repeats = Vec::new();
            for r in 1..self.repeat {
                if halted() {
                    break;
                }
                if r == 1 {
                    repeats.push(stats::Repeat::of(&fold_run(key, &run, &self.criteria)));
                }
                let more = self
                    .again(runner, key, (mi, li), r, &label, *done_units)
                    .await?;
                repeats.push(stats::Repeat::of(&fold_run(key, &more, &self.criteria)));
                run = run.then(more);
            }
            let stop = halted().then(|| self.stop_cause(runner, &run, began));
            if let Some((health::StopCause::Signal, _)) = &stop
                && run.samples.is_empty()
                && run.unfinished == 0
            {
                // Stopped before it sent anything: left out, and named as the level running.
                return Ok(());
            }
            if stop.is_none() {
                lengths.add(&run.samples);
            }
            let unfinished = run.unfinished;
            let mut stats = fold_level(*key, run, &self.criteria, price.as_ref(), late, true);
            if let Some(stop) = &stop {
                mark_stopped(runner, &mut stats, stop, unfinished);
            }
            if self.shape.load_ramp.is_some() {
                stats.per_second = steady::per_second(stats.samples.as_deref().unwrap_or_default());
            }
            stats.repeats = repeats;
            self.note(&mut stats, &label, added_note, extended);
            stats.server = server_side
                .end(mi, li, &stats, &label, &self.progress)
                .await;
            if let Some(cc) = self.cross_check.as_ref().filter(|_| stop.is_none()) {
                let all = stats.samples.as_deref().unwrap_or_default();
                let c = crosscheck::run(runner, &stats, all, cc, &label).await?;
                stats.cross_check = Some(c);
            }
            // A partial level's figures are not the level's: they go to the report only.
            if let Some(r) = reports.get(mi).filter(|_| !stats.partial) {
                for sink in &self.sinks {
                    sink.level_done(r, &stats);
                }
            }
            if !self.samples {
                stats.samples = None;
            }
            self.progress.println(&level_line(&label, &stats));
            if let Some(plan) = self.search.as_ref().filter(|_| !stats.partial) {
                tried.push((plan.load(key), plan.verdict(&stats)));
            }
            if let Some(r) = reports.get_mut(mi) {
                r.levels.push(stats);
                (r.input_tokens_mean, r.output_tokens_mean) = lengths.means();
            }
            if let Ok(mut running) = self.running.lock() {
                *running = None;
            }
            if let Some((by, reason)) = stop {
                if by == health::StopCause::Errors {
                    let why = self.load_stopped(key, (li, refining), &reason);
                    self.progress.println(&format!("  {name}: {why}"));
                    reports[mi].stopped_early = Some(why);
                }
                break;
            }
        }
        if added > 0 {
            reports[mi].sort_levels_by_load();
        }
        Ok(())
    }

    /// The notes a level's reader must know: a level the knee added (`added`), one run on
    /// `extended` more times while its decision was unclear, a shard without a worker at it.
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

    /// Why a series' load stopped at `key` (level `li` of a fixed sweep's plan, unless
    /// `refining` its added ones) by its errors' `reason`, and the planned levels it leaves out.
    fn load_stopped(&self, key: &LevelKey, (li, refining): (usize, bool), reason: &str) -> String {
        let left: Vec<String> = match (&self.search, refining) {
            (None, false) => self.levels[li + 1..].iter().map(LevelKey::label).collect(),
            _ => Vec::new(),
        };
        let later = if left.is_empty() {
            "no later level is run".to_owned()
        } else {
            format!("its later levels ({}) are not run", left.join(", "))
        };
        format!("load stopped at {}: {reason}; {later}", key.label())
    }

    /// What stopped a level whose sending was halted, and why: the stop signal (how long into
    /// the level, what finished and what was cut), or its series' early stop (the streak's
    /// reason).
    fn stop_cause(
        &self,
        runner: &Runner,
        run: &runner::LevelRun,
        began: std::time::Instant,
    ) -> (health::StopCause, String) {
        let streak = runner
            .halt
            .streak
            .as_ref()
            .and_then(|s| s.lock().ok().and_then(|s| s.reason()));
        match streak {
            Some(reason) if !self.stop.is_cancelled() => (health::StopCause::Errors, reason),
            _ => {
                let signal = self.signal.get().copied().unwrap_or("a stop signal");
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
                    health::StopCause::Signal,
                    format!("stopped by {signal} {at:.1} s into the level{cut}"),
                )
            }
        }
    }

    /// The end of a model's capacity search: its capacity in the report, its levels in load
    /// order, and a line on stderr.
    fn found(
        &self,
        plan: &capacity::CapacityPlan,
        outcome: &capacity::Outcome,
        tried: &[(f64, capacity::Verdict)],
        name: &str,
        report: &mut ModelReport,
    ) {
        report.sort_levels_by_load();
        let c = plan.capacity(outcome, tried, &report.levels);
        self.progress.println(&format!(
            "  {name}: capacity {} ({}; {}, {} requests, {:.1} s)",
            capacity::describe(&c),
            c.stopped,
            crate::units::count(c.levels_tried.len(), "level"),
            c.requests,
            c.seconds
        ));
        report.capacity = Some(c);
    }

    /// Run `n` (1, 2, ...) after the first of level `li`: the same sending, its open-loop arrivals
    /// seeded apart from every other run's.
    async fn again(
        &self,
        runner: &mut Runner,
        key: &LevelKey,
        (mi, li): (usize, usize),
        n: u32,
        label: &str,
        done_units: u64,
    ) -> Result<runner::LevelRun, BenchError> {
        let seeded_as = li + 1000 * n as usize;
        self.send(runner, key, (mi, seeded_as), label.to_owned(), done_units)
            .await
    }

    /// The sending of one level (or one more batch of it) at `key` through `runner`: this
    /// shard's workers or arrivals, its amount.
    async fn send(
        &self,
        runner: &mut Runner,
        key: &LevelKey,
        (mi, li): (usize, usize),
        label: String,
        done_units: u64,
    ) -> Result<runner::LevelRun, BenchError> {
        let shard = self.shard;
        let run = match key.rate {
            None => match shard.workers(key.concurrency) {
                0 => runner::LevelRun::default(),
                c => {
                    let amount = match self.total {
                        Amount::Requests(n) => Amount::Requests(shard.requests(n, key.concurrency)),
                        d @ Amount::Duration(_) => d,
                    };
                    runner.closed(c, amount, label, done_units).await?
                }
            },
            Some(rate) => {
                let level_seed = self
                    .seed
                    .wrapping_add((mi as u64) << 32)
                    .wrapping_add(li as u64);
                runner
                    .open(
                        shard.rate(rate),
                        shard.cap(key.concurrency),
                        self.arrival,
                        shard.seed(level_seed),
                        self.amount,
                        label,
                        done_units,
                    )
                    .await?
            }
        };
        Ok(run)
    }

    /// Sends one level through `runner`: the warm-up, the wait for the level's shared start
    /// (`at` = model index, level index, slot in the run), then the level. What it measured, and
    /// how late it started after its shared instant (with `--start-at`).
    pub(super) async fn level(
        &self,
        runner: &mut Runner,
        server_side: &mut server_view::ServerSide,
        key: &LevelKey,
        at: (usize, usize, usize),
        label: String,
        done_units: u64,
    ) -> Result<(runner::LevelRun, Option<f64>), BenchError> {
        let (mi, li, slot) = at;
        let shard = self.shard;
        if self.prewarm {
            // Every worker of a closed loop; the probers an open loop starts with.
            let n = match key.rate {
                None => shard.workers(key.concurrency) as usize,
                Some(_) => (shard.cap(key.concurrency) as usize).min(runner::FIRST_PROBERS),
            };
            runner.prewarm(n).await?;
        }
        runner
            .warmup(key.concurrency, shard.share(self.warmup))
            .await?;
        if let Some(d) = self.shape.warmup_duration {
            match key.rate {
                None => match shard.workers(key.concurrency) {
                    0 => {}
                    w => {
                        runner
                            .quietly(w, runner::Amount::Duration(d), "warm-up".into())
                            .await?;
                    }
                },
                Some(rate) => {
                    // Seeded apart from the level's own arrivals.
                    let seed = shard.seed(self.seed.wrapping_add(0x5741_524d));
                    let load = (shard.rate(rate), shard.cap(key.concurrency));
                    runner.warm_open(load, self.arrival, seed, d).await?;
                }
            }
        }
        let cache = self
            .before_level
            .run(&runner.spec().target, &self.progress)
            .await;
        if let Some(p) = &self.start {
            tokio::select! {
                () = tokio::time::sleep(p.wait(slot, chrono::Utc::now())) => {}
                () = runner.halt.stop.cancelled() => {}
            }
        }
        let started = chrono::Utc::now();
        server_side.begin().await;
        let run = match &self.shape.canary {
            None => self.send(runner, key, (mi, li), label, done_units).await?,
            Some(plan) => {
                // The canaries run from the level's first send to its last request's end.
                let spec = plan.spec(runner.spec());
                let prompt = spec.prompt.name.clone();
                let stop = CancellationToken::new();
                let load = async {
                    let run = self.send(runner, key, (mi, li), label, done_units).await;
                    stop.cancel();
                    run
                };
                let (run, (samples, skipped)) =
                    tokio::join!(load, canary::send(spec, plan.rate, stop.clone()));
                runner::LevelRun {
                    canary: Some(canary::CanaryStats::of(
                        plan.rate, &prompt, &samples, skipped,
                    )),
                    ..run?
                }
            }
        };
        let late = self.start.as_ref().map(|p| {
            (started - p.level_start(slot))
                .to_std()
                .map_or(0.0, |d| d.as_secs_f64())
        });
        Ok((
            runner::LevelRun {
                cache: Some(cache),
                ..run
            },
            late,
        ))
    }
}

/// Marks a level's statistics stopped (partial) as `stop` says, with its errors' first messages
/// (the series' streak's when none of its requests finished: the warm-up tripped the stop).
fn mark_stopped(
    runner: &Runner,
    stats: &mut LevelStats,
    (by, reason): &(health::StopCause, String),
    unfinished: u64,
) {
    let streak = runner.halt.streak.as_ref().and_then(|s| s.lock().ok());
    let fallback = streak.map(|s| s.messages().clone()).unwrap_or_default();
    let samples = stats.samples.take().unwrap_or_default();
    stats.mark_stopped(*by, reason.clone(), unfinished, &samples, &fallback);
    stats.samples = Some(samples);
}

/// A level's statistics from its run: the fold, the cost at `price`, when it started (and, with
/// `--start-at`, how `late` after its shared instant), and the samples (sorted by send instant)
/// when they are kept.
pub(super) fn fold_level(
    key: LevelKey,
    run: runner::LevelRun,
    criteria: &Criteria,
    price: Option<&crate::config::Price>,
    late: Option<f64>,
    keep_samples: bool,
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
    if keep_samples {
        let mut s = run.samples;
        s.sort_by(|x, y| x.sent_s.total_cmp(&y.sent_s));
        stats.samples = Some(s);
    }
    stats
}

/// One run's statistics alone (for a repeat's figures).
fn fold_run(key: &LevelKey, run: &runner::LevelRun, criteria: &Criteria) -> LevelStats {
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
pub(super) fn level_line(label: &str, l: &LevelStats) -> String {
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
    )
}
