//! Per-request samples and their per-level statistics (pure).
//!
//! Percentiles are exact, computed from every sample of a level (no histogram, no sketch): the
//! sorted values are interpolated linearly between the two closest ranks (numpy's default,
//! Hyndman & Fan type 7), so p50 of `[1, 2, 3, 4]` is 2.5 and the p100 is the maximum.

use super::criteria::Slo;
use crate::measure::ProbeResult;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One measured request of a level, as the bench keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// `None` on success, else the one `error_type`.
    pub error_type: Option<String>,
    /// TTFT, s (successes only).
    pub ttft_s: Option<f64>,
    /// TTFO, s (successes with visible text only).
    pub ttfo_s: Option<f64>,
    /// TPOT, s (successes with N >= 2, not a burst).
    pub tpot_s: Option<f64>,
    /// E2E, s (successes only).
    pub e2e_s: Option<f64>,
    /// `t0` to the failure instant, s (failures only).
    pub failure_s: Option<f64>,
    /// Decode tokens/s = 1 / TPOT.
    pub decode_tokens_per_s: Option<f64>,
    /// N, output tokens (counted for successes only, as `tokenprobe_output_tokens_total`).
    pub output_tokens: u64,
    /// When the request was sent, s after the level's start.
    pub sent_s: f64,
    /// When the request's probe returned, s after the level's start.
    pub end_s: f64,
    /// Scheduling lag: actual send instant minus intended send instant, s.
    pub lag_s: f64,
    /// A closed-loop worker's first request: its lag is the ramp-up (all workers start at the
    /// level's start), reported as the level's `ramp_s` and left out of `lag_s`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub first: bool,
    /// llama.cpp's own `timings.predicted_per_token_ms`, when the server sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_predicted_per_token_ms: Option<f64>,
}

impl Sample {
    /// A sample from a probe result, sent `sent_s` after the level's start with `lag_s` of
    /// scheduling lag, its probe returning at `end_s`; `first` for a closed-loop worker's first.
    pub fn from_result(r: &ProbeResult, sent_s: f64, end_s: f64, lag_s: f64, first: bool) -> Self {
        let ok = r.success();
        Sample {
            error_type: r.error_type.map(|e| e.as_str().to_owned()),
            ttft_s: r.ttft_s,
            ttfo_s: r.ttfo_s,
            tpot_s: r.tpot_s,
            e2e_s: r.e2e_s,
            failure_s: r.failure_s,
            decode_tokens_per_s: r.decode_tokens_per_s,
            output_tokens: if ok { r.output_tokens } else { 0 },
            sent_s,
            end_s,
            lag_s,
            first,
            server_predicted_per_token_ms: r
                .server_timings
                .as_ref()
                .and_then(|t| t.predicted_per_token_ms),
        }
    }

    /// True when the request succeeded.
    pub fn success(&self) -> bool {
        self.error_type.is_none()
    }

    /// True when the request succeeded and met every SLO. A metric the request does not have
    /// (TPOT with N = 1, TTFO of a reasoning-only answer) does not count against it.
    pub fn meets(&self, slos: &[Slo]) -> bool {
        self.success() && slos.iter().all(|s| s.met_by(self))
    }
}

/// Mean, extremes and percentiles of one metric over a level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of values.
    pub n: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Smallest value.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest value.
    pub max: f64,
}

/// The `q`-quantile (`0..=1`) of sorted values, linearly interpolated between closest ranks.
/// `None` for no values.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let h = (n - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    let (a, b) = (sorted[lo], sorted[hi.min(n - 1)]);
    Some(a + (b - a) * (h - lo as f64))
}

impl Summary {
    /// The summary of `values` (NaNs dropped); `None` when there are none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Summary> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let q = |p: f64| quantile(&v, p).unwrap_or(f64::NAN);
        Some(Summary {
            n: v.len() as u64,
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v[0],
            p50: q(0.50),
            p90: q(0.90),
            p95: q(0.95),
            p99: q(0.99),
            max: v[v.len() - 1],
        })
    }
}

/// Which load a level applied.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LevelKey {
    /// Closed loop: the number of workers. Open loop: the cap on requests in flight.
    pub concurrency: u32,
    /// Open loop: the arrival rate, requests/s; `None` in closed loop.
    #[serde(default)]
    pub rate: Option<f64>,
}

impl LevelKey {
    /// A short label: `8` (closed loop) or `4/s` (open loop).
    pub fn label(&self) -> String {
        match self.rate {
            None => self.concurrency.to_string(),
            Some(r) => format!("{}/s", trim_float(r)),
        }
    }

    /// The x coordinate of plots: the concurrency, or the rate in open loop.
    pub fn x(&self) -> f64 {
        self.rate.unwrap_or(f64::from(self.concurrency))
    }

    /// Same load (for comparing with a baseline).
    pub fn same(&self, o: &LevelKey) -> bool {
        self.concurrency == o.concurrency
            && match (self.rate, o.rate) {
                (None, None) => true,
                (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * a.abs().max(1.0),
                _ => false,
            }
    }
}

/// `4` for 4.0, `2.5` for 2.5.
pub(crate) fn trim_float(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// What one level measured for one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelStats {
    /// The load applied.
    #[serde(flatten)]
    pub key: LevelKey,
    /// Measured requests (warm-up excluded).
    pub requests: u64,
    /// Successful requests.
    pub successes: u64,
    /// Failed requests by `error_type`.
    pub errors: BTreeMap<String, u64>,
    /// Failed / all requests (0 when there were none).
    pub error_rate: f64,
    /// TTFT of successes, s.
    pub ttft_s: Option<Summary>,
    /// TTFO of successes with visible text, s.
    pub ttfo_s: Option<Summary>,
    /// TPOT of successes with N >= 2, s.
    pub tpot_s: Option<Summary>,
    /// E2E of successes, s.
    pub e2e_s: Option<Summary>,
    /// Per-request decode tokens/s (1 / TPOT).
    pub decode_tokens_per_s: Option<Summary>,
    /// Sum of N over the successes.
    pub output_tokens: u64,
    /// The level's wall time: first intended send to the last request's end, s.
    pub wall_s: f64,
    /// Aggregate output tokens/s: `output_tokens / wall_s`.
    pub output_tokens_per_s: f64,
    /// Finished requests (successes and failures) / `wall_s`.
    pub requests_per_s: f64,
    /// Requests that succeeded and met every SLO / `wall_s`; `None` without SLOs.
    #[serde(default)]
    pub goodput_rps: Option<f64>,
    /// Requests that succeeded and met every SLO; `None` without SLOs.
    #[serde(default)]
    pub slo_met: Option<u64>,
    /// Scheduling lag of the load generator (actual minus intended send instant), s; closed-loop
    /// workers' first requests are left out (see `ramp_s`).
    pub lag_s: Option<Summary>,
    /// Closed loop: from the level's start until the last worker sent its first request, s.
    #[serde(default)]
    pub ramp_s: Option<f64>,
    /// Run-queue delay of the load generator's runtime during the level (a task that yields and
    /// measures how long it waits to run again, every 10 ms), s.
    #[serde(default)]
    pub loop_lag_s: Option<Summary>,
    /// Open loop: requests whose send waited for a free in-flight slot (the cap was reached).
    #[serde(default)]
    pub capped: u64,
    /// Every sample, with `--samples`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<Vec<Sample>>,
    /// The server's view of the level (`bench --server-metrics`, `--prometheus`); absent when
    /// not collected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<crate::servermetrics::level::ServerLevel>,
}

impl LevelStats {
    /// Folds a level's samples. `wall_s` is the level's wall time; `loop_lag` the run-queue
    /// delays measured meanwhile; `slos` the per-request SLOs of the goodput (none: no goodput).
    pub fn from_samples(
        key: LevelKey,
        samples: &[Sample],
        wall_s: f64,
        loop_lag: &[f64],
        slos: &[Slo],
        capped: u64,
    ) -> LevelStats {
        let requests = samples.len() as u64;
        let successes = samples.iter().filter(|s| s.success()).count() as u64;
        let mut errors = BTreeMap::new();
        for e in samples.iter().filter_map(|s| s.error_type.as_ref()) {
            *errors.entry(e.clone()).or_insert(0) += 1;
        }
        let output_tokens = samples.iter().map(|s| s.output_tokens).sum();
        let per_s = |x: f64| if wall_s > 0.0 { x / wall_s } else { 0.0 };
        let slo_met =
            (!slos.is_empty()).then(|| samples.iter().filter(|s| s.meets(slos)).count() as u64);
        let ok = || samples.iter().filter(|s| s.success());
        LevelStats {
            key,
            requests,
            successes,
            errors,
            error_rate: if requests == 0 {
                0.0
            } else {
                (requests - successes) as f64 / requests as f64
            },
            ttft_s: Summary::of(ok().filter_map(|s| s.ttft_s)),
            ttfo_s: Summary::of(ok().filter_map(|s| s.ttfo_s)),
            tpot_s: Summary::of(ok().filter_map(|s| s.tpot_s)),
            e2e_s: Summary::of(ok().filter_map(|s| s.e2e_s)),
            decode_tokens_per_s: Summary::of(ok().filter_map(|s| s.decode_tokens_per_s)),
            output_tokens,
            wall_s,
            output_tokens_per_s: per_s(output_tokens as f64),
            requests_per_s: per_s(requests as f64),
            goodput_rps: slo_met.map(|n| per_s(n as f64)),
            slo_met,
            lag_s: Summary::of(samples.iter().filter(|s| !s.first).map(|s| s.lag_s)),
            ramp_s: samples
                .iter()
                .filter(|s| s.first)
                .map(|s| s.sent_s)
                .reduce(f64::max),
            loop_lag_s: Summary::of(loop_lag.iter().copied()),
            capped,
            samples: None,
            server: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_between_ranks() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.5), Some(2.5));
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&v, 1.0), Some(4.0));
        assert_eq!(quantile(&[7.0], 0.99), Some(7.0));
        assert_eq!(quantile(&[], 0.5), None);
        let hundred: Vec<f64> = (1..=101).map(f64::from).collect();
        assert_eq!(quantile(&hundred, 0.95), Some(96.0));
    }

    #[test]
    fn summary_sorts_and_drops_nan() {
        let s = Summary::of([3.0, f64::NAN, 1.0, 2.0]).unwrap();
        assert_eq!((s.n, s.min, s.p50, s.max, s.mean), (3, 1.0, 2.0, 3.0, 2.0));
        assert!(Summary::of([]).is_none());
    }

    fn sample(ttft: Option<f64>, n: u64, err: Option<&str>) -> Sample {
        Sample {
            error_type: err.map(str::to_owned),
            ttft_s: ttft,
            ttfo_s: ttft,
            tpot_s: ttft.map(|_| 0.01),
            e2e_s: ttft.map(|t| t + 0.01 * (n as f64 - 1.0)),
            failure_s: err.map(|_| 0.5),
            decode_tokens_per_s: ttft.map(|_| 100.0),
            output_tokens: n,
            sent_s: 0.0,
            end_s: 1.0,
            lag_s: 0.001,
            first: false,
            server_predicted_per_token_ms: None,
        }
    }

    #[test]
    fn level_stats_fold() {
        let samples = vec![
            sample(Some(0.1), 10, None),
            sample(Some(0.3), 10, None),
            sample(None, 0, Some("server_error")),
            sample(None, 0, Some("server_error")),
        ];
        let slo = vec!["ttft=200ms".parse::<Slo>().unwrap()];
        let key = LevelKey {
            concurrency: 2,
            rate: None,
        };
        let l = LevelStats::from_samples(key, &samples, 2.0, &[0.0001], &slo, 0);
        assert_eq!((l.requests, l.successes), (4, 2));
        assert_eq!(l.errors.get("server_error"), Some(&2));
        assert_eq!(l.error_rate, 0.5);
        assert_eq!(l.output_tokens, 20);
        assert_eq!(l.output_tokens_per_s, 10.0);
        assert_eq!(l.requests_per_s, 2.0);
        assert_eq!(l.slo_met, Some(1));
        assert_eq!(l.goodput_rps, Some(0.5));
        let t = l.ttft_s.unwrap();
        assert_eq!((t.n, t.p50), (2, 0.2));
    }

    #[test]
    fn level_labels() {
        let c = LevelKey {
            concurrency: 8,
            rate: None,
        };
        let r = LevelKey {
            concurrency: 100,
            rate: Some(2.5),
        };
        assert_eq!((c.label(), r.label()), ("8".to_owned(), "2.5/s".to_owned()));
        assert!(c.same(&c) && !c.same(&r));
    }
}
