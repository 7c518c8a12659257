//! Unit tests of the `bench` flags: what a plan carries and what is refused before sending.

use super::*;
use clap::Parser;

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    bench: BenchArgs,
}

/// The plan of `tokenprobe bench <args>` against the shipped `config/bench.yml`.
/// [`plan`] of `base` followed by `extra`.
fn plan_with(base: &[&str], extra: &[&str]) -> Result<BenchPlan, BenchError> {
    plan(&[base, extra].concat())
}

fn plan(args: &[&str]) -> Result<BenchPlan, BenchError> {
    plan_in(
        concat!(env!("CARGO_MANIFEST_DIR"), "/config/bench.yml"),
        args,
    )
}

fn plan_in(config: &str, args: &[&str]) -> Result<BenchPlan, BenchError> {
    let mut argv = vec!["bench", "--config.file", config];
    argv.extend_from_slice(args);
    let args = Cmd::try_parse_from(argv)
        .map_err(|e| BenchError::Usage(e.to_string()))?
        .bench;
    Outputs::check(&args.outputs, args.plot.as_deref())?;
    args.plan()
}

/// The levels a plan's schedule knows before it runs.
fn planned(p: &BenchPlan) -> Vec<LevelKey> {
    p.schedule().planned().unwrap_or_default().to_vec()
}

fn usage(r: Result<BenchPlan, BenchError>) -> String {
    match r {
        Err(BenchError::Usage(m)) => m,
        Err(e) => panic!("not a usage error: {e}"),
        Ok(p) => panic!("accepted: {p:?}"),
    }
}

#[test]
fn a_missing_level_length_names_both_ways_to_give_it() {
    let m = usage(plan(&["--concurrency", "1"]));
    assert!(
        m.contains("--requests-per-level") && m.contains("--duration-per-level"),
        "{m}"
    );
    let m = usage(plan(&[
        "--requests-per-level",
        "2",
        "--duration-per-level",
        "1s",
    ]));
    assert!(m.contains("cannot be used with"), "{m}");
}

/// `--prompt a,b` sweeps prompts, each its own spec; a sweep is not a selection, a
/// conversation is closed loop only, and a prompt named twice or unknown is refused.
#[test]
fn prompt_sweeps_and_what_they_refuse() {
    let p = plan(&[
        "--requests-per-level",
        "2",
        "--prompt",
        "isl128,isl512,chat",
    ])
    .expect("plan");
    let names: Vec<&str> = p
        .sent()
        .prompts()
        .iter()
        .map(|s| s.prompt.name.as_str())
        .collect();
    assert_eq!(names, ["isl128", "isl512", "chat"]);
    assert_eq!(p.sent().spec().prompt.name, "isl128");
    assert!(!p.judging().judged, "one model, a sweep: nothing to rank");
    let p = plan(&[
        "--requests-per-level",
        "2",
        "--models",
        "a,b",
        "--prompt",
        "isl128,isl512",
    ])
    .expect("plan");
    assert!(
        !p.judging().judged,
        "two models over a sweep are shown, not ranked"
    );
    let m = usage(plan(&[
        "--requests-per-level",
        "2",
        "--prompt",
        "isl128,isl512",
        "--limit",
        "ttft_p95<2s",
    ]));
    assert!(m.contains("several prompts are a sweep"), "{m}");
    let m = usage(plan(&[
        "--requests-per-level",
        "2",
        "--prompt",
        "chat",
        "--rate",
        "2",
    ]));
    assert!(
        m.contains("prompt chat: a conversation runs in closed loop"),
        "{m}"
    );
    // A session too: an open loop would send its first turns only.
    let m = usage(plan_in(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/sessions/sessions.yml"
        ),
        &[
            "--requests-per-level",
            "2",
            "--prompt",
            "agent",
            "--rate",
            "2",
        ],
    ));
    assert!(
        m.contains("prompt agent: a session runs in closed loop"),
        "{m}"
    );
    let m = usage(plan(&[
        "--requests-per-level",
        "2",
        "--prompt",
        "isl128,isl128",
    ]));
    assert!(m.contains("given twice"), "{m}");
    let m = usage(plan(&[
        "--requests-per-level",
        "2",
        "--prompt",
        "isl128,nope",
    ]));
    assert!(m.contains("no prompt \"nope\""), "{m}");
    let p = plan(&["--requests-per-level", "2"]).expect("plan");
    assert_eq!(
        (
            p.sent().prompts().len(),
            p.sent().spec().prompt.name.as_str()
        ),
        (1, "haiku"),
        "default: the first prompt"
    );
}

#[test]
fn closed_loop_flags_become_levels_models_and_outputs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("r.json");
    let md = dir.path().join("r.MD");
    let p = plan(&[
        "--concurrency",
        "1,5,10",
        "--requests-per-level",
        "20",
        "--models",
        "a,b",
        "--max-tokens",
        "7",
        "-o",
        json.to_str().expect("path"),
        "-o",
        md.to_str().expect("path"),
    ])
    .expect("plan");
    assert_eq!(
        planned(&p)
            .iter()
            .map(|k| (k.concurrency, k.rate))
            .collect::<Vec<_>>(),
        [(1, None), (5, None), (10, None)]
    );
    assert!(!p.open());
    assert_eq!(
        p.sent()
            .models()
            .iter()
            .map(|m| m.name())
            .collect::<Vec<_>>(),
        ["sim/a", "sim/b"]
    );
    assert!(p.judging().judged, "two models are ranked");
    assert_eq!(p.sent().spec().max_tokens, Some(7));
    assert!(matches!(p.load().amount, Amount::Requests(20)));
    let files = [json.clone(), md.clone()];
    let o = Outputs::check(&files, None).expect("outputs");
    assert_eq!(
        o.files,
        [
            (json, crate::render::FileFormat::Json),
            (md, crate::render::FileFormat::Markdown)
        ]
    );
    assert_eq!(p.sent().spec().target.name, "sim");
    // No terminal in a test: a line every few seconds instead of the bar.
    assert_eq!(
        p.watch().progress,
        crate::bench::progress::ProgressMode::Lines
    );
    assert_eq!(
        p.watch().health,
        crate::bench::health::HealthPlan::default()
    );
}

#[test]
fn open_loop_keeps_the_seed_and_the_arrivals() {
    let p = plan(&[
        "--rate",
        "1,2.5",
        "--duration-per-level",
        "3s",
        "--arrival",
        "constant",
        "--seed",
        "42",
    ])
    .expect("plan");
    assert!(p.open());
    assert_eq!(
        planned(&p).iter().map(|k| k.rate).collect::<Vec<_>>(),
        [Some(1.0), Some(2.5)]
    );
    assert_eq!((p.load().arrival, p.load().seed), (Arrival::Constant, 42));
    assert!(matches!(p.load().amount, Amount::Duration(d) if d == Duration::from_secs(3)));
    assert!(!p.judging().judged, "one model, no limits: nothing to rank");
}

/// `--burstiness K`: gamma arrivals of that shape, recorded with the seed; K = 1 is Poisson;
/// refused without --rate, with constant arrivals, across shards, or not above 0.
#[test]
fn burstiness_makes_gamma_arrivals_in_open_loop_only() {
    let open = ["--rate", "5", "--requests-per-level", "3", "--seed", "7"];
    let with = |extra: &[&str]| plan_with(&open, extra);
    let p = with(&["--burstiness", "0.25"]).expect("plan");
    assert_eq!(
        (p.load().arrival, p.load().seed),
        (Arrival::Gamma { shape: 0.25 }, 7)
    );
    assert_eq!(
        with(&["--burstiness", "1"]).expect("plan").load().arrival,
        Arrival::Poisson
    );
    for (extra, says) in [
        (
            &["--burstiness", "2", "--arrival", "constant"][..],
            "--arrival constant",
        ),
        (&["--burstiness", "2", "--shard", "0/2"], "one process"),
    ] {
        let e = with(extra).expect_err("refused").to_string();
        assert!(e.contains(says), "{extra:?}: {e}");
    }
    let closed = plan(&[
        "--concurrency",
        "2",
        "--requests-per-level",
        "1",
        "--burstiness",
        "2",
    ]);
    assert!(closed.expect_err("refused").to_string().contains("--rate"));
    for bad in ["0", "-1", "inf", "NaN", "x"] {
        assert!(parse_burstiness(bad).is_err(), "{bad}");
    }
}

/// `--canary RATE`: a rate above 0 and at most 10 per second, one process only; the plan
/// carries the canary prompt by name.
#[test]
fn canaries_are_few_and_in_one_process() {
    let base = ["--concurrency", "2", "--requests-per-level", "1"];
    let with = |extra: &[&str]| plan_with(&base, extra);
    let p = with(&["--canary", "0.5"]).expect("plan");
    let c = p.load().canary.clone().expect("canary");
    assert_eq!((c.rate, c.prompt.is_none()), (0.5, true));
    let e = with(&["--canary", "1", "--shard", "0/2", "--run-id", "r"]).expect_err("refused");
    assert!(e.to_string().contains("one process"), "{e}");
    for bad in ["0", "-1", "11", "inf", "x"] {
        assert!(parse_canary_rate(bad).is_err(), "{bad}");
    }
}

#[test]
fn until_clear_needs_slos_a_fixed_sweep_and_one_process() {
    let base = [
        "--concurrency",
        "2",
        "--requests-per-level",
        "5",
        "--until-clear",
        "3",
    ];
    let with = |extra: &[&str]| plan_with(&base, extra);
    assert_eq!(
        with(&["--slo", "ttft=1s"])
            .expect("plan")
            .schedule()
            .extension()
            .map(|e| e.most),
        Some(3)
    );
    for (extra, says) in [
        (&[][..], "--slo"),
        (
            &["--slo", "ttft=1s", "--shard", "0/2", "--run-id", "r"],
            "one process",
        ),
        (
            &["--slo", "ttft=1s", "--find-capacity"],
            "--capacity-extend",
        ),
    ] {
        let e = with(extra).expect_err("refused").to_string();
        assert!(e.contains(says), "{extra:?}: {e}");
    }
}

#[test]
fn a_ramp_up_needs_a_lower_start() {
    let base = [
        "--requests-per-level",
        "5",
        "--ramp-up",
        "exponential",
        "--ramp-over",
        "10s",
    ];
    let with = |extra: &[&str]| plan_with(&base, extra);
    let p = with(&["--rate", "4,8", "--ramp-from", "1"]).expect("plan");
    let r = p.load().load_ramp.expect("ramp");
    assert_eq!((r.exponential, r.from, r.over), (true, 1.0, 10.0));
    // Closed loop: workers.
    let p = with(&["--concurrency", "4,8", "--ramp-from", "2"]).expect("plan");
    assert_eq!(p.load().load_ramp.map(|r| r.from), Some(2.0));
    for (extra, says) in [
        (
            &["--concurrency", "2", "--ramp-from", "2"][..],
            "at least 1 worker and below every --concurrency",
        ),
        (
            &["--concurrency", "4", "--ramp-from", "0.5"],
            "at least 1 worker",
        ),
        (
            &["--concurrency", "4", "--ramp-from", "1", "--ramp", "1s"],
            "--ramp spreads them evenly instead",
        ),
        (&["--rate", "4,8", "--ramp-from", "4"], "below every --rate"),
        (&["--rate", "4", "--ramp-from", "0"], "above 0"),
    ] {
        let e = with(extra).expect_err("refused").to_string();
        assert!(e.contains(says), "{extra:?}: {e}");
    }
}

#[test]
fn what_cannot_run_is_refused_before_sending() {
    let missing_dir = "/nonexistent-dir-of-tokenprobe/r.json";
    for (args, says) in [
        (
            &[
                "--concurrency",
                "1",
                "--requests-per-level",
                "1",
                "-o",
                "r.txt",
            ][..],
            ".json, .csv, .md or .html",
        ),
        (
            &[
                "--concurrency",
                "1",
                "--requests-per-level",
                "1",
                "--plot",
                "p.png",
            ],
            "only .svg",
        ),
        (
            &[
                "--concurrency",
                "1",
                "--requests-per-level",
                "1",
                "-o",
                missing_dir,
            ],
            "does not exist",
        ),
        (
            &[
                "--concurrency",
                "1,2",
                "--requests-per-level",
                "1",
                "--select-at",
                "7",
            ],
            "7",
        ),
        (
            &[
                "--concurrency",
                "1",
                "--requests-per-level",
                "1",
                "--models",
                "a,,b",
            ],
            "empty model",
        ),
        (
            &["--rate", "1000", "--duration-per-level", "2000s"],
            "more than",
        ),
    ] {
        let m = usage(plan(args));
        assert!(m.contains(says), "{args:?}: {m}");
    }
}

#[test]
fn limits_and_slos_from_flags_join_the_criteria() {
    let p = plan(&[
        "--concurrency",
        "1",
        "--requests-per-level",
        "1",
        "--limit",
        "ttft_p95<2s",
        "--slo",
        "ttft=1s",
        "--knee-tps-growth",
        "5%",
    ])
    .expect("plan");
    assert_eq!(p.criteria().limits.len(), 1);
    assert_eq!(p.criteria().slos.len(), 1);
    assert!((p.criteria().knee.tps_growth - 0.05).abs() < 1e-12);
    assert!(p.judging().judged, "a limit is a judgement");
}

#[test]
fn cross_check_flags() {
    let p = plan(&["--requests-per-level", "5", "--cross-check"]).expect("plan");
    assert_eq!(p.load().cross_check, Some(CrossCheckSpec::default()));
    assert_eq!(CrossCheckSpec::default().requests, 5);
    let p = plan(&[
        "--requests-per-level",
        "5",
        "--cross-check=9",
        "--cross-check-ratio",
        "20%",
        "--cross-check-min-gap",
        "10ms",
    ])
    .expect("plan");
    let c = p.load().cross_check.expect("cross-check");
    assert_eq!(c.requests, 9);
    assert!((c.max_ratio - 0.2).abs() < 1e-12 && (c.min_gap_s - 0.01).abs() < 1e-12);
    assert_eq!(
        plan(&["--requests-per-level", "5"])
            .expect("plan")
            .load()
            .cross_check,
        None
    );
    assert!(plan(&["--requests-per-level", "5", "--cross-check=0"]).is_err());
    assert!(plan(&["--requests-per-level", "5", "--cross-check-ratio", "5%"]).is_err());
    assert!(
        plan(&[
            "--requests-per-level",
            "5",
            "--cross-check",
            "--cross-check-ratio",
            "x"
        ])
        .is_err()
    );
}

#[test]
fn a_workload_that_does_not_stream_is_judged_by_what_it_measures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("ns.yml");
    std::fs::write(
        &cfg,
        "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\n    stream: false\ntargets:\n  - name: t\n    base_url: http://127.0.0.1:1/v1\n    models: [a, b]\n",
    )
    .expect("config");
    let plan = |extra: &[&str]| {
        let mut argv = vec![
            "bench",
            "--config.file",
            cfg.to_str().expect("path"),
            "--requests-per-level",
            "3",
        ];
        argv.extend_from_slice(extra);
        Cmd::try_parse_from(argv)
            .map_err(|e| BenchError::Usage(e.to_string()))?
            .bench
            .plan()
    };
    let p = plan(&[]).expect("plan");
    assert!(!p.sent().spec().stream);
    assert_eq!(
        p.criteria().effective_weights(),
        parse_weights("e2e=1").expect("weights")
    );
    for bad in [
        &["--slo", "ttft=1s"][..],
        &["--limit", "tpot_p95<50ms"],
        &["--weight", "tps=1"],
        &["--cross-check"],
    ] {
        let e = plan(bad).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("does not stream"), "{bad:?}: {e}");
    }
    assert!(plan(&["--slo", "e2e=2s", "--limit", "error_rate<0.1"]).is_ok());
}

/// A trace prompt is one level of the whole trace: its mean rate, every request, the in-flight cap
/// of one `--concurrency` (1000 by default); flags that would send something else are refused by
/// name. (The example config names its traces relative to the repository, where tests run.)
#[test]
fn a_trace_prompt_plans_one_level_of_its_requests() {
    let replay = |extra: &[&str]| {
        plan_in(
            concat!(env!("CARGO_MANIFEST_DIR"), "/examples/traces/replay.yml"),
            &[&["--prompt", "mooncake"], extra].concat(),
        )
    };
    let p = replay(&[]).unwrap();
    assert_eq!(p.load().amount, Amount::Requests(40));
    assert_eq!(planned(&p).len(), 1);
    assert_eq!(planned(&p)[0].concurrency, 1000);
    let rate = planned(&p)[0].rate.unwrap();
    assert_eq!(rate, 3.356, "39 gaps over 11.621 s, to four digits");
    assert_eq!(
        planned(&replay(&["--concurrency", "8"]).unwrap())[0].concurrency,
        8
    );
    for (flag, named) in [
        (&["--rate", "5"][..], "--rate does not apply"),
        (
            &["--requests-per-level", "3"],
            "--requests-per-level does not apply",
        ),
        (&["--warmup", "2"], "--warmup does not apply"),
        (
            &["--concurrency", "1,2"],
            "several --concurrency values does not apply",
        ),
        (&["--burstiness", "0.5"], "--burstiness does not apply"),
        (&["--prompt", "azure"], "--prompt with several prompts"),
    ] {
        let e = usage(replay(flag));
        assert!(
            e.contains("a trace prompt replays its requests at their own instants")
                && e.contains(named),
            "{flag:?}: {e}"
        );
    }
}

/// Issue 39 item 3: two invocations of one config are two runs with two ids (their series,
/// stored rows and request ids stay apart); the shards of one run agree on theirs without
/// talking, through `--start-at`; shards without it or `--run-id` are refused.
#[test]
fn separate_runs_get_their_own_ids_and_shards_share_one() {
    let base = ["--concurrency", "2", "--requests-per-level", "1"];
    let id = |extra: &[&str]| plan_with(&base, extra).expect("plan").part().run_id.clone();
    let (a, b) = (id(&[]), id(&[]));
    assert_ne!(a, b, "two runs of one config");
    assert_eq!((a.len(), b.len()), (16, 16));
    let sharded = [
        "--concurrency",
        "2",
        "--duration-per-level",
        "1s",
        "--start-at",
        "2026-12-01T12:00:00Z",
    ];
    let shard = |i: &str| {
        plan_with(&sharded, &["--shard", i])
            .expect("plan")
            .part()
            .run_id
            .clone()
    };
    assert_eq!(shard("0/2"), shard("1/2"), "the shards of one run");
    let later = plan_with(
        &["--concurrency", "2", "--duration-per-level", "1s"],
        &["--start-at", "2026-12-01T13:00:00Z", "--shard", "0/2"],
    )
    .expect("plan")
    .part()
    .run_id
    .clone();
    assert_ne!(later, shard("0/2"), "another start is another run");
    assert_eq!(id(&["--run-id", "nightly-7"]), "nightly-7");
    let m = usage(plan_with(&base, &["--shard", "0/2"]));
    assert!(m.contains("--start-at") && m.contains("--run-id"), "{m}");
    assert_eq!(
        plan_with(&base, &["--shard", "1/2", "--run-id", "r"])
            .expect("plan")
            .part()
            .run_id,
        "r"
    );
}

/// The plan of `tokenprobe bench <args>` with no config file.
fn plan_flags(args: &[&str]) -> Result<BenchPlan, BenchError> {
    let mut argv = vec!["bench"];
    argv.extend_from_slice(args);
    Cmd::try_parse_from(argv)
        .map_err(|e| BenchError::Usage(e.to_string()))?
        .bench
        .plan()
}

/// `bench --base-url URL --models A,B` needs no config: the flags are one target (named after
/// its host) with those models and one prompt, checked by the config's rules; a prompt text is
/// one message, whatever commas it holds; each model may have its own server's metrics.
#[test]
fn bench_from_flags_alone() {
    let p = plan_flags(&[
        "--base-url",
        "http://127.0.0.1:4000/v1",
        "--models",
        "smollm2,gemma3",
        "--prompt",
        "Say hello, then stop.",
        "--max-tokens",
        "16",
        "--timeout-first-token",
        "7s",
        "--server-metrics",
        "smollm2=http://127.0.0.1:8081/metrics",
        "--server-metrics",
        "gemma3=http://127.0.0.1:8082/metrics",
        "--requests-per-level",
        "4",
    ])
    .expect("plan");
    let names: Vec<String> = p
        .sent()
        .models()
        .iter()
        .map(crate::bench::BenchModel::name)
        .collect();
    assert_eq!(names, ["127.0.0.1/smollm2", "127.0.0.1/gemma3"]);
    assert_eq!(p.sent().spec().max_tokens, Some(16));
    let crate::workload::Workload::Messages(m) = &p.sent().spec().prompt.workload else {
        panic!("{:?}", p.sent().spec().prompt.workload)
    };
    assert_eq!(m[0].content, "Say hello, then stop.");
    assert!(
        p.sent()
            .models()
            .iter()
            .all(|m| m.timeouts.first_token == Duration::from_secs(7))
    );
    let urls: Vec<Vec<&str>> = p
        .watch()
        .server
        .endpoints
        .iter()
        .map(|e| e.iter().map(|e| e.url.as_str()).collect())
        .collect();
    assert_eq!(
        urls,
        [
            ["http://127.0.0.1:8081/metrics"],
            ["http://127.0.0.1:8082/metrics"]
        ]
    );
    assert_eq!(
        p.schedule().most_levels(),
        planned(&p).len(),
        "levels are added only when asked"
    );
    // Without --models, or with a config file beside, or a flag of its own with a config.
    let m = usage(plan_flags(&[
        "--base-url",
        "http://h/v1",
        "--requests-per-level",
        "1",
    ]));
    assert!(m.contains("--models"), "{m}");
    let m = usage(plan_flags(&[
        "--base-url",
        "http://h/v1",
        "--models",
        "a",
        "--prompt",
        "x",
        "--prompt",
        "y",
        "--requests-per-level",
        "1",
    ]));
    assert!(m.contains("--prompt is given twice"), "{m}");
    let m = usage(plan(&["--header", "X-A=1", "--requests-per-level", "1"]));
    assert!(
        m.contains("--header describes a target given as flags"),
        "{m}"
    );
    let m = usage(plan_flags(&[
        "--base-url",
        "ftp://h/v1",
        "--models",
        "a",
        "--requests-per-level",
        "1",
    ]));
    assert!(m.starts_with("invalid flags: --base-url"), "{m}");
}

/// `--find-capacity` without a level length runs each level in parts of 10 s, on while its
/// decision is unclear, at most 12 parts; with a length given, 3 more runs at most.
#[test]
fn the_capacity_search_chooses_its_levels_length() {
    let base = [
        "--find-capacity",
        "--slo",
        "ttft=2s",
        "--concurrency",
        "1,8",
    ];
    let p = plan(&base).expect("plan");
    assert_eq!(p.load().amount, Amount::Duration(Duration::from_secs(10)));
    assert_eq!(p.schedule().extension().map(|e| e.most), Some(11));
    let p = plan_with(&base, &["--requests-per-level", "20"]).expect("plan");
    assert_eq!(p.schedule().extension().map(|e| e.most), Some(3));
    let p = plan_with(&base, &["--capacity-extend", "5"]).expect("plan");
    assert_eq!(p.schedule().extension().map(|e| e.most), Some(5));
}

/// Issue 41: the start line and the progress count the levels a series may run: a search's are
/// not its two bounds but the most its doubling and bisection may take (1 to 64 streams: 12); a
/// fixed sweep's are its own, and the knee's added ones when asked for.
#[test]
fn the_progress_counts_the_levels_each_series_may_run() {
    let base = ["--requests-per-level", "60", "--concurrency", "1,64"];
    let p = plan_with(&base, &["--find-capacity", "--slo", "ttft=2s"]).expect("plan");
    assert_eq!(
        p.schedule().planned(),
        None,
        "the search's levels are its own"
    );
    assert_eq!(
        p.schedule().words(),
        "a capacity search from 1 to 64 concurrent streams, up to 12 levels"
    );
    assert_eq!(p.progress_units(), 60 * 12);
    let p = plan(&base).expect("plan");
    assert_eq!(
        (p.schedule().words(), p.progress_units()),
        ("2 levels".to_owned(), 60 * 2)
    );
    let p = plan_with(&base, &["--knee-levels", "3"]).expect("plan");
    assert_eq!(
        (p.schedule().words(), p.progress_units()),
        (
            "2 levels, up to 3 more to place the knee".to_owned(),
            60 * 5
        )
    );
}
