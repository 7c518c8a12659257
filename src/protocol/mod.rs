//! Streaming LLM API protocols: how to ask for a stream, and what each decoded SSE event means.
//!
//! Each protocol turns one [`SseEvent`] into an [`EventMeaning`]: whether it is token-bearing, whether
//! it carries visible answer text, usage, a finish reason, the terminal marker or an in-stream
//! error. The rules are docs/measurement.md's "Token-bearing events" and "In-stream errors"; the shapes
//! are those of the providers' API references (OpenAI Chat Completions, Completions and Responses
//! streaming; Anthropic Messages streaming). A whole non-streamed answer (`"stream": false`) is read
//! by [`Api::interpret_answer`] into the same [`EventMeaning`], as if it were one event
//! (docs/measurement.md, "Non-streaming requests"). This module is pure: no I/O, no clocks.

#[cfg(test)]
mod answer_tests;
mod anthropic;
mod borrowed;
mod openai;
mod tools;

pub use tools::{ToolCall, ToolCallPart, ToolChoice, ToolDef};

use crate::sse::SseEvent;
use crate::units::truncate;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

/// The API protocol of a target (`api:` in the config, `--api` on the command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    /// OpenAI Chat Completions: `POST {base_url}/chat/completions`.
    OpenaiChat,
    /// OpenAI legacy Completions: `POST {base_url}/completions`.
    OpenaiCompletions,
    /// OpenAI Responses: `POST {base_url}/responses`, typed events.
    OpenaiResponses,
    /// Anthropic Messages: `POST {base_url}/v1/messages`.
    AnthropicMessages,
}

impl Api {
    /// The config spelling, e.g. `openai-chat`.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::OpenaiChat => "openai-chat",
            Api::OpenaiCompletions => "openai-completions",
            Api::OpenaiResponses => "openai-responses",
            Api::AnthropicMessages => "anthropic-messages",
        }
    }

    /// The path appended to the target's `base_url` (no trailing slash on `base_url`).
    pub fn path(self) -> &'static str {
        match self {
            Api::OpenaiChat => "/chat/completions",
            Api::OpenaiCompletions => "/completions",
            Api::OpenaiResponses => "/responses",
            Api::AnthropicMessages => "/v1/messages",
        }
    }

    /// Interprets one decoded event by this protocol's rules.
    ///
    /// # Errors
    /// [`Malformed`] when the event's data is not valid JSON of the protocol's shape
    /// (docs/measurement.md: `malformed`).
    pub fn interpret(self, ev: &SseEvent) -> Result<EventMeaning, Malformed> {
        self.interpret_reading(ev, true)
    }

    /// [`Api::interpret`] without the answer's identity (`served_model`, `system_fingerprint`,
    /// `response_id` stay `None`) where OpenAI chat and completions chunks repeat it on every
    /// event: for a probe that has it already, so the stream's common chunk copies no string.
    /// The other protocols name it in one event of the stream, read either way.
    ///
    /// # Errors
    /// As [`Api::interpret`].
    pub fn interpret_without_identity(self, ev: &SseEvent) -> Result<EventMeaning, Malformed> {
        self.interpret_reading(ev, false)
    }

    fn interpret_reading(self, ev: &SseEvent, identity: bool) -> Result<EventMeaning, Malformed> {
        if let Some(raw) = &ev.error_field {
            // llama.cpp's non-standard `error:` field line (docs/measurement.md, In-stream errors).
            return Ok(EventMeaning {
                error: Some(StreamError::from_payload(raw)),
                ..EventMeaning::default()
            });
        }
        if ev.data.trim().is_empty() && ev.event.as_deref() != Some("error") {
            return Ok(EventMeaning {
                keepalive: true,
                ..EventMeaning::default()
            });
        }
        if opens_html_page(&ev.data) {
            // Ruling 24: a proxy's or CDN's error page inside the stream, on every protocol.
            return Ok(EventMeaning {
                error: Some(StreamError {
                    message: Some(
                        "an HTML page inside the stream (a proxy's or CDN's error page)".into(),
                    ),
                    ..StreamError::default()
                }),
                ..EventMeaning::default()
            });
        }
        match self {
            Api::OpenaiChat => openai::chat(ev, identity),
            Api::OpenaiCompletions => openai::completions(ev, identity),
            Api::OpenaiResponses => openai::responses(ev),
            Api::AnthropicMessages => anthropic::messages(ev),
        }
    }

    /// Reads a whole non-streamed answer (the body of a `"stream": false` request) as one event:
    /// its output in every channel, visible text, finish reason, usage, llama.cpp's `timings`, or
    /// the error object it is (ruling 3). `terminal` is always set: the body's end is the end.
    ///
    /// # Errors
    /// [`Malformed`] when the body is not JSON, or is JSON without the protocol's answer
    /// (`choices`, `output`, `content`) and without an error object.
    pub fn interpret_answer(self, body: &str) -> Result<EventMeaning, Malformed> {
        let v = json_object(body.trim_start_matches('\u{feff}'))?;
        let mut m = match error_object(&v) {
            None => match self {
                Api::OpenaiChat => openai::chat_answer(&v)?,
                Api::OpenaiCompletions => openai::completions_answer(&v)?,
                Api::OpenaiResponses => openai::responses_answer(&v)?,
                Api::AnthropicMessages => anthropic::answer(&v)?,
            },
            error => EventMeaning {
                error,
                ..EventMeaning::default()
            },
        };
        m.terminal = true;
        Ok(m)
    }

    /// Builds the JSON request body (docs/measurement.md, "What requests look like").
    pub fn request_body(self, req: &BodyParams<'_>) -> Value {
        match self {
            Api::OpenaiChat => openai::chat_body(req),
            Api::OpenaiCompletions => openai::completions_body(req),
            Api::OpenaiResponses => openai::responses_body(req),
            Api::AnthropicMessages => anthropic::body(req),
        }
    }
}

impl std::fmt::Display for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One chat message of a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// `system`, `user` or `assistant` (`tool` for a tool's result).
    pub role: String,
    /// The message text.
    pub content: String,
    /// An assistant's tool calls (a session's; a config never sets them).
    #[serde(skip)]
    pub tool_calls: Vec<ToolCall>,
    /// A tool result's call id (a session's; a config never sets it).
    #[serde(skip)]
    pub tool_call_id: Option<String>,
}

impl Message {
    /// A message of `role` and text, without tool calls.
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Message {
            role: role.to_owned(),
            content: content.into(),
            ..Message::default()
        }
    }
}

/// What to ask for, independent of protocol.
#[derive(Debug, Clone)]
pub struct BodyParams<'a> {
    /// Model name sent to the server.
    pub model: &'a str,
    /// The conversation.
    pub messages: &'a [Message],
    /// Output cap, if any (`max_tokens`; Anthropic requires one, 256 is used when absent).
    pub max_tokens: Option<u32>,
    /// Ask for usage in the stream (`stream_options.include_usage`, OpenAI chat and completions;
    /// never sent without streaming, where usage is part of the answer).
    pub include_usage: bool,
    /// `"stream": true` (the default of every probe) or `false` (the whole answer at once).
    pub stream: bool,
    /// Ask the server not to stop before `max_tokens` (only when `max_tokens` is set).
    pub exact_output: ExactOutput,
    /// Extra top-level body fields, merged last (e.g. `temperature`, `seed`).
    pub extra_body: Option<&'a serde_json::Map<String, Value>>,
    /// The tools offered (a session's); none is sent when empty. Legacy completions have none.
    pub tools: &'a [ToolDef],
    /// What is asked of them (sent only with tools).
    pub tool_choice: Option<ToolChoice>,
}

/// How a request asks for exactly `max_tokens` output tokens (`exact_output:` of a target):
/// servers stop early at an end-of-sequence token unless told not to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExactOutput {
    /// Nothing is added: the server may stop early.
    #[default]
    None,
    /// `"ignore_eos": true` (vLLM, SGLang, llama.cpp's server).
    IgnoreEos,
    /// `"min_tokens": <max_tokens>` (vLLM).
    MinTokens,
}

impl ExactOutput {
    /// The config spelling, e.g. `ignore_eos`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExactOutput::None => "none",
            ExactOutput::IgnoreEos => "ignore_eos",
            ExactOutput::MinTokens => "min_tokens",
        }
    }

    /// The body field this asks with for `max_tokens` output tokens, if any.
    pub fn field(self, max_tokens: Option<u32>) -> Option<(&'static str, Value)> {
        let n = max_tokens?;
        match self {
            ExactOutput::None => None,
            ExactOutput::IgnoreEos => Some(("ignore_eos", Value::Bool(true))),
            ExactOutput::MinTokens => Some(("min_tokens", Value::from(n))),
        }
    }
}

/// What one event means to the measurement (docs/measurement.md, "Token-bearing events").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventMeaning {
    /// The event's data is empty or only whitespace: a keep-alive, like a comment (ruling 11).
    pub keepalive: bool,
    /// Non-empty generated output in any channel (answer, reasoning, tool call, refusal).
    pub token: bool,
    /// Non-empty visible answer text (for TTFO): not reasoning, not tool calls.
    pub output: bool,
    /// Visible answer text carried by this event.
    pub text: String,
    /// The text of the other output channels this event carries (reasoning, tool names and
    /// arguments): with [`EventMeaning::text`], what the usage audit counts with a tokenizer.
    pub hidden_text: String,
    /// A finish / stop reason was seen.
    pub finish: bool,
    /// The protocol's terminal marker (`[DONE]`, `message_stop`, `response.completed`).
    pub terminal: bool,
    /// Cumulative output tokens reported by the server, when this event carries usage.
    pub usage_output: Option<u64>,
    /// Input tokens reported by the server, when this event carries usage: the whole input,
    /// cached tokens included (OpenAI's `prompt_tokens`, Responses' `input_tokens`).
    pub usage_input: Option<u64>,
    /// Anthropic's `input_tokens`: the input tokens that were neither read from nor written to
    /// the cache (the whole input is this plus `usage_cached_input` and `usage_cache_creation`,
    /// which the fold adds up: they may come in different events).
    pub usage_input_uncached: Option<u64>,
    /// Of the input, the tokens the server's prompt cache served:
    /// `prompt_tokens_details.cached_tokens` (OpenAI, vLLM, SGLang; Responses'
    /// `input_tokens_details`), DeepSeek's `prompt_cache_hit_tokens`, Anthropic's
    /// `cache_read_input_tokens`.
    pub usage_cached_input: Option<u64>,
    /// Anthropic's `cache_creation_input_tokens`: input tokens written to the cache.
    pub usage_cache_creation: Option<u64>,
    /// Of the output, the reasoning tokens: `completion_tokens_details.reasoning_tokens`
    /// (Responses: `output_tokens_details.reasoning_tokens`).
    pub usage_reasoning: Option<u64>,
    /// The model that answered, as the answer names it (`model` of an OpenAI chunk or answer,
    /// Anthropic's `message_start`, the Responses API's `response`), read by [`identity_value`].
    pub served_model: Option<String>,
    /// OpenAI's `system_fingerprint`, read by [`identity_value`].
    pub system_fingerprint: Option<String>,
    /// The answer's own id (`id` of an OpenAI chunk or answer, of the Anthropic message, of the
    /// Responses `response`), read by [`identity_value`].
    pub response_id: Option<String>,
    /// An in-stream error.
    pub error: Option<StreamError>,
    /// llama.cpp's own `timings` object, when the server sent one.
    pub server_timings: Option<ServerTimings>,
    /// The parts of tool calls this event carries (a chat delta's `tool_calls`, an Anthropic
    /// `tool_use` block and its `input_json_delta`s, a Responses `function_call` item and its
    /// argument deltas; a whole answer's calls whole).
    pub tool_calls: Vec<ToolCallPart>,
}

/// An error reported inside a stream, or in an HTTP error body (an "error object",
/// docs/measurement.md ruling 3).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamError {
    /// The first numeric `code` or `status` of the object's `error`, else of the object itself
    /// (digit strings such as `"429"` count).
    pub code: Option<u16>,
    /// The error's `type` (e.g. `overloaded_error`, `invalid_request_error`).
    pub kind: Option<String>,
    /// The non-numeric `code`, if any (e.g. `insufficient_quota`).
    pub code_text: Option<String>,
    /// The non-numeric `status`, if any (e.g. Google's `RESOURCE_EXHAUSTED`).
    pub status_text: Option<String>,
    /// The server's message, up to [`MAX_MESSAGE_CHARS`] characters: kept long so that secrets
    /// it echoes are redacted before the prober cuts it for display (`probe::MAX_DETAIL_BYTES`).
    pub message: Option<String>,
    /// The object says its quota is per second or per minute (a Google `QuotaFailure` whose
    /// `quotaId` says `PerMinute`/`PerSecond`, or a `RetryInfo`): a rate limit, not a spent budget
    /// (ruling 13).
    pub short_window: bool,
    /// The object names a daily or monthly quota (a Google `QuotaFailure` whose `quotaId` says
    /// `PerDay`/`PerMonth`): a spent budget unless `short_window` (ruling 13).
    pub long_window: bool,
    /// The wait a `RetryInfo.retryDelay` asks for.
    pub retry_delay: Option<Duration>,
    /// Text Generation Inference's `error_type` beside a string `error` (`validation`,
    /// `overloaded`, `generation`, ...): the object's type (ruling 27).
    pub tgi_type: Option<String>,
}

/// How much of a server's error message is kept (characters).
pub const MAX_MESSAGE_CHARS: usize = 16 * 1024;

/// The longest answer identity kept (a served model, fingerprint, response or request id), in
/// characters: what a server names itself with is not trusted to be short.
pub const MAX_IDENTITY_CHARS: usize = 256;

/// An answer's identity string as tokenprobe keeps it (the served model, the fingerprint, the
/// response id, the request id header): surrounding whitespace trimmed, every control character
/// replaced by U+FFFD, cut to [`MAX_IDENTITY_CHARS`] characters (with `…`); `None` when nothing
/// is left. A hostile server can neither grow a log line or a report with it nor start a line
/// of its own.
pub fn identity_value(s: &str) -> Option<String> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let clean: String = s
        .chars()
        .take(MAX_IDENTITY_CHARS + 1)
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect();
    Some(truncate(&clean, MAX_IDENTITY_CHARS))
}

/// The counts one usage object states, each when a non-negative integer (docs/measurement.md,
/// "Cached and reasoning tokens").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct UsageCounts {
    pub(crate) output: Option<u64>,
    pub(crate) input: Option<u64>,
    pub(crate) cached_input: Option<u64>,
    pub(crate) reasoning: Option<u64>,
}

impl UsageCounts {
    /// An OpenAI-shaped usage object: the output and input counts under `output_key` and
    /// `input_key` (`completion_tokens` and `prompt_tokens`, or the Responses API's
    /// `output_tokens` and `input_tokens`); the cached input in
    /// `<input_key>_details.cached_tokens`, else DeepSeek's `prompt_cache_hit_tokens`; the
    /// reasoning in `<output_key>_details.reasoning_tokens`.
    fn openai(u: &Value, output_key: &str, input_key: &str) -> Self {
        let count = |v: Option<&Value>| v.and_then(Value::as_u64);
        let detail = |key: &str, field: &str| {
            count(
                u.get(format!("{key}_details").as_str())
                    .and_then(|d| d.get(field)),
            )
        };
        UsageCounts {
            output: count(u.get(output_key)),
            input: count(u.get(input_key)),
            cached_input: detail(input_key, "cached_tokens")
                .or_else(|| count(u.get("prompt_cache_hit_tokens"))),
            reasoning: detail(output_key, "reasoning_tokens"),
        }
    }
}

impl EventMeaning {
    /// Output in a channel that is not the visible answer (reasoning, a tool call): token-bearing,
    /// its text kept in [`EventMeaning::hidden_text`].
    pub(crate) fn hidden(&mut self, s: Option<&str>) {
        if let Some(s) = s.filter(|s| !s.is_empty()) {
            self.token = true;
            self.hidden_text.push_str(s);
        }
    }

    /// Takes the counts of a usage object.
    pub(crate) fn set_usage(&mut self, u: UsageCounts) {
        self.usage_output = u.output;
        self.usage_input = u.input;
        self.usage_cached_input = u.cached_input;
        self.usage_reasoning = u.reasoning;
    }

    /// Takes the identity strings of an object: its `id`, `model` and `system_fingerprint`.
    fn set_identity(&mut self, v: &Value) {
        let text = |k: &str| v.get(k).and_then(Value::as_str).and_then(identity_value);
        self.response_id = text("id");
        self.served_model = text("model");
        self.system_fingerprint = text("system_fingerprint");
    }
}

/// The error object a JSON value is, on every protocol (docs/measurement.md, "In-stream errors"): a
/// top-level `error` that is not null, or the flat shape of vLLM, SGLang and Mistral, a top-level
/// `"object": "error"` with its `message`, `type` and `code` beside it (ruling 18).
pub fn error_object(v: &Value) -> Option<StreamError> {
    let nested = v.get("error").is_some_and(|e| !e.is_null());
    let flat = v.get("object").and_then(Value::as_str) == Some("error");
    (nested || flat).then(|| StreamError::from_json(v))
}

/// Ruling 23: a `finish_reason` that means the request failed (vLLM's `abort`, the `error` of
/// OpenRouter and relays) is not a proper end.
pub fn failure_finish(reason: &str) -> bool {
    matches!(reason, "abort" | "error")
}

/// Ruling 24: data whose first non-blank characters open an HTML document (`<!DOCTYPE html`,
/// `<html`, in any case).
fn opens_html_page(data: &str) -> bool {
    let start = data.trim_start().as_bytes();
    [&b"<!doctype html"[..], b"<html"].iter().any(|tag| {
        start
            .get(..tag.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(tag))
    })
}

/// A numeric code: a JSON number or a string of digits, counted only when it is an HTTP status
/// (100-599; ruling 27: Mistral's 1300 or 3505 are not).
fn numeric_code(v: Option<&Value>) -> Option<u16> {
    let code = match v? {
        Value::Number(n) => n.as_u64().and_then(|c| u16::try_from(c).ok()),
        Value::String(s) => s.trim().parse::<u16>().ok(),
        _ => None,
    };
    code.filter(|c| (100..=599).contains(c))
}

/// A code that is not an HTTP status, as text (a name such as `insufficient_quota`, or a number
/// outside 100-599).
fn text_code(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) if numeric_code(v).is_none() => Some(s.clone()),
        Value::Number(n) if numeric_code(v).is_none() => Some(n.to_string()),
        _ => None,
    }
}

/// Google's `details` entries anywhere in the object: (`RetryInfo.retryDelay`, a per-second or
/// per-minute `QuotaFailure` or any `RetryInfo`, a per-day or per-month `QuotaFailure`).
fn google_details(v: &Value, depth: usize, out: &mut (Option<Duration>, bool, bool)) {
    if depth > 8 {
        return;
    }
    match v {
        Value::Object(o) => {
            let ty = o.get("@type").and_then(Value::as_str).unwrap_or_default();
            if ty.ends_with("RetryInfo") {
                out.1 = true;
                if let Some(d) = o.get("retryDelay").and_then(Value::as_str) {
                    out.0 = out.0.or_else(|| parse_proto_duration(d));
                }
            }
            if ty.ends_with("QuotaFailure")
                && let Some(Value::Array(vs)) = o.get("violations")
            {
                let ids = || {
                    vs.iter()
                        .filter_map(|q| q.get("quotaId").and_then(Value::as_str))
                        .map(str::to_ascii_lowercase)
                };
                out.1 |= ids().any(|id| id.contains("perminute") || id.contains("persecond"));
                out.2 |= ids().any(|id| id.contains("perday") || id.contains("permonth"));
            }
            for x in o.values() {
                google_details(x, depth + 1, out);
            }
        }
        Value::Array(a) => {
            for x in a {
                google_details(x, depth + 1, out);
            }
        }
        _ => {}
    }
}

/// A protobuf JSON duration such as `"30s"` or `"1.5s"`; bounded to a day.
fn parse_proto_duration(s: &str) -> Option<Duration> {
    let v: f64 = s.trim().strip_suffix('s')?.parse().ok()?;
    (v.is_finite() && v >= 0.0).then(|| Duration::from_secs_f64(v.min(86_400.0)))
}

impl StreamError {
    /// Reads an error payload: a JSON object with a top-level `error` object or string, a bare
    /// error object, or plain text.
    pub fn from_payload(raw: &str) -> Self {
        match serde_json::from_str::<Value>(raw) {
            Ok(v) => Self::from_json(&v),
            Err(_) => StreamError {
                message: Some(truncate(raw.trim(), MAX_MESSAGE_CHARS)),
                ..StreamError::default()
            },
        }
    }

    /// Reads an error from parsed JSON (see [`StreamError::from_payload`]).
    pub fn from_json(v: &Value) -> Self {
        let mut details = (None, false, false);
        google_details(v, 0, &mut details);
        let (retry_delay, short_window, long_window) = details;
        let outer_code = numeric_code(v.get("code")).or_else(|| numeric_code(v.get("status")));
        let obj = match v.get("error") {
            Some(Value::String(s)) => {
                return StreamError {
                    code: outer_code,
                    message: Some(truncate(s, MAX_MESSAGE_CHARS)),
                    tgi_type: v
                        .get("error_type")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    short_window,
                    long_window,
                    retry_delay,
                    ..StreamError::default()
                };
            }
            Some(inner @ Value::Object(_)) => inner,
            _ => v,
        };
        StreamError {
            code: numeric_code(obj.get("code"))
                .or_else(|| numeric_code(obj.get("status")))
                .or(outer_code),
            kind: obj.get("type").and_then(Value::as_str).map(str::to_owned),
            code_text: text_code(obj.get("code")),
            status_text: text_code(obj.get("status")),
            message: obj
                .get("message")
                .and_then(Value::as_str)
                .map(|m| truncate(m, MAX_MESSAGE_CHARS)),
            short_window,
            long_window,
            retry_delay,
            tgi_type: None,
        }
    }

    /// True when the type or code says the server is overloaded (`overloaded_error`, 529).
    pub fn is_overloaded(&self) -> bool {
        self.code == Some(529)
            || self
                .kind
                .as_deref()
                .is_some_and(|k| k.contains("overloaded"))
            || self
                .code_text
                .as_deref()
                .is_some_and(|k| k.contains("overloaded"))
    }

    /// The type name, then the code name: what ruling 3's name table is applied to, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        [self.kind.as_deref(), self.code_text.as_deref()]
            .into_iter()
            .flatten()
    }

    /// A one-line human summary: `type code: message`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(k) = self.kind.as_ref().or(self.tgi_type.as_ref()) {
            parts.push(k.clone());
        }
        if let Some(c) = self.code {
            parts.push(c.to_string());
        } else if let Some(c) = &self.code_text {
            parts.push(c.clone());
        }
        let head = parts.join(" ");
        match (&self.message, head.is_empty()) {
            (Some(m), true) => m.clone(),
            (Some(m), false) => format!("{head}: {m}"),
            (None, _) => head,
        }
    }
}

/// llama.cpp server's per-request `timings` object (sent in its final stream chunk).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct ServerTimings {
    /// Prompt tokens processed.
    pub prompt_n: Option<u64>,
    /// Prompt processing time, ms.
    pub prompt_ms: Option<f64>,
    /// Tokens generated.
    pub predicted_n: Option<u64>,
    /// Generation time, ms.
    pub predicted_ms: Option<f64>,
    /// Generation time per token, ms.
    pub predicted_per_token_ms: Option<f64>,
}

impl ServerTimings {
    fn from_json(v: &Value) -> Option<Self> {
        let o = v.as_object()?;
        Some(ServerTimings {
            prompt_n: o.get("prompt_n").and_then(Value::as_u64),
            prompt_ms: o.get("prompt_ms").and_then(Value::as_f64),
            predicted_n: o.get("predicted_n").and_then(Value::as_u64),
            predicted_ms: o.get("predicted_ms").and_then(Value::as_f64),
            predicted_per_token_ms: o.get("predicted_per_token_ms").and_then(Value::as_f64),
        })
    }
}

/// The event's data is not valid JSON of the protocol's shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed event: {reason}")]
pub struct Malformed {
    /// What was wrong, without the payload (which may be large).
    pub reason: String,
}

impl Malformed {
    fn new(reason: impl Into<String>) -> Self {
        Malformed {
            reason: reason.into(),
        }
    }
}

/// Parses an event's data as a JSON object.
fn json_object(data: &str) -> Result<Value, Malformed> {
    let v: Value = serde_json::from_str(data)
        .map_err(|e| Malformed::new(format!("data is not valid JSON ({e})")))?;
    if !v.is_object() {
        return Err(Malformed::new("data is JSON but not an object"));
    }
    Ok(v)
}

/// A non-empty string at `v[key]`.
fn non_empty_str<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The counts of the OpenAI-shaped usage object at `v["usage"]` (see [`UsageCounts::openai`]);
/// none when it is not an object.
fn usage_at(v: &Value, output_key: &str, input_key: &str) -> UsageCounts {
    match v.get("usage") {
        Some(u @ Value::Object(_)) => UsageCounts::openai(u, output_key, input_key),
        _ => UsageCounts::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ruling 24: an HTML page inside the stream is an error on every protocol; text that only
    /// mentions HTML is not.
    #[test]
    fn an_html_page_inside_the_stream_is_an_error() {
        let page = SseEvent {
            data: "\n  <!DOCTYPE HTML><html><title>502</title></html>".into(),
            has_data: true,
            ..SseEvent::default()
        };
        for api in <Api as clap::ValueEnum>::value_variants() {
            assert!(api.interpret(&page).unwrap().error.is_some(), "{api}");
        }
        assert!(opens_html_page("<HTML lang=en>"));
        assert!(!opens_html_page(r#"{"text":"<html>"}"#));
        assert!(!opens_html_page("<htm"));
    }

    #[test]
    fn error_payloads() {
        let e = StreamError::from_payload(
            r#"{"code":400,"message":"too long","type":"invalid_request_error"}"#,
        );
        assert_eq!(e.code, Some(400));
        assert_eq!(e.kind.as_deref(), Some("invalid_request_error"));
        let e = StreamError::from_payload(r#"{"error":{"code":"internal_error","message":"x"}}"#);
        assert_eq!(e.code, None);
        assert_eq!(e.code_text.as_deref(), Some("internal_error"));
        let e = StreamError::from_payload(r#"{"error":{"code":"429"}}"#);
        assert_eq!(e.code, Some(429));
        let e = StreamError::from_payload("plain text");
        assert_eq!(e.message.as_deref(), Some("plain text"));
        let e = StreamError::from_payload(r#"{"error":"boom"}"#);
        assert_eq!(e.message.as_deref(), Some("boom"));
        assert!(StreamError::from_payload(r#"{"type":"overloaded_error"}"#).is_overloaded());
    }

    #[test]
    fn error_field_wins_for_every_api() {
        let ev = SseEvent {
            error_field: Some(r#"{"code":400}"#.into()),
            ..SseEvent::default()
        };
        for api in [
            Api::OpenaiChat,
            Api::AnthropicMessages,
            Api::OpenaiResponses,
        ] {
            assert_eq!(api.interpret(&ev).unwrap().error.unwrap().code, Some(400));
        }
    }
}
