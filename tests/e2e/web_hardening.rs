//! `tokenprobe serve` under hostile or careless clients and files (issue 9 items 1, 2, 4, 11, 13;
//! issue 8's `/metrics` and `/` items): real `serve` and `simulate` processes on loopback,
//! ephemeral ports, killed on drop.

use crate::common;

use common::e2e::wait_for;
use common::faults;
use common::serve::{Proc, serve};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `tokenprobe simulate` with `args`; its `host:port`.
fn simulate(args: &[&str]) -> (Proc, String) {
    let mut child = Command::new(common::tokenprobe_bin())
        .args(["simulate", "--listen", "127.0.0.1:0", "--log.level", "warn"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start simulate");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("first line");
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    (Proc(child), addr)
}

/// One HTTP/1.1 GET on a fresh connection, bounded by `limit`: (status, headers, body bytes).
fn get_raw(
    addr: SocketAddr,
    path: &str,
    headers: &str,
    limit: Duration,
) -> std::io::Result<(u16, String, Vec<u8>)> {
    let mut s = TcpStream::connect_timeout(&addr, limit)?;
    s.set_read_timeout(Some(limit))?;
    s.set_write_timeout(Some(limit))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no head"))?;
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("no status"))?;
    let mut body = buf[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Ok((status, head, body))
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = b.windows(2).position(|w| w == b"\r\n") {
        let n = usize::from_str_radix(std::str::from_utf8(&b[..i]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&b[i + 2..i + 2 + n]);
        b = &b[i + 2 + n + 2..];
    }
    out
}

fn metrics(addr: SocketAddr) -> String {
    let (status, _, body) =
        get_raw(addr, "/metrics", "", Duration::from_secs(10)).expect("GET /metrics");
    assert_eq!(status, 200);
    String::from_utf8(body).expect("utf-8")
}

/// The value of one series (`name{k="v"}`) of an exposition, read by the crate's parser.
fn sample(text: &str, series: &str) -> Option<f64> {
    common::e2e::Samples::parse(text).series(series)
}

/// The one poll ([`wait_for`]) for a condition.
fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    wait_for(what, limit, || f().then_some(()));
}

fn job_config(targets: &[(&str, &str, &str)], interval: &str) -> String {
    let mut s = format!(
        "defaults: {{interval: {interval}}}\nprompts: [{{name: p, messages: [{{role: user, content: hi}}], max_tokens: 4}}]\ntargets:\n"
    );
    for (name, addr, extra) in targets {
        s.push_str(&format!(
            "  - {{name: {name}, base_url: \"http://{addr}/v1\", models: [m]{extra}}}\n"
        ));
    }
    s
}

fn probes(text: &str, target: &str) -> f64 {
    sample(
        text,
        &format!("tokenprobe_probes_total{{target=\"{target}\",model=\"m\",prompt=\"p\"}}"),
    )
    .unwrap_or(0.0)
}

fn errors(text: &str, target: &str, error_type: &str) -> f64 {
    sample(
        text,
        &format!(
            "tokenprobe_probe_errors_total{{target=\"{target}\",model=\"m\",prompt=\"p\",error_type=\"{error_type}\"}}"
        ),
    )
    .unwrap_or(0.0)
}

/// Item 1: a client that sent half a request head kept graceful shutdown waiting forever (a second
/// SIGTERM was ignored too). Now the web server drains within `--shutdown.grace`.
#[test]
fn sigterm_completes_while_a_client_is_half_open() {
    let (_sim, up) = simulate(&["--ttft", "5ms", "--itl", "1ms"]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.yml");
    std::fs::write(&cfg, job_config(&[("a", &up, "")], "1s")).unwrap();
    let (mut serve, addr, _) = serve(&cfg, &["--shutdown.grace", "2s"], None);
    let mut half = TcpStream::connect(addr).unwrap();
    half.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    // SIGTERM once serve holds the connection (sent before its accept, the client would only
    // wait in the listen backlog and test nothing).
    wait_for(
        "serve to accept the half-open client",
        Duration::from_secs(10),
        || faults::accepted(serve.0.id(), &half).then_some(()),
    );
    serve.signal("-TERM");
    // Grace 2 s, plus a margin for a busy machine; the header-read timeout (10 s) is not what ends it.
    let took = serve.wait_exit(Duration::from_secs(9));
    drop(half);
    let took = took.expect("serve did not exit within 9 s of SIGTERM with a half-open client");
    assert!(took < Duration::from_secs(5), "exit took {took:?}");
}

/// Item 1 with TLS: a client that connected and never sent a ClientHello, and one that completed
/// the handshake and sent half a request head, do not hold shutdown past `--shutdown.grace`
/// (before: a fixed 5 s drain for TLS connections).
#[test]
fn sigterm_completes_while_a_tls_client_is_half_open() {
    let (_sim, up) = simulate(&["--ttft", "5ms", "--itl", "1ms"]);
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = common::test_cert(dir.path());
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config: {{cert_file: {}, key_file: {}}}\n",
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    let cfg = dir.path().join("c.yml");
    std::fs::write(&cfg, job_config(&[("a", &up, "")], "1s")).unwrap();
    let web_arg = web.display().to_string();
    let (mut serve, addr, _) = serve(
        &cfg,
        &["--shutdown.grace", "1s", "--web.config.file", &web_arg],
        None,
    );
    let silent = TcpStream::connect(addr).unwrap();
    // A client that completed the handshake and sent half a request head.
    let mut roots = rustls::RootCertStore::empty();
    {
        use rustls_pki_types::pem::PemObject;
        for c in rustls_pki_types::CertificateDer::pem_file_iter(&cert).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(client), name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, TcpStream::connect(addr).unwrap());
    tls.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    tls.flush().unwrap();
    assert!(!tls.conn.is_handshaking(), "handshake done");
    wait_for(
        "serve to accept both clients",
        Duration::from_secs(10),
        || {
            (faults::accepted(serve.0.id(), &silent)
                && faults::accepted(serve.0.id(), tls.get_ref()))
            .then_some(())
        },
    );
    serve.signal("-TERM");
    let took = serve.wait_exit(Duration::from_secs(9));
    drop((silent, tls));
    let took = took.expect("serve (TLS) did not exit within 9 s of SIGTERM");
    // Grace 1 s plus a margin; before, TLS connections had a fixed 5 s drain.
    assert!(took < Duration::from_secs(4), "exit took {took:?}");
}

/// A `serve` with a 60 s grace whose one job has a probe in flight: its target accepted the
/// connection and never answers.
struct InFlight {
    serve: Proc,
    lines: Arc<std::sync::Mutex<Vec<String>>>,
    /// The probe's connection, as the target holds it: dropping it ends the probe.
    conn: TcpStream,
    _target: std::net::TcpListener,
    _dir: tempfile::TempDir,
}

fn serve_with_a_probe_in_flight() -> InFlight {
    let target = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = target.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.yml");
    std::fs::write(&cfg, job_config(&[("a", &up, "")], "1s")).unwrap();
    let (serve, _addr, lines) = serve(&cfg, &["--shutdown.grace", "60s"], None);
    let (conn, _) = target.accept().unwrap();
    InFlight {
        serve,
        lines,
        conn,
        _target: target,
        _dir: dir,
    }
}

/// Item 1: a second SIGTERM exits at once, even while a probe holds the grace period.
#[test]
fn a_second_sigterm_exits_at_once() {
    // Bound whole: dropping the probe's connection would end the probe.
    let mut inflight = serve_with_a_probe_in_flight();
    let (serve, lines) = (&mut inflight.serve, inflight.lines.clone());
    serve.signal("-TERM");
    assert!(
        serve.wait_exit(Duration::from_secs(1)).is_none(),
        "the in-flight probe holds the grace period:\n{}",
        lines.lock().unwrap().join("\n")
    );
    serve.signal("-TERM");
    let took = serve
        .wait_exit(Duration::from_secs(5))
        .expect("a second SIGTERM must exit at once");
    assert!(took < Duration::from_secs(3), "{took:?}");
    // The reader thread may still be copying serve's last lines.
    wait_until(
        "the log of the second stop signal",
        Duration::from_secs(5),
        || {
            lines
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("second stop signal"))
        },
    );
}

/// Item 2: with the fd limit at 400, 600 half-open web clients made probes fail as `connect`
/// ("Too many open files"), blamed on the target. Now web connections are capped below the limit
/// with a reserve for probes: no probe fails, and /metrics answers once the flood is gone.
#[test]
fn a_half_open_flood_under_a_low_fd_limit_fails_no_probe() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let events_arg = events.display().to_string();
    let (_sim, up) = simulate(&["--ttft", "5ms", "--itl", "1ms", "--event-log", &events_arg]);
    // Requests the simulator answered in full (one line each in its event log).
    let answered = |p: &std::path::Path| {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"end\":\"complete\""))
            .count()
    };
    let cfg = dir.path().join("c.yml");
    std::fs::write(&cfg, job_config(&[("a", &up, "")], "100ms")).unwrap();
    let (_serve, addr, lines) = serve(&cfg, &[], Some(400));
    wait_until("a first probe", Duration::from_secs(20), || {
        probes(&metrics(addr), "a") >= 1.0
    });
    let mut flood = Vec::new();
    let mut refused = 0;
    while flood.len() < 600 && refused < 3 {
        // Past the cap connections wait in the listen backlog (128); past that the kernel drops
        // the SYN, so a connect times out: then the flood is as big as it can get.
        match TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
            Ok(mut s) => {
                let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n");
                flood.push(s);
            }
            Err(_) => refused += 1,
        }
    }
    // More than the cap (36) plus the backlog (128) cannot connect after the fix; before it, all
    // 600 did (accepted until the fds ran out).
    assert!(flood.len() > 100, "only {} flood connections", flood.len());
    // The flood holds its connections while 20 probes reach the target (its event log counts
    // them; /metrics cannot answer during the flood, its counters are read after it).
    let before = answered(&events);
    wait_until(
        "20 probes during the flood",
        Duration::from_secs(30),
        || answered(&events) >= before + 20,
    );
    drop(flood);
    let mut text = String::new();
    wait_until(
        "/metrics after the flood",
        Duration::from_secs(30),
        || match get_raw(addr, "/metrics", "", Duration::from_secs(2)) {
            Ok((200, _, b)) => {
                text = String::from_utf8_lossy(&b).into_owned();
                true
            }
            _ => false,
        },
    );
    assert!(probes(&text, "a") >= 20.0, "probes kept running:\n{text}");
    for e in ["connect", "timeout_connect", "malformed"] {
        assert_eq!(errors(&text, "a", e), 0.0, "{e} errors:\n{text}");
    }
    assert_eq!(
        sample(
            &text,
            "tokenprobe_internal_errors_total{reason=\"fd_exhausted\"}"
        ),
        Some(0.0)
    );
    let logs = lines.lock().unwrap();
    assert!(
        logs.iter()
            .any(|l| l.contains("\"max_web_connections\":36")),
        "the cap is (400 - 256) / 4 = 36"
    );
}

/// Item 4: a FIFO as `api_key_file` froze /metrics, /-/healthy, every other job and SIGTERM. Now
/// it fails that job's probes only, as `auth` with a clear message.
#[cfg(unix)]
/// A key file that is a FIFO is refused by its name when the config is loaded; one that turns
/// into a FIFO after the load (a secrets mount gone wrong) fails only its own job's probes, at once
/// (never opened, so nothing hangs), and `/metrics`, `/-/healthy` and SIGTERM keep working.
#[test]
fn a_fifo_key_file_fails_only_its_own_job() {
    let (_sim, up) = simulate(&["--ttft", "5ms", "--itl", "1ms"]);
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("key");
    let mkfifo = |p: &std::path::Path| {
        assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
    };
    mkfifo(&key_path);
    let cfg = dir.path().join("c.yml");
    let key = format!(", api_key_file: \"{}\"", key_path.display());
    std::fs::write(
        &cfg,
        job_config(&[("fifo", &up, &key), ("b", &up, "")], "500ms"),
    )
    .unwrap();
    let t = Instant::now();
    let out = Command::new(common::tokenprobe_bin())
        .args(["check-config", "--config.file"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains(&format!(
            "api_key_file {} is not a regular file (a FIFO)",
            key_path.display()
        )),
        "{text}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // A regular key file at start, then a FIFO in its place.
    std::fs::remove_file(&key_path).unwrap();
    std::fs::write(&key_path, "sk-test\n").unwrap();
    let (mut serve, addr, lines) = serve(&cfg, &["--shutdown.grace", "2s"], None);
    std::fs::remove_file(&key_path).unwrap();
    mkfifo(&key_path);
    wait_until(
        "the fifo job to fail as auth while the other keeps probing",
        Duration::from_secs(20),
        || {
            let text = metrics(addr);
            errors(&text, "fifo", "auth") >= 2.0 && probes(&text, "b") >= 3.0
        },
    );
    let t = Instant::now();
    let text = metrics(addr);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let (s, _, body) = get_raw(addr, "/-/healthy", "", Duration::from_secs(2)).unwrap();
    assert_eq!((s, body.as_slice()), (200, &b"Healthy\n"[..]));
    assert_eq!(errors(&text, "b", "auth"), 0.0, "{text}");
    assert!(
        lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("is not a regular file (a FIFO)")),
        "the log says why"
    );
    serve.signal("-TERM");
    assert!(
        serve.wait_exit(Duration::from_secs(8)).is_some(),
        "SIGTERM with a FIFO key file"
    );
}

/// A reload (SIGHUP or `POST /-/reload`) onto a config whose dataset is a FIFO (or any file that
/// is not a regular file) is refused at once, naming the file; the running config keeps going,
/// `/metrics`, `/-/healthy` and `/-/reload` keep answering, and SIGTERM ends the process. The
/// same config is refused by `check-config` and by `serve` at start.
#[test]
fn a_reload_onto_a_fifo_dataset_is_refused_and_serve_keeps_answering() {
    let (_sim, up) = simulate(&["--ttft", "5ms", "--itl", "1ms"]);
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("conversations.jsonl");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let cfg = dir.path().join("c.yml");
    std::fs::write(&cfg, job_config(&[("a", &up, "")], "500ms")).unwrap();
    let (mut serve, addr, _lines) = serve(&cfg, &["--shutdown.grace", "2s"], None);
    wait_until("a first probe", Duration::from_secs(20), || {
        probes(&metrics(addr), "a") >= 1.0
    });
    let fifo_config = format!(
        "defaults: {{interval: 500ms}}\nprompts: [{{name: p, dataset: {{file: \"{}\", format: jsonl}}}}]\ntargets:\n  - {{name: a, base_url: \"http://{up}/v1\", models: [m]}}\n",
        fifo.display()
    );
    std::fs::write(&cfg, &fifo_config).unwrap();
    for reload in ["POST", "SIGHUP"] {
        let t = Instant::now();
        if reload == "POST" {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            write!(
                s,
                "POST /-/reload HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let mut answer = String::new();
            s.read_to_string(&mut answer).unwrap();
            assert!(answer.starts_with("HTTP/1.1 500"), "{answer}");
            assert!(
                answer.contains("reload refused") && answer.contains("prompts[0].dataset.file"),
                "{answer}"
            );
        } else {
            serve.signal("-HUP");
        }
        wait_until("the reload refused", Duration::from_secs(10), || {
            sample(&metrics(addr), "tokenprobe_config_last_reload_successful") == Some(0.0)
        });
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{reload}: {:?}",
            t.elapsed()
        );
        let (s, _, _) = get_raw(addr, "/-/healthy", "", Duration::from_secs(2)).unwrap();
        assert_eq!(s, 200, "{reload}");
        // The running config keeps probing.
        let before = probes(&metrics(addr), "a");
        wait_until(
            "the old job to keep probing",
            Duration::from_secs(10),
            || probes(&metrics(addr), "a") > before,
        );
    }
    serve.signal("-TERM");
    assert!(serve.wait_exit(Duration::from_secs(8)).is_some(), "SIGTERM");
    // The same config at start: refused, naming the file.
    for cmd in [
        &["check-config", "--config.file"][..],
        &["serve", "--config.file"],
    ] {
        let t = Instant::now();
        let out = Command::new(common::tokenprobe_bin())
            .args(cmd)
            .arg(&cfg)
            .args(if cmd[0] == "serve" {
                &["--web.listen-address", "127.0.0.1:0"][..]
            } else {
                &[]
            })
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{cmd:?}: {text}");
        assert!(
            text.contains(&format!(
                "dataset {} is not a regular file (a FIFO)",
                fifo.display()
            )),
            "{cmd:?}: {text}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{cmd:?}: {:?}",
            t.elapsed()
        );
    }
}

/// An 8 MiB dataset is held near its size (parsed into its conversations without a tree of JSON
/// values), reloads do not make memory grow, and `/metrics` answers while one parses.
#[test]
fn a_large_dataset_costs_about_its_size_and_reloads_do_not_grow_memory() {
    let (_sim, up) = simulate(&["--ttft", "5ms", "--itl", "1ms"]);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("sharegpt.json");
    // ShareGPT entries of three turns, just under the 8 MiB input cap.
    let mut text = String::from("[");
    let mut i = 0u64;
    while text.len() < (8 << 20) - (64 << 10) {
        if i > 0 {
            text.push(',');
        }
        let turn = |n: u64| "lorem ipsum dolor sit amet ".repeat(1 + (n % 9) as usize);
        text.push_str(&format!(
            "{{\"id\":\"e{i}\",\"conversations\":[{{\"from\":\"human\",\"value\":\"{}\"}},{{\"from\":\"gpt\",\"value\":\"{}\"}},{{\"from\":\"human\",\"value\":\"{}\"}}]}}",
            turn(i),
            turn(i + 3),
            turn(i + 5)
        ));
        i += 1;
    }
    text.push(']');
    std::fs::write(&data, &text).unwrap();
    let size_mib = text.len() as f64 / f64::from(1 << 20);
    let cfg = dir.path().join("c.yml");
    std::fs::write(
        &cfg,
        format!(
            "defaults: {{interval: 1s}}\nprompts: [{{name: p, dataset: {{file: \"{}\", format: sharegpt}}, max_tokens: 4}}]\ntargets:\n  - {{name: a, base_url: \"http://{up}/v1\", models: [m]}}\n",
            data.display()
        ),
    )
    .unwrap();
    let (mut serve, addr, _lines) = serve(&cfg, &["--shutdown.grace", "2s"], None);
    let rss = |pid: u32| -> f64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
            .unwrap()
            / 1024.0
    };
    let pid = serve.0.id();
    wait_until("a first probe", Duration::from_secs(20), || {
        probes(&metrics(addr), "a") >= 1.0
    });
    let start = rss(pid);
    let mut slowest = Duration::ZERO;
    let mut after = Vec::new();
    for _ in 0..5 {
        let reload = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            write!(s, "POST /-/reload HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            answer
        });
        // /metrics while the reload parses the dataset (on a blocking thread, not the web runtime).
        while !reload.is_finished() {
            let t = Instant::now();
            let _ = metrics(addr);
            slowest = slowest.max(t.elapsed());
        }
        let answer = reload.join().unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        after.push(rss(pid));
    }
    eprintln!(
        "dataset {size_mib:.1} MiB: serve RSS {start:.1} MiB after start, {after:?} after each of 5 reloads; slowest /metrics during a reload {slowest:?}"
    );
    // The dataset's conversations and the process: well under 35 times the file's size.
    assert!(
        start < 40.0 + 3.0 * size_mib,
        "RSS {start:.1} MiB for a {size_mib:.1} MiB dataset"
    );
    // No growth across reloads: what one reload freed is reused by the next. serve caps
    // glibc's malloc arenas at two and hands what a reload freed back to the system, so RSS
    // stays within a bound whatever the number of reloads: seen 42.7 MiB, then 43.0 to 43.3
    // after each reload, and once 43.3 then 59.4 from the fourth on (a parse in the second
    // arena). With glibc's default of 16 arenas on 2 cores it reached 86 MiB (42, 70, 70, 86,
    // 86, 86). A leaked dataset per reload would pass the bound by the third reload.
    assert!(
        after.iter().all(|&a| a < start + 2.5 * size_mib),
        "RSS {start:.1} -> {after:?} MiB over 5 reloads"
    );
    assert!(
        slowest < Duration::from_millis(500),
        "/metrics took {slowest:?} during a reload"
    );
    serve.signal("-TERM");
    assert!(serve.wait_exit(Duration::from_secs(8)).is_some());
}

/// Item 11: a reload that removed a job while its probe ran let the finished probe re-create the
/// job's series forever. Now a removed job's late probe records nothing.
#[test]
fn a_job_removed_mid_probe_leaves_no_series() {
    // The removed job's target: accepts (the probe is then in flight) and answers only when the
    // test says so.
    let slow = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let slow_up = slow.local_addr().unwrap().to_string();
    let (_fast, fast_up) = simulate(&["--ttft", "5ms", "--itl", "1ms"]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.yml");
    std::fs::write(
        &cfg,
        job_config(&[("slow", &slow_up, ""), ("fast", &fast_up, "")], "1s"),
    )
    .unwrap();
    let (serve, addr, lines) = serve(&cfg, &[], None);
    let (mut conn, _) = slow.accept().unwrap();
    let before = metrics(addr);
    assert!(before.contains("target=\"slow\""));
    assert_eq!(probes(&before, "slow"), 0.0, "its probe is still running");
    std::fs::write(&cfg, job_config(&[("fast", &fast_up, "")], "1s")).unwrap();
    serve.signal("-HUP");
    wait_until("the reload", Duration::from_secs(10), || {
        !metrics(addr).contains("target=\"slow\"")
    });
    // Now the removed job's probe ends (a 500 answer), after its series were deleted.
    let _ = conn.write_all(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno",
    );
    drop(conn);
    // The removed job's probe has ended (its failure is logged)...
    wait_until(
        "the removed job's probe to end",
        Duration::from_secs(10),
        || {
            lines
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("probe failed") && l.contains("slow"))
        },
    );
    // ...and an exposition encoded after it (a newer probe of the other job in it) is read.
    let fast_then = probes(&metrics(addr), "fast");
    wait_until(
        "an exposition newer than that end",
        Duration::from_secs(10),
        || probes(&metrics(addr), "fast") > fast_then,
    );
    let after = metrics(addr);
    assert!(
        !after.contains("target=\"slow\""),
        "zombie series of the removed job:\n{}",
        after
            .lines()
            .filter(|l| l.contains("slow"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(probes(&after, "fast") >= 1.0);
}

/// Items 5 and 13, issue 8: /metrics is gzipped when asked, the same exposition either way
/// (served from one encode per scrape wave), series sorted by labels; `/` shows each job's last
/// result.
#[test]
fn metrics_gzip_sorted_series_and_last_results_on_the_index() {
    let (_sim, up) = simulate(&["--ttft", "5ms", "--itl", "1ms"]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.yml");
    let (_dead, dead) = {
        // A port nobody listens on: its job fails as `connect`.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap().to_string();
        drop(l);
        ((), a)
    };
    std::fs::write(
        &cfg,
        job_config(
            &[("zeta", &up, ""), ("alpha", &up, ""), ("down", &dead, "")],
            "500ms",
        ),
    )
    .unwrap();
    let (_serve, addr, _) = serve(&cfg, &[], None);
    wait_until("every job to probe", Duration::from_secs(20), || {
        let t = metrics(addr);
        ["zeta", "alpha", "down"]
            .iter()
            .all(|j| probes(&t, j) >= 1.0)
    });
    let limit = Duration::from_secs(10);
    let (s, head, gz) = get_raw(addr, "/metrics", "Accept-Encoding: gzip\r\n", limit).unwrap();
    assert_eq!(s, 200);
    assert!(
        head.to_ascii_lowercase().contains("content-encoding: gzip"),
        "{head}"
    );
    let mut plain = String::new();
    flate2::read::GzDecoder::new(gz.as_slice())
        .read_to_string(&mut plain)
        .expect("valid gzip");
    let (_, head2, raw) = get_raw(addr, "/metrics", "", limit).unwrap();
    assert!(!head2.to_ascii_lowercase().contains("content-encoding"));
    assert!(gz.len() * 4 < raw.len(), "{} vs {}", gz.len(), raw.len());
    let names = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.rsplit_once(' ').unwrap().0.to_owned())
            .collect()
    };
    assert_eq!(
        names(&plain),
        names(&String::from_utf8(raw).unwrap()),
        "the same series in the same order"
    );
    let targets: Vec<&str> = plain
        .lines()
        .filter(|l| l.starts_with("tokenprobe_probes_total{"))
        .map(|l| l.split('"').nth(1).unwrap())
        .collect();
    assert_eq!(targets, ["alpha", "down", "zeta"]);

    let (s, _, index) = get_raw(addr, "/", "", limit).unwrap();
    assert_eq!(s, 200);
    let index = String::from_utf8(index).unwrap();
    let row = |job: &str| {
        index
            .lines()
            .find(|l| l.contains(&format!("<td>{job}/m/p</td>")))
            .unwrap_or_else(|| panic!("no row for {job}:\n{index}"))
            .to_owned()
    };
    assert!(
        row("alpha").contains("<td>success</td>"),
        "{}",
        row("alpha")
    );
    assert!(
        row("alpha").contains(" ms</td>"),
        "TTFT shown: {}",
        row("alpha")
    );
    assert!(
        row("down").contains("<td>error</td><td>connect</td>"),
        "{}",
        row("down")
    );
    assert!(row("down").contains("UTC</td>"), "when: {}", row("down"));
}

/// Item 1: the first SIGTERM waits for the probe in flight, every time. Before, the web server
/// (stopping on the same signal, with no connection open) was often taken for one that had ended
/// by itself, and the process exited at once with status 0 without waiting for the probe: 7 of 10
/// runs. Repeated, because it was a race.
#[test]
fn the_first_sigterm_always_waits_for_the_probe_in_flight() {
    for round in 0..5 {
        let InFlight {
            mut serve,
            lines,
            conn,
            _target,
            _dir,
        } = serve_with_a_probe_in_flight();
        serve.signal("-TERM");
        assert!(
            serve.wait_exit(Duration::from_millis(700)).is_none(),
            "round {round}: exited with a probe in flight:\n{}",
            lines.lock().unwrap().join("\n")
        );
        // The probe ends (its target closes), and then the process exits by itself.
        drop(conn);
        let took = serve.wait_exit(Duration::from_secs(10));
        assert!(
            took.is_some(),
            "round {round}: did not exit after the probe ended"
        );
    }
}
