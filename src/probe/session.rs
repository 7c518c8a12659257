//! Sending agent sessions (`session:` prompts) through the probe path: each turn is one probe,
//! sent after its wait; a fork's sub-agents run in parallel, each on a prober of its own, and
//! are joined before the parent's next turn (the pure state is [`crate::workload::session`]'s).
//!
//! [`run`] runs one whole session, so a driver can run N sessions concurrently (closed loop)
//! or start one at each arrival (open loop). [`Sequence`] sends a session's turns one request
//! at a time, as a worker of [`super::Session`] sends a conversation's (its sub-agents one after
//! another).

use super::{ProbeSpec, Prober};
use crate::measure::ProbeResult;
use crate::transport::TransportError;
use crate::workload::session::{Answer, Branch, End, Sessions, Step, Turn};
use crate::workload::{RequestContent, SessionRef, Workload};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How a turn's answer reads to its session.
pub fn answer_of(r: &ProbeResult) -> Answer<'_> {
    Answer {
        ok: r.success(),
        text: &r.text,
        tool_calls: &r.tool_calls,
        input_tokens: r.input_tokens,
        output_tokens: r.output_tokens,
    }
}

/// One turn's probe.
#[derive(Debug, Clone)]
pub struct TurnRecord {
    /// Its session and branch.
    pub session: SessionRef,
    /// Its turn in its branch, from 1.
    pub turn: u32,
    /// When it was sent, s after the session's start.
    pub sent_s: f64,
    /// How long after its intended instant it was sent (the previous answer's end and the
    /// turn's wait, or a recorded turn's instant), s.
    pub lag_s: f64,
    /// When its probe returned, s after the session's start.
    pub end_s: f64,
    /// Its result.
    pub result: ProbeResult,
}

/// How a session went: every turn of it and of its sub-agents, in the order they ended.
#[derive(Debug, Clone)]
pub struct SessionRun {
    /// The session's number.
    pub id: u64,
    /// Its turns (its sub-agents' too).
    pub turns: Vec<TurnRecord>,
    /// How the session itself ended (`None`: the run stopped it first).
    pub end: Option<End>,
    /// From its start to its last turn's end, s.
    pub duration_s: f64,
    /// Times its context (or a sub-agent's) was compacted.
    pub compactions: u32,
    /// Turns in flight when [`Control::cut`] came: sent, not recorded.
    pub cut: u32,
}

/// What steers a running session from outside: the stop (no turn is sent after it), the cut
/// (a turn in flight is given up: not recorded, counted in [`SessionRun::cut`]), and who is told
/// of each turn as it is sent and as it ends (a bench's progress and early stop).
#[derive(Clone, Copy)]
pub struct Control<'a> {
    /// No turn is sent once it is cancelled.
    pub stop: &'a CancellationToken,
    /// A turn in flight is given up once it is cancelled.
    pub cut: &'a CancellationToken,
    /// Told `None` as a turn is sent and `Some(result)` as it ends.
    pub watch: &'a (dyn Fn(Option<&ProbeResult>) + Sync),
}

impl std::fmt::Debug for Control<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("stop", &self.stop.is_cancelled())
            .field("cut", &self.cut.is_cancelled())
            .finish_non_exhaustive()
    }
}

/// Waits for a turn's send instant: `wait` after now, or `at` after the session's start (never
/// before now); that instant, or `None` when `stop` came first.
async fn wait_for(turn: &Turn, start: Instant, stop: &CancellationToken) -> Option<Instant> {
    let now = Instant::now();
    let until = match turn.at {
        Some(at) => start.checked_add(at).map(|t| t.max(now)),
        None => now.checked_add(turn.wait),
    }?;
    if until <= Instant::now() {
        return (!stop.is_cancelled()).then_some(until);
    }
    tokio::select! {
        () = tokio::time::sleep_until(until.into()) => Some(until),
        () = stop.cancelled() => None,
    }
}

/// How a branch's turn went: recorded, or not sent or cut by the [`Control`] (counted).
enum Sent {
    Turn(Box<TurnRecord>),
    Stopped,
    Cut,
}

/// What a sub-agent's run left: how it ended (`None`: stopped first), its turns, its
/// compactions, and its turns cut in flight.
type LeafRun = (Option<End>, Vec<TurnRecord>, u32, u32);

/// Runs a branch that does not fork (a sub-agent) to its end on `prober`.
async fn leaf(
    spec: &ProbeSpec,
    prober: &mut Prober,
    mut branch: Branch,
    start: Instant,
    ctl: Control<'_>,
) -> LeafRun {
    let mut out: Vec<TurnRecord> = Vec::new();
    loop {
        let step = branch.next(out.last().map(|t| answer_of(&t.result)).as_ref());
        match step {
            Step::Send(turn) => match send(spec, prober, &turn, start, ctl).await {
                Sent::Turn(rec) => out.push(*rec),
                Sent::Stopped => return (None, out, branch.compactions(), 0),
                Sent::Cut => return (None, out, branch.compactions(), 1),
            },
            // Sub-agents do not fork.
            Step::Fork(_) => return (Some(End::Failed), out, branch.compactions(), 0),
            Step::Done(end) => return (Some(end), out, branch.compactions(), 0),
        }
    }
}

/// One turn: its wait, then its probe.
async fn send(
    spec: &ProbeSpec,
    prober: &mut Prober,
    turn: &Turn,
    start: Instant,
    ctl: Control<'_>,
) -> Sent {
    let Some(intended) = wait_for(turn, start, ctl.stop).await else {
        return Sent::Stopped;
    };
    let content = &turn.content;
    let sent = Instant::now();
    (ctl.watch)(None);
    let result = tokio::select! {
        r = prober.run_content(spec, content) => r,
        () = ctl.cut.cancelled() => return Sent::Cut,
    };
    (ctl.watch)(Some(&result));
    let since = |t: Instant| t.saturating_duration_since(start).as_secs_f64();
    Sent::Turn(Box::new(TurnRecord {
        session: content.session.unwrap_or_default(),
        turn: content.turn.unwrap_or(0),
        sent_s: since(sent),
        lag_s: sent.saturating_duration_since(intended).as_secs_f64(),
        end_s: since(Instant::now()),
        result,
    }))
}

/// Runs session number `id` of `spec`'s session prompt to its end: its turns on `probers[0]`,
/// a fork's sub-agents each on a prober of its own (the pool grows as forks need). `stop` ends
/// it at once (a turn in flight is not recorded).
///
/// # Errors
/// [`TransportError`] when a prober for a sub-agent cannot be built; a prompt that is not a
/// session gives an empty run.
pub async fn run(
    spec: &ProbeSpec,
    probers: &mut Vec<Prober>,
    id: u64,
    stop: &CancellationToken,
) -> Result<SessionRun, TransportError> {
    let ctl = Control {
        stop,
        cut: stop,
        watch: &|_| {},
    };
    run_with(spec, probers, id, ctl).await
}

/// [`run`] steered by `ctl`: no turn is sent after its stop, a turn in flight is given up at its
/// cut, and its watcher is told of every turn (a bench level's session).
///
/// # Errors
/// As [`run`].
pub async fn run_with(
    spec: &ProbeSpec,
    probers: &mut Vec<Prober>,
    id: u64,
    ctl: Control<'_>,
) -> Result<SessionRun, TransportError> {
    let start = Instant::now();
    let mut run = SessionRun {
        id,
        turns: Vec::new(),
        end: None,
        duration_s: 0.0,
        compactions: 0,
        cut: 0,
    };
    let Workload::Session(sessions) = &spec.workload else {
        return Ok(run);
    };
    if probers.is_empty() {
        probers.push(Prober::new(spec)?);
    }
    let mut branch = sessions.start(id, spec.tokens);
    let mut step = branch.next(None);
    loop {
        match step {
            Step::Send(turn) => {
                let rec = match send(spec, &mut probers[0], &turn, start, ctl).await {
                    Sent::Turn(rec) => rec,
                    Sent::Stopped => break,
                    Sent::Cut => {
                        run.cut += 1;
                        break;
                    }
                };
                step = branch.next(Some(&answer_of(&rec.result)));
                run.turns.push(*rec);
            }
            Step::Fork(children) => {
                while probers.len() <= children.len() {
                    probers.push(Prober::new(spec)?);
                }
                let (_, rest) = probers.split_at_mut(1);
                let ends = futures_util::future::join_all(
                    children
                        .into_iter()
                        .zip(rest.iter_mut())
                        .map(|(child, p)| leaf(spec, p, child, start, ctl)),
                )
                .await;
                let mut stopped = false;
                for (end, mut turns, compactions, cut) in ends {
                    run.turns.append(&mut turns);
                    run.compactions += compactions;
                    run.cut += cut;
                    stopped |= end.is_none();
                }
                if stopped {
                    break;
                }
                step = branch.joined();
            }
            Step::Done(end) => {
                run.end = Some(end);
                break;
            }
        }
    }
    run.compactions += branch.compactions();
    run.duration_s = run.turns.iter().map(|t| t.end_s).fold(0.0, f64::max);
    Ok(run)
}

/// How a session of a `serve` job ended, as its `tokenprobe_sessions_total` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionOutcome {
    /// It gave its final answer, or sent every recorded turn.
    Completed,
    /// It ended at its context budget, as its prompt says (`overflow: end`).
    Budget,
    /// A turn failed.
    Failed,
    /// A turn was refused for overflowing the model's context
    /// ([`crate::outcome::context_overflow`]).
    Overflow,
}

impl SessionOutcome {
    /// Every outcome (series are pre-created at 0).
    pub const ALL: [SessionOutcome; 4] = [
        SessionOutcome::Completed,
        SessionOutcome::Budget,
        SessionOutcome::Failed,
        SessionOutcome::Overflow,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionOutcome::Completed => "completed",
            SessionOutcome::Budget => "budget",
            SessionOutcome::Failed => "failed",
            SessionOutcome::Overflow => "overflow",
        }
    }

    /// The session did what its prompt says: completed, or ended at its budget.
    pub fn success(self) -> bool {
        matches!(self, SessionOutcome::Completed | SessionOutcome::Budget)
    }
}

/// One turn of a finished session, as a `serve` job's sinks are told it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TurnDone {
    /// Its branch: 0 the session itself, 1, 2, ... its sub-agents.
    pub branch: u32,
    /// Its turn in its branch, from 1.
    pub turn: u32,
    /// Its TTFT, s (successes).
    pub ttft_s: Option<f64>,
    /// The input tokens the server counted (successes whose usage said).
    pub input_tokens: Option<u64>,
    /// Of them, those its prefix cache served (when its usage said).
    pub cached_input_tokens: Option<u64>,
}

/// A finished session of a `serve` job: its turns, how it ended, how long it took.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionDone {
    /// Its turns in the order they ended (its sub-agents' too).
    pub turns: Vec<TurnDone>,
    /// How it ended.
    pub outcome: SessionOutcome,
    /// From its first send to its last turn's end, s.
    pub duration_s: f64,
}

impl SessionDone {
    /// Σ cached / Σ input tokens over its successful turns whose usage said both; `None` when
    /// none did.
    pub fn cached_share(&self) -> Option<f64> {
        let (mut cached, mut input) = (0u64, 0u64);
        for t in &self.turns {
            if let (Some(c), Some(i)) = (t.cached_input_tokens, t.input_tokens) {
                cached = cached.saturating_add(c);
                input = input.saturating_add(i);
            }
        }
        (input > 0).then(|| cached as f64 / input as f64)
    }
}

/// A session's turns as they end (pure): what a `serve` job tells its sinks once the session is
/// over ([`SessionTally::finish`]).
#[derive(Debug, Default)]
pub struct SessionTally {
    turns: Vec<TurnDone>,
    first_sent: Option<Instant>,
    last_end: Option<Instant>,
    overflowed: bool,
}

impl SessionTally {
    /// Turn result `r`, sent at `sent` and ended at `end`.
    pub fn add(&mut self, r: &ProbeResult, sent: Instant, end: Instant) {
        self.first_sent.get_or_insert(sent);
        self.last_end = Some(end);
        self.overflowed |=
            crate::outcome::context_overflow(r.error_type, r.error_detail.as_deref());
        let ok = r.success();
        self.turns.push(TurnDone {
            branch: r.branch.unwrap_or(0),
            turn: r.turn.unwrap_or(0),
            ttft_s: r.ttft_s.filter(|_| ok),
            input_tokens: r.input_tokens.filter(|_| ok),
            cached_input_tokens: r.cached_input_tokens.filter(|_| ok),
        });
    }

    /// True before a turn was added.
    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }

    /// The session, ended as `end` says (a failure that overflowed the context is an
    /// overflow); the tally starts over.
    pub fn finish(&mut self, end: End) -> SessionDone {
        let t = std::mem::take(self);
        let outcome = match end {
            End::Completed => SessionOutcome::Completed,
            End::Budget => SessionOutcome::Budget,
            End::Failed if t.overflowed => SessionOutcome::Overflow,
            End::Failed => SessionOutcome::Failed,
        };
        let duration_s = match (t.first_sent, t.last_end) {
            (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
            _ => 0.0,
        };
        SessionDone {
            turns: t.turns,
            outcome,
            duration_s,
        }
    }
}

/// A session's turns one request at a time (a closed-loop worker's, a `serve` job's): the
/// session's own, and at a fork each sub-agent's to its end in turn, then the session's again.
/// After a session ends, the next request starts another.
#[derive(Debug)]
pub struct Sequence {
    sessions: Sessions,
    /// The session, then the sub-agent running (last).
    stack: Vec<Branch>,
    /// Sub-agents of the fork that have not run yet.
    waiting: VecDeque<Branch>,
    /// The next turn, once the last answer said what it is.
    pending: Option<Box<Turn>>,
    /// When the session started (a recorded turn's `at` counts from it).
    start: Instant,
    /// How the last session ended, once it has (cleared when the next starts).
    ended: Option<End>,
}

impl Sequence {
    /// The sequence of `sessions` (no session started yet).
    pub fn new(sessions: Sessions) -> Self {
        Sequence {
            sessions,
            stack: Vec::new(),
            waiting: VecDeque::new(),
            pending: None,
            start: Instant::now(),
            ended: None,
        }
    }

    /// How the session that ran last ended: `None` while it runs (or before any).
    pub fn ended(&self) -> Option<End> {
        self.ended
    }

    /// True when no session is running: the next request starts one.
    pub fn at_start(&self) -> bool {
        self.stack.is_empty()
    }

    /// Follows `step` to the next turn to send (kept as pending), through forks (their
    /// sub-agents pushed in turn) and ends (a sub-agent's resumes its parent once its siblings
    /// are done; a failure, or the session's own end, ends the session).
    fn advance(&mut self, mut step: Step) {
        loop {
            match step {
                Step::Send(turn) => {
                    self.pending = Some(turn);
                    return;
                }
                Step::Fork(children) => {
                    self.waiting = children.into();
                    let Some(mut c) = self.waiting.pop_front() else {
                        step = self
                            .stack
                            .last_mut()
                            .map_or(Step::Done(End::Failed), Branch::joined);
                        continue;
                    };
                    step = c.next(None);
                    self.stack.push(c);
                }
                Step::Done(end) => {
                    self.stack.pop();
                    if self.stack.is_empty() || end == End::Failed {
                        // The session is over (a failed sub-agent fails it).
                        self.ended = Some(end);
                        self.stack.clear();
                        self.waiting.clear();
                        return;
                    }
                    step = match self.waiting.pop_front() {
                        Some(mut c) => {
                            let s = c.next(None);
                            self.stack.push(c);
                            s
                        }
                        None => self
                            .stack
                            .last_mut()
                            .map_or(Step::Done(End::Failed), Branch::joined),
                    };
                }
            }
        }
    }

    /// Records a turn's result: its branch continues from it (or ends).
    pub fn answered(&mut self, r: &ProbeResult) {
        if let Some(top) = self.stack.last_mut() {
            let step = top.next(Some(&answer_of(r)));
            self.advance(step);
        }
    }

    /// The next request and how long to wait before it; a session starts (numbered by
    /// `new_id`) when none is running. An empty request when a session sends nothing (an
    /// unread trace).
    pub fn next(
        &mut self,
        spec: &ProbeSpec,
        new_id: impl FnOnce() -> u64,
    ) -> (RequestContent, Duration) {
        if self.pending.is_none() && self.stack.is_empty() {
            self.start = Instant::now();
            self.ended = None;
            let mut b = self.sessions.start(new_id(), spec.tokens);
            let step = b.next(None);
            self.stack.push(b);
            self.advance(step);
        }
        match self.pending.take() {
            Some(turn) => {
                let wait = match turn.at {
                    Some(at) => at.saturating_sub(self.start.elapsed()),
                    None => turn.wait,
                };
                (turn.content, wait)
            }
            None => (RequestContent::default(), Duration::ZERO),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::ErrorType;

    /// A successful turn of session 3.
    fn turn(branch: u32, n: u32, ttft: f64, input: u64, cached: u64) -> ProbeResult {
        use crate::protocol::EventMeaning;
        let t0 = Instant::now();
        let mut m = crate::measure::Measurement::new(t0);
        let token = EventMeaning {
            token: true,
            output: true,
            ..EventMeaning::default()
        };
        m.event(t0 + Duration::from_millis(5), &token);
        let end = EventMeaning {
            terminal: true,
            ..EventMeaning::default()
        };
        m.event(t0 + Duration::from_millis(6), &end);
        ProbeResult {
            turn: Some(n),
            session: Some(3),
            branch: Some(branch),
            ttft_s: Some(ttft),
            input_tokens: Some(input),
            cached_input_tokens: Some(cached),
            ..m.finish()
        }
    }

    /// A `serve` job's session as its sinks are told it: its turns, its cached share, its
    /// duration, and how it ended (a failure for the model's context is an overflow).
    #[test]
    fn a_tally_makes_the_session_its_sinks_are_told() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut t = SessionTally::default();
        assert!(t.is_empty());
        t.add(&turn(0, 1, 0.1, 1000, 0), at(0), at(150));
        t.add(&turn(1, 1, 0.2, 2000, 1500), at(200), at(400));
        t.add(&turn(0, 2, 0.3, 1000, 500), at(450), at(900));
        let done = t.finish(End::Completed);
        assert_eq!(done.outcome, SessionOutcome::Completed);
        assert!((done.duration_s - 0.9).abs() < 1e-9);
        assert_eq!(done.cached_share(), Some(2000.0 / 4000.0));
        assert_eq!(
            done.turns
                .iter()
                .map(|d| (d.branch, d.turn))
                .collect::<Vec<_>>(),
            [(0, 1), (1, 1), (0, 2)]
        );
        assert!(t.is_empty(), "it starts over");
        let mut refused = turn(0, 3, 0.0, 0, 0);
        refused.error_type = Some(ErrorType::BadRequest);
        refused.error_detail =
            Some("HTTP 400: This model's maximum context length is 2048 tokens".into());
        t.add(&turn(0, 1, 0.1, 1000, 0), at(0), at(10));
        t.add(&refused, at(20), at(30));
        let done = t.finish(End::Failed);
        assert_eq!(done.outcome, SessionOutcome::Overflow);
        assert!(!done.outcome.success());
        assert_eq!(
            done.turns[1].ttft_s, None,
            "a failure's TTFT is not a turn's"
        );
        let mut failed = turn(0, 1, 0.0, 0, 0);
        failed.error_type = Some(ErrorType::ServerError);
        t.add(&failed, at(0), at(10));
        assert_eq!(t.finish(End::Failed).outcome, SessionOutcome::Failed);
        assert_eq!(t.finish(End::Budget).outcome, SessionOutcome::Budget);
        assert!(SessionOutcome::Budget.success());
        assert_eq!(
            SessionOutcome::ALL.map(SessionOutcome::as_str),
            ["completed", "budget", "failed", "overflow"]
        );
    }
}
