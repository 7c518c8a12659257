use super::*;
use crate::measure::Measurement;
use crate::outcome::ErrorType;

/// A result with nothing measured, no error, not a stream: each test sets what it needs.
fn base() -> ProbeResult {
    ProbeResult {
        error_type: None,
        stream: false,
        ..Measurement::new(std::time::Instant::now()).finish()
    }
}

fn ok(ttft: f64, e2e: f64, gaps: &[f64], input: Option<u64>, output: u64) -> ProbeResult {
    ProbeResult {
        ttft_s: Some(ttft),
        ttfo_s: Some(ttft),
        e2e_s: Some(e2e),
        tpot_s: Some(0.005),
        chunk_gaps_s: gaps.to_vec(),
        input_tokens: input,
        output_tokens: output,
        stream: true,
        ..base()
    }
}

fn hist<'a>(ms: &'a [Metric], name: &str) -> &'a Histogram {
    match ms.iter().find(|m| m.name == name).map(|m| m.data.as_ref()) {
        Some(Some(Data::Histogram(h))) => h,
        other => panic!("{name}: {other:?}"),
    }
}

fn attr<'a>(p: &'a [KeyValue], key: &str) -> Option<&'a super::super::proto::Value> {
    p.iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

#[test]
fn a_jobs_results_fill_the_genai_instruments_with_the_advised_buckets() {
    let inst = Instruments::new();
    let job = inst.job(
        JobAttrs::new(
            "openai-chat",
            "http://10.0.0.5:8000/v1",
            "llama",
            "vllm",
            "short",
            None,
        ),
        1_000,
    );
    job.observe(&Observation::from(&ok(
        0.05,
        0.3,
        &[0.01, 0.02],
        Some(12),
        8,
    )));
    job.observe(&Observation::from(&ok(0.04, 0.16, &[0.08], None, 4)));
    let failed = ProbeResult {
        error_type: Some(ErrorType::TimeoutFirstToken),
        failure_s: Some(30.0),
        ..base()
    };
    job.observe(&Observation::from(&failed));
    let ms = inst.metrics(9_000);
    let d = hist(&ms, "gen_ai.client.operation.duration");
    assert_eq!(d.aggregation_temporality, CUMULATIVE);
    assert_eq!(
        d.data_points.len(),
        2,
        "successes, and the timeout with error.type"
    );
    let ok_point = &d.data_points[0];
    assert_eq!((ok_point.count, ok_point.sum), (2, Some(0.3 + 0.16)));
    assert_eq!(ok_point.explicit_bounds, DURATION_BUCKETS);
    // 0.16 is in the bucket whose upper bound is 0.16 (bounds are inclusive).
    assert_eq!(ok_point.bucket_counts[4], 1);
    assert_eq!(ok_point.bucket_counts[5], 1);
    assert_eq!(
        (ok_point.start_time_unix_nano, ok_point.time_unix_nano),
        (1_000, 9_000)
    );
    assert_eq!((ok_point.min, ok_point.max), (Some(0.16), Some(0.3)));
    let t = &d.data_points[1];
    assert_eq!(
        attr(&t.attributes, "error.type"),
        Some(&super::super::proto::Value::String(
            "timeout_first_token".into()
        ))
    );
    assert_eq!((t.count, t.sum), (1, Some(30.0)));
    for (key, want) in [
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.provider.name", "openai"),
        ("gen_ai.request.model", "llama"),
        ("server.address", "10.0.0.5"),
        ("tokenprobe.target", "vllm"),
        ("tokenprobe.prompt", "short"),
    ] {
        assert_eq!(
            attr(&ok_point.attributes, key),
            Some(&super::super::proto::Value::String(want.into())),
            "{key}"
        );
    }
    assert_eq!(
        attr(&ok_point.attributes, "server.port"),
        Some(&super::super::proto::Value::Int(8000))
    );
    let ttfc = hist(&ms, "gen_ai.client.operation.time_to_first_chunk");
    assert_eq!(ttfc.data_points[0].count, 2);
    let tpoc = hist(&ms, "gen_ai.client.operation.time_per_output_chunk");
    assert_eq!(tpoc.data_points[0].count, 3, "one per gap");
    let usage = hist(&ms, "gen_ai.client.token.usage");
    let by_type: Vec<(String, u64, Option<f64>)> = usage
        .data_points
        .iter()
        .map(|p| match attr(&p.attributes, "gen_ai.token.type") {
            Some(super::super::proto::Value::String(s)) => (s.clone(), p.count, p.sum),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        by_type,
        [
            ("input".to_owned(), 1, Some(12.0)),
            ("output".to_owned(), 2, Some(12.0))
        ]
    );
    assert_eq!(usage.data_points[0].explicit_bounds, TOKEN_BUCKETS);
    let probes = match ms
        .iter()
        .find(|m| m.name == "tokenprobe.probes")
        .and_then(|m| m.data.as_ref())
    {
        Some(Data::Sum(s)) => s,
        other => panic!("{other:?}"),
    };
    assert!(probes.is_monotonic);
    let counts: Vec<i64> = probes.data_points.iter().map(|p| p.as_int).collect();
    assert_eq!(counts, [2, 1]);
}

#[test]
fn a_removed_job_leaves_no_series_and_records_nothing() {
    let inst = Instruments::new();
    let a = inst.job(
        JobAttrs::new(
            "anthropic-messages",
            "https://api.anthropic.com",
            "c",
            "t",
            "p",
            Some("eu"),
        ),
        0,
    );
    let b = inst.job(
        JobAttrs::new("openai-completions", "http://h/v1", "m", "t2", "p", None),
        0,
    );
    a.observe(&Observation::from(&ok(0.1, 0.2, &[], None, 1)));
    b.observe(&Observation::from(&ok(0.1, 0.2, &[], None, 1)));
    assert_eq!(inst.len(), 2);
    a.remove();
    a.observe(&Observation::from(&ok(0.1, 0.2, &[], None, 1)));
    let ms = inst.metrics(1);
    let d = hist(&ms, "gen_ai.client.operation.duration");
    assert_eq!(d.data_points.len(), 1);
    assert_eq!(
        attr(&d.data_points[0].attributes, "gen_ai.operation.name"),
        Some(&super::super::proto::Value::String(
            "text_completion".into()
        ))
    );
    // A non-streaming probe has no chunk metrics.
    let plain = ProbeResult {
        stream: false,
        ..ok(0.1, 0.2, &[0.1], None, 1)
    };
    let inst = Instruments::new();
    inst.job(
        JobAttrs::new("openai-chat", "http://h/v1", "m", "t", "p", None),
        0,
    )
    .observe(&Observation::from(&plain));
    let ms = inst.metrics(1);
    assert!(!ms.iter().any(|m| m.name.contains("chunk")));
    assert!(Instruments::new().metrics(1).is_empty());
}

/// Issue 42 item 1: the cached and reasoning tokens under their GenAI names, for successes whose
/// answer said them; issue 43 item 1: what answered rides on the duration's exemplar, never on a
/// series' attributes, so a model name that changes every probe adds no series.
#[test]
fn cache_reads_reasoning_and_what_answered() {
    let inst = Instruments::new();
    let job = inst.job(
        JobAttrs::new("openai-chat", "http://h:1/v1", "m", "t", "p", None),
        1,
    );
    let said = |model: &str, id: &str, cached, reasoning| ProbeResult {
        cached_input_tokens: cached,
        reasoning_tokens: reasoning,
        served_model: Some(model.into()),
        response_id: Some(id.into()),
        ..ok(0.05, 0.3, &[], Some(600), 8)
    };
    job.observe_at(
        &Observation::from(&said("m-a", "r1", Some(512), Some(3))),
        10,
    );
    job.observe_at(&Observation::from(&said("m-b", "r2", None, Some(5))), 20);
    job.observe_at(&Observation::from(&said("m-c", "r3", Some(0), None)), 30);
    let failed = ProbeResult {
        error_type: Some(ErrorType::ServerError),
        failure_s: Some(0.2),
        served_model: Some("m-d".into()),
        ..base()
    };
    job.observe_at(&Observation::from(&failed), 40);
    let ms = inst.metrics(50);
    let cached = hist(&ms, "gen_ai.usage.cache_read.input_tokens");
    assert_eq!(cached.data_points.len(), 1);
    let p = &cached.data_points[0];
    assert_eq!((p.count, p.sum), (2, Some(512.0)));
    assert_eq!(p.explicit_bounds, TOKEN_BUCKETS);
    let r = &hist(&ms, "gen_ai.usage.reasoning.output_tokens").data_points[0];
    assert_eq!((r.count, r.sum), (2, Some(8.0)));
    let d = hist(&ms, "gen_ai.client.operation.duration");
    assert_eq!(
        d.data_points.len(),
        2,
        "success and failure: no series per model"
    );
    for p in &d.data_points {
        assert!(attr(&p.attributes, "gen_ai.response.model").is_none());
        assert_eq!(p.exemplars.len(), 1);
    }
    let ex = &d.data_points[0].exemplars[0];
    assert_eq!((ex.time_unix_nano, ex.as_double), (30, Some(0.3)));
    let s = |k| match attr(&ex.filtered_attributes, k) {
        Some(super::super::proto::Value::String(s)) => s.as_str(),
        other => panic!("{k}: {other:?}"),
    };
    assert_eq!(
        (s("gen_ai.response.model"), s("gen_ai.response.id")),
        ("m-c", "r3")
    );
    let fail = &d.data_points[1].exemplars[0];
    assert_eq!((fail.time_unix_nano, fail.as_double), (40, Some(0.2)));
}
