//! What tokenprobe puts on the wire, per protocol and option (docs/measurement.md "Requests"; issue:
//! Azure style, extra headers and body fields, nonce, content check), checked on the requests the
//! in-repo replay server received.

use crate::common;

use common::case::Case;
use common::replay_server::{ReceivedRequest, ReplayHandle, ReplayServer};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::process::{Command, Output};

async fn serve_case(name: &str) -> (SocketAddr, ReplayHandle) {
    let case = Case::load(&common::cases_dir().join(format!("{name}.txt"))).expect("case");
    ReplayServer::start(&case).await.expect("replay server")
}

fn probe(args: &[&str], envs: &[(&str, &str)]) -> (Output, Value) {
    let mut cmd = Command::new(common::tokenprobe_bin());
    cmd.arg("probe").args(args).args(["--format", "json"]);
    if !args.contains(&"--config.file") {
        // A config's target says its own proxy (`proxy: none` in the configs below).
        cmd.args(["--proxy", "none"]);
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run tokenprobe probe");
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, v)
}

fn only_request(h: &ReplayHandle) -> ReceivedRequest {
    let reqs = h.requests();
    assert_eq!(reqs.len(), 1, "exactly one request per probe");
    reqs.into_iter().next().expect("one request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_chat_request_shape_and_azure_style_auth() {
    let (addr, h) = serve_case("01-role-only-first-chunk").await;
    let base = format!("http://{addr}/openai/deployments/d");
    let (out, v) = probe(
        &[
            "--base-url",
            &base,
            "--model",
            "gpt",
            "--api-key-env",
            "TP_KEY",
            "--auth",
            "api-key",
            "--query",
            "api-version=2024-10-21",
            "--header",
            "X-Team=sre",
            "--max-tokens",
            "7",
        ],
        &[("TP_KEY", "sk-azure-test")],
    );
    assert!(out.status.success(), "{v}");
    let r = only_request(&h);
    assert_eq!(r.method, "POST");
    assert_eq!(
        r.target,
        "/openai/deployments/d/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(r.header("api-key"), Some("sk-azure-test"));
    assert_eq!(
        r.header("authorization"),
        None,
        "the key goes only in its protocol's header"
    );
    assert_eq!(r.header("x-team"), Some("sre"));
    assert_eq!(r.header("accept-encoding"), Some("identity"));
    let b = r.body_json().expect("json");
    assert_eq!(b["stream"], json!(true));
    assert_eq!(b["stream_options"], json!({"include_usage": true}));
    assert_eq!(b["max_tokens"], json!(7));
    assert_eq!(b["model"], json!("gpt"));
    // The key never reaches the output.
    assert!(!String::from_utf8_lossy(&out.stdout).contains("sk-azure-test"));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("sk-azure-test"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_by_default_and_usage_can_be_switched_off() {
    let (addr, h) = serve_case("01-role-only-first-chunk").await;
    let (out, _) = probe(
        &[
            "--base-url",
            &format!("http://{addr}/v1"),
            "--model",
            "m",
            "--api-key-env",
            "TP_KEY",
            "--no-usage",
        ],
        &[("TP_KEY", "sk-b")],
    );
    assert!(out.status.success());
    let r = only_request(&h);
    assert_eq!(r.header("authorization"), Some("Bearer sk-b"));
    assert!(r.body_json().expect("json").get("stream_options").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_headers_and_body() {
    let (addr, h) = serve_case("10-anthropic-ping-events").await;
    let (out, v) = probe(
        &[
            "--base-url",
            &format!("http://{addr}"),
            "--model",
            "claude",
            "--api",
            "anthropic-messages",
            "--api-key-env",
            "TP_KEY",
        ],
        &[("TP_KEY", "sk-ant")],
    );
    assert!(out.status.success(), "{v}");
    let r = only_request(&h);
    assert_eq!(r.target, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some("sk-ant"));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.header("authorization"), None);
    let b = r.body_json().expect("json");
    assert_eq!(b["stream"], json!(true));
    assert_eq!(b["max_tokens"], json!(64));
    assert_eq!(b["messages"][0]["role"], json!("user"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_and_responses_paths() {
    for (api, path) in [
        ("openai-completions", "/v1/completions"),
        ("openai-responses", "/v1/responses"),
    ] {
        let (addr, h) = serve_case("01-role-only-first-chunk").await;
        let _ = probe(
            &[
                "--base-url",
                &format!("http://{addr}/v1"),
                "--model",
                "m",
                "--api",
                api,
            ],
            &[],
        );
        let r = only_request(&h);
        assert_eq!(r.target, path, "{api}");
        let b = r.body_json().expect("json");
        assert_eq!(b["stream"], json!(true), "{api}");
        match api {
            "openai-completions" => assert!(b["prompt"].is_string()),
            _ => assert!(b["input"].is_array() && b.get("stream_options").is_none()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nonce_makes_every_prompt_unique() {
    let (addr, h) = serve_case("01-role-only-first-chunk").await;
    for _ in 0..2 {
        let _ = probe(
            &[
                "--base-url",
                &format!("http://{addr}/v1"),
                "--model",
                "m",
                "--prompt",
                "Say hi",
                "--nonce",
            ],
            &[],
        );
    }
    let prompts: Vec<String> = h
        .requests()
        .iter()
        .map(|r| {
            r.body_json().expect("json")["messages"][0]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(prompts.len(), 2);
    assert_ne!(prompts[0], prompts[1]);
    assert!(
        prompts
            .iter()
            .all(|p| p.ends_with("Say hi") && p.starts_with('[')),
        "{prompts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_check_fails_as_validation_failed() {
    let (addr, _h) = serve_case("01-role-only-first-chunk").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("c.yml");
    let write = |regex: &str, min: u64| {
        std::fs::write(
            &cfg,
            format!(
                "prompts:\n  - name: p\n    messages: [{{role: user, content: hi}}]\n    expect: {{regex: '{regex}', min_output_tokens: {min}}}\n\
                 targets:\n  - {{name: t, base_url: \"http://{addr}/v1\", models: [m], proxy: none}}\n"
            ),
        )
        .expect("write config");
    };
    let cfg_s = cfg.display().to_string();
    write("(?i)hello", 1);
    let (out, v) = probe(&["--config.file", &cfg_s, "--target", "t"], &[]);
    assert!(out.status.success(), "the answer is \"Hello world!\": {v}");
    write("goodbye", 1);
    let (out, v) = probe(&["--config.file", &cfg_s, "--target", "t"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(v["error_type"], json!("validation_failed"));
    assert_eq!(
        v["ttft_s"],
        Value::Null,
        "a failed probe never records a TTFT"
    );
    write("hello", 10);
    let (_, v) = probe(&["--config.file", &cfg_s, "--target", "t"], &[]);
    assert_eq!(v["error_type"], json!("validation_failed"), "3 tokens < 10");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_usage_exits_2() {
    let out = Command::new(common::tokenprobe_bin())
        .args(["probe", "--model", "m"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(common::tokenprobe_bin())
        .args(["probe", "--base-url", "ftp://x", "--model", "m"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(common::tokenprobe_bin())
        .args([
            "probe",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--api-key-env",
            "TOKENPROBE_SURELY_UNSET",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TOKENPROBE_SURELY_UNSET"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_query_and_url_never_reach_the_output() {
    // Nothing listens on port 9: the failure message names the URL, which must be redacted.
    let out = Command::new(common::tokenprobe_bin())
        .args([
            "probe",
            "--base-url",
            "http://user:PWSECRET@127.0.0.1:9/v1",
            "--model",
            "m",
        ])
        .args(["--query", "api-key=QSECRET", "--proxy", "none"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("connect"), "{all}");
    assert!(
        !all.contains("QSECRET") && !all.contains("PWSECRET"),
        "{all}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_deadlines_are_usage_errors() {
    let out = Command::new(common::tokenprobe_bin())
        .args([
            "probe",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--timeout-total",
            "500000000000y",
        ])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_error_body_ends_at_the_first_token_deadline() {
    // A 500 head, then a body that never completes: the head decides the type (server_error,
    // docs/measurement.md ruling 5); the body is read for the message only, until the first-token
    // deadline, which is the failure instant (not the total deadline).
    let raw = b"#---- RAW ----\n%%SEG t=0.050s%%\nHTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{\"error\":%%EOF t=5.000s%%\n";
    let case = Case::parse("stalled-500", raw).expect("case");
    let (addr, _h) = ReplayServer::start(&case).await.expect("replay server");
    let (out, v) = probe(
        &[
            "--base-url",
            &format!("http://{addr}/v1"),
            "--model",
            "m",
            "--timeout-first-token",
            "500ms",
            "--timeout-total",
            "3s",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(v["error_type"], json!("server_error"), "{v}");
    let e2e = v["e2e_s"].as_f64().expect("e2e");
    assert!(
        (0.5..0.6).contains(&e2e),
        "failure instant is the deadline: {e2e}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("HTTP 500") && stderr.contains("first_token"),
        "the message names the status and the deadline that ended the read: {stderr}"
    );
}

/// Answers that are not HTTP came after a connection was made: the target spoke, badly. They are
/// `malformed`, not `connect` (which blames the network).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_that_are_not_http_are_malformed() {
    use common::case::{End, Script, Segment};
    use std::time::Duration;
    let huge_header = {
        let mut h = b"HTTP/1.1 200 OK\r\nX-Big: ".to_vec();
        h.extend(std::iter::repeat_n(b'a', 1024 * 1024));
        h.extend_from_slice(b"\r\n\r\n");
        h
    };
    let many_headers = {
        let mut h = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..5000 {
            h.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
        }
        h.extend_from_slice(b"\r\n");
        h
    };
    let http09 = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n".to_vec();
    for (what, bytes) in [
        ("a 1 MiB header block", huge_header),
        ("5,000 headers", many_headers),
        ("an HTTP/0.9-style answer without a status line", http09),
    ] {
        let (addr, h) = ReplayServer::start_script(Script {
            writes: vec![Segment {
                at: Duration::from_millis(10),
                bytes,
            }],
            end: End::Close(Duration::from_millis(200)),
        })
        .await
        .expect("server");
        let (out, v) = probe(
            &["--base-url", &format!("http://{addr}/v1"), "--model", "m"],
            &[],
        );
        assert_eq!(out.status.code(), Some(1), "{what}: {v}");
        assert_eq!(v["error_type"], json!("malformed"), "{what}: {v}");
        assert_eq!(h.requests_received(), 1, "{what}: one request");
    }
}
