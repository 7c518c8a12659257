//! Issue 25 item 1: every run kept in the run store. Runs against `tokenprobe simulate` go to a
//! store of the test's own (`--history`); a slower simulator's run is found regressed by
//! `--baseline last`, and `bench history` lists the runs and the model's trend, whose figures are
//! each run's own report's.

use super::*;

/// One closed-loop run of 1 and 2 streams, 8 requests each, against `url`, into `store`: its exit
/// code, its JSON report and its stderr.
fn run(
    dir: &Path,
    url: &str,
    store: &Path,
    n: usize,
    extra: &[&str],
) -> (Option<i32>, Value, String) {
    let cfg = sim_config(dir, url);
    let json = dir.join(format!("run{n}.json"));
    let mut args = vec![
        "--config.file",
        cfg.to_str().unwrap(),
        "--concurrency",
        "1,2",
        "--requests-per-level",
        "8",
        "--max-tokens",
        "4",
        "--history",
        store.to_str().unwrap(),
        "-o",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = bench(&args, Duration::from_secs(60));
    assert!(
        matches!(code, Some(0 | 3)),
        "run {n}: exit {code:?}\nstdout:\n{out}\nstderr:\n{err}"
    );
    (code, read_json(&json), err)
}

fn history(args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.args(["bench", "history"]).args(args);
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(20));
    (st.code(), out, err)
}

/// TTFT p95 of the report's level `i`.
fn ttft_p95(r: &Value, i: usize) -> f64 {
    levels(r, 0)[i]["ttft_s"]["p95"].as_f64().unwrap()
}

#[test]
fn runs_are_kept_trended_and_the_last_one_is_the_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store/runs.sqlite3");
    let s = store.to_str().unwrap();
    std::fs::create_dir(dir.path().join("store")).unwrap();

    // No run yet: `--baseline last` is refused before anything is sent.
    let (_sim, fast) = simulate(dir.path(), &slots("8", "20ms", "2ms", "4"));
    let cfg = sim_config(dir.path(), &fast);
    let (code, _, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--requests-per-level",
            "1",
            "--history",
            s,
            "--baseline",
            "last",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no run is recorded yet"), "{err}");

    // Three runs at the fast simulator, each compared with the one before.
    let mut reports = Vec::new();
    for n in 1..=3 {
        let baseline: &[&str] = if n == 1 { &[] } else { &["--baseline", "last"] };
        let (code, r, err) = run(dir.path(), &fast, &store, n, baseline);
        assert!(err.contains(&format!("recorded as run {n} in")), "{err}");
        if n > 1 {
            assert!(
                err.contains(&format!("baseline: run {} of", n - 1)),
                "{err}"
            );
            let c = &r["comparison"];
            assert!(
                c["baseline"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("run {} (", n - 1))
            );
            // TTFT 20 ms against 20 ms, within the 10% tolerance or not: what the exit says is
            // what the comparison found.
            let regressed = !c["regressions"].as_array().unwrap().is_empty();
            assert_eq!(code, Some(if regressed { 3 } else { 0 }), "{c}");
        }
        reports.push(r);
    }

    // A fourth at a simulator ten times slower to its first token: a regression against run 3.
    let (_slow_sim, slow) = simulate(dir.path(), &slots("8", "200ms", "2ms", "4"));
    let (code, r4, err) = run(dir.path(), &slow, &store, 4, &["--baseline", "last"]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("baseline: run 3 of"), "{err}");
    let regressions = r4["comparison"]["regressions"].as_array().unwrap().clone();
    assert!(
        regressions
            .iter()
            .any(|g| g["metric"].as_str().unwrap_or("").starts_with("ttft")),
        "{regressions:?}"
    );
    reports.push(r4);

    // `--baseline 1` names the first run, whatever came after.
    let (code, r5, err) = run(dir.path(), &slow, &store, 5, &["--baseline", "1"]);
    assert_eq!(code, Some(3), "{err}");
    assert!(
        r5["comparison"]["baseline"]
            .as_str()
            .unwrap()
            .starts_with("run 1 (")
    );
    reports.push(r5);

    // The listing: five runs newest first, each with its comparison.
    let (code, out, err) = history(&["--history", s, "--format", "json"]);
    assert_eq!(code, Some(0), "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let runs = doc["runs"].as_array().unwrap();
    let ids: Vec<i64> = runs.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [5, 4, 3, 2, 1]);
    assert_eq!(runs[0]["models"][0], "sim-a");
    assert_eq!(runs[0]["levels"], serde_json::json!(["1", "2"]));
    assert_eq!(
        runs[1]["regressions"].as_u64(),
        Some(regressions.len() as u64)
    );
    assert!(runs[4]["baseline"].is_null());

    // The trend at level 2: every run's figure is its report's, and run 4's jump is shown.
    let (code, out, err) = history(&["--history", s, "--model", "sim-a", "--format", "json"]);
    assert_eq!(code, Some(0), "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let t = &doc["trend"];
    assert_eq!(t["level"], "2");
    let points = t["points"].as_array().unwrap();
    assert_eq!(points.len(), 5);
    for (p, r) in points.iter().zip(&reports) {
        assert_eq!(p["ttft_p95_s"].as_f64().unwrap(), ttft_p95(r, 1));
        assert_eq!(
            p["output_tokens_per_s"].as_f64().unwrap(),
            levels(r, 0)[1]["output_tokens_per_s"].as_f64().unwrap()
        );
    }
    let jump = points[3]["change"]["ttft_p95"].as_f64().unwrap();
    assert!(
        (jump - (ttft_p95(&reports[3], 1) / ttft_p95(&reports[2], 1) - 1.0)).abs() < 1e-9,
        "{jump}"
    );
    assert!(jump > 2.0, "TTFT 20 ms to 200 ms: {jump}");

    // In the terminal and on the page.
    let page = dir.path().join("trend.html");
    let (code, out, err) = history(&[
        "--history",
        s,
        "--model",
        "sim-a",
        "--level",
        "1",
        "-o",
        page.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("Trend of sim-a at level 1, 5 runs, oldest first"),
        "{out}"
    );
    assert!(out.contains("TTFT p95"), "{out}");
    let html = std::fs::read_to_string(&page).unwrap();
    let want = format!(
        r#"data-k="/points/3/ttft_p95_s" data-v="{}""#,
        ttft_p95(&reports[3], 0)
    );
    assert!(html.contains(&want), "{want} not on the page");

    // Filters: a date after every run, another model.
    let (_, out, _) = history(&["--history", s, "--since", "2999-01-01", "--format", "json"]);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert!(doc["runs"].as_array().unwrap().is_empty());
    let (_, out, _) = history(&["--history", s, "--model", "other"]);
    assert!(out.contains("no stored run matches"), "{out}");
}

#[test]
fn a_store_it_cannot_use_is_refused_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let mut args = slots("8", "20ms", "2ms", "4");
    args.extend(["--event-log", log.to_str().unwrap()]);
    let (_sim, url) = simulate(dir.path(), &args);
    let cfg = sim_config(dir.path(), &url);
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database, but someone's notes\n".repeat(200)).unwrap();
    let (code, _, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--requests-per-level",
            "2",
            "--history",
            text.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not a tokenprobe run store"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&text).unwrap(),
        "not a database, but someone's notes\n".repeat(200)
    );
    // Nothing reached the simulator.
    assert!(std::fs::read_to_string(&log).unwrap_or_default().is_empty());
    // `--no-history` runs without it.
    let (code, _, err) = bench(
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--requests-per-level",
            "2",
            "--history",
            text.to_str().unwrap(),
            "--no-history",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("recorded as run"), "{err}");
}

/// Break test: two runs that end together into one store are both kept (the second waits for
/// the first's write); a run stopped by SIGINT is kept marked as interrupted, and
/// `--baseline last` passes over it.
#[test]
fn runs_ending_together_are_both_kept_and_a_stopped_run_is_never_last() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite3");
    let s = store.to_str().unwrap().to_owned();
    let (_sim, url) = simulate(dir.path(), &slots("8", "20ms", "2ms", "4"));
    let cfg = sim_config(dir.path(), &url);
    let c = cfg.to_str().unwrap().to_owned();
    let both: Vec<_> = (0..2)
        .map(|_| {
            let (c, s) = (c.clone(), s.clone());
            std::thread::spawn(move || {
                bench(
                    &[
                        "--config.file",
                        &c,
                        "--concurrency",
                        "2",
                        "--requests-per-level",
                        "4",
                        "--history",
                        &s,
                    ],
                    Duration::from_secs(60),
                )
            })
        })
        .collect();
    for t in both {
        let (code, out, err) = t.join().unwrap();
        assert_eq!(code, Some(0), "{out}\n{err}");
        assert!(err.contains("recorded as run"), "{err}");
    }
    // A run stopped during its second level (open loop, the second level's requests a minute
    // apart): kept, with its finished level, marked.
    let mut child = bench_child(
        dir.path(),
        "stopped",
        &[
            "--config.file",
            &c,
            "--rate",
            "50,0.05",
            "--concurrency",
            "2",
            "--requests-per-level",
            "3",
            "--history",
            &s,
        ],
    );
    wait_for("the first level's line", Duration::from_secs(60), || {
        child.assert_running();
        child.stderr().contains("sim-a @ 50/s: ").then_some(())
    });
    let (status, _) = child
        .signal_and_wait("-INT", Duration::from_secs(15))
        .unwrap_or_else(|| panic!("bench did not stop\n{}", child.logs()));
    assert_eq!(status.code(), Some(130), "{}", child.logs());
    assert!(
        child.stderr().contains("recorded as run 3 in"),
        "{}",
        child.logs()
    );
    let (code, out, err) = history(&["--history", &s, "--format", "json"]);
    assert_eq!(code, Some(0), "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let runs = doc["runs"].as_array().unwrap();
    let ids: Vec<i64> = runs.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [3, 2, 1]);
    assert_eq!(runs[0]["interrupted"], true);
    assert_eq!(runs[0]["levels"], serde_json::json!(["50/s"]));
    assert!(runs[1..].iter().all(|r| r["interrupted"] == false));
    // The newest complete open-loop run is none (run 3 was stopped): refused before sending.
    let (code, _, err) = bench(
        &[
            "--config.file",
            &c,
            "--rate",
            "50",
            "--requests-per-level",
            "2",
            "--history",
            &s,
            "--baseline",
            "last",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no earlier complete open-loop run"), "{err}");
}

/// `bench <args>` whose files may not grow past `max_file_bytes` (RLIMIT_FSIZE, with SIGXFSZ
/// ignored so that the write fails as on a full disk instead of killing the process).
fn bench_with_room(args: &[&str], max_file_bytes: u64) -> (Option<i32>, String, String) {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.arg("bench").args(args);
    // SAFETY: signal and setrlimit are async-signal-safe; nothing else runs before exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit {
                rlim_cur: max_file_bytes,
                rlim_max: max_file_bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(60));
    (st.code(), out, err)
}

/// Issue 39 items 4 and 9: a store that cannot take the run never ends in a silent exit 0. A
/// file size limit stands for a full disk (no mount needed; the write fails with EFBIG where a
/// full disk's fails with ENOSPC): a new store without room is refused before anything is sent
/// and leaves no file; a store with room for the check's journal but not for the run's rows is
/// sent to, then says the run is not recorded and exits 5, keeping its earlier run. A store in a
/// directory that does not exist makes none, and `bench history` names a path it cannot look at.
#[test]
fn a_store_without_room_refuses_the_run_or_fails_it_never_silently() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url, log) = logged_slots(dir.path(), ("8", "20ms", "2ms", "4"));
    let cfg = sim_config(dir.path(), &url);
    let c = cfg.to_str().unwrap();
    let args = |store: &Path| -> Vec<String> {
        [
            "--config.file",
            c,
            "--concurrency",
            "1",
            "--requests-per-level",
            "2",
            "--history",
            store.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec()
    };
    let sent = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    };

    let new = dir.path().join("new.sqlite3");
    let a = args(&new);
    let (code, _, err) = bench_with_room(&a.iter().map(String::as_str).collect::<Vec<_>>(), 0);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("run store"), "{err}");
    assert!(!new.exists(), "a refused new store left its file");
    assert_eq!(sent(), 0, "sent before the store was refused");

    let full = dir.path().join("full.sqlite3");
    let a = args(&full);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let (code, _, err) = bench(&a, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    let size = std::fs::metadata(&full).unwrap().len();
    let before = sent();
    let (code, _, err) = bench_with_room(&a, size);
    assert!(sent() > before, "the run was not sent\n{err}");
    assert!(
        err.contains("this run is not recorded: run store") && err.contains("(exit 5)"),
        "{err}"
    );
    assert_eq!(code, Some(5), "{err}");
    let (code, out, err) = history(&["--history", full.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, Some(0), "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["runs"].as_array().unwrap().len(), 1);

    let typo = dir.path().join("typo/runs.sqlite3");
    let a = args(&typo);
    let (code, _, err) = bench(
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("typo does not exist"), "{err}");
    assert!(!dir.path().join("typo").exists());

    let (a, b) = (dir.path().join("loop-a"), dir.path().join("loop-b"));
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    for p in [a, full.join("runs.sqlite3")] {
        let (code, _, err) = history(&["--history", p.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{}: {err}", p.display());
        assert!(!err.contains("no run is recorded yet"), "{err}");
        assert!(
            err.contains("symbolic links") || err.contains("Not a directory"),
            "{err}"
        );
    }
}

/// Issue 39 item 5: `--baseline last` compares only runs of the same effective workload with a
/// level in common. A `--max-tokens 8` run against a store of `--max-tokens 4` runs is refused
/// before sending, naming the cap; so is `--baseline ID` of another workload, and a run with no
/// level of the stored ones. Between same-workload runs, `last` passes over a newer run of
/// another workload and says so.
#[test]
fn the_baseline_is_a_run_of_the_same_workload_with_a_level_in_common() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url, log) = logged_slots(dir.path(), ("8", "20ms", "2ms", "8"));
    let cfg = sim_config(dir.path(), &url);
    let store = dir.path().join("runs.sqlite3");
    let (c, s) = (cfg.to_str().unwrap(), store.to_str().unwrap());
    let sent = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--config.file",
            c,
            "--concurrency",
            "1,2",
            "--requests-per-level",
            "4",
            "--history",
            s,
        ];
        args.extend_from_slice(extra);
        bench(&args, Duration::from_secs(60))
    };
    let (code, _, err) = run(&["--max-tokens", "4"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("recorded as run 1 in"), "{err}");

    let before = sent();
    let (code, _, err) = run(&["--max-tokens", "8", "--baseline", "last"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("no earlier complete closed-loop run of prompt hello with sim/sim-a fits this run (--baseline last; 1 read, newest first): run 1: another workload (max_tokens 8 here, 4 in the baseline)"),
        "{err}"
    );
    let (code, _, err) = run(&["--max-tokens", "8", "--baseline", "1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--baseline 1: run 1 of")
            && err.contains("max_tokens 8 here, 4 in the baseline"),
        "{err}"
    );
    let (code, _, err) = bench(
        &[
            "--config.file",
            c,
            "--concurrency",
            "16",
            "--requests-per-level",
            "4",
            "--max-tokens",
            "4",
            "--history",
            s,
            "--baseline",
            "last",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("run 1: no (model, level) in common, nothing to compare (its levels 1, 2 of sim-a; this run's 16 of sim-a)"),
        "{err}"
    );
    assert_eq!(sent(), before, "a refused baseline sent requests");

    // A newer run of another cap, then one of the first's: compared with run 1, run 2 passed over.
    let (code, _, err) = run(&["--max-tokens", "8"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = run(&["--max-tokens", "4", "--baseline", "last"]);
    assert!(matches!(code, Some(0 | 3)), "{err}");
    assert!(
        err.contains("baseline: run 1 of")
            && err.contains(
                "the newest that fits this run; passed over run 2: another workload (max_tokens 4 here, 8 in the baseline)"
            ),
        "{err}"
    );
}

/// Issue 44: what served two runs is recorded without asking; the second, on half the GPUs
/// (`gpus: 8` → `gpus: 4`) and ten times slower to its first token, regresses against the
/// first, and its comparison and `bench history`'s listing say what changed beside it.
#[test]
fn bench_history_shows_what_changed_beside_a_regression() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite3");
    let s = store.to_str().unwrap();
    let (_fast_sim, fast) = simulate(dir.path(), &slots("8", "20ms", "2ms", "4"));
    let (_slow_sim, slow) = simulate(dir.path(), &slots("8", "200ms", "2ms", "4"));
    let run = |url: &str, gpus: u32, n: usize, extra: &[&str]| {
        let cfg = hello_config(
            dir.path(),
            &format!("{url}/v1"),
            64,
            "",
            &format!("    gpus: {gpus}\n"),
        );
        let json = dir.path().join(format!("run{n}.json"));
        let mut args = vec![
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "1,2",
            "--requests-per-level",
            "8",
            "--max-tokens",
            "4",
            "--history",
            s,
            "-o",
            json.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = bench(&args, Duration::from_secs(60));
        (code, read_json(&json), format!("{out}{err}"))
    };
    let (code, r1, out) = run(&fast, 8, 1, &[]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(r1["provenance"]["servers"][0]["gpus"]["count"], 8, "{r1}");
    let (code, r2, out) = run(&slow, 4, 2, &["--baseline", "last"]);
    assert_eq!(code, Some(3), "a regression: {out}");
    assert_eq!(
        r2["comparison"]["changed"],
        serde_json::json!(["GPUs 8 → 4"]),
        "{}",
        r2["comparison"]
    );
    assert!(
        out.contains("what served it changed: GPUs 8 → 4"),
        "beside the regressions: {out}"
    );
    let (code, listing, err) = history(&["--history", s]);
    assert_eq!(code, Some(0), "{err}");
    let line = listing
        .lines()
        .find(|l| l.contains("changed: GPUs 8 → 4"))
        .unwrap_or_else(|| panic!("no change in the listing:\n{listing}"));
    assert!(line.contains("regressed"), "{line}");
    eprintln!("{listing}");
    // `bench report` over the two stored runs: one frontier over both runs' levels.
    let both = dir.path().join("both.json");
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.args(["bench", "report", "1", "2", "--history", s, "-o"])
        .arg(&both);
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(20));
    assert_eq!(st.code(), Some(0), "{out}{err}");
    let r = read_json(&both);
    let points = r["frontier"]["points"].as_array().unwrap();
    let series: std::collections::BTreeSet<&str> =
        points.iter().filter_map(|p| p["series"].as_str()).collect();
    assert_eq!(
        series.into_iter().collect::<Vec<_>>(),
        ["sim-a #1", "sim-a #2"],
        "{}",
        r["frontier"]
    );
    assert_eq!(points.len(), 4);
}
