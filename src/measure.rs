//! The measurement fold: timestamped observations of one probe in, one [`ProbeResult`] out.
//!
//! Pure and synchronous. The I/O layer ([`crate::probe`]) stamps every observation with
//! `Instant::now()` in the task that reads the bytes, and calls the methods here in arrival order.
//! Every definition is docs/measurement.md's: instants (`t0`, `t_headers`, `t_first`, `t_first_output`,
//! `t_last`, `t_end`), the metrics of a successful probe, the outcome precedence and the flags.
//! A non-streamed answer ([`Measurement::non_stream`], [`Measurement::answer`]) is folded as one
//! event at the body's end: E2E, N and input tokens, never TTFT, TTFO, TPOT or gaps
//! (docs/measurement.md, "Non-streaming requests"). What the prober knows beside the events (what
//! the request asked for, the connection's phases, the kernel's send and read instants, what the
//! caller saw around the probe) comes in as one [`RequestFacts`] at [`Measurement::finish_with`],
//! so a result is whole where it is made and nothing completes it afterwards.

pub mod answered;

use crate::outcome::{ErrorType, Flag, classify_error_object};
use crate::protocol::{EventMeaning, ServerTimings, ToolCall};
use serde::Serialize;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Connection set-up of one probe, in seconds; `None` where the phase did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Phases {
    /// The probe used a pooled connection (no set-up at all).
    pub reused: bool,
    /// DNS resolution (absent for IP literals).
    pub resolve_s: Option<f64>,
    /// TCP connect (to the target, or to the proxy).
    pub connect_s: Option<f64>,
    /// TLS handshake.
    pub tls_s: Option<f64>,
}

/// Token-bearing events that all complete within this span are a burst (docs/measurement.md).
pub const BURST_WINDOW: Duration = Duration::from_millis(1);

/// Usage counts above this are not believed (docs/measurement.md `malformed`).
pub const MAX_PLAUSIBLE_TOKENS: u64 = 1_000_000_000;

/// Largest amount of answer text kept for the report and the content check (bytes).
const MAX_TEXT: usize = 64 * 1024;

/// The most tool calls of one answer kept (a session resends them).
pub const MAX_TOOL_CALLS: usize = 16;

/// Inter-chunk gaps kept per probe (256 KiB); later gaps are counted in
/// [`ProbeResult::chunk_gaps_dropped`], so an endless fast stream cannot grow memory.
pub const MAX_CHUNK_GAPS: usize = 32 * 1024;

/// Where the output token count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// The server's `usage` (OpenAI `completion_tokens`, Anthropic/Responses `output_tokens`).
    Usage,
    /// The number of token-bearing events (no usage arrived).
    Events,
    /// A non-streamed answer without usage: N is unknown (reported `null`, counted as 0).
    Unknown,
}

/// What the fold tells the reader after an event: read on, or stop (a stream's control flow).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep reading.
    Continue,
    /// The stream is over for measurement purposes (terminal marker or in-stream error): stop.
    Stop,
}

/// What the prober knows of one request beside its events, given to [`Measurement::finish_with`]
/// so that the result is whole where it is made: what the request asked for, how its bytes went
/// (the connection's set-up, the reads' and the send's kernel instants, a failure that was the
/// exporter's own) and what the caller saw around it (`serve`'s target gate). Every field is
/// optional or false: a fold given none of them ([`Measurement::finish`]) states none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestFacts {
    /// The `x-request-id` the request was sent with (`bench`).
    pub request_id: Option<String>,
    /// The input length the workload asked for (docs/measurement.md, "Input and output
    /// lengths"); a success whose server counted an input off it is flagged `input_length_off`.
    pub requested_input_tokens: Option<u64>,
    /// The output length the workload asked for, or the cap asked for exactly.
    pub requested_output_tokens: Option<u64>,
    /// The conversation turn, from 1.
    pub turn: Option<u32>,
    /// The agent session the request belongs to (`session:` prompts).
    pub session: Option<u64>,
    /// Its branch within that session: 0 the main agent, k the k-th sub-agent.
    pub branch: Option<u32>,
    /// The connection's set-up phases (a request that was sent).
    pub phases: Option<Phases>,
    /// How much later than their kernel instants the response's reads were made (kept when a
    /// response head came).
    pub read_lag: Option<ReadLag>,
    /// The kernel's transmit instant of the request's last byte, between the start instant and
    /// the response head: the send lag, and the wire TTFT of a success.
    pub sent_at: Option<Instant>,
    /// The exporter itself could not make the request (it is out of file descriptors).
    pub exporter_fault: bool,
    /// Another probe of the target was in flight at some point of this one (`concurrent_probe`).
    pub overlapped: bool,
    /// The target had had no probe for its `cold_after` before this one (`cold_start`).
    pub cold: bool,
    /// The model asked for and how the answer is held to it: another model answering is
    /// flagged `model_mismatch` (or fails, with `model_mismatch: fail`).
    pub model: Option<answered::ModelCheck>,
    /// What the usage audit of a successful answer needs (`None`: `usage_audit: {count: off}`).
    pub audit: Option<answered::AuditFacts>,
    /// A deterministic prompt's earlier answers (`drift: true`): a successful answer is hashed
    /// and compared with them (`answer_drift`).
    pub drift: Option<answered::AnswerHistory>,
}

/// A failure candidate: its type, instant and a human detail.
#[derive(Debug, Clone)]
struct Failure {
    kind: ErrorType,
    at: Instant,
    detail: String,
}

/// The result of one probe. Durations are seconds (`f64`); absent values are `None`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeResult {
    /// `None` on success, else the one error type (docs/measurement.md precedence).
    pub error_type: Option<ErrorType>,
    /// Human explanation of the failure (server message, which deadline, ...); no secrets.
    pub error_detail: Option<String>,
    /// HTTP status, when a response head arrived.
    pub http_status: Option<u16>,
    /// TTFB: `t_headers - t0`.
    pub ttfb_s: Option<f64>,
    /// TTFT: `t_first - t0` (successful probes only).
    pub ttft_s: Option<f64>,
    /// TTFO: `t_first_output - t0` (successful probes with visible answer text only).
    pub ttfo_s: Option<f64>,
    /// E2E: `t_end - t0` (successful probes only).
    pub e2e_s: Option<f64>,
    /// `t0` to the failure instant (failed probes only).
    pub failure_s: Option<f64>,
    /// `t_last - t0`, successful probes only (for the phase breakdown).
    pub last_token_s: Option<f64>,
    /// N: output tokens.
    pub output_tokens: u64,
    /// Where N came from.
    pub token_source: TokenSource,
    /// Input tokens when the server reported them: the whole input, cached tokens included
    /// (Anthropic's three input counts added up; docs/measurement.md, "Cached and reasoning
    /// tokens").
    pub input_tokens: Option<u64>,
    /// Of the input tokens, those the server's prompt cache served, when it said (successes only,
    /// ruling 10).
    pub cached_input_tokens: Option<u64>,
    /// Of the output tokens, the reasoning tokens, when the server said (successes only).
    pub reasoning_tokens: Option<u64>,
    /// The model that answered, as the answer names it (the first event that names one), cut
    /// and cleaned by [`crate::protocol::identity_value`]; failures keep it too.
    pub served_model: Option<String>,
    /// OpenAI's `system_fingerprint` (the first event that has one).
    pub system_fingerprint: Option<String>,
    /// The answer's own id (OpenAI's chunk `id`, the Anthropic message's, the Responses
    /// `response`'s; the first event that has one).
    pub response_id: Option<String>,
    /// The request id the server's answer head carries (`x-request-id`, `request-id`, ...:
    /// [`crate::probe`] reads it), whatever the outcome.
    pub server_request_id: Option<String>,
    /// TPOT: `(t_last - t_first) / (N - 1)`.
    pub tpot_s: Option<f64>,
    /// Decode tokens/s: `(N - 1) / (t_last - t_first)`.
    pub decode_tokens_per_s: Option<f64>,
    /// Gaps between consecutive token-bearing events, seconds (the first [`MAX_CHUNK_GAPS`]).
    pub chunk_gaps_s: Vec<f64>,
    /// Gaps not kept in `chunk_gaps_s` because it was full.
    pub chunk_gaps_dropped: u64,
    /// Number of token-bearing events.
    pub token_events: u64,
    /// Anomaly flags.
    pub flags: BTreeSet<Flag>,
    /// The wait a 429 (or other error) asked for.
    pub retry_after_s: Option<f64>,
    /// The quotas the answer's rate-limit headers stated (empty when it sent none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rate_limits: Vec<crate::ratelimit::QuotaState>,
    /// llama.cpp's own timings, when sent.
    pub server_timings: Option<ServerTimings>,
    /// Visible answer text (first 64 KiB).
    pub text: String,
    /// Connection set-up phases, when known (a [`RequestFacts`] fact: the prober times them).
    pub phases: Option<Phases>,
    /// How much later than their kernel receive instant the response's bytes were read, when a
    /// response head came (a [`RequestFacts`] fact: the prober stamps the reads).
    pub read_lag: Option<ReadLag>,
    /// Send lag: from the start instant to the kernel's transmit instant of the request's last
    /// byte, when the kernel stamped it (from [`RequestFacts::sent_at`]). Part of
    /// every latency counted from the start instant; the wire's figures leave it out.
    pub send_lag_s: Option<f64>,
    /// Wire TTFT: from the request's last byte leaving to the first token's bytes arriving, both
    /// kernel instants (`ttft_s - send_lag_s`; successful probes with a send stamp only).
    pub wire_ttft_s: Option<f64>,
    /// The first token's event and the event after it arrived at one instant: one read returned
    /// both. Either the server sent them together (the instant is exact) or the client read late
    /// and the kernel stamped the read with its last packet's arrival, so TTFT ends late by up to
    /// the gap between them (docs/measurement.md, "Clock and instants").
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub first_token_shared_read: bool,
    /// The exporter itself could not make the request (it is out of file descriptors): not the
    /// target's failure (a [`RequestFacts`] fact: the prober sees the typed error).
    pub exporter_fault: bool,
    /// The request streamed (`false`: the whole answer was asked for at once).
    pub stream: bool,
    /// The input length the workload asked for (a [`RequestFacts`] fact; docs/measurement.md,
    /// "Input and output lengths").
    pub requested_input_tokens: Option<u64>,
    /// The `x-request-id` the request was sent with (`bench`), if any.
    pub request_id: Option<String>,
    /// The output length the workload asked for (a [`RequestFacts`] fact).
    pub requested_output_tokens: Option<u64>,
    /// The conversation turn, from 1 (a [`RequestFacts`] fact; `None` outside conversations).
    pub turn: Option<u32>,
    /// The usage audit of a successful answer (docs/measurement.md, "Usage audit"); absent for
    /// failures and with `usage_audit: {count: off}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_audit: Option<answered::UsageAudit>,
    /// The prompt's content check (`expect:`): passed, failed (`validation_failed`), or absent
    /// when there is none or the answer failed before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect_passed: Option<bool>,
    /// A deterministic prompt's (`drift: true`) successful answer: the hash of its text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer_hash: Option<String>,
    /// That answer changed from the one compared with (`answer_drift`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<answered::Drift>,
    /// The answer's tool calls, as streamed (the first [`MAX_TOOL_CALLS`], their arguments
    /// within the answer text's bound): a session appends them to its context.
    #[serde(skip)]
    pub tool_calls: Vec<ToolCall>,
    /// The session it was a turn of, by its number in the run (set by the prober; `None`
    /// outside sessions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    /// Of that session, the branch: 0 the session itself, 1, 2, ... its sub-agents.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<u32>,
}

impl ProbeResult {
    /// True when the probe succeeded.
    pub fn success(&self) -> bool {
        self.error_type.is_none()
    }
}

/// The fold over one probe's observations.
#[derive(Debug)]
pub struct Measurement {
    t0: Instant,
    t_headers: Option<Instant>,
    status: Option<u16>,
    /// Events that were not keep-alives (ruling 1: with none, a 2xx body is `empty_response`).
    events: u64,
    /// First and last token-bearing event, and how many there were.
    first_token: Option<Instant>,
    /// The instant of the first event after the first token's.
    after_first_token: Option<Instant>,
    last_token: Option<Instant>,
    token_events: u64,
    /// Gaps between consecutive token-bearing events, bounded by [`MAX_CHUNK_GAPS`].
    gaps: Vec<Duration>,
    gaps_dropped: u64,
    first_output: Option<Instant>,
    usage_output: Option<u64>,
    usage_input: Option<u64>,
    usage_input_uncached: Option<u64>,
    usage_cached_input: Option<u64>,
    usage_cache_creation: Option<u64>,
    usage_reasoning: Option<u64>,
    served_model: Option<String>,
    system_fingerprint: Option<String>,
    response_id: Option<String>,
    server_request_id: Option<String>,
    /// A finish reason was seen (a proper end, with or without the end marker).
    finish_reason: bool,
    terminal_at: Option<Instant>,
    eof_at: Option<Instant>,
    failure: Option<Failure>,
    flags: BTreeSet<Flag>,
    retry_after: Option<Duration>,
    rate_limits: Vec<crate::ratelimit::QuotaState>,
    server_timings: Option<ServerTimings>,
    text: String,
    /// The text of the other channels (reasoning, tool calls), bounded like `text`.
    hidden_text: String,
    /// Some text was not kept (past [`MAX_TEXT`]): the streamed text cannot be counted whole.
    text_cut: bool,
    /// The content check's outcome, when one ran.
    expect: Option<bool>,
    /// Tool calls by their index in the answer, bounded by [`MAX_TOOL_CALLS`].
    tool_calls: Vec<(u64, ToolCall)>,
    /// Bytes of tool-call arguments kept (bounded like the text).
    tool_bytes: usize,
    /// The answer is not streamed: one whole body, no per-token instants.
    whole: bool,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Measurement {
    /// Starts a probe whose request is handed to the HTTP client at `t0`.
    pub fn new(t0: Instant) -> Self {
        Measurement {
            t0,
            t_headers: None,
            status: None,
            events: 0,
            first_token: None,
            after_first_token: None,
            last_token: None,
            token_events: 0,
            gaps: Vec::new(),
            gaps_dropped: 0,
            first_output: None,
            usage_output: None,
            usage_input: None,
            usage_input_uncached: None,
            usage_cached_input: None,
            usage_cache_creation: None,
            usage_reasoning: None,
            served_model: None,
            system_fingerprint: None,
            response_id: None,
            server_request_id: None,
            finish_reason: false,
            terminal_at: None,
            eof_at: None,
            failure: None,
            flags: BTreeSet::new(),
            retry_after: None,
            rate_limits: Vec::new(),
            server_timings: None,
            text: String::new(),
            hidden_text: String::new(),
            text_cut: false,
            expect: None,
            tool_calls: Vec::new(),
            tool_bytes: 0,
            whole: false,
        }
    }

    /// Marks this probe's request as non-streaming: the answer comes whole ([`Self::answer`]),
    /// and TTFT, TTFO, TPOT, decode tokens/s and gaps are not observed.
    pub fn non_stream(&mut self) {
        self.whole = true;
    }

    /// Folds a whole non-streamed answer (see [`crate::protocol::Api::interpret_answer`]) whose
    /// body was complete at `t`: the one event of the probe, its end marker included.
    pub fn answer(&mut self, t: Instant, mut m: EventMeaning) {
        self.whole = true;
        m.terminal = true;
        m.keepalive = false;
        // One event may carry the whole answer: keep only what a stream would have kept.
        for text in [&mut m.text, &mut m.hidden_text] {
            if text.len() > MAX_TEXT {
                let mut cut = MAX_TEXT;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                self.text_cut = true;
            }
        }
        self.event(t, &m);
    }

    /// Output tokens so far: the server's usage when reported, else token-bearing events.
    pub fn output_tokens(&self) -> u64 {
        self.usage_output.unwrap_or(self.token_events)
    }

    /// Applies a content check to a probe that would otherwise succeed: `check` gets the visible
    /// answer and N (`None` when unknown: a whole answer without usage) and returns why it
    /// failed, if it did (docs/measurement.md: `validation_failed`).
    pub fn validate(&mut self, check: impl FnOnce(&str, Option<u64>) -> Option<String>) {
        if self.failure.is_some() || !self.proper_end() || self.token_events == 0 {
            return;
        }
        let n = if self.whole && self.usage_output.is_none() {
            None
        } else {
            Some(self.output_tokens())
        };
        let failed = check(&self.text, n);
        self.expect = Some(failed.is_none());
        if let Some(why) = failed {
            let at = self.terminal_at.or(self.eof_at).unwrap_or(self.t0);
            self.fail(ErrorType::ValidationFailed, at, why);
        }
    }

    /// The streamed text of every channel (the visible answer, then reasoning and tool calls),
    /// for a tokenizer to count; `None` when some of it was not kept (past 64 KiB).
    pub fn streamed_text(&self) -> Option<(&str, &str)> {
        (!self.text_cut).then_some((self.text.as_str(), self.hidden_text.as_str()))
    }

    /// True when an answer stated its output tokens in a usage object.
    pub fn usage_stated(&self) -> bool {
        self.usage_output.is_some()
    }

    /// `t0` of this probe.
    pub fn t0(&self) -> Instant {
        self.t0
    }

    /// The response head arrived at `t` with `status`.
    pub fn headers(&mut self, t: Instant, status: u16) {
        self.t_headers = Some(t);
        self.status = Some(status);
    }

    /// Records an anomaly flag.
    pub fn flag(&mut self, flag: Flag) {
        self.flags.insert(flag);
    }

    /// Records the wait the server asked for.
    pub fn retry_after(&mut self, wait: Duration) {
        self.retry_after = Some(wait);
    }

    /// The quotas the answer's head stated (its rate-limit headers).
    pub fn rate_limits(&mut self, readings: Vec<crate::ratelimit::QuotaState>) {
        self.rate_limits = readings;
    }

    /// The request id the answer's head carried (already read by
    /// [`crate::protocol::identity_value`]).
    pub fn server_request_id(&mut self, id: Option<String>) {
        self.server_request_id = id;
    }

    /// True once an event named the served model: the identity OpenAI chunks repeat need not
    /// be read again ([`crate::protocol::Api::interpret_without_identity`]).
    pub fn identity_known(&self) -> bool {
        self.served_model.is_some()
    }

    /// True once a token-bearing event has been seen (the idle deadline applies from then on).
    pub fn first_token_seen(&self) -> bool {
        self.token_events > 0
    }

    /// True once an event other than a keep-alive has been folded.
    pub fn events_seen(&self) -> bool {
        self.events > 0
    }

    /// Records a failure candidate at `t`. When several are recorded, the one first in
    /// docs/measurement.md's order wins (and, for equal types, the earliest).
    pub fn fail(&mut self, kind: ErrorType, t: Instant, detail: impl Into<String>) {
        let better = match &self.failure {
            None => true,
            Some(f) => kind < f.kind,
        };
        if better {
            self.failure = Some(Failure {
                kind,
                at: t,
                detail: detail.into(),
            });
        }
    }

    /// Folds one complete event that arrived (its terminating blank line was read) at `t`.
    pub fn event(&mut self, t: Instant, m: &EventMeaning) -> Flow {
        if m.keepalive {
            // Empty or whitespace-only data: a keep-alive, like a comment (ruling 11).
            return Flow::Continue;
        }
        self.events += 1;
        if self.first_token.is_some() && self.after_first_token.is_none() {
            self.after_first_token = Some(t);
        }
        if [
            m.usage_output,
            m.usage_input,
            m.usage_input_uncached,
            m.usage_cached_input,
            m.usage_cache_creation,
            m.usage_reasoning,
        ]
        .iter()
        .flatten()
        .any(|n| *n > MAX_PLAUSIBLE_TOKENS)
        {
            // A counter fed with 2^64 - 1 would wrap: such a usage object is not of the protocol's shape.
            self.fail(
                ErrorType::Malformed,
                t,
                "implausible usage token count (over 10^9)",
            );
            return Flow::Continue;
        }
        // The answer's identity: the first value of each (an error event may carry one too).
        for (kept, seen) in [
            (&mut self.served_model, &m.served_model),
            (&mut self.system_fingerprint, &m.system_fingerprint),
            (&mut self.response_id, &m.response_id),
        ] {
            if kept.is_none() {
                kept.clone_from(seen);
            }
        }
        if let Some(e) = &m.error {
            let kind = classify_error_object(e);
            if kind == ErrorType::RateLimited && self.retry_after.is_none() {
                self.retry_after = e.retry_delay;
            }
            self.fail(kind, t, format!("in-stream error: {}", e.summary()));
            return Flow::Stop;
        }
        if m.token {
            if let Some(prev) = self.last_token {
                if self.gaps.len() < MAX_CHUNK_GAPS {
                    self.gaps.push(t.duration_since(prev));
                } else {
                    self.gaps_dropped += 1;
                }
            }
            self.first_token.get_or_insert(t);
            self.last_token = Some(t);
            self.token_events += 1;
            if m.output && self.first_output.is_none() {
                self.first_output = Some(t);
            }
        }
        for (kept, seen) in [
            (&mut self.text, &m.text),
            (&mut self.hidden_text, &m.hidden_text),
        ] {
            if seen.is_empty() {
                continue;
            }
            if kept.len() < MAX_TEXT {
                kept.push_str(seen);
            } else {
                self.text_cut = true;
            }
        }
        for part in &m.tool_calls {
            self.tool_call(part);
        }
        if m.usage_output.is_some() {
            self.usage_output = m.usage_output;
        }
        // Ruling 21, count by count: the last usage object that carries one wins.
        for (kept, seen) in [
            (&mut self.usage_input, m.usage_input),
            (&mut self.usage_input_uncached, m.usage_input_uncached),
            (&mut self.usage_cached_input, m.usage_cached_input),
            (&mut self.usage_cache_creation, m.usage_cache_creation),
            (&mut self.usage_reasoning, m.usage_reasoning),
        ] {
            if seen.is_some() {
                *kept = seen;
            }
        }
        if m.server_timings.is_some() {
            self.server_timings = m.server_timings;
        }
        self.finish_reason |= m.finish;
        if m.terminal {
            self.terminal_at = Some(t);
            return Flow::Stop;
        }
        Flow::Continue
    }

    /// Holds the served model to the one asked for (docs/measurement.md, "What answered"):
    /// another is flagged, and with `model_mismatch: fail` a failure at `at`, after the failures
    /// of the stream itself, which come first in the order.
    fn judge_model(&mut self, want: Option<&answered::ModelCheck>, at: Instant) {
        let (Some(want), Some(served)) = (want, &self.served_model) else {
            return;
        };
        if answered::same_model(&want.requested, served, &want.aliases) {
            return;
        }
        self.flags.insert(Flag::ModelMismatch);
        if want.fail {
            let why = format!(
                "the answer came from model {served:?}, not the {:?} asked for (model_mismatch: fail)",
                want.requested
            );
            self.fail(ErrorType::ModelMismatch, at, why);
        }
    }

    /// Folds a part of a tool call: its id and name the first time they come, its arguments
    /// appended (within [`MAX_TOOL_CALLS`] calls and [`MAX_TEXT`] bytes of arguments).
    fn tool_call(&mut self, part: &crate::protocol::ToolCallPart) {
        let i = match self.tool_calls.iter().position(|(k, _)| *k == part.index) {
            Some(i) => i,
            None if self.tool_calls.len() < MAX_TOOL_CALLS => {
                self.tool_calls.push((part.index, ToolCall::default()));
                self.tool_calls.len() - 1
            }
            None => return,
        };
        let call = &mut self.tool_calls[i].1;
        for (kept, seen) in [(&mut call.id, &part.id), (&mut call.name, &part.name)] {
            if let Some(v) = seen
                && kept.is_empty()
            {
                kept.clone_from(v);
            }
        }
        if self.tool_bytes + part.arguments.len() <= MAX_TEXT {
            call.arguments.push_str(&part.arguments);
            self.tool_bytes += part.arguments.len();
        }
    }

    /// The whole input: the server's count (OpenAI's `prompt_tokens` counts cached tokens
    /// already), or Anthropic's three counts added up (the last of each: they may come in
    /// different events), an absent cache count adding nothing.
    fn input_tokens(&self) -> Option<u64> {
        self.usage_input.or_else(|| {
            self.usage_input_uncached.map(|n| {
                n.saturating_add(self.usage_cached_input.unwrap_or(0))
                    .saturating_add(self.usage_cache_creation.unwrap_or(0))
            })
        })
    }

    /// The connection ended (EOF) at `t`.
    pub fn eof(&mut self, t: Instant) {
        self.eof_at = Some(t);
    }

    /// True when the stream has ended properly so far (finish reason or terminal marker).
    pub fn proper_end(&self) -> bool {
        self.finish_reason || self.terminal_at.is_some()
    }

    /// Visible answer text received so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Passes the failure's detail, if any, through `shown` (the prober hides its secrets in a
    /// server's message and cuts it for display) before the result is made.
    pub fn show_detail(&mut self, shown: impl FnOnce(&str) -> String) {
        if let Some(f) = self.failure.as_mut() {
            f.detail = shown(&f.detail);
        }
    }

    /// Ends the fold of a probe known by its events alone: [`Self::finish_with`] no other fact.
    pub fn finish(self) -> ProbeResult {
        self.finish_with(RequestFacts::default())
    }

    /// Ends the fold and computes the whole result: the events' figures and the request's
    /// `facts` (what it asked for, how its bytes went, what was around it), each figure that
    /// derives from both (the wire TTFT, the `input_length_off`, `concurrent_probe` and
    /// `cold_start` flags) computed here.
    pub fn finish_with(mut self, facts: RequestFacts) -> ProbeResult {
        let end = self.terminal_at.or(self.eof_at);
        if let (Some(at), Some(_)) = (self.eof_at, &self.failure)
            && self.events > 0
            && !self.proper_end()
        {
            // The body ended early after events although something failed already: `truncated`
            // applies too, and the precedence decides (ruling 17: a body that ends inside a
            // malformed fragment is `truncated`, which comes before `malformed`). Ruling 26: after
            // a malformed event the failure instant stays that event's.
            let at = match &self.failure {
                Some(f) if f.kind == ErrorType::Malformed => f.at,
                _ => at,
            };
            self.fail(
                ErrorType::Truncated,
                at,
                "the stream ended without a finish reason or end marker",
            );
        }
        if self.failure.is_none() {
            let at = end.unwrap_or(self.t0);
            if !self.proper_end() && self.events == 0 {
                // Ruling 1: nothing was generated (zero bytes, or only comments and keep-alives).
                self.fail(
                    ErrorType::EmptyResponse,
                    at,
                    "the body ended before any event",
                );
            } else if !self.proper_end() {
                self.fail(
                    ErrorType::Truncated,
                    at,
                    "the stream ended without a finish reason or end marker",
                );
            } else if self.token_events == 0 {
                let what = if self.whole {
                    "the answer carried no output"
                } else {
                    "the stream ended properly but carried no token"
                };
                self.fail(ErrorType::EmptyResponse, at, what);
            }
        }
        self.judge_model(facts.model.as_ref(), end.unwrap_or(self.t0));
        let n_events = self.token_events;
        let (output_tokens, token_source) = match self.usage_output {
            Some(n) => (n, TokenSource::Usage),
            None if self.whole => (0, TokenSource::Unknown),
            None => (n_events, TokenSource::Events),
        };
        let first = self.first_token;
        let last = self.last_token;
        let burst = match (first, last) {
            (Some(f), Some(l)) => n_events >= 2 && l.duration_since(f) <= BURST_WINDOW,
            _ => false,
        };
        if burst {
            self.flags.insert(Flag::BurstDelivery);
        }
        if facts.overlapped {
            self.flags.insert(Flag::ConcurrentProbe);
        }
        if facts.cold {
            self.flags.insert(Flag::ColdStart);
        }
        let since = |t: Instant| secs(t.duration_since(self.t0));
        let send_lag_s = facts.sent_at.map(since);
        let mut r = ProbeResult {
            error_type: None,
            error_detail: None,
            http_status: self.status,
            ttfb_s: self.t_headers.map(since),
            ttft_s: None,
            ttfo_s: None,
            e2e_s: None,
            failure_s: None,
            last_token_s: None,
            output_tokens,
            token_source,
            input_tokens: self.input_tokens(),
            cached_input_tokens: self.usage_cached_input,
            reasoning_tokens: self.usage_reasoning,
            served_model: self.served_model,
            system_fingerprint: self.system_fingerprint,
            response_id: self.response_id,
            server_request_id: self.server_request_id,
            tpot_s: None,
            decode_tokens_per_s: None,
            chunk_gaps_s: Vec::new(),
            chunk_gaps_dropped: 0,
            token_events: n_events,
            flags: self.flags,
            retry_after_s: self.retry_after.map(secs),
            rate_limits: self.rate_limits,
            server_timings: self.server_timings,
            text: self.text,
            phases: facts.phases,
            // A read lag is of a response: none when no head came.
            read_lag: facts.read_lag.filter(|_| self.status.is_some()),
            send_lag_s,
            wire_ttft_s: None,
            first_token_shared_read: first.is_some() && first == self.after_first_token,
            exporter_fault: facts.exporter_fault,
            stream: !self.whole,
            requested_input_tokens: facts.requested_input_tokens,
            request_id: facts.request_id,
            requested_output_tokens: facts.requested_output_tokens,
            turn: facts.turn,
            usage_audit: None,
            expect_passed: self.expect,
            answer_hash: None,
            drift: None,
            tool_calls: self.tool_calls.into_iter().map(|(_, c)| c).collect(),
            session: facts.session,
            branch: facts.branch,
        };
        if let Some(f) = self.failure {
            r.error_type = Some(f.kind);
            r.error_detail = Some(f.detail);
            r.failure_s = Some(since(f.at));
            // Ruling 10: a failed probe reports no token counts.
            r.cached_input_tokens = None;
            r.reasoning_tokens = None;
            return r;
        }
        // A wait the head asked for belongs to a failed answer only (ruling 20).
        r.retry_after_s = None;
        let judged = (facts.audit.as_ref(), facts.drift.as_ref());
        judge_answer(&mut r, judged, &self.hidden_text);
        if let (Some(want), Some(got)) = (r.requested_input_tokens, r.input_tokens)
            && crate::workload::input_length_off(want, got)
        {
            r.flags.insert(Flag::InputLengthOff);
        }
        // Success: a proper end and at least one token, so `first`, `last` and `end` exist.
        let (Some(first), Some(last), Some(end)) = (first, last, end) else {
            return r;
        };
        r.e2e_s = Some(since(end));
        if self.whole {
            // One body, no per-token instants: TTFT, TTFO, TPOT, decode rate and gaps are absent.
            return r;
        }
        r.ttft_s = Some(since(first));
        // The wire's TTFT leaves the send lag out: from the last byte sent to the first token's.
        r.wire_ttft_s = send_lag_s.map(|lag| (since(first) - lag).max(0.0));
        r.ttfo_s = self.first_output.map(since);
        r.last_token_s = Some(since(last));
        let span = last.duration_since(first);
        // TPOT needs N >= 2 and a decode interval that the client could observe: not a burst, and
        // at least two distinct event instants (see docs/measurement.md; one event with usage N > 1
        // would otherwise give TPOT 0 and an infinite rate).
        if !burst && output_tokens >= 2 && !span.is_zero() {
            let tpot = secs(span) / (output_tokens - 1) as f64;
            r.tpot_s = Some(tpot);
            r.decode_tokens_per_s = Some((output_tokens - 1) as f64 / secs(span));
        }
        if !burst && !span.is_zero() {
            r.chunk_gaps_s = self.gaps.iter().copied().map(secs).collect();
            r.chunk_gaps_dropped = self.gaps_dropped;
        }
        r
    }
}

/// Judges a successful answer by what the prober knows (docs/measurement.md, "What answered"):
/// its usage audited against what it stated and streamed (`usage_mismatch`), and a
/// deterministic prompt's answer (its visible text and the `hidden` channels) hashed and compared
/// with the earlier ones (`answer_drift`).
fn judge_answer(
    r: &mut ProbeResult,
    (audit_facts, history): (
        Option<&answered::AuditFacts>,
        Option<&answered::AnswerHistory>,
    ),
    hidden: &str,
) {
    if let Some(a) = audit_facts {
        let stated = answered::Stated {
            output: (r.token_source == TokenSource::Usage).then_some(r.output_tokens),
            input: r.input_tokens,
            token_events: r.token_events,
            requested_input: r.requested_input_tokens,
            stream: r.stream,
        };
        let audit = answered::audit(&stated, a);
        if audit.mismatch() {
            r.flags.insert(Flag::UsageMismatch);
        }
        r.usage_audit = Some(audit);
    }
    if let Some(history) = history {
        let now = answered::KnownAnswer {
            served_model: r.served_model.clone(),
            system_fingerprint: r.system_fingerprint.clone(),
            hash: answered::answer_hash(&r.text, hidden),
        };
        r.drift = answered::drift(history, &now);
        if r.drift.is_some() {
            r.flags.insert(Flag::AnswerDrift);
        }
        r.answer_hash = Some(now.hash);
    }
}

/// How much later than the kernel received them a probe's bytes were read: the scheduling delay
/// that kernel stamps ([`crate::kstamp`]) take out of its instants (reported per bench level as
/// the kernel-vs-user difference). Plain data: the probe's reader fills it in.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, serde::Deserialize)]
pub struct ReadLag {
    /// At the first token-bearing event: how much earlier than the read its TTFT ends, seconds.
    pub first_token_s: Option<f64>,
    /// The largest over the probe's reads, seconds.
    pub max_s: f64,
    /// Reads of the response (head and body).
    pub reads: u64,
    /// Of them, reads the kernel did not stamp: their instant is the read's own.
    pub unstamped_reads: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, s: f64) -> Instant {
        t0 + Duration::from_secs_f64(s)
    }

    fn token(output: bool) -> EventMeaning {
        EventMeaning {
            token: true,
            output,
            ..EventMeaning::default()
        }
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn success_with_usage_follows_the_identities() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.headers(at(t0, 0.09), 200);
        m.event(at(t0, 0.09), &EventMeaning::default());
        for s in [0.30, 0.33, 0.36] {
            assert_eq!(m.event(at(t0, s), &token(true)), Flow::Continue);
        }
        m.event(
            at(t0, 0.39),
            &EventMeaning {
                finish: true,
                ..EventMeaning::default()
            },
        );
        m.event(
            at(t0, 0.392),
            &EventMeaning {
                usage_output: Some(5),
                usage_input: Some(24),
                ..EventMeaning::default()
            },
        );
        let stop = m.event(
            at(t0, 0.393),
            &EventMeaning {
                terminal: true,
                ..EventMeaning::default()
            },
        );
        assert_eq!(stop, Flow::Stop);
        let r = m.finish();
        assert!(r.success());
        assert!(close(r.ttfb_s, 0.09));
        assert!(close(r.ttft_s, 0.30));
        assert!(close(r.e2e_s, 0.393));
        assert_eq!((r.output_tokens, r.token_source), (5, TokenSource::Usage));
        assert!(close(r.tpot_s, 0.015));
        // TTFT + TPOT * (N - 1) = t_last - t0, and decode TPS * TPOT = 1.
        let lhs = r.ttft_s.unwrap() + r.tpot_s.unwrap() * 4.0;
        assert!((lhs - 0.36).abs() < 1e-9);
        assert!((r.decode_tokens_per_s.unwrap() * r.tpot_s.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(r.chunk_gaps_s.len(), 2);
    }

    #[test]
    fn reasoning_then_answer_sets_ttfo_later() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.event(at(t0, 0.3), &token(false));
        m.event(at(t0, 1.3), &token(true));
        m.event(
            at(t0, 1.4),
            &EventMeaning {
                terminal: true,
                ..EventMeaning::default()
            },
        );
        let r = m.finish();
        assert!(close(r.ttft_s, 0.3));
        assert!(close(r.ttfo_s, 1.3));
    }

    #[test]
    fn reasoning_only_has_no_ttfo() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.event(at(t0, 0.3), &token(false));
        m.event(
            at(t0, 0.4),
            &EventMeaning {
                finish: true,
                ..EventMeaning::default()
            },
        );
        m.eof(at(t0, 0.5));
        let r = m.finish();
        assert!(r.success());
        assert_eq!(r.ttfo_s, None);
        assert!(close(r.e2e_s, 0.5));
        assert_eq!(r.tpot_s, None, "N = 1 has no TPOT");
    }

    /// Ruling 26: a malformed event, then the close without a proper end: `truncated`, at the
    /// malformed event's instant. Ruling 20: a wait is reported for failures only.
    #[test]
    fn malformed_then_close_keeps_the_malformed_instant() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.retry_after(Duration::from_secs(7));
        m.event(at(t0, 0.2), &token(true));
        m.fail(ErrorType::Malformed, at(t0, 0.4), "data is not valid JSON");
        m.eof(at(t0, 0.6));
        let r = m.finish();
        assert_eq!(r.error_type, Some(ErrorType::Truncated));
        assert!(close(r.failure_s, 0.4), "{:?}", r.failure_s);
        assert_eq!(r.retry_after_s, Some(7.0));

        let mut m = Measurement::new(t0);
        m.retry_after(Duration::from_secs(7));
        m.event(at(t0, 0.2), &token(true));
        m.event(
            at(t0, 0.3),
            &EventMeaning {
                terminal: true,
                finish: true,
                ..EventMeaning::default()
            },
        );
        let r = m.finish();
        assert!(r.success());
        assert_eq!(r.retry_after_s, None);
    }

    #[test]
    fn truncated_empty_and_in_stream_error() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.event(at(t0, 0.3), &token(true));
        m.eof(at(t0, 0.5));
        let r = m.finish();
        assert_eq!(r.error_type, Some(ErrorType::Truncated));
        assert!(close(r.failure_s, 0.5));
        assert_eq!((r.ttft_s, r.e2e_s, r.tpot_s), (None, None, None));
        assert!(r.chunk_gaps_s.is_empty());

        let mut m = Measurement::new(t0);
        m.event(
            at(t0, 0.05),
            &EventMeaning {
                finish: true,
                ..EventMeaning::default()
            },
        );
        m.event(
            at(t0, 0.052),
            &EventMeaning {
                terminal: true,
                ..EventMeaning::default()
            },
        );
        let r = m.finish();
        assert_eq!(r.error_type, Some(ErrorType::EmptyResponse));
        assert!(close(r.failure_s, 0.052));
        assert_eq!(r.ttft_s, None);

        let mut m = Measurement::new(t0);
        m.event(at(t0, 0.5), &token(true));
        let err = EventMeaning {
            error: Some(crate::protocol::StreamError::default()),
            ..EventMeaning::default()
        };
        assert_eq!(m.event(at(t0, 1.2), &err), Flow::Stop);
        let r = m.finish();
        assert_eq!(r.error_type, Some(ErrorType::ServerError));
        assert!(close(r.failure_s, 1.2));
    }

    #[test]
    fn a_body_that_ends_before_any_event_is_empty_not_truncated() {
        // Ruling 1: zero bytes, or only keep-alives, is `empty_response`.
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.headers(at(t0, 0.01), 200);
        let keepalive = EventMeaning {
            keepalive: true,
            ..EventMeaning::default()
        };
        m.event(at(t0, 0.015), &keepalive);
        m.eof(at(t0, 0.02));
        let r = m.finish();
        assert_eq!(r.error_type, Some(ErrorType::EmptyResponse));
        assert!(close(r.failure_s, 0.02));
        // `truncated` needs at least one event before the early end (a role-only chunk here).
        let mut m = Measurement::new(t0);
        m.headers(at(t0, 0.01), 200);
        m.event(at(t0, 0.015), &EventMeaning::default());
        m.eof(at(t0, 0.02));
        assert_eq!(m.finish().error_type, Some(ErrorType::Truncated));
    }

    #[test]
    fn keepalives_are_neither_tokens_nor_gaps() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        let keepalive = EventMeaning {
            keepalive: true,
            token: true, // ignored: a keep-alive carries nothing
            ..EventMeaning::default()
        };
        m.event(at(t0, 0.1), &token(true));
        m.event(at(t0, 0.15), &keepalive);
        m.event(at(t0, 0.2), &token(true));
        m.event(
            at(t0, 0.3),
            &EventMeaning {
                terminal: true,
                ..EventMeaning::default()
            },
        );
        let r = m.finish();
        assert!(r.success());
        assert_eq!(r.output_tokens, 2);
        assert_eq!(r.chunk_gaps_s.len(), 1);
        assert!((r.chunk_gaps_s[0] - 0.1).abs() < 1e-9);
    }

    #[test]
    fn gaps_are_bounded_and_what_is_dropped_is_counted() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        let n = MAX_CHUNK_GAPS + 10;
        for i in 0..=n {
            m.event(
                t0 + Duration::from_micros(100 * i as u64 + 1000),
                &token(true),
            );
        }
        m.event(
            at(t0, 10.0),
            &EventMeaning {
                terminal: true,
                ..EventMeaning::default()
            },
        );
        let r = m.finish();
        assert!(r.success());
        assert_eq!(r.token_events, n as u64 + 1);
        assert_eq!(r.chunk_gaps_s.len(), MAX_CHUNK_GAPS);
        assert_eq!(r.chunk_gaps_dropped, 10);
        // TPOT still covers every token: (t_last - t_first) / (N - 1) = 100 us.
        assert!(close(r.tpot_s, 0.0001));
    }

    #[test]
    fn precedence_keeps_the_first_in_order() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.fail(ErrorType::Malformed, at(t0, 0.1), "x");
        m.fail(ErrorType::TimeoutIdle, at(t0, 0.2), "y");
        m.fail(ErrorType::EmptyResponse, at(t0, 0.3), "z");
        let r = m.finish();
        assert_eq!(r.error_type, Some(ErrorType::TimeoutIdle));
        assert!(close(r.failure_s, 0.2));
    }

    #[test]
    fn burst_hides_tpot_and_gaps() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        for _ in 0..3 {
            m.event(at(t0, 0.36), &token(true));
        }
        m.event(
            at(t0, 0.4),
            &EventMeaning {
                terminal: true,
                finish: true,
                ..EventMeaning::default()
            },
        );
        let r = m.finish();
        assert!(r.success());
        assert!(r.flags.contains(&Flag::BurstDelivery));
        assert_eq!((r.tpot_s, r.decode_tokens_per_s), (None, None));
        assert!(r.chunk_gaps_s.is_empty());
        assert_eq!(r.output_tokens, 3);
    }

    /// A first token that arrived at the instant of the event after it (one read returned both)
    /// is marked; one read apart from the next is not; a keep-alive is no event; a stream whose
    /// first token is its last event has nothing to share a read with.
    #[test]
    fn a_first_token_read_with_the_next_event_is_marked() {
        let done = EventMeaning {
            terminal: true,
            finish: true,
            ..EventMeaning::default()
        };
        let keepalive = EventMeaning {
            keepalive: true,
            ..EventMeaning::default()
        };
        let run = |events: &[(f64, &EventMeaning)]| {
            let t0 = Instant::now();
            let mut m = Measurement::new(t0);
            for (t, e) in events {
                m.event(at(t0, *t), e);
            }
            m.finish().first_token_shared_read
        };
        let (tok, role) = (token(true), EventMeaning::default());
        assert!(run(&[(0.05, &tok), (0.05, &tok), (0.06, &done)]));
        assert!(run(&[(0.01, &role), (0.05, &tok), (0.05, &done)]));
        assert!(!run(&[
            (0.05, &role),
            (0.06, &tok),
            (0.07, &tok),
            (0.07, &done)
        ]));
        assert!(!run(&[
            (0.05, &tok),
            (0.05, &keepalive),
            (0.06, &tok),
            (0.06, &done)
        ]));
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.event(at(t0, 0.05), &tok);
        m.eof(at(t0, 0.05));
        assert!(!m.finish().first_token_shared_read);
    }

    /// Issue 42 item 1: the cached and reasoning counts follow ruling 21 count by count (the
    /// last that says one wins; null erases nothing) and ruling 10 (a failure reports none);
    /// issue 43 item 1: the first event that names the answer's identity gives it, and a failed
    /// probe keeps it.
    #[test]
    fn usage_details_and_identity_of_a_stream() {
        let t0 = Instant::now();
        let named = |model: &str, id: &str| EventMeaning {
            served_model: Some(model.into()),
            response_id: Some(id.into()),
            ..EventMeaning::default()
        };
        let run = |fail: bool| {
            let mut m = Measurement::new(t0);
            m.server_request_id(Some("req-1".into()));
            assert!(!m.identity_known());
            m.event(at(t0, 0.1), &named("m-2024", "chatcmpl-1"));
            assert!(m.identity_known());
            m.event(at(t0, 0.2), &token(true));
            m.event(at(t0, 0.3), &named("other", "chatcmpl-2"));
            m.event(
                at(t0, 0.4),
                &EventMeaning {
                    usage_input: Some(600),
                    usage_cached_input: Some(512),
                    usage_reasoning: Some(1),
                    usage_output: Some(2),
                    ..EventMeaning::default()
                },
            );
            // A repeated usage chunk without details erases nothing.
            m.event(
                at(t0, 0.5),
                &EventMeaning {
                    usage_input: Some(600),
                    usage_output: Some(2),
                    finish: true,
                    ..EventMeaning::default()
                },
            );
            if fail {
                m.fail(ErrorType::ValidationFailed, at(t0, 0.6), "no");
            }
            m.eof(at(t0, 0.6));
            m.finish()
        };
        let r = run(false);
        assert!(r.success());
        assert_eq!(
            (r.input_tokens, r.cached_input_tokens, r.reasoning_tokens),
            (Some(600), Some(512), Some(1))
        );
        assert_eq!(
            (
                r.served_model.as_deref(),
                r.response_id.as_deref(),
                r.server_request_id.as_deref()
            ),
            (Some("m-2024"), Some("chatcmpl-1"), Some("req-1")),
            "the first event that named them"
        );
        let r = run(true);
        assert_eq!(r.error_type, Some(ErrorType::ValidationFailed));
        assert_eq!((r.cached_input_tokens, r.reasoning_tokens), (None, None));
        assert_eq!(r.served_model.as_deref(), Some("m-2024"), "kept on failure");
        assert_eq!(r.server_request_id.as_deref(), Some("req-1"));
    }

    /// Anthropic's input counts leave the cache out: the whole input is the uncached, read and
    /// written counts added up, also when they come in different events (the last of each).
    #[test]
    fn anthropic_input_is_the_three_counts_added_up() {
        let t0 = Instant::now();
        let usage = |uncached, read, created, out| EventMeaning {
            usage_input_uncached: uncached,
            usage_cached_input: read,
            usage_cache_creation: created,
            usage_output: out,
            ..EventMeaning::default()
        };
        let mut m = Measurement::new(t0);
        m.event(
            at(t0, 0.1),
            &usage(Some(12), Some(2048), Some(100), Some(1)),
        );
        m.event(at(t0, 0.2), &token(true));
        m.event(at(t0, 0.3), &usage(None, None, None, Some(40)));
        m.event(
            at(t0, 0.4),
            &EventMeaning {
                terminal: true,
                finish: true,
                ..EventMeaning::default()
            },
        );
        let r = m.finish();
        assert_eq!(
            (r.input_tokens, r.cached_input_tokens, r.output_tokens),
            (Some(2160), Some(2048), 40)
        );
        // Without cache counts the input is Anthropic's own count; the cached count is unknown.
        let mut m = Measurement::new(t0);
        m.event(at(t0, 0.1), &usage(Some(25), None, None, Some(1)));
        m.event(at(t0, 0.2), &token(true));
        m.event(
            at(t0, 0.3),
            &EventMeaning {
                terminal: true,
                finish: true,
                ..EventMeaning::default()
            },
        );
        let r = m.finish();
        assert_eq!((r.input_tokens, r.cached_input_tokens), (Some(25), None));
    }

    #[test]
    fn implausible_usage_is_malformed() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.event(at(t0, 0.2), &token(true));
        m.event(
            at(t0, 0.3),
            &EventMeaning {
                usage_output: Some(u64::MAX),
                terminal: true,
                ..EventMeaning::default()
            },
        );
        assert_eq!(m.finish().error_type, Some(ErrorType::Malformed));
        // A detail count too.
        let mut m = Measurement::new(t0);
        m.event(at(t0, 0.2), &token(true));
        m.event(
            at(t0, 0.3),
            &EventMeaning {
                usage_cached_input: Some(u64::MAX),
                terminal: true,
                ..EventMeaning::default()
            },
        );
        assert_eq!(m.finish().error_type, Some(ErrorType::Malformed));
    }

    #[test]
    fn single_event_with_usage_has_no_infinite_rate() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.event(at(t0, 0.2), &token(true));
        m.event(
            at(t0, 0.3),
            &EventMeaning {
                usage_output: Some(7),
                terminal: true,
                ..EventMeaning::default()
            },
        );
        let r = m.finish();
        assert!(r.success());
        assert_eq!(r.output_tokens, 7);
        assert_eq!(r.tpot_s, None);
        assert_eq!(r.decode_tokens_per_s, None);
    }

    #[test]
    fn a_whole_answer_has_e2e_and_n_but_no_per_token_numbers() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.non_stream();
        m.headers(at(t0, 0.8), 200);
        m.eof(at(t0, 0.81));
        m.answer(
            at(t0, 0.81),
            EventMeaning {
                token: true,
                output: true,
                text: "Hello".into(),
                finish: true,
                usage_output: Some(64),
                usage_input: Some(31),
                ..EventMeaning::default()
            },
        );
        let r = m.finish();
        assert!(r.success() && !r.stream);
        assert!(close(r.e2e_s, 0.81) && close(r.ttfb_s, 0.8));
        assert_eq!((r.output_tokens, r.token_source), (64, TokenSource::Usage));
        assert_eq!(r.input_tokens, Some(31));
        assert_eq!(
            (
                r.ttft_s,
                r.ttfo_s,
                r.tpot_s,
                r.decode_tokens_per_s,
                r.last_token_s
            ),
            (None, None, None, None, None),
            "absent, never 0"
        );
        assert!(r.chunk_gaps_s.is_empty() && r.flags.is_empty());
        assert_eq!(r.text, "Hello");
    }

    #[test]
    fn a_whole_answers_text_is_bounded_like_a_streams() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.non_stream();
        m.answer(
            at(t0, 0.1),
            EventMeaning {
                token: true,
                output: true,
                text: "é".repeat(MAX_TEXT),
                usage_output: Some(1),
                ..EventMeaning::default()
            },
        );
        let r = m.finish();
        assert!(r.success());
        assert!(
            r.text.len() <= MAX_TEXT && r.text.len() > MAX_TEXT - 4,
            "{}",
            r.text.len()
        );
    }

    #[test]
    fn a_whole_answer_without_usage_or_output() {
        let t0 = Instant::now();
        let answer = |m: EventMeaning| {
            let mut x = Measurement::new(t0);
            x.non_stream();
            x.answer(at(t0, 0.5), m);
            x.finish()
        };
        // No usage: N is unknown, not 1 (the one "event") and not a guess.
        let r = answer(EventMeaning {
            token: true,
            output: true,
            ..EventMeaning::default()
        });
        assert!(r.success());
        assert_eq!((r.output_tokens, r.token_source), (0, TokenSource::Unknown));
        // Nothing generated: empty_response, as a stream that ended properly without a token.
        let r = answer(EventMeaning {
            finish: true,
            usage_output: Some(0),
            ..EventMeaning::default()
        });
        assert_eq!(r.error_type, Some(ErrorType::EmptyResponse));
        assert!(close(r.failure_s, 0.5));
        assert_eq!(
            r.error_detail.as_deref(),
            Some("the answer carried no output")
        );
        // An error object: ruling 3, as in a stream.
        let r = answer(EventMeaning {
            error: Some(crate::protocol::StreamError::from_payload(
                r#"{"type":"error","error":{"type":"overloaded_error"}}"#,
            )),
            ..EventMeaning::default()
        });
        assert_eq!(r.error_type, Some(ErrorType::Overloaded));
        assert_eq!(r.ttft_s, None);
    }

    /// Issue 41 item 4: a result is whole where it is made. What the prober knows beside the
    /// events (what the request asked for, the connection's phases, the reads' lag, the send's
    /// kernel instant, the exporter's own fault, what the caller saw around the probe) comes in
    /// at `finish_with`, and every figure that derives from both is computed there: the wire
    /// TTFT, `input_length_off`, `concurrent_probe` and `cold_start`.
    #[test]
    fn the_requests_facts_make_the_result_whole() {
        let t0 = Instant::now();
        let lag = ReadLag {
            first_token_s: Some(0.001),
            max_s: 0.002,
            reads: 4,
            unstamped_reads: 0,
        };
        let phases = Phases {
            reused: false,
            resolve_s: None,
            connect_s: Some(0.003),
            tls_s: None,
        };
        let facts = RequestFacts {
            request_id: Some("req-1".into()),
            requested_input_tokens: Some(100),
            requested_output_tokens: Some(2),
            turn: Some(2),
            session: Some(7),
            branch: Some(1),
            phases: Some(phases),
            read_lag: Some(lag),
            sent_at: Some(at(t0, 0.01)),
            exporter_fault: false,
            overlapped: true,
            cold: true,
            ..RequestFacts::default()
        };
        let stream = |input: u64| {
            let mut m = Measurement::new(t0);
            m.headers(at(t0, 0.1), 200);
            m.event(at(t0, 0.25), &token(true));
            m.event(at(t0, 0.3), &token(true));
            m.event(
                at(t0, 0.31),
                &EventMeaning {
                    finish: true,
                    terminal: true,
                    usage_input: Some(input),
                    ..EventMeaning::default()
                },
            );
            m
        };
        let r = stream(130).finish_with(facts.clone());
        assert!(r.success(), "{r:?}");
        assert_eq!(r.request_id.as_deref(), Some("req-1"));
        assert_eq!(
            (r.requested_input_tokens, r.requested_output_tokens, r.turn),
            (Some(100), Some(2), Some(2))
        );
        assert_eq!((r.session, r.branch), (Some(7), Some(1)));
        assert_eq!((r.phases, r.read_lag), (Some(phases), Some(lag)));
        assert!(close(r.send_lag_s, 0.01), "{:?}", r.send_lag_s);
        assert!(close(r.wire_ttft_s, 0.24), "{:?}", r.wire_ttft_s);
        let flags = [Flag::ConcurrentProbe, Flag::ColdStart, Flag::InputLengthOff];
        assert_eq!(r.flags, BTreeSet::from(flags));
        // An input counted within 2% (or 4 tokens) of the requested one is not off.
        let r = stream(103).finish_with(facts.clone());
        assert!(!r.flags.contains(&Flag::InputLengthOff), "{:?}", r.flags);
        // Without any fact the result states none.
        let r = stream(130).finish();
        assert_eq!((r.request_id, r.phases, r.send_lag_s), (None, None, None));
        assert!(r.flags.is_empty(), "{:?}", r.flags);
        // A failure before any head: no read lag, no wire TTFT, no length judged; the exporter's
        // own fault and the flights' flags are kept.
        let mut m = Measurement::new(t0);
        m.fail(ErrorType::Connect, at(t0, 0.02), "refused");
        let r = m.finish_with(RequestFacts {
            exporter_fault: true,
            sent_at: None,
            ..facts
        });
        assert_eq!(r.error_type, Some(ErrorType::Connect));
        assert!(r.exporter_fault);
        assert_eq!(
            (r.read_lag, r.send_lag_s, r.wire_ttft_s),
            (None, None, None)
        );
        assert_eq!(
            r.flags,
            BTreeSet::from([Flag::ConcurrentProbe, Flag::ColdStart])
        );
    }

    /// Issue 43 items 2 to 4: what answered is judged where the result is made: another model
    /// is flagged (or fails, after the stream's own failures), the usage is audited against the
    /// events and the prompt's known length, a deterministic answer is hashed and compared.
    #[test]
    fn what_answered_is_judged_in_the_fold() {
        use answered::{AnswerHistory, AuditFacts, KnownAnswer, ModelCheck};
        let t0 = Instant::now();
        let stream = |served: &str, usage: u64, proper: bool| {
            let mut m = Measurement::new(t0);
            m.headers(at(t0, 0.1), 200);
            m.event(
                at(t0, 0.1),
                &EventMeaning {
                    served_model: Some(served.into()),
                    system_fingerprint: Some("fp_b".into()),
                    ..EventMeaning::default()
                },
            );
            for i in 0..8 {
                m.event(
                    at(t0, 0.2 + f64::from(i) * 0.01),
                    &EventMeaning {
                        hidden_text: if i == 0 {
                            "thinking".into()
                        } else {
                            String::new()
                        },
                        text: if i == 0 { String::new() } else { "w".into() },
                        output: i > 0,
                        ..token(true)
                    },
                );
            }
            m.event(
                at(t0, 0.3),
                &EventMeaning {
                    finish: proper,
                    terminal: proper,
                    usage_output: Some(usage),
                    usage_input: Some(200),
                    ..EventMeaning::default()
                },
            );
            m.eof(at(t0, 0.31));
            m.validate(|_, _| None);
            m
        };
        let model = |fail: bool| ModelCheck {
            requested: "gpt-4o".into(),
            aliases: Vec::new(),
            fail,
        };
        let facts = |fail: bool| RequestFacts {
            model: Some(model(fail)),
            requested_input_tokens: Some(100),
            audit: Some(AuditFacts {
                one_per_event: true,
                input_known: true,
                ..AuditFacts::default()
            }),
            drift: Some(AnswerHistory {
                last: Some(KnownAnswer {
                    served_model: Some("gpt-4o-mini".into()),
                    system_fingerprint: Some("fp_a".into()),
                    hash: "0".repeat(16),
                }),
                by_identity: Vec::new(),
            }),
            ..RequestFacts::default()
        };
        // The vendor's dated name: no mismatch; the usage twice the events: a usage mismatch
        // (and the input twice its known length); the answer's hash changed.
        let r = stream("gpt-4o-2024-08-06", 16, true).finish_with(facts(true));
        assert!(r.success(), "{r:?}");
        assert!(!r.flags.contains(&Flag::ModelMismatch));
        let audit = r.usage_audit.clone().unwrap();
        let (out, input) = (audit.output.unwrap(), audit.input.unwrap());
        assert_eq!((out.expected, out.stated, out.ratio), (8, 16, Some(2.0)));
        assert_eq!((input.expected, input.stated), (100, 200));
        assert!(r.flags.contains(&Flag::UsageMismatch));
        assert_eq!(r.expect_passed, Some(true));
        let hash = r.answer_hash.clone().unwrap();
        assert_eq!(hash, answered::answer_hash("wwwwwww", "thinking"));
        let d = r.drift.unwrap();
        assert_eq!(
            (
                d.from.system_fingerprint.as_deref(),
                d.to.system_fingerprint.as_deref()
            ),
            (Some("fp_a"), Some("fp_b"))
        );
        assert!(r.flags.contains(&Flag::AnswerDrift));
        // Another model: flagged, and with `fail` a failure with its own type.
        let r = stream("gpt-4o-mini", 8, true).finish_with(facts(false));
        assert!(r.success() && r.flags.contains(&Flag::ModelMismatch));
        let out = r.usage_audit.unwrap().output.unwrap();
        assert!(!out.mismatch, "as many tokens stated as streamed");
        let r = stream("gpt-4o-mini", 8, true).finish_with(facts(true));
        assert_eq!(r.error_type, Some(ErrorType::ModelMismatch));
        assert!(r.error_detail.unwrap().contains("\"gpt-4o-mini\""));
        assert!(r.flags.contains(&Flag::ModelMismatch));
        assert_eq!(
            (r.usage_audit, r.answer_hash),
            (None, None),
            "a failure is not audited"
        );
        // The stream's own failure comes first.
        let r = stream("gpt-4o-mini", 8, false).finish_with(facts(true));
        assert_eq!(r.error_type, Some(ErrorType::Truncated));
        // No served model stated: nothing to judge.
        let mut m = Measurement::new(t0);
        m.event(at(t0, 0.2), &token(true));
        m.event(
            at(t0, 0.3),
            &EventMeaning {
                terminal: true,
                finish: true,
                ..EventMeaning::default()
            },
        );
        let r = m.finish_with(facts(true));
        assert!(r.success() && !r.flags.contains(&Flag::ModelMismatch));
        assert_eq!(
            r.usage_audit.unwrap().not_audited,
            Some(answered::NotAudited::NoUsage)
        );
    }

    /// The prober's redaction of a failure's detail runs before the result is made.
    #[test]
    fn a_failures_detail_is_shown_as_the_prober_says() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.fail(ErrorType::BadRequest, at(t0, 0.1), "key sk-123 refused");
        m.show_detail(|d| d.replace("sk-123", "<redacted>"));
        let r = m.finish();
        assert_eq!(r.error_detail.as_deref(), Some("key <redacted> refused"));
    }
}
