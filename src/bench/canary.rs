//! Canary probes during load (`--canary RATE`): single requests of a fixed prompt sent at a low
//! constant rate beside a level's load, one at a time through their own [`Prober`] (the code
//! `serve` probes with), so each level also says what one user arriving during that load saw.
//! Their figures are a series of their own ([`CanaryStats`]), never mixed into the level's.

use super::sample::{Sample, Summary};
use crate::outcome::ErrorType;
use crate::probe::{ProbeSpec, Prober};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The most canaries per second (they are a user beside the load, not load).
pub const MAX_CANARY_RATE: f64 = 10.0;

/// What `--canary` asks for.
#[derive(Debug, Clone)]
pub struct CanaryPlan {
    /// Canaries per second.
    pub rate: f64,
    /// The prompt they send (`--canary-prompt`; `None`: the level's own prompt). Its target and
    /// model are replaced by the level's.
    pub prompt: Option<ProbeSpec>,
}

impl CanaryPlan {
    /// The spec of a canary beside a level sent with `level`: the canary prompt on the level's
    /// target and model, with the level's calibration of that target and model.
    pub fn spec(&self, level: &ProbeSpec) -> ProbeSpec {
        match &self.prompt {
            None => level.clone(),
            Some(p) => {
                let mut spec = p.clone();
                spec.target = level.target.clone();
                spec.model.clone_from(&level.model);
                spec.tokens = level.tokens;
                spec.request_ids.clone_from(&level.request_ids);
                spec
            }
        }
    }
}

/// One level's canaries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CanaryStats {
    /// Canaries per second asked for.
    pub rate: f64,
    /// The prompt they sent.
    pub prompt: String,
    /// Canaries sent during the level.
    pub requests: u64,
    /// Canary instants that came while the previous canary was still running (not sent: one
    /// canary at a time).
    pub skipped: u64,
    /// Failed canaries by `error_type`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<ErrorType, u64>,
    /// TTFT of the successful canaries, s.
    pub ttft_s: Option<Summary>,
    /// TPOT of the successful canaries with N >= 2, s.
    pub tpot_s: Option<Summary>,
    /// E2E of the successful canaries, s.
    pub e2e_s: Option<Summary>,
}

impl CanaryStats {
    /// The canaries' figures from their samples (pure).
    pub fn of(rate: f64, prompt: &str, samples: &[Sample], skipped: u64) -> CanaryStats {
        let mut errors = BTreeMap::new();
        for e in samples.iter().filter_map(|s| s.error_type) {
            *errors.entry(e).or_insert(0) += 1;
        }
        let ok = || samples.iter().filter(|s| s.success());
        CanaryStats {
            rate,
            prompt: prompt.to_owned(),
            requests: samples.len() as u64,
            skipped,
            errors,
            ttft_s: Summary::of(ok().filter_map(|s| s.ttft_s)),
            tpot_s: Summary::of(ok().filter_map(|s| s.tpot_s)),
            e2e_s: Summary::of(ok().filter_map(|s| s.e2e_s)),
        }
    }
}

/// Sends canaries with `spec` at `rate` per second from now until `stop` is cancelled: the
/// first at once, then every `1/rate` s on a fixed schedule; an instant that comes while the
/// previous canary runs is skipped and counted. The canary running when `stop` comes finishes
/// (it is not cut). The samples and the skipped count.
pub async fn send(spec: ProbeSpec, rate: f64, stop: CancellationToken) -> (Vec<Sample>, u64) {
    let mut samples = Vec::new();
    let mut skipped = 0;
    let Ok(mut prober) = Prober::new(&spec) else {
        // The same client settings built the level's probers: not expected; no canaries then.
        return (samples, skipped);
    };
    let period = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now();
    let mut next = start;
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep_until(next.into()) => {}
        }
        let sent = Instant::now();
        let result = prober.run(&spec).await;
        let end = Instant::now();
        samples.push(Sample::from_result(
            &result,
            sent.saturating_duration_since(start).as_secs_f64(),
            end.saturating_duration_since(start).as_secs_f64(),
            sent.saturating_duration_since(next).as_secs_f64(),
            false,
        ));
        // The next instant of the schedule after this canary's end; those passed are skipped.
        next += period;
        while next < end {
            next += period;
            skipped += 1;
        }
    }
    (samples, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canary_figures_are_their_own_samples() {
        let ok = |ttft: f64| Sample {
            ttft_s: Some(ttft),
            e2e_s: Some(ttft + 0.1),
            tpot_s: Some(0.01),
            ..Sample::default()
        };
        let failed = Sample {
            error_type: Some(ErrorType::RateLimited),
            ..Sample::default()
        };
        let c = CanaryStats::of(0.5, "hello", &[ok(0.05), ok(0.25), failed], 2);
        assert_eq!((c.requests, c.skipped), (3, 2));
        assert_eq!(c.errors.get(&ErrorType::RateLimited), Some(&1));
        let t = c.ttft_s.expect("two successes");
        assert_eq!((t.n, t.min, t.max), (2, 0.05, 0.25));
        assert_eq!(c.e2e_s.map(|e| e.max), Some(0.35));
        assert!(CanaryStats::of(1.0, "p", &[], 0).ttft_s.is_none());
    }
}
