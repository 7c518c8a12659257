//! The Grafana dashboards, the Grafana alert rules and the Prometheus rules of `grafana/` and
//! `deploy/prometheus/` against real data: tokenprobe probes a real llama.cpp server (and runs a
//! session job against its simulator, for the session row), a real Prometheus scrapes it and evaluates `deploy/prometheus/tokenprobe-rules.yml`, then
//!   - every rule of that file is loaded and evaluates without error, and every recording rule
//!     yields a series;
//!   - a `bench --remote-write` run into the same Prometheus gives the bench row its series;
//!   - `scripts/ci/deploy-check/dashboard-queries.py` runs every panel, variable and alert-rule
//!     query of `grafana/` and fails if one errors or returns nothing (except its small allowlist
//!     of metrics tokenprobe does not export yet, which it prints as such).

use crate::common;
use common::e2e;

use e2e::*;
use std::process::Command;
use std::time::Duration;

fn finite_values(res: &[serde_json::Value]) -> usize {
    res.iter()
        .filter_map(|s| s["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()))
        .filter(|v| v.is_finite())
        .count()
}

#[test]
fn dashboards_alerts_and_rules_query_real_prometheus() {
    let _serial = serial();
    if !require_deps(
        "dashboards_alerts_and_rules_query_real_prometheus",
        &["prometheus"],
    ) {
        return;
    }
    let _wd = Watchdog::new(
        "dashboards_alerts_and_rules_query_real_prometheus",
        Duration::from_secs(300),
    );
    let root = repo_root();
    let rules_file = root.join("deploy/prometheus/tokenprobe-rules.yml");
    let dir = tempfile::tempdir().unwrap();
    let llama = LlamaServer::start(dir.path());
    // The session canary's row: a session job against the simulator (tool calls, prefix cache).
    let (_sim, sim_url) = start_simulate(
        dir.path(),
        &[
            "--profile",
            "agent:ttft=10ms,itl=1ms,output_tokens=8,prefix_cache=on,tool_calls=on",
        ],
    );
    let config = config_yaml(&llama.base_url(), "1s", 16).replacen(
        "prompts:\n",
        "prompts:\n  - name: agent\n    session: {system_tokens: 200, tools: {count: 2, tokens: 40}, user_tokens: 40, turns: 2, call_tokens: 12, result_tokens: 80, answer_tokens: 12, context_budget: 4000}\n",
        1,
    ) + &format!(
        "  - name: agents\n    base_url: {sim_url}/v1\n    api: openai-chat\n    models: [agent]\n    prompts: [agent]\n"
    );
    let mut tp = Tokenprobe::serve(dir.path(), &config);
    let tp_addr = tp.url.trim_start_matches("http://").to_string();

    let (mut prom_guard, prom) = start_prometheus(dir.path(), &tp_addr, &[&rules_file]);

    // Enough scrapes for rate() over the dashboards' windows, and a finite TTFT quantile.
    wait_for(
        "10 scrapes of tokenprobe and a finite p50 TTFT",
        Duration::from_secs(120),
        || {
            prom_guard.assert_running();
            tp.guard.assert_running();
            let scrapes = prom_query(&prom, "count_over_time(up{job=\"tokenprobe\"}[5m])");
            let n = scrapes
                .first()
                .and_then(|s| s["value"][1].as_str())
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
            let p50 = prom_query(
                &prom,
                "target_model:tokenprobe_time_to_first_token_seconds:p50_5m",
            );
            (n >= 10.0 && finite_values(&p50) > 0).then_some(())
        },
    );

    // The alert thresholds are bucket boundaries of the default layouts (so the quantile alerts
    // are exact): TTFT 2 s, decode 30 tokens/s. `le` is "2" or "2.0" depending on the format.
    for (what, q) in [
        (
            "a TTFT bucket at 2 s",
            "tokenprobe_time_to_first_token_seconds_bucket{le=~\"2|2\\\\.0\"}",
        ),
        (
            "a decode bucket at 30 tokens/s",
            "tokenprobe_decode_tokens_per_second_bucket{le=~\"30|30\\\\.0\"}",
        ),
    ] {
        assert!(!prom_query(&prom, q).is_empty(), "no {what}: {q} is empty");
    }

    // Every rule loaded, evaluated, healthy.
    let r = http_get(&format!("{prom}/api/v1/rules"), &[]);
    let v: serde_json::Value = serde_json::from_str(&r.body).expect("rules JSON");
    let mut recording = Vec::new();
    let mut alerts = 0;
    for g in v["data"]["groups"].as_array().expect("rule groups") {
        for rule in g["rules"].as_array().expect("rules") {
            let name = rule["name"].as_str().unwrap_or_default().to_string();
            assert_eq!(
                rule["health"], "ok",
                "rule {name} of group {} is not healthy: {rule}",
                g["name"]
            );
            match rule["type"].as_str() {
                // The model server's own series: this Prometheus scrapes only tokenprobe (the
                // group's promtool unit tests cover it).
                Some("recording") if g["name"] == "tokenprobe.server" => {
                    eprintln!("skip  recording rule {name}: reads the model server's metrics");
                }
                Some("recording") => recording.push(name),
                Some("alerting") => alerts += 1,
                other => panic!("unknown rule type {other:?}: {rule}"),
            }
        }
    }
    eprintln!(
        "prometheus loaded {} recording and {alerts} alerting rules, all healthy",
        recording.len()
    );
    assert!(
        recording.len() >= 20 && alerts >= 10,
        "rules loaded: {recording:?}, {alerts} alerts"
    );
    for name in &recording {
        let res = wait_for(
            &format!("recording rule {name} to yield a series"),
            Duration::from_secs(20),
            || {
                let res = prom_query(&prom, name);
                (!res.is_empty()).then_some(res)
            },
        );
        eprintln!("ok    recording rule {name}: {} series", res.len());
    }

    // The bench row's series: one bench run against the same llama.cpp server, written to this
    // Prometheus by remote write (it runs with --web.enable-remote-write-receiver).
    let bench_cfg = dir.path().join("bench.yml");
    std::fs::write(&bench_cfg, config_yaml(&llama.base_url(), "1s", 16)).unwrap();
    let mut bench = Command::new(common::tokenprobe_bin());
    bench
        .args(["bench", "--config.file"])
        .arg(&bench_cfg)
        .args([
            "--concurrency",
            "1",
            "--requests-per-level",
            "2",
            "--no-history",
            "--remote-write",
            &format!("{prom}/api/v1/write"),
        ]);
    let (st, out, err) = run_with_timeout(bench, None, Duration::from_secs(120));
    assert!(st.success(), "bench: {st}\n{out}{err}");
    assert!(err.contains("1 level(s) sent, 0 failed"), "{err}");

    // Every query of the dashboards and Grafana alert rules.
    let mut cmd = Command::new(venv_python());
    cmd.arg(root.join("scripts/ci/deploy-check/dashboard-queries.py"))
        .args(["--prometheus", &prom]);
    for sub in ["grafana/dashboards", "grafana/provisioning/alerting"] {
        let mut files: Vec<_> = std::fs::read_dir(root.join(sub))
            .unwrap_or_else(|e| panic!("{sub}: {e}"))
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.extension()
                    .is_some_and(|x| x == "json" || x == "yml" || x == "yaml")
            })
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no files in {sub}");
        cmd.args(files);
    }
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(120));
    eprintln!("{out}{err}");
    assert!(
        st.success(),
        "dashboard-queries.py failed ({st}):\n{out}{err}"
    );
    prom_guard.assert_running();
}
