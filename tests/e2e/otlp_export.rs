//! Issue 25 item 3: `serve` exports the OpenTelemetry GenAI client metrics over OTLP/HTTP when
//! the standard variables ask for it. A small receiver (`tests/fixtures/otlp_receiver.py`)
//! decodes every export with the official schema (PyPI `opentelemetry-proto`; no collector can
//! be installed here). The truth is the simulator's event log: after SIGTERM, the last export
//! counts exactly the probes it logged, with its configured TTFT in the right bucket. A receiver
//! that never answers leaves the probes on their schedule and is counted on `/metrics`.

use crate::common;
use common::e2e::*;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// The receiver in `mode`, its guard and base URL.
fn receiver(dir: &std::path::Path, mode: &str) -> (ChildGuard, String) {
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo_root().join("tests/fixtures/otlp_receiver.py"))
        .args(["--mode", mode]);
    let mut guard = ChildGuard::spawn(&format!("otlp-receiver-{mode}"), cmd, dir);
    let url = guard.listening("the OTLP receiver's address", Duration::from_secs(20));
    (guard, url)
}

/// The receiver's decoded exports, in order.
fn exports(guard: &ChildGuard) -> Vec<Value> {
    guard
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn config(url: &str) -> String {
    format!(
        "defaults:\n  interval: 500ms\nprompts:\n  - name: hi\n    messages: [{{role: user, content: hi}}]\n    max_tokens: 8\n\
         targets:\n  - name: sim\n    base_url: {url}/v1\n    models: [sim-a]\n"
    )
}

/// The string or int value of `key` in an attribute list.
fn attr<'a>(attrs: &'a Value, key: &str) -> Option<&'a Value> {
    attrs.as_array()?.iter().find(|a| a["key"] == key).map(|a| {
        a["value"]
            .as_object()
            .and_then(|v| v.values().next())
            .unwrap_or(&Value::Null)
    })
}

/// The data points of metric `name` in an export.
fn points<'a>(export: &'a Value, name: &str) -> Vec<&'a Value> {
    let mut out = Vec::new();
    for rm in export["resource_metrics"].as_array().into_iter().flatten() {
        for sm in rm["scope_metrics"].as_array().into_iter().flatten() {
            for m in sm["metrics"].as_array().into_iter().flatten() {
                if m["name"] == name {
                    let data = m
                        .get("histogram")
                        .or_else(|| m.get("sum"))
                        .unwrap_or(&Value::Null);
                    out.extend(data["data_points"].as_array().into_iter().flatten());
                }
            }
        }
    }
    out
}

/// A uint64 as the JSON mapping writes it (a string).
fn u(v: &Value) -> u64 {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| v.as_u64())
        .unwrap_or(0)
}

#[test]
fn serve_exports_the_genai_metrics_over_otlp_as_the_simulator_logged_them() {
    if !require_deps("serve_exports_the_genai_metrics_over_otlp", &[]) {
        return;
    }
    let _wd = Watchdog::new(
        "serve_exports_the_genai_metrics_over_otlp",
        Duration::from_secs(120),
    );
    let dir = tempfile::tempdir().unwrap();
    let (otlp, otlp_url) = receiver(dir.path(), "ok");
    let log = dir.path().join("events.jsonl");
    let (_sim, url) = start_simulate(
        dir.path(),
        &[
            "--ttft",
            "50ms",
            "--itl",
            "5ms",
            "--output-tokens",
            "6",
            "--event-log",
            log.to_str().unwrap(),
        ],
    );
    let mut tp = Tokenprobe::serve_with_env(
        dir.path(),
        &config(&url),
        &[
            ("OTEL_METRICS_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp_url),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-tenant=team-a,authorization=Bearer%20s3cret",
            ),
            ("OTEL_METRIC_EXPORT_INTERVAL", "700"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test"),
        ],
    );
    // Some periodic exports, then stop: the last export follows the last probe.
    wait_for("three exports", Duration::from_secs(30), || {
        (exports(&otlp).len() >= 3).then_some(())
    });
    let m = tp.metrics();
    assert!(m.sum("tokenprobe_otlp_exports_total", &[("result", "sent")]) >= 2.0);
    let (st, _) = tp
        .guard
        .signal_and_wait("-TERM", Duration::from_secs(20))
        .expect("serve exits");
    assert!(st.success(), "{st}");
    let all = exports(&otlp);
    assert!(
        all.iter().all(|e| e.get("_error").is_none()),
        "an export the schema refused: {all:?}"
    );
    let last = all.last().unwrap();
    let req = &last["_request"];
    assert_eq!(req["path"], "/v1/metrics");
    assert_eq!(req["content_type"], "application/x-protobuf");
    assert_eq!(req["headers"]["x-tenant"], "team-a");
    assert_eq!(req["headers"]["authorization"], "Bearer s3cret");
    let resource = &last["resource_metrics"][0]["resource"]["attributes"];
    assert_eq!(attr(resource, "service.name").unwrap(), "tokenprobe");
    assert_eq!(attr(resource, "deployment.environment").unwrap(), "test");

    // Every probe the simulator logged, and no other, is in the last export.
    let logged = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count() as u64;
    assert!(logged >= 3, "{logged}");
    let duration = points(last, "gen_ai.client.operation.duration");
    assert_eq!(duration.len(), 1, "one job, no failure: {duration:?}");
    let d = duration[0];
    assert_eq!(u(&d["count"]), logged);
    for (key, want) in [
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.provider.name", "openai"),
        ("gen_ai.request.model", "sim-a"),
        ("server.address", "127.0.0.1"),
        ("tokenprobe.target", "sim"),
        ("tokenprobe.prompt", "hi"),
    ] {
        assert_eq!(attr(&d["attributes"], key).unwrap(), want, "{key}");
    }
    let port: u64 = url.rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(u(attr(&d["attributes"], "server.port").unwrap()), port);
    // What answered: on the point's exemplar (the latest probe), not on the series.
    assert!(attr(&d["attributes"], "gen_ai.response.model").is_none());
    let last_id = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].clone())
        .next_back()
        .unwrap();
    let ex = &d["exemplars"][0];
    assert_eq!(
        attr(&ex["filtered_attributes"], "gen_ai.response.model").unwrap(),
        "sim-a"
    );
    assert_eq!(
        attr(&ex["filtered_attributes"], "gen_ai.response.id").unwrap(),
        &format!("chatcmpl-{}", last_id.as_str().unwrap()),
        "{ex}"
    );
    // The simulator reports its (empty) prefix cache's count: every probe, 0 tokens.
    let cached = points(last, "gen_ai.usage.cache_read.input_tokens");
    assert_eq!(
        (u(&cached[0]["count"]), cached[0]["sum"].as_f64()),
        (logged, Some(0.0))
    );
    let bounds: Vec<f64> = d["explicit_bounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_f64().unwrap())
        .collect();
    assert_eq!(
        bounds,
        [
            0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92
        ]
    );
    // TTFT 50 ms: every first chunk in (0.04, 0.08].
    let ttfc = points(last, "gen_ai.client.operation.time_to_first_chunk");
    let counts: Vec<u64> = ttfc[0]["bucket_counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(u)
        .collect();
    assert_eq!(u(&ttfc[0]["count"]), logged);
    assert_eq!(counts[3], logged, "{counts:?}");
    // Five gaps of 5 ms per probe: all in the first bucket (<= 10 ms).
    let chunks = points(last, "gen_ai.client.operation.time_per_output_chunk");
    assert_eq!(u(&chunks[0]["count"]), 5 * logged);
    let usage = points(last, "gen_ai.client.token.usage");
    let output = usage
        .iter()
        .find(|p| attr(&p["attributes"], "gen_ai.token.type").unwrap() == "output")
        .unwrap();
    assert_eq!(output["sum"].as_f64().unwrap(), 6.0 * logged as f64);
    let probes = points(last, "tokenprobe.probes");
    assert_eq!(u(&probes[0]["as_int"]), logged);
    assert_eq!(points(last, "tokenprobe.time_per_output_token").len(), 1);
    // Cumulative: each export's count is at least the one before.
    let counts: Vec<u64> = all
        .iter()
        .map(|e| {
            points(e, "gen_ai.client.operation.duration")
                .first()
                .map_or(0, |p| u(&p["count"]))
        })
        .collect();
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    // The header's secret is in no log line.
    assert!(!tp.guard.logs().contains("s3cret"));
}

#[test]
fn a_receiver_that_never_answers_leaves_the_probes_on_their_schedule() {
    if !require_deps("a_receiver_that_never_answers", &[]) {
        return;
    }
    let _wd = Watchdog::new("a_receiver_that_never_answers", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let (_otlp, otlp_url) = receiver(dir.path(), "hang");
    let (_sim, url) = start_simulate(dir.path(), &["--ttft", "20ms", "--output-tokens", "4"]);
    let mut tp = Tokenprobe::serve_with_env(
        dir.path(),
        &config(&url),
        &[
            ("OTEL_METRICS_EXPORTER", "otlp"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                &format!("{otlp_url}/v1/metrics"),
            ),
            ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "1500"),
        ],
    );
    // Each export waits 1.5 s for an answer that never comes, spanning seven intervals.
    let m = wait_for(
        "a failed export and dropped intervals",
        Duration::from_secs(30),
        || {
            let m = tp.metrics();
            (m.sum("tokenprobe_otlp_exports_total", &[("result", "failed")]) >= 2.0).then_some(m)
        },
    );
    assert!(m.sum("tokenprobe_otlp_exports_total", &[("result", "dropped")]) >= 5.0);
    assert_eq!(
        m.sum("tokenprobe_otlp_exports_total", &[("result", "sent")]),
        0.0
    );
    // Probing went on every 500 ms meanwhile: nothing was skipped, nothing failed.
    let probes = m.sum("tokenprobe_probes_total", &[]);
    assert!(probes >= 5.0, "{probes}");
    assert_eq!(m.sum("tokenprobe_probes_skipped_total", &[]), 0.0);
    assert_eq!(m.sum("tokenprobe_probe_errors_total", &[]), 0.0);
    // Shutdown stays bounded: the last export gives up after its timeout.
    let (st, _) = tp
        .guard
        .signal_and_wait("-TERM", Duration::from_secs(20))
        .expect("serve exits");
    assert!(st.success(), "{st}");
}

#[test]
fn bench_exports_its_measured_requests_over_otlp() {
    if !require_deps("bench_exports_its_measured_requests_over_otlp", &[]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (otlp, otlp_url) = receiver(dir.path(), "ok");
    let (_sim, url) = start_simulate(dir.path(), &["--ttft", "30ms", "--output-tokens", "4"]);
    let cfg = dir.path().join("bench.yml");
    std::fs::write(&cfg, config(&url)).unwrap();
    let json = dir.path().join("run.json");
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.args(["bench", "--config.file"])
        .arg(&cfg)
        .args([
            "--concurrency",
            "1,2",
            "--requests-per-level",
            "5",
            "--warmup",
            "2",
        ])
        .args(["--no-history", "--no-progress", "-o"])
        .arg(&json)
        .env("OTEL_METRICS_EXPORTER", "otlp")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp_url);
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(60));
    assert!(st.success(), "{st}\n{out}\n{err}");
    assert!(err.contains("1 export(s) sent, 0 failed"), "{err}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let measured: u64 = report["models"][0]["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(measured, 10);
    // One export (the run is shorter than the default 60 s interval): the measured requests, not
    // the warm-up's, with the run's id.
    let all = exports(&otlp);
    assert_eq!(all.len(), 1, "{all:?}");
    let d = points(&all[0], "gen_ai.client.operation.duration");
    assert_eq!(u(&d[0]["count"]), measured);
    assert_eq!(
        attr(&d[0]["attributes"], "tokenprobe.run_id").unwrap(),
        &report["run"]["id"]
    );
    let ttfc = points(&all[0], "gen_ai.client.operation.time_to_first_chunk");
    assert_eq!(u(&ttfc[0]["count"]), measured);
    // TTFT 30 ms: all in (0.02, 0.04].
    assert_eq!(u(&ttfc[0]["bucket_counts"][2]), measured);
    assert!(points(&all[0], "gen_ai.client.operation.time_per_output_chunk").is_empty());
}
