//! Calibration: how a server counts filler, learned from its own `usage.prompt_tokens`. A few
//! requests of filler of [`CALIBRATION_WORDS`] sizes (one user message, as synthetic prompts and
//! a conversation's first turn send, `max_tokens: 1`) give `(words, prompt_tokens)` points, and
//! their least-squares line is the [`TokenModel`] (chat template overhead, tokens per word).
//! These are probes of their own, sent before the measured ones, never recorded as probes of a
//! job; their count and duration are reported. [`TokenModels`] keeps one per (target, model)
//! for the run. A target with a `tokenizer` (a Hugging Face `tokenizer.json`, read with the
//! `tokenizers` crate) counts the filler locally: its tokens per word come from the file, and one
//! request learns what the server adds (the chat template).

use super::{ProbeSpec, Prober};
use crate::outcome::ErrorType;
use crate::rng::Rng;
use crate::workload::{CALIBRATION_WORDS, RequestContent, TokenModel, words};
use std::collections::HashMap;
use std::time::Instant;

/// What a calibration did and learned.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Calibration {
    /// Template overhead, tokens (the fit's intercept).
    pub overhead_tokens: f64,
    /// Tokens per filler word (the fit's slope).
    pub tokens_per_word: f64,
    /// Requests sent.
    pub requests: u32,
    /// Their wall time, s.
    pub seconds: f64,
    /// `(words, prompt_tokens)` of each request that reported usage.
    pub points: Vec<(u64, u64)>,
    /// Why the fit is not the server's (a request failed, or no usage came): the uncalibrated
    /// model is used, and the flag then compares with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The `tokenizer.json` that counted the filler, when the target names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// Why the target's `tokenizer.json` could not count the filler: the server calibrated it
    /// instead (three requests), never a guess.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer_error: Option<String>,
}

impl Calibration {
    /// The model to build prompts with.
    pub fn model(&self) -> TokenModel {
        TokenModel {
            overhead: self.overhead_tokens,
            per_word: self.tokens_per_word,
        }
    }

    /// One line for people: `calibration 3 requests in 0.41 s: 31.0 tokens + 1.000/word`.
    pub fn summary(&self) -> String {
        let head = format!(
            "{} request{} in {:.2} s",
            self.requests,
            if self.requests == 1 { "" } else { "s" },
            self.seconds
        );
        let tokenizer = match (&self.tokenizer, &self.tokenizer_error) {
            (_, Some(e)) => format!(" (the tokenizer could not be used: {e}; the server counted)"),
            (Some(_), None) => " (counted by the tokenizer)".to_owned(),
            (None, None) => String::new(),
        };
        match &self.error {
            Some(e) => format!("{head}: failed ({e}){tokenizer}"),
            None => format!(
                "{head}: {:.1} tokens of template + {:.3} tokens per word{tokenizer}",
                self.overhead_tokens, self.tokens_per_word,
            ),
        }
    }
}

/// The server's `prompt_tokens` for a prompt of `text` (one user message, `max_tokens: 1`).
async fn prompt_tokens(
    prober: &mut Prober,
    spec: &ProbeSpec,
    text: String,
) -> Result<u64, (Option<ErrorType>, String)> {
    let content = RequestContent {
        messages: vec![crate::protocol::Message {
            role: "user".into(),
            content: text,
            ..Default::default()
        }],
        max_tokens: Some(1),
        requested_input_tokens: None,
        requested_output_tokens: None,
        turn: None,
        request_id: None,
        ..Default::default()
    };
    let mut one = spec.clone();
    one.max_tokens = None;
    let r = prober.send(&one, &content, None, None).await;
    counted_prompt(r.error_type, r.input_tokens, r.error_detail.as_deref())
        .map_err(|why| (r.error_type, why))
}

/// The server's count of `text`, with up to [`CALIBRATION_TRIES`] requests while the failure is
/// one [`worth_another_try`]; also how many requests were sent.
async fn counted_with_tries(
    prober: &mut Prober,
    spec: &ProbeSpec,
    text: String,
) -> (Result<u64, String>, u32) {
    let mut sent = 0;
    loop {
        sent += 1;
        match prompt_tokens(prober, spec, text.clone()).await {
            Ok(t) => return (Ok(t), sent),
            Err((kind, _)) if sent < CALIBRATION_TRIES && worth_another_try(kind) => {}
            Err((_, why)) => return (Err(why), sent),
        }
    }
}

/// Tries of one calibration length when its request fails in a way a server recovers from.
pub const CALIBRATION_TRIES: u32 = 3;

/// A failure that another try of the same calibration request may not meet: the server was
/// reached but busy, erred or cut the answer (a server that cannot be reached is not tried
/// again). Calibration measures how the server counts, never a latency, so another request
/// bends no figure; a probe is still one request, never retried.
fn worth_another_try(e: Option<ErrorType>) -> bool {
    matches!(
        e,
        Some(
            ErrorType::TimeoutFirstToken
                | ErrorType::TimeoutIdle
                | ErrorType::TimeoutTotal
                | ErrorType::RateLimited
                | ErrorType::Overloaded
                | ErrorType::ServerError
                | ErrorType::Truncated
        )
    )
}

/// What a calibration answer says of its prompt: the server's `usage.prompt_tokens`. An answer
/// that ended properly without a token (`empty_response`: with `max_tokens: 1` a model may stop
/// at once, as SmolLM2 did on a random 256-word prompt) still counted the prompt, and that count
/// is all calibration asks for.
fn counted_prompt(
    error: Option<ErrorType>,
    input_tokens: Option<u64>,
    detail: Option<&str>,
) -> Result<u64, String> {
    match (error, input_tokens) {
        (None | Some(ErrorType::EmptyResponse), Some(t)) => Ok(t),
        (None, None) => Err("the server reported no usage.prompt_tokens".to_owned()),
        (Some(e), _) => Err(format!(
            "a calibration request failed: {e}: {}",
            detail.unwrap_or("")
        )),
    }
}

/// Calibrates `spec`'s (target, model) with `prober`: three requests, or one with the target's
/// tokenizer.
pub async fn calibrate(prober: &mut Prober, spec: &ProbeSpec) -> Calibration {
    if let Some(path) = &spec.target.tokenizer {
        match with_tokenizer(prober, spec, path).await {
            Ok(c) => return c,
            // A tokenizer that cannot count: the server's own counts, never a guess.
            Err(why) => {
                return Calibration {
                    tokenizer_error: Some(why),
                    ..by_server(prober, spec).await
                };
            }
        }
    }
    by_server(prober, spec).await
}

/// Calibration by the server alone: three requests of different lengths.
async fn by_server(prober: &mut Prober, spec: &ProbeSpec) -> Calibration {
    let started = Instant::now();
    let mut rng = Rng::new(super::fresh_seed());
    let mut points = Vec::new();
    let mut error = None;
    let mut requests = 0;
    for n in CALIBRATION_WORDS {
        let (counted, sent) = counted_with_tries(prober, spec, words(&mut rng, n)).await;
        requests += sent;
        match counted {
            Ok(t) => points.push((n as u64, t)),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    let fit = TokenModel::fit(
        &points
            .iter()
            .map(|&(w, t)| (w as f64, t as f64))
            .collect::<Vec<_>>(),
    );
    let model = match (fit, &error) {
        (Some(m), None) => m,
        (None, None) => {
            error = Some("the server's counts do not fit a line".into());
            TokenModel::UNCALIBRATED
        }
        _ => TokenModel::UNCALIBRATED,
    };
    Calibration {
        overhead_tokens: model.overhead,
        tokens_per_word: model.per_word,
        requests,
        seconds: started.elapsed().as_secs_f64(),
        points,
        error,
        tokenizer: None,
        tokenizer_error: None,
    }
}

/// Calibration with a `tokenizer.json`: tokens per word counted locally over the calibration
/// sizes (read and counted off the async runtime), then one request of 64 words gives what the
/// server adds: `overhead = prompt_tokens − per_word · 64`. `Err` when the tokenizer cannot count
/// (before any request): the caller calibrates by the server instead.
async fn with_tokenizer(
    prober: &mut Prober,
    spec: &ProbeSpec,
    path: &std::path::Path,
) -> Result<Calibration, String> {
    let started = Instant::now();
    let mut rng = Rng::new(super::fresh_seed());
    let texts: Vec<(usize, String)> = CALIBRATION_WORDS
        .iter()
        .map(|&n| (n, words(&mut rng, n)))
        .collect();
    let file = path.to_owned();
    let sent = texts[1].clone();
    let fit = tokio::task::spawn_blocking(move || {
        let t = crate::tokenizer::LocalTokenizer::load(&file)?;
        texts
            .iter()
            .map(|(n, text)| t.count(text).map(|c| (*n as f64, c as f64)))
            .collect::<Result<Vec<_>, String>>()
    })
    .await
    .map_err(|e| format!("the tokenizer did not finish: {e}"))
    .and_then(|r| r)
    .and_then(|points| {
        TokenModel::fit(&points).ok_or_else(|| "the tokenizer's counts do not fit a line".into())
    })?;
    let (mut points, mut model) = (Vec::new(), TokenModel::UNCALIBRATED);
    let (counted, requests) = counted_with_tries(prober, spec, sent.1).await;
    let error = match counted {
        Ok(t) => {
            points.push((sent.0 as u64, t));
            model = TokenModel {
                overhead: t as f64 - fit.per_word * sent.0 as f64,
                per_word: fit.per_word,
            };
            None
        }
        Err(e) => Some(e),
    };
    Ok(Calibration {
        overhead_tokens: model.overhead,
        tokens_per_word: model.per_word,
        requests,
        seconds: started.elapsed().as_secs_f64(),
        points,
        error,
        tokenizer: Some(path.display().to_string()),
        tokenizer_error: None,
    })
}

/// The calibrations of a run, one per (target, URL, protocol, model); a failed one is not kept,
/// so the next probe tries again.
#[derive(Debug, Default)]
pub struct TokenModels {
    done: tokio::sync::Mutex<HashMap<(String, String, String), Calibration>>,
}

impl TokenModels {
    /// The calibration of `spec`'s target and model: the kept one, or a new one (the first
    /// caller for a key calibrates; others wait for it). `None` when the workload needs none.
    pub async fn get(&self, prober: &mut Prober, spec: &ProbeSpec) -> Option<Calibration> {
        if !spec.workload.needs_token_model() {
            return None;
        }
        // What decides the fit: the endpoint, the model, and a local tokenizer if any.
        let key = (
            spec.target.name.clone(),
            format!("{} {:?}", spec.target.url(), spec.target.tokenizer),
            spec.model.clone(),
        );
        let mut done = self.done.lock().await;
        if let Some(c) = done.get(&key) {
            return Some(c.clone());
        }
        let c = calibrate(prober, spec).await;
        if c.error.is_none() {
            done.insert(key, c.clone());
        }
        Some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_count_is_taken_from_an_answer_or_an_empty_one_only() {
        assert_eq!(counted_prompt(None, Some(46), None), Ok(46));
        assert_eq!(
            counted_prompt(Some(ErrorType::EmptyResponse), Some(270), Some("no token")),
            Ok(270)
        );
        assert_eq!(
            counted_prompt(None, None, None),
            Err("the server reported no usage.prompt_tokens".to_owned())
        );
        let e = counted_prompt(Some(ErrorType::EmptyResponse), None, Some("no token"));
        assert!(e.unwrap_err().contains("empty_response: no token"));
        let e = counted_prompt(Some(ErrorType::ServerError), Some(10), Some("HTTP 500"));
        assert!(e.unwrap_err().contains("server_error: HTTP 500"));
    }
}
