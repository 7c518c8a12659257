//! What a spec's earlier answers taught (shared by the spec's clones: a `serve` job's probes, a
//! bench model's workers): whether the server streams one token per event (learned from its own
//! usage), a deterministic prompt's earlier answers, the target's tokenizer once loaded. From
//! them and the spec, the facts the fold judges an answer by
//! ([`crate::measure::answered`]): the model asked for, the usage audit's counts, the drift
//! history.

use super::ProbeSpec;
use crate::config::{AuditCount, MismatchAction};
use crate::measure::answered::{
    AnswerHistory, AuditFacts, KnownAnswer, ModelCheck, PerEvent, Tolerance,
};
use crate::measure::{Measurement, ProbeResult};
use crate::tokenizer::LocalTokenizer;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// What earlier answers of a spec taught; see the module's doc.
#[derive(Debug, Default)]
pub struct Answers {
    per_event: Mutex<PerEvent>,
    /// The output of the last audited answer was off the count.
    last_off: std::sync::atomic::AtomicBool,
    history: Mutex<AnswerHistory>,
    tokenizer: OnceLock<Result<Arc<LocalTokenizer>, String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Answers {
    /// The model asked for, and how the answer is held to it.
    pub fn model_check(spec: &ProbeSpec) -> ModelCheck {
        ModelCheck {
            requested: spec.model.clone(),
            aliases: spec.target.aliases_of(&spec.model).to_vec(),
            fail: spec.target.model_mismatch == MismatchAction::Fail,
        }
    }

    /// The usage audit's facts for the answer folded into `m`: the tokenizer's count of its
    /// streamed text (counted off the async runtime, only for an answer that stated its usage),
    /// whether the events count its tokens; `None` with `usage_audit: {count: off}`.
    pub async fn audit_facts(&self, spec: &ProbeSpec, m: &Measurement) -> Option<AuditFacts> {
        let settings = spec.target.usage_audit;
        let mut f = AuditFacts {
            tolerance: Tolerance {
                share: settings.tolerance_share,
                tokens: settings.tolerance_tokens,
            },
            // A length the workload built the prompt to with a calibration is known.
            input_known: spec.tokens != crate::workload::TokenModel::UNCALIBRATED,
            // A count declared exact flags at once; any other is confirmed by the answer before.
            confirm: settings.count != AuditCount::Events,
            previous_off: self.last_off.load(std::sync::atomic::Ordering::Relaxed),
            ..AuditFacts::default()
        };
        let use_tokenizer = matches!(settings.count, AuditCount::Auto | AuditCount::Tokenizer);
        match (settings.count, &spec.target.tokenizer) {
            (AuditCount::Off, _) => return None,
            (AuditCount::Events, _) => f.one_per_event = true,
            (_, Some(path)) if use_tokenizer => {
                if m.usage_stated() {
                    match self.count(path, m).await {
                        Ok(n) => f.tokenizer_count = Some(n),
                        Err(why) => f.no_count = Some(why),
                    }
                }
            }
            _ => {
                let p = *lock(&self.per_event);
                f.one_per_event = p.learned();
                f.no_count = Some(p.why_not());
            }
        }
        Some(f)
    }

    /// The tokens of `m`'s streamed text (every channel) by the tokenizer at `path` (loaded once).
    async fn count(&self, path: &std::path::Path, m: &Measurement) -> Result<u64, String> {
        let Some((visible, hidden)) = m.streamed_text() else {
            return Err("the streamed text passed 64 KiB: not counted".into());
        };
        let (visible, hidden) = (visible.to_owned(), hidden.to_owned());
        let loaded = match self.tokenizer.get() {
            Some(t) => t.clone(),
            None => {
                let file = path.to_owned();
                let t =
                    tokio::task::spawn_blocking(move || LocalTokenizer::load(&file).map(Arc::new))
                        .await
                        .unwrap_or_else(|e| Err(format!("the tokenizer did not load: {e}")));
                self.tokenizer.get_or_init(|| t).clone()
            }
        };
        let t = loaded.map_err(|e| format!("the tokenizer cannot count: {e}"))?;
        tokio::task::spawn_blocking(move || {
            let n = t.count(&visible)? + t.count(&hidden)?;
            Ok(n as u64)
        })
        .await
        .unwrap_or_else(|e| Err(format!("the tokenizer did not finish: {e}")))
    }

    /// A deterministic prompt's earlier answers (`drift: true`), else `None`.
    pub fn drift_history(&self, spec: &ProbeSpec) -> Option<AnswerHistory> {
        spec.prompt.drift.then(|| lock(&self.history).clone())
    }

    /// Learns from a result: a successful streamed answer's usage against its events (one token
    /// per event), whether its output was off the count (the next answer's confirmation), a
    /// deterministic prompt's answer.
    pub fn learn(&self, r: &ProbeResult) {
        if !r.success() {
            return;
        }
        if r.stream && r.token_source == crate::measure::TokenSource::Usage {
            lock(&self.per_event).learn(Some(r.output_tokens), r.token_events);
        }
        if let Some(a) = r.usage_audit.as_ref().filter(|a| a.output.is_some()) {
            self.last_off
                .store(a.output_off(), std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(hash) = &r.answer_hash {
            lock(&self.history).keep(KnownAnswer {
                served_model: r.served_model.clone(),
                system_fingerprint: r.system_fingerprint.clone(),
                hash: hash.clone(),
            });
        }
    }
}
