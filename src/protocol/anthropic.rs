//! Anthropic Messages streaming (`message_start`, `content_block_delta`, `message_delta`,
//! `message_stop`, `ping`, `error`).
//!
//! Source: Anthropic docs, "Messages streaming" (event flow, cumulative usage in `message_delta`,
//! error events), "Errors" (error types and their HTTP statuses) and "Prompt caching" (`usage`'s
//! `cache_read_input_tokens` and `cache_creation_input_tokens`, which `input_tokens` leaves out).

use super::{
    BodyParams, EventMeaning, Malformed, StreamError, error_object, json_object, non_empty_str,
    tools,
};
use crate::sse::SseEvent;
use serde_json::{Map, Value, json};

/// Interprets one Anthropic Messages event.
pub(super) fn messages(ev: &SseEvent) -> Result<EventMeaning, Malformed> {
    let data = ev.data.trim();
    if data.is_empty() {
        return Ok(EventMeaning::default());
    }
    let v = json_object(data)?;
    let kind = ev
        .event
        .as_deref()
        .or_else(|| v.get("type").and_then(Value::as_str))
        .unwrap_or_default();
    let mut m = EventMeaning::default();
    if kind != "error"
        && let Some(e) = error_object(&v)
    {
        // An error object holds for every protocol, whatever its event type.
        m.error = Some(e);
        return Ok(m);
    }
    match kind {
        "message_start" => {
            if let Some(msg) = v.get("message").filter(|msg| msg.is_object()) {
                m.set_identity(msg);
                if let Some(u) = msg.get("usage") {
                    usage(u, &mut m);
                }
            }
        }
        "content_block_delta" => {
            let delta = v.get("delta").unwrap_or(&Value::Null);
            match delta.get("type").and_then(Value::as_str) {
                Some("text_delta") => {
                    if let Some(t) = non_empty_str(delta, "text") {
                        m.token = true;
                        m.output = true;
                        m.text.push_str(t);
                    }
                }
                Some("thinking_delta") => m.hidden(non_empty_str(delta, "thinking")),
                Some("input_json_delta") => {
                    m.hidden(non_empty_str(delta, "partial_json"));
                    if let Some(j) = non_empty_str(delta, "partial_json") {
                        m.tool_calls.push(tools::ToolCallPart {
                            index: v.get("index").and_then(Value::as_u64).unwrap_or(0),
                            arguments: j.to_owned(),
                            ..tools::ToolCallPart::default()
                        });
                    }
                }
                _ => {}
            }
        }
        "content_block_start" => {
            // A tool call opens with its id and name (its input comes as `input_json_delta`s).
            if let Some(b) = v.get("content_block").filter(|b| b["type"] == "tool_use") {
                let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                m.tool_calls.push(tools::anthropic_part(index, b, false));
            }
        }
        "message_delta" => {
            if let Some(u) = v.get("usage") {
                usage(u, &mut m);
            }
            m.finish = v
                .get("delta")
                .and_then(|d| d.get("stop_reason"))
                .is_some_and(Value::is_string);
        }
        "message_stop" => m.terminal = true,
        // Classed by its type name (docs/measurement.md ruling 3), like every protocol's errors.
        "error" => m.error = Some(StreamError::from_json(&v)),
        // ping, content_block_stop and unknown types carry nothing we measure.
        _ => {}
    }
    Ok(m)
}

/// A whole Messages answer (`"stream": false`): `content[]` blocks `text` (visible), `thinking`
/// and `tool_use` (output in other channels), `stop_reason`, `usage`.
pub(super) fn answer(v: &Value) -> Result<EventMeaning, Malformed> {
    let Some(Value::Array(blocks)) = v.get("content") else {
        return Err(Malformed::new(
            "JSON without a `content` array: not a Messages answer",
        ));
    };
    let mut m = EventMeaning::default();
    for (i, b) in blocks.iter().enumerate() {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(t) = non_empty_str(b, "text") {
                    m.token = true;
                    m.output = true;
                    m.text.push_str(t);
                }
            }
            Some("thinking") => m.hidden(non_empty_str(b, "thinking")),
            Some("tool_use") => {
                m.hidden(non_empty_str(b, "name"));
                // The tool's input, as the model generated it (JSON text).
                if let Some(input) = b.get("input").filter(|i| !i.is_null()) {
                    m.hidden_text.push_str(&input.to_string());
                }
                m.tool_calls.push(tools::anthropic_part(i as u64, b, true));
            }
            _ => {}
        }
    }
    if let Some(u) = v.get("usage") {
        usage(u, &mut m);
    }
    m.set_identity(v);
    m.finish = v.get("stop_reason").is_some_and(Value::is_string);
    Ok(m)
}

/// A Messages `usage` object: `output_tokens`; `input_tokens`, the input neither read from nor
/// written to the cache; `cache_read_input_tokens` (the cached input) and
/// `cache_creation_input_tokens`. The fold adds the three input counts up into the whole input.
fn usage(u: &Value, m: &mut EventMeaning) {
    let count = |k: &str| u.get(k).and_then(Value::as_u64);
    m.usage_output = count("output_tokens");
    m.usage_input_uncached = count("input_tokens");
    m.usage_cached_input = count("cache_read_input_tokens");
    m.usage_cache_creation = count("cache_creation_input_tokens");
}

/// Request body: system messages go to the top-level `system` field; `max_tokens` is required.
pub(super) fn body(req: &BodyParams<'_>) -> Value {
    let system: Vec<&str> = req
        .messages
        .iter()
        .filter(|m| m.role == "system")
        .map(|m| m.content.as_str())
        .collect();
    let msgs: Vec<_> = req.messages.iter().filter(|m| m.role != "system").collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    let messages = if tools::any_tool_part(req.messages) {
        tools::anthropic_messages(&msgs)
    } else {
        json!(msgs)
    };
    body.insert("messages".into(), messages);
    body.insert("max_tokens".into(), json!(req.max_tokens.unwrap_or(256)));
    body.insert("stream".into(), Value::Bool(req.stream));
    if let Some((k, v)) = req.exact_output.field(req.max_tokens) {
        body.insert(k.into(), v);
    }
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n")));
    }
    tools::anthropic_tools(&mut body, req.tools, req.tool_choice);
    if let Some(extra) = req.extra_body {
        for (k, v) in extra {
            body.insert(k.clone(), v.clone());
        }
    }
    Value::Object(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str) -> EventMeaning {
        messages(&SseEvent {
            event: Some(event.into()),
            data: data.into(),
            has_data: true,
            ..SseEvent::default()
        })
        .unwrap()
    }

    #[test]
    fn flow() {
        let m = ev(
            "message_start",
            r#"{"type":"message_start","message":{"usage":{"input_tokens":25,"output_tokens":1}}}"#,
        );
        assert_eq!(
            (m.usage_output, m.usage_input_uncached, m.token),
            (Some(1), Some(25), false)
        );
        assert_eq!(
            m.usage_input, None,
            "Anthropic's input_tokens leave the cache out"
        );
        assert_eq!(ev("ping", r#"{"type":"ping"}"#), EventMeaning::default());
        let m = ev(
            "content_block_delta",
            r#"{"delta":{"type":"text_delta","text":"Hello"}}"#,
        );
        assert!(m.token && m.output);
        let m = ev(
            "content_block_delta",
            r#"{"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
        );
        assert!(m.token && !m.output);
        let m = ev(
            "content_block_delta",
            r#"{"delta":{"type":"input_json_delta","partial_json":""}}"#,
        );
        assert!(!m.token);
        let m = ev(
            "message_delta",
            r#"{"delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":4}}"#,
        );
        assert!(m.finish);
        assert_eq!(m.usage_output, Some(4));
        assert!(ev("message_stop", r#"{"type":"message_stop"}"#).terminal);
    }

    /// Issue 42 item 1 and 43 item 1: `message_start` names the message and its model and
    /// carries the prompt-caching counts; `message_delta`'s cumulative usage may repeat them.
    #[test]
    fn message_start_and_delta_carry_cache_counts_and_identity() {
        let m = ev(
            "message_start",
            r#"{"type":"message_start","message":{"id":"msg_01X","type":"message","role":"assistant","model":"claude-opus-4-1-20250805","content":[],"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":2048,"output_tokens":1}}}"#,
        );
        assert_eq!(
            (
                m.usage_input,
                m.usage_input_uncached,
                m.usage_cached_input,
                m.usage_cache_creation
            ),
            (None, Some(12), Some(2048), Some(0))
        );
        assert_eq!(
            (m.served_model.as_deref(), m.response_id.as_deref()),
            (Some("claude-opus-4-1-20250805"), Some("msg_01X"))
        );
        assert_eq!((m.system_fingerprint, m.usage_reasoning), (None, None));
        let m = ev(
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":2048,"output_tokens":40}}"#,
        );
        assert_eq!(
            (m.usage_output, m.usage_cached_input),
            (Some(40), Some(2048))
        );
    }

    #[test]
    fn error_events_keep_their_type_names() {
        let m = ev(
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        let e = m.error.unwrap();
        assert!(e.is_overloaded());
        assert_eq!(e.code, None, "no numeric code: classed by its type name");
        let m = ev("error", r#"{"error":{"type":"invalid_request_error"}}"#);
        assert_eq!(
            m.error.unwrap().kind.as_deref(),
            Some("invalid_request_error")
        );
    }

    #[test]
    fn system_prompt_is_lifted() {
        let msgs = [
            crate::protocol::Message {
                role: "system".into(),
                content: "be brief".into(),
                ..Default::default()
            },
            crate::protocol::Message {
                role: "user".into(),
                content: "hi".into(),
                ..Default::default()
            },
        ];
        let b = body(&BodyParams {
            model: "c",
            messages: &msgs,
            max_tokens: None,
            include_usage: true,
            stream: true,
            exact_output: crate::protocol::ExactOutput::None,
            extra_body: None,
            tools: &[],
            tool_choice: None,
        });
        assert_eq!(b["system"], json!("be brief"));
        assert_eq!(b["messages"].as_array().unwrap().len(), 1);
        assert_eq!(b["max_tokens"], json!(256));
    }
}
