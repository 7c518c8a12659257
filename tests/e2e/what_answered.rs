//! What answered (issue 43), against a simulator that lies on purpose, the known truth:
//! `--served-model` (another model answers), `--usage-scale` (usage that is not what was
//! streamed), `--fingerprint` and `--new-fingerprint` (another build from a request on, whose
//! answers differ).
//!
//! - `serve`: the flags and their series (the mismatch by the model that answered, the audits
//!   and their ratio), the info series following the fingerprint's change, the change and the
//!   drift counted with the old and new fingerprint, the content check's series; a target with
//!   `model_mismatch: fail` fails its probes with that error type; the warn line;
//! - `probe`: the flags and the audit in JSON, exit 1 with `model_mismatch: fail`;
//! - `bench`: the level's counts, the relayed model marked in its name and not ranked, ranked
//!   with `--rank-substituted`.

use crate::common;
use common::e2e::*;

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn run(args: &[&str], limit: Duration) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.args(args);
    for v in common::PROXY_ENV_VARS {
        cmd.env_remove(v);
    }
    let (st, out, err) = run_with_timeout(cmd, None, limit);
    (st.code(), out, err)
}

/// A relay on a simulator: another model answers, its usage twice what it streams, fingerprint
/// `fp_a` until request `change`, then `fp_b` and other words.
fn relay(dir: &Path, change: u32) -> (ChildGuard, String) {
    start_simulate(
        dir,
        &[
            "--ttft",
            "5ms",
            "--itl",
            "1ms",
            "--output-tokens",
            "8",
            "--served-model",
            "gpt-4o-mini",
            "--usage-scale",
            "2",
            "--fingerprint",
            "fp_a",
            "--new-fingerprint",
            &format!("{change}:fp_b"),
        ],
    )
}

/// Targets `relay` (audited by events, a deterministic canary with drift detection) and `strict`
/// (`model_mismatch: fail`) on `url`.
fn config(url: &str, interval: &str) -> String {
    format!(
        "defaults:\n  interval: {interval}\n\
         prompts:\n  - name: canary\n    messages: [{{role: user, content: 'Say hello.'}}]\n    max_tokens: 8\n    drift: true\n    expect: {{regex: 'simulated answer'}}\n\
         targets:\n  - name: relay\n    base_url: {url}/v1\n    models: [gpt-4o]\n    usage_audit: {{count: events}}\n    extra_body: {{temperature: 0, seed: 1}}\n\
         \x20 - name: strict\n    base_url: {url}/v1\n    models: [gpt-4o]\n    model_mismatch: fail\n    extra_body: {{temperature: 0, seed: 1}}\n"
    )
}

#[test]
fn serve_counts_a_substitution_inflated_usage_and_a_fingerprint_change() {
    let _serial = serial();
    let _wd = Watchdog::new("serve_what_answered", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    // Both jobs' first two probes come from fp_a, the rest from fp_b.
    let (_sim, url) = relay(dir.path(), 4);
    let mut tp = Tokenprobe::serve(dir.path(), &config(&url, "250ms"));
    let relay = [("target", "relay")];
    let m = poll_for(
        "8 probes of each job",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let m = tp.metrics();
            let each = ["relay", "strict"]
                .iter()
                .all(|t| m.sum("tokenprobe_probes_total", &[("target", t)]) >= 8.0);
            each.then_some(m)
        },
    );
    let probes = m.sum("tokenprobe_probes_total", &relay);
    let flag = |f: &str| {
        m.sum(
            "tokenprobe_probe_flags_total",
            &[("target", "relay"), ("flag", f)],
        )
    };
    // Every probe of the relay: another model, twice the usage.
    assert_eq!(flag("model_mismatch"), probes);
    assert_eq!(flag("usage_mismatch"), probes);
    assert_eq!(
        m.sum(
            "tokenprobe_model_mismatch_total",
            &[("target", "relay"), ("served_model", "gpt-4o-mini")]
        ),
        probes
    );
    let audits = |r: &str| {
        m.sum(
            "tokenprobe_usage_audits_total",
            &[("target", "relay"), ("result", r)],
        )
    };
    assert_eq!((audits("mismatch"), audits("within")), (probes, 0.0));
    assert_eq!(
        m.sum(
            "tokenprobe_usage_ratio",
            &[("target", "relay"), ("count", "output")]
        ),
        2.0
    );
    // The fingerprint changed once: one info series, fp_b's; the change and the answer's drift
    // counted with the old and new fingerprint.
    let info = m.select("tokenprobe_served_model_info", &relay).count();
    assert_eq!(info, 1, "one info series per job");
    assert!(
        m.has(
            "tokenprobe_served_model_info",
            &[
                ("target", "relay"),
                ("served_model", "gpt-4o-mini"),
                ("system_fingerprint", "fp_b")
            ]
        ),
        "fp_b's info series"
    );
    let changes = |f: &str| {
        m.sum(
            "tokenprobe_served_changes_total",
            &[("target", "relay"), ("field", f)],
        )
    };
    assert_eq!(
        (changes("system_fingerprint"), changes("served_model")),
        (1.0, 0.0)
    );
    assert_eq!(
        m.sum(
            "tokenprobe_answer_drift_total",
            &[
                ("target", "relay"),
                ("from_fingerprint", "fp_a"),
                ("to_fingerprint", "fp_b")
            ]
        ),
        1.0
    );
    assert_eq!(flag("answer_drift"), 1.0);
    // The canary's check passes: the other build's words still say it.
    assert_eq!(
        m.sum(
            "tokenprobe_expect_checks_total",
            &[("target", "relay"), ("result", "passed")]
        ),
        probes
    );
    // `model_mismatch: fail`: every probe of the strict target fails with that type.
    let strict = m.sum("tokenprobe_probes_total", &[("target", "strict")]);
    assert_eq!(
        m.sum(
            "tokenprobe_probe_errors_total",
            &[("target", "strict"), ("error_type", "model_mismatch")]
        ),
        strict
    );
    let logs = tp.probe_logs();
    let warned = logs.iter().find(|l| {
        l.get("msg").and_then(Value::as_str) == Some("what answered is not what was asked for")
    });
    let warned = warned.unwrap_or_else(|| panic!("no warn line\n{}", tp.guard.logs()));
    assert_eq!(warned["served_model"], "gpt-4o-mini");
    assert_eq!(warned["output_usage_ratio"], 2.0);
}

#[test]
fn probe_and_bench_flag_and_mark_a_substitute() {
    let _serial = serial();
    let _wd = Watchdog::new("probe_bench_what_answered", Duration::from_secs(180));
    let dir = tempfile::tempdir().unwrap();
    let (_relay, relay_url) = relay(dir.path(), 1_000_000);
    let (_honest, honest_url) = start_simulate(
        dir.path(),
        &["--ttft", "20ms", "--itl", "1ms", "--output-tokens", "8"],
    );
    let cfg = dir.path().join("c.yml");
    std::fs::write(
        &cfg,
        format!(
            "prompts:\n  - name: p\n    messages: [{{role: user, content: hi}}]\n    max_tokens: 8\n\
             targets:\n  - name: relay\n    base_url: {relay_url}/v1\n    models: [gpt-4o]\n    usage_audit: {{count: events}}\n\
             \x20 - name: honest\n    base_url: {honest_url}/v1\n    models: [gpt-4o]\n    usage_audit: {{count: events}}\n\
             \x20 - name: strict\n    base_url: {relay_url}/v1\n    models: [gpt-4o]\n    model_mismatch: fail\n"
        ),
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    // probe: flagged and audited, a success; with `model_mismatch: fail` a failure (exit 1).
    let (code, out, err) = run(
        &[
            "probe",
            "--config.file",
            cfg,
            "--target",
            "relay",
            "--format",
            "json",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let v: Value = serde_json::from_str(out.trim()).expect("probe JSON");
    assert_eq!(
        v["flags"],
        serde_json::json!(["model_mismatch", "usage_mismatch"])
    );
    assert_eq!(v["served_model"], "gpt-4o-mini");
    assert_eq!(v["usage_audit"]["counted_by"], "events");
    assert_eq!(
        (
            &v["usage_audit"]["output"]["expected"],
            &v["usage_audit"]["output"]["stated"]
        ),
        (&Value::from(8), &Value::from(16))
    );
    let (code, out, err) = run(
        &["probe", "--config.file", cfg, "--target", "strict"],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(1), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("FAILED: model_mismatch"), "{out}");
    assert!(out.contains("NOT the model asked for"), "{out}");

    // bench: the relayed model is faster (5 ms TTFT against 20) but not ranked; marked in the
    // terminal, the JSON and the CSV; ranked when asked.
    let json = dir.path().join("b.json");
    let csv = dir.path().join("b.csv");
    let bench = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            "--config.file",
            cfg,
            "--models",
            "relay/gpt-4o,honest/gpt-4o",
            "--concurrency",
            "1",
            "--requests-per-level",
            "4",
            "--weight",
            "ttft=1",
            "-o",
            json.to_str().unwrap(),
            "-o",
            csv.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = run(&args, Duration::from_secs(60));
        assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
        let text = std::fs::read_to_string(&json).unwrap();
        (out, serde_json::from_str::<Value>(&text).unwrap())
    };
    let (out, r) = bench(&[]);
    let marked = "relay/gpt-4o [answered by gpt-4o-mini]";
    assert!(out.contains(marked), "{out}");
    assert!(out.contains("What answered"), "{out}");
    let ranked: Vec<&str> = r["selection"]["ranked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["model"].as_str().unwrap())
        .collect();
    assert_eq!(ranked, ["honest/gpt-4o"], "{out}");
    assert_eq!(r["selection"]["rejected"][0]["model"], marked);
    let level = &r["models"][0]["levels"][0]["answered"];
    assert_eq!(level["model_mismatch"], 4, "{level}");
    assert_eq!(level["mismatched_by"]["gpt-4o-mini"], 4, "{level}");
    assert_eq!(level["usage_ratio_p50"], 2.0, "{level}");
    assert_eq!(level["usage_mismatch_share"], 1.0, "{level}");
    let honest = &r["models"][1]["levels"][0]["answered"];
    assert_eq!(honest["model_mismatch"], 0, "{honest}");
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    let header = csv_text.lines().next().unwrap();
    assert!(
        header.contains(
            "served_models,model_mismatch,usage_audited,usage_mismatch_share,usage_ratio_p50"
        ),
        "{header}"
    );
    let (_, r) = bench(&["--rank-substituted"]);
    let ranked: Vec<&str> = r["selection"]["ranked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["model"].as_str().unwrap())
        .collect();
    assert_eq!(ranked, [marked, "honest/gpt-4o"]);
}
