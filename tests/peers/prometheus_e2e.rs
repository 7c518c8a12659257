//! tokenprobe's /metrics as real consumers see it: a strict OpenMetrics parser
//! (Python prometheus_client), `promtool check metrics`, and a real Prometheus
//! server scraping it and answering PromQL. tokenprobe probes a real llama.cpp
//! server (scripts/llama/llama-server.py) so the histograms hold real observations.

use crate::common;
use common::e2e;

use e2e::*;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

const OPENMETRICS_ACCEPT: &str = "application/openmetrics-text; version=1.0.0";

/// Families (OpenMetrics names: counters without `_total`) that must be there.
const EXPECTED_FAMILIES: [&str; 13] = [
    "tokenprobe_time_to_first_token_seconds",
    "tokenprobe_time_to_first_output_token_seconds",
    "tokenprobe_time_per_output_token_seconds",
    "tokenprobe_inter_chunk_latency_seconds",
    "tokenprobe_decode_tokens_per_second",
    "tokenprobe_request_duration_seconds",
    "tokenprobe_time_to_headers_seconds",
    "tokenprobe_probes",
    "tokenprobe_probe_errors",
    "tokenprobe_output_tokens",
    "tokenprobe_input_tokens",
    "tokenprobe_last_probe_success",
    "tokenprobe_last_probe_timestamp_seconds",
];

#[test]
fn metrics_parse_as_openmetrics_and_pass_promtool() {
    let _serial = serial();
    if !require_deps(
        "metrics_parse_as_openmetrics_and_pass_promtool",
        &["promtool"],
    ) {
        return;
    }
    let _wd = Watchdog::new(
        "metrics_parse_as_openmetrics_and_pass_promtool",
        Duration::from_secs(240),
    );
    let dir = tempfile::tempdir().unwrap();
    let llama = LlamaServer::start(dir.path());
    let mut tp = Tokenprobe::serve(dir.path(), &config_yaml(&llama.base_url(), "1s", 16));
    tp.wait_probes(2.0, Duration::from_secs(60));
    let metrics_url = format!("{}/metrics", tp.url);
    for path in ["/-/healthy", "/-/ready", "/"] {
        let r = http_get(&format!("{}{path}", tp.url), &[]);
        assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    }

    // (a) OpenMetrics, parsed strictly.
    let r = http_get(&metrics_url, &[("Accept", OPENMETRICS_ACCEPT)]);
    assert_eq!(r.status, 200);
    let ct = r.header("content-type").unwrap_or_default().to_string();
    assert!(
        ct.starts_with("application/openmetrics-text") && ct.contains("version=1.0.0"),
        "Content-Type for Accept: {OPENMETRICS_ACCEPT}: {ct:?}"
    );
    assert!(
        r.body.ends_with("# EOF\n"),
        "OpenMetrics body must end with '# EOF\\n'"
    );
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo_root().join("scripts/ci/check-openmetrics.py"));
    for f in EXPECTED_FAMILIES {
        cmd.args(["--expect", f]);
    }
    let (st, out, err) = run_with_timeout(cmd, Some(r.body.as_bytes()), Duration::from_secs(60));
    assert!(
        st.success(),
        "strict OpenMetrics parse failed: {err}\n{out}\n--- exposition ---\n{}",
        r.body
    );
    eprintln!("{}", out.trim_end());
    let om = Samples::parse(&r.body);
    assert_eq!(
        om.one("tokenprobe_build_info"),
        1.0,
        "tokenprobe_build_info"
    );

    // (b) The classic text format when nothing is asked for, clean under promtool.
    let r = http_get(&metrics_url, &[]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8"),
        "Content-Type without Accept"
    );
    assert!(
        !r.body.contains("# EOF"),
        "text format must not carry '# EOF'"
    );
    let mut cmd = Command::new(which("promtool").unwrap());
    cmd.args(["check", "metrics"]);
    let (st, out, err) = run_with_timeout(cmd, Some(r.body.as_bytes()), Duration::from_secs(60));
    let said = format!("{out}{err}");
    assert!(
        st.success() && said.trim().is_empty(),
        "promtool check metrics ({st}) said:\n{said}\n--- exposition ---\n{}",
        r.body
    );
    let text = Samples::parse(&r.body);
    for f in EXPECTED_FAMILIES {
        assert!(
            text.0.iter().any(|s| s.name.starts_with(f)),
            "family {f} absent from the text format"
        );
    }
}

fn value_of(sample: &serde_json::Value) -> f64 {
    sample["value"][1]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN)
}

#[test]
fn real_prometheus_scrapes_and_queries_tokenprobe() {
    let _serial = serial();
    if !require_deps(
        "real_prometheus_scrapes_and_queries_tokenprobe",
        &["prometheus"],
    ) {
        return;
    }
    let _wd = Watchdog::new(
        "real_prometheus_scrapes_and_queries_tokenprobe",
        Duration::from_secs(300),
    );
    let dir = tempfile::tempdir().unwrap();
    let llama = LlamaServer::start(dir.path());
    let mut tp = Tokenprobe::serve(dir.path(), &config_yaml(&llama.base_url(), "1s", 16));
    let tp_addr = tp.url.trim_start_matches("http://").to_string();

    let (mut prom_guard, prom) = start_prometheus(dir.path(), &tp_addr, &[]);

    // At least 3 successful scrapes.
    let up_q = "count_over_time(up{job=\"tokenprobe\"}[5m])";
    wait_for("3 scrapes of tokenprobe", Duration::from_secs(60), || {
        prom_guard.assert_running();
        tp.guard.assert_running();
        let r = http_get(&format!("{prom}/api/v1/targets"), &[]);
        let v: serde_json::Value = serde_json::from_str(&r.body).expect("targets JSON");
        if let Some(t) = v["data"]["activeTargets"].get(0) {
            let err = t["lastError"].as_str().unwrap_or_default();
            assert!(
                err.is_empty() || t["health"] != "down",
                "prometheus failed to scrape tokenprobe: {err}\n{t}"
            );
        }
        prom_query(&prom, up_q)
            .first()
            .map(value_of)
            .filter(|n| *n >= 3.0)
    });
    let up = prom_query(&prom, "up{job=\"tokenprobe\"}");
    assert_eq!(up.first().map(value_of), Some(1.0), "up: {up:?}");

    // p95 TTFT from the histogram's buckets.
    let p95_q = "histogram_quantile(0.95, sum by (le, target, model) \
                 (rate(tokenprobe_time_to_first_token_seconds_bucket[30s])))";
    let res = wait_for(
        "a numeric p95 TTFT from prometheus",
        Duration::from_secs(60),
        || {
            let res = prom_query(&prom, p95_q);
            res.first()
                .map(value_of)
                .filter(|v| v.is_finite())
                .map(|_| res)
        },
    );
    assert_eq!(res.len(), 1, "one (target, model) series expected: {res:?}");
    let p95 = value_of(&res[0]);
    eprintln!("prometheus: {p95_q} = {p95} ({})", res[0]["metric"]);
    assert!(p95 > 0.0 && p95 < 5.0, "p95 TTFT {p95}");
    assert_eq!(res[0]["metric"]["target"], "local", "{}", res[0]);
    assert_eq!(res[0]["metric"]["model"], "smollm2", "{}", res[0]);

    // Every error_type series is there (at 0) before any error happened.
    let errs = prom_query(&prom, "tokenprobe_probe_errors_total");
    let types: BTreeSet<String> = errs
        .iter()
        .filter_map(|s| s["metric"]["error_type"].as_str().map(str::to_string))
        .collect();
    let want: BTreeSet<String> = ERROR_TYPES.iter().map(|s| s.to_string()).collect();
    assert_eq!(types, want, "error_type label values in prometheus");
    for s in &errs {
        assert_eq!(value_of(s), 0.0, "{s}");
    }
    let probes = prom_query(&prom, "sum(tokenprobe_probes_total)");
    assert!(
        probes.first().map(value_of).unwrap_or(0.0) >= 1.0,
        "probes_total: {probes:?}"
    );
    prom_guard.assert_running();
}
