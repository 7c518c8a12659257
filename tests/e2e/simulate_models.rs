//! `tokenprobe simulate --profile` and model comparisons in `tokenprobe bench`, end to end (real
//! processes on loopback):
//!
//! - two profiles compared by bench are ranked as their profiles say (the fast one first on a
//!   TTFT weight), with the cost their prices give;
//! - `target/model` pairs compare the same model at two targets, `--limit cost_per_request<=…`
//!   rejects the expensive one, and a model with a different output length is flagged next to
//!   the ranking;
//! - an input-length sweep (512, 2048 and 8192-byte prompts) reports the token rule's input
//!   tokens in `usage`, and the client's TTFT grows by `prefill_per_1k × Δtokens` within 1 ms
//!   (the fastest of 12 requests per length on a reused connection, so connection set-up and
//!   scheduling noise on a busy machine, which only ever add time, drop out; the simulator's
//!   event log of the same requests is the ground truth of each one's prefill);
//! - `prefix_cache=on`: the second request with the same 2 KiB prefix reports its cached tokens
//!   and is faster by the prefill of the cached part (event log); `ignore_eos` and `min_tokens`
//!   give the output length asked for, also streamed through `tokenprobe probe`; an unknown
//!   model gets the command's defaults; a bad `--profile` is refused with the bad part named;
//! - `probe --format json` says what the prefix cache served (the event log's cached tokens) and
//!   what answered (the served model, response id and request id the simulator sent), through
//!   the chat and the Anthropic endpoints (where the whole input is the cached tokens and the
//!   rest, added up);
//! - `bench --cache-bust`: one prompt sent ten times to a prefix-cached simulator, none of its
//!   requests served from the cache (the event log), where without it every one but the first
//!   is; each level states `busted`, and the workload says so.

use crate::common;
use common::e2e::*;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
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

fn read_json(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()))
}

/// The event log's lines, once it has at least `n`.
fn event_log(path: &Path, n: usize) -> Vec<Value> {
    wait_for("the event log", Duration::from_secs(10), || {
        let lines: Vec<Value> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("an event log line is JSON"))
            .collect();
        (lines.len() >= n).then_some(lines)
    })
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1.0)
}

/// A simulator with profiles `fast`, `slow` and `short`, and a config with target `sim` (every
/// model; a price, and `slow`'s own) and target `sim2` (`fast`, dearer) on it.
fn priced_sim(dir: &Path) -> (ChildGuard, PathBuf) {
    let (sim, url) = start_simulate(
        dir,
        &[
            "--profile",
            "fast:ttft=20ms,itl=2ms,output_tokens=8",
            "--profile",
            "slow:ttft=150ms,itl=2ms,output_tokens=8",
            "--profile",
            "short:ttft=20ms,itl=2ms,output_tokens=4",
        ],
    );
    // "Say hello" is 9 bytes: 4 template tokens + 3 = 7 input tokens; 8 output tokens.
    let cfg = write(
        dir,
        "c.yml",
        &format!(
            "prompts:\n  - name: hello\n    messages: [{{role: user, content: \"Say hello\"}}]\n    max_tokens: 64\n\
             targets:\n  - name: sim\n    base_url: {url}/v1\n    models: [fast, slow, short]\n\
             \x20   price: {{input_per_mtok: 2.5, output_per_mtok: 10}}\n\
             \x20   model_prices:\n      slow: {{input_per_mtok: 30, output_per_mtok: 60}}\n\
             \x20 - name: sim2\n    base_url: {url}/v1\n    models: [fast]\n\
             \x20   price: {{input_per_mtok: 100, output_per_mtok: 100}}\n"
        ),
    );
    (sim, cfg)
}

#[test]
fn profiles_are_ranked_as_they_say_and_cost_what_their_prices_say() {
    let _serial = serial();
    let _wd = Watchdog::new("profiles_are_ranked", Duration::from_secs(180));
    let dir = tempfile::tempdir().unwrap();
    let (_sim, cfg) = priced_sim(dir.path());
    let cfg = cfg.to_str().unwrap();
    let json = dir.path().join("a.json");
    let (code, out, err) = run(
        &[
            "bench",
            "--config.file",
            cfg,
            "--models",
            "fast,slow",
            "--concurrency",
            "1",
            "--requests-per-level",
            "5",
            "--weight",
            "ttft=1",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    let ranked = r["selection"]["ranked"].as_array().expect("ranked");
    let order: Vec<&str> = ranked
        .iter()
        .map(|k| k["model"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["fast", "slow"], "{out}");
    let models = r["models"].as_array().unwrap();
    for (m, ttft) in models.iter().zip([0.020, 0.150]) {
        assert_eq!(m["target"], "sim");
        assert_eq!(
            (f(&m["input_tokens_mean"]), f(&m["output_tokens_mean"])),
            (7.0, 8.0)
        );
        let l = &m["levels"][0];
        assert_eq!(l["error_rate"].as_f64(), Some(0.0), "{l}");
        // The simulator is never early: the profile's TTFT is a floor.
        assert!(f(&l["ttft_s"]["min"]) >= ttft, "{}: {l}", m["model"]);
    }
    // fast: (7 × 2.5 + 8 × 10) / 10⁶ per request; per million output tokens: that / 8 × 10⁶.
    let fast = &models[0]["levels"][0];
    assert!(close(f(&fast["cost_per_request"]), 97.5e-6), "{fast}");
    assert!(close(f(&fast["cost_per_mtok"]), 12.1875), "{fast}");
    // slow, at its own price: (7 × 30 + 8 × 60) / 10⁶.
    let slow = &models[1]["levels"][0];
    assert!(close(f(&slow["cost_per_request"]), 690e-6), "{slow}");
    assert!(close(f(&slow["cost_per_mtok"]), 86.25), "{slow}");
    assert!(
        r["selection"].get("length_mismatch").is_none(),
        "same lengths"
    );
    assert!(
        out.contains("cost/req") && out.contains("cost/Mtok"),
        "{out}"
    );
    assert!(out.contains("achieved lengths (mean input/output tokens of the successes): fast 7.0/8.0, slow 7.0/8.0"), "{out}");
}

#[test]
fn target_model_pairs_a_cost_limit_and_a_length_note() {
    let _serial = serial();
    let _wd = Watchdog::new("target_model_pairs", Duration::from_secs(180));
    let dir = tempfile::tempdir().unwrap();
    let (_sim, cfg) = priced_sim(dir.path());
    let cfg = cfg.to_str().unwrap();
    // The same model at two targets, and a model whose output is half as long; the cost limit
    // rejects the dear target.
    let json = dir.path().join("b.json");
    let (code, out, err) = run(
        &[
            "bench",
            "--config.file",
            cfg,
            "--models",
            "fast,sim2/fast,short",
            "--concurrency",
            "1",
            "--requests-per-level",
            "3",
            "--limit",
            "cost_per_request<=0.0005",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    let targets: Vec<(&str, &str)> = r["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["target"].as_str().unwrap(), m["model"].as_str().unwrap()))
        .collect();
    assert_eq!(
        targets,
        [("sim", "fast"), ("sim2", "fast"), ("sim", "short")]
    );
    // sim2's price: (7 × 100 + 8 × 100) / 10⁶ = 0.0015 per request.
    assert!(close(
        f(&r["models"][1]["levels"][0]["cost_per_request"]),
        1.5e-3
    ));
    let rejected = &r["selection"]["rejected"];
    assert_eq!(rejected.as_array().map(Vec::len), Some(1), "{rejected}");
    assert_eq!(rejected[0]["model"], "sim2/fast");
    assert!(
        rejected[0]["reasons"][0]
            .as_str()
            .unwrap()
            .contains("cost_per_request = 0.0015"),
        "{rejected}"
    );
    let ranked: Vec<&str> = r["selection"]["ranked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["model"].as_str().unwrap())
        .collect();
    assert_eq!(ranked.len(), 2);
    assert!(
        ranked.contains(&"sim/fast") && ranked.contains(&"sim/short"),
        "{ranked:?}"
    );
    let note = r["selection"]["length_mismatch"]
        .as_str()
        .expect("a length note");
    assert!(
        note.contains("output tokens sim/fast 8.0, sim2/fast 8.0, sim/short 4.0"),
        "{note}"
    );
    assert!(!note.contains("input"), "{note}");
    assert!(
        out.contains("NOTE the models' achieved lengths differ by more than 5%"),
        "{out}"
    );
    // The table's header, after the answer.
    let header = out
        .lines()
        .find(|l| l.starts_with("│ model"))
        .unwrap_or_default();
    assert!(
        header.contains("model") && header.contains("target"),
        "{out}"
    );
    assert_eq!(
        r["target"], "sim, sim2",
        "every target of the run, in order"
    );

    // Every model at another target: the report is that target's, the names plain.
    let json = dir.path().join("c.json");
    let (code, out, err) = run(
        &[
            "bench",
            "--config.file",
            cfg,
            "--models",
            "sim2/fast",
            "--concurrency",
            "1",
            "--requests-per-level",
            "2",
            "-o",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let r = read_json(&json);
    let m = &r["models"][0];
    assert_eq!(
        (r["target"].as_str(), m["target"].as_str()),
        (Some("sim2"), Some("sim2"))
    );
    assert!(close(f(&m["levels"][0]["cost_per_request"]), 1.5e-3), "{m}");
    assert!(
        err.contains("target sim2 (") && err.contains("models fast,"),
        "{err}"
    );
}

#[test]
fn input_length_sweep_shows_the_configured_prefill() {
    let _serial = serial();
    let _wd = Watchdog::new("input_length_sweep", Duration::from_secs(180));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let (sim, url) = start_simulate(
        dir.path(),
        &[
            "--profile",
            "sweep:ttft=20ms,itl=1ms,output_tokens=4,prefill_per_1k=40ms",
            "--event-log",
            log.to_str().unwrap(),
        ],
    );
    let lengths = [512usize, 2048, 8192];
    let mut yaml = String::from("prompts:\n");
    for n in lengths {
        yaml.push_str(&format!(
            "  - name: p{n}\n    messages: [{{role: user, content: \"{}\"}}]\n    max_tokens: 16\n",
            "x".repeat(n)
        ));
    }
    yaml.push_str(&format!(
        "targets:\n  - name: sim\n    base_url: {url}/v1\n    models: [sweep]\n    connection: reuse\n"
    ));
    let cfg = write(dir.path(), "c.yml", &yaml);
    const PER_LENGTH: usize = 12;
    let mut fastest = Vec::new();
    for n in lengths {
        let json = dir.path().join(format!("r{n}.json"));
        let (code, out, err) = run(
            &[
                "bench",
                "--config.file",
                cfg.to_str().unwrap(),
                "--prompt",
                &format!("p{n}"),
                "--concurrency",
                "1",
                "--requests-per-level",
                &PER_LENGTH.to_string(),
                "--samples",
                // The simulator's log holds the levels' requests only, in order.
                "--no-check",
                "-o",
                json.to_str().unwrap(),
            ],
            Duration::from_secs(60),
        );
        assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
        let r = read_json(&json);
        // The token rule: 4 template tokens + bytes / 4, reported in usage.prompt_tokens.
        let tokens = 4 + n as u64 / 4;
        let samples = r["models"][0]["levels"][0]["samples"].as_array().unwrap();
        assert_eq!(samples.len(), PER_LENGTH);
        for s in samples {
            assert_eq!(s["input_tokens"].as_u64(), Some(tokens), "{s}");
        }
        assert_eq!(f(&r["models"][0]["input_tokens_mean"]), tokens as f64);
        fastest.push(f(&r["models"][0]["levels"][0]["ttft_s"]["min"]));
    }
    // Ground truth per request: prefill = 40 ms × tokens / 1000, and the first token is due at
    // the base TTFT plus it.
    let lines = event_log(&log, PER_LENGTH * lengths.len());
    drop(sim);
    for (i, n) in lengths.iter().enumerate() {
        let tokens = 4 + *n as u64 / 4;
        for l in &lines[i * PER_LENGTH..(i + 1) * PER_LENGTH] {
            assert_eq!(
                (l["profile"].as_str(), l["input_tokens"].as_u64()),
                (Some("sweep"), Some(tokens)),
                "{l}"
            );
            assert_eq!(l["cached_tokens"].as_u64(), Some(0));
            let prefill = 0.040 * tokens as f64 / 1000.0;
            assert!((f(&l["prefill_s"]) - prefill).abs() < 1e-9, "{l}");
            let first = l["events"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["token"] == true)
                .expect("a token event");
            assert!((f(&first["due_s"]) - (0.020 + prefill)).abs() < 1e-9, "{l}");
        }
    }
    // Client side: the fastest TTFT of each length grows by the prefill of the extra tokens.
    for i in 1..lengths.len() {
        let extra = (lengths[i] - lengths[0]) as f64 / 4.0;
        let want = 0.040 * extra / 1000.0;
        let got = fastest[i] - fastest[0];
        eprintln!(
            "{} vs {} bytes: TTFT +{:.3} ms, prefill says +{:.3} ms",
            lengths[i],
            lengths[0],
            got * 1e3,
            want * 1e3
        );
        assert!(
            (got - want).abs() <= 0.001,
            "TTFT difference {got} s vs prefill {want} s"
        );
    }
}

/// A request to the simulator (`Connection: close`); returns its JSON body.
fn post(url: &str, body: &Value) -> Value {
    let r = http_request(
        "POST",
        &format!("{url}/v1/chat/completions"),
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.body))
}

#[test]
fn prefix_cache_ignore_eos_and_defaults() {
    let _serial = serial();
    let _wd = Watchdog::new("prefix_cache_ignore_eos", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let (sim, url) = start_simulate(
        dir.path(),
        &[
            "--ttft",
            "30ms",
            "--itl",
            "1ms",
            "--output-tokens",
            "3",
            "--profile",
            "cached:ttft=10ms,itl=1ms,output_tokens=4,prefill_per_1k=40ms,prefix_cache=on",
            "--event-log",
            log.to_str().unwrap(),
        ],
    );
    let prefix = "p".repeat(2048);
    let chat = |model: &str, text: String, extra: Value| {
        let mut b = json!({"model": model, "messages": [{"role": "user", "content": text}]});
        if let (Some(b), Some(e)) = (b.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        b
    };
    // 16 + 2048 + 3 bytes = 517 tokens; the second shares its first 32 blocks (512 tokens).
    let first = post(&url, &chat("cached", format!("{prefix}one"), json!({})));
    let second = post(&url, &chat("cached", format!("{prefix}two"), json!({})));
    assert_eq!(first["usage"]["prompt_tokens"], 517);
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(second["usage"]["prompt_tokens"], 517);
    assert_eq!(
        second["usage"]["prompt_tokens_details"]["cached_tokens"],
        512
    );
    // Output length: ignore_eos gives max_tokens exactly (finish "length"), min_tokens at least.
    let eos = post(
        &url,
        &chat(
            "cached",
            "hi".into(),
            json!({"max_tokens": 50, "ignore_eos": true}),
        ),
    );
    assert_eq!(
        (
            eos["usage"]["completion_tokens"].as_u64(),
            eos["choices"][0]["finish_reason"].as_str()
        ),
        (Some(50), Some("length"))
    );
    let min = post(
        &url,
        &chat(
            "cached",
            "hi".into(),
            json!({"min_tokens": 10, "max_tokens": 64}),
        ),
    );
    assert_eq!(
        (
            min["usage"]["completion_tokens"].as_u64(),
            min["choices"][0]["finish_reason"].as_str()
        ),
        (Some(10), Some("stop"))
    );
    let plain = post(
        &url,
        &chat("cached", "hi".into(), json!({"max_tokens": 64})),
    );
    assert_eq!(
        plain["usage"]["completion_tokens"], 4,
        "the profile's length"
    );
    let other = post(&url, &chat("nobody", "hi".into(), json!({})));
    assert_eq!(
        other["usage"]["completion_tokens"], 3,
        "the command's length"
    );
    // Streamed, through tokenprobe probe: ignore_eos in the target's extra_body.
    let cfg = write(
        dir.path(),
        "c.yml",
        &format!(
            "prompts:\n  - name: hi\n    messages: [{{role: user, content: hi}}]\n    max_tokens: 40\n\
             targets:\n  - name: sim\n    base_url: {url}/v1\n    models: [cached]\n    extra_body: {{ignore_eos: true}}\n"
        ),
    );
    let (code, out, err) = run(
        &[
            "probe",
            "--config.file",
            cfg.to_str().unwrap(),
            "--target",
            "sim",
            "--format",
            "json",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let p: Value = serde_json::from_str(out.trim()).expect("probe JSON");
    assert_eq!(p["output_tokens"], 40, "{p}");
    assert_eq!(p["input_tokens"], 5, "{p}");

    let models = http_get(&format!("{url}/v1/models"), &[]);
    let ids: Value = serde_json::from_str(&models.body).expect("models JSON");
    let ids: Vec<&str> = ids["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        ["tokenprobe-simulated", "cached"],
        "the default, then the profiles"
    );

    let lines = event_log(&log, 7);
    drop(sim);
    let (a, b) = (&lines[0], &lines[1]);
    assert_eq!(
        (a["cached_tokens"].as_u64(), b["cached_tokens"].as_u64()),
        (Some(0), Some(512))
    );
    // Prefill: 517 tokens at 40 ms per 1,000, then only the 5 uncached ones.
    assert!((f(&a["prefill_s"]) - 0.020_68).abs() < 1e-9, "{a}");
    assert!((f(&b["prefill_s"]) - 0.000_2).abs() < 1e-9, "{b}");
    // The whole answer is due at ttft + prefill + 3 gaps; the second is earlier by the prefill
    // of the cached part.
    let due = |l: &Value| f(&l["events"][0]["due_s"]);
    let sent = |l: &Value| f(&l["events"][0]["t_s"]);
    let saved = 0.040 * 512.0 / 1000.0;
    eprintln!(
        "second request: due {:.3} ms earlier, sent {:.3} ms earlier; the cached prefill is {:.3} ms",
        (due(a) - due(b)) * 1e3,
        (sent(a) - sent(b)) * 1e3,
        saved * 1e3
    );
    assert!((due(a) - due(b) - saved).abs() < 1e-9, "{a}\n{b}");
    // On the wire each is later than its schedule by the timer's lateness only (never early;
    // how late depends on the machine's load, so it is shown, not bounded).
    for l in [a, b] {
        assert!(sent(l) >= due(l), "sent before it was due: {l}");
    }
    assert_eq!(
        (lines[5]["model"].as_str(), lines[5]["profile"].as_str()),
        (Some("nobody"), None)
    );
    assert!(
        (due(&lines[5]) - 0.032).abs() < 1e-9,
        "the defaults: 30 ms + 2 gaps of 1 ms"
    );
    assert_eq!(lines[6]["output_tokens"], 40);
}

/// Issues 42 item 1 and 43 item 1: the same prompt probed twice against a prefix-cached profile:
/// the second probe's `cached_input_tokens` is what the simulator logged it served from its
/// cache; through the Anthropic endpoint (whose `input_tokens` leave the cache out) the probe's
/// input is still the whole input the simulator counted. What answered is the simulator's own:
/// the model it echoed, its response id and the request id header.
#[test]
fn probe_reports_the_cached_tokens_and_what_answered() {
    let _serial = serial();
    let _wd = Watchdog::new("probe_reports_the_cached_tokens", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let (sim, url) = start_simulate(
        dir.path(),
        &[
            "--profile",
            "cached:ttft=5ms,itl=1ms,output_tokens=4,prefix_cache=on",
            "--event-log",
            log.to_str().unwrap(),
        ],
    );
    let prompt = "p".repeat(2048);
    let probe = |api: &str, base: &str| {
        let (code, out, err) = run(
            &[
                "probe",
                "--base-url",
                base,
                "--api",
                api,
                "--model",
                "cached",
                "--prompt",
                &prompt,
                "--proxy",
                "none",
                "--format",
                "json",
            ],
            Duration::from_secs(30),
        );
        assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
        let v: Value = serde_json::from_str(out.trim()).expect("probe JSON");
        v
    };
    let chat = format!("{url}/v1");
    let cold = probe("openai-chat", &chat);
    let warm = probe("openai-chat", &chat);
    let anthropic = probe("anthropic-messages", &url);
    let lines = event_log(&log, 3);
    drop(sim);
    for (p, l) in [
        (&cold, &lines[0]),
        (&warm, &lines[1]),
        (&anthropic, &lines[2]),
    ] {
        assert_eq!(p["input_tokens"], l["input_tokens"], "{p}\n{l}");
        assert_eq!(p["cached_input_tokens"], l["cached_tokens"], "{p}\n{l}");
        assert_eq!(
            p["reasoning_tokens"],
            Value::Null,
            "the simulator does not say"
        );
        assert_eq!(p["served_model"], "cached");
        assert_eq!(p["request_id"], l["id"], "{p}\n{l}");
        assert_eq!(p["system_fingerprint"], Value::Null);
    }
    assert_eq!(cold["cached_input_tokens"], 0, "{cold}");
    let hit = warm["cached_input_tokens"].as_u64().expect("a count");
    assert!(
        hit >= 512,
        "the second probe's 2 KiB prefix came from the cache: {warm}"
    );
    assert!(
        anthropic["cached_input_tokens"].as_u64() > Some(0),
        "{anthropic}"
    );
    let id = |l: &Value| l["id"].as_str().expect("an id").to_owned();
    assert_eq!(warm["response_id"], format!("chatcmpl-{}", id(&lines[1])));
    assert_eq!(anthropic["response_id"], format!("msg_{}", id(&lines[2])));
    eprintln!("{warm:#}");
}

#[test]
fn a_bad_profile_is_refused_naming_the_bad_part() {
    let (code, _, err) = run(
        &[
            "simulate",
            "--listen",
            "127.0.0.1:0",
            "--profile",
            "fast:ttft=20ms,itl=2ms,speed=9",
        ],
        Duration::from_secs(20),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("unknown setting \"speed\""), "{err}");
    let (code, _, err) = run(
        &[
            "simulate",
            "--listen",
            "127.0.0.1:0",
            "--profile",
            "a:ttft=1ms,itl=1ms",
            "--profile",
            "a:ttft=2ms,itl=1ms",
        ],
        Duration::from_secs(20),
    );
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("\"a\" is given twice"), "{err}");
}

/// Issue 44 item 5: `--cache-bust` gives each request a unique leading block, so a prefix cache
/// serves none of them (the simulator's event log), and the level says it started busted.
#[test]
fn cache_bust_leaves_nothing_for_the_prefix_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = |port_url: &str| {
        write(
            dir.path(),
            "bust.yml",
            &format!(
                "prompts:\n  - name: long\n    messages: [{{role: system, content: \"{}\"}}, {{role: user, content: hi}}]\n    max_tokens: 4\n\
                 targets:\n  - name: sim\n    base_url: {port_url}/v1\n    models: [m]\n",
                "You answer every question about dragons at length. ".repeat(4)
            ),
        )
    };
    for (bust, log_name) in [(false, "warm.jsonl"), (true, "bust.jsonl")] {
        let log = dir.path().join(log_name);
        let (_sim, url) = start_simulate(
            dir.path(),
            &[
                "--ttft",
                "5ms",
                "--itl",
                "1ms",
                "--output-tokens",
                "4",
                "--prefix-cache",
                "--event-log",
                log.to_str().expect("path"),
            ],
        );
        let config = cfg(&url);
        let json = dir.path().join(format!("{log_name}.json"));
        let mut args = vec![
            "bench",
            "--config.file",
            config.to_str().expect("path"),
            "--concurrency",
            "1",
            "--requests-per-level",
            "10",
            "--no-check",
            "--no-history",
            "-o",
            json.to_str().expect("path"),
        ];
        if bust {
            args.push("--cache-bust");
        }
        let (code, out, err) = run(&args, Duration::from_secs(60));
        assert_eq!(code, Some(0), "{out}{err}");
        let cached: Vec<f64> = event_log(&log, 10)
            .iter()
            .map(|l| f(&l["cached_tokens"]))
            .collect();
        let r = read_json(&json);
        let state = &r["models"][0]["levels"][0]["server_cache"]["state"];
        if bust {
            assert!(cached.iter().all(|c| *c == 0.0), "busted: {cached:?}");
            assert_eq!(state, "busted");
            assert!(
                r["workload"]
                    .as_str()
                    .is_some_and(|w| w.ends_with(", cache busted")),
                "{}",
                r["workload"]
            );
        } else {
            assert!(cached[1..].iter().all(|c| *c > 0.0), "warm: {cached:?}");
            assert_eq!(state, "warm");
        }
    }
}
