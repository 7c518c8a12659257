//! Whole non-streamed answers (`"stream": false`) of every protocol: the shapes of the providers'
//! API references and of the servers' own code, each read into the one [`EventMeaning`].
//!
//! Shapes follow: OpenAI API reference "The chat completion object", "The completion object",
//! "The response object" (Responses: `output[]` of `message`/`reasoning`/`function_call`,
//! `status`, `usage.input_tokens/output_tokens` and their `_details`, `error`); Anthropic
//! "Messages" response (`content[]` of `text`/`thinking`/`tool_use`, `stop_reason`, `usage` with
//! the prompt-caching counts) and "Errors"
//! (`{"type":"error","error":{...}}`); llama.cpp `tools/server/server.cpp`
//! (`to_json_oaicompat_chat`, which adds `timings`); vLLM
//! `vllm/entrypoints/openai/protocol.py` (`ChatMessage.reasoning_content`, `tool_calls`).

use super::*;

fn read(api: Api, body: &str) -> EventMeaning {
    api.interpret_answer(body)
        .unwrap_or_else(|e| panic!("{api}: {e}: {body}"))
}

#[test]
fn chat_answers_in_every_channel() {
    // llama.cpp's server, SmolLM2 (timings included).
    let m = read(
        Api::OpenaiChat,
        r#"{"choices":[{"finish_reason":"length","index":0,"message":{"role":"assistant","content":"Hello there"}}],"created":1764580000,"model":"smollm2","system_fingerprint":"b6000","object":"chat.completion","usage":{"completion_tokens":8,"prompt_tokens":31,"total_tokens":39},"id":"chatcmpl-x","timings":{"prompt_n":31,"prompt_ms":12.5,"prompt_per_token_ms":0.4,"predicted_n":8,"predicted_ms":40.0,"predicted_per_token_ms":5.0}}"#,
    );
    assert!(m.token && m.output && m.finish && m.terminal);
    assert_eq!(m.text, "Hello there");
    assert_eq!((m.usage_output, m.usage_input), (Some(8), Some(31)));
    let st = m.server_timings.expect("timings");
    assert_eq!((st.prompt_ms, st.predicted_ms), (Some(12.5), Some(40.0)));
    // OpenAI: refusal null, annotations, no timings.
    let m = read(
        Api::OpenaiChat,
        r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hi","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}"#,
    );
    assert!(m.output && m.server_timings.is_none());
    assert_eq!(m.usage_output, Some(1));
    // vLLM with a reasoning parser: reasoning only is output, not visible text.
    let m = read(
        Api::OpenaiChat,
        r#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,"reasoning_content":"let me think"},"finish_reason":"length"}]}"#,
    );
    assert!(m.token && !m.output && m.text.is_empty());
    assert_eq!(m.usage_output, None, "no usage: N is unknown");
    // A tool call.
    let m = read(
        Api::OpenaiChat,
        r#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},"finish_reason":"tool_calls"}]}"#,
    );
    assert!(m.token && !m.output);
    // A refusal is visible text.
    let m = read(
        Api::OpenaiChat,
        r#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't"},"finish_reason":"stop"}]}"#,
    );
    assert!(m.output);
    assert_eq!(m.text, "I can't");
    // An empty answer is a proper end without output (measure makes it `empty_response`).
    let m = read(
        Api::OpenaiChat,
        r#"{"choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":0}}"#,
    );
    assert!(!m.token && m.finish && m.terminal);
}

#[test]
fn completions_and_responses_and_messages_answers() {
    let m = read(
        Api::OpenaiCompletions,
        r#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"text":" world","index":0,"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":2,"completion_tokens":4,"total_tokens":6}}"#,
    );
    assert!(m.output && m.finish);
    assert_eq!((m.text.as_str(), m.usage_output), (" world", Some(4)));
    let m = read(
        Api::OpenaiResponses,
        r#"{"id":"resp_1","object":"response","created_at":1,"status":"completed","error":null,"incomplete_details":null,"model":"gpt-4.1","output":[{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"thinking"}]},{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[]}]}],"usage":{"input_tokens":12,"output_tokens":20,"output_tokens_details":{"reasoning_tokens":14},"total_tokens":32}}"#,
    );
    assert!(m.token && m.output && m.finish);
    assert_eq!(m.text, "Hello");
    assert_eq!((m.usage_output, m.usage_input), (Some(20), Some(12)));
    let m = read(
        Api::OpenaiResponses,
        r#"{"object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"error":null,"output":[{"type":"function_call","name":"f","arguments":"{}","call_id":"c"}],"usage":{"input_tokens":1,"output_tokens":16}}"#,
    );
    assert!(
        m.token && !m.output && m.finish,
        "incomplete is a proper end"
    );
    let m = read(
        Api::AnthropicMessages,
        r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"Hi!"}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":64}}"#,
    );
    assert!(m.token && m.output && m.finish);
    assert_eq!(
        (m.text.as_str(), m.usage_output, m.usage_input_uncached),
        ("Hi!", Some(64), Some(25))
    );
    let m = read(
        Api::AnthropicMessages,
        r#"{"type":"message","content":[{"type":"tool_use","id":"t","name":"get","input":{}}],"stop_reason":"tool_use","usage":{"input_tokens":5,"output_tokens":9}}"#,
    );
    assert!(m.token && !m.output);
}

/// Issue 42 item 1 and issue 43 item 1: a whole answer's usage details (cached input, reasoning
/// output) and identity (served model, fingerprint, response id), in each protocol's shape.
#[test]
fn whole_answers_say_what_was_cached_reasoned_and_who_answered() {
    // OpenAI's chat completion object (its reference's usage with details).
    let m = read(
        Api::OpenaiChat,
        r#"{"id":"chatcmpl-9","object":"chat.completion","created":1,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":120,"audio_tokens":0}}}"#,
    );
    assert_eq!(
        (
            m.usage_input,
            m.usage_cached_input,
            m.usage_output,
            m.usage_reasoning
        ),
        (Some(2006), Some(1920), Some(300), Some(120))
    );
    assert_eq!(
        (
            m.served_model.as_deref(),
            m.system_fingerprint.as_deref(),
            m.response_id.as_deref()
        ),
        (
            Some("gpt-4o-2024-08-06"),
            Some("fp_44709d6fcb"),
            Some("chatcmpl-9")
        )
    );
    // DeepSeek: its own cache-hit count, the reasoner's reasoning tokens in the details.
    let m = read(
        Api::OpenaiChat,
        r#"{"id":"d1","model":"deepseek-reasoner","choices":[{"index":0,"message":{"role":"assistant","content":"4","reasoning_content":"2+2"},"finish_reason":"stop"}],"usage":{"prompt_tokens":64,"completion_tokens":30,"prompt_cache_hit_tokens":48,"prompt_cache_miss_tokens":16,"completion_tokens_details":{"reasoning_tokens":25}}}"#,
    );
    assert_eq!(
        (m.usage_cached_input, m.usage_reasoning),
        (Some(48), Some(25))
    );
    // vLLM without `--enable-prompt-tokens-details`: the details are null, so unknown, not 0.
    let m = read(
        Api::OpenaiCompletions,
        r#"{"id":"cmpl-2","model":"m","choices":[{"text":"x","index":0,"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":null}}"#,
    );
    assert_eq!((m.usage_cached_input, m.usage_reasoning), (None, None));
    assert_eq!(m.served_model.as_deref(), Some("m"));
    // The Responses API's response object.
    let m = read(
        Api::OpenaiResponses,
        r#"{"id":"resp_7","object":"response","status":"completed","model":"o4-mini-2025-04-16","output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]}],"usage":{"input_tokens":100,"input_tokens_details":{"cached_tokens":64},"output_tokens":50,"output_tokens_details":{"reasoning_tokens":40}}}"#,
    );
    assert_eq!(
        (
            m.usage_input,
            m.usage_cached_input,
            m.usage_output,
            m.usage_reasoning
        ),
        (Some(100), Some(64), Some(50), Some(40))
    );
    assert_eq!(
        (m.served_model.as_deref(), m.response_id.as_deref()),
        (Some("o4-mini-2025-04-16"), Some("resp_7"))
    );
    // Anthropic: the input counts apart (the fold adds them up), no reasoning count.
    let m = read(
        Api::AnthropicMessages,
        r#"{"id":"msg_01","type":"message","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","usage":{"input_tokens":12,"cache_creation_input_tokens":200,"cache_read_input_tokens":1800,"output_tokens":7}}"#,
    );
    assert_eq!(
        (
            m.usage_input,
            m.usage_input_uncached,
            m.usage_cached_input,
            m.usage_cache_creation,
            m.usage_reasoning
        ),
        (None, Some(12), Some(1800), Some(200), None)
    );
    assert_eq!(
        (m.served_model.as_deref(), m.response_id.as_deref()),
        (Some("claude-sonnet-4-5-20250929"), Some("msg_01"))
    );
}

#[test]
fn error_objects_are_read_for_ruling_3() {
    let cases: &[(Api, &str, Option<u16>, Option<&str>)] = &[
        (
            Api::AnthropicMessages,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            None,
            Some("overloaded_error"),
        ),
        (
            Api::OpenaiChat,
            r#"{"error":{"message":"This model's maximum context length is 2048 tokens","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            None,
            Some("invalid_request_error"),
        ),
        // llama.cpp's shape: a numeric code in the error.
        (
            Api::OpenaiCompletions,
            r#"{"error":{"code":500,"message":"failed to decode","type":"server_error"}}"#,
            Some(500),
            Some("server_error"),
        ),
        (
            Api::OpenaiResponses,
            r#"{"object":"response","status":"failed","error":{"code":"server_error","message":"boom"},"output":[]}"#,
            None,
            None,
        ),
    ];
    for (api, body, code, kind) in cases {
        let e = read(*api, body).error.unwrap_or_else(|| panic!("{body}"));
        assert_eq!((e.code, e.kind.as_deref()), (*code, *kind), "{body}");
    }
    // A failed response without an error object is still an error.
    let m = read(Api::OpenaiResponses, r#"{"status":"failed","output":[]}"#);
    assert!(m.error.is_some());
    // `"error": null` is no error.
    let m = read(
        Api::OpenaiChat,
        r#"{"error":null,"choices":[{"message":{"content":"x"}}]}"#,
    );
    assert!(m.error.is_none() && m.output);
}

#[test]
fn garbage_and_json_without_an_answer_are_malformed() {
    let cases: &[(Api, &str)] = &[
        (Api::OpenaiChat, "not json"),
        (Api::OpenaiChat, "[1,2]"),
        (Api::OpenaiChat, r#"{"choices":"x"}"#),
        (Api::OpenaiChat, r#"{"choices":[]}"#),
        (Api::OpenaiChat, r#"{"id":"x","object":"chat.completion"}"#),
        (
            Api::OpenaiChat,
            r#"{"choices":[{"delta":{"content":"x"}}]}"#,
        ),
        (Api::OpenaiChat, r#"{"choices":[{"message":"x"}]}"#),
        (Api::OpenaiChat, "data: {\"choices\":[]}\n\n"),
        (Api::OpenaiCompletions, r#"{"choices":[{"index":0}]}"#),
        (
            Api::OpenaiCompletions,
            r#"{"choices":[{"message":{"content":"x"}}]}"#,
        ),
        (Api::OpenaiResponses, r#"{"status":"completed"}"#),
        (Api::OpenaiResponses, r#"{"output":{}}"#),
        (
            Api::AnthropicMessages,
            r#"{"type":"message","content":"Hi"}"#,
        ),
        (
            Api::AnthropicMessages,
            r#"{"choices":[{"message":{"content":"x"}}]}"#,
        ),
        (
            Api::AnthropicMessages,
            "{\"content\":[{\"type\":\"text\",\"text\":\"cut",
        ),
    ];
    for (api, body) in cases {
        assert!(
            api.interpret_answer(body).is_err(),
            "{api} accepted {body:?}"
        );
    }
}

#[test]
fn non_stream_bodies_ask_for_the_whole_answer_and_exact_output() {
    let msgs = [Message {
        role: "user".into(),
        content: "hi".into(),
        ..Default::default()
    }];
    let params = |stream, exact_output, max_tokens| BodyParams {
        model: "m",
        messages: &msgs,
        max_tokens,
        include_usage: true,
        stream,
        exact_output,
        extra_body: None,
        tools: &[],
        tool_choice: None,
    };
    for api in [
        Api::OpenaiChat,
        Api::OpenaiCompletions,
        Api::OpenaiResponses,
        Api::AnthropicMessages,
    ] {
        let b = api.request_body(&params(false, ExactOutput::None, Some(8)));
        assert_eq!(b["stream"], Value::Bool(false), "{api}");
        assert!(b.get("stream_options").is_none(), "{api}");
        assert!(b.get("ignore_eos").is_none() && b.get("min_tokens").is_none());
        let b = api.request_body(&params(true, ExactOutput::IgnoreEos, Some(8)));
        assert_eq!(b["ignore_eos"], Value::Bool(true), "{api}");
        let b = api.request_body(&params(true, ExactOutput::MinTokens, Some(8)));
        assert_eq!(b["min_tokens"], Value::from(8), "{api}");
    }
    // Only with a max_tokens: there is nothing to reach exactly without one.
    let b = Api::OpenaiChat.request_body(&params(true, ExactOutput::IgnoreEos, None));
    assert!(b.get("ignore_eos").is_none());
    let b = Api::OpenaiChat.request_body(&params(true, ExactOutput::None, Some(8)));
    assert_eq!(b["stream_options"]["include_usage"], Value::Bool(true));
}
