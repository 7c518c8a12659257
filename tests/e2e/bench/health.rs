//! Issue 40, "nothing sent in vain": a wrong key is found by one request per model before any
//! level (exit 7), a load whose requests all fail with an error more load cannot change stops
//! after `--stop-after-errors` of them (exit 8), and a server that dies mid-level stops its load
//! the same way, its level kept and marked partial, the progress said on stderr meanwhile.

use super::*;

/// Every record of the simulator's event log, once it holds `n` (and no more come: bench has
/// exited, so every request it sent has ended).
fn records_settled(log: &Path, n: usize) -> Vec<Value> {
    let first = logged(log, n);
    std::thread::sleep(Duration::from_millis(300));
    let again = logged(log, n);
    assert_eq!(first.len(), again.len(), "the log still grew");
    again
}

/// A simulator that answers every request 401 (a wrong key): the connectivity check sends one
/// request per model, shows the error type, the status and the server's message, loads no model
/// and exits 7. Without the check (`--no-check`) each model's load stops after 5 failures in a
/// row (`--stop-after-errors 5`), at most one more in flight per further worker: its level is
/// kept, partial, its later level not run, and the run exits 8. Before: all 2 × 2 × 100 requests
/// were sent, and the run exited 0.
#[test]
fn a_wrong_key_costs_one_request_per_model() {
    let _serial = serial();
    let _wd = Watchdog::new("a_wrong_key_costs_one_request", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let (_sim, url) = simulate(
        dir.path(),
        &[
            "--ttft",
            "5ms",
            "--error-rate",
            "1",
            "--errors",
            "401",
            "--event-log",
            log.to_str().unwrap(),
        ],
    );
    let cfg = hello_config(dir.path(), &format!("{url}/v1"), 4, "", "");
    let json = dir.path().join("check.json");
    let common = [
        "--config.file",
        cfg.to_str().unwrap(),
        "--models",
        "sim-a,sim-b",
        "--concurrency",
        "2,4",
        "--requests-per-level",
        "100",
        "--no-history",
    ];
    let mut args = common.to_vec();
    args.extend(["-o", json.to_str().unwrap()]);
    let (code, out, err) = bench(&args, Duration::from_secs(60));
    assert_eq!(code, Some(7), "stdout:\n{out}\nstderr:\n{err}");
    for m in ["sim-a", "sim-b"] {
        assert!(
            err.contains(&format!(
                "  {m}: connectivity check failed: auth (HTTP 401): invalid_request_error invalid_api_key: Incorrect API key provided"
            )),
            "{err}"
        );
        assert!(
            out.contains(&format!(
                "{m}: not loaded, its connectivity check failed: auth (HTTP 401)"
            )),
            "{out}"
        );
    }
    assert!(
        err.contains("the connectivity check failed for sim-a (auth, HTTP 401), sim-b (auth, HTTP 401): no model was loaded; exit 7"),
        "{err}"
    );
    assert_eq!(records_settled(&log, 2).len(), 2, "one request per model");
    let r = read_json(&json);
    for m in r["models"].as_array().unwrap() {
        assert_eq!(m["check"]["ok"], false, "{m}");
        assert_eq!(m["check"]["error_type"], "auth", "{m}");
        assert_eq!(m["check"]["http_status"], 401, "{m}");
        assert!(
            m["check"]["message"]
                .as_str()
                .is_some_and(|s| s.contains("Incorrect API key")),
            "{m}"
        );
        assert_eq!(m["levels"].as_array().unwrap().len(), 0, "{m}");
    }

    // Without the check: the early stop.
    let json = dir.path().join("stopped.json");
    let mut args = common.to_vec();
    args.extend([
        "--no-check",
        "--stop-after-errors",
        "5",
        "-o",
        json.to_str().unwrap(),
    ]);
    let (code, out, err) = bench(&args, Duration::from_secs(60));
    assert_eq!(code, Some(8), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    let mut sent = 0;
    for m in r["models"].as_array().unwrap() {
        let ls = m["levels"].as_array().unwrap();
        assert_eq!(ls.len(), 1, "the later level is not run: {m}");
        let l = &ls[0];
        let n = l["requests"].as_u64().unwrap();
        // 5 in a row, and what the other worker had in flight then.
        assert!((5..=6).contains(&n), "{l}");
        assert_eq!(l["errors"]["auth"].as_u64(), Some(n), "{l}");
        assert_eq!(l["partial"], true, "{l}");
        assert_eq!(l["stopped"]["by"], "errors", "{l}");
        assert!(
            l["stopped"]["reason"]
                .as_str()
                .is_some_and(|s| s.starts_with("5 requests in a row failed with auth (an error more load cannot change): HTTP 401")),
            "{l}"
        );
        assert!(
            m["stopped_early"]
                .as_str()
                .is_some_and(|s| s.starts_with("load stopped at 2: ")
                    && s.ends_with("its later levels (4) are not run")),
            "{m}"
        );
        sent += n;
    }
    assert!(
        out.contains("sim-a @ 2: 5 requests in a row failed with auth"),
        "{out}"
    );
    assert!(
        err.contains("tokenprobe bench: not measured: sim-a @ 2 (its load stopped: "),
        "{err}"
    );
    let all = records_settled(&log, 2 + sent as usize);
    assert_eq!(all.len() as u64, 2 + sent, "the check's 2, then the loads'");
}

/// A server killed mid-level (after it answered): its load stops after `--stop-after-errors`
/// `connect` failures in a row after its last answer (one more from the other worker at most),
/// the level is kept with the requests that finished, marked partial, the next level is not run,
/// and the run exits 8.
/// Without a terminal, the level's progress was on stderr every 5 s meanwhile. Before: the level
/// went on failing at the rate of refused connections (254 failures from 2 workers in 11 s in
/// the issue), and the run exited 0.
#[test]
fn a_server_killed_mid_level_stops_its_load_after_n_refused_connections() {
    let _serial = serial();
    let _wd = Watchdog::new("a_server_killed_mid_level", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let (sim, url) = simulate(
        dir.path(),
        &["--ttft", "20ms", "--itl", "2ms", "--output-tokens", "4"],
    );
    let cfg = sim_config(dir.path(), &url);
    let json = dir.path().join("killed.json");
    let mut child = bench_child(
        dir.path(),
        "bench",
        &[
            "--config.file",
            cfg.to_str().unwrap(),
            "--concurrency",
            "2,4",
            "--duration-per-level",
            "60s",
            "--stop-after-errors",
            "8",
            "--samples",
            "--no-history",
            "-o",
            json.to_str().unwrap(),
        ],
    );
    wait_for("a progress line", Duration::from_secs(30), || {
        child.assert_running();
        let err = child.stderr();
        let re = regex::Regex::new(
            r"bench: sim-a @ 2: \d+/60 s, (\d+) done, \d+ in flight, \d+ failed, \d+ s",
        )
        .unwrap();
        re.captures(&err)
            .and_then(|c| c[1].parse::<u64>().ok())
            .filter(|done| *done > 0)
    });
    sim.signal("-KILL");
    let status = wait_for("bench to end", Duration::from_secs(30), || child.exited());
    assert_eq!(status.code(), Some(8), "{}", child.logs());
    let r = read_json(&json);
    let ls = levels(&r, 0);
    assert_eq!(ls.len(), 1, "the level at 4 is not run: {ls:?}");
    let l = &ls[0];
    assert_eq!(l["partial"], true, "{l}");
    assert_eq!(l["stopped"]["by"], "errors", "{l}");
    // The refused connections after the last answer (a busy machine's own connect failures
    // before, with answers between them, are not the streak).
    let mut ends: Vec<(f64, &str)> = l["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let e = s["error_type"].as_str().unwrap_or("ok");
            (s["end_s"].as_f64().unwrap(), e)
        })
        .collect();
    ends.sort_by(|a, b| a.0.total_cmp(&b.0));
    let last_ok = ends.iter().rposition(|(_, e)| *e == "ok").unwrap();
    let refused = ends[last_ok..]
        .iter()
        .filter(|(_, e)| *e == "connect")
        .count();
    assert!((8..=9).contains(&refused), "{:?}", &ends[last_ok..]);
    assert!(l["successes"].as_u64().unwrap() > 0, "{l}");
    assert!(
        l["stopped"]["reason"]
            .as_str()
            .is_some_and(|s| s.starts_with("8 requests in a row failed with connect")),
        "{l}"
    );
    assert!(l["wall_s"].as_f64().unwrap() < 30.0, "{l}");
    let err = child.stderr();
    assert!(
        err.contains("sim-a: load stopped at 2: 8 requests in a row failed with connect"),
        "{err}"
    );
    assert!(err.contains("; PARTIAL, 8 requests in a row"), "{err}");
}
