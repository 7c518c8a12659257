//! The config's unit tests.

use super::*;
use std::time::Duration;

const GOOD: &str = r#"
defaults:
  interval: 30s
  timeouts: {connect: 5s, first_token: 30s, idle: 30s, total: 120s}
prompts:
  - name: hello
    messages: [{role: user, content: "Say hello"}]
    max_tokens: 64
  - name: long
    messages: [{role: user, content: "Write a poem"}]
targets:
  - name: local
    base_url: http://127.0.0.1:8080/v1/
    api: openai-chat
    api_key: ${TOKENPROBE_TEST_KEY_SET}
    models: [smollm2, other]
    prompts: [hello]
    interval: 15s
  - name: claude
    base_url: https://api.example.com
    api: anthropic-messages
    models: [c]
    cron: "*/30 * * * * *"
    timeouts: {first_token: 10s}
"#;

fn with_env<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: tests in this module only read this variable; set once, same value.
    unsafe { std::env::set_var("TOKENPROBE_TEST_KEY_SET", "sk-test") };
    f()
}

#[test]
fn good_config_expands_to_jobs() {
    let c = with_env(|| Config::parse(GOOD)).unwrap();
    let names: Vec<String> = c.jobs.iter().map(Job::name).collect();
    assert_eq!(
        names,
        [
            "local/smollm2/hello",
            "local/other/hello",
            "claude/c/hello",
            "claude/c/long"
        ]
    );
    let j = &c.jobs[0];
    assert_eq!(j.target.base_url, "http://127.0.0.1:8080/v1");
    assert!(matches!(j.schedule, Schedule::Interval(d) if d == Duration::from_secs(15)));
    assert_eq!(
        futures_util::FutureExt::now_or_never(j.target.api_key.as_ref().unwrap().load())
            .unwrap()
            .unwrap()
            .expose(),
        "sk-test"
    );
    let claude = &c.jobs[2];
    assert!(matches!(claude.schedule, Schedule::Cron(_)));
    assert_eq!(claude.timeouts.first_token, Duration::from_secs(10));
    assert_eq!(claude.timeouts.total, Duration::from_secs(120));
    assert_eq!(c.buckets, Buckets::default());
}

#[test]
fn unknown_key_is_a_syntax_error_with_location() {
    let e = Config::parse("targets:\n  - name: a\n    base_url: http://x\n    modelz: [m]\n")
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ConfigError::Syntax(_)));
    assert!(msg.contains("modelz"), "{msg}");
    assert!(msg.contains('4'), "line number expected: {msg}");
}

#[test]
fn all_semantic_errors_at_once_with_paths_and_lines() {
    let text = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - name: a\n    base_url: ftp://x\n    models: [m]\n    interval: soon\n    prompts: [nope]\n    api_key: ${TOKENPROBE_SURELY_UNSET_VAR}\n";
    let Err(ConfigError::Invalid(issues)) = Config::parse(text) else {
        panic!("expected Invalid");
    };
    let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
    assert!(paths.contains(&"targets[0].base_url"), "{paths:?}");
    assert!(paths.contains(&"targets[0].interval"), "{paths:?}");
    assert!(paths.contains(&"targets[0].prompts[0]"), "{paths:?}");
    assert!(paths.contains(&"targets[0].api_key"), "{paths:?}");
    let interval = issues
        .iter()
        .find(|i| i.path == "targets[0].interval")
        .unwrap();
    assert_eq!(interval.line, 8);
    let shown = ConfigError::Invalid(issues).to_string();
    assert!(shown.contains("TOKENPROBE_SURELY_UNSET_VAR"));
}

#[test]
fn secrets_never_print() {
    let k = KeySource::Inline(Secret::new("sk-very-secret"));
    assert!(!format!("{k:?}").contains("sk-very"));
    let c = with_env(|| Config::parse(GOOD)).unwrap();
    assert!(!format!("{c:?}").contains("sk-test"));
    let text = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - name: a\n    base_url: http://u:pw-debug-1@h/v1\n    models: [m]\n    headers: {X-Key: hdr-debug-1}\n    query: {code: q-debug-1, api-version: '1'}\n    proxy: http://pu:proxy-debug-1@p:3128\n";
    let shown = format!("{:?}", Config::parse(text).unwrap());
    for leak in ["pw-debug", "hdr-debug", "q-debug", "proxy-debug"] {
        assert!(!shown.contains(leak), "{leak}: {shown}");
    }
    assert!(shown.contains("\"api-version\", \"1\""), "{shown}");
}

#[test]
fn a_change_of_a_hidden_value_still_changes_the_job() {
    let at = |h: &str, q: &str, u: &str| {
        let text = format!(
            "prompts:\n  - name: p\n    messages: [{{role: user, content: hi}}]\ntargets:\n  - name: a\n    base_url: http://{u}@h/v1\n    models: [m]\n    headers: {{X-Key: {h}}}\n    query: {{code: {q}}}\n"
        );
        Config::parse(&text).unwrap().jobs[0].clone()
    };
    let base = at("h1", "q1", "u:p1");
    assert_ne!(base, at("h2", "q1", "u:p1"), "header value");
    assert_ne!(base, at("h1", "q2", "u:p1"), "query value");
    assert_ne!(base, at("h1", "q1", "u:p2"), "userinfo");
    assert_eq!(base, at("h1", "q1", "u:p1"));
}

#[test]
fn bounds_literal_dollars_and_jobless_configs() {
    let base = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - name: a\n    base_url: http://x\n    models: [m]\n";
    let bad = |extra: &str| match Config::parse(&format!("{base}{extra}")) {
        Err(ConfigError::Invalid(i)) => i
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join("; "),
        other => panic!("expected Invalid for {extra:?}, got {other:?}"),
    };
    assert!(bad("    interval: 1ns\n").contains("between"));
    assert!(bad("    timeouts: {total: 500000000000y}\n").contains("between"));
    assert!(bad("    cron: '0 0 0 30 2 *'\n").contains("never fires"));
    let c = Config::parse(&format!("{base}    api_key: 'sk-ab$cd$'\n")).unwrap();
    let key =
        futures_util::FutureExt::now_or_never(c.jobs[0].target.api_key.as_ref().unwrap().load())
            .unwrap()
            .unwrap();
    assert_eq!(key.expose(), "sk-ab$cd$");
    let e = Config::parse(
        "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - {name: a, base_url: 'http://x/v1?k=1', models: [m]}\n",
    );
    assert!(matches!(e, Err(ConfigError::Invalid(_))));
    let e = Config::parse(
        "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - {name: a, base_url: 'http://x', models: [m], prompts: []}\n",
    );
    assert!(format!("{e:?}").contains("no job"));
}

#[test]
fn bad_buckets_and_both_schedules() {
    let text = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - name: a\n    base_url: http://x\n    models: [m]\n    interval: 1s\n    cron: '* * * * *'\nbuckets:\n  time_to_first_token: [1, 0.5]\n";
    let Err(ConfigError::Invalid(issues)) = Config::parse(text) else {
        panic!("expected Invalid");
    };
    assert_eq!(issues.len(), 2, "{issues:?}");
}

/// `histograms:` under `defaults:` holds for every job, a target's own overrides it, and a family
/// that does not exist is refused with the ones that do.
#[test]
fn histograms_come_from_the_target_else_the_defaults() {
    use HistogramFamily as F;
    let text = "defaults:\n  histograms: [time_to_first_token, connection_phase]\nprompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - {name: a, base_url: 'http://x', models: [m]}\n  - {name: b, base_url: 'http://x', models: [m], histograms: []}\n";
    let c = Config::parse(text).unwrap();
    let (a, b) = (c.jobs[0].histograms, c.jobs[1].histograms);
    assert_eq!(a, Histograms::of([F::TimeToFirstToken, F::ConnectionPhase]));
    assert!(!a.contains(F::TimePerOutputToken));
    assert_eq!(b, Histograms::of([]));
    let plain = Config::parse(&text.replace(
        "  histograms: [time_to_first_token, connection_phase]\n",
        "",
    ))
    .unwrap();
    assert_eq!(plain.jobs[0].histograms, Histograms::default());
    for f in HistogramFamily::ALL {
        assert_eq!(
            Histograms::default().contains(f),
            matches!(
                f,
                F::TimeToFirstToken
                    | F::TimePerOutputToken
                    | F::DecodeTokensPerSecond
                    | F::RequestDuration
                    | F::ConversationTimeToFirstToken
                    | F::ColdStartTimeToFirstToken
            ),
            "{f:?}"
        );
        assert!(Histograms::ALL.contains(f));
    }
    let e = Config::parse(&text.replace("connection_phase", "ttft")).unwrap_err();
    let e = e.to_string();
    assert!(
        e.contains("ttft") && e.contains("time_to_first_token"),
        "{e}"
    );
}

const BASE: &str = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - name: a\n    base_url: http://x\n    models: [m]\n";

/// The problems `load` (what `serve` and `check-config` call) finds in `BASE` + `extra`.
fn problems(extra: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.yml");
    std::fs::write(&file, format!("{BASE}{extra}")).unwrap();
    match Config::load(&file) {
        Err(ConfigError::Invalid(i)) => i
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join("; "),
        other => panic!("expected Invalid for {extra:?}, got {other:?}"),
    }
}

#[test]
fn syntax_error_snippets_hide_every_secret() {
    let text = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\n\
                    targets:\n  - name: a\n    base_url: http://user:pw-userinfo-1@127.0.0.1:1/v1\n\
                    \x20   api_key: sk-live-abcdefghijklmnop # rotated: sk-old-zyxwvut\n\
                    \x20   headers:\n      name: hdr-secret-under-name\n      X-Custom: hdr-secret-value-1234\n\
                    \x20   query: {code: query-secret-value-99}\n\
                    \x20   extra_body: {temperature: 0}\n    models: [m]\n\
                    \x20 - {name: b, base_url: 'http://127.0.0.1:2', api_key: sk-flow-secret-5555, models: [m], \"headers\":{\"k\":\"sk-json-style-7777\"}}\n\
                    \x20 - name: c\n    base_url: http://x\n    models: [m\n    interval: 1s\n";
    let e = Config::parse(text).unwrap_err();
    let ConfigError::Syntax(se) = &e else {
        panic!("expected a syntax error, got {e:?}")
    };
    assert_eq!((se.line, se.column), (18, 13), "{se:?}");
    // Every line up to the error, as check-config could show it.
    let all = crate::redact::config_lines(text, 18).join("\n");
    for leak in [
        "pw-userinfo",
        "sk-live",
        "sk-old",
        "hdr-secret",
        "query-secret",
        "sk-flow",
        "sk-json",
    ] {
        assert!(!all.contains(leak), "{leak} shown:\n{all}");
        assert!(!e.to_string().contains(leak), "{leak} in {e}");
    }
    assert!(
        all.contains("    base_url: http://<redacted>@127.0.0.1:1/v1"),
        "{all}"
    );
    assert!(all.contains("    api_key: <redacted>"), "{all}");
    assert!(all.contains("  - {name: b, base_url: 'http://127.0.0.1:2', api_key: <redacted>, models: [m], \"headers\":{\"k\": <redacted>}}"), "{all}");
    assert!(e.to_string().contains("18 |     interval: 1s"), "{e}");
    assert!(!e.summary().contains("interval: 1s"), "{}", e.summary());
    assert!(e.summary().contains("line 18 column 13"), "{}", e.summary());
}

#[test]
fn snippets_show_metrics_urls_without_userinfo_or_query_values() {
    let text = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\n\
                targets:\n  - name: a\n    base_url: http://127.0.0.1:1/v1?api-version=1&key=q-s3cret\n\
                \x20   server_metrics: [http://u:pw-s3cret@h:9/metrics?token=t-s3cret, {url: 'http://h2/m?a=b-s3cret'}]\n\
                \x20   server_metrics_typo: 1\n    models: [m]\n";
    let all = crate::redact::config_lines(text, 8).join("\n");
    assert!(!all.contains("s3cret"), "{all}");
    assert!(
        all.contains("    server_metrics: [http://<redacted>@h:9/metrics?token=<redacted>, {url: 'http://h2/m?a=<redacted>'}]"),
        "{all}"
    );
    assert!(
        all.contains("base_url: http://127.0.0.1:1/v1?api-version=1&key=<redacted>"),
        "{all}"
    );
}

#[test]
fn a_wrong_type_names_its_key_path() {
    let e = Config::parse("prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\n    max_tokens: lots\ntargets: []\n").unwrap_err();
    let ConfigError::Syntax(se) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(se.path, "prompts[0].max_tokens");
    assert_eq!((se.line, se.column), (4, 17));
    assert!(!e.to_string().contains("<input>"), "{e}");
}

#[test]
fn a_missing_file_says_why_once() {
    let e = Config::load(Path::new("/nonexistent/tokenprobe.yml")).unwrap_err();
    let shown = format!("{:#}", anyhow::Error::new(e));
    assert_eq!(shown.matches("os error 2").count(), 1, "{shown}");
}

#[test]
fn problems_are_sorted_by_line() {
    let text = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - name: a\n    base_url: http://x\n    models: [m]\n    cron: 'nope'\n    interval: soon\n    api_key: ${TOKENPROBE_SURELY_UNSET_VAR}\n    prompts: [nope]\n";
    let Err(ConfigError::Invalid(issues)) = Config::parse(text) else {
        panic!("expected Invalid");
    };
    let lines: Vec<u64> = issues.iter().map(|i| i.line).collect();
    let mut sorted = lines.clone();
    sorted.sort_unstable();
    assert_eq!(lines, sorted, "{issues:?}");
}

#[test]
fn what_serve_rejects_check_config_rejects() {
    let empty = Config::parse(
        "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - {name: a, base_url: '', models: [m]}\n",
    );
    assert!(
        format!("{empty:?}").contains("must not be empty"),
        "{empty:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    assert!(problems(&format!("    api_key_file: {d}\n")).contains("is a directory"));
    let not_pem = dir.path().join("ca.txt");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    let p = problems(&format!("    ca_file: {}\n", not_pem.display()));
    assert!(
        p.contains("targets[0].ca_file") && p.contains("no PEM certificate"),
        "{p}"
    );
    for key in [
        "stream",
        "model",
        "messages",
        "max_tokens",
        "stream_options",
    ] {
        let p = problems(&format!("    extra_body: {{{key}: 1}}\n"));
        assert!(
            p.contains(&format!("targets[0].extra_body.{key}")),
            "{key}: {p}"
        );
    }
    let anth = "prompts:\n  - name: p\n    messages: [{role: user, content: hi}]\ntargets:\n  - {name: a, base_url: 'http://x', api: anthropic-messages, models: [m], extra_body: {system: x}}\n";
    assert!(format!("{:?}", Config::parse(anth)).contains("extra_body.system"));
    // Fields the body does not set are fine.
    assert!(
        Config::parse(&format!(
            "{BASE}    extra_body: {{temperature: 0, seed: 1}}\n"
        ))
        .is_ok()
    );
}

/// A key file is read bounded (`crate::files`: the time bound itself is tested there): a FIFO
/// is refused at once by its name, without being opened; a file over the size cap is refused.
#[cfg(unix)]
#[tokio::test(flavor = "current_thread")]
async fn key_file_reads_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("key.fifo");
    let ok = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mkfifo");
    let src = KeySource::File(fifo.clone());
    let t = std::time::Instant::now();
    // On a current-thread runtime a blocking open would hang this very test forever.
    let e = src.load().await.unwrap_err();
    assert!(
        e.ends_with("key.fifo is not a regular file (a FIFO)"),
        "{e}"
    );
    assert!(t.elapsed() < KEY_FILE_TIMEOUT, "{:?}", t.elapsed());

    let big = dir.path().join("big");
    std::fs::write(&big, vec![b'k'; KEY_FILE_MAX_BYTES as usize + 1]).unwrap();
    let e = KeySource::File(big).load().await.unwrap_err();
    assert!(e.contains("larger than 64 KiB"), "{e}");
    let good = dir.path().join("good");
    std::fs::write(&good, "  sk-file\n").unwrap();
    assert_eq!(
        KeySource::File(good).load().await.unwrap().expose(),
        "sk-file"
    );
}

/// Issue 10 item 3: `parse` touches no file; `load` checks the files a target names and reports
/// their problems with the others, in line order, as one list (and a file's problem still stands
/// in for the "no job" problem, as before the split).
#[test]
fn parse_is_pure_and_load_adds_the_file_checks_in_line_order() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let not_pem = dir.path().join("ca.txt");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    let text = format!(
        "{BASE}    api_key_file: {d}\n    ca_file: {}\n    interval: soon\n    headers: {{Accept: x}}\n",
        not_pem.display()
    );
    let shown = |e: ConfigError| e.to_string();
    let parsed = shown(Config::parse(&text).unwrap_err());
    assert_eq!(
        parsed,
        "invalid config (2 problems):\n  \
         5:11: targets[0].headers.Accept: Accept is set by tokenprobe itself (an event stream, uncompressed: docs/measurement.md); headers may only add fields\n  \
         10:15: targets[0].interval: not a duration like 30s or 1m30s (expected number at 0)"
    );
    let file = dir.path().join("c.yml");
    std::fs::write(&file, &text).unwrap();
    let loaded = shown(Config::load(&file).unwrap_err());
    assert_eq!(
        loaded,
        format!(
            "invalid config (4 problems):\n  \
             5:11: targets[0].headers.Accept: Accept is set by tokenprobe itself (an event stream, uncompressed: docs/measurement.md); headers may only add fields\n  \
             8:19: targets[0].api_key_file: {d} is a directory, not a key file\n  \
             9:14: targets[0].ca_file: cannot load ca_file {}: no PEM certificate in the file\n  \
             10:15: targets[0].interval: not a duration like 30s or 1m30s (expected number at 0)",
            not_pem.display()
        )
    );
    // A jobless config: `parse` says so; `load` names the file's problem instead, as before.
    let jobless = format!(
        "prompts:\n  - name: p\n    messages: [{{role: user, content: hi}}]\ntargets:\n  - {{name: a, base_url: 'http://x', models: [m], prompts: [], api_key_file: {d}}}\n"
    );
    assert!(shown(Config::parse(&jobless).unwrap_err()).contains("no job"));
    std::fs::write(&file, &jobless).unwrap();
    let loaded = shown(Config::load(&file).unwrap_err());
    assert_eq!(
        loaded,
        format!(
            "invalid config (1 problem):\n  5:77: targets[0].api_key_file: {d} is a directory, not a key file"
        )
    );
    // A key file that exists and a config without file references: both fine.
    let key = dir.path().join("key");
    std::fs::write(&key, "sk-x\n").unwrap();
    std::fs::write(
        &file,
        format!("{BASE}    api_key_file: {}\n", key.display()),
    )
    .unwrap();
    assert!(Config::load(&file).is_ok());
}

#[test]
fn location_is_checked_by_one_rule() {
    let with = |l: &str| format!("location: {l}\n{GOOD}");
    let c = with_env(|| Config::parse(&with("eu-west-1"))).unwrap();
    assert_eq!(c.location.as_deref(), Some("eu-west-1"));
    assert_eq!(with_env(|| Config::parse(GOOD)).unwrap().location, None);
    for ok in ["a", "gcp:us-central1", "dc_2.rack-4", &"x".repeat(63)] {
        assert_eq!(check_location(ok), Ok(()), "{ok}");
    }
    for bad in [
        "",
        "-eu",
        "eu west",
        "eu/west",
        "é",
        "\"x\"",
        &"x".repeat(64),
    ] {
        assert!(check_location(bad).is_err(), "{bad:?} accepted");
    }
    let Err(ConfigError::Invalid(issues)) = with_env(|| Config::parse(&with("'eu west'"))) else {
        panic!("a bad location must be refused");
    };
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0].path, "location");
    assert_eq!(issues[0].line, 1);
    assert!(
        !issues[0].message.contains("eu west"),
        "{}",
        issues[0].message
    );
}

#[test]
fn prices_per_target_and_model() {
    let cfg = Config::parse(&format!(
        "{BASE}    price: {{input_per_mtok: 2.5, output_per_mtok: 10}}\n    model_prices:\n      m: {{input_per_mtok: 0.15, output_per_mtok: 0.6}}\n  - name: b\n    base_url: http://y\n    models: [m, n]\n    price: {{input_per_mtok: 0, output_per_mtok: 1}}\n  - name: c\n    base_url: http://z\n    models: [m]\n"
    ))
    .unwrap();
    let t = |name: &str| {
        cfg.jobs
            .iter()
            .find(|j| j.target.name == name)
            .map(|j| j.target.clone())
            .unwrap()
    };
    let a = t("a").price_of("m").unwrap();
    assert_eq!((a.input_per_mtok, a.output_per_mtok), (0.15, 0.6));
    assert_eq!(
        t("a").price_of("other").map(|p| p.input_per_mtok),
        Some(2.5)
    );
    assert_eq!(t("b").price_of("n").map(|p| p.output_per_mtok), Some(1.0));
    assert!(t("c").price_of("m").is_none());
    // 1,000 input and 500 output tokens at 2.5 and 10 per million.
    let p = t("a").price_of("other").unwrap();
    assert!((p.cost(1000, 500) - 0.0075).abs() < 1e-15);
}

#[test]
fn bad_prices_are_named_by_key() {
    let m = problems("    price: {input_per_mtok: -1, output_per_mtok: .inf}\n");
    assert!(
        m.contains("targets[0].price.input_per_mtok: must be a non-negative number"),
        "{m}"
    );
    assert!(
        m.contains("targets[0].price.output_per_mtok: must be a non-negative number"),
        "{m}"
    );
    let m = problems("    model_prices:\n      x: {input_per_mtok: 1, output_per_mtok: 1}\n");
    assert!(
        m.contains("targets[0].model_prices.x: \"x\" is not one of the target's models"),
        "{m}"
    );
    let m = problems("    model_prices:\n      m: {input_per_mtok: .nan, output_per_mtok: 1}\n");
    assert!(
        m.contains("targets[0].model_prices.m.input_per_mtok"),
        "{m}"
    );
    // A price needs both numbers (a shape error, with its key).
    let e = Config::parse(&format!("{BASE}    price: {{input_per_mtok: 1}}\n")).unwrap_err();
    assert!(e.to_string().contains("output_per_mtok"), "{e}");
}

#[test]
fn gpus_and_their_hourly_price() {
    let cfg = Config::parse(&format!("{BASE}    gpus: 8\n    gpu_hour_price: 2.5\n")).unwrap();
    let t = &cfg.jobs[0].target;
    assert_eq!(t.gpus, Some(8));
    assert_eq!(t.gpu_hour_price, Some(crate::config::GpuHourPrice(2.5)));
    let plain = Config::parse(BASE).unwrap();
    assert_eq!(
        (
            plain.jobs[0].target.gpus,
            plain.jobs[0].target.gpu_hour_price
        ),
        (None, None)
    );
    let m = problems("    gpus: 0\n    gpu_hour_price: -1\n");
    assert!(
        m.contains("targets[0].gpus: must be a whole number of GPUs between 1 and 100000"),
        "{m}"
    );
    assert!(
        m.contains("targets[0].gpu_hour_price: must be a non-negative number"),
        "{m}"
    );
    let m = problems("    gpu_hour_price: .nan\n");
    assert!(m.contains("targets[0].gpu_hour_price"), "{m}");
}

#[test]
fn stream_and_exact_output() {
    let yaml = |prompt: &str, target: &str| {
        format!(
            "prompts:\n  - name: p\n    messages: [{{role: user, content: hi}}]\n    max_tokens: 8\n{prompt}\ntargets:\n  - name: t\n    base_url: http://127.0.0.1:1/v1\n    models: [m]\n{target}\n"
        )
    };
    let job = |prompt: &str, target: &str| {
        Config::parse(&yaml(prompt, target)).map(|c| c.jobs[0].clone())
    };
    // Defaults: streaming, nothing added for the output length.
    let j = job("", "").unwrap();
    assert!(j.stream() && j.target.stream && j.prompt.stream.is_none());
    assert_eq!(j.target.exact_output, crate::protocol::ExactOutput::None);
    // The prompt's `stream:` overrides the target's, both ways.
    assert!(!job("    stream: false", "").unwrap().stream());
    assert!(
        job("    stream: true", "    stream: false")
            .unwrap()
            .stream()
    );
    assert!(!job("", "    stream: false").unwrap().stream());
    let j = job("", "    exact_output: min_tokens").unwrap();
    assert_eq!(
        j.target.exact_output,
        crate::protocol::ExactOutput::MinTokens
    );
    // An unknown value is a shape error at its key; the same field twice is a problem at its path.
    let e = job("", "    exact_output: always").unwrap_err().to_string();
    assert!(e.contains("exact_output") || e.contains("always"), "{e}");
    let e = job(
        "",
        "    exact_output: ignore_eos\n    extra_body: {ignore_eos: false}",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("targets[0].extra_body.ignore_eos") && e.contains("exact_output"),
        "{e}"
    );
    // extra_body may still carry a field exact_output would set, when exact_output does not.
    assert!(job("", "    extra_body: {ignore_eos: true}").is_ok());
}

// -- workloads ---------------------------------------------------------------------------------

fn prompts_config(prompts: &str) -> String {
    format!(
        "prompts:\n{prompts}targets:\n  - name: t\n    base_url: http://127.0.0.1:1/v1\n    models: [m]\n"
    )
}

fn workload_problems(prompts: &str) -> Vec<String> {
    match Config::parse(&prompts_config(prompts)) {
        Err(ConfigError::Invalid(i)) => i.iter().map(ToString::to_string).collect(),
        other => panic!("expected problems, got {other:?}"),
    }
}

#[test]
fn every_prompt_kind_validates() {
    use crate::workload::{Length, Order, Workload};
    let c = Config::parse(&prompts_config(
        "  - name: isl512\n    synthetic: {input_tokens: 512, output_tokens: 128}\n\
         \x20 - name: mixed\n    synthetic:\n      input_tokens: {distribution: normal, mean: 1000, stddev: 200, min: 100, max: 4000}\n      output_tokens: {distribution: uniform, min: 64, max: 256}\n      shared_prefix_tokens: 768\n      seed: 7\n\
         \x20 - name: logn\n    synthetic: {input_tokens: {distribution: lognormal, mean: 300, stddev: 90.5}, output_tokens: {distribution: fixed, value: 8}}\n\
         \x20 - name: sharegpt\n    dataset: {file: data/conversations.json, format: sharegpt, order: random, seed: 1}\n    max_tokens: 32\n\
         \x20 - name: chat\n    conversation: {turns: 4, think_time: 2s, user_tokens: 100, output_tokens: 100}\n",
    ))
    .unwrap();
    let w: Vec<&Workload> = c.jobs.iter().map(|j| &j.prompt.workload).collect();
    let Workload::Synthetic(s) = w[0] else {
        panic!("{:?}", w[0])
    };
    assert_eq!(
        (s.input_tokens, s.output_tokens, s.seed),
        (Length::Fixed(512), Length::Fixed(128), None)
    );
    let Workload::Synthetic(s) = w[1] else {
        panic!()
    };
    assert_eq!(
        s.input_tokens,
        Length::Normal {
            mean: 1000.0,
            stddev: 200.0,
            min: 100,
            max: 4000
        }
    );
    assert_eq!(s.output_tokens, Length::Uniform { min: 64, max: 256 });
    assert_eq!((s.shared_prefix_tokens, s.seed), (768, Some(7)));
    let Workload::Synthetic(s) = w[2] else {
        panic!()
    };
    assert_eq!(
        (s.input_tokens, s.output_tokens),
        (
            Length::Lognormal {
                mean: 300.0,
                stddev: 90.5,
                min: 1,
                max: crate::workload::MAX_TOKENS
            },
            Length::Fixed(8)
        )
    );
    let Workload::Dataset(d) = w[3] else { panic!() };
    assert_eq!(
        (d.order, d.seed, c.jobs[3].prompt.max_tokens),
        (Order::Random, Some(1), Some(32))
    );
    assert!(d.entries.get().is_none(), "parse reads no file");
    let Workload::Conversation(cv) = w[4] else {
        panic!()
    };
    assert_eq!(
        (cv.turns, cv.think_time, cv.user_tokens),
        (4, Duration::from_secs(2), Length::Fixed(100))
    );
    assert_eq!(c.jobs[0].prompt.max_tokens, None);
}

#[test]
fn workload_problems_name_their_key() {
    let cases: &[(&str, &str)] = &[
        (
            "  - name: a\n",
            "prompts[0].messages: a prompt needs messages, synthetic, dataset, conversation, trace or session",
        ),
        (
            "  - name: a\n    messages: [{role: user, content: x}]\n    synthetic: {input_tokens: 5, output_tokens: 5}\n",
            "prompts[0].synthetic: a prompt is one of",
        ),
        (
            "  - name: a\n    synthetic: {output_tokens: 5}\n",
            "prompts[0].synthetic.input_tokens: input_tokens is required",
        ),
        (
            "  - name: a\n    synthetic: {input_tokens: 0, output_tokens: 5}\n",
            "prompts[0].synthetic.input_tokens: must be 1 to",
        ),
        (
            "  - name: a\n    synthetic: {input_tokens: 5, output_tokens: 5}\n    max_tokens: 9\n",
            "prompts[0].max_tokens: output_tokens is the output cap",
        ),
        (
            "  - name: a\n    synthetic: {input_tokens: 5, output_tokens: 5}\n    nonce: true\n",
            "prompts[0].nonce: synthetic filler is already different",
        ),
        (
            "  - name: a\n    synthetic: {input_tokens: 100, output_tokens: 5, shared_prefix_tokens: 100}\n",
            "prompts[0].synthetic.shared_prefix_tokens: must be less than input_tokens (100)",
        ),
        (
            "  - name: a\n    synthetic: {input_tokens: {distribution: normal, mean: 100}, output_tokens: 5}\n",
            "prompts[0].synthetic.input_tokens.stddev: normal needs stddev",
        ),
        (
            "  - name: a\n    synthetic: {input_tokens: {distribution: normal, mean: 100, stddev: -1}, output_tokens: 5}\n",
            "prompts[0].synthetic.input_tokens.stddev: must be at least 0",
        ),
        (
            "  - name: a\n    synthetic: {input_tokens: 5, output_tokens: {distribution: uniform, min: 9, max: 3}}\n",
            "prompts[0].synthetic.output_tokens.min: must not be above max",
        ),
        (
            "  - name: a\n    synthetic: {input_tokens: 5, output_tokens: {distribution: uniform, min: 1.5, max: 3}}\n",
            "prompts[0].synthetic.output_tokens.min: must be a whole number",
        ),
        (
            "  - name: a\n    synthetic: {input_tokens: {distribution: zipf, mean: 3}, output_tokens: 5}\n",
            "prompts[0].synthetic.input_tokens.distribution: unknown distribution \"zipf\"",
        ),
        (
            "  - name: a\n    synthetic: {input_tokens: {distribution: uniform, min: 1, max: 3, mean: 2}, output_tokens: 5}\n",
            "prompts[0].synthetic.input_tokens.mean: uniform has no mean",
        ),
        (
            "  - name: a\n    synthetic: {input_tokens: {distribution: fixed}, output_tokens: 5}\n",
            "prompts[0].synthetic.input_tokens.value: fixed needs value",
        ),
        (
            "  - name: a\n    conversation: {turns: 0, user_tokens: 5, output_tokens: 5}\n",
            "prompts[0].conversation.turns: must be between 1 and 100",
        ),
        (
            "  - name: a\n    conversation: {turns: 2, think_time: soon, user_tokens: 5, output_tokens: 5}\n",
            "prompts[0].conversation.think_time: not a duration",
        ),
        (
            "  - name: a\n    conversation: {turns: 2, output_tokens: 5}\n",
            "prompts[0].conversation.user_tokens: user_tokens is required",
        ),
        (
            "  - name: a\n    conversation: {turns: 4, user_tokens: {distribution: normal, mean: 100, stddev: 10}, output_tokens: 5}\n",
            "prompts[0].conversation.turns: the history can reach",
        ),
    ];
    for (prompts, want) in cases {
        let p = workload_problems(prompts);
        assert!(
            p.iter().any(|m| m.contains(want)),
            "{prompts}\nwant {want}\ngot {p:?}"
        );
        assert!(
            p.iter()
                .all(|m| m.chars().next().is_some_and(|c| c.is_ascii_digit())),
            "each has its line: {p:?}"
        );
    }
    // Shape errors (unknown keys, a wrong type) stop at the first one, with their path.
    for (prompts, want) in [
        (
            "  - name: a\n    synthetic: {input_tokens: 5, output_tokens: 5, prefix: 3}\n",
            "unknown field `prefix`",
        ),
        (
            "  - name: a\n    dataset: {file: x.json, format: csv}\n",
            "unknown variant `csv`",
        ),
        (
            "  - name: a\n    synthetic: {input_tokens: lots, output_tokens: 5}\n",
            "a whole number of tokens or",
        ),
    ] {
        match Config::parse(&prompts_config(prompts)) {
            Err(ConfigError::Syntax(e)) => assert!(e.message.contains(want), "{prompts}: {e}"),
            other => panic!("{prompts}: {other:?}"),
        }
    }
}

#[test]
fn a_dataset_is_read_at_load_and_a_bad_one_named() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("d.json");
    std::fs::write(
        &good,
        r#"[{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}]"#,
    )
    .unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "[{\"role\": \"user\", \"content\": \"a\"}]\n{\"oops\": 1}\n",
    )
    .unwrap();
    let cfg = dir.path().join("c.yml");
    let text = |file: &std::path::Path, format: &str| {
        prompts_config(&format!(
            "  - name: d\n    dataset: {{file: {}, format: {format}}}\n",
            file.display()
        ))
    };
    std::fs::write(&cfg, text(&good, "sharegpt")).unwrap();
    let c = Config::load(&cfg).unwrap();
    let crate::workload::Workload::Dataset(d) = &c.jobs[0].prompt.workload else {
        panic!()
    };
    assert_eq!(d.entries.get().map(Vec::len), Some(1));
    std::fs::write(&cfg, text(&bad, "jsonl")).unwrap();
    let e = Config::load(&cfg).unwrap_err().to_string();
    assert!(
        e.contains("prompts[0].dataset.file")
            && e.contains("bad.jsonl: line 2: not a message list"),
        "{e}"
    );
    std::fs::write(&cfg, text(&dir.path().join("none.json"), "sharegpt")).unwrap();
    let e = Config::load(&cfg).unwrap_err().to_string();
    assert!(
        e.contains("cannot read dataset") && e.contains("none.json"),
        "{e}"
    );
    // The file is read bounded: a device (or a FIFO) is refused by its name, a file past the
    // input-file cap too.
    std::fs::write(&cfg, text(std::path::Path::new("/dev/zero"), "sharegpt")).unwrap();
    let e = Config::load(&cfg).unwrap_err().to_string();
    assert!(
        e.contains("dataset /dev/zero is not a regular file (a character device)"),
        "{e}"
    );
    let big = dir.path().join("big.json");
    std::fs::write(&big, vec![b' '; (MAX_INPUT_FILE_BYTES + 1) as usize]).unwrap();
    std::fs::write(&cfg, text(&big, "sharegpt")).unwrap();
    let e = Config::load(&cfg).unwrap_err().to_string();
    assert!(e.contains("is larger than 8 MiB"), "{e}");
}

#[test]
fn a_tokenizer_is_checked_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("tokenizer.json");
    std::fs::write(&bad, "{\"not\": \"a tokenizer\"}").unwrap();
    let cfg = dir.path().join("c.yml");
    let text = |file: &std::path::Path| {
        format!(
            "prompts:\n  - name: s\n    synthetic: {{input_tokens: 64, output_tokens: 4}}\ntargets:\n  - name: t\n    base_url: http://127.0.0.1:1/v1\n    models: [m]\n    tokenizer: {}\n",
            file.display()
        )
    };
    // parse is pure: the path is kept, the file not read.
    let c = Config::parse(&text(&bad)).unwrap();
    assert_eq!(c.jobs[0].target.tokenizer.as_deref(), Some(bad.as_path()));
    // load reads and parses it (once per content).
    std::fs::write(&cfg, text(&bad)).unwrap();
    let e = Config::load(&cfg).unwrap_err().to_string();
    assert!(
        e.contains("targets[0].tokenizer") && e.contains("is not a tokenizer.json"),
        "{e}"
    );
    std::fs::write(&cfg, text(dir.path())).unwrap();
    let e = Config::load(&cfg).unwrap_err().to_string();
    assert!(
        e.contains("targets[0].tokenizer") && e.contains("is not a regular file (a directory)"),
        "{e}"
    );
    std::fs::write(&cfg, text(&dir.path().join("none.json"))).unwrap();
    let e = Config::load(&cfg).unwrap_err().to_string();
    assert!(e.contains("cannot read tokenizer"), "{e}");
}

#[test]
fn a_server_metrics_entry_may_be_a_plain_url() {
    let ok = Config::parse(&format!(
        "{BASE}    api_key: k3y\n    server_metrics: [http://x/metrics, {{url: http://y/metrics, auth: none}}]\n"
    ))
    .unwrap();
    let t = &ok.jobs[0].target;
    let (a, b) = (&t.server_metrics[0], &t.server_metrics[1]);
    assert_eq!(a.url, "http://x/metrics");
    assert_eq!(
        (a.interval, a.timeout),
        (Duration::from_secs(1), Duration::from_secs(1))
    );
    assert!(
        a.auth.is_some(),
        "the target's key by default, at its origin"
    );
    assert_eq!(b.url, "http://y/metrics");
    assert!(b.auth.is_none());
    // A plain entry is checked like a `url:`, at its own line.
    let p = problems("    server_metrics:\n      - ftp://x/metrics\n");
    assert!(
        p.contains("server_metrics[0].url: must be http:// or https://"),
        "{p}"
    );
    assert!(p.contains(":9:"), "the entry's line: {p}");
    // A map keeps its strictness.
    let e = Config::parse(&format!(
        "{BASE}    server_metrics: [{{url: http://x/metrics, intervall: 1s}}]\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("unknown field `intervall`"), "{e}");
}

#[test]
fn server_metrics_endpoints_are_validated_and_take_the_targets_key() {
    let ok = Config::parse(&format!(
        "{BASE}    api_key: k3y-value\n    auth: api-key\n    server_metrics:\n      - url: http://x:9/metrics\n        interval: 500ms\n        auth: target\n      - url: http://y/metrics\n        auth: none\n        families: [{{name: q, metric: 'my:q', kind: counter, labels: {{a: b}}}}]\n      - url: http://x/metrics\n      - url: http://z/metrics\n"
    ))
    .unwrap();
    let t = &ok.jobs[0].target;
    let (a, b) = (&t.server_metrics[0], &t.server_metrics[1]);
    assert_eq!(
        (a.interval, a.timeout),
        (Duration::from_millis(500), Duration::from_millis(500))
    );
    assert!(
        matches!(&a.auth, Some((AuthStyle::ApiKey, KeySource::Inline(s))) if s.expose() == "k3y-value")
    );
    assert_eq!(
        (b.interval, b.timeout),
        (Duration::from_secs(1), Duration::from_secs(1))
    );
    assert!(b.auth.is_none());
    assert_eq!(b.families[0].labels, [("a".to_owned(), "b".to_owned())]);
    // Without `auth:`, the key goes only to the target's origin.
    assert!(
        t.server_metrics[2].auth.is_some(),
        "the target's host and port"
    );
    assert!(t.server_metrics[3].auth.is_none(), "another host");
    assert!(
        !format!("{t:?}").contains("k3y-value"),
        "Debug hides the key"
    );
    let p = problems(
        "    server_metrics:\n      - {url: 'ftp://x', interval: 1ms, timeout: 5s, auth: maybe, families: [{name: 'Bad Name', metric: '9x', kind: gauge}]}\n",
    );
    for want in [
        "server_metrics[0].url: must be http:// or https://",
        "server_metrics[0].interval: must be between 50ms and 1h",
        "server_metrics[0].timeout: must not exceed the interval",
        "server_metrics[0].auth:",
        "server_metrics[0].families[0].name:",
        "server_metrics[0].families[0].metric: not a Prometheus metric name",
    ] {
        assert!(p.contains(want), "{want:?} not in {p}");
    }
}

/// A trace file is read bounded and parsed at load, its window applied; what is wrong names the
/// config's key, the file, the trace's line and the reason, and the prompt's settings are checked.
#[test]
fn a_trace_is_read_windowed_and_checked_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("t.jsonl");
    std::fs::write(
        &good,
        "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 2}\n\
         {\"timestamp\": 1500, \"input_length\": 5, \"output_length\": 2}\n\
         {\"timestamp\": 3000, \"input_length\": 5, \"output_length\": 2}\n",
    )
    .unwrap();
    let cfg = dir.path().join("c.yml");
    let load = |file: &std::path::Path, extra: &str| {
        std::fs::write(
            &cfg,
            prompts_config(&format!(
                "  - name: t\n    trace: {{file: {}, format: mooncake{extra}}}\n",
                file.display()
            )),
        )
        .unwrap();
        Config::load(&cfg)
    };
    let c = load(&good, ", start: 1s, duration: 3s, time_scale: 2").unwrap();
    let crate::workload::Workload::Trace(t) = &c.jobs[0].prompt.workload else {
        panic!()
    };
    assert_eq!(
        t.offsets(),
        [1.0, 4.0],
        "from 1 s of the trace, twice as slow"
    );
    let e = load(&good, ", start: 10s").unwrap_err().to_string();
    assert!(
        e.contains("prompts[0].trace.file") && e.contains("the window from 10 s holds no request"),
        "{e}"
    );
    let e = load(&good, ", time_scale: 0, model: GPT-4")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("prompts[0].trace.time_scale: must be above 0")
            && e.contains(
                "prompts[0].trace.model: model picks the rows of one model of a BurstGPT trace"
            ),
        "{e}"
    );
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 2}\n{\"timestamp\": 1}\n",
    )
    .unwrap();
    let e = load(&bad, "").unwrap_err().to_string();
    assert!(
        e.contains("bad.jsonl: line 2: input_length is missing"),
        "{e}"
    );
    let big = dir.path().join("big.jsonl");
    std::fs::write(
        &big,
        vec![b' '; (crate::workload::trace::MAX_FILE_BYTES + 1) as usize],
    )
    .unwrap();
    let e = load(&big, "").unwrap_err().to_string();
    assert!(e.contains("is larger than 32 MiB"), "{e}");
    let e = load(std::path::Path::new("/dev/zero"), "")
        .unwrap_err()
        .to_string();
    assert!(e.contains("trace /dev/zero is not a regular file"), "{e}");
    std::fs::write(
        &cfg,
        prompts_config("  - name: t\n    trace: {file: x.csv, format: parquet}\n"),
    )
    .unwrap();
    let e = Config::load(&cfg).unwrap_err().to_string();
    assert!(e.contains("unknown variant `parquet`"), "{e}");
}

/// Issue 43: what answered is configured per target (`model_aliases:`, `model_mismatch:`,
/// `usage_audit:`) and per prompt (`expect:`'s checks, `drift:`), each value checked.
#[test]
fn what_answered_is_configured_and_checked() {
    let c = Config::parse(
        "prompts:\n  - name: canary\n    messages: [{role: user, content: '2+2?'}]\n    max_tokens: 4\n    drift: true\n    expect: {exact: '4', number: {value: 4, tolerance: 0.5}, json_schema: {type: integer}}\n\
         targets:\n  - name: a\n    base_url: http://x\n    models: [prod]\n    model_aliases: {prod: [gpt-4o]}\n    model_mismatch: fail\n    usage_audit: {count: events, tolerance_percent: 10, tolerance_tokens: 1}\n    extra_body: {temperature: 0, seed: 7}\n",
    )
    .unwrap();
    let j = &c.jobs[0];
    assert_eq!(j.target.aliases_of("prod"), ["gpt-4o".to_owned()]);
    assert!(j.target.aliases_of("other").is_empty());
    assert_eq!(j.target.model_mismatch, MismatchAction::Fail);
    let u = j.target.usage_audit;
    assert_eq!(
        (u.count, u.tolerance_share, u.tolerance_tokens),
        (AuditCount::Events, 0.1, 1)
    );
    let e = j.prompt.expect.as_ref().unwrap();
    assert_eq!(e.exact.as_deref(), Some("4"));
    assert_eq!(
        e.number,
        Some(NumberCheck {
            value: 4.0,
            tolerance: 0.5
        })
    );
    assert!(j.prompt.drift);
    // The defaults: flag, audit auto at 5% and 3 tokens.
    let d = Config::parse(BASE).unwrap();
    let t = &d.jobs[0].target;
    assert_eq!(t.model_mismatch, MismatchAction::Flag);
    assert_eq!(t.usage_audit, UsageAuditSettings::default());
    // Every bad value is said with its key.
    let all = problems(
        "    model_aliases: {other: [x], m: []}\n    usage_audit: {count: tokenizer, tolerance_percent: 120}\n",
    );
    for want in [
        "targets[0].model_aliases.other: \"other\" is not one of the target's models",
        "targets[0].model_aliases.m: a model has 1 to 32 aliases",
        "targets[0].usage_audit.count: count: tokenizer needs the target's tokenizer",
        "targets[0].usage_audit.tolerance_percent: must be between 0 and 100",
    ] {
        assert!(all.contains(want), "{want}\n{all}");
    }
    let bad = |prompt: &str, target: &str| match Config::parse(&format!(
        "prompts:\n  - name: p\n{prompt}targets:\n  - name: a\n    base_url: http://x\n    models: [m]\n{target}"
    )) {
        Err(ConfigError::Invalid(i)) => i
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "),
        other => panic!("{other:?}"),
    };
    let msg = "    messages: [{role: user, content: hi}]\n";
    let e = bad(
        &format!(
            "{msg}    expect: {{json_schema: {{oneOf: []}}, number: {{value: 1, tolerance: -1}}, exact: ' '}}\n"
        ),
        "",
    );
    assert!(
        e.contains("prompts[0].expect.json_schema: oneOf: \"oneOf\" is not a keyword"),
        "{e}"
    );
    assert!(
        e.contains("prompts[0].expect.number: value and tolerance"),
        "{e}"
    );
    assert!(
        e.contains("prompts[0].expect.exact: an exact answer is not empty"),
        "{e}"
    );
    let e = bad(
        "    synthetic: {input_tokens: 8, output_tokens: 2}\n    drift: true\n",
        "",
    );
    assert!(
        e.contains("prompts[0].drift: drift detection compares answers to one fixed question"),
        "{e}"
    );
    let e = bad(
        &format!("{msg}    drift: true\n"),
        "    extra_body: {temperature: 0}\n",
    );
    assert!(e.contains("targets.a: prompt \"p\" asks for drift detection: the target's requests must be deterministic (extra_body: {temperature: 0, seed: <n>})"), "{e}");
    // Anthropic takes no seed: a temperature of 0 is enough.
    assert!(Config::parse(&format!(
        "prompts:\n  - name: p\n{msg}    drift: true\ntargets:\n  - name: a\n    base_url: http://x\n    api: anthropic-messages\n    models: [m]\n    extra_body: {{temperature: 0}}\n"
    ))
    .is_ok());
}
