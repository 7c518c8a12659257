//! Workloads: what a probe sends. A prompt of the config is one of four kinds, and each probe
//! draws its [`RequestContent`] (messages, output cap, the requested input and output lengths,
//! the turn) from it. Pure: seeded with the crate's one generator, no I/O, no clock (the dataset
//! file is read by `config`, the calibration requests are sent by `probe`).
//!
//! - `messages`: the configured conversation, as written (with the optional nonce).
//! - `synthetic`: filler text of a requested input length ([`Length`]: fixed or a distribution),
//!   an output cap of a requested output length, optionally a prefix shared by every request.
//! - `dataset`: conversations of a ShareGPT or JSONL file, in order or at random.
//! - `conversation`: several turns, each resending the history with the previous answer.
//! - `trace`: the requests of a recorded trace, each with its lengths and shared prefixes
//!   ([`trace`]); `bench` sends each at its instant.
//! - `session`: agent sessions ([`session`]): a system prompt and tool definitions, turns that
//!   call tools and append their results, a context budget, sub-agents; or a recorded trace's
//!   sessions, turn by turn.
//!
//! Input lengths are what the server counts (`usage.prompt_tokens`, chat template included): the
//! [`TokenModel`] of a (target, model), learned by calibration or counted locally, turns a token
//! length into a number of filler words (docs/measurement.md, "Input and output lengths").

pub mod dataset;
mod filler;
mod length;
pub mod session;
pub mod trace;

pub use dataset::DatasetFormat;
pub(crate) use filler::words;
pub use filler::{CALIBRATION_WORDS, TokenModel, WORDS, input_length_off};
pub use length::{Length, MAX_TOKENS};
pub use session::{SessionRef, Sessions};
pub use trace::{Trace, TraceFormat};

/// Filler words of a connectivity check's request (and its output cap, when the prompt sets
/// none), for a generated workload.
pub const CHECK_WORDS: usize = 16;

use crate::protocol::{Message, ToolChoice, ToolDef};
use crate::rng::Rng;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// What one probe sends, drawn from a workload.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestContent {
    /// The conversation sent.
    pub messages: Vec<Message>,
    /// The output cap (`max_tokens`).
    pub max_tokens: Option<u32>,
    /// The input length asked for (server-counted tokens), when the workload asks for one.
    pub requested_input_tokens: Option<u32>,
    /// The output length asked for, when the workload asks for one.
    pub requested_output_tokens: Option<u32>,
    /// The turn of a conversation, from 1; `None` outside conversations.
    pub turn: Option<u32>,
    /// The `x-request-id` sent with it (`bench`), if any.
    pub request_id: Option<String>,
    /// The tools offered (a session's turns: the same definitions in every turn).
    pub tools: Option<Arc<[ToolDef]>>,
    /// What is asked of the tools (sent only with tools).
    pub tool_choice: Option<ToolChoice>,
    /// The session a turn belongs to (`None` outside sessions).
    pub session: Option<SessionRef>,
}

/// A `synthetic` prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synthetic {
    /// Input length (server-counted tokens, template included).
    pub input_tokens: Length,
    /// Output length (the output cap).
    pub output_tokens: Length,
    /// The first this many tokens of filler are the same in every request.
    pub shared_prefix_tokens: u32,
    /// The seed of lengths and filler; every request's draw is fixed by it and its number
    /// (`None`: a fresh seed per run, see [`Workload::with_seeds`]).
    pub seed: Option<u64>,
}

/// Order of a dataset's conversations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Entry `n mod len` for request `n`.
    Sequential,
    /// A seeded random entry per request.
    Random,
}

/// A `dataset` prompt. Its conversations are read when the config is loaded (a config only
/// parsed, never loaded, has none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dataset {
    /// The file.
    pub file: PathBuf,
    /// Its format.
    pub format: DatasetFormat,
    /// Which entry a request sends.
    pub order: Order,
    /// The seed of a random order (`None`: a fresh seed per run).
    pub seed: Option<u64>,
    /// The conversations, once read.
    pub entries: Arc<OnceLock<Vec<Vec<Message>>>>,
}

/// A `conversation` prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversation {
    /// Turns per conversation.
    pub turns: u32,
    /// Wait between an answer and the next turn.
    pub think_time: Duration,
    /// Tokens of each new user message (turn 1: the whole prompt, template included).
    pub user_tokens: Length,
    /// Output cap of each turn.
    pub output_tokens: Length,
    /// The seed of lengths and filler (`None`: a fresh seed per run).
    pub seed: Option<u64>,
}

/// What a prompt sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Workload {
    /// The configured messages (the prompt's `max_tokens` is their output cap).
    Messages(Vec<Message>),
    /// Filler of requested lengths.
    Synthetic(Synthetic),
    /// Conversations from a file.
    Dataset(Dataset),
    /// Multi-turn conversations.
    Conversation(Conversation),
    /// A recorded trace's requests.
    Trace(Trace),
    /// Agent sessions, generated or recorded.
    Session(Sessions),
}

impl Workload {
    /// The config's name of the kind: `messages`, `synthetic`, `dataset`, `conversation`,
    /// `trace`, `session`.
    pub fn kind(&self) -> &'static str {
        match self {
            Workload::Messages(_) => "messages",
            Workload::Synthetic(_) => "synthetic",
            Workload::Dataset(_) => "dataset",
            Workload::Conversation(_) => "conversation",
            Workload::Trace(_) => "trace",
            Workload::Session(_) => "session",
        }
    }

    /// This workload with every unset seed set to `fresh` (what a run draws from: a config
    /// without `seed` gets other filler in every run, yet compares equal across reloads).
    #[must_use]
    pub fn with_seeds(&self, fresh: u64) -> Workload {
        let mut w = self.clone();
        match &mut w {
            Workload::Messages(_) => {}
            Workload::Synthetic(s) => s.seed = Some(s.seed.unwrap_or(fresh)),
            Workload::Dataset(d) => d.seed = Some(d.seed.unwrap_or(fresh)),
            Workload::Conversation(c) => c.seed = Some(c.seed.unwrap_or(fresh)),
            Workload::Trace(t) => t.seed = Some(t.seed.unwrap_or(fresh)),
            Workload::Session(s) => s.set_seed(fresh),
        }
        w
    }

    /// True when the content is built to a token length, so a [`TokenModel`] of the server is
    /// needed (calibration).
    pub fn needs_token_model(&self) -> bool {
        matches!(
            self,
            Workload::Synthetic(_)
                | Workload::Conversation(_)
                | Workload::Trace(_)
                | Workload::Session(_)
        )
    }

    /// The content of a connectivity check (`bench`'s one unmeasured request before a series'
    /// load): a `messages` prompt's own messages (every request of it is the same); for every
    /// generated workload one user message of [`CHECK_WORDS`] filler words drawn from `seed`,
    /// so the check draws none of the load's requests and warms no prefix the load sends.
    pub fn check_content(&self, seed: u64) -> RequestContent {
        let messages = match self {
            Workload::Messages(m) => m.clone(),
            _ => vec![user(filler::words(&mut Rng::new(seed), CHECK_WORDS))],
        };
        RequestContent {
            messages,
            max_tokens: (!matches!(self, Workload::Messages(_))).then_some(CHECK_WORDS as u32),
            requested_input_tokens: None,
            requested_output_tokens: None,
            turn: None,
            request_id: None,
            ..Default::default()
        }
    }

    /// The content of request number `seq` (for a conversation or a session: the first turn of
    /// conversation or session `seq`; use [`Turns`] or [`session::Branch`] for the others). An
    /// unread dataset or session trace gives no messages.
    pub fn draw(&self, seq: u64, tokens: &TokenModel) -> RequestContent {
        match self {
            Workload::Messages(messages) => RequestContent {
                messages: messages.clone(),
                max_tokens: None,
                requested_input_tokens: None,
                requested_output_tokens: None,
                turn: None,
                request_id: None,
                ..Default::default()
            },
            Workload::Synthetic(s) => s.draw(seq, tokens),
            Workload::Dataset(d) => d.draw(seq),
            Workload::Conversation(c) => Turns::new(c.clone(), seq, *tokens).next_turn(None),
            Workload::Trace(t) => t.draw(seq, tokens),
            Workload::Session(s) => match s.start(seq, *tokens).next(None) {
                session::Step::Send(turn) => turn.content,
                _ => RequestContent::default(),
            },
        }
    }
}

fn user(content: String) -> Message {
    Message::new("user", content)
}

impl Synthetic {
    fn draw(&self, seq: u64, tokens: &TokenModel) -> RequestContent {
        let seed = self.seed.unwrap_or(0);
        let mut rng = Rng::for_request(seed, seq);
        let input = self.input_tokens.draw(&mut rng);
        let output = self.output_tokens.draw(&mut rng);
        let total = tokens.words_for_prompt(input);
        let prefix = tokens
            .words_for(self.shared_prefix_tokens)
            .min(total.saturating_sub(1));
        let mut text = String::new();
        if prefix > 0 {
            // The same generator for every request: the prefix is shared.
            text = words(&mut Rng::new(seed ^ 0x5348_4152_4544), prefix);
            text.push(' ');
        }
        text.push_str(&words(&mut rng, total - prefix));
        RequestContent {
            messages: vec![user(text)],
            max_tokens: Some(output),
            requested_input_tokens: Some(input),
            requested_output_tokens: Some(output),
            turn: None,
            request_id: None,
            ..Default::default()
        }
    }
}

impl Dataset {
    fn draw(&self, seq: u64) -> RequestContent {
        let entries = self.entries.get().map_or(&[][..], Vec::as_slice);
        let messages = if entries.is_empty() {
            Vec::new()
        } else {
            let n = entries.len() as u64;
            let i = match self.order {
                Order::Sequential => seq % n,
                Order::Random => Rng::for_request(self.seed.unwrap_or(0), seq).below(n),
            };
            entries[i as usize].clone()
        };
        RequestContent {
            messages,
            max_tokens: None,
            requested_input_tokens: None,
            requested_output_tokens: None,
            turn: None,
            request_id: None,
            ..Default::default()
        }
    }
}

/// The state of one conversation: its history and turn. A new conversation starts after the last
/// turn, or after a turn that failed (there is no answer to continue from).
#[derive(Debug, Clone)]
pub struct Turns {
    conv: Conversation,
    tokens: TokenModel,
    /// The conversation's number (seeds its draws).
    seq: u64,
    /// The turn the last content was for (0 before the first).
    turn: u32,
    history: Vec<Message>,
}

impl Turns {
    /// Conversation number `seq` of `conv`, built with `tokens`.
    pub fn new(conv: Conversation, seq: u64, tokens: TokenModel) -> Turns {
        Turns {
            conv,
            tokens,
            seq,
            turn: 0,
            history: Vec::new(),
        }
    }

    /// How long to wait before the next turn: `think_time` within a conversation, 0 before its
    /// first turn.
    pub fn think_time(&self) -> Duration {
        if self.turn == 0 || self.turn >= self.conv.turns {
            Duration::ZERO
        } else {
            self.conv.think_time
        }
    }

    /// True when the next content starts a new conversation.
    pub fn at_start(&self) -> bool {
        self.turn == 0 || self.turn >= self.conv.turns
    }

    /// The next turn's content. `answer` is the previous turn's visible answer (`None` when it
    /// failed, or before the first turn): the history grows by it and a new user message; without
    /// it, or after the last turn, conversation `seq + stride` starts (see [`Turns::restart`]).
    pub fn next_turn(&mut self, answer: Option<&str>) -> RequestContent {
        match answer {
            Some(a) if self.turn > 0 && self.turn < self.conv.turns => {
                self.history.push(Message {
                    role: "assistant".into(),
                    content: a.to_owned(),
                    ..Default::default()
                });
            }
            _ => {
                if self.turn > 0 {
                    self.seq = self.seq.wrapping_add(1 << 32);
                }
                self.turn = 0;
                self.history.clear();
            }
        }
        self.turn += 1;
        let mut rng =
            Rng::for_request(self.conv.seed.unwrap_or(0) ^ u64::from(self.turn), self.seq);
        let user_tokens = self.conv.user_tokens.draw(&mut rng);
        let output = self.conv.output_tokens.draw(&mut rng);
        let n = if self.turn == 1 {
            self.tokens.words_for_prompt(user_tokens)
        } else {
            self.tokens.words_for(user_tokens).max(1)
        };
        self.history.push(user(words(&mut rng, n)));
        RequestContent {
            messages: self.history.clone(),
            max_tokens: Some(output),
            // Later turns carry the server's own answers: only the first has a length to hit.
            requested_input_tokens: (self.turn == 1).then_some(user_tokens),
            requested_output_tokens: Some(output),
            turn: Some(self.turn),
            request_id: None,
            ..Default::default()
        }
    }

    /// Starts conversation `seq` at its next call to [`Turns::next_turn`].
    pub fn restart(&mut self, seq: u64) {
        self.seq = seq;
        self.turn = 0;
        self.history.clear();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_check_sends_a_messages_prompt_as_is_and_filler_for_a_generated_workload() {
        use super::*;
        let hello = vec![user("Say hello".into())];
        let c = Workload::Messages(hello.clone()).check_content(1);
        assert_eq!((c.messages, c.max_tokens), (hello, None));
        let c = Workload::Synthetic(Synthetic {
            input_tokens: Length::Fixed(100),
            output_tokens: Length::Fixed(10),
            shared_prefix_tokens: 50,
            seed: Some(1),
        })
        .check_content(1);
        assert_eq!(c.messages.len(), 1);
        assert_eq!(c.messages[0].content.split(' ').count(), CHECK_WORDS);
        assert_eq!(c.max_tokens, Some(CHECK_WORDS as u32));
    }

    use super::*;

    fn synthetic(input: Length, prefix: u32) -> Workload {
        Workload::Synthetic(Synthetic {
            input_tokens: input,
            output_tokens: Length::Uniform { min: 10, max: 20 },
            shared_prefix_tokens: prefix,
            seed: Some(7),
        })
    }

    const MODEL: TokenModel = TokenModel {
        overhead: 30.0,
        per_word: 1.0,
    };

    #[test]
    fn synthetic_content_has_the_lengths_it_asks_for() {
        let w = synthetic(Length::Fixed(128), 0);
        let c = w.draw(0, &MODEL);
        assert_eq!(c.requested_input_tokens, Some(128));
        let n = c.requested_output_tokens.unwrap();
        assert!((10..=20).contains(&n) && c.max_tokens == Some(n));
        assert_eq!(c.messages.len(), 1);
        assert_eq!(
            c.messages[0].content.split(' ').count(),
            98,
            "128 - 30 overhead"
        );
        assert_eq!(w.draw(0, &MODEL), c, "deterministic under the seed");
        assert_ne!(
            w.draw(1, &MODEL).messages,
            c.messages,
            "each request differs"
        );
        let half = TokenModel {
            overhead: 0.0,
            per_word: 2.0,
        };
        assert_eq!(w.draw(0, &half).messages[0].content.split(' ').count(), 64);
    }

    #[test]
    fn a_shared_prefix_is_shared_and_the_rest_is_not() {
        let w = synthetic(Length::Fixed(330), 200);
        let a = w.draw(0, &MODEL).messages[0].content.clone();
        let b = w.draw(1, &MODEL).messages[0].content.clone();
        let (a, b): (Vec<&str>, Vec<&str>) = (a.split(' ').collect(), b.split(' ').collect());
        assert_eq!(a.len(), 300);
        assert_eq!(a[..200], b[..200]);
        assert_ne!(a[200..], b[200..]);
        // A prefix longer than the prompt leaves at least one word of its own.
        let w = synthetic(Length::Fixed(40), 200);
        let c = w.draw(0, &MODEL).messages[0].content.clone();
        assert_eq!(c.split(' ').count(), 10);
    }

    #[test]
    fn datasets_in_order_and_at_random() {
        let entries: Vec<Vec<Message>> = (0..5).map(|i| vec![user(format!("q{i}"))]).collect();
        let d = |order| Dataset {
            file: "d.json".into(),
            format: DatasetFormat::Sharegpt,
            order,
            seed: Some(1),
            entries: Arc::new(OnceLock::from(entries.clone())),
        };
        let seq = Workload::Dataset(d(Order::Sequential));
        let got: Vec<String> = (0..7)
            .map(|i| seq.draw(i, &MODEL).messages[0].content.clone())
            .collect();
        assert_eq!(got, ["q0", "q1", "q2", "q3", "q4", "q0", "q1"]);
        let rnd = Workload::Dataset(d(Order::Random));
        let got: Vec<String> = (0..200)
            .map(|i| rnd.draw(i, &MODEL).messages[0].content.clone())
            .collect();
        for e in ["q0", "q1", "q2", "q3", "q4"] {
            let k = got.iter().filter(|g| *g == e).count();
            assert!((20..=60).contains(&k), "{e}: {k}");
        }
        assert_ne!(
            got[..10],
            ["q0", "q1", "q2", "q3", "q4", "q0", "q1", "q2", "q3", "q4"]
        );
        let unread = Dataset {
            entries: Arc::default(),
            ..d(Order::Sequential)
        };
        assert!(
            Workload::Dataset(unread)
                .draw(0, &MODEL)
                .messages
                .is_empty()
        );
    }

    #[test]
    fn a_conversation_resends_its_history_with_each_answer() {
        let conv = Conversation {
            turns: 3,
            think_time: Duration::from_secs(2),
            user_tokens: Length::Fixed(50),
            output_tokens: Length::Fixed(8),
            seed: Some(3),
        };
        let mut t = Turns::new(conv.clone(), 0, MODEL);
        assert!(t.at_start() && t.think_time() == Duration::ZERO);
        let c1 = t.next_turn(None);
        assert_eq!(
            (c1.turn, c1.requested_input_tokens, c1.max_tokens),
            (Some(1), Some(50), Some(8))
        );
        assert_eq!(c1.messages.len(), 1);
        assert_eq!(
            c1.messages[0].content.split(' ').count(),
            20,
            "50 - 30 overhead"
        );
        assert_eq!(t.think_time(), Duration::from_secs(2));
        let c2 = t.next_turn(Some("first answer"));
        assert_eq!((c2.turn, c2.requested_input_tokens), (Some(2), None));
        let roles: Vec<&str> = c2.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "user"]);
        assert_eq!(c2.messages[0], c1.messages[0]);
        assert_eq!(c2.messages[1].content, "first answer");
        assert_eq!(
            c2.messages[2].content.split(' ').count(),
            50,
            "a later turn's user message has no template"
        );
        let c3 = t.next_turn(Some("second"));
        assert_eq!((c3.turn, c3.messages.len()), (Some(3), 5));
        assert_eq!(c3.messages[..3], c2.messages[..]);
        assert_eq!(t.think_time(), Duration::ZERO, "the conversation is over");
        // After the last turn a new conversation starts, with other words.
        let n1 = t.next_turn(Some("third"));
        assert_eq!((n1.turn, n1.messages.len()), (Some(1), 1));
        assert_ne!(n1.messages[0], c1.messages[0]);
        // A failed turn (no answer) starts over too.
        let _ = t.next_turn(None);
        let n2 = t.next_turn(Some("a"));
        assert_eq!(n2.turn, Some(2));
        let n3 = t.next_turn(None);
        assert_eq!(n3.turn, Some(1));
        // Deterministic: the same conversation number gives the same turns.
        let mut u = Turns::new(conv.clone(), 0, MODEL);
        assert_eq!(u.next_turn(None), c1);
        assert_eq!(u.next_turn(Some("first answer")), c2);
        // Workload::draw is the first turn of conversation seq.
        assert_eq!(Workload::Conversation(conv.clone()).draw(0, &MODEL), c1);
        let mut r = Turns::new(conv, 0, MODEL);
        r.restart(5);
        assert_eq!(r.next_turn(None).turn, Some(1));
    }

    #[test]
    fn kinds() {
        let m = Workload::Messages(vec![user("hi".into())]);
        assert_eq!((m.kind(), m.needs_token_model()), ("messages", false));
        let c = m.draw(9, &MODEL);
        assert_eq!(
            (c.messages[0].content.as_str(), c.max_tokens, c.turn),
            ("hi", None, None)
        );
        let s = synthetic(Length::Fixed(5), 0);
        assert!(s.needs_token_model());
        assert_eq!(s.with_seeds(1), s, "a set seed stays");
        let Workload::Synthetic(mut unseeded) = s.clone() else {
            unreachable!()
        };
        unseeded.seed = None;
        let w = Workload::Synthetic(unseeded);
        assert_eq!(w.with_seeds(7), s);
        assert_ne!(w.with_seeds(8).draw(0, &MODEL), s.draw(0, &MODEL));
    }
}
