//! A level's steady state (pure): the window where its in-flight count stays near the load, and
//! the level's throughput and latency over that window alone, with what was left out before it
//! (the ramp: workers starting, connections opening) and after it (the drain: the last requests
//! finishing with fewer beside them). Aggregate tokens/s over the whole level counts the ramp and
//! the drain, when fewer streams ran; the steady figures do not.
//!
//! Closed loop at C workers: the window runs from the first instant all C requests are in flight
//! to the last instant the count fell below C (the drain's start: a worker that stopped; the
//! brief dips between one request's end and its worker's next send are followed by a rise, so
//! they do not end it). Open loop: from the first instant the in-flight count reaches its median
//! over the sending to the last arrival; the drain after it is left out. Requests sent in
//! `[start, end)` are the window's; its throughput counts the requests that ended in
//! `(start, end]`.

use super::sample::{Sample, Summary};
use serde::{Deserialize, Serialize};

/// A level's steady-state window and its figures over it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteadyState {
    /// The window's start, s after the level's start.
    pub start_s: f64,
    /// The window's end, s after the level's start.
    pub end_s: f64,
    /// The in-flight count the window keeps at least.
    pub in_flight_at_least: u32,
    /// Requests sent within the window (its latencies are theirs).
    pub requests: u64,
    /// Requests sent before the window (left out).
    pub before: u64,
    /// Requests sent after the window (left out).
    pub after: u64,
    /// Output tokens of the successful requests that ended within the window, per second of it.
    pub output_tokens_per_s: f64,
    /// Requests that ended within the window, per second of it.
    pub requests_per_s: f64,
    /// TTFT of the successful requests sent within the window, s.
    pub ttft_s: Option<Summary>,
}

/// The in-flight count over time: (instant, count from then on), in time order (an end before a
/// send at the same instant).
fn in_flight(samples: &[Sample]) -> Vec<(f64, i64)> {
    let mut events: Vec<(f64, i64)> = samples
        .iter()
        .flat_map(|s| [(s.sent_s, 1), (s.end_s.max(s.sent_s), -1)])
        .collect();
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut n = 0;
    events
        .into_iter()
        .map(|(t, d)| {
            n += d;
            (t, n)
        })
        .collect()
}

/// The steady state of a level's `samples` (times after its start): closed loop at `workers`
/// (`open` false) or open loop. `None` when no window of positive length keeps the count.
pub fn steady_state(samples: &[Sample], workers: u32, open: bool) -> Option<SteadyState> {
    let curve = in_flight(samples);
    let (target, last_arrival) = if open {
        let last_send = samples
            .iter()
            .map(|s| s.sent_s)
            .fold(f64::NEG_INFINITY, f64::max);
        let mut counts: Vec<i64> = curve
            .iter()
            .filter(|(t, _)| *t <= last_send)
            .map(|(_, n)| *n)
            .collect();
        counts.sort_unstable();
        let median = *counts.get(counts.len() / 2)?;
        (u32::try_from(median.max(1)).ok()?, Some(last_send))
    } else {
        (workers.max(1), None)
    };
    let at_least = i64::from(target);
    let start = curve.iter().find(|(_, n)| *n >= at_least)?.0;
    // The end: the last arrival (open loop), else the instant the count last fell below the
    // target.
    let end = last_arrival.unwrap_or_else(|| {
        curve
            .iter()
            .zip(curve.iter().skip(1))
            .filter(|((_, n), (_, m))| *n >= at_least && *m < at_least)
            .map(|(_, (t, _))| *t)
            .fold(start, f64::max)
    });
    let len = end - start;
    if len <= 0.0 {
        return None;
    }
    let sent_in = |s: &&Sample| s.sent_s >= start && s.sent_s < end;
    let ended_in = || {
        samples
            .iter()
            .filter(move |s| s.end_s > start && s.end_s <= end)
    };
    Some(SteadyState {
        start_s: start,
        end_s: end,
        in_flight_at_least: target,
        requests: samples.iter().filter(sent_in).count() as u64,
        before: samples.iter().filter(|s| s.sent_s < start).count() as u64,
        after: samples.iter().filter(|s| s.sent_s >= end).count() as u64,
        output_tokens_per_s: ended_in()
            .filter(|s| s.success())
            .map(|s| s.output_tokens)
            .sum::<u64>() as f64
            / len,
        requests_per_s: ended_in().count() as f64 / len,
        ttft_s: Summary::of(
            samples
                .iter()
                .filter(sent_in)
                .filter(|s| s.success())
                .filter_map(|s| s.ttft_s),
        ),
    })
}

/// One second of a level: what was sent in it and what ended in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Second {
    /// Seconds after the level's start (this second is `[second, second + 1)`).
    pub second: u32,
    /// Requests sent in it.
    pub sent: u64,
    /// Requests that ended in it.
    pub ended: u64,
    /// Output tokens of the successful requests that ended in it.
    pub output_tokens: u64,
    /// TTFT p50 of the successful requests sent in it, s.
    pub ttft_p50_s: Option<f64>,
}

/// The level second by second (samples' times after its start), up to its last request's end.
pub fn per_second(samples: &[Sample]) -> Vec<Second> {
    let last = samples
        .iter()
        .map(|s| s.end_s.max(s.sent_s))
        .fold(0.0, f64::max);
    let n = (last.floor() as usize).saturating_add(1).min(100_000);
    let mut out: Vec<Second> = (0..n)
        .map(|i| Second {
            second: i as u32,
            sent: 0,
            ended: 0,
            output_tokens: 0,
            ttft_p50_s: None,
        })
        .collect();
    let mut ttfts: Vec<Vec<f64>> = vec![Vec::new(); n];
    let slot = |t: f64| (t.max(0.0).floor() as usize).min(n.saturating_sub(1));
    for s in samples {
        let i = slot(s.sent_s);
        out[i].sent += 1;
        if let (true, Some(t)) = (s.success(), s.ttft_s) {
            ttfts[i].push(t);
        }
        let j = slot(s.end_s);
        out[j].ended += 1;
        if s.success() {
            out[j].output_tokens += s.output_tokens;
        }
    }
    for (o, t) in out.iter_mut().zip(ttfts) {
        o.ttft_p50_s = Summary::of(t).map(|s| s.p50);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(sent: f64, end: f64, tokens: u64) -> Sample {
        Sample {
            sent_s: sent,
            end_s: end,
            ttft_s: Some(0.01),
            output_tokens: tokens,
            ..Sample::default()
        }
    }

    /// Two workers, the second ramped 1 s after the first, each sending 1 s requests back to
    /// back, the first until 5 s, the second until 6 s: the window is 1 s to 5 s (both in
    /// flight). The first worker's first request is before it, the second's last after it, and
    /// over the window throughput is the two streams' (2 requests/s, 20 tokens/s), where the
    /// whole level's 6 s would say 10/6.
    #[test]
    fn a_closed_level_leaves_out_its_ramp_and_its_drain() {
        let mut s: Vec<Sample> = (0..5)
            .map(|i| req(f64::from(i), f64::from(i + 1), 10))
            .collect();
        s.extend((1..6).map(|i| req(f64::from(i), f64::from(i + 1), 10)));
        let st = steady_state(&s, 2, false).expect("a window");
        assert_eq!((st.start_s, st.end_s, st.in_flight_at_least), (1.0, 5.0, 2));
        assert_eq!((st.before, st.requests, st.after), (1, 8, 1));
        assert!((st.requests_per_s - 2.0).abs() < 1e-12, "{st:?}");
        assert!((st.output_tokens_per_s - 20.0).abs() < 1e-12, "{st:?}");
        // A level that never had all its workers in flight has no steady state.
        assert!(steady_state(&s, 3, false).is_none());
    }

    /// Open loop: the window ends at the last arrival (the drain is left out) and starts once
    /// the in-flight count reaches its median.
    #[test]
    fn an_open_level_leaves_out_its_drain() {
        // Arrivals every 0.5 s from 0 to 4.5 s, each taking 1.2 s: 2 or 3 in flight once going.
        let s: Vec<Sample> = (0..10)
            .map(|i| req(f64::from(i) * 0.5, f64::from(i) * 0.5 + 1.2, 5))
            .collect();
        let st = steady_state(&s, 100, true).expect("a window");
        assert_eq!(st.end_s, 4.5);
        assert!(st.start_s > 0.0 && st.start_s <= 1.0, "{st:?}");
        // The last arrival opens the drain: sent at the window's end, it is left out.
        assert_eq!(st.after, 1);
        // A dip below the median before the last arrival does not end the window: it ends at
        // the last arrival (2.0 s), not at the last fall below the median (1.26 s).
        let dips: Vec<Sample> = [
            (0.0, 1.0),
            (0.1, 1.1),
            (0.2, 1.2),
            (0.3, 1.3),
            (1.25, 1.26),
            (2.0, 2.1),
        ]
        .iter()
        .map(|&(a, b)| req(a, b, 1))
        .collect();
        let st = steady_state(&dips, 100, true).expect("a window");
        assert_eq!((st.in_flight_at_least, st.start_s, st.end_s), (2, 0.1, 2.0));
        assert!(st.before >= 1, "{st:?}");
    }

    #[test]
    fn seconds_count_what_was_sent_and_what_ended_in_them() {
        let s = vec![req(0.1, 0.5, 3), req(0.9, 1.2, 4), req(1.5, 2.7, 5)];
        let v = per_second(&s);
        let sent: Vec<u64> = v.iter().map(|x| x.sent).collect();
        let ended: Vec<u64> = v.iter().map(|x| x.ended).collect();
        let tokens: Vec<u64> = v.iter().map(|x| x.output_tokens).collect();
        assert_eq!(
            (sent, ended, tokens),
            (vec![2, 1, 0], vec![1, 1, 1], vec![3, 4, 5])
        );
        assert_eq!(v[0].ttft_p50_s, Some(0.01));
        assert_eq!(v[2].ttft_p50_s, None);
        assert!(per_second(&[]).len() == 1 && per_second(&[])[0].sent == 0);
    }

    #[test]
    fn no_window_without_requests() {
        assert!(steady_state(&[], 4, false).is_none());
        assert!(steady_state(&[], 4, true).is_none());
    }
}
