//! A `session:` job's series (the session canary, issue 42 item 5): each tick runs one whole
//! session, recorded turn by turn in the job's usual series and, once it is over, here:
//!
//! - `tokenprobe_session_turn_time_to_first_token_seconds{turn}`: each turn's TTFT by its place in
//!   the session, `turn` bounded to `1` … `8`, `9+` (every later turn) and `subagent` (the
//!   sub-agents' turns); a series exists once a session had such a turn;
//! - `tokenprobe_session_cached_input_ratio`: the last session's Σ cached / Σ input tokens over its
//!   turns whose usage said both (unset until one did);
//! - `tokenprobe_sessions_total{outcome}`: sessions by how they ended (`completed`, `budget`:
//!   ended at its context budget as its prompt says, `failed`, `overflow`: a turn refused for the
//!   model's context), each at 0 from the job's start;
//! - `tokenprobe_session_last_success`: 1 when the last session completed or ended at its budget;
//! - `tokenprobe_session_duration_seconds`: the last session's, from its first send to its last
//!   turn's end.

use super::{Layout, Remover, handle, hist};
use crate::config::Buckets;
use crate::scheduler::{SessionDone, SessionOutcome, TurnDone};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

use super::JobLabels;

/// The `turn` label values of the session turn TTFT: turns 1 to 8 by number, every later one,
/// and the sub-agents' turns.
pub const SESSION_TURNS: [&str; 10] = ["1", "2", "3", "4", "5", "6", "7", "8", "9+", "subagent"];

/// A turn's `turn` label: its number up to 8, `9+` after, `subagent` for a sub-agent's.
pub fn turn_label(t: &TurnDone) -> &'static str {
    if t.branch > 0 {
        return SESSION_TURNS[9];
    }
    match t.turn {
        0 => SESSION_TURNS[0],
        n @ 1..=8 => SESSION_TURNS[n as usize - 1],
        _ => SESSION_TURNS[8],
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct TurnLabels {
    #[prometheus(flatten)]
    job: JobLabels,
    turn: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct OutcomeLabels {
    #[prometheus(flatten)]
    job: JobLabels,
    outcome: &'static str,
}

type GaugeF = Family<JobLabels, Gauge<f64, AtomicU64>>;

/// The session families of the registry.
#[derive(Debug, Clone)]
pub(super) struct SessionFamilies {
    turn_ttft: Family<TurnLabels, Histogram, Layout>,
    sessions: Family<OutcomeLabels, Counter>,
    last_success: Family<JobLabels, Gauge>,
    cached_ratio: GaugeF,
    duration: GaugeF,
}

impl SessionFamilies {
    /// The families, the turn TTFT laid out as the TTFT's.
    pub(super) fn new(buckets: &Buckets) -> Self {
        SessionFamilies {
            turn_ttft: hist(&buckets.time_to_first_token, buckets.native),
            sessions: Family::default(),
            last_success: Family::default(),
            cached_ratio: Family::default(),
            duration: Family::default(),
        }
    }

    /// Registers them in `r`.
    pub(super) fn register(&self, r: &mut Registry) {
        r.register_with_unit(
            "session_turn_time_to_first_token",
            "Session jobs: TTFT of each successful turn of the session each tick runs, by its turn (1 to 8, 9+ for every later one, subagent for the sub-agents' turns); a later turn resends the context so far",
            Unit::Seconds,
            self.turn_ttft.clone(),
        );
        r.register(
            "sessions",
            "Session jobs: sessions run, by how they ended (completed; budget: ended at its context budget as its prompt says; failed: a turn failed; overflow: a turn was refused for the model's context)",
            self.sessions.clone(),
        );
        r.register(
            "session_last_success",
            "Session jobs: 1 when the last session completed or ended at its context budget, 0 when a turn failed or overflowed the model's context",
            self.last_success.clone(),
        );
        r.register(
            "session_cached_input_ratio",
            "Session jobs: of the last session's input tokens (its turns whose usage said both), the share the server's prompt cache served",
            self.cached_ratio.clone(),
        );
        r.register_with_unit(
            "session_duration",
            "Session jobs: the last session's duration, from its first send to its last turn's end (think times and sub-agents included)",
            Unit::Seconds,
            self.duration.clone(),
        );
    }
}

/// A session job's series.
pub(super) struct SessionSeries {
    job: JobLabels,
    families: SessionFamilies,
    /// In the order of [`SessionOutcome::ALL`].
    sessions: Vec<Counter>,
    last_success: Gauge,
    cached_ratio: Gauge<f64, AtomicU64>,
    duration: Gauge<f64, AtomicU64>,
    /// The turn labels whose TTFT series exist.
    turns_seen: std::sync::Mutex<Vec<&'static str>>,
}

impl SessionSeries {
    /// The series of `job` in `families`, its counters at 0; their removals pushed onto `rm`.
    pub(super) fn new(families: &SessionFamilies, job: &JobLabels, rm: &mut Vec<Remover>) -> Self {
        let sessions = SessionOutcome::ALL
            .iter()
            .map(|o| {
                let l = OutcomeLabels {
                    job: job.clone(),
                    outcome: o.as_str(),
                };
                handle(rm, &families.sessions, l)
            })
            .collect();
        SessionSeries {
            job: job.clone(),
            families: families.clone(),
            sessions,
            last_success: handle(rm, &families.last_success, job.clone()),
            cached_ratio: handle(rm, &families.cached_ratio, job.clone()),
            duration: handle(rm, &families.duration, job.clone()),
            turns_seen: std::sync::Mutex::default(),
        }
    }

    /// Records session `s` (its turn series' removals pushed onto `rm` as they are made).
    pub(super) fn record(&self, s: &SessionDone, rm: &mut Vec<Remover>) {
        if let Some(c) = SessionOutcome::ALL
            .iter()
            .position(|o| *o == s.outcome)
            .and_then(|i| self.sessions.get(i))
        {
            c.inc();
        }
        self.last_success.set(i64::from(s.outcome.success()));
        self.duration.set(s.duration_s);
        if let Some(r) = s.cached_share() {
            self.cached_ratio.set(r);
        }
        let mut seen = self
            .turns_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for t in &s.turns {
            let Some(ttft) = t.ttft_s else { continue };
            let turn = turn_label(t);
            let labels = TurnLabels {
                job: self.job.clone(),
                turn,
            };
            let h = if seen.contains(&turn) {
                self.families.turn_ttft.get_or_create_owned(&labels)
            } else {
                seen.push(turn);
                handle(rm, &self.families.turn_ttft, labels)
            };
            h.observe(ttft);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Histograms, JobInfo, Metrics};
    use super::*;

    fn turn(branch: u32, turn: u32) -> TurnDone {
        TurnDone {
            branch,
            turn,
            ttft_s: Some(0.1),
            input_tokens: None,
            cached_input_tokens: None,
        }
    }

    #[test]
    fn the_turn_label_is_bounded() {
        let labels: Vec<&str> = [(0, 1), (0, 8), (0, 9), (0, 400), (2, 1), (0, 0)]
            .iter()
            .map(|&(b, t)| turn_label(&turn(b, t)))
            .collect();
        assert_eq!(labels, ["1", "8", "9+", "9+", "subagent", "1"]);
    }

    fn labels(prompt: &str) -> JobLabels {
        JobLabels {
            target: "local".into(),
            model: "m".into(),
            prompt: prompt.into(),
        }
    }

    fn info(prompt: &str, workload: &str) -> JobInfo {
        JobInfo {
            job: labels(prompt),
            api: "openai-chat".into(),
            connection: "reuse".into(),
            nonce: "false".into(),
            stream: "true".into(),
            workload: workload.into(),
        }
    }

    /// The value of the sample `name{labels}` in the text exposition.
    fn value(m: &Metrics, series: &str) -> Option<String> {
        let text = m.encode_text().unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{series} ")).map(str::to_owned))
    }

    /// A session job's session series: the outcomes at 0 from its start, then each session's
    /// turns by their bounded `turn`, its cached share, its success and duration; other jobs
    /// have none, and a removed job's are gone.
    #[test]
    fn a_session_job_exports_each_sessions_turns_outcome_and_cached_share() {
        let m = Metrics::new(&Buckets::default());
        let job = m.register_job(info("agent", "session"), Histograms::ALL);
        let _plain = m.register_job(info("hello", "messages"), Histograms::ALL);
        let sel = r#"target="local",model="m",prompt="agent""#;
        for o in ["completed", "budget", "failed", "overflow"] {
            assert_eq!(
                value(
                    &m,
                    &format!("tokenprobe_sessions_total{{{sel},outcome=\"{o}\"}}")
                )
                .as_deref(),
                Some("0"),
                "{o}"
            );
        }
        let text = m.encode_text().unwrap();
        assert!(!text.contains(r#"prompt="hello",outcome"#), "{text}");
        assert!(
            !text.contains("session_turn_time_to_first_token_seconds_count{"),
            "{text}"
        );
        let done = |outcome, turns: &[(u32, u32, Option<f64>)]| SessionDone {
            turns: turns
                .iter()
                .map(|&(branch, turn, ttft_s)| TurnDone {
                    branch,
                    turn,
                    ttft_s,
                    input_tokens: ttft_s.map(|_| 1000),
                    cached_input_tokens: ttft_s.map(|_| u64::from(turn.saturating_sub(1)) * 250),
                })
                .collect(),
            outcome,
            duration_s: 1.5,
        };
        job.session(&done(
            SessionOutcome::Completed,
            &[
                (0, 1, Some(0.2)),
                (0, 2, Some(0.3)),
                (1, 1, Some(0.25)),
                (0, 3, Some(0.4)),
            ],
        ));
        let count = |turn: &str| {
            value(
                &m,
                &format!(
                    "tokenprobe_session_turn_time_to_first_token_seconds_count{{{sel},turn=\"{turn}\"}}"
                ),
            )
        };
        assert_eq!(
            [
                count("1"),
                count("2"),
                count("3"),
                count("subagent"),
                count("9+")
            ],
            [
                Some("1".into()),
                Some("1".into()),
                Some("1".into()),
                Some("1".into()),
                None
            ]
        );
        // (0 + 250 + 0 + 500) cached of 4,000.
        assert_eq!(
            value(
                &m,
                &format!("tokenprobe_session_cached_input_ratio{{{sel}}}")
            )
            .as_deref(),
            Some("0.1875")
        );
        assert_eq!(
            value(&m, &format!("tokenprobe_session_last_success{{{sel}}}")).as_deref(),
            Some("1")
        );
        assert_eq!(
            value(&m, &format!("tokenprobe_session_duration_seconds{{{sel}}}")).as_deref(),
            Some("1.5")
        );
        // A session whose twelfth turn was refused for the model's context.
        job.session(&done(
            SessionOutcome::Overflow,
            &[(0, 11, Some(0.5)), (0, 12, None)],
        ));
        assert_eq!(count("9+").as_deref(), Some("1"));
        assert_eq!(
            value(
                &m,
                &format!("tokenprobe_sessions_total{{{sel},outcome=\"overflow\"}}")
            )
            .as_deref(),
            Some("1")
        );
        assert_eq!(
            value(&m, &format!("tokenprobe_session_last_success{{{sel}}}")).as_deref(),
            Some("0")
        );
        m.remove_job(&labels("agent"));
        let text = m.encode_text().unwrap();
        assert!(!text.contains(r#"prompt="agent""#), "{text}");
    }
}
