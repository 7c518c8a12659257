//! A measured request as the bench keeps it ([`Sample`]), what a per-request objective is
//! ([`Objective`]), and the summary of one metric's values over a level ([`Summary`]): the
//! ground the level statistics, the steady state and the canaries all stand on (pure).
//!
//! Percentiles are exact, computed from every value (no histogram, no sketch): the sorted values
//! are interpolated linearly between the two closest ranks (numpy's default, Hyndman & Fan type
//! 7), so p50 of `[1, 2, 3, 4]` is 2.5 and the p100 is the maximum.

use crate::measure::ProbeResult;
use crate::outcome::ErrorType;
use serde::{Deserialize, Serialize};

/// One measured request of a level, as the bench keeps it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// `None` on success, else the one `error_type`.
    pub error_type: Option<ErrorType>,
    /// A failure's reason as the probe gave it (secrets redacted), within
    /// [`crate::probe::MAX_DETAIL_BYTES`] (a level's memory stays bounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_detail: Option<String>,
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
    /// Input tokens the server reported (`usage`), successes only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// When the request was sent, s after the level's start.
    pub sent_s: f64,
    /// When the request's probe returned, s after the level's start.
    pub end_s: f64,
    /// Scheduling lag: actual send instant minus intended send instant, s.
    pub lag_s: f64,
    /// Open loop: how long after its scheduled arrival the request was sent, s: the sender's lag
    /// plus any wait for an in-flight slot under the cap. A user arriving on schedule waited this
    /// too, so TTFT, TTFO and E2E from the schedule add it (`None` in closed loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behind_schedule_s: Option<f64>,
    /// A closed-loop worker's first request: its lag is the ramp-up (all workers start at the
    /// level's start), reported as the level's `ramp_s` and left out of `lag_s`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub first: bool,
    /// The request opened a connection (TCP, and TLS) rather than using a kept-alive one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub new_connection: bool,
    /// Its TCP connect (to the target, or to the proxy), s, when it opened one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_s: Option<f64>,
    /// Kernel-vs-user difference at the first token: how long after the kernel received the
    /// first token's bytes the prober read them, s (what kernel stamps took out of its TTFT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_lag_s: Option<f64>,
    /// Send lag: how long after its start instant the request's last byte left (the kernel's
    /// transmit stamp), s; part of its TTFT, not of the wire's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_lag_s: Option<f64>,
    /// Wire TTFT: from the request's last byte leaving to the first token's bytes arriving (both
    /// kernel stamps), s: the server's TTFT as a capture of the wire shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_ttft_s: Option<f64>,
    /// Some read of the response carried no kernel stamp (its instant is the read's own).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unstamped: bool,
    /// A success whose first token came in one read with the event after it: its TTFT may end
    /// late by up to the gap between them (the read's stamp is its last packet's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub first_token_shared_read: bool,
    /// llama.cpp's own `timings.predicted_per_token_ms`, when the server sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_predicted_per_token_ms: Option<f64>,
    /// The output length asked for exactly (`exact_output`), beside `output_tokens` achieved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_output_tokens: Option<u64>,
    /// The input length the workload asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_input_tokens: Option<u64>,
    /// The conversation turn, from 1 (a session's: the turn of its branch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// The session it was a turn of, by its number in the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    /// Of that session, the branch: 0 the session itself, 1, 2, ... its sub-agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<u32>,
    /// Tool calls its answer made (successes only).
    #[serde(default, skip_serializing_if = "no_calls")]
    pub tool_calls: u32,
    /// The `x-request-id` it was sent with (`<run>-<shard>-<n>`): the sample's identity, which
    /// `bench merge` checks, and the key to the server's own log or a capture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Of the input tokens, those the server's prompt cache served, when its usage said
    /// (successes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    /// Of the output tokens, the reasoning tokens, when its usage said (successes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// The model that answered, as the answer named it (failures too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_model: Option<String>,
    /// The answer's `system_fingerprint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    /// The answer's own id (a chunk's `id`, the Anthropic message's, the Responses response's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// The request id header of the answer (`x-request-id`, `request-id`, ...), which a server
    /// may set to the one it was sent with or to its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_request_id: Option<String>,
    /// Another model answered than the one asked for (`model_mismatch`, failures too).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub model_mismatch: bool,
    /// Its usage was audited against what it streamed (successes only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub usage_audited: bool,
    /// The usage it stated was off beyond the tolerance (`usage_mismatch`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub usage_mismatch: bool,
    /// The output tokens it stated / those streamed, when audited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_ratio: Option<f64>,
}

/// Serde's test of a sample without tool calls.
fn no_calls(n: &u32) -> bool {
    *n == 0
}

impl Sample {
    /// A sample from a probe result, sent `sent_s` after the level's start with `lag_s` of
    /// scheduling lag, its probe returning at `end_s`; `first` for a closed-loop worker's first.
    pub fn from_result(r: &ProbeResult, sent_s: f64, end_s: f64, lag_s: f64, first: bool) -> Self {
        let ok = r.success();
        Sample {
            error_type: r.error_type,
            error_detail: r
                .error_type
                .and(r.error_detail.as_deref())
                .map(|d| crate::units::truncate_bytes(d, crate::probe::MAX_DETAIL_BYTES)),
            ttft_s: r.ttft_s,
            ttfo_s: r.ttfo_s,
            tpot_s: r.tpot_s,
            e2e_s: r.e2e_s,
            failure_s: r.failure_s,
            decode_tokens_per_s: r.decode_tokens_per_s,
            output_tokens: if ok { r.output_tokens } else { 0 },
            input_tokens: r.input_tokens.filter(|_| ok),
            sent_s,
            end_s,
            lag_s,
            behind_schedule_s: None,
            first,
            new_connection: r.phases.is_some_and(|p| !p.reused),
            connect_s: r.phases.and_then(|p| p.connect_s),
            read_lag_s: r.read_lag.and_then(|l| l.first_token_s),
            send_lag_s: r.send_lag_s,
            wire_ttft_s: r.wire_ttft_s,
            unstamped: r.read_lag.is_some_and(|l| l.unstamped_reads > 0),
            first_token_shared_read: ok && r.first_token_shared_read,
            server_predicted_per_token_ms: r
                .server_timings
                .as_ref()
                .and_then(|t| t.predicted_per_token_ms),
            requested_input_tokens: r.requested_input_tokens,
            requested_output_tokens: r.requested_output_tokens,
            turn: r.turn,
            session: r.session,
            branch: r.branch,
            tool_calls: if ok {
                u32::try_from(r.tool_calls.len()).unwrap_or(u32::MAX)
            } else {
                0
            },
            request_id: r.request_id.clone(),
            cached_input_tokens: r.cached_input_tokens.filter(|_| ok),
            reasoning_tokens: r.reasoning_tokens.filter(|_| ok),
            served_model: r.served_model.clone(),
            system_fingerprint: r.system_fingerprint.clone(),
            response_id: r.response_id.clone(),
            server_request_id: r.server_request_id.clone(),
            model_mismatch: r.flags.contains(&crate::outcome::Flag::ModelMismatch),
            usage_audited: r.usage_audit.as_ref().is_some_and(|a| a.output.is_some()),
            usage_mismatch: r.flags.contains(&crate::outcome::Flag::UsageMismatch),
            usage_ratio: r
                .usage_audit
                .as_ref()
                .and_then(|a| a.output)
                .and_then(|c| c.ratio),
        }
    }

    /// A latency (TTFT, TTFO, E2E) counted from the request's scheduled arrival rather than its
    /// send: the same plus [`Sample::behind_schedule_s`] (open loop), else unchanged.
    pub fn from_schedule(&self, latency: Option<f64>) -> Option<f64> {
        latency.map(|v| v + self.behind_schedule_s.unwrap_or(0.0))
    }

    /// True when the request succeeded.
    pub fn success(&self) -> bool {
        self.error_type.is_none()
    }

    /// True when the request succeeded and met every SLO. A metric the request does not have
    /// (TPOT with N = 1, TTFO of a reasoning-only answer) does not count against it.
    pub fn meets(&self, slos: &[impl Objective]) -> bool {
        self.success() && slos.iter().all(|s| s.met_by(self))
    }
}

/// A per-request objective a sample meets or not (an `--slo`, as the criteria parse it).
pub trait Objective {
    /// True when `s` meets it. A metric the request does not have (TPOT with N = 1, TTFO of a
    /// reasoning-only answer) does not count against it.
    fn met_by(&self, s: &Sample) -> bool;
    /// How the report names it (`ttft<=2.00 s`).
    fn name(&self) -> String;
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
    /// The 95% distribution-free interval of the median (two of the values; absent when there
    /// are too few values for one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_ci: Option<[f64; 2]>,
    /// The same for p95 (needs at least 72 values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95_ci: Option<[f64; 2]>,
    /// The same for p99 (needs at least 368 values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_ci: Option<[f64; 2]>,
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
            p50_ci: super::confidence::quantile_interval(&v, 0.50),
            p95_ci: super::confidence::quantile_interval(&v, 0.95),
            p99_ci: super::confidence::quantile_interval(&v, 0.99),
        })
    }
}
