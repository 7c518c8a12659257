//! Session levels of `tokenprobe bench` against `tokenprobe simulate` (issue 42 item 4), the
//! simulator's event log the truth of every turn: a closed-loop level is N whole sessions at
//! once, each turn's input, cached tokens and tool call as the simulator logged them, its turns
//! in order after their think time, its sub-agents in parallel; an open-loop level starts
//! sessions at its rate, and a session the server refused for its context is counted apart and
//! past the stated share invalidates the level in every output; `--find-capacity` answers in
//! concurrent sessions.

use super::{event_log, span, u};
use crate::common;
use common::e2e::*;

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// `tokenprobe bench` with `args`, exit 0; its stderr.
fn bench(args: &[&str]) -> String {
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.arg("bench").args(args);
    for v in common::PROXY_ENV_VARS {
        cmd.env_remove(v);
    }
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(90));
    assert_eq!(st.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    err
}

fn read_json(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A config with one session prompt `session` (YAML lines under `session:`) on target `sim`.
fn config(dir: &Path, url: &str, session: &str) -> std::path::PathBuf {
    let path = dir.join("c.yml");
    std::fs::write(
        &path,
        format!(
            "prompts:\n  - name: agent\n    session:\n{session}\
             targets:\n  - name: sim\n    base_url: {url}/v1\n    models: [agent]\n    prompts: [agent]\n    connection: reuse\n"
        ),
    )
    .unwrap();
    path
}

/// Three calls (the second answered by two sub-agents of one call each), a final answer.
const AGENT: &str = "      system_tokens: 300\n      tools: {count: 3, tokens: 40}\n      user_tokens: 60\n      turns: 3\n      call_tokens: 12\n      result_tokens: 120\n      answer_tokens: 16\n      think_time: 30ms\n      context_budget: 6000\n      subagents: {count: 2, every: 2, turns: 1}\n      seed: 9\n";

#[test]
fn a_closed_loop_level_runs_whole_sessions_at_once_as_the_event_log_shows() {
    let _serial = serial();
    let _wd = Watchdog::new("session level e2e", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let (sim, url) = start_simulate(
        dir.path(),
        &[
            "--profile",
            "agent:ttft=15ms,itl=1ms,output_tokens=8,prefill_per_1k=5ms,prefix_cache=on,tool_calls=on",
            "--event-log",
            log.to_str().unwrap(),
        ],
    );
    let c = config(dir.path(), &url, AGENT);
    let report = dir.path().join("r.json");
    let history = dir.path().join("runs.sqlite3");
    bench(&[
        "--config.file",
        c.to_str().unwrap(),
        "--concurrency",
        "3",
        "--sessions-per-level",
        "6",
        "--slo",
        "ttft=2s",
        "--samples",
        "--no-progress",
        "--no-check",
        "--history",
        history.to_str().unwrap(),
        "-o",
        report.to_str().unwrap(),
    ]);
    let r = read_json(&report);
    assert_eq!(r["mode"]["sessions"]["per_level"], 6, "{:#}", r["mode"]);
    let level = &r["models"][0]["levels"][0];
    let s = &level["sessions"];
    // Six sessions of 4 turns and 2 sub-agents of 2 turns: 8 requests each.
    assert_eq!(s["sessions"], 6, "{s:#}");
    assert_eq!(s["overflowed"], 0);
    assert_eq!(s["summary"]["turns_mean"], 8.0);
    assert_eq!(
        s["summary"]["tool_round_trips_mean"], 5.0,
        "3 calls, one per sub-agent"
    );
    assert_eq!(s["slo_attainment"]["met"], 6);
    assert_eq!(level["requests"], 48);
    let turns: Vec<Value> = s["turns"].as_array().unwrap().clone();
    assert_eq!(
        turns.iter().map(|t| t["turn"].clone()).collect::<Vec<_>>(),
        [1, 2, 3, 4]
            .map(Value::from)
            .into_iter()
            .chain([Value::Null])
            .collect::<Vec<_>>()
    );
    let samples = level["samples"].as_array().unwrap().clone();
    assert_eq!(samples.len(), 48);
    // 3 calibration requests, then the level's 48.
    let lines = event_log(&log, 3 + 48);
    let line = |sample: &Value| -> &Value {
        lines
            .iter()
            .find(|l| l["id"] == sample["request_id"])
            .unwrap_or_else(|| panic!("no log line for {sample}"))
    };
    // Every turn as the simulator saw it: its context, what the cache served, its tool call.
    let mut by_session: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
    for x in &samples {
        let l = line(x);
        assert_eq!(x["input_tokens"], l["input_tokens"], "{x}\n{l}");
        assert_eq!(x["cached_input_tokens"], l["cached_tokens"], "{x}\n{l}");
        assert_eq!(
            x.get("tool_calls").is_some(),
            l["tool_call"] == true,
            "{x}\n{l}"
        );
        by_session.entry(u(&x["session"])).or_default().push(x);
    }
    assert_eq!(by_session.len(), 6);
    // The figures per turn are the log's: turn 2's mean context and cached share.
    let second: Vec<&Value> = samples
        .iter()
        .filter(|x| x["branch"] == 0 && x["turn"] == 2)
        .map(line)
        .collect();
    let input: u64 = second.iter().map(|l| u(&l["input_tokens"])).sum();
    let cached: u64 = second.iter().map(|l| u(&l["cached_tokens"])).sum();
    assert_eq!(turns[1]["context_tokens_mean"], input as f64 / 6.0);
    let share = turns[1]["cached_share"].as_f64().unwrap();
    assert!(
        (share - cached as f64 / input as f64).abs() < 1e-12,
        "{share}"
    );
    // Each session's own turns arrive in order, each after the previous answer and its think
    // time (the second's result goes once its sub-agents ended); the sub-agents run at once.
    let mut spans: Vec<(f64, f64)> = Vec::new();
    for (id, turns) in &by_session {
        let at = |b: u64, t: u64| -> (f64, f64) {
            let x = turns
                .iter()
                .find(|x| x["branch"] == b && x["turn"] == t)
                .unwrap_or_else(|| panic!("session {id}: no turn {t} of branch {b}"));
            span(line(x))
        };
        for t in 2..=4 {
            let (_, prev_end) = at(0, t - 1);
            let (arrived, _) = at(0, t);
            let gap = arrived - prev_end;
            let least = if t == 3 { 0.0 } else { 0.030 - 0.002 };
            assert!(gap >= least, "session {id} turn {t}: {gap}");
        }
        let (_, forked) = at(0, 2);
        let (joined, _) = at(0, 3);
        let (a, a_end) = at(1, 1);
        let (b, _) = at(2, 1);
        assert!(a >= forked && b >= forked, "session {id}");
        assert!(at(1, 2).1 <= joined && at(2, 2).1 <= joined, "session {id}");
        assert!(
            b < a_end,
            "session {id}: the sub-agents ran one after the other"
        );
        spans.push((at(0, 1).0, at(0, 4).1));
    }
    // Three sessions at once, never more: each worker starts its next session after its last.
    let most = spans
        .iter()
        .map(|(start, _)| {
            spans
                .iter()
                .filter(|(a, b)| a <= start && start < b)
                .count()
        })
        .max()
        .unwrap();
    assert_eq!(most, 3, "{spans:?}");
    drop(sim);
}

#[test]
fn an_open_loop_level_counts_sessions_refused_for_their_context_apart_and_invalid() {
    let _serial = serial();
    let _wd = Watchdog::new("session overflow e2e", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    // The fourth turn of a session passes 1,000 tokens of context.
    let (sim, url) = start_simulate(
        dir.path(),
        &[
            "--profile",
            "agent:ttft=10ms,itl=1ms,output_tokens=8,prefix_cache=on,tool_calls=on,max_context=1000",
            "--event-log",
            log.to_str().unwrap(),
        ],
    );
    let short = "      system_tokens: 300\n      tools: {count: 2, tokens: 40}\n      user_tokens: 60\n      turns: {distribution: uniform, min: 1, max: 4}\n      call_tokens: 12\n      result_tokens: 150\n      answer_tokens: 16\n      context_budget: 6000\n      seed: 3\n";
    let c = config(dir.path(), &url, short);
    let (json, md, csv) = (
        dir.path().join("r.json"),
        dir.path().join("r.md"),
        dir.path().join("r.csv"),
    );
    let history = dir.path().join("runs.sqlite3");
    let err = bench(&[
        "--config.file",
        c.to_str().unwrap(),
        "--rate",
        "20",
        "--arrival",
        "constant",
        "--sessions-per-level",
        "8",
        "--max-overflow",
        "10%",
        "--slo",
        "ttft=2s",
        "--samples",
        "--no-progress",
        "--no-check",
        "--history",
        history.to_str().unwrap(),
        "-o",
        json.to_str().unwrap(),
        "-o",
        md.to_str().unwrap(),
        "-o",
        csv.to_str().unwrap(),
    ]);
    let r = read_json(&json);
    let level = &r["models"][0]["levels"][0];
    let samples = level["samples"].as_array().unwrap().clone();
    let lines = event_log(&log, 3 + samples.len());
    let line = |x: &Value| -> &Value {
        lines
            .iter()
            .find(|l| l["id"] == x["request_id"])
            .unwrap_or_else(|| panic!("no log line for {x}"))
    };
    // The truth: the sessions one of whose turns the simulator refused for its context.
    let mut refused: Vec<u64> = samples
        .iter()
        .filter(|x| line(x)["fault"] == "context_length_exceeded")
        .map(|x| u(&x["session"]))
        .collect();
    refused.sort_unstable();
    refused.dedup();
    for x in &samples {
        let l = line(x);
        if l["fault"] == "context_length_exceeded" {
            assert!(u(&l["input_tokens"]) > 1000, "{l}");
            assert_eq!(x["error_type"], "bad_request", "{x}");
        } else {
            assert!(u(&l["input_tokens"]) <= 1000, "{l}");
        }
    }
    let s = &level["sessions"];
    assert_eq!(s["sessions"], 8, "{s:#}");
    assert!(!refused.is_empty() && refused.len() < 8, "{refused:?}");
    assert_eq!(s["overflowed"], refused.len());
    assert_eq!(s["summary"]["sessions"], 8 - refused.len(), "counted apart");
    assert_eq!(s["slo_attainment"]["counted"], 8 - refused.len());
    assert_eq!(s["slo_attainment"]["met"], 8 - refused.len());
    // Past 10% of the sessions: invalid, and said in every output.
    let why = s["invalid"].as_str().expect("invalid");
    assert!(why.starts_with("context overflow: "), "{why}");
    assert!(
        err.contains("INVALID, not judged: context overflow"),
        "{err}"
    );
    let notes = level["notes"].to_string();
    assert!(notes.contains("INVALID, not judged"), "{notes}");
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(md.contains("**INVALID**"), "{md}");
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert!(
        csv.lines().next().unwrap().ends_with(",session_invalid"),
        "{csv}"
    );
    assert!(csv.contains("\"context overflow: "), "{csv}");
    // Sessions started at the rate: their first turns 50 ms apart as the simulator saw them.
    let mut starts: Vec<f64> = samples
        .iter()
        .filter(|x| x["turn"] == 1)
        .map(|x| span(line(x)).0)
        .collect();
    starts.sort_by(f64::total_cmp);
    assert_eq!(starts.len(), 8);
    for w in starts.windows(2) {
        let gap = w[1] - w[0];
        assert!((gap - 0.05).abs() < 0.02, "{starts:?}");
    }
    drop(sim);
}

#[test]
fn the_capacity_search_answers_in_concurrent_sessions() {
    let _serial = serial();
    let _wd = Watchdog::new("session capacity e2e", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    // Two slots: a third request waits a whole request (about 60 ms) for one.
    let (sim, url) = start_simulate(
        dir.path(),
        &[
            "--max-concurrency",
            "2",
            "--profile",
            "agent:ttft=20ms,itl=5ms,output_tokens=8,tool_calls=on",
        ],
    );
    let back_to_back = "      system_tokens: 200\n      tools: {count: 2, tokens: 40}\n      user_tokens: 60\n      turns: 3\n      call_tokens: 8\n      result_tokens: 60\n      answer_tokens: 8\n      context_budget: 6000\n      seed: 4\n";
    let c = config(dir.path(), &url, back_to_back);
    let report = dir.path().join("r.json");
    let history = dir.path().join("runs.sqlite3");
    let err = bench(&[
        "--config.file",
        c.to_str().unwrap(),
        "--find-capacity",
        "--concurrency",
        "1,8",
        "--sessions-per-level",
        "6",
        "--capacity-extend",
        "0",
        "--slo",
        "ttft=45ms",
        "--no-progress",
        "--no-check",
        "--history",
        history.to_str().unwrap(),
        "-o",
        report.to_str().unwrap(),
    ]);
    assert!(
        err.contains("a capacity search from 1 to 8 concurrent sessions"),
        "{err}"
    );
    let r = read_json(&report);
    let cap = &r["models"][0]["capacity"];
    assert_eq!(cap["concurrency"], 2, "{cap:#}\n{err}");
    assert_eq!(cap["sessions"], true);
    assert!(
        err.contains("  agent: capacity 2 concurrent sessions ("),
        "{err}"
    );
    // Each level ran its six sessions; the one that failed, by its sessions' attainment.
    for l in r["models"][0]["levels"].as_array().unwrap() {
        assert_eq!(l["sessions"]["sessions"], 6, "{l:#}");
    }
    let failed = r["models"][0]["levels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["concurrency"] == 3)
        .expect("the level at 3");
    let a = &failed["sessions"]["slo_attainment"];
    assert!(a["share"].as_f64().unwrap() < 0.95, "{a:#}");
    drop(sim);
}
