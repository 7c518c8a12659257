//! What `check-config`, `probe` and `bench` reject before sending anything, and how they say it
//! (issue 9 items 12 and 13, issue 8's check-config and probe items). Each test runs the binary
//! (`TOKENPROBE_BIN` may name another build) on loopback; a listener counts the connections a
//! rejected invocation must not make.

use crate::common;
use common::e2e;

use e2e::{run_with_timeout, tokenprobe_bin};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const PROMPTS: &str = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\n";

fn run_in(dir: &Path, args: &[&str], shell_prefix: Option<&str>) -> (i32, String, String) {
    let mut cmd = match shell_prefix {
        Some(pre) => {
            let mut c = Command::new("sh");
            let mut line = format!("{pre} && exec \"$0\"");
            for i in 0..args.len() {
                line.push_str(&format!(" \"${}\"", i + 1));
            }
            c.arg("-c").arg(line).arg(tokenprobe_bin()).args(args);
            c
        }
        None => {
            let mut c = Command::new(tokenprobe_bin());
            c.args(args);
            c
        }
    };
    cmd.current_dir(dir);
    for v in common::PROXY_ENV_VARS {
        cmd.env_remove(v);
    }
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(60));
    (st.code().unwrap_or(-1), out, err)
}

/// A listener that accepts and counts connections (and closes them).
fn counting_listener() -> (String, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr").to_string();
    let n = Arc::new(AtomicUsize::new(0));
    let n2 = n.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            if c.is_ok() {
                n2.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    (addr, n)
}

fn check_config(dir: &Path, yaml: &str) -> (i32, String) {
    let f = dir.join("c.yml");
    std::fs::write(&f, yaml).expect("write");
    let (code, out, err) = run_in(
        dir,
        &["check-config", "--config.file", f.to_str().expect("utf-8")],
        None,
    );
    (code, format!("{out}{err}"))
}

#[test]
fn check_config_rejects_what_serve_rejects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let not_pem = d.join("ca.txt");
    std::fs::write(&not_pem, "not a certificate\n").expect("write");
    let target = |extra: &str| {
        format!(
            "{PROMPTS}targets:\n  - name: a\n    base_url: http://127.0.0.1:1/v1\n    models: [m]\n{extra}"
        )
    };
    let cases = [
        (
            format!("{PROMPTS}targets:\n  - {{name: a, base_url: '', models: [m]}}\n"),
            "targets[0].base_url",
        ),
        (
            target(&format!("    ca_file: {}\n", not_pem.display())),
            "targets[0].ca_file",
        ),
        (
            target(&format!("    api_key_file: {}\n", d.display())),
            "targets[0].api_key_file",
        ),
        (
            target("    extra_body: {stream: false}\n"),
            "targets[0].extra_body.stream",
        ),
        (
            target("    extra_body: {model: other}\n"),
            "targets[0].extra_body.model",
        ),
        (
            target("    extra_body: {messages: []}\n"),
            "targets[0].extra_body.messages",
        ),
    ];
    let mut wrong = Vec::new();
    for (yaml, path) in &cases {
        let (code, out) = check_config(d, yaml);
        if code != 2 || !out.contains(path) {
            wrong.push(format!("{path}: exit {code}: {out}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "accepted or unnamed:\n{}",
        wrong.join("\n")
    );
    // What serve does with the non-PEM CA file, for the record: it refuses to start too.
    let f = d.join("c.yml");
    std::fs::write(&f, target(&format!("    ca_file: {}\n", not_pem.display()))).expect("write");
    let (code, _, err) = run_in(
        d,
        &[
            "serve",
            "--config.file",
            f.to_str().expect("utf-8"),
            "--web.listen-address",
            "127.0.0.1:0",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
}

#[test]
fn check_config_messages_name_the_key_the_file_and_say_it_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (code, out) = check_config(
        d,
        &format!(
            "{PROMPTS}    max_tokens: lots\ntargets:\n  - {{name: a, base_url: 'http://x', models: [m]}}\n"
        ),
    );
    assert_eq!(code, 2);
    assert!(out.contains("prompts[0].max_tokens"), "{out}");
    assert!(
        out.contains(&format!("{}:4:17", d.join("c.yml").display())),
        "{out}"
    );
    assert!(!out.contains("<input>"), "{out}");
    // Problems in file order.
    let (_, out) = check_config(
        d,
        &format!(
            "{PROMPTS}targets:\n  - name: a\n    base_url: http://x\n    models: [m]\n    cron: nope\n    interval: soon\n    prompts: [missing]\n"
        ),
    );
    let lines: Vec<u64> = out
        .lines()
        .filter_map(|l| l.trim().split(':').next()?.parse().ok())
        .collect();
    let mut sorted = lines.clone();
    sorted.sort_unstable();
    assert!(lines.len() >= 2 && lines == sorted, "{lines:?}\n{out}");
    // A missing file: the OS error once, in check-config and in serve.
    let missing = d.join("missing.yml");
    for args in [
        vec![
            "check-config",
            "--config.file",
            missing.to_str().expect("utf-8"),
        ],
        vec![
            "serve",
            "--config.file",
            missing.to_str().expect("utf-8"),
            "--web.listen-address",
            "127.0.0.1:0",
        ],
    ] {
        let (code, out, err) = run_in(d, &args, None);
        let all = format!("{out}{err}");
        assert_eq!(code, 2, "{all}");
        assert_eq!(all.matches("os error 2").count(), 1, "{args:?}: {all}");
    }
}

#[test]
fn probe_flags_and_config_targets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (addr, conns) = counting_listener();
    let (code, _, err) = run_in(
        d,
        &[
            "probe",
            "--base-url",
            &format!("http://{addr}/v1"),
            "--model",
            "m",
            "--max-tokens",
            "0",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--max-tokens"), "{err}");
    assert_eq!(
        conns.load(Ordering::SeqCst),
        0,
        "a rejected probe connected"
    );

    let f = d.join("c.yml");
    std::fs::write(
        &f,
        format!(
            "{PROMPTS}targets:\n  - {{name: one, base_url: 'http://{addr}/v1', models: [m], proxy: none}}\n  - {{name: two, base_url: 'http://{addr}/v1', models: [m], proxy: none}}\n"
        ),
    )
    .expect("write");
    let fs = f.to_str().expect("utf-8");
    // A model the config does not list is probed (as bench allows): it connects.
    let (code, out, err) = run_in(
        d,
        &[
            "probe",
            "--config.file",
            fs,
            "--target",
            "two",
            "--model",
            "not-listed",
            "--timeout-first-token",
            "2s",
        ],
        None,
    );
    assert_eq!(
        code, 1,
        "the probe runs and fails against the closing listener: {out}{err}"
    );
    assert!(out.contains("model      not-listed"), "{out}");
    assert!(conns.load(Ordering::SeqCst) >= 1);
    // An unknown target lists those there are.
    let (code, _, err) = run_in(
        d,
        &["probe", "--config.file", fs, "--target", "three"],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("one, two"), "{err}");
}

#[test]
fn bench_rejects_what_it_cannot_run_before_sending() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (addr, conns) = counting_listener();
    let f = d.join("c.yml");
    std::fs::write(
        &f,
        format!("{PROMPTS}targets:\n  - {{name: t, base_url: 'http://{addr}/v1', models: [m], proxy: none}}\n"),
    )
    .expect("write");
    let fs = f.to_str().expect("utf-8");
    let bench = |extra: &[&str], prefix: Option<&str>| {
        let mut args = vec![
            "bench",
            "--config.file",
            fs,
            "--requests-per-level",
            "1",
            "--no-progress",
        ];
        args.extend_from_slice(extra);
        run_in(d, &args, prefix)
    };
    // 300 in flight with 256 descriptors.
    let (code, _, err) = bench(&["--concurrency", "300"], Some("ulimit -n 256"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("open-file limit 256"), "{err}");
    let (code, _, err) = bench(&["--concurrency", "1,2", "--select-at", "7"], None);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--select-at 7") && err.contains("1, 2"),
        "{err}"
    );
    assert_eq!(
        conns.load(Ordering::SeqCst),
        0,
        "a rejected bench connected"
    );
}

#[test]
fn bad_flags_do_not_echo_their_secret_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (addr, conns) = counting_listener();
    let base = format!("http://{addr}/v1");
    for bad in [
        vec!["--header", "Authorization: Bearer sk-cli-secret-1"],
        vec!["--header", "X-Token=sk-cli-secret-1\u{7f}"],
        vec!["--query", "=sk-cli-secret-1"],
        vec!["--proxy", "socks5://u:sk-cli-secret-1@127.0.0.1:1"],
    ] {
        let mut args = vec!["probe", "--base-url", &base, "--model", "m"];
        args.extend(bad.iter().copied());
        let (code, out, err) = run_in(d, &args, None);
        assert_eq!(code, 2, "{bad:?}: {out}{err}");
        assert!(!err.contains("cli-secret"), "{bad:?} echoed: {err}");
    }
    let (code, _, err) = run_in(
        d,
        &[
            "probe",
            "--base-url",
            "http//u:sk-cli-secret-1@h",
            "--model",
            "m",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("cli-secret"), "echoed: {err}");
    assert_eq!(conns.load(Ordering::SeqCst), 0);
}

/// A reader that went away (`tokenprobe probe | head -c 100`, a closed stderr) ends the output,
/// not the process with a panic: the exit code stays the command's own. Failed before: `print!`
/// panicked ("failed printing to stdout: Broken pipe") and the exit code was 101.
#[test]
fn a_closed_stdout_or_stderr_is_not_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let refused = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").to_string()
    };
    let valid = d.join("valid.yml");
    std::fs::write(
        &valid,
        format!("{PROMPTS}targets: [{{name: t, base_url: 'http://{refused}/v1', models: [m]}}]\n"),
    )
    .expect("write");
    let invalid = d.join("invalid.yml");
    std::fs::write(&invalid, "targets: 7\n").expect("write");
    let url = format!("http://{refused}/v1");
    let valid_s = valid.to_str().expect("utf-8");
    let invalid_s = invalid.to_str().expect("utf-8");
    let cases: [(&[&str], i32); 5] = [
        (&["check-config", "--config.file", valid_s], 0),
        (&["check-config", "--config.file", invalid_s], 2),
        (&["probe", "--base-url", &url, "--model", "m"], 1),
        (
            &[
                "probe",
                "--base-url",
                &url,
                "--model",
                "m",
                "--format",
                "json",
            ],
            1,
        ),
        (&["probe", "--base-url", "not a url", "--model", "m"], 2),
    ];
    for (args, want) in cases {
        // Both ends closed before the process starts: every write fails with EPIPE.
        let (r1, w1) = std::io::pipe().expect("pipe");
        let (r2, w2) = std::io::pipe().expect("pipe");
        drop((r1, r2));
        let mut cmd = Command::new(tokenprobe_bin());
        cmd.args(args).current_dir(d).stdout(w1).stderr(w2);
        cmd.env_remove("http_proxy").env_remove("HTTP_PROXY");
        cmd.env_remove("all_proxy").env_remove("ALL_PROXY");
        let st = cmd.status().expect("run");
        assert_eq!(st.code(), Some(want), "{args:?}: {st}");
    }
}

/// A configured header must not replace or double what tokenprobe sends itself: the framing
/// (`Content-Length`, `Transfer-Encoding`, `Connection`), `Accept-Encoding: identity` and
/// `Accept`/`Content-Type` (docs/measurement.md, "What requests look like"), and the key's own
/// header when a key is configured (a second `Authorization` made the request carry two).
/// Failed before: all were accepted and sent next to tokenprobe's own (two `accept-encoding`, two
/// `authorization` on the wire; a chunked body from `Transfer-Encoding: chunked`).
#[test]
fn headers_that_tokenprobe_sets_itself_are_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let target = |extra: &str| {
        format!(
            "{PROMPTS}targets:\n  - name: a\n    base_url: http://127.0.0.1:1/v1\n    models: [m]\n{extra}"
        )
    };
    let mut wrong = Vec::new();
    for (extra, path) in [
        (
            "    headers: {Content-Length: '5'}\n",
            "targets[0].headers.Content-Length",
        ),
        (
            "    headers: {transfer-encoding: chunked}\n",
            "targets[0].headers.transfer-encoding",
        ),
        (
            "    headers: {Connection: close}\n",
            "targets[0].headers.Connection",
        ),
        (
            "    headers: {Accept-Encoding: gzip}\n",
            "targets[0].headers.Accept-Encoding",
        ),
        (
            "    headers: {Accept: text/html}\n",
            "targets[0].headers.Accept",
        ),
        (
            "    headers: {Content-Type: text/plain}\n",
            "targets[0].headers.Content-Type",
        ),
        (
            "    api_key: sk-test-1234567\n    headers: {Authorization: Bearer other-value}\n",
            "targets[0].headers.Authorization",
        ),
        (
            "    api_key: sk-test-1234567\n    auth: x-api-key\n    headers: {X-Api-Key: other-value}\n",
            "targets[0].headers.X-Api-Key",
        ),
    ] {
        let (code, out) = check_config(d, &target(extra));
        if code != 2 || !out.contains(path) {
            wrong.push(format!("{path}: exit {code}: {out}"));
        }
        assert!(!out.contains("other-value"), "a header value shown: {out}");
    }
    assert!(
        wrong.is_empty(),
        "accepted or unnamed:\n{}",
        wrong.join("\n")
    );
    // Without a key, an Authorization header is how a custom scheme is sent; Host names a vhost.
    for extra in [
        "    headers: {Authorization: Custom abcdefg}\n",
        "    headers: {Host: api.example.com}\n",
        "    api_key: sk-test-1234567\n    headers: {x-api-key: other-value}\n",
    ] {
        let (code, out) = check_config(d, &target(extra));
        assert_eq!(code, 0, "{extra}: {out}");
    }
    // The same rule for `probe --header`, before any connection.
    let (addr, conns) = counting_listener();
    let url = format!("http://{addr}/v1");
    for h in ["Accept-Encoding=gzip", "transfer-encoding=chunked"] {
        let (code, _, err) = run_in(
            d,
            &["probe", "--base-url", &url, "--model", "m", "--header", h],
            None,
        );
        assert_eq!(code, 2, "{h}: {err}");
        assert!(err.contains("--header"), "{h}: {err}");
    }
    assert_eq!(
        conns.load(Ordering::SeqCst),
        0,
        "a rejected probe connected"
    );
}

/// A `ca_file` that is not a regular file of bounded size is refused at once, with its key path:
/// `/dev/zero` made `check-config` allocate until it aborted (exit 134 after 12 s, "memory
/// allocation of 2147483648 bytes failed"), and a FIFO with no writer blocked it forever. Failed
/// before (abort; hang until this test's 60 s limit).
#[test]
fn a_ca_file_that_is_a_device_a_fifo_or_huge_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let fifo = d.join("ca.fifo");
    let st = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(st.success());
    let huge = d.join("huge.pem");
    let line = "MIIBszCCAVmgAwIBAgIUQ0FGSUxFQ0FGSUxFQ0FGSUxFQ0FGSUxFwCgYIKoZIzj0E\n";
    std::fs::write(&huge, line.repeat((40 << 20) / line.len())).expect("write");
    for f in [Path::new("/dev/zero"), fifo.as_path(), huge.as_path()] {
        let yaml = format!(
            "{PROMPTS}targets:\n  - name: a\n    base_url: https://127.0.0.1:1/v1\n    models: [m]\n    ca_file: {}\n",
            f.display()
        );
        let (code, out) = check_config(d, &yaml);
        assert_eq!(code, 2, "{}: {out}", f.display());
        assert!(out.contains("targets[0].ca_file"), "{}: {out}", f.display());
    }
}

/// A config, bench or baseline file that never ends (`/dev/zero`) or is far too large is refused
/// with what is wrong, after reading at most the cap: it was read whole, so `check-config
/// --config.file /dev/zero` grew until the kernel's OOM killer ended it (exit 137 after 11 s on a
/// shared machine). Run here under a 1 GB address-space limit, where it failed before with "out of
/// memory" instead of the size rule.
#[test]
fn a_config_bench_or_baseline_file_that_never_ends_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let cfg = d.join("c.yml");
    std::fs::write(
        &cfg,
        format!(
            "{PROMPTS}targets: [{{name: a, base_url: 'http://127.0.0.1:1/v1', models: [m]}}]\n"
        ),
    )
    .expect("write");
    let c = cfg.to_str().expect("utf-8");
    let limit = Some("ulimit -v 1000000");
    for (args, what) in [
        (
            vec!["check-config", "--config.file", "/dev/zero"],
            "/dev/zero",
        ),
        (vec!["probe", "--config.file", "/dev/zero"], "/dev/zero"),
        (
            vec![
                "bench",
                "--config.file",
                c,
                "--concurrency",
                "1",
                "--requests-per-level",
                "1",
                "--bench.file",
                "/dev/zero",
            ],
            "bench file /dev/zero",
        ),
        (
            vec![
                "bench",
                "--config.file",
                c,
                "--concurrency",
                "1",
                "--requests-per-level",
                "1",
                "--baseline",
                "/dev/zero",
            ],
            "baseline /dev/zero",
        ),
        (
            vec![
                "serve",
                "--config.file",
                c,
                "--web.listen-address",
                "127.0.0.1:0",
                "--web.config.file",
                "/dev/zero",
            ],
            "web config /dev/zero",
        ),
    ] {
        let (code, _, err) = run_in(d, &args, limit);
        assert_eq!(code, 2, "{args:?}: {err}");
        // A report (the baseline) is parsed as it is read: its first NUL byte is not JSON.
        let why = if what.starts_with("baseline") {
            "not a tokenprobe bench JSON report"
        } else {
            "larger than 8 MiB"
        };
        assert!(err.contains(what) && err.contains(why), "{args:?}: {err}");
    }
}

/// `check-config` speaks of the user's file, not of the YAML library: no advice addressed to a
/// programmer ("set DuplicateKeyPolicy in Options", "use from_str_multiple"), no Rust type names
/// ("invalid u32"), no Debug output ("Depth { depth: 65 }"), and key paths as written
/// (`time_to_first_token[2]`, not `time_to_first_token.value[2]`). Failed before: each of these
/// was shown as quoted.
#[test]
fn check_config_messages_speak_of_the_file_not_the_parser() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let t = "targets: [{name: a, base_url: 'http://127.0.0.1:1/v1', models: [m]}]\n";
    let deep = format!(
        "{PROMPTS}targets: [{{name: a, base_url: 'http://127.0.0.1:1/v1', models: [m], extra_body: {{x: {}1{}}}}}]\n",
        "[".repeat(100),
        "]".repeat(100)
    );
    let cases = [
        (
            format!(
                "{PROMPTS}targets: [{{name: a, name: b, base_url: 'http://127.0.0.1:1/v1', models: [m]}}]\n"
            ),
            "targets[0]: duplicate key `name`",
        ),
        (
            format!("{PROMPTS}{t}---\n{PROMPTS}{t}"),
            "more than one YAML document",
        ),
        (
            format!(
                "prompts: [{{name: p, messages: [{{role: user, content: hi}}], max_tokens: lots}}]\n{t}"
            ),
            "prompts[0].max_tokens: expected a whole number",
        ),
        (
            format!("{PROMPTS}{t}buckets: {{time_to_first_token: [1, 2, x]}}\n"),
            "buckets.time_to_first_token[2]: expected a number",
        ),
        (deep, "nested too deeply"),
    ];
    for (yaml, want) in &cases {
        let (code, out) = check_config(d, yaml);
        assert_eq!(code, 2, "{out}");
        assert!(out.contains(want), "want {want:?} in: {out}");
        for parser_talk in [
            "DuplicateKeyPolicy",
            "from_str_multiple",
            "u32",
            "floating point",
            "budget breached",
            "{ depth",
            ".value",
        ] {
            assert!(!out.contains(parser_talk), "{parser_talk:?} in: {out}");
        }
    }
}

/// A `base_url` with `user:password` is sent as `Authorization: Basic`; with a key in
/// `auth: bearer` the request carried two `Authorization` headers (seen on the wire:
/// `authorization: Basic …` and `authorization: Bearer …`), which a server may reject or read
/// either way. Refused, in config and `probe`; other key headers may go with userinfo. Failed
/// before: accepted.
#[test]
fn userinfo_and_a_bearer_key_are_not_sent_together() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let target = |extra: &str| {
        format!(
            "{PROMPTS}targets:\n  - name: a\n    base_url: http://alice:pw-12345678@127.0.0.1:1/v1\n    models: [m]\n{extra}"
        )
    };
    let (code, out) = check_config(d, &target("    api_key: sk-test-1234567\n"));
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("targets[0].base_url") && out.contains("Authorization"),
        "{out}"
    );
    assert!(
        !out.contains("pw-12345678") && !out.contains("sk-test"),
        "{out}"
    );
    for ok in ["", "    api_key: sk-test-1234567\n    auth: x-api-key\n"] {
        let (code, out) = check_config(d, &target(ok));
        assert_eq!(code, 0, "{ok}: {out}");
    }
    let (addr, conns) = counting_listener();
    let (code, _, err) = run_in(
        d,
        &[
            "probe",
            "--base-url",
            &format!("http://alice:pw-12345678@{addr}/v1"),
            "--model",
            "m",
            "--api-key-env",
            "TP_TEST_KEY",
        ],
        Some("export TP_TEST_KEY=sk-test-1234567"),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--base-url") && !err.contains("pw-12345678"),
        "{err}"
    );
    assert_eq!(
        conns.load(Ordering::SeqCst),
        0,
        "a rejected probe connected"
    );
}

/// `probe --model ''` is refused as the config refuses an empty model (it was sent as
/// `"model": ""`), and an unset `--api-key-env` is said once, without the library's echo
/// ("is not set: environment variable not found"). Failed before: the probe ran; the message
/// said it twice.
#[test]
fn probe_refuses_an_empty_model_and_names_an_unset_key_variable_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (addr, conns) = counting_listener();
    let url = format!("http://{addr}/v1");
    let (code, _, err) = run_in(d, &["probe", "--base-url", &url, "--model", " "], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--model"), "{err}");
    let (code, _, err) = run_in(
        d,
        &[
            "probe",
            "--base-url",
            &url,
            "--model",
            "m",
            "--api-key-env",
            "TP_SURELY_UNSET_VAR",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    // The flags go through the config's rules, so the message is the config's, naming the flag.
    assert_eq!(
        err.trim(),
        "tokenprobe: invalid flags: --api-key-env: environment variable TP_SURELY_UNSET_VAR is not set"
    );
    assert_eq!(
        conns.load(Ordering::SeqCst),
        0,
        "a rejected probe connected"
    );
}

/// A histogram layout has a bounded number of buckets: 200,000 bounds were accepted, and one job's
/// `/metrics` then weighed 38 MB (every histogram of every job gets every bound). Failed before:
/// accepted.
#[test]
fn a_bucket_layout_has_a_bounded_number_of_bounds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let t = "targets: [{name: a, base_url: 'http://127.0.0.1:1/v1', models: [m]}]\n";
    let bounds = |n: usize| {
        (1..=n)
            .map(|i| format!("{}", i as f64 / 1000.0))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (code, out) = check_config(
        d,
        &format!(
            "{PROMPTS}{t}buckets: {{time_to_first_token: [{}]}}\n",
            bounds(101)
        ),
    );
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("buckets.time_to_first_token") && out.contains("at most 100"),
        "{out}"
    );
    let (code, out) = check_config(
        d,
        &format!(
            "{PROMPTS}{t}buckets: {{time_to_first_token: [{}]}}\n",
            bounds(100)
        ),
    );
    assert_eq!(code, 0, "{out}");
}
