//! `serve`'s side of the OTLP export: the instruments as one of the scheduler's result sinks
//! ([`crate::scheduler::ResultSink`]), each job its own series with its attributes
//! ([`JobAttrs`]), every probe result recorded as it finishes. A job a reload removes or
//! changes loses its series (a changed one starts afresh, its cumulative start with it).

use super::aggregate::{Instruments, JobAttrs, JobRecorder, Observation};
use crate::config::Job;
use crate::measure::ProbeResult;
use crate::scheduler::{JobSink, ResultSink};
use std::sync::Arc;
use std::time::SystemTime;

/// The instruments every job of `serve` records into.
#[derive(Debug)]
pub struct ServeSink {
    instruments: Arc<Instruments>,
    /// `tokenprobe.location` on every series, when the exporter has a location.
    location: Option<String>,
}

impl ServeSink {
    /// The jobs' side of `instruments`, their series carrying `location` when set.
    pub fn new(instruments: Arc<Instruments>, location: Option<&str>) -> Self {
        ServeSink {
            instruments,
            location: location.map(str::to_owned),
        }
    }
}

impl ResultSink for ServeSink {
    fn start(&self, job: &Job) -> Box<dyn JobSink> {
        let attrs = JobAttrs::new(
            job.target.api.as_str(),
            &job.target.base_url,
            &job.model,
            &job.target.name,
            &job.prompt.name,
            self.location.as_deref(),
        );
        Box::new(self.instruments.job(attrs, super::exporter::now_ns()))
    }
}

impl JobSink for JobRecorder {
    fn record(&self, r: &ProbeResult, finished: SystemTime) {
        self.observe_at(&Observation::from(r), super::exporter::unix_ns(finished));
    }

    /// Whether or not a job replaces it: the replacing job has series of its own.
    fn stop(&self, _replaced: bool) {
        self.remove();
    }
}
