//! `tokenprobe serve` as a process: reload (SIGHUP and `POST /-/reload`), SIGTERM, the web config
//! (basic auth, TLS), and snapshots of the `/metrics` layout and the `probe` text report. The
//! upstream is the in-repo replay server serving shared case 01 to every connection.

use crate::common;

use common::case::Case;
use common::e2e::{http_get, http_request};
use common::replay_server::{ReplayHandle, ReplayServer};
use common::serve::Proc;
use hyper::header::{AUTHORIZATION, HeaderValue};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tokenprobe::transport::{Fetcher as Client, TlsOptions};

/// A `tokenprobe serve` child on an ephemeral port, killed on drop.
struct Serve {
    child: Proc,
    addr: SocketAddr,
}

impl Serve {
    fn start(config: &Path, extra: &[&str]) -> Serve {
        let (child, addr, _) = common::serve::serve(config, extra, None);
        Serve { child, addr }
    }

    fn signal(&self, sig: &str) {
        self.child.signal(sig);
    }
}

/// `GET url` with the tests' HTTP client: its status and body.
async fn get(url: &str) -> (u16, String) {
    let r = http_get(url, &[]);
    (r.status, r.body)
}

/// The value of the first sample line that starts with `series` (name plus labels, as exposed).
/// The value of one series (`name{k="v"}`) of an exposition, read by the crate's parser.
fn sample(text: &str, series: &str) -> Option<f64> {
    common::e2e::Samples::parse(text).series(series)
}

async fn wait_until(what: &str, timeout: Duration, mut f: impl AsyncFnMut() -> bool) {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn upstream() -> (SocketAddr, ReplayHandle) {
    let case =
        Case::load(&common::cases_dir().join("01-role-only-first-chunk.txt")).expect("case 01");
    ReplayServer::start(&case).await.expect("replay server")
}

fn config(upstream: SocketAddr, models: &str) -> String {
    format!(
        "defaults: {{interval: 1s}}\nprompts: [{{name: p, messages: [{{role: user, content: hi}}], max_tokens: 8}}]\n\
         targets:\n  - {{name: a, base_url: \"http://{upstream}/v1\", models: [{models}]}}\n"
    )
}

fn probes(text: &str, model: &str) -> Option<f64> {
    sample(
        text,
        &format!("tokenprobe_probes_total{{target=\"a\",model=\"{model}\",prompt=\"p\"}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_keeps_unchanged_jobs_and_sigterm_exits_cleanly() {
    let (up, _h) = upstream().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("c.yml");
    std::fs::write(&cfg, config(up, "m1, m2")).expect("write");
    let mut serve = Serve::start(&cfg, &[]);
    let base = format!("http://{}", serve.addr);
    let metrics = format!("{base}/metrics");

    wait_until("both jobs to probe", Duration::from_secs(20), async || {
        let (_, t) = get(&metrics).await;
        probes(&t, "m1").unwrap_or(0.0) >= 1.0 && probes(&t, "m2").unwrap_or(0.0) >= 1.0
    })
    .await;
    let (_, before) = get(&metrics).await;
    let m1_before = probes(&before, "m1").expect("m1 series");
    assert_eq!(
        sample(&before, "tokenprobe_config_last_reload_successful"),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &before,
            "tokenprobe_probe_errors_total{target=\"a\",model=\"m1\",prompt=\"p\",error_type=\"rate_limited\"}"
        ),
        Some(0.0),
        "every error_type exists at 0"
    );

    // SIGHUP with m2 replaced by m3: m1 keeps its series (the counter is not reset), m2 goes away.
    std::fs::write(&cfg, config(up, "m1, m3")).expect("write");
    serve.signal("-HUP");
    wait_until("m3 to probe", Duration::from_secs(20), async || {
        let (_, t) = get(&metrics).await;
        probes(&t, "m3").unwrap_or(0.0) >= 1.0
    })
    .await;
    let (_, after) = get(&metrics).await;
    assert!(
        probes(&after, "m2").is_none(),
        "removed job's series must go away"
    );
    assert!(!after.contains("model=\"m2\""), "no m2 series at all");
    assert!(
        probes(&after, "m1").expect("m1 kept") >= m1_before,
        "m1 counter kept, not reset"
    );

    // An invalid config is refused over HTTP; the old one keeps running.
    std::fs::write(&cfg, "targets: [oops").expect("write");
    let r = http_request("POST", &format!("{base}/-/reload"), &[], b"");
    assert_eq!(r.status, 500);
    assert!(
        r.body.contains("previous config keeps running"),
        "{}",
        r.body
    );
    let (_, t) = get(&metrics).await;
    assert_eq!(
        sample(&t, "tokenprobe_config_last_reload_successful"),
        Some(0.0)
    );
    let m1_now = probes(&t, "m1").expect("m1 still there");
    wait_until("m1 to keep probing", Duration::from_secs(10), async || {
        let (_, t) = get(&metrics).await;
        probes(&t, "m1").unwrap_or(0.0) > m1_now
    })
    .await;

    // `/` lists jobs and never a secret; health endpoints answer.
    let (s, index) = get(&format!("{base}/")).await;
    assert_eq!(s, 200);
    assert!(index.contains("a/m1/p") && index.contains("a/m3/p"));
    assert_eq!(get(&format!("{base}/-/healthy")).await.0, 200);
    assert_eq!(get(&format!("{base}/-/ready")).await.0, 200);

    serve.signal("-TERM");
    let end = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = serve.child.0.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < end, "serve did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_config_basic_auth_and_tls() {
    let (up, _h) = upstream().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("c.yml");
    std::fs::write(&cfg, config(up, "m1")).expect("write");
    let (cert, key) = common::test_cert(dir.path());
    let hash = bcrypt::hash("s3cret", 4).expect("bcrypt");
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config: {{cert_file: {}, key_file: {}}}\nbasic_auth_users:\n  prom: '{hash}'\n",
            cert.display(),
            key.display()
        ),
    )
    .expect("write");
    let web_arg = web.display().to_string();
    let serve = Serve::start(&cfg, &["--web.config.file", &web_arg]);
    let mut client = Client::new(
        TlsOptions {
            ca_file: Some(cert.clone()),
            ..TlsOptions::default()
        },
        Duration::from_secs(5),
    )
    .expect("client");
    let base = format!("https://localhost:{}", serve.addr.port());
    let basic = |user_pass: &str| {
        use base64::Engine as _;
        let v = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_pass)
        );
        [(AUTHORIZATION, HeaderValue::from_str(&v).expect("header"))]
    };
    let metrics = format!("{base}/metrics");
    let r = client.get(&metrics, &[], 1 << 20).await.expect("GET");
    assert_eq!(r.status, 401, "no credentials");
    let r = client
        .get(&metrics, &basic("prom:wrong"), 1 << 20)
        .await
        .expect("GET");
    assert_eq!(r.status, 401, "wrong password");
    let r = client
        .get(&metrics, &basic("prom:s3cret"), 64 << 20)
        .await
        .expect("GET");
    assert_eq!(r.status, 200);
    assert!(String::from_utf8_lossy(&r.body).contains("tokenprobe_build_info"));
    let r = client
        .get(&format!("{base}/-/healthy"), &[], 1 << 20)
        .await
        .expect("GET");
    assert_eq!(r.status, 200, "health needs no credentials");
    let plain = client
        .get(
            &format!("http://127.0.0.1:{}/metrics", serve.addr.port()),
            &[],
            1 << 20,
        )
        .await;
    assert!(
        plain.is_err() || plain.is_ok_and(|r| !(200..300).contains(&r.status)),
        "plain HTTP must not serve metrics"
    );
}

/// Replaces every number in `s` with `N`, so snapshots keep layout and names, not timings.
fn redact_numbers(s: &str) -> String {
    let re = regex::Regex::new(r"-?\d+(\.\d+)?(e[-+]?\d+)?").expect("regex");
    re.replace_all(s, "N").into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_metrics_layout_and_probe_report() {
    let (up, _h) = upstream().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("c.yml");
    std::fs::write(&cfg, config(up, "m1")).expect("write");
    let serve = Serve::start(&cfg, &[]);
    let metrics = format!("http://{}/metrics", serve.addr);
    wait_until("a probe", Duration::from_secs(20), async || {
        let (_, t) = get(&metrics).await;
        probes(&t, "m1").unwrap_or(0.0) >= 1.0
    })
    .await;
    let (_, text) = get(&metrics).await;
    // Names, types, help texts and label sets; bucket counts, sums and timestamps vary.
    let layout: Vec<String> = text
        .lines()
        .filter(|l| !l.contains("_bucket{"))
        .map(|l| match l.rsplit_once(' ') {
            Some((series, _)) if !l.starts_with('#') => format!("{series} <value>"),
            _ => l.to_owned(),
        })
        .map(|l| l.replace(&up.to_string(), "<upstream>"))
        .map(|l| l.replace(env!("CARGO_PKG_VERSION"), "<version>"))
        .collect();
    // Series come out sorted by labels (issue 8), so the snapshot pins the order as served.
    insta::assert_snapshot!("metrics_layout", layout.join("\n"));

    let out = Command::new(common::tokenprobe_bin())
        .args([
            "probe",
            "--base-url",
            &format!("http://{up}/v1"),
            "--model",
            "m",
            "--proxy",
            "none",
        ])
        .output()
        .expect("probe");
    assert!(out.status.success());
    let report = String::from_utf8_lossy(&out.stdout).replace(&up.to_string(), "<upstream>");
    insta::assert_snapshot!("probe_text_report", redact_numbers(&report));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_pauses_the_target() {
    let case =
        Case::load(&common::cases_dir().join("24-http429-retry-after.txt")).expect("case 24");
    let (up, h) = ReplayServer::start(&case).await.expect("replay server");
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("c.yml");
    std::fs::write(&cfg, config(up, "m1")).expect("write");
    let serve = Serve::start(&cfg, &[]);
    let metrics = format!("http://{}/metrics", serve.addr);
    let l = "target=\"a\",model=\"m1\",prompt=\"p\"";
    wait_until("two skipped ticks", Duration::from_secs(20), async || {
        let (_, t) = get(&metrics).await;
        sample(
            &t,
            &format!("tokenprobe_probes_skipped_total{{{l},reason=\"rate_limited\"}}"),
        )
        .unwrap_or(0.0)
            >= 2.0
    })
    .await;
    let (_, t) = get(&metrics).await;
    assert_eq!(
        sample(&t, &format!("tokenprobe_retry_after_seconds{{{l}}}")),
        Some(6.5)
    );
    assert_eq!(
        sample(
            &t,
            &format!("tokenprobe_probe_errors_total{{{l},error_type=\"rate_limited\"}}")
        ),
        Some(1.0)
    );
    assert_eq!(
        h.requests_received(),
        1,
        "no request while the target asked to wait 6.5 s"
    );
}

/// Each request of the simulator's event log as (arrival, end) in Unix seconds.
fn request_spans(log: &Path) -> Vec<(f64, f64)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|r| common::e2e::record_span(&r))
        .collect()
}

/// Two jobs on one server: their probes overlap and are flagged `concurrent_probe` (the server's
/// own log shows two requests in flight at once); with `max_in_flight: 1` on the target they go
/// one at a time (the log shows no overlap), none is flagged, and the wait is counted apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_of_one_target_are_flagged_when_they_overlap_or_held_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("events.jsonl");
    let (_sim, url) = common::e2e::start_simulate(
        dir.path(),
        &[
            "--ttft",
            "700ms",
            "--itl",
            "10ms",
            "--output-tokens",
            "4",
            "--event-log",
            log.to_str().expect("path"),
        ],
    );
    for (limit, overlap) in [("", true), ("max_in_flight: 1, ", false)] {
        // The requests of this round: those logged from now on.
        let before = request_spans(&log).len();
        let cfg = dir.path().join("two-jobs.yml");
        std::fs::write(
            &cfg,
            format!(
                "defaults: {{interval: 1s}}\nprompts: [{{name: p, messages: [{{role: user, content: hi}}], max_tokens: 4}}]\n\
                 targets:\n  - {{name: a, {limit}base_url: \"{url}/v1\", models: [m1, m2]}}\n"
            ),
        )
        .expect("config");
        let s = Serve::start(&cfg, &[]);
        let m = format!("http://{}/metrics", s.addr);
        let flagged = |text: &str, model: &str| {
            sample(
                text,
                &format!(
                    "tokenprobe_probe_flags_total{{target=\"a\",model=\"{model}\",prompt=\"p\",flag=\"concurrent_probe\"}}"
                ),
            )
        };
        // Enough probes of both jobs to see them meet (or, with the limit, to have had to).
        wait_until(
            "six probes of each job",
            Duration::from_secs(40),
            async || {
                let (_, text) = get(&m).await;
                probes(&text, "m1").is_some_and(|n| n >= 6.0)
                    && probes(&text, "m2").is_some_and(|n| n >= 6.0)
            },
        )
        .await;
        let (_, text) = get(&m).await;
        drop(s);
        let spans: Vec<(f64, f64)> = request_spans(&log).split_off(before);
        let concurrent = spans
            .iter()
            .enumerate()
            .any(|(i, a)| spans.iter().skip(i + 1).any(|b| a.0 < b.1 && b.0 < a.1));
        let flags = flagged(&text, "m1").unwrap_or(0.0) + flagged(&text, "m2").unwrap_or(0.0);
        let waited = ["m1", "m2"]
            .iter()
            .map(|model| {
                sample(
                    &text,
                    &format!("tokenprobe_target_wait_seconds_total{{target=\"a\",model=\"{model}\",prompt=\"p\"}}"),
                )
                .unwrap_or(0.0)
            })
            .sum::<f64>();
        if overlap {
            assert!(concurrent, "700 ms probes every second overlap: {spans:?}");
            assert!(flags > 0.0, "overlapping probes are flagged:\n{text}");
            assert_eq!(waited, 0.0, "no limit, no wait");
        } else {
            assert!(
                !concurrent,
                "max_in_flight 1: the server never saw two at once: {spans:?}"
            );
            assert_eq!(flags, 0.0, "nothing overlapped:\n{text}");
            assert!(waited > 0.1, "the probes held back waited: {waited}");
        }
    }
}

/// Issue 25 item 4: a simulator with a quota of 3 requests a minute, stated in Anthropic's
/// headers (the other spellings are the unit tests'). Each answer's headroom becomes
/// `tokenprobe_ratelimit_*{kind="requests"}`: after the third probe none is left, the fourth is
/// refused (429, `rate_limited`) with the quota still stated, and the reset is the rest of the
/// minute. The simulator's event log is the truth for how many requests it answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_headroom_is_exported_from_the_answers_headers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("events.jsonl");
    let started = Instant::now();
    let (_sim, url) = common::e2e::start_simulate(
        dir.path(),
        &[
            "--ttft",
            "5ms",
            "--itl",
            "1ms",
            "--output-tokens",
            "2",
            "--rate-limit",
            "3/1m",
            "--rate-limit-headers",
            "anthropic",
            "--event-log",
            log.to_str().expect("path"),
        ],
    );
    let cfg = dir.path().join("c.yml");
    std::fs::write(
        &cfg,
        format!(
            "defaults: {{interval: 200ms}}\nprompts: [{{name: p, messages: [{{role: user, content: hi}}], max_tokens: 2}}]\n\
             targets:\n  - {{name: a, base_url: \"{url}/v1\", models: [m1]}}\n"
        ),
    )
    .expect("config");
    let serve = Serve::start(&cfg, &[]);
    let metrics = format!("http://{}/metrics", serve.addr);
    let l = "target=\"a\",model=\"m1\",prompt=\"p\"";
    wait_until("the quota's refusal", Duration::from_secs(20), async || {
        let (_, t) = get(&metrics).await;
        sample(
            &t,
            &format!("tokenprobe_probe_errors_total{{{l},error_type=\"rate_limited\"}}"),
        )
        .unwrap_or(0.0)
            >= 1.0
    })
    .await;
    let (_, t) = get(&metrics).await;
    let g = |name: &str| {
        sample(
            &t,
            &format!("tokenprobe_ratelimit_{name}{{{l},kind=\"requests\"}}"),
        )
    };
    assert_eq!(g("limit"), Some(3.0), "{t}");
    assert_eq!(g("remaining"), Some(0.0));
    let reset = g("reset_seconds").expect("reset");
    let left = 60.0 - started.elapsed().as_secs_f64();
    assert!(
        reset > 0.0 && reset <= 60.0 && reset >= left - 1.0,
        "reset {reset} s, at most {left} s of the minute left"
    );
    assert_eq!(
        sample(&t, &format!("tokenprobe_probes_total{{{l}}}")),
        Some(4.0),
        "three answered, the fourth refused, then paused by retry-after"
    );
    let answered = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|x| x.contains("\"status\":200"))
        .count();
    assert_eq!(answered, 3, "the simulator answered three");
}

/// Issue 25 item 5: with `cold_after: 1s` and probes 1.5 s apart, every probe of target `a` after
/// its first comes after its target idled a second (the simulator's event log shows the gap
/// between a request's end and the next one's arrival), so each is flagged `cold_start` and its
/// TTFT also goes to `tokenprobe_cold_start_time_to_first_token_seconds`; target `b`, with
/// `cold_after: 1m`, has none and no such series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_after_the_target_idled_is_flagged_cold_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("events.jsonl");
    let (_sim, url) = common::e2e::start_simulate(
        dir.path(),
        &[
            "--ttft",
            "20ms",
            "--itl",
            "1ms",
            "--output-tokens",
            "2",
            "--event-log",
            log.to_str().expect("path"),
        ],
    );
    let cfg = dir.path().join("c.yml");
    std::fs::write(
        &cfg,
        format!(
            "defaults: {{interval: 1500ms}}\nprompts: [{{name: p, messages: [{{role: user, content: hi}}], max_tokens: 2}}]\n\
             targets:\n  - {{name: a, cold_after: 1s, base_url: \"{url}/v1\", models: [m1]}}\n\
             \x20 - {{name: b, cold_after: 1m, base_url: \"{url}/v1\", models: [m2]}}\n"
        ),
    )
    .expect("config");
    let serve = Serve::start(&cfg, &[]);
    let metrics = format!("http://{}/metrics", serve.addr);
    let la = "target=\"a\",model=\"m1\",prompt=\"p\"";
    let lb = "target=\"b\",model=\"m2\",prompt=\"p\"";
    let cold = |t: &str, l: &str| {
        sample(
            t,
            &format!("tokenprobe_probe_flags_total{{{l},flag=\"cold_start\"}}"),
        )
    };
    let mut text = String::new();
    wait_until(
        "three probes of a, the later two cold",
        Duration::from_secs(20),
        async || {
            let (_, t) = get(&metrics).await;
            let probes = sample(&t, &format!("tokenprobe_probes_total{{{la}}}")).unwrap_or(0.0);
            let ok = probes >= 3.0 && cold(&t, la) == Some(probes - 1.0);
            text = t;
            ok
        },
    )
    .await;
    let flagged = cold(&text, la).expect("a's flag");
    assert_eq!(
        sample(
            &text,
            &format!("tokenprobe_cold_start_time_to_first_token_seconds_count{{{la}}}")
        ),
        Some(flagged)
    );
    assert_eq!(cold(&text, lb), Some(0.0), "b's cold_after is a minute");
    assert!(!text.contains(&format!(
        "tokenprobe_cold_start_time_to_first_token_seconds_count{{{lb}}}"
    )));
    // The server's view: each of a's requests after the first came over a second after the
    // previous one ended.
    let mut spans: Vec<(f64, f64)> = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["model"] == "m1")
        .filter_map(|e| common::e2e::record_span(&e))
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(spans.len() >= 3);
    for w in spans.windows(2) {
        assert!(
            w[1].0 - w[0].1 >= 1.0,
            "an idle gap of {} s",
            w[1].0 - w[0].1
        );
    }
}
