//! The bytes the simulator sends: SSE events of each protocol, pre-rendered per request so a
//! token event costs two `memcpy`s, plus non-stream bodies and error bodies (pure).

use serde_json::{Value, json};

/// Which API an endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proto {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/messages` (Anthropic).
    Messages,
    /// `POST /v1/responses` (OpenAI Responses).
    Responses,
}

/// The simulated answer's text, cycled token by token (JSON-safe: no escaping needed).
const VOCAB: [&str; 16] = [
    "Hello",
    ",",
    " this",
    " is",
    " a",
    " simulated",
    " answer",
    " from",
    " tokenprobe",
    " simulate",
    ":",
    " every",
    " word",
    " is",
    " one",
    " token.",
];

/// Appends the text of tokens `start..start + count`.
pub(crate) fn push_tokens(out: &mut Vec<u8>, start: u32, count: u32) {
    for i in start..start.saturating_add(count) {
        out.extend_from_slice(VOCAB[i as usize % VOCAB.len()].as_bytes());
    }
}

/// The full answer text of `n` tokens (non-stream responses), from word `shift` on.
fn answer_text(n: u32, shift: u32) -> String {
    let mut v = Vec::new();
    push_tokens(&mut v, shift, n);
    String::from_utf8_lossy(&v).into_owned()
}

/// What a simulated answer says of itself where a relay may lie: the known truth of the
/// what-answered tests (`--served-model`, `--usage-scale`, `--fingerprint`, `--new-fingerprint`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Says {
    /// The model the answer names (`None`: the request's).
    pub model: Option<String>,
    /// The factor on every count of its usage (rounded to whole tokens).
    pub usage_scale: f64,
    /// Its `system_fingerprint` (chat, completions and Responses answers), if any.
    pub fingerprint: Option<String>,
    /// The word of the vocabulary its answer starts at: another build answers other words.
    pub shift: u32,
}

impl Default for Says {
    fn default() -> Self {
        Says {
            model: None,
            usage_scale: 1.0,
            fingerprint: None,
            shift: 0,
        }
    }
}

/// A JSON string literal (quoted, escaped).
pub(crate) fn json_str(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// Per-request templates of one protocol's stream.
#[derive(Debug)]
pub(crate) struct Renderer {
    proto: Proto,
    /// `data: {...` up to the token text.
    token_prefix: Vec<u8>,
    /// After the token text, through the blank line.
    token_suffix: &'static [u8],
    id: String,
    model: String,
    created: u64,
    prompt_tokens: u32,
    /// Of `prompt_tokens`, served from the prefix cache.
    cached_tokens: u32,
    /// The answer is a call of this tool: its tokens are the call's arguments.
    tool: Option<Tool>,
    /// `,"system_fingerprint":"..."` after the model of chat and completions chunks, or empty.
    fp: String,
    /// See [`Says`].
    usage_scale: f64,
    shift: u32,
}

/// A tool call answer: the tool's name (a JSON string) and the call's id.
#[derive(Debug)]
struct Tool {
    name: String,
    call_id: String,
    /// Tokens of the answer (the last closes the arguments' JSON).
    total: u32,
}

/// The arguments' text of tokens `start..start + count` of `total`: `{"query":"` before the
/// first, the tokens' words, `"}` after the last (the words are JSON-safe).
fn argument_piece(out: &mut Vec<u8>, start: u32, count: u32, total: u32) {
    if start == 0 {
        out.extend_from_slice(br#"{"query":""#);
    }
    push_tokens(out, start, count);
    if start.saturating_add(count) >= total {
        out.extend_from_slice(br#""}"#);
    }
}

/// The whole arguments of a call of `n` tokens.
fn arguments(n: u32) -> String {
    let mut v = Vec::new();
    argument_piece(&mut v, 0, n, n);
    String::from_utf8_lossy(&v).into_owned()
}

/// One SSE event of the stream, and whether it carries tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    /// The event's bytes, through its terminating blank line.
    pub bytes: Vec<u8>,
    /// Token-bearing (docs/measurement.md).
    pub token: bool,
}

fn data_event(json: &str) -> Vec<u8> {
    format!("data: {json}\n\n").into_bytes()
}

fn named_event(name: &str, json: &str) -> Vec<u8> {
    format!("event: {name}\ndata: {json}\n\n").into_bytes()
}

impl Renderer {
    /// Templates for one request: `id` and `model` are echoed in every chunk.
    pub(crate) fn new(
        proto: Proto,
        id: &str,
        model: &str,
        created: u64,
        prompt_tokens: u32,
    ) -> Self {
        let mut r = Renderer {
            proto,
            token_prefix: Vec::new(),
            token_suffix: b"",
            id: json_str(id),
            model: json_str(model),
            created,
            prompt_tokens,
            cached_tokens: 0,
            tool: None,
            fp: String::new(),
            usage_scale: 1.0,
            shift: 0,
        };
        r.templates();
        r
    }

    /// The answer says of itself what `says` has it say.
    pub(crate) fn saying(mut self, says: &Says) -> Self {
        if let Some(m) = &says.model {
            self.model = json_str(m);
        }
        self.fp = says.fingerprint.as_deref().map_or_else(String::new, |f| {
            format!(",\"system_fingerprint\":{}", json_str(f))
        });
        self.usage_scale = says.usage_scale;
        self.shift = says.shift;
        self.templates();
        self
    }

    /// A count as the usage states it (`--usage-scale`).
    fn usage(&self, n: u32) -> u64 {
        (f64::from(n) * self.usage_scale).round() as u64
    }

    /// The `system_fingerprint` value, if the answer states one.
    fn fingerprint(&self) -> Option<Value> {
        let json = self.fp.split_once(':')?.1;
        serde_json::from_str(json).ok()
    }

    fn templates(&mut self) {
        let (idj, modelj, fp, created) = (&self.id, &self.model, &self.fp, self.created);
        let (token_prefix, token_suffix): (String, &'static [u8]) = match self.proto {
            Proto::Chat => (
                format!(
                    r#"data: {{"id":{idj},"object":"chat.completion.chunk","created":{created},"model":{modelj}{fp},"choices":[{{"index":0,"delta":{{"content":""#
                ),
                b"\"},\"finish_reason\":null}]}\n\n",
            ),
            Proto::Completions => (
                format!(
                    r#"data: {{"id":{idj},"object":"text_completion","created":{created},"model":{modelj}{fp},"choices":[{{"text":""#
                ),
                b"\",\"index\":0,\"logprobs\":null,\"finish_reason\":null}]}\n\n",
            ),
            Proto::Messages => (
                r#"event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""#
                    .to_owned(),
                b"\"}}\n\n",
            ),
            Proto::Responses => (
                r#"event: response.output_text.delta
data: {"type":"response.output_text.delta","item_id":"msg_0","output_index":0,"content_index":0,"delta":""#
                    .to_owned(),
                b"\"}\n\n",
            ),
        };
        self.token_prefix = token_prefix.into_bytes();
        self.token_suffix = token_suffix;
    }

    /// Answers with a call of `name` whose arguments are the answer's `total` tokens (chat,
    /// Anthropic and Responses; completions have no tools).
    pub(crate) fn with_tool_call(mut self, name: &str, total: u32) -> Self {
        if self.proto != Proto::Completions {
            let id: String = self
                .id
                .trim_matches('"')
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .collect();
            self.tool = Some(Tool {
                name: json_str(name),
                call_id: format!("call_{id}"),
                total,
            });
        }
        self
    }

    /// True when the answer is a tool call.
    pub(crate) fn is_tool_call(&self) -> bool {
        self.tool.is_some()
    }

    /// A tool call's event carrying tokens `start..start + count`.
    fn tool_event(&self, t: &Tool, out: &mut Vec<u8>, start: u32, count: u32) {
        let mut piece = Vec::new();
        argument_piece(&mut piece, start, count, t.total);
        let piece = json_str(&String::from_utf8_lossy(&piece));
        let (id, model, created, name, fp) =
            (&self.id, &self.model, self.created, &t.name, &self.fp);
        let call_id = json_str(&t.call_id);
        let bytes = match self.proto {
            Proto::Chat if start == 0 => data_event(&format!(
                r#"{{"id":{id},"object":"chat.completion.chunk","created":{created},"model":{model}{fp},"choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":0,"id":{call_id},"type":"function","function":{{"name":{name},"arguments":{piece}}}}}]}},"finish_reason":null}}]}}"#
            )),
            Proto::Chat | Proto::Completions => data_event(&format!(
                r#"{{"id":{id},"object":"chat.completion.chunk","created":{created},"model":{model}{fp},"choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":0,"function":{{"arguments":{piece}}}}}]}},"finish_reason":null}}]}}"#
            )),
            Proto::Messages => named_event(
                "content_block_delta",
                &format!(
                    r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"input_json_delta","partial_json":{piece}}}}}"#
                ),
            ),
            Proto::Responses => named_event(
                "response.function_call_arguments.delta",
                &format!(
                    r#"{{"type":"response.function_call_arguments.delta","item_id":"fc_0","output_index":0,"delta":{piece}}}"#
                ),
            ),
        };
        out.extend_from_slice(&bytes);
    }

    /// A Responses `function_call` item of a call whose arguments are `args`.
    fn function_item(t: &Tool, args: &str, done: bool) -> Value {
        json!({"id": "fc_0", "type": "function_call", "status": if done { "completed" } else { "in_progress" },
               "call_id": t.call_id, "name": serde_json::from_str::<Value>(&t.name).unwrap_or(Value::Null),
               "arguments": args})
    }

    /// Reports `cached` of the prompt tokens as served from the prefix cache
    /// (`prompt_tokens_details.cached_tokens`; Anthropic: `cache_read_input_tokens`, with
    /// `input_tokens` the rest, as Anthropic counts them).
    pub(crate) fn with_cached(mut self, cached: u32) -> Self {
        self.cached_tokens = cached.min(self.prompt_tokens);
        self
    }

    /// Anthropic's `usage` input fields: uncached input tokens and cache reads (as stated).
    fn anthropic_input(&self) -> (u64, u64) {
        (
            self.usage(self.prompt_tokens - self.cached_tokens),
            self.usage(self.cached_tokens),
        )
    }

    /// Writes the event carrying tokens `start..start + count` into `out` (cleared first).
    pub(crate) fn token_event(&self, out: &mut Vec<u8>, start: u32, count: u32) {
        out.clear();
        if let Some(t) = &self.tool {
            self.tool_event(t, out, start, count);
            return;
        }
        out.extend_from_slice(&self.token_prefix);
        push_tokens(out, start.wrapping_add(self.shift), count);
        out.extend_from_slice(self.token_suffix);
    }

    /// The events before the first token: the role chunk (chat); `message_start`,
    /// `content_block_start` and a `ping` (messages); none for completions.
    pub(crate) fn opening(&self) -> Vec<Event> {
        let (id, model, created, fp) = (&self.id, &self.model, self.created, &self.fp);
        let ev = |bytes| Event {
            bytes,
            token: false,
        };
        match self.proto {
            Proto::Chat => vec![ev(data_event(&format!(
                r#"{{"id":{id},"object":"chat.completion.chunk","created":{created},"model":{model}{fp},"choices":[{{"index":0,"delta":{{"role":"assistant","content":""}},"finish_reason":null}}]}}"#
            )))],
            Proto::Completions => Vec::new(),
            Proto::Messages => vec![
                ev(named_event(
                    "message_start",
                    &format!(
                        r#"{{"type":"message_start","message":{{"id":{id},"type":"message","role":"assistant","model":{model},"content":[],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{},"cache_read_input_tokens":{},"output_tokens":1}}}}}}"#,
                        self.anthropic_input().0,
                        self.anthropic_input().1,
                    ),
                )),
                ev(named_event(
                    "content_block_start",
                    &match &self.tool {
                        Some(t) => format!(
                            r#"{{"type":"content_block_start","index":0,"content_block":{{"type":"tool_use","id":{},"name":{},"input":{{}}}}}}"#,
                            json_str(&t.call_id),
                            t.name
                        ),
                        None => r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.to_owned(),
                    },
                )),
                ev(named_event("ping", r#"{"type":"ping"}"#)),
            ],
            Proto::Responses if self.tool.is_some() => {
                let t = self.tool.as_ref().map(|t| Self::function_item(t, "", false));
                vec![
                    ev(named_event(
                        "response.created",
                        &format!(
                            r#"{{"type":"response.created","response":{{"id":{id},"object":"response","created_at":{created},"status":"in_progress","model":{model},"output":[],"usage":null}}}}"#
                        ),
                    )),
                    ev(named_event(
                        "response.output_item.added",
                        &json!({"type": "response.output_item.added", "output_index": 0, "item": t})
                            .to_string(),
                    )),
                ]
            }
            Proto::Responses => vec![
                ev(named_event(
                    "response.created",
                    &format!(
                        r#"{{"type":"response.created","response":{{"id":{id},"object":"response","created_at":{created},"status":"in_progress","model":{model},"output":[],"usage":null}}}}"#
                    ),
                )),
                ev(named_event(
                    "response.output_item.added",
                    r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"msg_0","type":"message","status":"in_progress","role":"assistant","content":[]}}"#,
                )),
                ev(named_event(
                    "response.content_part.added",
                    r#"{"type":"response.content_part.added","item_id":"msg_0","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}"#,
                )),
            ],
        }
    }

    /// A Responses API `response` object (final state).
    fn response_object(&self, n: u32, capped: bool) -> Value {
        let text = answer_text(n, self.shift);
        let p = self.usage(self.prompt_tokens);
        let (cached, n_stated) = (self.usage(self.cached_tokens), self.usage(n));
        let output = match &self.tool {
            Some(t) => json!([Self::function_item(t, &arguments(n), true)]),
            None => {
                json!([{"id": "msg_0", "type": "message", "status": if capped { "incomplete" } else { "completed" },
                            "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]}])
            }
        };
        let mut v = json!({
            "id": serde_json::from_str::<Value>(&self.id).unwrap_or(Value::Null),
            "object": "response",
            "created_at": self.created,
            "status": if capped { "incomplete" } else { "completed" },
            "model": serde_json::from_str::<Value>(&self.model).unwrap_or(Value::Null),
            "output": output,
            "usage": {"input_tokens": p, "input_tokens_details": {"cached_tokens": cached},
                      "output_tokens": n_stated, "total_tokens": p + n_stated},
        });
        if let Some(fp) = self.fingerprint() {
            v["system_fingerprint"] = fp;
        }
        if capped {
            v["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        v
    }

    /// The events after the last token: finish, usage (when asked for) and `[DONE]` (OpenAI);
    /// `content_block_stop`, `message_delta` with cumulative usage, `message_stop` (messages).
    pub(crate) fn closing(&self, n: u32, capped: bool, include_usage: bool) -> Vec<Event> {
        let (id, model, created, fp) = (&self.id, &self.model, self.created, &self.fp);
        let (p, n_stated) = (self.usage(self.prompt_tokens), self.usage(n));
        let ev = |bytes| Event {
            bytes,
            token: false,
        };
        let reason = match (capped, self.tool.is_some()) {
            (true, _) => "length",
            (false, true) => "tool_calls",
            (false, false) => "stop",
        };
        let usage = format!(
            r#"{{"prompt_tokens":{p},"completion_tokens":{n_stated},"total_tokens":{},"prompt_tokens_details":{{"cached_tokens":{}}}}}"#,
            p + n_stated,
            self.usage(self.cached_tokens)
        );
        let done = || ev(b"data: [DONE]\n\n".to_vec());
        match self.proto {
            Proto::Chat => {
                let mut v = vec![ev(data_event(&format!(
                    r#"{{"id":{id},"object":"chat.completion.chunk","created":{created},"model":{model}{fp},"choices":[{{"index":0,"delta":{{}},"finish_reason":"{reason}"}}]}}"#
                )))];
                if include_usage {
                    v.push(ev(data_event(&format!(
                        r#"{{"id":{id},"object":"chat.completion.chunk","created":{created},"model":{model}{fp},"choices":[],"usage":{usage}}}"#
                    ))));
                }
                v.push(done());
                v
            }
            Proto::Completions => {
                let mut v = vec![ev(data_event(&format!(
                    r#"{{"id":{id},"object":"text_completion","created":{created},"model":{model}{fp},"choices":[{{"text":"","index":0,"logprobs":null,"finish_reason":"{reason}"}}]}}"#
                )))];
                if include_usage {
                    v.push(ev(data_event(&format!(
                        r#"{{"id":{id},"object":"text_completion","created":{created},"model":{model}{fp},"choices":[],"usage":{usage}}}"#
                    ))));
                }
                v.push(done());
                v
            }
            Proto::Messages => {
                let stop = match (capped, self.tool.is_some()) {
                    (true, _) => "max_tokens",
                    (false, true) => "tool_use",
                    (false, false) => "end_turn",
                };
                vec![
                    ev(named_event(
                        "content_block_stop",
                        r#"{"type":"content_block_stop","index":0}"#,
                    )),
                    ev(named_event(
                        "message_delta",
                        &format!(
                            r#"{{"type":"message_delta","delta":{{"stop_reason":"{stop}","stop_sequence":null}},"usage":{{"output_tokens":{n_stated}}}}}"#
                        ),
                    )),
                    ev(named_event("message_stop", r#"{"type":"message_stop"}"#)),
                ]
            }
            Proto::Responses if self.tool.is_some() => {
                let kind = if capped {
                    "response.incomplete"
                } else {
                    "response.completed"
                };
                let args = arguments(n);
                let item = self
                    .tool
                    .as_ref()
                    .map(|t| Self::function_item(t, &args, true));
                vec![
                    ev(named_event(
                        "response.function_call_arguments.done",
                        &json!({"type": "response.function_call_arguments.done", "item_id": "fc_0",
                                "output_index": 0, "arguments": args})
                        .to_string(),
                    )),
                    ev(named_event(
                        "response.output_item.done",
                        &json!({"type": "response.output_item.done", "output_index": 0, "item": item})
                            .to_string(),
                    )),
                    ev(named_event(
                        kind,
                        &json!({"type": kind, "response": self.response_object(n, capped)}).to_string(),
                    )),
                ]
            }
            Proto::Responses => {
                let text = answer_text(n, self.shift);
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                let kind = if capped {
                    "response.incomplete"
                } else {
                    "response.completed"
                };
                vec![
                    ev(named_event(
                        "response.output_text.done",
                        &json!({"type": "response.output_text.done", "item_id": "msg_0", "output_index": 0,
                                "content_index": 0, "text": text})
                        .to_string(),
                    )),
                    ev(named_event(
                        "response.content_part.done",
                        &json!({"type": "response.content_part.done", "item_id": "msg_0", "output_index": 0,
                                "content_index": 0, "part": part})
                        .to_string(),
                    )),
                    ev(named_event(
                        "response.output_item.done",
                        &json!({"type": "response.output_item.done", "output_index": 0,
                                "item": self.response_object(n, capped)["output"][0]})
                        .to_string(),
                    )),
                    ev(named_event(
                        kind,
                        &json!({"type": kind, "response": self.response_object(n, capped)}).to_string(),
                    )),
                ]
            }
        }
    }

    /// An event whose data is not JSON (the `malformed` fault).
    pub(crate) fn malformed(&self) -> Event {
        let bytes = match self.proto {
            Proto::Messages => b"event: content_block_delta\ndata: {not json\n\n".to_vec(),
            Proto::Responses => b"event: response.output_text.delta\ndata: {not json\n\n".to_vec(),
            _ => b"data: {not json\n\n".to_vec(),
        };
        Event {
            bytes,
            token: false,
        }
    }

    /// The whole answer as one JSON object (`"stream": false`).
    pub(crate) fn full_body(&self, n: u32, capped: bool) -> Vec<u8> {
        let id: Value = serde_json::from_str(&self.id).unwrap_or(Value::Null);
        let model: Value = serde_json::from_str(&self.model).unwrap_or(Value::Null);
        let text = answer_text(n, self.shift);
        let (p, n_stated) = (self.usage(self.prompt_tokens), self.usage(n));
        let usage = json!({"prompt_tokens": p, "completion_tokens": n_stated, "total_tokens": p + n_stated,
                           "prompt_tokens_details": {"cached_tokens": self.usage(self.cached_tokens)}});
        let reason = match (capped, self.tool.is_some()) {
            (true, _) => "length",
            (false, true) => "tool_calls",
            (false, false) => "stop",
        };
        let v = match (self.proto, &self.tool) {
            (Proto::Chat, Some(t)) => json!({
                "id": id, "object": "chat.completion", "created": self.created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                    "tool_calls": [{"id": t.call_id, "type": "function", "function": {
                        "name": serde_json::from_str::<Value>(&t.name).unwrap_or(Value::Null),
                        "arguments": arguments(n)}}]},
                    "finish_reason": reason}],
                "usage": usage,
            }),
            (Proto::Messages, Some(t)) => json!({
                "id": id, "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "tool_use", "id": t.call_id,
                    "name": serde_json::from_str::<Value>(&t.name).unwrap_or(Value::Null),
                    "input": serde_json::from_str::<Value>(&arguments(n)).unwrap_or(json!({}))}],
                "stop_reason": if capped { "max_tokens" } else { "tool_use" }, "stop_sequence": null,
                "usage": {"input_tokens": self.anthropic_input().0,
                          "cache_read_input_tokens": self.anthropic_input().1, "output_tokens": n_stated},
            }),
            (Proto::Chat, None) => json!({
                "id": id, "object": "chat.completion", "created": self.created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason}],
                "usage": usage,
            }),
            (Proto::Completions, _) => json!({
                "id": id, "object": "text_completion", "created": self.created, "model": model,
                "choices": [{"text": text, "index": 0, "logprobs": null, "finish_reason": reason}],
                "usage": usage,
            }),
            (Proto::Messages, None) => json!({
                "id": id, "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": if capped { "max_tokens" } else { "end_turn" }, "stop_sequence": null,
                "usage": {"input_tokens": self.anthropic_input().0,
                          "cache_read_input_tokens": self.anthropic_input().1, "output_tokens": n_stated},
            }),
            (Proto::Responses, _) => self.response_object(n, capped),
        };
        let mut v = v;
        if let (Some(fp), Proto::Chat | Proto::Completions) = (self.fingerprint(), self.proto) {
            v["system_fingerprint"] = fp;
        }
        v.to_string().into_bytes()
    }
}

/// A 400 refusing a request beyond the model's context: OpenAI's `context_length_exceeded`
/// code (Anthropic's `invalid_request_error` for the Messages API), with `message`.
pub(crate) fn context_error_body(proto: Proto, message: &str) -> Vec<u8> {
    let v = if proto == Proto::Messages {
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
    } else {
        json!({"error": {"message": message, "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
    };
    v.to_string().into_bytes()
}

/// An error body in the shape of the endpoint's API. 529 always gets Anthropic's
/// `overloaded_error` shape, as that status is Anthropic's.
pub(crate) fn error_body(proto: Option<Proto>, status: u16, message: &str) -> Vec<u8> {
    let anthropic = proto == Some(Proto::Messages) || status == 529;
    let v = if anthropic {
        let kind = match status {
            400 => "invalid_request_error",
            401 => "authentication_error",
            402 => "billing_error",
            403 => "permission_error",
            404 | 405 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            529 => "overloaded_error",
            s if s < 500 => "invalid_request_error",
            _ => "api_error",
        };
        json!({"type": "error", "error": {"type": kind, "message": message}})
    } else {
        let (kind, code) = match status {
            401 => ("invalid_request_error", json!("invalid_api_key")),
            403 => ("invalid_request_error", json!("permission_denied")),
            404 | 405 => ("invalid_request_error", json!("not_found")),
            429 => ("requests", json!("rate_limit_exceeded")),
            s if s < 500 => ("invalid_request_error", Value::Null),
            _ => ("server_error", Value::Null),
        };
        json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
    };
    v.to_string().into_bytes()
}

/// The message of a simulated status fault.
pub(crate) fn fault_message(status: u16) -> &'static str {
    match status {
        401 => "Incorrect API key provided (simulated).",
        403 => "Permission denied (simulated).",
        429 => "Rate limit reached for requests (simulated).",
        500 => "The server had an error while processing your request (simulated).",
        503 => "The server is temporarily unavailable (simulated).",
        529 => "Overloaded (simulated).",
        _ => "Simulated error.",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Api, EventMeaning};
    use crate::sse::SseDecoder;

    /// Decodes `bytes` with the project's SSE decoder and interprets each event.
    fn meanings(api: Api, bytes: &[u8]) -> Vec<EventMeaning> {
        let mut d = SseDecoder::new();
        d.feed(bytes)
            .unwrap()
            .iter()
            .map(|e| api.interpret(e).unwrap())
            .collect()
    }

    fn whole_stream(r: &Renderer, n: u32, include_usage: bool) -> Vec<u8> {
        let mut all = Vec::new();
        for e in r.opening() {
            all.extend(e.bytes);
        }
        let mut buf = Vec::new();
        for k in 0..n {
            r.token_event(&mut buf, k, 1);
            all.extend_from_slice(&buf);
        }
        for e in r.closing(n, false, include_usage) {
            all.extend(e.bytes);
        }
        all
    }

    #[test]
    fn chat_stream_reads_as_tokenprobe_expects() {
        let r = Renderer::new(Proto::Chat, "chatcmpl-\"x", "m\\1", 1, 7);
        let m = meanings(Api::OpenaiChat, &whole_stream(&r, 3, true));
        assert_eq!(m.len(), 7); // role, 3 tokens, finish, usage, [DONE]
        assert!(!m[0].token);
        assert!(m[1..4].iter().all(|e| e.token && e.output));
        assert_eq!(m[1].text, "Hello");
        assert!(m[4].finish && !m[4].token);
        assert_eq!((m[5].usage_output, m[5].usage_input), (Some(3), Some(7)));
        assert!(m[6].terminal);
    }

    #[test]
    fn completions_and_messages_streams() {
        let r = Renderer::new(Proto::Completions, "cmpl-1", "m", 1, 2);
        let m = meanings(Api::OpenaiCompletions, &whole_stream(&r, 2, false));
        assert_eq!(m.len(), 4);
        assert!(m[0].token && m[1].token && m[2].finish && m[3].terminal);
        let r = Renderer::new(Proto::Messages, "msg_1", "claude", 1, 9);
        let m = meanings(Api::AnthropicMessages, &whole_stream(&r, 2, true));
        assert_eq!(m.len(), 8);
        assert_eq!(m[0].usage_input_uncached, Some(9));
        assert!(m[3].token && m[4].token);
        assert!(m[6].finish);
        assert_eq!(m[6].usage_output, Some(2));
        assert!(m[7].terminal);
    }

    #[test]
    fn responses_stream() {
        let r = Renderer::new(Proto::Responses, "resp_1", "gpt", 1, 4);
        let m = meanings(Api::OpenaiResponses, &whole_stream(&r, 3, false));
        assert_eq!(m.len(), 3 + 3 + 4);
        assert!(m[..3].iter().all(|e| !e.token));
        assert!(m[3..6].iter().all(|e| e.token && e.output));
        let last = m.last().unwrap();
        assert!(last.terminal && last.finish);
        assert_eq!((last.usage_output, last.usage_input), (Some(3), Some(4)));
    }

    #[test]
    fn chunks_concatenate_tokens_and_malformed_is_not_json() {
        let r = Renderer::new(Proto::Chat, "c", "m", 1, 1);
        let mut buf = Vec::new();
        r.token_event(&mut buf, 0, 3);
        assert_eq!(meanings(Api::OpenaiChat, &buf)[0].text, "Hello, this");
        let mut d = SseDecoder::new();
        let ev = d.feed(&r.malformed().bytes).unwrap();
        assert!(Api::OpenaiChat.interpret(&ev[0]).is_err());
    }

    #[test]
    fn cached_tokens_are_reported_in_each_usage_shape() {
        let r = Renderer::new(Proto::Chat, "c", "m", 1, 100).with_cached(64);
        let v: Value = serde_json::from_slice(&r.full_body(2, false)).unwrap();
        assert_eq!(v["usage"]["prompt_tokens"], 100);
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 64);
        let closing = r.closing(2, false, true);
        let usage = String::from_utf8(closing[1].bytes.clone()).unwrap();
        let v: Value = serde_json::from_str(usage.trim().trim_start_matches("data: ")).unwrap();
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 64);
        assert_eq!(v["usage"]["prompt_tokens"], 100);
        let r = Renderer::new(Proto::Messages, "m", "m", 1, 100).with_cached(64);
        let v: Value = serde_json::from_slice(&r.full_body(2, false)).unwrap();
        assert_eq!(
            (
                v["usage"]["input_tokens"].as_u64(),
                v["usage"]["cache_read_input_tokens"].as_u64()
            ),
            (Some(36), Some(64))
        );
        let r = Renderer::new(Proto::Responses, "r", "m", 1, 100).with_cached(200);
        let v: Value = serde_json::from_slice(&r.full_body(2, false)).unwrap();
        assert_eq!(
            v["usage"]["input_tokens_details"]["cached_tokens"], 100,
            "never more than the input"
        );
    }

    #[test]
    fn full_bodies_and_errors_are_json() {
        for p in [
            Proto::Chat,
            Proto::Completions,
            Proto::Messages,
            Proto::Responses,
        ] {
            let r = Renderer::new(p, "i", "m", 1, 1);
            let v: Value = serde_json::from_slice(&r.full_body(4, true)).unwrap();
            assert!(v.to_string().contains("Hello, this is"), "{v}");
        }
        let v: Value = serde_json::from_slice(&error_body(Some(Proto::Chat), 429, "x")).unwrap();
        assert_eq!(v["error"]["code"], "rate_limit_exceeded");
        let v: Value = serde_json::from_slice(&error_body(Some(Proto::Chat), 529, "x")).unwrap();
        assert_eq!(v["error"]["type"], "overloaded_error");
        let v: Value =
            serde_json::from_slice(&error_body(Some(Proto::Messages), 401, "x")).unwrap();
        assert_eq!(v["error"]["type"], "authentication_error");
    }

    /// A tool-call answer, streamed or whole, reads back through the project's own protocol
    /// readers as one call of the tool, its arguments the answer's tokens.
    #[test]
    fn tool_call_answers_read_as_one_call() {
        use crate::measure::Measurement;
        use std::time::Instant;
        for (proto, api) in [
            (Proto::Chat, Api::OpenaiChat),
            (Proto::Messages, Api::AnthropicMessages),
            (Proto::Responses, Api::OpenaiResponses),
        ] {
            let r = Renderer::new(proto, "sim-1", "m", 1, 50).with_tool_call("tool_0", 3);
            assert!(r.is_tool_call());
            let t0 = Instant::now();
            let mut m = Measurement::new(t0);
            m.headers(t0, 200);
            let events = meanings(api, &whole_stream(&r, 3, true));
            assert_eq!(events.iter().filter(|e| e.token).count(), 3, "{api}");
            assert!(events.iter().all(|e| !e.output), "{api}: no visible text");
            for e in &events {
                m.event(t0, e);
            }
            let res = m.finish();
            assert!(res.success(), "{api}: {res:?}");
            assert_eq!(res.tool_calls.len(), 1, "{api}");
            let c = &res.tool_calls[0];
            assert_eq!(c.name, "tool_0", "{api}");
            assert!(c.id.starts_with("call_"), "{api}: {}", c.id);
            assert_eq!(c.arguments, r#"{"query":"Hello, this"}"#, "{api}");
            let v: Value = serde_json::from_str(&c.arguments).unwrap();
            assert_eq!(v["query"], "Hello, this");
            // The whole answer: the same call.
            let whole = api
                .interpret_answer(&String::from_utf8(r.full_body(3, false)).unwrap())
                .unwrap();
            assert_eq!(whole.tool_calls.len(), 1, "{api}");
            assert_eq!(whole.tool_calls[0].name.as_deref(), Some("tool_0"));
        }
        // The finish reasons say it was a call.
        let r = Renderer::new(Proto::Chat, "i", "m", 1, 1).with_tool_call("t", 2);
        let closing = String::from_utf8(r.closing(2, false, false)[0].bytes.clone()).unwrap();
        assert!(
            closing.contains(r#""finish_reason":"tool_calls""#),
            "{closing}"
        );
        let r = Renderer::new(Proto::Messages, "i", "m", 1, 1).with_tool_call("t", 2);
        let closing = String::from_utf8(r.closing(2, false, false)[1].bytes.clone()).unwrap();
        assert!(closing.contains(r#""stop_reason":"tool_use""#), "{closing}");
        // Completions have no tools.
        let r = Renderer::new(Proto::Completions, "i", "m", 1, 1).with_tool_call("t", 2);
        assert!(!r.is_tool_call());
    }

    /// Issue 43 item 6: an answer says of itself what the simulator is told to lie: another
    /// model, scaled usage, a fingerprint, other words; every stream still reads as one.
    #[test]
    fn an_answer_says_what_it_is_told() {
        let says = Says {
            model: Some("cheap-model".into()),
            usage_scale: 2.0,
            fingerprint: Some("fp_b".into()),
            shift: 1,
        };
        let r = Renderer::new(Proto::Chat, "c", "m", 1, 7).saying(&says);
        let m = meanings(Api::OpenaiChat, &whole_stream(&r, 3, true));
        assert!(m.iter().filter(|e| e.served_model.is_some()).all(|e| {
            e.served_model.as_deref() == Some("cheap-model")
                && e.system_fingerprint.as_deref() == Some("fp_b")
        }));
        assert_eq!(m[1].text, ",", "from the second word on");
        assert_eq!((m[5].usage_output, m[5].usage_input), (Some(6), Some(14)));
        let v: Value = serde_json::from_slice(&r.full_body(3, false)).unwrap();
        assert_eq!(
            (
                &v["model"],
                &v["system_fingerprint"],
                &v["usage"]["completion_tokens"]
            ),
            (&json!("cheap-model"), &json!("fp_b"), &json!(6))
        );
        assert_eq!(v["choices"][0]["message"]["content"], ", this is");
        let r = Renderer::new(Proto::Messages, "c", "m", 1, 7).saying(&says);
        let m = meanings(Api::AnthropicMessages, &whole_stream(&r, 3, true));
        assert_eq!(m[0].served_model.as_deref(), Some("cheap-model"));
        assert_eq!(m[0].usage_input_uncached, Some(14));
        assert_eq!(m[7].usage_output, Some(6));
        let r = Renderer::new(Proto::Responses, "c", "m", 1, 7).saying(&says);
        let m = meanings(Api::OpenaiResponses, &whole_stream(&r, 3, true));
        let last = m.last().unwrap();
        assert_eq!(
            (last.usage_output, last.served_model.as_deref()),
            (Some(6), Some("cheap-model"))
        );
        // Told nothing, it says what it said before.
        let plain = Renderer::new(Proto::Chat, "c", "m", 1, 7);
        let told = Renderer::new(Proto::Chat, "c", "m", 1, 7).saying(&Says::default());
        assert_eq!(whole_stream(&plain, 3, true), whole_stream(&told, 3, true));
    }
}
