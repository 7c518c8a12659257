//! Server metrics beside every bench level (`bench --server-metrics`, `--prometheus`):
//!
//! - the DCGM, vLLM, SGLang and TGI fixtures (`tests/fixtures/servermetrics/`, each citing the
//!   upstream page it follows), served by a plain HTTP server and scraped by the library's own
//!   scraper: every signal mapped, per GPU and averaged, with the values worked out by hand;
//! - metrics endpoints that are slow, down, return garbage or a huge body: the level completes,
//!   every such scrape is counted in `scrape_errors`, and the client's TTFT still agrees with the
//!   simulator's event log (scraping runs on its own thread, bounded in time and size);
//! - llama.cpp's server with 2 slots at concurrency 1 and 4: `requests_running` max 2,
//!   `requests_waiting` max ≥ 1 at 4, server generation tokens/s within 5% of the client's;
//! - node_exporter (Debian `prometheus-node-exporter`): `cpu_utilization` and
//!   `memory_used_ratio` present and in [0, 1];
//! - a real Prometheus scraping the DCGM fixture, queried by `--prometheus`.

use crate::common;
use common::e2e::*;

use serde_json::Value;
use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tokenprobe::servermetrics::level::{LevelScrapes, ServerLevel, Snapshot, fold};
use tokenprobe::servermetrics::scrape::scrape_once;
use tokenprobe::servermetrics::signals::known;
use tokenprobe::servermetrics::{Endpoint, level::ENDPOINT_LABEL};
use tokenprobe::transport::{Fetcher, TlsOptions};

fn fixtures() -> PathBuf {
    repo_root().join("tests/fixtures/servermetrics")
}

/// A plain HTTP/1.1 server on loopback: `/f/NAME` serves the fixture file NAME; `/llama/N` is a
/// llama.cpp server with N requests running; `/dcgm-energy/W` two DCGM GPUs drawing W watts
/// between them (their energy counters rising by the clock); `/slow` answers
/// after 3 s; `/garbage` is an HTML page; `/huge` streams 40 MiB of valid samples. Returns its
/// base URL; the thread lives as long as the test process.
fn fixture_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let send = |conn: &mut std::net::TcpStream, ctype: &str, body: &[u8]| {
                    let _ = write!(
                        conn,
                        "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(body);
                };
                if let Some(name) = path.strip_prefix("/f/") {
                    match std::fs::read(fixtures().join(name)) {
                        Ok(b) => send(&mut conn, "text/plain; version=0.0.4", &b),
                        Err(_) => {
                            let _ = conn.write_all(
                                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                            );
                        }
                    }
                } else if path == "/auth" {
                    // llama.cpp's /metrics wants the API key like its API does.
                    if head
                        .to_ascii_lowercase()
                        .contains("\r\nauthorization: bearer tok-123\r\n")
                    {
                        send(&mut conn, "text/plain", b"llamacpp:requests_processing 1\n");
                    } else {
                        let _ = conn.write_all(
                            b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                        );
                    }
                } else if let Some(n) = path.strip_prefix("/many/") {
                    // A node_exporter with `n` CPU series that a signal reads (and the
                    // scrape's clock, so the counters move).
                    let n: usize = n.parse().unwrap_or(1);
                    let t = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64());
                    let mut body = String::with_capacity(n * 64);
                    for i in 0..n {
                        let mode = if i % 2 == 0 { "idle" } else { "user" };
                        body.push_str(&format!(
                            "node_cpu_seconds_total{{cpu=\"{}\",mode=\"{mode}\"}} {t:.3}\n",
                            i / 2
                        ));
                    }
                    send(&mut conn, "text/plain; version=0.0.4", body.as_bytes());
                } else if let Some(w) = path.strip_prefix("/dcgm-energy/") {
                    // DCGM exporter's shape (the fixture's labels), two GPUs drawing `w` watts
                    // between them: each energy counter (mJ) rises at w/2 W by the clock, its
                    // power gauge reads w/2.
                    let w: f64 = w.parse().unwrap_or(0.0);
                    let t = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64())
                        - 1.7e9;
                    let mut body = String::new();
                    for gpu in 0..2 {
                        let labels = format!(
                            "gpu=\"{gpu}\",UUID=\"GPU-{gpu}\",device=\"nvidia{gpu}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"gpu-node-1\",DCGM_FI_DRIVER_VERSION=\"535.129.03\""
                        );
                        body.push_str(&format!(
                            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} {:.0}\nDCGM_FI_DEV_POWER_USAGE{{{labels}}} {}\nDCGM_FI_DEV_GPU_UTIL{{{labels}}} 50\n",
                            t * w / 2.0 * 1000.0,
                            w / 2.0
                        ));
                    }
                    send(&mut conn, "text/plain; version=0.0.4", body.as_bytes());
                } else if let Some(n) = path.strip_prefix("/llama/") {
                    // llama.cpp's gauges (no model label), as a server with `n` requests running.
                    let body =
                        format!("llamacpp:requests_processing {n}\nllamacpp:requests_deferred 0\n");
                    send(&mut conn, "text/plain; version=0.0.4", body.as_bytes());
                } else if path == "/slow" {
                    std::thread::sleep(Duration::from_secs(3));
                    send(&mut conn, "text/plain", b"slow_metric 1\n");
                } else if path == "/garbage" {
                    send(
                        &mut conn,
                        "text/html",
                        b"<html><body><h1>502 Bad Gateway</h1></body></html>",
                    );
                } else if path == "/huge" {
                    let _ = conn.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n",
                    );
                    let line = b"huge_metric{a=\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"} 1\n"
                        .repeat(1000);
                    for _ in 0..(40 * 1024 * 1024 / line.len()) {
                        if conn.write_all(&line).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Scrapes `url` with the library's scraper, tagging the samples as endpoint 0.
fn scrape(rt: &tokio::runtime::Runtime, client: &mut Fetcher, url: &str, at_s: f64) -> Snapshot {
    let ep = Endpoint::new(url, None);
    let mut samples = rt
        .block_on(scrape_once(client, &ep))
        .unwrap_or_else(|e| panic!("scrape {url}: {e}"));
    for s in &mut samples {
        s.labels.push((ENDPOINT_LABEL.into(), "0".into()));
    }
    Snapshot { at_s, samples }
}

/// A level whose "before" and first "during" scrape are `X.before.prom` and whose second
/// "during" and "after" scrape are `X.after.prom`, with a wall time of 2 s.
fn fixture_level(base: &str, name: &str) -> ServerLevel {
    let rt = rt();
    let mut client = Fetcher::new(TlsOptions::default(), Duration::from_secs(5)).expect("client");
    let before = scrape(
        &rt,
        &mut client,
        &format!("{base}/f/{name}.before.prom"),
        -0.01,
    );
    let after = scrape(
        &rt,
        &mut client,
        &format!("{base}/f/{name}.after.prom"),
        2.0,
    );
    let l = LevelScrapes {
        during: vec![
            Snapshot {
                at_s: 0.5,
                ..before.clone()
            },
            Snapshot {
                at_s: 1.5,
                ..after.clone()
            },
        ],
        before: Some(before),
        after: Some(after),
        scrapes: 4,
        scrape_errors: 0,
        errors: vec![],
    };
    fold(&l, &known(), 2.0)
}

fn close(got: Option<f64>, want: f64, what: &str) {
    let g = got.unwrap_or_else(|| panic!("{what}: absent"));
    assert!((g - want).abs() < 1e-9, "{what}: {g} != {want}");
}

#[test]
fn dcgm_vllm_sglang_tgi_fixtures_map_every_signal() {
    let base = fixture_server();

    // DCGM, two GPUs: utilisation 80/40 % then 60/20 %.
    let s = fixture_level(&base, "dcgm");
    let u = &s.signals["gpu_utilization"];
    close(
        u.mean,
        0.5,
        "gpu_utilization mean (over GPUs, then scrapes)",
    );
    close(u.max, 0.6, "gpu_utilization max");
    let per = u.per_gpu.as_ref().expect("per GPU");
    close(Some(per["0"].mean), 0.7, "gpu 0 mean");
    close(Some(per["0"].max), 0.8, "gpu 0 max");
    close(Some(per["1"].mean), 0.3, "gpu 1 mean");
    close(Some(per["1"].max), 0.4, "gpu 1 max");
    // FB used/(used+free): 60000/80000 and 20000/80000.
    let m = &s.signals["gpu_memory_used_ratio"];
    close(m.mean, 0.5, "gpu_memory_used_ratio mean");
    let per = m.per_gpu.as_ref().expect("per GPU");
    close(Some(per["0"].max), 0.75, "gpu 0 memory");
    close(Some(per["1"].max), 0.25, "gpu 1 memory");
    let p = &s.signals["gpu_power_watts"];
    close(p.mean, 500.75, "gpu_power_watts (summed over GPUs)");
    close(
        Some(p.per_gpu.as_ref().expect("per GPU")["0"].mean),
        350.5,
        "gpu 0 power",
    );

    // vLLM (V1 names), 2 s level.
    let s = fixture_level(&base, "vllm");
    for (name, mean, max) in [
        ("requests_running", 6.0, 8.0),
        ("requests_waiting", 4.0, 6.0),
        ("kv_cache_usage_ratio", 0.7, 0.9),
    ] {
        close(s.mean(name), mean, name);
        close(s.max(name), max, name);
    }
    close(
        s.mean("prompt_tokens_per_s"),
        1000.0,
        "vllm prompt tokens/s",
    );
    close(
        s.mean("generation_tokens_per_s"),
        2000.0,
        "vllm generation tokens/s",
    );
    close(
        s.mean("prompt_cache_hit_ratio"),
        0.5,
        "vllm prefix cache hits / queries",
    );
    for (name, p50, p95, n) in [
        ("server_ttft_s", 0.3, 0.9, 40.0),
        ("server_e2e_s", 5.0, 9.5, 40.0),
        ("server_queue_time_s", 0.005, 0.0095, 40.0),
        ("server_itl_s", 0.025, 0.0475, 2000.0),
    ] {
        let h = &s.signals[name];
        close(h.p50, p50, &format!("{name} p50"));
        close(h.p95, p95, &format!("{name} p95"));
        close(h.count, n, &format!("{name} count"));
    }

    // SGLang.
    let s = fixture_level(&base, "sglang");
    for (name, mean, max) in [
        ("requests_running", 15.0, 20.0),
        ("requests_waiting", 2.0, 4.0),
        ("kv_cache_usage_ratio", 0.6, 0.92),
        ("prompt_cache_hit_ratio", 0.01, 0.0125),
    ] {
        close(s.mean(name), mean, name);
        close(s.max(name), max, name);
    }
    close(
        s.mean("prompt_tokens_per_s"),
        1000.0,
        "sglang prompt tokens/s",
    );
    close(
        s.mean("generation_tokens_per_s"),
        2000.0,
        "sglang generation tokens/s",
    );
    let h = &s.signals["server_ttft_s"];
    close(h.p50, 0.3, "sglang ttft p50");
    close(h.p95, 0.9, "sglang ttft p95");
    let h = &s.signals["server_e2e_s"];
    close(h.p50, 1.0 + 4.0 * 20.0 / 30.0, "sglang e2e p50");
    close(h.p95, 9.0, "sglang e2e p95");

    // TGI: generated tokens from the histogram's _sum.
    let s = fixture_level(&base, "tgi");
    close(s.mean("requests_waiting"), 5.0, "tgi_queue_size mean");
    close(
        s.max("requests_running"),
        32.0,
        "tgi_batch_current_size max",
    );
    close(
        s.mean("generation_tokens_per_s"),
        2000.0,
        "tgi generated tokens/s",
    );
    close(s.mean("prompt_tokens_per_s"), 1000.0, "tgi input tokens/s");
    let h = &s.signals["server_e2e_s"];
    close(h.p50, 5.0, "tgi duration p50");
    close(h.p95, 9.5, "tgi duration p95");
    let h = &s.signals["server_queue_time_s"];
    close(h.p50, 0.055, "tgi queue p50");
    close(h.p95, 0.0955, "tgi queue p95");
    // Nothing TGI does not have.
    assert!(!s.signals.contains_key("server_ttft_s"));
    assert!(!s.signals.contains_key("gpu_utilization"));
}

/// Issue 44: a two-model run on the simulator with a DCGM endpoint whose energy counters rise at
/// 600 W between its two GPUs, a GPU-hour price and `--reset-prefix-cache`: every level's joules
/// per output token is 600 W × its wall time ÷ its output tokens within 1%; its GPU count (2)
/// is DCGM's, its cost per million output tokens the price × 2 GPUs ÷ its tokens/s; the
/// frontier has every level; the simulator's prefix cache was reset before each level (its log);
/// the page shows the frontier, the energy and the cost; the run records what served it.
#[test]
fn a_two_model_run_has_its_frontier_energy_cost_and_provenance() {
    let _serial = serial();
    let _wd = Watchdog::new(
        "a_two_model_run_has_its_frontier_energy_cost_and_provenance",
        Duration::from_secs(120),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("events.jsonl");
    let (_sim, url) = simulate(
        dir.path(),
        &[
            "--profile",
            "model-a:ttft=20ms,itl=4ms,output_tokens=24,prefix_cache=on",
            "--profile",
            "model-b:ttft=40ms,itl=8ms,output_tokens=24,prefix_cache=on",
            "--event-log",
            log.to_str().expect("path"),
        ],
    );
    let m = fixture_server();
    let cfg = dir.path().join("two.yml");
    std::fs::write(
        &cfg,
        format!(
            "prompts:\n  - name: hi\n    messages: [{{role: user, content: \"{STORY_PROMPT}\"}}]\n    max_tokens: 24\n\
             targets:\n  - name: gpu-box\n    base_url: {url}/v1\n    models: [model-a, model-b]\n    gpu_hour_price: 2.5\n    server_metrics: [\"{m}/dcgm-energy/600\"]\n"
        ),
    )
    .expect("config");
    let json = dir.path().join("r.json");
    let html = dir.path().join("r.html");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().expect("path"),
            "--concurrency",
            "1,4",
            "--duration-per-level",
            "2s",
            "--server-metrics-interval",
            "250ms",
            "--reset-prefix-cache",
            "--no-history",
            "-o",
            json.to_str().expect("path"),
            "-o",
            html.to_str().expect("path"),
        ],
        Duration::from_secs(90),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    let mut levels = 0;
    for mr in r["models"].as_array().expect("models") {
        assert_eq!(
            mr["gpus"],
            serde_json::json!({"count": 2, "source": "dcgm"}),
            "{mr}"
        );
        for l in mr["levels"].as_array().expect("levels") {
            levels += 1;
            let e = &l["energy"];
            assert_eq!(e["source"], "dcgm_energy_counter", "{l}");
            let wall = l["wall_s"].as_f64().expect("wall_s");
            let tokens = l["output_tokens"].as_f64().expect("output_tokens");
            let want = 600.0 * wall / tokens;
            let got = e["joules_per_output_token"].as_f64().expect("J/token");
            eprintln!(
                "{} @ {}: {got:.4} J per output token, expected {want:.4}",
                mr["model"], l["concurrency"]
            );
            assert!((got / want - 1.0).abs() < 0.01, "{got} vs {want}: {l}");
            let tps = l["output_tokens_per_s"].as_f64().expect("tps");
            let cost = l["gpu_cost"]["cost_per_mtok"].as_f64().expect("GPU cost");
            assert!(
                (cost - 2.5 * 2.0 / 3600.0 / tps * 1e6).abs() < 1e-9 * cost,
                "{l}"
            );
            assert_eq!(
                l["output_tokens_per_s_per_gpu"].as_f64(),
                Some(tps / 2.0),
                "{l}"
            );
            assert_eq!(l["server_cache"]["state"], "reset", "{l}");
        }
    }
    assert_eq!(levels, 4);
    let f = &r["frontier"];
    let points = f["points"].as_array().expect("frontier points");
    assert_eq!(points.len(), 4, "{f}");
    assert!(points.iter().any(|p| p["on_frontier"] == true), "{f}");
    // The prefix cache was reset before each level: a reset, then that level's requests.
    let lines = std::fs::read_to_string(&log).expect("event log");
    let resets = lines
        .lines()
        .filter(|l| l.contains(r#""path":"/reset_prefix_cache""#))
        .count();
    assert_eq!(resets, 4, "one reset before each level");
    // What served it: the GPUs from DCGM's labels, the models the simulator lists, the client.
    let p = &r["provenance"];
    let server = &p["servers"][0];
    assert_eq!(server["target"], "gpu-box");
    assert_eq!(server["gpus"]["models"][0], "NVIDIA H100 80GB HBM3", "{p}");
    assert_eq!(server["gpus"]["driver"], "535.129.03", "{p}");
    assert!(
        server["models"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["id"] == "model-b")),
        "{p}"
    );
    assert!(p["client"]["cores"].as_u64().is_some_and(|c| c > 0), "{p}");
    eprintln!(
        "frontier: {}\nprovenance: {}",
        serde_json::to_string_pretty(f).unwrap_or_default(),
        serde_json::to_string_pretty(p).unwrap_or_default()
    );
    let page = std::fs::read_to_string(&html).expect("page");
    for want in [
        r#"id="plot-frontier""#,
        r#"id="frontier-table""#,
        r#"id="spend-table""#,
        r#"data-k="/models/1/levels/1/energy/joules_per_output_token""#,
        r#"data-k="/models/0/levels/0/gpu_cost/cost_per_mtok""#,
        "What served the run",
    ] {
        assert!(page.contains(want), "{want} not on the page");
    }
    assert!(
        err.contains("Frontier: tokens/s per user") || out.contains("Frontier: tokens/s per user"),
        "stdout:\n{out}"
    );
}

#[test]
fn the_targets_key_goes_to_the_metrics_endpoint() {
    use tokenprobe::config::{AuthStyle, KeySource, Secret};
    let base = fixture_server();
    let rt = rt();
    let mut client = Fetcher::new(TlsOptions::default(), Duration::from_secs(5)).expect("client");
    let url = format!("{base}/auth");
    let with_key = Endpoint::new(
        &url,
        Some((AuthStyle::Bearer, KeySource::Inline(Secret::new("tok-123")))),
    );
    let got = rt
        .block_on(scrape_once(&mut client, &with_key))
        .expect("scrape with the key");
    assert_eq!(got[0].name, "llamacpp:requests_processing");
    let e = rt
        .block_on(scrape_once(&mut client, &Endpoint::new(&url, None)))
        .expect_err("401 without the key");
    assert!(e.ends_with("/auth: HTTP 401"), "{e}");
}

// ------------------------------------------------------------------ bench as a process

use common::e2e::start_simulate as simulate;

fn write_config(dir: &Path, base_url: &str, max_tokens: u32, extra: &str) -> PathBuf {
    let path = dir.join("bench.yml");
    std::fs::write(
        &path,
        format!(
            "prompts:\n  - name: story\n    messages: [{{role: user, content: \"{STORY_PROMPT}\"}}]\n    max_tokens: {max_tokens}\n\
             targets:\n  - name: t\n    base_url: {base_url}\n    models: [m]\n{extra}"
        ),
    )
    .expect("write config");
    path
}

fn bench(args: &[&str], limit: Duration) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.arg("bench").args(args);
    for v in common::PROXY_ENV_VARS {
        cmd.env_remove(v);
    }
    let (st, out, err) = run_with_timeout(cmd, None, limit);
    (st.code(), out, err)
}

fn read_json(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[test]
fn bad_metrics_endpoints_are_counted_and_never_delay_the_probes() {
    let _serial = serial();
    let _wd = Watchdog::new(
        "bad_metrics_endpoints_are_counted_and_never_delay_the_probes",
        Duration::from_secs(180),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("events.jsonl");
    let (_sim, url) = simulate(
        dir.path(),
        &[
            "--ttft",
            "100ms",
            "--itl",
            "10ms",
            "--output-tokens",
            "8",
            "--event-log",
            log.to_str().expect("path"),
        ],
    );
    let m = fixture_server();
    // The huge body from the config (reading 16 MiB takes longer than 100 ms in a debug build).
    let cfg = write_config(
        dir.path(),
        &format!("{url}/v1"),
        8,
        &format!("    server_metrics:\n      - {{url: \"{m}/huge\", interval: 1s, timeout: 1s}}\n"),
    );
    // The dead one carries secrets in its userinfo and query: no output may show them.
    let down_port = free_port();
    let down = format!("http://scraper:pw-s3cret@127.0.0.1:{down_port}/metrics?token=q-s3cret");
    let json = dir.path().join("r.json");
    // Every bad kind at once, scraped every 100 ms (timeout 100 ms; the huge one every second):
    // a slow scrape must not hold the level, a huge one must be cut at 16 MiB, garbage must not
    // count as a scrape.
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().expect("path"),
            "--concurrency",
            "2",
            "--requests-per-level",
            "20",
            "--server-metrics",
            &format!("{m}/slow"),
            "--server-metrics",
            &format!("{m}/garbage"),
            "--server-metrics",
            &down,
            "--server-metrics-interval",
            "100ms",
            "--samples",
            // The simulator's log holds the level's requests only.
            "--no-check",
            "-o",
            json.to_str().expect("path"),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    let l = &r["models"][0]["levels"][0];
    assert_eq!(l["requests"].as_u64(), Some(20), "{l}");
    assert_eq!(l["error_rate"].as_f64(), Some(0.0), "{l}");
    let s = &l["server"];
    let (scrapes, errors) = (
        s["scrapes"].as_u64().unwrap(),
        s["scrape_errors"].as_u64().unwrap(),
    );
    // Four endpoints before and after, and more during: every one of them failed, and no signal
    // was invented from a failure.
    assert!(scrapes >= 8, "{s}");
    assert_eq!(errors, scrapes, "{s}");
    assert_eq!(
        s.as_object().map(|o| o.len()),
        Some(2),
        "only the counts: {s}"
    );
    assert!(
        err.contains("metrics scrapes failed"),
        "a warning line: {err}"
    );
    // Each endpoint's own reason.
    for why in [
        "/slow: no complete answer within 100ms",
        "/garbage: not a metrics exposition",
        "/huge: larger than 16 MiB",
        &format!("http://127.0.0.1:{down_port}/metrics?token=%3Credacted%3E: connect: "),
    ] {
        assert!(err.contains(why), "{why:?} not in: {err}");
    }
    let report = std::fs::read_to_string(&json).expect("report");
    for text in [&out, &err, &report] {
        assert!(!text.contains("s3cret"), "a secret leaked: {text}");
    }
    // The client's TTFT against the simulator's own send instant of each first token: the
    // medians within 5 ms, the bound tests/e2e/simulate.rs holds on this machine without scraping.
    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .expect("event log")
        .lines()
        .map(|x| serde_json::from_str(x).expect("event JSON"))
        .collect();
    let server_first: Vec<f64> = lines
        .iter()
        .filter_map(|rec| {
            rec["events"]
                .as_array()?
                .iter()
                .find(|e| e["token"] == true)?["t_s"]
                .as_f64()
        })
        .collect();
    assert_eq!(server_first.len(), 20, "one record per request");
    let client: Vec<f64> = l["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|x| x["ttft_s"].as_f64().expect("ttft"))
        .collect();
    let (c, sv) = (median(client), median(server_first));
    eprintln!(
        "TTFT median: client {:.2} ms, simulator's send {:.2} ms",
        c * 1e3,
        sv * 1e3
    );
    assert!((c - sv).abs() < 0.005, "client {c} vs server {sv}");
}

/// Two models behind one gateway URL, each target with its own server's metrics: every model's
/// levels are scraped from its own target's endpoints (plus the command line's, which apply to
/// all), never from the first target's.
#[test]
fn each_model_is_scraped_from_its_own_targets_server_metrics() {
    let _serial = serial();
    let _wd = Watchdog::new(
        "each_model_is_scraped_from_its_own_targets_server_metrics",
        Duration::from_secs(120),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let (_sim, url) = simulate(
        dir.path(),
        &["--ttft", "50ms", "--itl", "5ms", "--output-tokens", "4"],
    );
    let m = fixture_server();
    let cfg = dir.path().join("gateway.yml");
    std::fs::write(
        &cfg,
        format!(
            "prompts:\n  - name: hi\n    messages: [{{role: user, content: hi}}]\n    max_tokens: 4\n\
             targets:\n\
             \x20 - name: gw-a\n    base_url: {url}/v1\n    models: [model-a]\n    server_metrics: [\"{m}/llama/3\"]\n\
             \x20 - name: gw-b\n    base_url: {url}/v1\n    models: [model-b]\n    server_metrics: [{{url: \"{m}/llama/7\"}}]\n"
        ),
    )
    .expect("config");
    let json = dir.path().join("r.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().expect("path"),
            "--models",
            "gw-a/model-a,gw-b/model-b",
            "--concurrency",
            "1",
            // About 2 s per level: a scrape of the config's endpoints (every 1 s) falls inside.
            "--requests-per-level",
            "30",
            "--server-metrics",
            &format!("{m}/f/dcgm.before.prom"),
            "--server-metrics-interval",
            "100ms",
            "-o",
            json.to_str().expect("path"),
        ],
        Duration::from_secs(90),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    for (i, (model, running)) in [("model-a", 3.0), ("model-b", 7.0)].into_iter().enumerate() {
        let mr = &r["models"][i];
        assert_eq!(mr["model"], model, "{mr}");
        let s = &mr["levels"][0]["server"];
        assert_eq!(
            s["requests_running"]["mean"].as_f64(),
            Some(running),
            "{model}: {s}"
        );
        assert!(
            s["gpu_utilization"]["mean"].as_f64().is_some(),
            "{model}: the command line's endpoint is scraped for every model: {s}"
        );
    }
}

/// A long level against an endpoint with 20,000 series that a signal reads, scraped every
/// 200 ms: the release binary's memory stays under 64 MiB (each scrape is folded into running
/// statistics and dropped; kept whole, 30 scrapes of it took bench to 421 MB).
#[test]
fn server_metrics_memory_does_not_grow_with_a_levels_length() {
    let _serial = serial();
    let _wd = Watchdog::new(
        "server_metrics_memory_does_not_grow_with_a_levels_length",
        Duration::from_secs(120),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let (_sim, url) = simulate(
        dir.path(),
        &["--ttft", "10ms", "--itl", "2ms", "--output-tokens", "4"],
    );
    let m = fixture_server();
    let cfg = write_config(dir.path(), &format!("{url}/v1"), 4, "");
    let json = dir.path().join("r.json");
    let mut cmd = Command::new(common::release_bin());
    cmd.arg("bench").args([
        "--config.file",
        cfg.to_str().expect("path"),
        "--concurrency",
        "1",
        "--duration-per-level",
        "6s",
        "--server-metrics",
        &format!("{m}/many/20000"),
        "--server-metrics-interval",
        "200ms",
        "-o",
        json.to_str().expect("path"),
    ]);
    let mut child = ChildGuard::spawn("bench", cmd, dir.path());
    let pid = child.id();
    let mut peak_kib = 0u64;
    let status = loop {
        if let Ok(st) = std::fs::read_to_string(format!("/proc/{pid}/status"))
            && let Some(v) = st
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak_kib = peak_kib.max(v);
        }
        if let Some(st) = child.exited() {
            break st;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{}", child.logs());
    let r = read_json(&json);
    let s = &r["models"][0]["levels"][0]["server"];
    let scrapes = s["scrapes"].as_u64().unwrap_or(0);
    eprintln!(
        "20,000 series, {scrapes} scrapes: bench peak RSS {} MiB",
        peak_kib / 1024
    );
    assert!(scrapes >= 20, "{s}");
    assert_eq!(s["scrape_errors"].as_u64(), Some(0), "{s}");
    let cpu = s["cpu_utilization"]["mean"]
        .as_f64()
        .expect("cpu_utilization");
    assert!((0.0..=1.0).contains(&cpu), "{s}");
    assert!(peak_kib < 64 * 1024, "peak RSS {} MiB", peak_kib / 1024);
}

/// A level shorter than the scrape interval: the server block says that no scrape fell inside it
/// (and so no gauge could be read), on stderr and in the report.
#[test]
fn a_level_without_a_scrape_inside_says_so() {
    let _serial = serial();
    let _wd = Watchdog::new(
        "a_level_without_a_scrape_inside_says_so",
        Duration::from_secs(60),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let (_sim, url) = simulate(
        dir.path(),
        &["--ttft", "10ms", "--itl", "1ms", "--output-tokens", "2"],
    );
    let m = fixture_server();
    let cfg = write_config(dir.path(), &format!("{url}/v1"), 2, "");
    let json = dir.path().join("r.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().expect("path"),
            "--concurrency",
            "1",
            "--requests-per-level",
            "3",
            "--server-metrics",
            &format!("{m}/llama/2"),
            "--server-metrics-interval",
            "30s",
            "-o",
            json.to_str().expect("path"),
        ],
        Duration::from_secs(50),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        err.contains("no server scrape inside level 1; lower --server-metrics-interval"),
        "{err}"
    );
    let r = read_json(&json);
    let s = &r["models"][0]["levels"][0]["server"];
    assert!(
        s["requests_running"].is_null(),
        "no gauge without a scrape inside: {s}"
    );
    assert!(
        s["notes"]
            .as_array()
            .is_some_and(|notes| notes.iter().any(|n| n
                .as_str()
                .is_some_and(|n| n.starts_with("no server scrape inside level 1")))),
        "{s}"
    );
}

#[test]
fn llama_cpp_queue_and_tokens_agree_with_the_client() {
    let _serial = serial();
    if !require_deps("llama_cpp_queue_and_tokens_agree_with_the_client", &[]) {
        return;
    }
    let _wd = Watchdog::new(
        "llama_cpp_queue_and_tokens_agree_with_the_client",
        Duration::from_secs(300),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let llama = LlamaServer::start_with(dir.path(), &["--parallel", "2"]);
    let cfg = write_config(
        dir.path(),
        &llama.base_url(),
        16,
        "    extra_body: {temperature: 0}\n",
    );
    let json = dir.path().join("r.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().expect("path"),
            "--concurrency",
            "1,4",
            // The levels as given (a knee between them would add 2).
            "--knee-levels",
            "0",
            "--requests-per-level",
            "8",
            "--server-metrics",
            &format!("{}/metrics", llama.url),
            "--server-metrics-interval",
            "200ms",
            "-o",
            json.to_str().expect("path"),
        ],
        Duration::from_secs(240),
    );
    eprintln!("{out}\n{err}");
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("Server metrics:"), "{out}");
    let r = read_json(&json);
    let ls = r["models"][0]["levels"].as_array().expect("levels");
    for (l, running_max) in ls.iter().zip([1.0, 2.0]) {
        let s = &l["server"];
        assert_eq!(s["scrape_errors"].as_u64(), Some(0), "{s}");
        assert_eq!(
            s["requests_running"]["max"].as_f64(),
            Some(running_max),
            "{s}"
        );
        let server = s["generation_tokens_per_s"]["mean"]
            .as_f64()
            .expect("generation");
        let client = l["output_tokens_per_s"].as_f64().expect("client");
        let rel = (server / client - 1.0).abs();
        eprintln!(
            "c={}: server {server:.2} tok/s, client {client:.2} tok/s ({:.2}%)",
            l["concurrency"],
            rel * 100.0
        );
        assert!(rel < 0.05, "server {server} vs client {client}");
        assert!(
            (s["server_client_tokens_ratio"]["mean"].as_f64().unwrap() - server / client).abs()
                < 1e-9
        );
    }
    // Two slots, four workers: requests wait.
    let waiting = ls[1]["server"]["requests_waiting"]["max"]
        .as_f64()
        .expect("waiting");
    assert!(waiting >= 1.0, "requests_waiting max {waiting} at 4");
    assert_eq!(
        ls[0]["server"]["requests_waiting"]["max"].as_f64(),
        Some(0.0)
    );
}

#[test]
fn node_exporter_cpu_and_memory_are_ratios() {
    let _serial = serial();
    if !require_deps(
        "node_exporter_cpu_and_memory_are_ratios",
        &["prometheus-node-exporter"],
    ) {
        return;
    }
    let _wd = Watchdog::new(
        "node_exporter_cpu_and_memory_are_ratios",
        Duration::from_secs(120),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let mut cmd = Command::new(which("prometheus-node-exporter").expect("node exporter"));
    cmd.arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .args([
            "--collector.disable-defaults",
            "--collector.cpu",
            "--collector.meminfo",
        ]);
    let _ne = ChildGuard::spawn("node_exporter", cmd, dir.path());
    let metrics = format!("http://127.0.0.1:{port}/metrics");
    wait_for("node_exporter", Duration::from_secs(20), || {
        try_http_get(&metrics, &[]).ok().filter(|r| r.status == 200)
    });
    let (_sim, url) = simulate(
        dir.path(),
        &["--ttft", "50ms", "--itl", "10ms", "--output-tokens", "20"],
    );
    let cfg = write_config(dir.path(), &format!("{url}/v1"), 20, "");
    let json = dir.path().join("r.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().expect("path"),
            "--concurrency",
            "2",
            "--duration-per-level",
            "2s",
            "--server-metrics",
            &metrics,
            "--server-metrics-interval",
            "500ms",
            "-o",
            json.to_str().expect("path"),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let s = &read_json(&json)["models"][0]["levels"][0]["server"];
    assert_eq!(s["scrape_errors"].as_u64(), Some(0), "{s}");
    for name in ["cpu_utilization", "memory_used_ratio"] {
        for stat in ["mean", "max"] {
            let v = s[name][stat]
                .as_f64()
                .unwrap_or_else(|| panic!("{name}.{stat}: {s}"));
            assert!((0.0..=1.0).contains(&v), "{name}.{stat} = {v}");
        }
    }
    // The bench itself kept a core busy part of the time: CPU was not idle.
    assert!(s["cpu_utilization"]["mean"].as_f64().unwrap() > 0.0, "{s}");
}

#[test]
fn prometheus_query_source_reads_the_dcgm_fixture() {
    let _serial = serial();
    if !require_deps(
        "prometheus_query_source_reads_the_dcgm_fixture",
        &["prometheus"],
    ) {
        return;
    }
    let _wd = Watchdog::new(
        "prometheus_query_source_reads_the_dcgm_fixture",
        Duration::from_secs(180),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    // A Prometheus scraping a server whose /metrics is the DCGM fixture (80 % and 40 %).
    let base = fixture_server();
    let fixture_addr = base.trim_start_matches("http://").to_owned();
    // start_prometheus scrapes /metrics: serve the fixture there through a tiny proxy path.
    let (_prom, prom) = start_prometheus_path(dir.path(), &fixture_addr, "/f/dcgm.before.prom");
    wait_for(
        "prometheus to have the DCGM series",
        Duration::from_secs(30),
        || {
            let r = try_http_get(
                &format!("{prom}/api/v1/query?query=DCGM_FI_DEV_GPU_UTIL"),
                &[],
            )
            .ok()?;
            (r.status == 200 && r.body.contains("\"gpu\":\"1\"")).then_some(())
        },
    );
    let (_sim, url) = simulate(
        dir.path(),
        &["--ttft", "50ms", "--itl", "10ms", "--output-tokens", "20"],
    );
    let cfg = write_config(dir.path(), &format!("{url}/v1"), 20, "");
    let json = dir.path().join("r.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().expect("path"),
            "--concurrency",
            "2",
            "--duration-per-level",
            "3s",
            "--prometheus",
            &prom,
            "--prometheus-wait",
            "2s",
            "-o",
            json.to_str().expect("path"),
        ],
        Duration::from_secs(90),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let s = &read_json(&json)["models"][0]["levels"][0]["server"];
    // avg over GPUs of 80 and 40, over the level.
    assert_eq!(s["gpu_utilization"]["mean"].as_f64(), Some(0.6), "{s}");
    assert_eq!(s["gpu_utilization"]["max"].as_f64(), Some(0.8), "{s}");
    assert_eq!(
        s["gpu_memory_used_ratio"]["mean"].as_f64(),
        Some(0.5),
        "{s}"
    );
    // vLLM is not there: absent, and not an error.
    assert!(s.get("requests_waiting").is_none(), "{s}");
    assert_eq!(s["scrape_errors"].as_u64(), Some(0), "{s}");
}

/// A Prometheus scraping `target` at `path` every second.
fn start_prometheus_path(dir: &Path, target: &str, path: &str) -> (ChildGuard, String) {
    start_prometheus_config(
        dir,
        &format!(
            "  - job_name: dcgm\n    metrics_path: {path}\n    static_configs:\n      - targets: ['{target}']\n"
        ),
        &[],
    )
}
