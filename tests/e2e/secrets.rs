//! No secret reaches any output (issue 9, items 8–10).
//!
//! A config carries an API key, a custom header value, a query value and URL userinfo (from which
//! the client derives Basic credentials). A loopback server echoes the whole request back: in a
//! 500 body (padded so that the key straddles the 512-character message limit) and in an error
//! event of a 200 stream. Then `probe` (text and JSON), `bench` (stderr, stdout, the JSON report
//! and HTML page), `serve` (logfmt and JSON logs, `/metrics`, `/`), `check-config` on a file with
//! a syntax error next to the key, `serve` started on that file, and `POST /-/reload` of it are
//! run, and no secret, none of its base64 or percent-encoded forms, and no 8-character piece of
//! any of them appears anywhere.

use crate::common;
use common::e2e;

use base64::Engine;
use e2e::{ChildGuard, free_port, http_get, http_request, run_with_timeout, tokenprobe_bin};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const KEY: &str = "sk-e2e-KEY-0123456789abcdef";
const HEADER: &str = "hdr-e2e-value-0123456789";
const QUERY: &str = "qry-e2e-value-0123456789";
const USER: &str = "e2euser";
const PASS: &str = "pw-e2e-pass-0123456789";
/// Where the key starts in the echoed message of a 500: 18 characters before the 512 limit.
const KEY_AT: usize = 512 - 18;

/// Every string that must not appear: the secrets and their derived forms.
fn forbidden() -> Vec<String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    vec![
        KEY.into(),
        HEADER.into(),
        QUERY.into(),
        PASS.into(),
        b64.encode(format!("{USER}:{PASS}")),
        b64.encode(KEY),
    ]
}

/// What went wrong, collected so that one run lists every output that leaks.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    /// Records `what` when `text` holds a secret, a derived form, or 8 characters of one.
    fn clean(&mut self, what: &str, text: &str) {
        for s in forbidden() {
            let chars: Vec<char> = s.chars().collect();
            if let Some(piece) = chars
                .windows(8)
                .map(|w| w.iter().collect::<String>())
                .find(|p| text.contains(p.as_str()))
            {
                self.0.push(format!(
                    "{what} holds {piece:?} (a piece of {s:?}):\n{}",
                    e2e::tail(text, 30)
                ));
                return;
            }
        }
    }

    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.push(what());
        }
    }
}

/// Reads one HTTP request (head and Content-Length body).
fn read_request(s: &mut TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).unwrap_or(0);
        if n == 0 {
            return buf;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = s.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return buf;
        }
    }
}

/// The echo server: `model: echo500` gets a 500 whose JSON error message is the request, padded
/// so that the key starts [`KEY_AT`] characters in; any other model a 200 stream whose only event
/// is an error carrying the request.
fn start_echo() -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let req = String::from_utf8_lossy(&read_request(&mut s)).into_owned();
                let resp = if req.contains("\"echo500\"") {
                    let pad = req.find(KEY).map_or(0, |i| KEY_AT.saturating_sub(i));
                    let msg = format!("{}{req}", ".".repeat(pad));
                    let body =
                        serde_json::json!({"error": {"message": msg, "type": "server_error"}})
                            .to_string();
                    format!(
                        "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                } else {
                    let ev = serde_json::json!({"error": {"message": req, "type": "server_error"}});
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\ndata: {ev}\n\n"
                    )
                };
                let _ = s.write_all(resp.as_bytes());
            });
        }
    });
    addr.to_string()
}

fn config(echo: &str, interval: &str) -> String {
    format!(
        "defaults:\n  interval: {interval}\n  timeouts: {{connect: 2s, first_token: 5s, idle: 5s, total: 10s}}\n\
         prompts:\n  - name: p\n    messages: [{{role: user, content: hi}}]\n    max_tokens: 8\n\
         targets:\n  - name: t\n    base_url: http://{USER}:{PASS}@{echo}/v1\n    api_key: {KEY}\n    auth: api-key\n\
         \x20   headers:\n      X-Custom-Token: {HEADER}\n    query:\n      code: {QUERY}\n      api-version: '2024-10-21'\n\
         \x20   proxy: none\n    models: [echo500, echo200]\n"
    )
}

/// The same config with a syntax error on the line after the key.
fn broken_config(echo: &str) -> String {
    config(echo, "1s").replace(
        "    headers:\n",
        "    headers: {X-Custom-Token: [\n    models: oops: [\n",
    )
}

/// A file the command under test must have written.
fn read(p: impl AsRef<Path>) -> String {
    let p = p.as_ref();
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn run(args: &[&str], dir: &Path) -> (i32, String) {
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.args(args).current_dir(dir);
    for v in common::PROXY_ENV_VARS {
        cmd.env_remove(v);
    }
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(60));
    (st.code().unwrap_or(-1), format!("{out}\n{err}"))
}

/// `serve`'s stdout and stderr once they hold every one of `wanted` (or after 10 s: the caller's
/// check then says what is missing).
fn logs_with(serve: &ChildGuard, wanted: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let logs = serve.stderr() + &serve.stdout();
        if wanted.iter().all(|w| logs.contains(w)) || Instant::now() > deadline {
            return logs;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// bench against the echo server: its connectivity check first (both models fail it with a 500,
/// a failure of the moment, each message shown), then the levels' failures (every request fails:
/// exit 8, with and without the check): stderr header, table, JSON report, HTML page (with the
/// command line).
fn bench_outputs(p: &mut Problems, dir: &Path, cfg_s: &str, echo: &str) {
    let report = dir.join("bench.json");
    let bench = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            "--config.file",
            cfg_s,
            "--models",
            "echo500,echo200",
            "--concurrency",
            "1",
            "--requests-per-level",
            "2",
            "--no-progress",
            "--output=bench.json",
            "--output=bench.html",
        ];
        args.extend_from_slice(extra);
        run(&args, dir)
    };
    let (code, out) = bench(&[]);
    // A 500 is a failure of the moment: the check says it (its message is an output too) and
    // the levels run, every request failing (exit 8).
    p.check(
        code == 8 && out.contains("connectivity check passed with a failure of the moment"),
        || format!("bench check: {out}"),
    );
    p.clean("bench check output", &out);
    p.clean("bench check JSON report", &read(dir.join("bench.json")));
    p.clean("bench check HTML page", &read(dir.join("bench.html")));
    let (code, out) = bench(&["--no-check"]);
    p.check(code == 8, || format!("bench: {out}"));
    p.clean("bench HTML page", &read(dir.join("bench.html")));
    let json = std::fs::read_to_string(&report).unwrap_or_default();
    p.check(
        json.contains(&format!("\"base_url\": \"http://{echo}/v1\"")),
        || format!("bench report base_url: {json}"),
    );
    p.clean("bench output", &out);
    p.clean("bench JSON report", &json);
}

#[test]
fn no_secret_reaches_any_output() {
    let mut p = Problems::default();
    let dir = tempfile::tempdir().expect("tempdir");
    let echo = start_echo();
    let cfg = dir.path().join("tokenprobe.yml");
    std::fs::write(&cfg, config(&echo, "300ms")).expect("write config");
    let cfg_s = cfg.to_str().expect("utf-8 path");

    // probe, text and JSON, both echo modes: each fails and says why, without a secret.
    for model in ["echo500", "echo200"] {
        for format in ["text", "json"] {
            let (code, out) = run(
                &[
                    "probe",
                    "--config.file",
                    cfg_s,
                    "--target",
                    "t",
                    "--model",
                    model,
                    "--format",
                    format,
                ],
                dir.path(),
            );
            p.check(code == 1 && out.contains("server_error"), || {
                format!("probe {model} {format} should fail as server_error:\n{out}")
            });
            // userinfo goes as Basic, so the key goes in `api-key` (one Authorization header).
            p.check(
                out.contains("api-key: <redacted>") && out.contains("Basic <redacted>"),
                || format!("probe {model} {format}: the echo is shown, redacted:\n{out}"),
            );
            p.clean(&format!("probe --model {model} --format {format}"), &out);
        }
    }

    bench_outputs(&mut p, dir.path(), cfg_s, &echo);

    // serve, logfmt then JSON logs: probes fail, then /metrics, /, and a reload of a broken file.
    for log_format in ["logfmt", "json"] {
        std::fs::write(&cfg, config(&echo, "300ms")).expect("write config");
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let mut cmd = Command::new(tokenprobe_bin());
        cmd.args(["serve", "--config.file", cfg_s])
            .args(["--web.listen-address", &format!("127.0.0.1:{port}")])
            .args(["--log.level", "debug", "--log.format", log_format]);
        for v in common::PROXY_ENV_VARS {
            cmd.env_remove(v);
        }
        let mut serve = ChildGuard::spawn(&format!("serve-{log_format}"), cmd, dir.path());
        let deadline = Instant::now() + Duration::from_secs(60);
        let metrics = loop {
            serve.assert_running();
            if let Ok(r) = e2e::try_http_get(&format!("{url}/metrics"), &[]) {
                let failed = r
                    .body
                    .lines()
                    .filter(|l| {
                        l.starts_with("tokenprobe_probe_errors_total{") && !l.ends_with(" 0")
                    })
                    .count();
                if failed >= 2 {
                    break r.body;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no failed probes\n{}",
                serve.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        let index = http_get(&format!("{url}/"), &[]).body;
        std::fs::write(&cfg, broken_config(&echo)).expect("write broken config");
        let reload = http_request("POST", &format!("{url}/-/reload"), &[], b"");
        p.check(
            reload.status == 500
                && reload.body.contains("syntax")
                && !reload.body.contains("oops")
                && !reload.body.contains(" | "),
            || {
                format!(
                    "reload must say what failed, quoting nothing: {}",
                    reload.body
                )
            },
        );
        let logs = logs_with(&serve, &["probe failed", "config reload refused"]);
        p.check(
            logs.contains("probe failed") && logs.contains("config reload refused"),
            || format!("serve logs ({log_format}) lack the failures: {logs}"),
        );
        if let Some(l) = logs.lines().find(|l| match log_format {
            "json" => serde_json::from_str::<serde_json::Value>(l).is_err(),
            _ => !l.starts_with("ts="),
        }) {
            p.0.push(format!(
                "serve ({log_format}): a line that is not one event: {l}"
            ));
        }
        p.clean(&format!("serve logs ({log_format})"), &logs);
        p.clean("/metrics", &metrics);
        p.clean("/", &index);
        p.clean("POST /-/reload", &reload.body);
    }

    // check-config and serve on the broken file: the snippet shows the lines, redacted.
    let (code, out) = run(&["check-config", "--config.file", cfg_s], dir.path());
    p.check(code == 2 && out.contains("api_key: <redacted>"), || {
        format!("check-config shows the redacted snippet: {out}")
    });
    p.clean("check-config", &out);
    let (code, out) = run(
        &[
            "serve",
            "--config.file",
            cfg_s,
            "--web.listen-address",
            &format!("127.0.0.1:{}", free_port()),
        ],
        dir.path(),
    );
    p.check(code == 2, || format!("serve on a broken file: {out}"));
    p.clean("serve start-up error", &out);
    assert!(
        p.0.is_empty(),
        "{} problems:\n\n{}",
        p.0.len(),
        p.0.join("\n\n")
    );
}
