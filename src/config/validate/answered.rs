//! The rules of what answered (docs/measurement.md, "What answered"): a target's
//! `model_aliases:` and `usage_audit:`, a prompt's `expect:` checks, and a `drift: true` prompt's
//! jobs, which must ask for a deterministic answer.

use super::Validator;
use crate::config::raw::{RawExpect, RawPrompt, RawTarget, RawUsageAudit, S};
use crate::config::schema::JsonSchema;
use crate::config::types::{AuditCount, Expect, Job, NumberCheck, UsageAuditSettings};
use crate::protocol::Api;
use std::collections::BTreeMap;

/// The most names a model may have in `model_aliases:`.
pub const MAX_ALIASES: usize = 32;

impl Validator {
    /// `model_aliases:`: each entry a model of the target, each alias a non-empty name of at
    /// most 256 characters.
    pub(super) fn model_aliases(
        &mut self,
        path: &str,
        t: &RawTarget,
    ) -> Vec<(String, Vec<String>)> {
        let Some(raw) = &t.model_aliases else {
            return Vec::new();
        };
        let map: &BTreeMap<String, Vec<String>> = &raw.value;
        let mut out = Vec::new();
        for (model, aliases) in map {
            let key = format!("{path}.model_aliases.{model}");
            if !t.models.value.contains(model) {
                self.push(
                    &key,
                    raw,
                    format!("{model:?} is not one of the target's models"),
                );
            }
            if aliases.is_empty() || aliases.len() > MAX_ALIASES {
                self.push(&key, raw, format!("a model has 1 to {MAX_ALIASES} aliases"));
            }
            if aliases
                .iter()
                .any(|a| a.trim().is_empty() || a.chars().count() > 256)
            {
                self.push(&key, raw, "an alias is a name of 1 to 256 characters");
            }
            out.push((model.clone(), aliases.clone()));
        }
        out
    }

    /// `usage_audit:`: `count` (`auto`, `tokenizer`, `events`, `off`; `tokenizer` needs the
    /// target's `tokenizer:`), `tolerance_percent` (0 to 100, default 5) and `tolerance_tokens`
    /// (default 3).
    pub(super) fn usage_audit(
        &mut self,
        path: &str,
        raw: Option<&S<RawUsageAudit>>,
        has_tokenizer: bool,
    ) -> UsageAuditSettings {
        let mut u = UsageAuditSettings::default();
        let Some(raw) = raw else { return u };
        let a = &raw.value;
        u.count = a.count;
        if a.count == AuditCount::Tokenizer && !has_tokenizer {
            self.push(
                format!("{path}.usage_audit.count"),
                raw,
                "count: tokenizer needs the target's tokenizer: (a tokenizer.json)",
            );
        }
        if let Some(p) = &a.tolerance_percent {
            if p.value.is_finite() && (0.0..=100.0).contains(&p.value) {
                u.tolerance_share = p.value / 100.0;
            } else {
                self.push(
                    format!("{path}.usage_audit.tolerance_percent"),
                    p,
                    "must be between 0 and 100",
                );
            }
        }
        if let Some(n) = a.tolerance_tokens {
            u.tolerance_tokens = n;
        }
        u
    }

    /// A prompt's `expect:`: a regular expression, a minimum of output tokens, an exact answer, a
    /// number within a tolerance, a JSON schema (of the subset [`crate::config::schema`] checks).
    pub(super) fn expect(&mut self, path: &str, e: &RawExpect) -> Expect {
        let regex = e
            .regex
            .as_ref()
            .and_then(|r| match regex::Regex::new(&r.value) {
                Ok(re) => Some(re),
                Err(err) => {
                    self.push(
                        format!("{path}.expect.regex"),
                        r,
                        format!("not a regular expression ({err})"),
                    );
                    None
                }
            });
        if let Some(x) = &e.exact
            && x.value.trim().is_empty()
        {
            self.push(
                format!("{path}.expect.exact"),
                x,
                "an exact answer is not empty (min_output_tokens asks for any answer)",
            );
        }
        let number = e.number.as_ref().and_then(|n| {
            let ok = n.value.value.is_finite()
                && n.value.tolerance.is_finite()
                && n.value.tolerance >= 0.0;
            if !ok {
                self.push(
                    format!("{path}.expect.number"),
                    n,
                    "value and tolerance are finite numbers, the tolerance at least 0",
                );
            }
            ok.then_some(NumberCheck {
                value: n.value.value,
                tolerance: n.value.tolerance,
            })
        });
        let json_schema =
            e.json_schema
                .as_ref()
                .and_then(|s| match JsonSchema::compile(&s.value) {
                    Ok(c) => Some(c),
                    Err(why) => {
                        self.push(format!("{path}.expect.json_schema"), s, why);
                        None
                    }
                });
        Expect {
            regex,
            min_output_tokens: e.min_output_tokens,
            exact: e.exact.as_ref().map(|x| x.value.clone()),
            number,
            json_schema,
        }
    }

    /// A `drift: true` prompt: a fixed conversation (`messages`, without `nonce`), so that a
    /// deterministic model answers it alike every time.
    pub(super) fn drift(&mut self, path: &str, p: &RawPrompt) -> bool {
        let Some(d) = &p.drift else { return false };
        if d.value && (p.messages.is_empty() || p.nonce) {
            self.push(
                format!("{path}.drift"),
                d,
                "drift detection compares answers to one fixed question: a messages prompt without nonce",
            );
        }
        d.value
    }

    /// The jobs of a `drift: true` prompt ask for a deterministic answer: the target's
    /// `extra_body` sets `temperature: 0`, and a `seed` where the protocol takes one (OpenAI chat
    /// and completions).
    pub(super) fn drift_jobs(&mut self, jobs: &[Job]) {
        let mut said = std::collections::HashSet::new();
        for j in jobs.iter().filter(|j| j.prompt.drift) {
            let t = &j.target;
            if !said.insert((t.name.clone(), j.prompt.name.clone())) {
                continue;
            }
            let zero = t
                .extra_body
                .get("temperature")
                .and_then(serde_json::Value::as_f64)
                == Some(0.0);
            let takes_seed = matches!(t.api, Api::OpenaiChat | Api::OpenaiCompletions);
            let seeded = t
                .extra_body
                .get("seed")
                .is_some_and(|s| s.is_u64() || s.is_i64());
            if !zero || (takes_seed && !seeded) {
                let want = if takes_seed {
                    "extra_body: {temperature: 0, seed: <n>}"
                } else {
                    "extra_body: {temperature: 0}"
                };
                self.push_here(
                    format!("targets.{}", t.name),
                    format!(
                        "prompt {:?} asks for drift detection: the target's requests must be deterministic ({want})",
                        j.prompt.name
                    ),
                );
            }
        }
    }
}
