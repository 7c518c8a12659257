//! Agent sessions end to end (issue 42): `tokenprobe probe` runs one `session:` prompt's session
//! against `tokenprobe simulate` (tool calls on, a prefix cache), and the simulator's event log
//! is the truth of every turn: what the probe reports of each turn's input and cached tokens is
//! what the simulator counted and served; a turn answered with a call is one the simulator
//! logged as a tool call; the sub-agents arrive after their parent's forking turn and before its
//! next one; a recorded session's turns arrive after their recorded gaps.

use crate::common;
use common::e2e::*;

mod bench;
mod serve;

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn probe(config: &Path, target: &str) -> Value {
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.args(["probe", "--config.file"])
        .arg(config)
        .args(["--target", target, "--format", "json"]);
    for v in common::PROXY_ENV_VARS {
        cmd.env_remove(v);
    }
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(60));
    assert_eq!(st.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The event log's lines once it has `n`.
fn event_log(path: &Path, n: usize) -> Vec<Value> {
    wait_for("the event log", Duration::from_secs(10), || {
        let lines: Vec<Value> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("an event log line is JSON"))
            .collect();
        (lines.len() >= n).then_some(lines)
    })
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Seconds after the epoch a logged request arrived, and its last event was written.
fn span(l: &Value) -> (f64, f64) {
    let at = u(&l["arrival_unix_ns"]) as f64 * 1e-9;
    let last = l["events"]
        .as_array()
        .and_then(|e| e.last())
        .and_then(|e| e["t_s"].as_f64())
        .unwrap_or(0.0);
    (at, at + last)
}

#[test]
fn one_session_through_probe_against_the_simulators_event_log() {
    let _serial = serial();
    let _wd = Watchdog::new("sessions e2e", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let (sim, url) = start_simulate(
        dir.path(),
        &[
            "--profile",
            "agent:ttft=10ms,itl=1ms,output_tokens=8,prefill_per_1k=5ms,prefix_cache=on,tool_calls=on",
            "--event-log",
            log.to_str().unwrap(),
        ],
    );
    let trace = dir.path().join("sessions.jsonl");
    std::fs::write(
        &trace,
        "{\"session_id\": \"s\", \"timestamp\": 0, \"input_length\": 700, \"output_length\": 6, \"hash_ids\": [1, 2]}\n\
         {\"session_id\": \"s\", \"delay\": 300, \"input_length\": 60, \"output_length\": 6}\n\
         {\"session_id\": \"s\", \"delay\": 200, \"input_length\": 40, \"output_length\": 6}\n",
    )
    .unwrap();
    let config = dir.path().join("c.yml");
    std::fs::write(
        &config,
        format!(
            "prompts:\n\
             \x20 - name: agent\n    session:\n      system_tokens: 400\n      tools: {{count: 3, tokens: 40}}\n      user_tokens: 60\n      turns: 3\n      call_tokens: 12\n      result_tokens: 150\n      answer_tokens: 16\n      think_time: 20ms\n      context_budget: 6000\n      subagents: {{count: 2, every: 2, turns: 1}}\n      seed: 5\n\
             \x20 - name: replay\n    session:\n      trace: {{file: {}}}\n      seed: 5\n\
             targets:\n\
             \x20 - name: agent\n    base_url: {url}/v1\n    models: [agent]\n    prompts: [agent]\n    connection: reuse\n\
             \x20 - name: replay\n    base_url: {url}/v1\n    models: [agent]\n    prompts: [replay]\n",
            trace.display()
        ),
    )
    .unwrap();

    let agent = probe(&config, "agent");
    assert_eq!(agent["end"], "completed", "{agent:#}");
    let turns = agent["turns"].as_array().expect("turns").clone();
    // The session's 4 turns (3 calls, the final answer) and 2 sub-agents of 2 turns each.
    assert_eq!(turns.len(), 8, "{agent:#}");
    // 3 calibration requests, then the session's 8 turns.
    let lines = event_log(&log, 3 + 8);
    let by_id = |t: &Value| -> &Value {
        lines
            .iter()
            .find(|l| l["id"] == t["request_id"])
            .unwrap_or_else(|| panic!("no log line for {t}"))
    };
    for t in &turns {
        let l = by_id(t);
        assert_eq!(t["input_tokens"], l["input_tokens"], "{t}\n{l}");
        assert_eq!(t["cached_input_tokens"], l["cached_tokens"], "{t}\n{l}");
        let called = !t["tool_calls"].as_array().unwrap().is_empty();
        assert_eq!(Value::Bool(called), l["tool_call"], "{t}\n{l}");
        // A call's TTFT is its first argument token's.
        assert!(t["ttft_s"].as_f64().is_some(), "{t}");
    }
    let of = |branch: u64, turn: u64| -> &Value {
        turns
            .iter()
            .find(|t| t["branch"] == branch && t["turn"] == turn)
            .unwrap_or_else(|| panic!("no turn {turn} of branch {branch}"))
    };
    // Tool-call turns ask for a call; the final answer for none: the simulator answered so.
    for (b, t, call) in [
        (0, 1, true),
        (0, 2, true),
        (0, 3, true),
        (0, 4, false),
        (1, 1, true),
        (1, 2, false),
        (2, 2, false),
    ] {
        assert_eq!(by_id(of(b, t))["tool_call"], call, "branch {b} turn {t}");
    }
    // The context grows turn by turn, and the cache serves what the last turn sent.
    let input = |b, t| u(&by_id(of(b, t))["input_tokens"]);
    let cached = |b, t| u(&by_id(of(b, t))["cached_tokens"]);
    for t in 2..=4 {
        assert!(input(0, t) > input(0, t - 1), "turn {t}");
        assert!(
            cached(0, t) + 16 > input(0, t - 1),
            "turn {t}: {} cached of the last turn's {}",
            cached(0, t),
            input(0, t - 1)
        );
    }
    // Sub-agents start from the parent's second request (its whole prefix, served from the
    // cache) and a task of their own; they arrive after that turn's answer and are both done
    // before the parent's third turn arrives.
    let (_, fork_end) = span(by_id(of(0, 2)));
    let (join, _) = span(by_id(of(0, 3)));
    for b in [1, 2] {
        assert!(input(b, 1) > input(0, 2));
        assert!(cached(b, 1) + 16 > input(0, 2), "branch {b}");
        let (first, _) = span(by_id(of(b, 1)));
        let (_, last_end) = span(by_id(of(b, 2)));
        assert!(first >= fork_end, "branch {b} starts after the fork");
        assert!(
            last_end <= join,
            "branch {b} is joined before the parent goes on"
        );
    }
    // The two sub-agents ran at once.
    let (a1, _) = span(by_id(of(1, 1)));
    let (a2, _) = span(by_id(of(2, 1)));
    assert!((a1 - a2).abs() < 0.05, "{a1} {a2}");

    // A recorded session: each turn after the previous answer and its delay, its context the
    // last one's and the answer, so the cache serves the last request.
    let replay = probe(&config, "replay");
    assert_eq!(replay["end"], "completed", "{replay:#}");
    let rt = replay["turns"].as_array().unwrap().clone();
    assert_eq!(rt.len(), 3);
    let lines = event_log(&log, 3 + 8 + 3 + 3);
    let line = |t: &Value| -> Value {
        lines
            .iter()
            .find(|l| l["id"] == t["request_id"])
            .cloned()
            .unwrap_or_else(|| panic!("no log line for {t}"))
    };
    for (k, delay) in [(1, 0.3), (2, 0.2)] {
        let (_, prev_end) = span(&line(&rt[k - 1]));
        let (at, _) = span(&line(&rt[k]));
        assert!(
            at - prev_end >= delay - 0.002,
            "turn {}: {}",
            k + 1,
            at - prev_end
        );
        assert!(
            at - prev_end < delay + 0.2,
            "turn {}: {}",
            k + 1,
            at - prev_end
        );
        assert!(u(&line(&rt[k])["cached_tokens"]) + 16 > u(&line(&rt[k - 1])["input_tokens"]));
        assert_eq!(rt[k]["input_tokens"], line(&rt[k])["input_tokens"]);
    }
    assert_eq!(rt[0]["requested_input_tokens"], 700);
    drop(sim);
}
