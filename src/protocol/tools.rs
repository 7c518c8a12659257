//! Tools in a conversation: the definitions a request offers, what it asks of them
//! (`tool_choice`), the assistant's tool calls and their results, as each API writes them in a
//! request body; and the parts of a tool call an answer streams.
//!
//! Sources: OpenAI's Chat Completions reference (`tools[].function`, `tool_choice` `auto` /
//! `required` / `none`, an assistant message's `tool_calls[]` of `{id, type: function, function:
//! {name, arguments}}`, a `tool` message with `tool_call_id`; streamed `delta.tool_calls[]` with
//! `index`), the Responses reference (`tools[]` of `{type: function, name, parameters}`, input
//! items `function_call` `{call_id, name, arguments}` and `function_call_output` `{call_id,
//! output}`; the events `response.output_item.added` and
//! `response.function_call_arguments.delta`) and Anthropic's "Tool use" guide (`tools[]` with
//! `input_schema`, `tool_choice` `{type: auto|any|none}`, `tool_use` content blocks `{id, name,
//! input}` and `tool_result` blocks `{tool_use_id, content}` in the next user message; streamed
//! `content_block_start` of a `tool_use` block and its `input_json_delta`s).

use super::Message;
use serde_json::{Map, Value, json};

/// A tool a request offers: a function of one string parameter, `query`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDef {
    /// The function's name.
    pub name: String,
    /// What it does (a session sizes a definition by this text).
    pub description: String,
}

impl ToolDef {
    /// The JSON schema of its parameters (the same for every tool a session defines).
    pub fn parameters() -> Value {
        json!({
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to look up."}},
            "required": ["query"]
        })
    }
}

/// What a request asks of its tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolChoice {
    /// The model decides (`auto`).
    Auto,
    /// The model must call a tool (`required`; Anthropic's `any`).
    Required,
    /// The model must not call one (`none`): a session's final answer.
    None,
}

impl ToolChoice {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "required",
            ToolChoice::None => "none",
        }
    }
}

/// One tool call of an assistant's answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolCall {
    /// Its id (`call_…`, `toolu_…`): the result names it.
    pub id: String,
    /// The function called.
    pub name: String,
    /// Its arguments, JSON text as the model wrote it.
    pub arguments: String,
}

/// A part of a tool call an event carries: the call it belongs to (`index`: the chat delta's
/// `index`, Anthropic's content block index, the Responses output index), and what of it the
/// event says (its id and name open it; its arguments come in pieces).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolCallPart {
    /// Which call of the answer.
    pub index: u64,
    /// Its id, when this event names it.
    pub id: Option<String>,
    /// The function, when this event names it.
    pub name: Option<String>,
    /// A piece of its arguments.
    pub arguments: String,
}

/// True when a message is part of a tool exchange: an assistant's calls, or a call's result.
fn is_tool_part(m: &Message) -> bool {
    !m.tool_calls.is_empty() || m.tool_call_id.is_some()
}

/// True when a conversation holds a tool exchange (it then needs each API's own shapes).
pub(super) fn any_tool_part(messages: &[Message]) -> bool {
    messages.iter().any(is_tool_part)
}

/// A string, or null when empty (an assistant message that only calls tools).
fn text_or_null(s: &str) -> Value {
    if s.is_empty() {
        Value::Null
    } else {
        Value::String(s.to_owned())
    }
}

/// Chat Completions: the messages, tool calls and tool results in their shapes.
pub(super) fn chat_messages(messages: &[Message]) -> Value {
    let one = |m: &Message| -> Value {
        if let Some(id) = &m.tool_call_id {
            return json!({"role": "tool", "tool_call_id": id, "content": m.content});
        }
        if m.tool_calls.is_empty() {
            return json!({"role": m.role, "content": m.content});
        }
        let calls: Vec<Value> = m
            .tool_calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        json!({"role": m.role, "content": text_or_null(&m.content), "tool_calls": calls})
    };
    Value::Array(messages.iter().map(one).collect())
}

/// Chat Completions: `tools` and `tool_choice`.
pub(super) fn chat_tools(
    body: &mut Map<String, Value>,
    tools: &[ToolDef],
    choice: Option<ToolChoice>,
) {
    if !tools.is_empty() {
        let defs: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {"name": t.name, "description": t.description,
                       "parameters": ToolDef::parameters()}})
            })
            .collect();
        body.insert("tools".into(), Value::Array(defs));
    }
    if let Some(c) = choice.filter(|_| !tools.is_empty()) {
        body.insert("tool_choice".into(), json!(c.as_str()));
    }
}

/// Responses: the input items (messages, `function_call`s, `function_call_output`s).
pub(super) fn responses_input(messages: &[Message]) -> Value {
    let mut items = Vec::with_capacity(messages.len());
    for m in messages {
        if let Some(id) = &m.tool_call_id {
            items.push(json!({"type": "function_call_output", "call_id": id, "output": m.content}));
            continue;
        }
        if m.tool_calls.is_empty() || !m.content.is_empty() {
            items.push(json!({"role": m.role, "content": m.content}));
        }
        for c in &m.tool_calls {
            items.push(
                json!({"type": "function_call", "call_id": c.id, "name": c.name,
                              "arguments": c.arguments}),
            );
        }
    }
    Value::Array(items)
}

/// Responses: `tools` and `tool_choice`.
pub(super) fn responses_tools(
    body: &mut Map<String, Value>,
    tools: &[ToolDef],
    choice: Option<ToolChoice>,
) {
    if !tools.is_empty() {
        let defs: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": ToolDef::parameters()})
            })
            .collect();
        body.insert("tools".into(), Value::Array(defs));
    }
    if let Some(c) = choice.filter(|_| !tools.is_empty()) {
        body.insert("tool_choice".into(), json!(c.as_str()));
    }
}

/// Anthropic Messages: the non-system messages, an assistant's calls as `tool_use` blocks and
/// results as `tool_result` blocks of a user message (consecutive results in one message).
pub(super) fn anthropic_messages(messages: &[&Message]) -> Value {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len());
    for m in messages {
        if let Some(id) = &m.tool_call_id {
            let block = json!({"type": "tool_result", "tool_use_id": id, "content": m.content});
            // Results of one answer's calls go in one user message.
            if let Some(last) = out.last_mut()
                && last["role"] == "user"
                && let Some(Value::Array(blocks)) = last.get_mut("content")
                && blocks.iter().all(|b| b["type"] == "tool_result")
            {
                blocks.push(block);
            } else {
                out.push(json!({"role": "user", "content": [block]}));
            }
            continue;
        }
        if m.tool_calls.is_empty() {
            out.push(json!({"role": m.role, "content": m.content}));
            continue;
        }
        let mut blocks = Vec::with_capacity(m.tool_calls.len() + 1);
        if !m.content.is_empty() {
            blocks.push(json!({"type": "text", "text": m.content}));
        }
        for c in &m.tool_calls {
            // `input` is an object: arguments that are not one send none.
            let input = match serde_json::from_str::<Value>(&c.arguments) {
                Ok(v @ Value::Object(_)) => v,
                _ => json!({}),
            };
            blocks.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
        }
        out.push(json!({"role": m.role, "content": blocks}));
    }
    Value::Array(out)
}

/// Anthropic Messages: `tools` (with `input_schema`) and `tool_choice` (`auto`, `any`, `none`).
pub(super) fn anthropic_tools(
    body: &mut Map<String, Value>,
    tools: &[ToolDef],
    choice: Option<ToolChoice>,
) {
    if !tools.is_empty() {
        let defs: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({"name": t.name, "description": t.description,
                       "input_schema": ToolDef::parameters()})
            })
            .collect();
        body.insert("tools".into(), Value::Array(defs));
    }
    if let Some(c) = choice.filter(|_| !tools.is_empty()) {
        let kind = match c {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "any",
            ToolChoice::None => "none",
        };
        body.insert("tool_choice".into(), json!({"type": kind}));
    }
}

/// A string field, cut and cleaned as an identity is (ids and names of a call).
fn name_at(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .and_then(super::identity_value)
}

/// The parts of the calls of a chat delta's (or whole message's) `tool_calls` array.
pub(super) fn chat_parts(calls: &[Value]) -> Vec<ToolCallPart> {
    calls
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let f = c.get("function")?;
            Some(ToolCallPart {
                index: c.get("index").and_then(Value::as_u64).unwrap_or(i as u64),
                id: name_at(c, "id"),
                name: name_at(f, "name"),
                arguments: f
                    .get("arguments")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            })
        })
        .collect()
}

/// The opening part of an Anthropic `tool_use` block (a `content_block_start`'s block, or a whole
/// answer's, whose `input` is the whole arguments).
pub(super) fn anthropic_part(index: u64, block: &Value, whole: bool) -> ToolCallPart {
    ToolCallPart {
        index,
        id: name_at(block, "id"),
        name: name_at(block, "name"),
        arguments: match block.get("input") {
            Some(v @ Value::Object(o)) if whole || !o.is_empty() => v.to_string(),
            _ => String::new(),
        },
    }
}

/// The part of a Responses `function_call` item (opening it, or whole).
pub(super) fn responses_part(index: u64, item: &Value) -> ToolCallPart {
    ToolCallPart {
        index,
        id: name_at(item, "call_id"),
        name: name_at(item, "name"),
        arguments: item
            .get("arguments")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Api, BodyParams, ExactOutput};
    use super::*;

    fn conversation() -> Vec<Message> {
        vec![
            Message::new("system", "be an agent"),
            Message::new("user", "find it"),
            Message {
                tool_calls: vec![
                    ToolCall {
                        id: "call_1".into(),
                        name: "tool_0".into(),
                        arguments: r#"{"query":"a"}"#.into(),
                    },
                    ToolCall {
                        id: "call_2".into(),
                        name: "tool_1".into(),
                        arguments: "not json".into(),
                    },
                ],
                ..Message::new("assistant", "")
            },
            Message {
                tool_call_id: Some("call_1".into()),
                ..Message::new("tool", "result one")
            },
            Message {
                tool_call_id: Some("call_2".into()),
                ..Message::new("tool", "result two")
            },
        ]
    }

    fn tools() -> Vec<ToolDef> {
        vec![
            ToolDef {
                name: "tool_0".into(),
                description: "looks up".into(),
            },
            ToolDef {
                name: "tool_1".into(),
                description: "fetches".into(),
            },
        ]
    }

    fn body(api: Api, messages: &[Message], choice: Option<ToolChoice>) -> Value {
        let tools = tools();
        api.request_body(&BodyParams {
            model: "m",
            messages,
            max_tokens: Some(16),
            include_usage: true,
            stream: true,
            exact_output: ExactOutput::None,
            extra_body: None,
            tools: &tools,
            tool_choice: choice,
        })
    }

    /// Each API's shapes of the definitions, the choice, the calls and their results.
    #[test]
    fn bodies_with_tools_per_api() {
        let conv = conversation();
        let b = body(Api::OpenaiChat, &conv, Some(ToolChoice::Required));
        assert_eq!(b["tool_choice"], "required");
        assert_eq!(b["tools"][1]["type"], "function");
        assert_eq!(b["tools"][1]["function"]["name"], "tool_1");
        assert_eq!(
            b["tools"][0]["function"]["parameters"]["required"][0],
            "query"
        );
        let m = &b["messages"];
        assert_eq!(m[1], json!({"role": "user", "content": "find it"}));
        assert_eq!(m[2]["content"], Value::Null);
        assert_eq!(m[2]["tool_calls"][0]["id"], "call_1");
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            r#"{"query":"a"}"#
        );
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "call_1", "content": "result one"})
        );
        assert_eq!(m.as_array().unwrap().len(), 5);

        let b = body(Api::OpenaiResponses, &conv, Some(ToolChoice::None));
        assert_eq!(b["tool_choice"], "none");
        assert_eq!(b["tools"][0]["name"], "tool_0");
        assert_eq!(b["tools"][0]["type"], "function");
        let input = b["input"].as_array().unwrap();
        // system, user, two calls (the empty assistant text sends no message), two outputs.
        assert_eq!(input.len(), 6);
        assert_eq!(
            input[2],
            json!({"type": "function_call", "call_id": "call_1", "name": "tool_0", "arguments": r#"{"query":"a"}"#})
        );
        assert_eq!(
            input[5],
            json!({"type": "function_call_output", "call_id": "call_2", "output": "result two"})
        );

        let b = body(Api::AnthropicMessages, &conv, Some(ToolChoice::Required));
        assert_eq!(b["tool_choice"], json!({"type": "any"}));
        assert_eq!(b["tools"][0]["input_schema"]["type"], "object");
        assert_eq!(b["system"], "be an agent");
        let m = b["messages"].as_array().unwrap();
        assert_eq!(
            m.len(),
            3,
            "user, assistant, one user message of both results"
        );
        assert_eq!(m[1]["content"][0]["type"], "tool_use");
        assert_eq!(m[1]["content"][0]["input"], json!({"query": "a"}));
        assert_eq!(
            m[1]["content"][1]["input"],
            json!({}),
            "arguments that are not an object"
        );
        assert_eq!(m[2]["role"], "user");
        assert_eq!(m[2]["content"][1]["tool_use_id"], "call_2");
        assert_eq!(
            body(Api::AnthropicMessages, &conv, Some(ToolChoice::Auto))["tool_choice"],
            json!({"type": "auto"})
        );

        // Without tools: no `tools`, no `tool_choice`, the plain messages as before.
        let plain = [Message::new("user", "hi")];
        let b = Api::OpenaiChat.request_body(&BodyParams {
            model: "m",
            messages: &plain,
            max_tokens: None,
            include_usage: false,
            stream: true,
            exact_output: ExactOutput::None,
            extra_body: None,
            tools: &[],
            tool_choice: Some(ToolChoice::Required),
        });
        assert!(b.get("tools").is_none() && b.get("tool_choice").is_none());
        assert_eq!(b["messages"], json!([{"role": "user", "content": "hi"}]));
    }

    /// An assistant's text beside its calls is kept, in every API.
    #[test]
    fn text_beside_calls_is_kept() {
        let m = [Message {
            tool_calls: vec![ToolCall {
                id: "c".into(),
                name: "t".into(),
                arguments: "{}".into(),
            }],
            ..Message::new("assistant", "let me look")
        }];
        assert_eq!(chat_messages(&m)[0]["content"], "let me look");
        let r = responses_input(&m);
        assert_eq!(r[0], json!({"role": "assistant", "content": "let me look"}));
        assert_eq!(r[1]["type"], "function_call");
        let refs: Vec<&Message> = m.iter().collect();
        let a = anthropic_messages(&refs);
        assert_eq!(
            a[0]["content"][0],
            json!({"type": "text", "text": "let me look"})
        );
    }

    /// The tool calls of a stream of `(event name, data)` events, folded as a probe folds them.
    fn fold(api: Api, events: &[(&str, &str)]) -> Vec<ToolCall> {
        use crate::measure::Measurement;
        use crate::sse::SseEvent;
        use std::time::Instant;
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.headers(t0, 200);
        for (name, data) in events {
            let ev = SseEvent {
                event: (!name.is_empty()).then(|| (*name).to_owned()),
                data: (*data).to_owned(),
                has_data: true,
                ..SseEvent::default()
            };
            let meaning = api.interpret(&ev).unwrap();
            m.event(t0, &meaning);
        }
        let r = m.finish();
        assert!(r.success(), "{api}: {r:?}");
        r.tool_calls
    }

    /// The two calls each API's stream below makes.
    fn two_calls() -> Vec<ToolCall> {
        vec![
            ToolCall {
                id: "call_1".into(),
                name: "tool_0".into(),
                arguments: r#"{"query":"a b"}"#.into(),
            },
            ToolCall {
                id: "call_2".into(),
                name: "tool_1".into(),
                arguments: "{}".into(),
            },
        ]
    }

    /// The calls each API streams, read from its events and folded into the probe's result:
    /// ids and names from the opening part, arguments joined from the pieces, in call order.
    #[test]
    fn streamed_tool_calls_are_read_per_api() {
        let want = two_calls();
        let chat = fold(
            Api::OpenaiChat,
            &[
                (
                    "",
                    r#"{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"tool_0","arguments":""}}]}}]}"#,
                ),
                (
                    "",
                    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"query\":\"a"}}]}}]}"#,
                ),
                (
                    "",
                    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_2","function":{"name":"tool_1","arguments":"{}"}}]}}]}"#,
                ),
                (
                    "",
                    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":" b\"}"}}]}}]}"#,
                ),
                (
                    "",
                    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
                ),
                ("", "[DONE]"),
            ],
        );
        assert_eq!(chat, want);
        let anthropic = fold(
            Api::AnthropicMessages,
            &[
                (
                    "message_start",
                    r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":3}}}"#,
                ),
                (
                    "content_block_start",
                    r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"call_1","name":"tool_0","input":{}}}"#,
                ),
                (
                    "content_block_delta",
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"query\":\"a"}}"#,
                ),
                (
                    "content_block_delta",
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":" b\"}"}}"#,
                ),
                (
                    "content_block_stop",
                    r#"{"type":"content_block_stop","index":0}"#,
                ),
                (
                    "content_block_start",
                    r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"call_2","name":"tool_1","input":{}}}"#,
                ),
                (
                    "content_block_delta",
                    r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}}"#,
                ),
                (
                    "message_delta",
                    r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#,
                ),
                ("message_stop", r#"{"type":"message_stop"}"#),
            ],
        );
        assert_eq!(anthropic, want);
        let responses = fold(
            Api::OpenaiResponses,
            &[
                (
                    "response.output_item.added",
                    r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","call_id":"call_1","name":"tool_0","arguments":""}}"#,
                ),
                (
                    "response.function_call_arguments.delta",
                    r#"{"type":"response.function_call_arguments.delta","output_index":0,"delta":"{\"query\":\"a"}"#,
                ),
                (
                    "response.output_item.added",
                    r#"{"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","call_id":"call_2","name":"tool_1","arguments":""}}"#,
                ),
                (
                    "response.function_call_arguments.delta",
                    r#"{"type":"response.function_call_arguments.delta","output_index":1,"delta":"{}"}"#,
                ),
                (
                    "response.function_call_arguments.delta",
                    r#"{"type":"response.function_call_arguments.delta","output_index":0,"delta":" b\"}"}"#,
                ),
                (
                    "response.completed",
                    r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":3,"output_tokens":9}}}"#,
                ),
            ],
        );
        assert_eq!(responses, want);
    }

    /// A text answer has no call; a whole answer's calls are read whole.
    #[test]
    fn whole_answers_tool_calls_are_read() {
        let text = fold(
            Api::OpenaiChat,
            &[
                (
                    "",
                    r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}"#,
                ),
                ("", "[DONE]"),
            ],
        );
        assert!(text.is_empty());
        let whole = Api::OpenaiChat
            .interpret_answer(r#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"tool_0","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#)
            .unwrap();
        assert_eq!(whole.tool_calls[0].id.as_deref(), Some("call_1"));
        let whole = Api::AnthropicMessages
            .interpret_answer(r#"{"type":"message","content":[{"type":"text","text":"x"},{"type":"tool_use","id":"t","name":"get","input":{"query":"q"}}],"stop_reason":"tool_use","usage":{"input_tokens":5,"output_tokens":9}}"#)
            .unwrap();
        assert_eq!(
            (
                whole.tool_calls[0].index,
                whole.tool_calls[0].arguments.as_str()
            ),
            (1, r#"{"query":"q"}"#)
        );
        let whole = Api::OpenaiResponses
            .interpret_answer(r#"{"status":"completed","output":[{"type":"function_call","call_id":"c","name":"n","arguments":"{}"}]}"#)
            .unwrap();
        assert_eq!(whole.tool_calls[0].name.as_deref(), Some("n"));
    }

    /// An answer's calls are bounded: 16 calls, their arguments within 64 KiB.
    #[test]
    fn tool_calls_are_bounded() {
        use crate::measure::{MAX_TOOL_CALLS, Measurement};
        use std::time::Instant;
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        let big = "x".repeat(40 * 1024);
        for i in 0..40u64 {
            let mut e = crate::protocol::EventMeaning {
                token: true,
                ..crate::protocol::EventMeaning::default()
            };
            e.tool_calls.push(ToolCallPart {
                index: i,
                id: Some(format!("c{i}")),
                name: Some("t".into()),
                arguments: big.clone(),
            });
            m.event(t0, &e);
        }
        let r = m.finish();
        assert_eq!(r.tool_calls.len(), MAX_TOOL_CALLS);
        assert_eq!(r.tool_calls[15].id, "c15");
        let bytes: usize = r.tool_calls.iter().map(|c| c.arguments.len()).sum();
        assert_eq!(
            bytes,
            big.len(),
            "one piece fits, the next would pass 64 KiB"
        );
    }
}
