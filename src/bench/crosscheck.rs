//! `bench --cross-check[=N]`: beside each level, non-streaming requests of the same workload, and
//! the comparison of their E2E with the level's streaming E2E (docs/bench.md, "Cross-check").
//!
//! Streaming should add nothing to a request's duration: a server that streams and one that answers
//! whole finish generating at the same instant, so the two E2E medians should agree. A gap means
//! the stream costs something on the way (a buffering or slow proxy, per-event overhead in the
//! server or the client) or the server treats the two kinds differently. The comparison is pure
//! ([`compare`]); [`run`] sends the requests right after the level, at its concurrency.

use super::BenchError;
use super::runner::{Amount, Runner};
use super::stats::{CrossCheck, LevelStats, Sample, Summary};

/// Non-streaming requests per level when `--cross-check` is given without a number.
pub const DEFAULT_REQUESTS: u64 = 5;

/// What `--cross-check` asks for, and when a gap is worth a finding.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrossCheckSpec {
    /// Non-streaming requests per level (at least the level's concurrency are sent).
    pub requests: u64,
    /// A gap is reported when `|ratio - 1|` is above this (`--cross-check-ratio`, default 0.10)...
    pub max_ratio: f64,
    /// ...and `|difference|` is above this, s (`--cross-check-min-gap`, default 50 ms).
    pub min_gap_s: f64,
}

impl Default for CrossCheckSpec {
    fn default() -> Self {
        CrossCheckSpec {
            requests: DEFAULT_REQUESTS,
            max_ratio: 0.10,
            min_gap_s: 0.050,
        }
    }
}

/// The workers of a level's cross-check: the level's concurrency (closed loop), or the mean
/// number of requests in flight during it (open loop: Σ request durations / wall time, which is
/// the load the level actually applied; its cap may be far higher), at least 1.
pub fn concurrency_of(level: &LevelStats, samples: &[Sample]) -> u32 {
    if level.key.rate.is_none() || level.wall_s <= 0.0 {
        return level.key.concurrency.max(1);
    }
    let busy: f64 = samples.iter().map(|s| (s.end_s - s.sent_s).max(0.0)).sum();
    let mean = (busy / level.wall_s).round();
    (mean as u32).clamp(1, level.key.concurrency.max(1))
}

/// Compares a level's streaming E2E with the non-streaming requests' (pure).
pub fn compare(
    level: &LevelStats,
    non_stream: &[Sample],
    concurrency: u32,
    spec: &CrossCheckSpec,
    label: &str,
) -> CrossCheck {
    let ok: Vec<f64> = non_stream
        .iter()
        .filter(|s| s.success())
        .filter_map(|s| s.e2e_s)
        .collect();
    let stream = level.e2e_s.as_ref().map(|s| s.p50);
    let whole = Summary::of(ok.iter().copied()).map(|s| s.p50);
    let (difference_s, ratio) = match (stream, whole) {
        (Some(a), Some(b)) => (Some(a - b), (b > 0.0).then(|| a / b)),
        _ => (None, None),
    };
    let finding = match (stream, whole, difference_s, ratio) {
        (Some(a), Some(b), Some(d), Some(r))
            if d.abs() > spec.min_gap_s && (r - 1.0).abs() > spec.max_ratio =>
        {
            Some(format!(
                "{label}: streaming E2E p50 {} vs non-streaming {} ({}{:.0} ms, ratio {r:.2}): {}",
                crate::units::fmt_secs(a),
                crate::units::fmt_secs(b),
                if d >= 0.0 { "+" } else { "-" },
                d.abs() * 1e3,
                if d > 0.0 {
                    "the stream costs time on the way (a buffering proxy, per-event overhead) or the server treats streams differently"
                } else {
                    "whole answers take longer: the server or a proxy treats them differently"
                }
            ))
        }
        _ => None,
    };
    CrossCheck {
        requests: non_stream.len() as u64,
        successes: ok.len() as u64,
        concurrency,
        stream_e2e_p50_s: stream,
        non_stream_e2e_p50_s: whole,
        difference_s,
        ratio,
        finding,
    }
}

/// Sends a level's cross-check right after it: `max(N, workers)` non-streaming requests in a
/// closed loop of `workers` (see [`concurrency_of`]), so the server sees the level's load; not
/// counted in the level, not shown in the progress bar.
///
/// # Errors
/// As [`Runner::quietly`].
pub async fn run(
    runner: &mut Runner,
    level: &LevelStats,
    samples: &[Sample],
    spec: &CrossCheckSpec,
    label: &str,
) -> Result<CrossCheck, BenchError> {
    let workers = concurrency_of(level, samples);
    let n = spec.requests.max(u64::from(workers));
    let was = runner.set_stream(false);
    let r = runner
        .quietly(workers, Amount::Requests(n), format!("{label} cross-check"))
        .await;
    runner.set_stream(was);
    Ok(compare(level, &r?.samples, workers, spec, label))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::criteria::NO_SLO;
    use crate::bench::stats::LevelKey;
    use crate::outcome::ErrorType;

    fn sample(e2e: Option<f64>, err: Option<ErrorType>, sent: f64, end: f64) -> Sample {
        Sample {
            error_type: err,
            e2e_s: e2e,
            failure_s: err.map(|_| 0.1),
            sent_s: sent,
            end_s: end,
            lag_s: 0.0,
            ..Sample::default()
        }
    }

    fn level(stream_e2e: &[f64], rate: Option<f64>) -> LevelStats {
        let s: Vec<Sample> = stream_e2e
            .iter()
            .map(|e| sample(Some(*e), None, 0.0, *e))
            .collect();
        let key = LevelKey {
            concurrency: 4,
            rate,
        };
        LevelStats::from_samples(key, &s, 2.0, &[], &NO_SLO, 0)
    }

    #[test]
    fn agreeing_medians_make_no_finding() {
        let l = level(&[1.00, 1.01, 1.02], None);
        let ns = [1.0, 1.005, 1.03].map(|e| sample(Some(e), None, 0.0, e));
        let c = compare(&l, &ns, 4, &CrossCheckSpec::default(), "m @ 4");
        assert_eq!((c.requests, c.successes, c.concurrency), (3, 3, 4));
        assert!((c.difference_s.unwrap() - 0.005).abs() < 1e-12);
        assert!((c.ratio.unwrap() - 1.01 / 1.005).abs() < 1e-12);
        assert_eq!(c.finding, None);
    }

    #[test]
    fn a_gap_needs_both_thresholds() {
        let spec = CrossCheckSpec::default();
        // +200 ms and 20%: a finding.
        let l = level(&[1.2], None);
        let ns = [sample(Some(1.0), None, 0.0, 1.0)];
        let c = compare(&l, &ns, 1, &spec, "m @ 1");
        let f = c.finding.expect("a finding");
        assert!(
            f.starts_with("m @ 1: streaming E2E p50") && f.contains("+200 ms"),
            "{f}"
        );
        // 20% but only 20 ms: none (short requests jitter by more than 10%).
        let l = level(&[0.12], None);
        let ns = [sample(Some(0.10), None, 0.0, 0.1)];
        assert_eq!(compare(&l, &ns, 1, &spec, "x").finding, None);
        // 100 ms but only 2%: none.
        let l = level(&[5.1], None);
        let ns = [sample(Some(5.0), None, 0.0, 5.0)];
        assert_eq!(compare(&l, &ns, 1, &spec, "x").finding, None);
        // Non-streaming slower by 300 ms and 30%: a finding the other way.
        let l = level(&[1.0], None);
        let ns = [sample(Some(1.3), None, 0.0, 1.3)];
        let f = compare(&l, &ns, 1, &spec, "x").finding.expect("finding");
        assert!(f.contains("-300 ms") && f.contains("whole answers"), "{f}");
    }

    #[test]
    fn failures_are_counted_not_compared() {
        let l = level(&[1.0], None);
        let ns = [
            sample(None, Some(ErrorType::ServerError), 0.0, 0.1),
            sample(None, Some(ErrorType::ServerError), 0.0, 0.1),
        ];
        let c = compare(&l, &ns, 1, &CrossCheckSpec::default(), "x");
        assert_eq!((c.requests, c.successes), (2, 0));
        assert_eq!(
            (c.non_stream_e2e_p50_s, c.difference_s, c.ratio),
            (None, None, None)
        );
        assert_eq!(c.finding, None);
    }

    #[test]
    fn open_loop_workers_are_the_load_applied() {
        // 2 s of wall time, four requests of 1 s each: two in flight on average.
        let l = level(&[1.0, 1.0, 1.0, 1.0], Some(2.0));
        let s: Vec<Sample> = (0..4)
            .map(|i| {
                sample(
                    Some(1.0),
                    None,
                    f64::from(i) * 0.25,
                    f64::from(i) * 0.25 + 1.0,
                )
            })
            .collect();
        assert_eq!(concurrency_of(&l, &s), 2);
        let closed = level(&[1.0], None);
        assert_eq!(concurrency_of(&closed, &s), 4);
    }
}
