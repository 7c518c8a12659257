//! The one HTTP request of a probe: endpoint URL, headers (the key in its protocol's header only),
//! an optional nonce, and the protocol's JSON body (docs/measurement.md, "What requests look like").

use super::ProbeSpec;
use crate::config::{AuthStyle, Secret};
use crate::protocol::{Api, BodyParams, Message};
use crate::workload::RequestContent;
use std::time::Instant;

/// A fresh nonce: 16 hex digits from the standard library's randomly seeded hasher.
fn nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    format!("{:016x}", h.finish())
}

fn with_nonce(messages: &[Message]) -> Vec<Message> {
    let mut out = messages.to_vec();
    if let Some(m) = out.iter_mut().rev().find(|m| m.role == "user") {
        m.content = format!("[{}] {}", nonce(), m.content);
    }
    out
}

/// Builds the request of one probe of `spec` sending `content` to `url` with `key`.
///
/// # Errors
/// The HTTP client's error when a header or the URL cannot be used.
pub(super) fn build(
    client: &reqwest::Client,
    spec: &ProbeSpec,
    content: &RequestContent,
    url: &str,
    key: Option<&Secret>,
) -> Result<reqwest::Request, reqwest::Error> {
    let (target, prompt) = (&spec.target, &spec.prompt);
    let messages = if prompt.nonce {
        with_nonce(&content.messages)
    } else {
        content.messages.clone()
    };
    let body = target.api.request_body(&BodyParams {
        model: &spec.model,
        messages: &messages,
        max_tokens: content.max_tokens,
        include_usage: target.include_usage,
        stream: spec.stream,
        exact_output: target.exact_output,
        extra_body: Some(&target.extra_body),
    });
    let accept = if spec.stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    let req = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", accept);
    with_target_headers(req, spec, key)
        .body(body.to_string())
        .build()
}

/// The request that opens a worker's connection before a bench level (`GET /models`, with the
/// target's key and headers, so a gateway treats it as it treats the probes).
///
/// # Errors
/// The HTTP client's error when a header or the URL cannot be used.
pub(super) fn build_prewarm(
    client: &reqwest::Client,
    spec: &ProbeSpec,
    key: Option<&Secret>,
) -> Result<reqwest::Request, reqwest::Error> {
    let req = client
        .get(spec.target.models_url())
        .header("accept", "application/json");
    with_target_headers(req, spec, key).build()
}

/// The headers every request to the target carries: identity encoding, the key in its
/// protocol's header only, the protocol's version header and the target's own headers.
fn with_target_headers(
    mut req: reqwest::RequestBuilder,
    spec: &ProbeSpec,
    key: Option<&Secret>,
) -> reqwest::RequestBuilder {
    let target = &spec.target;
    req = req.header("accept-encoding", "identity");
    if let Some(k) = key {
        req = match target.auth {
            AuthStyle::XApiKey => req.header("x-api-key", k.expose()),
            AuthStyle::ApiKey => req.header("api-key", k.expose()),
            AuthStyle::Bearer => req.bearer_auth(k.expose()),
        };
    }
    if target.api == Api::AnthropicMessages
        && !target
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("anthropic-version"))
    {
        req = req.header("anthropic-version", "2023-06-01");
    }
    for (n, v) in &target.headers {
        req = req.header(n, v);
    }
    req
}
