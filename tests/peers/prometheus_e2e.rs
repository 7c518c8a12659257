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

/// Issue 26 item 6: with `buckets.native: true`, a Prometheus 2.42 run with
/// `--enable-feature=native-histograms` asks for the protobuf format and stores each histogram
/// as one native series: a default job is 45 series there instead of 101. The stored histogram is
/// checked against the probes themselves: its count is the first probes of serve's own log, its
/// sum their TTFTs' sum, and every bucket holds exactly the logged TTFTs between its bounds.
#[test]
fn a_native_histogram_scraper_stores_one_series_per_histogram_holding_each_probe() {
    let _serial = serial();
    let name = "a_native_histogram_scraper_stores_one_series_per_histogram_holding_each_probe";
    if !require_deps(name, &["prometheus"]) {
        return;
    }
    let _wd = Watchdog::new(name, Duration::from_secs(240));
    let dir = tempfile::tempdir().unwrap();
    // TTFTs spread over several native buckets (each about 9% wide at schema 3).
    let (_sim, sim) = start_simulate(
        dir.path(),
        &[
            "--ttft",
            "60ms",
            "--ttft-jitter",
            "40ms",
            "--itl",
            "2ms",
            "--output-tokens",
            "4",
        ],
    );
    let config = format!(
        "defaults:\n  interval: 1s\nbuckets:\n  native: true\nprompts:\n  - name: hi\n    \
         messages: [{{role: user, content: hi}}]\n    max_tokens: 4\ntargets:\n  - name: sim\n    \
         base_url: {sim}\n    models: [m]\n    prompts: [hi]\n"
    );
    let mut tp = Tokenprobe::serve(dir.path(), &config);
    let tp_addr = tp.url.trim_start_matches("http://").to_string();
    let (mut prom_guard, prom) = start_prometheus_with(
        dir.path(),
        &format!("  - job_name: tokenprobe\n    static_configs:\n      - targets: ['{tp_addr}']\n"),
        &[&repo_root().join("deploy/prometheus/tokenprobe-rules.yml")],
        &["--enable-feature=native-histograms"],
    );
    let q = "tokenprobe_time_to_first_token_seconds{prompt=\"hi\"}";
    let hist = wait_for(
        "5 probes in the native TTFT histogram",
        Duration::from_secs(90),
        || {
            prom_guard.assert_running();
            tp.guard.assert_running();
            let r = prom_query(&prom, q);
            let h = r.first()?.get("histogram")?.get(1)?.clone();
            let n: f64 = h["count"].as_str()?.parse().ok()?;
            (n >= 5.0).then_some(h)
        },
    );
    // Series of the job as Prometheus stores them: every histogram one series.
    let stored = prom_query(&prom, "count({__name__=~\"tokenprobe_.+\", prompt=\"hi\"})");
    let exposed = tp.metrics();
    let classic = exposed
        .0
        .iter()
        .filter(|s| s.label("prompt") == Some("hi"))
        .count();
    // The default 101, the cached input tokens' counter (the simulator states them in its
    // usage, as vLLM does, so the counter exists from its first answer), and what answered from
    // the first answer that named its model: the info series, the two change counters, the
    // usage audits' results (within, mismatch, and no_count until one token per event was
    // learned, three answers in) and the last output ratio.
    assert_eq!(classic, 109, "the default job's classic series");
    assert_eq!(stored.first().map(value_of), Some(53.0), "{stored:?}");
    let buckets = prom_query(&prom, "count({__name__=~\"tokenprobe_.+_bucket\"})");
    assert!(buckets.is_empty(), "no classic bucket series: {buckets:?}");

    // The stored histogram against serve's log of the same probes (one job, one probe at a time,
    // so the first `count` successes of the log are the ones the scrape saw).
    let count: usize = hist["count"].as_str().unwrap().parse().unwrap();
    let ttfts: Vec<f64> = tp
        .probe_logs()
        .iter()
        .filter(|l| l.get("outcome").and_then(|o| o.as_str()) == Some("success"))
        .filter_map(|l| l.get("ttft_s").and_then(serde_json::Value::as_f64))
        .collect();
    assert!(
        ttfts.len() >= count,
        "{} logged, {count} stored",
        ttfts.len()
    );
    let seen = &ttfts[..count];
    let sum: f64 = hist["sum"].as_str().unwrap().parse().unwrap();
    let logged: f64 = seen.iter().sum();
    assert!(
        (sum - logged).abs() <= 1e-9 * logged,
        "sum {sum} vs logged {logged}"
    );
    let distinct = check_native_buckets(&hist, seen);

    // Quantiles come from the native histogram alone.
    let p50 = prom_query(&prom, &format!("histogram_quantile(0.5, {q})"));
    let p50 = p50.first().map(value_of).unwrap_or(f64::NAN);
    let (lo, hi) = seen
        .iter()
        .fold((f64::MAX, 0f64), |(a, b), v| (a.min(*v), b.max(*v)));
    assert!(
        p50 >= lo / 1.091 && p50 <= hi * 1.091,
        "p50 {p50} vs TTFTs {seen:?}"
    );
    // The README's query for such a Prometheus (the shipped rules read `_bucket`), once the
    // rate has two scrapes with probes between them.
    let rate_q = "histogram_quantile(0.95, sum by (target, model) \
                  (rate(tokenprobe_time_to_first_token_seconds[30s])))";
    let p95 = wait_for(
        "a p95 TTFT from the native histogram",
        Duration::from_secs(30),
        || {
            prom_query(&prom, rate_q)
                .first()
                .map(value_of)
                .filter(|v| v.is_finite())
        },
    );
    let all = tp
        .probe_logs()
        .iter()
        .filter_map(|l| l.get("ttft_s").and_then(serde_json::Value::as_f64))
        .fold((f64::MAX, 0f64), |(a, b), v| (a.min(v), b.max(v)));
    let (lo, hi) = (lo.min(all.0), hi.max(all.1));
    assert!(
        p95 >= lo / 1.091 && p95 <= hi * 1.091,
        "p95 {p95} vs TTFTs in [{lo}, {hi}]"
    );
    // The shipped rules and the dashboards' quantile panels answer from the native half of their `or`: the p95 rule, and the TTFT SLO
    // ratio, 0 as every TTFT here is under 2 s (without the native half there would be no series).
    let rule = |q: &str| {
        wait_for(q, Duration::from_secs(30), || {
            prom_query(&prom, q)
                .first()
                .map(value_of)
                .filter(|v| v.is_finite())
        })
    };
    let p95_rule = rule("target_model:tokenprobe_time_to_first_token_seconds:p95_5m");
    assert!(
        p95_rule >= lo / 1.091 && p95_rule <= hi * 1.091,
        "p95 rule {p95_rule} vs TTFTs in [{lo}, {hi}]"
    );
    assert_eq!(
        rule("target_model:tokenprobe_ttft_slo_bad:ratio_rate5m"),
        0.0
    );
    let panels = dashboard_quantile_panels(&prom);
    eprintln!(
        "native: {count} probes in {distinct} buckets, sum {sum}, p50 {p50}; \
         45 series stored, 101 exposed as text; {panels} dashboard quantile panels answered"
    );
    prom_guard.assert_running();
}

/// Checks a stored native histogram's buckets against the values it holds: schema 3 widths,
/// each bucket counting exactly the values between its bounds, every value in one; returns the
/// number of buckets.
fn check_native_buckets(hist: &serde_json::Value, seen: &[f64]) -> usize {
    let count = seen.len();
    let mut in_buckets = 0;
    for b in hist["buckets"].as_array().unwrap() {
        let f = |i: usize| -> f64 { b[i].as_str().unwrap().parse().unwrap() };
        let (lower, upper, n) = (f(1), f(2), f(3));
        assert_eq!(
            b[0].as_u64(),
            Some(0),
            "positive buckets are open below: {b}"
        );
        assert!(upper / lower < 1.091, "schema 3 buckets: {b}");
        let want = seen.iter().filter(|v| lower < **v && **v <= upper).count();
        assert_eq!(n as usize, want, "bucket ({lower}, {upper}] of {seen:?}");
        in_buckets += want;
    }
    assert_eq!(
        in_buckets, count,
        "every probe in one bucket: {seen:?} {hist}"
    );
    let distinct = hist["buckets"].as_array().unwrap().len();
    assert!(
        distinct >= 2,
        "the jitter spreads TTFT over buckets: {hist}"
    );
    distinct
}

/// Runs the dashboards' quantile panels of the four histogram families a default job exports
/// against `prom`, asserting each answers a finite value; returns how many ran.
fn dashboard_quantile_panels(prom: &str) -> usize {
    let list = Command::new(venv_python())
        .arg(repo_root().join("scripts/ci/deploy-check/dashboard-queries.py"))
        .arg("--list")
        .arg(repo_root().join("grafana/dashboards/tokenprobe-overview.json"))
        .output()
        .expect("dashboard-queries.py --list");
    let exported = [
        "tokenprobe_time_to_first_token_seconds",
        "tokenprobe_time_per_output_token_seconds",
        "tokenprobe_decode_tokens_per_second",
        "tokenprobe_request_duration_seconds",
    ];
    let mut panels = 0;
    for line in String::from_utf8_lossy(&list.stdout).lines() {
        let Some(expr) = line.rsplit('\t').next() else {
            continue;
        };
        let reads = |f: &&str| expr.contains(&format!("rate({f}_bucket{{"));
        // The model server's series (vLLM, SGLang) are not scraped here.
        let quantile = expr.starts_with("(histogram_quantile(") && !expr.contains("vllm:");
        if !quantile || !exported.iter().any(reads) {
            continue;
        }
        let v = prom_query(prom, expr).first().map(value_of);
        assert!(v.is_some_and(f64::is_finite), "{line}: {v:?}");
        panels += 1;
    }
    assert!(panels >= 10, "{panels} quantile panels checked");
    panels
}
