//! The session canary of `tokenprobe serve` (issue 42 item 5) against `tokenprobe simulate`: a
//! job whose prompt is a `session:` runs one whole session per tick, and its series say what the
//! simulator's event log says of each session: its turns by their `turn`, how it ended, and the
//! share of its input the prefix cache served.

use super::{event_log, u};
use crate::common;
use common::e2e::*;

use std::time::Duration;

#[test]
fn a_session_job_runs_one_session_a_tick_and_exports_its_turns_outcome_and_cached_share() {
    let _serial = serial();
    let _wd = Watchdog::new("session canary e2e", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let (sim, url) = start_simulate(
        dir.path(),
        &[
            "--profile",
            "agent:ttft=10ms,itl=1ms,output_tokens=8,prefix_cache=on,tool_calls=on",
            "--event-log",
            log.to_str().unwrap(),
        ],
    );
    // Two tool calls and the final answer: three turns a session, one session a second.
    let config = format!(
        "defaults:\n  interval: 1s\n\
         prompts:\n  - name: agent\n    session:\n      system_tokens: 300\n      tools: {{count: 2, tokens: 40}}\n      user_tokens: 60\n      turns: 2\n      call_tokens: 12\n      result_tokens: 120\n      answer_tokens: 16\n      think_time: 10ms\n      context_budget: 4000\n      seed: 7\n\
         targets:\n  - name: sim\n    base_url: {url}/v1\n    models: [agent]\n    prompts: [agent]\n    connection: reuse\n"
    );
    let mut tp = Tokenprobe::serve(dir.path(), &config);
    let sel = [("target", "sim"), ("model", "agent"), ("prompt", "agent")];
    let sessions = |m: &Samples, outcome: &str| {
        let mut want = sel.to_vec();
        want.push(("outcome", outcome));
        m.sum("tokenprobe_sessions_total", &want)
    };
    // Between ticks: two scrapes agree, and the log holds the calibration and every session's
    // three turns.
    let (m, lines, n) = wait_for(
        "two sessions, between ticks",
        Duration::from_secs(30),
        || {
            let a = tp.metrics();
            let n = sessions(&a, "completed");
            if n < 2.0 {
                return None;
            }
            let lines = event_log(&log, 0);
            let b = tp.metrics();
            (sessions(&b, "completed") == n && lines.len() == 3 + 3 * n as usize)
                .then_some((b, lines, n))
        },
    );
    for o in ["budget", "failed", "overflow"] {
        assert_eq!(sessions(&m, o), 0.0, "{o}");
    }
    // Each turn of each session, by its turn.
    for turn in ["1", "2", "3"] {
        let mut want = sel.to_vec();
        want.push(("turn", turn));
        let count = m.sum(
            "tokenprobe_session_turn_time_to_first_token_seconds_count",
            &want,
        );
        assert_eq!(count, n, "turn {turn}");
        let sum = m.sum(
            "tokenprobe_session_turn_time_to_first_token_seconds_sum",
            &want,
        );
        assert!(sum >= n * 0.010, "turn {turn}: TTFT sum {sum}");
    }
    assert!(!m.has(
        "tokenprobe_session_turn_time_to_first_token_seconds_count",
        &[("turn", "4")]
    ));
    assert_eq!(m.sum("tokenprobe_session_last_success", &sel), 1.0);
    // The last session's cached share is the log's: its three requests, the last three lines.
    let last = &lines[lines.len() - 3..];
    let cached: u64 = last.iter().map(|l| u(&l["cached_tokens"])).sum();
    let input: u64 = last.iter().map(|l| u(&l["input_tokens"])).sum();
    let ratio = m.sum("tokenprobe_session_cached_input_ratio", &sel);
    assert!(
        (ratio - cached as f64 / input as f64).abs() < 1e-9,
        "{ratio} vs {cached}/{input}"
    );
    assert!(ratio > 0.5, "a later turn resends the context: {ratio}");
    // Tool calls: the first two turns of each session, as the simulator answered.
    let calls = lines[3..].iter().filter(|l| l["tool_call"] == true).count();
    assert_eq!(calls, 2 * n as usize);
    let duration = m.sum("tokenprobe_session_duration_seconds", &sel);
    assert!(duration > 0.02 && duration < 1.0, "{duration}");
    drop(tp);
    drop(sim);
}
