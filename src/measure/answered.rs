//! What answered, judged (pure; docs/measurement.md, "What answered"): whether the model that
//! answered is the one asked for, after the aliasing every vendor does ([`same_model`]); whether
//! the usage an answer states agrees with what it streamed ([`audit`], within a [`Tolerance`]);
//! and a deterministic prompt's answer, hashed, against the answers before it ([`drift`]).
//!
//! The prober knows what the fold does not (the model asked for and its aliases, a tokenizer's
//! count of the streamed text, whether this server streams one token per event, the earlier
//! answers): it hands them in as [`crate::measure::RequestFacts`], and
//! [`crate::measure::Measurement::finish_with`] applies these rules, so the result is whole where
//! it is made.

use serde::Serialize;

/// The model a request asked for, and how its answer is held to it (a target's
/// `model_aliases:` and `model_mismatch:`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelCheck {
    /// The model name sent.
    pub requested: String,
    /// Other names it may be served as (`model_aliases:` of the requested model).
    pub aliases: Vec<String>,
    /// `model_mismatch: fail`: another model answering fails the probe (`model_mismatch`).
    pub fail: bool,
}

/// A name as models are compared: trimmed, ASCII lower case, without a provider prefix (what
/// comes before the last `/`: `openai/gpt-4o`, `meta-llama/Llama-3.1-8B`).
fn plain(name: &str) -> String {
    let n = name.trim().to_ascii_lowercase();
    match n.rsplit_once('/') {
        Some((_, last)) => last.to_owned(),
        None => n,
    }
}

/// A snapshot stamp a vendor appends to a model it serves under a shorter name: `-` or `@`, then
/// a date (`2024-08-06`, `20241022`) or a version or short date of 3 to 8 digits (`0613` of
/// `gpt-4-0613`, `2407` of `mistral-large-2407`, `001` of `gemini-1.5-flash-001`).
fn stamp(s: &str) -> bool {
    let Some(rest) = s.strip_prefix(['-', '@']) else {
        return false;
    };
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    let dated = rest.len() == 10
        && rest.as_bytes()[4] == b'-'
        && rest.as_bytes()[7] == b'-'
        && digits(&rest[..4])
        && digits(&rest[5..7])
        && digits(&rest[8..]);
    dated || ((3..=8).contains(&rest.len()) && digits(rest))
}

/// Whether a `served` name is `requested` as vendors alias it: the same name (ASCII case and a
/// provider prefix aside), or the requested name with a snapshot [`stamp`] appended
/// (`gpt-4o` → `gpt-4o-2024-08-06`), a requested `-latest` or `:latest` standing for any stamp
/// (`claude-3-5-sonnet-latest` → `claude-3-5-sonnet-20241022`). A requested name that carries a
/// stamp itself is held to it: `gpt-4-0314` served as `gpt-4-0613` is another snapshot. Never
/// the other way round: `gpt-4o-mini-2024-07-18` is not `gpt-4o`.
fn served_as(requested: &str, served: &str) -> bool {
    let (r, s) = (plain(requested), plain(served));
    if r.is_empty() || s.is_empty() {
        return false;
    }
    if r == s {
        return true;
    }
    let stem = r
        .strip_suffix("-latest")
        .or_else(|| r.strip_suffix(":latest"))
        .unwrap_or(&r);
    s == stem || s.strip_prefix(stem).is_some_and(stamp)
}

/// Whether an answer naming `served` came from the model `requested`: served as the requested
/// name, or as one of its `aliases` ([`served_as`] for each; docs/measurement.md, "What
/// answered").
pub fn same_model(requested: &str, served: &str, aliases: &[String]) -> bool {
    std::iter::once(requested)
        .chain(aliases.iter().map(String::as_str))
        .any(|r| served_as(r, served))
}

/// How far a stated count may be from the count it is checked against: a count is off when it
/// differs by more than `share` of the expected count and by more than `tokens` (a target's
/// `usage_audit: {tolerance_percent, tolerance_tokens}`; 5% and 3 tokens by default).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// The relative part, e.g. 0.05.
    pub share: f64,
    /// The absolute part, tokens.
    pub tokens: u64,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance {
            share: 0.05,
            tokens: 3,
        }
    }
}

/// Whether `stated` is off `expected` beyond the tolerance: by more than both its share of
/// `expected` and its tokens.
pub fn beyond(expected: u64, stated: u64, t: Tolerance) -> bool {
    let diff = expected.abs_diff(stated);
    diff > t.tokens && diff as f64 > t.share * expected as f64
}

/// How the streamed output was counted for the audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CountedBy {
    /// The target's `tokenizer:` over the streamed text of every channel (answer, reasoning, tool
    /// names and arguments).
    Tokenizer,
    /// The token-bearing events, where the server streams one token per event (declared, or
    /// learned from its earlier answers).
    Events,
}

/// What the prober knows for the audit of one answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditFacts {
    /// The streamed text counted by the target's tokenizer, when it could be.
    pub tokenizer_count: Option<u64>,
    /// The server streams one token per event (declared, or learned).
    pub one_per_event: bool,
    /// Why the streamed output cannot be counted, when neither applies.
    pub no_count: Option<String>,
    /// The prompt's input length is known (a calibrated length the workload built the prompt
    /// to): the stated input tokens are audited against it.
    pub input_known: bool,
    /// An output off the count is flagged only when the answer audited before it was off too
    /// (a tokenizer's count, or a learned one token per event: a server may generate tokens it
    /// never streams, such as llama.cpp's trailing whitespace at a length cap, now and then; a
    /// relay that inflates its usage does it on every answer). `false` for `count: events`
    /// declared: the target says every token is an event.
    pub confirm: bool,
    /// The output of the answer audited before this one (by the same spec) was off.
    pub previous_off: bool,
    /// The tolerance.
    pub tolerance: Tolerance,
}

/// One count stated by the answer, checked against the one expected.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct UsageCheck {
    /// What was counted (the streamed output), or known (the prompt's input length).
    pub expected: u64,
    /// What the answer's usage stated.
    pub stated: u64,
    /// `stated / expected` (absent when nothing was expected).
    pub ratio: Option<f64>,
    /// Off beyond the tolerance ([`beyond`]).
    pub off: bool,
    /// Off, and confirmed where it has to be ([`AuditFacts::confirm`]): the probe is flagged
    /// `usage_mismatch`.
    pub mismatch: bool,
}

impl UsageCheck {
    fn of(expected: u64, stated: u64, t: Tolerance) -> Self {
        let off = beyond(expected, stated, t);
        UsageCheck {
            expected,
            stated,
            ratio: (expected > 0).then(|| stated as f64 / expected as f64),
            off,
            mismatch: off,
        }
    }
}

/// Why an answer's output was not audited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotAudited {
    /// The answer stated no usage, or none that is a count (negative, fractional, not a number:
    /// such a value is no count and is read as none): nothing to compare, never a mismatch.
    NoUsage,
    /// Nothing counted the streamed output: no tokenizer, and the server is not known to stream
    /// one token per event (not declared, or not yet learned from its answers).
    NoCount,
}

impl NotAudited {
    /// The label value (`tokenprobe_usage_audits_total{result}`).
    pub fn as_str(self) -> &'static str {
        match self {
            NotAudited::NoUsage => "no_usage",
            NotAudited::NoCount => "no_count",
        }
    }
}

/// The usage audit of one successful answer: the output it stated against what it streamed, the
/// input against the prompt's known length; or why the output was not compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageAudit {
    /// How the streamed output was counted (absent when it was not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counted_by: Option<CountedBy>,
    /// The output tokens stated against those streamed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<UsageCheck>,
    /// The input tokens stated against the prompt's known length.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<UsageCheck>,
    /// Why the output was not compared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_audited: Option<NotAudited>,
    /// That reason in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl UsageAudit {
    /// A count stated beyond the tolerance (`usage_mismatch`).
    pub fn mismatch(&self) -> bool {
        [self.output, self.input]
            .iter()
            .flatten()
            .any(|c| c.mismatch)
    }

    /// The result as `serve` counts it: `mismatch`, `unconfirmed` (the output was off, but the
    /// answer before it was not: not flagged), `within`, or why it was not audited.
    pub fn result(&self) -> &'static str {
        if self.mismatch() {
            "mismatch"
        } else if self.output.is_some_and(|c| c.off) {
            "unconfirmed"
        } else if self.output.is_some() {
            "within"
        } else {
            self.not_audited.map_or("no_count", NotAudited::as_str)
        }
    }

    /// The output was off beyond the tolerance (flagged or not).
    pub fn output_off(&self) -> bool {
        self.output.is_some_and(|c| c.off)
    }
}

/// What one successful answer stated and streamed, for [`audit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stated {
    /// The usage's output tokens (`None`: the answer stated none that is a count).
    pub output: Option<u64>,
    /// The usage's whole input tokens.
    pub input: Option<u64>,
    /// Token-bearing events.
    pub token_events: u64,
    /// The input length the workload asked for.
    pub requested_input: Option<u64>,
    /// The answer was streamed (a whole answer is one event: its events count nothing).
    pub stream: bool,
}

/// The usage audit of a successful answer (docs/measurement.md, "Usage audit"): the output tokens
/// its usage states against the streamed output counted by the tokenizer, else by its events
/// where the server streams one token per event (an output off flagged when confirmed:
/// [`AuditFacts::confirm`]); the input tokens against the prompt's length where it is known. An
/// absent usage is not audited (and said to be), never a mismatch.
pub fn audit(s: &Stated, f: &AuditFacts) -> UsageAudit {
    let t = f.tolerance;
    let input = match (f.input_known, s.requested_input, s.input) {
        (true, Some(want), Some(got)) => Some(UsageCheck::of(want, got, t)),
        _ => None,
    };
    let mut a = UsageAudit {
        counted_by: None,
        output: None,
        input,
        not_audited: None,
        why: None,
    };
    let Some(stated) = s.output else {
        a.not_audited = Some(NotAudited::NoUsage);
        a.why = Some("the answer stated no usage count of its output".into());
        return a;
    };
    let counted = match (f.tokenizer_count, f.one_per_event && s.stream) {
        (Some(n), _) => Some((CountedBy::Tokenizer, n)),
        (None, true) => Some((CountedBy::Events, s.token_events)),
        (None, false) => None,
    };
    match counted {
        Some((by, n)) => {
            a.counted_by = Some(by);
            let mut c = UsageCheck::of(n, stated, t);
            c.mismatch = c.off && (!f.confirm || f.previous_off);
            a.output = Some(c);
        }
        None => {
            a.not_audited = Some(NotAudited::NoCount);
            a.why = Some(f.no_count.clone().unwrap_or_else(|| {
                "no tokenizer, and the server is not known to stream one token per event".into()
            }));
        }
    }
    a
}

/// How many earlier answers must each have stated as many output tokens as they had events
/// (within [`LEARN_SLACK`]) before a server is taken to stream one token per event.
pub const LEARN_AFTER: u32 = 3;
/// The difference between an answer's stated output and its events that still counts as one
/// token per event: an end-of-sequence token a server counts but does not stream (llama.cpp).
pub const LEARN_SLACK: u64 = 1;
/// The shortest answer (events) that tells whether a server streams one token per event.
pub const LEARN_MIN_EVENTS: u64 = 4;

/// What earlier answers say of whether a server streams one token per event (learned from their
/// own usage): [`LEARN_AFTER`] answers in a row of at least [`LEARN_MIN_EVENTS`] events, each
/// stating as many output tokens as it had events (within [`LEARN_SLACK`]); once learned, it
/// stays. An answer that disagrees before then starts the count again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerEvent {
    agreeing: u32,
}

impl PerEvent {
    /// Whether it is learned.
    pub fn learned(self) -> bool {
        self.agreeing >= LEARN_AFTER
    }

    /// Takes one successful streamed answer's stated output and events into account.
    pub fn learn(&mut self, stated: Option<u64>, events: u64) {
        if self.learned() {
            return;
        }
        match stated {
            Some(n) if events >= LEARN_MIN_EVENTS && n.abs_diff(events) <= LEARN_SLACK => {
                self.agreeing += 1;
            }
            Some(_) if events >= LEARN_MIN_EVENTS => self.agreeing = 0,
            _ => {}
        }
    }

    /// Why the events cannot count the output yet.
    pub fn why_not(self) -> String {
        format!(
            "no tokenizer, and one token per event not learned yet ({} of the {LEARN_AFTER} answers in a row it takes agreed)",
            self.agreeing
        )
    }
}

/// A deterministic answer as kept for drift detection: who answered it and its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KnownAnswer {
    /// The served model.
    pub served_model: Option<String>,
    /// The system fingerprint.
    pub system_fingerprint: Option<String>,
    /// [`answer_hash`] of its text.
    pub hash: String,
}

/// The earlier answers of a deterministic prompt: the last one, and the last of each served model
/// and fingerprint (at most [`MAX_KNOWN_ANSWERS`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AnswerHistory {
    /// The last answer.
    pub last: Option<KnownAnswer>,
    /// The last answer of each served model and fingerprint, oldest first.
    pub by_identity: Vec<KnownAnswer>,
}

/// How many served model and fingerprint pairs an [`AnswerHistory`] keeps an answer of.
pub const MAX_KNOWN_ANSWERS: usize = 16;

impl AnswerHistory {
    /// Keeps `a` as the last answer, and the last of its served model and fingerprint.
    pub fn keep(&mut self, a: KnownAnswer) {
        self.by_identity.retain(|k| !same_identity(k, &a));
        self.by_identity.push(a.clone());
        if self.by_identity.len() > MAX_KNOWN_ANSWERS {
            self.by_identity.remove(0);
        }
        self.last = Some(a);
    }
}

fn same_identity(a: &KnownAnswer, b: &KnownAnswer) -> bool {
    a.served_model == b.served_model && a.system_fingerprint == b.system_fingerprint
}

/// A deterministic prompt's answer changed: what answered before and now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Drift {
    /// The answer compared with: the last of the same served model and fingerprint, else the
    /// last answer.
    pub from: KnownAnswer,
    /// This answer.
    pub to: KnownAnswer,
}

/// The hash of an answer's text (its visible and its other channels): 16 hex digits of FNV-1a,
/// the project's one fingerprint of text ([`crate::rng::fingerprint`]).
pub fn answer_hash(visible: &str, hidden: &str) -> String {
    crate::rng::fingerprint(&[visible, hidden])
}

/// Whether `now` drifted from the answers before it (docs/measurement.md, "Drift"): compared
/// with the last answer of the same served model and fingerprint when there is one (a change
/// there is a drift the fingerprint does not explain), else with the last answer (the answer
/// changed with the fingerprint or model). `None` for a first answer or the same hash.
pub fn drift(history: &AnswerHistory, now: &KnownAnswer) -> Option<Drift> {
    let before = history
        .by_identity
        .iter()
        .rev()
        .find(|k| same_identity(k, now))
        .or(history.last.as_ref())?;
    (before.hash != now.hash).then(|| Drift {
        from: before.clone(),
        to: now.clone(),
    })
}

/// Distinct values a series keeps of each label a server chooses (its served model, its
/// fingerprint: a `serve` job's series, a bench level's counts); later ones are `other`
/// (shared case 36).
pub const MAX_LABEL_VALUES: usize = 8;
/// The longest label value kept of a server's string (characters; longer ones are cut, with `…`).
pub const MAX_LABEL_CHARS: usize = 64;
/// The value that stands for every value past a job's first [`MAX_LABEL_VALUES`].
pub const OTHER: &str = "other";

/// `v` as a label value of a series (a job's, a bench level's) that has kept `seen`: itself (cut to [`MAX_LABEL_CHARS`]) while
/// it is one of the first [`MAX_LABEL_VALUES`] distinct values, else [`OTHER`]; `true` when it is
/// one past them (to be counted as unexpected).
pub fn bounded(seen: &mut Vec<String>, v: &str) -> (String, bool) {
    let cut = crate::units::truncate(v, MAX_LABEL_CHARS);
    if seen.contains(&cut) {
        return (cut, false);
    }
    if seen.len() < MAX_LABEL_VALUES {
        seen.push(cut.clone());
        return (cut, false);
    }
    (OTHER.to_owned(), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 43 item 2: the aliasing every vendor does is no mismatch; another model is.
    #[test]
    fn the_aliasing_rule() {
        let same = |r: &str, s: &str| same_model(r, s, &[]);
        for (r, s) in [
            ("gpt-4o", "gpt-4o"),
            ("gpt-4o", "gpt-4o-2024-08-06"),
            ("gpt-4", "gpt-4-0613"),
            ("gpt-3.5-turbo", "gpt-3.5-turbo-0125"),
            ("claude-3-5-sonnet-latest", "claude-3-5-sonnet-20241022"),
            ("claude-3-5-sonnet", "claude-3-5-sonnet@20240620"),
            ("mistral-large-latest", "mistral-large-2407"),
            ("gemini-1.5-flash", "gemini-1.5-flash-001"),
            ("openai/gpt-4o", "gpt-4o-2024-08-06"),
            ("gpt-4o", "openai/gpt-4o"),
            ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b-instruct"),
            ("llama3:latest", "llama3"),
            (" smollm2 ", "smollm2"),
        ] {
            assert!(same(r, s), "{r} served as {s}");
        }
        for (r, s) in [
            ("gpt-4o", "gpt-4o-mini-2024-07-18"),
            ("gpt-4o", "gpt-4o-mini"),
            ("gpt-4-0314", "gpt-4-0613"),
            ("gpt-4o-2024-08-06", "gpt-4o"),
            ("gpt-4o", "gpt-4o-2024-8-6"),
            ("gpt-4o", "gpt-4o-123456789"),
            ("gpt-4o", "gpt-4o-12"),
            ("llama-3.1-70b", "llama-3.1-8b"),
            ("m", ""),
            ("m", "/"),
        ] {
            assert!(!same(r, s), "{r} is not served as {s}");
        }
        // A config's aliases: an Azure deployment served under the model's name, a stamp of
        // the alias allowed as of the name itself.
        let aliases = ["gpt-4o".to_owned()];
        assert!(same_model("prod-deployment", "gpt-4o-2024-08-06", &aliases));
        assert!(!same_model("prod-deployment", "gpt-4o-mini", &aliases));
    }

    /// Issue 43 item 3: off beyond both 5% and 3 tokens, exactly at the edges.
    #[test]
    fn the_audits_tolerance() {
        let t = Tolerance::default();
        assert!(!beyond(10, 13, t), "3 tokens: within");
        assert!(beyond(10, 14, t), "4 tokens and 40%");
        assert!(!beyond(100, 105, t), "5%: within");
        assert!(beyond(100, 106, t));
        assert!(
            !beyond(100, 95, t) && beyond(100, 94, t),
            "5% under, 6% under"
        );
        assert!(!beyond(1000, 1050, t) && beyond(1000, 1051, t));
        assert!(!beyond(0, 3, t) && beyond(0, 4, t));
        let strict = Tolerance {
            share: 0.0,
            tokens: 0,
        };
        assert!(beyond(10, 11, strict) && !beyond(10, 10, strict));
        assert!(!beyond(u64::MAX, u64::MAX, t) && beyond(0, u64::MAX, t));
    }

    fn stated(output: Option<u64>, events: u64) -> Stated {
        Stated {
            output,
            input: Some(100),
            token_events: events,
            requested_input: Some(100),
            stream: true,
        }
    }

    #[test]
    fn an_audit_counts_by_the_tokenizer_else_by_events_else_says_why_not() {
        let by_events = AuditFacts {
            one_per_event: true,
            ..AuditFacts::default()
        };
        let a = audit(&stated(Some(64), 32), &by_events);
        assert_eq!(a.counted_by, Some(CountedBy::Events));
        let out = a.output.unwrap();
        assert_eq!((out.expected, out.stated, out.ratio), (32, 64, Some(2.0)));
        assert!(a.mismatch() && a.result() == "mismatch");
        let a = audit(&stated(Some(33), 32), &by_events);
        assert!(!a.mismatch() && a.result() == "within", "{a:?}");
        // The tokenizer's count goes first.
        let tok = AuditFacts {
            tokenizer_count: Some(64),
            ..by_events.clone()
        };
        let a = audit(&stated(Some(64), 32), &tok);
        assert_eq!(a.counted_by, Some(CountedBy::Tokenizer));
        assert!(!a.mismatch());
        // No usage: not audited, said, never a mismatch.
        let a = audit(&stated(None, 32), &tok);
        assert_eq!(
            (a.not_audited, a.result(), a.mismatch()),
            (Some(NotAudited::NoUsage), "no_usage", false)
        );
        // Nothing to count with.
        let a = audit(&stated(Some(64), 32), &AuditFacts::default());
        assert_eq!(a.result(), "no_count");
        assert!(a.why.unwrap().contains("one token per event"));
        // A whole answer is one event: its events count nothing.
        let whole = Stated {
            stream: false,
            ..stated(Some(64), 1)
        };
        assert_eq!(audit(&whole, &by_events).result(), "no_count");
        // The input, where its length is known.
        let known = AuditFacts {
            input_known: true,
            ..AuditFacts::default()
        };
        let a = audit(
            &Stated {
                input: Some(200),
                ..stated(Some(8), 8)
            },
            &known,
        );
        let input = a.input.unwrap();
        assert_eq!((input.ratio, input.mismatch), (Some(2.0), true));
        assert!(a.mismatch(), "an input off is a usage mismatch");
    }

    /// A count that can miss tokens a server generates but never streams flags an output off
    /// only when the answer before it was off too; a declared one token per event flags at once.
    #[test]
    fn an_output_off_is_confirmed_by_the_answer_before_unless_declared() {
        let learned = AuditFacts {
            one_per_event: true,
            confirm: true,
            ..AuditFacts::default()
        };
        let a = audit(&stated(Some(16), 5), &learned);
        let out = a.output.unwrap();
        assert!(out.off && !out.mismatch, "{out:?}");
        assert_eq!(
            (a.result(), a.mismatch(), a.output_off()),
            ("unconfirmed", false, true)
        );
        let again = AuditFacts {
            previous_off: true,
            ..learned.clone()
        };
        let a = audit(&stated(Some(16), 5), &again);
        assert_eq!((a.result(), a.mismatch()), ("mismatch", true));
        // Within is within, whatever came before.
        assert_eq!(audit(&stated(Some(16), 16), &again).result(), "within");
        let declared = AuditFacts {
            one_per_event: true,
            ..AuditFacts::default()
        };
        assert_eq!(audit(&stated(Some(16), 5), &declared).result(), "mismatch");
    }

    #[test]
    fn one_token_per_event_is_learned_from_three_answers_in_a_row() {
        let mut p = PerEvent::default();
        p.learn(Some(37), 36);
        p.learn(Some(48), 48);
        p.learn(Some(96), 48);
        assert!(!p.learned(), "the third disagreed: counted again");
        p.learn(Some(3), 2);
        assert!(!p.learned(), "too short to tell");
        p.learn(None, 40);
        for _ in 0..2 {
            p.learn(Some(40), 40);
        }
        assert!(!p.learned());
        assert!(p.why_not().contains("2 of the 3"));
        p.learn(Some(41), 40);
        assert!(p.learned());
        p.learn(Some(400), 40);
        assert!(
            p.learned(),
            "once learned it stays: the audit judges from then on"
        );
    }

    /// Issue 43 item 4: an answer is compared with the last of its served model and
    /// fingerprint, else with the last answer.
    #[test]
    fn drift_hashing() {
        let known = |fp: &str, text: &str| KnownAnswer {
            served_model: Some("m".into()),
            system_fingerprint: Some(fp.into()),
            hash: answer_hash(text, ""),
        };
        assert_eq!(answer_hash("4", ""), answer_hash("4", ""));
        assert_ne!(answer_hash("4", ""), answer_hash("", "4"));
        assert_eq!(answer_hash("4", "").len(), 16);
        let mut h = AnswerHistory::default();
        assert_eq!(drift(&h, &known("fp_a", "4")), None, "a first answer");
        h.keep(known("fp_a", "4"));
        assert_eq!(drift(&h, &known("fp_a", "4")), None);
        // A new fingerprint, the same answer: no drift.
        assert_eq!(drift(&h, &known("fp_b", "4")), None);
        h.keep(known("fp_b", "4"));
        // A new fingerprint and a new answer: from the last answer's fingerprint.
        let d = drift(&h, &known("fp_c", "5")).unwrap();
        assert_eq!(
            (
                d.from.system_fingerprint.as_deref(),
                d.to.system_fingerprint.as_deref()
            ),
            (Some("fp_b"), Some("fp_c"))
        );
        h.keep(known("fp_c", "5"));
        // Back to fp_a with its own answer: no drift (compared with fp_a's).
        assert_eq!(drift(&h, &known("fp_a", "4")), None);
        // The same fingerprint, another answer: a drift the fingerprint does not explain.
        let d = drift(&h, &known("fp_c", "6")).unwrap();
        assert_eq!(d.from.system_fingerprint, d.to.system_fingerprint);
        // Bounded.
        for i in 0..100 {
            h.keep(known(&format!("fp_{i}"), "x"));
        }
        assert_eq!(h.by_identity.len(), MAX_KNOWN_ANSWERS);
    }

    /// Issue 43, shared case 36: a job keeps its first 8 distinct values of a label a server
    /// chooses, cut to 64 characters; later ones are `other`, and said to be.
    #[test]
    fn a_servers_label_values_are_bounded() {
        let mut seen = Vec::new();
        for i in 0..MAX_LABEL_VALUES {
            assert_eq!(
                bounded(&mut seen, &format!("m{i}")),
                (format!("m{i}"), false)
            );
        }
        assert_eq!(bounded(&mut seen, "m3"), ("m3".into(), false), "one kept");
        assert_eq!(bounded(&mut seen, "m-new"), (OTHER.into(), true));
        assert_eq!(seen.len(), MAX_LABEL_VALUES);
        let mut seen = Vec::new();
        let (long, _) = bounded(&mut seen, &"x".repeat(10_000));
        assert_eq!(
            long.chars().count(),
            MAX_LABEL_CHARS + 1,
            "64 and the ellipsis"
        );
        assert!(long.ends_with('…'));
    }
}
