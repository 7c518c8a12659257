//! Session traces: recorded sessions replayed turn by turn (a `session:` prompt's `trace`).
//! Pure: a file's text in, sessions out; every problem names its line and what is wrong,
//! without quoting the file.
//!
//! The format read is the Mooncake JSONL trace (`input_length`, `output_length`, `hash_ids`,
//! `timestamp` in ms; kvcache-ai/Mooncake, `FAST25-release`) with the session fields AIPerf reads
//! from it (`session_id`, `delay` in ms: ai-dynamo/aiperf, its `mooncake_trace` dataset type):
//!
//! - the rows of one `session_id` are its turns, in file order (a row without one is a session
//!   of its own, as in a Mooncake trace, whose sessions are only implied by shared hash ids);
//! - a session's first turn starts it: its `timestamp` is the session's start (0 without one);
//! - a later turn is sent `delay` ms after the previous turn's answer, or at its `timestamp`
//!   (counted from the session's start, and not before the previous answer); a row never has
//!   both, and a session's timestamps never go back;
//! - `input_length` is the turn's new input: the first turn's whole prompt (template
//!   included), a later turn's new user message, appended to the context with the previous
//!   answers (AIPerf's default for Mooncake sessions); `output_length` its output cap; both are
//!   required.
//!
//! A turn's input is built block by block as [`crate::workload::trace`] builds a request's: a
//! block of [`BLOCK_TOKENS`] tokens with a hash id is the same text wherever that id appears (in
//! any session), so prefixes the recording shared are shared again; blocks past a turn's ids
//! are its own.

use super::{Answer, End, SessionRef, Step, Turn};
use crate::protocol::Message;
use crate::rng::Rng;
use crate::workload::trace::{BLOCK_TOKENS, MAX_HASH_IDS, MAX_REQUESTS, MAX_SPAN};
use crate::workload::{MAX_TOKENS, RequestContent, TokenModel, filler::words, user};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Salt of the block texts' generator (the same blocks as a request trace's would be other text).
const BLOCK_SALT: u64 = 0x5345_5342_4c4b;
/// The longest `session_id` kept, in characters.
pub const MAX_SESSION_ID_CHARS: usize = 256;

/// When a recorded turn is sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Gap {
    /// This long after the previous turn's answer, s.
    After(f64),
    /// This long after the session's start, s (not before the previous answer).
    At(f64),
}

/// One recorded turn.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedTurn {
    /// When it is sent (the first turn: `At(0)`).
    pub gap: Gap,
    /// Its new input, server-counted tokens.
    pub input_tokens: u32,
    /// Its output cap.
    pub output_tokens: u32,
    /// The ids of its new input's blocks, in order.
    pub hash_ids: Vec<u64>,
}

/// One recorded session.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedSession {
    /// Its `session_id` (its first line's number when it has none).
    pub id: String,
    /// Its start, s after the trace's first session's.
    pub start_s: f64,
    /// Its turns, in order.
    pub turns: Vec<RecordedTurn>,
}

/// A session trace's sessions, in the order they start.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionRecording {
    /// The sessions, by start.
    pub sessions: Vec<RecordedSession>,
    /// Turns in all.
    pub turns: u64,
}

// Its instants are checked finite when read.
impl Eq for SessionRecording {}

/// A session row as read.
struct Row {
    session: Option<String>,
    timestamp: Option<f64>,
    delay: Option<f64>,
    input_tokens: u32,
    output_tokens: u32,
    hash_ids: Vec<u64>,
}

/// A length field: a whole number from 1 to [`MAX_TOKENS`].
fn length(name: &str, v: Option<&Value>) -> Result<u32, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Err(format!("{name} is missing (every turn needs its lengths)"));
    };
    let Some(x) = v.as_f64() else {
        return Err(format!("{name} is not a number"));
    };
    if x.fract() != 0.0 || !(1.0..=f64::from(MAX_TOKENS)).contains(&x) {
        return Err(format!(
            "{name} {x} is not a whole number of tokens from 1 to {MAX_TOKENS}"
        ));
    }
    Ok(x as u32)
}

/// A time field in ms, as seconds: finite, not negative, within [`MAX_SPAN`].
fn millis(name: &str, v: Option<&Value>) -> Result<Option<f64>, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match v.as_f64() {
        None => Err(format!("{name} is not a number")),
        Some(t) if !t.is_finite() => Err(format!("{name} is not a number")),
        Some(t) if t < 0.0 => Err(format!("{name} {t} is negative")),
        Some(t) if t / 1000.0 > MAX_SPAN.as_secs_f64() => Err(format!(
            "{name} {t} ms is more than {} days",
            MAX_SPAN.as_secs() / 86_400
        )),
        Some(t) => Ok(Some(t / 1000.0)),
    }
}

fn row(line: &str) -> Result<Row, String> {
    let v: Value = serde_json::from_str(line.trim()).map_err(|e| {
        format!(
            "not JSON (column {}): {}",
            e.column(),
            match e.classify() {
                serde_json::error::Category::Eof => "it ends early",
                _ => "a JSON object per line is expected",
            }
        )
    })?;
    let Value::Object(o) = v else {
        return Err("a JSON object per line is expected".into());
    };
    let session = match o.get("session_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => {
            Some(s.chars().take(MAX_SESSION_ID_CHARS).collect())
        }
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(_) => return Err("session_id is not a string or a number".into()),
    };
    let hash_ids = match o.get("hash_ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, id)| {
                id.as_u64()
                    .ok_or_else(|| format!("hash_ids[{i}] is not a whole number from 0"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("hash_ids is not a list".into()),
    };
    let timestamp = millis("timestamp", o.get("timestamp"))?;
    let delay = millis("delay", o.get("delay"))?;
    if timestamp.is_some() && delay.is_some() {
        return Err("a turn has a timestamp or a delay, not both".into());
    }
    Ok(Row {
        session,
        timestamp,
        delay,
        input_tokens: length("input_length", o.get("input_length"))?,
        output_tokens: length("output_length", o.get("output_length"))?,
        hash_ids,
    })
}

/// The sessions of a session trace's text, by their start.
///
/// # Errors
/// `line N: what is wrong` (a row that is not one, a turn out of order, a session whose context
/// would pass [`MAX_TOKENS`]), or what is wrong with the whole file; never the file's text.
pub fn parse(text: &str) -> Result<SessionRecording, String> {
    let mut sessions: Vec<RecordedSession> = Vec::new();
    // Each session's index, and the tokens its context holds (inputs and outputs so far).
    let mut by_id: HashMap<String, (usize, u64)> = HashMap::new();
    let (mut turns, mut ids) = (0u64, 0usize);
    for (i, line) in text.lines().enumerate() {
        let line_no = i as u64 + 1;
        if line.trim().is_empty() {
            continue;
        }
        let at = |e: String| format!("line {line_no}: {e}");
        let r = row(line).map_err(at)?;
        turns += 1;
        ids += r.hash_ids.len();
        if turns > MAX_REQUESTS as u64 {
            return Err(at(format!(
                "more than {MAX_REQUESTS} turns (cut the trace)"
            )));
        }
        if ids > MAX_HASH_IDS {
            return Err(at(format!(
                "more than {MAX_HASH_IDS} hash ids in all (cut the trace)"
            )));
        }
        let key = r
            .session
            .clone()
            .unwrap_or_else(|| format!("line {line_no}"));
        let grows = u64::from(r.input_tokens) + u64::from(r.output_tokens);
        match by_id.get_mut(&key) {
            None => {
                if r.delay.is_some() {
                    return Err(at(
                        "a session's first turn has a delay: it starts the session (give it a timestamp, or none)"
                            .into(),
                    ));
                }
                by_id.insert(key.clone(), (sessions.len(), grows));
                sessions.push(RecordedSession {
                    id: key,
                    start_s: r.timestamp.unwrap_or(0.0),
                    turns: vec![RecordedTurn {
                        gap: Gap::At(0.0),
                        input_tokens: r.input_tokens,
                        output_tokens: r.output_tokens,
                        hash_ids: r.hash_ids,
                    }],
                });
            }
            Some((index, context)) => {
                *context += grows;
                if *context > u64::from(MAX_TOKENS) {
                    return Err(at(format!(
                        "session {key:?} grows past {MAX_TOKENS} tokens of context (its inputs and outputs so far)"
                    )));
                }
                let s = &mut sessions[*index];
                let gap = match (r.timestamp, r.delay) {
                    (Some(t), _) => {
                        let last = s
                            .turns
                            .iter()
                            .rev()
                            .find_map(|t| match t.gap {
                                Gap::At(a) => Some(a),
                                Gap::After(_) => None,
                            })
                            .unwrap_or(0.0);
                        let since = t - s.start_s;
                        if since < last {
                            return Err(at(format!(
                                "its timestamp is {:.3} s before its session's previous turn's (a session's turns must be in order)",
                                last - since
                            )));
                        }
                        Gap::At(since)
                    }
                    (None, d) => Gap::After(d.unwrap_or(0.0)),
                };
                s.turns.push(RecordedTurn {
                    gap,
                    input_tokens: r.input_tokens,
                    output_tokens: r.output_tokens,
                    hash_ids: r.hash_ids,
                });
            }
        }
    }
    if sessions.is_empty() {
        return Err("holds no session".into());
    }
    // By start; a stable sort keeps the file's order among sessions that start together.
    sessions.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    let first = sessions[0].start_s;
    for s in &mut sessions {
        s.start_s -= first;
    }
    Ok(SessionRecording { sessions, turns })
}

/// A `session:` prompt's `trace`.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    /// The file.
    pub file: PathBuf,
    /// Recorded gaps and starts are these times (0.5: twice as fast).
    pub time_scale: f64,
    /// The seed of the prompts' words (`None`: a fresh seed per run).
    pub seed: Option<u64>,
    /// Its sessions, once read.
    pub recording: Arc<OnceLock<SessionRecording>>,
}

// Its numbers are checked finite (the config's time scale, the file's instants).
impl Eq for Replay {}

impl Replay {
    /// Sessions in the trace (0 before the file is read).
    pub fn len(&self) -> usize {
        self.recording.get().map_or(0, |r| r.sessions.len())
    }

    /// True before the file is read.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The recorded start of session number `id` (`id` modulo the sessions), scaled: when a
    /// replay at the recorded instants starts it.
    pub fn start_offset(&self, id: u64) -> Duration {
        self.recording
            .get()
            .filter(|r| !r.sessions.is_empty())
            .map_or(Duration::ZERO, |r| {
                let s = &r.sessions[(id % r.sessions.len() as u64) as usize];
                Duration::from_secs_f64((s.start_s * self.time_scale).max(0.0))
            })
    }

    pub(super) fn start(&self, id: u64, tokens: TokenModel) -> ReplayState {
        ReplayState {
            recording: self.recording.clone(),
            id,
            tokens,
            seed: self.seed.unwrap_or(0),
            time_scale: self.time_scale,
            next: 0,
            history: Vec::new(),
            over: false,
        }
    }
}

/// The state of one replayed session: its context so far.
#[derive(Debug)]
pub struct ReplayState {
    recording: Arc<OnceLock<SessionRecording>>,
    id: u64,
    tokens: TokenModel,
    seed: u64,
    time_scale: f64,
    /// The turn sent next (0-based).
    next: usize,
    history: Vec<Message>,
    over: bool,
}

impl ReplayState {
    pub(super) fn id(&self) -> u64 {
        self.id
    }

    pub(super) fn next(&mut self, answer: Option<&Answer<'_>>) -> Step {
        if self.over {
            return Step::Done(End::Failed);
        }
        let rec = self.recording.clone();
        let Some(session) = rec
            .get()
            .filter(|r| !r.sessions.is_empty())
            .map(|r| &r.sessions[(self.id % r.sessions.len() as u64) as usize])
        else {
            self.over = true;
            return Step::Done(End::Failed);
        };
        if self.next > 0 {
            match answer {
                Some(a) if a.ok => {
                    if !a.text.is_empty() {
                        // Kept within 16 bytes a token of the turn's recorded output, so a
                        // session's memory stays within what its trace records.
                        let mut cut = a
                            .text
                            .len()
                            .min(16 * session.turns[self.next - 1].output_tokens as usize);
                        while !a.text.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        self.history.push(Message::new("assistant", &a.text[..cut]));
                    }
                }
                _ => {
                    self.over = true;
                    return Step::Done(End::Failed);
                }
            }
        }
        let Some(t) = session.turns.get(self.next) else {
            self.over = true;
            return Step::Done(End::Completed);
        };
        let first = self.next == 0;
        let n = if first {
            self.tokens.words_for_prompt(t.input_tokens)
        } else {
            self.tokens.words_for(t.input_tokens).max(1)
        };
        // The session's own words: its number and the turn.
        let own = Rng::for_request(self.seed ^ ((self.next as u64) << 32), self.id);
        self.history.push(user(block_text(
            self.seed,
            own,
            &t.hash_ids,
            n,
            &self.tokens,
        )));
        self.next += 1;
        let scale = |s: f64| Duration::from_secs_f64((s * self.time_scale).max(0.0));
        let (wait, at) = match t.gap {
            Gap::At(s) if !first => (Duration::ZERO, Some(scale(s))),
            Gap::At(_) => (Duration::ZERO, None),
            Gap::After(s) => (scale(s), None),
        };
        Step::Send(Box::new(Turn {
            content: RequestContent {
                messages: self.history.clone(),
                max_tokens: Some(t.output_tokens),
                requested_input_tokens: first.then_some(t.input_tokens),
                requested_output_tokens: Some(t.output_tokens),
                turn: Some(self.next as u32),
                session: Some(SessionRef {
                    id: self.id,
                    branch: 0,
                }),
                ..RequestContent::default()
            },
            wait,
            at,
        }))
    }
}

/// `n` words: block `j` of them is the words of hash id `ids[j]` when there is one (the same
/// for every turn with that id), else words of the turn's own (`own`).
fn block_text(seed: u64, mut own: Rng, ids: &[u64], n: usize, tokens: &TokenModel) -> String {
    let per_block = tokens.words_for(BLOCK_TOKENS).max(1);
    let mut left = n;
    let mut text = String::with_capacity(n * 6);
    for j in 0.. {
        if left == 0 {
            break;
        }
        let k = left.min(per_block);
        let part = match ids.get(j) {
            Some(&id) => words(&mut Rng::for_request(seed ^ BLOCK_SALT, id), k),
            None => words(&mut own, k),
        };
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&part);
        left -= k;
    }
    text
}
