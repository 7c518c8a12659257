//! Issue 25 item 2: `bench --remote-write` into Debian's real Prometheus, started with
//! `--web.enable-remote-write-receiver`: every level's figures are queryable there, equal to the
//! run's own JSON report, labelled with the run, model, target, prompt and level; a receiver that
//! is down costs the run nothing but a line saying so.

use super::*;

/// The instant query's one value, parsed (Prometheus writes a float64 in its shortest form, so
/// it parses back to the same number).
fn one_value(prom: &str, q: &str) -> f64 {
    let res = prom_query(prom, q);
    assert_eq!(res.len(), 1, "{q}: {res:?}");
    res[0]["value"][1].as_str().unwrap().parse().unwrap()
}

#[test]
fn every_level_reaches_prometheus_as_the_report_has_it() {
    let _serial = serial();
    if !require_deps(
        "every_level_reaches_prometheus_as_the_report_has_it",
        &["prometheus"],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Nothing to scrape: the series come by remote write only.
    let (_prom, prom) = start_prometheus_config(dir.path(), "", &[]);
    let (_sim, url) = simulate(dir.path(), &slots("8", "20ms", "2ms", "8"));
    let cfg = sim_config(dir.path(), &url);
    let json = dir.path().join("run.json");
    let write = format!("{prom}/api/v1/write");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "1,2",
            "--requests-per-level",
            "6",
            "--no-history",
            "--remote-write",
            &write,
            "--remote-write-header",
            "X-Scope-OrgID=team-a",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        err.contains(&format!(
            "remote write to {write}: 2 level(s) sent, 0 failed, 0 dropped"
        )),
        "{err}"
    );
    let r = read_json(&json);
    let run_id = r["run"]["id"].as_str().unwrap();
    // The header's value is not in the report's command line.
    assert!(
        !r["command"].as_str().unwrap().contains("team-a"),
        "{}",
        r["command"]
    );
    for (i, level) in ["1", "2"].iter().enumerate() {
        let l = &levels(&r, 0)[i];
        let sel = format!(
            r#"run_id="{run_id}",model="sim-a",target="sim",prompt="hello",level="{level}",mode="closed""#
        );
        for (name, field, q) in [
            ("time_to_first_token_seconds", "ttft_s", "0.95"),
            ("time_to_first_token_seconds", "ttft_s", "0.5"),
            ("time_per_output_token_seconds", "tpot_s", "0.5"),
            ("request_duration_seconds", "e2e_s", "0.99"),
        ] {
            let key = match q {
                "0.5" => "p50",
                "0.95" => "p95",
                _ => "p99",
            };
            let got = one_value(
                &prom,
                &format!(r#"tokenprobe_bench_{name}{{{sel},quantile="{q}"}}"#),
            );
            assert_eq!(
                got,
                l[field][key].as_f64().unwrap(),
                "{name} {q} at {level}"
            );
        }
        for (name, field) in [
            ("output_tokens_per_second", "output_tokens_per_s"),
            ("requests_per_second", "requests_per_s"),
            ("error_ratio", "error_rate"),
            ("requests", "requests"),
        ] {
            let got = one_value(&prom, &format!("tokenprobe_bench_{name}{{{sel}}}"));
            assert_eq!(got, l[field].as_f64().unwrap(), "{name} at {level}");
        }
        let c = one_value(&prom, &format!("tokenprobe_bench_concurrency{{{sel}}}"));
        assert_eq!(c, f64::from(u8::try_from(i + 1).unwrap()));
    }

    // A receiver that is down: the run's figures and exit code are untouched, the line says so.
    let down = format!("http://127.0.0.1:{}/api/v1/write", free_port());
    let (code, _, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "1",
            "--requests-per-level",
            "2",
            "--no-history",
            "--remote-write",
            &down,
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("0 level(s) sent, 1 failed, 0 dropped") && err.contains("(after 3 attempts)"),
        "{err}"
    );
}
