//! The registry's tests: recording, removal, sorting and encoding.
use super::*;
use crate::measure::Measurement;
use crate::protocol::EventMeaning;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn job() -> JobLabels {
    JobLabels {
        target: "local".into(),
        model: "m".into(),
        prompt: "hello".into(),
    }
}

fn info(job: JobLabels) -> JobInfo {
    JobInfo {
        job,
        api: "openai-chat".into(),
        connection: "new".into(),
        nonce: "false".into(),
        stream: "true".into(),
        workload: "messages".into(),
    }
}

/// A conversation job has TTFT by turn (first, later), pre-created at 0; other jobs have none.
#[test]
fn conversation_jobs_have_ttft_by_turn() {
    let m = Metrics::new(&Buckets::default());
    let conv = m.register_job(
        JobInfo {
            workload: "conversation".into(),
            ..info(job())
        },
        Histograms::ALL,
    );
    let plain = JobLabels {
        prompt: "plain".into(),
        ..job()
    };
    let _other = m.register_job(info(plain), Histograms::ALL);
    let count = |m: &Metrics, turn: &str| {
        let line = format!(
            "tokenprobe_conversation_time_to_first_token_seconds_count{{target=\"local\",model=\"m\",prompt=\"hello\",turn=\"{turn}\"}} "
        );
        let text = m.encode_text().unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(line.as_str()).map(str::to_owned))
            .unwrap_or_else(|| panic!("no {line} in {text}"))
    };
    assert_eq!(
        (count(&m, "first"), count(&m, "later")),
        ("0".into(), "0".into())
    );
    let mut r = success();
    for turn in [1, 2, 3, 1] {
        r.turn = Some(turn);
        conv.record(&r, SystemTime::now());
    }
    assert_eq!(
        (count(&m, "first"), count(&m, "later")),
        ("2".into(), "2".into())
    );
    let text = m.encode_text().unwrap();
    assert!(!text.contains("prompt=\"plain\",turn="), "{text}");
    m.remove_job(&job());
    assert!(!m.encode_text().unwrap().contains("turn=\"first\""));
}

#[test]
fn every_error_type_exists_at_zero_after_registration() {
    let m = Metrics::new(&Buckets::default());
    let _s = m.register_job(info(job()), Histograms::ALL);
    let text = m.encode_text().unwrap();
    for e in ErrorType::ALL {
        let line = format!(
            "tokenprobe_probe_errors_total{{target=\"local\",model=\"m\",prompt=\"hello\",error_type=\"{}\"}} 0",
            e.as_str()
        );
        assert!(text.contains(&line), "missing {line}\n{text}");
    }
    assert!(text.contains("tokenprobe_build_info{version="));
    assert!(text.contains("# TYPE tokenprobe_time_to_first_token_seconds histogram"));
    let om = m.encode_openmetrics().unwrap();
    assert!(om.ends_with("# EOF\n"));
    m.remove_job(&job());
    assert!(!m.encode_text().unwrap().contains("target=\"local\""));
}

#[test]
fn location_labels_every_series_of_every_format() {
    let m = Metrics::with_location(&Buckets::default(), Some("eu-west-1"));
    let _s = m.register_job(info(job()), Histograms::ALL);
    m.reload_result(true, std::time::SystemTime::now());
    for text in [m.encode_text().unwrap(), m.encode_openmetrics().unwrap()] {
        let samples: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .collect();
        assert!(samples.len() > 50, "{text}");
        for l in samples {
            assert!(l.contains("location=\"eu-west-1\""), "no location: {l}");
            assert_eq!(l.matches("location=").count(), 1, "{l}");
        }
    }
    // The protobuf format too: every series of every family, once.
    let families = decode_protobuf(&m.encode_protobuf().unwrap());
    let series: Vec<_> = families.iter().flat_map(|f| &f.metric).collect();
    assert!(series.len() > 20, "{families:?}");
    for s in series {
        let loc: Vec<_> = s.label.iter().filter(|l| l.name == "location").collect();
        assert_eq!(loc.len(), 1, "{s:?}");
        assert_eq!(loc[0].value, "eu-west-1");
    }
    let plain = Metrics::new(&Buckets::default());
    let _s = plain.register_job(info(job()), Histograms::ALL);
    assert!(!plain.encode_text().unwrap().contains("location="));
}

#[test]
fn success_feeds_histograms_and_failure_only_failure_series() {
    let m = Metrics::new(&Buckets::default());
    let t0 = Instant::now();
    let mut meas = Measurement::new(t0);
    let tok = EventMeaning {
        token: true,
        output: true,
        ..EventMeaning::default()
    };
    meas.event(t0 + Duration::from_millis(400), &tok);
    meas.event(t0 + Duration::from_millis(425), &tok);
    meas.event(
        t0 + Duration::from_millis(430),
        &EventMeaning {
            terminal: true,
            ..EventMeaning::default()
        },
    );
    let s = m.register_job(info(job()), Histograms::ALL);
    s.record(&meas.finish(), SystemTime::now());
    let mut bad = Measurement::new(t0);
    bad.fail(ErrorType::Auth, t0 + Duration::from_millis(60), "401");
    s.record(&bad.finish(), SystemTime::now());
    let text = m.encode_text().unwrap();
    let l = "target=\"local\",model=\"m\",prompt=\"hello\"";
    assert!(
        text.contains(&format!(
            "tokenprobe_time_to_first_token_seconds_count{{{l}}} 1"
        )),
        "{text}"
    );
    // 0.4 s: above the 0.3 s bound, within the 0.5 s one.
    assert!(text.contains(&format!(
        "tokenprobe_time_to_first_token_seconds_bucket{{{l},le=\"0.3\"}} 0"
    )));
    assert!(text.contains(&format!(
        "tokenprobe_time_to_first_token_seconds_bucket{{{l},le=\"0.5\"}} 1"
    )));
    assert!(text.contains(&format!("tokenprobe_probes_total{{{l}}} 2")));
    assert!(text.contains(&format!(
        "tokenprobe_probe_errors_total{{{l},error_type=\"auth\"}} 1"
    )));
    assert!(text.contains(&format!(
        "tokenprobe_failed_probe_duration_seconds_count{{{l}}} 1"
    )));
    assert!(text.contains(&format!("tokenprobe_output_tokens_total{{{l}}} 2")));
    assert!(text.contains(&format!("tokenprobe_last_probe_success{{{l}}} 0")));
}

#[test]
fn a_whole_answer_observes_e2e_and_no_per_token_histogram() {
    let m = Metrics::new(&Buckets::default());
    let t0 = Instant::now();
    let mut meas = Measurement::new(t0);
    meas.non_stream();
    meas.headers(t0 + Duration::from_millis(300), 200);
    meas.answer(
        t0 + Duration::from_millis(301),
        EventMeaning {
            token: true,
            output: true,
            finish: true,
            usage_output: Some(7),
            ..EventMeaning::default()
        },
    );
    let s = m.register_job(
        JobInfo {
            stream: "false".into(),
            ..info(job())
        },
        Histograms::ALL,
    );
    s.record(&meas.finish(), SystemTime::now());
    let text = m.encode_text().unwrap();
    let l = "target=\"local\",model=\"m\",prompt=\"hello\"";
    for (family, n) in [
        ("request_duration_seconds", 1),
        ("time_to_headers_seconds", 1),
        ("time_to_first_token_seconds", 0),
        ("time_to_first_output_token_seconds", 0),
        ("time_per_output_token_seconds", 0),
        ("inter_chunk_latency_seconds", 0),
    ] {
        let want = format!("tokenprobe_{family}_count{{{l}}} {n}");
        assert!(text.contains(&want), "{want}\n{text}");
    }
    assert!(text.contains(&format!("tokenprobe_output_tokens_total{{{l}}} 7")));
    assert!(text.contains(&format!(
            "tokenprobe_job_info{{{l},api=\"openai-chat\",connection=\"new\",nonce=\"false\",stream=\"false\",workload=\"messages\"}} 1"
        )));
}

/// Issue 42 item 1: the cached input and reasoning tokens of successes are counted per job,
/// whose series exist once an answer says them (a server that never does costs no series); an
/// answer that does not say adds nothing, a failure's are not counted; a removed job's go.
#[test]
fn cached_and_reasoning_tokens_are_counted_per_job() {
    let m = Metrics::new(&Buckets::default());
    let s = m.register_job(info(job()), Histograms::ALL);
    let l = "target=\"local\",model=\"m\",prompt=\"hello\"";
    s.record(&success(), SystemTime::now());
    let text = m.encode_text().unwrap();
    assert!(
        !text.contains("tokenprobe_cached_input_tokens_total{")
            && !text.contains("tokenprobe_reasoning_tokens_total{"),
        "{text}"
    );
    let said = |cached, reasoning| ProbeResult {
        input_tokens: Some(600),
        cached_input_tokens: cached,
        reasoning_tokens: reasoning,
        ..success()
    };
    s.record(&said(Some(512), Some(30)), SystemTime::now());
    s.record(&said(None, Some(2)), SystemTime::now());
    s.record(&said(Some(64), None), SystemTime::now());
    let mut failed = Measurement::new(Instant::now());
    failed.event(
        Instant::now(),
        &EventMeaning {
            usage_cached_input: Some(1000),
            ..EventMeaning::default()
        },
    );
    s.record(&failed.finish(), SystemTime::now());
    let text = m.encode_text().unwrap();
    for (family, n) in [
        ("input_tokens_total", 1800),
        ("cached_input_tokens_total", 576),
        ("reasoning_tokens_total", 32),
    ] {
        let want = format!("tokenprobe_{family}{{{l}}} {n}");
        assert!(text.contains(&want), "{want}\n{text}");
    }
    m.remove_job(&job());
    let text = m.encode_text().unwrap();
    assert!(
        !text.contains("tokenprobe_cached_input_tokens_total{"),
        "{text}"
    );
}

fn success() -> ProbeResult {
    let t0 = Instant::now();
    let mut meas = Measurement::new(t0);
    let tok = EventMeaning {
        token: true,
        output: true,
        ..EventMeaning::default()
    };
    meas.event(t0 + Duration::from_millis(200), &tok);
    meas.event(
        t0 + Duration::from_millis(210),
        &EventMeaning {
            terminal: true,
            ..EventMeaning::default()
        },
    );
    meas.finish()
}

/// Issue 9 item 11: a probe of a job that a reload removed while it ran records nothing (it
/// used to re-create 215 of the job's series, `probes_total` restarting at 1).
#[test]
fn a_removed_job_records_nothing() {
    let m = Metrics::new(&Buckets::default());
    let s = m.register_job(info(job()), Histograms::ALL);
    m.remove_job(&job());
    s.record(&success(), SystemTime::now());
    s.skipped(SkipReason::Overlap);
    let text = m.encode_text().unwrap();
    assert!(!text.contains("target=\"local\""), "{text}");
    assert_eq!(m.last_result(&job()), None);
    assert_eq!(s.last_result(), None);
}

/// Lines of the exposition that carry the job's labels.
fn job_lines(m: &Metrics) -> Vec<String> {
    m.encode_text()
        .unwrap()
        .lines()
        .filter(|l| l.contains("target=\"local\""))
        .map(str::to_owned)
        .collect()
}

/// Issue 10 item 5: a job removed and added again (two reloads) while a probe of the removed
/// one was in flight gets fresh series at 0; the old probe's series handle feeds nothing.
#[test]
fn a_readded_job_is_not_fed_by_a_probe_of_its_removed_self() {
    let m = Metrics::new(&Buckets::default());
    let old = m.register_job(info(job()), Histograms::ALL);
    m.remove_job(&job());
    let new = m.register_job(info(job()), Histograms::ALL);
    old.record(&success(), SystemTime::now());
    old.skipped(SkipReason::Overlap);
    let lines = job_lines(&m);
    let l = "target=\"local\",model=\"m\",prompt=\"hello\"";
    assert!(
        lines.contains(&format!("tokenprobe_probes_total{{{l}}} 0")),
        "{lines:#?}"
    );
    assert!(lines.contains(&format!(
        "tokenprobe_probes_skipped_total{{{l},reason=\"overlap\"}} 0"
    )));
    assert_eq!(m.last_result(&job()), None);
    new.record(&success(), SystemTime::now());
    assert!(job_lines(&m).contains(&format!("tokenprobe_probes_total{{{l}}} 1")));
}

/// A reload that changes a job's settings but not its labels keeps its series (counters go
/// on) and its last result; only `tokenprobe_job_info` follows the new settings. Removing it
/// then deletes every series registration created, the new `job_info` included.
#[test]
fn a_changed_job_keeps_its_series_and_its_info_follows() {
    let m = Metrics::new(&Buckets::default());
    let before = m.register_job(info(job()), Histograms::ALL);
    let at = SystemTime::now();
    before.record(&success(), at);
    let registered = job_lines(&m).len();
    let reuse = JobInfo {
        connection: "reuse".into(),
        ..info(job())
    };
    let after = m.register_job(reuse, Histograms::ALL);
    assert!(Arc::ptr_eq(&before, &after));
    let lines = job_lines(&m);
    assert_eq!(lines.len(), registered, "{lines:#?}");
    let l = "target=\"local\",model=\"m\",prompt=\"hello\"";
    assert!(lines.contains(&format!("tokenprobe_probes_total{{{l}}} 1")));
    let infos: Vec<&String> = lines
        .iter()
        .filter(|x| x.starts_with("tokenprobe_job_info"))
        .collect();
    assert_eq!(infos.len(), 1, "{infos:?}");
    assert!(infos[0].contains("connection=\"reuse\""), "{infos:?}");
    assert_eq!(m.last_result(&job()).map(|r| r.at), Some(at));
    m.remove_job(&job());
    assert_eq!(job_lines(&m), Vec::<String>::new());
}

#[test]
fn the_last_result_is_kept_per_job() {
    let m = Metrics::new(&Buckets::default());
    let s = m.register_job(info(job()), Histograms::ALL);
    assert_eq!(m.last_result(&job()), None);
    let at = SystemTime::now();
    s.record(&success(), at);
    let last = m.last_result(&job()).unwrap();
    assert_eq!(last.error_type, None);
    assert_eq!(last.at, at);
    assert!((last.ttft_s.unwrap() - 0.2).abs() < 1e-9);
}

/// Issue 8: series come out sorted by labels, the same on every encode, whatever the order
/// jobs were registered in (prometheus-client encodes from a hash map).
#[test]
fn series_are_sorted_by_labels() {
    let m = Metrics::new(&Buckets::default());
    let names = ["m", "c", "x", "a", "q", "b", "z", "k"];
    for n in names {
        let j = JobLabels {
            target: n.into(),
            model: "m".into(),
            prompt: "p".into(),
        };
        m.register_job(info(j), Histograms::ALL)
            .record(&success(), SystemTime::now());
    }
    let text = m.encode_text().unwrap();
    let targets = |prefix: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .map(|l| l.split('"').nth(1).unwrap().to_owned())
            .collect()
    };
    let mut sorted = names.to_vec();
    sorted.sort_unstable();
    assert_eq!(targets("tokenprobe_probes_total{"), sorted);
    // A histogram's samples stay together, buckets in order, per series.
    let ttft: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tokenprobe_time_to_first_token_seconds"))
        .collect();
    let per_series = ttft.len() / names.len();
    for (i, chunk) in ttft.chunks(per_series).enumerate() {
        assert!(
            chunk
                .iter()
                .all(|l| l.contains(&format!("target=\"{}\"", sorted[i]))),
            "{chunk:?}"
        );
        let les: Vec<f64> = chunk
            .iter()
            .filter_map(|l| l.split("le=\"").nth(1))
            .map(|v| {
                v.split('"')
                    .next()
                    .unwrap()
                    .parse::<f64>()
                    .unwrap_or(f64::INFINITY)
            })
            .collect();
        assert!(les.windows(2).all(|w| w[0] < w[1]), "{les:?}");
    }
    // OpenMetrics writes `le` first: each series' samples still stay in one run, and the
    // runs of a family are sorted (strict parsers reject an interleaved histogram).
    let om = m.encode_openmetrics().unwrap();
    assert_eq!(om.matches("# EOF").count(), 1);
    let om_ttft: Vec<&str> = om
        .lines()
        .filter(|l| l.starts_with("tokenprobe_time_to_first_token_seconds"))
        .collect();
    for (i, chunk) in om_ttft.chunks(per_series).enumerate() {
        assert!(
            chunk
                .iter()
                .all(|l| l.contains(&format!("target=\"{}\"", sorted[i]))),
            "{chunk:?}"
        );
    }
    for _ in 0..3 {
        assert_eq!(m.encode_text().unwrap(), text);
    }
}

#[test]
fn skip_help_names_every_reason_and_internal_errors_start_at_zero() {
    let m = Metrics::new(&Buckets::default());
    let _s = m.register_job(info(job()), Histograms::ALL);
    let text = m.encode_text().unwrap();
    let help = text
        .lines()
        .find(|l| l.starts_with("# HELP tokenprobe_probes_skipped_total"))
        .unwrap();
    for r in SkipReason::ALL {
        assert!(help.contains(r.as_str()), "{help}");
    }
    assert!(text.contains("tokenprobe_internal_errors_total{reason=\"fd_exhausted\"} 0"));
    m.internal_error(InternalReason::FdExhausted);
    assert!(
        m.encode_text()
            .unwrap()
            .contains("tokenprobe_internal_errors_total{reason=\"fd_exhausted\"} 1")
    );
}

/// Issue 25 item 4: the quotas an answer states become gauges by kind; a job whose answers state
/// none has no such series; the last answer's values win; a removed job's go with it.
#[test]
fn rate_limit_headroom_becomes_gauges_by_kind() {
    use crate::ratelimit::{Kind, QuotaState};
    let m = Metrics::new(&Buckets::default());
    let s = m.register_job(info(job()), Histograms::ALL);
    s.record(&success(), SystemTime::now());
    assert!(
        !m.encode_text().unwrap().contains("tokenprobe_ratelimit"),
        "no series before an answer states a quota"
    );
    let mut r = success();
    r.rate_limits = vec![
        QuotaState {
            kind: Kind::Requests,
            limit: Some(60.0),
            remaining: Some(59.0),
            reset_s: Some(1.0),
            left_out: Vec::new(),
        },
        QuotaState {
            kind: Kind::Tokens,
            limit: None,
            remaining: Some(149_984.0),
            reset_s: None,
            left_out: Vec::new(),
        },
    ];
    s.record(&r, SystemTime::now());
    r.rate_limits[0].remaining = Some(58.0);
    s.record(&r, SystemTime::now());
    let lines = job_lines(&m);
    let l = r#"target="local",model="m",prompt="hello""#;
    for want in [
        format!("tokenprobe_ratelimit_limit{{{l},kind=\"requests\"}} 60.0"),
        format!("tokenprobe_ratelimit_remaining{{{l},kind=\"requests\"}} 58.0"),
        format!("tokenprobe_ratelimit_reset_seconds{{{l},kind=\"requests\"}} 1.0"),
        format!("tokenprobe_ratelimit_remaining{{{l},kind=\"tokens\"}} 149984.0"),
    ] {
        assert!(lines.contains(&want), "{want} not in {lines:#?}");
    }
    assert!(
        !lines
            .iter()
            .any(|x| x.starts_with("tokenprobe_ratelimit_limit") && x.contains("tokens")),
        "a value never stated has no series"
    );
    m.remove_job(&job());
    assert!(!m.encode_text().unwrap().contains("tokenprobe_ratelimit_"));
}

/// Issue 39: what an answer's rate-limit headers state that is not a quota (a limit of 1e308 or
/// 1.8e19, a reset 1e21 s away, `remaining` above its `limit`, `-0`) never reaches a gauge.
#[test]
fn implausible_rate_limits_are_not_exported() {
    let m = Metrics::new(&Buckets::default());
    let s = m.register_job(info(job()), Histograms::ALL);
    let mut r = success();
    r.rate_limits = crate::ratelimit::read(
        &[
            ("x-ratelimit-limit-requests", "1e308"),
            ("x-ratelimit-remaining-requests", "-0"),
            ("x-ratelimit-reset-requests", "1e21"),
            ("x-ratelimit-limit-tokens", "100"),
            ("x-ratelimit-remaining-tokens", "300"),
            ("x-ratelimit-reset-tokens", "-0"),
            (
                "anthropic-ratelimit-input-tokens-limit",
                "18446744073709551615",
            ),
        ],
        SystemTime::now(),
    );
    s.record(&r, SystemTime::now());
    let lines = job_lines(&m);
    let gauges: Vec<&String> = lines
        .iter()
        .filter(|x| x.starts_with("tokenprobe_ratelimit_") && !x.contains("_total"))
        .collect();
    let l = r#"target="local",model="m",prompt="hello""#;
    assert_eq!(
        gauges,
        [
            &format!("tokenprobe_ratelimit_remaining{{{l},kind=\"requests\"}} 0.0"),
            &format!("tokenprobe_ratelimit_reset_seconds{{{l},kind=\"tokens\"}} 0.0"),
        ]
    );
    // What was left out is counted, by kind: the requests' limit and reset, the tokens' pair
    // (once), the input tokens' limit.
    for (kind, n) in [("input_tokens", 1), ("requests", 2), ("tokens", 1)] {
        let want = format!("tokenprobe_ratelimit_invalid_values_total{{{l},kind=\"{kind}\"}} {n}");
        assert!(lines.contains(&want), "{want} not in {lines:#?}");
    }
    m.remove_job(&job());
    assert!(!m.encode_text().unwrap().contains("tokenprobe_ratelimit_"));
}

/// The series of one job, by family (a histogram's buckets, `_sum` and `_count` in its family).
fn series_by_family(m: &Metrics) -> BTreeMap<String, usize> {
    let text = m.encode_text().unwrap();
    let mut by = BTreeMap::new();
    for l in text.lines().filter(|l| l.contains("prompt=\"hello\"")) {
        let name = l.split(['{', ' ']).next().unwrap_or_default();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        *by.entry(family.to_owned()).or_insert(0) += 1;
    }
    by
}

/// Issue 26 item 6: a job's default series come to 101 (the alerts' histograms and the counters);
/// `histograms:` adds or drops families, and a reload that changes it relays the job's series.
#[test]
fn a_job_exports_the_chosen_histograms_and_101_series_by_default() {
    let m = Metrics::new(&Buckets::default());
    let s = m.register_job(info(job()), Histograms::default());
    s.record(&success(), SystemTime::now());
    let by = series_by_family(&m);
    assert_eq!(by.values().sum::<usize>(), 101, "{by:#?}");
    for (family, n) in [
        ("tokenprobe_time_to_first_token_seconds", 19),
        ("tokenprobe_time_per_output_token_seconds", 13),
        ("tokenprobe_decode_tokens_per_second", 14),
        ("tokenprobe_request_duration_seconds", 14),
        ("tokenprobe_probe_errors_total", ErrorType::ALL.len()),
    ] {
        assert_eq!(by.get(family), Some(&n), "{family}: {by:#?}");
    }
    let text = m.encode_text().unwrap();
    // The bounds the shipped alerts compare at are exact buckets.
    assert!(text.contains("tokenprobe_time_to_first_token_seconds_bucket{target=\"local\",model=\"m\",prompt=\"hello\",le=\"2\"}"), "{text}");
    assert!(text.contains("tokenprobe_decode_tokens_per_second_bucket{target=\"local\",model=\"m\",prompt=\"hello\",le=\"30\"}"), "{text}");
    assert!(!by.contains_key("tokenprobe_time_to_first_output_token_seconds"));
    assert!(!by.contains_key("tokenprobe_connection_phase_seconds"));

    // Asking for TTFO and the connection phases adds them; dropping TPOT drops it.
    use HistogramFamily as F;
    let more = Histograms::of([
        F::TimeToFirstToken,
        F::TimeToFirstOutputToken,
        F::ConnectionPhase,
    ]);
    let again = m.register_job(info(job()), more);
    assert!(!Arc::ptr_eq(&s, &again), "a new layout is a new series set");
    s.record(&success(), SystemTime::now());
    let by = series_by_family(&m);
    assert_eq!(
        by.get("tokenprobe_time_to_first_output_token_seconds"),
        Some(&19)
    );
    assert_eq!(
        by.get("tokenprobe_connection_phase_seconds"),
        Some(&(3 * 16))
    );
    assert!(
        !by.contains_key("tokenprobe_time_per_output_token_seconds"),
        "{by:#?}"
    );
    assert_eq!(by.get("tokenprobe_probes_total"), Some(&1));
    assert!(
        m.encode_text()
            .unwrap()
            .contains("tokenprobe_probes_total{target=\"local\",model=\"m\",prompt=\"hello\"} 0"),
        "the old series set records nothing once replaced"
    );

    // None at all: the counters alone.
    let _bare = m.register_job(info(job()), Histograms::of([]));
    assert_eq!(series_by_family(&m).values().sum::<usize>(), 101 - 60);
}

/// The families of a protobuf exposition, decoded as a scraper decodes them.
fn decode_protobuf(
    body: &[u8],
) -> Vec<prometheus_client::encoding::prometheus_protobuf::prometheus_data_model::MetricFamily> {
    use prometheus_client::encoding::prometheus_protobuf::prometheus_data_model::MetricFamily;
    use prost::Message as _;
    let mut buf = body;
    let mut out = Vec::new();
    while !buf.is_empty() {
        out.push(MetricFamily::decode_length_delimited(&mut buf).unwrap());
    }
    out
}

/// Issue 26 item 6: with `buckets.native`, the protobuf exposition carries each histogram's
/// native buckets (schema 3) beside its classic ones; the text formats are unchanged; without it,
/// the protobuf histograms are classic only.
#[test]
fn native_histograms_ride_the_protobuf_exposition_beside_the_classic_buckets() {
    let native = Metrics::new(&Buckets {
        native: true,
        ..Buckets::default()
    });
    let classic = Metrics::new(&Buckets::default());
    let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    for m in [&native, &classic] {
        let s = m.register_job(info(job()), Histograms::default());
        s.record(&success(), at);
    }
    assert_eq!(
        native.encode_text().unwrap(),
        classic.encode_text().unwrap()
    );
    assert_eq!(
        native.encode_openmetrics().unwrap(),
        classic.encode_openmetrics().unwrap()
    );
    let ttft = |m: &Metrics| {
        let families = decode_protobuf(&m.encode_protobuf().unwrap());
        let f = families
            .into_iter()
            .find(|f| f.name == "tokenprobe_time_to_first_token_seconds")
            .unwrap();
        assert_eq!(f.metric.len(), 1);
        let labels: Vec<(String, String)> = f.metric[0]
            .label
            .iter()
            .map(|l| (l.name.clone(), l.value.clone()))
            .collect();
        assert_eq!(
            labels,
            [("target", "local"), ("model", "m"), ("prompt", "hello")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        f.metric[0].histogram.clone().unwrap()
    };
    let h = ttft(&native);
    assert_eq!((h.sample_count, h.sample_sum), (1, 0.2));
    assert_eq!(h.bucket.len(), 17, "the 16 classic bounds and +Inf stay");
    assert_eq!(h.schema, i32::from(NATIVE_SCHEMA));
    assert!(h.zero_threshold > 0.0 && h.zero_count == 0);
    // 0.2 s lies in bucket -18 of schema 3: (2^(-19/8), 2^(-18/8)] = (0.1931, 0.2102].
    assert!(2f64.powf(-19.0 / 8.0) < 0.2 && 0.2 <= 2f64.powf(-18.0 / 8.0));
    let span: Vec<(i32, u32)> = h
        .positive_span
        .iter()
        .map(|s| (s.offset, s.length))
        .collect();
    assert_eq!((span, h.positive_delta.clone()), (vec![(-18, 1)], vec![1]));
    assert!(h.negative_span.is_empty());

    let c = ttft(&classic);
    assert_eq!((c.sample_count, c.bucket.len()), (1, 17));
    assert!(c.positive_span.is_empty() && c.zero_threshold == 0.0 && c.schema == 0);

    // Every family of the text format is in the protobuf one, with the same series count.
    let names: Vec<String> = decode_protobuf(&classic.encode_protobuf().unwrap())
        .into_iter()
        .filter(|f| !f.metric.is_empty())
        .map(|f| f.name)
        .collect();
    let text = classic.encode_text().unwrap();
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let name = line.split(' ').nth(2).unwrap();
        let name = match line.ends_with(" counter") {
            true => format!("{name}_total"),
            false => name.to_owned(),
        };
        assert!(
            names.contains(&name) || !text.contains(&format!("\n{name}")),
            "{name} missing from {names:?}"
        );
    }
}

/// A native histogram stays within [`NATIVE_MAX_BUCKETS`] whatever is observed (a hostile
/// server's decode rates span any range): the resolution halves instead, and no observation is
/// lost.
#[test]
fn a_native_histogram_keeps_its_bucket_bound_over_any_range() {
    let m = Metrics::new(&Buckets {
        native: true,
        ..Buckets::default()
    });
    let s = m.register_job(info(job()), Histograms::default());
    let mut r = success();
    let n: u32 = 2_000;
    for i in 0..n {
        // 1 ns to 1e9 s, spread over 18 decades.
        r.ttft_s = Some(10f64.powf(-9.0 + 18.0 * f64::from(i) / f64::from(n)));
        s.record(&r, UNIX_EPOCH);
    }
    let f = decode_protobuf(&m.encode_protobuf().unwrap())
        .into_iter()
        .find(|f| f.name == "tokenprobe_time_to_first_token_seconds")
        .unwrap();
    let h = f.metric[0].histogram.clone().unwrap();
    let buckets: u32 = h.positive_span.iter().map(|s| s.length).sum();
    assert!(
        buckets as usize <= NATIVE_MAX_BUCKETS,
        "{buckets} buckets at schema {}",
        h.schema
    );
    assert!(
        h.schema < i32::from(NATIVE_SCHEMA),
        "the resolution was halved"
    );
    let mut count: i64 = 0;
    let mut total: i64 = 0;
    for d in &h.positive_delta {
        count += d;
        total += count;
    }
    assert_eq!(u64::try_from(total).unwrap() + h.zero_count, h.sample_count);
    assert_eq!(h.sample_count, u64::from(n));
}

/// Issue 43 items 2 to 4, shared case 36: what answered as series. The info series follows the
/// served model and fingerprint (one series per job at a time), their changes are counted, a
/// mismatch is counted by the model that answered; a hostile server naming a new model on every
/// probe adds at most 8 label values per job (the rest is `other`, counted); the audits, their
/// last ratio, the checks and drifts have their series; a removed job leaves none.
#[test]
fn what_answered_is_bounded_series() {
    use crate::measure::answered::MAX_LABEL_VALUES;
    let m = Metrics::new(&Buckets::default());
    let s = m.register_job(info(job()), Histograms::of([]));
    let before = job_lines(&m).len();
    let answered = |served: &str, fp: &str, mismatch: bool| {
        let mut r = success();
        r.served_model = Some(served.into());
        r.system_fingerprint = Some(fp.into());
        if mismatch {
            r.flags.insert(Flag::ModelMismatch);
        }
        r
    };
    let value = |m: &Metrics, series: &str| -> Option<String> {
        let text = m.encode_text().unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{series} ")).map(str::to_owned))
    };
    let j = "target=\"local\",model=\"m\",prompt=\"hello\"";
    s.record(&answered("m", "fp_a", false), SystemTime::now());
    s.record(&answered("m", "fp_a", false), SystemTime::now());
    assert_eq!(
        value(
            &m,
            &format!(
                "tokenprobe_served_model_info{{{j},served_model=\"m\",system_fingerprint=\"fp_a\"}}"
            )
        ),
        Some("1".into())
    );
    for field in ["served_model", "system_fingerprint"] {
        assert_eq!(
            value(
                &m,
                &format!("tokenprobe_served_changes_total{{{j},field=\"{field}\"}}")
            ),
            Some("0".into())
        );
    }
    // Substituted: a new info series in place of the old, the change counted, the mismatch
    // counted by the model that answered.
    s.record(&answered("cheap", "fp_a", true), SystemTime::now());
    let text = m.encode_text().unwrap();
    assert_eq!(
        text.matches("tokenprobe_served_model_info{").count(),
        1,
        "{text}"
    );
    assert!(text.contains(&format!(
        "tokenprobe_served_model_info{{{j},served_model=\"cheap\",system_fingerprint=\"fp_a\"}} 1"
    )));
    assert_eq!(
        value(
            &m,
            &format!("tokenprobe_served_changes_total{{{j},field=\"served_model\"}}")
        ),
        Some("1".into())
    );
    assert_eq!(
        value(
            &m,
            &format!("tokenprobe_model_mismatch_total{{{j},served_model=\"cheap\"}}")
        ),
        Some("1".into())
    );
    // Hostile: a new name on every probe, control characters and 10 KiB included.
    for i in 0..200 {
        let name = format!(
            "model-{i}-{}\u{fffd}",
            "x".repeat(if i % 2 == 0 { 10_000 } else { 1 })
        );
        s.record(
            &answered(&name, &format!("fp-{i}"), true),
            SystemTime::now(),
        );
    }
    let text = m.encode_text().unwrap();
    let mismatch_series = text.matches("tokenprobe_model_mismatch_total{").count();
    assert!(mismatch_series <= MAX_LABEL_VALUES + 1, "{mismatch_series}");
    assert_eq!(
        value(
            &m,
            &format!("tokenprobe_model_mismatch_total{{{j},served_model=\"other\"}}")
        ),
        Some((200 - (MAX_LABEL_VALUES - 2)).to_string()),
        "8 kept: m, cheap and the first 6 hostile names"
    );
    assert!(
        value(
            &m,
            &format!("tokenprobe_unexpected_label_values_total{{{j},field=\"served_model\"}}")
        )
        .is_some_and(|v| v.parse::<u64>().unwrap() >= 194)
    );
    assert!(
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .all(|l| l.len() < 400),
        "label values are cut"
    );
    assert_eq!(
        value(
            &m,
            &format!("tokenprobe_served_changes_total{{{j},field=\"served_model\"}}")
        ),
        Some("201".into())
    );
    m.remove_job(&job());
    assert!(job_lines(&m).is_empty(), "{:?}", job_lines(&m));
    assert!(before > 0);
}

/// Issue 43 items 3 and 4: a job's usage audits (the two results an alert reads together from
/// the first) and their last ratio, its content checks and a drift by the fingerprints.
#[test]
fn audits_checks_and_drifts_are_series() {
    use crate::measure::answered::{CountedBy, Drift, KnownAnswer, UsageAudit, UsageCheck};
    let m = Metrics::new(&Buckets::default());
    let s = m.register_job(info(job()), Histograms::of([]));
    let value = |m: &Metrics, series: &str| -> Option<String> {
        let text = m.encode_text().unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{series} ")).map(str::to_owned))
    };
    let j = "target=\"local\",model=\"m\",prompt=\"hello\"";
    let mut r = success();
    r.served_model = Some("m".into());
    r.system_fingerprint = Some("fp_a".into());
    r.usage_audit = Some(UsageAudit {
        counted_by: Some(CountedBy::Events),
        output: Some(UsageCheck {
            expected: 16,
            stated: 32,
            ratio: Some(2.0),
            off: true,
            mismatch: true,
        }),
        input: None,
        not_audited: None,
        why: None,
    });
    r.expect_passed = Some(false);
    let known = |fp: &str| KnownAnswer {
        served_model: Some("m".into()),
        system_fingerprint: Some(fp.into()),
        hash: fp.into(),
    };
    r.drift = Some(Drift {
        from: known("fp_a"),
        to: known("fp_b"),
    });
    s.record(&r, SystemTime::now());
    for (series, v) in [
        (
            format!("tokenprobe_usage_audits_total{{{j},result=\"mismatch\"}}"),
            "1",
        ),
        (
            format!("tokenprobe_usage_audits_total{{{j},result=\"within\"}}"),
            "0",
        ),
        (
            format!("tokenprobe_usage_ratio{{{j},count=\"output\"}}"),
            "2.0",
        ),
        (
            format!("tokenprobe_expect_checks_total{{{j},result=\"failed\"}}"),
            "1",
        ),
        (
            format!("tokenprobe_expect_checks_total{{{j},result=\"passed\"}}"),
            "0",
        ),
        (
            format!(
                "tokenprobe_answer_drift_total{{{j},from_fingerprint=\"fp_a\",to_fingerprint=\"fp_b\"}}"
            ),
            "1",
        ),
    ] {
        assert_eq!(value(&m, &series).as_deref(), Some(v), "{series}");
    }
    m.remove_job(&job());
    assert!(job_lines(&m).is_empty(), "{:?}", job_lines(&m));
}
