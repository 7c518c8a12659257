//! The one HTTP request of a probe: endpoint URL, headers (the key in its protocol's header only),
//! an optional nonce, and the protocol's JSON body (docs/measurement.md, "What requests look like").

use super::ProbeSpec;
use crate::auth::Secret;
use crate::protocol::{Api, BodyParams, Message};
use crate::transport::Body;
use crate::workload::RequestContent;
use hyper::header::{self, HeaderName, HeaderValue};
use std::time::Instant;

/// A request to the target, ready to send.
pub(super) type Request = hyper::Request<Body>;

/// Why a request could not be built (a URL or header the HTTP library refuses).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct BuildError(String);

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

/// `bench --cache-bust`: a unique block before everything the request sends (its first message,
/// system or not), so no two requests share a prefix a server could serve from its cache.
fn busted(mut messages: Vec<Message>) -> Vec<Message> {
    if let Some(m) = messages.first_mut() {
        m.content = format!("[cache-bust {}] {}", nonce(), m.content);
    }
    messages
}

/// Builds the request of one probe of `spec` sending `content` to `url` with `key`.
///
/// # Errors
/// [`BuildError`] when a header or the URL cannot be used.
pub(super) fn build(
    spec: &ProbeSpec,
    content: &RequestContent,
    url: &str,
    key: Option<&Secret>,
) -> Result<Request, BuildError> {
    let (target, prompt) = (&spec.target, &spec.prompt);
    let mut messages = if prompt.nonce {
        with_nonce(&content.messages)
    } else {
        content.messages.clone()
    };
    if spec.cache_bust {
        messages = busted(messages);
    }
    let body = target.api.request_body(&BodyParams {
        model: &spec.model,
        messages: &messages,
        max_tokens: content.max_tokens,
        include_usage: target.include_usage,
        stream: spec.stream,
        exact_output: target.exact_output,
        extra_body: Some(&target.extra_body),
        tools: content.tools.as_deref().unwrap_or_default(),
        tool_choice: content.tool_choice,
    });
    let accept = if spec.stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    let mut req = new_request(hyper::Method::POST, url, body.to_string())?;
    let h = req.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::ACCEPT, HeaderValue::from_static(accept));
    // The request's identity, unless the target sets its own.
    if let Some(id) = &content.request_id
        && !spec
            .target
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("x-request-id"))
    {
        let v = HeaderValue::from_str(id).map_err(|_| BuildError("the request id".into()))?;
        h.insert(HeaderName::from_static("x-request-id"), v);
    }
    with_target_headers(req, spec, key)
}

/// The request that opens a worker's connection before a bench level (`GET /models`, with the
/// target's key and headers, so a gateway treats it as it treats the probes).
///
/// # Errors
/// [`BuildError`] when a header or the URL cannot be used.
pub(super) fn build_prewarm(spec: &ProbeSpec, key: Option<&Secret>) -> Result<Request, BuildError> {
    let mut req = new_request(hyper::Method::GET, &spec.target.models_url(), String::new())?;
    req.headers_mut()
        .insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    with_target_headers(req, spec, key)
}

/// A request to `url` with `body`. A `user:password` in the URL is sent as Basic credentials
/// (as curl does) and taken out of the URL the request names.
fn new_request(method: hyper::Method, url: &str, body: String) -> Result<Request, BuildError> {
    let (uri, basic) =
        crate::transport::request_uri(url).map_err(|e| BuildError(format!("the URL: {e}")))?;
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::from(body))
        .map_err(|e| BuildError(e.to_string()))?;
    if let Some(b) = basic {
        req.headers_mut().insert(header::AUTHORIZATION, b);
    }
    Ok(req)
}

/// The headers every request to the target carries: identity encoding, the key in its
/// protocol's header only, the protocol's version header and the target's own headers.
fn with_target_headers(
    mut req: Request,
    spec: &ProbeSpec,
    key: Option<&Secret>,
) -> Result<Request, BuildError> {
    let target = &spec.target;
    let h = req.headers_mut();
    h.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    if let Some(k) = key {
        let (name, value) = target.auth.header(k).map_err(BuildError)?;
        h.insert(name, value);
    }
    if target.api == Api::AnthropicMessages
        && !target
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("anthropic-version"))
    {
        h.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static("2023-06-01"),
        );
    }
    for (n, v) in &target.headers {
        let name = HeaderName::from_bytes(n.as_bytes())
            .map_err(|_| BuildError(format!("header {n:?}: not a valid name")))?;
        let value = HeaderValue::from_str(v)
            .map_err(|_| BuildError(format!("header {n}: not a valid value")))?;
        h.append(name, value);
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busted_request_starts_with_a_block_of_its_own() {
        let m = |role: &str, content: &str| Message {
            role: role.into(),
            content: content.into(),
            ..Message::default()
        };
        let msgs = vec![m("system", "You are terse."), m("user", "hi")];
        let a = busted(msgs.clone());
        let b = busted(msgs.clone());
        for x in [&a, &b] {
            assert!(x[0].content.starts_with("[cache-bust "), "{x:?}");
            assert!(x[0].content.ends_with("] You are terse."), "{x:?}");
            assert_eq!(x[1], msgs[1]);
        }
        // Unique from the first characters on: no prefix block is shared.
        assert_ne!(a[0].content[..28], b[0].content[..28]);
        assert!(busted(Vec::new()).is_empty());
    }
}
