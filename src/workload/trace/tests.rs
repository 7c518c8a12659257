use super::*;

fn moon(lines: &[&str]) -> Result<Recording, String> {
    parse(&lines.join("\n"), TraceFormat::Mooncake, None)
}

#[test]
fn mooncake_lines_become_requests_at_their_instants() {
    let r = moon(&[
        r#"{"timestamp": 1000, "input_length": 600, "output_length": 20, "hash_ids": [7, 8]}"#,
        "",
        r#"{"timestamp": 1250, "input_length": 100, "output_length": 5, "hash_ids": [7]}"#,
        r#"{"timestamp": 1250, "input_length": 3, "output_length": 1}"#,
    ])
    .unwrap();
    let at: Vec<f64> = r.requests.iter().map(|q| q.at_s).collect();
    assert_eq!(at, [0.0, 0.25, 0.25]);
    assert_eq!(r.requests[0].hash_ids, [7, 8]);
    assert_eq!(
        (r.requests[1].input_tokens, r.requests[1].output_tokens),
        (100, 5)
    );
    assert!(r.requests[2].hash_ids.is_empty());
    assert_eq!(r.span_s, 0.25);
}

#[test]
fn bad_mooncake_lines_are_refused_with_their_line_and_reason() {
    let ok = r#"{"timestamp": 10, "input_length": 5, "output_length": 3}"#;
    let cases: &[(&str, &str)] = &[
        (
            r#"{"timestamp": 5, "input_length": 5, "output_length": 3}"#,
            "line 2: its timestamp is 0.005 s before the line before it",
        ),
        (
            r#"{"timestamp": 20, "output_length": 3}"#,
            "line 2: input_length is missing",
        ),
        (
            r#"{"timestamp": 20, "input_length": -4, "output_length": 3}"#,
            "line 2: input_length -4 is negative",
        ),
        (
            r#"{"timestamp": 20, "input_length": 4.5, "output_length": 3}"#,
            "line 2: input_length 4.5 is not a whole number",
        ),
        (
            r#"{"timestamp": 20, "input_length": 0, "output_length": 3}"#,
            "line 2: input_length 0 is out of range",
        ),
        (
            r#"{"timestamp": 20, "input_length": 5, "output_length": 2000000}"#,
            "line 2: output_length 2000000 is out of range",
        ),
        (
            r#"{"timestamp": -1, "input_length": 5, "output_length": 3}"#,
            "line 2: timestamp -1 is negative",
        ),
        (
            r#"{"input_length": 5, "output_length": 3}"#,
            "line 2: timestamp is missing",
        ),
        (
            r#"{"timestamp": "x", "input_length": 5, "output_length": 3}"#,
            "line 2: timestamp is not a number",
        ),
        (
            r#"{"timestamp": 20, "input_length": 5, "output_length": 3, "hash_ids": [1, -2]}"#,
            "line 2: hash_ids[1] is not a whole number",
        ),
        (
            r#"{"timestamp": 20, "input_length": 5, "output_length": 3, "hash_ids": 4}"#,
            "line 2: hash_ids is not a list",
        ),
        (r#"{"timestamp": 20, "input_le"#, "line 2: not JSON"),
        ("[1, 2]", "line 2: a JSON object per line is expected"),
    ];
    for (line, want) in cases {
        let e = moon(&[ok, line]).unwrap_err();
        assert!(e.starts_with(want), "{line}: {e}");
    }
    assert_eq!(moon(&["", "  "]).unwrap_err(), "holds no request");
}

#[test]
fn a_secret_in_a_bad_line_is_not_quoted() {
    let e = moon(&[r#"{"timestamp": "sk-live-SECRET", "input_length": 5}"#]).unwrap_err();
    assert!(!e.contains("SECRET"), "{e}");
    let e = moon(&["sk-live-SECRET"]).unwrap_err();
    assert!(!e.contains("SECRET"), "{e}");
}

#[test]
fn azure_rows_are_read_by_their_header_names_and_timestamps() {
    let text = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                2023-11-16 18:15:46.6805900,374,44\n\
                2023-11-16 18:15:50.1805900,396,109\n\
                2023-11-16 18:16:46.6805900,879,0\n";
    let r = parse(text, TraceFormat::Azure, None).unwrap();
    assert_eq!(r.requests.len(), 2);
    assert!((r.requests[1].at_s - 3.5).abs() < 1e-9);
    assert_eq!(
        (r.requests[1].input_tokens, r.requests[1].output_tokens),
        (396, 109)
    );
    assert_eq!(
        r.no_output, 1,
        "a row asking no output is skipped and counted"
    );
    // The 2024 traces' offsets, and columns in another order.
    let text = "ContextTokens,GeneratedTokens,TIMESTAMP\n\
                10,2,2024-05-10 00:00:00.009930+00:00\n\
                20,3,2024-05-10 00:00:01.009930+00:00\n";
    let r = parse(text, TraceFormat::Azure, None).unwrap();
    assert!((r.requests[1].at_s - 1.0).abs() < 1e-9);
    let bad = [
        (
            "TIMESTAMP,ContextTokens\n",
            "line 1: no GeneratedTokens column",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n",
            "line 2: TIMESTAMP is not a date and time",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1\n",
            "line 2: 2 fields where the header has 3",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,,1\n",
            "line 2: ContextTokens is missing",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,x,1\n",
            "line 2: ContextTokens is not a number",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,4,1\n2023-11-16 18:15:45,4,1\n",
            "line 3: its timestamp is 1.000 s before",
        ),
    ];
    for (text, want) in bad {
        let e = parse(text, TraceFormat::Azure, None).unwrap_err();
        assert!(e.starts_with(want), "{text:?}: {e}");
    }
}

#[test]
fn burstgpt_keeps_one_models_rows_and_counts_what_it_skips() {
    let text = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                5,ChatGPT,472,18,490,Conversation log\n\
                6,GPT-4,1087,0,1087,Conversation log\n\
                7,GPT-4,200,30,230,API log\n\
                9,ChatGPT,100,0,100,API log\n\
                12,ChatGPT,50,10,60,API log\n";
    let all = parse(text, TraceFormat::Burstgpt, None).unwrap();
    assert_eq!((all.requests.len(), all.no_output), (3, 2));
    let chat = parse(text, TraceFormat::Burstgpt, Some("ChatGPT")).unwrap();
    let at: Vec<f64> = chat.requests.iter().map(|q| q.at_s).collect();
    assert_eq!(at, [0.0, 7.0]);
    assert_eq!((chat.no_output, chat.other_models), (1, 2));
    assert_eq!(
        parse(text, TraceFormat::Burstgpt, Some("Claude")).unwrap_err(),
        "holds no request of model \"Claude\""
    );
}

#[test]
fn a_window_keeps_its_part_counted_from_its_start() {
    let lines: Vec<String> = (0..10)
        .map(|i| {
            format!(
                r#"{{"timestamp": {}, "input_length": 5, "output_length": 3}}"#,
                i * 1000
            )
        })
        .collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let w = window(moon(&lines).unwrap(), 2.5, Some(4.0)).unwrap();
    let at: Vec<f64> = w.requests.iter().map(|q| q.at_s).collect();
    assert_eq!(at, [0.5, 1.5, 2.5, 3.5]);
    assert_eq!(w.span_s, 9.0, "the whole trace's span is kept");
    let e = window(moon(&lines).unwrap(), 20.0, None).unwrap_err();
    assert!(
        e.contains("holds no request (the trace spans 9.000 s)"),
        "{e}"
    );
}

fn trace_of(rec: Recording, time_scale: f64) -> Trace {
    Trace {
        file: "t.jsonl".into(),
        format: TraceFormat::Mooncake,
        model: None,
        time_scale,
        start_s: 0.0,
        duration_s: None,
        seed: Some(3),
        recording: Arc::new(OnceLock::from(rec)),
    }
}

#[test]
fn time_scale_stretches_the_send_instants() {
    let rec = moon(&[
        r#"{"timestamp": 0, "input_length": 5, "output_length": 3}"#,
        r#"{"timestamp": 2000, "input_length": 5, "output_length": 3}"#,
        r#"{"timestamp": 4000, "input_length": 5, "output_length": 3}"#,
    ])
    .unwrap();
    let t = trace_of(rec, 0.5);
    assert_eq!(t.offsets(), [0.0, 1.0, 2.0]);
    assert_eq!(t.mean_rate(), 1.0);
    let r = t.replayed();
    assert_eq!((r.requests, r.replay_span_s, r.trace_span_s), (3, 2.0, 4.0));
}

#[test]
fn equal_block_ids_are_equal_text_and_others_differ() {
    let rec = moon(&[
        r#"{"timestamp": 0, "input_length": 1200, "output_length": 3, "hash_ids": [1, 2, 3]}"#,
        r#"{"timestamp": 1, "input_length": 1500, "output_length": 9, "hash_ids": [1, 2, 4]}"#,
        r#"{"timestamp": 2, "input_length": 1200, "output_length": 3, "hash_ids": [5, 2, 3]}"#,
        r#"{"timestamp": 3, "input_length": 1200, "output_length": 3}"#,
    ])
    .unwrap();
    let t = trace_of(rec, 1.0);
    let tokens = TokenModel {
        overhead: 8.0,
        per_word: 1.25,
    };
    let text = |i: u64| t.draw(i, &tokens).messages[0].content.clone();
    let words = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
    let (a, b, c, d) = (
        words(&text(0)),
        words(&text(1)),
        words(&text(2)),
        words(&text(3)),
    );
    let block = tokens.words_for(BLOCK_TOKENS);
    assert_eq!(block, 410);
    // Whole prompts of the asked length, as the token model counts it.
    assert_eq!(a.len(), tokens.words_for_prompt(1200));
    assert_eq!(b.len(), tokens.words_for_prompt(1500));
    // Two blocks in common, then apart.
    assert_eq!(a[..2 * block], b[..2 * block]);
    assert_ne!(a[2 * block..2 * block + 20], b[2 * block..2 * block + 20]);
    // Another first block: nothing in common at the start, though later ids match.
    assert_ne!(a[..20], c[..20]);
    assert_eq!(a[block..2 * block], c[block..2 * block]);
    // No ids: its own words.
    assert_ne!(a[..20], d[..20]);
    let content = t.draw(1, &tokens);
    assert_eq!(
        (
            content.max_tokens,
            content.requested_input_tokens,
            content.requested_output_tokens
        ),
        (Some(9), Some(1500), Some(9))
    );
    // The same request draws the same text (serve probes the trace in turn: seq wraps).
    assert_eq!(text(1), text(5));
}

#[test]
fn a_trace_too_long_is_refused_at_its_line() {
    let mut text = String::new();
    for i in 0..=MAX_REQUESTS {
        text.push_str(&format!(
            "{{\"timestamp\":{i},\"input_length\":1,\"output_length\":1}}\n"
        ));
    }
    let e = parse(&text, TraceFormat::Mooncake, None).unwrap_err();
    assert!(
        e.starts_with(&format!(
            "line {}: more than {MAX_REQUESTS} requests",
            MAX_REQUESTS + 1
        )),
        "{e}"
    );
}

/// Issue 39: timestamps far apart (past the replay clock's range, or millions of years) are
/// refused at load with their line, and the longest span itself is accepted.
#[test]
fn a_trace_spanning_more_than_a_year_is_refused_with_its_line() {
    let past = "its timestamp is more than 366 days after the first row's";
    let burst = |t: &str| {
        format!(
            "Timestamp,Model,Request tokens,Response tokens\n0,ChatGPT,10,5\n{t},ChatGPT,10,5\n"
        )
    };
    for t in ["1e19", "1e300"] {
        let e = parse(&burst(t), TraceFormat::Burstgpt, None).unwrap_err();
        assert!(e.starts_with(&format!("line 3: {past}")), "{t}: {e}");
    }
    let line =
        |ms: &str| format!(r#"{{"timestamp": {ms}, "input_length": 10, "output_length": 5}}"#);
    for ms in ["1e22", "1e18"] {
        let e = moon(&[&line("0"), &line(ms)]).unwrap_err();
        assert!(e.starts_with(&format!("line 2: {past}")), "{ms}: {e}");
    }
    let azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                 0001-01-01 00:00:00.0,10,5\n\
                 9999-12-31 23:59:59.0,10,5\n";
    let e = parse(azure, TraceFormat::Azure, None).unwrap_err();
    assert!(e.starts_with(&format!("line 3: {past}")), "{e}");
    // A row asking no output counts too: the span is the file's.
    let e = parse(
        &burst("1e19").replace(",5\n", ",0\n"),
        TraceFormat::Burstgpt,
        None,
    )
    .unwrap_err();
    assert!(e.starts_with(&format!("line 3: {past}")), "{e}");
    // 366 days to the millisecond is the longest trace; a millisecond more is refused.
    let longest = moon(&[&line("0"), &line("31622400000")]).unwrap();
    assert_eq!(longest.span_s, 31_622_400.0);
    assert_eq!(MAX_SPAN.as_secs_f64(), 31_622_400.0);
    let e = moon(&[&line("0"), &line("5"), &line("31622400001")]).unwrap_err();
    assert!(e.starts_with(&format!("line 3: {past}")), "{e}");
}
