//! `tokenprobe bench` end to end:
//!
//! - against `tokenprobe simulate --max-concurrency 8` a 2/4/8/16/32 sweep (levels as given) finds
//!   the knee at 16
//!   (TTFT 200 ms and ITL 20 ms: generous, so timing noise on a busy 2-core machine does not move
//!   it), the outputs (JSON, CSV, Markdown, SVG) are written, and `--baseline` exits 0 without a
//!   regression (and on too few requests to judge one); the gate itself in [`gate`];
//! - open loop: constant arrivals send as many requests as the rate says, and a cap is counted;
//! - bad invocations exit 2 before sending anything;
//! - against llama.cpp's server with SmolLM2-135M (`tests/common/e2e.rs`), a 1/2/4 sweep's JSON report
//!   parses and its TPS p50 at concurrency 1 agrees with the server's own `timings` within 5%.

use crate::common;
use common::e2e;

use e2e::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::e2e::start_simulate as simulate;

mod gate;
mod health;
mod history;
mod remote_write;
mod trace_replay;
mod wire;

fn sim_config(dir: &Path, url: &str) -> std::path::PathBuf {
    hello_config(dir, &format!("{url}/v1"), 64, "", "")
}

/// `bench.yml` in `dir`: the "hello" prompt asking for `max_tokens`, one target `sim` at
/// `base_url` serving `sim-a`; `defaults` goes first, `target` lines go under the target.
fn hello_config(
    dir: &Path,
    base_url: &str,
    max_tokens: u32,
    defaults: &str,
    target: &str,
) -> std::path::PathBuf {
    let path = dir.join("bench.yml");
    std::fs::write(
        &path,
        format!(
            "{defaults}prompts:\n  - name: hello\n    messages: [{{role: user, content: \"Say hello\"}}]\n    max_tokens: {max_tokens}\n\
             targets:\n  - name: sim\n    base_url: {base_url}\n    models: [sim-a]\n{target}"
        ),
    )
    .expect("write config");
    path
}

fn bench(args: &[&str], limit: Duration) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.arg("bench").args(args);
    for v in ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
        cmd.env_remove(v);
    }
    let (st, out, err) = run_with_timeout(cmd, None, limit);
    (st.code(), out, err)
}

fn read_json(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()))
}

/// The arguments of a simulator with `slots` (requests past them queue), its TTFT and ITL, and
/// its output length.
fn slots<'a>(slots: &'a str, ttft: &'a str, itl: &'a str, tokens: &'a str) -> Vec<&'a str> {
    vec![
        "--max-concurrency",
        slots,
        "--ttft",
        ttft,
        "--itl",
        itl,
        "--output-tokens",
        tokens,
    ]
}

/// A simulator as [`slots`] says, logging every request to `dir/events.jsonl`: its guard, its
/// URL and the log's path.
fn logged_slots(
    dir: &Path,
    (n, ttft, itl, tokens): (&str, &str, &str, &str),
) -> (ChildGuard, String, std::path::PathBuf) {
    let log = dir.join("events.jsonl");
    let mut args = slots(n, ttft, itl, tokens);
    args.extend(["--event-log", log.to_str().unwrap()]);
    let (sim, url) = simulate(dir, &args);
    (sim, url, log)
}

/// When a request of the simulator's event log arrived, Unix seconds.
fn arrival_s(e: &Value) -> f64 {
    e["arrival_unix_ns"].as_u64().unwrap() as f64 / 1e9
}

fn levels(report: &Value, model: usize) -> &Vec<Value> {
    report["models"][model]["levels"]
        .as_array()
        .expect("models[].levels array")
}

#[test]
fn knee_is_found_at_the_simulators_capacity() {
    let _serial = serial();
    let _wd = Watchdog::new(
        "knee_is_found_at_the_simulators_capacity",
        Duration::from_secs(180),
    );
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = simulate(dir.path(), &slots("8", "200ms", "20ms", "10"));
    let cfg = sim_config(dir.path(), &url);
    let json = dir.path().join("r.json");
    let (md, csv, svg) = (
        dir.path().join("r.md"),
        dir.path().join("r.csv"),
        dir.path().join("r.svg"),
    );
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "2,4,8,16,32",
            // The levels as given (the knee's added levels are tested below).
            "--knee-levels",
            "0",
            "--duration-per-level",
            "1500ms",
            "--slo",
            "ttft=1s",
            "--limit",
            "error_rate<1%",
            "-o",
            json.to_str().unwrap(),
            "-o",
            md.to_str().unwrap(),
            "-o",
            csv.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    eprintln!("{out}\n{err}");
    assert_eq!(
        code,
        Some(0),
        "bench failed\nstdout:\n{out}\nstderr:\n{err}"
    );
    let r = read_json(&json);
    let ls = levels(&r, 0);
    let conc: Vec<u64> = ls
        .iter()
        .map(|l| l["concurrency"].as_u64().unwrap())
        .collect();
    assert_eq!(conc, [2, 4, 8, 16, 32]);
    for l in ls {
        assert_eq!(l["error_rate"].as_f64(), Some(0.0), "{l}");
        assert!(l["requests"].as_u64().unwrap() >= 2, "{l}");
    }
    // Below capacity TTFT is the simulator's 200 ms; above it requests queue.
    let ttft_p50 = ls[0]["ttft_s"]["p50"].as_f64().unwrap();
    assert!(
        (0.195..0.3).contains(&ttft_p50),
        "TTFT p50 at 2: {ttft_p50}"
    );
    let knee = &r["models"][0]["knee"];
    assert_eq!(
        knee["level"]["concurrency"].as_u64(),
        Some(16),
        "knee: {knee}\n{out}"
    );
    assert!(out.contains("◆ knee"), "{out}");
    // Aggregate tokens/s at capacity: 8 streams × 10 tokens per ~0.38 s ≈ 210 tokens/s.
    let tps8 = ls[2]["output_tokens_per_s"].as_f64().unwrap();
    assert!((120.0..260.0).contains(&tps8), "agg tokens/s at 8: {tps8}");
    // The other outputs.
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(
        md.contains("| sim-a | 16 |") && md.contains("**knee**"),
        "{md}"
    );
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv.lines().count(), 6, "{csv}");
    assert!(csv.starts_with("model,target,concurrency,rate,"), "{csv}");
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("TTFT p95"));
    assert_eq!(r["selection"]["ranked"][0]["model"].as_str(), Some("sim-a"));

    // The same run as its own baseline does not regress at 100% tolerance; against a baseline
    // edited to be 10x faster, 4 requests are too few to judge a TTFT percentile (issue 40: the
    // gate's test is `bench::gate::an_unchanged_rerun_passes_and_a_30_percent_slower_ttft_fails`),
    // so that is said and nothing regresses.
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "2",
            "--requests-per-level",
            "4",
            "--baseline",
            json.to_str().unwrap(),
            "--tolerance",
            "100%",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("0 regressions"), "{out}");
    let mut fast = r.clone();
    for l in fast["models"][0]["levels"].as_array_mut().unwrap() {
        for k in ["p50", "p95"] {
            let v = l["ttft_s"][k].as_f64().unwrap();
            l["ttft_s"][k] = Value::from(v / 10.0);
        }
    }
    let fast_path = dir.path().join("fast.json");
    std::fs::write(&fast_path, fast.to_string()).unwrap();
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "2",
            "--requests-per-level",
            "4",
            "--baseline",
            fast_path.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains("0 regressions")
            && out.contains("not judged: too few values for its p95 (4 here,"),
        "{out}"
    );
}

#[test]
fn open_loop_sends_at_the_rate_and_counts_the_cap() {
    let _serial = serial();
    let _wd = Watchdog::new("open_loop_sends_at_the_rate", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = simulate(
        dir.path(),
        &["--ttft", "50ms", "--itl", "10ms", "--output-tokens", "5"],
    );
    let cfg = sim_config(dir.path(), &url);
    let json = dir.path().join("open.json");
    // 20/s constant for 1 s: 20 arrivals; a cap of 1 at 20/s (each request ~90 ms) must wait.
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--rate",
            "20",
            "--arrival",
            "constant",
            "--concurrency",
            "100,1",
            "--duration-per-level",
            "1s",
            "--samples",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    assert_eq!(r["mode"]["kind"].as_str(), Some("open"));
    let ls = levels(&r, 0);
    assert_eq!(ls.len(), 2);
    assert_eq!(ls[0]["requests"].as_u64(), Some(20), "{}", ls[0]);
    assert_eq!(ls[0]["capped"].as_u64(), Some(0));
    assert_eq!(ls[0]["rate"].as_f64(), Some(20.0));
    // Constant arrivals: the n-th request was meant to leave at n × 50 ms.
    let samples = ls[0]["samples"].as_array().unwrap();
    for (i, s) in samples.iter().enumerate() {
        let sent = s["sent_s"].as_f64().unwrap();
        let lag = s["lag_s"].as_f64().unwrap();
        assert!(
            (sent - lag - i as f64 * 0.05).abs() < 0.002,
            "sample {i}: sent {sent} lag {lag}"
        );
    }
    assert!(ls[1]["capped"].as_u64().unwrap() > 0, "{}", ls[1]);
    assert_eq!(ls[1]["error_rate"].as_f64(), Some(0.0));
    // Issue 24 item 6: under the cap of 1 the n-th request still belonged at n × 50 ms; it left
    // behind that schedule by its send minus it (the wait for the slot included, which `lag_s`
    // leaves out), and TTFT and E2E from the schedule add that wait.
    let capped = ls[1]["samples"].as_array().unwrap();
    let mut waited = 0.0_f64;
    for (i, s) in capped.iter().enumerate() {
        let sent = s["sent_s"].as_f64().unwrap();
        let behind = s["behind_schedule_s"].as_f64().expect("open loop");
        assert!(
            (sent - behind - i as f64 * 0.05).abs() < 0.002,
            "sample {i}: sent {sent} behind {behind}"
        );
        assert!(behind + 1e-9 >= s["lag_s"].as_f64().unwrap(), "{s}");
        waited = waited.max(behind);
    }
    let from = |k: &str, p: &str| ls[1][k][p].as_f64().unwrap();
    // 20 requests of ~90 ms through one slot in 1 s: the last waited most of a second.
    assert!(waited > 0.5, "{waited}");
    assert!(out.contains("\nBehind schedule (open loop:"), "{out}");
    assert!(
        (from("ttft_from_schedule_s", "max") - from("ttft_s", "max")) > 0.5,
        "{}",
        ls[1]
    );
    // Uncapped and on time, the two agree within the sender's lag.
    assert!(
        (from_level(&ls[0], "ttft_from_schedule_s") - from_level(&ls[0], "ttft_s")).abs() < 0.005
    );
}

/// A level's p50 of `what`, s.
fn from_level(l: &Value, what: &str) -> f64 {
    l[what]["p50"].as_f64().unwrap_or(f64::NAN)
}

/// The coefficient of variation of the gaps between sorted instants.
fn gaps_cv(instants: &mut [f64]) -> f64 {
    instants.sort_by(f64::total_cmp);
    let gaps: Vec<f64> = instants.windows(2).map(|w| w[1] - w[0]).collect();
    let n = gaps.len() as f64;
    let mean = gaps.iter().sum::<f64>() / n;
    let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1.0);
    var.sqrt() / mean
}

/// Issue 24 item 2: `--burstiness 0.25` sends gamma gaps (CV 1/sqrt(0.25) = 2, twice Poisson's),
/// checked where they land: the gaps between the requests' arrivals in the simulator's event log
/// have the spread of the planned gaps (the seed's, recomputed here from the library), and each
/// request's planned instant (sent − lag) is the plan's.
#[test]
fn bursty_arrivals_reach_the_server_with_their_planned_spread() {
    use tokenprobe::bench::runner::{Arrival, arrival_offsets};
    let _serial = serial();
    let _wd = Watchdog::new("bursty_arrivals_reach_the_server", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url, log) = logged_slots(dir.path(), ("1000", "5ms", "1ms", "4"));
    let cfg = sim_config(dir.path(), &url);
    let json = dir.path().join("bursty.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--rate",
            "40",
            "--burstiness",
            "0.25",
            "--seed",
            "5",
            "--requests-per-level",
            "240",
            "--warmup",
            "0",
            "--no-prewarm",
            // The simulator's log holds the level's arrivals only.
            "--no-check",
            "--samples",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    assert_eq!(
        (
            r["mode"]["arrival"].as_str(),
            r["mode"]["burstiness"].as_f64()
        ),
        (Some("gamma"), Some(0.25))
    );
    // The first level's arrivals come from the run's seed (model 0, level 0: the seed itself).
    let plan: Vec<f64> = arrival_offsets(40.0, Arrival::Gamma { shape: 0.25 }, 5)
        .take(240)
        .collect();
    let samples = levels(&r, 0)[0]["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 240);
    let mut intended: Vec<f64> = samples
        .iter()
        .map(|s| s["sent_s"].as_f64().unwrap() - s["lag_s"].as_f64().unwrap())
        .collect();
    intended.sort_by(f64::total_cmp);
    for (i, (got, want)) in intended.iter().zip(&plan).enumerate() {
        assert!(
            (got - want).abs() < 1e-3,
            "request {i}: planned at {got}, the seed says {want}"
        );
    }
    let mut planned = plan.clone();
    let plan_cv = gaps_cv(&mut planned);
    let mut at_server: Vec<f64> = logged(&log, 240).iter().map(arrival_s).collect();
    let server_cv = gaps_cv(&mut at_server);
    eprintln!("gaps' CV: planned {plan_cv:.3}, at the server {server_cv:.3}, shape says 2");
    assert!(
        (server_cv / plan_cv - 1.0).abs() < 0.03,
        "server {server_cv}, plan {plan_cv}"
    );
    // The seed's 239 gaps are bursty as the shape says (Poisson's would be near 1).
    assert!((1.6..2.4).contains(&plan_cv), "{plan_cv}");
}

/// Issue 23 item 3: `--until-clear` in a fixed sweep. Every request meets the SLO (TTFT 50 ms on
/// 5 slots at concurrency 2, against 100 ms), but 20 of 20 is [83.9%, 100%]: it cannot say
/// whether the level reaches 95%. The level runs on at its amount until the interval leaves 95%:
/// 80 of 80 is [95.4%, 100%], after three more runs (a Wilson interval of n of n clears 95% from
/// n = 73).
#[test]
fn until_clear_runs_a_level_on_until_its_attainment_decides() {
    let _serial = serial();
    let _wd = Watchdog::new("until_clear_runs_a_level_on", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = simulate(dir.path(), &slots("5", "50ms", "10ms", "5"));
    let cfg = sim_config(dir.path(), &url);
    let json = dir.path().join("clear.json");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "2",
            "--requests-per-level",
            "20",
            "--slo",
            "ttft=100ms",
            "-o",
            json.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = bench(&args, Duration::from_secs(60));
        assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
        levels(&read_json(&json), 0)[0].clone()
    };
    let short = run(&[]);
    assert_eq!(short["requests"], 20);
    let lo = |l: &Value| l["slo_attainment"]["interval"][0].as_f64().unwrap();
    assert!(lo(&short) < 0.95, "{}", short["slo_attainment"]);
    let clear = run(&["--until-clear", "5"]);
    assert_eq!(clear["requests"], 80, "{}", clear["notes"]);
    assert_eq!(clear["slo_attainment"]["met"], 80);
    assert!(lo(&clear) >= 0.95, "{}", clear["slo_attainment"]);
    assert!(
        clear["notes"].to_string().contains("run 3 more time(s)"),
        "{}",
        clear["notes"]
    );
}

/// Issue 24 item 4: `--warmup-duration 1s` sends unmeasured requests at the level's own load for
/// a second before it. The simulator's event log holds them (they are not the report's): the
/// level's first measured request arrived a second or more after the first warm-up request, and
/// the report counts the level's 10 only.
#[test]
fn warmup_by_duration_precedes_each_level_unmeasured() {
    let _serial = serial();
    let _wd = Watchdog::new("warmup_by_duration", Duration::from_secs(60));
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url, log) = logged_slots(dir.path(), ("8", "20ms", "5ms", "4"));
    let cfg = sim_config(dir.path(), &url);
    let json = dir.path().join("warm.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "2",
            "--requests-per-level",
            "10",
            "--warmup-duration",
            "1s",
            "--no-prewarm",
            "--samples",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    assert_eq!(r["mode"]["warmup_s"].as_f64(), Some(1.0), "{}", r["mode"]);
    let l = &levels(&r, 0)[0];
    assert_eq!(l["requests"], 10);
    let measured: Vec<String> = l["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["request_id"].as_str().unwrap().to_owned())
        .collect();
    let records = logged(&log, 11);
    let first = records.iter().map(arrival_s).fold(f64::INFINITY, f64::min);
    let first_measured = records
        .iter()
        .filter(|e| measured.iter().any(|id| e["id"].as_str() == Some(id)))
        .map(arrival_s)
        .fold(f64::INFINITY, f64::min);
    let warm = records.len() - measured.len();
    assert!(
        warm >= 2,
        "{} records for {} measured",
        records.len(),
        measured.len()
    );
    assert!(
        first_measured - first >= 1.0,
        "warm-up of {} s",
        first_measured - first
    );
}

/// Issue 24 item 3: `--ramp-up linear --ramp-from 5 --ramp-over 2s` at 25/s constant: the rate
/// rises from 5/s to 25/s over two seconds, so 10 arrivals are due in the first second (5 + 5·1²),
/// 20 in the second and 25 in the third. The report's per-second series says so, and so do the
/// arrivals in the simulator's event log (within one per second: an arrival due on a second's
/// edge may land either side of it there).
#[test]
fn a_linear_ramp_up_raises_the_rate_second_by_second() {
    let _serial = serial();
    let _wd = Watchdog::new("a_linear_ramp_up", Duration::from_secs(60));
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url, log) = logged_slots(dir.path(), ("100", "5ms", "1ms", "4"));
    let cfg = sim_config(dir.path(), &url);
    let json = dir.path().join("ramp.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--rate",
            "25",
            "--arrival",
            "constant",
            "--ramp-up",
            "linear",
            "--ramp-from",
            "5",
            "--ramp-over",
            "2s",
            "--duration-per-level",
            "3s",
            "--warmup",
            "0",
            "--no-prewarm",
            // The simulator's log holds the level's arrivals only.
            "--no-check",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    assert_eq!(
        r["mode"]["ramp_up"].as_str(),
        Some("linear from 5/s over 2 s")
    );
    let l = &levels(&r, 0)[0];
    assert_eq!(l["requests"], 55);
    let sent: Vec<u64> = l["per_second"]
        .as_array()
        .expect("per_second")
        .iter()
        .map(|x| x["sent"].as_u64().unwrap())
        .collect();
    assert_eq!(sent[..3], [10, 20, 25], "{sent:?}");
    let mut at: Vec<f64> = logged(&log, 55).iter().map(arrival_s).collect();
    at.sort_by(f64::total_cmp);
    let per: Vec<usize> = (0..3)
        .map(|i| at.iter().filter(|t| ((*t - at[0]) as usize) == i).count())
        .collect();
    for (got, want) in per.iter().zip([10usize, 20, 25]) {
        assert!(
            got.abs_diff(want) <= 1,
            "at the server {per:?}, planned [10, 20, 25]"
        );
    }
}

/// Issue 24 item 3, closed loop: `--ramp-up linear --ramp-from 2 --ramp-over 3s` at concurrency
/// 8 starts two workers at once and one more every half second. Each worker's first request is
/// planned then (the samples' send less lag), and the simulator's event log shows the load rise:
/// the most requests in flight at the server within each half second is the number of workers
/// started by then (each sends a request about every 10 ms, so every worker is in flight at some
/// instant of the window, and none that has not started yet is).
#[test]
fn a_closed_loop_ramp_up_starts_its_workers_as_the_load_rises() {
    let _serial = serial();
    let _wd = Watchdog::new("a_closed_loop_ramp_up", Duration::from_secs(60));
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url, log) = logged_slots(dir.path(), ("100", "5ms", "1ms", "4"));
    let cfg = sim_config(dir.path(), &url);
    let json = dir.path().join("ramp.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "8",
            "--ramp-up",
            "linear",
            "--ramp-from",
            "2",
            "--ramp-over",
            "3s",
            "--duration-per-level",
            "4s",
            "--no-prewarm",
            "--samples",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    assert_eq!(
        r["mode"]["ramp_up"].as_str(),
        Some("linear from 2 workers over 3 s")
    );
    let l = &levels(&r, 0)[0];
    let mut firsts: Vec<f64> = l["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["first"] == true)
        .map(|s| s["sent_s"].as_f64().unwrap() - s["lag_s"].as_f64().unwrap())
        .collect();
    firsts.sort_by(f64::total_cmp);
    let planned = [0.0, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0];
    assert_eq!(firsts.len(), 8);
    for (got, want) in firsts.iter().zip(planned) {
        assert!((got - want).abs() < 1e-3, "first sends {firsts:?}");
    }
    assert!(l["per_second"].as_array().is_some_and(|v| v.len() >= 4));
    // The server's view: each request's span from its arrival to its last event.
    let n = l["requests"].as_u64().unwrap() as usize;
    let spans: Vec<(f64, f64)> = logged(&log, n).iter().filter_map(record_span).collect();
    // Counted from the level's start (its first requests' arrivals come a connection later).
    let t0 = l["started_unix_s"].as_f64().unwrap();
    let most_in_flight = |from: f64, to: f64| {
        spans
            .iter()
            .filter(|(a, _)| a - t0 >= from && a - t0 < to)
            .map(|&(a, _)| spans.iter().filter(|(b, e)| *b <= a && a < *e).count())
            .max()
            .unwrap_or(0)
    };
    let seen: Vec<usize> = (0..6)
        .map(|k| most_in_flight(0.5 * k as f64 + 0.1, 0.5 * k as f64 + 0.4))
        .collect();
    assert_eq!(
        seen,
        [2, 3, 4, 5, 6, 7],
        "most in flight at the server per half second"
    );
}

/// The median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Issue 24 item 5: `--canary 4 --canary-prompt canary` sends single probes of a small prompt
/// beside each level's load. Against 4 slots, at concurrency 1 a canary finds a free slot; at 8
/// it queues behind the load. The canaries are the simulator's requests of 3 output tokens: its
/// event log (queue wait and first token, from each request's arrival) is the truth the canaries'
/// TTFT is compared with, level by level. The level's own figures leave the canaries out.
#[test]
fn canaries_beside_the_load_see_what_a_user_arriving_then_sees() {
    let _serial = serial();
    let _wd = Watchdog::new("canaries_beside_the_load", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url, log) = logged_slots(dir.path(), ("4", "20ms", "10ms", "10"));
    let cfg = dir.path().join("canary.yml");
    std::fs::write(
        &cfg,
        format!(
            "prompts:\n  - name: hello\n    messages: [{{role: user, content: \"Say hello\"}}]\n    max_tokens: 10\n  - name: canary\n    messages: [{{role: user, content: \"Say OK\"}}]\n    max_tokens: 3\ntargets:\n  - name: sim\n    base_url: {url}/v1\n    models: [sim-a]\n"
        ),
    )
    .unwrap();
    let json = dir.path().join("canary.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--prompt",
            "hello",
            "--concurrency",
            "1,8",
            "--knee-levels",
            "0",
            "--duration-per-level",
            "2s",
            "--canary",
            "4",
            "--canary-prompt",
            "canary",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("\nCanaries (prompt canary, 4/s"), "{out}");
    let r = read_json(&json);
    let ls = levels(&r, 0);
    let counts: Vec<u64> = ls
        .iter()
        .map(|l| l["canary"]["requests"].as_u64().expect("canaries"))
        .collect();
    // The simulator's requests of 3 output tokens are the canaries, in the order they came.
    let total: u64 = counts.iter().sum();
    let mut canaries: Vec<Value> = logged(&log, 0)
        .into_iter()
        .filter(|e| e["output_tokens"].as_u64() == Some(3))
        .collect();
    canaries.sort_by_key(|e| e["arrival_unix_ns"].as_u64());
    assert_eq!(canaries.len() as u64, total, "{counts:?}");
    let mut at = 0;
    for (l, n) in ls.iter().zip(&counts) {
        let c = &l["canary"];
        assert!(*n >= 4, "{c}");
        assert_eq!(c["errors"], Value::Null, "{c}");
        let these = &canaries[at..at + *n as usize];
        at += *n as usize;
        // The server's TTFT of each canary: its first token's write after the request arrived.
        let mut server: Vec<f64> = these
            .iter()
            .map(|e| {
                e["events"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|v| v["token"] == true)
                    .and_then(|v| v["t_s"].as_f64())
                    .unwrap()
            })
            .collect();
        let mut queued: Vec<f64> = these
            .iter()
            .map(|e| e["queued_s"].as_f64().unwrap())
            .collect();
        let client = c["ttft_s"]["p50"].as_f64().unwrap();
        let server_p50 = median(&mut server);
        eprintln!(
            "concurrency {}: canary TTFT p50 {client:.4} s, the server's {server_p50:.4} s, queued p50 {:.4} s",
            l["concurrency"],
            median(&mut queued)
        );
        assert!((client - server_p50).abs() < 0.005, "{c}");
        // The level's own requests are the 10-token ones only.
        assert!(l["output_tokens"].as_u64().unwrap() % 10 == 0, "{l}");
    }
    let queued_p50 = |i: usize| {
        let n0 = counts[0] as usize;
        let range = if i == 0 { 0..n0 } else { n0..canaries.len() };
        let mut q: Vec<f64> = canaries[range]
            .iter()
            .map(|e| e["queued_s"].as_f64().unwrap())
            .collect();
        median(&mut q)
    };
    // At 1 a canary finds a free slot at once; at 8 it waits behind the load for one.
    assert!(queued_p50(0) < 0.002, "{}", queued_p50(0));
    assert!(queued_p50(1) > 0.02, "{}", queued_p50(1));
}

/// Issue 13: `--ramp` spreads the closed-loop workers' first sends evenly (worker w of c at
/// ramp × w / c), recorded in the report; each first send's intended instant (sent − lag) is on
/// that schedule, whatever the machine's load does to the actual send.
#[test]
fn ramp_spreads_the_first_sends_of_the_workers() {
    let _serial = serial();
    let _wd = Watchdog::new("ramp_spreads_the_first_sends", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = simulate(
        dir.path(),
        &["--ttft", "20ms", "--itl", "5ms", "--output-tokens", "4"],
    );
    let cfg = sim_config(dir.path(), &url);
    let json = dir.path().join("ramp.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "4",
            "--ramp",
            "400ms",
            // Enough that the last worker still finds a ticket when its turn comes.
            "--requests-per-level",
            "60",
            "--samples",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    assert_eq!(r["mode"]["ramp_s"].as_f64(), Some(0.4), "{}", r["mode"]);
    let ls = levels(&r, 0);
    let mut intended: Vec<f64> = ls[0]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["first"].as_bool() == Some(true))
        .map(|s| s["sent_s"].as_f64().unwrap() - s["lag_s"].as_f64().unwrap())
        .collect();
    intended.sort_by(f64::total_cmp);
    assert_eq!(intended.len(), 4, "{intended:?}");
    for (w, t) in intended.iter().enumerate() {
        assert!(
            (t - 0.1 * w as f64).abs() < 0.002,
            "worker {w}: {intended:?}"
        );
    }
    assert!(ls[0]["ramp_s"].as_f64().unwrap() >= 0.3, "{}", ls[0]);
    // Issue 24 item 4: the steady state starts once all 4 workers are in flight, after the last
    // worker's first send and within one request of it (the others are busy but for the
    // instants between a request's end and their next send), and the ramp's requests before it
    // are left out of its figures.
    let samples = ls[0]["samples"].as_array().unwrap();
    let last_first = samples
        .iter()
        .filter(|s| s["first"].as_bool() == Some(true))
        .map(|s| s["sent_s"].as_f64().unwrap())
        .fold(0.0, f64::max);
    let longest = samples
        .iter()
        .map(|s| s["e2e_s"].as_f64().unwrap())
        .fold(0.0, f64::max);
    let st = &ls[0]["steady_state"];
    let start = st["start_s"].as_f64().expect("a steady state");
    assert!(
        start >= last_first && start <= last_first + longest,
        "{st}: last first send {last_first}, longest request {longest}"
    );
    let before = st["before"].as_u64().unwrap();
    let sent_before = samples
        .iter()
        .filter(|s| s["sent_s"].as_f64().unwrap() < start)
        .count() as u64;
    assert_eq!(before, sent_before, "{st}");
    assert!(before >= 4, "the ramp's requests: {st}");
    assert_eq!(st["in_flight_at_least"], 4);
    assert!(out.contains("\nSteady state ("), "{out}");
}

#[test]
fn bad_invocations_exit_2_before_sending() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens here: a run would fail with connect errors, but these never send.
    let cfg = sim_config(dir.path(), &format!("http://127.0.0.1:{}", free_port()));
    let c = cfg.to_str().unwrap();
    for (args, says) in [
        (vec!["--limit", "ttft<soon"], "ttft<soon"),
        (vec!["--weight", "speed=1"], "unknown metric"),
        (vec!["-o", "r.txt"], ".json, .csv, .md or .html"),
        (vec!["--plot", "r.png"], "only .svg"),
        (vec!["--target", "nope"], "no target"),
        (vec!["--prompt", "nope"], "no prompt"),
        (
            vec!["--rate", "1,2", "--concurrency", "1,2,3"],
            "--rate has 2 values",
        ),
        (
            vec!["--baseline", "/nonexistent.json"],
            "cannot use baseline",
        ),
    ] {
        let mut a = vec!["--config.file", c, "--requests-per-level", "1"];
        a.extend(args);
        let (code, out, err) = bench(&a, Duration::from_secs(30));
        assert_eq!(code, Some(2), "{a:?}\nstdout:\n{out}\nstderr:\n{err}");
        assert!(
            err.contains(says),
            "{a:?}: stderr does not say {says:?}:\n{err}"
        );
    }
    let (code, _, err) = bench(&["--config.file", c], Duration::from_secs(30));
    assert_eq!(code, Some(2), "{err}");
}

#[test]
fn bench_against_llama_cpp_agrees_with_its_timings() {
    let _serial = serial();
    if !require_deps("bench_against_llama_cpp_agrees_with_its_timings", &[]) {
        return;
    }
    let _wd = Watchdog::new(
        "bench_against_llama_cpp_agrees_with_its_timings",
        Duration::from_secs(300),
    );
    let dir = tempfile::tempdir().unwrap();
    let llama = LlamaServer::start(dir.path());
    let cfg = dir.path().join("llama.yml");
    std::fs::write(&cfg, config_yaml(&llama.base_url(), "30s", 32)).unwrap();
    let json = dir.path().join("llama.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "1,2,4",
            // The levels as given: one slot is past saturation at 2 already.
            "--knee-levels",
            "0",
            "--requests-per-level",
            "6",
            "--warmup",
            "1",
            "--samples",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(240),
    );
    eprintln!("{out}\n{err}");
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    assert_eq!(r["models"][0]["model"].as_str(), Some("smollm2"));
    let ls = levels(&r, 0);
    assert_eq!(ls.len(), 3);
    for l in ls {
        assert_eq!(l["requests"].as_u64(), Some(6), "{l}");
        assert_eq!(l["error_rate"].as_f64(), Some(0.0), "{l}");
    }
    // TPS p50 at concurrency 1 against llama.cpp's own per-request decode rate
    // (1000 / timings.predicted_per_token_ms, the same (n − 1) span as TPOT).
    let tps_p50 = ls[0]["decode_tokens_per_s"]["p50"].as_f64().unwrap();
    let mut server: Vec<f64> = ls[0]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["server_predicted_per_token_ms"].as_f64())
        .map(|ms| 1000.0 / ms)
        .collect();
    assert_eq!(server.len(), 6, "every sample carries llama.cpp's timings");
    server.sort_by(f64::total_cmp);
    let server_p50 = (server[2] + server[3]) / 2.0;
    let rel = (tps_p50 / server_p50 - 1.0).abs();
    eprintln!(
        "TPS p50 at concurrency 1: bench {tps_p50:.2}, llama.cpp {server_p50:.2} ({:.2}%)",
        rel * 100.0
    );
    assert!(
        rel < 0.05,
        "bench TPS p50 {tps_p50} vs llama.cpp {server_p50}"
    );

    // The capacity search on the real server, small levels: E2E within 1.5× what one stream
    // takes, so concurrency shared on two cores breaks it somewhere in 1..=4. The answer must
    // be the search's own levels read right: the highest load that reached 95% below the lowest
    // that did not, each level's verdict its attainment.
    let e2e_p95 = ls[0]["e2e_s"]["p95"].as_f64().unwrap();
    let slo = format!("e2e={}ms", (e2e_p95 * 1500.0).ceil());
    let json = dir.path().join("capacity.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--find-capacity",
            "--concurrency",
            "1,4",
            "--requests-per-level",
            "4",
            "--slo",
            &slo,
            "--accept-client-bound",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(240),
    );
    eprintln!("{out}\n{err}");
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    let c = &r["models"][0]["capacity"];
    let passed = |l: &Value| l["slo_attainment"]["share"].as_f64().unwrap() >= 0.95;
    let ls = levels(&r, 0);
    assert!(!ls.is_empty() && ls.len() <= 4, "{c:#}");
    if ls.iter().any(|l| l.get("client_bound").is_some()) {
        assert!(
            c["stopped"].as_str().unwrap().contains("cannot be judged"),
            "{c:#}"
        );
        return;
    }
    let load = |l: &Value| l["concurrency"].as_u64().unwrap();
    let first_fail = ls.iter().filter(|l| !passed(l)).map(load).min();
    let best = ls
        .iter()
        .filter(|l| passed(l) && first_fail.is_none_or(|f| load(l) < f))
        .map(load)
        .max();
    assert_eq!(c["concurrency"].as_u64(), best, "{c:#}\n{err}");
    assert_eq!(
        c["failed_at"].as_f64().map(|f| f as u64),
        first_fail,
        "{c:#}"
    );
    assert!(out.contains("capacity within e2e<="), "{out}");
}

/// Fails naming every key whose value differs between two lists of levels.
fn assert_same_levels(got: &[Value], want: &[Value]) {
    assert_eq!(got.len(), want.len());
    for (a, b) in got.iter().zip(want) {
        let (a, b) = (a.as_object().unwrap(), b.as_object().unwrap());
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        let differ: Vec<_> = keys
            .into_iter()
            .filter(|k| a.get(*k) != b.get(*k))
            .map(|k| {
                let short = |v: Option<&Value>| {
                    v.map(Value::to_string)
                        .unwrap_or_default()
                        .chars()
                        .take(400)
                        .collect::<String>()
                };
                format!("{k}: {} vs {}", short(a.get(k)), short(b.get(k)))
            })
            .collect();
        assert!(differ.is_empty(), "merging one report changed: {differ:#?}");
    }
}

/// Runs `bench <common> --shard i/n` for every i at once, all starting 2 s from now; their
/// report files.
fn run_shards(dir: &Path, common: &[&str], n: usize) -> Vec<std::path::PathBuf> {
    let start = (chrono::Utc::now() + chrono::Duration::seconds(2))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let files: Vec<_> = (0..n).map(|i| dir.join(format!("s{n}-{i}.json"))).collect();
    let shards: Vec<_> = (0..n)
        .map(|i| {
            let mut cmd = Command::new(tokenprobe_bin());
            cmd.arg("bench")
                .args(common)
                .args(["--shard", &format!("{i}/{n}"), "--start-at", &start])
                .args(["--level-gap", "1s", "-o"])
                .arg(&files[i]);
            for v in common::PROXY_ENV_VARS {
                cmd.env_remove(v);
            }
            std::thread::spawn(move || run_with_timeout(cmd, None, Duration::from_secs(60)))
        })
        .collect();
    for h in shards {
        let (st, out, err) = h.join().unwrap();
        assert!(st.success(), "shard: {st}\nstdout:\n{out}\nstderr:\n{err}");
    }
    files
}

/// Issue 13: a run split into 2 and into 3 shards (`--shard i/N --start-at T`), run at the same
/// time as separate processes against one simulator and merged by `bench merge`, measures what a
/// single process running the whole load measures (within run-to-run noise: the simulator's
/// timing is fixed, so TTFT and TPOT medians agree within the client's own overhead and the
/// request counts and aggregate tokens/s within 15%); merging one report gives back its own
/// statistics exactly; a shard of another run, or an incomplete set, is refused.
#[test]
fn shards_merge_into_the_run_a_single_process_measures() {
    let _serial = serial();
    let _wd = Watchdog::new("shards_merge_into_the_run", Duration::from_secs(180));
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = simulate(
        dir.path(),
        &["--ttft", "40ms", "--itl", "5ms", "--output-tokens", "8"],
    );
    let cfg = sim_config(dir.path(), &url);
    let cfg = cfg.to_str().unwrap().to_owned();
    let common = [
        "--config.file",
        cfg.as_str(),
        "--concurrency",
        "3,6",
        "--duration-per-level",
        "2s",
        "--no-progress",
    ];
    let single = dir.path().join("single.json");
    let (code, out, err) = bench(
        &[&common[..], &["--samples", "-o", single.to_str().unwrap()]].concat(),
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let single_r = read_json(&single);

    // Merging a single report reproduces its own statistics exactly.
    let same = dir.path().join("same.json");
    let (code, out, err) = bench(
        &[
            "merge",
            single.to_str().unwrap(),
            "-o",
            same.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let same_r = read_json(&same);
    assert_same_levels(levels(&same_r, 0), levels(&single_r, 0));
    assert_eq!(same_r["models"][0]["knee"], single_r["models"][0]["knee"]);

    for n in [2usize, 3] {
        let files = run_shards(dir.path(), &common, n);
        let shard0 = read_json(&files[0]);
        assert_eq!(
            shard0["run"]["shard"].as_str(),
            Some(format!("0/{n}").as_str())
        );
        let id = shard0["run"]["id"].as_str().unwrap().to_owned();
        // Concurrency 3 over 3 shards is one worker each; 2 shards share it 2 + 1.
        let merged = dir.path().join(format!("merged{n}.json"));
        let mut args: Vec<String> = vec!["merge".into()];
        args.extend(files.iter().rev().map(|f| f.display().to_string()));
        args.extend(["-o".into(), merged.display().to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = bench(&args, Duration::from_secs(30));
        assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
        let m = read_json(&merged);
        assert_eq!(m["run"]["id"].as_str(), Some(id.as_str()));
        assert_eq!(m["run"]["merged_from"].as_array().unwrap().len(), n);
        for (lm, ls) in levels(&m, 0).iter().zip(levels(&single_r, 0)) {
            assert_eq!(lm["concurrency"], ls["concurrency"]);
            let shard_requests: u64 = files
                .iter()
                .map(|f| {
                    let r = read_json(f);
                    levels(&r, 0)
                        .iter()
                        .find(|l| l["concurrency"] == lm["concurrency"])
                        .unwrap()["requests"]
                        .as_u64()
                        .unwrap()
                })
                .sum();
            assert_eq!(lm["requests"].as_u64(), Some(shard_requests), "{lm}");
            assert_eq!(lm["errors"], serde_json::json!({}), "{lm}");
            let f = |l: &Value, k: &str, s: &str| l[k][s].as_f64().unwrap();
            // The simulator's timing is fixed (TTFT 40 ms, ITL 5 ms); what differs between the
            // runs is the client's own overhead on this loaded 2-core machine (a debug build,
            // one process or several), measured at up to 8 ms on TTFT p50: 15 ms is that noise
            // with room, far below a mis-merge (a lost shard halves the rates; a mis-aligned
            // time line shifts nothing here but the rates).
            for (k, tol) in [("ttft_s", 0.015), ("tpot_s", 0.003)] {
                let (a, b) = (f(lm, k, "p50"), f(ls, k, "p50"));
                assert!((a - b).abs() < tol, "{n} shards {k} p50 {a} vs single {b}");
            }
            let ratio = |k: &str| lm[k].as_f64().unwrap() / ls[k].as_f64().unwrap();
            eprintln!(
                "{n} shards @ {}: requests {} vs {}, TTFT p50 {:.2} vs {:.2} ms, TPOT p50 {:.2} vs {:.2} ms, agg tok/s ratio {:.3}, start offset {:.1} ms",
                lm["concurrency"],
                lm["requests"],
                ls["requests"],
                f(lm, "ttft_s", "p50") * 1e3,
                f(ls, "ttft_s", "p50") * 1e3,
                f(lm, "tpot_s", "p50") * 1e3,
                f(ls, "tpot_s", "p50") * 1e3,
                ratio("output_tokens_per_s"),
                lm["start_offset_s"].as_f64().unwrap_or(f64::NAN) * 1e3,
            );
            for k in ["requests_per_s", "output_tokens_per_s"] {
                assert!(
                    (ratio(k) - 1.0).abs() < 0.15,
                    "{n} shards {k}: {lm} vs {ls}"
                );
            }
            assert!(lm["start_offset_s"].as_f64().unwrap() < 0.5, "{lm}");
        }
        if n == 3 {
            // A shard of another run, and an incomplete set, are refused (exit 2).
            let (code, _, err) = bench(
                &[
                    "merge",
                    files[0].to_str().unwrap(),
                    single.to_str().unwrap(),
                ],
                Duration::from_secs(30),
            );
            assert_eq!(code, Some(2), "{err}");
            assert!(err.contains("not a shard of the same run"), "{err}");
            let (code, _, err) = bench(
                &[
                    "merge",
                    files[0].to_str().unwrap(),
                    files[1].to_str().unwrap(),
                ],
                Duration::from_secs(30),
            );
            assert_eq!(code, Some(2), "{err}");
            assert!(
                err.contains("shards missing") && err.contains("2/3"),
                "{err}"
            );
        }
    }
}

/// The simulator's event log once it has `n` records (waiting for its writer thread to catch up).
fn logged(log: &Path, n: usize) -> Vec<Value> {
    wait_for("the event log's records", Duration::from_secs(20), || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (lines.len() >= n).then_some(lines)
    })
}

/// `--find-capacity` against a simulator with 5 slots and an SLO its queue breaks: one request
/// in six waits a whole request at concurrency 6 (TTFT 50 ms + ~140 ms queued > 100 ms), none at
/// 5, so the capacity is exactly 5, found by doubling then bisecting (1, 2, 4, 8, 6, 5); a level
/// whose attainment interval holds 95% runs on until it does not (or three more times). The
/// misses the report counts are the requests the simulator's own log says queued.
/// Issue 23 item 4: a server with 8 slots (the simulator's --max-concurrency, known exactly),
/// stepped coarsely 1, 5, 10, 20, 40, 80. The knee lies between 5 and 10 (at 10, two requests
/// wait each round); levels are added between them where the fit of throughput against load
/// bends (near 8), then to confirm it, until 8 scales and 9 queues: the capacity ceiling is 8,
/// the knee 9. Far past saturation the sweep stops, leaving the largest levels out and saying so.
#[test]
fn a_coarse_sweep_places_the_knee_at_the_simulators_slots_and_stops_past_it() {
    let _serial = serial();
    let _wd = Watchdog::new(
        "a_coarse_sweep_places_the_knee_at_the_simulators_slots_and_stops_past_it",
        Duration::from_secs(180),
    );
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = simulate(dir.path(), &slots("8", "10ms", "10ms", "16"));
    let cfg = sim_config(dir.path(), &url);
    let json = dir.path().join("r.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "1,5,10,20,40,80",
            "--duration-per-level",
            "1s",
            "--knee-levels",
            "5",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(150),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    let m = &r["models"][0];
    let conc: Vec<u64> = levels(&r, 0)
        .iter()
        .map(|l| l["concurrency"].as_u64().unwrap())
        .collect();
    let knee = &m["knee"];
    assert_eq!(
        knee["ceiling"]["concurrency"], 8,
        "{knee:#}\n{conc:?}\n{err}"
    );
    assert_eq!(knee["level"]["concurrency"], 9, "{knee:#}\n{conc:?}");
    // The added levels (between 5 and 10, 8 and 9 among them) say why they are there; the
    // planned ones do not.
    for l in levels(&r, 0) {
        let added = l["notes"].to_string().contains("to place the knee");
        let c = l["concurrency"].as_u64().unwrap();
        assert_eq!(added, c > 5 && c < 10, "{c}: {}", l["notes"]);
    }
    // Stopped once clearly past saturation: 80 never ran, and the report says so.
    let stopped = m["stopped_early"].as_str().expect("stopped_early");
    assert!(
        stopped.contains("80") && stopped.contains("clearly past saturation"),
        "{stopped}"
    );
    assert!(
        !conc.contains(&80) && conc.is_sorted() && conc.contains(&8) && conc.contains(&9),
        "{conc:?}"
    );
    assert!(out.contains("capacity ceiling 8"), "{out}");
}

#[test]
fn find_capacity_finds_the_simulators_slots() {
    let _serial = serial();
    let _wd = Watchdog::new(
        "find_capacity_finds_the_simulators_slots",
        Duration::from_secs(180),
    );
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url, log) = logged_slots(dir.path(), ("5", "50ms", "10ms", "10"));
    let cfg = sim_config(dir.path(), &url);
    let json = dir.path().join("r.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--find-capacity",
            "--concurrency",
            "1,64",
            "--duration-per-level",
            "1s",
            "--slo",
            "ttft=100ms",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    let c = &r["models"][0]["capacity"];
    assert_eq!(c["concurrency"], 5, "{c:#}\n{err}");
    assert_eq!(c["failed_at"], 6.0, "{c:#}");
    assert_eq!(c["limited_by"], "ttft<=100.0 ms", "{c:#}");
    let tried: Vec<f64> = c["levels_tried"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(tried, [1.0, 2.0, 4.0, 8.0, 6.0, 5.0]);
    // Every level the search ran is in the report, in load order.
    let conc: Vec<u64> = levels(&r, 0)
        .iter()
        .map(|l| l["concurrency"].as_u64().unwrap())
        .collect();
    assert_eq!(conc, [1, 2, 4, 5, 6, 8]);
    let att = |l: &Value| l["slo_attainment"].clone();
    for l in levels(&r, 0) {
        let a = att(l);
        let (met, counted) = (a["met"].as_u64().unwrap(), a["counted"].as_u64().unwrap());
        let [lo, hi] = [
            a["interval"][0].as_f64().unwrap(),
            a["interval"][1].as_f64().unwrap(),
        ];
        let share = met as f64 / counted as f64;
        assert!(lo <= share && share <= hi, "{a:#}");
        let c = l["concurrency"].as_u64().unwrap();
        assert_eq!(c <= 5, share >= 0.95, "concurrency {c}: {a:#}");
    }
    assert!(out.contains("up to 5 concurrent streams"), "{out}");
    // A level whose attainment interval held the target ran on (100% of ~35 requests is
    // [90%, 100%]); at 5 it did until the answer was clear at 95% confidence.
    let five = levels(&r, 0)
        .iter()
        .find(|l| l["concurrency"] == 5)
        .unwrap();
    let notes = five["notes"].to_string();
    assert!(notes.contains("more time(s)"), "{five:#}");
    assert_eq!(c["clear"], true, "{c:#}");
    // The requests the report counts as missing the SLO are those the simulator queued.
    let records = logged(
        &log,
        r["models"][0]["capacity"]["requests"].as_u64().unwrap() as usize,
    );
    let queued = records
        .iter()
        .filter(|x| x["queued_s"].as_f64().unwrap_or(0.0) > 0.05)
        .count() as u64;
    let missed: u64 = levels(&r, 0)
        .iter()
        .map(|l| {
            let a = att(l);
            a["counted"].as_u64().unwrap() - a["met"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(
        missed, queued,
        "misses against the simulator's queued requests"
    );
}

/// Issue 41: a capacity search's levels are the search's, not its bounds. The start line says
/// the bounds and the most levels the search may run (1 to 64 streams: 7 doublings, then 5
/// bisections below 64), and no level is named for having more workers than requests before
/// the search runs it: here it runs none (nothing listens, so the connectivity check fails,
/// exit 7). Before: "2 levels", and a warning for concurrency 64, a bound it never ran.
#[test]
fn a_capacity_search_says_its_bounds_and_warns_of_no_level_it_did_not_run() {
    let url = format!("http://127.0.0.1:{}/v1", free_port());
    let (code, out, err) = bench(
        &[
            "--base-url",
            &url,
            "--models",
            "m",
            "--find-capacity",
            "--slo",
            "ttft=1s",
            "--concurrency",
            "1,64",
            "--requests-per-level",
            "60",
            "--no-history",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(7), "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        err.contains(
            "models m, a capacity search from 1 to 64 concurrent streams, up to 12 levels (closed loop)"
        ),
        "{err}"
    );
    assert!(!err.contains("WARNING"), "{err}");
}

/// `--repeat 3`: each level runs three times with its amount; the level's figures are those of
/// all its requests (the simulator's log has every one), each run's are kept, and the report says
/// their spread. The median of all lies between the runs' medians.
#[test]
fn repeat_runs_each_level_again_and_keeps_each_runs_figures() {
    let _serial = serial();
    let _wd = Watchdog::new("repeat_runs_each_level", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let (_sim, url) = simulate(
        dir.path(),
        &[
            "--ttft",
            "30ms",
            "--itl",
            "5ms",
            "--output-tokens",
            "5",
            "--event-log",
            log.to_str().unwrap(),
        ],
    );
    let cfg = sim_config(dir.path(), &url);
    let json = dir.path().join("r.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "2",
            "--requests-per-level",
            "8",
            "--repeat",
            "3",
            "--slo",
            "ttft=1s",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    let r = read_json(&json);
    let l = &levels(&r, 0)[0];
    assert_eq!(l["requests"], 24, "{l:#}");
    let reps = l["repeats"].as_array().expect("repeats");
    assert_eq!(reps.len(), 3);
    assert!(reps.iter().all(|x| x["requests"] == 8), "{reps:?}");
    let medians: Vec<f64> = reps
        .iter()
        .map(|x| x["ttft_p50_s"].as_f64().unwrap())
        .collect();
    let all = l["ttft_s"]["p50"].as_f64().unwrap();
    let (lo, hi) = medians
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(*x), b.max(*x))
        });
    assert!(
        lo <= all && all <= hi,
        "{all} outside the runs' medians {medians:?}"
    );
    assert_eq!(
        logged(&log, 25).len(),
        25,
        "the simulator answered every request once, and the connectivity check before them"
    );
    assert!(out.contains("sim-a @ 2 over 3 runs: TTFT p95 "), "{out}");
}

/// A level the client could not measure is called out: bench pinned to one core at the lowest
/// priority beside two busy loops on that core reports a TTFT that is its own starvation (the
/// simulator answers in 50 ms), so the level is `client_bound` in the JSON, the findings and the
/// level's line, and bench exits 4 unless `--accept-client-bound`; the same run on that core
/// without the busy loops is not.
#[test]
fn a_starved_client_is_called_out() {
    let _serial = serial();
    let _wd = Watchdog::new("a_starved_client_is_called_out", Duration::from_secs(180));
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = simulate(
        dir.path(),
        &["--ttft", "50ms", "--itl", "2ms", "--output-tokens", "40"],
    );
    let cfg = sim_config(dir.path(), &url);
    let run = |name: &str, nice: &str, extra: &[&str]| {
        let json = dir.path().join(format!("{name}.json"));
        let mut cmd = Command::new("taskset");
        cmd.args(["-c", "0", "nice", "-n", nice])
            .arg(tokenprobe_bin())
            .args([
                "bench",
                "--config.file",
                cfg.to_str().unwrap(),
                "--concurrency",
                "1",
                "--duration-per-level",
                "2s",
                "-o",
                json.to_str().unwrap(),
            ])
            .args(extra);
        let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(60));
        (st.code(), out, err, read_json(&json))
    };
    let busy: Vec<ChildGuard> = (0..2)
        .map(|i| {
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", "0", "sh", "-c", "while :; do :; done"]);
            ChildGuard::spawn(&format!("busy{i}"), cmd, dir.path())
        })
        .collect();
    let (code, out, err, r) = run("starved", "19", &[]);
    assert_eq!(code, Some(4), "{out}\n{err}");
    let l = &levels(&r, 0)[0];
    let why = l["client_bound"]
        .as_str()
        .unwrap_or_else(|| panic!("{l:#}"));
    assert!(why.contains("waited") || why.contains("read"), "{why}");
    assert!(
        err.contains("CLIENT-BOUND") && err.contains("--accept-client-bound"),
        "{err}"
    );
    assert!(out.contains("[client_bound] sim-a @ 1"), "{out}");
    let (code, _, err, _) = run("accepted", "19", &["--accept-client-bound"]);
    assert_eq!(code, Some(0), "{err}");
    drop(busy);
    let (code, out, err, r) = run("unstarved", "0", &[]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(levels(&r, 0)[0].get("client_bound").is_none(), "{err}");
}

/// `connection: reuse`: each worker keeps one connection through the run (after `[DONE]` the body
/// is read to its end, so the client pools it instead of closing it), and by default the workers'
/// connections are opened before the level, so no measured request pays a set-up; with
/// `--no-prewarm` exactly the first request of each worker does.
#[test]
fn reuse_keeps_one_connection_per_worker_and_prewarm_opens_it_first() {
    let _serial = serial();
    let _wd = Watchdog::new("reuse_keeps_one_connection", Duration::from_secs(120));
    // More workers than the open loop's first probers (64), which once capped pre-warming.
    const W: usize = 80;
    let (workers, requests) = (W.to_string(), (W * 2).to_string());
    for prewarm in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("events.jsonl");
        let (_sim, url) = simulate(
            dir.path(),
            &[
                "--ttft",
                "5ms",
                "--itl",
                "1ms",
                "--output-tokens",
                "8",
                "--event-log",
                log.to_str().unwrap(),
            ],
        );
        let cfg = hello_config(
            dir.path(),
            &format!("{url}/v1"),
            8,
            "",
            "    connection: reuse\n",
        );
        let json = dir.path().join("reuse.json");
        let mut args = vec![
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            &workers,
            "--requests-per-level",
            &requests,
            "--samples",
            // 80 streams against a simulator on the same two cores: the bench's threads wait for
            // a CPU and its level may be client-bound; this test is about connections.
            "--accept-client-bound",
            "-o",
            json.to_str().unwrap(),
        ];
        if !prewarm {
            args.push("--no-prewarm");
        }
        let (code, out, err) = bench(&args, Duration::from_secs(60));
        assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
        let r = read_json(&json);
        assert_eq!(
            r["mode"]["prewarm"].as_bool(),
            Some(prewarm),
            "{}",
            r["mode"]
        );
        let samples = levels(&r, 0)[0]["samples"].as_array().unwrap().clone();
        assert_eq!(samples.len(), W * 2);
        let opened: Vec<&Value> = samples
            .iter()
            .filter(|s| s["new_connection"].as_bool() == Some(true))
            .collect();
        // A worker's first request: pre-warmed, it takes the connection opened for it; without
        // pre-warming, it opens one.
        let firsts: Vec<&Value> = samples
            .iter()
            .filter(|s| s["first"].as_bool() == Some(true))
            .collect();
        assert_eq!(firsts.len(), W);
        let first_opened = firsts
            .iter()
            .filter(|s| s["new_connection"].as_bool() == Some(true))
            .count();
        assert_eq!(first_opened, if prewarm { 0 } else { W }, "{firsts:?}");
        // A later request can still open one when its worker's connection was not yet back in
        // the client's pool: hyper's pool races a new connection against the checkout, and a
        // clean CI run on a busy machine saw one such request in 80. It is marked, so the server
        // saw at least those connections besides the workers' own; and reuse held for the rest
        // (the race's losing connection, if it finished in the background, may serve a request
        // of its own worker unmarked, so the server's count is a bound, not an equality).
        let later_opened = opened.len() - first_opened;
        let records = logged(&log, W * 2);
        let mut conns: Vec<u64> = records
            .iter()
            .map(|r| r["conn"].as_u64().unwrap())
            .collect();
        conns.sort_unstable();
        conns.dedup();
        assert!(
            conns.len() >= W + later_opened && conns.len() < W + W / 2,
            "{} requests of {W} workers on {} connections, {later_opened} later ones marked new",
            W * 2,
            conns.len()
        );
        // Each request carries the kernel's receive instant of its own bytes: before the
        // simulator read them, and after the kernel received the request before it on the same
        // connection (a worker sends its next request only once the last one was answered; a
        // stale stamp would repeat that one's). The kernel may switch stamping on a moment after
        // the simulator's start, so the first round is spared.
        for r in records
            .iter()
            .filter(|r| r["seq"].as_u64() >= Some(W as u64))
        {
            let (user, kernel) = (
                r["arrival_unix_ns"].as_u64(),
                r["arrival_kernel_unix_ns"].as_u64(),
            );
            let (user, kernel) = (user.unwrap(), kernel.expect("a kernel receive instant"));
            assert!(kernel <= user, "{r}");
            let earlier = records
                .iter()
                .filter(|p| p["conn"] == r["conn"] && p["seq"].as_u64() < r["seq"].as_u64())
                .filter_map(|p| p["arrival_kernel_unix_ns"].as_u64())
                .max();
            if let Some(e) = earlier {
                assert!(
                    kernel > e,
                    "{r}: not after {e}, the connection's request before"
                );
            }
        }
    }
}

/// A `reuse` target that accepts connections and never answers: pre-warming waits only its bound
/// (here `timeouts.total`, 2 s), then each request fails on its own deadline; the run ends.
#[test]
fn a_silent_server_delays_prewarm_by_its_bound_only() {
    let _serial = serial();
    let _wd = Watchdog::new("a_silent_server_delays_prewarm", Duration::from_secs(120));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // Accepts and holds every connection, reading nothing and writing nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            held.push(s);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let cfg = hello_config(
        dir.path(),
        &format!("http://{addr}/v1"),
        8,
        "defaults:\n  timeouts: {connect: 1s, first_token: 1s, idle: 1s, total: 2s}\n",
        "    connection: reuse\n",
    );
    let json = dir.path().join("silent.json");
    let started = std::time::Instant::now();
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "2",
            "--requests-per-level",
            "2",
            "--samples",
            // The level's own requests meet the silence (the check would load nothing).
            "--no-check",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    let took = started.elapsed();
    assert!(
        code.is_some(),
        "bench did not end: stdout:\n{out}\nstderr:\n{err}"
    );
    let r = read_json(&json);
    let samples = levels(&r, 0)[0]["samples"].as_array().unwrap().clone();
    assert_eq!(samples.len(), 2);
    for s in &samples {
        assert_eq!(s["error_type"], "timeout_first_token", "{s}");
    }
    // Pre-warming waits its bound (2 s: timeouts.total, under connect + 5 s), the level its 1 s
    // deadlines (measured: 3.0 s in all); a hang would reach the 60 s limit above.
    assert!(
        took >= Duration::from_secs(3),
        "took {took:?}: pre-warming did not wait"
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

/// The bench of `args` as a child (its output in `dir`), without the proxy environment.
fn bench_child(dir: &Path, name: &str, args: &[&str]) -> ChildGuard {
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.arg("bench").args(args);
    for v in ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
        cmd.env_remove(v);
    }
    ChildGuard::spawn(name, cmd, dir)
}

/// SIGINT during a level: every `-o` report is written with the finished levels and the running
/// one, kept with the request it finished and marked partial (issue 40: before, it was left out,
/// and a level stopped while it hung left nothing saying why); stderr says so, and the exit is
/// 130.
#[test]
fn a_stopped_bench_keeps_the_levels_it_finished() {
    let _serial = serial();
    let _wd = Watchdog::new(
        "a_stopped_bench_keeps_the_levels_it_finished",
        Duration::from_secs(120),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("events.jsonl");
    let (_sim, url) = simulate(
        dir.path(),
        &[
            "--ttft",
            "30ms",
            "--itl",
            "5ms",
            "--output-tokens",
            "4",
            "--event-log",
            log.to_str().expect("path"),
        ],
    );
    let cfg = sim_config(dir.path(), &url);
    let out = |name: &str| dir.path().join(name).to_str().expect("path").to_owned();
    let (json, md, csv, html) = (out("r.json"), out("r.md"), out("r.csv"), out("r.html"));
    let mut child = bench_child(
        dir.path(),
        "bench",
        &[
            "--config.file",
            cfg.to_str().expect("path"),
            // Open loop: the first level's 3 requests go in 60 ms, the second's take about a
            // minute: a dispatcher left sleeping towards them would hold the exit that long.
            "--rate",
            "50,0.05",
            "--requests-per-level",
            "3",
            "-o",
            &json,
            "-o",
            &md,
            "-o",
            &csv,
            "-o",
            &html,
        ],
    );
    // The first level's line, then the second level's first request answered (the check, the
    // first level's 3, and it: 5 in the simulator's log), then the stop while the second level
    // waits for its next arrival (it would take a minute).
    wait_for("the first level's line", Duration::from_secs(60), || {
        child.assert_running();
        child.stderr().contains("sim-a @ 50/s: ").then_some(())
    });
    logged(&log, 5);
    let (status, took) = child
        .signal_and_wait("-INT", Duration::from_secs(15))
        .unwrap_or_else(|| panic!("bench did not stop\n{}", child.logs()));
    let err = child.stderr();
    assert_eq!(status.code(), Some(130), "{}", child.logs());
    assert!(took < Duration::from_secs(10), "stopping took {took:?}");
    assert!(
        err.contains(&format!(
            "tokenprobe bench: stopped by SIGINT: 1 finished level(s) and the partial level (sim-a @ 0.05/s, 1 request(s) finished) reported, written to {json}, {md}, {csv}, {html}\n"
        )),
        "{err}"
    );
    let r = read_json(Path::new(&json));
    let l = levels(&r, 0);
    assert_eq!(l.len(), 2, "the finished level and the partial one: {l:?}");
    assert_eq!(l[0]["rate"].as_f64(), Some(50.0));
    assert_eq!(l[0]["requests"].as_u64(), Some(3), "{}", l[0]);
    assert_eq!(l[0].get("partial"), None, "{}", l[0]);
    assert_eq!(l[1]["rate"].as_f64(), Some(0.05));
    assert_eq!(l[1]["requests"].as_u64(), Some(1), "{}", l[1]);
    assert_eq!(l[1]["partial"], true, "{}", l[1]);
    assert_eq!(l[1]["stopped"]["by"], "signal", "{}", l[1]);
    assert!(
        l[1]["stopped"]["reason"]
            .as_str()
            .is_some_and(|s| s.starts_with("stopped by SIGINT ")),
        "{}",
        l[1]
    );
    assert_eq!(r["interrupted"]["signal"], "SIGINT");
    assert_eq!(r["interrupted"].get("level_left_out"), None, "{r:#}");
    // The partial level is not judged as a level: no knee or finding reads it.
    assert!(r["models"][0]["knee"].is_null(), "{r:#}");
    let csv_rows = std::fs::read_to_string(&csv).expect("csv");
    assert_eq!(
        csv_rows.lines().count(),
        3,
        "header and two levels: {csv_rows}"
    );
    assert!(csv_rows.contains(",stopped by SIGINT "), "{csv_rows}");
    let md = std::fs::read_to_string(&md).expect("md");
    assert!(
        md.contains("50/s")
            && md.contains("Stopped by SIGINT before the end")
            && md.contains("The level running (sim-a @ 0.05/s) is kept, marked partial")
            && md.contains("**PARTIAL**"),
        "{md}"
    );
    let page = std::fs::read_to_string(&html).expect("html");
    assert!(page.contains(r#"id="interrupted""#), "the page says so");
    assert!(page.contains("PARTIAL"), "the page marks the level");
}

/// A second stop signal ends the process at once, even while the first stop is still writing
/// (here a report path that is a FIFO nobody reads, so the write never finishes).
#[test]
fn a_second_stop_signal_exits_at_once() {
    let _serial = serial();
    let _wd = Watchdog::new(
        "a_second_stop_signal_exits_at_once",
        Duration::from_secs(120),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let (_sim, url) = simulate(
        dir.path(),
        &["--ttft", "30ms", "--itl", "5ms", "--output-tokens", "4"],
    );
    let cfg = sim_config(dir.path(), &url);
    let fifo = dir.path().join("report.json");
    let ok = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo")
        .success();
    assert!(ok, "mkfifo");
    let mut child = bench_child(
        dir.path(),
        "bench",
        &[
            "--config.file",
            cfg.to_str().expect("path"),
            "--rate",
            "50,0.2",
            "--requests-per-level",
            "3",
            "-o",
            fifo.to_str().expect("path"),
        ],
    );
    wait_for("the first level's line", Duration::from_secs(60), || {
        child.assert_running();
        child.stderr().contains("sim-a @ 50/s: ").then_some(())
    });
    child.signal("-INT");
    // The first stop gets stuck opening the FIFO for its report: a thread waits in the kernel for
    // a reader (`wait_for_partner`).
    wait_for(
        "bench waiting to open the FIFO",
        Duration::from_secs(10),
        || {
            child.assert_running();
            let tasks = std::fs::read_dir(format!("/proc/{}/task", child.id())).ok()?;
            tasks
                .flatten()
                .any(|t| {
                    std::fs::read_to_string(t.path().join("wchan"))
                        .is_ok_and(|w| w == "wait_for_partner")
                })
                .then_some(())
        },
    );
    let (status, took) = child
        .signal_and_wait("-TERM", Duration::from_secs(10))
        .unwrap_or_else(|| panic!("a second signal did not end bench\n{}", child.logs()));
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert_eq!(status.code(), Some(1), "{}", child.logs());
}

/// Two shards, one worker: the shard without a worker at the level says so (stderr and its
/// report), and the merge carries that note with the level.
#[test]
fn a_shard_without_a_worker_says_so() {
    let _serial = serial();
    let _wd = Watchdog::new("a_shard_without_a_worker", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = simulate(
        dir.path(),
        &["--ttft", "20ms", "--itl", "2ms", "--output-tokens", "4"],
    );
    let cfg = sim_config(dir.path(), &url);
    let cfg = cfg.to_str().unwrap().to_owned();
    let common = [
        "--config.file",
        cfg.as_str(),
        "--concurrency",
        "1,2",
        "--duration-per-level",
        "1s",
        "--no-progress",
    ];
    let files = run_shards(dir.path(), &common, 2);
    let level_of = |f: &Path, c: u64| {
        let r = read_json(f);
        levels(&r, 0)
            .iter()
            .find(|l| l["concurrency"].as_u64() == Some(c))
            .unwrap()
            .clone()
    };
    let (busy, idle) = (level_of(&files[0], 1), level_of(&files[1], 1));
    assert!(busy["requests"].as_u64().unwrap() > 0, "{busy}");
    assert_eq!(idle["requests"].as_u64(), Some(0), "{idle}");
    let note = "shard 1/2 had no worker at concurrency 1";
    assert!(
        idle["notes"][0]
            .as_str()
            .is_some_and(|s| s.starts_with(note)),
        "{idle}"
    );
    assert!(level_of(&files[1], 2)["requests"].as_u64().unwrap() > 0);
    let merged = dir.path().join("merged.json");
    let (code, out, err) = bench(
        &[
            "merge",
            files[0].to_str().unwrap(),
            files[1].to_str().unwrap(),
            "-o",
            merged.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let m = read_json(&merged);
    let l = &levels(&m, 0)[0];
    assert_eq!(l["requests"], busy["requests"], "{l}");
    assert!(
        l["notes"][0].as_str().is_some_and(|s| s.starts_with(note)),
        "{l}"
    );
    // Every sample carries its identity, each distinct.
    let all: Vec<String> = levels(&m, 0)
        .iter()
        .flat_map(|l| l["samples"].as_array().unwrap().iter())
        .map(|s| s["request_id"].as_str().unwrap().to_owned())
        .collect();
    let distinct: std::collections::BTreeSet<&String> = all.iter().collect();
    assert_eq!(distinct.len(), all.len());
}

/// The workers of a level share one `api_key_file`, each reading it at every request: all of
/// them get the key (a read under way is joined), and the simulator sees every request with it.
/// Before, all but one concurrent read failed as hung and the requests were counted as `auth`
/// without leaving the client.
#[test]
fn a_key_file_serves_every_worker_of_a_level() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let (_sim, url) = simulate(
        dir.path(),
        &[
            "--ttft",
            "5ms",
            "--itl",
            "1ms",
            "--output-tokens",
            "4",
            "--event-log",
            log.to_str().unwrap(),
        ],
    );
    let key = dir.path().join("key");
    std::fs::write(&key, "sk-file-key\n").unwrap();
    let cfg = hello_config(
        dir.path(),
        &format!("{url}/v1"),
        4,
        "",
        &format!("    api_key_file: {}\n", key.display()),
    );
    let json = dir.path().join("k.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "16",
            "--requests-per-level",
            "64",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    let l = &levels(&r, 0)[0];
    assert_eq!(l["requests"].as_u64(), Some(64), "{l}");
    assert_eq!(l["error_rate"].as_f64(), Some(0.0), "{l}");
    assert_eq!(
        logged(&log, 65).len(),
        65,
        "every request reached the server, and the connectivity check before them"
    );
}

/// A level that failed says why, not only how often: the report's errors name each type's
/// first reason (the JSON keeps it per level in `error_examples`, and per sample with
/// `--samples`).
#[test]
fn failures_carry_their_first_reason() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = simulate(
        dir.path(),
        &["--ttft", "5ms", "--error-rate", "1", "--errors", "401"],
    );
    let cfg = hello_config(dir.path(), &format!("{url}/v1"), 4, "", "");
    let json = dir.path().join("e.json");
    let (code, out, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "2",
            "--requests-per-level",
            "4",
            "--samples",
            // The level's own failures (the check would load nothing).
            "--no-check",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert!(
        out.contains("auth 4 (first: HTTP 401"),
        "code {code:?}\nstdout:\n{out}\nstderr:\n{err}"
    );
    // Every request failed (fewer than the early stop's 10 in a row): never exit 0.
    assert_eq!(code, Some(8), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    let l = &levels(&r, 0)[0];
    let why = l["error_examples"]["auth"].as_str().unwrap_or_default();
    assert!(why.starts_with("HTTP 401"), "{l}");
    let samples = l["samples"].as_array().unwrap();
    assert!(
        samples.iter().all(|s| s["error_detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("HTTP 401"))),
        "{samples:?}"
    );
}
