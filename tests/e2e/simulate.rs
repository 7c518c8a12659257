//! `tokenprobe simulate` end to end: the real binary serves, `tokenprobe probe` measures it.
//!
//! Timing is checked against the configuration (TTFT, TPOT) and against the simulator's own event
//! log (the send instant of the first token event); every fault is checked to come out as the
//! error type docs/measurement.md assigns it.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tokenprobe");

/// A running simulator; killed on drop.
struct Sim {
    child: Child,
    addr: String,
    log: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Sim {
    fn start(args: &[&str]) -> Sim {
        Self::start_inner(args, false)
    }

    fn with_log(args: &[&str]) -> Sim {
        Self::start_inner(args, true)
    }

    fn start_inner(args: &[&str], log: bool) -> Sim {
        let dir = tempfile::tempdir().expect("tempdir");
        let log_path = dir.path().join("events.jsonl");
        let mut cmd = Command::new(BIN);
        cmd.args(["simulate", "--listen", "127.0.0.1:0", "--log.level", "warn"])
            .args(args);
        if log {
            cmd.arg("--event-log").arg(&log_path);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start tokenprobe simulate");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("first line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        assert!(addr.starts_with("http://127.0.0.1:"), "{addr}");
        Sim {
            child,
            addr,
            log: log.then_some(log_path),
            _dir: dir,
        }
    }

    fn host_port(&self) -> &str {
        self.addr.trim_start_matches("http://")
    }

    /// Waits until the event log holds at least `n` lines, and returns them.
    fn log_lines(&self, n: usize) -> Vec<Value> {
        let path = self.log.as_deref().expect("started with an event log");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let lines = read_lines(path);
            if lines.len() >= n {
                return lines;
            }
            assert!(
                Instant::now() < deadline,
                "event log has {} of {n} lines",
                lines.len()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad log line {l:?}: {e}")))
        .collect()
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `tokenprobe probe --format json` with `args`; returns its JSON and exit code.
fn probe(args: &[&str]) -> (Value, i32) {
    let out = Command::new(BIN)
        .arg("probe")
        .args(["--format", "json", "--log.level", "warn"])
        .args(args)
        .output()
        .expect("run tokenprobe probe");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "probe printed no JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (v, out.status.code().unwrap_or(-1))
}

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// Timing-sensitive tests take this lock, so they do not run beside each other (or beside the
/// dozen simulators of the fault test) on a small machine.
static QUIET: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn quiet() -> std::sync::MutexGuard<'static, ()> {
    QUIET.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn openai_chat_timing_matches_configuration_and_event_log() {
    let _q = quiet();
    let sim = Sim::with_log(&["--ttft", "200ms", "--itl", "20ms", "--output-tokens", "16"]);
    let base = format!("{}/v1", sim.addr);
    // Timing can be disturbed by other processes on a busy machine: up to three attempts, each
    // checked in full; the first whose timing agrees passes.
    let mut problems = Vec::new();
    for attempt in 0..3 {
        let (v, code) = probe(&["--base-url", &base, "--model", "m"]);
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["outcome"], "success", "{v}");
        assert_eq!(v["output_tokens"], 16, "{v}");
        assert_eq!(v["token_source"], "usage", "{v}");
        assert!(v["input_tokens"].as_u64().is_some_and(|n| n > 0), "{v}");
        // Each event was its own write: no burst, one gap per pair of token events.
        assert_eq!(v["flags"], serde_json::json!([]), "{v}");
        assert_eq!(v["chunk_gaps_s"].as_array().map(Vec::len), Some(15), "{v}");

        // The server's record of this request.
        let lines = sim.log_lines(attempt + 1);
        let rec = &lines[attempt];
        assert_eq!(rec["path"], "/v1/chat/completions");
        assert_eq!(rec["fault"], Value::Null);
        assert_eq!(rec["end"], "complete");
        assert_eq!(rec["output_tokens"], 16);
        let events = rec["events"].as_array().expect("events");
        // role chunk + 16 tokens + finish + usage + [DONE]
        assert_eq!(events.len(), 20);
        assert_eq!(events.iter().filter(|e| e["token"] == true).count(), 16);
        // Events are recorded in order, each never before its due instant.
        let mut prev = 0.0;
        for e in events {
            let (due, t) = (f(e, "due_s"), f(e, "t_s"));
            assert!(t >= due && t >= prev, "{e}");
            prev = t;
        }
        let first = events
            .iter()
            .find(|e| e["token"] == true)
            .expect("a token event");
        assert_eq!(f(first, "due_s"), 0.2, "{first}");

        let ttft = f(&v, "ttft_s");
        let tpot = f(&v, "tpot_s");
        let sent = f(first, "t_s");
        let mut bad = Vec::new();
        if !(0.200..0.215).contains(&ttft) {
            bad.push(format!("ttft {ttft} not within 200..215 ms"));
        }
        if (tpot - 0.020).abs() >= 0.003 {
            bad.push(format!("tpot {tpot} not ~20 ms"));
        }
        // (d) the client's TTFT vs the server's send instant of the first token event.
        if (ttft - sent).abs() >= 0.005 {
            bad.push(format!(
                "client ttft {ttft} vs server send {sent}: {} ms apart",
                (ttft - sent) * 1e3
            ));
        }
        if bad.is_empty() {
            return;
        }
        problems.push(format!("attempt {attempt}: {}", bad.join("; ")));
    }
    panic!("timing never agreed:\n{}", problems.join("\n"));
}

#[test]
fn anthropic_completions_and_responses_succeed() {
    let _q = quiet();
    let sim = Sim::start(&["--ttft", "50ms", "--itl", "5ms", "--output-tokens", "12"]);
    let (v, code) = probe(&[
        "--api",
        "anthropic-messages",
        "--base-url",
        &sim.addr,
        "--model",
        "claude",
    ]);
    assert_eq!((code, v["outcome"].as_str()), (0, Some("success")), "{v}");
    assert_eq!(v["output_tokens"], 12, "{v}");
    assert_eq!(v["token_source"], "usage", "{v}");
    let ttft = f(&v, "ttft_s");
    assert!((0.050..0.065).contains(&ttft), "{v}");

    let base = format!("{}/v1", sim.addr);
    let (v, code) = probe(&[
        "--api",
        "openai-completions",
        "--base-url",
        &base,
        "--model",
        "m",
    ]);
    assert_eq!((code, v["outcome"].as_str()), (0, Some("success")), "{v}");
    assert_eq!(v["output_tokens"], 12, "{v}");

    let (v, code) = probe(&[
        "--api",
        "openai-responses",
        "--base-url",
        &base,
        "--model",
        "m",
    ]);
    assert_eq!((code, v["outcome"].as_str()), (0, Some("success")), "{v}");
    assert_eq!(v["output_tokens"], 12, "{v}");
    assert_eq!(v["token_source"], "usage", "{v}");

    // max_tokens caps the output (finish reason "length" is still a proper end).
    let (v, code) = probe(&["--base-url", &base, "--model", "m", "--max-tokens", "5"]);
    assert_eq!((code, v["output_tokens"].as_u64()), (0, Some(5)), "{v}");
}

#[test]
fn chunks_of_several_tokens_keep_ttft_and_tpot() {
    let _q = quiet();
    let sim = Sim::start(&[
        "--ttft",
        "100ms",
        "--itl",
        "10ms",
        "--output-tokens",
        "21",
        "--tokens-per-chunk",
        "4",
    ]);
    let base = format!("{}/v1", sim.addr);
    let (v, code) = probe(&["--base-url", &base, "--model", "m"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["output_tokens"], 21);
    assert!((0.100..0.115).contains(&f(&v, "ttft_s")), "{v}");
    assert!((f(&v, "tpot_s") - 0.010).abs() < 0.002, "{v}");
    // 1 + 5 chunks of 4 tokens: 5 gaps of 40 ms.
    let gaps = v["chunk_gaps_s"].as_array().expect("gaps");
    assert_eq!(gaps.len(), 5, "{v}");
}

/// One simulator per fault, every request faulted; the probe's error type.
fn fault_outcome(fault: &str, probe_args: &[&str]) -> Value {
    let sim = Sim::start(&[
        "--ttft",
        "30ms",
        "--itl",
        "5ms",
        "--output-tokens",
        "10",
        "--error-rate",
        "1",
        "--errors",
        fault,
    ]);
    let mut args = vec!["--model", "m"];
    let base = format!("{}/v1", sim.addr);
    if probe_args.contains(&"anthropic-messages") {
        args.extend(["--base-url", &sim.addr]);
    } else {
        args.extend(["--base-url", &base]);
    }
    args.extend(probe_args);
    let (v, code) = probe(&args);
    assert_eq!(code, 1, "{fault}: {v}");
    assert_ne!(v["outcome"], "success", "{fault}: {v}");
    assert_eq!(
        v["ttft_s"],
        Value::Null,
        "a failed probe records no TTFT: {v}"
    );
    v
}

#[test]
fn every_fault_gets_its_error_type() {
    let _q = quiet();
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        ("429", vec![], "rate_limited"),
        ("500", vec![], "server_error"),
        ("529", vec![], "overloaded"),
        ("401", vec![], "auth"),
        ("truncate", vec![], "truncated"),
        ("malformed", vec![], "malformed"),
        (
            "stall",
            vec!["--timeout-first-token", "1s"],
            "timeout_first_token",
        ),
        ("stall-mid", vec!["--timeout-idle", "1s"], "timeout_idle"),
        ("429", vec!["--api", "anthropic-messages"], "rate_limited"),
        ("529", vec!["--api", "anthropic-messages"], "overloaded"),
        ("truncate", vec!["--api", "anthropic-messages"], "truncated"),
        (
            "malformed",
            vec!["--api", "anthropic-messages"],
            "malformed",
        ),
    ];
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = cases
            .iter()
            .map(|(fault, args, _)| s.spawn(move || fault_outcome(fault, args)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("fault thread"))
            .collect()
    });
    for ((fault, args, want), v) in cases.iter().zip(&results) {
        assert_eq!(v["error_type"], *want, "fault {fault} {args:?}: {v}");
        if *fault == "429" {
            assert_eq!(v["retry_after_s"].as_f64(), Some(1.0), "{v}");
        }
    }
}

#[test]
fn stalled_requests_end_when_the_client_goes() {
    let sim = Sim::with_log(&["--ttft", "10ms", "--error-rate", "1", "--errors", "stall"]);
    let base = format!("{}/v1", sim.addr);
    let t = Instant::now();
    let (v, _) = probe(&[
        "--base-url",
        &base,
        "--model",
        "m",
        "--timeout-first-token",
        "500ms",
    ]);
    assert_eq!(v["error_type"], "timeout_first_token", "{v}");
    assert!(t.elapsed() < Duration::from_secs(5));
    // The server notices the disconnect and logs the request as ended by the client.
    let lines = sim.log_lines(1);
    assert_eq!(lines[0]["fault"], "stall");
    assert_eq!(lines[0]["end"], "client_gone");
    assert_eq!(
        lines[0]["events"].as_array().map(Vec::len),
        Some(1),
        "only the role chunk"
    );
}

#[test]
fn max_concurrency_queues_and_ttft_grows() {
    let _q = quiet();
    // One slot; each answer takes 300 ms + 9 * 10 ms = 390 ms, so three probes started together
    // queue behind each other even when a busy machine starts their processes 100 ms apart.
    let sim = Sim::with_log(&[
        "--ttft",
        "300ms",
        "--itl",
        "10ms",
        "--output-tokens",
        "10",
        "--max-concurrency",
        "1",
    ]);
    let base = format!("{}/v1", sim.addr);
    let mut ttfts: Vec<f64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|_| s.spawn(|| probe(&["--base-url", &base, "--model", "m"])))
            .collect();
        hs.into_iter()
            .map(|h| {
                let (v, code) = h.join().expect("probe thread");
                assert_eq!(code, 0, "{v}");
                f(&v, "ttft_s")
            })
            .collect()
    });
    ttfts.sort_by(f64::total_cmp);
    // The ground truth is the simulator's log of the same three requests: when each arrived
    // (wall clock), how long it waited for the slot, and when its events left (from arrival, the
    // wait included).
    struct Served {
        arrival: f64,
        queued: f64,
        first: f64,
        end: f64,
    }
    let mut served: Vec<Served> = sim
        .log_lines(3)
        .iter()
        .map(|r| {
            let events = r["events"].as_array().expect("events");
            let t = |e: &Value| f(e, "t_s");
            Served {
                arrival: r["arrival_unix_ns"].as_f64().expect("arrival") / 1e9,
                queued: f(r, "queued_s"),
                first: events
                    .iter()
                    .find(|e| e["token"] == true)
                    .map(t)
                    .expect("token"),
                end: events.last().map(t).expect("events"),
            }
        })
        .collect();
    served.sort_by(|a, b| (a.arrival + a.queued).total_cmp(&(b.arrival + b.queued)));
    // One slot: no two answers overlap (the server's own instants; 2 ms for its two clocks), and a
    // request that arrived while the slot was busy waited until the answer before it ended, and
    // not much longer (50 ms: the simulator's next task may wait for a CPU on a loaded machine).
    let mut waited = 0;
    for w in served.windows(2) {
        let prev_end = w[0].arrival + w[0].end;
        let start = w[1].arrival + w[1].queued;
        assert!(start >= prev_end - 0.002, "answers overlap with one slot");
        if w[1].arrival < prev_end {
            waited += 1;
            assert!(
                start - prev_end < 0.050,
                "queued {:.4} s, but the slot was free {:.4} s after arrival",
                w[1].queued,
                prev_end - w[1].arrival
            );
        }
    }
    assert!(
        served[0].queued < 0.005,
        "the first request found the slot free"
    );
    assert!(
        waited >= 1,
        "no request queued: the three probes arrived more than 390 ms apart"
    );
    // Each probe's TTFT is the server's (its first token event after arrival, the wait for the
    // slot included) seen from the client: more only by connection set-up and delivery (50 ms
    // allows a process that waited for a CPU on a loaded 2-core machine; the queueing steps are
    // 390 ms), and never less than the server's but for the log's own lateness: the simulator
    // stamps an event after its write returns, in user space, while the client's instant is the
    // kernel's receive stamp, which can come first (measured up to 0.19 ms; 0.5 ms allowed).
    let mut server_ttfts: Vec<f64> = served.iter().map(|s| s.first).collect();
    server_ttfts.sort_by(f64::total_cmp);
    for (client, server) in ttfts.iter().zip(&server_ttfts) {
        let over = client - server;
        assert!(
            (-0.0005..0.050).contains(&over),
            "probe TTFT {client:.4} s vs the simulator's {server:.4} s: {ttfts:?} vs {server_ttfts:?}"
        );
    }
    assert!(
        server_ttfts[2] > server_ttfts[0] + 0.3,
        "TTFT grows with the queue: {server_ttfts:?}"
    );
}

/// Sends raw HTTP/1.1 on one connection; returns everything read until the server closes.
fn raw_exchange(addr: &str, requests: &[String]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    for r in requests {
        s.write_all(r.as_bytes()).expect("write");
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn post(path: &str, body: &str, extra: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
}

#[test]
fn raw_http_keep_alive_request_ids_and_plain_json() {
    let sim = Sim::with_log(&["--ttft", "20ms", "--itl", "1ms", "--output-tokens", "3"]);
    let stream_body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let plain_body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    // Two requests pipelined on one keep-alive connection, then one that closes it.
    let text = raw_exchange(
        sim.host_port(),
        &[
            post(
                "/v1/chat/completions",
                stream_body,
                "X-Request-Id: trace-42\r\n",
            ),
            post("/v1/chat/completions", plain_body, "Connection: close\r\n"),
        ],
    );
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("x-request-id: trace-42\r\n"), "{text}");
    assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
    assert!(text.contains("data: [DONE]\n\n\r\n0\r\n\r\n"), "{text}");
    let second = text.split("0\r\n\r\n").nth(1).expect("a second response");
    assert!(second.starts_with("HTTP/1.1 200 OK\r\n"), "{second}");
    assert!(
        second.contains("\"object\":\"chat.completion\""),
        "{second}"
    );
    assert!(second.contains("\"completion_tokens\":3"), "{second}");
    let lines = sim.log_lines(2);
    assert_eq!(lines[0]["id"], "trace-42");
    assert_eq!(lines[0]["stream"], true);
    assert_eq!(lines[1]["stream"], false);

    // Other endpoints.
    let get = |p: &str| {
        raw_exchange(
            sim.host_port(),
            &[format!(
                "GET {p} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )],
        )
    };
    assert!(get("/health").contains("{\"status\":\"ok\"}"));
    assert!(get("/v1/models").contains("\"object\":\"list\""));
    assert!(get("/nope").starts_with("HTTP/1.1 404"));
    let bad = raw_exchange(
        sim.host_port(),
        &[post(
            "/v1/chat/completions",
            "{not json",
            "Connection: close\r\n",
        )],
    );
    assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
}

#[test]
fn seeded_jitter_is_reproducible() {
    let args = [
        "--ttft",
        "50ms",
        "--ttft-jitter",
        "20ms",
        "--itl",
        "2ms",
        "--itl-jitter",
        "1ms",
        "--output-tokens",
        "20",
        "--output-tokens-jitter",
        "10",
        "--seed",
        "42",
    ];
    let plan_of = || {
        let sim = Sim::with_log(&args);
        let base = format!("{}/v1", sim.addr);
        for _ in 0..3 {
            let (v, code) = probe(&["--base-url", &base, "--model", "m"]);
            assert_eq!(code, 0, "{v}");
        }
        sim.log_lines(3)
            .iter()
            .map(|r| {
                let dues: Vec<f64> = r["events"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|e| e["token"] == true)
                    .map(|e| f(e, "due_s"))
                    .collect();
                (r["output_tokens"].as_u64(), dues)
            })
            .collect::<Vec<_>>()
    };
    let a = plan_of();
    assert_eq!(a, plan_of());
    assert!(a[0] != a[1] || a[1] != a[2], "jitter had no effect: {a:?}");
    for (n, dues) in &a {
        assert_eq!(Some(dues.len() as u64), *n);
        assert!((0.030..=0.070).contains(&dues[0]), "{dues:?}");
    }
}

/// Runs `probe --input-tokens 64` against a simulator started with `sim_args`; returns the
/// probe's exit code, its JSON (absent when it printed none) and the requests the simulator
/// logged (its event log is the truth of what was sent).
fn calibrated_probe(sim_args: &[&str]) -> (i32, Option<Value>, usize) {
    let sim = Sim::with_log(sim_args);
    let out = Command::new(BIN)
        .args(["probe", "--format", "json", "--log.level", "warn"])
        .args(["--base-url", &format!("{}/v1", sim.addr), "--model", "m"])
        .args(["--input-tokens", "64"])
        .output()
        .expect("run tokenprobe probe");
    let code = out.status.code().unwrap_or(-1);
    let json: Option<Value> = serde_json::from_slice(&out.stdout).ok();
    let sent = match &json {
        Some(v) => {
            v["calibration"]["requests"]
                .as_u64()
                .map_or(0, |n| n as usize)
                + 1
        }
        // Calibration failed: "N requests" on stderr, and nothing after them.
        None => {
            let err = String::from_utf8_lossy(&out.stderr);
            err.split("calibration failed: ")
                .nth(1)
                .and_then(|t| t.split(' ').next())
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or_else(|| panic!("no calibration count in {err}"))
        }
    };
    (code, json, sim.log_lines(sent).len())
}

/// A calibration request that met a failing server is sent again, up to three times per length;
/// one that cannot succeed by trying again (401) is not. The simulator's seeded faults make the
/// draws known: with seed 4 at a 50% error rate, two of the first five requests fail.
#[test]
fn calibration_tries_again_only_where_the_server_may_recover() {
    let _q = quiet();
    let base = ["--ttft", "5ms", "--itl", "1ms", "--output-tokens", "4"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        base.iter().chain(extra).copied().collect()
    };
    let (code, json, logged) = calibrated_probe(&with(&[
        "--seed",
        "4",
        "--error-rate",
        "0.5",
        "--errors",
        "500",
    ]));
    let v = json.expect("probe JSON");
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["calibration"]["requests"], 5, "{v}");
    assert_eq!(
        v["calibration"]["points"].as_array().map(Vec::len),
        Some(3),
        "{v}"
    );
    assert_eq!(
        logged, 6,
        "five calibration requests and the probe reached the server"
    );

    let (code, json, logged) = calibrated_probe(&with(&["--error-rate", "1", "--errors", "500"]));
    assert_eq!(
        (code, json, logged),
        (1, None, 3),
        "three tries, then no probe"
    );

    let (code, json, logged) = calibrated_probe(&with(&["--error-rate", "1", "--errors", "401"]));
    assert_eq!(
        (code, json, logged),
        (1, None, 1),
        "an auth failure is not tried again"
    );
}
