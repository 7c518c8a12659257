//! Figures of a session workload, folded from samples (pure): each sample of a session's turn
//! carries its session, branch (0 the session itself, 1, 2, ... its sub-agents) and turn.
//!
//! - Per turn ([`turns`]): the sessions' own turn `k` over every session (sub-agents' turns
//!   apart, in one row of their own): TTFT, the context it was sent with (the input tokens the
//!   server counted), the share of it the prefix cache served, input and output tokens, tool
//!   calls.
//! - TTFT against context ([`context_slope`]): the least-squares line of every successful turn's
//!   TTFT over its context length, as seconds per 1,000 tokens of context.
//! - Per session ([`sessions`]): its duration (first send to last end), turns sent and
//!   succeeded (its sub-agents' included), tool-call round trips (successful turns answered with
//!   a tool call, whose result the next turn sends), whether a turn failed, and whether it met
//!   the SLOs: only when every one of its turns did ([`summary`] gives the share of sessions).
//! - Context overflow ([`overflowed`]): a session one of whose turns the server refused for its
//!   length, or counted more input for than the declared `--max-context`, is counted apart from
//!   every session figure; past `--max-overflow` of a level's sessions the level is invalid
//!   ([`SessionLevel::invalid`]): it measured the workload's size, not the server.
//! - A level's block ([`SessionLevel::of`]): the above together, with the sessions' SLO
//!   attainment as an [`Attainment`] over sessions, which judges a session level (the capacity
//!   search in concurrent sessions, a fixed sweep's answer).

use super::sample::{Objective, Sample, Summary};
use super::stats::{Attainment, Load, cached_share, mean};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `--max-overflow`'s default: a level of which more than 5% of the sessions overflowed the
/// model's context is invalid.
pub const DEFAULT_MAX_OVERFLOW: f64 = 0.05;

/// How a session workload is sent and judged, as the run states it (the report's
/// `mode.sessions`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SessionMode {
    /// `--sessions-per-level`: whole sessions per level (count mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_level: Option<u64>,
    /// `--max-context`: the model's context as declared, tokens: a turn the server counted more
    /// input for overflowed it (for servers that do not refuse one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_context: Option<u64>,
    /// `--max-overflow`: past this share of its sessions overflowing, a level is invalid (0..1).
    pub max_overflow: f64,
    /// `--arrival recorded`: the sessions start at their trace's recorded instants.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recorded: bool,
}

/// True when turn `s` overflowed the model's context: the server refused it for its length
/// ([`crate::outcome::context_overflow`]), or counted more input than `max_context`.
pub fn overflowed(s: &Sample, max_context: Option<u64>) -> bool {
    crate::outcome::context_overflow(s.error_type, s.error_detail.as_deref())
        || max_context.is_some_and(|m| s.input_tokens.is_some_and(|n| n > m))
}

/// One turn number's figures over the sessions (or every sub-agent turn, `turn: None`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnFigures {
    /// The sessions' own turn, from 1; `None` for the sub-agents' turns together.
    pub turn: Option<u32>,
    /// Its requests that succeeded.
    pub successes: u64,
    /// Its requests that failed.
    pub failures: u64,
    /// TTFT of the successes, s (a tool-call answer's first token is its call's).
    pub ttft_s: Option<Summary>,
    /// Mean context it was sent with: the input tokens the server counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens_mean: Option<f64>,
    /// Σ cached / Σ input tokens of the successes whose usage gave both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_share: Option<f64>,
    /// Mean output tokens of the successes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_mean: Option<f64>,
    /// Successes answered with a tool call.
    pub tool_calls: u64,
}

/// Per turn: the sessions' own turns by number, then the sub-agents' turns together (when there
/// are any). Samples outside sessions are left out.
pub fn turns(samples: &[Sample]) -> Vec<TurnFigures> {
    let mut by: BTreeMap<Option<u32>, Vec<&Sample>> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.session.is_some()) {
        let key = match s.branch {
            Some(b) if b > 0 => None,
            _ => s.turn,
        };
        by.entry(key).or_default().push(s);
    }
    let mut rows: Vec<TurnFigures> = by
        .into_iter()
        .map(|(turn, ss)| {
            let ok: Vec<&Sample> = ss.iter().copied().filter(|s| s.success()).collect();
            TurnFigures {
                turn,
                successes: ok.len() as u64,
                failures: (ss.len() - ok.len()) as u64,
                ttft_s: Summary::of(ok.iter().filter_map(|s| s.ttft_s)),
                context_tokens_mean: mean(
                    ok.iter().filter_map(|s| s.input_tokens).map(|n| n as f64),
                ),
                cached_share: cached_share(ok.iter().copied()),
                output_tokens_mean: mean(ok.iter().map(|s| s.output_tokens as f64)),
                tool_calls: ok.iter().filter(|s| s.tool_calls > 0).count() as u64,
            }
        })
        .collect();
    // The sub-agents' row (the `None` key sorts first) goes last.
    if rows.first().is_some_and(|r| r.turn.is_none()) {
        rows.rotate_left(1);
    }
    rows
}

/// TTFT against the context a turn was sent with: the least-squares slope of the successful
/// session turns' TTFT over their input tokens, in seconds per 1,000 tokens; `None` with fewer
/// than two distinct context lengths.
pub fn context_slope(samples: &[Sample]) -> Option<f64> {
    let points: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.session.is_some() && s.success())
        .filter_map(|s| Some((s.input_tokens? as f64 / 1000.0, s.ttft_s?)))
        .collect();
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// One session's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionFigures {
    /// Its number in the run.
    pub session: u64,
    /// From its first send to its last end, s.
    pub duration_s: f64,
    /// Turns sent (its sub-agents' included).
    pub turns: u32,
    /// Of them, those that succeeded.
    pub completed: u32,
    /// Successful turns answered with a tool call.
    pub tool_round_trips: u32,
    /// Turns of its sub-agents.
    pub subagent_turns: u32,
    /// A turn failed.
    pub failed: bool,
    /// Every turn succeeded and met every SLO.
    pub within_slo: bool,
    /// A turn overflowed the model's context ([`overflowed`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overflowed: bool,
}

/// Each session of `samples`, by number; a session meets the SLOs only when every one of its
/// turns does; one of its turns beyond `max_context` (or refused for its length) overflowed it.
pub fn sessions(
    samples: &[Sample],
    slos: &[impl Objective],
    max_context: Option<u64>,
) -> Vec<SessionFigures> {
    let mut by: BTreeMap<u64, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        if let Some(id) = s.session {
            by.entry(id).or_default().push(s);
        }
    }
    by.into_iter()
        .map(|(session, ss)| {
            let first = ss.iter().map(|s| s.sent_s).fold(f64::INFINITY, f64::min);
            let last = ss.iter().map(|s| s.end_s).fold(f64::NEG_INFINITY, f64::max);
            let count = |f: &dyn Fn(&Sample) -> bool| {
                u32::try_from(ss.iter().filter(|s| f(s)).count()).unwrap_or(u32::MAX)
            };
            SessionFigures {
                session,
                duration_s: (last - first).max(0.0),
                turns: u32::try_from(ss.len()).unwrap_or(u32::MAX),
                completed: count(&|s| s.success()),
                tool_round_trips: count(&|s| s.success() && s.tool_calls > 0),
                subagent_turns: count(&|s| s.branch.is_some_and(|b| b > 0)),
                failed: ss.iter().any(|s| !s.success()),
                within_slo: ss.iter().all(|s| s.meets(slos)),
                overflowed: ss.iter().any(|s| overflowed(s, max_context)),
            }
        })
        .collect()
}

/// The sessions' SLO attainment as a level's: a session (that did not overflow) counts as met
/// when every one of its turns succeeded and met every objective; `failed`, the sessions with a
/// failed turn; `missed`, per objective, the sessions with a successful turn that missed it.
/// `None` without objectives.
pub fn attainment(
    samples: &[Sample],
    slos: &[impl Objective],
    max_context: Option<u64>,
) -> Option<Attainment> {
    if slos.is_empty() {
        return None;
    }
    let figures = sessions(samples, slos, max_context);
    let kept: Vec<&SessionFigures> = figures.iter().filter(|f| !f.overflowed).collect();
    let mut by: BTreeMap<u64, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        if let Some(id) = s.session {
            by.entry(id).or_default().push(s);
        }
    }
    let counted = kept.len() as u64;
    let met = kept.iter().filter(|f| f.within_slo).count() as u64;
    let failed = kept.iter().filter(|f| f.failed).count() as u64;
    let missed = slos
        .iter()
        .map(|o| {
            let n = kept
                .iter()
                .filter(|f| {
                    by.get(&f.session)
                        .is_some_and(|ss| ss.iter().any(|s| s.success() && !o.met_by(s)))
                })
                .count() as u64;
            (o.name(), n)
        })
        .collect();
    Some(Attainment::counted(met, counted, missed, failed))
}

/// The sessions of a level, together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// Sessions with at least one turn.
    pub sessions: u64,
    /// Of them, those with a failed turn.
    pub failed: u64,
    /// Of them, those whose every turn met every SLO.
    pub within_slo: u64,
    /// `within_slo / sessions`.
    pub slo_attainment: Option<f64>,
    /// Their durations, s.
    pub duration_s: Option<Summary>,
    /// Their turns sent, on average.
    pub turns_mean: Option<f64>,
    /// Their tool-call round trips, on average.
    pub tool_round_trips_mean: Option<f64>,
}

/// A session workload's level, beside its requests' figures (the report's `sessions` of a
/// level).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionLevel {
    /// Sessions with a turn in the level, those that overflowed included.
    pub sessions: u64,
    /// Of them, those that overflowed the model's context: counted apart from the figures
    /// below.
    pub overflowed: u64,
    /// `overflowed / sessions` (0 without a session).
    pub overflow_share: f64,
    /// The share past which the level is invalid (`--max-overflow`).
    pub max_overflow: f64,
    /// Why the level is invalid: more of its sessions overflowed than `max_overflow`. Such a
    /// level measured its workload's size, not the server: it is not judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
    /// The sessions that did not overflow, together.
    pub summary: SessionSummary,
    /// Their SLO attainment: a session meets the SLOs only when every one of its turns does
    /// (with objectives).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_attainment: Option<Attainment>,
    /// Per turn of the sessions (the sub-agents' turns in one row, last).
    pub turns: Vec<TurnFigures>,
    /// TTFT against the context a turn was sent with: seconds per 1,000 tokens of context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_per_1k_context_s: Option<f64>,
}

impl SessionLevel {
    /// The block of a level's `samples` under `slos`, overflow judged by `mode`; `None` when no
    /// sample is a session's.
    pub fn of(samples: &[Sample], slos: &[impl Objective], mode: &SessionMode) -> Option<Self> {
        let all = sessions(samples, slos, mode.max_context);
        if all.is_empty() {
            return None;
        }
        let n = all.len() as u64;
        let over = all.iter().filter(|f| f.overflowed).count() as u64;
        let share = over as f64 / n as f64;
        let kept: Vec<SessionFigures> = all.into_iter().filter(|f| !f.overflowed).collect();
        let invalid = (share > mode.max_overflow).then(|| {
            format!(
                "context overflow: {over} of {n} sessions ({}) overflowed the model's context, above the stated {} (--max-overflow)",
                crate::units::fmt_pct(share),
                crate::units::fmt_pct(mode.max_overflow)
            )
        });
        Some(SessionLevel {
            sessions: n,
            overflowed: over,
            overflow_share: share,
            max_overflow: mode.max_overflow,
            invalid,
            summary: summary(&kept),
            slo_attainment: attainment(samples, slos, mode.max_context),
            turns: turns(samples),
            ttft_per_1k_context_s: context_slope(samples),
        })
    }
}

/// A level's load in words for a session workload: `4 concurrent sessions`, `1 concurrent
/// session`, `2 sessions/s`. The one wording of a session load: the progress line's, and
/// every output's (render reads it).
pub fn load_words(load: Load) -> String {
    match load {
        Load::Concurrency(1) => "1 concurrent session".to_owned(),
        Load::Concurrency(n) => format!("{n} concurrent sessions"),
        Load::Rate(r) => format!("{} sessions/s", crate::units::trim_float(r)),
    }
}

impl super::stats::LevelStats {
    /// The SLO attainment that judges the level: its sessions' for a session workload (a session
    /// meets the SLOs only when every one of its turns does, those that overflowed apart), else
    /// its requests'.
    pub fn judged_attainment(&self) -> Option<&Attainment> {
        match &self.sessions {
            Some(s) => s.slo_attainment.as_ref(),
            None => self.slo_attainment.as_ref(),
        }
    }

    /// Why the level is not judged although measured: more of its sessions overflowed the
    /// model's context than the stated share.
    pub fn session_invalid(&self) -> Option<&str> {
        self.sessions.as_ref().and_then(|s| s.invalid.as_deref())
    }
}

/// The sessions together.
pub fn summary(sessions: &[SessionFigures]) -> SessionSummary {
    let n = sessions.len() as u64;
    let within = sessions.iter().filter(|s| s.within_slo).count() as u64;
    SessionSummary {
        sessions: n,
        failed: sessions.iter().filter(|s| s.failed).count() as u64,
        within_slo: within,
        slo_attainment: (n > 0).then(|| within as f64 / n as f64),
        duration_s: Summary::of(sessions.iter().map(|s| s.duration_s)),
        turns_mean: mean(sessions.iter().map(|s| f64::from(s.turns))),
        tool_round_trips_mean: mean(sessions.iter().map(|s| f64::from(s.tool_round_trips))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::ErrorType;

    /// A TTFT limit.
    struct Ttft(f64);

    impl Objective for Ttft {
        fn met_by(&self, s: &Sample) -> bool {
            s.ttft_s.is_none_or(|t| t <= self.0)
        }
        fn name(&self) -> String {
            format!("ttft<={}", self.0)
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn turn(
        session: u64,
        branch: u32,
        turn: u32,
        ttft: f64,
        input: u64,
        cached: u64,
        calls: u32,
        sent: f64,
    ) -> Sample {
        Sample {
            session: Some(session),
            branch: Some(branch),
            turn: Some(turn),
            ttft_s: Some(ttft),
            input_tokens: Some(input),
            cached_input_tokens: Some(cached),
            output_tokens: 10,
            tool_calls: calls,
            sent_s: sent,
            end_s: sent + ttft + 0.1,
            ..Sample::default()
        }
    }

    fn failed(mut s: Sample) -> Sample {
        s.error_type = Some(ErrorType::ServerError);
        s.ttft_s = None;
        s.tool_calls = 0;
        s
    }

    fn level() -> Vec<Sample> {
        vec![
            // Session 1: three turns, the context growing, the cache serving more of it.
            turn(1, 0, 1, 0.20, 1000, 0, 1, 0.0),
            turn(1, 0, 2, 0.25, 2000, 992, 1, 1.0),
            turn(1, 0, 3, 0.30, 3000, 1984, 0, 2.0),
            // Session 2: a slow second turn, and a sub-agent turn.
            turn(2, 0, 1, 0.20, 1000, 496, 1, 0.5),
            turn(2, 1, 1, 0.22, 2100, 2000, 1, 1.0),
            turn(2, 0, 2, 0.90, 2000, 992, 0, 2.5),
            // Session 3: its second turn failed.
            turn(3, 0, 1, 0.20, 1000, 0, 1, 0.0),
            failed(turn(3, 0, 2, 0.0, 2000, 0, 0, 1.0)),
            // Not a session's.
            Sample {
                ttft_s: Some(5.0),
                ..Sample::default()
            },
        ]
    }

    #[test]
    fn per_turn_figures() {
        let t = turns(&level());
        let keys: Vec<Option<u32>> = t.iter().map(|r| r.turn).collect();
        assert_eq!(keys, [Some(1), Some(2), Some(3), None], "sub-agents last");
        let t1 = &t[0];
        assert_eq!((t1.successes, t1.failures, t1.tool_calls), (3, 0, 3));
        assert_eq!(t1.context_tokens_mean, Some(1000.0));
        assert_eq!(t1.cached_share, Some(496.0 / 3000.0));
        assert_eq!(t1.ttft_s.map(|s| s.p50), Some(0.20));
        let t2 = &t[1];
        assert_eq!((t2.successes, t2.failures), (2, 1));
        assert_eq!(t2.cached_share, Some(1984.0 / 4000.0));
        assert_eq!(t2.ttft_s.map(|s| s.max), Some(0.90));
        assert_eq!(t2.output_tokens_mean, Some(10.0));
        let sub = &t[3];
        assert_eq!((sub.successes, sub.context_tokens_mean), (1, Some(2100.0)));
        assert!(turns(&[Sample::default()]).is_empty());
    }

    #[test]
    fn ttft_against_context() {
        // Session 1 alone: 50 ms more per 1,000 tokens of context.
        let one: Vec<Sample> = level()
            .into_iter()
            .filter(|s| s.session == Some(1))
            .collect();
        let slope = context_slope(&one).unwrap();
        assert!((slope - 0.05).abs() < 1e-12, "{slope}");
        assert_eq!(context_slope(&one[..1]), None);
    }

    /// A session meets the SLO only when every one of its turns does.
    #[test]
    fn per_session_figures_and_slo_attainment() {
        let s = sessions(&level(), &[Ttft(0.5)], None);
        assert_eq!(s.len(), 3);
        assert_eq!(
            s[0],
            SessionFigures {
                session: 1,
                duration_s: 2.0 + 0.30 + 0.1,
                turns: 3,
                completed: 3,
                tool_round_trips: 2,
                subagent_turns: 0,
                failed: false,
                within_slo: true,
                overflowed: false,
            }
        );
        assert!(!s[1].within_slo, "its second turn's 0.9 s");
        assert_eq!(
            (s[1].turns, s[1].subagent_turns, s[1].tool_round_trips),
            (3, 1, 2)
        );
        assert!(s[2].failed && !s[2].within_slo);
        assert_eq!(s[2].completed, 1);
        let all = summary(&s);
        assert_eq!((all.sessions, all.failed, all.within_slo), (3, 1, 1));
        assert_eq!(all.slo_attainment, Some(1.0 / 3.0));
        assert_eq!(all.turns_mean, Some(8.0 / 3.0));
        // With a looser SLO, session 2 meets it too; without one, every session without a failure.
        assert_eq!(
            summary(&sessions(&level(), &[Ttft(1.0)], None)).within_slo,
            2
        );
        assert_eq!(
            summary(&sessions(&level(), &[] as &[Ttft], None)).within_slo,
            2
        );
        assert_eq!(summary(&[]).slo_attainment, None);
    }

    /// A session is judged as a whole: its attainment counts sessions, each met only when every
    /// turn met the SLOs; a failed one counts against it; what kept sessions out is named.
    #[test]
    fn the_attainment_of_a_session_level_counts_sessions() {
        let a = attainment(&level(), &[Ttft(0.5)], None).unwrap();
        assert_eq!((a.met, a.counted, a.failed), (1, 3, 1));
        assert_eq!(a.share, 1.0 / 3.0);
        assert_eq!(a.interval, crate::bench::confidence::wilson(1, 3));
        assert_eq!(a.missed.get("ttft<=0.5"), Some(&1));
        assert_eq!(
            a.limited_by(),
            Some(crate::bench::stats::CapacityLimit::Errors),
            "a tie goes to the errors"
        );
        assert!(attainment(&level(), &[] as &[Ttft], None).is_none());
    }

    /// A session one of whose turns the server refused for its length, or whose input passed the
    /// declared context, is counted apart; past the stated share the level is invalid, and says
    /// why.
    #[test]
    fn an_overflowing_session_is_counted_apart_and_past_the_share_invalidates_the_level() {
        let mut samples = level();
        // Session 4: its second turn refused for its length.
        samples.push(turn(4, 0, 1, 0.2, 1000, 0, 1, 0.0));
        let mut refused = failed(turn(4, 0, 2, 0.0, 0, 0, 0, 1.0));
        refused.error_type = Some(crate::outcome::ErrorType::BadRequest);
        refused.error_detail = Some(
            "HTTP 400: This model's maximum context length is 1500 tokens. However, you requested 2100 tokens".into(),
        );
        refused.input_tokens = None;
        samples.push(refused);
        let mode = SessionMode {
            per_level: None,
            max_context: None,
            max_overflow: 0.30,
            recorded: false,
        };
        let l = SessionLevel::of(&samples, &[Ttft(0.5)], &mode).unwrap();
        assert_eq!((l.sessions, l.overflowed), (4, 1));
        assert_eq!(l.overflow_share, 0.25);
        assert_eq!(l.invalid, None, "25% is within the stated 30%");
        assert_eq!(l.summary.sessions, 3, "the overflowed session is apart");
        assert_eq!(l.summary.failed, 1, "session 3's failure, not the overflow");
        let a = l.slo_attainment.as_ref().unwrap();
        assert_eq!((a.met, a.counted), (1, 3));
        // Declared 2,000 tokens: sessions 1 (3,000) and 2 (its sub-agent's 2,100) pass it, as
        // session 4 was refused: 3 of 4; session 3 (2,000 at most) is the one counted.
        let declared = SessionMode {
            max_context: Some(2000),
            max_overflow: 0.05,
            ..mode
        };
        let l = SessionLevel::of(&samples, &[Ttft(0.5)], &declared).unwrap();
        assert_eq!(l.overflowed, 3);
        assert_eq!(
            l.invalid.as_deref(),
            Some(
                "context overflow: 3 of 4 sessions (75.00%) overflowed the model's context, above the stated 5.00% (--max-overflow)"
            )
        );
        assert_eq!(l.slo_attainment.unwrap().counted, 1);
        assert_eq!(l.turns.len(), 4);
        assert!(SessionLevel::of(&[Sample::default()], &[Ttft(0.5)], &mode).is_none());
    }

    /// A session load in words, one and many.
    #[test]
    fn a_session_load_is_said_in_sessions() {
        assert_eq!(load_words(Load::Concurrency(1)), "1 concurrent session");
        assert_eq!(load_words(Load::Concurrency(8)), "8 concurrent sessions");
        assert_eq!(load_words(Load::Rate(2.5)), "2.5 sessions/s");
    }
}
