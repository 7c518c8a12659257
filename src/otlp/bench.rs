//! `bench`'s side of the OTLP export: each finished level's measured requests (its samples, not
//! its warm-up) recorded into the instruments as the sweep hands the level over
//! ([`crate::bench::LevelSink`]), one job per (target, model, prompt) of the run, each with the
//! run's `tokenprobe.run_id`. A bench sample keeps no chunk gaps, so bench exports no
//! `gen_ai.client.operation.time_per_output_chunk`.

use super::aggregate::{Instruments, JobAttrs, JobRecorder, Observation};
use crate::bench::LevelSink;
use crate::bench::report::ModelReport;
use crate::bench::sample::Sample;
use crate::bench::stats::LevelStats;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// A sample as an observation.
pub fn observation(s: &Sample) -> Observation<'_> {
    Observation {
        error: s.error_type.map(|e| e.as_str()),
        failure_s: s.failure_s,
        e2e_s: s.e2e_s,
        ttft_s: s.ttft_s,
        chunk_gaps_s: &[],
        input_tokens: s.input_tokens,
        output_tokens: s.output_tokens,
        ttfo_s: s.ttfo_s,
        tpot_s: s.tpot_s,
        cached_input_tokens: s.cached_input_tokens,
        reasoning_tokens: s.reasoning_tokens,
        response_model: s.served_model.as_deref(),
        response_id: s.response_id.as_deref(),
    }
}

/// The levels' samples into the instruments.
#[derive(Debug)]
pub struct BenchSink {
    instruments: Arc<Instruments>,
    run_id: String,
    /// Each config target's API and base URL.
    targets: HashMap<String, (String, String)>,
    /// The jobs made so far, by (target, model, prompt).
    jobs: Mutex<HashMap<(String, String, String), JobRecorder>>,
    /// The run's prompt (a model's own, in a sweep of several, wins).
    prompt: String,
}

impl BenchSink {
    /// A sink for run `run_id` of `prompt`, whose targets (name, API, base URL) are `targets`.
    pub fn new(
        instruments: Arc<Instruments>,
        run_id: &str,
        prompt: &str,
        targets: impl IntoIterator<Item = (String, String, String)>,
    ) -> Self {
        BenchSink {
            instruments,
            run_id: run_id.to_owned(),
            targets: targets
                .into_iter()
                .map(|(name, api, url)| (name, (api, url)))
                .collect(),
            jobs: Mutex::new(HashMap::new()),
            prompt: prompt.to_owned(),
        }
    }
}

impl LevelSink for BenchSink {
    fn level_done(&self, model: &ModelReport, level: &LevelStats) {
        let target = model.target.clone().unwrap_or_default();
        let prompt = model.prompt.clone().unwrap_or_else(|| self.prompt.clone());
        let key = (target.clone(), model.model.clone(), prompt.clone());
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let job = jobs.entry(key).or_insert_with(|| {
            let (api, url) = self.targets.get(&target).cloned().unwrap_or_default();
            let attrs = JobAttrs::new(&api, &url, &model.model, &target, &prompt, None)
                .with("tokenprobe.run_id", &self.run_id);
            self.instruments.job(attrs, super::exporter::now_ns())
        });
        for s in level.samples.as_deref().unwrap_or_default() {
            job.observe(&observation(s));
        }
    }
}
