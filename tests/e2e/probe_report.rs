//! `tokenprobe probe --format text` for a probe that never connected: the real binary against a
//! loopback port nobody listens on. The report must not show a TCP connect time or an output
//! token count for it, and its outcome line reads `after 0.5 ms`, not `after      0.5 ms`.

use std::process::Command;

/// Replaces every number in `s` with `N`, so the snapshot keeps layout and words, not timings or
/// the port.
fn redact_numbers(s: &str) -> String {
    let re = regex::Regex::new(r"-?\d+(\.\d+)?").expect("regex");
    re.replace_all(s, "N").into_owned()
}

/// A loopback port with no listener: bound by the kernel's ephemeral allocator, then released.
/// (Another process could take it in between; the assertions would then fail loudly, not pass.)
fn refused_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    port
}

#[test]
fn refused_connection_text_report() {
    let port = refused_port();
    let out = Command::new(env!("CARGO_BIN_EXE_tokenprobe"))
        .args([
            "probe",
            "--base-url",
            &format!("http://127.0.0.1:{port}/v1"),
            "--model",
            "m",
            "--proxy",
            "none",
            "--timeout-connect",
            "5s",
        ])
        .output()
        .expect("run tokenprobe probe");
    assert_eq!(out.status.code(), Some(1), "a failed probe exits 1");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Connection refused"),
        "not a refused connection:\n{text}"
    );
    let outcome = text
        .lines()
        .find(|l| l.starts_with("outcome"))
        .expect("an outcome line");
    let re = regex::Regex::new(r"^outcome    FAILED: connect \(no response\) after \d+\.\d ms$")
        .expect("regex");
    assert!(re.is_match(outcome), "outcome line: {outcome:?}");
    let connect = text
        .lines()
        .find(|l| l.trim_start().starts_with("connect "))
        .expect("a connect row");
    assert!(
        connect.contains("failed") && !connect.contains(" ms"),
        "a refused connection has no TCP connect time: {connect:?}"
    );
    assert!(
        !text.contains("output "),
        "no output token count for a probe that never connected:\n{text}"
    );
    insta::assert_snapshot!(redact_numbers(&text));
}
