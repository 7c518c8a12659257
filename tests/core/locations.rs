//! Probes from many places (issue 13): two `tokenprobe serve` processes probing the same model,
//! one with `location: eu` in its config and one started with `--location us` (which wins over
//! the `location:` its file has), scraped by one real Prometheus that loads
//! `deploy/prometheus/tokenprobe-rules.yml`. The `us` exporter's path to the model is broken (it
//! points at a closed port), so:
//!   - every tokenprobe series carries its exporter's `location`, and no series lacks one;
//!   - the cross-location recording rules aggregate the two (one `target_model:` series), the
//!     per-location ones keep them apart (error ratio 0 from eu, 1 from us);
//!   - `TokenprobeFailingFromSomeLocations` goes pending for `us` only (the path, not the server),
//!     and `TokenprobeFailingFromEveryLocation` stays quiet.

use crate::common;
use common::e2e::*;
use common::serve::serve;
use std::collections::BTreeMap;
use std::time::Duration;

/// `label value -> sample value` of a query's result.
fn by_label(res: &[serde_json::Value], label: &str) -> BTreeMap<String, f64> {
    res.iter()
        .map(|s| {
            let l = s["metric"][label].as_str().unwrap_or("").to_owned();
            let v = s["value"][1].as_str().and_then(|v| v.parse().ok());
            (l, v.unwrap_or(f64::NAN))
        })
        .collect()
}

fn config(location: &str, base_url: &str) -> String {
    format!(
        "{location}prompts:\n  - name: hello\n    messages: [{{role: user, content: hi}}]\n    max_tokens: 4\n\
         targets:\n  - name: sim\n    base_url: {base_url}\n    models: [m]\n    interval: 1s\n    \
         timeouts: {{connect: 1s, first_token: 2s, idle: 2s, total: 3s}}\n"
    )
}

#[test]
fn two_locations_are_told_apart_and_compared_by_one_prometheus() {
    let _serial = serial();
    if !require_deps(
        "two_locations_are_told_apart_and_compared_by_one_prometheus",
        &["prometheus"],
    ) {
        return;
    }
    let _wd = Watchdog::new(
        "two_locations_are_told_apart_and_compared_by_one_prometheus",
        Duration::from_secs(180),
    );
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_url) = start_simulate(
        dir.path(),
        &["--ttft", "20ms", "--itl", "2ms", "--output-tokens", "4"],
    );
    let eu_cfg = dir.path().join("eu.yml");
    std::fs::write(&eu_cfg, config("location: eu\n", &format!("{sim_url}/v1"))).unwrap();
    // A closed port: the path from `us` is broken, the server is fine.
    let closed = format!("http://127.0.0.1:{}/v1", free_port());
    let us_cfg = dir.path().join("us.yml");
    std::fs::write(&us_cfg, config("location: not-this-one\n", &closed)).unwrap();
    let (_eu, eu_addr, _) = serve(&eu_cfg, &[], None);
    let (_us, us_addr, _) = serve(&us_cfg, &["--location", "us"], None);

    let rules = repo_root().join("deploy/prometheus/tokenprobe-rules.yml");
    let (eu_addr, us_addr) = (eu_addr.to_string(), us_addr.to_string());
    let (_prom, prom) =
        start_prometheus_scraping(dir.path(), &[&eu_addr, &us_addr], &[rules.as_path()]);

    // Both exporters scraped twice (a rate needs two samples) and the rules evaluated on them:
    // both groups, which Prometheus evaluates at their own instants (the per-job rates live in
    // the main group, the per-location ones in `tokenprobe.locations`).
    let pending = r#"ALERTS{alertname="TokenprobeFailingFromSomeLocations",alertstate="pending"}"#;
    wait_for(
        "the per-location alert to go pending",
        Duration::from_secs(90),
        || {
            let ratio = by_label(
                &prom_query(
                    &prom,
                    "location_target_model:tokenprobe_probe_errors:ratio_rate5m",
                ),
                "location",
            );
            let aggregated = r#"target_model:tokenprobe_probes:rate5m{target="sim"}"#;
            (ratio.len() == 2
                && !prom_query(&prom, pending).is_empty()
                && !prom_query(&prom, aggregated).is_empty())
            .then_some(())
        },
    );

    let locations = by_label(
        &prom_query(&prom, "count by (location) (tokenprobe_build_info)"),
        "location",
    );
    assert_eq!(
        locations.keys().map(String::as_str).collect::<Vec<_>>(),
        ["eu", "us"],
        "the flag wins over the file's location"
    );
    let unlabelled = prom_query(&prom, r#"count({__name__=~"tokenprobe_.+", location=""})"#);
    assert!(
        unlabelled.is_empty(),
        "series without a location: {unlabelled:?}"
    );
    let probes = by_label(
        &prom_query(
            &prom,
            r#"sum by (location) (tokenprobe_probes_total{target="sim"})"#,
        ),
        "location",
    );
    assert!(probes["eu"] >= 1.0 && probes["us"] >= 1.0, "{probes:?}");

    let ratio = by_label(
        &prom_query(
            &prom,
            "location_target_model:tokenprobe_probe_errors:ratio_rate5m",
        ),
        "location",
    );
    assert_eq!(ratio["eu"], 0.0, "{ratio:?}");
    assert_eq!(ratio["us"], 1.0, "{ratio:?}");
    let count = prom_query(
        &prom,
        r#"target_model:tokenprobe_locations:count{target="sim"}"#,
    );
    assert_eq!(by_label(&count, "target")["sim"], 2.0, "{count:?}");
    let failing = prom_query(
        &prom,
        r#"target_model:tokenprobe_locations_failing:count{target="sim"}"#,
    );
    assert_eq!(by_label(&failing, "target")["sim"], 1.0, "{failing:?}");
    // The cross-location rules aggregate: one series for the job, whatever the locations.
    let aggregated = prom_query(
        &prom,
        r#"target_model:tokenprobe_probes:rate5m{target="sim"}"#,
    );
    assert_eq!(aggregated.len(), 1, "{aggregated:?}");
    assert!(
        aggregated[0]["metric"].get("location").is_none(),
        "{aggregated:?}"
    );

    let alerts = by_label(&prom_query(&prom, pending), "location");
    assert_eq!(alerts.keys().collect::<Vec<_>>(), ["us"], "{alerts:?}");
    let every = prom_query(
        &prom,
        r#"ALERTS{alertname="TokenprobeFailingFromEveryLocation"}"#,
    );
    assert!(every.is_empty(), "{every:?}");
}
