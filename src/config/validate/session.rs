//! The `session:` prompt's rules: a generated agent loop (its sizes, think time, context budget,
//! overflow, sub-agents, tool choice), or a trace of recorded sessions read at load time. What
//! cannot fit the budget is refused here, with its key and line, before anything is sent.

use super::super::raw::S;
use super::super::raw::{RawSession, RawWait};
use super::{FileKind, MAX_TIMEOUT, Validator};
use crate::protocol::ToolChoice;
use crate::workload::session::{AgentLoop, Overflow, Sessions, Subagents, Wait, replay::Replay};
use crate::workload::trace::MAX_TIME_SCALE;
use crate::workload::{MAX_TOKENS, Workload};
use std::sync::Arc;
use std::time::Duration;

/// The most tool definitions a session offers.
pub const MAX_TOOLS: u32 = 128;
/// The most tool-call turns of a session (or of a sub-agent).
pub const MAX_SESSION_TURNS: u32 = 1000;
/// The most sub-agents of one fork.
pub const MAX_SUBAGENTS: u32 = 16;

/// The sizes a session's budget checks compare.
struct Fits {
    system_tokens: u32,
    tools: u32,
    tool_tokens: u32,
    /// The system prompt and the tools.
    fixed: u64,
    /// The first turn: `fixed` and the largest first message.
    first: u64,
    result_max: u32,
    budget: u32,
    overflow: Overflow,
}

impl Validator {
    /// A `session:` prompt.
    pub(super) fn session(&mut self, path: &str, s: &S<RawSession>) -> Workload {
        let r = &s.value;
        let here = S::new(String::new(), s.referenced, s.defined);
        if let Some(t) = &r.trace {
            return self.session_trace(path, r, t);
        }
        let system_tokens = r.system_tokens.as_ref().map_or(0, |v| v.value);
        if let Some(v) = r.system_tokens.as_ref().filter(|v| v.value > MAX_TOKENS) {
            self.push(
                format!("{path}.system_tokens"),
                v,
                format!("must be at most {MAX_TOKENS}"),
            );
        }
        let (tools, tool_tokens) = self.session_tools(path, r, &here);
        let user_tokens = self.required_length(path, "user_tokens", &here, r.user_tokens.as_ref());
        let turns = self.required_length(path, "turns", &here, r.turns.as_ref());
        if turns.max() > MAX_SESSION_TURNS
            && let Some(t) = &r.turns
        {
            self.push(
                format!("{path}.turns"),
                t,
                format!(
                    "at most {MAX_SESSION_TURNS} tool calls a session (give a distribution a max)"
                ),
            );
        }
        let call_tokens = self.required_length(path, "call_tokens", &here, r.call_tokens.as_ref());
        let result_tokens =
            self.required_length(path, "result_tokens", &here, r.result_tokens.as_ref());
        let answer_tokens =
            self.required_length(path, "answer_tokens", &here, r.answer_tokens.as_ref());
        let think_time = match &r.think_time {
            None => Wait::Fixed(Duration::ZERO),
            Some(w) => self
                .wait(&format!("{path}.think_time"), w)
                .unwrap_or(Wait::Fixed(Duration::ZERO)),
        };
        let budget = self.session_budget(path, r, &here);
        let overflow = self.session_overflow(path, r, budget);
        let tool_choice = self.session_tool_choice(path, r);
        let subagents = r
            .subagents
            .as_ref()
            .map(|sa| self.session_subagents(path, sa));
        // What every turn of every session resends, and what must fit beside it.
        let fixed = u64::from(system_tokens) + u64::from(tools) * u64::from(tool_tokens);
        self.session_fits(
            path,
            r,
            Fits {
                system_tokens,
                tools,
                tool_tokens,
                fixed,
                first: fixed + u64::from(user_tokens.max()),
                result_max: result_tokens.max(),
                budget,
                overflow,
            },
        );
        Workload::Session(Sessions::Agent(Box::new(AgentLoop {
            system_tokens,
            tools,
            tool_tokens,
            user_tokens,
            turns,
            call_tokens,
            result_tokens,
            answer_tokens,
            think_time,
            context_budget: budget,
            overflow,
            subagents,
            tool_choice,
            seed: r.seed,
        })))
    }

    /// `tools:`: how many definitions (at least one: a session's turns call tools) and each
    /// one's size.
    fn session_tools(&mut self, path: &str, r: &RawSession, here: &S<String>) -> (u32, u32) {
        let Some(t) = &r.tools else {
            self.push(
                format!("{path}.tools"),
                here,
                "a session's turns call tools: define some (tools: {count: N, tokens: T})",
            );
            return (0, 1);
        };
        let count = t.value.count.value;
        if count == 0 {
            self.push(
                format!("{path}.tools.count"),
                &t.value.count,
                "a session's turns call tools: define at least one",
            );
        } else if count > MAX_TOOLS {
            self.push(
                format!("{path}.tools.count"),
                &t.value.count,
                format!("must be at most {MAX_TOOLS}"),
            );
        }
        let tokens = match &t.value.tokens {
            Some(n) if n.value == 0 || n.value > MAX_TOKENS => {
                self.push(
                    format!("{path}.tools.tokens"),
                    n,
                    format!("must be 1 to {MAX_TOKENS} tokens"),
                );
                1
            }
            Some(n) => n.value,
            None => {
                self.push(
                    format!("{path}.tools.tokens"),
                    t,
                    "tokens is required: each definition's size",
                );
                1
            }
        };
        (count.min(MAX_TOOLS), tokens)
    }

    /// `context_budget:`, required.
    fn session_budget(&mut self, path: &str, r: &RawSession, here: &S<String>) -> u32 {
        match &r.context_budget {
            None => {
                self.push(
                    format!("{path}.context_budget"),
                    here,
                    "context_budget is required: the most tokens a turn's context may hold",
                );
                MAX_TOKENS
            }
            Some(b) if b.value == 0 || b.value > MAX_TOKENS => {
                self.push(
                    format!("{path}.context_budget"),
                    b,
                    format!("must be 1 to {MAX_TOKENS} tokens"),
                );
                MAX_TOKENS
            }
            Some(b) => b.value,
        }
    }

    /// `overflow:` (`compact`, the default, or `end`) and `summary_tokens` (compaction's; an
    /// eighth of the budget, at most 1024, by default).
    fn session_overflow(&mut self, path: &str, r: &RawSession, budget: u32) -> Overflow {
        let compact = match &r.overflow {
            None => true,
            Some(o) => match o.value.as_str() {
                "compact" => true,
                "end" => false,
                other => {
                    self.push(
                        format!("{path}.overflow"),
                        o,
                        format!("unknown overflow {other:?} (compact, end)"),
                    );
                    true
                }
            },
        };
        if !compact {
            if let Some(n) = &r.summary_tokens {
                self.push(
                    format!("{path}.summary_tokens"),
                    n,
                    "a summary is what overflow: compact writes; this session ends at its budget",
                );
            }
            return Overflow::End;
        }
        let summary_tokens = match &r.summary_tokens {
            Some(n) if n.value == 0 => {
                self.push(format!("{path}.summary_tokens"), n, "must be at least 1");
                1
            }
            Some(n) => n.value,
            None => (budget / 8).clamp(1, 1024),
        };
        Overflow::Compact { summary_tokens }
    }

    /// `tool_choice:` of the tool-call turns: `required` (the default) or `auto`.
    fn session_tool_choice(&mut self, path: &str, r: &RawSession) -> ToolChoice {
        let Some(c) = &r.tool_choice else {
            return ToolChoice::Required;
        };
        match c.value.as_str() {
            "required" => ToolChoice::Required,
            "auto" => ToolChoice::Auto,
            other => {
                self.push(
                    format!("{path}.tool_choice"),
                    c,
                    format!("unknown tool_choice {other:?} (required, auto): a turn that asks for none is the final answer's"),
                );
                ToolChoice::Required
            }
        }
    }

    /// `subagents:`: 1 to [`MAX_SUBAGENTS`] a fork, every `every` calls (1 by default), each of
    /// `turns` calls.
    fn session_subagents(
        &mut self,
        path: &str,
        sa: &S<super::super::raw::RawSubagents>,
    ) -> Subagents {
        let count = sa.value.count.value;
        if !(1..=MAX_SUBAGENTS).contains(&count) {
            self.push(
                format!("{path}.subagents.count"),
                &sa.value.count,
                format!("must be 1 to {MAX_SUBAGENTS}"),
            );
        }
        let every = sa.value.every.as_ref().map_or(1, |e| e.value);
        if let Some(e) = sa.value.every.as_ref().filter(|e| e.value == 0) {
            self.push(format!("{path}.subagents.every"), e, "must be at least 1");
        }
        let here = S::new(String::new(), sa.referenced, sa.defined);
        let turns = self.required_length(
            &format!("{path}.subagents"),
            "turns",
            &here,
            sa.value.turns.as_ref(),
        );
        if turns.max() > MAX_SESSION_TURNS
            && let Some(t) = &sa.value.turns
        {
            self.push(
                format!("{path}.subagents.turns"),
                t,
                format!("at most {MAX_SESSION_TURNS} tool calls a sub-agent"),
            );
        }
        Subagents {
            count: count.clamp(1, MAX_SUBAGENTS),
            every: every.max(1),
            turns,
        }
    }

    /// What must fit the budget: the first turn; a tool result beside what every turn keeps
    /// (the system prompt, the tools and the summary, or the first turn without compaction);
    /// the summary beside the system prompt and tools.
    fn session_fits(&mut self, path: &str, r: &RawSession, f: Fits) {
        let budget = u64::from(f.budget);
        if f.first >= budget
            && let Some(b) = &r.context_budget
        {
            self.push(
                format!("{path}.context_budget"),
                b,
                format!(
                    "the system prompt ({} tokens), {} tool definitions of {} tokens and the first user message (up to {} tokens) take {} tokens: they do not fit the budget of {budget}",
                    f.system_tokens,
                    f.tools,
                    f.tool_tokens,
                    f.first - f.fixed,
                    f.first
                ),
            );
        } else if let Some(rt) = &r.result_tokens {
            let (beside, what) = match f.overflow {
                Overflow::Compact { summary_tokens } => {
                    (f.fixed + u64::from(summary_tokens), "the summary")
                }
                Overflow::End => (f.first, "the first message"),
            };
            if beside + u64::from(f.result_max) >= budget {
                self.push(
                    format!("{path}.result_tokens"),
                    rt,
                    format!(
                        "a tool result of up to {} tokens cannot fit the context budget of {budget} beside the {beside} tokens every turn keeps (the system prompt, the tools and {what})",
                        f.result_max
                    ),
                );
            }
        }
        if let (Overflow::Compact { summary_tokens }, Some(n)) = (f.overflow, &r.summary_tokens)
            && f.fixed + u64::from(summary_tokens) >= budget
        {
            self.push(
                format!("{path}.summary_tokens"),
                n,
                format!(
                    "a summary of {summary_tokens} tokens beside the system prompt and tools ({} tokens) does not fit the budget of {budget}",
                    f.fixed
                ),
            );
        }
    }

    /// A session `trace`: its file read and parsed at load time (a bad file is refused with its
    /// line), `time_scale` above 0 and at most [`MAX_TIME_SCALE`]; no generator key beside it.
    fn session_trace(
        &mut self,
        path: &str,
        r: &RawSession,
        t: &S<super::super::raw::RawSessionTrace>,
    ) -> Workload {
        let generated = [
            ("system_tokens", r.system_tokens.is_some()),
            ("tools", r.tools.is_some()),
            ("user_tokens", r.user_tokens.is_some()),
            ("turns", r.turns.is_some()),
            ("call_tokens", r.call_tokens.is_some()),
            ("result_tokens", r.result_tokens.is_some()),
            ("answer_tokens", r.answer_tokens.is_some()),
            ("think_time", r.think_time.is_some()),
            ("context_budget", r.context_budget.is_some()),
            ("overflow", r.overflow.is_some()),
            ("summary_tokens", r.summary_tokens.is_some()),
            ("subagents", r.subagents.is_some()),
            ("tool_choice", r.tool_choice.is_some()),
        ];
        for (key, _) in generated.iter().filter(|(_, set)| *set) {
            self.push(
                format!("{path}.{key}"),
                t,
                format!("a session is generated or replayed from a trace; this one has a trace: drop {key}"),
            );
        }
        let time_scale = match &t.value.time_scale {
            None => 1.0,
            Some(v) if v.value.is_finite() && v.value > 0.0 && v.value <= MAX_TIME_SCALE => v.value,
            Some(v) => {
                self.push(
                    format!("{path}.trace.time_scale"),
                    v,
                    format!(
                        "must be above 0 and at most {MAX_TIME_SCALE} (0.5 replays twice as fast)"
                    ),
                );
                1.0
            }
        };
        let recording = Arc::new(std::sync::OnceLock::new());
        let file = self.file(
            format!("{path}.trace.file"),
            &t.value.file,
            FileKind::SessionTrace {
                recording: recording.clone(),
            },
        );
        Workload::Session(Sessions::Replay(Replay {
            file,
            time_scale,
            seed: r.seed,
            recording,
        }))
    }

    /// A think time: a duration, or a distribution of durations (`fixed` with `value`,
    /// `uniform` with `min` and `max`, `exponential` with `mean` and an optional `max`, 20
    /// means by default), each at most [`MAX_TIMEOUT`].
    fn wait(&mut self, path: &str, w: &S<RawWait>) -> Option<Wait> {
        let dur = |v: &mut Self, key: &str, s: &str| -> Option<Duration> {
            match humantime::parse_duration(s.trim()) {
                Ok(d) if d <= MAX_TIMEOUT => Some(d),
                Ok(_) => {
                    v.push(
                        format!("{path}{key}"),
                        w,
                        format!(
                            "must be at most {}",
                            humantime::format_duration(MAX_TIMEOUT)
                        ),
                    );
                    None
                }
                Err(e) => {
                    v.push(
                        format!("{path}{key}"),
                        w,
                        format!("not a duration like 2s or 500ms ({e})"),
                    );
                    None
                }
            }
        };
        let d = match &w.value {
            RawWait::Fixed(s) => return dur(self, "", s).map(Wait::Fixed),
            RawWait::Distribution(d) => d,
        };
        let (needs, allowed): (&[&str], &[&str]) = match d.distribution.as_str() {
            "fixed" => (&["value"], &["value"]),
            "uniform" => (&["min", "max"], &["min", "max"]),
            "exponential" => (&["mean"], &["mean", "max"]),
            other => {
                self.push(
                    format!("{path}.distribution"),
                    w,
                    format!("unknown distribution {other:?} (fixed, uniform, exponential)"),
                );
                return None;
            }
        };
        let kind = d.distribution.as_str();
        let before = self.issues.len();
        let mut got = std::collections::HashMap::new();
        for (key, v) in [
            ("value", &d.value),
            ("mean", &d.mean),
            ("min", &d.min),
            ("max", &d.max),
        ] {
            match v {
                Some(_) if !allowed.contains(&key) => self.push(
                    format!("{path}.{key}"),
                    w,
                    format!("{kind} has no {key} (it takes {})", allowed.join(", ")),
                ),
                None if needs.contains(&key) => {
                    self.push(format!("{path}.{key}"), w, format!("{kind} needs {key}"));
                }
                Some(s) => {
                    if let Some(x) = dur(self, &format!(".{key}"), s) {
                        got.insert(key, x);
                    }
                }
                None => {}
            }
        }
        if self.issues.len() > before {
            return None;
        }
        match kind {
            "fixed" => got.get("value").copied().map(Wait::Fixed),
            "uniform" => {
                let (min, max) = (got.get("min").copied()?, got.get("max").copied()?);
                if min > max {
                    self.push(format!("{path}.min"), w, "must not be above max");
                    return None;
                }
                Some(Wait::Uniform { min, max })
            }
            _ => {
                let mean = got.get("mean").copied()?;
                let max = got
                    .get("max")
                    .copied()
                    .unwrap_or_else(|| mean.saturating_mul(20).min(MAX_TIMEOUT));
                Some(Wait::Exponential { mean, max })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError};
    use crate::workload::session::{Overflow, Sessions, Wait};
    use crate::workload::{Length, Workload};
    use std::time::Duration;

    fn config(session: &str, target: &str) -> String {
        format!(
            "prompts:\n  - name: agent\n    session:\n{session}targets:\n  - name: t\n    base_url: http://127.0.0.1:1/v1\n    models: [m]\n{target}"
        )
    }

    const GOOD: &str = "      system_tokens: 2000\n      tools: {count: 8, tokens: 300}\n      user_tokens: 200\n      turns: {distribution: uniform, min: 3, max: 8}\n      call_tokens: 64\n      result_tokens: {distribution: lognormal, mean: 800, stddev: 400, max: 4000}\n      answer_tokens: 256\n      think_time: {distribution: exponential, mean: 2s}\n      context_budget: 32000\n      summary_tokens: 1000\n      subagents: {count: 2, every: 3, turns: 2}\n      seed: 7\n";

    fn problems(text: &str) -> Vec<String> {
        match Config::parse(text) {
            Err(ConfigError::Invalid(i)) => i.iter().map(ToString::to_string).collect(),
            other => panic!("expected problems, got {other:?}"),
        }
    }

    #[test]
    fn a_session_prompt_validates() {
        let c = Config::parse(&config(GOOD, "")).unwrap();
        let Workload::Session(Sessions::Agent(a)) = &c.jobs[0].prompt.workload else {
            panic!("{:?}", c.jobs[0].prompt.workload)
        };
        assert_eq!((a.system_tokens, a.tools, a.tool_tokens), (2000, 8, 300));
        assert_eq!(a.turns, Length::Uniform { min: 3, max: 8 });
        assert_eq!(
            a.think_time,
            Wait::Exponential {
                mean: Duration::from_secs(2),
                max: Duration::from_secs(40)
            }
        );
        assert_eq!(
            a.overflow,
            Overflow::Compact {
                summary_tokens: 1000
            }
        );
        assert_eq!(a.subagents.map(|s| (s.count, s.every)), Some((2, 3)));
        assert_eq!(a.tool_choice, crate::protocol::ToolChoice::Required);
        // The least a session needs; compaction's summary defaults to an eighth of the budget.
        let c = Config::parse(&config(
            "      tools: {count: 1, tokens: 50}\n      user_tokens: 20\n      turns: 2\n      call_tokens: 16\n      result_tokens: 100\n      answer_tokens: 32\n      context_budget: 4096\n      overflow: end\n      tool_choice: auto\n      think_time: {distribution: uniform, min: 100ms, max: 1s}\n",
            "",
        ))
        .unwrap();
        let Workload::Session(Sessions::Agent(a)) = &c.jobs[0].prompt.workload else {
            panic!()
        };
        assert_eq!((a.overflow, a.system_tokens), (Overflow::End, 0));
        assert_eq!(
            a.think_time,
            Wait::Uniform {
                min: Duration::from_millis(100),
                max: Duration::from_secs(1)
            }
        );
        // A trace of sessions.
        let c = Config::parse(&config(
            "      trace: {file: sessions.jsonl, time_scale: 0.5}\n      seed: 3\n",
            "",
        ))
        .unwrap();
        let Workload::Session(Sessions::Replay(r)) = &c.jobs[0].prompt.workload else {
            panic!()
        };
        assert_eq!((r.time_scale, r.seed, r.len()), (0.5, Some(3), 0));
    }

    /// What cannot fit the budget, and every other bad value, is refused with its key and line.
    #[test]
    fn bad_sessions_are_refused_with_key_line_and_reason() {
        let base = |over: &str| {
            let mut s: Vec<String> = GOOD.lines().map(str::to_owned).collect();
            for o in over.lines() {
                let key = o.trim().split(':').next().unwrap_or_default().to_owned();
                s.retain(|l| l.trim().split(':').next() != Some(key.as_str()));
                if !o.trim().ends_with("DROP") {
                    s.push(o.to_owned());
                }
            }
            s.join("\n") + "\n"
        };
        let cases: &[(&str, &str)] = &[
            (
                "      context_budget: 4000",
                "prompts[0].session.context_budget: the system prompt (2000 tokens), 8 tool definitions of 300 tokens and the first user message (up to 200 tokens) take 4600 tokens: they do not fit the budget of 4000",
            ),
            (
                "      result_tokens: {distribution: lognormal, mean: 800, stddev: 400, max: 30000}",
                "prompts[0].session.result_tokens: a tool result of up to 30000 tokens cannot fit the context budget of 32000 beside the 5400 tokens every turn keeps",
            ),
            (
                "      summary_tokens: 30000",
                "prompts[0].session.summary_tokens: a summary of 30000 tokens beside the system prompt and tools (4400 tokens) does not fit the budget of 32000",
            ),
            (
                "      context_budget: DROP",
                "prompts[0].session.context_budget: context_budget is required",
            ),
            (
                "      overflow: end",
                "prompts[0].session.summary_tokens: a summary is what overflow: compact writes",
            ),
            (
                "      overflow: shrink",
                "prompts[0].session.overflow: unknown overflow \"shrink\"",
            ),
            (
                "      tool_choice: none",
                "prompts[0].session.tool_choice: unknown tool_choice \"none\"",
            ),
            (
                "      tools: DROP",
                "prompts[0].session.tools: a session's turns call tools",
            ),
            (
                "      tools: {count: 500, tokens: 3}",
                "prompts[0].session.tools.count: must be at most 128",
            ),
            (
                "      tools: {count: 3}",
                "prompts[0].session.tools.tokens: tokens is required",
            ),
            (
                "      turns: 5000",
                "prompts[0].session.turns: at most 1000 tool calls",
            ),
            (
                "      answer_tokens: DROP",
                "prompts[0].session.answer_tokens: answer_tokens is required",
            ),
            (
                "      think_time: soon",
                "prompts[0].session.think_time: not a duration",
            ),
            (
                "      think_time: {distribution: exponential}",
                "prompts[0].session.think_time.mean: exponential needs mean",
            ),
            (
                "      think_time: {distribution: uniform, min: 3s, max: 1s}",
                "prompts[0].session.think_time.min: must not be above max",
            ),
            (
                "      think_time: {distribution: pareto, mean: 1s}",
                "prompts[0].session.think_time.distribution: unknown distribution \"pareto\"",
            ),
            (
                "      think_time: {distribution: fixed, value: 1s, mean: 2s}",
                "prompts[0].session.think_time.mean: fixed has no mean",
            ),
            (
                "      subagents: {count: 0, turns: 1}",
                "prompts[0].session.subagents.count: must be 1 to 16",
            ),
            (
                "      subagents: {count: 2}",
                "prompts[0].session.subagents.turns: turns is required",
            ),
            (
                "      trace: {file: s.jsonl}",
                "prompts[0].session.system_tokens: a session is generated or replayed from a trace; this one has a trace: drop system_tokens",
            ),
        ];
        for (over, want) in cases {
            let p = problems(&config(&base(over), ""));
            assert!(
                p.iter().any(|m| m.contains(want)),
                "{over}\nwant {want}\ngot {p:?}"
            );
            assert!(
                p.iter()
                    .all(|m| m.chars().next().is_some_and(|c| c.is_ascii_digit())),
                "each has its line: {p:?}"
            );
        }
        // A session is refused on the completions API, and beside extra_body's tools.
        let p = problems(&config(GOOD, "    api: openai-completions\n"));
        assert!(
            p.iter()
                .any(|m| m.contains("targets[0].api: prompt \"agent\" is a session")),
            "{p:?}"
        );
        let p = problems(&config(GOOD, "    extra_body: {tool_choice: auto}\n"));
        assert!(
            p.iter()
                .any(|m| m.contains("targets[0].extra_body.tool_choice")),
            "{p:?}"
        );
        // A prompt-wide max_tokens or nonce does not apply.
        let p = problems(&format!(
            "prompts:\n  - name: agent\n    max_tokens: 5\n    session:\n{GOOD}targets:\n  - name: t\n    base_url: http://127.0.0.1:1/v1\n    models: [m]\n"
        ));
        assert!(
            p.iter().any(|m| m.contains("prompts[0].max_tokens")),
            "{p:?}"
        );
    }

    /// A session trace is read at load time: a bad line is refused with the key, the file, the
    /// line and the reason, and nothing is sent.
    #[test]
    fn a_bad_session_trace_is_refused_at_load_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("sessions.jsonl");
        std::fs::write(
            &trace,
            "{\"session_id\": \"a\", \"timestamp\": 10, \"input_length\": 5, \"output_length\": 3}\n{\"session_id\": \"a\", \"timestamp\": 5, \"input_length\": 5, \"output_length\": 3}\n",
        )
        .unwrap();
        let file = dir.path().join("c.yml");
        std::fs::write(
            &file,
            config(&format!("      trace: {{file: {}}}\n", trace.display()), ""),
        )
        .unwrap();
        let e = Config::load(&file).unwrap_err().to_string();
        assert!(
            e.contains("prompts[0].session.trace.file: session trace")
                && e.contains("sessions.jsonl: line 2: its timestamp is 0.005 s before its session's previous turn's"),
            "{e}"
        );
        std::fs::write(
            &trace,
            "{\"session_id\": \"a\", \"input_length\": 5, \"output_length\": 3}\n{\"session_id\": \"a\", \"delay\": 100, \"input_length\": 7, \"output_length\": 3}\n",
        )
        .unwrap();
        let c = Config::load(&file).unwrap();
        let Workload::Session(Sessions::Replay(r)) = &c.jobs[0].prompt.workload else {
            panic!()
        };
        assert_eq!(r.len(), 1);
    }
}
