//! OpenAI streaming shapes: Chat Completions, legacy Completions and Responses.
//!
//! Sources: OpenAI API reference (chat completion chunk object, `stream_options.include_usage`,
//! Responses streaming events) and docs/measurement.md's token-bearing rules. Usage details: the
//! OpenAI reference's `usage.prompt_tokens_details.cached_tokens` and
//! `completion_tokens_details.reasoning_tokens` (Responses: `input_tokens_details` and
//! `output_tokens_details`), which vLLM and SGLang send in the same shape; DeepSeek's
//! `prompt_cache_hit_tokens` (its context-caching guide). The answer's identity: `id`, `model`
//! and `system_fingerprint` of every chunk and answer, the `response` object of the Responses
//! events.

use super::{
    BodyParams, EventMeaning, Malformed, ServerTimings, StreamError, borrowed, error_object,
    failure_finish, identity_value, json_object, non_empty_str, tools, usage_at,
};
use crate::sse::SseEvent;
use serde_json::{Map, Value, json};

/// Events of a chat or completions stream that carry no JSON chunk: `event: error`, `[DONE]`,
/// empty data. Ruling 27: on these protocols the SSE event name decides nothing else: the data does.
fn preamble(ev: &SseEvent) -> Option<Result<EventMeaning, Malformed>> {
    if ev.event.as_deref() == Some("error") {
        return Some(Ok(EventMeaning {
            error: Some(StreamError::from_payload(&ev.data)),
            ..EventMeaning::default()
        }));
    }
    let data = ev.data.trim();
    if data == "[DONE]" {
        return Some(Ok(EventMeaning {
            terminal: true,
            ..EventMeaning::default()
        }));
    }
    if data.is_empty() {
        return Some(Ok(EventMeaning::default()));
    }
    None
}

fn choices(v: &Value) -> Result<&[Value], Malformed> {
    match v.get("choices") {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(Malformed::new("`choices` is not an array")),
    }
}

/// A chat or completions event: fully interpreted already (`[DONE]`, an error or unknown event
/// type, empty data), or a JSON chunk with what every chunk may carry (a top-level error, usage,
/// llama.cpp's `timings`) filled in; the caller reads `choices`.
enum Chunk {
    Done(EventMeaning),
    Json(Value, EventMeaning),
}

/// `identity`: read the chunk's `id`, `model` and `system_fingerprint` too.
fn chunk(ev: &SseEvent, identity: bool) -> Result<Chunk, Malformed> {
    if let Some(r) = preamble(ev) {
        return r.map(Chunk::Done);
    }
    let v = json_object(&ev.data)?;
    let mut m = EventMeaning {
        error: error_object(&v),
        ..EventMeaning::default()
    };
    if identity {
        m.set_identity(&v);
    }
    // Ruling 22: without a top-level usage object, one inside a choice is the chunk's usage
    // (its details too).
    let usage_holder = if v.get("usage").is_some_and(Value::is_object) {
        Some(&v)
    } else {
        choices(&v)?
            .iter()
            .find(|c| c.get("usage").is_some_and(Value::is_object))
    };
    if let Some(holder) = usage_holder {
        m.set_usage(usage_at(holder, "completion_tokens", "prompt_tokens"));
    }
    m.server_timings = v.get("timings").and_then(ServerTimings::from_json);
    Ok(Chunk::Json(v, m))
}

/// A choice's `finish_reason`: a proper end, or (ruling 23) a failure at this chunk.
fn finish_reason(choice: &Value, m: &mut EventMeaning) {
    match choice.get("finish_reason").and_then(Value::as_str) {
        Some(reason) if failure_finish(reason) => {
            m.error.get_or_insert_with(|| StreamError {
                message: Some(format!(
                    "finish_reason {reason:?}: the server ended the request as failed"
                )),
                ..StreamError::default()
            });
        }
        Some(_) => m.finish = true,
        None => {}
    }
}

/// An event's meaning read the fast way ([`borrowed`]), each choice by `choice`; `None` when
/// it is not a JSON chunk of the common shape (the `Value` reading then takes it).
fn borrowed_meaning(
    ev: &SseEvent,
    identity: bool,
    choice: impl Fn(&borrowed::Choice<'_>, &mut EventMeaning),
) -> Option<EventMeaning> {
    if preamble(ev).is_some() {
        return None;
    }
    let c = borrowed::chunk(&ev.data, identity).ok()?;
    let text = |t: &Option<std::borrow::Cow<'_, str>>| t.as_deref().and_then(identity_value);
    let mut m = EventMeaning {
        response_id: text(&c.id),
        served_model: text(&c.model),
        system_fingerprint: text(&c.system_fingerprint),
        ..EventMeaning::default()
    };
    m.set_usage(c.usage);
    for ch in &c.choices {
        choice(ch, &mut m);
        m.finish |= ch.finish;
    }
    Some(m)
}

/// A visible text channel: non-empty text is token-bearing output.
fn visible(s: Option<&str>, m: &mut EventMeaning) {
    if let Some(s) = s.filter(|s| !s.is_empty()) {
        m.token = true;
        m.output = true;
        m.text.push_str(s);
    }
}

/// OpenAI Chat Completions chunk; `identity`: with the chunk's `id`, `model` and
/// `system_fingerprint`.
pub(super) fn chat(ev: &SseEvent, identity: bool) -> Result<EventMeaning, Malformed> {
    let fast = borrowed_meaning(ev, identity, |ch, m| {
        if let Some(d) = &ch.delta {
            visible(d.content.as_deref(), m);
            visible(d.refusal.as_deref(), m);
            m.hidden(d.reasoning_content.as_deref());
            m.hidden(d.reasoning.as_deref());
        }
    });
    match fast {
        Some(m) => Ok(m),
        None => chat_value(ev, identity),
    }
}

/// OpenAI Chat Completions chunk, read as a `Value` (every shape).
fn chat_value(ev: &SseEvent, identity: bool) -> Result<EventMeaning, Malformed> {
    let (v, mut m) = match chunk(ev, identity)? {
        Chunk::Done(m) => return Ok(m),
        Chunk::Json(v, m) => (v, m),
    };
    for choice in choices(&v)? {
        if let Some(delta) = choice.get("delta").filter(|d| d.is_object()) {
            for key in ["content", "refusal"] {
                visible(non_empty_str(delta, key), &mut m);
            }
            for key in ["reasoning_content", "reasoning"] {
                m.hidden(non_empty_str(delta, key));
            }
            if let Some(Value::Array(calls)) = delta.get("tool_calls") {
                m.tool_calls.extend(tools::chat_parts(calls));
            }
            tool_calls(delta, &mut m);
        }
        finish_reason(choice, &mut m);
    }
    Ok(m)
}

/// A chat delta's or message's `tool_calls`: each function's name and arguments are output.
fn tool_calls(holder: &Value, m: &mut EventMeaning) {
    if let Some(Value::Array(calls)) = holder.get("tool_calls") {
        for f in calls.iter().filter_map(|c| c.get("function")) {
            m.hidden(non_empty_str(f, "name"));
            m.hidden(non_empty_str(f, "arguments"));
        }
    }
}

/// OpenAI legacy Completions chunk (`choices[*].text`); `identity` as for [`chat`].
pub(super) fn completions(ev: &SseEvent, identity: bool) -> Result<EventMeaning, Malformed> {
    match borrowed_meaning(ev, identity, |ch, m| visible(ch.text.as_deref(), m)) {
        Some(m) => Ok(m),
        None => completions_value(ev, identity),
    }
}

/// OpenAI legacy Completions chunk, read as a `Value` (every shape).
fn completions_value(ev: &SseEvent, identity: bool) -> Result<EventMeaning, Malformed> {
    let (v, mut m) = match chunk(ev, identity)? {
        Chunk::Done(m) => return Ok(m),
        Chunk::Json(v, m) => (v, m),
    };
    for choice in choices(&v)? {
        visible(non_empty_str(choice, "text"), &mut m);
        finish_reason(choice, &mut m);
    }
    Ok(m)
}

/// OpenAI Responses typed event (`type` in the data, mirrored by the SSE `event:` field).
pub(super) fn responses(ev: &SseEvent) -> Result<EventMeaning, Malformed> {
    let data = ev.data.trim();
    if data.is_empty() || data == "[DONE]" {
        return Ok(EventMeaning {
            terminal: data == "[DONE]",
            ..EventMeaning::default()
        });
    }
    let v = json_object(data)?;
    let kind = v
        .get("type")
        .and_then(Value::as_str)
        .or(ev.event.as_deref())
        .unwrap_or_default();
    let mut m = EventMeaning::default();
    if kind != "error"
        && let Some(e) = error_object(&v)
    {
        // A chat-style error object holds for every protocol, whatever its event type (case 94).
        m.error = Some(e);
        return Ok(m);
    }
    // The `response` object of `response.created` (and of every later state) names the
    // response and its model.
    if let Some(resp) = v.get("response").filter(|r| r.is_object()) {
        m.set_identity(resp);
    }
    let delta = non_empty_str(&v, "delta");
    match kind {
        "response.output_text.delta" | "response.refusal.delta" => {
            if let Some(d) = delta {
                m.token = true;
                m.output = true;
                m.text.push_str(d);
            }
        }
        "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
            m.hidden(delta);
        }
        "response.function_call_arguments.delta" => {
            m.hidden(delta);
            if let Some(d) = delta {
                m.tool_calls.push(tools::ToolCallPart {
                    index: v.get("output_index").and_then(Value::as_u64).unwrap_or(0),
                    arguments: d.to_owned(),
                    ..tools::ToolCallPart::default()
                });
            }
        }
        "response.output_item.added" => {
            // A function call opens with its call id and name (its arguments come as deltas).
            if let Some(item) = v.get("item").filter(|i| i["type"] == "function_call") {
                let index = v.get("output_index").and_then(Value::as_u64).unwrap_or(0);
                m.tool_calls.push(tools::responses_part(index, item));
            }
        }
        "response.completed" | "response.incomplete" => {
            // `incomplete` is a proper end cut short (e.g. max_output_tokens), like
            // finish_reason "length" in chat.
            m.finish = true;
            m.terminal = true;
            if let Some(resp) = v.get("response") {
                m.set_usage(usage_at(resp, "output_tokens", "input_tokens"));
            }
        }
        "response.failed" => {
            let err = v
                .get("response")
                .and_then(|r| r.get("error"))
                .filter(|e| e.is_object())
                .map(StreamError::from_json)
                .unwrap_or_default();
            m.error = Some(err);
        }
        "error" => m.error = Some(StreamError::from_json(&v)),
        _ => {}
    }
    Ok(m)
}

fn merge_extra(mut body: Value, req: &BodyParams<'_>) -> Value {
    if let (Some(extra), Some(obj)) = (req.extra_body, body.as_object_mut()) {
        for (k, v) in extra {
            obj.insert(k.clone(), v.clone());
        }
    }
    body
}

/// `stream` (with `stream_options` only when streaming), the output cap and the exact-output
/// switch: what every OpenAI body asks the same way (`cap` is the protocol's name for the cap).
fn stream_fields(body: &mut Map<String, Value>, req: &BodyParams<'_>, cap: &str, options: bool) {
    body.insert("stream".into(), Value::Bool(req.stream));
    if req.stream && options && req.include_usage {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(n) = req.max_tokens {
        body.insert(cap.into(), json!(n));
    }
    if let Some((k, v)) = req.exact_output.field(req.max_tokens) {
        body.insert(k.into(), v);
    }
}

pub(super) fn chat_body(req: &BodyParams<'_>) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    let messages = if tools::any_tool_part(req.messages) {
        tools::chat_messages(req.messages)
    } else {
        json!(req.messages)
    };
    body.insert("messages".into(), messages);
    stream_fields(&mut body, req, "max_tokens", true);
    tools::chat_tools(&mut body, req.tools, req.tool_choice);
    merge_extra(Value::Object(body), req)
}

pub(super) fn completions_body(req: &BodyParams<'_>) -> Value {
    let prompt: Vec<&str> = req.messages.iter().map(|m| m.content.as_str()).collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("prompt".into(), json!(prompt.join("\n")));
    stream_fields(&mut body, req, "max_tokens", true);
    merge_extra(Value::Object(body), req)
}

pub(super) fn responses_body(req: &BodyParams<'_>) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    let input = if tools::any_tool_part(req.messages) {
        tools::responses_input(req.messages)
    } else {
        json!(req.messages)
    };
    body.insert("input".into(), input);
    stream_fields(&mut body, req, "max_output_tokens", false);
    tools::responses_tools(&mut body, req.tools, req.tool_choice);
    merge_extra(Value::Object(body), req)
}

// -- whole answers (`"stream": false`) ------------------------------------------------------

/// `choices` of a whole answer: a non-empty array, or it is not an answer.
fn answer_choices(v: &Value) -> Result<&[Value], Malformed> {
    match v.get("choices") {
        Some(Value::Array(a)) if !a.is_empty() => Ok(a),
        Some(Value::Array(_)) => Err(Malformed::new("the answer has no choices")),
        Some(_) => Err(Malformed::new("`choices` is not an array")),
        None => Err(Malformed::new(
            "JSON without `choices`: not a chat or completions answer",
        )),
    }
}

/// Usage, the answer's identity and llama.cpp's `timings`, which chat and completions answers
/// carry alike.
fn answer_common(v: &Value) -> EventMeaning {
    let mut m = EventMeaning::default();
    m.set_usage(usage_at(v, "completion_tokens", "prompt_tokens"));
    m.set_identity(v);
    m.server_timings = v.get("timings").and_then(ServerTimings::from_json);
    m
}

/// A whole Chat Completions answer: `choices[*].message` with `content`, `refusal`,
/// `reasoning_content`/`reasoning` and `tool_calls`, as the streaming deltas have them.
pub(super) fn chat_answer(v: &Value) -> Result<EventMeaning, Malformed> {
    let mut m = answer_common(v);
    for choice in answer_choices(v)? {
        let Some(msg) = choice.get("message").filter(|d| d.is_object()) else {
            return Err(Malformed::new("a choice without a `message` object"));
        };
        for key in ["content", "refusal"] {
            if let Some(s) = non_empty_str(msg, key) {
                m.token = true;
                m.output = true;
                m.text.push_str(s);
            }
        }
        for key in ["reasoning_content", "reasoning"] {
            m.hidden(non_empty_str(msg, key));
        }
        if let Some(Value::Array(calls)) = msg.get("tool_calls") {
            m.tool_calls.extend(tools::chat_parts(calls));
        }
        tool_calls(msg, &mut m);
        m.finish |= choice.get("finish_reason").is_some_and(Value::is_string);
    }
    Ok(m)
}

/// A whole legacy Completions answer: `choices[*].text`.
pub(super) fn completions_answer(v: &Value) -> Result<EventMeaning, Malformed> {
    let mut m = answer_common(v);
    for choice in answer_choices(v)? {
        match choice.get("text") {
            Some(Value::String(s)) => {
                if !s.is_empty() {
                    m.token = true;
                    m.output = true;
                    m.text.push_str(s);
                }
            }
            _ => return Err(Malformed::new("a choice without a `text` string")),
        }
        m.finish |= choice.get("finish_reason").is_some_and(Value::is_string);
    }
    Ok(m)
}

/// A whole Responses answer (a `response` object): `output[]` items of type `message`
/// (`content[]` parts `output_text` and `refusal`), `reasoning` (`content[]`/`summary[]` text) and
/// `function_call` (`arguments`); `status` `completed` or `incomplete` is a proper end, `failed`
/// (with its `error`) an error object.
pub(super) fn responses_answer(v: &Value) -> Result<EventMeaning, Malformed> {
    let mut m = EventMeaning::default();
    m.set_identity(v);
    let status = v.get("status").and_then(Value::as_str);
    if status == Some("failed") {
        // A failed response without an `error` object (with one, it was read as an error object).
        m.error = Some(StreamError::default());
        return Ok(m);
    }
    let Some(Value::Array(items)) = v.get("output") else {
        return Err(Malformed::new(
            "JSON without an `output` array: not a Responses answer",
        ));
    };
    m.set_usage(usage_at(v, "output_tokens", "input_tokens"));
    m.finish = matches!(status, Some("completed" | "incomplete"));
    fn parts<'a>(item: &'a Value, key: &str) -> &'a [Value] {
        match item.get(key) {
            Some(Value::Array(a)) => a,
            _ => &[],
        }
    }
    for (i, item) in items.iter().enumerate() {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in parts(item, "content") {
                    let text = match part.get("type").and_then(Value::as_str) {
                        Some("output_text") => non_empty_str(part, "text"),
                        Some("refusal") => non_empty_str(part, "refusal"),
                        _ => None,
                    };
                    if let Some(t) = text {
                        m.token = true;
                        m.output = true;
                        m.text.push_str(t);
                    }
                }
            }
            Some("reasoning") => {
                for p in ["content", "summary"].iter().flat_map(|k| parts(item, k)) {
                    m.hidden(non_empty_str(p, "text"));
                }
            }
            Some("function_call") => {
                m.hidden(non_empty_str(item, "name"));
                m.hidden(non_empty_str(item, "arguments"));
                m.tool_calls.push(tools::responses_part(i as u64, item));
            }
            _ => {}
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Api, Message};

    fn ev(data: &str) -> SseEvent {
        SseEvent {
            data: data.into(),
            has_data: true,
            ..SseEvent::default()
        }
    }

    fn chat_of(data: &str) -> EventMeaning {
        chat_full(&ev(data)).unwrap()
    }

    fn chat_full(e: &SseEvent) -> Result<EventMeaning, Malformed> {
        chat(e, true)
    }

    fn completions_full(e: &SseEvent) -> Result<EventMeaning, Malformed> {
        completions(e, true)
    }

    /// A key and how to draw its value.
    type Field<'a> = (&'a str, &'a dyn Fn(&mut crate::rng::Rng) -> String);

    fn pick<'a>(r: &mut crate::rng::Rng, xs: &[&'a str]) -> &'a str {
        xs[r.below(xs.len() as u64) as usize]
    }

    /// Values of every JSON type, escapes included.
    const ANY: &[&str] = &[
        r#""hi""#,
        r#""""#,
        r#""a\"b""#,
        r#""\u00e9t\u00e9""#,
        "null",
        "5",
        "-3",
        "2.5",
        "true",
        r#"[1,"x",{"a":[]}]"#,
        r#"{"a":1,"b":{"c":null}}"#,
        r#"" ""#,
    ];

    /// Counts, and values that are none.
    const COUNT: &[&str] = &["7", "0", "-1", "1.5", "1e3", r#""9""#, "null", "{}", "[]"];

    /// An object of a random number of the keys (repeats included), each value drawn.
    fn obj(r: &mut crate::rng::Rng, keys: &[Field<'_>]) -> String {
        let mut parts = Vec::new();
        for _ in 0..r.below(keys.len() as u64 + 2) {
            let (k, v) = &keys[r.below(keys.len() as u64) as usize];
            parts.push(format!("\"{k}\":{}", v(r)));
        }
        format!("{{{}}}", parts.join(","))
    }

    /// A random `usage`: counts and their details in every shape, DeepSeek's count, odd types.
    fn random_usage(r: &mut crate::rng::Rng) -> String {
        if r.below(6) == 0 {
            return pick(r, ANY).to_string();
        }
        let c = |r: &mut crate::rng::Rng| pick(r, COUNT).to_string();
        let details = |r: &mut crate::rng::Rng| {
            if r.below(6) == 0 {
                return pick(r, ANY).to_string();
            }
            obj(
                r,
                &[
                    ("cached_tokens", &c),
                    ("reasoning_tokens", &c),
                    ("audio_tokens", &c),
                    ("cach\\u0065d_tokens", &c),
                ],
            )
        };
        if r.below(3) == 0 {
            // Every count at once, as vLLM and DeepSeek send them.
            return format!(
                r#"{{"prompt_tokens":{},"completion_tokens":{},"prompt_tokens_details":{{"cached_tokens":{}}},"completion_tokens_details":{{"reasoning_tokens":{}}},"prompt_cache_hit_tokens":{}}}"#,
                c(r),
                c(r),
                c(r),
                c(r),
                c(r)
            );
        }
        obj(
            r,
            &[
                ("completion_tokens", &c),
                ("prompt_tokens", &c),
                ("total_tokens", &c),
                ("prompt_tokens_details", &details),
                ("completion_tokens_details", &details),
                ("prompt_cache_hit_tokens", &c),
            ],
        )
    }

    /// A random chat or completions chunk: the common shape, its odd variants (values of other
    /// types, escapes, repeated keys, tool calls, errors, timings, usage details, identities)
    /// and broken JSON.
    fn random_chunk(r: &mut crate::rng::Rng) -> String {
        let any = |r: &mut crate::rng::Rng| pick(r, ANY).to_string();
        let delta = |r: &mut crate::rng::Rng| {
            if r.below(8) == 0 {
                return pick(r, ANY).to_string();
            }
            let tool = |r: &mut crate::rng::Rng| {
                pick(
                    r,
                    &["null", "[]", r#"[{"function":{"name":"f"}}]"#, r#""x""#],
                )
                .to_string()
            };
            let role = |_: &mut crate::rng::Rng| r#""assistant""#.to_string();
            let mut o = obj(
                r,
                &[
                    ("content", &any),
                    ("content", &any),
                    ("refusal", &any),
                    ("reasoning_content", &any),
                    ("reasoning", &any),
                    ("role", &role),
                    ("tool_calls", &tool),
                    ("con\\u0074ent", &any),
                ],
            );
            if r.below(2) == 0 {
                o = format!(
                    r#"{{"content":"tok"{}"#,
                    if o == "{}" {
                        "}".into()
                    } else {
                        format!(",{}", &o[1..])
                    }
                );
            }
            o
        };
        let usage = random_usage;
        let finish = |r: &mut crate::rng::Rng| match r.below(3) {
            0 => pick(r, &[r#""stop""#, r#""abort""#, r#""error""#, r#""length""#]).to_string(),
            _ => any(r),
        };
        let choice = |r: &mut crate::rng::Rng| {
            if r.below(10) == 0 {
                return pick(r, ANY).to_string();
            }
            let index = |_: &mut crate::rng::Rng| "0".to_string();
            obj(
                r,
                &[
                    ("delta", &delta),
                    ("delta", &delta),
                    ("text", &any),
                    ("finish_reason", &finish),
                    ("index", &index),
                    ("logprobs", &any),
                    ("usage", &usage),
                ],
            )
        };
        let choices = |r: &mut crate::rng::Rng| match r.below(8) {
            0 => pick(r, ANY).to_string(),
            _ => {
                let n = r.below(3);
                let items: Vec<String> = (0..n).map(|_| choice(r)).collect();
                format!("[{}]", items.join(","))
            }
        };
        let error = |r: &mut crate::rng::Rng| {
            pick(
                r,
                &[
                    "null",
                    r#"{"message":"overloaded","code":529}"#,
                    r#""boom""#,
                ],
            )
            .to_string()
        };
        let timings = |r: &mut crate::rng::Rng| {
            pick(r, &["null", r#"{"predicted_n":3,"predicted_ms":1.5}"#, "3"]).to_string()
        };
        let long = format!("\"{}\"", "m".repeat(300));
        let identity = |r: &mut crate::rng::Rng| match r.below(3) {
            0 => pick(r, ANY).to_string(),
            1 => long.clone(),
            _ => pick(
                r,
                &[
                    r#""chatcmpl-1""#,
                    r#""gpt-4o-2024-08-06""#,
                    r#""fp_\u0007x""#,
                    r#""  ""#,
                    r#"" a\nb ""#,
                ],
            )
            .to_string(),
        };
        let object = |r: &mut crate::rng::Rng| {
            pick(r, &[r#""chat.completion.chunk""#, r#""error""#, "null"]).to_string()
        };
        let mut top = obj(
            r,
            &[
                ("choices", &choices),
                ("choices", &choices),
                ("choices", &choices),
                ("usage", &usage),
                ("error", &error),
                ("timings", &timings),
                ("id", &identity),
                ("model", &identity),
                ("system_fingerprint", &identity),
                ("object", &object),
            ],
        );
        match r.below(20) {
            0 => top = pick(r, ANY).to_string(),
            1 => top.truncate(top.len() / 2),
            2 => top = format!("  {top}\n"),
            3 => top.push_str(" x"),
            _ => {}
        }
        top
    }

    /// The fast reading gives every event it takes the meaning the `Value` reading gives it,
    /// with and without the answer's identity.
    #[test]
    fn the_borrowed_reading_means_what_the_value_reading_means() {
        type Reading = fn(&SseEvent, bool) -> Result<EventMeaning, Malformed>;
        let mut r = crate::rng::Rng::new(26);
        let (mut fast, mut total) = (0, 0);
        let (mut details, mut identities) = (0, 0);
        for _ in 0..20_000 {
            let e = ev(&random_chunk(&mut r));
            for (name, quick, slow) in [
                ("chat", chat as Reading, chat_value as Reading),
                ("completions", completions, completions_value),
            ] {
                for identity in [true, false] {
                    total += 1;
                    let q = quick(&e, identity);
                    assert_eq!(q, slow(&e, identity), "{name} {identity}: {}", e.data);
                    let took = borrowed::chunk(&e.data, identity).is_ok() && preamble(&e).is_none();
                    fast += usize::from(took);
                    if let Ok(m) = q {
                        details += usize::from(
                            took && (m.usage_cached_input.is_some() || m.usage_reasoning.is_some()),
                        );
                        identities += usize::from(took && m.served_model.is_some());
                        assert!(identity || (m.served_model, m.response_id).eq(&(None, None)));
                    }
                }
            }
        }
        // Both ways were taken often (about a quarter fast: the generator favours odd shapes),
        // and the fast way read usage details and identities.
        assert!(
            fast * 5 > total && (total - fast) * 5 > total,
            "{fast} of {total} took the fast reading"
        );
        assert!(details > 100 && identities > 500, "{details} {identities}");
        let common =
            r#"{"id":"x","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#;
        assert!(borrowed::chunk(common, true).is_ok());
        assert_eq!(chat_of(common).text, "Hi");
    }

    #[test]
    fn role_only_empty_and_null_content_are_not_tokens() {
        for d in [
            r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"delta":{"role":"assistant","content":null}}]}"#,
            r#"{"choices":[{"delta":{"role":"assistant"}}]}"#,
            r#"{"choices":[]}"#,
            r#"{"choices":[{"delta":{}}]}"#,
        ] {
            let m = chat_of(d);
            assert!(!m.token && !m.output, "{d}");
        }
    }

    #[test]
    fn channels() {
        let m = chat_of(r#"{"choices":[{"delta":{"content":"Hi"}}]}"#);
        assert!(m.token && m.output);
        assert_eq!(m.text, "Hi");
        let m = chat_of(r#"{"choices":[{"delta":{"content":null,"reasoning_content":"x"}}]}"#);
        assert!(m.token && !m.output);
        let m = chat_of(r#"{"choices":[{"delta":{"reasoning":"x"}}]}"#);
        assert!(m.token && !m.output);
        let m = chat_of(
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\""}}]}}]}"#,
        );
        assert!(m.token && !m.output);
        let m =
            chat_of(r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":""}}]}}]}"#);
        assert!(!m.token);
        let m = chat_of(r#"{"choices":[{"delta":{"refusal":"no"}}]}"#);
        assert!(m.token && m.output);
    }

    #[test]
    fn finish_usage_done_and_timings() {
        let m = chat_of(r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":null}"#);
        assert!(m.finish && !m.token);
        assert_eq!(m.usage_output, None);
        let m = chat_of(
            r#"{"choices":[],"usage":{"prompt_tokens":24,"completion_tokens":5},"timings":{"prompt_n":3,"prompt_ms":1.5,"predicted_n":5,"predicted_ms":10.0,"predicted_per_token_ms":2.0}}"#,
        );
        assert_eq!((m.usage_output, m.usage_input), (Some(5), Some(24)));
        assert_eq!(m.server_timings.unwrap().predicted_n, Some(5));
        assert!(chat_full(&ev("[DONE]")).unwrap().terminal);
        assert!(chat_full(&ev(" [DONE] ")).unwrap().terminal);
    }

    #[test]
    fn errors_and_malformed() {
        let m = chat_of(r#"{"error":{"message":"x","code":"internal_error"}}"#);
        assert_eq!(
            m.error.unwrap().code_text.as_deref(),
            Some("internal_error")
        );
        assert!(chat_full(&ev("{\"a\":1}\n{\"b\":2}")).is_err());
        assert!(chat_full(&ev("[1,2]")).is_err());
        assert!(chat_full(&ev(r#"{"choices":{}}"#)).is_err());
        let mut e = ev(r#"{"message":"boom"}"#);
        e.event = Some("error".into());
        assert_eq!(
            chat_full(&e).unwrap().error.unwrap().message.as_deref(),
            Some("boom")
        );
        // Ruling 27: an event name other than `error` decides nothing; the data does.
        let mut p = ev("not json");
        p.event = Some("ping".into());
        assert!(chat_full(&p).is_err());
        let mut d = ev(r#"{"choices":[{"delta":{"content":"Hi"}}]}"#);
        d.event = Some("delta".into());
        assert!(chat_full(&d).unwrap().token);
        let mut k = ev("");
        k.event = Some("ping".into());
        assert!(!chat_full(&k).unwrap().token);
    }

    /// Ruling 18: the flat error object of vLLM, SGLang and Mistral, on every OpenAI protocol.
    #[test]
    fn the_flat_error_object_is_an_error() {
        let flat = r#"{"object":"error","message":"too long","type":"BadRequestError","param":null,"code":400}"#;
        for m in [
            chat_full(&ev(flat)),
            completions_full(&ev(flat)),
            responses(&ev(flat)),
        ] {
            let e = m.unwrap().error.unwrap();
            assert_eq!(
                (e.code, e.kind.as_deref()),
                (Some(400), Some("BadRequestError"))
            );
            assert_eq!(e.message.as_deref(), Some("too long"));
        }
        // A chunk's own `object` is not an error.
        let m =
            chat_of(r#"{"object":"chat.completion.chunk","choices":[{"delta":{"content":"a"}}]}"#);
        assert!(m.error.is_none() && m.token);
    }

    /// Case 94: a chat-style `{"error": ...}` frame on the Responses API, with no event type.
    #[test]
    fn a_chat_style_error_frame_is_an_error_on_responses() {
        let e = responses(&ev(r#"{"error":{"message":"x","type":null,"code":"500"}}"#))
            .unwrap()
            .error
            .unwrap();
        assert_eq!(e.code, Some(500));
        // `response.failed` keeps its nested error; a completed response's null error is none.
        let m = responses(&ev(
            r#"{"type":"response.completed","response":{"error":null,"usage":{"output_tokens":3}}}"#,
        ))
        .unwrap();
        assert!(m.error.is_none() && m.terminal && m.usage_output == Some(3));
    }

    /// Ruling 22: a usage inside a choice counts when the chunk has no top-level usage object.
    #[test]
    fn usage_inside_a_choice() {
        let m = chat_of(
            r#"{"choices":[{"delta":{},"finish_reason":"stop","usage":{"prompt_tokens":19,"completion_tokens":13}}]}"#,
        );
        assert_eq!((m.usage_output, m.usage_input), (Some(13), Some(19)));
        assert!(m.finish);
        // The top-level one wins when both are there; a null top-level one is none.
        let m = chat_of(
            r#"{"usage":{"completion_tokens":2},"choices":[{"usage":{"completion_tokens":9}}]}"#,
        );
        assert_eq!(m.usage_output, Some(2));
        let m = chat_of(r#"{"usage":null,"choices":[{"usage":{"completion_tokens":9}}]}"#);
        assert_eq!(m.usage_output, Some(9));
        let m = completions_full(&ev(
            r#"{"choices":[{"text":"a","usage":{"completion_tokens":4}}]}"#,
        ))
        .unwrap();
        assert_eq!(m.usage_output, Some(4));
    }

    /// Issue 42 item 1: the usage details of a stream's chunks, in OpenAI's, vLLM's and SGLang's
    /// shape (`prompt_tokens_details.cached_tokens`, `completion_tokens_details.reasoning_tokens`)
    /// and DeepSeek's (`prompt_cache_hit_tokens`); ruling 22 (usage inside a choice) for them too.
    #[test]
    fn usage_details_of_chat_and_completions_chunks() {
        // vLLM with --enable-prompt-tokens-details, the final usage chunk (fast reading).
        let vllm = r#"{"id":"chatcmpl-a","object":"chat.completion.chunk","created":1,"model":"Qwen/Qwen3-8B","choices":[],"usage":{"prompt_tokens":517,"total_tokens":521,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":512},"completion_tokens_details":{"reasoning_tokens":3}}}"#;
        assert!(borrowed::chunk(vllm, true).is_ok(), "the common shape");
        let m = chat_of(vllm);
        assert_eq!(
            (
                m.usage_input,
                m.usage_cached_input,
                m.usage_output,
                m.usage_reasoning
            ),
            (Some(517), Some(512), Some(4), Some(3))
        );
        assert_eq!(m.served_model.as_deref(), Some("Qwen/Qwen3-8B"));
        assert_eq!(m.response_id.as_deref(), Some("chatcmpl-a"));
        // SGLang sends the details null when it has none: unknown, not 0.
        let m = chat_of(
            r#"{"id":"x","model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":null,"reasoning_tokens":0}}"#,
        );
        assert_eq!((m.usage_cached_input, m.usage_reasoning), (None, None));
        // DeepSeek's own count, the details' count preferred when both are there.
        let m = chat_of(
            r#"{"choices":[],"usage":{"prompt_tokens":64,"completion_tokens":1,"prompt_cache_hit_tokens":48,"prompt_cache_miss_tokens":16}}"#,
        );
        assert_eq!(m.usage_cached_input, Some(48));
        let m = chat_of(
            r#"{"choices":[],"usage":{"prompt_tokens":64,"prompt_cache_hit_tokens":48,"prompt_tokens_details":{"cached_tokens":40}}}"#,
        );
        assert_eq!(m.usage_cached_input, Some(40));
        // Ruling 22: the details of a usage inside a choice (read the `Value` way).
        let m = chat_of(
            r#"{"choices":[{"delta":{},"finish_reason":"stop","usage":{"prompt_tokens":19,"completion_tokens":13,"prompt_tokens_details":{"cached_tokens":16}}}]}"#,
        );
        assert_eq!((m.usage_input, m.usage_cached_input), (Some(19), Some(16)));
        // Completions, with a fingerprint.
        let m = completions_full(&ev(
            r#"{"id":"cmpl-1","model":"m","system_fingerprint":"fp_1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":0}}}"#,
        ))
        .unwrap();
        assert_eq!(
            m.usage_cached_input,
            Some(0),
            "a count of 0 is said, not null"
        );
        assert_eq!(m.system_fingerprint.as_deref(), Some("fp_1"));
        // Without identity: nothing of it is read, the counts still are.
        let m = chat(&ev(vllm), false).unwrap();
        assert_eq!((m.served_model, m.response_id), (None, None));
        assert_eq!(m.usage_cached_input, Some(512));
    }

    /// Issue 43: a hostile `model` (huge, control characters) is cut and cleaned where it is read.
    #[test]
    fn a_hostile_identity_is_cut_and_cleaned() {
        let huge = "x".repeat(100_000);
        let data = format!(
            r#"{{"id":" id\u0000\n1 ","model":"{huge}","system_fingerprint":"  ","choices":[{{"delta":{{"content":"a"}}}}]}}"#
        );
        for m in [chat_of(&data), chat_value(&ev(&data), true).unwrap()] {
            let model = m.served_model.expect("a model");
            assert_eq!(
                model.chars().count(),
                crate::protocol::MAX_IDENTITY_CHARS + 1
            );
            assert!(model.ends_with('…'));
            assert_eq!(m.response_id.as_deref(), Some("id\u{fffd}\u{fffd}1"));
            assert_eq!(m.system_fingerprint, None, "blank is none");
        }
    }

    /// Ruling 23: `abort` and `error` finish reasons are failures at their chunk, not proper ends.
    #[test]
    fn failure_finish_reasons() {
        for reason in ["abort", "error"] {
            let data = format!(r#"{{"choices":[{{"delta":{{}},"finish_reason":"{reason}"}}]}}"#);
            let m = chat_of(&data);
            assert!(!m.finish, "{reason}");
            assert!(m.error.unwrap().message.unwrap().contains(reason));
            let data = format!(r#"{{"choices":[{{"text":"","finish_reason":"{reason}"}}]}}"#);
            assert!(
                completions_full(&ev(&data)).unwrap().error.is_some(),
                "{reason}"
            );
        }
        for reason in ["stop", "length", "tool_calls", "content_filter"] {
            let data = format!(r#"{{"choices":[{{"delta":{{}},"finish_reason":"{reason}"}}]}}"#);
            let m = chat_of(&data);
            assert!(m.finish && m.error.is_none(), "{reason}");
        }
    }

    #[test]
    fn completions_and_responses() {
        let m =
            completions_full(&ev(r#"{"choices":[{"text":"a","finish_reason":null}]}"#)).unwrap();
        assert!(m.token && m.output);
        let m =
            completions_full(&ev(r#"{"choices":[{"text":"","finish_reason":"length"}]}"#)).unwrap();
        assert!(!m.token && m.finish);
        let m = responses(&ev(r#"{"type":"response.output_text.delta","delta":"Hi"}"#)).unwrap();
        assert!(m.token && m.output);
        let m = responses(&ev(
            r#"{"type":"response.reasoning_text.delta","delta":"h"}"#,
        ))
        .unwrap();
        assert!(m.token && !m.output);
        let m = responses(&ev(r#"{"type":"response.output_text.delta","delta":""}"#)).unwrap();
        assert!(!m.token);
        let m = responses(&ev(
            r#"{"type":"response.completed","response":{"usage":{"input_tokens":3,"output_tokens":9}}}"#,
        ))
        .unwrap();
        assert!(m.terminal && m.finish);
        assert_eq!((m.usage_output, m.usage_input), (Some(9), Some(3)));
        let m = responses(&ev(
            r#"{"type":"response.completed","response":{"usage":{"input_tokens":30,"output_tokens":9,"input_tokens_details":{"cached_tokens":16}}}}"#,
        ))
        .unwrap();
        assert_eq!((m.usage_input, m.usage_cached_input), (Some(30), Some(16)));
        let m = responses(&ev(
            r#"{"type":"response.failed","response":{"error":{"code":"server_error","message":"x"}}}"#,
        ))
        .unwrap();
        assert!(m.error.is_some());
        // `response.created` names the response and its model; `response.completed` carries the
        // usage details.
        let m = responses(&ev(
            r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","model":"gpt-5-2025-08-07","output":[],"usage":null}}"#,
        ))
        .unwrap();
        assert_eq!(
            (m.response_id.as_deref(), m.served_model.as_deref()),
            (Some("resp_1"), Some("gpt-5-2025-08-07"))
        );
        assert_eq!(m.usage_output, None);
        let m = responses(&ev(
            r#"{"type":"response.completed","response":{"id":"resp_1","model":"gpt-5-2025-08-07","usage":{"input_tokens":2000,"input_tokens_details":{"cached_tokens":1536},"output_tokens":300,"output_tokens_details":{"reasoning_tokens":256}}}}"#,
        ))
        .unwrap();
        assert_eq!(
            (
                m.usage_input,
                m.usage_cached_input,
                m.usage_output,
                m.usage_reasoning
            ),
            (Some(2000), Some(1536), Some(300), Some(256))
        );
    }

    #[test]
    fn bodies_ask_for_a_stream_and_usage() {
        let msgs = [Message {
            role: "user".into(),
            content: "hi".into(),
            ..Default::default()
        }];
        let mut extra = Map::new();
        extra.insert("temperature".into(), json!(0));
        let req = BodyParams {
            model: "m",
            messages: &msgs,
            max_tokens: Some(8),
            include_usage: true,
            stream: true,
            exact_output: crate::protocol::ExactOutput::None,
            extra_body: Some(&extra),
            tools: &[],
            tool_choice: None,
        };
        let b = Api::OpenaiChat.request_body(&req);
        assert_eq!(b["stream"], json!(true));
        assert_eq!(b["stream_options"]["include_usage"], json!(true));
        assert_eq!(b["max_tokens"], json!(8));
        assert_eq!(b["temperature"], json!(0));
        assert_eq!(b["messages"][0]["content"], json!("hi"));
        let b = Api::OpenaiCompletions.request_body(&req);
        assert_eq!(b["prompt"], json!("hi"));
        let b = Api::OpenaiResponses.request_body(&req);
        assert_eq!(b["max_output_tokens"], json!(8));
        assert!(b.get("stream_options").is_none());
    }
}
