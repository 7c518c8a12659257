//! Calibration: how a server counts filler, learned from its own `usage.prompt_tokens`. A few
//! requests of filler of [`CALIBRATION_WORDS`] sizes (one user message, as synthetic prompts and
//! a conversation's first turn send, `max_tokens: 1`) give `(words, prompt_tokens)` points, and
//! their least-squares line is the [`TokenModel`] (chat template overhead, tokens per word).
//! These are probes of their own, sent before the measured ones, never recorded as probes of a
//! job; their count and duration are reported. [`TokenModels`] keeps one per (target, model)
//! for the run.

use super::{ProbeSpec, Prober};
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
        match &self.error {
            Some(e) => format!("{head}: failed ({e}); prompts built at 1 token per word"),
            None => format!(
                "{head}: {:.1} tokens of template + {:.3} tokens per word",
                self.overhead_tokens, self.tokens_per_word
            ),
        }
    }
}

/// Calibrates `spec`'s (target, model) with `prober`.
pub async fn calibrate(prober: &Prober, spec: &ProbeSpec) -> Calibration {
    let started = Instant::now();
    let mut rng = Rng::new(super::fresh_seed());
    let mut points = Vec::new();
    let mut error = None;
    let mut requests = 0;
    for n in CALIBRATION_WORDS {
        requests += 1;
        let content = RequestContent {
            messages: vec![crate::protocol::Message {
                role: "user".into(),
                content: words(&mut rng, n),
            }],
            max_tokens: Some(1),
            requested_input_tokens: None,
            requested_output_tokens: None,
            turn: None,
        };
        let mut one = spec.clone();
        one.max_tokens = None;
        let r = prober.send(&one, &content).await;
        match (r.error_type, r.input_tokens) {
            (None, Some(t)) => points.push((n as u64, t)),
            (None, None) => {
                error = Some("the server reported no usage.prompt_tokens".to_owned());
                break;
            }
            (Some(e), _) => {
                error = Some(format!(
                    "a calibration request failed: {e}: {}",
                    r.error_detail.as_deref().unwrap_or("")
                ));
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
    }
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
    pub async fn get(&self, prober: &Prober, spec: &ProbeSpec) -> Option<Calibration> {
        if !spec.workload.needs_token_model() {
            return None;
        }
        let key = (
            spec.target.name.clone(),
            spec.target.url(),
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
