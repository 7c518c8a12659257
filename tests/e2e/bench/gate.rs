//! Issue 40 item 1: the regression gate against `tokenprobe simulate`. An unchanged re-run is
//! no regression (exit 0, every value judged within tolerance or inconclusive); the same bench
//! against a simulator whose TTFT is 30% higher, with enough requests to tell, exits 3 on TTFT.

use super::*;

/// One run of 160 requests at 16 streams against `url`, compared with `baseline` when given: its
/// exit code, stdout and JSON report.
fn run(dir: &Path, url: &str, name: &str, baseline: Option<&Path>) -> (Option<i32>, String, Value) {
    let cfg = sim_config(dir, url);
    let json = dir.join(format!("{name}.json"));
    let mut args = vec![
        "--config.file",
        cfg.to_str().unwrap(),
        "--concurrency",
        "16",
        "--requests-per-level",
        "160",
        "--max-tokens",
        "4",
        "--no-history",
        "-o",
        json.to_str().unwrap(),
    ];
    if let Some(b) = baseline {
        args.extend(["--baseline", b.to_str().unwrap()]);
    }
    let (code, out, err) = bench(&args, Duration::from_secs(60));
    assert!(
        matches!(code, Some(0 | 3)),
        "{name}: exit {code:?}\nstdout:\n{out}\nstderr:\n{err}"
    );
    (code, out, read_json(&json))
}

/// The verdicts of a report's comparison, `metric: verdict`.
fn verdicts(r: &Value) -> Vec<String> {
    r["comparison"]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| format!("{}: {}", v["metric"], v["verdict"]))
        .collect()
}

#[test]
fn an_unchanged_rerun_passes_and_a_30_percent_slower_ttft_fails() {
    let _serial = serial();
    let _wd = Watchdog::new("the_regression_gate", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let sim_args = |ttft| {
        vec![
            "--ttft",
            ttft,
            "--ttft-jitter",
            "20ms",
            "--itl",
            "5ms",
            "--output-tokens",
            "4",
        ]
    };
    let (sim, url) = simulate(dir.path(), &sim_args("100ms"));
    let (code, _, base) = run(dir.path(), &url, "base", None);
    assert_eq!(code, Some(0));
    let kept = &levels(&base, 0)[0]["distributions"]["ttft_s"];
    assert_eq!(kept["n"], 160, "{kept}");
    let base_path = dir.path().join("base.json");

    // The same server again: nothing regressed; TTFT is judged, and throughput is not.
    let (code, out, again) = run(dir.path(), &url, "again", Some(&base_path));
    let c = &again["comparison"];
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        c["regressions"],
        serde_json::json!([]),
        "{:?}",
        verdicts(&again)
    );
    assert_eq!(c["judged"], 8, "{:?}", verdicts(&again));
    for v in c["values"].as_array().unwrap() {
        let verdict = v["verdict"].as_str().unwrap();
        match v["metric"].as_str().unwrap() {
            "agg_tps" | "rps" => assert_eq!(verdict, "not_judged", "{v}"),
            _ => assert!(
                ["within_tolerance", "inconclusive"].contains(&verdict),
                "{v}"
            ),
        }
    }
    assert!(out.contains("0 regressions"), "{out}");
    drop(sim);

    // TTFT 30% higher: a regression, large and significant, at p50 and p95.
    let (_slow, slow_url) = simulate(dir.path(), &sim_args("130ms"));
    let (code, out, slow) = run(dir.path(), &slow_url, "slow", Some(&base_path));
    assert_eq!(code, Some(3), "{out}");
    let regressed: Vec<&str> = slow["comparison"]["regressions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["metric"].as_str().unwrap())
        .collect();
    assert!(
        regressed.contains(&"ttft_p50") && regressed.contains(&"ttft_p95"),
        "{:?}",
        verdicts(&slow)
    );
    let g = &slow["comparison"]["regressions"][0];
    assert!(g["p_holm"].as_f64().unwrap() <= 0.05, "{g}");
    assert!(g["interval"][0].as_f64().unwrap() > 0.1, "{g}");
    assert!(out.contains("REGRESSION sim-a @ 16: ttft_p50"), "{out}");
}
