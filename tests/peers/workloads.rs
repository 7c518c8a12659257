//! Workloads against a real llama.cpp server (xllamacpp + SmolLM2-135M, one server for every
//! check): synthetic input lengths reached as llama.cpp counts them, TTFT following llama.cpp's
//! own prefill time, a shared prefix served from llama.cpp's prompt cache, a conversation's
//! history resent (and cached), the example dataset, and the same workloads through `probe`,
//! `bench` and `serve`; and against `tokenprobe simulate`, a prompt off its length flagged
//! `input_length_off`.
//!
//! Ground truth is the server's: `usage.prompt_tokens` for lengths, `timings.prompt_ms` for
//! prefill time and `timings.prompt_n` (the prompt tokens it evaluated, so `prompt_tokens -
//! prompt_n` were served from its cache) for caching; no fixed time bound.

use crate::common;
use common::e2e;

use e2e::*;
use std::process::Command;
use std::time::Duration;
use tokenprobe::config::Config;
use tokenprobe::measure::ProbeResult;
use tokenprobe::outcome::Flag;
use tokenprobe::probe::{ProbeSpec, Prober, TokenModels};

fn config(dir: &std::path::Path, base_url: &str, tokenizer: &std::path::Path) -> Config {
    let dataset = repo_root().join("examples/datasets/sharegpt-small.json");
    let text = format!(
        r#"prompts:
  - name: isl128
    synthetic: {{input_tokens: 128, output_tokens: 4}}
  - name: isl512
    synthetic: {{input_tokens: 512, output_tokens: 4}}
  - name: isl1024
    synthetic: {{input_tokens: 1024, output_tokens: 4}}
  - name: prefix
    synthetic: {{input_tokens: 400, output_tokens: 2, shared_prefix_tokens: 320, seed: 5}}
  - name: chat
    conversation: {{turns: 3, think_time: 50ms, user_tokens: 40, output_tokens: 8}}
  - name: sharegpt
    dataset: {{file: {}, format: sharegpt, order: sequential}}
    max_tokens: 4
targets:
  - name: local
    base_url: {base_url}
    models: [smollm2]
  - name: counted
    base_url: {base_url}
    models: [smollm2]
    prompts: [isl512]
    tokenizer: {}
"#,
        dataset.display(),
        tokenizer.display()
    );
    let path = dir.join("workloads.yml");
    std::fs::write(&path, text).unwrap();
    Config::load(&path).expect("the workloads config loads")
}

fn spec(c: &Config, prompt: &str) -> ProbeSpec {
    let job = c
        .jobs
        .iter()
        .find(|j| j.target.name == "local" && j.prompt.name == prompt)
        .unwrap();
    ProbeSpec::from_job(job)
}

fn ok(r: &ProbeResult, what: &str) {
    assert!(
        r.success(),
        "{what}: {:?} {:?}",
        r.error_type,
        r.error_detail
    );
}

/// Tokens llama.cpp served from its prompt cache for this request.
fn cached(r: &ProbeResult) -> u64 {
    let evaluated = r
        .server_timings
        .and_then(|t| t.prompt_n)
        .expect("timings.prompt_n");
    r.input_tokens.expect("usage.prompt_tokens") - evaluated
}

fn prompt_ms(r: &ProbeResult) -> f64 {
    r.server_timings
        .and_then(|t| t.prompt_ms)
        .expect("timings.prompt_ms")
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one server for every check, in the order a reader follows the run"
)]
fn workloads_against_llama_cpp() {
    let _serial = serial();
    if !require_deps("workloads_against_llama_cpp", &[]) {
        return;
    }
    let _wd = Watchdog::new("workloads_against_llama_cpp", Duration::from_secs(400));
    let dir = tempfile::tempdir().unwrap();
    let llama = LlamaServer::start(dir.path());
    // SmolLM2's vocabulary as a tokenizer.json, from the GGUF llama.cpp serves.
    let tokenizer = dir.path().join("tokenizer.json");
    let made = Command::new(venv_python())
        .arg(repo_root().join("scripts/llama/gguf-tokenizer.py"))
        .arg(&tokenizer)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let c = config(dir.path(), &llama.base_url(), &tokenizer);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let models = TokenModels::default();

    // ---- calibration: a few requests learn how llama.cpp counts filler
    let mut isl = [spec(&c, "isl128"), spec(&c, "isl512"), spec(&c, "isl1024")];
    let mut prober = Prober::new(&isl[0]).unwrap();
    let cal = rt
        .block_on(models.get(&mut prober, &isl[0]))
        .expect("synthetic needs calibration");
    eprintln!(
        "calibration for llama.cpp/smollm2: {} ({:?})",
        cal.summary(),
        cal.points
    );
    assert!(cal.error.is_none(), "{cal:?}");
    assert_eq!(cal.requests, 3);
    for s in &mut isl {
        let again = rt.block_on(models.get(&mut prober, s)).unwrap();
        assert_eq!(again, cal, "kept for the run: no new requests");
        s.tokens = again.model();
    }

    // ---- synthetic lengths 128, 512, 1024 within 2% of usage.prompt_tokens
    let mut runs = Vec::new();
    for s in &isl {
        let r = rt.block_on(prober.run(s));
        ok(&r, &s.prompt.name);
        let (want, got) = (r.requested_input_tokens.unwrap(), r.input_tokens.unwrap());
        let err = (got as f64 - want as f64) / want as f64;
        eprintln!(
            "{}: requested {want}, llama.cpp counted {got} ({:+.2}%), TTFT {:.1} ms, prompt_ms {:.1}",
            s.prompt.name,
            err * 100.0,
            r.ttft_s.unwrap() * 1e3,
            prompt_ms(&r)
        );
        assert!(err.abs() <= 0.02, "{}: {got} of {want}", s.prompt.name);
        assert!(!r.flags.contains(&Flag::InputLengthOff), "{:?}", r.flags);
        assert_eq!((r.requested_output_tokens, r.output_tokens), (Some(4), 4));
        runs.push(r);
    }
    // TTFT grows with the input length, as llama.cpp's own prefill time does, and never comes
    // before it: no token is sent before the prompt is evaluated.
    for w in runs.windows(2) {
        assert!(
            prompt_ms(&w[1]) > prompt_ms(&w[0]),
            "llama.cpp's prefill grows"
        );
        assert!(
            w[1].ttft_s > w[0].ttft_s,
            "TTFT follows: {:?} then {:?}",
            w[0].ttft_s,
            w[1].ttft_s
        );
    }
    for r in &runs {
        assert!(
            r.ttft_s.unwrap() * 1e3 >= prompt_ms(r),
            "TTFT below prompt_ms"
        );
    }

    // ---- with the model's tokenizer.json: one request learns the template, lengths still hold
    let job = c.jobs.iter().find(|j| j.target.name == "counted").unwrap();
    let mut counted = ProbeSpec::from_job(job);
    let local = rt.block_on(models.get(&mut prober, &counted)).unwrap();
    eprintln!("calibration with the tokenizer: {}", local.summary());
    assert!(
        local.error.is_none() && local.tokenizer.is_some(),
        "{local:?}"
    );
    assert_eq!(local.requests, 1);
    assert!(
        (local.tokens_per_word - cal.tokens_per_word).abs() < 0.01,
        "{local:?} vs {cal:?}"
    );
    assert!(
        (local.overhead_tokens - cal.overhead_tokens).abs() <= 2.0,
        "{local:?} vs {cal:?}"
    );
    counted.tokens = local.model();
    let r = rt.block_on(prober.run(&counted));
    ok(&r, "counted");
    let got = r.input_tokens.unwrap();
    assert!(
        got.abs_diff(512) <= 10 && !r.flags.contains(&Flag::InputLengthOff),
        "{got}"
    );
    // A tokenizer.json that went bad after the config was loaded: the server calibrates (three
    // requests), never a guess of one token per word.
    let good = std::fs::read(&tokenizer).unwrap();
    std::fs::write(&tokenizer, "{\"not\": \"a tokenizer\"}").unwrap();
    let fallback = rt
        .block_on(TokenModels::default().get(&mut prober, &counted))
        .unwrap();
    std::fs::write(&tokenizer, good).unwrap();
    eprintln!(
        "calibration with a broken tokenizer: {}",
        fallback.summary()
    );
    assert!(fallback.error.is_none(), "{fallback:?}");
    assert!(
        fallback
            .tokenizer_error
            .as_deref()
            .is_some_and(|e| e.contains("is not a tokenizer.json")),
        "{fallback:?}"
    );
    assert_eq!(fallback.requests, 3, "the server's calibration");
    assert!(
        (fallback.tokens_per_word - cal.tokens_per_word).abs() < 0.01,
        "{fallback:?} vs {cal:?}"
    );

    // ---- a shared prefix is served from llama.cpp's prompt cache from the 2nd request on
    let mut prefix = spec(&c, "prefix");
    prefix.tokens = cal.model();
    let p: Vec<ProbeResult> = (0..3).map(|_| rt.block_on(prober.run(&prefix))).collect();
    for (i, r) in p.iter().enumerate() {
        ok(r, "prefix");
        eprintln!(
            "prefix request {i}: {} tokens, {} cached, prompt_ms {:.1}, TTFT {:.1} ms",
            r.input_tokens.unwrap(),
            cached(r),
            prompt_ms(r),
            r.ttft_s.unwrap() * 1e3
        );
    }
    assert!(
        cached(&p[0]) < 320,
        "the first request shares only the template with the last"
    );
    for r in &p[1..] {
        assert!(
            cached(r) >= 320,
            "the 320-token prefix is cached: {}",
            cached(r)
        );
        assert!(prompt_ms(r) < prompt_ms(&p[0]), "and not prefilled again");
    }

    // ---- a conversation resends its history; llama.cpp serves it from its cache
    let mut chat = spec(&c, "chat");
    chat.tokens = cal.model();
    let mut session = chat.session();
    let mut turns: Vec<ProbeResult> = Vec::new();
    for _ in 0..3 {
        let (content, wait) = session.next(&chat);
        assert_eq!(
            wait.is_zero(),
            turns.is_empty(),
            "think time between turns only"
        );
        std::thread::sleep(wait);
        let r = rt.block_on(prober.run_content(&chat, &content));
        ok(&r, "chat");
        session.answered(&r);
        turns.push(r);
    }
    assert_eq!(
        turns.iter().map(|t| t.turn).collect::<Vec<_>>(),
        [Some(1), Some(2), Some(3)]
    );
    assert!(session.at_start(), "the conversation is over after 3 turns");
    let first = turns[0].input_tokens.unwrap();
    assert!(
        (first as i64 - 40).abs() <= 4,
        "turn 1 is the requested 40 tokens: {first}"
    );
    for w in turns.windows(2) {
        let (a, b) = (w[0].input_tokens.unwrap(), w[1].input_tokens.unwrap());
        // The history, the answer (N tokens) and about 40 new user tokens.
        assert!(
            b >= a + w[0].output_tokens + 30,
            "history resent: {a} then {b}"
        );
        assert!(
            cached(&w[1]) >= a,
            "the resent history is cached: {} of {a}",
            cached(&w[1])
        );
    }

    // ---- the example dataset: its conversations, in order
    let data = spec(&c, "sharegpt");
    let r = rt.block_on(prober.run(&data));
    ok(&r, "sharegpt");
    assert!(r.input_tokens.is_some_and(|t| t > 10) && r.requested_input_tokens.is_none());

    // ---- probe --input-tokens: the report states the calibration and both lengths
    let out = Command::new(tokenprobe_bin())
        .args([
            "probe",
            "--base-url",
            &llama.base_url(),
            "--model",
            "smollm2",
        ])
        .args([
            "--input-tokens",
            "200",
            "--output-tokens",
            "3",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            v["requested_input_tokens"].as_u64(),
            v["requested_output_tokens"].as_u64()
        ),
        (Some(200), Some(3))
    );
    let got = v["input_tokens"].as_u64().unwrap();
    assert!(got.abs_diff(200) <= 4, "{v}");
    assert_eq!(v["calibration"]["requests"].as_u64(), Some(3), "{v}");

    // ---- bench: a two-prompt sweep, lengths per level and per sample
    let cfg = dir.path().join("workloads.yml");
    let json = dir.path().join("sweep.json");
    let out = Command::new(tokenprobe_bin())
        .arg("bench")
        .arg("--config.file")
        .arg(&cfg)
        .args([
            "--prompt",
            "isl128,chat",
            "--concurrency",
            "1",
            "--requests-per-level",
            "3",
            "--samples",
            "--no-progress",
            "-o",
        ])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("smollm2 · isl128") && table.contains("128→12"),
        "{table}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let series = report["models"].as_array().unwrap();
    assert_eq!(series.len(), 2);
    assert_eq!(series[0]["prompt"], "isl128");
    let l = &series[0]["levels"][0];
    assert_eq!(
        l["lengths"]["requested_input_tokens_mean"].as_f64(),
        Some(128.0)
    );
    let mean = l["lengths"]["input_tokens_mean"].as_f64().unwrap();
    assert!((mean - 128.0).abs() <= 2.56, "{mean}");
    assert!(series[0]["calibration"]["requests"].as_u64().is_some());
    let sample = &l["samples"][0];
    for key in [
        "input_tokens",
        "output_tokens",
        "requested_input_tokens",
        "requested_output_tokens",
    ] {
        assert!(sample[key].is_u64(), "{key} in {sample}");
    }
    let chat_samples = series[1]["levels"][0]["samples"].as_array().unwrap();
    let turns: Vec<u64> = chat_samples
        .iter()
        .filter_map(|s| s["turn"].as_u64())
        .collect();
    assert_eq!(turns, [1, 2, 3], "one worker keeps its conversation");

    // ---- serve: a conversation job's turns, TTFT by turn
    let whole = std::fs::read_to_string(&cfg).unwrap();
    let first_target = whole.split("  - name: counted").next().unwrap();
    let serve_cfg = format!("{first_target}    prompts: [chat]\n    interval: 500ms\n");
    let mut tp = Tokenprobe::serve(dir.path(), &serve_cfg);
    let m = tp.wait_probes(3.0, Duration::from_secs(120));
    let count = |turn: &str| {
        m.sum(
            "tokenprobe_conversation_time_to_first_token_seconds_count",
            &[("prompt", "chat"), ("turn", turn)],
        )
    };
    assert!(
        count("first") >= 1.0 && count("later") >= 2.0,
        "first {} later {}",
        count("first"),
        count("later")
    );
    assert!(m.has("tokenprobe_job_info", &[("workload", "conversation")]));
    let logs = tp.probe_logs();
    assert!(
        logs.iter()
            .any(|l| l.get("turn").and_then(serde_json::Value::as_u64) == Some(2)),
        "{logs:?}"
    );
}

/// `input_length_off`: against `tokenprobe simulate` (which counts a prompt as a quarter of its
/// JSON's bytes, so a filler word is about 1.4 tokens), a prompt built at one token per word
/// (no calibration) is far off its length and says so; after calibration it is close. Both
/// numbers are the server's own `usage.prompt_tokens`.
#[test]
fn an_input_length_off_the_request_is_flagged() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = start_simulate(
        dir.path(),
        &["--ttft", "1ms", "--itl", "1ms", "--output-tokens", "2"],
    );
    let c = Config::parse(&format!(
        "prompts:\n  - name: s\n    synthetic: {{input_tokens: 400, output_tokens: 2, seed: 3}}\n\
         targets:\n  - name: sim\n    base_url: {url}/v1\n    models: [m]\n"
    ))
    .unwrap();
    let mut s = ProbeSpec::from_job(&c.jobs[0]);
    let mut prober = Prober::new(&s).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt.block_on(prober.run(&s));
    ok(&r, "uncalibrated");
    let got = r.input_tokens.unwrap();
    assert!(
        got > 480,
        "one token per word is too few for simulate: {got}"
    );
    assert!(
        r.flags.contains(&Flag::InputLengthOff),
        "{got} of 400: {:?}",
        r.flags
    );
    let cal = rt
        .block_on(TokenModels::default().get(&mut prober, &s))
        .unwrap();
    assert!(cal.error.is_none() && cal.tokens_per_word > 1.2, "{cal:?}");
    s.tokens = cal.model();
    let r = rt.block_on(prober.run(&s));
    ok(&r, "calibrated");
    let got = r.input_tokens.unwrap();
    // Word lengths vary, so simulate's byte count does too: about 3% (one standard deviation)
    // at 400 tokens; 10% is past three.
    assert!(got.abs_diff(400) <= 40, "{got} of 400 after {cal:?}");
    assert_eq!(r.requested_input_tokens, Some(400));
}
