//! tokenprobe against a real llama.cpp server (xllamacpp + SmolLM2-135M, see
//! scripts/llama/llama-server.py): the numbers it exports must agree with what the
//! server itself counted and timed.
//!
//! What llama.cpp measures (checked against a hand-written client first):
//! - `timings.prompt_ms`: from the start of prompt processing to the first
//!   sampled token. The client sees that token ~2-4 ms later (HTTP, template,
//!   tokenizing, the role-only chunk), so TTFT - prompt_ms is >= 0 and a few ms.
//! - `timings.predicted_ms`: from the first to the last generated token, and
//!   `predicted_per_token_ms` = predicted_ms / (predicted_n - 1): the same
//!   N - 1 convention as tokenprobe's TPOT = (t_last - t_first) / (N - 1).
//!   When every generated token arrives as its own content event the two agree
//!   to a few microseconds. When the last generated token is not sent as text
//!   (end-of-generation token, trailing whitespace trimmed) the client's span
//!   is one decode step shorter than the server's.
//! - `/metrics`: `llamacpp:tokens_predicted_total` (sum of completion tokens),
//!   `llamacpp:prompt_seconds_total` (sum of prompt_ms),
//!   `llamacpp:tokens_predicted_seconds_total` (sum of predicted_ms).

use crate::common;
use common::e2e;

use e2e::*;
use std::process::Command;
use std::thread;
use std::time::Duration;

const MAX_TOKENS: u32 = 32;
const MIN_PROBES: f64 = 5.0;
/// How much later than llama.cpp's `prompt_ms` any single probe's first token may reach
/// tokenprobe: what llama.cpp does before its prompt timer starts (HTTP, JSON, chat template,
/// tokenizing) and the first event's delivery, all of which stretch when other processes hold
/// both cores; 25 ms allows that on a 2-core machine while a TTFT that missed the first event
/// (one more decode step, 15-20 ms here, plus delivery) still fails the median (held below one
/// decode step, in the test).
const MAX_ONE_TTFT_OVER_PROMPT_MS: f64 = 25.0;
/// How far any single probe's t_last - t_first may be from llama.cpp's predicted_ms: one
/// delivery delayed by a busy machine (9.4 ms seen while three builds ran); a client that missed
/// one token step (18.6 ms here) still fails the median.
const MAX_ONE_DELIVERY_JITTER_MS: f64 = 25.0;

/// Scrapes llama-server and tokenprobe until both are quiet (no request in
/// flight, nothing changed over 150 ms), so their counters cover the same
/// requests.
fn consistent_snapshot(tp: &mut Tokenprobe, llama: &LlamaServer) -> (Samples, Samples) {
    for _ in 0..50 {
        let l1 = llama.metrics();
        let t1 = tp.metrics();
        thread::sleep(Duration::from_millis(150));
        let l2 = llama.metrics();
        let t2 = tp.metrics();
        let idle = l1.one("llamacpp:requests_processing") == 0.0
            && l2.one("llamacpp:requests_processing") == 0.0;
        let same_l =
            l1.one("llamacpp:tokens_predicted_total") == l2.one("llamacpp:tokens_predicted_total");
        let same_t = t1.sum("tokenprobe_probes_total", &[])
            == t2.sum("tokenprobe_probes_total", &[])
            && t1.sum("tokenprobe_output_tokens_total", &[])
                == t2.sum("tokenprobe_output_tokens_total", &[]);
        if idle && same_l && same_t {
            return (t2, l2);
        }
        thread::sleep(Duration::from_millis(50));
    }
    panic!("llama-server and tokenprobe never were quiet at the same time");
}

fn hist(m: &Samples, name: &str) -> (f64, f64) {
    (
        m.sum(&format!("{name}_count"), &[]),
        m.sum(&format!("{name}_sum"), &[]),
    )
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, its checks in the order a reader follows the run"
)]
fn serve_against_llama_cpp_agrees_with_the_servers_own_numbers() {
    let _serial = serial();
    if !require_deps("serve_against_llama_cpp", &[]) {
        return;
    }
    let _wd = Watchdog::new("serve_against_llama_cpp", Duration::from_secs(300));
    let dir = tempfile::tempdir().unwrap();
    let llama = LlamaServer::start(dir.path());

    // Warm the server (first decode is slow) and learn the prompt's size.
    let warm = llama.chat(STORY_PROMPT, 1);
    let prompt_tokens = warm["usage"]["prompt_tokens"]
        .as_f64()
        .expect("usage.prompt_tokens from llama-server");

    let config = config_yaml(&llama.base_url(), "1s", MAX_TOKENS);

    // check-config accepts it.
    let check_path = dir.path().join("check.yml");
    std::fs::write(&check_path, &config).unwrap();
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.args(["check-config", "--config.file"]).arg(&check_path);
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(30));
    assert_eq!(
        st.code(),
        Some(0),
        "check-config rejected a valid config\nconfig:\n{config}\nstdout:\n{out}\nstderr:\n{err}"
    );

    let before = llama.metrics();
    let mut tp = Tokenprobe::serve(dir.path(), &config);
    tp.wait_probes(MIN_PROBES, Duration::from_secs(90));
    let (m, after) = consistent_snapshot(&mut tp, &llama);
    let logs = tp.probe_logs();
    let ctx = || tp.guard.logs();

    // ---- counters
    let probes = m.sum("tokenprobe_probes_total", &[]);
    assert!(probes >= MIN_PROBES, "probes_total {probes}");
    let errors: Vec<String> = m
        .select("tokenprobe_probe_errors_total", &[])
        .filter(|s| s.value != 0.0)
        .map(|s| format!("{:?} = {}", s.labels, s.value))
        .collect();
    assert!(
        errors.is_empty(),
        "probe errors against a healthy llama-server: {errors:?}\n{}",
        ctx()
    );
    assert!(
        m.count("tokenprobe_probe_errors_total") > 0,
        "tokenprobe_probe_errors_total has no series (error types should be pre-initialised at 0)"
    );
    for s in m.select("tokenprobe_last_probe_success", &[]) {
        assert_eq!(s.value, 1.0, "last_probe_success {:?}", s.labels);
    }
    assert!(
        m.count("tokenprobe_last_probe_success") > 0,
        "no tokenprobe_last_probe_success"
    );
    let ts = m.one("tokenprobe_last_probe_timestamp_seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (now - ts).abs() < 60.0,
        "last_probe_timestamp_seconds {ts} is not near now {now}"
    );

    // Output tokens: exactly what llama.cpp generated for these requests.
    let out_tokens = m.sum("tokenprobe_output_tokens_total", &[]);
    let server_tokens = after.one("llamacpp:tokens_predicted_total")
        - before.one("llamacpp:tokens_predicted_total");
    assert_eq!(
        out_tokens, server_tokens,
        "tokenprobe_output_tokens_total vs llama.cpp tokens_predicted_total over {probes} probes"
    );
    assert!(
        out_tokens >= probes * 2.0,
        "output tokens {out_tokens} for {probes} probes"
    );
    let in_tokens = m.sum("tokenprobe_input_tokens_total", &[]);
    assert_eq!(
        in_tokens,
        probes * prompt_tokens,
        "tokenprobe_input_tokens_total vs {probes} x usage.prompt_tokens {prompt_tokens}"
    );

    // ---- histograms: one observation per successful probe
    let (ttft_n, ttft_sum) = hist(&m, "tokenprobe_time_to_first_token_seconds");
    let (ttfo_n, ttfo_sum) = hist(&m, "tokenprobe_time_to_first_output_token_seconds");
    let (tpot_n, tpot_sum) = hist(&m, "tokenprobe_time_per_output_token_seconds");
    let (tps_n, tps_sum) = hist(&m, "tokenprobe_decode_tokens_per_second");
    let (e2e_n, e2e_sum) = hist(&m, "tokenprobe_request_duration_seconds");
    let (ttfb_n, ttfb_sum) = hist(&m, "tokenprobe_time_to_headers_seconds");
    let (itl_n, itl_sum) = hist(&m, "tokenprobe_inter_chunk_latency_seconds");
    for (name, n) in [
        ("time_to_first_token", ttft_n),
        ("time_to_first_output_token", ttfo_n),
        ("time_per_output_token", tpot_n),
        ("decode_tokens_per_second", tps_n),
        ("request_duration", e2e_n),
        ("time_to_headers", ttfb_n),
    ] {
        assert_eq!(n, probes, "tokenprobe_{name} count vs probes_total");
    }
    let mean_ttft = ttft_sum / ttft_n;
    assert!(
        mean_ttft > 0.0 && mean_ttft < 2.0,
        "mean TTFT {mean_ttft}s is implausible for a 135M model on loopback"
    );
    // Plain text answer: the first output token is the first token.
    assert!(
        (ttfo_sum - ttft_sum).abs() < 1e-6,
        "TTFO sum {ttfo_sum} != TTFT sum {ttft_sum}"
    );
    let mean_ttfb = ttfb_sum / ttfb_n;
    assert!(
        mean_ttfb > 0.0 && mean_ttfb <= mean_ttft,
        "mean TTFB {mean_ttfb} vs TTFT {mean_ttft}"
    );
    let mean_tpot = tpot_sum / tpot_n;
    let mean_e2e = e2e_sum / e2e_n;
    assert!(
        mean_e2e > mean_ttft,
        "mean E2E {mean_e2e} <= mean TTFT {mean_ttft}"
    );
    assert!(tps_sum > 0.0);
    // Inter-chunk gaps: one per consecutive pair of content events; here at
    // most N - 1 per probe.
    assert!(
        itl_n > 0.0 && itl_n <= out_tokens - probes,
        "inter_chunk_latency count {itl_n} vs output tokens {out_tokens} - probes {probes}"
    );

    // Mean TTFT vs the server's mean prompt time (same requests).
    let server_prompt_mean = (after.one("llamacpp:prompt_seconds_total")
        - before.one("llamacpp:prompt_seconds_total"))
        / probes;
    let ttft_over = mean_ttft - server_prompt_mean;
    eprintln!(
        "probes {probes}: mean TTFT {:.3} ms, server mean prompt {:.3} ms (TTFT - prompt = {:.3} ms); \
         mean TPOT {:.3} ms; mean E2E {:.1} ms; output tokens {out_tokens} = server {server_tokens}",
        mean_ttft * 1e3,
        server_prompt_mean * 1e3,
        ttft_over * 1e3,
        mean_tpot * 1e3,
        mean_e2e * 1e3
    );
    // No token can reach the client before llama.cpp has evaluated the prompt. The mean has no
    // upper bound of its own (it once measured the machine's load: 10.2 ms while other builds
    // used both cores): it is bounded through each probe's TTFT - prompt_ms (below, against the
    // timings of that very request) and the exact cross-checks of the histogram sums with the
    // per-probe values and of llama.cpp's counters with its per-request timings.
    assert!(
        ttft_over >= 0.0,
        "mean TTFT {:.3} ms is below llama.cpp's mean prompt time {:.3} ms",
        mean_ttft * 1e3,
        server_prompt_mean * 1e3
    );

    // ---- per probe, from the debug log lines (llama.cpp `timings`)
    assert!(
        logs.len() as f64 >= probes,
        "expected a debug JSON log line per probe ({probes}), found {}\n{}",
        logs.len(),
        ctx()
    );
    let logs = &logs[..probes as usize];
    let mut ttft_gaps = Vec::new();
    let mut tpot_gaps = Vec::new();
    let mut span_gaps = Vec::new();
    let mut min_prompt_ms = f64::INFINITY;
    let mut steps_ms = Vec::new();
    let (mut sum_prompt_ms, mut sum_pred_ms, mut sum_ttft, mut sum_span, mut sum_n) =
        (0.0, 0.0, 0.0, 0.0, 0.0);
    let (mut sum_gaps, mut gaps_known) = (0.0, true);
    for (i, l) in logs.iter().enumerate() {
        let get = |k: &str| {
            f64_field(l, k)
                .unwrap_or_else(|| panic!("probe log line {i} lacks numeric `{k}`: {l:?}"))
        };
        assert_eq!(str_field(l, "outcome"), Some("success"), "probe {i}: {l:?}");
        let n = get("output_tokens");
        let ttft_ms = get("ttft_s") * 1e3;
        let tpot_ms = get("tpot_s") * 1e3;
        let prompt_ms = get("server_prompt_ms");
        let pred_ms = get("server_predicted_ms");
        let pred_n = get("server_predicted_n");
        let per_tok_ms = get("server_predicted_per_token_ms");
        assert_eq!(
            n, pred_n,
            "probe {i}: output_tokens vs llama.cpp predicted_n: {l:?}"
        );
        assert!(n >= 2.0, "probe {i}: N = {n}");
        // llama.cpp's own convention, which this comparison relies on.
        assert!(
            (per_tok_ms - pred_ms / (pred_n - 1.0)).abs() < 1e-3,
            "llama.cpp predicted_per_token_ms {per_tok_ms} != predicted_ms {pred_ms} / (n {pred_n} - 1)"
        );
        let gap = ttft_ms - prompt_ms;
        assert!(
            (0.0..=MAX_ONE_TTFT_OVER_PROMPT_MS).contains(&gap),
            "probe {i}: TTFT {ttft_ms:.3} ms vs llama.cpp prompt_ms {prompt_ms:.3}: {l:?}"
        );
        let span = tpot_ms * (n - 1.0);
        // When every generated token came as its own event the last one was
        // sent, and the spans must agree; otherwise the client's may lack
        // the server's last step (a token sent as no text).
        let events = f64_field(l, "token_events");
        let missing_step = if events == Some(n) { 0.0 } else { per_tok_ms };
        span_gaps.push(if span > pred_ms {
            span - pred_ms
        } else {
            (pred_ms - missing_step - span).max(0.0)
        });
        assert!(
            span <= pred_ms + MAX_ONE_DELIVERY_JITTER_MS
                && span >= pred_ms - missing_step - MAX_ONE_DELIVERY_JITTER_MS,
            "probe {i}: t_last - t_first = {span:.3} ms vs llama.cpp predicted_ms {pred_ms:.3} \
             (token events {events:?} of N = {n}; one step {per_tok_ms:.3} ms): {l:?}"
        );
        if let Some(ev) = events {
            assert!(
                (1.0..=n).contains(&ev),
                "probe {i}: token_events {ev} vs N {n}"
            );
            sum_gaps += ev - 1.0;
        } else {
            gaps_known = false;
        }
        ttft_gaps.push(gap);
        tpot_gaps.push((tpot_ms - per_tok_ms).abs());
        steps_ms.push(per_tok_ms);
        sum_prompt_ms += prompt_ms;
        min_prompt_ms = min_prompt_ms.min(prompt_ms);
        sum_pred_ms += pred_ms;
        sum_ttft += ttft_ms / 1e3;
        sum_span += span / 1e3;
        sum_n += n;
    }
    // The medians over the probes are held below one decode step of the same requests
    // (llama.cpp's `predicted_per_token_ms`, which stretches with the load too), which a client
    // that missed the first event, or a step, adds at least; no fixed figure holds on a busy
    // machine. What they leave: TTFT - prompt_ms is HTTP, chat template, tokenizing, the
    // role-only chunk and delivery, none of which llama.cpp times (per probe 1.7-2.6 ms with a
    // Python socket client; with a debug build of tokenprobe 2.5-4 ms on an idle machine,
    // medians 3.5-7.4 ms while other builds loaded both cores); the span's gap is the first and
    // the last token's deliveries, delayed alike on an idle machine (up to ~4 ms seen).
    let med_step = median(steps_ms.clone());
    let med_span_gap = median(span_gaps.clone());
    assert!(
        med_span_gap < med_step,
        "median |t_last - t_first - llama.cpp predicted_ms| = {med_span_gap:.3} ms, not below \
         one decode step (median predicted_per_token_ms {med_step:.3} ms): {span_gaps:.3?}"
    );
    let med_ttft_gap = median(ttft_gaps.clone());
    let med_tpot_gap = median(tpot_gaps.clone());
    eprintln!(
        "per probe: TTFT - prompt_ms {ttft_gaps:.3?} (median {med_ttft_gap:.3} ms); \
         |TPOT - predicted_per_token_ms| {tpot_gaps:.4?} (median {med_tpot_gap:.4} ms)"
    );
    assert!(
        med_ttft_gap < med_step,
        "median TTFT - prompt_ms = {med_ttft_gap:.3} ms, not below one decode step \
         (median predicted_per_token_ms {med_step:.3} ms): {ttft_gaps:.3?}"
    );
    assert!(
        med_tpot_gap <= 0.5,
        "median |TPOT - llama.cpp predicted_per_token_ms| = {med_tpot_gap:.4} ms"
    );
    // The log lines, the exported histograms and llama.cpp's counters describe
    // the same requests.
    assert_eq!(
        sum_n, out_tokens,
        "sum of logged output_tokens vs tokenprobe_output_tokens_total"
    );
    assert!(
        (sum_ttft - ttft_sum).abs() < 1e-6,
        "logged TTFTs {sum_ttft} vs histogram sum {ttft_sum}"
    );
    if gaps_known {
        assert_eq!(
            itl_n, sum_gaps,
            "inter_chunk_latency count vs sum of (token_events - 1) over the probes"
        );
    }
    assert!(
        (sum_span - itl_sum).abs() < 1e-5,
        "sum of TPOT*(N-1) {sum_span} vs inter-chunk gap sum {itl_sum}"
    );
    let server_prompt_ms = (after.one("llamacpp:prompt_seconds_total")
        - before.one("llamacpp:prompt_seconds_total"))
        * 1e3;
    let server_pred_ms = (after.one("llamacpp:tokens_predicted_seconds_total")
        - before.one("llamacpp:tokens_predicted_seconds_total"))
        * 1e3;
    // llama.cpp prints these counters with 6 significant digits, and its
    // prompt_seconds_total runs below the prompt_ms it reports in `timings` (seen with a plain
    // client too: its own accounting), by ~0.15 ms per request on an idle machine and up to
    // 0.6 ms on a loaded one. What this checks is that the logged requests are the server's: a
    // request missing or counted twice moves the sum by a whole prompt_ms, so the bound is half
    // the smallest one (and never below the idle machine's 0.5 ms per request).
    let prompt_bound = (0.1 + 0.5 * probes).max(min_prompt_ms / 2.0);
    assert!(
        (sum_prompt_ms - server_prompt_ms).abs() < prompt_bound,
        "logged server_prompt_ms sum {sum_prompt_ms} vs llamacpp:prompt_seconds_total delta {server_prompt_ms} ms"
    );
    assert!(
        (sum_pred_ms - server_pred_ms).abs() < 0.1,
        "logged server_predicted_ms sum {sum_pred_ms} vs llamacpp:tokens_predicted_seconds_total delta {server_pred_ms} ms"
    );
}

#[test]
fn probe_command_against_llama_cpp() {
    let _serial = serial();
    if !require_deps("probe_command_against_llama_cpp", &[]) {
        return;
    }
    let _wd = Watchdog::new("probe_command_against_llama_cpp", Duration::from_secs(240));
    let dir = tempfile::tempdir().unwrap();
    let llama = LlamaServer::start(dir.path());
    let _ = llama.chat(STORY_PROMPT, 1); // warm-up
    let before = llama.metrics();

    let mut cmd = Command::new(tokenprobe_bin());
    cmd.args([
        "probe",
        "--base-url",
        &llama.base_url(),
        "--model",
        "smollm2",
    ])
    .args([
        "--prompt",
        STORY_PROMPT,
        "--max-tokens",
        "16",
        "--format",
        "json",
    ]);
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(120));
    assert_eq!(
        st.code(),
        Some(0),
        "probe failed\nstdout:\n{out}\nstderr:\n{err}"
    );
    let v: serde_json::Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("probe --format json printed no JSON document ({e}):\n{out}"));
    eprintln!("probe --format json: {v}");
    let field = |k: &str| find_key(&v, k).unwrap_or_else(|| panic!("no `{k}` in {v}"));
    assert_eq!(field("outcome").as_str(), Some("success"), "{v}");
    let n = field("output_tokens")
        .as_f64()
        .expect("output_tokens number");
    assert!(n > 0.0 && n <= 16.0, "output_tokens {n}");
    assert_eq!(field("token_source").as_str(), Some("usage"), "{v}");
    let ttft = field("ttft_s").as_f64().expect("ttft_s number");
    assert!(ttft > 0.0 && ttft < 5.0, "ttft_s {ttft}");
    let after = llama.metrics();
    assert_eq!(
        n,
        after.one("llamacpp:tokens_predicted_total")
            - before.one("llamacpp:tokens_predicted_total"),
        "output_tokens vs llama.cpp tokens_predicted_total"
    );

    // The text format works too.
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.args([
        "probe",
        "--base-url",
        &llama.base_url(),
        "--model",
        "smollm2",
    ])
    .args(["--max-tokens", "4", "--format", "text"]);
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(120));
    assert_eq!(
        st.code(),
        Some(0),
        "probe --format text failed\nstdout:\n{out}\nstderr:\n{err}"
    );
    assert!(
        !out.trim().is_empty(),
        "probe --format text printed nothing"
    );

    // Nothing listens there: exit 1, error_type connect.
    let dead = format!("http://127.0.0.1:{}/v1", free_port());
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.args([
        "probe",
        "--base-url",
        &dead,
        "--model",
        "smollm2",
        "--format",
        "json",
    ]);
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(60));
    assert_eq!(
        st.code(),
        Some(1),
        "probe of a closed port\nstdout:\n{out}\nstderr:\n{err}"
    );
    let v: serde_json::Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("failed probe printed no JSON document ({e}):\n{out}\n{err}"));
    assert_ne!(
        find_key(&v, "outcome").and_then(|x| x.as_str()),
        Some("success"),
        "{v}"
    );
    assert_eq!(
        find_key(&v, "error_type").and_then(|x| x.as_str()),
        Some("connect"),
        "{v}"
    );

    // Usage error: exit 2.
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.args(["probe", "--model", "smollm2", "--format", "bogus"]);
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(30));
    assert_eq!(
        st.code(),
        Some(2),
        "usage error\nstdout:\n{out}\nstderr:\n{err}"
    );
}

/// `scripts/llama/llama-server.py --model PATH --alias NAME` serves any GGUF file under that name
/// (here the SmolLM2 file from another path); a path that is not a GGUF file is refused.
#[test]
fn llama_server_script_serves_a_given_gguf() {
    let _serial = serial();
    if !require_deps("llama_server_script_serves_a_given_gguf", &[]) {
        return;
    }
    let _wd = Watchdog::new(
        "llama_server_script_serves_a_given_gguf",
        Duration::from_secs(120),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let script = repo_root().join("scripts/llama/llama-server.py");
    let printed = Command::new(venv_python())
        .arg(&script)
        .arg("--print-model")
        .output()
        .expect("--print-model");
    let default = String::from_utf8_lossy(&printed.stdout).trim().to_owned();
    let copy = dir.path().join("other-model.gguf");
    std::os::unix::fs::symlink(&default, &copy).expect("symlink");
    let llama = LlamaServer::start_with(
        dir.path(),
        &["--model", copy.to_str().expect("path"), "--alias", "other"],
    );
    let r = http_get(&format!("{}/v1/models", llama.url), &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body.contains("\"other\""),
        "served as its alias: {}",
        r.body
    );
    let bad = Command::new(venv_python())
        .arg(&script)
        .args(["--model", "/etc/hostname"])
        .output()
        .expect("run");
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("not a GGUF file"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// llama.cpp's own count of each finished task, from its log: the prompt tokens it evaluated
/// (`prompt eval time = … / N tokens`: the input its cache did not serve) and the tokens it
/// generated (`eval time = … / M tokens`), in order.
fn llama_tasks(log: &str) -> Vec<(u64, u64)> {
    // `… eval time =     330.65 ms /    37 tokens (    8.94 ms per token, …)`: the count after
    // the last `/`.
    let tokens = |l: &str| -> Option<u64> {
        l.rsplit_once('/')?
            .1
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let prompt: Vec<u64> = log
        .lines()
        .filter(|l| l.contains("prompt eval time ="))
        .filter_map(tokens)
        .collect();
    let eval: Vec<u64> = log
        .lines()
        .filter(|l| l.contains(" eval time =") && !l.contains("prompt eval time"))
        .filter_map(tokens)
        .collect();
    prompt.into_iter().zip(eval).collect()
}

/// Issue 42: an agent session (`session:` prompt) on the real llama.cpp server, each turn checked
/// against llama.cpp's own accounting. SmolLM2's chat template renders no tools (llama.cpp's
/// `/props` says `supports_tools: false`, and a template that does render them gets no call out
/// of a 135M model: llama.cpp applies no grammar for `tool_choice: required` there), so every
/// turn is answered with text, which the session keeps and answers with its result as a user
/// message. What is asserted is what holds whatever the model says: the session completes its
/// turns (two calls asked, the final answer); each turn's input, as llama.cpp's usage counted it,
/// is the tokens its log says it evaluated plus those its prompt cache served; each turn's output
/// is what it generated; each later turn's input grows by at least the answer and the result
/// appended, and its cache serves at least most of the turn before it.
#[test]
fn a_session_runs_on_llama_cpp_as_its_own_accounting_says() {
    let _serial = serial();
    if !require_deps("a_session_runs_on_llama_cpp", &[]) {
        return;
    }
    let _wd = Watchdog::new("a_session_runs_on_llama_cpp", Duration::from_secs(300));
    let dir = tempfile::tempdir().unwrap();
    let llama = LlamaServer::start(dir.path());
    let config = dir.path().join("session.yml");
    std::fs::write(
        &config,
        format!(
            "prompts:\n  - name: agent\n    session:\n      system_tokens: 120\n      tools: {{count: 2, tokens: 20}}\n      user_tokens: 40\n      turns: 2\n      call_tokens: 8\n      result_tokens: 60\n      answer_tokens: 8\n      context_budget: 1500\n      seed: 11\n\
             targets:\n  - name: llama\n    base_url: {}\n    api: openai-chat\n    models: [smollm2]\n    prompts: [agent]\n",
            llama.base_url()
        ),
    )
    .unwrap();
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.args(["probe", "--config.file"])
        .arg(&config)
        .args(["--format", "json"]);
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(240));
    assert_eq!(st.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("probe JSON");
    eprintln!("session on llama.cpp: {v}");
    assert_eq!(v["end"], "completed", "{v:#}");
    let turns = v["turns"].as_array().expect("turns").clone();
    assert_eq!(
        turns.len(),
        3,
        "two tool-call turns and the final answer: {v:#}"
    );
    let n = |t: &serde_json::Value, k: &str| {
        t[k].as_u64()
            .unwrap_or_else(|| panic!("no {k} in turn {t}"))
    };
    // The session's three requests are llama.cpp's last three tasks (the calibration's came
    // before them).
    let tasks = llama_tasks(&llama.guard.stderr());
    assert!(tasks.len() >= 3, "{tasks:?}\n{}", llama.guard.logs());
    let tasks = &tasks[tasks.len() - 3..];
    for (t, (evaluated, generated)) in turns.iter().zip(tasks) {
        let (input, cached) = (n(t, "input_tokens"), n(t, "cached_input_tokens"));
        assert_eq!(input - cached, *evaluated, "turn {}: {t}", t["turn"]);
        assert_eq!(n(t, "output_tokens"), *generated, "turn {}: {t}", t["turn"]);
    }
    for k in 1..3 {
        let (prev, t) = (&turns[k - 1], &turns[k]);
        // The answer, then the result of at least 60 tokens as the calibration counts them.
        let grown = n(t, "input_tokens") - n(prev, "input_tokens");
        assert!(
            grown >= n(prev, "output_tokens") + 40,
            "turn {}: grew by {grown}: {prev}\n{t}",
            k + 1
        );
        assert!(
            n(t, "cached_input_tokens") * 10 >= n(prev, "input_tokens") * 8,
            "turn {}: the cache served {} of the last turn's {}",
            k + 1,
            n(t, "cached_input_tokens"),
            n(prev, "input_tokens")
        );
    }
    assert!(n(&turns[0], "cached_input_tokens") < n(&turns[0], "input_tokens"));
}
