//! Fault injection by a third-party mock: `llmock serve` (PyPI `llmock`), scripted
//! per request through `POST /_llmock/scenario`, for OpenAI chat (`/v1/chat/completions`)
//! and Anthropic Messages (`/anthropic/v1/messages`).
//!
//! 1. `probe_classifies_every_llmock_fault`: one `tokenprobe probe --format json` per
//!    fault and protocol, all at once (each request has its own model name, and
//!    its behaviours match only that model); each must give exactly the
//!    `error_type` docs/measurement.md assigns (401 auth, 429 rate_limited +
//!    retry_after_s, 500 server_error, 503 server_error / Anthropic
//!    `overloaded_error` overloaded, 529 overloaded, slow first token
//!    timeout_first_token, stall timeout_idle, disconnect and truncation truncated,
//!    corrupted chunk malformed), plus a success, and the contract's edge: a stream
//!    cut *after* the finish reason is a success. llmock's journal confirms each
//!    fault was injected.
//! 2. `serve_under_fault_mix_no_panic_no_leak`: `tokenprobe serve`, 20 jobs (10
//!    faults x 2 protocols, 1 s interval, 500 ms first-token and idle deadlines)
//!    for 7 s of permanent faults, then 5 s without them. Checks: no panic;
//!    `probe_errors_total{error_type}` counts exactly the injected type for every
//!    probe of its job; no probe outlives its deadline: every job keeps probing
//!    while faulted (probes_total grows between 3.5 s and 7 s), no tick is skipped
//!    as `overlap` (llmock's stalls last 3 s, beyond the 1 s interval, so a probe
//!    that waited them out would overlap), every job succeeds again once the faults
//!    (and stalls) end, tokenprobe never holds more connections to llmock than
//!    there are jobs, and SIGTERM ends it at once (10 s grace: a hanging probe
//!    would hold it).
//!
//! Needs `scripts/ci/install-fault-deps.sh` (llmock in the project venv); fails, never
//! skips, without it.

use crate::common;
use common::e2e;
use common::faults;

use e2e::{ERROR_TYPES, Samples, Watchdog};
use faults::{Llmock, Serve};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The scripted answer: 4 text events ("alpha ", "beta ", "gamma ", "delta"); llmock
/// reports usage 5 for it (its own token estimate).
const TEXT: &str = "alpha beta gamma delta";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Proto {
    OpenAi,
    Anthropic,
}

impl Fault {
    fn expect_for(&self, p: Proto) -> &'static str {
        match (p, self.expect_anthropic) {
            (Proto::Anthropic, Some(e)) => e,
            _ => self.expect,
        }
    }
}

impl Proto {
    fn api(self) -> &'static str {
        match self {
            Proto::OpenAi => "openai-chat",
            Proto::Anthropic => "anthropic-messages",
        }
    }
    /// `--base-url` such that the protocol's path hits llmock's endpoint.
    fn base_url(self, llmock: &str) -> String {
        match self {
            Proto::OpenAi => format!("{llmock}/v1"),
            Proto::Anthropic => format!("{llmock}/anthropic"),
        }
    }
    fn short(self) -> &'static str {
        match self {
            Proto::OpenAi => "oa",
            Proto::Anthropic => "an",
        }
    }
    /// SSE events llmock sends before the first token-bearing one: OpenAI a
    /// role-only chunk; Anthropic message_start, content_block_start, ping.
    fn events_before_first_token(self) -> u32 {
        match self {
            Proto::OpenAi => 1,
            Proto::Anthropic => 3,
        }
    }
    /// Events up to and including the finish reason: OpenAI role + 4 text chunks +
    /// the `finish_reason: "stop"` chunk; Anthropic 3 + 4 deltas +
    /// content_block_stop + message_delta (`stop_reason`).
    fn events_through_finish_reason(self) -> u32 {
        match self {
            Proto::OpenAi => 6,
            Proto::Anthropic => 9,
        }
    }
}

/// One scripted fault and what the contract says tokenprobe must report.
struct Fault {
    name: &'static str,
    /// Behaviours besides the scripted reply; `match.model` is added.
    behaviors: fn(Proto) -> Vec<Value>,
    args: &'static [&'static str],
    /// `success` or the error_type.
    expect: &'static str,
    /// Where the Anthropic answer is classified differently.
    expect_anthropic: Option<&'static str>,
    /// Prefix of the `fault` llmock records in its journal for the request.
    llmock_fault: Option<fn(Proto) -> String>,
}

fn faults() -> Vec<Fault> {
    vec![
        Fault {
            name: "ok",
            behaviors: |_| vec![],
            args: &[],
            expect: "success",
            expect_anthropic: None,
            llmock_fault: None,
        },
        Fault {
            name: "401",
            behaviors: |_| vec![json!({"type": "fail", "status": 401})],
            args: &[],
            expect: "auth",
            expect_anthropic: None,
            llmock_fault: Some(|_| "scenario:401".into()),
        },
        Fault {
            name: "429",
            behaviors: |_| vec![json!({"type": "fail", "status": 429, "retry_after": 2.5})],
            args: &[],
            expect: "rate_limited",
            expect_anthropic: None,
            llmock_fault: Some(|_| "scenario:429".into()),
        },
        Fault {
            name: "500",
            behaviors: |_| vec![json!({"type": "fail", "status": 500})],
            args: &[],
            expect: "server_error",
            expect_anthropic: None,
            llmock_fault: Some(|_| "scenario:500".into()),
        },
        // llmock's 503 is Anthropic's `overloaded_error` (OpenAI: `server_error`,
        // `service_unavailable`); docs/measurement.md puts "an error whose type says
        // overloaded" before server_error.
        Fault {
            name: "503",
            behaviors: |_| vec![json!({"type": "fail", "status": 503})],
            args: &[],
            expect: "server_error",
            expect_anthropic: Some("overloaded"),
            llmock_fault: Some(|_| "scenario:503".into()),
        },
        Fault {
            name: "529",
            behaviors: |_| vec![json!({"type": "fail", "status": 529})],
            args: &[],
            expect: "overloaded",
            expect_anthropic: None,
            llmock_fault: Some(|_| "scenario:529".into()),
        },
        Fault {
            name: "slow-first-token",
            behaviors: |_| vec![json!({"type": "slow_first_token", "seconds": 2})],
            args: &["--timeout-first-token", "400ms"],
            expect: "timeout_first_token",
            expect_anthropic: None,
            llmock_fault: None,
        },
        Fault {
            name: "stall",
            behaviors: |p| {
                vec![
                    json!({"type": "stream_fault", "kind": "stall", "stall_seconds": 2,
                            "after_chunks": p.events_before_first_token() + 1}),
                ]
            },
            args: &["--timeout-idle", "400ms"],
            expect: "timeout_idle",
            expect_anthropic: None,
            llmock_fault: Some(|p| format!("stream:stall@{}", p.events_before_first_token() + 1)),
        },
        Fault {
            name: "disconnect",
            behaviors: |p| {
                vec![json!({"type": "stream_fault", "kind": "disconnect",
                            "after_chunks": p.events_before_first_token() + 1})]
            },
            args: &[],
            expect: "truncated",
            expect_anthropic: None,
            llmock_fault: Some(|p| {
                format!("stream:disconnect@{}", p.events_before_first_token() + 1)
            }),
        },
        Fault {
            name: "truncate",
            behaviors: |p| {
                vec![json!({"type": "stream_fault", "kind": "truncate",
                            "after_chunks": p.events_before_first_token() + 1})]
            },
            args: &[],
            expect: "truncated",
            expect_anthropic: None,
            llmock_fault: Some(|p| {
                format!("stream:truncate@{}", p.events_before_first_token() + 1)
            }),
        },
        Fault {
            name: "malformed",
            behaviors: |p| {
                vec![json!({"type": "stream_fault", "kind": "malformed",
                            "after_chunks": p.events_before_first_token() + 1})]
            },
            args: &[],
            expect: "malformed",
            expect_anthropic: None,
            llmock_fault: Some(|p| {
                format!("stream:malformed@{}", p.events_before_first_token() + 1)
            }),
        },
        // llmock's `truncate` cuts at a chunk index; at or past the finish reason the
        // stream has "a proper end (a finish reason ...)" by docs/measurement.md, ended by
        // the connection's close without `[DONE]` / `message_stop`: a success.
        Fault {
            name: "truncate-after-finish",
            behaviors: |p| {
                vec![json!({"type": "stream_fault", "kind": "truncate",
                            "after_chunks": p.events_through_finish_reason()})]
            },
            args: &[],
            expect: "success",
            expect_anthropic: None,
            llmock_fault: Some(|p| format!("stream:truncate@{}", p.events_through_finish_reason())),
        },
    ]
}

fn model(p: Proto, fault: &str) -> String {
    format!("{}-{fault}", p.short())
}

/// Checks a successful report: the timeline is ordered, TTFT + TPOT·(N-1) ≤ E2E,
/// nothing is flagged.
fn check_success(what: &str, v: &Value, p: Proto, after_finish_cut: bool) {
    let f = |k: &str| {
        v[k].as_f64()
            .unwrap_or_else(|| panic!("{what}: {k} missing: {v}"))
    };
    let (ttfb, ttft, e2e) = (f("ttfb_s"), f("ttft_s"), f("e2e_s"));
    assert!(
        ttfb > 0.0 && ttfb <= ttft && ttft <= e2e,
        "{what}: timeline {v}"
    );
    assert_eq!(
        v["ttfo_s"].as_f64(),
        Some(ttft),
        "{what}: text from the first token: {v}"
    );
    let n = v["output_tokens"].as_f64().expect("output_tokens");
    // llmock's usage says 5 for 4 text events. The OpenAI cut after the finish
    // chunk loses the usage chunk, so N comes from the 4 events there.
    let (want_n, want_src) = if after_finish_cut && p == Proto::OpenAi {
        (4.0, "events")
    } else {
        (5.0, "usage")
    };
    assert_eq!(n, want_n, "{what}: output_tokens {v}");
    assert_eq!(v["token_source"], want_src, "{what}: token_source {v}");
    assert_eq!(v["retry_after_s"], Value::Null, "{what}: {v}");
    // llmock spaces its chunks 20 ms apart, but when its (single-threaded) process waits for a
    // CPU on a loaded machine it writes the queued chunks at once: then they really arrive within
    // 1 ms, and the contract says to flag that and observe no TPOT or gaps. Either way the probe
    // must report what arrived, consistently.
    if v["flags"] == json!(["burst_delivery"]) {
        eprintln!("{what}: the chunks arrived in a burst (a loaded machine): {v}");
        assert_eq!(v["tpot_s"], Value::Null, "{what}: TPOT of a burst: {v}");
        assert_eq!(v["chunk_gaps_s"], json!([]), "{what}: gaps of a burst: {v}");
        return;
    }
    assert_eq!(v["flags"], json!([]), "{what}: flags {v}");
    let tpot = f("tpot_s");
    assert!(
        ttft + tpot * (n - 1.0) <= e2e + 1e-9,
        "{what}: TTFT + TPOT(N-1) > E2E: {v}"
    );
    assert_eq!(
        v["chunk_gaps_s"].as_array().map(Vec::len),
        Some(3),
        "{what}: 4 token events give 3 gaps: {v}"
    );
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, its checks in the order a reader follows the run"
)]
fn probe_classifies_every_llmock_fault() {
    const TEST: &str = "probe_classifies_every_llmock_fault";
    let _wd = Watchdog::new(TEST, Duration::from_secs(120));
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    // 20 ms between chunks, so a success is not a burst (TPOT is observed) unless the machine is
    // so loaded that llmock writes its chunks late and together (see `check_success`).
    let llmock = Llmock::start(TEST, dir.path(), &["--stream-chunk-delay-ms", "20"]);

    let protos = [Proto::OpenAi, Proto::Anthropic];
    let faults = faults();
    // Every request gets its own model name, and every behaviour matches only it,
    // so all probes run at once.
    let mut behaviors = Vec::new();
    for p in protos {
        for f in &faults {
            let m = model(p, f.name);
            behaviors.push(json!({"type": "reply", "text": TEXT, "match": {"model": m}}));
            for mut b in (f.behaviors)(p) {
                b["match"] = json!({"model": m, "stream": true});
                behaviors.push(b);
            }
        }
    }
    llmock.scenario(Value::Array(behaviors));

    let results: Vec<(Proto, &Fault, i32, Value, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = protos
            .iter()
            .flat_map(|&p| faults.iter().map(move |f| (p, f)))
            .map(|(p, f)| {
                let url = llmock.url.clone();
                s.spawn(move || {
                    let mut args: Vec<String> = [
                        "--api",
                        p.api(),
                        "--base-url",
                        &p.base_url(&url),
                        "--model",
                        &model(p, f.name),
                        "--max-tokens",
                        "16",
                        "--timeout-total",
                        "10s",
                    ]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                    args.extend(f.args.iter().map(|s| s.to_string()));
                    let (code, v, err) = faults::probe_json(&args, Duration::from_secs(30));
                    (p, f, code, v, err)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("probe thread"))
            .collect()
    });

    // The table first, so a failure shows everything observed.
    eprintln!("\nllmock fault x protocol -> tokenprobe probe (error_type, exit code, e2e_s)");
    eprintln!(
        "{:<24}{:<38}{:<38}",
        "fault", "openai-chat", "anthropic-messages"
    );
    for f in &faults {
        let cell = |p: Proto| {
            let (_, _, code, v, _) = results
                .iter()
                .find(|(q, g, ..)| *q == p && g.name == f.name)
                .expect("result");
            let et = v["error_type"].as_str().unwrap_or("success");
            format!(
                "{et} (exit {code}, {:.3}s)",
                v["e2e_s"].as_f64().unwrap_or(f64::NAN)
            )
        };
        eprintln!(
            "{:<24}{:<38}{:<38}",
            f.name,
            cell(Proto::OpenAi),
            cell(Proto::Anthropic)
        );
    }

    let mut problems = Vec::new();
    for (p, f, code, v, err) in &results {
        let what = format!("{} {}", p.api(), f.name);
        let got = if v["outcome"] == "success" {
            "success"
        } else {
            v["error_type"].as_str().unwrap_or("?")
        };
        let expect = f.expect_for(*p);
        if got != expect {
            problems.push(format!(
                "{what}: expected {expect}, got {got}: {v}\nstderr: {err}"
            ));
            continue;
        }
        let want_code = if expect == "success" { 0 } else { 1 };
        if *code != want_code {
            problems.push(format!("{what}: exit code {code}, expected {want_code}"));
        }
        if expect == "success" {
            check_success(&what, v, *p, f.name == "truncate-after-finish");
            continue;
        }
        // A failed probe never records a TTFT (nor tokens).
        for k in ["ttft_s", "ttfo_s", "tpot_s", "output_tokens"] {
            assert_eq!(
                v[k],
                Value::Null,
                "{what}: {k} must be null on failure: {v}"
            );
        }
        let e2e = v["e2e_s"].as_f64().unwrap_or(f64::NAN);
        match f.name {
            // llmock sends `retry-after: 3` and `retry-after-ms: 2500`; the
            // milliseconds win.
            "429" => assert_eq!(v["retry_after_s"].as_f64(), Some(2.5), "{what}: {v}"),
            // 529 gets llmock's default `retry-after: 1` / `retry-after-ms: 1000`.
            "529" => assert_eq!(v["retry_after_s"].as_f64(), Some(1.0), "{what}: {v}"),
            // The failure instant is the deadline (400 ms), not llmock's 2 s.
            "slow-first-token" | "stall" => assert!(
                (0.4..1.2).contains(&e2e),
                "{what}: failure at {e2e}s, deadline 0.4s: {v}"
            ),
            _ => {}
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));

    // llmock's own journal confirms each fault was the one injected.
    let want: BTreeMap<String, String> = protos
        .iter()
        .flat_map(|&p| {
            faults
                .iter()
                .filter_map(move |f| f.llmock_fault.map(|lf| (model(p, f.name), lf(p))))
        })
        .collect();
    let journal = common::e2e::wait_for(
        "llmock's journal to hold every faulted request",
        Duration::from_secs(10),
        || {
            let recs = llmock.requests();
            let by_model: BTreeMap<String, String> = recs
                .iter()
                .filter_map(|r| {
                    Some((
                        r["model"].as_str()?.to_string(),
                        r["fault"].as_str().unwrap_or("").to_string(),
                    ))
                })
                .collect();
            want.keys()
                .all(|m| by_model.contains_key(m))
                .then_some(by_model)
        },
    );
    for (m, label) in &want {
        assert_eq!(
            journal.get(m),
            Some(label),
            "llmock journal: fault of {m} (all: {journal:?})"
        );
    }
    eprintln!("{TEST}: ok in {:.1}s", started.elapsed().as_secs_f64());
}

// ------------------------------------------------------------------ serve

/// A `serve` job's fault: llmock behaviour (permanent, for its model) and the
/// error_type every probe of the job must get.
struct Mix {
    name: &'static str,
    behavior: fn(Proto) -> Option<Value>,
    expect: Option<&'static str>,
}

/// A stream fault right after the first token-bearing event; a stall lasts 3 s,
/// beyond the 500 ms idle deadline, and then ends.
fn sf(kind: &str, p: Proto) -> Value {
    json!({"type": "stream_fault", "kind": kind, "stall_seconds": 3,
           "after_chunks": p.events_before_first_token() + 1})
}

fn mix() -> Vec<Mix> {
    vec![
        Mix {
            name: "ok",
            behavior: |_| None,
            expect: None,
        },
        Mix {
            name: "401",
            behavior: |_| Some(json!({"type": "fail", "status": 401})),
            expect: Some("auth"),
        },
        // Retry-After 1.5 s > the 1 s interval: the target's next tick is skipped.
        Mix {
            name: "429",
            behavior: |_| Some(json!({"type": "fail", "status": 429, "retry_after": 1.5})),
            expect: Some("rate_limited"),
        },
        Mix {
            name: "500",
            behavior: |_| Some(json!({"type": "fail", "status": 500})),
            expect: Some("server_error"),
        },
        Mix {
            name: "529",
            behavior: |_| Some(json!({"type": "fail", "status": 529, "retry_after": 0.2})),
            expect: Some("overloaded"),
        },
        Mix {
            name: "slow",
            behavior: |_| Some(json!({"type": "slow_first_token", "seconds": 3})),
            expect: Some("timeout_first_token"),
        },
        Mix {
            name: "stall",
            behavior: |p| Some(sf("stall", p)),
            expect: Some("timeout_idle"),
        },
        Mix {
            name: "disconnect",
            behavior: |p| Some(sf("disconnect", p)),
            expect: Some("truncated"),
        },
        Mix {
            name: "truncate",
            behavior: |p| Some(sf("truncate", p)),
            expect: Some("truncated"),
        },
        Mix {
            name: "malformed",
            behavior: |p| Some(sf("malformed", p)),
            expect: Some("malformed"),
        },
    ]
}

fn job_labels(m: &str) -> [(&str, &str); 3] {
    [("target", m), ("model", m), ("prompt", "p")]
}

/// A scrape that is consistent: every job's probes_total equals its errors plus
/// successes (retried if it catches a probe between its increments).
fn settled_metrics(serve: &mut Serve, jobs: &[(String, Option<&str>)]) -> Samples {
    let mut m = serve.metrics();
    // A probe's counters are recorded one after another: poll until a scrape falls between two
    // probes (at most 5 s; the test's own checks then say what was inconsistent).
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let consistent = jobs.iter().all(|(j, _)| {
            let l = job_labels(j);
            let probes = m.sum("tokenprobe_probes_total", &l);
            let errors = m.sum("tokenprobe_probe_errors_total", &l);
            let ok = m.sum("tokenprobe_time_to_first_token_seconds_count", &l);
            (probes - errors - ok).abs() < 0.5
        });
        if consistent {
            break;
        }
        std::thread::sleep(Duration::from_millis(30));
        m = serve.metrics();
    }
    m
}

/// Runs for `d`, sampling every 100 ms the connections `pid` holds open to `port`;
/// returns the largest count.
fn watch_connections(pid: u32, port: u16, d: Duration) -> usize {
    let mut max = 0;
    let t = Instant::now();
    while t.elapsed() < d {
        max = max.max(faults::established_to(pid, port));
        std::thread::sleep(Duration::from_millis(100));
    }
    max
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, its checks in the order a reader follows the run"
)]
fn serve_under_fault_mix_no_panic_no_leak() {
    const TEST: &str = "serve_under_fault_mix_no_panic_no_leak";
    // Faults for 7 s (scraped at 3.5 s and 7 s), then 5 s without them.
    const HALF_FAULTS: Duration = Duration::from_millis(3500);
    const RECOVERY: Duration = Duration::from_secs(5);
    let _wd = Watchdog::new(TEST, Duration::from_secs(120));
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let llmock = Llmock::start(TEST, dir.path(), &["--stream-chunk-delay-ms", "5"]);

    let protos = [Proto::OpenAi, Proto::Anthropic];
    let mix = mix();
    // Permanent behaviours (`times: null`), one model per (protocol, fault), each on
    // its own target (a Retry-After pauses a whole target).
    let reply = json!({"type": "reply", "text": TEXT, "times": null});
    let mut behaviors = vec![reply.clone()];
    let mut targets = String::new();
    let mut jobs: Vec<(String, Option<&str>)> = Vec::new();
    for p in protos {
        for f in &mix {
            let m = model(p, f.name);
            if let Some(mut b) = (f.behavior)(p) {
                b["times"] = Value::Null;
                b["match"] = json!({"model": m});
                behaviors.push(b);
            }
            targets.push_str(&format!(
                "  - {{name: {m}, base_url: \"{}\", api: {}, models: [{m}]}}\n",
                p.base_url(&llmock.url),
                p.api()
            ));
            jobs.push((m, f.expect));
        }
    }
    llmock.scenario(Value::Array(behaviors));
    let config = format!(
        "defaults:\n  interval: 1s\n  timeouts: {{connect: 2s, first_token: 500ms, idle: 500ms, total: 5s}}\n\
         prompts:\n  - {{name: p, messages: [{{role: user, content: \"Say hello\"}}], max_tokens: 16}}\n\
         targets:\n{targets}"
    );
    let mut serve = Serve::start(dir.path(), "tokenprobe-serve", &config, &[]);
    let pid = serve.proc.id();

    // Each probe opens its own connection and a job has at most one probe in
    // flight, so more connections to llmock than jobs means probes outlive their
    // deadlines (leaked tasks or sockets).
    let mut max_conns = watch_connections(pid, llmock.port, HALF_FAULTS);
    let mid = settled_metrics(&mut serve, &jobs);
    max_conns = max_conns.max(watch_connections(pid, llmock.port, HALF_FAULTS));
    let faulted = settled_metrics(&mut serve, &jobs);
    // The faults end (llmock's stalls of 3 s run out by themselves); every job must
    // come back to successes on its next ticks.
    let r = e2e::http_request_within(
        "DELETE",
        &format!("{}/_llmock/scenario", llmock.url),
        &[],
        b"",
        faults::HTTP_TIMEOUT,
    );
    assert_eq!(r.status, 200, "llmock DELETE scenario: {}", r.body);
    llmock.scenario(json!([reply]));
    max_conns = max_conns.max(watch_connections(pid, llmock.port, RECOVERY));
    let end = settled_metrics(&mut serve, &jobs);

    eprintln!(
        "\n{:<16}{:>7}{:>6}  {:<30}{:>9}{:>8}{:>8}",
        "job", "probes", "(mid)", "errors during faults", "ok after", "overlap", "rl-skip"
    );
    let mut problems = Vec::new();
    for (m, expect) in &jobs {
        let l = job_labels(m);
        let probes_mid = mid.sum("tokenprobe_probes_total", &l);
        let probes = faulted.sum("tokenprobe_probes_total", &l);
        let errors_by_type = |s: &Samples, problems: &mut Vec<String>| {
            let mut by_type = BTreeMap::new();
            for et in ERROR_TYPES {
                let mut w = l.to_vec();
                w.push(("error_type", et));
                if !s.has("tokenprobe_probe_errors_total", &w) {
                    problems.push(format!(
                        "{m}: series probe_errors_total{{error_type={et}}} missing"
                    ));
                }
                let n = s.sum("tokenprobe_probe_errors_total", &w);
                if n > 0.0 {
                    by_type.insert(et.to_string(), n);
                }
            }
            by_type
        };
        let by_type = errors_by_type(&faulted, &mut problems);
        let errors_end: f64 = errors_by_type(&end, &mut problems).values().sum();
        let errors_faulted: f64 = by_type.values().sum();
        let ok = |s: &Samples| s.sum("tokenprobe_time_to_first_token_seconds_count", &l);
        let ok_after = ok(&end) - ok(&faulted);
        let skip = |reason: &str| {
            let mut w = l.to_vec();
            w.push(("reason", reason));
            end.sum("tokenprobe_probes_skipped_total", &w)
        };
        let (overlap, rl_skip) = (skip("overlap"), skip("rate_limited"));
        eprintln!(
            "{m:<16}{probes:>7}{probes_mid:>6}  {:<30}{ok_after:>9}{overlap:>8}{rl_skip:>8}",
            format!("{by_type:?}")
        );

        // Under faults every job keeps probing: its count grew over the second
        // half, at about one probe a second.
        if probes <= probes_mid {
            problems.push(format!(
                "{m}: probes_total stuck at {probes} (mid {probes_mid})"
            ));
        }
        let min_probes = if *expect == Some("rate_limited") {
            3.0
        } else {
            5.0
        };
        if probes < min_probes {
            problems.push(format!("{m}: only {probes} probes in 7s at a 1s interval"));
        }
        match expect {
            None => {
                if !by_type.is_empty() {
                    problems.push(format!("{m}: errors {by_type:?}, expected none"));
                }
            }
            Some(et) => {
                // Every probe of the job failed, with exactly the injected type.
                let n = by_type.get(*et).copied().unwrap_or(0.0);
                if by_type.len() != 1 || n != probes {
                    problems.push(format!(
                        "{m}: errors {by_type:?} over {probes} probes, expected all {et}"
                    ));
                }
            }
        }
        // After the faults end: successes on the next ticks (one probe that was in
        // flight at the switch may still fail).
        if ok_after < 2.0 || errors_end - errors_faulted > 1.0 {
            problems.push(format!(
                "{m}: after the faults ended {ok_after} successes, {} more errors",
                errors_end - errors_faulted
            ));
        }
        // No tick found the previous probe still running: every probe, stalled
        // ones included, ended at its 500 ms deadline within the 1 s interval.
        if overlap > 1.0 {
            problems.push(format!("{m}: {overlap} overlap skips"));
        }
        if *expect == Some("rate_limited") && rl_skip < 1.0 {
            problems.push(format!(
                "{m}: Retry-After 1.5s at a 1s interval skipped no tick (rate_limited)"
            ));
        }
    }
    eprintln!(
        "max open connections tokenprobe -> llmock: {max_conns} (jobs: {})",
        jobs.len()
    );
    if max_conns > jobs.len() {
        problems.push(format!(
            "{max_conns} connections open to llmock at once, more than the {} jobs: \
             probes outlive their deadlines",
            jobs.len()
        ));
    }

    // No panic, and SIGTERM ends it at once: no probe is left hanging (the
    // shutdown grace is 10 s).
    serve.proc.assert_running();
    match serve.proc.signal_and_wait("-TERM", Duration::from_secs(8)) {
        Some((st, took)) => {
            eprintln!("SIGTERM -> {st} after {:.2}s", took.as_secs_f64());
            if !st.success() {
                problems.push(format!("serve exited with {st} after SIGTERM"));
            }
            if took > Duration::from_secs(3) {
                problems.push(format!("shutdown took {took:?}: a probe was hanging"));
            }
        }
        None => problems.push("serve did not exit within 8s of SIGTERM".into()),
    }
    let out = serve.proc.stderr() + &serve.proc.stdout();
    let panics: Vec<&str> = out.lines().filter(|l| l.contains("panicked")).collect();
    if !panics.is_empty() {
        problems.push(format!("tokenprobe panicked:\n{}", panics.join("\n")));
    }
    assert!(
        problems.is_empty(),
        "{}\n{}",
        problems.join("\n"),
        serve.proc.logs()
    );
    eprintln!("{TEST}: ok in {:.1}s", started.elapsed().as_secs_f64());
}
