//! `scripts/demo.sh`, the README's first command, run as a user would (with the debug binary in
//! place of the release build, `TOKENPROBE_BIN`, and the test venv's llama.cpp server and model,
//! so nothing is downloaded or built):
//! - a taken port (the model server's or tokenprobe's) fails at once, naming the port and the
//!   process holding it, before anything is installed, built or started;
//! - a model server that dies at start fails the demo with the tail of its log, and one whose
//!   port ends up held by another process is not trusted, even though it says it is ready (a
//!   fake venv whose `python` plays those servers, so these run in seconds and need no model);
//! - stopped while a probe is in flight, the demo stops tokenprobe first, so the probe finishes
//!   and no `truncated` failure is logged, then the model server, and nothing is left running.

use crate::common;
use common::e2e;

use e2e::*;
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

fn demo(llama_port: u16, listen_port: u16) -> Command {
    let mut c = Command::new("bash");
    c.arg(repo_root().join("scripts/demo.sh"))
        .env("LLAMA_PORT", llama_port.to_string())
        .env("LISTEN", format!("127.0.0.1:{listen_port}"))
        .env("TOKENPROBE_BIN", tokenprobe_bin())
        .env("TOKENPROBE_VENV", venv())
        .env_remove("CONFIG");
    c
}

/// The demo with `port` held by a listener of this test process: it must fail within
/// `LIMIT` with a message naming the port and this process.
fn fails_on_taken(which: &str) {
    let held = TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken = held.local_addr().expect("addr").port();
    let free = free_port();
    let (llama, listen) = if which == "LLAMA_PORT" {
        (taken, free)
    } else {
        (free, taken)
    };
    let start = Instant::now();
    // The port check runs before the install check, the build and any start: on an idle machine
    // it takes 0.3 s; 15 s allows for both cores busy, and is far below the minutes of a build.
    let (status, out, err) = run_with_timeout(demo(llama, listen), None, Duration::from_secs(15));
    let took = start.elapsed();
    assert_eq!(status.code(), Some(1), "{which} taken: {out}\n{err}");
    let msg = format!(
        "port {taken} ({}) is already in use by {} (",
        if which == "LLAMA_PORT" {
            "the llama.cpp server"
        } else {
            "tokenprobe serve"
        },
        std::process::id()
    );
    assert!(err.contains(&msg), "want {msg:?} in:\n{err}");
    assert!(err.contains(&format!("{which}=<port>")), "{err}");
    assert!(
        !out.contains("starting") && !out.contains("install-test-deps"),
        "started something before failing:\n{out}"
    );
    eprintln!("{which} taken: failed in {took:?}");
}

#[test]
fn a_taken_model_server_port_fails_at_once() {
    fails_on_taken("LLAMA_PORT");
}

#[test]
fn a_taken_tokenprobe_port_fails_at_once() {
    fails_on_taken("LISTEN");
}

/// A venv whose `python` passes scripts/ci/install-test-deps.sh's checks and plays the model server
/// as `mode` says: `die` (exits with a bind error), `foreign` (another process takes the port,
/// then it prints the ready line itself).
fn fake_venv(dir: &std::path::Path, mode: &str) -> std::path::PathBuf {
    let venv = dir.join("venv");
    std::fs::create_dir_all(venv.join("bin")).expect("mkdir");
    let req = std::fs::read(repo_root().join("scripts/ci/requirements-test.txt")).expect("reqs");
    let sum = Command::new("sha256sum")
        .arg(repo_root().join("scripts/ci/requirements-test.txt"))
        .output()
        .expect("sha256sum");
    assert!(!req.is_empty() && sum.status.success());
    let stamp = String::from_utf8_lossy(&sum.stdout)
        .split_whitespace()
        .next()
        .expect("a digest")
        .to_owned();
    std::fs::write(venv.join(".tokenprobe-test-deps.sha256"), stamp + "\n").expect("stamp");
    let script = format!(
        r#"#!/usr/bin/env bash
# Fake venv python for tests/peers/demo.rs (mode {mode}).
case "$1" in -c|-m) exit 0 ;; esac
[ "${{2:-}}" = "--print-model" ] && {{ echo /nonexistent/fake.gguf; exit 0; }}
port="$3"
case "{mode}" in
die)
    echo "llama-server.py: loading /nonexistent/fake.gguf" >&2
    echo "error: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: $port" >&2
    exit 1 ;;
foreign)
    /usr/bin/python3 -c 'import socket,sys,time; s=socket.socket(); s.bind(("127.0.0.1",int(sys.argv[1]))); s.listen(); time.sleep(60)' "$port" &
    other=$!
    trap 'kill $other; exit 0' TERM
    sleep 0.5
    echo "LLAMA_SERVER_URL=http://127.0.0.1:$port"
    while :; do sleep 0.1; done ;;
esac
"#
    );
    let py = venv.join("bin/python");
    std::fs::write(&py, script).expect("write fake python");
    let ok = Command::new("chmod")
        .arg("+x")
        .arg(&py)
        .status()
        .expect("chmod");
    assert!(ok.success());
    venv
}

#[test]
fn a_model_server_that_dies_at_start_fails_with_its_log() {
    // The demo writes target/demo-llama.log and target/demo-tokenprobe.yml: one demo at a time.
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let venv = fake_venv(dir.path(), "die");
    let (llama, listen) = (free_port(), free_port());
    let mut cmd = demo(llama, listen);
    cmd.env("TOKENPROBE_VENV", &venv);
    // The fake server exits at once; the demo polls every 0.5 s: 15 s allows for a busy machine.
    let (status, out, err) = run_with_timeout(cmd, None, Duration::from_secs(15));
    assert_eq!(status.code(), Some(1), "{out}\n{err}");
    assert!(
        err.contains("the llama.cpp server exited before it was ready"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "couldn't bind HTTP server socket, hostname: 127.0.0.1, port: {llama}"
        )),
        "the log's tail is shown: {err}"
    );
    assert!(!out.contains("tokenprobe serving"), "{out}");
}

#[test]
fn a_port_held_by_another_process_is_not_trusted() {
    // The demo writes target/demo-llama.log and target/demo-tokenprobe.yml: one demo at a time.
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let venv = fake_venv(dir.path(), "foreign");
    let (llama, listen) = (free_port(), free_port());
    let mut cmd = demo(llama, listen);
    cmd.env("TOKENPROBE_VENV", &venv)
        .env("LLAMA_READY_TIMEOUT", "3");
    // 3 s of waiting for a ready server, then the stop: 20 s allows for a busy machine.
    let (status, out, err) = run_with_timeout(cmd, None, Duration::from_secs(20));
    assert_eq!(status.code(), Some(1), "{out}\n{err}");
    let want = format!("127.0.0.1:{llama} is held by ");
    assert!(err.contains(&want), "want {want:?} in {err}");
    assert!(
        err.contains("(python3), not by the llama.cpp server started here"),
        "{err}"
    );
    assert!(
        !out.contains("tokenprobe serving"),
        "probed a foreign server: {out}"
    );
    // The demo stopped its fake server, which stopped the foreign listener.
    poll_for(
        "the foreign listener to go",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || {
            std::net::TcpStream::connect(("127.0.0.1", llama))
                .is_err()
                .then_some(())
        },
    );
}

/// Stops the demo with SIGTERM (it then stops its children) if a test ends early.
struct Demo(ChildGuard);

impl Drop for Demo {
    fn drop(&mut self) {
        if self.0.exited().is_none() {
            let _ = self.0.signal_and_wait("-TERM", Duration::from_secs(30));
        }
    }
}

/// Processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                out.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    out
}

#[test]
fn stopping_the_demo_mid_probe_stops_tokenprobe_first() {
    if !require_deps("demo", &["curl", "setsid"]) {
        return;
    }
    let _serial = serial();
    let _watchdog = Watchdog::new(
        "stopping_the_demo_mid_probe_stops_tokenprobe_first",
        Duration::from_secs(300),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    // A port free when picked can be taken by the time the demo checks it (CI once found one
    // listening, its holder gone a moment later): the demo refuses it, as it should, and the
    // test tries fresh ports, at most three times.
    let (mut d, llama_port, listen_port) = (1..=3)
        .find_map(|attempt| {
            let (llama_port, listen_port) = (free_port(), free_port());
            let mut d = Demo(ChildGuard::spawn(
                "demo",
                demo(llama_port, listen_port),
                dir.path(),
            ));
            // The checks are the demo's first step: milliseconds; 3 s allows for a busy machine.
            let started = std::time::Instant::now();
            let refused = poll_for(
                "the demo to pass its port checks",
                Duration::from_secs(10),
                Duration::from_millis(50),
                || match d.0.exited() {
                    Some(_) => Some(d.0.stderr().contains("is already in use")),
                    None => (started.elapsed() > Duration::from_secs(3)).then_some(false),
                },
            );
            if refused && attempt < 3 {
                eprintln!("attempt {attempt}: {}", d.0.stderr().trim());
                return None;
            }
            Some((d, llama_port, listen_port))
        })
        .expect("three attempts");
    let llama = format!("http://127.0.0.1:{llama_port}/metrics");
    let serving = format!("tokenprobe serving on http://127.0.0.1:{listen_port}/metrics");
    // Model load and warm-up: seconds on an idle machine; 120 s is the demo's own limit.
    poll_for(
        "the demo to say it is serving",
        Duration::from_secs(150),
        Duration::from_millis(100),
        || {
            d.0.assert_running();
            d.0.stdout().contains(&serving).then_some(())
        },
    );
    // A probe in flight: llama.cpp's own gauge of requests being processed. Each probe takes
    // about a second (up to 64 tokens), every 5 s per job: polling every 20 ms sees it.
    poll_for(
        "a probe in flight at the model server",
        Duration::from_secs(60),
        Duration::from_millis(20),
        || {
            let m = try_http_get(&llama, &[]).ok()?;
            let s = Samples::parse(&m.body);
            (s.sum("llamacpp:requests_processing", &[]) >= 1.0).then_some(())
        },
    );
    let (status, took) =
        d.0.signal_and_wait("-TERM", Duration::from_secs(30))
            .unwrap_or_else(|| panic!("the demo did not stop\n{}", d.0.logs()));
    let (out, err) = (d.0.stdout(), d.0.stderr());
    assert_eq!(status.code(), Some(143), "{}", d.0.logs());
    let (a, b) = (
        err.find("demo: stopping tokenprobe"),
        err.find("demo: stopping the llama.cpp server"),
    );
    assert!(
        matches!((a, b), (Some(a), Some(b)) if a < b),
        "tokenprobe must stop before the model server:\n{}",
        d.0.logs()
    );
    assert!(
        !out.contains("truncated") && !err.contains("truncated"),
        "stopping the demo cut a probe:\n{}",
        d.0.logs()
    );
    assert!(
        err.contains("shutting down"),
        "tokenprobe did not shut down in order:\n{err}"
    );
    let left = processes_with(&format!("--port {llama_port}"));
    assert!(left.is_empty(), "left running: {left:?}");
    let left = processes_with(&format!("127.0.0.1:{listen_port}"));
    assert!(left.is_empty(), "left running: {left:?}");
    eprintln!("demo stopped in {took:?}");
}
