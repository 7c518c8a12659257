//! The prompt section's rules: a prompt's name and messages, its workload (synthetic lengths and
//! their distributions, a dataset file, a conversation, a trace; a session's are
//! `validate::session`'s) and every length.

use super::{FileKind, MAX_TIMEOUT, MAX_TURNS, NAME_RULE, Validator, valid_name};
use crate::config::raw::{
    RawConversation, RawDataset, RawLength, RawPrompt, RawSynthetic, RawTrace, S,
};
use crate::config::types::Prompt;
use crate::workload::trace::{MAX_SPAN, MAX_TIME_SCALE};
use crate::workload::{
    Conversation, Dataset, Length, MAX_TOKENS, Synthetic, Trace, TraceFormat, Workload,
};
use std::sync::Arc;
use std::time::Duration;

impl Validator {
    // -- prompts ----------------------------------------------------------------------------

    /// One prompt; `earlier` are the prompts before it (names are unique).
    pub(super) fn prompt(&mut self, path: &str, p: &RawPrompt, earlier: &[Arc<Prompt>]) -> Prompt {
        if !valid_name(&p.name.value) {
            self.push(format!("{path}.name"), &p.name, NAME_RULE);
        }
        if earlier.iter().any(|q| q.name == p.name.value) {
            self.push(format!("{path}.name"), &p.name, "duplicate prompt name");
        }
        for (j, m) in p.messages.iter().enumerate() {
            if !["system", "user", "assistant", "developer"].contains(&m.role.as_str()) {
                self.push(
                    format!("{path}.messages[{j}].role"),
                    &p.name,
                    format!(
                        "unknown role {:?} (system, user, assistant, developer)",
                        m.role
                    ),
                );
            }
        }
        if p.max_tokens == Some(0) {
            self.push(format!("{path}.max_tokens"), &p.name, "must be at least 1");
        }
        let workload = self.workload(path, p);
        let expect = p.expect.as_ref().map(|e| self.expect(path, e));
        let drift = self.drift(path, p);
        Prompt {
            name: p.name.value.clone(),
            workload,
            max_tokens: p.max_tokens,
            nonce: p.nonce,
            expect,
            stream: p.stream,
            drift,
        }
    }

    // -- workloads --------------------------------------------------------------------------

    /// A prompt's kind: exactly one of `messages`, `synthetic`, `dataset`, `conversation`,
    /// `trace`.
    pub(super) fn workload(&mut self, path: &str, p: &RawPrompt) -> Workload {
        let kinds: Vec<&str> = [
            (!p.messages.is_empty()).then_some("messages"),
            p.synthetic.as_ref().map(|_| "synthetic"),
            p.dataset.as_ref().map(|_| "dataset"),
            p.conversation.as_ref().map(|_| "conversation"),
            p.trace.as_ref().map(|_| "trace"),
            p.session.as_ref().map(|_| "session"),
        ]
        .into_iter()
        .flatten()
        .collect();
        let fallback = Workload::Messages(p.messages.clone());
        match kinds.as_slice() {
            [] => {
                self.push(
                    format!("{path}.messages"),
                    &p.name,
                    "a prompt needs messages, synthetic, dataset, conversation, trace or session",
                );
                return fallback;
            }
            [_] => {}
            [_, second, ..] => {
                self.push(
                    format!("{path}.{second}"),
                    &p.name,
                    format!("a prompt is one of messages, synthetic, dataset, conversation, trace, session; this one sets {}", kinds.join(" and ")),
                );
                return fallback;
            }
        }
        let drawn_cap = p.synthetic.is_some()
            || p.conversation.is_some()
            || p.trace.is_some()
            || p.session.is_some();
        if drawn_cap && p.max_tokens.is_some() {
            self.push(
                format!("{path}.max_tokens"),
                &p.name,
                "output_tokens is the output cap of a synthetic or conversation prompt (a trace's is each request's output length; a session's, call_tokens and answer_tokens)",
            );
        }
        if drawn_cap && p.nonce {
            self.push(
                format!("{path}.nonce"),
                &p.name,
                "synthetic filler is already different in every request (shared_prefix_tokens asks for a shared part)",
            );
        }
        if let Some(s) = &p.synthetic {
            return self.synthetic(&format!("{path}.synthetic"), s);
        }
        if let Some(d) = &p.dataset {
            return self.dataset(&format!("{path}.dataset"), d);
        }
        if let Some(c) = &p.conversation {
            return self.conversation(&format!("{path}.conversation"), c);
        }
        if let Some(t) = &p.trace {
            return self.trace(&format!("{path}.trace"), t);
        }
        if let Some(s) = &p.session {
            return self.session(&format!("{path}.session"), s);
        }
        fallback
    }

    /// A required length (`key` under `path`), `Fixed(1)` when missing or invalid.
    pub(super) fn required_length(
        &mut self,
        path: &str,
        key: &str,
        at: &S<String>,
        v: Option<&S<RawLength>>,
    ) -> Length {
        match v {
            Some(v) => self
                .length(&format!("{path}.{key}"), v)
                .unwrap_or(Length::Fixed(1)),
            None => {
                self.push(format!("{path}.{key}"), at, format!("{key} is required"));
                Length::Fixed(1)
            }
        }
    }

    pub(super) fn synthetic(&mut self, path: &str, s: &S<RawSynthetic>) -> Workload {
        let name = S::new(String::new(), s.referenced, s.defined);
        let input_tokens =
            self.required_length(path, "input_tokens", &name, s.value.input_tokens.as_ref());
        let output_tokens =
            self.required_length(path, "output_tokens", &name, s.value.output_tokens.as_ref());
        let shared_prefix_tokens = s.value.shared_prefix_tokens.as_ref().map_or(0, |v| v.value);
        if let (Some(sp), Length::Fixed(n)) = (&s.value.shared_prefix_tokens, input_tokens)
            && sp.value >= n
        {
            self.push(
                format!("{path}.shared_prefix_tokens"),
                sp,
                format!(
                    "must be less than input_tokens ({n}): each request needs a part of its own"
                ),
            );
        }
        Workload::Synthetic(Synthetic {
            input_tokens,
            output_tokens,
            shared_prefix_tokens,
            seed: s.value.seed,
        })
    }

    pub(super) fn dataset(&mut self, path: &str, d: &S<RawDataset>) -> Workload {
        let entries = Arc::new(std::sync::OnceLock::new());
        let file = self.file(
            format!("{path}.file"),
            &d.value.file,
            FileKind::Dataset {
                format: d.value.format,
                entries: entries.clone(),
            },
        );
        Workload::Dataset(Dataset {
            file,
            format: d.value.format,
            order: d.value.order,
            seed: d.value.seed,
            entries,
        })
    }

    /// A `trace`: its file read and parsed at load time (a bad file is refused with its line),
    /// `time_scale` above 0 and at most [`MAX_TIME_SCALE`], `model` only of a BurstGPT trace.
    pub(super) fn trace(&mut self, path: &str, t: &S<RawTrace>) -> Workload {
        let r = &t.value;
        let time_scale = match &r.time_scale {
            None => 1.0,
            Some(v) if v.value.is_finite() && v.value > 0.0 && v.value <= MAX_TIME_SCALE => v.value,
            Some(v) => {
                self.push(
                    format!("{path}.time_scale"),
                    v,
                    format!(
                        "must be above 0 and at most {MAX_TIME_SCALE} (0.5 replays twice as fast)"
                    ),
                );
                1.0
            }
        };
        if let (Some(m), false) = (&r.model, r.format == TraceFormat::Burstgpt) {
            self.push(
                format!("{path}.model"),
                m,
                "model picks the rows of one model of a BurstGPT trace; this trace is not one",
            );
        }
        let start = self
            .duration_in(&format!("{path}.start"), &r.start, Duration::ZERO, MAX_SPAN)
            .unwrap_or(Duration::ZERO);
        let duration = self.duration_in(
            &format!("{path}.duration"),
            &r.duration,
            Duration::from_millis(1),
            MAX_SPAN,
        );
        let recording = Arc::new(std::sync::OnceLock::new());
        let model = r.model.as_ref().map(|m| m.value.clone());
        let file = self.file(
            format!("{path}.file"),
            &r.file,
            FileKind::Trace {
                format: r.format,
                model: model.clone(),
                window: (start, duration),
                recording: recording.clone(),
            },
        );
        Workload::Trace(Trace {
            file,
            format: r.format,
            model,
            time_scale,
            start_s: start.as_secs_f64(),
            duration_s: duration.map(|d| d.as_secs_f64()),
            seed: r.seed,
            recording,
        })
    }

    pub(super) fn conversation(&mut self, path: &str, c: &S<RawConversation>) -> Workload {
        let name = S::new(String::new(), c.referenced, c.defined);
        let turns = c.value.turns.value;
        if !(1..=MAX_TURNS).contains(&turns) {
            self.push(
                format!("{path}.turns"),
                &c.value.turns,
                format!("must be between 1 and {MAX_TURNS}"),
            );
        }
        let think_time = self
            .duration_in(
                &format!("{path}.think_time"),
                &c.value.think_time,
                Duration::ZERO,
                MAX_TIMEOUT,
            )
            .unwrap_or(Duration::ZERO);
        let user_tokens =
            self.required_length(path, "user_tokens", &name, c.value.user_tokens.as_ref());
        let output_tokens =
            self.required_length(path, "output_tokens", &name, c.value.output_tokens.as_ref());
        // Memory per probe stays bounded: the history a worker keeps and resends.
        let history =
            u64::from(turns) * (u64::from(user_tokens.max()) + u64::from(output_tokens.max()));
        if history > u64::from(MAX_TOKENS) {
            self.push(
                format!("{path}.turns"),
                &c.value.turns,
                format!("the history can reach {history} tokens (turns × the largest user_tokens + output_tokens): keep it within {MAX_TOKENS} (give distributions a max)"),
            );
        }
        Workload::Conversation(Conversation {
            turns: turns.clamp(1, MAX_TURNS),
            think_time,
            user_tokens,
            output_tokens,
            seed: c.value.seed,
        })
    }

    /// A token length: a whole number, or a distribution with the keys it needs, every number a
    /// whole number of tokens in `1..=MAX_TOKENS` (mean and stddev may be fractional).
    pub(super) fn length(&mut self, path: &str, v: &S<RawLength>) -> Option<Length> {
        let before = self.issues.len();
        let range = format!("1 to {MAX_TOKENS} tokens");
        let tokens = |x: f64| x.fract() == 0.0 && (1.0..=f64::from(MAX_TOKENS)).contains(&x);
        let d = match &v.value {
            RawLength::Fixed(n) => {
                return match u32::try_from(*n) {
                    Ok(n) if (1..=MAX_TOKENS).contains(&n) => Some(Length::Fixed(n)),
                    _ => {
                        self.push(path, v, format!("must be {range}"));
                        None
                    }
                };
            }
            RawLength::Distribution(d) => d,
        };
        let kind = d.distribution.as_str();
        let allowed: &[&str] = match kind {
            "fixed" => &["value"],
            "uniform" => &["min", "max"],
            "normal" | "lognormal" => &["mean", "stddev", "min", "max"],
            other => {
                self.push(
                    format!("{path}.distribution"),
                    v,
                    format!("unknown distribution {other:?} (fixed, uniform, normal, lognormal)"),
                );
                return None;
            }
        };
        let given = [
            ("value", d.value),
            ("mean", d.mean),
            ("stddev", d.stddev),
            ("min", d.min),
            ("max", d.max),
        ];
        for (key, x) in given {
            let needed = match kind {
                "fixed" => key == "value",
                "uniform" => key == "min" || key == "max",
                _ => key == "mean" || key == "stddev",
            };
            let at = format!("{path}.{key}");
            let max_tokens = f64::from(MAX_TOKENS);
            match x {
                Some(_) if !allowed.contains(&key) => self.push(
                    at,
                    v,
                    format!("{kind} has no {key} (it takes {})", allowed.join(", ")),
                ),
                None if needed => self.push(at, v, format!("{kind} needs {key}")),
                Some(x) if matches!(key, "min" | "max" | "value") && !tokens(x) => {
                    self.push(at, v, format!("must be a whole number, {range}"));
                }
                Some(x) if key == "mean" && !(x.is_finite() && x > 0.0 && x <= max_tokens) => {
                    self.push(at, v, format!("must be above 0 and at most {MAX_TOKENS}"));
                }
                Some(x)
                    if key == "stddev" && !(x.is_finite() && (0.0..=max_tokens).contains(&x)) =>
                {
                    self.push(
                        at,
                        v,
                        format!("must be at least 0 and at most {MAX_TOKENS}"),
                    );
                }
                _ => {}
            }
        }
        let (min, max) = (d.min.unwrap_or(1.0), d.max.unwrap_or(f64::from(MAX_TOKENS)));
        if min > max {
            self.push(format!("{path}.min"), v, "must not be above max");
        }
        if self.issues.len() > before {
            return None;
        }
        let (min, max) = (min as u32, max as u32);
        let (mean, stddev) = (d.mean.unwrap_or(0.0), d.stddev.unwrap_or(0.0));
        Some(match kind {
            "fixed" => Length::Fixed(d.value.unwrap_or(1.0) as u32),
            "uniform" => Length::Uniform { min, max },
            "normal" => Length::Normal {
                mean,
                stddev,
                min,
                max,
            },
            _ => Length::Lognormal {
                mean,
                stddev,
                min,
                max,
            },
        })
    }
}
