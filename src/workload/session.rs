//! Agent sessions (`session:` prompts): a session is a sequence of turns, each a request that
//! resends the context so far, as an agent loop sends them. Pure: the state of one session (and of
//! each of its sub-agents) is a [`Branch`] that is told how each turn was answered and says what
//! to do next ([`Step`]); `probe::session` sends the turns.
//!
//! Two sources of sessions:
//!
//! - [`AgentLoop`] (generated): a system prompt and N tool definitions (the same in every session
//!   of the prompt, so a server's prefix cache can share them), a first user message, then turns
//!   that ask for a tool call (`tool_choice`); the next turn appends the assistant's tool call (as
//!   the server returned it) and a tool result of a drawn length, after a think time (the tool's
//!   latency); after the drawn number of tool calls, a final answer turn (`tool_choice: none`,
//!   the tools still offered so the prefix stays the same). A context budget bounds the context:
//!   past it the session compacts (the turns so far replaced by a summary of a given length, the
//!   last call and its results kept) or ends. Sub-agents: every `every` tool calls of a session,
//!   its call is answered by `count` child sessions run in parallel, each starting from the
//!   context of the parent's last request (its whole prefix) and a task of its own, joined before
//!   the parent's next turn.
//! - [`replay::Replay`]: the sessions of a recorded trace, each turn's new input appended to the
//!   context with the previous answers, at its recorded gap.
//!
//! Sizes are what the server counts: filler words sized by the [`TokenModel`] of the target, as
//! synthetic prompts are (the system prompt, or the first user message when there is none,
//! absorbs the chat template's tokens). A tool definition's size is its description's: the JSON
//! around it adds the few tokens each template renders a definition with, which the server's
//! `usage` counts. The context budget is checked against the server's own count of the last
//! request (its `usage`) plus what the next turn appends; before the first answer, against the
//! requested sizes. Every draw is from the prompt's seed, the session's number and its branch, so
//! a seed repeats a run (the server's answers, which the context carries, aside).

pub mod replay;

use super::{Length, RequestContent, TokenModel, filler::words, user};
use crate::protocol::{Message, ToolCall, ToolChoice, ToolDef};
use crate::rng::Rng;
use std::sync::Arc;
use std::time::Duration;

/// Salt of the generator of a prompt's system prompt and tool definitions (shared by its sessions).
const SHARED_SALT: u64 = 0x5345_5353_494f_4e53;
/// Salt of a branch's own generator.
const BRANCH_SALT: u64 = 0x4252_414e_4348;

/// The turn of a session a request belongs to: the session's number and its branch (0: the
/// session itself; 1, 2, ...: its sub-agents, numbered across its forks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SessionRef {
    /// The session's number in the run.
    pub id: u64,
    /// 0 for the session, its sub-agent's number otherwise.
    pub branch: u32,
}

/// A think time: fixed, or drawn per turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Always this long.
    Fixed(Duration),
    /// Uniform in `[min, max]`.
    Uniform {
        /// Shortest.
        min: Duration,
        /// Longest.
        max: Duration,
    },
    /// Exponential with this mean, cut at `max`.
    Exponential {
        /// Mean (before the cut).
        mean: Duration,
        /// Longest.
        max: Duration,
    },
}

impl Wait {
    /// One draw.
    pub(crate) fn draw(&self, rng: &mut Rng) -> Duration {
        match *self {
            Wait::Fixed(d) => d,
            Wait::Uniform { min, max } => min + (max - min).mul_f64(rng.unit()),
            Wait::Exponential { mean, max } => {
                let x = -(1.0 - rng.unit()).ln(); // 1 - unit is in (0, 1]: finite
                mean.mul_f64(x).min(max)
            }
        }
    }

    /// The longest a draw can be.
    pub fn max(&self) -> Duration {
        match *self {
            Wait::Fixed(d) => d,
            Wait::Uniform { max, .. } | Wait::Exponential { max, .. } => max,
        }
    }
}

/// What a session does when its next turn would not fit its context budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// The turns so far are replaced by a summary of this many tokens (the last tool call and
    /// its results kept); a session that cannot fit even then ends.
    Compact {
        /// The summary's length.
        summary_tokens: u32,
    },
    /// The session ends.
    End,
}

/// Sub-agents of a generated session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subagents {
    /// Child sessions per fork, run in parallel.
    pub count: u32,
    /// A fork answers every this many tool calls of the session.
    pub every: u32,
    /// Tool-call turns of each child before its final answer.
    pub turns: Length,
}

/// A generated `session:` prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentLoop {
    /// The system prompt's length (0: none), chat template included.
    pub system_tokens: u32,
    /// Tool definitions offered.
    pub tools: u32,
    /// Each definition's length (its description).
    pub tool_tokens: u32,
    /// The first user message's length (a sub-agent's task too).
    pub user_tokens: Length,
    /// Tool-call turns before the final answer.
    pub turns: Length,
    /// Output cap of a tool-call turn.
    pub call_tokens: Length,
    /// A tool result's length.
    pub result_tokens: Length,
    /// Output cap of the final answer.
    pub answer_tokens: Length,
    /// Between a tool call's answer and the next turn: the tool's latency.
    pub think_time: Wait,
    /// The most tokens a turn's context may hold.
    pub context_budget: u32,
    /// Past the budget.
    pub overflow: Overflow,
    /// Sub-agents, if any.
    pub subagents: Option<Subagents>,
    /// What a tool-call turn asks (`required` or `auto`).
    pub tool_choice: ToolChoice,
    /// The seed of every draw (`None`: a fresh seed per run).
    pub seed: Option<u64>,
}

/// A `session:` prompt: generated sessions, or a recorded trace's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sessions {
    /// An agent loop.
    Agent(Box<AgentLoop>),
    /// A trace's sessions.
    Replay(replay::Replay),
}

impl Sessions {
    /// The seed (`None`: a fresh one per run).
    pub fn seed(&self) -> Option<u64> {
        match self {
            Sessions::Agent(a) => a.seed,
            Sessions::Replay(r) => r.seed,
        }
    }

    /// This prompt with its seed set when unset.
    pub(super) fn set_seed(&mut self, fresh: u64) {
        match self {
            Sessions::Agent(a) => a.seed = Some(a.seed.unwrap_or(fresh)),
            Sessions::Replay(r) => r.seed = Some(r.seed.unwrap_or(fresh)),
        }
    }

    /// What the prompt sends, in words (its seed left out: it chooses the draws, not the
    /// workload).
    pub fn describe(&self) -> String {
        match self {
            Sessions::Agent(a) => {
                let mut w = format!(
                    "session: system {} tokens, {} tools of {} tokens, user {} tokens, {} tool calls (output {} tokens) with results of {} tokens, think time {:?}, answer {} tokens, budget {} tokens, {}",
                    a.system_tokens,
                    a.tools,
                    a.tool_tokens,
                    a.user_tokens,
                    a.turns,
                    a.call_tokens,
                    a.result_tokens,
                    a.think_time,
                    a.answer_tokens,
                    a.context_budget,
                    match a.overflow {
                        Overflow::Compact { summary_tokens } =>
                            format!("compacted to {summary_tokens} tokens"),
                        Overflow::End => "ended".to_owned(),
                    },
                );
                if let Some(s) = a.subagents {
                    w.push_str(&format!(
                        ", {} sub-agents every {} calls ({} calls each)",
                        s.count, s.every, s.turns
                    ));
                }
                w.push_str(&format!(", tool_choice {}", a.tool_choice.as_str()));
                w
            }
            Sessions::Replay(r) => format!(
                "session trace {} at time scale {}, {} sessions",
                r.file.file_name().map_or_else(
                    || r.file.display().to_string(),
                    |n| n.to_string_lossy().into()
                ),
                r.time_scale,
                r.len()
            ),
        }
    }

    /// Session number `id`, its context built with `tokens`.
    pub fn start(&self, id: u64, tokens: TokenModel) -> Branch {
        match self {
            Sessions::Agent(a) => Branch::Agent(Box::new(AgentState::new(
                Arc::new((**a).clone()),
                tokens,
                id,
            ))),
            Sessions::Replay(r) => Branch::Replay(Box::new(r.start(id, tokens))),
        }
    }
}

/// How a turn was answered, as a session needs it.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    /// The request succeeded.
    pub ok: bool,
    /// Its visible text.
    pub text: &'a str,
    /// Its tool calls.
    pub tool_calls: &'a [ToolCall],
    /// The input tokens the server counted, if it said.
    pub input_tokens: Option<u64>,
    /// Its output tokens.
    pub output_tokens: u64,
}

/// One turn to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// What it sends.
    pub content: RequestContent,
    /// How long after the previous turn's answer it is sent.
    pub wait: Duration,
    /// A recorded turn with a timestamp: sent this long after its session's start (and not
    /// before the previous turn's answer), instead of `wait`.
    pub at: Option<Duration>,
}

/// How a branch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// It gave its final answer (a generated session), or sent every recorded turn.
    Completed,
    /// Its next turn could not fit its context budget (`overflow: end`, or even a compacted
    /// context does not fit).
    Budget,
    /// A turn failed: there is no answer to continue from.
    Failed,
}

/// What a branch does next.
#[derive(Debug)]
pub enum Step {
    /// Send a turn.
    Send(Box<Turn>),
    /// Run these sub-agents in parallel, each to its end, then call [`Branch::joined`].
    Fork(Vec<Branch>),
    /// The branch is over.
    Done(End),
}

/// One running session or sub-agent.
#[derive(Debug)]
pub enum Branch {
    /// Of an agent loop.
    Agent(Box<AgentState>),
    /// Of a trace.
    Replay(Box<replay::ReplayState>),
}

impl Branch {
    /// The next step, given how the previous turn was answered (`None` before the first).
    pub fn next(&mut self, answer: Option<&Answer<'_>>) -> Step {
        match self {
            Branch::Agent(a) => a.next(answer),
            Branch::Replay(r) => r.next(answer),
        }
    }

    /// The sub-agents of the last [`Step::Fork`] are over: the next step continues.
    pub fn joined(&mut self) -> Step {
        match self {
            Branch::Agent(a) => a.joined(),
            Branch::Replay(_) => Step::Done(End::Completed),
        }
    }

    /// Which session and branch it is.
    pub fn id(&self) -> SessionRef {
        match self {
            Branch::Agent(a) => SessionRef {
                id: a.id,
                branch: a.branch,
            },
            Branch::Replay(r) => SessionRef {
                id: r.id(),
                branch: 0,
            },
        }
    }

    /// Times its context was compacted.
    pub fn compactions(&self) -> u32 {
        match self {
            Branch::Agent(a) => a.compactions,
            Branch::Replay(_) => 0,
        }
    }
}

/// The system prompt and tool definitions every session of `spec` starts with (drawn from the
/// seed alone, so every session shares them).
fn shared_prefix(spec: &AgentLoop, tokens: &TokenModel) -> (Option<Message>, Arc<[ToolDef]>) {
    let seed = spec.seed.unwrap_or(0) ^ SHARED_SALT;
    let system = (spec.system_tokens > 0).then(|| {
        Message::new(
            "system",
            words(
                &mut Rng::new(seed),
                tokens.words_for_prompt(spec.system_tokens),
            ),
        )
    });
    let tools = (0..spec.tools)
        .map(|i| ToolDef {
            name: format!("tool_{i}"),
            description: words(
                &mut Rng::for_request(seed, u64::from(i) + 1),
                tokens.words_for(spec.tool_tokens).max(1),
            ),
        })
        .collect();
    (system, tools)
}

/// Where a generated branch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before its first turn.
    Start,
    /// A tool-call turn was sent.
    Call,
    /// Its final answer turn was sent.
    Final,
    /// Its sub-agents run.
    Forked,
    /// Over.
    Over,
}

/// The state of one generated branch: its context (bounded by the budget) and its draws.
#[derive(Debug)]
pub struct AgentState {
    spec: Arc<AgentLoop>,
    tokens: TokenModel,
    id: u64,
    branch: u32,
    /// The parent's next sub-agent number.
    next_child: u32,
    rng: Rng,
    tools: Arc<[ToolDef]>,
    history: Vec<Message>,
    /// Its context's length in server tokens: the last request's count (the server's when it
    /// said) plus what was appended since.
    context: u64,
    /// Requests sent.
    turn: u32,
    /// Tool-call turns before the final answer.
    calls_planned: u32,
    /// Tool-call turns answered.
    calls_done: u32,
    phase: Phase,
    /// The history length and context of the last request (what a fork's children start from).
    sent: (usize, u64),
    /// The ids of the last answer's calls, awaiting their results (one `None` for an answer
    /// that called no tool: its "result" goes as a user message).
    pending: Vec<Option<String>>,
    /// Times the context was compacted.
    compactions: u32,
}

impl AgentState {
    fn new(spec: Arc<AgentLoop>, tokens: TokenModel, id: u64) -> Self {
        let (system, tools) = shared_prefix(&spec, &tokens);
        let tools_tokens = u64::from(spec.tools) * u64::from(spec.tool_tokens);
        let mut s = AgentState {
            rng: Rng::for_request(spec.seed.unwrap_or(0) ^ BRANCH_SALT, id),
            spec,
            tokens,
            id,
            branch: 0,
            next_child: 1,
            tools,
            history: Vec::new(),
            context: tools_tokens,
            turn: 0,
            calls_planned: 0,
            calls_done: 0,
            phase: Phase::Start,
            sent: (0, 0),
            pending: Vec::new(),
            compactions: 0,
        };
        if let Some(m) = system {
            s.history.push(m);
            s.context += u64::from(s.spec.system_tokens);
        }
        s.calls_planned = s.spec.turns.draw(&mut s.rng);
        let task = s.spec.user_tokens.draw(&mut s.rng);
        // Without a system prompt the first message carries the template.
        let n = if s.history.is_empty() {
            s.tokens.words_for_prompt(task)
        } else {
            s.tokens.words_for(task).max(1)
        };
        s.history.push(user(words(&mut s.rng, n)));
        s.context += u64::from(task);
        s
    }

    /// A sub-agent of this branch: the context of its last request, then a task of its own.
    fn child(&self, branch: u32, turns: Length) -> AgentState {
        let (len, context) = self.sent;
        let mut rng = Rng::for_request(
            self.spec.seed.unwrap_or(0) ^ BRANCH_SALT ^ (u64::from(branch) << 40),
            self.id,
        );
        let calls_planned = turns.draw(&mut rng);
        let task = self.spec.user_tokens.draw(&mut rng);
        let mut history = self.history[..len].to_vec();
        history.push(user(words(&mut rng, self.tokens.words_for(task).max(1))));
        AgentState {
            spec: self.spec.clone(),
            tokens: self.tokens,
            id: self.id,
            branch,
            next_child: 0,
            rng,
            tools: self.tools.clone(),
            history,
            context: context + u64::from(task),
            turn: 0,
            calls_planned,
            calls_done: 0,
            phase: Phase::Start,
            sent: (0, 0),
            pending: Vec::new(),
            compactions: 0,
        }
    }

    fn next(&mut self, answer: Option<&Answer<'_>>) -> Step {
        match (self.phase, answer) {
            (Phase::Start, _) => self.turn_now(Duration::ZERO),
            (Phase::Over | Phase::Forked, _) => Step::Done(End::Failed),
            (_, None) => self.over(End::Failed),
            (_, Some(a)) if !a.ok => self.over(End::Failed),
            (Phase::Final, Some(_)) => self.over(End::Completed),
            (Phase::Call, Some(a)) => {
                self.record_call(a);
                self.calls_done += 1;
                let fork = self.spec.subagents.filter(|s| {
                    self.branch == 0 && s.count > 0 && self.calls_done.is_multiple_of(s.every)
                });
                if let Some(s) = fork {
                    self.phase = Phase::Forked;
                    let first = self.next_child;
                    self.next_child += s.count;
                    let children = (first..first + s.count)
                        .map(|b| Branch::Agent(Box::new(self.child(b, s.turns))))
                        .collect();
                    return Step::Fork(children);
                }
                let wait = self.spec.think_time.draw(&mut self.rng);
                self.append_results();
                self.turn_now(wait)
            }
        }
    }

    fn joined(&mut self) -> Step {
        if self.phase != Phase::Forked {
            return Step::Done(End::Failed);
        }
        // The sub-agents were the tool's latency.
        self.append_results();
        self.turn_now(Duration::ZERO)
    }

    fn over(&mut self, end: End) -> Step {
        self.phase = Phase::Over;
        Step::Done(end)
    }

    /// Appends the assistant's answer to a tool-call turn: its calls (an id made up for a call
    /// without one, the first tool named for a call without a name), or its text.
    fn record_call(&mut self, a: &Answer<'_>) {
        // The answer's size: its output tokens, and never less than a token per 4 bytes of what
        // it appends (a server that under-counts cannot grow the context past its budget).
        let bytes = a.text.len()
            + a.tool_calls
                .iter()
                .map(|c| c.arguments.len())
                .sum::<usize>();
        let appended = a.output_tokens.max((bytes / 4) as u64);
        self.context = a.input_tokens.unwrap_or(self.context) + appended;
        let mut calls: Vec<ToolCall> = a.tool_calls.to_vec();
        for (i, c) in calls.iter_mut().enumerate() {
            if c.id.is_empty() {
                c.id = format!("call_{}_{}_{i}", self.branch, self.turn);
            }
            if c.name.is_empty() {
                c.name = self
                    .tools
                    .first()
                    .map(|t| t.name.clone())
                    .unwrap_or_default();
            }
        }
        self.pending = if calls.is_empty() {
            vec![None]
        } else {
            calls.iter().map(|c| Some(c.id.clone())).collect()
        };
        if !calls.is_empty() || !a.text.is_empty() {
            self.history.push(Message {
                tool_calls: calls,
                ..Message::new("assistant", a.text)
            });
        }
    }

    /// Appends a result of a drawn length for each pending call (a user message when the
    /// answer called no tool).
    fn append_results(&mut self) {
        for id in std::mem::take(&mut self.pending) {
            let n = self.spec.result_tokens.draw(&mut self.rng);
            let text = words(&mut self.rng, self.tokens.words_for(n).max(1));
            self.context += u64::from(n);
            self.history.push(match id {
                Some(id) => Message {
                    tool_call_id: Some(id),
                    ..Message::new("tool", text)
                },
                None => user(text),
            });
        }
    }

    /// Replaces the turns so far by a summary, keeping the system prompt, the first message's
    /// place and the last answer with its results; false when even that does not fit.
    fn compact(&mut self, summary_tokens: u32) -> bool {
        let system = usize::from(self.history.first().is_some_and(|m| m.role == "system"));
        // The last assistant message and what follows it (its results).
        let keep_from = self
            .history
            .iter()
            .rposition(|m| m.role == "assistant")
            .unwrap_or(self.history.len());
        if keep_from <= system + 1 {
            return false;
        }
        let kept: u64 = self.history[keep_from..]
            .iter()
            .map(|m| self.message_tokens(m))
            .sum();
        let fixed = u64::from(self.spec.system_tokens)
            + u64::from(self.spec.tools) * u64::from(self.spec.tool_tokens);
        let summary = words(&mut self.rng, self.tokens.words_for(summary_tokens).max(1));
        let context = fixed + u64::from(summary_tokens) + kept;
        if context >= u64::from(self.spec.context_budget) {
            return false;
        }
        let tail = self.history.split_off(keep_from);
        self.history.truncate(system);
        self.history.push(user(summary));
        self.history.extend(tail);
        self.context = context;
        self.compactions += 1;
        true
    }

    /// A message's tokens by the token model (its words and its calls' arguments).
    fn message_tokens(&self, m: &Message) -> u64 {
        let words = m.content.split(' ').filter(|w| !w.is_empty()).count()
            + m.tool_calls
                .iter()
                .map(|c| c.arguments.len() / 4 + 1)
                .sum::<usize>();
        (words as f64 * self.tokens.per_word).ceil() as u64
    }

    /// The next turn (a tool call, or the final answer once the calls are done), after `wait`;
    /// compacted or ended first when the context is past the budget.
    fn turn_now(&mut self, wait: Duration) -> Step {
        if self.context >= u64::from(self.spec.context_budget) {
            let fits = match self.spec.overflow {
                Overflow::Compact { summary_tokens } => self.compact(summary_tokens),
                Overflow::End => false,
            };
            if !fits {
                return self.over(End::Budget);
            }
        }
        let last = self.calls_done >= self.calls_planned;
        let cap = if last {
            self.spec.answer_tokens.draw(&mut self.rng)
        } else {
            self.spec.call_tokens.draw(&mut self.rng)
        };
        self.turn += 1;
        self.phase = if last { Phase::Final } else { Phase::Call };
        self.sent = (self.history.len(), self.context);
        Step::Send(Box::new(Turn {
            content: RequestContent {
                messages: self.history.clone(),
                max_tokens: Some(cap),
                turn: Some(self.turn),
                tools: (!self.tools.is_empty()).then(|| self.tools.clone()),
                tool_choice: Some(if last {
                    ToolChoice::None
                } else {
                    self.spec.tool_choice
                }),
                session: Some(SessionRef {
                    id: self.id,
                    branch: self.branch,
                }),
                ..RequestContent::default()
            },
            wait,
            at: None,
        }))
    }
}

#[cfg(test)]
mod tests;
