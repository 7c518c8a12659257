//! A session workload's figures as text (pure): each level's sessions (within the SLOs, failed,
//! overflowed the model's context, duration, turns and tool round trips, TTFT against context)
//! and each turn's (TTFT beside the context it was sent with, the cached share, input and output
//! tokens, tool calls), as sections of one line each (the text outputs print them, the page
//! makes each a heading and a list); the CSV columns; the mark of a level invalid for its
//! sessions' overflow.

use crate::bench::report::Report;
use crate::bench::session::{SessionLevel, TurnFigures, load_words};
use crate::bench::stats::LevelStats;
use crate::render::shown::Shown;
use crate::units::{fmt_pct, fmt_secs};

/// The mark of a level invalid for its sessions' context overflow, beside `CLIENT-BOUND` and
/// `PARTIAL`.
pub const INVALID_MARK: &str = "INVALID";

/// The mark of level `l`, when it is invalid for its sessions' context overflow.
pub fn mark(l: &LevelStats) -> Option<&'static str> {
    l.session_invalid().map(|_| INVALID_MARK)
}

/// True when any level of the report has sessions.
pub fn any(r: &Report) -> bool {
    r.models
        .iter()
        .any(|m| m.levels.iter().any(|l| l.sessions.is_some()))
}

/// One level's sessions in a line (after `name @ load: `).
pub fn level_words(s: &SessionLevel) -> String {
    let sm = &s.summary;
    let mut w = crate::units::count(s.sessions as usize, "session");
    match &s.slo_attainment {
        Some(a) => {
            let interval = a.interval.map_or_else(String::new, |[lo, hi]| {
                format!(" [{}, {}]", fmt_pct(lo), fmt_pct(hi))
            });
            w.push_str(&format!(
                ", {} within the SLOs ({}{interval})",
                a.met,
                fmt_pct(a.share)
            ));
        }
        None => w.push_str(&format!(
            ", {} without a failed turn",
            sm.sessions - sm.failed
        )),
    }
    w.push_str(&format!(", {} failed", sm.failed));
    w.push_str(&format!(
        ", {} overflowed the model's context ({}, at most {})",
        s.overflowed,
        fmt_pct(s.overflow_share),
        fmt_pct(s.max_overflow)
    ));
    if let Some(d) = &sm.duration_s {
        w.push_str(&format!("; duration p50 {}", fmt_secs(d.p50)));
    }
    if let (Some(t), Some(c)) = (sm.turns_mean, sm.tool_round_trips_mean) {
        w.push_str(&format!(
            ", {t:.1} turns and {c:.1} tool-call round trips a session"
        ));
    }
    if let Some(k) = s.ttft_per_1k_context_s {
        w.push_str(&format!(
            "; TTFT {}{} per 1,000 tokens of context",
            if k < 0.0 { "-" } else { "+" },
            fmt_secs(k.abs())
        ));
    }
    if let Some(why) = &s.invalid {
        w.push_str(&format!("; INVALID, not judged: {why}"));
    }
    w
}

/// One turn's figures in words (after `name @ load, `).
pub fn turn_words(t: &TurnFigures) -> String {
    let which = t
        .turn
        .map_or_else(|| "sub-agents' turns".to_owned(), |n| format!("turn {n}"));
    let ttft = t.ttft_s.as_ref().map_or_else(
        || "TTFT -".to_owned(),
        |s| format!("TTFT p50 {} (p95 {})", fmt_secs(s.p50), fmt_secs(s.p95)),
    );
    let context = t
        .context_tokens_mean
        .map_or_else(String::new, |c| format!(" at {c:.0} tokens of context"));
    let cached = t
        .cached_share
        .map_or_else(String::new, |c| format!(", {} cached", fmt_pct(c)));
    let output = t
        .output_tokens_mean
        .map_or_else(String::new, |o| format!(", {o:.1} output tokens"));
    format!(
        "{which}: {ttft}{context}{cached}{output}, {} tool calls ({} ok, {} failed)",
        t.tool_calls, t.successes, t.failures
    )
}

/// The sessions' sections (empty without sessions): a line per level, then a line per turn of
/// each level, each led by `bullet` and the level's `name @ load`.
pub fn sections(shown: &Shown<'_>, bullet: &str) -> String {
    let mut levels = Vec::new();
    let mut turns = Vec::new();
    for (m, name) in shown.models() {
        for l in &m.levels {
            let Some(s) = &l.sessions else { continue };
            let at = format!("{name} @ {}", load_words(l.key.load()));
            levels.push(format!("{bullet}{at}: {}", level_words(s)));
            for t in &s.turns {
                turns.push(format!("{bullet}{at}, {}", turn_words(t)));
            }
        }
    }
    let mut out = String::new();
    if levels.is_empty() {
        return out;
    }
    out.push_str("\nSessions (a session meets the SLOs only when every one of its turns does; those that overflowed the model's context are counted apart, and past the stated share make the level invalid):\n");
    for l in &levels {
        out.push_str(l);
        out.push('\n');
    }
    out.push_str("\nSession turns (TTFT against the context each turn was sent with: the input tokens the server counted, and the share of it the prefix cache served):\n");
    for t in &turns {
        out.push_str(t);
        out.push('\n');
    }
    out
}

/// The CSV columns added when a report has sessions.
pub const CSV_HEADER: [&str; 9] = [
    "sessions",
    "sessions_within_slo",
    "session_slo_attainment",
    "sessions_failed",
    "sessions_overflowed",
    "session_overflow_share",
    "session_duration_p50_s",
    "session_ttft_per_1k_context_s",
    "session_invalid",
];

/// The CSV columns a report adds for its sessions: [`CSV_HEADER`], or none without sessions.
pub fn csv_header(r: &Report) -> Vec<String> {
    if any(r) {
        CSV_HEADER.map(str::to_owned).to_vec()
    } else {
        Vec::new()
    }
}

/// Level `l`'s cells under [`csv_header`] of `r`.
pub fn csv_row(r: &Report, l: &LevelStats) -> Vec<String> {
    if any(r) {
        csv_cells(l.sessions.as_ref()).to_vec()
    } else {
        Vec::new()
    }
}

/// A level's cells under [`CSV_HEADER`] (empty without sessions).
pub fn csv_cells(s: Option<&SessionLevel>) -> [String; 9] {
    let num = |v: Option<f64>| v.map(|v| format!("{v}")).unwrap_or_default();
    match s {
        None => Default::default(),
        Some(s) => {
            let a = s.slo_attainment.as_ref();
            [
                s.sessions.to_string(),
                a.map(|a| a.met.to_string()).unwrap_or_default(),
                num(a.map(|a| a.share)),
                s.summary.failed.to_string(),
                s.overflowed.to_string(),
                num(Some(s.overflow_share)),
                num(s.summary.duration_s.as_ref().map(|d| d.p50)),
                num(s.ttft_per_1k_context_s),
                s.invalid.clone().unwrap_or_default(),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::sample::Sample;
    use crate::bench::session::SessionMode;

    fn turn(session: u64, turn: u32, ttft: f64, input: u64, cached: u64) -> Sample {
        Sample {
            session: Some(session),
            branch: Some(0),
            turn: Some(turn),
            ttft_s: Some(ttft),
            input_tokens: Some(input),
            cached_input_tokens: Some(cached),
            output_tokens: 10,
            tool_calls: u32::from(turn == 1),
            sent_s: f64::from(turn),
            end_s: f64::from(turn) + ttft,
            ..Sample::default()
        }
    }

    /// A session level is said in every output: its sessions and turns in the sections (text,
    /// Markdown and the page), its columns in the CSV, its invalidity as a mark.
    #[test]
    fn a_session_level_is_said_in_words_columns_and_marks() {
        let samples = [
            turn(1, 1, 0.1, 1000, 0),
            turn(1, 2, 0.2, 2000, 992),
            turn(2, 1, 0.1, 1000, 496),
            turn(2, 2, 0.3, 3000, 992),
        ];
        let mode = SessionMode {
            per_level: Some(2),
            max_context: Some(2500),
            max_overflow: 0.25,
            recorded: false,
        };
        let slos = ["ttft=250ms".parse::<crate::bench::criteria::Slo>().unwrap()];
        let s = SessionLevel::of(&samples, &slos, &mode).unwrap();
        let mut r = crate::bench::report::tests::synthetic();
        r.models.truncate(1);
        r.models[0].levels.truncate(1);
        r.models[0].levels[0].sessions = Some(s.clone());
        let text = sections(&Shown::of(&r), "  ");
        assert!(
            text.contains(
                "  alpha @ 2 concurrent sessions: 2 sessions, 1 within the SLOs (100.00% [20.65%, 100.00%]), 0 failed, 1 overflowed the model's context (50.00%, at most 25.00%); duration p50 1.20 s, 2.0 turns and 1.0 tool-call round trips a session; TTFT +100.0 ms per 1,000 tokens of context; INVALID, not judged: context overflow: 1 of 2 sessions (50.00%)"
            ),
            "{text}"
        );
        assert!(
            text.contains("  alpha @ 2 concurrent sessions, turn 2: TTFT p50 250.0 ms (p95 295.0 ms) at 2500 tokens of context, 39.68% cached, 10.0 output tokens, 0 tool calls (2 ok, 0 failed)"),
            "{text}"
        );
        assert_eq!(mark(&r.models[0].levels[0]), Some("INVALID"));
        let cells = csv_cells(Some(&s));
        assert_eq!(cells[..6], ["2", "1", "1", "0", "1", "0.5"]);
        assert!(cells[8].starts_with("context overflow"));
        assert_eq!(csv_cells(None), <[String; 9]>::default());
        let mut plain = r.clone();
        plain.models[0].levels[0].sessions = None;
        assert!(!any(&plain) && any(&r));
        assert_eq!(sections(&Shown::of(&plain), "  "), "");
    }
}
